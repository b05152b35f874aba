//! What a hold's lease is, as the watchdog and the guards know it.

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use super::*;

/// One owner's holds of one lock: what the watchdog renews, and what the
/// lock's own maps are keyed by.
#[derive(Clone)]
pub(crate) struct HoldKey {
    /// The lock's name (its hash's key).
    pub(crate) name: Arc<str>,
    /// The owner's hash field, `<client-uuid>:<owner-id>`.
    pub(crate) field: Arc<str>,
    /// The two hashed once, when the key is made: a lock and unlock looks
    /// its key up in several maps, a dozen times in all.
    hash: u64,
}

impl PartialEq for HoldKey {
    fn eq(&self, other: &HoldKey) -> bool {
        self.hash == other.hash && self.name == other.name && self.field == other.field
    }
}

impl Eq for HoldKey {}

impl std::fmt::Debug for HoldKey {
    /// The name and the field (the hash, random per process, says nothing).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HoldKey")
            .field("name", &self.name)
            .field("field", &self.field)
            .finish()
    }
}

impl std::hash::Hash for HoldKey {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        state.write_u64(self.hash);
    }
}

/// A process-wide map keyed by [`HoldKey`]: the key brings its hash, made
/// once with `foldhash` rather than SipHash on every look-up, which a
/// profile of a lock and unlock showed as 3 % of its CPU. `foldhash` is
/// seeded per process but makes no strong claim against chosen
/// collisions: a program that names its locks after outside input meets
/// them only as slower look-ups in its own maps (a shard's lock is held a
/// little longer), never as a wrong answer.
pub(crate) type HoldMap<V> = dashmap::DashMap<HoldKey, V, foldhash::fast::RandomState>;

/// The seed [`HoldKey`]s are hashed with.
static HOLD_KEY_SEED: std::sync::LazyLock<foldhash::fast::RandomState> =
    std::sync::LazyLock::new(Default::default);

impl HoldKey {
    pub(crate) fn new(name: Arc<str>, field: Arc<str>) -> HoldKey {
        use std::hash::BuildHasher;
        let hash = HOLD_KEY_SEED.hash_one((&*name, &*field));
        HoldKey { name, field, hash }
    }
}

/// What a guard knows of its lease.
///
/// Besides the flag the watchdog sets, every lease has a deadline by this
/// process's clock: for a leased hold, the lease counted from when the
/// acquire was sent; for a watchdog hold, its TTL (the watchdog timeout
/// or its own watchdog lease, less the drift margin) counted from the
/// request of the last renewal Redis confirmed, moved on by each confirmed
/// renewal. So a holder that checks
/// its guard right after a pause (a stopped process, a starved runtime)
/// learns the lease is gone before the watchdog's own task has run.
///
/// One is kept per held lock, so it is small: a flag, a deadline counted
/// from one process-wide origin, and a [`Notify`] for the tasks waiting in
/// [`LeaseState::wait_lost`] (a `watch` channel would cost ten times more).
#[derive(Debug)]
pub(crate) struct LeaseState {
    lost: AtomicBool,
    /// Reported lost because nothing renews it any more (the runtime its
    /// client's watchdog ran on shut down), not because the key is gone:
    /// the key still stands until the deadline, so the hold may still be
    /// released until then. Cleared by a loss Redis or the clock told of.
    unrenewed: AtomicBool,
    /// No longer the registry's (released, lost or replaced): the watchdog
    /// drops it instead of renewing it.
    retired: AtomicBool,
    /// A watchdog hold: what the watchdog renews. [`LeaseState::wait_lost`]
    /// then waits for the watchdog's verdict (given at the same deadline),
    /// which forgets the hold before telling its guards.
    pub(super) watched: Option<Watched>,
    /// Nanoseconds after [`origin`] (before it, when negative) at which
    /// the lease runs out by this process's clock.
    deadline: AtomicI64,
    /// Wakes the waiters of [`LeaseState::wait_lost`] once `lost` is set.
    changed: Notify,
}

/// The origin of every lease deadline: fixed at the first use. An instant
/// on either side of it is kept exactly (see [`nanos_from_origin`]), so a
/// runtime whose clock runs elsewhere (tokio's paused test clock) keeps
/// its own deadlines right.
pub(super) fn origin() -> Instant {
    static ORIGIN: OnceLock<Instant> = OnceLock::new();
    *ORIGIN.get_or_init(Instant::now)
}

/// `at` as signed nanoseconds from [`origin`] (±292 years).
pub(super) fn nanos_from_origin(at: Instant) -> i64 {
    let origin = origin();
    let nanos = |d: Duration| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX);
    match at.checked_duration_since(origin) {
        Some(after) => nanos(after),
        None => -nanos(origin - at),
    }
}

/// The instant [`nanos_from_origin`] gave `nanos` for.
pub(super) fn instant_from_origin(nanos: i64) -> Instant {
    let origin = origin();
    let magnitude = Duration::from_nanos(nanos.unsigned_abs());
    let at = if nanos >= 0 {
        origin.checked_add(magnitude)
    } else {
        origin.checked_sub(magnitude)
    };
    // Only an instant the clock can hold was stored: never `None`.
    at.unwrap_or(origin)
}

