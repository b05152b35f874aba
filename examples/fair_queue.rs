//! A fair lock: first come, first served, across clients.
//!
//! `cargo run --example fair_queue`
//!
//! Five workers (each with its own client, as separate replicas would)
//! line up for a fair lock while it is held, in a known order. When the
//! holder lets go they get it one after the other in exactly that order,
//! each woken on its own channel. A sixth worker that runs out of patience
//! leaves the line at once instead of holding it up.

mod support;

use std::time::Duration;

/// Waits until `n` waiters stand in the lock's queue (Redisson's list
/// `redisson_lock_queue:{name}`).
async fn in_line(
    admin: &mut redis::aio::MultiplexedConnection,
    n: usize,
) -> redis::RedisResult<()> {
    loop {
        let len: usize = redis::cmd("LLEN")
            .arg("redisson_lock_queue:{fair-queue-example:ledger}")
            .query_async(admin)
            .await?;
        if len >= n {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (url, _server) = support::redis_url();
    let name = "fair-queue-example:ledger";
    let holder = ferrisson::Client::connect(url.as_str()).await?;
    let mut admin = redis::Client::open(url.as_str())?
        .get_multiplexed_async_connection()
        .await?;
    let held = holder.fair_lock(name).lock().await?;
    println!("holder: has the lock; workers line up");

    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let mut workers = Vec::new();
    for worker in 1..=5 {
        let client = ferrisson::Client::connect(url.as_str()).await?;
        let tx = tx.clone();
        workers.push(tokio::spawn(async move {
            let guard = client.fair_lock(name).lock().await?;
            tx.send(worker).ok();
            tokio::time::sleep(Duration::from_millis(20)).await;
            guard.unlock().await
        }));
        // The next one arrives once this one stands in line, so that the
        // line's order is known.
        in_line(&mut admin, worker).await?;
    }
    // A sixth joins the end of the line, runs out of patience, and leaves.
    let impatient = ferrisson::Client::connect(url.as_str()).await?;
    let gave_up = impatient
        .fair_lock(name)
        .try_lock_for(Duration::from_millis(100))
        .await?;
    assert!(gave_up.is_none(), "the lock is held");
    println!("impatient worker: gave up after 100 ms and left the line");
    drop(tx);
    held.unlock().await?;
    println!("holder: let go");
    let mut order = Vec::new();
    while let Some(worker) = rx.recv().await {
        println!("worker {worker}: got the lock");
        order.push(worker);
    }
    for worker in workers {
        worker.await??;
    }
    if order != [1, 2, 3, 4, 5] {
        return Err(format!("served out of order: {order:?}").into());
    }
    println!("served in arrival order: {order:?}");
    Ok(())
}
