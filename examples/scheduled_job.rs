//! Several replicas of a service run the same periodic job; a
//! [`ferrisson::Job`] makes each occurrence run exactly once.
//!
//! `cargo run --example scheduled_job`
//!
//! Each replica ticks on the wall clock's grid (every whole 400 ms, as
//! cron fires on whole minutes), a few tens of ms late by its own jitter,
//! and runs the job without waiting. The job names each occurrence by the
//! wall clock ([`ferrisson::Job::every`]): the first replica to tick runs
//! it, and the run's release records it done; a replica that ticks while
//! it runs is told it is taken ([`JobRun::Skipped`]), one that ticks after
//! finds it done ([`JobRun::AlreadyDone`]), however short the run. A
//! replica must tick within half a period (200 ms) of the grid by its own
//! clock. For a cron schedule, see the `cron` example.

mod support;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

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

    // The first tick: a whole period on the wall clock, a moment from now.
    let period = PERIOD.as_millis() as u64;
    let first = (unix_ms() + 1000) / period * period + period;
    let mut replicas = Vec::new();
    for replica in 0..REPLICAS {
        // One client per replica, as separate processes would have.
        let client = ferrisson::Client::connect(url.as_str()).await?;
        let mut redis = redis::Client::open(url.as_str())?
            .get_multiplexed_async_connection()
            .await?;
        let job = client
            .job(name.as_str())
            .every(PERIOD)
            .label(format!("replica-{replica}"));
        let executions = executions.clone();
        replicas.push(tokio::spawn(async move {
            let mut ran = 0u64;
            for tick in 0..RUNS {
                // The next whole period by the wall clock after `first`.
                let at = first + tick * PERIOD.as_millis() as u64;
                tokio::time::sleep(Duration::from_millis(at.saturating_sub(unix_ms()))).await;
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

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}