/// The key a watchdog hold's lease renews.
#[derive(Debug)]
pub(super) struct Watched {
    pub(super) key: HoldKey,
    pub(super) renewal: Renewal,
    /// The TTL each renewal sets, in ms (as Redis gets it; 8 bytes, one
    /// per held lock): the client's watchdog timeout, or the hold's own
    /// watchdog lease.
    pub(super) ttl_ms: u64,
    /// The lock kind's label, for a lost lease in metrics.
    #[cfg(feature = "metrics")]
    pub(super) kind: &'static str,
}

impl LeaseState {
    pub(crate) fn leased(deadline: Instant) -> Arc<Self> {
        LeaseState::new(deadline, None)
    }

    /// The lease of a hold whose call, sent at `sent`, set its key's TTL
    /// to `lease`: it runs out a millisecond early, as Redis may count it.
    /// Redis counts a TTL from its clock's last whole millisecond, which
    /// may lie up to a millisecond before the call ran, so the key may
    /// go that much before `sent + lease`.
    pub(crate) fn leased_from(sent: Instant, lease: Duration) -> Arc<Self> {
        let grain = Duration::from_millis(1).min(lease);
        LeaseState::leased(sent + (lease - grain))
    }

    /// A watchdog hold's lease of `key`, good until `deadline` unless
    /// renewed.
    pub(super) fn watched(
        deadline: Instant,
        key: HoldKey,
        how: Renew,
        label: &'static str,
    ) -> Arc<Self> {
        #[cfg(not(feature = "metrics"))]
        let _ = label;
        let watched = Watched {
            key,
            renewal: how.renewal,
            ttl_ms: how.ttl.as_millis() as u64,
            #[cfg(feature = "metrics")]
            kind: label,
        };
        LeaseState::new(deadline, Some(watched))
    }

    fn new(deadline: Instant, watched: Option<Watched>) -> Arc<Self> {
        Arc::new(LeaseState {
            lost: AtomicBool::new(false),
            unrenewed: AtomicBool::new(false),
            retired: AtomicBool::new(false),
            watched,
            deadline: AtomicI64::new(nanos_from_origin(deadline)),
            changed: Notify::new(),
        })
    }

    /// Moves the deadline on to `deadline`, never back.
    pub(super) fn extend(&self, deadline: Instant) {
        self.deadline
            .fetch_max(nanos_from_origin(deadline), Ordering::Relaxed);
    }

    pub(crate) fn deadline(&self) -> Instant {
        instant_from_origin(self.deadline.load(Ordering::Relaxed))
    }

    /// The TTL the watchdog renews a watchdog hold's key to; `None` for a
    /// leased hold.
    pub(crate) fn watchdog_ttl(&self) -> Option<Duration> {
        self.watched
            .as_ref()
            .map(|w| Duration::from_millis(w.ttl_ms))
    }

    /// Whether the lease, not known lost, still runs at `at` by this
    /// process's clock (the server's key surely stands until then). A
    /// lease lost only because nothing renews it any more stands until its
    /// deadline: its holder may still release it.
    pub(crate) fn stands_at(&self, at: Instant) -> bool {
        let lost = self.lost.load(Ordering::Acquire) && !self.unrenewed.load(Ordering::Acquire);
        !lost && at < self.deadline()
    }

    /// Until when the server's key surely stands by this lease, as
    /// [`LeaseState::stands_at`] counts it; `None` when it is known lost.
    pub(crate) fn stands_until(&self) -> Option<Instant> {
        let lost = self.lost.load(Ordering::Acquire) && !self.unrenewed.load(Ordering::Acquire);
        (!lost).then(|| self.deadline())
    }

    pub(crate) fn is_lost(&self) -> bool {
        self.lost.load(Ordering::Acquire) || Instant::now() >= self.deadline()
    }

    pub(super) fn retire(&self) {
        self.retired.store(true, Ordering::Release);
    }

    pub(super) fn is_retired(&self) -> bool {
        self.retired.load(Ordering::Acquire)
    }

    pub(crate) fn mark_lost(&self) {
        self.unrenewed.store(false, Ordering::Release);
        self.lost.store(true, Ordering::Release);
        self.changed.notify_waiters();
    }

    /// Reports the lease lost because nothing will renew it again, while
    /// its key still stands until the deadline (see
    /// [`LeaseState::stands_at`]).
    pub(super) fn mark_unrenewed(&self) {
        self.unrenewed.store(true, Ordering::Release);
        self.lost.store(true, Ordering::Release);
        self.changed.notify_waiters();
    }

    pub(crate) async fn wait_lost(&self) {
        let lost = async {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            // Registered before the flag is read: a `mark_lost` in between
            // still wakes it.
            notified.as_mut().enable();
            if !self.lost.load(Ordering::Acquire) {
                notified.await;
            }
        };
        if self.watched.is_some() {
            return lost.await;
        }
        tokio::pin!(lost);
        loop {
            let deadline = self.deadline();
            tokio::select! {
                _ = &mut lost => return,
                _ = tokio::time::sleep_until(deadline) => {
                    // A renewal may have moved the deadline meanwhile.
                    if Instant::now() >= self.deadline() {
                        return;
                    }
                }
            }
        }
    }
}
