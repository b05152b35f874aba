//! Scenarios 6 and 7 of the benchmark: many locks held under the
//! watchdog, many waiters on one lock. As in `scenarios`, each prints its
//! table, records its targets and returns its figures as JSON.

use std::time::{Duration, Instant};

use ferrisson::{Client, LockGuard};
use serde_json::{json, Value};

use crate::measure::{f, heap_bytes, process_cpu, Samples, Table};
use crate::scenarios::{flush, stats};
use crate::Bench;

// 6 ---------------------------------------------------------------------

/// Takes `n` locks on `client` with `parallel` tasks; returns the guards.
async fn take_many(client: &Client, prefix: &str, n: usize, parallel: usize) -> Vec<LockGuard> {
    let mut handles = Vec::with_capacity(parallel);
    for part in 0..parallel {
        let client = client.clone();
        let prefix = prefix.to_owned();
        handles.push(tokio::spawn(async move {
            let mut guards = Vec::with_capacity(n / parallel + 1);
            for i in (part..n).step_by(parallel) {
                guards.push(
                    client
                        .lock(format!("{prefix}:{i}"))
                        .lock()
                        .await
                        .expect("lock"),
                );
            }
            guards
        }));
    }
    let mut guards = Vec::with_capacity(n);
    for handle in handles {
        guards.extend(handle.await.expect("a locking task panicked"));
    }
    guards
}

/// Releases every guard with `parallel` tasks.
async fn release_all(guards: Vec<LockGuard>, parallel: usize) {
    let mut parts: Vec<Vec<LockGuard>> = (0..parallel).map(|_| Vec::new()).collect();
    for (i, guard) in guards.into_iter().enumerate() {
        parts[i % parallel].push(guard);
    }
    let handles: Vec<_> = parts
        .into_iter()
        .map(|part| {
            tokio::spawn(async move {
                for guard in part {
                    guard.unlock().await.expect("unlock");
                }
            })
        })
        .collect();
    for handle in handles {
        handle.await.expect("an unlocking task panicked");
    }
}

