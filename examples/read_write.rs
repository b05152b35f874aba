//! A read-write lock: readers share, a writer is alone.
//!
//! `cargo run --example read_write`
//!
//! Four reader tasks and one writer share a "price list" guarded by a
//! read-write lock (each through its own client, as separate services
//! would). The readers overlap with each other and never with the writer.
//! Then one owner shows the two rules of ownership: a writer may take read
//! holds (a downgrade), and a reader asking to write is refused at once
//! rather than waiting for itself.

mod support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

#[derive(Debug, Default)]
struct Seen {
    readers: AtomicUsize,
    most_readers: AtomicUsize,
    writer_saw_readers: AtomicUsize,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (url, _server) = support::redis_url();
    let name = "read-write-example:prices";
    let seen = Arc::new(Seen::default());

    let mut tasks = Vec::new();
    for reader in 0..4 {
        let client = ferrisson::Client::connect(url.as_str()).await?;
        let seen = Arc::clone(&seen);
        tasks.push(tokio::spawn(async move {
            let lock = client.read_write_lock(name).read();
            for _ in 0..3 {
                let guard = lock.lock().await?;
                let now = seen.readers.fetch_add(1, Ordering::SeqCst) + 1;
                seen.most_readers.fetch_max(now, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(60)).await;
                seen.readers.fetch_sub(1, Ordering::SeqCst);
                guard.unlock().await?;
                tokio::time::sleep(Duration::from_millis(10 * reader)).await;
            }
            Ok::<_, ferrisson::Error>(())
        }));
    }
    let writer = ferrisson::Client::connect(url.as_str()).await?;
    let write = writer.read_write_lock(name).write();
    for round in 1..=3 {
        tokio::time::sleep(Duration::from_millis(40)).await;
        let guard = write.lock().await?;
        let inside = seen.readers.load(Ordering::SeqCst);
        seen.writer_saw_readers.fetch_add(inside, Ordering::SeqCst);
        println!("writer: price list updated (round {round}), readers inside: {inside}");
        tokio::time::sleep(Duration::from_millis(30)).await;
        guard.unlock().await?;
    }
    for task in tasks {
        task.await??;
    }
    println!(
        "most readers inside at once: {}; readers inside while writing: {}",
        seen.most_readers.load(Ordering::SeqCst),
        seen.writer_saw_readers.load(Ordering::SeqCst)
    );
    if seen.writer_saw_readers.load(Ordering::SeqCst) != 0 {
        return Err("a writer overlapped a reader".into());
    }

    // One owner (this task): downgrade allowed, upgrade refused.
    let rw = writer.read_write_lock(name);
    let writing = rw.write().lock().await?;
    let reading = rw.read().lock().await?;
    writing.unlock().await?;
    println!("downgrade: wrote, took a read hold, let the write go; still reading");
    match rw.write().lock().await {
        Err(err @ ferrisson::Error::UpgradeRefused { .. }) => println!("upgrade: {err}"),
        Err(err) => return Err(err.into()),
        Ok(_) => return Err("an upgrade was granted".into()),
    }
    reading.unlock().await?;
    Ok(())
}
