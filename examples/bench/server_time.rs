//! Scenario 10: the server's time per lock and unlock pair, ferrisson's
//! against baselines run in the same sitting: what a user who runs Redis
//! near its CPU limit pays for each lock.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::LazyLock;
use std::time::Duration;

use redis::aio::ConnectionManager;
use redis::Script;
use serde_json::{json, Value};

use crate::measure::{f, Table};
use crate::scenarios::{
    flush, lock_pair, run_pairs, scripts_pair, simple_pair, stats, PairFuture, PAIR_LEASE,
};
use crate::Bench;

/// Redisson's acquire and release on the same layout, written for the
/// bench: the release with Redisson's unlock latch, or with no latch.
static ACQUIRE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("redisson_acquire.lua")));
static RELEASE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("redisson_release.lua")));

/// The lean protocol's acquire and release (issue 53), sent raw: what they
/// cost the server, beside the library's own pair (which sends them
/// by default, `--latched` aside).
static LEAN_ACQUIRE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../lua/lean_acquire.lua")));
static LEAN_RELEASE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../lua/lean_release.lua")));

/// A deadline an hour from now, in epoch ms (by this machine's clock, which
/// is the bench server's): the lean scripts read the server's clock for it
/// in every call, as the library's would.
fn an_hour_from_now() -> u64 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("a clock after 1970");
    u64::try_from(now.as_millis()).unwrap_or(u64::MAX) + 3_600_000
}

/// One lock and unlock by the lean scripts on a free `key`, sent raw.
pub(crate) async fn lean_pair(conn: &mut ConnectionManager, key: &str, owner: &str) {
    let acquired: Option<i64> = LEAN_ACQUIRE
        .key(key)
        .arg(30_000)
        .arg(owner)
        .arg(an_hour_from_now())
        .invoke_async(conn)
        .await
        .expect("lean acquire");
    assert_eq!(acquired, None, "{key} is free");
    let released: Option<i64> = LEAN_RELEASE
        .key(key)
        .key(format!("redisson_lock__channel:{{{key}}}"))
        .arg(0)
        .arg(owner)
        .arg("publish")
        .arg(an_hour_from_now())
        .invoke_async(conn)
        .await
        .expect("lean release");
    assert_eq!(released, Some(1));
}

/// The targets, by the baseline they count from.
const REDISSON: &str =
    "server time per pair at most 1.10x Redisson's own (its unlock latch, then its DEL)";
const NO_LATCH: &str = "server time per pair at most 1.10x Redisson's scripts with no latch at all";
/// What the lean scripts give sent raw (the library sends them by
/// default, `--latched` aside).
const LEAN: &str = "the lean scripts' server time per pair at most 1.10x Redisson's own, sent raw";

/// How the unlock latch of the baseline is kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Latch {
    /// None at all.
    None,
    /// Written by the release, then deleted by a `DEL` of its own, as
    /// Redisson's client does.
    Redisson,
}

/// One lock and unlock of the baseline on `key`.
async fn baseline_pair(conn: &mut ConnectionManager, key: &str, owner: &str, latch: Latch) {
    let latch_key = baseline_lock_unlock(conn, key, owner, latch).await;
    if let Some(latch_key) = latch_key {
        delete_latch(conn, latch_key).await;
    }
}

/// The baseline's acquire and release on `key`, the two calls a caller
/// waits for: the unlock latch the release wrote, to delete after.
pub(crate) async fn baseline_lock_unlock(
    conn: &mut ConnectionManager,
    key: &str,
    owner: &str,
    latch: Latch,
) -> Option<String> {
    static REQUESTS: AtomicU64 = AtomicU64::new(0);
    let acquired: Option<i64> = ACQUIRE
        .key(key)
        .arg(30_000)
        .arg(owner)
        .invoke_async(conn)
        .await
        .expect("baseline acquire");
    assert_eq!(acquired, None, "{key} is free");
    let mut release = RELEASE.key(key);
    release.key(format!("redisson_lock__channel:{{{key}}}"));
    let latch_key = (latch == Latch::Redisson).then(|| {
        let request = REQUESTS.fetch_add(1, Ordering::Relaxed);
        format!("redisson_unlock_latch:{{{key}}}:{request:032x}")
    });
    if let Some(latch_key) = &latch_key {
        release.key(latch_key);
    }
    release.arg(0).arg(30_000).arg(owner).arg(18_000);
    let released: Option<i64> = release.invoke_async(conn).await.expect("baseline release");
    assert_eq!(released, Some(1));
    latch_key
}

