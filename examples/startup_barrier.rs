//! A deployment switches traffic to a new version only when every one of
//! its replicas has warmed up: a count-down latch set to the number of
//! replicas, counted down by each when ready, waited on by the switch.
//!
//! `cargo run --example startup_barrier`
//!
//! The switch sets the count before the replicas start, then waits; each
//! replica counts down once warm. At zero Redis deletes the latch and one
//! message opens every waiter at once, in any process.

mod support;

use std::time::{Duration, Instant};

const REPLICAS: u64 = 4;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (url, _server) = support::redis_url();
    let name = format!("startup_barrier:{}:warm", uuid::Uuid::new_v4().simple());

    let switch = ferrisson::Client::connect(url.as_str()).await?;
    let warm = switch.count_down_latch(name.as_str());
    warm.try_set_count(REPLICAS).await?;
    println!("waiting for {} replicas to warm up", warm.count().await?);

    let started = Instant::now();
    let mut replicas = Vec::new();
    for replica in 0..REPLICAS {
        let client = ferrisson::Client::connect(url.as_str()).await?;
        let warm = client.count_down_latch(name.as_str());
        replicas.push(tokio::spawn(async move {
            // Warming up: loading caches, opening pools...
            tokio::time::sleep(Duration::from_millis(30 * (replica + 1))).await;
            let left = warm.count_down().await?;
            println!("replica {replica} is warm ({left} to go)");
            // Every replica may also wait for the others, e.g. to start
            // consuming together.
            warm.wait().await?;
            Ok::<_, ferrisson::Error>(())
        }));
    }

    // A second observer that only waits, with a bound.
    let observer = ferrisson::Client::connect(url.as_str()).await?;
    let opened = observer
        .count_down_latch(name.as_str())
        .wait_for(Duration::from_secs(10))
        .await?;
    warm.wait().await?;
    println!(
        "all {REPLICAS} replicas warm after {:?}: switching traffic",
        started.elapsed()
    );
    for replica in replicas {
        replica.await??;
    }
    if !opened || warm.count().await? != 0 {
        return Err("the barrier did not open".into());
    }
    Ok(())
}
