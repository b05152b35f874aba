//! The blocking lock handles, one per async lock kind, and their guards.

use std::sync::Arc;
use std::time::Duration;

use super::multi::distributed_face;
use super::{blocking_calls, Runtime};
use crate::lock::current_owner_id;
use crate::{Backoff, Error, LockInfo, Result};

/// Defines the blocking face of the async lock face of the same name: its
/// acquires return `$guard` (made by `$guard::new` from the async guard),
/// and its calls run as the calling thread unless an owner was named.
macro_rules! blocking_face {
    ($(#[$doc:meta])* $face:ident, guard: $guard:ident) => {
        $(#[$doc])*
        #[derive(Clone)]
        pub struct $face {
            inner: crate::$face,
            /// Whether `inner` has an owner named by `with_owner`; if not,
            /// each call runs as the calling thread.
            named: bool,
            rt: Arc<Runtime>,
        }

        impl std::fmt::Debug for $face {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.debug_struct(concat!("blocking::", stringify!($face)))
                    .field("inner", &self.inner)
                    .field("thread_owned", &!self.named)
                    .finish()
            }
        }

        impl $face {
            pub(super) fn new(inner: crate::$face, rt: &Arc<Runtime>) -> $face {
                $face {
                    inner,
                    named: false,
                    rt: Arc::clone(rt),
                }
            }

            /// The same handle over another async face of the same lock.
            #[allow(dead_code)]
            fn map(&self, inner: crate::$face) -> $face {
                $face {
                    inner,
                    named: self.named,
                    rt: Arc::clone(&self.rt),
                }
            }

            /// The async face each call runs: the caller (its task, else
            /// its thread) is the owner unless one was named. Read on the caller's thread,
            /// before the call goes to the runtime.
            fn handle(&self) -> crate::$face {
                match self.named {
                    true => self.inner.clone(),
                    false => self.inner.with_owner(current_owner_id()),
                }
            }

            /// The lock's name: the Redis key of its hash.
            pub fn name(&self) -> &str {
                self.inner.name()
            }

            /// The same lock, owned by `owner` instead of the calling
            /// thread: every handle with this owner id on the same client,
            /// blocking or async, shares its holds. The id must be non-empty
            /// and must not end in `:write`; a bad id is reported by the
            /// first call.
            pub fn with_owner(&self, owner: impl Into<String>) -> $face {
                $face {
                    inner: self.inner.with_owner(owner),
                    named: true,
                    rt: Arc::clone(&self.rt),
                }
            }

            #[doc = concat!("Waits until the lock is held, then keeps it alive with the watchdog until the guard is released, as [`Lock::lock`](crate::Lock::lock).")]
            ///
            /// # Errors
            #[doc = concat!("As [`Lock::lock`](crate::Lock::lock), and [`Error::Blocking`](crate::Error::Blocking) when the call cannot be run.")]
            pub fn lock(&self) -> Result<$guard> {
                let handle = self.handle();
                let guard = self.rt.run(handle.lock())?;
                Ok($guard::new(guard, &self.rt))
            }

            /// Waits until the lock is held, for `lease` at most: no
            /// watchdog; the lock frees itself when the lease runs out.
            ///
            /// # Errors
            #[doc = concat!("As [`Lock::lock_with_lease`](crate::Lock::lock_with_lease), and [`Error::Blocking`](crate::Error::Blocking) when the call cannot be run.")]
            pub fn lock_with_lease(&self, lease: Duration) -> Result<$guard> {
                let handle = self.handle();
                let guard = self.rt.run(handle.lock_with_lease(lease))?;
                Ok($guard::new(guard, &self.rt))
            }

            /// One attempt, watchdog mode: `Some(guard)` when the lock was
            /// free or already held by this owner, `None` when someone else
            /// holds it.
            ///
            /// # Errors
            #[doc = concat!("As [`Lock::try_lock`](crate::Lock::try_lock), and [`Error::Blocking`](crate::Error::Blocking) when the call cannot be run.")]
            pub fn try_lock(&self) -> Result<Option<$guard>> {
                let handle = self.handle();
                let guard = self.rt.run(handle.try_lock())?;
                Ok(guard.map(|g| $guard::new(g, &self.rt)))
            }

            /// Waits at most `wait` for the lock, watchdog mode. A zero wait
            /// makes one attempt.
            ///
            /// # Errors
            #[doc = concat!("As [`Lock::try_lock_for`](crate::Lock::try_lock_for), and [`Error::Blocking`](crate::Error::Blocking) when the call cannot be run.")]
            pub fn try_lock_for(&self, wait: Duration) -> Result<Option<$guard>> {
                let handle = self.handle();
                let guard = self.rt.run(handle.try_lock_for(wait))?;
                Ok(guard.map(|g| $guard::new(g, &self.rt)))
            }

            /// Waits at most `wait` for the lock, held for `lease` at most.
            ///
            /// # Errors
            #[doc = concat!("As [`Lock::try_lock_with_lease`](crate::Lock::try_lock_with_lease), and [`Error::Blocking`](crate::Error::Blocking) when the call cannot be run.")]
            pub fn try_lock_with_lease(
                &self,
                wait: Duration,
                lease: Duration,
            ) -> Result<Option<$guard>> {
                let handle = self.handle();
                let guard = self.rt.run(handle.try_lock_with_lease(wait, lease))?;
                Ok(guard.map(|g| $guard::new(g, &self.rt)))
            }

            blocking_calls! { $face;
                /// Whether anyone holds the lock.
                fn is_locked(&self) -> bool;
                /// Whether this handle's owner holds the lock: by default
                /// the calling **thread** (the async API's "current task").
                fn is_held_by_current_task(&self) -> bool;
                /// Whether `owner` of this handle's client holds the lock:
                /// an id given to `with_owner`, or `thread-<n>` /
                /// `task-<id>` for the default owners.
                fn is_held_by(&self, owner: &str) -> bool;
                /// What the lock holds now, read in one call: its holders,
                /// its TTL, and what only some kinds have.
                fn info(&self) -> LockInfo;
                /// How many holds this handle's owner (by default the
                /// calling thread) has on the lock.
                fn hold_count(&self) -> u32;
                /// How long until the lock expires: `None` when nobody
                /// holds it.
                fn remaining_ttl(&self) -> Option<Duration>;
                /// Deletes the lock whoever holds it and wakes a waiter;
                /// whether there was a lock to delete.
                fn force_unlock(&self) -> bool;
                /// Releases one hold of this handle's owner without a guard
                /// (for holds given up with [`LockGuard::leak`]).
                fn unlock(&self) -> ();
            }
        }

        distributed_face!($face);
    };
}

blocking_face!(
    /// A reentrant distributed lock, from
    /// [`blocking::Client::lock`](super::Client::lock): the blocking face of
    /// [`crate::Lock`]. Its default owner is the calling thread.
    Lock, guard: LockGuard
);

blocking_face!(
    /// A spin lock, from [`blocking::Client::spin_lock`](super::Client::spin_lock):
    /// the blocking face of [`crate::SpinLock`]. Its waiters poll with a
    /// backoff instead of subscribing.
    SpinLock, guard: LockGuard
);

blocking_face!(
    /// A fenced lock, from
    /// [`blocking::Client::fenced_lock`](super::Client::fenced_lock): the
    /// blocking face of [`crate::FencedLock`]. Each acquire draws a fencing
    /// token ([`FencedGuard::token`]).
    FencedLock, guard: FencedGuard
);

blocking_face!(
    /// A fair lock, from [`blocking::Client::fair_lock`](super::Client::fair_lock):
    /// the blocking face of [`crate::FairLock`], granted in arrival order.
    FairLock, guard: LockGuard
);

blocking_face!(
    /// A non-reentrant lock, from
    /// [`blocking::Client::non_reentrant_lock`](super::Client::non_reentrant_lock):
    /// the blocking face of [`crate::NonReentrantLock`]. Its holder asking
    /// again is refused with [`Error::NonReentrantReacquire`].
    NonReentrantLock, guard: LockGuard
);

blocking_face!(
    /// A non-reentrant fair lock, from
    /// [`blocking::Client::non_reentrant_fair_lock`](super::Client::non_reentrant_fair_lock):
    /// the blocking face of [`crate::NonReentrantFairLock`].
    NonReentrantFairLock, guard: LockGuard
);

blocking_face!(
    /// The read side of a [`ReadWriteLock`]: the blocking face of
    /// [`crate::ReadLock`].
    ReadLock, guard: LockGuard
);

blocking_face!(
    /// The write side of a [`ReadWriteLock`]: the blocking face of
    /// [`crate::WriteLock`].
    WriteLock, guard: LockGuard
);

impl SpinLock {
    /// The same lock with waiters that pause by `backoff` between attempts,
    /// as [`crate::SpinLock::with_backoff`].
    pub fn with_backoff(&self, backoff: Backoff) -> SpinLock {
        self.map(self.inner.with_backoff(backoff))
    }

    /// The backoff between a waiter's attempts.
    pub fn backoff(&self) -> Backoff {
        self.inner.backoff()
    }
}

impl FairLock {
    /// The same lock, with waiters that count as dead after `timeout` of
    /// silence, as [`crate::FairLock::with_waiter_timeout`].
    pub fn with_waiter_timeout(&self, timeout: Duration) -> FairLock {
        self.map(self.inner.with_waiter_timeout(timeout))
    }

    /// The waiter timeout.
    pub fn waiter_timeout(&self) -> Duration {
        self.inner.waiter_timeout()
    }
}

impl NonReentrantFairLock {
    /// The same lock, with waiters that count as dead after `timeout` of
    /// silence, as [`crate::NonReentrantFairLock::with_waiter_timeout`].
    pub fn with_waiter_timeout(&self, timeout: Duration) -> NonReentrantFairLock {
        self.map(self.inner.with_waiter_timeout(timeout))
    }

    /// The waiter timeout.
    pub fn waiter_timeout(&self) -> Duration {
        self.inner.waiter_timeout()
    }
}

impl FencedLock {
    blocking_calls! { FencedLock;
        /// The highest token drawn on this lock so far, `None` when none
        /// ever was.
        fn current_token(&self) -> Option<u64>;
    }
}

/// A read-write lock, from
/// [`blocking::Client::read_write_lock`](super::Client::read_write_lock):
/// the blocking face of [`crate::ReadWriteLock`].
#[derive(Clone)]
pub struct ReadWriteLock {
    inner: crate::ReadWriteLock,
    rt: Arc<Runtime>,
}

impl std::fmt::Debug for ReadWriteLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("blocking::ReadWriteLock")
            .field("inner", &self.inner)
            .finish()
    }
}

