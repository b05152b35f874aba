//! The spin lock: Redisson's `getSpinLock` (`RedissonSpinLock`).

use super::face;
use super::{Kind, LockCore};
use crate::{Backoff, Client, LockGuard};

/// A spin lock, from [`Client::spin_lock`]: the reentrant lock's hash and
/// scripts (it excludes [`Lock`](crate::Lock) holders of the same name, and
/// Redisson's `getLock` and `getSpinLock`), but its waiters poll with
/// exponential backoff and jitter instead of subscribing.
///
/// For very many locks with waiters, where one subscription per lock name
/// costs too much. The price: a waiter learns of a release up to one pause
/// late, and polling waiters cost Redis one call per pause. The pauses are
/// a [`Backoff`], 1 ms up to 128 ms by default ([`SpinLock::with_backoff`]).
///
/// Everything else (owners, reentrancy, leases, the watchdog, guards,
/// cancel safety) is as [`Lock`](crate::Lock)'s.
#[derive(Clone)]
pub struct SpinLock {
    core: LockCore,
}

impl SpinLock {
    pub(crate) fn new(client: Client, name: String) -> SpinLock {
        SpinLock {
            core: LockCore::new(client, name, Kind::Spin(Backoff::default())),
        }
    }

    /// The same lock, with waiters that pause by `backoff` between tries.
    pub fn with_backoff(&self, backoff: Backoff) -> SpinLock {
        SpinLock {
            core: self.core.with_kind(Kind::Spin(backoff)),
        }
    }

    /// The pauses between a waiter's tries.
    pub fn backoff(&self) -> Backoff {
        self.core.kind().backoff().unwrap_or_default()
    }
}

face::lock_face!(SpinLock, guard: LockGuard = face::plain);
