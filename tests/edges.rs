//! The edges real programs reach: a client used after the runtime it was
//! built on shut down, Redisson's `unlock()` beside a guard, guards dropped
//! as a runtime ends, and one owner mixing leased and watchdog holds.

use ferrisson_test_support as common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::{client, exists, runtime, soon, within, RedisServer};
use ferrisson::Error;

const WATCHDOG: Duration = Duration::from_millis(1200);

/// A hold count as Redis has it (0 when the field is missing).
fn count(server: &RedisServer, name: &str, field: &str) -> i64 {
    server
        .cmd(&["HGET", name, field])
        .as_string()
        .map_or(0, |count| count.parse().expect("count"))
}

// --- Redisson's unlock() beside a guard --------------------------------------

/// `g = lock(); lock.unlock(); g2 = lock(); drop(g)`: the unlock released
/// g's hold, so g's drop releases nothing, and g2 still holds the lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unlock_spends_the_newest_guard_and_its_drop_sends_nothing() {
    let server = RedisServer::start();
    let client = client(&server, WATCHDOG).await;
    let rival = common::client(&server, WATCHDOG).await;
    let lock = client.lock("edges:java");
    let g = soon(lock.lock()).await.unwrap();
    soon(lock.unlock()).await.unwrap();
    assert!(!exists(&server, "edges:java"), "the one hold was released");
    assert!(g.is_lease_lost(), "the spent guard no longer holds");
    let g2 = soon(lock.lock()).await.unwrap();
    let field = g2.field().to_owned();
    drop(g);
    // A stale release would have been sent by now; the lock is still g2's.
    tokio::task::yield_now().await;
    soon(lock.hold_count()).await.unwrap();
    assert_eq!(count(&server, "edges:java", &field), 1);
    assert!(soon(rival.lock("edges:java").try_lock())
        .await
        .unwrap()
        .is_none());
    soon(g2.unlock()).await.unwrap();
    assert!(!exists(&server, "edges:java"));
    // With no guard left, unlock is Redisson's: nothing held is an error.
    assert!(matches!(
        soon(lock.unlock()).await,
        Err(Error::NotHeld { .. })
    ));
    common::settled(&client).await;
}

/// The spent guard's `unlock` succeeds and sends nothing; a reentrant
/// owner's count follows its live guards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unlock_inside_a_reentrant_hold_keeps_the_count_true() {
    let server = RedisServer::start();
    let client = client(&server, WATCHDOG).await;
    let lock = client.lock("edges:nested");
    let outer = soon(lock.lock()).await.unwrap();
    let inner = soon(lock.lock()).await.unwrap();
    let field = outer.field().to_owned();
    assert_eq!(count(&server, "edges:nested", &field), 2);
    soon(lock.unlock()).await.unwrap();
    assert_eq!(count(&server, "edges:nested", &field), 1);
    assert!(inner.is_lease_lost() && !outer.is_lease_lost());
    soon(inner.unlock()).await.unwrap();
    assert_eq!(count(&server, "edges:nested", &field), 1);
    soon(outer.unlock()).await.unwrap();
    assert!(!exists(&server, "edges:nested"));
    common::settled(&client).await;
}

/// Redisson's habit in 4 tasks x 200 rounds: `let _g = lock().await?; ...;
/// lock.unlock().await?;`, the guard dropped after. No two critical
/// sections overlap.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_java_habit_beside_guards_keeps_exclusion() {
    let server = RedisServer::start();
    let client = client(&server, WATCHDOG).await;
    let inside = Arc::new(AtomicBool::new(false));
    let tasks: Vec<_> = (0..4)
        .map(|_| {
            let lock = client.lock("edges:habit");
            let inside = Arc::clone(&inside);
            tokio::spawn(async move {
                for _ in 0..200 {
                    let _g = lock.lock().await.unwrap();
                    assert!(!inside.swap(true, Ordering::SeqCst), "two holders at once");
                    tokio::task::yield_now().await;
                    inside.store(false, Ordering::SeqCst);
                    lock.unlock().await.unwrap();
                }
            })
        })
        .collect();
    for task in tasks {
        within(Duration::from_secs(120), task).await.unwrap();
    }
    assert!(!exists(&server, "edges:habit"));
    common::settled(&client).await;
}