impl ReadWriteLock {
    pub(super) fn new(inner: crate::ReadWriteLock, rt: &Arc<Runtime>) -> ReadWriteLock {
        ReadWriteLock {
            inner,
            rt: Arc::clone(rt),
        }
    }

    /// The lock's name: the Redis key of its hash.
    pub fn name(&self) -> &str {
        self.inner.name()
    }

    /// The read side: shared among readers, excluded by a writer.
    pub fn read(&self) -> ReadLock {
        ReadLock::new(self.inner.read(), &self.rt)
    }

    /// The write side: one holder, excluding readers and other writers.
    pub fn write(&self) -> WriteLock {
        WriteLock::new(self.inner.write(), &self.rt)
    }
}

/// One hold of a blocking lock; the blocking face of [`crate::LockGuard`].
///
/// [`LockGuard::unlock`] releases it and reports the outcome. Dropping it
/// releases it too, waiting at most the client's response timeout (3 s by
/// default) before the release goes on in the background; on a thread with
/// an async runtime's context the drop does not wait. The guard is `Send`: it may move to
/// another thread, and its hold still belongs to the owner that took it.
/// It keeps its client's runtime, and so the watchdog renewing it, alive;
/// when it is the last thing keeping the runtime, its drop may wait the
/// response timeout once more for the release (see
/// [the module docs](super#guards-and-drop)).
#[must_use = "the lock is released as soon as the guard is dropped"]
#[clippy::has_significant_drop]
pub struct LockGuard {
    /// `None` once released or leaked.
    inner: Option<crate::LockGuard>,
    rt: Arc<Runtime>,
}

