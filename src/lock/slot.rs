//! One hold as its owner's other calls see it ([`Slot`]): its lease, its
//! claim, and once released, how its release left the owner's key
//! ([`After`]); and what a release stands by ([`Standing`]): the holds
//! that share the key with it (the guards keep both, see
//! [`super::holds`]).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use crate::engine::request::GrantedIn;
use crate::engine::takeover::HeldLease;
use crate::engine::watchdog::{drift_margin, HoldKey, LeaseState, Registry};

/// One live guard's hold, as its owner's other calls see it.
#[derive(Debug)]
pub(crate) struct Slot {
    /// Released, by its guard or by `Lock::unlock`: whoever sets it first
    /// sends the release, and only they.
    claimed: AtomicBool,
    /// Taken with the lean acquire: its release may go lean too (see
    /// `lock::lean`).
    lean: AtomicBool,
    /// The hold's lease, which `extend` and `keep_alive` change.
    lease: Mutex<SlotLease>,
    /// Wakes the waiters of a [`Lease`](super::Lease) when the hold's
    /// lease is replaced or the hold is claimed.
    changed: Notify,
    /// What keeps the key once its release was answered.
    after: Mutex<After>,
    /// Its release's [`Standing`], once claimed and prepared: the holds
    /// acquired while that release may still be sent join it.
    pub(super) standing: OnceLock<Arc<Standing>>,
    /// Since when the owner's key has surely stood without a break, as far
    /// as this hold tells: when it was surely granted by (the reply of its
    /// acquire; for a hold given back that no guard owned, the latest
    /// instant its grant may have been made), or earlier when it was
    /// granted while other holds of the owner surely kept the key (it
    /// joined their key, and its life goes on theirs). A
    /// hold given back whose lease ended before that give-back is sent
    /// shares the key of every hold whose life began before that end and
    /// still stands.
    life: Mutex<Instant>,
    /// For a hold given back whose settle found it: when it was granted by
    /// the server's clock (ms since the Unix epoch), and its TTL (ms).
    pub(super) on_server: Option<(u64, u64)>,
    /// How long after its lease's deadline, by this process's clock, Redis
    /// may still keep the hold (see [`Slot::may_stand_until`]).
    overrun: Mutex<Duration>,
    /// The records of released holds this one's record outlasted and
    /// replaced among the guards (see
    /// [`Guards::finish`](super::holds::Guards::finish)): releases in flight
    /// may still stand by them, and they end with this one's.
    replaced: Mutex<Vec<Weak<Slot>>>,
}

/// How far a grant's server time, read from its latch, may run after the
/// TTL its script set (ms).
const SERVER_SLACK_MS: u64 = 5;

/// How long past its TTL Redis may still answer for a key: it keeps TTLs
/// in whole ms, and a key is gone only once its ms has passed.
pub(crate) const EXPIRY_SLACK: Duration = Duration::from_millis(2);

/// How long past `state`'s deadline Redis may keep its hold, for a lease
/// (`lease_ms`, `None`: the watchdog's) whose call was answered `now`:
/// the deadline counts from that call's send, and Redis set the TTL when
/// the call ran, at most the reply's time; a watchdog deadline leaves out
/// its drift margin too.
fn overrun(lease_ms: Option<u64>, state: &LeaseState, now: Instant) -> Duration {
    let (ttl, margin) = match lease_ms {
        Some(ms) => (Duration::from_millis(ms), Duration::ZERO),
        None => {
            let ttl = state.watchdog_ttl().unwrap_or_default();
            (ttl, drift_margin(ttl))
        }
    };
    let sent = state.deadline().checked_sub(ttl - margin);
    let answered_after = sent.map_or(Duration::ZERO, |sent| now.saturating_duration_since(sent));
    answered_after + margin + EXPIRY_SLACK
}

/// How a hold keeps its owner's key alive, by this process's clock.
#[derive(Debug, Clone, Copy)]
pub(crate) enum After {
    /// Held (its release not answered yet): by its lease.
    Held,
    /// Released, holds of the owner remaining: the release set the key's
    /// TTL, which lasts at least until then.
    Kept(Instant),
    /// Released as the owner's last hold, or given up: not at all.
    Gone,
}