/// The `DEL` Redisson's client sends for an unlock latch.
pub(crate) async fn delete_latch(conn: &mut ConnectionManager, latch_key: String) {
    let _: i64 = redis::cmd("DEL")
        .arg(latch_key)
        .query_async(conn)
        .await
        .expect("DEL of the unlock latch");
}

/// What one variant cost the server.
#[derive(Debug, Clone, Copy)]
struct Cost {
    pairs: u64,
    /// Server CPU (user and system) per pair, µs: everything the server
    /// did for it, reading and answering the commands included.
    cpu_us: f64,
    /// Time in scripts per pair, µs (`INFO commandstats`, EVALSHA).
    scripts_us: f64,
}

/// Runs `pair` in `tasks` tasks for `run` and measures the server around
/// it; `settle` is waited after the run, for work the pairs leave behind
/// (the library deletes its latches a few milliseconds after a pair).
async fn cost(
    bench: &mut Bench,
    tasks: usize,
    run: Duration,
    pair: impl Fn(usize, u64) -> PairFuture + Send + Sync + 'static,
) -> Cost {
    flush(bench).await;
    let before = stats(bench).await;
    let (pairs, _) = run_pairs(tasks, run, pair).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let after = stats(bench).await;
    let per = |total: f64| total / pairs.max(1) as f64;
    Cost {
        pairs,
        cpu_us: per((after.cpu_secs - before.cpu_secs) * 1e6),
        scripts_us: per(after.evalsha_usec - before.evalsha_usec),
    }
}