impl std::fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("blocking::LockGuard")
            .field("inner", &self.inner)
            .finish()
    }
}

impl LockGuard {
    fn new(inner: crate::LockGuard, rt: &Arc<Runtime>) -> LockGuard {
        LockGuard {
            inner: Some(inner),
            rt: Arc::clone(rt),
        }
    }

    /// The lock's name.
    pub fn name(&self) -> &str {
        self.inner.as_ref().map_or("", |g| g.name())
    }

    /// The owner id of this hold (see [`crate::LockGuard::owner`]).
    pub fn owner(&self) -> &str {
        self.inner.as_ref().map_or("", |g| g.owner())
    }

    /// The hash field of this hold, `<client-uuid>:<owner-id>`.
    pub fn field(&self) -> &str {
        self.inner.as_ref().map_or("", |g| g.field())
    }

    /// The lease this hold was taken with; `None` in watchdog mode.
    pub fn lease(&self) -> Option<Duration> {
        self.inner.as_ref().and_then(|g| g.lease())
    }

    /// Whether the lease is known lost, or has run out by this process's
    /// clock, as [`crate::LockGuard::is_lease_lost`]. It does not block:
    /// check it between steps of long work.
    pub fn is_lease_lost(&self) -> bool {
        self.inner.as_ref().is_none_or(|g| g.is_lease_lost())
    }

