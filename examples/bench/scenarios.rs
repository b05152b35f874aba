//! Scenarios 1 to 7 of the benchmark. Each prints its table, records
//! the targets of `docs/benchmarks.md` it measures, and returns its figures as JSON.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex};
use std::time::{Duration, Instant};

use ferrisson::{Client, LockGuard};
use redis::aio::ConnectionManager;
use redis::{AsyncCommands, Script};
use serde_json::{json, Value};

use crate::measure::{f, heap_bytes, micros, process_cpu, Samples, ServerStats, Table};
use crate::Bench;

/// The raw baseline: one EVALSHA of a script that does nothing, on a key.
static TRIVIAL: LazyLock<Script> = LazyLock::new(|| Script::new("return 1"));

/// ferrisson's own acquire and release scripts (Redisson's protocol), for
/// a baseline that does the same server work without the library.
static ACQUIRE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../lua/acquire.lua")));
static RELEASE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../lua/release.lua")));

/// The simple lock's release: delete the key only while it still holds this
/// acquire's token.
static COMPARE_AND_DELETE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        "if redis.call('get', KEYS[1]) == ARGV[1] then \
             return redis.call('del', KEYS[1]) \
         end \
         return 0",
    )
});

/// The simplest safe lock, as a baseline: `SET key token NX PX` to acquire
/// and a compare-and-delete script to release. It has no reentrancy, no
/// wake-up, no watchdog and no safety against a lost reply.
pub(crate) async fn simple_pair(conn: &mut ConnectionManager, key: &str) {
    let token = uuid::Uuid::new_v4().to_string();
    let taken: Option<String> = redis::cmd("SET")
        .arg(key)
        .arg(&token)
        .arg("NX")
        .arg("PX")
        .arg(30_000)
        .query_async(conn)
        .await
        .expect("SET NX PX");
    assert!(taken.is_some(), "{key} is free");
    let deleted: i64 = COMPARE_AND_DELETE
        .key(key)
        .arg(&token)
        .invoke_async(conn)
        .await
        .expect("compare-and-delete");
    assert_eq!(deleted, 1);
}

/// The protocol's two scripts called straight from redis-rs: what one lock
/// and unlock cost the server, with no library code around them.
async fn scripts_pair(conn: &mut ConnectionManager, key: &str, owner: &str) {
    // Unique over the whole run: a latch left by an earlier request with the
    // same id would make this one a resend, which changes nothing.
    static REQUESTS: AtomicU64 = AtomicU64::new(0);
    let request = REQUESTS.fetch_add(1, Ordering::Relaxed);
    let acquired: Option<i64> = ACQUIRE
        .key(key)
        .key(format!("ferrisson_acquire_latch:{{{key}}}:{request:032x}"))
        .arg(30_000)
        .arg(owner)
        .arg(30_000)
        .arg("1")
        .invoke_async(conn)
        .await
        .expect("acquire script");
    assert_eq!(acquired, None, "{key} is free");
    let released: Option<i64> = RELEASE
        .key(key)
        .key(format!("redisson_lock__channel:{{{key}}}"))
        .key(format!("redisson_unlock_latch:{{{key}}}:{request:032x}"))
        .arg(0)
        .arg(30_000)
        .arg(owner)
        .arg("publish")
        .arg(18_000)
        .invoke_async(conn)
        .await
        .expect("release script");
    assert_eq!(released, Some(1));
}

async fn raw_call(conn: &mut ConnectionManager, key: &str) {
    let _: i64 = TRIVIAL
        .key(key)
        .invoke_async(conn)
        .await
        .expect("raw EVALSHA");
}

/// Two raw round trips: what a lock and an unlock cost at the least.
pub(crate) async fn raw_pair(conn: &mut ConnectionManager, key: &str) {
    raw_call(conn, key).await;
    raw_call(conn, key).await;
}

async fn stats(bench: &mut Bench) -> ServerStats {
    ServerStats::read(&mut bench.admin)
        .await
        .expect("INFO from the server")
}