// --- leased and watchdog holds of one owner ---------------------------------

/// A leased outer hold whose lease ran out while a watchdog inner hold kept
/// the key: the inner release leaves the key what is left of the
/// watchdog's last renewal (a release that leaves holds never lowers the
/// TTL: see `a_release_that_reaches_redis_after_a_longer_leased_hold_leaves_its_ttl`),
/// so the lock is free within a watchdog timeout, and the outer's unlock
/// reports the lost lease. Nothing stays held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leased_hold_that_ran_out_under_a_watchdog_hold_ends_with_its_last_renewal() {
    let server = RedisServer::start();
    let client = client(&server, WATCHDOG).await;
    let rival = common::client(&server, WATCHDOG).await;
    let lock = client.lock("edges:mixed");
    let outer = soon(lock.lock_with_lease(Duration::from_millis(300)))
        .await
        .unwrap();
    let inner = soon(lock.lock()).await.unwrap();
    // The outer lease runs out by the clock; the watchdog keeps the key.
    soon(outer.lease_lost()).await;
    assert!(exists(&server, "edges:mixed"));
    soon(inner.unlock()).await.unwrap();
    // At most a watchdog timeout after the last renewal; three, for a
    // busy machine.
    let taken = soon(rival.lock("edges:mixed").try_lock_for(WATCHDOG * 3))
        .await
        .unwrap()
        .expect("the lock is free once the last renewal ran out");
    assert!(matches!(
        soon(outer.unlock()).await,
        Err(Error::LeaseLost { .. })
    ));
    soon(taken.unlock()).await.unwrap();
    common::settled(&client).await;
}

/// A long leased outer hold keeps its lease when a shorter leased or a
/// watchdog inner hold comes and goes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_inner_hold_never_shortens_the_outer_lease() {
    let server = RedisServer::start();
    let client = client(&server, WATCHDOG).await;
    let lock = client.lock("edges:long");
    let outer = soon(lock.lock_with_lease(Duration::from_secs(60)))
        .await
        .unwrap();
    let pttl = || server.pttl("edges:long");
    let inner = soon(lock.lock_with_lease(Duration::from_millis(100)))
        .await
        .unwrap();
    assert!(
        pttl() > 30_000,
        "a short re-entry kept the long lease: {}",
        pttl()
    );
    soon(inner.unlock()).await.unwrap();
    assert!(pttl() > 30_000, "its release too: {}", pttl());
    let watched = soon(lock.lock()).await.unwrap();
    soon(watched.unlock()).await.unwrap();
    assert!(pttl() > 30_000, "a watchdog hold's release too: {}", pttl());
    assert!(!outer.is_lease_lost());
    soon(outer.unlock()).await.unwrap();
    assert!(!exists(&server, "edges:long"));
    common::settled(&client).await;
}

/// A watchdog hold's release made while it was its owner's only hold (a
/// dropped guard's, sent in the background) carries the watchdog's lease.
/// Here it reaches Redis after the owner took the lock again with a
/// longer lease of its own, a re-entry: it must leave the key that lease's
/// TTL. Before (2026-12-02) it cut the TTL to the watchdog timeout, and
/// another client could take the lock while the leased hold still counted
/// on it. A current-thread runtime: the dropped guard's release task runs
/// only once the test's task waits, after the acquire is on the
/// connection.
#[tokio::test]
async fn a_release_that_reaches_redis_after_a_longer_leased_hold_leaves_its_ttl() {
    let server = RedisServer::start();
    let client = client(&server, WATCHDOG).await;
    let lock = client.lock("edges:late-release");
    let watched = soon(lock.lock()).await.unwrap();
    let field = watched.field().to_owned();
    drop(watched);
    let leased = soon(lock.lock_with_lease(Duration::from_secs(60)))
        .await
        .unwrap();
    // The dropped guard's release has run: the leased hold's count is left.
    common::eventually(Duration::from_secs(10), || async {
        count(&server, "edges:late-release", &field) == 1
    })
    .await;
    let pttl = server
        .cmd(&["PTTL", "edges:late-release"])
        .as_int()
        .unwrap();
    assert!(
        pttl > 50_000,
        "the release cut the 60 s lease taken after it to {pttl} ms"
    );
    assert!(!leased.is_lease_lost());
    soon(leased.unlock()).await.unwrap();
    assert!(!exists(&server, "edges:late-release"));
    common::settled(&client).await;
}

