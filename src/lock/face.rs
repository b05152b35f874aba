//! What every public lock type shares, written once: `lock_face!` gives a
//! thin type over [`LockCore`](super::LockCore) the calls, `Debug`, the
//! seal and the [`DistributedLock`](crate::DistributedLock) impl that every
//! lock has. A type says only what is its own (its settings, its guard).

/// Implements the shared calls of a lock face, a struct with one field
/// `core: LockCore`. Its acquires return `$guard`, made from a
/// [`LockGuard`](crate::LockGuard) by `$wrap` (and turned back into one by
/// `From` for the trait).
macro_rules! lock_face {
    ($face:ident, guard: $guard:ty = $wrap:path) => {
        impl $face {
            /// The lock's name: the Redis key of its hash.
            pub fn name(&self) -> &str {
                self.core.name()
            }

            /// The client this handle belongs to.
            pub fn client(&self) -> &$crate::Client {
                self.core.client()
            }

            /// The lock as an object on its client: the door of the
            /// handles built on it (a job, an election) to the client.
            #[allow(dead_code)]
            pub(crate) fn object(&self) -> &$crate::engine::object::Object {
                self.core.object()
            }

            /// The same lock, owned by `owner` instead of the calling task.
            ///
            /// Use it when holds must be shared or released across tasks:
            /// every handle with the same owner id on the same client
            /// re-enters the other's holds. The id must be non-empty and must
            /// not end in `:write` (that suffix marks Redisson's write-lock
            /// holders); a bad id is reported by the first call.
            pub fn with_owner(&self, owner: impl Into<String>) -> $face {
                $face {
                    core: self.core.with_owner(owner),
                }
            }

            $crate::lock::face::contract! { $face, "lock",
            /// Waits until the lock is held, then keeps it alive with the
            /// watchdog until the guard is released.
            ///
            /// The lease is the client's watchdog timeout (default 30 s),
            /// renewed every third of it while the guard lives; if the
            /// process dies the lock frees itself at most one watchdog
            /// timeout later.
            ///
            /// # Errors
            /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for
            /// a bad name or owner,
            /// [`Error::WrongType`](crate::Error::WrongType) when the key
            /// holds other data (another type, or a hash whose fields are no
            /// lock holds), which is left alone,
            /// [`Error::Redis`](crate::Error::Redis) when Redis fails.
            ///
            /// # Cancel safety
            /// Cancel safe: a dropped future leaves no hold in Redis, no
            /// registry entry, no queue entry and no subscription. An acquire
            /// already sent when the future is dropped is completed in the
            /// background and given back. Nobody awaits that give-back: it
            /// is resent after a failed connection (with backoff, up to a
            /// second apart) until it gets through or the hold's lease has
            /// run out, so a network cut does not leave the hold behind to
            /// the end of its lease.
            ///
            /// Retry safe: an acquire whose reply is lost is sent again under
            /// the same request id, and a resend of a granted request returns
            /// the first outcome instead of taking a second hold. (A lean
            /// acquire, see [`ClientBuilder::lean`](crate::ClientBuilder::lean),
            /// is not resent: its lost reply is settled, and the latched
            /// acquire sent then.) The tries
            /// of one wait share that request, so a wait through an outage
            /// settles it once: when the wait ends without the lock, a hold
            /// one of its unanswered sends may have taken is given back in
            /// the background.
            pub async fn lock(&self) -> $crate::Result<$guard> {
                self.core.lock().await.map($wrap)
            }
            }

            $crate::lock::face::contract! { $face, "lock_with_lease",
            /// Waits until the lock is held, for `lease` at most: no
            /// watchdog; the lock frees itself when the lease runs out,
            /// released or not.
            ///
            /// # Errors
            #[doc = concat!("As [`", stringify!($face), "::lock`], and")]
            /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for
            /// a lease under 1 ms or over
            /// [`MAX_DURATION`](crate::config::MAX_DURATION).
            ///
            /// # Cancel safety
            #[doc = concat!("Cancel safe, as [`", stringify!($face), "::lock`].")]
            pub async fn lock_with_lease(
                &self,
                lease: std::time::Duration,
            ) -> $crate::Result<$guard> {
                self.core.lock_with_lease(lease).await.map($wrap)
            }
            }

            $crate::lock::face::contract! { $face, "try_lock",
            /// One attempt, watchdog mode: `Some(guard)` when the lock was
            /// free or already held by this owner, `None` when someone else
            /// holds it. A fair lock's single attempt does not join the
            /// queue.
            ///
            /// It waits for its one reply as long as one command may take:
            /// the client's response timeout (3 s by default), once. A send
            /// that met a failed connection (a dropped connection, say) is
            /// sent again within that time, never after it, so a server that
            /// does not answer costs one timeout, not two. With replica sync,
            /// the replicas' acknowledgement adds its own timeout (twice when
            /// too few acknowledged and the hold is given back).
            ///
            /// # Errors
            #[doc = concat!("As [`", stringify!($face), "::lock`]; a server that does not answer")]
            /// within the response timeout is a connection error
            /// ([`Error::is_connection_error`](crate::Error::is_connection_error)).
            ///
            /// # Cancel safety
            #[doc = concat!("Cancel safe, as [`", stringify!($face), "::lock`].")]
            pub async fn try_lock(&self) -> $crate::Result<Option<$guard>> {
                Ok(self.core.try_lock().await?.map($wrap))
            }
            }

            $crate::lock::face::contract! { $face, "try_lock_for",
            /// Waits at most `wait` for the lock, watchdog mode. A zero wait
            #[doc = concat!("makes one attempt, as [`", stringify!($face), "::try_lock`].")]
            ///
            /// It returns by the end of the wait plus a small margin (a tenth
            /// of the wait, from 100 ms to 1 s, never more than the response
            /// timeout), whatever the server does: no attempt starts after
            /// the wait, and one still unanswered at the end of the margin is
            /// left to finish in the background, where a hold it took is
            /// given back (as for a dropped future). The margin lets a wait
            /// shorter than a round trip have its one attempt answered. A
            /// fair lock's waiter leaves the queue within the same margin (a
            /// leave still unanswered then goes on in the background).
            ///
            /// # Errors
            #[doc = concat!("As [`", stringify!($face), "::lock`], and")]
            /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for
            /// a wait over [`MAX_DURATION`](crate::config::MAX_DURATION). A
            /// connection failure of the first attempt is returned (later
            /// ones are waited out within the wait), and so is a timeout
            /// when no attempt had its reply by the end of the margin. (An
            /// attempt answered "busy" earlier makes that `Ok(None)`.)
            ///
            /// # Cancel safety
            #[doc = concat!("Cancel safe, as [`", stringify!($face), "::lock`].")]
            pub async fn try_lock_for(
                &self,
                wait: std::time::Duration,
            ) -> $crate::Result<Option<$guard>> {
                Ok(self.core.try_lock_for(wait).await?.map($wrap))
            }
            }

            $crate::lock::face::contract! { $face, "try_lock_with_lease",
            /// Waits at most `wait` for the lock, held for `lease` at most;
            #[doc = concat!("the wait ends as [`", stringify!($face), "::try_lock_for`]'s.")]
            ///
            /// # Errors
            #[doc = concat!("As [`", stringify!($face), "::lock_with_lease`] and [`", stringify!($face), "::try_lock_for`].")]
            ///
            /// # Cancel safety
            #[doc = concat!("Cancel safe, as [`", stringify!($face), "::lock`].")]
            pub async fn try_lock_with_lease(
                &self,
                wait: std::time::Duration,
                lease: std::time::Duration,
            ) -> $crate::Result<Option<$guard>> {
                Ok(self
                    .core
                    .try_lock_with_lease(wait, lease)
                    .await?
                    .map($wrap))
            }
            }

            $crate::lock::face::contract! { $face, "is_locked",
            /// Whether anyone holds the lock (a read or write side: whether
            /// it is held in that mode).
            ///
            /// # Errors
            /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for
            /// a bad name, [`Error::WrongType`](crate::Error::WrongType) when
            /// the key holds other data (it is no lock, held or free),
            /// [`Error::Redis`](crate::Error::Redis).
            ///
            /// # Cancel safety
            /// Cancel safe: it only reads.
            pub async fn is_locked(&self) -> $crate::Result<bool> {
                self.core.is_locked().await
            }
            }

            $crate::lock::face::contract! { $face, "is_held_by_current_task",
            /// Whether this handle's owner (by default, the calling task)
            /// holds the lock.
            ///
            /// # Errors
            /// [`Error::InvalidArgument`](crate::Error::InvalidArgument),
            /// [`Error::WrongType`](crate::Error::WrongType),
            /// [`Error::Redis`](crate::Error::Redis).
            ///
            /// # Cancel safety
            /// Cancel safe: it only reads.
            pub async fn is_held_by_current_task(&self) -> $crate::Result<bool> {
                self.core.is_held_by_current_task().await
            }
            }

            $crate::lock::face::contract! { $face, "is_held_by",
            /// Whether `owner` of this handle's client holds the lock, as
            /// Redisson's `isHeldByThread`: the owner id given to
            /// `with_owner`, or `task-<id>` / `thread-<n>` for the default
            /// owners.
            ///
            /// # Errors
            /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for
            /// a bad name or owner id,
            /// [`Error::WrongType`](crate::Error::WrongType),
            /// [`Error::Redis`](crate::Error::Redis).
            ///
            /// # Cancel safety
            /// Cancel safe: it only reads.
            pub async fn is_held_by(&self, owner: &str) -> $crate::Result<bool> {
                self.core.is_held_by(owner).await
            }
            }

            $crate::lock::face::contract! { $face, "info",
            /// What the lock holds now, read in one call: its holders
            /// (client id, owner id, hold count), its TTL, and what only
            /// some kinds have (a read-write lock's mode, a fair lock's
            /// queue, a fenced lock's token). It shows holds of any
            /// Redisson-layout client. Redisson has no single counterpart;
            /// it answers what `isLocked`, `getHoldCount`,
            /// `remainTimeToLive` and `isHeldByThread` answer one by one.
            ///
            /// # Errors
            /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for
            /// a bad name, [`Error::WrongType`](crate::Error::WrongType),
            /// [`Error::Redis`](crate::Error::Redis), and
            /// [`Error::UnexpectedReply`](crate::Error::UnexpectedReply)
            /// when a hold count is too large for a `u32`.
            ///
            /// # Cancel safety
            /// Cancel safe: it only reads.
            pub async fn info(&self) -> $crate::Result<$crate::LockInfo> {
                self.core.info().await
            }
            }

            $crate::lock::face::contract! { $face, "hold_count",
            /// How many holds this handle's owner has on the lock (0 when
            /// none).
            ///
            /// # Errors
            /// [`Error::InvalidArgument`](crate::Error::InvalidArgument),
            /// [`Error::WrongType`](crate::Error::WrongType),
            /// [`Error::Redis`](crate::Error::Redis), and
            /// [`Error::UnexpectedReply`](crate::Error::UnexpectedReply) when
            /// the count is too large for a `u32`.
            ///
            /// # Cancel safety
            /// Cancel safe: it only reads.
            pub async fn hold_count(&self) -> $crate::Result<u32> {
                self.core.hold_count().await
            }
            }

            $crate::lock::face::contract! { $face, "remaining_ttl",
            /// How long until the lock expires: `None` when nobody holds it
            /// (or the key has no TTL, which no Redisson or ferrisson lock
            /// has).
            ///
            /// # Errors
            /// [`Error::InvalidArgument`](crate::Error::InvalidArgument),
            /// [`Error::WrongType`](crate::Error::WrongType) when the key
            /// holds other data (its TTL is not a lock's),
            /// [`Error::Redis`](crate::Error::Redis).
            ///
            /// # Cancel safety
            /// Cancel safe: it only reads.
            pub async fn remaining_ttl(&self) -> $crate::Result<Option<std::time::Duration>> {
                self.core.remaining_ttl().await
            }
            }

            $crate::lock::face::contract! { $face, "force_unlock",
            /// Deletes the lock whoever holds it and wakes a waiter. Returns
            /// whether there was a lock to delete. A holder that awaits
            /// `lease_lost` learns it within a round trip of the unlock
            /// message; others at their next renewal (`is_lease_lost`) or
            /// release (an error).
            ///
            /// # Errors
            /// [`Error::InvalidArgument`](crate::Error::InvalidArgument),
            /// [`Error::WrongType`](crate::Error::WrongType) (the key holds
            /// other data: another type, or a hash whose fields are no lock
            /// holds; it is left alone, nothing deleted),
            /// [`Error::Redis`](crate::Error::Redis).
            ///
            /// # Cancel safety
            /// Cancel safe: once sent, the delete completes in the
            /// background.
            pub async fn force_unlock(&self) -> $crate::Result<bool> {
                self.core.force_unlock().await
            }
            }

            $crate::lock::face::contract! { $face, "unlock",
            /// Releases one hold of this handle's owner, as Redisson's
            /// `unlock()` does, also where a guard of that owner is alive.
            ///
            /// When the owner has live guards on this client, the hold
            /// released is the newest guard's: that guard is spent (its
            /// `unlock` and drop send nothing more, and its
            /// [`is_lease_lost`](crate::LockGuard::is_lease_lost) says true),
            /// so Redisson's `lock(); try { ... } finally { unlock(); }`
            /// beside a guard never releases a hold twice, nor one taken
            /// later. Otherwise it releases a hold without a guard (one given
            /// up with [`LockGuard::leak`](crate::LockGuard::leak), or taken
            /// by another process of the same owner field).
            ///
            /// # Errors
            /// [`Error::NotHeld`](crate::Error::NotHeld) when the owner holds
            /// nothing on this lock (as in Redisson, unlocking what you do
            /// not hold is an error);
            /// [`Error::LeaseLost`](crate::Error::LeaseLost) when the newest
            /// guard's lease was already known lost (nothing is sent);
            /// [`Error::InvalidArgument`](crate::Error::InvalidArgument),
            /// [`Error::WrongType`](crate::Error::WrongType),
            /// [`Error::Redis`](crate::Error::Redis).
            ///
            /// # Cancel safety
            /// Cancel safe: once started, the release runs to its end in the
            /// background if the future is dropped.
            pub async fn unlock(&self) -> $crate::Result<()> {
                self.core.unlock().await
            }
            }
        }

        impl std::fmt::Debug for $face {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                self.core.debug_as(stringify!($face), f)
            }
        }

        impl $crate::distributed::Sealed for $face {}

        #[async_trait::async_trait]
        impl $crate::DistributedLock for $face {
            fn name(&self) -> &str {
                self.core.name()
            }

            fn watchdog_timeout(&self) -> std::time::Duration {
                self.core.watchdog_ttl()
            }

            async fn lock(&self) -> $crate::Result<$crate::LockGuard> {
                self.core.lock().await
            }

            async fn lock_with_lease(
                &self,
                lease: std::time::Duration,
            ) -> $crate::Result<$crate::LockGuard> {
                self.core.lock_with_lease(lease).await
            }

            async fn try_lock(&self) -> $crate::Result<Option<$crate::LockGuard>> {
                self.core.try_lock().await
            }

            async fn try_lock_for(
                &self,
                wait: std::time::Duration,
            ) -> $crate::Result<Option<$crate::LockGuard>> {
                self.core.try_lock_for(wait).await
            }

            async fn try_lock_with_lease(
                &self,
                wait: std::time::Duration,
                lease: std::time::Duration,
            ) -> $crate::Result<Option<$crate::LockGuard>> {
                self.core.try_lock_with_lease(wait, lease).await
            }

            async fn is_locked(&self) -> $crate::Result<bool> {
                self.core.is_locked().await
            }

            async fn is_held_by_current_task(&self) -> $crate::Result<bool> {
                self.core.is_held_by_current_task().await
            }

            async fn is_held_by(&self, owner: &str) -> $crate::Result<bool> {
                self.core.is_held_by(owner).await
            }

            async fn info(&self) -> $crate::Result<$crate::LockInfo> {
                self.core.info().await
            }

            async fn hold_count(&self) -> $crate::Result<u32> {
                self.core.hold_count().await
            }

            async fn remaining_ttl(&self) -> $crate::Result<Option<std::time::Duration>> {
                self.core.remaining_ttl().await
            }

            async fn force_unlock(&self) -> $crate::Result<bool> {
                self.core.force_unlock().await
            }

            async fn unlock(&self) -> $crate::Result<()> {
                self.core.unlock().await
            }
        }
    };
}

pub(crate) use lock_face;

/// One method of a face, with its docs: [`Lock`](crate::Lock)'s carry the
/// contract (what it does, its errors, its cancel safety), written once;
/// every other face's point to them, and to the face's own docs for what
/// differs.
macro_rules! contract {
    (Lock, $method:literal, $(#[$doc:meta])* pub $($item:tt)*) => {
        $(#[$doc])*
        pub $($item)*
    };
    ($face:ident, $method:literal, $(#[$doc:meta])* pub $($item:tt)*) => {
        #[doc = concat!(
            "As [`Lock::", $method, "`](crate::Lock::", $method, "), with its errors and \
             cancel safety, on this kind of lock: [`", stringify!($face), "`] says what differs."
        )]
        pub $($item)*
    };
}

pub(crate) use contract;

/// The guard of every face but the fenced lock's, as it is.
pub(crate) fn plain(guard: crate::LockGuard) -> crate::LockGuard {
    guard
}
