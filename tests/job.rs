//! Jobs against a real `redis-server`, one private server per test.

use ferrisson_test_support as common;

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::{client, eventually, exists, soon, within, RedisServer};
use ferrisson::config::{MAX_JOB_LABEL_LEN, MAX_OCCURRENCE};
use ferrisson::{Error, Job, JobRun};
use tokio::sync::oneshot;

const WATCHDOG: Duration = Duration::from_millis(1200);

/// While one replica runs a job, another skips it and is told who runs
/// it; once the run ends, the lock is gone and the next run goes ahead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_job_is_skipped_by_others_and_released_after() {
    let server = RedisServer::start();
    let (a, b) = (
        client(&server, WATCHDOG).await,
        client(&server, WATCHDOG).await,
    );
    let (started_tx, started) = oneshot::channel();
    let (end, end_rx) = oneshot::channel::<()>();
    let job = a.job("nightly").label("pod-a");
    let running = tokio::spawn(async move {
        job.run(|lease| async move {
            assert!(lease.is_renewed());
            assert!(!lease.is_lost());
            started_tx.send(()).unwrap();
            end_rx.await.unwrap();
            7
        })
        .await
    });
    soon(started).await.unwrap();
    let skipped = soon(
        b.job("nightly")
            .label("pod-b")
            .run(|_| async { unreachable!() }),
    )
    .await
    .unwrap();
    match skipped {
        JobRun::Skipped {
            holder: Some(holder),
        } => {
            assert_eq!(holder.label.as_deref(), Some("pod-a"));
            assert_eq!(holder.client_id, a.id().to_string());
            assert!(holder.owner_id.starts_with("pod-a~"), "{}", holder.owner_id);
            assert!(holder.ttl.is_some());
        }
        other => panic!("expected a skip with its holder, got {other:?}"),
    }
    // A second run in the runner's own process is skipped too: each run
    // is an owner of its own.
    let again = soon(a.job("nightly").run(|_| async { unreachable!() }))
        .await
        .unwrap();
    assert!(!again.ran());
    end.send(()).unwrap();
    assert_eq!(soon(running).await.unwrap().unwrap(), JobRun::Ran(7));
    assert!(!exists(&server, "nightly"));
    let next = soon(b.job("nightly").run(|_| async { 8 })).await.unwrap();
    assert_eq!(next, JobRun::Ran(8));
}

/// "At least for": a run that ends early leaves the lock held, with the
/// time left as its TTL, so a late replica skips the occurrence; after
/// that time it runs again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_least_for_keeps_the_lock_after_a_short_run() {
    let server = RedisServer::start();
    let (a, b) = (
        client(&server, WATCHDOG).await,
        client(&server, WATCHDOG).await,
    );
    let at_least = Duration::from_secs(3);
    for job in [
        // Renewed by the watchdog, and with a lease.
        a.job("hourly").at_least_for(at_least).label("pod-a"),
        a.job("hourly")
            .at_most_for(Duration::from_secs(10))
            .at_least_for(at_least)
            .label("pod-a"),
    ] {
        assert_eq!(
            soon(job.run(|_| async { 1 })).await.unwrap(),
            JobRun::Ran(1)
        );
        let ttl = server.pttl("hourly");
        assert!(
            ttl > 0 && ttl <= at_least.as_millis() as i64,
            "the lock is kept for what is left of {at_least:?}: PTTL {ttl}"
        );
        match soon(b.job("hourly").run(|_| async { 2 })).await.unwrap() {
            JobRun::Skipped {
                holder: Some(holder),
            } => assert_eq!(holder.label.as_deref(), Some("pod-a")),
            other => panic!("a late replica must skip, got {other:?}"),
        }
        // Nobody was woken: the lock is still held. It goes at its TTL.
        eventually(at_least * 3, || async { !exists(&server, "hourly") }).await;
        assert_eq!(
            soon(b.job("hourly").run(|_| async { 3 })).await.unwrap(),
            JobRun::Ran(3)
        );
        assert!(!exists(&server, "hourly"));
    }
}

