//! Faults of the holder and of the server: a holder killed with SIGKILL, a
//! holder frozen with SIGSTOP past its lease, Redis restarted while locks
//! are held and waited for, Redis paused around a renewal. Holders run in
//! child processes (this test binary started again in a role); every figure
//! is printed.

use ferrisson_test_support as common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::child::{self, ChildProcess};
use common::{client, eventually, soon, within, RedisServer};
use ferrisson::Error;
use tokio::time::Instant;

const MS: u128 = 1_000_000;

/// The child side: takes the lock, says when, then waits for orders.
///
/// With `WORKER=1` a thread "works" under the lock until the guard says its
/// lease is lost: it reads the clock, then checks the guard, and counts the
/// step as done under the lock only if the check passed. On `check` the
/// child reports the guard's state, the result of `unlock` and the time of
/// its last step.
#[test]
fn holder_child() {
    child::run_as("holder", holder);
}

async fn holder() {
    let url = child::setting("REDIS_URL");
    let name = child::setting("NAME");
    let watchdog = Duration::from_millis(child::setting("WATCHDOG_MS").parse().unwrap());
    let lease: u64 = child::setting("LEASE_MS").parse().unwrap();
    let client = ferrisson::Client::builder(url.as_str())
        .watchdog_timeout(watchdog)
        .build()
        .await
        .unwrap();
    let lock = client.lock(name);
    let sent = child::now_ns();
    let guard = if lease == 0 {
        lock.lock().await.unwrap()
    } else {
        lock.lock_with_lease(Duration::from_millis(lease))
            .await
            .unwrap()
    };
    let received = child::now_ns();
    let guard = Arc::new(guard);
    let stop = Arc::new(AtomicBool::new(false));
    let last_work = Arc::new(AtomicU64::new(0));
    let worker = (std::env::var("WORKER").as_deref() == Ok("1")).then(|| {
        let (guard, stop, last_work) = (guard.clone(), stop.clone(), last_work.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let now = child::now_ns() as u64;
                if !guard.is_lease_lost() {
                    last_work.store(now, Ordering::Relaxed);
                }
                std::thread::sleep(Duration::from_micros(500));
            }
        })
    });
    child::say(&format!("held {sent} {received}"));
    let order = tokio::task::spawn_blocking(child::hear).await.unwrap();
    assert_eq!(order, "check");
    stop.store(true, Ordering::Relaxed);
    if let Some(worker) = worker {
        worker.join().unwrap();
    }
    let guard = Arc::into_inner(guard).unwrap();
    let lost_flag = guard.is_lease_lost();
    // The guard also resolves `lease_lost()` promptly.
    let resolved = tokio::time::timeout(Duration::from_secs(5), guard.lease_lost())
        .await
        .is_ok();
    let unlock = match guard.unlock().await {
        Ok(()) => "released".to_owned(),
        Err(Error::LeaseLost { .. }) => "lease-lost".to_owned(),
        Err(Error::NotHeld { .. }) => "not-held".to_owned(),
        Err(other) => format!("error:{other}"),
    };
    child::say(&format!(
        "result {lost_flag} {resolved} {unlock} {}",
        last_work.load(Ordering::Relaxed)
    ));
}

fn spawn_holder(server: &RedisServer, name: &str, watchdog_ms: u64, lease_ms: u64) -> ChildProcess {
    spawn_holder_with(server, name, watchdog_ms, lease_ms, false)
}

fn spawn_holder_with(
    server: &RedisServer,
    name: &str,
    watchdog_ms: u64,
    lease_ms: u64,
    worker: bool,
) -> ChildProcess {
    ChildProcess::spawn(
        "holder_child",
        "holder",
        &[
            ("REDIS_URL", server.url()),
            ("NAME", name.to_owned()),
            ("WATCHDOG_MS", watchdog_ms.to_string()),
            ("LEASE_MS", lease_ms.to_string()),
            ("WORKER", if worker { "1" } else { "0" }.to_owned()),
        ],
    )
}