/// How long a hold lasts: its lease (`None`: the watchdog's) and state.
#[derive(Debug, Clone)]
pub(crate) struct SlotLease {
    pub(crate) lease_ms: Option<u64>,
    pub(crate) state: Arc<LeaseState>,
}

impl Slot {
    /// The slot of a hold granted by now, `lease_ms` (`None`: the
    /// watchdog's) counted as `state` says.
    pub(crate) fn new(lease_ms: Option<u64>, state: Arc<LeaseState>) -> Arc<Slot> {
        let now = Instant::now();
        let overrun = overrun(lease_ms, &state, now);
        Arc::new(Slot {
            claimed: AtomicBool::new(false),
            lean: AtomicBool::new(false),
            lease: Mutex::new(SlotLease { lease_ms, state }),
            changed: Notify::new(),
            after: Mutex::new(After::Held),
            standing: OnceLock::new(),
            life: Mutex::new(now),
            on_server: None,
            overrun: Mutex::new(overrun),
            replaced: Mutex::default(),
        })
    }

    /// Marks the hold as taken with the lean acquire.
    pub(crate) fn mark_lean(&self) {
        self.lean.store(true, Ordering::Release);
    }

    /// Whether the hold was taken with the lean acquire.
    pub(crate) fn is_lean(&self) -> bool {
        self.lean.load(Ordering::Acquire)
    }

    /// The slot of no hold: claimed, its lease run out (what a guard that
    /// no longer holds answers).
    pub(crate) fn ended() -> Arc<Slot> {
        let slot = Slot::new(Some(0), LeaseState::leased(Instant::now()));
        slot.claimed.store(true, Ordering::Release);
        slot
    }

    /// The slot of a hold no guard owned (an acquire's grant its caller
    /// never got), claimed for its give-back: taken `granted`, with a TTL
    /// of `lease_ms` from then. Its lease counts from the earliest instant
    /// it may have been taken, and its life from the latest: its count
    /// surely stood in the key from then on.
    pub(crate) fn given_back(lease_ms: u64, granted: GrantedIn) -> Arc<Slot> {
        let state = LeaseState::leased(granted.from + Duration::from_millis(lease_ms));
        Arc::new(Slot {
            claimed: AtomicBool::new(true),
            lean: AtomicBool::new(false),
            lease: Mutex::new(SlotLease {
                lease_ms: Some(lease_ms),
                state,
            }),
            changed: Notify::new(),
            after: Mutex::new(After::Held),
            standing: OnceLock::new(),
            life: Mutex::new(granted.by),
            on_server: granted.on_server.map(|at| (at, lease_ms)),
            // Its lease counts from the earliest instant of the grant.
            overrun: Mutex::new(granted.by.saturating_duration_since(granted.from) + EXPIRY_SLACK),
            replaced: Mutex::default(),
        })
    }

    /// Until when, by this process's clock, Redis may still keep this
    /// hold, whether or not its release was sent, as far as this client
    /// can tell: its lease's deadline, plus the time its call took to be
    /// answered (the deadline counts from the send, Redis counts the TTL
    /// from when the call ran), and for a watchdog hold a TTL more (a
    /// renewal whose reply was lost may have set it later). A bound for
    /// how long an acquire of the owner looks in Redis first (see
    /// `LINGERING` in [`super::holds`]), not a wait: the wait is the key's
    /// own TTL.
    pub(crate) fn may_stand_until(&self) -> Instant {
        let lease = self.lease();
        let overrun = *self
            .overrun
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let renewed = lease.state.watchdog_ttl().unwrap_or_default();
        lease.state.deadline() + overrun + renewed
    }

    /// Whether this hold and `other`, both given back with their grants'
    /// server times, surely shared their owner's key: one was granted while
    /// the other's count surely kept it, by the server's clock (their
    /// counts stayed in it until given back). Either may have run first.
    pub(super) fn shared_on_server(&self, other: &Slot) -> bool {
        match (self.on_server, other.on_server) {
            (Some((a, a_ttl)), Some((b, b_ttl))) => {
                // Each time is its latch's write, a ms or two after the
                // TTL the grant set, and read to the ms.
                let inside = |at: u64, from: u64, ttl: u64| {
                    from <= at && at.saturating_add(SERVER_SLACK_MS) < from.saturating_add(ttl)
                };
                inside(b, a, a_ttl) || inside(a, b, b_ttl)
            }
            _ => false,
        }
    }

