//! One interface over every kind of lock, for code that takes any of them.

use std::time::Duration;

use async_trait::async_trait;

use crate::{Lock, LockGuard, Result};

/// Keeps the trait's implementations in this crate.
#[allow(unreachable_pub)]
mod sealed {
    pub trait Sealed {}
}

/// The operations every ferrisson lock shares, so that code (and a
/// [`MultiLock`](crate::MultiLock) or [`RedLock`](crate::RedLock)) can hold
/// any of them as `Box<dyn DistributedLock>` or `&dyn DistributedLock`.
///
/// Sealed: only this crate implements it, so methods can be added without
/// breaking anyone. Each method behaves, fails and is cancel safe as the
/// inherent method of the same name on the lock kind; on [`Lock`] (the
/// reentrant lock and the spin lock) see [`Lock::lock`] and its siblings.
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

    /// Waits until the lock is held, in watchdog mode.
    ///
    /// # Cancel safety
    /// Cancel safe: a dropped future leaves no hold behind.
    async fn lock(&self) -> Result<LockGuard>;

    /// Waits until the lock is held, for `lease` at most.
    ///
    /// # Cancel safety
    /// Cancel safe: a dropped future leaves no hold behind.
    async fn lock_with_lease(&self, lease: Duration) -> Result<LockGuard>;

    /// One attempt, watchdog mode.
    ///
    /// # Cancel safety
    /// Cancel safe: a dropped future leaves no hold behind.
    async fn try_lock(&self) -> Result<Option<LockGuard>>;

    /// Waits at most `wait`, watchdog mode.
    ///
    /// # Cancel safety
    /// Cancel safe: a dropped future leaves no hold behind.
    async fn try_lock_for(&self, wait: Duration) -> Result<Option<LockGuard>>;

    /// Waits at most `wait`, held for `lease` at most.
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
}

impl sealed::Sealed for Lock {}

#[async_trait]
impl DistributedLock for Lock {
    fn name(&self) -> &str {
        Lock::name(self)
    }

    fn watchdog_timeout(&self) -> Duration {
        self.client().config().watchdog_timeout
    }

    async fn lock(&self) -> Result<LockGuard> {
        Lock::lock(self).await
    }

    async fn lock_with_lease(&self, lease: Duration) -> Result<LockGuard> {
        Lock::lock_with_lease(self, lease).await
    }

    async fn try_lock(&self) -> Result<Option<LockGuard>> {
        Lock::try_lock(self).await
    }

    async fn try_lock_for(&self, wait: Duration) -> Result<Option<LockGuard>> {
        Lock::try_lock_for(self, wait).await
    }

    async fn try_lock_with_lease(
        &self,
        wait: Duration,
        lease: Duration,
    ) -> Result<Option<LockGuard>> {
        Lock::try_lock_with_lease(self, wait, lease).await
    }

    async fn is_locked(&self) -> Result<bool> {
        Lock::is_locked(self).await
    }

    async fn hold_count(&self) -> Result<u32> {
        Lock::hold_count(self).await
    }

    async fn remaining_ttl(&self) -> Result<Option<Duration>> {
        Lock::remaining_ttl(self).await
    }

    async fn force_unlock(&self) -> Result<bool> {
        Lock::force_unlock(self).await
    }
}
