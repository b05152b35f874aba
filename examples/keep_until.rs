//! A lock kept a while after short work ("at least for"), and its lease
//! watched from a task of its own.
//!
//! `cargo run --example keep_until`
//!
//! A replica that finishes a periodic task in 50 ms keeps the lock for 2 s
//! after it started, so that a replica whose timer fires a little later
//! finds it held and skips the task instead of running it again. A task
//! beside the work watches the hold through a lease handle (the work owns
//! the guard): it learns when the hold ends.

mod support;

use std::time::Duration;

use tokio::time::Instant;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (url, _server) = support::redis_url();
    let replica_a = ferrisson::Client::connect(url.as_str()).await?;
    let replica_b = ferrisson::Client::connect(url.as_str()).await?;
    let name = format!("report:{}", uuid::Uuid::new_v4().simple());

    // A run is an owner of its own: another run of this process is
    // excluded by the kept hold as another replica's is.
    let run = replica_a.lock(name.as_str()).with_owner("run-1");
    let started = Instant::now();
    let mut guard = run.lock().await?;
    let lease = guard.lease_handle();
    let watcher = tokio::spawn(async move {
        lease.lost().await;
        println!("watcher: the hold ended");
    });
    guard.keep_until(started + Duration::from_secs(2))?;

    tokio::time::sleep(Duration::from_millis(50)).await; // the work
    guard.unlock().await?;
    watcher.await?;
    let ttl = run.remaining_ttl().await?.unwrap_or_default();
    println!("work done after 50 ms; the lock is kept {ttl:?} more");

    let late = replica_b.lock(name.as_str()).try_lock().await?;
    println!("replica B, a little late: got the lock: {}", late.is_some());
    if late.is_some() {
        return Err("the kept lock was taken".into());
    }

    let free = replica_b
        .lock(name.as_str())
        .try_lock_for(Duration::from_secs(5))
        .await?;
    println!(
        "replica B got it {:?} after the start, once the keep ended",
        started.elapsed()
    );
    match free {
        Some(guard) => guard.unlock().await?,
        None => return Err("the lock was not free after its keep".into()),
    }
    Ok(())
}
