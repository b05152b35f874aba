//! Cancellation fuzz: thousands of acquire futures of every lock kind,
//! dropped at random points (before their first poll, after a few polls,
//! at a random timeout: before the send, after it, while waiting), on free
//! and on held locks, from several tasks at once. Afterwards Redis must
//! hold nothing but the fencing counter, the client's registry must be
//! empty, and no subscription may be left, locally or on the server.
//!
//! The seed is printed; `FERRISSON_SEED=<n>` replays one, and
//! `FERRISSON_TORTURE=long` runs ten times as many futures.

use ferrisson_test_support as common;

use std::time::Duration;

use common::cancel::{acquire, poll_at_most};
use common::rng::{announced_seed, Rng};
use common::{client, eventually, soon, within, RedisServer};
use ferrisson::{Client, DistributedLock};

const KINDS: [&str; 6] = ["reentrant", "spin", "fenced", "fair", "read", "write"];

fn handle(client: &Client, kind: &str) -> Box<dyn DistributedLock> {
    common::lock_of(client, kind, &lock_name(kind))
}

/// The name of the `kind` lock the fuzz takes.
fn lock_name(kind: &str) -> String {
    match kind {
        "read" | "write" => "fuzz:rw".to_owned(),
        _ => format!("fuzz:{kind}"),
    }
}

/// What happened to one future.
#[derive(Default, Debug)]
struct Tally {
    never_polled: usize,
    dropped_after_polls: usize,
    timed_out: usize,
    completed: usize,
    refused_upgrades: usize,
    connection_errors: usize,
    /// The locks whose awaited unlock failed on the connection (every
    /// send of it): such a hold stays until its lease ends, as
    /// `LockGuard::unlock` documents.
    failed_unlocks: std::collections::BTreeSet<String>,
}

async fn fuzz(client: Client, seed: u64, futures: usize, kinds: &'static [&'static str]) -> Tally {
    let mut rng = Rng::new(seed);
    let mut tally = Tally::default();
    for _ in 0..futures {
        let kind = kinds[rng.below(kinds.len() as u64) as usize];
        let mut fut = acquire(handle(&client, kind), rng.below(5), rng.below(5000));
        let outcome = match rng.below(3) {
            0 => {
                tally.never_polled += 1;
                None
            }
            1 => {
                let done = poll_at_most(&mut fut, 1 + rng.below(6)).await;
                if done.is_none() {
                    tally.dropped_after_polls += 1;
                }
                done
            }
            _ => {
                let limit = Duration::from_micros(rng.below(4000));
                match tokio::time::timeout(limit, &mut fut).await {
                    Ok(out) => Some(out),
                    Err(_) => {
                        tally.timed_out += 1;
                        None
                    }
                }
            }
        };
        drop(fut);
        if let Some(out) = outcome {
            tally.completed += 1;
            // An error would be a bug (the server is up, the input good),
            // but for a write wanted while this owner's dropped read guards
            // are still being released in the background.
            let guard = match out {
                Ok(guard) => guard,
                Err(ferrisson::Error::UpgradeRefused { .. }) if kind == "write" => {
                    tally.refused_upgrades += 1;
                    None
                }
                Err(e) if e.is_connection_error() => {
                    tally.connection_errors += 1;
                    None
                }
                Err(e) => panic!("{kind}: {e}"),
            };
            // Dropped (released in the background) or unlocked.
            if let Some(guard) = guard {
                if rng.below(2) == 0 {
                    match guard.unlock().await {
                        Err(e) if e.is_connection_error() => {
                            tally.failed_unlocks.insert(lock_name(kind));
                        }
                        // A lease lost in a stall, say: nothing to release.
                        _ => {}
                    }
                }
            }
        }
    }
    tally
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_acquires_leave_nothing_behind() {
    common::init_tracing();
    let long = std::env::var("FERRISSON_TORTURE").is_ok_and(|v| v == "long");
    let seed = announced_seed("cancel fuzz");
    let total = if long { 60_000 } else { 6_000 };
    const TASKS: usize = 4;
    let server = RedisServer::start();
    let watchdog = Duration::from_millis(1200);
    let holder = client(&server, watchdog).await;
    let fuzzed = client(&server, watchdog).await;
    let started = std::time::Instant::now();

    let mut tally = Tally::default();
    // Half the rounds on free locks, half with another client holding
    // every lock for a moment (waiters subscribe, queue, and give up).
    for round in 0..2 {
        let mut held = Vec::new();
        if round == 1 {
            for kind in ["reentrant", "spin", "fenced", "fair", "write"] {
                let lease = Duration::from_millis(400);
                held.push(
                    soon(handle(&holder, kind).lock_with_lease(lease))
                        .await
                        .unwrap(),
                );
            }
        }
        let tasks: Vec<_> = (0..TASKS)
            .map(|t| {
                let client = fuzzed.clone();
                let seed = seed.wrapping_add((round * TASKS + t) as u64);
                tokio::spawn(fuzz(client, seed, total / 2 / TASKS, &KINDS))
            })
            .collect();
        for task in tasks {
            let t = within(Duration::from_secs(120), task).await.unwrap();
            tally.never_polled += t.never_polled;
            tally.dropped_after_polls += t.dropped_after_polls;
            tally.timed_out += t.timed_out;
            tally.completed += t.completed;
            tally.refused_upgrades += t.refused_upgrades;
            assert_eq!(
                t.connection_errors, 0,
                "a connection error with the server up"
            );
        }
        for guard in held {
            // The short lease may have run out already.
            let _ = soon(guard.unlock()).await;
        }
    }

    // Give-backs, queue exits and releases run in the background.
    let channels = [
        "redisson_lock__channel:{fuzz:reentrant}",
        "redisson_lock__channel:{fuzz:fenced}",
        "redisson_rwlock:{fuzz:rw}",
    ];
    eventually(Duration::from_secs(15), || async {
        fuzzed.held_locks() == 0
            && fuzzed.subscriptions() == 0
            && channels
                .iter()
                .all(|c| common::subscribers(&server, c) == 0)
            && leftovers(&server).is_empty()
    })
    .await;
    println!(
        "cancel fuzz (seed {seed}): {total} acquire futures in {:.1?}: {} never polled, {} dropped \
         after a few polls, {} dropped at a timeout, {} completed ({} write refused while read guards were still being released); afterwards: 0 keys but the \
         fencing counter, 0 registry entries, 0 subscriptions",
        started.elapsed(),
        tally.never_polled,
        tally.dropped_after_polls,
        tally.timed_out,
        tally.completed,
        tally.refused_upgrades
    );
    // And every lock is free for anyone.
    for kind in KINDS {
        let guard = soon(handle(&holder, kind).try_lock())
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("{kind} still held"));
        soon(guard.unlock()).await.unwrap();
    }
}

