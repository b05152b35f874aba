//! The live guards of each (lock, owner) on one client.
//!
//! Every guard has a [`Slot`] here while it lives, and after its release
//! (claimed) until the release was answered and its hold no longer keeps
//! the key alive. Three things need them (and a [`Lease`](super::Lease)
//! handle reads its hold's lease there):
//!
//! - [`Lock::unlock`](crate::Lock::unlock), Redisson's `unlock()`, releases
//!   one hold of its owner without a guard. When a guard of that owner is
//!   still alive, the hold released is that guard's (the newest one): the
//!   slot is claimed, so the guard's own release later sends nothing. A
//!   stale guard can therefore never release a hold taken after it, and the
//!   owner's count in Redis equals its live holds, but for holds whose
//!   release was never sent or never got through (their lease ran out
//!   first), whose counts stay as long as the key does.
//! - The owner's holds share one key TTL in Redis. When a release leaves
//!   only leased holds of the owner, the TTL it asks for is the longest
//!   lease they still have (see [`Guards::lease_left`]), and an acquire
//!   never sets one shorter than that: no hold expires before its own
//!   lease says. The scripts only ever raise the TTL while the owner keeps
//!   holds (a release that leaves some, a renewal): a request that reaches
//!   Redis after a later one of the owner (a resend, a dropped guard's
//!   release, a renewal sent before its hold's release) carries what was
//!   known when it was made, and must not cut a later hold's lease short.
//! - A release stands by every hold of its owner that shares the key with
//!   it ([`Standing`]): the owner's holds share one key, so the released
//!   hold's count lives in it as long as any of them keeps the key alive,
//!   not only as long as its own lease. A release resent after a failed
//!   connection goes on while any of them stands.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock, Mutex, OnceLock, Weak};
use std::time::Duration;