/// "At most for": the lease is not renewed; a run that takes longer sees
/// its lease lost, another replica may start, and the first is told it
/// overran.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_past_at_most_for_loses_its_lease_and_says_so() {
    let server = RedisServer::start();
    let (a, b) = (
        client(&server, WATCHDOG).await,
        client(&server, WATCHDOG).await,
    );
    let at_most = Duration::from_millis(600);
    let job = a.job("report").at_most_for(at_most);
    let other = b.job("report");
    let ran = soon(job.run(|lease| async move {
        assert!(!lease.is_renewed());
        assert!(lease.remaining() <= at_most);
        within(at_most * 20, lease.lost()).await;
        assert!(lease.is_lost());
        assert_eq!(lease.remaining(), Duration::ZERO);
        // The lease ran out by this process's clock, so the server's ran
        // out too: another replica gets the job now.
        eventually(at_most * 10, || async { !exists(&server, "report") }).await;
        other.run(|_| async { "second" }).await.unwrap()
    }))
    .await
    .unwrap();
    assert_eq!(ran, JobRun::Overran(JobRun::Ran("second")));
}

/// Without "at most for", the watchdog keeps a run that lasts several
/// watchdog timeouts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_watchdog_keeps_a_long_run() {
    let server = RedisServer::start();
    let a = client(&server, WATCHDOG).await;
    let b = client(&server, WATCHDOG).await;
    let ran = soon(a.job("long").run(|lease| async move {
        // The work: three watchdog timeouts long.
        tokio::time::sleep(WATCHDOG * 3).await;
        let skipped = b.job("long").run(|_| async {}).await.unwrap();
        (lease.is_lost(), skipped.ran())
    }))
    .await
    .unwrap();
    assert_eq!(ran, JobRun::Ran((false, false)));
    assert!(!exists(&server, "long"));
}

/// With a wait, a runner waits for a run in progress to end, then runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runner_may_wait_for_the_job() {
    let server = RedisServer::start();
    let a = client(&server, WATCHDOG).await;
    let (started_tx, started) = oneshot::channel();
    let (end, end_rx) = oneshot::channel::<()>();
    let job = a.job("queue-drain");
    let first = tokio::spawn(async move {
        job.run(|_| async move {
            started_tx.send(()).unwrap();
            end_rx.await.unwrap();
        })
        .await
    });
    soon(started).await.unwrap();
    let waiting = a.job("queue-drain").wait(Duration::from_secs(60));
    let second = tokio::spawn(async move { waiting.run(|_| async { 2 }).await });
    // The second runner waits (subscribed to the lock's channel) before
    // the first ends.
    let channel = ferrisson::layout::lock_channel("queue-drain");
    eventually(Duration::from_secs(10), || async {
        common::subscribers(&server, &channel) > 0
    })
    .await;
    end.send(()).unwrap();
    assert_eq!(soon(first).await.unwrap().unwrap(), JobRun::Ran(()));
    assert_eq!(soon(second).await.unwrap().unwrap(), JobRun::Ran(2));
}

/// A holder that is no job (a plain lock, as a Redisson `RLock`) is
/// respected and reported without a label.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_lock_holder_makes_a_job_skip() {
    let server = RedisServer::start();
    let a = client(&server, WATCHDOG).await;
    let guard = soon(a.lock("export").with_owner("thread-1").lock())
        .await
        .unwrap();
    match soon(a.job("export").run(|_| async {})).await.unwrap() {
        JobRun::Skipped {
            holder: Some(holder),
        } => {
            assert_eq!(holder.label, None);
            assert_eq!(holder.owner_id, "thread-1");
        }
        other => panic!("expected a skip, got {other:?}"),
    }
    soon(guard.unlock()).await.unwrap();
}

