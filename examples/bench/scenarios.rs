//! Scenarios 1 to 5 of the benchmark (6 and 7 are in `holding`). Each
//! prints its table, records the targets of `docs/benchmarks.md` it
//! measures, and returns its figures as JSON.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex};
use std::time::{Duration, Instant};

use ferrisson::LockGuard;
use redis::aio::ConnectionManager;
use redis::{AsyncCommands, Script};
use serde_json::{json, Value};

use crate::measure::{f, micros, process_cpu, Samples, ServerStats, Table};
use crate::server_time::{baseline_lock_unlock, delete_latch, lean_pair, Latch};
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
pub(crate) async fn scripts_pair(conn: &mut ConnectionManager, key: &str, owner: &str) {
    let request = script_acquire_as(conn, key, owner).await;
    script_release_as(conn, key, owner, request).await;
}

/// The owner of [`script_acquire`] and [`script_release`].
const SCRIPT_OWNER: &str = "8d0d4b7e-2a4c-4f7b-9a0e-5a1a1f0e7c11:script";

/// ferrisson's acquire script, sent raw, on a free `key`: its request id.
pub(crate) async fn script_acquire(conn: &mut ConnectionManager, key: &str) -> u64 {
    script_acquire_as(conn, key, SCRIPT_OWNER).await
}

/// ferrisson's release script, sent raw, of [`script_acquire`]'s hold.
pub(crate) async fn script_release(conn: &mut ConnectionManager, key: &str, request: u64) {
    script_release_as(conn, key, SCRIPT_OWNER, request).await
}

async fn script_acquire_as(conn: &mut ConnectionManager, key: &str, owner: &str) -> u64 {
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
    request
}