/// Many locks held at once: up to 100 000 under a short watchdog timeout
/// (3 s, a renewal period of 1 s), and, in a full run, a million under the
/// default timeout (30 s), as one process would hold them in production.
pub(crate) async fn watchdog(bench: &mut Bench) -> Value {
    let short = Duration::from_secs(3);
    let default = ferrisson::config::DEFAULT_WATCHDOG_TIMEOUT;
    let sizes: &[(usize, Duration)] = if bench.options.quick {
        &[(1_000, short), (10_000, short)]
    } else {
        &[
            (1_000, short),
            (10_000, short),
            (100_000, short),
            (1_000_000, default),
        ]
    };
    let mut table = Table::new(
        "6. Watchdog at scale: locks held for some renewal periods (a third of the timeout)"
            .to_string(),
        &[
            "locks",
            "timeout",
            "periods",
            "take s",
            "renewal calls/period",
            "keys per call",
            "client CPU ms/period",
            "redis CPU ms/period",
            "client heap/lock",
            "redis mem/lock",
            "leases lost",
        ],
    );
    let mut rows = Vec::new();
    for &(n, timeout) in sizes {
        let period = timeout / 3;
        let periods = if timeout > short {
            2u32
        } else {
            bench.options.pick(4u32, 3)
        };
        flush(bench).await;
        let client = bench.client(timeout).await;
        let heap_before = heap_bytes();
        let mem_before = stats(bench).await.used_memory;
        let taken = Instant::now();
        let guards = take_many(&client, "bench:wd", n, 128).await;
        let take_secs = taken.elapsed().as_secs_f64();
        let heap_held = heap_bytes();
        // The first renewals are due a period after each acquire: start the
        // window there, so that it holds whole periods of renewals only.
        tokio::time::sleep(period.saturating_sub(taken.elapsed())).await;
        let before = stats(bench).await;
        let cpu_before = process_cpu();
        // Nothing but renewals reaches Redis in this window.
        let window = period * periods;
        tokio::time::sleep(window).await;
        let after = stats(bench).await;
        let cpu_after = process_cpu();
        // What holding costs once the take's own traffic is over (the
        // latches queued for deletion, buffers of requests in flight).
        let heap_steady = heap_bytes();
        let lost = guards.iter().filter(|g| g.is_lease_lost()).count();
        let registered = client.held_locks();
        if lost > 0 || registered != n {
            bench.fail(format!(
                "watchdog with {n} locks: {lost} leases lost, {registered} of {n} still registered"
            ));
        }
        let per = f64::from(periods);
        let calls = (after.evalsha_calls - before.evalsha_calls) as f64 / per;
        let keys_per_call = n as f64 / calls;
        let client_cpu_ms = match (cpu_before, cpu_after) {
            (Some(b), Some(a)) => (a - b).as_secs_f64() * 1e3 / per,
            _ => f64::NAN,
        };
        let redis_cpu_ms = (after.cpu_secs - before.cpu_secs) * 1e3 / per;
        let heap_per_lock = (heap_steady - heap_before) as f64 / n as f64;
        let heap_after_take = (heap_held - heap_before) as f64 / n as f64;
        let redis_per_lock = after.used_memory.saturating_sub(mem_before) as f64 / n as f64;
        let released = Instant::now();
        release_all(guards, 128).await;
        let release_secs = released.elapsed().as_secs_f64();
        let left = client.held_locks();
        if left != 0 {
            bench.fail(format!(
                "watchdog with {n} locks: {left} left registered after release"
            ));
        }
        table.row(vec![
            n.to_string(),
            format!("{:.0} s", timeout.as_secs_f64()),
            periods.to_string(),
            f(take_secs, 1),
            f(calls, 0),
            f(keys_per_call, 1),
            f(client_cpu_ms, 1),
            f(redis_cpu_ms, 1),
            format!("{heap_per_lock:.0} B ({heap_after_take:.0} B)"),
            format!("{redis_per_lock:.0} B"),
            lost.to_string(),
        ]);
        let period_ms = period.as_secs_f64() * 1e3;
        let shares = format!(
            "{lost} lost; per {period_ms:.0} ms period: {calls:.0} calls, client CPU \
             {client_cpu_ms:.0} ms ({:.1}% of a core), redis CPU {redis_cpu_ms:.0} ms \
             ({:.1}% of a core)",
            100.0 * client_cpu_ms / period_ms,
            100.0 * redis_cpu_ms / period_ms
        );
        if n == 100_000 {
            bench.check(
                "watchdog at 100 000 locks: no lease lost, renewals a small share of one core",
                shares.clone(),
                lost == 0 && client_cpu_ms < 0.25 * period_ms && redis_cpu_ms < 0.25 * period_ms,
            );
        }
        if n == 1_000_000 {
            bench.check(
                "watchdog at 1 000 000 locks, 30 s timeout: no lease lost, renewals at most \
                 5% of a core on each side",
                format!("{shares}; taken in {take_secs:.1} s"),
                lost == 0 && client_cpu_ms <= 0.05 * period_ms && redis_cpu_ms <= 0.05 * period_ms,
            );
            bench.check(
                "watchdog at 1 000 000 locks: client heap at most 600 B per held lock",
                format!("{heap_per_lock:.0} B per lock"),
                heap_per_lock <= 600.0,
            );
        }
        rows.push(json!({
            "locks": n, "timeout_ms": timeout.as_millis() as u64, "periods": periods,
            "take_seconds": take_secs, "release_seconds": release_secs,
            "renewal_calls_per_period": calls, "keys_per_call": keys_per_call,
            "client_cpu_ms_per_period": client_cpu_ms, "redis_cpu_ms_per_period": redis_cpu_ms,
            "client_heap_bytes_per_lock": heap_per_lock,
            "client_heap_bytes_per_lock_right_after_take": heap_after_take,
            "redis_bytes_per_lock": redis_per_lock,
            "leases_lost": lost,
        }));
    }
    table.print();
    println!(
        "(calls: EVALSHA calls the server counted in the window, when only renewals run; \
         the window starts one period after the first acquire; heap per lock: bytes the \
         process allocated and still keeps at the window's end, guards and registry \
         included, and in brackets right after the take, with its traffic in flight)"
    );
    Value::Array(rows)
}

// 7 ---------------------------------------------------------------------