pub(crate) async fn server_time(bench: &mut Bench) -> Value {
    let run = bench
        .options
        .pick(Duration::from_secs(2), Duration::from_millis(300));
    let rounds = bench.options.pick(3, 1);
    const TASKS: usize = 16;
    const KEYS_PER_TASK: u64 = 64;
    let client = bench
        .client(ferrisson::config::DEFAULT_WATCHDOG_TIMEOUT)
        .await;
    let name = |task: usize, i: u64| format!("bench:st:{task}:{}", i % KEYS_PER_TASK);
    let owner = |task: usize| format!("8d0d4b7e-2a4c-4f7b-9a0e-5a1a1f0e7c11:{task}");
    let mut table = Table::new(
        format!(
            "10. Server time per lock pair: {TASKS} tasks, {:.1} s per variant, {rounds} round(s)",
            run.as_secs_f64()
        ),
        &[
            "round",
            "variant",
            "pairs",
            "server CPU µs/pair",
            "vs no latch",
            "vs Redisson's",
            "script µs/pair",
            "vs no latch",
            "vs Redisson's",
        ],
    );
    let mut rows = Vec::new();
    // (mode, baseline, server CPU ratio, script time ratio) of each round.
    let mut ratios: Vec<(&str, &str, f64, f64)> = Vec::new();
    for round in 1..=rounds {
        let conn = bench.raw.clone();
        let none = cost(bench, TASKS, run, move |task, i| {
            let mut conn = conn.clone();
            let (key, owner) = (name(task, i), owner(task));
            Box::pin(async move { baseline_pair(&mut conn, &key, &owner, Latch::None).await })
        })
        .await;
        let conn = bench.raw.clone();
        let redisson = cost(bench, TASKS, run, move |task, i| {
            let mut conn = conn.clone();
            let (key, owner) = (name(task, i), owner(task));
            Box::pin(async move { baseline_pair(&mut conn, &key, &owner, Latch::Redisson).await })
        })
        .await;
        let conn = bench.raw.clone();
        let scripts = cost(bench, TASKS, run, move |task, i| {
            let mut conn = conn.clone();
            let (key, owner) = (name(task, i), owner(task));
            Box::pin(async move { scripts_pair(&mut conn, &key, &owner).await })
        })
        .await;
        let conn = bench.raw.clone();
        let lean = cost(bench, TASKS, run, move |task, i| {
            let mut conn = conn.clone();
            let (key, owner) = (name(task, i), owner(task));
            Box::pin(async move { lean_pair(&mut conn, &key, &owner).await })
        })
        .await;
        let c = client.clone();
        let watchdog = cost(bench, TASKS, run, move |task, i| {
            lock_pair(&c, name(task, i), None)
        })
        .await;
        let c = client.clone();
        let leased = cost(bench, TASKS, run, move |task, i| {
            lock_pair(&c, name(task, i), Some(PAIR_LEASE))
        })
        .await;
        let conn = bench.raw.clone();
        let simple = cost(bench, TASKS, run, move |task, i| {
            let mut conn = conn.clone();
            let key = format!("{}:simple", name(task, i));
            Box::pin(async move { simple_pair(&mut conn, &key).await })
        })
        .await;
        let variants = [
            (
                "no latch at all (Redisson's scripts without their unlock latch)",
                "no_latch",
                none,
            ),
            (
                "Redisson's work (unlock latch, then its DEL)",
                "redisson",
                redisson,
            ),
            (
                "ferrisson's scripts alone (latches left to expire)",
                "scripts_only",
                scripts,
            ),
            ("the lean scripts, sent raw", "lean_scripts", lean),
            ("ferrisson, watchdog", "watchdog", watchdog),
            ("ferrisson, lease 10 s", "lease", leased),
            (
                "simple lock (SET NX PX, compare-and-delete)",
                "simple",
                simple,
            ),
        ];
        for (label, key, c) in variants {
            let vs_none = c.cpu_us / none.cpu_us;
            let vs_redisson = c.cpu_us / redisson.cpu_us;
            let scripts_vs_none = c.scripts_us / none.scripts_us;
            let scripts_vs_redisson = c.scripts_us / redisson.scripts_us;
            table.row(vec![
                round.to_string(),
                label.to_string(),
                c.pairs.to_string(),
                f(c.cpu_us, 2),
                format!("{vs_none:.2}x"),
                format!("{vs_redisson:.2}x"),
                f(c.scripts_us, 2),
                format!("{scripts_vs_none:.2}x"),
                format!("{scripts_vs_redisson:.2}x"),
            ]);
            rows.push(json!({
                "round": round, "variant": key, "pairs": c.pairs,
                "server_cpu_us_per_pair": c.cpu_us, "cpu_vs_no_latch": vs_none,
                "cpu_vs_redisson": vs_redisson, "script_us_per_pair": c.scripts_us,
                "scripts_vs_no_latch": scripts_vs_none, "scripts_vs_redisson": scripts_vs_redisson,
            }));
        }
        for (mode, c) in [("watchdog", watchdog), ("lease", leased)] {
            for (baseline, of) in [(NO_LATCH, none), (REDISSON, redisson)] {
                let ratio = (c.cpu_us / of.cpu_us, c.scripts_us / of.scripts_us);
                ratios.push((mode, baseline, ratio.0, ratio.1));
            }
        }
        ratios.push((
            "lean scripts",
            LEAN,
            lean.cpu_us / redisson.cpu_us,
            lean.scripts_us / redisson.scripts_us,
        ));
    }
    for (mode, baseline) in [
        ("watchdog", REDISSON),
        ("lease", REDISSON),
        ("watchdog", NO_LATCH),
        ("lease", NO_LATCH),
        ("lean scripts", LEAN),
    ] {
        let median = |pick: fn(&(&str, &str, f64, f64)) -> f64| {
            let mut all: Vec<f64> = ratios
                .iter()
                .filter(|r| r.0 == mode && r.1 == baseline)
                .map(pick)
                .collect();
            all.sort_by(f64::total_cmp);
            all[all.len() / 2]
        };
        let (cpu, scripts) = (median(|r| r.2), median(|r| r.3));
        bench.check(
            baseline,
            format!(
                "{mode}, median of {rounds} round(s): server CPU {cpu:.2}x, time in scripts \
                 {scripts:.2}x"
            ),
            cpu <= 1.10 && scripts <= 1.10,
        );
    }
    table.print();
    println!(
        "(server CPU: INFO cpu, user plus system, over the variant's run and 100 ms after it, \
         divided by its pairs; script µs: INFO commandstats, EVALSHA time, the commands the \
         scripts call included; the simple lock's SET is outside it)"
    );
    Value::Array(rows)
}
