//! One interface over every kind of lock, for code that takes any of them.

use std::time::Duration;

use async_trait::async_trait;

use crate::{LockGuard, Result};

/// Keeps the trait's implementations in this crate.
#[allow(unreachable_pub)]
mod sealed {
    pub trait Sealed {}
}

pub(crate) use sealed::Sealed;

/// The operations every ferrisson lock shares, so that code (and a
/// [`MultiLock`](crate::MultiLock) or [`RedLock`](crate::RedLock)) can hold
/// any of them as `Box<dyn DistributedLock>` or `&dyn DistributedLock`.
///
/// Sealed: only this crate implements it, so methods can be added without
/// breaking anyone. Each method behaves, fails and is cancel safe as the
/// inherent method of the same name on the lock type (see
/// [`Lock::lock`](crate::Lock::lock) and its siblings). A
/// [`FencedLock`](crate::FencedLock)'s acquires return its guard turned
/// into a [`LockGuard`] here, without its token.
///
/// ```no_run
/// # async fn run(client: ferrisson::Client) -> ferrisson::Result<()> {
/// use ferrisson::DistributedLock;
/// let locks: Vec<Box<dyn DistributedLock>> = vec![
///     Box::new(client.lock("invoices")),
///     Box::new(client.spin_lock("thumbnails")),
/// ];
/// for lock in &locks {
///     let guard = lock.lock().await?;
///     println!("{} is mine", lock.name());
///     guard.unlock().await?;
/// }
/// # Ok(()) }
/// ```
#[async_trait]
pub trait DistributedLock: sealed::Sealed + Send + Sync + std::fmt::Debug {
    /// The lock's name.
    fn name(&self) -> &str;

    /// The lease of a hold taken in watchdog mode: the watchdog timeout of
    /// the lock's client.
    fn watchdog_timeout(&self) -> Duration;

    /// Waits until the lock is held, in watchdog mode. As
    /// [`Lock::lock`](crate::Lock::lock), whose docs give its errors.
    ///
    /// # Cancel safety
    /// Cancel safe: a dropped future leaves no hold behind.
    async fn lock(&self) -> Result<LockGuard>;

    /// Waits until the lock is held, for `lease` at most. As
    /// [`Lock::lock_with_lease`](crate::Lock::lock_with_lease), whose docs give
    /// its errors.
    ///
    /// # Cancel safety
    /// Cancel safe: a dropped future leaves no hold behind.
    async fn lock_with_lease(&self, lease: Duration) -> Result<LockGuard>;

    /// One attempt, watchdog mode. As [`Lock::try_lock`](crate::Lock::try_lock), whose docs
    /// give its errors.
    ///
    /// # Cancel safety
    /// Cancel safe: a dropped future leaves no hold behind.
    async fn try_lock(&self) -> Result<Option<LockGuard>>;

    /// Waits at most `wait`, watchdog mode. As
    /// [`Lock::try_lock_for`](crate::Lock::try_lock_for), whose docs give its
    /// errors.
    ///
    /// # Cancel safety
    /// Cancel safe: a dropped future leaves no hold behind.
    async fn try_lock_for(&self, wait: Duration) -> Result<Option<LockGuard>>;

    /// Waits at most `wait`, held for `lease` at most. As
    /// [`Lock::try_lock_with_lease`](crate::Lock::try_lock_with_lease), whose
    /// docs give its errors.
    ///
    /// # Cancel safety
    /// Cancel safe: a dropped future leaves no hold behind.
    async fn try_lock_with_lease(
        &self,
        wait: Duration,
        lease: Duration,
    ) -> Result<Option<LockGuard>>;

    /// Whether anyone holds the lock.
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads.
    async fn is_locked(&self) -> Result<bool>;

    /// Whether the calling owner holds the lock.
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads.
    async fn is_held_by_current_task(&self) -> Result<bool>;

    /// Whether `owner` of this handle's client holds the lock (Redisson's
    /// `isHeldByThread`).
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads.
    async fn is_held_by(&self, owner: &str) -> Result<bool>;

    /// What the lock holds now: holders, TTL, and each kind's own state.
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads.
    async fn info(&self) -> Result<crate::LockInfo>;

    /// How many holds the calling owner has.
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads.
    async fn hold_count(&self) -> Result<u32>;

    /// How long until the lock expires; `None` when nobody holds it.
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads.
    async fn remaining_ttl(&self) -> Result<Option<Duration>>;

    /// Deletes the lock whoever holds it; whether there was one.
    ///
    /// # Cancel safety
    /// Cancel safe: once sent, the delete completes in the background.
    async fn force_unlock(&self) -> Result<bool>;

    /// Releases one hold of the calling owner without a guard.
    ///
    /// # Cancel safety
    /// Cancel safe: once started, the release runs to its end in the
    /// background.
    async fn unlock(&self) -> Result<()>;
}
