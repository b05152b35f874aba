//! The read-write lock: Redisson's `RReadWriteLock`.

use std::sync::Arc;

use super::face;
use super::{Kind, LockCore};
use crate::{Client, LockGuard};

/// A read-write lock, from [`Client::read_write_lock`]: many readers or one
/// writer, on Redisson's `RReadWriteLock` layout, so Java services using
/// Redisson share it.
///
/// Its two sides, [`ReadLock`] ([`read`](Self::read)) and [`WriteLock`]
/// ([`write`](Self::write)), have the whole API of a [`Lock`](crate::Lock): waits, leases,
/// watchdog, guards, owners, cancel safety, [`DistributedLock`](crate::DistributedLock).
///
/// - **Reentrant on both sides**, per owner.
/// - **Downgrade**: a write holder may also take read holds; when it lets
///   the write go, its read holds remain and other readers may enter.
/// - **No upgrade**: an owner with read holds that asks for the write lock
///   would wait for itself, so the acquire fails at once with
///   [`Error::UpgradeRefused`](crate::Error::UpgradeRefused) instead of
///   hanging. Release the read holds, then take the write lock.
/// - **Crashed readers**: every read hold has its own timeout key, so the
///   holds of a reader that died expire one by one while other readers
///   carry on; a waiting writer gets in once the last live reader leaves.
///   The watchdog renews the read holds of live readers.
/// - **Wake-ups**: releasing the write lock wakes every waiter (message
///   `1`); a read release that frees the lock wakes one waiter per client
///   (message `0`), as Redisson.
/// - `is_locked` on a side says whether the lock is held in that mode;
///   `force_unlock` on either side deletes the whole lock.
///
/// ```no_run
/// # async fn run(client: ferrisson::Client) -> ferrisson::Result<()> {
/// let prices = client.read_write_lock("prices");
/// let reading = prices.read().lock().await?;   // shared with other readers
/// reading.unlock().await?;
/// let writing = prices.write().lock().await?;  // alone
/// let reading = prices.read().lock().await?;   // a downgrade: allowed
/// writing.unlock().await?;                     // readers may enter now
/// reading.unlock().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct ReadWriteLock {
    client: Client,
    name: Arc<str>,
}

impl std::fmt::Debug for ReadWriteLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReadWriteLock")
            .field("name", &self.name)
            .field("client", &self.client.id())
            .finish()
    }
}

impl ReadWriteLock {
    pub(crate) fn new(client: Client, name: String) -> ReadWriteLock {
        ReadWriteLock {
            client,
            name: name.into(),
        }
    }

    /// The lock's name: the Redis key of its hash.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The read side: shared among readers, excluded by a writer.
    pub fn read(&self) -> ReadLock {
        ReadLock {
            core: LockCore::new(self.client.clone(), self.name.to_string(), Kind::Read),
        }
    }

    /// The write side: one holder, excluding readers and other writers.
    pub fn write(&self) -> WriteLock {
        WriteLock {
            core: LockCore::new(self.client.clone(), self.name.to_string(), Kind::Write),
        }
    }
}

/// The read side of a [`ReadWriteLock`], from [`ReadWriteLock::read`]:
/// shared among readers, excluded by a writer. Each read hold has its own
/// timeout key, so a crashed reader's holds expire one by one.
#[derive(Clone)]
pub struct ReadLock {
    core: LockCore,
}

face::lock_face!(ReadLock, guard: LockGuard = face::plain);

/// The write side of a [`ReadWriteLock`], from [`ReadWriteLock::write`]:
/// one holder, excluding readers and other writers; its release wakes
/// every waiter.
#[derive(Clone)]
pub struct WriteLock {
    core: LockCore,
}

face::lock_face!(WriteLock, guard: LockGuard = face::plain);