/// Two leased holds of one owner: extending one to a shorter lease leaves
/// the key the other's TTL, which that hold still counts on. Before
/// (2026-12-02) the key's TTL became the shorter lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extending_one_hold_leaves_the_longer_lease_of_another() {
    let server = RedisServer::start();
    let client = client(&server, WATCHDOG).await;
    let lock = client.lock("edges:extend");
    let long = soon(lock.lock_with_lease(Duration::from_secs(60)))
        .await
        .unwrap();
    let mut short = soon(lock.lock_with_lease(Duration::from_secs(60)))
        .await
        .unwrap();
    soon(short.extend(Duration::from_secs(10))).await.unwrap();
    assert_eq!(short.lease(), Some(Duration::from_secs(10)));
    let pttl = server.cmd(&["PTTL", "edges:extend"]).as_int().unwrap();
    assert!(
        pttl > 50_000,
        "extending one hold cut the other's 60 s lease to {pttl} ms"
    );
    soon(short.unlock()).await.unwrap();
    assert!(!long.is_lease_lost());
    soon(long.unlock()).await.unwrap();
    assert!(!exists(&server, "edges:extend"));
    common::settled(&client).await;
}

/// A leased hold answered late (Redis was paused while the acquire
/// waited) runs out by its guard's clock, which counts from the send,
/// before Redis, which counts from when it ran, lets the key go. The
/// owner's next acquire, at once, takes a hold of its own, whether the old
/// guard is still alive or was released (not sent: its lease ran out):
/// re-entering the old hold would keep its count in the key under the new
/// lease, a count no release takes out, and the lock would stay held after
/// the new guard's release. Before (2026-12-02) it did, for the new lease;
/// under load a 1 ms lease was enough (bad_input's edge cases, once in 14
/// runs).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_run_out_by_the_clock_is_not_reentered_while_redis_keeps_it() {
    let server = RedisServer::start();
    let client = client(&server, WATCHDOG).await;
    let other = common::client(&server, WATCHDOG).await;
    let lock = client.lock("edges:late");
    let lease = Duration::from_millis(400);
    for released_first in [false, true] {
        server.freeze();
        // One task, one owner: the thaw runs beside the acquire, in this
        // task.
        let (first, ()) = tokio::join!(lock.try_lock_with_lease(Duration::ZERO, lease), async {
            tokio::time::sleep(lease + Duration::from_millis(200)).await;
            server.thaw();
        });
        let first = first.unwrap().expect("a free lock");
        assert!(first.is_lease_lost(), "the lease ran out before the reply");
        assert!(exists(&server, "edges:late"), "Redis keeps it a while");
        let first = match released_first {
            true => {
                assert!(soon(first.unlock()).await.unwrap_err().is_lease_lost());
                None
            }
            false => Some(first),
        };
        let second = soon(lock.try_lock_with_lease(Duration::ZERO, Duration::from_secs(60)))
            .await
            .unwrap()
            .expect("the owner's lock, once Redis let the old hold go");
        assert_eq!(
            soon(lock.hold_count()).await.unwrap(),
            1,
            "{released_first}"
        );
        if let Some(first) = first {
            assert!(soon(first.unlock()).await.unwrap_err().is_lease_lost());
        }
        soon(second.unlock()).await.unwrap();
        assert!(!exists(&server, "edges:late"), "{released_first}");
        let theirs = soon(other.lock("edges:late").try_lock()).await.unwrap();
        let theirs = theirs.expect("the lock is free after the owner's release");
        soon(theirs.unlock()).await.unwrap();
    }
    common::settled(&client).await;
}

// --- guards dropped as a runtime ends ----------------------------------------