/// A run dropped while its work runs lets the lock go, and keeps it for
/// its "at least for" as a finished run would; a runner dropped while it
/// waits leaves nothing behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_runs_leave_nothing_behind() {
    let server = RedisServer::start();
    let a = client(&server, WATCHDOG).await;
    let b = client(&server, WATCHDOG).await;

    // Dropped in the middle of its work, without "at least for".
    let (started_tx, started) = oneshot::channel();
    let job = a.job("dropped");
    let run = tokio::spawn(async move {
        job.run(|_| async move {
            started_tx.send(()).unwrap();
            std::future::pending::<()>().await
        })
        .await
    });
    soon(started).await.unwrap();
    run.abort();
    let _ = run.await;
    eventually(Duration::from_secs(10), || async {
        server.keys("*").is_empty()
    })
    .await;

    // With "at least for": kept for it, then gone.
    let (started_tx, started) = oneshot::channel();
    let job = a.job("dropped").at_least_for(Duration::from_secs(10));
    let run = tokio::spawn(async move {
        job.run(|_| async move {
            started_tx.send(()).unwrap();
            std::future::pending::<()>().await
        })
        .await
    });
    soon(started).await.unwrap();
    run.abort();
    let _ = run.await;
    eventually(Duration::from_secs(10), || async {
        server.keys("*") == ["dropped"] && server.pttl("dropped") <= 10_000
    })
    .await;
    assert!(!soon(b.job("dropped").run(|_| async {}))
        .await
        .unwrap()
        .ran());
    eventually(Duration::from_secs(40), || async {
        server.keys("*").is_empty()
    })
    .await;

    // Dropped while it waits for a run in progress.
    let guard = soon(b.lock("dropped").lock()).await.unwrap();
    let waiting = a.job("dropped").wait(Duration::from_secs(60));
    let waiter = tokio::spawn(async move { waiting.run(|_| async {}).await });
    let channel = ferrisson::layout::lock_channel("dropped");
    eventually(Duration::from_secs(10), || async {
        common::subscribers(&server, &channel) > 0
    })
    .await;
    waiter.abort();
    let _ = waiter.await;
    soon(guard.unlock()).await.unwrap();
    eventually(Duration::from_secs(10), || async {
        server.keys("*").is_empty() && common::subscribers(&server, &channel) == 0
    })
    .await;
}

/// Bad settings are refused before anything is sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_settings_are_refused_and_write_nothing() {
    let server = RedisServer::start();
    let a = client(&server, WATCHDOG).await;
    let second = Duration::from_secs(1);
    let jobs = [
        a.job(""),
        a.job("j").label(""),
        a.job("j").label("a\nb"),
        a.job("j").label("x".repeat(MAX_JOB_LABEL_LEN + 1)),
        a.job("j").at_most_for(Duration::ZERO),
        a.job("j").at_most_for(Duration::from_micros(10)),
        a.job("j").at_most_for(second).at_least_for(second * 2),
        a.job("j").at_least_for(ferrisson::config::MAX_DURATION * 2),
        a.job("j").wait(ferrisson::config::MAX_DURATION * 2),
        a.job("j").watchdog_lease(Duration::ZERO),
        a.job("j").watchdog_lease(Duration::from_millis(10)),
        a.job("j")
            .watchdog_lease(ferrisson::config::MAX_DURATION * 2),
        a.job("j").watchdog_lease(second).at_most_for(second),
        a.job("x".repeat(ferrisson::config::MAX_NAME_LEN + 1)),
    ];
    for job in jobs {
        let refused = soon(job.run(|_| async { unreachable!() })).await;
        assert!(
            matches!(refused, Err(Error::InvalidArgument(_))),
            "{job:?}: {refused:?}"
        );
    }
    // What a refusal is not: "at least" equal to "at most", and a label
    // of exactly the limit.
    let fine = a
        .job("j")
        .at_most_for(second)
        .at_least_for(second)
        .label("x".repeat(MAX_JOB_LABEL_LEN));
    assert!(soon(fine.run(|_| async {})).await.unwrap().ran());
    server.cmd(&["DEL", "j"]);
    // Only the request latches were left, and they go in the background.
    eventually(Duration::from_secs(10), || async {
        server.keys("*").is_empty()
    })
    .await;
    // Data the job did not write is left as it is.
    server.cmd(&["SET", "j", "not a lock"]);
    let refused = soon(a.job("j").run(|_| async {})).await;
    assert!(
        matches!(refused, Err(Error::WrongType { .. })),
        "{refused:?}"
    );
    assert_eq!(
        server.cmd(&["GET", "j"]).as_string().as_deref(),
        Some("not a lock")
    );
}