/// `held <sent> <received>` in ns.
fn held(child: &ChildProcess) -> (u128, u128) {
    let line = child.expect("held", Duration::from_secs(30));
    let mut parts = line.split(' ').map(|n| n.parse::<u128>().unwrap());
    (parts.next().unwrap(), parts.next().unwrap())
}

/// A waiter in this process, on its own task; resolves to the wall-clock
/// time it got the lock, with the guard.
fn wait_for(
    client: &ferrisson::Client,
    name: &str,
) -> tokio::task::JoinHandle<(u128, ferrisson::LockGuard)> {
    let lock = client.lock(name);
    tokio::spawn(async move {
        let guard = lock.lock().await.unwrap();
        (child::now_ns(), guard)
    })
}

/// A holder killed with SIGKILL: the lock frees itself when the TTL the
/// server holds runs out, not earlier (the lease) and not much later (the
/// waiter sleeps until the TTL it was told, then tries again).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_holder_frees_the_lock_when_its_lease_runs_out() {
    if child::role().is_some() {
        return;
    }
    let server = RedisServer::start();
    let waiter_client = client(&server, Duration::from_secs(30)).await;
    // Watchdog mode with a 1.5 s watchdog, and a 1.5 s lease.
    for (mode, watchdog_ms, lease_ms) in [("watchdog", 1500, 0), ("lease", 30_000, 1500)] {
        let name = format!("death:{mode}");
        let mut holder = spawn_holder(&server, &name, watchdog_ms, lease_ms);
        let (sent, received) = held(&holder);
        let lease = u128::from(if lease_ms > 0 { lease_ms } else { watchdog_ms }) * MS;
        let waiter = wait_for(&waiter_client, &name);
        eventually(Duration::from_secs(10), || async {
            waiter_client.subscriptions() == 1
        })
        .await;
        if mode == "watchdog" {
            // Let the watchdog renew at least once: the key's TTL then
            // comes from a renewal, not the acquire.
            tokio::time::sleep(Duration::from_millis(watchdog_ms * 2 / 3)).await;
        }
        holder.kill();
        let killed = child::now_ns();
        let ttl = u128::try_from(server.cmd(&["PTTL", &name]).as_int().unwrap()).unwrap() * MS;
        let expires = killed + ttl;
        let (acquired, guard) = within(Duration::from_secs(20), waiter).await.unwrap();
        let gap = acquired.saturating_sub(killed);
        let late = acquired as i128 - expires as i128;
        println!(
            "{mode}: killed holder; next holder {} ms after the kill, {:.1} ms after the TTL \
             the server held at the kill ran out (lease {} ms)",
            gap / MS,
            late as f64 / MS as f64,
            lease / MS
        );
        // No earlier than the server's TTL allows (1 ms of PTTL rounding).
        assert!(late >= -(MS as i128), "acquired {late} ns before expiry");
        // No later than the lease plus a margin (roomy: a loaded machine
        // can be slow to wake the waiter).
        assert!(gap <= lease + 1500 * MS, "acquired {gap} ns after the kill");
        if lease_ms > 0 {
            // A lease is counted from the acquire the holder sent.
            assert!(acquired >= sent + lease, "before the lease ran out");
            assert!(acquired <= received + lease + 1500 * MS);
        }
        soon(guard.unlock()).await.unwrap();
    }
}

