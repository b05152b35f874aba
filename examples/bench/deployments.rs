//! Scenarios 8 and 9: what replica sync costs, and the multi-lock against
//! Redisson's hold-and-wait multi-lock. Each starts the servers it needs.

use std::time::{Duration, Instant};

use ferrisson::config::ReplicaSync;
use ferrisson::{Client, DistributedLock, Lock, LockGuard, MultiLock};
use serde_json::{json, Value};

use crate::measure::{f, Samples, Table};
use crate::support::RedisServer;
use crate::Bench;

// 8 ---------------------------------------------------------------------

/// A master with one replica online (as `ROLE` lists it).
fn master_and_replica() -> (RedisServer, RedisServer) {
    let master = RedisServer::start();
    let replica =
        RedisServer::start_with_args(&["--replicaof", "127.0.0.1", &master.port().to_string()]);
    let started = Instant::now();
    loop {
        let role = master.cmd(&["ROLE"]);
        let online = role
            .as_array()
            .and_then(|r| r.get(2).and_then(|v| v.as_array().map(<[_]>::len)));
        if online == Some(1) {
            return (master, replica);
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the replica did not come online"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Lock + unlock on a master with one replica, with and without replica
/// sync (Redisson's default behind Sentinel and on a Cluster), and the raw
/// pair, interleaved so that all three see the same machine.
pub(crate) async fn replica_sync(bench: &mut Bench) -> Value {
    let n = bench.options.pick(5_000, 1_000);
    let (master, _replica) = master_and_replica();
    // Both latched (replica sync goes by the acquire latch, and a client
    // without it would go lean by default): the difference is the sync's.
    let connect = |sync: Option<ReplicaSync>| {
        Client::builder(master.url())
            .replica_sync_with(sync)
            .lean(false)
            .build()
    };
    let off = connect(None).await.expect("connect");
    let on = connect(Some(ReplicaSync::REDISSON)).await.expect("connect");
    let mut raw = crate::connection(&master.url())
        .await
        .expect("connect to the master");
    let (mut offs, mut ons, mut raws) = (
        Samples::with_capacity(n),
        Samples::with_capacity(n),
        Samples::with_capacity(n),
    );
    for i in 0..(n + 200) {
        let start = Instant::now();
        pair(&off.lock(format!("bench:rs:off:{i}"))).await;
        let t_off = start.elapsed();
        let start = Instant::now();
        pair(&on.lock(format!("bench:rs:on:{i}"))).await;
        let t_on = start.elapsed();
        let start = Instant::now();
        crate::scenarios::raw_pair(&mut raw, "bench:rs:raw").await;
        let t_raw = start.elapsed();
        if i >= 200 {
            offs.push(t_off);
            ons.push(t_on);
            raws.push(t_raw);
        }
    }
    let raw_p50 = raws.p50();
    let (off_p50, on_p50) = (offs.p50(), ons.p50());
    let mut table = Table::new(
        "8. Replica sync: lock + unlock on a master with one replica, one task",
        &[
            "replica sync",
            "pairs",
            "p50 µs",
            "p99 µs",
            "raw pair p50 µs",
            "p50 / raw pair",
        ],
    );
    let mut rows = Vec::new();
    for (mode, p50, p99) in [
        ("off", off_p50, offs.p99()),
        ("on (ReplicaSync::REDISSON)", on_p50, ons.p99()),
    ] {
        table.row(vec![
            mode.into(),
            n.to_string(),
            f(p50, 1),
            f(p99, 1),
            f(raw_p50, 1),
            format!("{:.2}x", p50 / raw_p50),
        ]);
        rows.push(json!({ "mode": mode, "pairs": n, "p50_us": p50, "p99_us": p99 }));
    }
    table.print();
    println!(
        "replica sync adds {:.1} µs to a lock + unlock at p50 ({:.2}x without it): \
         a WAIT after each, answered once the replica acknowledged",
        on_p50 - off_p50,
        on_p50 / off_p50
    );
    json!({ "rows": rows, "raw_pair_p50_us": raw_p50, "on_per_off_p50": on_p50 / off_p50 })
}

async fn pair(lock: &Lock) {
    lock.lock()
        .await
        .expect("lock")
        .unlock()
        .await
        .expect("unlock");
}

// 9 ---------------------------------------------------------------------

/// Redisson's `RedissonMultiLock.lock()`, written over ferrisson's locks:
/// `tryLock(n × 1.5 s)` again and again; within it, each lock in order is
/// waited for with what is left of the budget while the ones before it are
/// held, and a lock that does not come releases all and starts over from
/// the first.
async fn redisson_multi_lock(locks: &[Lock]) -> Vec<LockGuard> {
    let budget = Duration::from_millis(1500 * locks.len() as u64);
    loop {
        let deadline = Instant::now() + budget;
        'budget: loop {
            let mut held = Vec::with_capacity(locks.len());
            for lock in locks {
                let left = deadline.saturating_duration_since(Instant::now());
                match lock.try_lock_for(left).await.expect("try_lock_for") {
                    Some(guard) => held.push(guard),
                    None => {
                        for guard in held {
                            guard.unlock().await.expect("unlock");
                        }
                        if Instant::now() >= deadline {
                            break 'budget;
                        }
                        continue 'budget;
                    }
                }
            }
            return held;
        }
    }
}

/// A ferrisson multi-lock over `a, b` against one and two of Redisson's
/// hold-and-wait multi-locks over `b, a`, all in a loop with a 1 ms
/// critical section: does ferrisson's all-or-nothing acquire get its
/// turns?
pub(crate) async fn multilock_vs_redisson(bench: &mut Bench) -> Value {
    let run = Duration::from_secs(bench.options.pick(10, 3));
    let mut table = Table::new(
        format!(
            "9. Multi-lock (all or nothing) against Redisson's hold-and-wait multi-lock, \
             same two locks in opposite orders, {} s each",
            run.as_secs()
        ),
        &[
            "Redisson-style contenders",
            "ferrisson acquisitions",
            "Redisson-style acquisitions",
            "ferrisson longest wait ms",
            "ferrisson p50 wait ms",
        ],
    );
    let mut rows = Vec::new();
    for contenders in [1, 2] {
        crate::scenarios::flush(bench).await;
        let ours = bench.client(Duration::from_secs(30)).await;
        let theirs = bench.client(Duration::from_secs(30)).await;
        let (a, b) = ("bench:ml:a", "bench:ml:b");
        let multi = MultiLock::new(vec![
            Box::new(ours.lock(a)) as Box<dyn DistributedLock>,
            Box::new(ours.lock(b)),
        ]);
        let end = Instant::now() + run;
        let others: Vec<_> = (0..contenders)
            .map(|_| {
                let theirs = theirs.clone();
                tokio::spawn(async move {
                    // Each task is its own owner, as two Java services are.
                    let locks = [theirs.lock(b), theirs.lock(a)];
                    let mut count = 0u64;
                    while Instant::now() < end {
                        let held = redisson_multi_lock(&locks).await;
                        tokio::time::sleep(Duration::from_millis(1)).await;
                        for guard in held {
                            guard.unlock().await.expect("unlock");
                        }
                        count += 1;
                    }
                    count
                })
            })
            .collect();
        let mut waits = Samples::with_capacity(1024);
        let mut longest = Duration::ZERO;
        let mut count = 0u64;
        loop {
            let start = Instant::now();
            let left = end.saturating_duration_since(start);
            let got = multi.try_lock_for(left).await.expect("multi-lock");
            longest = longest.max(start.elapsed());
            let Some(guard) = got else { break };
            waits.push(start.elapsed());
            count += 1;
            tokio::time::sleep(Duration::from_millis(1)).await;
            guard.unlock().await.expect("unlock");
            if Instant::now() >= end {
                break;
            }
        }
        let mut theirs_count = 0;
        for other in others {
            theirs_count += other.await.expect("a Redisson-style task");
        }
        let p50_ms = waits.p50() / 1000.0;
        table.row(vec![
            contenders.to_string(),
            count.to_string(),
            theirs_count.to_string(),
            f(longest.as_secs_f64() * 1000.0, 0),
            f(p50_ms, 1),
        ]);
        rows.push(json!({
            "contenders": contenders, "ferrisson": count, "redisson_style": theirs_count,
            "ferrisson_longest_wait_ms": longest.as_secs_f64() * 1000.0,
            "ferrisson_p50_wait_ms": p50_ms,
        }));
    }
    table.print();
    println!("(the longest wait includes a wait cut short by the end of the run)");
    json!({ "run_s": run.as_secs(), "rows": rows })
}
