//! The live guards of each (lock, owner) on one client.
//!
//! Every guard has a [`Slot`] here while it lives. Two things need them:
//!
//! - [`Lock::unlock`](crate::Lock::unlock), Redisson's `unlock()`, releases
//!   one hold of its owner without a guard. When a guard of that owner is
//!   still alive, the hold released is that guard's (the newest one): the
//!   slot is claimed, so the guard's own release later sends nothing. A
//!   stale guard can therefore never release a hold taken after it, and the
//!   owner's count in Redis always equals its live holds.
//! - The owner's holds share one key TTL in Redis. When a release leaves
//!   only leased holds of the owner, the TTL it sets is the longest lease
//!   they still have (see [`Guards::lease_left`]), and an acquire never sets
//!   one shorter than that: no hold expires before its own lease says.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, LazyLock, Mutex};
use std::time::Duration;

use dashmap::DashMap;
use tokio::time::Instant;

use crate::engine::watchdog::{HoldKey, LeaseState};

/// One live guard's hold, as its owner's other calls see it.
#[derive(Debug)]
pub(crate) struct Slot {
    /// Released, by its guard or by `Lock::unlock`: whoever sets it first
    /// sends the release, and only they.
    claimed: AtomicBool,
    /// The hold's lease, which `extend` and `keep_alive` change.
    lease: Mutex<SlotLease>,
}

/// How long a hold lasts: its lease (`None`: the watchdog's) and state.
#[derive(Debug, Clone)]
pub(crate) struct SlotLease {
    pub(crate) lease_ms: Option<u64>,
    pub(crate) state: Arc<LeaseState>,
}

impl Slot {
    pub(crate) fn new(lease_ms: Option<u64>, state: Arc<LeaseState>) -> Arc<Slot> {
        Arc::new(Slot {
            claimed: AtomicBool::new(false),
            lease: Mutex::new(SlotLease { lease_ms, state }),
        })
    }

    /// Takes the right to release this hold; false when it was taken
    /// already.
    pub(crate) fn claim(&self) -> bool {
        !self.claimed.swap(true, Ordering::AcqRel)
    }

    pub(crate) fn is_claimed(&self) -> bool {
        self.claimed.load(Ordering::Acquire)
    }

    pub(crate) fn lease(&self) -> SlotLease {
        self.lease
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    pub(crate) fn set_lease(&self, lease_ms: Option<u64>, state: Arc<LeaseState>) {
        *self
            .lease
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = SlotLease { lease_ms, state };
    }
}

/// The live guards of every (lock, owner) of this process, oldest first.
/// An owner's field names its client's id, so the clients of a process
/// share the map without meeting in it; an entry goes with its last guard.
#[derive(Debug, Default)]
pub(crate) struct Guards(DashMap<HoldKey, Vec<Arc<Slot>>>);

static GUARDS: LazyLock<Guards> = LazyLock::new(Guards::default);

impl Guards {
    /// The process's live guards.
    pub(crate) fn get() -> &'static Guards {
        &GUARDS
    }

    pub(crate) fn add(&self, key: &HoldKey, slot: &Arc<Slot>) {
        self.0
            .entry(key.clone())
            .or_default()
            .push(Arc::clone(slot));
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

    /// Claims and forgets the newest live guard of `key`: its hold is the
    /// caller's to release.
    pub(crate) fn claim_newest(&self, key: &HoldKey) -> Option<Arc<Slot>> {
        let mut claimed = None;
        self.0.remove_if_mut(key, |_, slots| {
            while let Some(slot) = slots.pop() {
                if slot.claim() {
                    claimed = Some(slot);
                    break;
                }
            }
            slots.is_empty()
        });
        claimed
    }

    /// The longest lease the live leased holds of `key` still have by this
    /// process's clock (zero when they all ran out); `None` when it has
    /// no live leased guard.
    pub(crate) fn lease_left(&self, key: &HoldKey) -> Option<Duration> {
        let slots = self.0.get(key)?;
        let now = Instant::now();
        slots
            .iter()
            .filter(|slot| !slot.is_claimed())
            .map(|slot| slot.lease())
            .filter(|lease| lease.lease_ms.is_some())
            .map(|lease| lease.state.deadline().saturating_duration_since(now))
            .max()
    }
}