/// Guards dropped at the end of the runtime's `block_on` (the end of
/// `#[tokio::main]`) are released before the runtime's drop returns, on
/// either kind of runtime, for watchdog, leased, fair and read holds.
#[test]
fn guards_dropped_as_the_runtime_ends_are_released() {
    let server = RedisServer::start();
    for multi_thread in [false, true] {
        let names = [
            "edges:end:plain",
            "edges:end:leased",
            "edges:end:fair",
            "edges:end:rw",
        ];
        let rt = runtime(multi_thread);
        rt.block_on(async {
            let client = client(&server, Duration::from_secs(30)).await;
            let _a = soon(client.lock(names[0]).lock()).await.unwrap();
            let _b = soon(
                client
                    .lock(names[1])
                    .lock_with_lease(Duration::from_secs(60)),
            )
            .await
            .unwrap();
            let _c = soon(client.fair_lock(names[2]).lock()).await.unwrap();
            let _d = soon(client.read_write_lock(names[3]).read().lock())
                .await
                .unwrap();
            // The guards drop here, and the runtime ends right after.
        });
        drop(rt);
        for name in names {
            assert!(
                !exists(&server, name),
                "{name} outlived its runtime (multi_thread: {multi_thread})"
            );
        }
    }
}

/// Holds kept by tasks still running when `main` returns (a spawned task
/// holding a lock, running a job in watchdog mode, leading an election)
/// are released before the runtime's drop returns, whichever order the
/// runtime drops its tasks in (its watchdog's task among them): a hold
/// the watchdog no longer renews still stands until its lease ends, and
/// its guard, dropped with its task, releases it.
#[test]
fn holds_of_tasks_still_running_as_the_runtime_ends_are_released() {
    let server = RedisServer::start();
    let names = ["edges:task:lock", "edges:task:job", "edges:task:leader"];
    for multi_thread in [false, true] {
        // The order in which a runtime drops its tasks is not fixed.
        for round in 0..4 {
            let rt = runtime(multi_thread);
            rt.block_on(async {
                let client = client(&server, Duration::from_secs(30)).await;
                let (held, mut all_held) = tokio::sync::mpsc::channel::<()>(3);
                let lock = client.lock(names[0]);
                let told = held.clone();
                tokio::spawn(async move {
                    let _guard = lock.lock().await.unwrap();
                    told.send(()).await.unwrap();
                    std::future::pending::<()>().await;
                });
                let job = client.job(names[1]);
                let told = held.clone();
                tokio::spawn(async move {
                    job.run(|_lease| async move {
                        told.send(()).await.unwrap();
                        std::future::pending::<()>().await;
                    })
                    .await
                });
                let election = client.leader_election(names[2]);
                tokio::spawn(async move {
                    let _leading = election.campaign("a").await.unwrap();
                    held.send(()).await.unwrap();
                    std::future::pending::<()>().await;
                });
                for _ in names {
                    soon(all_held.recv()).await.unwrap();
                }
                // `main` returns with the three tasks still holding.
            });
            drop(rt);
            for name in names {
                assert!(
                    !exists(&server, name),
                    "{name} outlived its runtime (multi_thread: {multi_thread}, round {round})"
                );
            }
        }
    }
}

/// A leadership dropped on `main`'s last line is resigned before the
/// runtime's drop returns: its lock released, then its resignation
/// announced, in one piece of work. Two pieces, the announcement waiting
/// for the release, could be rerun at the shutdown announcement first,
/// which then waited for a release that no longer ran (a current-thread
/// runtime drops its tasks in an order that varies with their ids).
#[test]
fn a_leadership_dropped_as_the_runtime_ends_is_resigned_and_announced() {
    let server = RedisServer::start();
    let name = "edges:dropped:leader";
    let channel = "ferrisson_election__channel:{edges:dropped:leader}";
    for multi_thread in [false, true] {
        for round in 0..8 {
            let mut heard = common::RawSubscriber::new(&server, channel);
            let rt = runtime(multi_thread);
            rt.block_on(async {
                let client = client(&server, Duration::from_secs(30)).await;
                let leadership = soon(client.leader_election(name).campaign("a"))
                    .await
                    .unwrap();
                drop(leadership);
            });
            drop(rt);
            let at = format!("multi_thread: {multi_thread}, round {round}");
            assert!(
                !exists(&server, name),
                "the lock outlived its runtime ({at})"
            );
            // The campaign's own announcement may have gone with the
            // runtime; the resignation may not.
            let resigned = std::iter::from_fn(|| heard.next_message(Duration::from_secs(10)))
                .any(|(_, message)| message == "0");
            assert!(resigned, "the resignation was not announced ({at})");
        }
    }
}