/// Redis out of memory (`maxmemory` reached, `noeviction`) when a run with
/// "at least for" ends: the keep grows nothing, so Redis runs it, and the
/// lock stays until "at least for" after the start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_least_for_is_kept_when_redis_is_out_of_memory() {
    let server = RedisServer::start();
    let a = client(&server, WATCHDOG).await;
    let at_least = Duration::from_secs(12);
    let ran = soon(a.job("oom").at_least_for(at_least).run(|_| async {
        server.cmd(&["CONFIG", "SET", "maxmemory-policy", "noeviction"]);
        server.cmd(&["CONFIG", "SET", "maxmemory", "1"]);
        // Out of memory now: a write that may grow it is refused.
        let refused = server.cmd(&["SET", "probe", "x"]);
        assert!(format!("{refused:?}").contains("OOM"), "{refused:?}");
    }))
    .await
    .unwrap();
    assert_eq!(ran, JobRun::Ran(()));
    // Kept for the rest of the 12 s (the run took a moment); the watchdog
    // lease alone (1.2 s) would have ended it by now or soon.
    let left = server.pttl("oom");
    assert!(left > 6_000, "kept for {left} ms only");
    eprintln!("kept out of memory: PTTL {left} ms of the 12 000 asked");
    server.cmd(&["CONFIG", "SET", "maxmemory", "0"]);
}

/// A run whose release fails (Redis frozen when the run ends) says so:
/// the closure ran with the lock held, and the lock ends with its lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_whose_release_fails_says_so() {
    let server = RedisServer::start();
    let a = soon(
        ferrisson::Client::builder(server.url())
            .watchdog_timeout(Duration::from_secs(30))
            .response_timeout(Duration::from_millis(300))
            .build(),
    )
    .await
    .unwrap();
    let ran = soon(a.job("frozen").run(|_| async {
        server.freeze();
        5
    }))
    .await
    .unwrap();
    server.thaw();
    match ran {
        JobRun::Unreleased { value: 5, error } => {
            assert!(
                error.is_connection_error() || error.to_string().contains("timed out"),
                "{error}"
            )
        }
        other => panic!("{other:?}"),
    }
}

/// A run whose lock an operator force-unlocks learns it at once from
/// `lost()` (the unlock message), not at the watchdog's next renewal (10 s
/// with this 30 s timeout): two runs overlap by no more than the time the
/// work takes to stop.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_force_unlocked_run_is_told_at_once() {
    let server = RedisServer::start();
    let a = client(&server, Duration::from_secs(30)).await;
    let operator = client(&server, Duration::from_secs(30)).await;
    let (listening_tx, listening) = oneshot::channel();
    let job = a.job("forced");
    let running = tokio::spawn(async move {
        job.run(|lease| async move {
            let lost = lease.lost();
            tokio::pin!(lost);
            // Polled once: listening from here on.
            assert!(futures_poll_once(lost.as_mut()).await.is_none());
            listening_tx.send(()).unwrap();
            lost.await;
            lease.is_lost()
        })
        .await
    });
    soon(listening).await.unwrap();
    eventually(Duration::from_secs(10), || async { a.subscriptions() == 1 }).await;
    assert!(soon(operator.lock("forced").force_unlock()).await.unwrap());
    let ran = within(Duration::from_secs(5), running)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(ran, JobRun::Overran(true));
    eventually(Duration::from_secs(10), || async { a.subscriptions() == 0 }).await;
}

/// Polls `fut` once: its output if it is ready.
async fn futures_poll_once<F: std::future::Future + Unpin>(mut fut: F) -> Option<F::Output> {
    std::future::poll_fn(|cx| {
        std::task::Poll::Ready(match std::pin::Pin::new(&mut fut).poll(cx) {
            std::task::Poll::Ready(out) => Some(out),
            std::task::Poll::Pending => None,
        })
    })
    .await
}