use dashmap::DashMap;
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
    /// The hold's lease, which `extend` and `keep_alive` change.
    lease: Mutex<SlotLease>,
    /// Wakes the waiters of a [`Lease`](super::Lease) when the hold's
    /// lease is replaced or the hold is claimed.
    changed: Notify,
    /// What keeps the key once its release was answered.
    after: Mutex<After>,
    /// Its release's [`Standing`], once claimed and prepared: the holds
    /// acquired while that release may still be sent join it.
    standing: OnceLock<Arc<Standing>>,
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
    on_server: Option<(u64, u64)>,
    /// How long after its lease's deadline, by this process's clock, Redis
    /// may still keep the hold (see [`Slot::may_stand_until`]).
    overrun: Mutex<Duration>,
    /// The records of released holds this one's record outlasted and
    /// replaced among the guards (see [`Guards::finish`]): releases in
    /// flight may still stand by them, and they end with this one's.
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
    /// [`LINGERING`]), not a wait: the wait is the key's own TTL.
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
    fn shared_on_server(&self, other: &Slot) -> bool {
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
    fn superseded(&self) {
        self.released(After::Gone);
        self.end_replaced();
    }

    /// The records this one replaced no longer keep the key by the TTLs
    /// their releases set.
    fn end_replaced(&self) {
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
    /// [`Guards::finish`]): it takes over the records `old` replaced, and
    /// `old` itself, forgetting those no release stands by any more.
    fn replaces(&self, old: &Arc<Slot>) {
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
    fn life(&self) -> Instant {
        *self
            .life
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Moves the start of this hold's life back to `since`, never forward.
    fn lives_since(&self, since: Instant) {
        let mut life = self
            .life
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        *life = (*life).min(since);
    }

    fn after(&self) -> After {
        *self
            .after
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Until when this hold surely keeps its owner's key alive, by this
    /// process's clock; `watched`: the lease the watchdog keeps the key by
    /// (it renews the key to its own TTL, which a leased hold inside it
    /// cannot count on).
    fn keeps_key_until(&self, watched: Option<&LeaseState>) -> Option<Instant> {
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
    fn wanted(&self, registry: &Registry, watched: Option<&LeaseState>, at: Instant) -> bool {
        !self.is_claimed()
            || self.keeps_key_at(watched, at)
            || (matches!(self.after(), After::Held)
                && self
                    .standing
                    .get()
                    .is_some_and(|standing| standing.stands_at(registry, at)))
    }

    /// Whether this hold surely keeps its owner's key alive at `at`.
    fn keeps_key_at(&self, watched: Option<&LeaseState>, at: Instant) -> bool {
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
    holds: Mutex<Vec<(HoldKey, Arc<Slot>)>>,
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

    fn join(&self, key: &HoldKey, slot: &Arc<Slot>) {
        let mut holds = self
            .holds
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if !holds.iter().any(|(_, s)| Arc::ptr_eq(s, slot)) {
            holds.push((key.clone(), Arc::clone(slot)));
        }
    }
}

/// The live guards of every (lock, owner) of this process, oldest first.
/// An owner's field names its client's id, so the clients of a process
/// share the map without meeting in it; an entry goes with its last guard.
#[derive(Debug, Default)]
pub(crate) struct Guards(DashMap<HoldKey, Vec<Arc<Slot>>>);

static GUARDS: LazyLock<Guards> = LazyLock::new(Guards::default);

/// For each (lock, owner): until when a hold of the owner whose release
/// was never sent (its lease ran out by this process's clock first) or
/// never got through, or a count a release left in the key without a live
/// guard to own it, may still stand in Redis (see
/// [`Slot::may_stand_until`]). The key ends with its TTL, unless a grant of
/// the owner joins it meanwhile: a re-entry, which would raise the TTL to
/// its own lease and keep that count in the key, a count no release will
/// ever take out, so that the lock stays held after the new hold's
/// release. An acquire of the owner that has no live hold there looks in
/// Redis first, and waits for such a key's end ([`Guards::lingering`]).
static LINGERING: LazyLock<DashMap<HoldKey, Instant>> = LazyLock::new(DashMap::new);

/// The size of [`LINGERING`] at which it next forgets its ended entries
/// (twice its size after the last time, at least 64).
static LINGERING_PRUNE_AT: AtomicUsize = AtomicUsize::new(64);

impl Guards {
    /// The process's live guards.
    pub(crate) fn get() -> &'static Guards {
        &GUARDS
    }

    /// The slots of the other owners' holds of `key`'s lock that share its
    /// key when `shared` (a read lock's hash: every owner's read holds),
    /// with their keys; none otherwise. Taken before any entry is locked.
    fn neighbours(&self, key: &HoldKey, shared: bool) -> Vec<(HoldKey, Arc<Slot>)> {
        if !shared {
            return Vec::new();
        }
        self.0
            .iter()
            .filter(|e| e.key().name == key.name && e.key() != key)
            .filter(|e| !e.key().field.ends_with(":write"))
            .flat_map(|e| {
                let k = e.key().clone();
                e.value()
                    .iter()
                    .map(|s| (k.clone(), Arc::clone(s)))
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    /// A new guard's hold, granted by now: it joins the releases of its
    /// owner that still stand (see [`Standing`]), and when `shared` (a read
    /// hold), those of the other owners' read holds of the lock. `rises`:
    /// the grant only raised the key's TTL (see `Kind::ttl_only_rises`).
    pub(crate) fn add(
        &self,
        key: &HoldKey,
        slot: &Arc<Slot>,
        registry: &Registry,
        shared: bool,
        rises: bool,
    ) {
        let now = Instant::now();
        for (_, other) in self.neighbours(key, shared) {
            if let Some(standing) = other.standing.get() {
                if standing.stands_at(registry, now) {
                    standing.join(key, slot);
                }
            }
        }
        let mut slots = self.0.entry(key.clone()).or_default();
        let watched = registry.lease_of(key);
        slots.retain(|s| s.wanted(registry, watched.as_deref(), now));
        for standing in slots.iter().filter_map(|s| s.standing.get()) {
            if standing.stands_at(registry, now) {
                standing.join(key, slot);
            }
        }
        // Granted into the key the owner's other holds surely kept: one
        // key, one life for all of them (the earliest any of them knew).
        let sharing: Vec<_> = slots
            .iter()
            .filter(|other| other.keeps_key_at(watched.as_deref(), now))
            .collect();
        let life = sharing
            .iter()
            .map(|other| other.life())
            .fold(slot.life(), Instant::min);
        slot.lives_since(life);
        for other in sharing {
            other.lives_since(life);
        }
        // A grant that may have set the key's TTL anew (a read-write
        // lock's): a released hold no longer keeps it by the TTL its
        // release set (this one carries their life on). Where TTLs only
        // rise, that TTL still stands: a give-back of a grant that shared
        // the key with the released hold stands by it.
        if !rises {
            for other in slots.iter() {
                if matches!(other.after(), After::Kept(_)) {
                    other.superseded();
                }
            }
        }
        slots.push(Arc::clone(slot));
    }

    /// The standing of `slot`'s release (see [`Standing`]), claimed by the
    /// caller: `slot` and the holds of `key` (and when `shared`, a read
    /// hold, the other owners' read holds of the lock) that surely keep the
    /// key alive now and whose life began before `slot`'s own lease ended
    /// (a give-back's may have ended before it is sent: a chain of holds
    /// that kept the key since a grant made while it ran shared the key
    /// with it, whichever grant ran first), or, both given back, whose
    /// grant ran inside `slot`'s lease or `slot`'s inside its, by the
    /// server's clock (`Slot::shared_on_server`); later grants join it
    /// while it stands. A `slot` not among the guards (a give-back's) is added to
    /// them, for them to join and for the TTLs set meanwhile to count with
    /// its lease.
    pub(crate) fn standing(
        &self,
        key: &HoldKey,
        slot: &Arc<Slot>,
        registry: &Registry,
        shared: bool,
    ) -> Arc<Standing> {
        let now = Instant::now();
        // Until when `slot`'s own lease kept the key, counted from its
        // grant's send: a hold whose life began before then (a reply
        // received) met its count in the key, or its grant, if later, met
        // that life's.
        let own = slot.lease().state.deadline();
        let joins = |k: &HoldKey, s: &Arc<Slot>| {
            !Arc::ptr_eq(s, slot)
                && (s.life() < own || s.shared_on_server(slot))
                && s.keeps_key_at(registry.lease_of(k).as_deref(), now)
        };
        let mut holds = vec![(key.clone(), Arc::clone(slot))];
        holds.extend(
            self.neighbours(key, shared)
                .into_iter()
                .filter(|(k, s)| joins(k, s)),
        );
        let mut slots = self.0.entry(key.clone()).or_default();
        holds.extend(
            slots
                .iter()
                .filter(|s| joins(key, s))
                .map(|s| (key.clone(), Arc::clone(s))),
        );
        let standing = Arc::new(Standing {
            holds: Mutex::new(holds),
        });
        let _ = slot.standing.set(Arc::clone(&standing));
        if !slots.iter().any(|s| Arc::ptr_eq(s, slot)) {
            // A give-back's hold, if granted, stands now while its lease
            // runs: it shares the key with the releases of the owner that
            // stand now too, as a new guard's does.
            if slot.keeps_key_at(None, now) {
                for other in slots.iter().filter_map(|s| s.standing.get()) {
                    if other.stands_at(registry, now) {
                        other.join(key, slot);
                    }
                }
            }
            slots.push(Arc::clone(slot));
        }
        standing
    }

    /// Records how `slot`'s claimed hold left the key once its release was
    /// answered (or given up), and forgets the released holds that no
    /// longer keep the key alive: all of them when this one was the
    /// owner's last (the key is gone, or no longer the owner's). One whose
    /// release left holds of the owner (some perhaps unknown here: a grant
    /// whose reply was lost, not yet settled) stays while the TTL that
    /// release set keeps the key: a give-back of such a grant, sent later,
    /// stands by it. `supersedes`: the answer may have lowered or ended the
    /// key's TTL (a keep, a send that failed, a TTL set anew), so that the
    /// TTLs earlier releases set no longer count; not a release never sent,
    /// nor one that left holds where TTLs only rise.
    pub(crate) fn finish(
        &self,
        key: &HoldKey,
        slot: &Arc<Slot>,
        (after, last, supersedes): (After, bool, bool),
        registry: &Registry,
    ) {
        let now = Instant::now();
        let watched = registry.lease_of(key);
        slot.released(after);
        if supersedes {
            // Its own record, if a rerun of its release had answered
            // before, and those that record replaced, are over too.
            slot.end_replaced();
        }
        // The life of a hold released before this one goes on in this
        // one's, which kept the key with it; when this answer's TTL is the
        // one in force, that hold no longer keeps the key by the TTL its
        // release set.
        if let Some(slots) = self.0.get(key) {
            for s in slots.iter().filter(|s| !Arc::ptr_eq(s, slot)) {
                if let After::Kept(until) = s.after() {
                    if now < until {
                        slot.lives_since(s.life());
                    }
                    if supersedes {
                        s.superseded();
                    }
                }
            }
        }
        // A record this one outlasts says nothing more (its life goes on in
        // this one's, and the key stands at least as long by this one): this
        // one replaces it among the guards, so that records do not pile up
        // while the owner re-enters inside a long hold. Not one given back
        // with its grant's server time, which says more. The releases in
        // flight that stand by it still read it, until this one's record
        // is superseded too.
        let outlasted = |s: &Arc<Slot>| match (slot.after(), s.after()) {
            (After::Kept(mine), After::Kept(theirs)) => {
                !supersedes
                    && !Arc::ptr_eq(s, slot)
                    && s.on_server.is_none()
                    && theirs <= mine
                    && slot.life() <= s.life()
            }
            _ => false,
        };
        self.0.remove_if_mut(key, |_, slots| {
            let answered = |s: &Arc<Slot>| s.is_claimed() && !matches!(s.after(), After::Held);
            // Only a record among the guards replaces others: one that left
            // them meanwhile (outlasted by a later one) would take them
            // where no later answer ends them.
            let present = slots.iter().any(|s| Arc::ptr_eq(s, slot));
            slots.retain(|s| {
                if present && outlasted(s) {
                    slot.replaces(s);
                    return false;
                }
                !(last && answered(s)) && s.wanted(registry, watched.as_deref(), now)
            });
            slots.is_empty()
        });
    }

    /// How many slots the guards of `client`'s owners have here (their
    /// field opens with its id): live guards and released holds still
    /// recorded.
    #[cfg(feature = "test-counters")]
    pub(crate) fn slots_of(&self, client: &str) -> usize {
        self.0
            .iter()
            .filter(|e| e.key().field.starts_with(client))
            .map(|e| e.value().len())
            .sum()
    }

    /// Records that `slot`'s hold of `key`, whose release is not sent or
    /// did not get through, may still stand in Redis (see [`LINGERING`]).
    pub(crate) fn lingers(&self, key: &HoldKey, slot: &Slot) {
        self.lingers_until(key, slot.may_stand_until());
    }

    /// Records that a count of `key`'s owner that no live guard owns may
    /// stand in Redis until `until` (see [`LINGERING`]).
    pub(crate) fn lingers_until(&self, key: &HoldKey, until: Instant) {
        let now = Instant::now();
        if until <= now {
            return;
        }
        let len = LINGERING.len();
        if len >= LINGERING_PRUNE_AT.load(Ordering::Relaxed) {
            LINGERING.retain(|_, until| *until > now);
            LINGERING_PRUNE_AT.store((LINGERING.len() * 2).max(64), Ordering::Relaxed);
        }
        let mut entry = LINGERING.entry(key.clone()).or_insert(until);
        *entry = (*entry).max(until);
    }

    /// Forgets what [`Guards::lingers`] recorded of `key`: its owner's
    /// count is gone from Redis.
    pub(crate) fn forget_lingering(&self, key: &HoldKey) {
        LINGERING.remove(key);
    }

    /// Whether a count of `key`'s owner that no live guard owns may stand
    /// in Redis now (see [`LINGERING`]), when the owner has no live hold of
    /// the lock here: a guard still alive whose lease ran out, or a hold
    /// recorded by [`Guards::lingers`]. False when a live hold keeps the
    /// key anyway: a re-entry joins it by right.
    pub(crate) fn lingering(&self, key: &HoldKey) -> bool {
        let now = Instant::now();
        let (mut live, mut stale) = (false, false);
        if let Some(slots) = self.0.get(key) {
            for slot in slots.iter().filter(|slot| !slot.is_claimed()) {
                match slot.lease().state.is_lost() {
                    false => live = true,
                    true => stale |= now < slot.may_stand_until(),
                }
            }
        }
        if live {
            return false;
        }
        if let Some(until) = LINGERING.get(key).map(|until| *until) {
            if now < until {
                return true;
            }
            LINGERING.remove_if(key, |_, until| *until <= now);
        }
        stale
    }

    /// Forgets `slot`; the entry goes with its last slot.
    pub(crate) fn remove(&self, key: &HoldKey, slot: &Arc<Slot>) {
        self.0.remove_if_mut(key, |_, slots| {
            if let Some(at) = slots.iter().rposition(|s| Arc::ptr_eq(s, slot)) {
                slots.remove(at);
            }
            slots.is_empty()
        });
    }

    /// Claims the newest live guard of `key`: its hold is the caller's to
    /// release (it stays here until its release was answered, see
    /// [`Guards::lease_left`]).
    pub(crate) fn claim_newest(&self, key: &HoldKey) -> Option<Arc<Slot>> {
        let slots = self.0.get(key)?;
        slots.iter().rev().find(|slot| slot.claim()).cloned()
    }

    /// The longest lease the live leased holds of `key` still have by this
    /// process's clock (zero when they all ran out); `None` when it has
    /// no live leased guard. (Not those whose release is on its way: a
    /// hold whose release then fails stays no longer than it would have.)
    pub(crate) fn lease_left(&self, key: &HoldKey) -> Option<Duration> {
        let slots = self.0.get(key)?;
        let now = Instant::now();
        slots
            .iter()
            .filter(|slot| !slot.is_claimed())
            .map(|slot| slot.lease())
            .filter(|lease| lease.lease_ms.is_some())
            .map(|lease| lease.state.deadline())
            .map(|until| until.saturating_duration_since(now))
            .max()
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