/// Deletes the benchmark's keys between scenarios, so that one scenario's
/// leftovers (unlock latches, expired locks) do not weigh on the next.
pub(crate) async fn flush(bench: &mut Bench) {
    let _: () = redis::cmd("FLUSHDB")
        .query_async(&mut bench.admin)
        .await
        .expect("FLUSHDB");
}

// 1 ---------------------------------------------------------------------

/// One EVALSHA of a trivial script, sequential: the unit.
pub(crate) async fn round_trip(bench: &mut Bench) -> Value {
    let n = bench.options.pick(20_000, 3_000);
    let mut conn = bench.raw.clone();
    for _ in 0..500 {
        raw_call(&mut conn, "bench:rt").await;
    }
    let mut samples = Samples::with_capacity(n);
    for _ in 0..n {
        let start = Instant::now();
        raw_call(&mut conn, "bench:rt").await;
        samples.push(start.elapsed());
    }
    let (p50, p99) = (samples.p50(), samples.p99());
    bench.rtt_us = p50;
    let mut table = Table::new(
        "1. Round trip: one EVALSHA of `return 1`, sequential, one task",
        &["calls", "p50 µs", "p99 µs"],
    );
    table.row(vec![n.to_string(), f(p50, 1), f(p99, 1)]);
    table.print();
    json!({ "calls": n, "p50_us": p50, "p99_us": p99 })
}

// 2 ---------------------------------------------------------------------

/// Lock + unlock, one task, no contention; a raw pair measured between
/// every two lock pairs, so that both see the same machine.
pub(crate) async fn uncontended(bench: &mut Bench) -> Value {
    flush(bench).await;
    let n = bench.options.pick(10_000, 2_000);
    let client = bench
        .client(ferrisson::config::DEFAULT_WATCHDOG_TIMEOUT)
        .await;
    let mut conn = bench.raw.clone();
    let mut table = Table::new(
        "2. Uncontended lock + unlock, one task",
        &[
            "mode",
            "keys",
            "pairs",
            "p50 µs",
            "p99 µs",
            "raw pair p50 µs",
            "p50 / raw pair",
            "p50 / 2 round trips",
            "simple lock p50 µs",
            "p50 / simple lock",
        ],
    );
    let mut rows = Vec::new();
    for (mode, lease) in [
        ("watchdog", None),
        ("lease 10 s", Some(Duration::from_secs(10))),
    ] {
        for hot in [false, true] {
            let keys = if hot { "one hot key" } else { "distinct keys" };
            let mut pairs = Samples::with_capacity(n);
            let mut raws = Samples::with_capacity(n);
            let mut simples = Samples::with_capacity(n);
            let hot_lock = client.lock("bench:u:hot");
            for i in 0..(n + 200) {
                let lock = if hot {
                    hot_lock.clone()
                } else {
                    client.lock(format!("bench:u:{i}"))
                };
                let start = Instant::now();
                let guard = match lease {
                    None => lock.lock().await,
                    Some(lease) => lock.lock_with_lease(lease).await,
                }
                .expect("lock");
                guard.unlock().await.expect("unlock");
                let pair = start.elapsed();
                let start = Instant::now();
                raw_pair(&mut conn, lock.name()).await;
                let raw = start.elapsed();
                let simple_key = format!("{}:simple", lock.name());
                let start = Instant::now();
                simple_pair(&mut conn, &simple_key).await;
                let simple = start.elapsed();
                // The first 200 warm the connection and the scripts up.
                if i >= 200 {
                    pairs.push(pair);
                    raws.push(raw);
                    simples.push(simple);
                }
            }
            let (p50, p99, raw_p50) = (pairs.p50(), pairs.p99(), raws.p50());
            let simple_p50 = simples.p50();
            let vs_pair = p50 / raw_p50;
            let vs_unit = p50 / (2.0 * bench.rtt_us);
            let vs_simple = p50 / simple_p50;
            table.row(vec![
                mode.into(),
                keys.into(),
                n.to_string(),
                f(p50, 1),
                f(p99, 1),
                f(raw_p50, 1),
                format!("{vs_pair:.2}x"),
                format!("{vs_unit:.2}x"),
                f(simple_p50, 1),
                format!("{vs_simple:.2}x"),
            ]);
            bench.check(
                "uncontended lock + unlock p50 within 1.25 x two raw round trips",
                format!(
                    "{mode}, {keys}: {p50:.1} µs = {vs_pair:.2} x the raw pair's {raw_p50:.1} µs \
                     ({vs_unit:.2} x two round trips of scenario 1)"
                ),
                vs_pair <= 1.25,
            );
            rows.push(json!({
                "mode": mode, "keys": keys, "pairs": n,
                "p50_us": p50, "p99_us": p99, "raw_pair_p50_us": raw_p50,
                "p50_per_raw_pair": vs_pair, "p50_per_two_round_trips": vs_unit,
                "simple_lock_p50_us": simple_p50, "p50_per_simple_lock": vs_simple,
            }));
        }
    }
    table.print();
    println!(
        "(raw pair: two EVALSHA of `return 1`; simple lock: `SET NX PX`, then a \
         compare-and-delete script; both timed between every two lock pairs, so that all \
         three see the same moments of the machine; the target is checked against the raw pair)"
    );
    Value::Array(rows)
}