    /// A handle on this hold's lease, as
    /// [`crate::LockGuard::lease_handle`]: another thread may watch it
    /// while this one works.
    pub fn lease_handle(&self) -> super::Lease {
        let inner = self
            .inner
            .as_ref()
            .map_or_else(crate::Lease::ended, crate::LockGuard::lease_handle);
        super::Lease::new(inner, Arc::clone(&self.rt))
    }

    /// Has this hold's release keep the lock held by its owner until
    /// `until` instead, when it is the owner's last hold, as
    /// [`crate::LockGuard::keep_until`]. It does not block: nothing is
    /// sent now.
    ///
    /// # Errors
    /// As [`crate::LockGuard::keep_until`].
    pub fn keep_until(&mut self, until: std::time::Instant) -> Result<()> {
        match self.inner.as_mut() {
            Some(guard) => guard.keep_until(until.into()),
            None => Ok(()),
        }
    }

    /// Sets a leased hold's lease to `lease` from now, as
    /// [`crate::LockGuard::extend`].
    ///
    /// # Errors
    /// As [`crate::LockGuard::extend`], and [`Error::Blocking`] when the
    /// call cannot be run.
    pub fn extend(&mut self, lease: Duration) -> Result<()> {
        let guard = live(&mut self.inner)?;
        self.rt.run(guard.extend(lease))
    }

    /// Hands a leased hold to the watchdog, as
    /// [`crate::LockGuard::keep_alive`].
    ///
    /// # Errors
    /// As [`crate::LockGuard::keep_alive`], and [`Error::Blocking`] when
    /// the call cannot be run.
    pub fn keep_alive(&mut self) -> Result<()> {
        let guard = live(&mut self.inner)?;
        self.rt.run(guard.keep_alive())
    }

    /// Gives up the guard but keeps the hold: nothing is released, now or on
    /// drop. Release it later with [`Lock::unlock`] from the same owner, or
    /// let a lease run out.
    pub fn leak(mut self) {
        if let Some(guard) = self.inner.take() {
            guard.leak();
        }
    }

    /// Releases this hold, blocking until Redis answers; the last hold
    /// deletes the lock and wakes a waiter.
    ///
    /// # Errors
    /// As [`crate::LockGuard::unlock`], and [`Error::Blocking`] when the
    /// call cannot be run (the hold is then released in the background, as
    /// on drop).
    pub fn unlock(mut self) -> Result<()> {
        match self.inner.take() {
            Some(guard) => self.rt.run(guard.unlock()),
            None => Ok(()),
        }
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        if let Some(guard) = self.inner.take() {
            let name = guard.name().to_owned();
            self.rt
                .release_on_drop("lock", name, guard.release_dropped());
        }
    }
}

/// The async guard, while it has not been given up (it always is until the
/// blocking guard is consumed).
fn live(inner: &mut Option<crate::LockGuard>) -> Result<&mut crate::LockGuard> {
    inner.as_mut().ok_or_else(|| Error::LeaseLost {
        name: String::new(),
    })
}

/// One hold of a blocking fenced lock, with the token its acquire drew; the
/// blocking face of [`crate::FencedGuard`]. Released as a [`LockGuard`].
#[derive(Debug)]
#[must_use = "the lock is released as soon as the guard is dropped"]
#[clippy::has_significant_drop]
pub struct FencedGuard {
    guard: LockGuard,
    token: u64,
}

impl FencedGuard {
    fn new(inner: crate::FencedGuard, rt: &Arc<Runtime>) -> FencedGuard {
        let token = inner.token();
        FencedGuard {
            guard: LockGuard::new(inner.into(), rt),
            token,
        }
    }

    /// The fencing token this acquire drew, as
    /// [`crate::FencedGuard::token`]: send it with every write, and have the
    /// resource refuse a token lower than the highest it has seen.
    pub fn token(&self) -> u64 {
        self.token
    }

    /// The guard without its token.
    pub fn guard(&self) -> &LockGuard {
        &self.guard
    }

    /// The guard without its token, mutable (to `extend` or `keep_alive`
    /// the hold).
    pub fn guard_mut(&mut self) -> &mut LockGuard {
        &mut self.guard
    }

    /// Releases this hold, as [`LockGuard::unlock`].
    ///
    /// # Errors
    /// As [`LockGuard::unlock`].
    pub fn unlock(self) -> Result<()> {
        self.guard.unlock()
    }
}

impl From<FencedGuard> for LockGuard {
    fn from(guard: FencedGuard) -> LockGuard {
        guard.guard
    }
}