/// Now by the wall clock, in ms since the epoch.
fn wall_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// What one replica's run of one tick did: the occurrence it served and
/// its outcome (`ran`, `held`, `done`).
type Outcomes = Vec<(u64, &'static str)>;

/// `skews.len()` replicas, each with a client of its own, fire `ticks`
/// ticks `period_ms` apart, on the wall clock's grid of that period, each
/// `skew` ms late (a replica whose clock is that far behind, or whose
/// scheduler is that slow). At each tick, `name` gives the replica's job
/// for the tick's scheduled instant (ms since the epoch) and the job runs
/// a `work_ms` closure. Returns, per occurrence, the outcomes of every
/// replica's run.
async fn fire_skewed(
    server: &RedisServer,
    skews: &[u64],
    period_ms: u64,
    ticks: u64,
    work_ms: u64,
    name: fn(Job, u64) -> Job,
) -> BTreeMap<u64, Outcomes> {
    // The first tick: a whole period on the wall clock, at least a second
    // from now, so that every replica is connected by then.
    let first = (wall_ms() + 1000) / period_ms * period_ms + period_ms;
    let mut replicas = Vec::new();
    for (i, &skew) in skews.iter().enumerate() {
        let client = client(server, WATCHDOG).await;
        let job = client.job("skewed").label(format!("replica-{i}"));
        replicas.push(tokio::spawn(async move {
            let mut seen = Vec::new();
            for k in 0..ticks {
                let instant = first + k * period_ms;
                let fire = instant + skew;
                tokio::time::sleep(Duration::from_millis(fire.saturating_sub(wall_ms()))).await;
                let job = name(job.clone(), instant);
                let occurrence = job.current_occurrence().unwrap().unwrap();
                let ran = job
                    .run(|_| tokio::time::sleep(Duration::from_millis(work_ms)))
                    .await
                    .unwrap();
                let what = match ran {
                    JobRun::Ran(()) => "ran",
                    JobRun::Skipped { .. } => "held",
                    JobRun::AlreadyDone {
                        occurrence: served,
                        last_done,
                    } => {
                        assert_eq!(served, occurrence);
                        assert!(last_done >= occurrence, "{last_done} < {occurrence}");
                        "done"
                    }
                    other => panic!("replica {i}, occurrence {occurrence}: {other:?}"),
                };
                seen.push((occurrence, what));
            }
            seen
        }));
    }
    let mut by_occurrence: BTreeMap<u64, Outcomes> = BTreeMap::new();
    // Generous: the schedule's length ten times over.
    let limit = Duration::from_millis(period_ms * ticks * 10 + 10_000);
    for replica in replicas {
        for (occurrence, what) in within(limit, replica).await.unwrap() {
            by_occurrence
                .entry(occurrence)
                .or_default()
                .push((occurrence, what));
        }
    }
    by_occurrence
}

/// Five replicas fire every second, 20 ms apart, a 5 ms job with the
/// defaults and its occurrences named by the wall clock (`every`, no "at
/// least for"): each of ten occurrences runs exactly once. A lock alone
/// let every replica run every one (the run is over, and the lock free,
/// before the next replica fires).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_occurrence_runs_once_across_skewed_replicas() {
    let server = RedisServer::start();
    let (period, ticks) = (1000, 10);
    let seen = fire_skewed(&server, &[0, 20, 40, 60, 80], period, ticks, 5, |job, _| {
        job.every(Duration::from_millis(1000))
    })
    .await;
    // Each replica names each tick by its own reading of the clock; a
    // reading less than half a period late names the tick's instant.
    assert_eq!(seen.len() as u64, ticks, "{seen:?}");
    for (occurrence, outcomes) in &seen {
        assert_eq!(occurrence % period, 0, "{seen:?}");
        let ran = outcomes.iter().filter(|(_, what)| *what == "ran").count();
        assert_eq!(ran, 1, "occurrence {occurrence}: {outcomes:?}");
        assert_eq!(outcomes.len(), 5, "{seen:?}");
    }
    // What is left in Redis: the last occurrence done, nothing else but
    // latches on their way out.
    let last = *seen.keys().last().unwrap();
    let done = server.cmd(&["GET", &ferrisson::layout::job_done("skewed")]);
    assert_eq!(done.as_string(), Some(last.to_string()));
    assert!(!exists(&server, "skewed"));
}

