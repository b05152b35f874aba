//! A job that outlives its lease: the watchdog keeps the lock alive.
//!
//! `cargo run --example watchdog`
//!
//! The client's watchdog timeout is 2 s, so the lock's TTL is 2 s and it is
//! renewed every ~0.7 s; the job takes 5 s. Another client cannot take the
//! lock meanwhile, and the job watches `lease_lost()` so that it would stop
//! if the lock were ever lost.

mod support;

use std::time::Duration;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (url, _server) = support::redis_url();
    let holder = ferrisson::Client::builder(url.as_str())
        .watchdog_timeout(Duration::from_secs(2))
        .build()
        .await?;
    let rival = ferrisson::Client::connect(url.as_str()).await?;
    let name = format!("watchdog:{}", uuid::Uuid::new_v4().simple());

    let lock = holder.lock(name.as_str());
    let guard = lock.lock().await?;
    println!(
        "locked `{name}` with a {:?} lease",
        holder.config().watchdog_timeout
    );

    let job = async {
        for second in 1..=5 {
            tokio::time::sleep(Duration::from_secs(1)).await;
            let ttl = lock.remaining_ttl().await?.unwrap_or_default();
            let rival_got_it = rival.lock(name.as_str()).try_lock().await?.is_some();
            println!("{second} s into the job: TTL {ttl:?}, rival got the lock: {rival_got_it}");
            if rival_got_it {
                return Err("the lock was not kept".into());
            }
        }
        Ok::<_, Box<dyn std::error::Error>>(())
    };
    tokio::select! {
        result = job => result?,
        _ = guard.lease_lost() => return Err("lease lost: stop the job".into()),
    }

    guard.unlock().await?;
    println!(
        "released after 5 s; watchdogs still running: {}",
        holder.held_locks()
    );
    Ok(())
}
