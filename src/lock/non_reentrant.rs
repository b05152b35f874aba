//! The non-reentrant locks: Redisson's `getNonReentrantLock` and
//! `getNonReentrantFairLock`.

use std::time::Duration;

use super::face;
use super::{Kind, LockCore, Reentry};
use crate::config::DEFAULT_FAIR_WAITER_TIMEOUT;
use crate::{Client, LockGuard};

/// A non-reentrant lock, from [`Client::non_reentrant_lock`]: the lock of
/// [`Lock`](crate::Lock) (the same hash, so it excludes `Lock` holders and
/// Redisson's `getLock` ones), except that its holder cannot take it
/// again: a second acquire by the owner that holds it fails with
/// [`Error::NonReentrantReacquire`](crate::Error::NonReentrantReacquire)
/// instead of re-entering, as Redisson's `getNonReentrantLock`. Other
/// owners wait as usual.
///
/// # Why
/// The default owner is the calling tokio task, so futures polled inside
/// one task (`join!`, `select!`, `FuturesUnordered`, `buffer_unordered`)
/// share an owner. On a reentrant lock the second of them re-enters the
/// first one's hold, and both "critical sections" run at once. On this
/// lock, the second is refused:
///
/// ```no_run
/// # async fn run(client: ferrisson::Client) -> ferrisson::Result<()> {
/// let lock = client.non_reentrant_lock("payments:settle");
/// let (first, second) = tokio::join!(lock.lock(), lock.lock());
/// // One of them holds the lock; the other is refused, not let in.
/// assert!(first.is_ok() != second.is_ok());
/// # Ok(()) }
/// ```
///
/// Give each concurrent branch its own owner
/// ([`with_owner`](NonReentrantLock::with_owner)) when the branches should
/// wait for each other instead.
///
/// Everything else (owners, leases, the watchdog, guards, cancel safety)
/// is as [`Lock`](crate::Lock)'s; the hold count is never above 1.
#[derive(Clone)]
pub struct NonReentrantLock {
    core: LockCore,
}

impl NonReentrantLock {
    pub(crate) fn new(client: Client, name: String) -> NonReentrantLock {
        NonReentrantLock {
            core: LockCore::new(client, name, Kind::Plain(Reentry::Refused)),
        }
    }
}

face::lock_face!(NonReentrantLock, guard: LockGuard = face::plain);

/// A non-reentrant fair lock, from [`Client::non_reentrant_fair_lock`]: the
/// [`FairLock`](crate::FairLock) (the same hash, queue and channels, so it
/// shares its line with `FairLock` waiters and Redisson's `getFairLock`
/// ones), except that its holder cannot take it again, as
/// [`NonReentrantLock`]'s: Redisson's `getNonReentrantFairLock`.
///
/// Everything else (the queue, the waiter timeout, owners, leases, the
/// watchdog, guards, cancel safety) is as [`FairLock`](crate::FairLock)'s.
#[derive(Clone)]
pub struct NonReentrantFairLock {
    core: LockCore,
}

impl NonReentrantFairLock {
    pub(crate) fn new(client: Client, name: String) -> NonReentrantFairLock {
        let kind = Kind::Fair {
            waiter_timeout: DEFAULT_FAIR_WAITER_TIMEOUT,
            reentry: Reentry::Refused,
        };
        NonReentrantFairLock {
            core: LockCore::new(client, name, kind),
        }
    }

    /// The same lock, with waiters that count as dead after `timeout` of
    /// silence (see [`FairLock::with_waiter_timeout`](crate::FairLock::with_waiter_timeout)).
    pub fn with_waiter_timeout(&self, timeout: Duration) -> NonReentrantFairLock {
        NonReentrantFairLock {
            core: self.core.with_waiter_timeout(timeout),
        }
    }

    /// How long a queued waiter may stay silent before the others skip it.
    pub fn waiter_timeout(&self) -> Duration {
        self.core.waiter_timeout()
    }
}

face::lock_face!(NonReentrantFairLock, guard: LockGuard = face::plain);