async fn script_release_as(conn: &mut ConnectionManager, key: &str, owner: &str, request: u64) {
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

pub(crate) async fn raw_call(conn: &mut ConnectionManager, key: &str) {
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

pub(crate) async fn stats(bench: &mut Bench) -> ServerStats {
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
            "Redisson's scripts p50 µs",
            "theirs / raw pair",
            "p50 / theirs",
            "our scripts p50 µs",
            "ours / theirs",
            "lean scripts p50 µs",
            "p50 / lean scripts",
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
            let mut theirs = Samples::with_capacity(n);
            let mut ours = Samples::with_capacity(n);
            let mut leans = Samples::with_capacity(n);
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
                // Redisson's acquire and release, sent raw: the two calls
                // its caller waits for (its client deletes the unlock
                // latch after the release returned).
                let their_key = format!("{}:redisson", lock.name());
                let start = Instant::now();
                let latch =
                    baseline_lock_unlock(&mut conn, &their_key, SCRIPT_OWNER, Latch::Redisson)
                        .await;
                let their = start.elapsed();
                if let Some(latch) = latch {
                    delete_latch(&mut conn, latch).await;
                }
                // ferrisson's scripts, sent raw: what the library adds to
                // them is the rest of the pair's time.
                let our_key = format!("{}:scripts", lock.name());
                let start = Instant::now();
                scripts_pair(&mut conn, &our_key, SCRIPT_OWNER).await;
                let our = start.elapsed();
                // The lean scripts, sent raw: the floor of a library that
                // sends them (by default; not with `--latched`).
                let lean_key = format!("{}:lean", lock.name());
                let start = Instant::now();
                lean_pair(&mut conn, &lean_key, SCRIPT_OWNER).await;
                let lean = start.elapsed();
                // The first 200 warm the connection and the scripts up.
                if i >= 200 {
                    pairs.push(pair);
                    raws.push(raw);
                    simples.push(simple);
                    theirs.push(their);
                    ours.push(our);
                    leans.push(lean);
                }
            }
            let (p50, p99, raw_p50) = (pairs.p50(), pairs.p99(), raws.p50());
            let simple_p50 = simples.p50();
            let vs_pair = p50 / raw_p50;
            let vs_unit = p50 / (2.0 * bench.rtt_us);
            let vs_simple = p50 / simple_p50;
            let their_p50 = theirs.p50();
            let (theirs_vs_raw, vs_theirs) = (their_p50 / raw_p50, p50 / their_p50);
            let our_p50 = ours.p50();
            let lean_p50 = leans.p50();
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
                f(their_p50, 1),
                format!("{theirs_vs_raw:.2}x"),
                format!("{vs_theirs:.2}x"),
                f(our_p50, 1),
                format!("{:.2}x", our_p50 / their_p50),
                f(lean_p50, 1),
                format!("{:.2}x", p50 / lean_p50),
            ]);
            bench.check(
                "uncontended lock + unlock p50 within 1.25 x two raw round trips",
                format!(
                    "{mode}, {keys}: {p50:.1} µs = {vs_pair:.2} x the raw pair's {raw_p50:.1} µs \
                     ({vs_unit:.2} x two round trips of scenario 1)"
                ),
                vs_pair <= 1.25,
            );
            bench.check(
                "uncontended lock + unlock p50 within 1.10 x the raw pair (issue 53)",
                format!("{mode}, {keys}: {vs_pair:.2} x"),
                vs_pair <= 1.10,
            );
            rows.push(json!({
                "mode": mode, "keys": keys, "pairs": n,
                "p50_us": p50, "p99_us": p99, "raw_pair_p50_us": raw_p50,
                "p50_per_raw_pair": vs_pair, "p50_per_two_round_trips": vs_unit,
                "simple_lock_p50_us": simple_p50, "p50_per_simple_lock": vs_simple,
                "redisson_scripts_p50_us": their_p50, "redisson_scripts_per_raw_pair": theirs_vs_raw,
                "p50_per_redisson_scripts": vs_theirs, "our_scripts_p50_us": our_p50,
                "lean_scripts_p50_us": lean_p50, "p50_per_lean_scripts": p50 / lean_p50,
            }));
        }
    }
    table.print();
    println!(
        "(raw pair: two EVALSHA of `return 1`; simple lock: `SET NX PX`, then a \
         compare-and-delete script; Redisson's scripts: the bench's baseline of scenario 10 \
         (Redisson's acquire, then its release with its unlock latch; the latch's DEL \
         untimed), sent raw: the least any client on this layout can take; our scripts: \
         ferrisson's acquire and release, sent raw; lean scripts: `lua/lean_acquire.lua` and \
         `lua/lean_release.lua`, sent raw (what the library sends by default); each timed between \
         every two lock pairs, so that all see the same moments of the machine; the target is \
         checked against the raw pair)"
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
    let (pairs, took) = run_pairs(tasks, run, pair).await;
    pairs as f64 / took.as_secs_f64()
}

/// Runs pairs in `tasks` tasks for `run`, each on its own keys: how many
/// were made, and in how long.
pub(crate) async fn run_pairs(
    tasks: usize,
    run: Duration,
    pair: impl Fn(usize, u64) -> PairFuture + Send + Sync + 'static,
) -> (u64, Duration) {
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
    (done.load(Ordering::Relaxed), start.elapsed())
}

pub(crate) type PairFuture = std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>;

/// The lease of a leased pair: longer than any pair takes.
pub(crate) const PAIR_LEASE: Duration = Duration::from_secs(10);