/// Every key but the fencing counter (which never expires, by design).
fn leftovers(server: &RedisServer) -> Vec<String> {
    server
        .keys("*")
        .into_iter()
        .filter(|k| k != "redisson_lock_token:{fuzz:fenced}")
        .collect()
}

/// The same through a proxy that cuts every connection every 20 ms: acquires whose replies are lost are resent or settled,
/// dropped ones given back, and still nothing is left behind (well before
/// the 30 s leases could have freed it), but the holds of awaited unlocks
/// whose every send met a cut: those last until their leases end, as
/// `LockGuard::unlock` documents.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_acquires_over_a_cutting_network_leave_nothing_behind() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    // Also records the give-backs that failed (see `failed_give_backs`).
    common::init_tracing();
    let long = std::env::var("FERRISSON_TORTURE").is_ok_and(|v| v == "long");
    let seed = announced_seed("cancel fuzz");
    let total = if long { 20_000 } else { 2_000 };
    let server = RedisServer::start();
    let proxy = Arc::new(common::proxy::Proxy::start(server.port()));
    let fuzzed = soon(
        Client::builder(proxy.url())
            .watchdog_timeout(Duration::from_millis(1200))
            .build(),
    )
    .await
    .unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let cutter = {
        let (proxy, stop) = (Arc::clone(&proxy), Arc::clone(&stop));
        std::thread::spawn(move || {
            let mut cuts = 0;
            while !stop.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(20));
                proxy.drop_connections();
                cuts += 1;
            }
            cuts
        })
    };
    let started = std::time::Instant::now();
    let tasks: Vec<_> = (0..4)
        .map(|t| {
            let client = fuzzed.clone();
            tokio::spawn(fuzz(client, seed.wrapping_add(t), total / 4, &KINDS))
        })
        .collect();
    let mut tally = Tally::default();
    for task in tasks {
        let t = within(Duration::from_secs(120), task).await.unwrap();
        tally.completed += t.completed;
        tally.connection_errors += t.connection_errors;
        tally.failed_unlocks.extend(t.failed_unlocks);
    }
    stop.store(true, Ordering::Relaxed);
    let cuts = cutter.join().unwrap();
    let quiet = std::time::Instant::now();
    // Latches whose DEL met a cut connection (or that mark a settled
    // request cancelled) may stay until their TTL: they hold nothing.
    let is_latch = |k: &String| {
        k.starts_with("ferrisson_acquire_latch:") || k.starts_with("redisson_unlock_latch:")
    };
    let holds = || {
        leftovers(&server)
            .into_iter()
            .filter(|k| !is_latch(k))
            .collect::<Vec<_>>()
    };
    // A hold whose awaited unlock failed (every send met a cut), or whose
    // give-back or dropped guard's release failed (logged: every send
    // until its lease ran out met a cut or timed out), stays until its
    // lease ends, as documented; the keys of its lock may stay that long
    // (as long as the longest lease of its owner's other holds on it, the
    // TTL their releases and re-entries set), and no other.
    let unlock_failed = |k: &String| {
        tally
            .failed_unlocks
            .iter()
            .cloned()
            .chain(common::failed_give_backs())
            .any(|name| *k == name || k.contains(&format!("{{{name}}}")))
    };
    let clean = || {
        fuzzed.held_locks() == 0
            && fuzzed.subscriptions() == 0
            && holds().iter().all(&unlock_failed)
    };
    // The sends of dropped acquires go on in the background for up to one
    // resend window (`release_attempts` sends of at most a response
    // timeout each): one that gets through once the cuts stop takes a hold
    // and gives it back at once. A look before the window has passed can
    // catch such a hold between the two; after it, no send takes anything,
    // and what is left must go within a few round trips, long before the
    // 30 s leases would free it.
    let config = fuzzed.config();
    let window =
        (config.response_timeout + Duration::from_millis(1500)) * config.release_attempts.max(1);
    tokio::time::sleep_until(tokio::time::Instant::from_std(quiet + window)).await;
    while !clean() && quiet.elapsed() < window + Duration::from_secs(5) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        clean(),
        "left behind: {} registry entries, {} subscriptions, keys {:?} (failed unlocks: {:?}, failed give-backs: {:?})",
        fuzzed.held_locks(),
        fuzzed.subscriptions(),
        holds()
            .iter()
            .map(|k| (
                k.clone(),
                server.cmd(&["TYPE", k]),
                server.cmd(&["PTTL", k]),
                server.cmd(&["HGETALL", k]),
            ))
            .collect::<Vec<_>>(),
        tally.failed_unlocks,
        common::failed_give_backs(),
    );
    // Those too, once their 30 s leases have run out: set by an acquire
    // before the cuts stopped, or at the latest by a release of another
    // hold of the same owner (a re-entry) within the resend window.
    if !holds().is_empty() {
        let lease = Duration::from_secs(30);
        let ends = quiet + window + lease + Duration::from_secs(2);
        tokio::time::sleep_until(tokio::time::Instant::from_std(ends)).await;
        assert!(
            holds().is_empty(),
            "left behind after the leases: {:?}",
            holds()
        );
    }
    let latches = leftovers(&server);
    for latch in &latches {
        let ttl = server.cmd(&["PTTL", latch]).as_int().unwrap();
        // -2: expired or swept since KEYS.
        // An acquire latch: at most the 30 s lease (or the 18 s resend
        // window of 4 sends, whichever is longer) plus one more resend
        // window, in which the attempts of a wait share their request. An
        // unlock latch of a release nobody waits on (a give-back, a dropped
        // guard's), resent until the hold has surely expired: the lease,
        // a 3 s response timeout and a 1 s margin, plus one resend window.
        let most = match latch.starts_with("redisson_unlock_latch:") {
            true => 30_000 + 3_000 + 1_000 + 18_000,
            false => 48_000,
        };
        // 0: it expires within this millisecond (PTTL rounds down).
        assert!(
            ttl == -2 || (0..=most).contains(&ttl),
            "{latch} has PTTL {ttl}"
        );
    }
    println!(
        "cancel fuzz over a cutting network (seed {seed}): {total} futures, {cuts} connection \
         cuts in {:.1?}; {} completed, {} failed on the connection; no hold, registry entry or \
         subscription left {:.1?} after the cuts stopped ({} latches left to expire; {} \
         awaited unlocks failed on a cut, whose holds ran out with their leases)",
        started.elapsed(),
        tally.completed,
        tally.connection_errors,
        quiet.elapsed(),
        latches.len(),
        tally.failed_unlocks.len()
    );
}
