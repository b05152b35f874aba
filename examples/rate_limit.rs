//! Several replicas call a partner API that allows at most 3 calls in
//! flight across all of them: a semaphore of 3 permits caps the
//! concurrency fleet-wide.
//!
//! `cargo run --example rate_limit`
//!
//! Each call takes a permit first and gives it back after, so a fourth
//! caller waits for a release (woken by its message, not by polling). The
//! example counts the calls in flight at the partner and fails if it ever
//! sees more than 3.

mod support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const REPLICAS: usize = 3;
const WORKERS_PER_REPLICA: usize = 4;
const CALLS_PER_WORKER: usize = 5;
const LIMIT: u32 = 3;

/// The partner: counts the calls in flight, and the most it ever saw.
#[derive(Default)]
struct Partner {
    in_flight: AtomicUsize,
    peak: AtomicUsize,
}

impl Partner {
    async fn call(&self) {
        let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        self.peak.fetch_max(now, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(15)).await;
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (url, _server) = support::redis_url();
    let name = format!("rate_limit:{}:partner", uuid::Uuid::new_v4().simple());
    let partner = Arc::new(Partner::default());

    let started = Instant::now();
    let mut workers = Vec::new();
    for _ in 0..REPLICAS {
        // One client per replica, as separate processes would have.
        let client = ferrisson::Client::connect(url.as_str()).await?;
        let slots = client.semaphore(name.as_str());
        // Every replica says how many permits there are; the first one
        // sets them, the others find them set.
        let set = slots.try_set_permits(LIMIT).await?;
        println!("replica sets the permits: {set}");
        for _ in 0..WORKERS_PER_REPLICA {
            let (slots, partner) = (slots.clone(), Arc::clone(&partner));
            workers.push(tokio::spawn(async move {
                for _ in 0..CALLS_PER_WORKER {
                    slots.acquire().await?;
                    partner.call().await;
                    slots.release().await?;
                }
                Ok::<_, ferrisson::Error>(())
            }));
        }
    }
    for worker in workers {
        worker.await??;
    }
    let calls = REPLICAS * WORKERS_PER_REPLICA * CALLS_PER_WORKER;
    let peak = partner.peak.load(Ordering::SeqCst);
    println!(
        "{calls} calls from {} workers in {:?}; at most {peak} in flight (limit {LIMIT})",
        REPLICAS * WORKERS_PER_REPLICA,
        started.elapsed()
    );
    let client = ferrisson::Client::connect(url.as_str()).await?;
    let left = client.semaphore(name.as_str()).available_permits().await?;
    println!("permits available at the end: {left}");
    if peak > LIMIT as usize || left != i64::from(LIMIT) {
        return Err(format!("limit broken: peak {peak}, permits left {left}").into());
    }
    Ok(())
}