    /// Records how the key stands after this hold's release.
    pub(crate) fn released(&self, after: After) {
        *self
            .after
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = after;
    }

    /// This released hold no longer keeps the key by the TTL its release
    /// set (a later answer's TTL is the one in force), nor do the records
    /// it replaced.
    pub(super) fn superseded(&self) {
        self.released(After::Gone);
        self.end_replaced();
    }

    /// The records this one replaced no longer keep the key by the TTLs
    /// their releases set.
    pub(super) fn end_replaced(&self) {
        let replaced = std::mem::take(
            &mut *self
                .replaced
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner()),
        );
        for old in replaced.iter().filter_map(Weak::upgrade) {
            old.superseded();
        }
    }

    /// This hold's record now stands for `old`'s too (see
    /// [`Guards::finish`](super::holds::Guards::finish)): it takes over the
    /// records `old` replaced, and `old` itself, forgetting those no
    /// release stands by any more.
    pub(super) fn replaces(&self, old: &Arc<Slot>) {
        let theirs = std::mem::take(
            &mut *old
                .replaced
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner()),
        );
        let mut mine = self
            .replaced
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        mine.extend(theirs);
        mine.retain(|w| w.strong_count() > 0);
        mine.push(Arc::downgrade(old));
    }

    /// Since when the key has surely stood, by this hold's chain (see
    /// `Slot::life`).
    pub(super) fn life(&self) -> Instant {
        *self
            .life
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Moves the start of this hold's life back to `since`, never forward.
    pub(super) fn lives_since(&self, since: Instant) {
        let mut life = self
            .life
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        *life = (*life).min(since);
    }

    pub(super) fn after(&self) -> After {
        *self
            .after
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Until when this hold surely keeps its owner's key alive, by this
    /// process's clock; `watched`: the lease the watchdog keeps the key by
    /// (it renews the key to its own TTL, which a leased hold inside it
    /// cannot count on).
    pub(super) fn keeps_key_until(&self, watched: Option<&LeaseState>) -> Option<Instant> {
        match self.after() {
            After::Held => {
                let lease = self.lease();
                let state = match (lease.lease_ms, watched) {
                    (Some(_), Some(watched)) => watched,
                    _ => &*lease.state,
                };
                state.stands_until()
            }
            After::Kept(until) => Some(until),
            After::Gone => None,
        }
    }

    /// Whether this slot is still needed among its owner's: live, keeping
    /// the key alive, or its release unanswered and standing (later grants
    /// join it).
    pub(super) fn wanted(
        &self,
        registry: &Registry,
        watched: Option<&LeaseState>,
        at: Instant,
    ) -> bool {
        !self.is_claimed()
            || self.keeps_key_at(watched, at)
            || (matches!(self.after(), After::Held)
                && self
                    .standing
                    .get()
                    .is_some_and(|standing| standing.stands_at(registry, at)))
    }

    /// Whether this hold surely keeps its owner's key alive at `at`.
    pub(super) fn keeps_key_at(&self, watched: Option<&LeaseState>, at: Instant) -> bool {
        self.keeps_key_until(watched)
            .is_some_and(|until| at < until)
    }

    /// Takes the right to release this hold; false when it was taken
    /// already.
    pub(crate) fn claim(&self) -> bool {
        let claimed = !self.claimed.swap(true, Ordering::AcqRel);
        if claimed {
            self.changed.notify_waiters();
        }
        claimed
    }

    pub(crate) fn is_claimed(&self) -> bool {
        self.claimed.load(Ordering::Acquire)
    }

    /// Whether the hold is no longer safely held: released (claimed), or
    /// its lease known lost or run out by this process's clock.
    pub(crate) fn is_lost(&self) -> bool {
        self.is_claimed() || self.lease().state.is_lost()
    }

    pub(crate) fn lease(&self) -> SlotLease {
        self.lease
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    /// Replaces the hold's lease with one whose call was just answered.
    pub(crate) fn set_lease(&self, lease_ms: Option<u64>, state: Arc<LeaseState>) {
        *self
            .overrun
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) =
            overrun(lease_ms, &state, Instant::now());
        *self
            .lease
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = SlotLease { lease_ms, state };
        self.changed.notify_waiters();
    }

    /// A change of the hold's lease or its claim, registered before the
    /// caller looks at them (see [`Notified::enable`](tokio::sync::futures::Notified::enable)).
    pub(crate) fn changed(&self) -> tokio::sync::futures::Notified<'_> {
        self.changed.notified()
    }
}

