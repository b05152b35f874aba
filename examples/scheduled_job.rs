//! Several replicas of a service run the same periodic job; a
//! [`ferrisson::Job`] makes each occurrence run exactly once.
//!
//! `cargo run --example scheduled_job`
//!
//! Each replica, at each tick, runs the job without waiting: one of them
//! gets it, the others are told it is taken ([`JobRun::Skipped`]). "At
//! least for" keeps the job's lock a while after a short run, so that a
//! replica whose tick comes a little late skips the occurrence instead
//! of running it again. For a cron schedule, see the `cron` example.

mod support;

use std::time::Duration;

use ferrisson::JobRun;
use redis::AsyncCommands;

const REPLICAS: usize = 4;
const RUNS: u64 = 8;
const PERIOD: Duration = Duration::from_millis(400);

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (url, _server) = support::redis_url();
    let name = format!("scheduled_job:{}", uuid::Uuid::new_v4().simple());
    let executions = format!("{name}:executions");

    let mut replicas = Vec::new();
    for replica in 0..REPLICAS {
        // One client per replica, as separate processes would have.
        let client = ferrisson::Client::connect(url.as_str()).await?;
        let mut redis = redis::Client::open(url.as_str())?
            .get_multiplexed_async_connection()
            .await?;
        let job = client
            .job(name.as_str())
            .at_least_for(PERIOD / 2)
            .label(format!("replica-{replica}"));
        let executions = executions.clone();
        replicas.push(tokio::spawn(async move {
            let mut ran = 0u64;
            let mut ticks = tokio::time::interval(PERIOD);
            for _ in 0..RUNS {
                ticks.tick().await;
                // Replicas' clocks and schedulers never fire at the same
                // instant: a few tens of milliseconds of jitter.
                let jitter = uuid::Uuid::new_v4().as_bytes()[0] % 50;
                tokio::time::sleep(Duration::from_millis(jitter.into())).await;
                let run = job.run(|_lease| async {
                    // The job itself: here, count the execution.
                    redis.incr::<_, _, ()>(&executions, 1).await
                });
                if let JobRun::Ran(counted) = run.await? {
                    counted?;
                    ran += 1;
                }
            }
            Ok::<_, Box<dyn std::error::Error + Send + Sync>>(ran)
        }));
    }
    let mut total = 0;
    for (replica, task) in replicas.into_iter().enumerate() {
        let ran = task.await?.map_err(|e| e.to_string())?;
        println!("replica {replica} ran {ran} occurrence(s)");
        total += ran;
    }
    let mut redis = redis::Client::open(url.as_str())?
        .get_multiplexed_async_connection()
        .await?;
    let executions: u64 = redis.get(&executions).await?;
    println!("{RUNS} occurrences, {executions} executions over {REPLICAS} replicas");
    if executions != RUNS || total != RUNS {
        return Err(format!("expected each occurrence exactly once, got {executions}").into());
    }
    Ok(())
}
