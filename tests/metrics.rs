//! Feature `metrics`: the figures a service's dashboard reads, read back
//! through a recorder installed for this binary, after real acquires,
//! waits, holds, renewals and a lost lease on a private `redis-server`.
//!
//! The recorder is process-wide and its snapshots drain what they read, so
//! the whole story is one test that keeps running totals.
#![cfg(feature = "metrics")]

use ferrisson_test_support as common;

use std::collections::HashMap;
use std::time::Duration;

use common::{eventually, soon, RedisServer};
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};

/// What the recorder saw so far: counters and gauges summed over
/// snapshots, histograms' samples gathered. Keyed by the metric's name and
/// its labels, sorted, as `name{k=v,...}`.
#[derive(Default)]
struct Figures {
    sums: HashMap<String, f64>,
    samples: HashMap<String, Vec<f64>>,
}

fn key_of(name: &str, labels: &[(&str, &str)]) -> String {
    let mut labels: Vec<String> = labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
    labels.sort();
    format!("{name}{{{}}}", labels.join(","))
}

impl Figures {
    fn take(&mut self, snapshotter: &Snapshotter) {
        for (key, _, _, value) in snapshotter.snapshot().into_vec() {
            let key = key.key();
            let labels: Vec<(&str, &str)> = key.labels().map(|l| (l.key(), l.value())).collect();
            let id = key_of(key.name(), &labels);
            match value {
                DebugValue::Counter(n) => *self.sums.entry(id).or_default() += n as f64,
                DebugValue::Gauge(g) => *self.sums.entry(id).or_default() += g.into_inner(),
                DebugValue::Histogram(values) => self
                    .samples
                    .entry(id)
                    .or_default()
                    .extend(values.into_iter().map(|v| v.into_inner())),
            }
        }
    }

    fn sum(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.sums.get(&key_of(name, labels)).copied().unwrap_or(0.0)
    }