/// Occurrences named by the scheduler (`occurrence`): replicas whose
/// clocks lag by up to more than a period, with a run longer than the
/// smaller lags, still run each occurrence once; a replica that fires
/// after a later occurrence ran finds it done too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn named_occurrences_run_once_whatever_the_lag() {
    let server = RedisServer::start();
    let (period, ticks) = (1000, 6);
    let seen = fire_skewed(
        &server,
        &[0, 150, 700, 1300],
        period,
        ticks,
        300,
        |job, tick| job.occurrence(tick),
    )
    .await;
    assert_eq!(seen.len() as u64, ticks, "{seen:?}");
    for (occurrence, outcomes) in &seen {
        let ran = outcomes.iter().filter(|(_, what)| *what == "ran").count();
        assert_eq!(ran, 1, "occurrence {occurrence}: {outcomes:?}");
        assert_eq!(outcomes.len(), 4, "{seen:?}");
    }
}

/// A run of an occurrence that does not complete records nothing: one
/// dropped in the middle of its work leaves the occurrence to the next
/// run, which runs it; that one's release records it, and a third skips.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_a_completed_run_records_its_occurrence() {
    let server = RedisServer::start();
    let a = client(&server, WATCHDOG).await;
    let done_key = ferrisson::layout::job_done("billing");
    let (started_tx, started) = oneshot::channel();
    let job = a.job("billing").occurrence(17);
    let run = tokio::spawn(async move {
        job.run(|_| async move {
            started_tx.send(()).unwrap();
            std::future::pending::<()>().await
        })
        .await
    });
    soon(started).await.unwrap();
    run.abort();
    let _ = run.await;
    eventually(Duration::from_secs(10), || async {
        !exists(&server, "billing")
    })
    .await;
    assert!(!exists(&server, &done_key));

    let job = a.job("billing").occurrence(17);
    assert_eq!(
        soon(job.run(|_| async { 1 })).await.unwrap(),
        JobRun::Ran(1)
    );
    assert_eq!(
        server.cmd(&["GET", &done_key]).as_string().as_deref(),
        Some("17")
    );
    let ttl = server.pttl(&done_key);
    assert!(
        ttl > 0 && ttl <= ferrisson::config::DEFAULT_REMEMBER.as_millis() as i64,
        "{ttl}"
    );
    assert_eq!(
        soon(job.run(|_| async { unreachable!() })).await.unwrap(),
        JobRun::AlreadyDone {
            occurrence: 17,
            last_done: 17
        }
    );
    // An earlier occurrence is done too; the record is never lowered.
    let earlier = a
        .job("billing")
        .occurrence(16)
        .remember_for(Duration::from_secs(5));
    assert!(!soon(earlier.run(|_| async {})).await.unwrap().ran());
    let later = a
        .job("billing")
        .occurrence(18)
        .remember_for(Duration::from_secs(5));
    assert_eq!(
        soon(later.run(|_| async { 2 })).await.unwrap(),
        JobRun::Ran(2)
    );
    assert_eq!(
        server.cmd(&["GET", &done_key]).as_string().as_deref(),
        Some("18")
    );
    assert!(server.pttl(&done_key) <= 5_000);
    // Skips took the lock and let it go: nothing held now.
    assert!(!exists(&server, "billing"));
}