/// A holder frozen (SIGSTOP) longer than its lease loses the lock to
/// another process; resumed, its guard says the lease is lost, its unlock
/// is an error that sends nothing, and its worker did no step under the
/// lock after the other process took it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_holder_loses_the_lock_and_cannot_release_the_next() {
    if child::role().is_some() {
        return;
    }
    let server = RedisServer::start();
    let other = client(&server, Duration::from_secs(30)).await;
    for (mode, watchdog_ms, lease_ms) in [("watchdog", 1000, 0), ("lease", 30_000, 1000)] {
        let name = format!("freeze:{mode}");
        let mut holder = spawn_holder_with(&server, &name, watchdog_ms, lease_ms, true);
        held(&holder);
        let waiter = wait_for(&other, &name);
        eventually(Duration::from_secs(10), || async {
            other.subscriptions() == 1
        })
        .await;
        holder.signal("STOP");
        let stopped = child::now_ns();
        let (acquired, guard) = within(Duration::from_secs(20), waiter).await.unwrap();
        holder.signal("CONT");
        holder.send("check");
        let result = holder.expect("result", Duration::from_secs(20));
        let f: Vec<&str> = result.split(' ').collect();
        let last_work: u128 = f[3].parse().unwrap();
        println!(
            "{mode}: holder stopped; another took the lock {} ms later; resumed holder: \
             lease lost {} (lease_lost() resolved {}), unlock {}, last step under the lock \
             {:.1} ms before the other took it",
            (acquired - stopped) / MS,
            f[0],
            f[1],
            f[2],
            (acquired as f64 - last_work as f64) / MS as f64
        );
        assert_eq!(f[0], "true", "the resumed guard does not know it lost");
        assert_eq!(f[1], "true", "lease_lost() did not resolve");
        assert_eq!(f[2], "lease-lost", "unlock of a lost lease");
        assert!(
            last_work < acquired,
            "the frozen holder worked under the lock after another took it"
        );
        // The new holder's hold is untouched.
        assert_eq!(
            server
                .cmd(&["HGET", &name, guard.field()])
                .as_string()
                .as_deref(),
            Some("1")
        );
        soon(guard.unlock()).await.unwrap();
        drop(holder);
    }
}

/// A restart (no persistence: every key gone) while a lock is held and
/// waited for: no panic, the holder is told, every waiter gets the lock in
/// turn, and new lockers work.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_with_holders_and_waiters_recovers() {
    if child::role().is_some() {
        return;
    }
    common::init_tracing();
    let watchdog = Duration::from_millis(1200);
    let mut server = RedisServer::start();
    let a = client(&server, watchdog).await;
    // The waiters that wait for ever on `b`, those with a deadline on `d`:
    // a client's subscriptions then tell that its waiters' first tries are
    // done (a try_lock_for's first try fails on a connection error, by
    // design, and must not meet the restart).
    let b = client(&server, watchdog).await;
    let d = client(&server, watchdog).await;
    let guard = soon(a.lock("restart").lock()).await.unwrap();
    let leased = soon(
        a.lock("restart:leased")
            .lock_with_lease(Duration::from_secs(60)),
    )
    .await
    .unwrap();
    let mut waiters = Vec::new();
    for i in 0..4 {
        let waiter = if i < 2 { &b } else { &d };
        let lock = if i % 2 == 0 {
            waiter.lock("restart")
        } else {
            waiter.lock("restart:leased")
        };
        waiters.push(tokio::spawn(async move {
            let guard = if i < 2 {
                lock.lock().await.unwrap()
            } else {
                lock.try_lock_for(Duration::from_secs(60))
                    .await
                    .unwrap()
                    .expect("within the wait")
            };
            let got = Instant::now();
            guard.unlock().await.unwrap();
            got
        }));
    }
    eventually(Duration::from_secs(10), || async {
        b.subscriptions() == 2 && d.subscriptions() == 2
    })
    .await;
    let restarted = Instant::now();
    server.restart();
    within(watchdog * 3, guard.lease_lost()).await;
    let told = restarted.elapsed();
    assert!(soon(guard.unlock()).await.unwrap_err().is_lease_lost());
    let mut last = Duration::ZERO;
    for waiter in waiters {
        let got = within(Duration::from_secs(60), waiter).await.unwrap();
        last = last.max(got - restarted);
    }
    // The leased hold's key went with the restart: its release finds
    // nothing (its own lease, 60 s, has not run out by this clock).
    let err = soon(leased.unlock()).await.unwrap_err();
    assert!(err.is_not_held(), "{err}");
    // New lockers, on both clients and a new one.
    let c = client(&server, watchdog).await;
    for client in [&a, &b, &c] {
        let guard = soon(client.lock("restart").lock()).await.unwrap();
        soon(guard.unlock()).await.unwrap();
    }
    println!(
        "restart: holder told its lease was lost {told:?} after the restart; \
         4 waiters served within {last:?}"
    );
    for client in [&a, &b, &c, &d] {
        common::settled(client).await;
    }
}