/// A program that returns right after its last unlock leaves nothing
/// behind, not even the latches of its requests (deleted in batches a
/// few milliseconds later, and at the runtime's end by its drop).
#[test]
fn a_program_that_returns_at_once_leaves_no_latch() {
    let server = RedisServer::start();
    for multi_thread in [false, true] {
        let rt = runtime(multi_thread);
        rt.block_on(async {
            let client = client(&server, Duration::from_secs(30)).await;
            let guard = soon(client.lock("edges:latches").lock()).await.unwrap();
            soon(guard.unlock()).await.unwrap();
            let permit = soon(
                client
                    .permit_expirable_semaphore("edges:permits")
                    .try_set_permits(1),
            )
            .await
            .unwrap();
            assert!(permit);
        });
        drop(rt);
        let keys = server.keys("*latch*");
        assert!(
            keys.is_empty(),
            "left behind (multi_thread: {multi_thread}): {keys:?}"
        );
        server.cmd(&["DEL", "edges:permits"]);
    }
}

/// A guard that outlives its runtime is released when it is dropped.
#[test]
fn a_guard_dropped_after_its_runtime_is_released() {
    let server = RedisServer::start();
    let rt = runtime(false);
    let guard = rt.block_on(async {
        let client = client(&server, Duration::from_secs(30)).await;
        soon(
            client
                .lock("edges:after")
                .lock_with_lease(Duration::from_secs(60)),
        )
        .await
        .unwrap()
    });
    drop(rt);
    assert!(exists(&server, "edges:after"));
    drop(guard);
    assert!(!exists(&server, "edges:after"));
}

// --- a client used after its runtime ended ------------------------------------

/// A client built in one runtime and used in a second after the first shut
/// down: its holds are reported lost at once (`lease_lost` resolves), and
/// new calls are refused with a clear error instead of taking locks that
/// nothing would renew.
#[test]
fn a_client_whose_runtime_ended_refuses_and_reports_its_holds_lost() {
    let server = RedisServer::start();
    // The first runs its tasks by itself (a current-thread runtime would
    // run them only inside its own `block_on`).
    let first = runtime(true);
    let second = runtime(false);
    let client = first.block_on(client(&server, WATCHDOG));
    // A hold taken in the second runtime, while the first still lives.
    let guard = second.block_on(async { soon(client.lock("edges:rt").lock()).await.unwrap() });
    assert!(!guard.is_lease_lost());
    drop(first);
    second.block_on(async {
        soon(guard.lease_lost()).await;
        assert!(guard.is_lease_lost());
        let err = soon(client.lock("edges:rt2").lock()).await.unwrap_err();
        assert!(matches!(err, Error::RuntimeGone), "{err:?}");
        let err = soon(client.semaphore("edges:sem").try_acquire())
            .await
            .unwrap_err();
        assert!(matches!(err, Error::RuntimeGone), "{err:?}");
    });
    assert!(!exists(&server, "edges:rt2"));
}

/// Polls `fut` once on this thread, outside any runtime: a call that
/// refuses to run there is ready at its first poll.
fn poll_outside_a_runtime<F: std::future::Future>(fut: F) -> std::task::Poll<F::Output> {
    let mut fut = std::pin::pin!(fut);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    fut.as_mut().poll(&mut cx)
}

/// An async call from outside a tokio runtime (another executor, or a
/// plain thread) is refused with its own error, and sends nothing: the
/// building of a client and an acquire.
#[test]
fn a_call_outside_a_tokio_runtime_is_refused_with_its_own_error() {
    let server = RedisServer::start();
    let rt = runtime(true);
    let client = rt.block_on(client(&server, WATCHDOG));
    let outside = std::thread::spawn(move || {
        let build = poll_outside_a_runtime(ferrisson::Client::builder(server.url()).build());
        let acquire = poll_outside_a_runtime(client.lock("edges:outside").lock());
        (
            build.map(|built| built.err()),
            acquire.map(|taken| taken.err()),
            server,
        )
    });
    let (build, acquire, server) = outside.join().expect("the outside thread");
    assert!(
        matches!(build, std::task::Poll::Ready(Some(Error::NoRuntime))),
        "{build:?}"
    );
    assert!(
        matches!(acquire, std::task::Poll::Ready(Some(Error::NoRuntime))),
        "{acquire:?}"
    );
    assert!(!exists(&server, "edges:outside"));
}

