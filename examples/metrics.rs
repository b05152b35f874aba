//! Lock figures on a Prometheus endpoint: acquires, waits, holds, renewals.
//!
//! `cargo run --example metrics --features metrics` (uses `REDIS_URL`, or
//! starts a throwaway `redis-server`). It serves the figures on a free
//! local port, makes some contention, then reads its own `/metrics` page
//! and prints ferrisson's lines. Without the feature it says so and ends.

#[cfg(feature = "metrics")]
mod support;

#[cfg(not(feature = "metrics"))]
fn main() {
    println!(
        "this example needs the `metrics` feature: cargo run --example metrics --features metrics"
    );
}

#[cfg(feature = "metrics")]
#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    use std::time::Duration;

    let (url, _server) = support::redis_url();
    // A free port for the endpoint: ask the OS for one, then let it go.
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    metrics_exporter_prometheus::PrometheusBuilder::new()
        .with_http_listener(([127, 0, 0, 1], port))
        .install()?;
    println!("serving metrics on http://127.0.0.1:{port}/metrics");

    let client = ferrisson::Client::builder(url.as_str())
        .watchdog_timeout(Duration::from_millis(600))
        .build()
        .await?;

    // Four workers take turns on one lock, holding it 50 ms each time.
    let mut workers = Vec::new();
    for worker in 0..4 {
        let lock = client.lock("metrics:report");
        workers.push(tokio::spawn(async move {
            for _ in 0..3 {
                let guard = lock.lock().await?;
                tokio::time::sleep(Duration::from_millis(50)).await;
                guard.unlock().await?;
            }
            println!("worker {worker} done");
            Ok::<(), ferrisson::Error>(())
        }));
    }
    for worker in workers {
        worker.await??;
    }
    // One that gives up, and a hold long enough to be renewed.
    let busy = client.lock("metrics:report").lock().await?;
    let impatient = client.lock("metrics:report");
    let gave_up =
        tokio::spawn(async move { impatient.try_lock_for(Duration::from_millis(100)).await })
            .await??;
    assert!(gave_up.is_none());
    tokio::time::sleep(Duration::from_millis(300)).await;
    busy.unlock().await?;

    let page = tokio::task::spawn_blocking(move || scrape(port)).await??;
    for line in page.lines().filter(|l| l.starts_with("ferrisson_")) {
        println!("{line}");
    }
    Ok(())
}

/// GET /metrics from the local endpoint, tried for a few seconds while the
/// exporter's listener starts.
#[cfg(feature = "metrics")]
fn scrape(port: u16) -> std::io::Result<String> {
    use std::io::{Read, Write};
    let mut tries = 0;
    loop {
        match std::net::TcpStream::connect(("127.0.0.1", port)) {
            Ok(mut stream) => {
                stream.write_all(b"GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")?;
                let mut page = String::new();
                stream.read_to_string(&mut page)?;
                return Ok(page);
            }
            Err(err) if tries >= 50 => return Err(err),
            Err(_) => {
                tries += 1;
                std::thread::sleep(std::time::Duration::from_millis(100));
            }
        }
    }
}
