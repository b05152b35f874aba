//! A cron schedule on several replicas, driven by `tokio-cron-scheduler`:
//! each replica's scheduler fires every occurrence, and [`ferrisson::Job`]
//! lets exactly one of them run it.
//!
//! `cargo run --example cron`
//!
//! Three replicas in one program (each with its own client and scheduler,
//! as separate processes would have) fire `*/2 * * * * *`, every two
//! seconds, each a little late by its own skew. The job names each
//! occurrence by the wall clock (`every` two seconds: the scheduled
//! instant nearest to the run's start), and the run that completes it
//! records it: a replica that fires late finds the occurrence done
//! ([`JobRun::AlreadyDone`]) however short the run was, as long as it
//! fires less than a second (half the period) late by its own clock. No
//! "at least for" is needed; "at most for" bounds how long a crashed
//! replica blocks the job.

mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use ferrisson::JobRun;
use tokio_cron_scheduler::{Job as CronJob, JobScheduler};

const REPLICAS: u64 = 3;
const SCHEDULE: &str = "*/2 * * * * *";
/// The schedule's period, which names its occurrences.
const PERIOD: Duration = Duration::from_secs(2);

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (url, _server) = support::redis_url();
    let name = format!("cron:report:{}", uuid::Uuid::new_v4().simple());
    // Which replica ran each occurrence (its instant, ms since the epoch).
    let runs: Arc<Mutex<Vec<(u64, u64)>>> = Arc::default();

    let mut schedulers = Vec::new();
    for replica in 0..REPLICAS {
        let client = ferrisson::Client::connect(url.as_str()).await?;
        let job = client
            .job(name.as_str())
            .every(PERIOD)
            .at_most_for(Duration::from_secs(60))
            .label(format!("replica-{replica}"));
        let runs = Arc::clone(&runs);
        let scheduler = JobScheduler::new().await?;
        scheduler
            .add(CronJob::new_async(SCHEDULE, move |_, _| {
                let (job, runs) = (job.clone(), Arc::clone(&runs));
                Box::pin(async move {
                    // Replicas never fire at the same instant.
                    tokio::time::sleep(Duration::from_millis(replica * 150)).await;
                    let ran = job
                        .run(|_lease| async {
                            // The work itself: shorter than any skew.
                            tokio::time::sleep(Duration::from_millis(20)).await;
                            job.current_occurrence().ok().flatten()
                        })
                        .await;
                    match ran {
                        Ok(JobRun::Ran(Some(occurrence))) => {
                            println!("replica {replica} ran the occurrence {occurrence}");
                            runs.lock().unwrap().push((occurrence, replica));
                        }
                        Ok(JobRun::Ran(None)) => unreachable!("the job names its occurrences"),
                        Ok(JobRun::Skipped { holder }) => {
                            let by = holder.and_then(|h| h.label).unwrap_or_default();
                            println!("replica {replica} skipped it (held by {by})");
                        }
                        Ok(JobRun::AlreadyDone { occurrence, .. }) => {
                            println!("replica {replica} found {occurrence} done already");
                        }
                        Ok(JobRun::Overran(_)) => eprintln!("replica {replica} overran"),
                        Ok(JobRun::Unreleased { error, .. }) => {
                            eprintln!("replica {replica} ran it, but its release failed: {error}")
                        }
                        Err(err) => eprintln!("replica {replica}: {err}"),
                    }
                })
            })?)
            .await?;
        scheduler.start().await?;
        schedulers.push(scheduler);
    }

    // Four occurrences or so, then stop every scheduler.
    tokio::time::sleep(Duration::from_secs(8)).await;
    for mut scheduler in schedulers {
        scheduler.shutdown().await?;
    }
    // A run that had started goes on to its end.
    tokio::time::sleep(Duration::from_secs(1)).await;

    let runs = runs.lock().unwrap().clone();
    let mut periods: Vec<u64> = runs.iter().map(|(period, _)| *period).collect();
    periods.sort_unstable();
    let total = periods.len();
    periods.dedup();
    println!(
        "{total} runs of {} occurrences over {REPLICAS} replicas",
        periods.len()
    );
    if total != periods.len() || total < 2 {
        return Err(format!("expected each occurrence run exactly once: {runs:?}").into());
    }
    Ok(())
}