// --- Redis restarted empty ---------------------------------------------------

/// A holder learns that Redis came back empty as soon as it answers again,
/// not at its next scheduled renewal (a third of the watchdog timeout).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_without_data_is_noticed_at_once() {
    let mut server = RedisServer::start();
    let watchdog = Duration::from_secs(30);
    let client = client(&server, watchdog).await;
    let guard = soon(client.lock("edges:restart").lock()).await.unwrap();
    // No persistence: every key is gone. The next scheduled renewal is 10 s
    // after the acquire. The lost connection makes the watchdog renew at
    // once, and again 20 ms after each try that finds no connection, until
    // Redis answers: half the renewal period is a generous bound.
    server.restart();
    within(watchdog / 6, guard.lease_lost()).await;
    assert_eq!(client.held_locks(), 0);
}

/// A fair waiter still waiting, and a permit still out, when the runtime
/// ends: the waiter leaves the queue and the permit comes back before the
/// runtime's drop returns.
#[test]
fn a_waiter_and_a_permit_left_as_the_runtime_ends_leave_nothing() {
    let server = RedisServer::start();
    let rt = runtime(false);
    rt.block_on(async {
        let holder = client(&server, Duration::from_secs(30)).await;
        let waiters = client(&server, Duration::from_secs(30)).await;
        let _held = soon(holder.fair_lock("edges:fair").lock()).await.unwrap();
        let lock = waiters.fair_lock("edges:fair");
        let _waiting = tokio::spawn(async move { lock.lock().await });
        common::eventually(Duration::from_secs(10), || async {
            server
                .cmd(&["ZCARD", "redisson_lock_timeout:{edges:fair}"])
                .as_int()
                == Some(1)
        })
        .await;
        let semaphore = holder.permit_expirable_semaphore("edges:permits");
        assert!(soon(semaphore.try_set_permits(1)).await.unwrap());
        let _permit = soon(semaphore.acquire()).await.unwrap();
        // The runtime ends with the waiter waiting and the permit out.
    });
    drop(rt);
    for key in [
        "edges:fair",
        "redisson_lock_queue:{edges:fair}",
        "redisson_lock_timeout:{edges:fair}",
    ] {
        assert!(!exists(&server, key), "{key} outlived its runtime");
    }
    let rt = runtime(false);
    rt.block_on(async {
        let client = client(&server, Duration::from_secs(30)).await;
        let semaphore = client.permit_expirable_semaphore("edges:permits");
        assert_eq!(soon(semaphore.available_permits()).await.unwrap(), 1);
    });
}

/// A guard's owner is what `is_held_by` and `with_owner` take; its field is
/// the hash field in Redis.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guards_owner_is_what_is_held_by_takes() {
    let server = RedisServer::start();
    let client = client(&server, WATCHDOG).await;
    let lock = client.lock("edges:owner");
    let guard = soon(lock.lock()).await.unwrap();
    // The test's body runs outside a task: its thread owns it.
    assert!(guard.owner().starts_with("thread-"), "{}", guard.owner());
    assert_eq!(guard.field(), format!("{}:{}", client.id(), guard.owner()));
    assert!(soon(lock.is_held_by(guard.owner())).await.unwrap());
    soon(guard.unlock()).await.unwrap();
    let rw = client.read_write_lock("edges:owner:rw");
    let writing = soon(rw.write().with_owner("job-7").lock()).await.unwrap();
    assert_eq!(writing.owner(), "job-7");
    assert_eq!(writing.field(), format!("{}:job-7:write", client.id()));
    assert!(soon(rw.write().is_held_by("job-7")).await.unwrap());
    soon(writing.unlock()).await.unwrap();
}