/// Redis paused (`CLIENT PAUSE ... ALL`) around a renewal: a pause shorter
/// than the slack left in the lease costs nothing; a longer one makes the
/// holder give the lease up before the server could let the key go, and no
/// one else gets the lock until the server has expired it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_redis_delays_renewals_without_breaking_exclusion() {
    if child::role().is_some() {
        return;
    }
    common::init_tracing();
    let watchdog = Duration::from_millis(1500);
    let server = RedisServer::start();
    let a = client(&server, watchdog).await;
    let b = client(&server, watchdog).await;

    // Short pauses: renewals get through late; the lease holds.
    let guard = soon(a.lock("pause:short").lock()).await.unwrap();
    for _ in 0..3 {
        server.cmd(&["CLIENT", "PAUSE", "400", "ALL"]);
        tokio::time::sleep(Duration::from_millis(600)).await;
    }
    assert!(!guard.is_lease_lost(), "a 400 ms pause cost the lease");
    assert_eq!(
        server.cmd(&["PTTL", "pause:short"]).as_int().map(|t| t > 0),
        Some(true)
    );
    soon(guard.unlock()).await.unwrap();

    // A pause past the lease: the holder is told before the key could
    // expire (expiry is paused with the clients), and the waiter gets the
    // lock only after the holder was told.
    let guard = soon(a.lock("pause:long").lock()).await.unwrap();
    let waiter = wait_for(&b, "pause:long");
    eventually(Duration::from_secs(10), || async { b.subscriptions() == 1 }).await;
    let paused = Instant::now();
    server.cmd(&["CLIENT", "PAUSE", "3000", "ALL"]);
    within(Duration::from_secs(10), guard.lease_lost()).await;
    let told = Instant::now();
    let told_ns = child::now_ns();
    let (acquired, next) = within(Duration::from_secs(20), waiter).await.unwrap();
    println!(
        "pause: 3 s CLIENT PAUSE; holder told {:?} after the pause began, the next holder \
         got the lock {:.0} ms after that",
        told - paused,
        (acquired - told_ns) as f64 / MS as f64
    );
    assert!(
        acquired > told_ns,
        "the next holder started before the first was told"
    );
    assert!(soon(guard.unlock()).await.unwrap_err().is_lease_lost());
    // The next holder's acquire may have waited out the pause in Redis:
    // its guard is good all the same (a late grant is confirmed first).
    assert!(
        !next.is_lease_lost(),
        "the next holder's guard was born lost"
    );
    soon(next.unlock()).await.unwrap();
    common::settled(&a).await;
}

/// The in-process form of a freeze: a runtime starved (its only thread
/// blocked) past the lease. On waking, the guard says the lease is lost at
/// once, before the watchdog's task had a chance to run; a new acquire by
/// the same owner gets a good guard.
#[test]
fn a_starved_runtime_sees_its_lease_lost_on_waking() {
    if child::role().is_some() {
        return;
    }
    let server = RedisServer::start();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let watchdog = Duration::from_millis(600);
        let client = client(&server, watchdog).await;
        let lock = client.lock("starved");
        let guard = soon(lock.lock()).await.unwrap();
        // Nothing else runs on this runtime meanwhile.
        std::thread::sleep(watchdog + Duration::from_millis(300));
        assert!(guard.is_lease_lost(), "a starved guard thinks it holds");
        // The key expired in Redis: the same owner may take it again.
        let again = soon(lock.lock()).await.unwrap();
        assert!(!again.is_lease_lost(), "the new hold was born lost");
        assert!(soon(guard.unlock()).await.unwrap_err().is_lease_lost());
        assert_eq!(soon(lock.hold_count()).await.unwrap(), 1);
        soon(again.unlock()).await.unwrap();
        assert_eq!(client.held_locks(), 0);
    });
}