impl HeldLease for Slot {
    fn state(&self) -> Arc<LeaseState> {
        self.lease().state
    }

    fn ended(&self) -> bool {
        self.is_claimed()
    }
}

/// What the release of one hold stands by: the holds of its owner that
/// shared the key with it, its own first. Two holds of an owner that both
/// surely stand at one instant are in the same key (it never expired
/// between them), so the released hold's count stays in the key as long as
/// any of them keeps it alive: the release may be sent (and resent) until
/// then, and not after (the key may be gone then, and a new hold of the
/// owner, in a new key, would be taken by it). A hold joins when it stands
/// together with one that did: the live and unanswered holds of the owner
/// when the release is prepared, and each later grant of the owner while
/// the release still stands.
#[derive(Debug)]
pub(crate) struct Standing {
    /// The holds, each with its (lock, owner): its own, and for a read
    /// hold, other owners' read holds too (a read lock's hash, and every
    /// owner's count in it, lives as long as any read hold).
    pub(super) holds: Mutex<Vec<(HoldKey, Arc<Slot>)>>,
}

impl Standing {
    /// Whether the key surely stands at `at`, by any of the holds.
    pub(crate) fn stands_at(&self, registry: &Registry, at: Instant) -> bool {
        self.deadline(registry).is_some_and(|until| at < until)
    }

    /// The latest instant the key surely stands until by the holds, as
    /// known now; `None` when none keeps it.
    pub(crate) fn deadline(&self, registry: &Registry) -> Option<Instant> {
        self.holds
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .iter()
            .filter_map(|(key, slot)| slot.keeps_key_until(registry.lease_of(key).as_deref()))
            .max()
    }

    /// Forgets the holds: the release this standing served is over (or
    /// will never be sent). Its own slot is among them, and holds it in
    /// turn: neither would be freed.
    pub(crate) fn clear(&self) {
        self.holds
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clear();
    }

    pub(super) fn join(&self, key: &HoldKey, slot: &Arc<Slot>) {
        let mut holds = self
            .holds
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if !holds.iter().any(|(_, s)| Arc::ptr_eq(s, slot)) {
            holds.push((key.clone(), Arc::clone(slot)));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn given_back(on_server: u64, ttl_ms: u64) -> Arc<Slot> {
        let now = Instant::now();
        let granted = GrantedIn {
            on_server: Some(on_server),
            ..GrantedIn::at(now)
        };
        Slot::given_back(ttl_ms, granted)
    }

    #[tokio::test]
    async fn grants_share_a_key_when_one_ran_inside_the_others_lease_by_the_server() {
        let first = given_back(10_000, 1_000);
        // Inside the first's lease, whichever is asked.
        assert!(first.shared_on_server(&given_back(10_900, 60_000)));
        assert!(given_back(10_900, 60_000).shared_on_server(&first));
        // The first inside a longer lease that ran before it.
        assert!(first.shared_on_server(&given_back(5_000, 60_000)));
        // After the first's lease, or before and ended by then: not known.
        assert!(!first.shared_on_server(&given_back(11_000, 60_000)));
        assert!(!first.shared_on_server(&given_back(8_000, 2_000)));
        // Within a few ms of the lease's end: not surely inside it.
        assert!(!first.shared_on_server(&given_back(10_996, 60_000)));
        assert!(first.shared_on_server(&given_back(10_994, 60_000)));
        // Without a server time: not by this rule.
        let local = Slot::given_back(1_000, GrantedIn::at(Instant::now()));
        assert!(!first.shared_on_server(&local));
    }
}
