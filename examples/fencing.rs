//! Fencing tokens: a holder that paused past its lease is refused.
//!
//! `cargo run --example fencing`
//!
//! Two workers update one record through a fenced lock. Worker A takes the
//! lock with a 300 ms lease, then stalls for a second (a GC pause, a swap
//! storm). Its lease runs out, worker B takes the lock and writes. When A
//! wakes it still believes it holds the lock and writes too: the store,
//! which keeps the highest token it has accepted, refuses A's older token.
//! Without the token, A's late write would silently overwrite B's.

mod support;

use std::sync::Mutex;
use std::time::Duration;

/// The protected resource: accepts a write only with a token at least as
/// high as every token it has accepted before.
#[derive(Debug, Default)]
struct Store {
    state: Mutex<(u64, String)>,
}

impl Store {
    fn write(&self, token: u64, value: &str) -> Result<(), String> {
        let mut state = self.state.lock().expect("not poisoned");
        if token < state.0 {
            return Err(format!(
                "refused `{value}`: token {token} is older than {}",
                state.0
            ));
        }
        *state = (token, value.to_owned());
        Ok(())
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (url, _server) = support::redis_url();
    let client = ferrisson::Client::connect(url.as_str()).await?;
    let store = Store::default();
    let name = "fencing-example:record";

    let a = client
        .fenced_lock(name)
        .lock_with_lease(Duration::from_millis(300))
        .await?;
    let a_token = a.token();
    println!("A holds the lock with token {a_token} and a 300 ms lease, then stalls");
    tokio::time::sleep(Duration::from_secs(1)).await;

    let b = tokio::spawn({
        let client = client.clone();
        async move { client.fenced_lock(name).lock().await }
    })
    .await??;
    let b_token = b.token();
    println!("B holds the lock with token {b_token}");
    store.write(b_token, "written by B")?;
    println!("B wrote");

    println!("A wakes up; lease lost: {}", a.is_lease_lost());
    match store.write(a_token, "written by A") {
        Ok(()) => return Err("the store took a stale write".into()),
        Err(refused) => println!("A's write: {refused}"),
    }
    // A's unlock reports the lost lease and touches nothing.
    if let Err(err) = a.unlock().await {
        println!("A's unlock: {err}");
    }
    b.unlock().await?;
    println!("record: {:?}", store.state.lock().expect("not poisoned").1);
    Ok(())
}