/// What one bounded call gave: its name, how long it may take, how long it
/// took, whether it returned a guard or permits, and its outcome as text.
type Timed = (String, Duration, Duration, bool, String);

/// Whether an acquire gave something.
fn some<T>(got: &Option<T>) -> bool {
    got.is_some()
}

/// Runs `call` on its own task (its own owner), timing it.
fn timed<T: std::fmt::Debug + Send + 'static>(
    what: String,
    limit: Duration,
    got: fn(&T) -> bool,
    call: impl std::future::Future<Output = ferrisson::Result<T>> + Send + 'static,
) -> tokio::task::JoinHandle<Timed> {
    tokio::spawn(async move {
        let started = Instant::now();
        let result = call.await;
        let took = started.elapsed();
        let held = result.as_ref().is_ok_and(got);
        let outcome = match &result {
            Ok(_) if held => "held".to_owned(),
            Ok(_) => "not held".to_owned(),
            Err(err) if err.is_connection_error() => "connection error".to_owned(),
            Err(err) => format!("error: {err}"),
        };
        // A guard or permit that came back is released on drop.
        drop(result);
        (what, limit, took, held, outcome)
    })
}

/// A frozen server (SIGSTOP: connections open, nothing answered): every
/// acquire with a wait, of every lock kind, both semaphores, the latch, a
/// multi-lock and RedLock, returns within its wait plus a margin, and a
/// call without a wait (`try_lock()`, `try_acquire()`) within one response
/// timeout, not two. Thawed, the server runs the sends that were in flight;
/// what they took is given back: nothing is left held, no permit is out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquires_end_within_their_wait_on_a_frozen_server() {
    if child::role().is_some() {
        return;
    }
    common::init_tracing();
    let server = RedisServer::start();
    let other = RedisServer::start();
    let response = Duration::from_millis(1500);
    let c = ferrisson::Client::builder(server.url())
        .response_timeout(response)
        .build();
    let c = common::soon(c).await.unwrap();
    let d = client(&other, Duration::from_secs(30)).await;
    let wait = Duration::from_secs(1);
    let lease = Duration::from_secs(60);
    // Scripts loaded and objects set before the freeze.
    common::take_and_give_back_each(&c, "frozen", true, 3).await;
    let sem = c.semaphore("frozen:sem");
    let seats = c.permit_expirable_semaphore("frozen:seats");
    assert!(soon(c.count_down_latch("frozen:latch").try_set_count(1))
        .await
        .unwrap());
    let two = |name: &str| -> Vec<Box<dyn ferrisson::DistributedLock>> {
        vec![Box::new(d.lock(name)), Box::new(c.lock(name))]
    };

    server.freeze();
    let mut calls = Vec::new();
    for kind in common::LOCK_KINDS {
        let lock = || common::lock_of(&c, kind, &format!("frozen:{kind}"));
        let (l, what) = (lock(), format!("{kind} try_lock_for"));
        let call = async move { l.try_lock_for(wait).await };
        calls.push(timed(what, wait, some, call));
        let (l, what) = (lock(), format!("{kind} try_lock_with_lease"));
        let call = async move { l.try_lock_with_lease(wait, lease).await };
        calls.push(timed(what, wait, some, call));
        let (l, what) = (lock(), format!("{kind} try_lock"));
        let call = async move { l.try_lock().await };
        calls.push(timed(what, response, some, call));
    }
    let yes = |got: &bool| *got;
    let s = sem.clone();
    let call = async move { s.try_acquire_for(wait).await };
    calls.push(timed("semaphore try_acquire_for".into(), wait, yes, call));
    let s = sem.clone();
    let call = async move { s.try_acquire_many_for(2, wait).await };
    calls.push(timed(
        "semaphore try_acquire_many_for".into(),
        wait,
        yes,
        call,
    ));
    let s = sem.clone();
    let call = async move { s.try_acquire().await };
    calls.push(timed("semaphore try_acquire".into(), response, yes, call));
    let s = seats.clone();
    let call = async move { s.try_acquire_for(wait).await };
    calls.push(timed("expirable try_acquire_for".into(), wait, some, call));
    let s = seats.clone();
    let call = async move { s.try_acquire_with_lease(wait, lease).await };
    calls.push(timed(
        "expirable try_acquire_with_lease".into(),
        wait,
        some,
        call,
    ));
    let s = seats.clone();
    let call = async move { s.try_acquire().await };
    calls.push(timed("expirable try_acquire".into(), response, some, call));
    let latch = c.count_down_latch("frozen:latch");
    let call = async move { latch.wait_for(wait).await };
    calls.push(timed("latch wait_for".into(), wait, yes, call));
    let multi = ferrisson::MultiLock::new(two("frozen:multi"));
    let call = async move { multi.try_lock_for(wait).await };
    calls.push(timed("multi-lock try_lock_for".into(), wait, some, call));
    let red = ferrisson::RedLock::new(two("frozen:red"));
    let call = async move { red.try_lock_for(wait).await };
    calls.push(timed("RedLock try_lock_for".into(), wait, some, call));

    let mut late = Vec::new();
    for call in calls {
        let (what, limit, took, held, outcome) =
            within(Duration::from_secs(30), call).await.unwrap();
        println!("frozen server: {what} (limit {limit:?}) returned after {took:?}: {outcome}");
        assert!(!held, "{what}: held on a frozen server");
        // Generous: half the limit again, for a loaded machine.
        if took > limit + limit / 2 {
            late.push(format!("{what}: {took:?} for a limit of {limit:?}"));
        }
    }
    server.thaw();
    assert!(late.is_empty(), "late: {late:#?}");

    // The frozen sends ran once the server woke: whatever they took went
    // back (a give-back, or a settle by the acquire latch).
    let locks_left = || {
        let mut left: Vec<String> = common::LOCK_KINDS
            .iter()
            .map(|kind| format!("frozen:{kind}"))
            .chain(["frozen:multi".to_owned(), "frozen:red".to_owned()])
            .filter(|name| common::exists(&server, name))
            .collect();
        for name in ["frozen:multi", "frozen:red"] {
            if common::exists(&other, name) {
                left.push(format!("{name} (other server)"));
            }
        }
        left
    };
    let out = || {
        (
            server.cmd(&["GET", "frozen:sem"]).as_string(),
            server.cmd(&["ZCARD", "{frozen:seats}:timeout"]).as_int(),
        )
    };
    eventually(Duration::from_secs(30), || async {
        locks_left().is_empty() && out() == (Some("3".to_owned()), Some(0))
    })
    .await;
    let queues = server.cmd(&["KEYS", "redisson_lock_queue:*"]);
    assert_eq!(queues.as_array().map(<[_]>::len), Some(0), "{queues:?}");
}

