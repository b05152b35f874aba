//! The fair lock: Redisson's `getFairLock` (`RedissonFairLock`).

use std::time::Duration;

use super::face;
use super::{Kind, LockCore, Reentry};
use crate::config::DEFAULT_FAIR_WAITER_TIMEOUT;
use crate::{Client, LockGuard};

/// A fair lock, from [`Client::fair_lock`]: the reentrant lock, granted
/// first come, first served across every client and process, through a
/// queue of waiters (`redisson_lock_queue:{name}`,
/// `redisson_lock_timeout:{name}`), as Redisson's `getFairLock`.
///
/// - Each waiter is woken on its own channel when its turn comes.
/// - A waiter that gives up (its wait ran out, its future was dropped, an
///   error) leaves the queue at once and the ones behind it move up.
/// - A waiter whose process died is skipped once it has been silent for the
///   waiter timeout ([`DEFAULT_FAIR_WAITER_TIMEOUT`], 300 s;
///   [`FairLock::with_waiter_timeout`]): until then the line waits for it,
///   which is the price of fairness.
/// - `try_lock()` (one attempt) does not join the queue.
/// - An owner has one entry in the queue, shared by its waits.
/// - Shared with Java clients, the queue's deadlines are read on each
///   Redisson client's clock: mind the clocks, as for the
///   [`PermitExpirableSemaphore`](crate::PermitExpirableSemaphore#clocks-in-a-fleet-shared-with-redisson).
///
/// Everything else (owners, reentrancy, leases, the watchdog, guards,
/// cancel safety) is as [`Lock`](crate::Lock)'s.
#[derive(Clone)]
pub struct FairLock {
    core: LockCore,
}

impl FairLock {
    pub(crate) fn new(client: Client, name: String) -> FairLock {
        let kind = Kind::Fair {
            waiter_timeout: DEFAULT_FAIR_WAITER_TIMEOUT,
            reentry: Reentry::Counted,
        };
        FairLock {
            core: LockCore::new(client, name, kind),
        }
    }

    /// The same lock, with waiters that count as dead after `timeout` of
    /// silence (default 300 s, as Redisson): a waiter whose process died
    /// blocks the queue that long at most. A bad value (under 1 ms, over
    /// [`MAX_DURATION`](crate::config::MAX_DURATION)) is reported by the
    /// first wait.
    pub fn with_waiter_timeout(&self, timeout: Duration) -> FairLock {
        FairLock {
            core: self.core.with_waiter_timeout(timeout),
        }
    }

    /// How long a queued waiter may stay silent before the others skip it.
    pub fn waiter_timeout(&self) -> Duration {
        self.core.waiter_timeout()
    }
}

face::lock_face!(FairLock, guard: LockGuard = face::plain);