// 3 ---------------------------------------------------------------------

/// Nested holds in one task: acquire `depth` of them, then release them.
pub(crate) async fn reentrancy(bench: &mut Bench) -> Value {
    flush(bench).await;
    let client = bench
        .client(ferrisson::config::DEFAULT_WATCHDOG_TIMEOUT)
        .await;
    let lock = client.lock("bench:reentrant");
    let mut table = Table::new(
        "3. Reentrancy: nested holds of one lock in one task",
        &[
            "depth",
            "repeats",
            "acquire µs/level",
            "release µs/level",
            "level µs (both)",
            "round trips per level",
        ],
    );
    let mut rows = Vec::new();
    for depth in [1usize, 10, 100] {
        let repeats = bench.options.pick(3_000, 600) / depth;
        let mut acquire = Duration::ZERO;
        let mut release = Duration::ZERO;
        for _ in 0..repeats {
            let mut guards: Vec<LockGuard> = Vec::with_capacity(depth);
            let start = Instant::now();
            for _ in 0..depth {
                guards.push(lock.lock().await.expect("lock"));
            }
            acquire += start.elapsed();
            assert_eq!(lock.hold_count().await.expect("hold count"), depth as u32);
            let start = Instant::now();
            while let Some(guard) = guards.pop() {
                guard.unlock().await.expect("unlock");
            }
            release += start.elapsed();
        }
        let levels = (repeats * depth) as f64;
        let (acq, rel) = (micros(acquire) / levels, micros(release) / levels);
        let per_rtt = (acq + rel) / bench.rtt_us;
        table.row(vec![
            depth.to_string(),
            repeats.to_string(),
            f(acq, 1),
            f(rel, 1),
            f(acq + rel, 1),
            f(per_rtt, 2),
        ]);
        rows.push(json!({
            "depth": depth, "repeats": repeats,
            "acquire_us_per_level": acq, "release_us_per_level": rel,
            "round_trips_per_level": per_rtt,
        }));
    }
    table.print();
    println!("(a level is one acquire and one release: two round trips at the least)");
    Value::Array(rows)
}

// 4 ---------------------------------------------------------------------

/// A throughput run: pairs per second, and the share of one core the
/// server and this process used meanwhile.
#[derive(Debug, Clone, Copy)]
struct Rate {
    pairs_per_s: f64,
    redis_cpu: f64,
    client_cpu: f64,
}