/// A program whose `try_lock` timed out on a frozen server, and which then
/// returned (its runtime dropped): when the server wakes and runs the
/// acquire that waited in its socket, the acquire takes nothing, for every
/// kind of lock and on either kind of runtime. Nobody is left to own a
/// grant, and none outlives the caller that gave up on it.
#[test]
fn a_timed_out_try_lock_takes_nothing_after_its_program_returned() {
    if child::role().is_some() {
        return;
    }
    let server = RedisServer::start();
    let response = Duration::from_secs(1);
    for multi_thread in [false, true] {
        let name = |kind: &str| format!("late-grant:{multi_thread}:{kind}");
        let mut builder = if multi_thread {
            tokio::runtime::Builder::new_multi_thread()
        } else {
            tokio::runtime::Builder::new_current_thread()
        };
        let rt = builder.worker_threads(2).enable_all().build().unwrap();
        rt.block_on(async {
            let c = ferrisson::Client::builder(server.url())
                .response_timeout(response)
                .connection_timeout(response)
                .build();
            let c = soon(c).await.unwrap();
            // Scripts loaded before the freeze.
            for kind in common::LOCK_KINDS {
                let guard = soon(common::lock_of(&c, kind, &name(kind)).lock())
                    .await
                    .unwrap();
                soon(guard.unlock()).await.unwrap();
            }
            server.freeze();
            let calls = common::LOCK_KINDS.iter().map(|kind| {
                let lock = common::lock_of(&c, kind, &name(kind));
                async move {
                    let started = Instant::now();
                    let got = lock.try_lock().await;
                    println!(
                        "frozen server (multi_thread: {multi_thread}): {kind} try_lock \
                         failed after {:?}",
                        started.elapsed()
                    );
                    (kind, got)
                }
            });
            for (kind, got) in within(
                Duration::from_secs(30),
                futures_util::future::join_all(calls),
            )
            .await
            {
                assert!(got.is_err(), "{kind}: try_lock on a frozen server: {got:?}");
            }
            // The program returns here: its runtime ends.
        });
        drop(rt);
        server.thaw();
        // Every command that waited in a socket has run once this fresh
        // connection is answered.
        assert_eq!(server.cmd(&["PING"]).as_string().as_deref(), Some("PONG"));
        let held: Vec<String> = common::LOCK_KINDS
            .iter()
            .map(|kind| name(kind))
            .filter(|name| common::exists(&server, name))
            .collect();
        println!(
            "thawed after the program returned (multi_thread: {multi_thread}): \
             {} of {} locks held",
            held.len(),
            common::LOCK_KINDS.len()
        );
        assert!(
            held.is_empty(),
            "granted after the caller gave up and its program returned \
             (multi_thread: {multi_thread}): {held:?}"
        );
    }
}

