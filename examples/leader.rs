//! Leader election: replicas campaign, the leader works with its term, and
//! a leader that stalled past its lease finds its late write refused.
//!
//! `cargo run --example leader`
//!
//! Three replicas of a service, each a thread with a runtime and a client
//! of its own, as three processes would be. They campaign for
//! `leader-example:leader`; the leader writes its progress to a fenced
//! hash with its term. `pod-a` leads first, then stalls (a long GC pause,
//! a frozen VM: its thread blocks, its watchdog stops), so its lease runs
//! out and another replica is elected with a higher term. When `pod-a`
//! wakes it learns at once that it lost, and the write it tries anyway is
//! refused by the hash, which has seen the higher term. An observer prints
//! every change of leader meanwhile.

mod support;

use std::sync::mpsc;
use std::time::Duration;

use ferrisson::{Client, FencedWrite, LeaderChange};

/// Short, so that the example runs in seconds; services keep 30 s.
const WATCHDOG: Duration = Duration::from_secs(2);
const ELECTION: &str = "leader-example:leader";
const STATE: &str = "leader-example:state";

async fn connect(url: &str) -> ferrisson::Result<Client> {
    Client::builder(url)
        .watchdog_timeout(WATCHDOG)
        .build()
        .await
}

/// Runs `work` on a runtime of its own, in a thread of its own: a replica.
fn replica<F, T>(work: impl FnOnce() -> F + Send + 'static) -> std::thread::JoinHandle<T>
where
    F: std::future::Future<Output = T>,
    T: Send + 'static,
{
    std::thread::spawn(move || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime")
            .block_on(work())
    })
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (url, _server) = support::redis_url();
    let watcher = connect(&url).await?;
    let mut observer = watcher.leader_election(ELECTION).observe();
    let observing = tokio::spawn(async move {
        while let Some(change) = observer.next().await {
            match change? {
                LeaderChange::Leader(leader) => {
                    let label = leader.label.as_deref().unwrap_or("(no label)");
                    // A holder that drew no fencing token has no term.
                    let term = leader
                        .term
                        .map_or_else(|| "no term".to_owned(), |t| format!("term {t}"));
                    println!("observer: {label} leads, {term}");
                }
                LeaderChange::NoLeader => println!("observer: nobody leads"),
            }
        }
        Ok::<_, ferrisson::Error>(())
    });

    // pod-a leads first, writes, then stalls until the next leader wrote.
    let (led_tx, led_rx) = mpsc::channel();
    let (written_tx, written_rx) = mpsc::channel::<()>();
    let pod_a = replica({
        let url = url.clone();
        move || async move {
            let client = connect(&url).await?;
            let leadership = client.leader_election(ELECTION).campaign("pod-a").await?;
            let term = leadership.term();
            let state = client.fenced_hash(STATE);
            let first = state.set("progress", "pod-a: step 1", term).await?;
            println!("pod-a: leading with term {term}; step 1 {first:?}");
            led_tx.send(()).expect("main waits");
            println!("pod-a: stalls (its thread blocks, its watchdog with it)");
            written_rx.recv().expect("the next leader writes");
            println!("pod-a: awake; leadership lost: {}", leadership.is_lost());
            let late = state.set("progress", "pod-a: step 2", term).await?;
            println!("pod-a: late write with term {term}: {late:?}");
            drop(leadership);
            Ok::<_, ferrisson::Error>(late)
        }
    });
    tokio::task::spawn_blocking(move || led_rx.recv()).await??;

    // pod-b and pod-c campaign; whichever wins works, then resigns, and the
    // other takes over.
    let mut others = Vec::new();
    for label in ["pod-b", "pod-c"] {
        let url = url.clone();
        let written = written_tx.clone();
        others.push(replica(move || async move {
            let client = connect(&url).await?;
            let leadership = client.leader_election(ELECTION).campaign(label).await?;
            let term = leadership.term();
            let write = client
                .fenced_hash(STATE)
                .set("progress", &format!("{label}: step 1"), term)
                .await?;
            println!("{label}: leading with term {term}; step 1 {write:?}");
            let _ = written.send(());
            leadership.resign().await?;
            println!("{label}: resigned");
            Ok::<_, ferrisson::Error>(())
        }));
    }
    drop(written_tx);

    let late = tokio::task::spawn_blocking(move || pod_a.join())
        .await?
        .expect("pod-a did not panic")?;
    assert!(matches!(late, FencedWrite::Refused { .. }));
    for other in others {
        tokio::task::spawn_blocking(move || other.join())
            .await?
            .expect("no replica panicked")?;
    }
    // The observer would follow on; this program is done.
    observing.abort();
    let read = watcher.fenced_hash(STATE).get("progress").await?;
    println!(
        "the state holds {:?}, written with term {}",
        read.value.unwrap_or_default(),
        read.fence.unwrap_or_default()
    );
    Ok(())
}