/// Runs [`pairs_per_second`] with the server's and the process's CPU time
/// measured around it.
async fn rate(
    bench: &mut Bench,
    tasks: usize,
    run: Duration,
    pair: impl Fn(usize, u64) -> PairFuture + Send + Sync + 'static,
) -> Rate {
    let before = stats(bench).await;
    let cpu_before = process_cpu();
    let start = Instant::now();
    let pairs_per_s = pairs_per_second(tasks, run, pair).await;
    let wall = start.elapsed().as_secs_f64();
    let after = stats(bench).await;
    let client_cpu = match (cpu_before, process_cpu()) {
        (Some(b), Some(a)) => (a - b).as_secs_f64() / wall,
        _ => f64::NAN,
    };
    Rate {
        pairs_per_s,
        redis_cpu: (after.cpu_secs - before.cpu_secs) / wall,
        client_cpu,
    }
}

/// Pairs per second of `tasks` tasks for `run`, each on its own keys.
async fn pairs_per_second(
    tasks: usize,
    run: Duration,
    pair: impl Fn(usize, u64) -> PairFuture + Send + Sync + 'static,
) -> f64 {
    let pair = Arc::new(pair);
    let done = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let end = start + run;
    let mut handles = Vec::with_capacity(tasks);
    for task in 0..tasks {
        let (pair, done) = (Arc::clone(&pair), Arc::clone(&done));
        handles.push(tokio::spawn(async move {
            let mut i = 0u64;
            while Instant::now() < end {
                pair(task, i).await;
                i += 1;
            }
            done.fetch_add(i, Ordering::Relaxed);
        }));
    }
    for handle in handles {
        handle.await.expect("a throughput task panicked");
    }
    done.load(Ordering::Relaxed) as f64 / start.elapsed().as_secs_f64()
}

/// One lock + unlock (or one raw pair), boxed so that every kind shares
/// one driver.
type PairFuture = std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>;

