//! Several replicas of a service run the same periodic job; a lock per run
//! makes each run happen exactly once.
//!
//! `cargo run --example scheduled_job`
//!
//! Each replica, at each tick, tries the lock of that tick's run without
//! waiting. The one that gets it checks that the run was not done already
//! (a replica that was slow to tick must not repeat it), does the work and
//! marks the run done, all under the lock.

mod support;

use std::time::Duration;

use redis::AsyncCommands;

const REPLICAS: usize = 4;
const RUNS: u64 = 10;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (url, _server) = support::redis_url();
    let prefix = format!("scheduled_job:{}", uuid::Uuid::new_v4().simple());

    let mut replicas = Vec::new();
    for replica in 0..REPLICAS {
        // One client per replica, as separate processes would have.
        let client = ferrisson::Client::connect(url.as_str()).await?;
        let mut redis = redis::Client::open(url.as_str())?
            .get_multiplexed_async_connection()
            .await?;
        let prefix = prefix.clone();
        replicas.push(tokio::spawn(async move {
            let mut ran = 0u64;
            let mut ticks = tokio::time::interval(Duration::from_millis(50));
            for run in 0..RUNS {
                ticks.tick().await;
                // Replicas' clocks and schedulers never fire at the same
                // instant: a few milliseconds of jitter.
                let jitter = uuid::Uuid::new_v4().as_bytes()[0] % 20;
                tokio::time::sleep(Duration::from_millis(jitter.into())).await;
                let lock = client.lock(format!("{prefix}:lock:{run}"));
                let Some(guard) = lock.try_lock().await? else {
                    continue; // another replica is running it
                };
                let done_key = format!("{prefix}:done:{run}");
                if !redis.exists::<_, bool>(&done_key).await? {
                    // The job itself: here, count the run.
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    redis
                        .incr::<_, _, ()>(format!("{prefix}:executions"), 1)
                        .await?;
                    let _: () = redis.set_ex(&done_key, replica, 3600).await?;
                    ran += 1;
                }
                guard.unlock().await?;
            }
            Ok::<_, Box<dyn std::error::Error + Send + Sync>>(ran)
        }));
    }
    let mut total = 0;
    for (replica, task) in replicas.into_iter().enumerate() {
        let ran = task.await?.map_err(|e| e.to_string())?;
        println!("replica {replica} ran {ran} run(s)");
        total += ran;
    }
    let mut redis = redis::Client::open(url.as_str())?
        .get_multiplexed_async_connection()
        .await?;
    let executions: u64 = redis.get(format!("{prefix}:executions")).await?;
    println!("{RUNS} scheduled runs, {executions} executions over {REPLICAS} replicas");
    if executions != RUNS || total != RUNS {
        return Err(format!("expected each run exactly once, got {executions}").into());
    }
    Ok(())
}
