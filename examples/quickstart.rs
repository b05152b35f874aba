//! Take a lock, re-enter it, release it.
//!
//! `cargo run --example quickstart` (uses `REDIS_URL`, or starts a
//! throwaway `redis-server`).

mod support;

#[tokio::main]
async fn main() -> ferrisson::Result<()> {
    let (url, _server) = support::redis_url();
    let client = ferrisson::Client::connect(url.as_str()).await?;
    println!("client id: {}", client.id());

    let lock = client.lock("quickstart:orders:42");
    let guard = lock.lock().await?;
    println!(
        "locked `{}`: hold count {}, expires in {:?} unless renewed",
        lock.name(),
        lock.hold_count().await?,
        lock.remaining_ttl().await?.unwrap_or_default(),
    );

    // The same task re-enters at once; each acquire has its own guard.
    let nested = lock.lock().await?;
    println!("re-entered: hold count {}", lock.hold_count().await?);

    // Another task is another owner: it does not get the lock.
    let other = lock.clone();
    let got = tokio::spawn(async move { other.try_lock().await })
        .await
        .expect("task")?;
    println!(
        "another task's try_lock: {}",
        if got.is_some() { "got it" } else { "busy" }
    );

    nested.unlock().await?;
    println!(
        "released the nested hold: hold count {}",
        lock.hold_count().await?
    );
    guard.unlock().await?;
    println!(
        "released the last hold: locked = {}",
        lock.is_locked().await?
    );
    Ok(())
}