/// Independent locks under concurrency, against raw pairs at the same
/// concurrency over the same kind of connection.
pub(crate) async fn throughput(bench: &mut Bench) -> Value {
    flush(bench).await;
    let run = bench
        .options
        .pick(Duration::from_secs(3), Duration::from_millis(500));
    let client = bench
        .client(ferrisson::config::DEFAULT_WATCHDOG_TIMEOUT)
        .await;
    const KEYS_PER_TASK: u64 = 8;
    let name = |task: usize, i: u64| format!("bench:tp:{task}:{}", i % KEYS_PER_TASK);
    let mut table = Table::new(
        format!(
            "4. Independent locks: pairs per second over {:.1} s, each task on its own keys",
            run.as_secs_f64()
        ),
        &[
            "tasks",
            "raw pairs/s",
            "CPU redis / client",
            "scripts only pairs/s",
            "vs raw",
            "simple lock pairs/s",
            "vs raw",
            "watchdog pairs/s",
            "vs raw",
            "vs simple",
            "CPU redis / client",
            "lease pairs/s",
            "vs raw",
            "vs simple",
            "CPU redis / client",
        ],
    );
    let mut rows = Vec::new();
    let cpu = |r: Rate| format!("{:.0}% / {:.0}%", 100.0 * r.redis_cpu, 100.0 * r.client_cpu);
    for tasks in [1usize, 16, 64, 256] {
        let conn = bench.raw.clone();
        let raw = rate(bench, tasks, run, move |task, i| {
            let mut conn = conn.clone();
            let key = name(task, i);
            Box::pin(async move { raw_pair(&mut conn, &key).await })
        })
        .await;
        let conn = bench.raw.clone();
        let scripts = rate(bench, tasks, run, move |task, i| {
            let mut conn = conn.clone();
            let key = name(task, i);
            Box::pin(async move {
                let owner = format!("8d0d4b7e-2a4c-4f7b-9a0e-5a1a1f0e7c11:{task}");
                scripts_pair(&mut conn, &key, &owner).await
            })
        })
        .await;
        let conn = bench.raw.clone();
        let simple = rate(bench, tasks, run, move |task, i| {
            let mut conn = conn.clone();
            let key = format!("{}:simple", name(task, i));
            Box::pin(async move { simple_pair(&mut conn, &key).await })
        })
        .await;
        let c = client.clone();
        let watchdog = rate(bench, tasks, run, move |task, i| {
            let lock = c.lock(name(task, i));
            Box::pin(async move {
                lock.lock()
                    .await
                    .expect("lock")
                    .unlock()
                    .await
                    .expect("unlock");
            })
        })
        .await;
        let c = client.clone();
        let leased = rate(bench, tasks, run, move |task, i| {
            let lock = c.lock(name(task, i));
            Box::pin(async move {
                let guard = lock
                    .lock_with_lease(Duration::from_secs(10))
                    .await
                    .expect("lock");
                guard.unlock().await.expect("unlock");
            })
        })
        .await;
        let per_raw = |r: Rate| r.pairs_per_s / raw.pairs_per_s;
        let per_simple = |r: Rate| r.pairs_per_s / simple.pairs_per_s;
        table.row(vec![
            tasks.to_string(),
            f(raw.pairs_per_s, 0),
            cpu(raw),
            f(scripts.pairs_per_s, 0),
            format!("{:.2}x", per_raw(scripts)),
            f(simple.pairs_per_s, 0),
            format!("{:.2}x", per_raw(simple)),
            f(watchdog.pairs_per_s, 0),
            format!("{:.2}x", per_raw(watchdog)),
            format!("{:.2}x", per_simple(watchdog)),
            cpu(watchdog),
            f(leased.pairs_per_s, 0),
            format!("{:.2}x", per_raw(leased)),
            format!("{:.2}x", per_simple(leased)),
            cpu(leased),
        ]);
        if tasks == 64 {
            for (mode, value) in [("watchdog", watchdog), ("lease", leased)] {
                bench.check(
                    "independent-lock throughput at 64 tasks at least half the raw pair rate",
                    format!(
                        "{mode}: {:.0} pairs/s = {:.2} x raw {:.0} (the protocol's scripts \
                         alone: {:.2} x raw)",
                        value.pairs_per_s,
                        per_raw(value),
                        raw.pairs_per_s,
                        per_raw(scripts)
                    ),
                    per_raw(value) >= 0.5,
                );
                bench.check(
                    "independent-lock throughput at 64 tasks at least 0.8 x the simple lock",
                    format!(
                        "{mode}: {:.0} pairs/s = {:.2} x the simple lock's {:.0}",
                        value.pairs_per_s,
                        per_simple(value),
                        simple.pairs_per_s
                    ),
                    per_simple(value) >= 0.8,
                );
            }
        }
        let json_rate = |r: Rate| {
            json!({ "pairs_per_s": r.pairs_per_s, "vs_raw": per_raw(r), "vs_simple": per_simple(r),
                    "redis_cpu_share": r.redis_cpu, "client_cpu_share": r.client_cpu })
        };
        rows.push(json!({
            "tasks": tasks, "raw": json_rate(raw), "scripts_only": json_rate(scripts),
            "simple_lock": json_rate(simple),
            "watchdog": json_rate(watchdog), "lease": json_rate(leased),
        }));
    }
    table.print();
    println!(
        "(raw: two EVALSHA of `return 1`; scripts only: the acquire and release scripts \
         called straight from redis-rs, the server work of a lock pair without the library; \
         simple lock: `SET NX PX`, then a compare-and-delete script; \
         CPU: share of one core used by the server and by this process during the run)"
    );
    Value::Array(rows)
}

// 5 ---------------------------------------------------------------------