/// Many tasks of one client waiting for one lock: what they cost, and how
/// many acquire attempts each unlock causes.
pub(crate) async fn waiters(bench: &mut Bench) -> Value {
    flush(bench).await;
    let n = 1_000usize;
    let holder = bench
        .client(ferrisson::config::DEFAULT_WATCHDOG_TIMEOUT)
        .await;
    let waiting = bench
        .client(ferrisson::config::DEFAULT_WATCHDOG_TIMEOUT)
        .await;
    let name = "bench:herd";
    let mut current = holder.lock(name).lock().await.expect("lock");
    let heap_before = heap_bytes();
    let before = stats(bench).await;

    // Each waiter sends its guard here, so that the next unlock is timed by
    // this task alone.
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<LockGuard>();
    for _ in 0..n {
        let lock = waiting.lock(name);
        let tx = tx.clone();
        tokio::spawn(async move {
            let guard = lock.lock().await.expect("lock");
            let _ = tx.send(guard);
        });
    }
    drop(tx);
    // Every waiter has tried once, subscribed, and tried again.
    let settled = Instant::now();
    loop {
        let now = stats(bench).await;
        if now.evalsha_calls - before.evalsha_calls >= 2 * n as u64 && waiting.subscriptions() == 1
        {
            break;
        }
        assert!(
            settled.elapsed() < Duration::from_secs(60),
            "waiters did not settle"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let heap_waiting = heap_bytes();
    let numsub: (String, u64) = redis::cmd("PUBSUB")
        .arg("NUMSUB")
        .arg(format!("redisson_lock__channel:{{{name}}}"))
        .query_async(&mut bench.admin)
        .await
        .expect("PUBSUB NUMSUB");
    let subscriptions = waiting.subscriptions();
    let subscribes = waiting.subscribes_sent();
    if subscriptions != 1 || subscribes != 1 || numsub.1 != 1 {
        bench.fail(format!(
            "{n} waiters: {subscriptions} subscriptions, {subscribes} SUBSCRIBE sent, \
             {} on the server; one is the promise",
            numsub.1
        ));
    }

    // Unlock, wait for the next holder, count the acquire attempts between.
    let mut attempts: Vec<u64> = Vec::with_capacity(n);
    let mut handoffs = Samples::with_capacity(n);
    for _ in 0..n {
        let s0 = stats(bench).await;
        let start = Instant::now();
        current.unlock().await.expect("unlock");
        current = rx.recv().await.expect("a waiter's guard");
        handoffs.push(start.elapsed());
        let s1 = stats(bench).await;
        // Less the one EVALSHA of the release itself.
        attempts.push(s1.evalsha_calls - s0.evalsha_calls - 1);
    }
    current.unlock().await.expect("unlock");
    let first = attempts[0];
    let mean = attempts.iter().sum::<u64>() as f64 / n as f64;
    let max = attempts.iter().copied().max().unwrap_or(0);
    let heap_per_waiter = (heap_waiting - heap_before) as f64 / n as f64;
    let mut table = Table::new(
        format!("7. Waiters at scale: {n} tasks of one client waiting for one lock"),
        &[
            "waiters",
            "heap/waiter",
            "subscriptions",
            "SUBSCRIBE sent",
            "server subscribers",
            "attempts after 1st unlock",
            "mean attempts/unlock",
            "max",
            "unlock → next holder p50 µs",
        ],
    );
    let p50 = handoffs.p50();
    table.row(vec![
        n.to_string(),
        format!("{heap_per_waiter:.0} B"),
        subscriptions.to_string(),
        subscribes.to_string(),
        numsub.1.to_string(),
        first.to_string(),
        f(mean, 2),
        max.to_string(),
        f(p50, 1),
    ]);
    table.print();
    println!("(attempts: EVALSHA calls the server counted between an unlock and the next holder's lock returning, less the unlock's own)");
    json!({
        "waiters": n, "heap_bytes_per_waiter": heap_per_waiter,
        "subscriptions": subscriptions, "subscribes_sent": subscribes,
        "server_subscribers": numsub.1,
        "attempts_after_first_unlock": first, "mean_attempts_per_unlock": mean,
        "max_attempts_per_unlock": max, "unlock_to_next_holder_p50_us": p50,
    })
}
