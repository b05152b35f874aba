//! The fenced lock: Redisson's `RFencedLock`, and its guard with a token.

use std::time::Duration;

use super::face;
use super::{Kind, LockCore};
use crate::{Client, LockGuard, Result};

/// A fenced lock, from [`Client::fenced_lock`]: the reentrant lock (same
/// hash, waits, watchdog and release), and every successful acquire,
/// re-entry included, also draws a fencing token from the counter
/// `redisson_lock_token:{name}`, as Redisson's `RFencedLock`:
/// [`FencedGuard::token`]. Tokens rise strictly across all holders, forever
/// (the counter has no TTL), and even when Redis loses the counter (a
/// restart without persistence, a failover that lost writes): each token is
/// the counter plus one or the server's clock in microseconds, whichever is
/// higher, written back into the counter, so a counter that starts again
/// starts above every token drawn before (as long as the server's clock
/// does not step back and fewer than a million tokens are drawn a second).
/// Tokens are therefore large (about 1.8 × 10^15 in 2026) and not
/// consecutive, and stay below 2^53 (exact as a double, and as
/// [`FencedHash`](crate::FencedHash)'s fence) until the year 2255. A
/// Redisson `RFencedLock` of the same name INCRs the same counter and goes
/// on from there.
///
/// A lease can run out while its holder is paused; the lock alone cannot
/// stop that holder's late write. The token can: the protected resource
/// keeps the highest token it has seen and refuses lower ones
/// (`cargo run --example fencing`). A dropped or failed acquire may have
/// drawn a token: tokens rise strictly but may skip.
///
/// ```rust,no_run
/// # async fn run(client: ferrisson::Client, highest: &mut u64) -> ferrisson::Result<()> {
/// let guard = client.fenced_lock("ledger").lock().await?;
/// let token = guard.token();
/// if token >= *highest {
///     *highest = token; // the resource's side: accept, and remember
///     // ... write ...
/// }
/// guard.unlock().await?;
/// # Ok(()) }
/// ```
///
/// Everything else (owners, reentrancy, leases, the watchdog, cancel
/// safety) is as [`Lock`](crate::Lock)'s.
#[derive(Clone)]
pub struct FencedLock {
    core: LockCore,
}

impl FencedLock {
    pub(crate) fn new(client: Client, name: String) -> FencedLock {
        FencedLock {
            core: LockCore::new(client, name, Kind::Fenced),
        }
    }

    /// The same lock, named as what it serves in errors (an election).
    pub(crate) fn called(self, what: &'static str, expected: &'static str) -> FencedLock {
        FencedLock {
            core: self.core.called(what, expected),
        }
    }

    /// The same lock, whose watchdog-mode holds have a TTL of `lease` (see
    /// [`LockCore::with_watchdog_lease`](super::LockCore::with_watchdog_lease)).
    /// Only for owners of their own (an election's campaigns): every
    /// handle of one owner must take the same TTL.
    pub(crate) fn with_watchdog_lease(&self, lease: Duration) -> FencedLock {
        FencedLock {
            core: self.core.with_watchdog_lease(lease),
        }
    }
}

impl FencedLock {
    /// The lock's current token: the last one drawn by any holder of this
    /// name, read from its counter (no acquire); `None` when none was ever
    /// drawn. Redisson's `RFencedLock.getToken`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for a bad
    /// name, [`Error::WrongType`](crate::Error::WrongType) when the counter
    /// holds something that is not a number, or the lock's key other data,
    /// [`Error::Redis`](crate::Error::Redis).
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads.
    pub async fn current_token(&self) -> Result<Option<u64>> {
        self.core.current_token().await
    }
}

face::lock_face!(FencedLock, guard: FencedGuard = FencedGuard::new);

/// One hold of a [`FencedLock`], with the fencing token its acquire drew.
///
/// It is a [`LockGuard`] otherwise (release, drop, lease), and turns into
/// one with `LockGuard::from` (the token is then gone).
#[must_use = "the hold is released in the background as soon as the guard is dropped"]
#[clippy::has_significant_drop]
#[derive(Debug)]
pub struct FencedGuard {
    guard: LockGuard,
    token: u64,
}

