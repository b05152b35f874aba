//! Every difference between the kinds of lock.

use std::time::Duration;

use crate::keys;

/// How long a fair lock's queued waiter may stay silent before the others
/// skip it, by default: 300 s, as Redisson.
pub const DEFAULT_FAIR_WAITER_TIMEOUT: Duration = Duration::from_secs(300);

/// Which lock of the family a handle is: it picks the scripts, the hash
/// field, the channel and the renewal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// Redisson's `RLock`.
    Reentrant,
    /// `RFencedLock`: `RLock` plus a token counter.
    Fenced,
    /// The read side of `RReadWriteLock`.
    Read,
    /// The write side of `RReadWriteLock`: fields end in `:write`.
    Write,
    /// `RFairLock`: `RLock` with a queue of waiters, each woken on its own
    /// channel.
    Fair,
}

impl Kind {
    /// The channel this kind's waiters listen on and its releases publish
    /// to; for the fair lock, the prefix of each waiter's own channel.
    pub(crate) fn channel(self, name: &str) -> String {
        match self {
            Kind::Reentrant | Kind::Fenced | Kind::Fair => keys::lock_channel(name),
            Kind::Read | Kind::Write => keys::rwlock_channel(name),
        }
    }
}