    fn samples(&self, name: &str, labels: &[(&str, &str)]) -> &[f64] {
        self.samples
            .get(&key_of(name, labels))
            .map_or(&[], |v| v.as_slice())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquires_holds_renewals_and_lost_leases_are_reported() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    recorder
        .install()
        .expect("the only recorder of this binary");
    let mut figures = Figures::default();

    let server = RedisServer::start();
    let watchdog = Duration::from_millis(600);
    let named = soon(
        ferrisson::Client::builder(server.url())
            .watchdog_timeout(watchdog)
            .metric_lock_names(true)
            .build(),
    )
    .await
    .unwrap();
    let lock = |kind: &'static str, name: &'static str| [("kind", kind), ("name", name)];

    // One acquire that waits for a holder, one that gives up, one failure.
    let a = named.lock("m:orders");
    let guard = soon(a.lock()).await.unwrap();
    let b = named.lock("m:orders").with_owner("other");
    assert!(soon(b.try_lock()).await.unwrap().is_none());
    let waiter = tokio::spawn(async move { b.lock().await.unwrap() });
    eventually(Duration::from_secs(10), || async {
        named.subscriptions() == 1
    })
    .await;
    // The waiter waits at least from here to the unlock.
    let waiting_since = std::time::Instant::now();
    figures.take(&snapshotter);
    assert_eq!(
        figures.sum("ferrisson_subscriptions", &[]),
        1.0,
        "one channel with a waiter"
    );
    // Held past a renewal (a third of the watchdog timeout).
    eventually(Duration::from_secs(10), || {
        figures.take(&snapshotter);
        let renewed = figures.sum("ferrisson_renewals_total", &[]) >= 1.0;
        async move { renewed }
    })
    .await;
    let waited_at_least = waiting_since.elapsed();
    soon(guard.unlock()).await.unwrap();
    let second = soon(waiter).await.unwrap();
    soon(second.unlock()).await.unwrap();
    let bad = named.lock("m:orders");
    assert!(soon(bad.try_lock_for(Duration::MAX)).await.is_err());
    common::settled(&named).await;

    figures.take(&snapshotter);
    let acquires = |outcome| {
        let [kind, name] = lock("lock", "m:orders");
        figures.sum(
            "ferrisson_acquires_total",
            &[kind, name, ("outcome", outcome)],
        )
    };
    assert_eq!(acquires("acquired"), 2.0);
    assert_eq!(acquires("timed_out"), 1.0);
    assert_eq!(acquires("failed"), 1.0);
    let waits = figures.samples("ferrisson_acquire_wait_seconds", &lock("lock", "m:orders"));
    assert_eq!(waits.len(), 2, "{waits:?}");
    // The waiter waited at least while the holder sat through a renewal.
    assert!(
        waits.iter().any(|&w| w >= waited_at_least.as_secs_f64()),
        "{waits:?} {waited_at_least:?}"
    );
    let holds = figures.samples("ferrisson_hold_seconds", &lock("lock", "m:orders"));
    assert_eq!(holds.len(), 2, "{holds:?}");
    assert!(figures
        .samples("ferrisson_renewal_batch_keys", &[])
        .contains(&1.0));
    assert_eq!(figures.sum("ferrisson_renewal_failures_total", &[]), 0.0);
    assert_eq!(
        figures.sum("ferrisson_subscriptions", &[]),
        0.0,
        "the channel was left with its last waiter"
    );

    // A lease lost: the key is deleted behind the holder's back.
    let rw = named.read_write_lock("m:report");
    let read = soon(rw.read().lock()).await.unwrap();
    server.cmd(&["DEL", "m:report"]);
    soon(read.lease_lost()).await;
    figures.take(&snapshotter);
    assert_eq!(
        figures.sum(
            "ferrisson_leases_lost_total",
            &lock("read_lock", "m:report")
        ),
        1.0
    );
    drop(read);

    // A client that does not name locks labels by kind alone.
    let plain = soon(ferrisson::Client::connect(server.url()))
        .await
        .unwrap();
    let fenced = soon(plain.fenced_lock("m:ledger").lock()).await.unwrap();
    soon(fenced.unlock()).await.unwrap();
    figures.take(&snapshotter);
    assert_eq!(
        figures.sum(
            "ferrisson_acquires_total",
            &[("kind", "fenced_lock"), ("outcome", "acquired")]
        ),
        1.0
    );
    assert_eq!(
        figures
            .samples("ferrisson_hold_seconds", &[("kind", "fenced_lock")])
            .len(),
        1
    );

    // Semaphores: a permit taken, one not available, and an expirable
    // permit's hold time once it is given back.
    let seats = named.semaphore("m:seats");
    assert!(soon(seats.try_set_permits(1)).await.unwrap());
    soon(seats.acquire()).await.unwrap();
    assert!(!soon(seats.try_acquire()).await.unwrap());
    let slots = named.permit_expirable_semaphore("m:slots");
    assert!(soon(slots.try_set_permits(1)).await.unwrap());
    let permit = soon(slots.acquire()).await.unwrap();
    soon(permit.release()).await.unwrap();
    figures.take(&snapshotter);
    let seat = |outcome| {
        figures.sum(
            "ferrisson_acquires_total",
            &[
                ("kind", "semaphore"),
                ("name", "m:seats"),
                ("outcome", outcome),
            ],
        )
    };
    assert_eq!((seat("acquired"), seat("timed_out")), (1.0, 1.0));
    let slot = lock("permit_expirable_semaphore", "m:slots");
    assert_eq!(
        figures
            .samples("ferrisson_acquire_wait_seconds", &slot)
            .len(),
        1
    );
    assert_eq!(figures.samples("ferrisson_hold_seconds", &slot).len(), 1);

    // A lean client's uncontested hold: one lean acquire and one lean
    // release, both answered; a re-entry goes latched and counts none.
    // (The clients above went lean too, on one server by default: counted
    // from here.)
    figures.take(&snapshotter);
    let sends = |figures: &Figures, call, outcome| {
        figures.sum(
            "ferrisson_lean_sends_total",
            &[("call", call), ("outcome", outcome)],
        )
    };
    let acquired = sends(&figures, "acquire", "answered");
    let released = sends(&figures, "release", "answered");
    let lean = soon(ferrisson::Client::builder(server.url()).lean(true).build())
        .await
        .unwrap();
    let lock = lean.lock("m:lean");
    let guard = soon(lock.lock()).await.unwrap();
    soon(guard.unlock()).await.unwrap();
    let outer = soon(lock.lock()).await.unwrap();
    let inner = soon(lock.lock()).await.unwrap();
    soon(inner.unlock()).await.unwrap();
    soon(outer.unlock()).await.unwrap();
    figures.take(&snapshotter);
    assert_eq!(sends(&figures, "acquire", "answered") - acquired, 2.0);
    assert!(sends(&figures, "release", "answered") - released >= 1.0);
    assert_eq!(
        sends(&figures, "acquire", "lost") + sends(&figures, "release", "lost"),
        0.0
    );
}