/// One lock and unlock of the lock `name` by `client`: in watchdog mode,
/// or with `lease`. What scenarios 4 and 10 run in each task.
pub(crate) fn lock_pair(
    client: &ferrisson::Client,
    name: String,
    lease: Option<Duration>,
) -> PairFuture {
    let lock = client.lock(name);
    Box::pin(async move {
        let guard = match lease {
            None => lock.lock().await,
            Some(lease) => lock.lock_with_lease(lease).await,
        }
        .expect("lock");
        guard.unlock().await.expect("unlock");
    })
}

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
            lock_pair(&c, name(task, i), None)
        })
        .await;
        let c = client.clone();
        let leased = rate(bench, tasks, run, move |task, i| {
            lock_pair(&c, name(task, i), Some(PAIR_LEASE))
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
    let split = bench.options.split;
    let mut heads = vec![
        "waiters",
        "acquisitions",
        "acq/s",
        "counter",
        "to another task",
        "scripts per acq.",
        "hand-off p50 µs",
        "p99 µs",
        "p50 in round trips",
    ];
    if split {
        heads.extend([
            "split",
            "unlock call to message p50 µs",
            "message to lock returned p50 µs",
            "in round trips",
            "manager's hand-on p50 µs",
        ]);
    }
    let mut table = Table::new(
        format!(
            "5. Contended hand-off: one key, tasks over two clients, {:.1} s",
            run.as_secs_f64()
        ),
        &heads,
    );
    let mut rows = Vec::new();
    for waiters in [2usize, 8, 32] {
        let counter_key = format!("bench:handoff:{waiters}:counter");
        let lock_name = format!("bench:handoff:{waiters}");
        // The last holder: its task, when it called unlock, and which
        // release that was (the counter it read: the acquisitions before
        // its own, as each holder releases once, in turn).
        let last: Arc<Mutex<Option<(usize, Instant, u64)>>> = Arc::new(Mutex::new(None));
        // With `--split`: when each unlock message reached a subscriber of
        // the bench's own on the lock's channel, stamped as its connection
        // reads it, which splits a hand-off into the release's way to a
        // subscriber and the waiter's way from there; and where a
        // `ConnectionManager` (as the library's subscription connection)
        // hands the same messages on.
        let channel = format!("redisson_lock__channel:{{{lock_name}}}");
        let clocks = match split {
            true => Some((
                crate::idle::message_clock(bench, &channel, false).await,
                crate::idle::message_clock(bench, &channel, true).await,
            )),
            false => None,
        };
        let before = stats(bench).await;
        let start = Instant::now();
        let end = start + run;
        let mut handles = Vec::new();
        for task in 0..waiters {
            let lock = clients[task % 2].lock(lock_name.as_str());
            let mut conn = bench.raw.clone();
            let (counter_key, last) = (counter_key.clone(), Arc::clone(&last));
            handles.push(tokio::spawn(async move {
                let mut handoffs = Vec::new();
                let (mut acquired, mut same_task) = (0u64, 0u64);
                while Instant::now() < end {
                    let guard = lock.lock().await.expect("lock");
                    let now = Instant::now();
                    acquired += 1;
                    match last.lock().expect("not poisoned").take() {
                        Some((previous, at, release)) if previous != task => {
                            handoffs.push((at, now, release))
                        }
                        Some(_) => same_task += 1,
                        None => {}
                    }
                    let value: Option<u64> = conn.get(&counter_key).await.expect("GET");
                    let before = value.unwrap_or(0);
                    let _: () = conn.set(&counter_key, before + 1).await.expect("SET");
                    *last.lock().expect("not poisoned") = Some((task, Instant::now(), before));
                    guard.unlock().await.expect("unlock");
                }
                (handoffs, acquired, same_task)
            }));
        }
        let mut spans = Vec::new();
        let (mut acquired, mut same_task) = (0u64, 0u64);
        for handle in handles {
            let (h, a, s) = handle.await.expect("a hand-off task panicked");
            spans.extend(h);
            acquired += a;
            same_task += s;
        }
        let elapsed = start.elapsed().as_secs_f64();
        // Every script call of the run (each acquisition's acquire and
        // release, and every try that found the lock held) per acquisition:
        // 2 is the least; the rest is tries that lost a race.
        let scripts = stats(bench).await.evalsha_calls - before.evalsha_calls;
        let per_acquisition = scripts as f64 / acquired.max(1) as f64;
        let mut handoffs = Samples::default();
        for &(unlocked, acquired, _) in &spans {
            handoffs.push(acquired.saturating_duration_since(unlocked));
        }
        let (mut to_message, mut from_message, mut handed_on) =
            (Samples::default(), Samples::default(), Samples::default());
        if let Some(((read, mut read_at), (managed, mut managed_at))) = clocks {
            // The subscribers go once the last releases' messages have had
            // time to arrive.
            tokio::time::sleep(Duration::from_millis(50)).await;
            drop((read, managed));
            let stamps = |at: &mut tokio::sync::mpsc::UnboundedReceiver<Instant>| {
                std::iter::from_fn(|| at.try_recv().ok()).collect::<Vec<_>>()
            };
            let (message_times, managed_times) = (stamps(&mut read_at), stamps(&mut managed_at));
            // One message per release, in the order of the releases: the
            // n-th is the n-th release's.
            if message_times.len() as u64 == acquired {
                for &(unlocked, acquired, release) in &spans {
                    let message = message_times[release as usize];
                    to_message.push(message.saturating_duration_since(unlocked));
                    from_message.push(acquired.saturating_duration_since(message));
                }
            } else {
                println!(
                    "(5, {waiters} waiters: {} messages for {acquired} releases; not split)",
                    message_times.len()
                );
            }
            // The same messages, in the same order, at both.
            if managed_times.len() == message_times.len() {
                for (read, managed) in message_times.iter().zip(&managed_times) {
                    handed_on.push(managed.saturating_duration_since(*read));
                }
            } else {
                println!(
                    "(5, {waiters} waiters: {} messages read, {} handed on; no hand-on figure)",
                    message_times.len(),
                    managed_times.len()
                );
            }
        }
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
        let mut row = vec![
            waiters.to_string(),
            acquired.to_string(),
            f(acquired as f64 / elapsed, 0),
            counter.to_string(),
            format!("{others} ({:.0}%)", 100.0 * others as f64 / acquired as f64),
            f(per_acquisition, 2),
            f(p50, 1),
            f(p99, 1),
            f(in_rtt, 2),
        ];
        if split {
            row.extend([
                format!("{} of {others}", to_message.len()),
                f(to_message.p50(), 1),
                f(from_message.p50(), 1),
                format!(
                    "{:.2} + {:.2}",
                    to_message.p50() / bench.rtt_us,
                    from_message.p50() / bench.rtt_us
                ),
                f(handed_on.p50(), 1),
            ]);
        }
        table.row(row);
        bench.check(
            "contended hand-off p50 within 3 raw round trips",
            format!(
                "{waiters} waiters: {p50:.1} µs = {in_rtt:.2} round trips of {:.1} µs",
                bench.rtt_us
            ),
            in_rtt <= 3.0,
        );
        let mut json_row = json!({
            "waiters": waiters, "acquisitions": acquired,
            "acquisitions_per_s": acquired as f64 / elapsed, "counter": counter,
            "handoffs_to_another_task": others, "reacquired_by_same_task": same_task,
            "script_calls_per_acquisition": per_acquisition,
            "handoff_p50_us": p50, "handoff_p99_us": p99, "handoff_p50_round_trips": in_rtt,
        });
        if split {
            json_row["steps_p50_us"] = json!({
                "handoffs_split": to_message.len(),
                "unlock_to_message": to_message.p50(), "message_to_lock": from_message.p50(),
                "manager_hand_on": handed_on.p50(),
            });
        }
        rows.push(json_row);
    }
    table.print();
    println!(
        "(hand-off: from the holder's unlock call to the next holder's lock returning, \
         counted when the next holder is another task; the counter is GET then SET under \
         the lock and must equal the acquisitions; scripts per acquisition: every EVALSHA \
         of the run over the acquisitions, 2 at the least (an acquire and a release), the \
         rest tries that found the lock taken; with --split, the message: when a \
         subscriber of the bench's own on the lock's channel read the unlock message of the \
         release handed off (the n-th message is the n-th release's), which splits the \
         hand-off in two; the manager's hand-on: how much later a `ConnectionManager` \
         subscriber, as the library's, handed the same messages on)"
    );
    Value::Array(rows)
}