/// A server's clock stepped forward (by NTP, an operator; or a failover to
/// a master whose clock is ahead) past the client's reading of it: the
/// next acquire's deadline, by that reading, has passed on the server
/// before it is sent, and the script takes nothing. The client reads the
/// clock anew and the acquire goes on: every lock kind and both
/// semaphores are taken within one resend, not refused until the reading
/// is a minute old (before, each send was late until then).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquires_go_on_when_the_servers_clock_is_stepped_forward() {
    if child::role().is_some() {
        return;
    }
    common::init_tracing();
    let (server, clock) = common::clock::start_with_steppable_clock();
    let before = server_secs(&server);
    let response = Duration::from_secs(2);
    let c = ferrisson::Client::builder(server.url())
        .response_timeout(response)
        .build()
        .await
        .unwrap();
    // The reading is taken by the first acquire.
    let first = common::lock_of(&c, "reentrant", "stepped:first");
    soon(first.lock()).await.unwrap().unlock().await.unwrap();
    let step = Duration::from_secs(30);
    clock.step_ahead(step);
    let after = server_secs(&server);
    assert!(
        after >= before + step.as_secs(),
        "the server's clock was not stepped ({before} s, then {after} s)"
    );
    common::take_and_give_back_each(&c, "stepped", true, 1).await;
}

/// The server's clock, in whole seconds.
fn server_secs(server: &RedisServer) -> u64 {
    match server.cmd(&["TIME"]) {
        common::RespValue::Array(Some(parts)) => parts[0].as_string().unwrap().parse().unwrap(),
        other => panic!("TIME: {other:?}"),
    }
}
