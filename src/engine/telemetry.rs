//! What the library reports through the `metrics` facade (feature
//! `metrics`): every function here is empty without it, so the call sites
//! need no `cfg`.
//!
//! The names and labels are listed in the crate docs ("Metrics"). Each
//! figure is labelled by the kind of synchronizer; the lock's name is added
//! only when the client was built with
//! [`ClientBuilder::metric_lock_names`](crate::ClientBuilder::metric_lock_names),
//! since names can be unbounded.
// Without the feature the names and labels are only documentation.
#![cfg_attr(not(feature = "metrics"), allow(dead_code))]

use std::time::Duration;

/// Counter: acquires that ended, with `outcome` = `acquired`, `timed_out`
/// (not got within the wait, a `try_lock` that found it held included) or
/// `failed` (an error).
pub(crate) const ACQUIRES: &str = "ferrisson_acquires_total";
/// Histogram, seconds: how long each successful acquire waited.
pub(crate) const WAIT_SECONDS: &str = "ferrisson_acquire_wait_seconds";
/// Histogram, seconds: how long each released hold was held.
pub(crate) const HOLD_SECONDS: &str = "ferrisson_hold_seconds";
/// Counter: watchdog leases found lost (a renewal or an `extend` refused,
/// or no renewal through before the lease ran out).
pub(crate) const LEASES_LOST: &str = "ferrisson_leases_lost_total";
/// Counter: holds sent for renewal by the watchdog.
pub(crate) const RENEWALS: &str = "ferrisson_renewals_total";
/// Counter: holds whose renewal call failed (sent again before the lease
/// runs out).
pub(crate) const RENEWAL_FAILURES: &str = "ferrisson_renewal_failures_total";
/// Histogram: holds per renewal call (the name says keys, as it did
/// before read holds were sent two keys each; kept for dashboards).
pub(crate) const RENEWAL_BATCH: &str = "ferrisson_renewal_batch_keys";
/// Gauge: channels subscribed to (one per name with local waiters, one per
/// waiting owner of a fair lock), over every client of the process.
pub(crate) const SUBSCRIPTIONS: &str = "ferrisson_subscriptions";
/// Counter: sends of the lean protocol (`ClientBuilder::lean`), with
/// `call` = `acquire`, `release` or `settle`, and `outcome` = `answered`,
/// `latched` (it took nothing, or was never sent: the latched call went
/// instead) or `lost` (its reply was lost: settled). A settle counts once,
/// when it ends: `answered`, or `lost` when it gave up.
pub(crate) const LEAN_SENDS: &str = "ferrisson_lean_sends_total";

/// How an acquire ended, for [`ACQUIRES`].
#[derive(Debug, Clone, Copy)]
pub(crate) enum Outcome {
    Acquired,
    TimedOut,
    Failed,
}

impl Outcome {
    fn label(self) -> &'static str {
        match self {
            Outcome::Acquired => "acquired",
            Outcome::TimedOut => "timed_out",
            Outcome::Failed => "failed",
        }
    }
}

/// Runs the acquire that `acquire` makes (of a lock, or of a semaphore's
/// permits) in its `ferrisson.acquire` span and reports how it ended: `got`
/// tells a success from a wait that ran out.
///
/// Takes a maker, not the future: a future passed in as an argument is
/// kept twice in this one's state (as the argument, and where it is
/// awaited), which doubled every `lock()` future's size. Made here, it is
/// kept once.
pub(crate) async fn acquire<T, F>(
    subject: Subject<'_>,
    name: &str,
    acquire: impl FnOnce() -> F,
    got: impl FnOnce(&T) -> bool,
) -> crate::Result<T>
where
    F: std::future::Future<Output = crate::Result<T>>,
{
    use tracing::Instrument;
    let started = tokio::time::Instant::now();
    let span = tracing::info_span!("ferrisson.acquire", lock = %name, kind = subject.kind);
    let result = acquire().instrument(span).await;
    let outcome = match &result {
        Ok(value) if got(value) => Outcome::Acquired,
        Ok(_) => Outcome::TimedOut,
        Err(_) => Outcome::Failed,
    };
    acquire_ended(subject, outcome, started.elapsed());
    result
}

/// Who a figure is about: the kind's label, and the name when the client
/// reports names.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Subject<'a> {
    pub(crate) kind: &'static str,
    pub(crate) name: Option<&'a str>,
}

#[cfg(feature = "metrics")]
mod on {
    use super::*;
    use metrics::Label;

    fn labels(subject: Subject<'_>) -> Vec<Label> {
        let mut labels = vec![Label::from_static_parts("kind", subject.kind)];
        if let Some(name) = subject.name {
            labels.push(Label::new("name", name.to_owned()));
        }
        labels
    }

    pub(crate) fn acquire_ended(subject: Subject<'_>, outcome: Outcome, waited: Duration) {
        let mut labels = labels(subject);
        if let Outcome::Acquired = outcome {
            metrics::histogram!(WAIT_SECONDS, labels.clone()).record(waited.as_secs_f64());
        }
        labels.push(Label::from_static_parts("outcome", outcome.label()));
        metrics::counter!(ACQUIRES, labels).increment(1);
    }

    pub(crate) fn released(subject: Subject<'_>, held: Duration) {
        metrics::histogram!(HOLD_SECONDS, labels(subject)).record(held.as_secs_f64());
    }

    pub(crate) fn lease_lost(subject: Subject<'_>) {
        metrics::counter!(LEASES_LOST, labels(subject)).increment(1);
    }

    pub(crate) fn renewal_sent(holds: usize) {
        metrics::counter!(RENEWALS).increment(holds as u64);
        metrics::histogram!(RENEWAL_BATCH).record(holds as f64);
    }

    pub(crate) fn renewal_failed(holds: usize) {
        metrics::counter!(RENEWAL_FAILURES).increment(holds as u64);
    }

    pub(crate) fn lean_sent(call: &'static str, outcome: &'static str) {
        let labels = [
            Label::from_static_parts("call", call),
            Label::from_static_parts("outcome", outcome),
        ];
        metrics::counter!(LEAN_SENDS, labels.to_vec()).increment(1);
    }

    pub(crate) fn subscriptions_changed(delta: f64) {
        metrics::gauge!(SUBSCRIPTIONS).increment(delta);
    }
}

#[cfg(not(feature = "metrics"))]
mod on {
    use super::*;

    pub(crate) fn acquire_ended(_: Subject<'_>, _: Outcome, _: Duration) {}
    pub(crate) fn released(_: Subject<'_>, _: Duration) {}
    pub(crate) fn lease_lost(_: Subject<'_>) {}
    pub(crate) fn renewal_sent(_: usize) {}
    pub(crate) fn renewal_failed(_: usize) {}
    pub(crate) fn lean_sent(_: &'static str, _: &'static str) {}
    pub(crate) fn subscriptions_changed(_: f64) {}
}

pub(crate) use on::*;