impl FencedGuard {
    /// Wraps a guard of a fenced lock. Every fenced acquire draws a token
    /// (the script's reply is refused without one), so it is always there.
    fn new(guard: LockGuard) -> FencedGuard {
        let token = guard.token().unwrap_or_default();
        debug_assert!(token > 0, "a fenced acquire always draws a token");
        FencedGuard { guard, token }
    }

    /// The fencing token this acquire drew.
    ///
    /// Tokens of one lock name rise strictly with every acquire, re-entries
    /// included, across all clients and forever. Send it with every write
    /// to the resource the lock protects, and have the resource refuse a
    /// token lower than the highest it has seen: a holder whose lease ran
    /// out unnoticed (a long pause) is then refused instead of overwriting
    /// the next holder's work.
    pub fn token(&self) -> u64 {
        self.token
    }

    /// The lock's name.
    pub fn name(&self) -> &str {
        self.guard.name()
    }

    /// The owner id of this hold (see [`LockGuard::owner`](crate::LockGuard::owner)).
    pub fn owner(&self) -> &str {
        self.guard.owner()
    }

    /// The hash field of this hold, `<client-uuid>:<owner-id>`.
    pub fn field(&self) -> &str {
        self.guard.field()
    }

    /// The lease this hold was taken with; `None` in watchdog mode.
    pub fn lease(&self) -> Option<Duration> {
        self.guard.lease()
    }

    /// As [`LockGuard::is_lease_lost`].
    pub fn is_lease_lost(&self) -> bool {
        self.guard.is_lease_lost()
    }

    /// As [`LockGuard::lease_lost`].
    ///
    /// # Cancel safety
    /// Cancel safe: it only waits.
    pub async fn lease_lost(&self) {
        self.guard.lease_lost().await
    }

    /// As [`LockGuard::lease_handle`].
    pub fn lease_handle(&self) -> super::Lease {
        self.guard.lease_handle()
    }

    /// As [`LockGuard::keep_until`].
    ///
    /// # Errors
    /// As [`LockGuard::keep_until`].
    pub fn keep_until(&mut self, until: tokio::time::Instant) -> Result<()> {
        self.guard.keep_until(until)
    }

    /// As [`LockGuard::extend`]: the token stays the same.
    ///
    /// # Errors
    /// As [`LockGuard::extend`].
    ///
    /// # Cancel safety
    /// As [`LockGuard::extend`].
    pub async fn extend(&mut self, lease: Duration) -> Result<()> {
        self.guard.extend(lease).await
    }

    /// As [`LockGuard::keep_alive`].
    ///
    /// # Errors
    /// As [`LockGuard::keep_alive`].
    ///
    /// # Cancel safety
    /// As [`LockGuard::keep_alive`].
    pub async fn keep_alive(&mut self) -> Result<()> {
        self.guard.keep_alive().await
    }

    /// As [`LockGuard::leak`].
    pub fn leak(self) {
        self.guard.leak()
    }

    /// As [`LockGuard::unlock`].
    ///
    /// # Errors
    /// As [`LockGuard::unlock`].
    ///
    /// # Cancel safety
    /// Cancel safe: once started, the release runs to its end in the
    /// background if the future is dropped.
    pub async fn unlock(self) -> Result<()> {
        self.guard.unlock().await
    }

    /// As [`LockGuard::unlock_in_background`].
    pub fn unlock_in_background(self) -> super::Released {
        self.guard.unlock_in_background()
    }

    /// As `LockGuard::unlock_in_background_then`.
    pub(crate) fn unlock_in_background_then(self, then: super::guard::AfterRelease) {
        self.guard.unlock_in_background_then(then);
    }
}

impl From<FencedGuard> for LockGuard {
    fn from(guard: FencedGuard) -> LockGuard {
        guard.guard
    }
}
