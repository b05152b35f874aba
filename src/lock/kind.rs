//! Every difference between the kinds of lock.

use std::time::Duration;

use crate::engine::keys;
use crate::engine::watchdog::Renewal;
use crate::Backoff;

/// How long a fair lock's queued waiter may stay silent before the others
/// skip it, by default: 300 s, as Redisson.
pub const DEFAULT_FAIR_WAITER_TIMEOUT: Duration = Duration::from_secs(300);

/// Which lock of the family a handle is, with the settings only that kind
/// has: it picks the scripts, the hash field, the channel, the renewal and
/// the way waiters wait. Every per-kind difference is a `match` on it, so a
/// new kind makes the compiler list each place to decide.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// Redisson's `RLock`.
    Reentrant,
    /// `getNonReentrantLock`: `RLock`'s hash; a re-acquire by the holder
    /// is refused instead of re-entering.
    NonReentrant,
    /// `getSpinLock`: `RLock`'s hash and scripts; its waiters poll with this
    /// backoff instead of subscribing.
    Spin(Backoff),
    /// `RFencedLock`: `RLock` plus a token counter.
    Fenced,
    /// The read side of `RReadWriteLock`.
    Read,
    /// The write side of `RReadWriteLock`: fields end in `:write`.
    Write,
    /// `getFairLock`: `RLock` with a queue of waiters, each woken on its own
    /// channel (`getNonReentrantFairLock` when not `reentrant`).
    Fair {
        /// How long a queued waiter may stay silent before the others
        /// skip it.
        waiter_timeout: Duration,
        /// Whether the holder may take it again (a hold count), or is
        /// refused.
        reentrant: bool,
    },
}

impl Kind {
    /// The channel this kind's waiters listen on and its releases publish
    /// to; for the fair lock, the prefix of each waiter's own channel.
    pub(crate) fn channel(self, name: &str) -> String {
        match self {
            Kind::Reentrant
            | Kind::NonReentrant
            | Kind::Spin(_)
            | Kind::Fenced
            | Kind::Fair { .. } => keys::lock_channel(name),
            Kind::Read | Kind::Write => keys::rwlock_channel(name),
        }
    }

    /// The kind's `kind` label in metrics.
    pub(crate) fn label(self) -> &'static str {
        match self {
            Kind::Reentrant => "lock",
            Kind::NonReentrant => "non_reentrant_lock",
            Kind::Spin(_) => "spin_lock",
            Kind::Fenced => "fenced_lock",
            Kind::Read => "read_lock",
            Kind::Write => "write_lock",
            Kind::Fair {
                reentrant: true, ..
            } => "fair_lock",
            Kind::Fair {
                reentrant: false, ..
            } => "non_reentrant_fair_lock",
        }
    }

    /// How the watchdog renews a hold of this kind.
    pub(crate) fn renewal(self) -> Renewal {
        match self {
            Kind::Read => Renewal::ReadHold,
            Kind::Reentrant
            | Kind::NonReentrant
            | Kind::Spin(_)
            | Kind::Fenced
            | Kind::Write
            | Kind::Fair { .. } => Renewal::Hash,
        }
    }

    /// A spin lock's backoff; `None` for the kinds that subscribe.
    pub(crate) fn backoff(self) -> Option<Backoff> {
        match self {
            Kind::Spin(backoff) => Some(backoff),
            _ => None,
        }
    }

    /// A fair lock's waiter timeout; `None` for the kinds without a queue.
    pub(crate) fn waiter_timeout(self) -> Option<Duration> {
        match self {
            Kind::Fair { waiter_timeout, .. } => Some(waiter_timeout),
            _ => None,
        }
    }

    /// Whether the holder may take the lock again (its hold count goes
    /// up), rather than being refused with
    /// [`Error::NonReentrantReacquire`](crate::Error::NonReentrantReacquire).
    pub(crate) fn reentrant(self) -> bool {
        match self {
            Kind::NonReentrant => false,
            Kind::Fair { reentrant, .. } => reentrant,
            Kind::Reentrant | Kind::Spin(_) | Kind::Fenced | Kind::Read | Kind::Write => true,
        }
    }
}