/// Tasks over two clients competing for one key; each holder increments a
/// counter in Redis with GET then SET, which loses updates unless the lock
/// excludes.
pub(crate) async fn handoff(bench: &mut Bench) -> Value {
    flush(bench).await;
    let run = bench
        .options
        .pick(Duration::from_secs(3), Duration::from_millis(700));
    let clients = [
        bench
            .client(ferrisson::config::DEFAULT_WATCHDOG_TIMEOUT)
            .await,
        bench
            .client(ferrisson::config::DEFAULT_WATCHDOG_TIMEOUT)
            .await,
    ];
    let mut table = Table::new(
        format!(
            "5. Contended hand-off: one key, tasks over two clients, {:.1} s",
            run.as_secs_f64()
        ),
        &[
            "waiters",
            "acquisitions",
            "acq/s",
            "counter",
            "to another task",
            "hand-off p50 µs",
            "p99 µs",
            "p50 in round trips",
        ],
    );
    let mut rows = Vec::new();
    for waiters in [2usize, 8, 32] {
        let counter_key = format!("bench:handoff:{waiters}:counter");
        let lock_name = format!("bench:handoff:{waiters}");
        // (task, when it called unlock) of the last holder.
        let last: Arc<Mutex<Option<(usize, Instant)>>> = Arc::new(Mutex::new(None));
        let start = Instant::now();
        let end = start + run;
        let mut handles = Vec::new();
        for task in 0..waiters {
            let lock = clients[task % 2].lock(lock_name.as_str());
            let mut conn = bench.raw.clone();
            let (counter_key, last) = (counter_key.clone(), Arc::clone(&last));
            handles.push(tokio::spawn(async move {
                let mut handoffs = Samples::default();
                let (mut acquired, mut same_task) = (0u64, 0u64);
                while Instant::now() < end {
                    let guard = lock.lock().await.expect("lock");
                    let now = Instant::now();
                    acquired += 1;
                    match last.lock().expect("not poisoned").take() {
                        Some((previous, at)) if previous != task => handoffs.push(now - at),
                        Some(_) => same_task += 1,
                        None => {}
                    }
                    let value: Option<u64> = conn.get(&counter_key).await.expect("GET");
                    let _: () = conn
                        .set(&counter_key, value.unwrap_or(0) + 1)
                        .await
                        .expect("SET");
                    *last.lock().expect("not poisoned") = Some((task, Instant::now()));
                    guard.unlock().await.expect("unlock");
                }
                (handoffs, acquired, same_task)
            }));
        }
        let mut handoffs = Samples::default();
        let (mut acquired, mut same_task) = (0u64, 0u64);
        for handle in handles {
            let (h, a, s) = handle.await.expect("a hand-off task panicked");
            handoffs.extend(h);
            acquired += a;
            same_task += s;
        }
        let elapsed = start.elapsed().as_secs_f64();
        let mut conn = bench.raw.clone();
        let counter: u64 = conn.get(&counter_key).await.expect("GET counter");
        if counter != acquired {
            bench.fail(format!(
                "hand-off with {waiters} waiters: counter {counter} after {acquired} acquisitions"
            ));
        }
        let (p50, p99) = (handoffs.p50(), handoffs.p99());
        let in_rtt = p50 / bench.rtt_us;
        let others = handoffs.len();
        table.row(vec![
            waiters.to_string(),
            acquired.to_string(),
            f(acquired as f64 / elapsed, 0),
            counter.to_string(),
            format!("{others} ({:.0}%)", 100.0 * others as f64 / acquired as f64),
            f(p50, 1),
            f(p99, 1),
            f(in_rtt, 2),
        ]);
        bench.check(
            "contended hand-off p50 within 3 raw round trips",
            format!(
                "{waiters} waiters: {p50:.1} µs = {in_rtt:.2} round trips of {:.1} µs",
                bench.rtt_us
            ),
            in_rtt <= 3.0,
        );
        rows.push(json!({
            "waiters": waiters, "acquisitions": acquired,
            "acquisitions_per_s": acquired as f64 / elapsed, "counter": counter,
            "handoffs_to_another_task": others, "reacquired_by_same_task": same_task,
            "handoff_p50_us": p50, "handoff_p99_us": p99, "handoff_p50_round_trips": in_rtt,
        }));
    }
    table.print();
    println!(
        "(hand-off: from the holder's unlock call to the next holder's lock returning, \
         counted when the next holder is another task; the counter is GET then SET under \
         the lock and must equal the acquisitions)"
    );
    Value::Array(rows)
}

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
