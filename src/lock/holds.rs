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

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock, Mutex};
use std::time::Duration;

use crate::engine::watchdog::HoldMap;
use tokio::time::Instant;

use super::slot::{After, Slot, Standing};
use crate::engine::watchdog::{HoldKey, Registry};

/// The live guards of every (lock, owner) of this process, oldest first.
/// An owner's field names its client's id, so the clients of a process
/// share the map without meeting in it; an entry goes with its last guard.
#[derive(Debug, Default)]
pub(crate) struct Guards(HoldMap<Vec<Arc<Slot>>>);

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
static LINGERING: LazyLock<HoldMap<Instant>> = LazyLock::new(HoldMap::default);

/// When [`LINGERING`] next forgets its ended entries.
static LINGERING_PRUNE_AT: PruneAt = PruneAt::new();

/// When a process-wide map of the owners' keys next forgets the entries
/// that have ended: once it has grown to a size (64 at first), and then at
/// twice the size that pass left, so that the passes cost a constant share
/// of the inserts however many entries stay.
pub(super) struct PruneAt(AtomicUsize);

impl PruneAt {
    const LEAST: usize = 64;

    pub(super) const fn new() -> PruneAt {
        PruneAt(AtomicUsize::new(PruneAt::LEAST))
    }

    /// Runs `prune` (which forgets what has ended and returns the size
    /// left) when a map of `len` entries is due.
    pub(super) fn prune_if_due(&self, len: usize, prune: impl FnOnce() -> usize) {
        if len >= self.0.load(Ordering::Relaxed) {
            let left = prune();
            self.0
                .store((left * 2).max(PruneAt::LEAST), Ordering::Relaxed);
        }
    }
}

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
        LINGERING_PRUNE_AT.prune_if_due(LINGERING.len(), || {
            LINGERING.retain(|_, until| *until > now);
            LINGERING.len()
        });
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

    /// Whether the owner of `key` holds nothing of the lock here: no guard
    /// (nor a release on its way), and no count of it left standing (see
    /// [`Guards::lingering`]).
    pub(crate) fn holds_nothing(&self, key: &HoldKey) -> bool {
        !self.0.contains_key(key) && !self.lingering(key)
    }

    /// Whether `slot`'s hold is its owner's only one of the lock here, no
    /// other count of it left standing.
    pub(crate) fn holds_only(&self, key: &HoldKey, slot: &Arc<Slot>) -> bool {
        let only = self
            .0
            .get(key)
            .is_some_and(|slots| slots.len() == 1 && Arc::ptr_eq(&slots[0], slot));
        only && LINGERING
            .get(key)
            .is_none_or(|until| *until <= Instant::now())
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