/// Named occurrences: bad settings are refused before anything is sent,
/// and a record that holds other data is left alone and refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_occurrences_are_refused_and_other_data_left_alone() {
    let server = RedisServer::start();
    let a = client(&server, WATCHDOG).await;
    for job in [
        a.job("j").every(Duration::ZERO),
        a.job("j").every(Duration::from_micros(1500)),
        a.job("j").every(ferrisson::config::MAX_DURATION * 2),
        a.job("j").occurrence(MAX_OCCURRENCE + 1),
        a.job("j").occurrence(1).remember_for(Duration::ZERO),
    ] {
        let refused = soon(job.run(|_| async { unreachable!() })).await;
        assert!(
            matches!(refused, Err(Error::InvalidArgument(_))),
            "{job:?}: {refused:?}"
        );
    }
    assert!(server.keys("*").is_empty());
    let done_key = ferrisson::layout::job_done("j");
    server.cmd(&["SET", &done_key, "not an occurrence"]);
    let refused = soon(a.job("j").occurrence(1).run(|_| async { unreachable!() })).await;
    assert!(
        matches!(refused, Err(Error::WrongType { .. })),
        "{refused:?}"
    );
    assert_eq!(
        server.cmd(&["GET", &done_key]).as_string().as_deref(),
        Some("not an occurrence")
    );
    // The lock it took is let go.
    eventually(Duration::from_secs(10), || async { !exists(&server, "j") }).await;
}

/// A job's errors name the job, not the lock it is built on: a bad name,
/// and a key that holds other data.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_jobs_errors_name_the_job() {
    let server = RedisServer::start();
    let client = client(&server, WATCHDOG).await;
    let err = soon(client.job("").run(|_| async {})).await.unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(_)), "{err:?}");
    assert!(
        err.to_string().contains("job name must not be empty"),
        "{err}"
    );

    server.cmd(&["SET", "nightly-report", "not a lock"]);
    let err = soon(client.job("nightly-report").run(|_| async {}))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::WrongType { .. }), "{err:?}");
    assert_eq!(
        err.to_string(),
        "key `nightly-report` holds a string, not a job (a lock)"
    );
}

/// A job's own watchdog lease sets how soon a cut-off runner's job is
/// free, not the client's watchdog timeout (30 s here): a replica waiting
/// for it runs it about a lease after the runner's last renewal, while a
/// live run keeps it over many leases.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_off_runner_frees_the_job_within_its_watchdog_lease() {
    const LEASE: Duration = Duration::from_millis(1500);
    const CLIENT_WATCHDOG: Duration = Duration::from_secs(30);
    let server = RedisServer::start();
    let proxy = common::proxy::Proxy::start(server.port());
    let cut_off = common::client_at(&proxy.url(), CLIENT_WATCHDOG).await;
    let other = client(&server, CLIENT_WATCHDOG).await;

    let (started, running) = oneshot::channel();
    let job = cut_off.job("leased").watchdog_lease(LEASE).label("old");
    let run = tokio::spawn(async move {
        job.run(|lease| async move {
            let _ = started.send(lease.clone());
            lease.lost().await;
        })
        .await
    });
    let lease = soon(running).await.unwrap();
    assert!(lease.is_renewed());
    let pttl = server.cmd(&["PTTL", "leased"]).as_int().unwrap();
    assert!(pttl > 0 && pttl <= LEASE.as_millis() as i64, "{pttl}");

    let (ran_at, ran) = oneshot::channel();
    let rival = other
        .job("leased")
        .watchdog_lease(LEASE)
        .wait(Duration::from_secs(60))
        .label("new");
    let waiting = tokio::spawn(async move {
        rival
            .run(|_| async move {
                let _ = ran_at.send(tokio::time::Instant::now());
            })
            .await
    });
    // Renewed every third of the lease: the run keeps the job for four
    // leases, and the waiting replica does not get in.
    let kept = tokio::time::timeout(LEASE * 4, lease.lost()).await;
    assert!(kept.is_err(), "a renewed run lost its lease");
    assert!(!lease.is_lost() && !waiting.is_finished());

    let cut = tokio::time::Instant::now();
    proxy.refuse(true);
    let ran_at = within(LEASE * 3, ran).await.unwrap();
    let failover = ran_at - cut;
    println!("job failover with a {LEASE:?} watchdog lease: {failover:?}");
    assert!(failover <= LEASE * 3, "{failover:?}");
    assert!(soon(waiting).await.unwrap().unwrap().ran());
    let overran = soon(run).await.unwrap().unwrap();
    assert!(matches!(overran, JobRun::Overran(())), "{overran:?}");
    proxy.refuse(false);
}
