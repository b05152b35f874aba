//! The blocking multi-lock and RedLock, over blocking lock handles, and the
//! trait that lets one piece of code take any blocking lock.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use super::{LockGuard, Runtime};
use crate::{Error, LockInfo, Result};

/// Keeps [`DistributedLock`]'s implementations in this crate, and carries
/// what a multi-lock needs of each lock.
#[allow(unreachable_pub)]
mod sealed {
    use std::sync::Arc;

    use crate::blocking::Runtime;

    /// One lock of a blocking multi-lock, for one call: the async face
    /// owned by the caller, and the runtime of its client.
    #[derive(Debug)]
    pub struct Parts {
        pub(crate) lock: Box<dyn crate::DistributedLock>,
        pub(crate) rt: Arc<Runtime>,
    }

    pub trait Sealed {
        /// The lock as the calling thread (or task) would take it: its
        /// owner is read here, on the caller.
        fn parts(&self) -> Parts;
    }
}

pub(crate) use sealed::{Parts, Sealed};

/// The operations every blocking lock shares, so that code (and a
/// [`MultiLock`] or [`RedLock`]) can take any of them as
/// `Box<dyn blocking::DistributedLock>`: the blocking counterpart of
/// [`crate::DistributedLock`].
///
/// Sealed: only this crate implements it. Each method behaves and fails as
/// the inherent method of the same name on the handle. A [`FencedLock`]'s
/// acquires return its guard without its token here.
///
/// [`FencedLock`]: super::FencedLock
pub trait DistributedLock: Sealed + Send + Sync + fmt::Debug {
    /// The lock's name.
    fn name(&self) -> &str;

    /// Waits until the lock is held, in watchdog mode.
    ///
    /// # Errors
    /// As the handle's `lock`.
    fn lock(&self) -> Result<LockGuard>;

    /// Waits until the lock is held, for `lease` at most.
    ///
    /// # Errors
    /// As the handle's `lock_with_lease`.
    fn lock_with_lease(&self, lease: Duration) -> Result<LockGuard>;

    /// One attempt, watchdog mode.
    ///
    /// # Errors
    /// As the handle's `try_lock`.
    fn try_lock(&self) -> Result<Option<LockGuard>>;

    /// Waits at most `wait`, watchdog mode.
    ///
    /// # Errors
    /// As the handle's `try_lock_for`.
    fn try_lock_for(&self, wait: Duration) -> Result<Option<LockGuard>>;

    /// Waits at most `wait`, held for `lease` at most.
    ///
    /// # Errors
    /// As the handle's `try_lock_with_lease`.
    fn try_lock_with_lease(&self, wait: Duration, lease: Duration) -> Result<Option<LockGuard>>;

    /// Whether anyone holds the lock.
    ///
    /// # Errors
    /// As the handle's `is_locked`.
    fn is_locked(&self) -> Result<bool>;

    /// Whether the handle's owner (by default the calling thread) holds
    /// the lock.
    ///
    /// # Errors
    /// As the handle's `is_held_by_current_task`.
    fn is_held_by_current_task(&self) -> Result<bool>;

    /// Whether `owner` of the handle's client holds the lock.
    ///
    /// # Errors
    /// As the handle's `is_held_by`.
    fn is_held_by(&self, owner: &str) -> Result<bool>;

    /// How many holds the handle's owner has.
    ///
    /// # Errors
    /// As the handle's `hold_count`.
    fn hold_count(&self) -> Result<u32>;

    /// How long until the lock expires; `None` when nobody holds it.
    ///
    /// # Errors
    /// As the handle's `remaining_ttl`.
    fn remaining_ttl(&self) -> Result<Option<Duration>>;

    /// Releases one hold of the handle's owner without a guard (for holds
    /// given up with [`LockGuard::leak`]).
    ///
    /// # Errors
    /// As the handle's `unlock`.
    fn unlock(&self) -> Result<()>;

    /// What the lock holds now.
    ///
    /// # Errors
    /// As the handle's `info`.
    fn info(&self) -> Result<LockInfo>;

    /// Deletes the lock whoever holds it and wakes a waiter.
    ///
    /// # Errors
    /// As the handle's `force_unlock`.
    fn force_unlock(&self) -> Result<bool>;
}

/// Implements [`DistributedLock`] and its sealed part for a blocking lock
/// face (see `blocking_face!`).
macro_rules! distributed_face {
    ($face:ident) => {
        impl $crate::blocking::multi::Sealed for $face {
            fn parts(&self) -> $crate::blocking::multi::Parts {
                $crate::blocking::multi::Parts {
                    lock: std::boxed::Box::new(self.handle()),
                    rt: std::sync::Arc::clone(&self.rt),
                }
            }
        }

        impl $crate::blocking::DistributedLock for $face {
            fn name(&self) -> &str {
                $face::name(self)
            }

            fn lock(&self) -> $crate::Result<$crate::blocking::LockGuard> {
                $face::lock(self).map(Into::into)
            }

            fn lock_with_lease(
                &self,
                lease: std::time::Duration,
            ) -> $crate::Result<$crate::blocking::LockGuard> {
                $face::lock_with_lease(self, lease).map(Into::into)
            }

            fn try_lock(&self) -> $crate::Result<Option<$crate::blocking::LockGuard>> {
                $face::try_lock(self).map(|g| g.map(Into::into))
            }

            fn try_lock_for(
                &self,
                wait: std::time::Duration,
            ) -> $crate::Result<Option<$crate::blocking::LockGuard>> {
                $face::try_lock_for(self, wait).map(|g| g.map(Into::into))
            }

            fn try_lock_with_lease(
                &self,
                wait: std::time::Duration,
                lease: std::time::Duration,
            ) -> $crate::Result<Option<$crate::blocking::LockGuard>> {
                $face::try_lock_with_lease(self, wait, lease).map(|g| g.map(Into::into))
            }

            fn is_locked(&self) -> $crate::Result<bool> {
                $face::is_locked(self)
            }

            fn is_held_by_current_task(&self) -> $crate::Result<bool> {
                $face::is_held_by_current_task(self)
            }

            fn is_held_by(&self, owner: &str) -> $crate::Result<bool> {
                $face::is_held_by(self, owner)
            }

            fn hold_count(&self) -> $crate::Result<u32> {
                $face::hold_count(self)
            }

            fn remaining_ttl(&self) -> $crate::Result<Option<std::time::Duration>> {
                $face::remaining_ttl(self)
            }

            fn unlock(&self) -> $crate::Result<()> {
                $face::unlock(self)
            }

            fn info(&self) -> $crate::Result<$crate::LockInfo> {
                $face::info(self)
            }

            fn force_unlock(&self) -> $crate::Result<bool> {
                $face::force_unlock(self)
            }
        }
    };
}

pub(crate) use distributed_face;

/// The runtimes of a group's locks, each once; the first runs the group's
/// calls. The others are kept alive, with their watchdogs and connections,
/// as long as the handle or guard that holds them.
#[derive(Clone)]
struct Runtimes(Vec<Arc<Runtime>>);

impl Runtimes {
    /// The async faces of `locks`, owned by the caller, and their runtimes.
    fn of(
        locks: &[Arc<dyn DistributedLock>],
        what: &str,
    ) -> Result<(Vec<Box<dyn crate::DistributedLock>>, Runtimes)> {
        if locks.is_empty() {
            return Err(Error::invalid(format!("a {what} needs at least one lock")));
        }
        let mut faces = Vec::with_capacity(locks.len());
        let mut rts: Vec<Arc<Runtime>> = Vec::new();
        for lock in locks {
            let Parts { lock, rt } = lock.parts();
            let first = rts.first().is_none_or(|first| Arc::ptr_eq(first, &rt));
            match (first, rt.handle()) {
                (false, Some(runtime)) => faces.push(Box::new(OnRuntime {
                    lock: Arc::from(lock),
                    runtime,
                })
                    as Box<dyn crate::DistributedLock>),
                _ => faces.push(lock),
            }
            if !rts.iter().any(|known| Arc::ptr_eq(known, &rt)) {
                rts.push(rt);
            }
        }
        Ok((faces, Runtimes(rts)))
    }

    /// The runtime the group's calls run on.
    fn first(&self) -> &Runtime {
        &self.0[0]
    }

    /// The runtimes other than the first, for a release running on the
    /// first to keep the clients it needs alive.
    fn others(&self) -> Vec<Arc<Runtime>> {
        self.0[1..].to_vec()
    }
}

/// A lock of another client than the group's first, whose every call runs
/// as a task on its own client's runtime: what the call leaves running (the
/// give-back of an attempt dropped by a RedLock round, a reconnect, a
/// release) then lives on that runtime, which the group's guard keeps
/// alive, not on the runtime the group runs on. A dropped call aborts its
/// task, which drops the lock's own call there (cancel safe, as each lock's
/// call is).
#[derive(Debug)]
struct OnRuntime {
    lock: Arc<dyn crate::DistributedLock>,
    runtime: tokio::runtime::Handle,
}

/// A spawned task, aborted when dropped before it ended.
struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl OnRuntime {
    /// Runs `call` on the lock as a task on its runtime.
    async fn run<T, F>(&self, call: impl FnOnce(Arc<dyn crate::DistributedLock>) -> F) -> Result<T>
    where
        F: std::future::Future<Output = Result<T>> + Send + 'static,
        T: Send + 'static,
    {
        let mut task = AbortOnDrop(self.runtime.spawn(call(Arc::clone(&self.lock))));
        match (&mut task.0).await {
            Ok(out) => out,
            // As the first client's calls do: a panic goes on in the caller.
            Err(err) if err.is_panic() => std::panic::resume_unwind(err.into_panic()),
            Err(err) => Err(Error::Blocking(format!(
                "the call on `{}` did not end on its client's runtime: {err}",
                self.lock.name()
            ))),
        }
    }
}

impl crate::distributed::Sealed for OnRuntime {}

#[async_trait::async_trait]
impl crate::DistributedLock for OnRuntime {
    fn name(&self) -> &str {
        self.lock.name()
    }

    fn watchdog_timeout(&self) -> Duration {
        self.lock.watchdog_timeout()
    }

    async fn lock(&self) -> Result<crate::LockGuard> {
        self.run(|l| async move { l.lock().await }).await
    }

    async fn lock_with_lease(&self, lease: Duration) -> Result<crate::LockGuard> {
        self.run(|l| async move { l.lock_with_lease(lease).await })
            .await
    }

    async fn try_lock(&self) -> Result<Option<crate::LockGuard>> {
        self.run(|l| async move { l.try_lock().await }).await
    }

    async fn try_lock_for(&self, wait: Duration) -> Result<Option<crate::LockGuard>> {
        self.run(|l| async move { l.try_lock_for(wait).await })
            .await
    }

    async fn try_lock_with_lease(
        &self,
        wait: Duration,
        lease: Duration,
    ) -> Result<Option<crate::LockGuard>> {
        self.run(|l| async move { l.try_lock_with_lease(wait, lease).await })
            .await
    }

    async fn is_locked(&self) -> Result<bool> {
        self.run(|l| async move { l.is_locked().await }).await
    }

    async fn is_held_by_current_task(&self) -> Result<bool> {
        self.run(|l| async move { l.is_held_by_current_task().await })
            .await
    }

    async fn is_held_by(&self, owner: &str) -> Result<bool> {
        let owner = owner.to_owned();
        self.run(|l| async move { l.is_held_by(&owner).await })
            .await
    }

    async fn info(&self) -> Result<LockInfo> {
        self.run(|l| async move { l.info().await }).await
    }

    async fn hold_count(&self) -> Result<u32> {
        self.run(|l| async move { l.hold_count().await }).await
    }

    async fn remaining_ttl(&self) -> Result<Option<Duration>> {
        self.run(|l| async move { l.remaining_ttl().await }).await
    }

    async fn force_unlock(&self) -> Result<bool> {
        self.run(|l| async move { l.force_unlock().await }).await
    }

    async fn unlock(&self) -> Result<()> {
        self.run(|l| async move { l.unlock().await }).await
    }
}

/// Defines a blocking group lock (`$face`, over the async `$async`) with
/// its acquires and its guard (`$guard`, over the async `$async_guard`):
/// the parts the multi-lock and the RedLock share.
macro_rules! blocking_group {
    ($(#[$doc:meta])* $face:ident over $async:ident, what: $what:literal,
     $(#[$gdoc:meta])* guard: $guard:ident over $async_guard:ident) => {
        $(#[$doc])*
        #[derive(Clone)]
        pub struct $face {
            locks: Vec<Arc<dyn DistributedLock>>,
        }

        impl fmt::Debug for $face {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.debug_struct(concat!("blocking::", stringify!($face)))
                    .field("locks", &self.locks)
                    .finish()
            }
        }

        impl $face {
            /// Over `locks`, in this order.
            pub fn new(locks: Vec<Box<dyn DistributedLock>>) -> $face {
                $face {
                    locks: locks.into_iter().map(Arc::from).collect(),
                }
            }

            /// The locks, in their order.
            pub fn locks(&self) -> impl Iterator<Item = &dyn DistributedLock> {
                self.locks.iter().map(|lock| &**lock)
            }

            /// Runs `call` on the async group over the caller's faces,
            /// and wraps the guard it returns.
            fn run<F, T>(&self, call: impl FnOnce(crate::$async) -> F) -> Result<Option<$guard>>
            where
                F: std::future::Future<Output = Result<T>> + Send,
                T: Into<Option<crate::$async_guard>> + Send,
            {
                let (faces, rts) = Runtimes::of(&self.locks, $what)?;
                let group = crate::$async::new(faces);
                let got = rts.first().run(call(group))?;
                Ok(got.into().map(|inner| $guard {
                    inner: Some(inner),
                    rts,
                    names: self.locks().map(DistributedLock::name).collect::<Vec<_>>().join(","),
                }))
            }

            #[doc = concat!("Waits until the ", $what, " is held, each lock in watchdog mode, as [`", stringify!($async), "::lock`](crate::", stringify!($async), "::lock).")]
            ///
            /// # Errors
            #[doc = concat!("As [`", stringify!($async), "::lock`](crate::", stringify!($async), "::lock), and [`Error::Blocking`](crate::Error::Blocking) when the call cannot be run.")]
            pub fn lock(&self) -> Result<$guard> {
                self.run(|group| async move { group.lock().await })?
                    .ok_or_else(|| Error::no_deadline($what))
            }

            #[doc = concat!("Waits until the ", $what, " is held, each lock for `lease` at most.")]
            ///
            /// # Errors
            #[doc = concat!("As [`", stringify!($async), "::lock_with_lease`](crate::", stringify!($async), "::lock_with_lease), and [`Error::Blocking`](crate::Error::Blocking) when the call cannot be run.")]
            pub fn lock_with_lease(&self, lease: Duration) -> Result<$guard> {
                self.run(|group| async move { group.lock_with_lease(lease).await })?
                    .ok_or_else(|| Error::no_deadline($what))
            }

            /// One attempt, watchdog mode: the guard, or `None` (holding
            /// nothing).
            ///
            /// # Errors
            #[doc = concat!("As [`", stringify!($async), "::try_lock`](crate::", stringify!($async), "::try_lock), and [`Error::Blocking`](crate::Error::Blocking) when the call cannot be run.")]
            pub fn try_lock(&self) -> Result<Option<$guard>> {
                self.run(|group| async move { group.try_lock().await })
            }

            /// Waits at most `wait` in all, watchdog mode: `None` when the
            /// budget ran out (nothing is held then).
            ///
            /// # Errors
            #[doc = concat!("As [`", stringify!($async), "::try_lock_for`](crate::", stringify!($async), "::try_lock_for), and [`Error::Blocking`](crate::Error::Blocking) when the call cannot be run.")]
            pub fn try_lock_for(&self, wait: Duration) -> Result<Option<$guard>> {
                self.run(|group| async move { group.try_lock_for(wait).await })
            }

            /// Waits at most `wait` in all, each lock held for `lease` at
            /// most.
            ///
            /// # Errors
            #[doc = concat!("As [`", stringify!($async), "::try_lock_with_lease`](crate::", stringify!($async), "::try_lock_with_lease), and [`Error::Blocking`](crate::Error::Blocking) when the call cannot be run.")]
            pub fn try_lock_with_lease(
                &self,
                wait: Duration,
                lease: Duration,
            ) -> Result<Option<$guard>> {
                self.run(|group| async move { group.try_lock_with_lease(wait, lease).await })
            }
        }

        $(#[$gdoc])*
        #[must_use = "the locks are released as soon as the guard is dropped"]
        #[clippy::has_significant_drop]
        pub struct $guard {
            /// `None` once released.
            inner: Option<crate::$async_guard>,
            rts: Runtimes,
            /// The locks' names, for the logs of a release on drop.
            names: String,
        }

        impl fmt::Debug for $guard {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.debug_struct(concat!("blocking::", stringify!($guard)))
                    .field("inner", &self.inner)
                    .finish()
            }
        }

        impl $guard {
            #[doc = concat!("Whether the ", $what, " is known to be no longer held, as [`", stringify!($async_guard), "::is_lease_lost`](crate::", stringify!($async_guard), "::is_lease_lost). It does not block.")]
            pub fn is_lease_lost(&self) -> bool {
                self.inner.as_ref().is_none_or(|g| g.is_lease_lost())
            }

            /// Releases every hold, all at once, blocking until each
            /// release has ended.
            ///
            /// # Errors
            #[doc = concat!("As [`", stringify!($async_guard), "::unlock`](crate::", stringify!($async_guard), "::unlock), and [`Error::Blocking`](crate::Error::Blocking) when the call cannot be run.")]
            pub fn unlock(mut self) -> Result<()> {
                match self.inner.take() {
                    Some(inner) => self.rts.first().run(inner.unlock()),
                    None => Ok(()),
                }
            }
        }

        impl Drop for $guard {
            fn drop(&mut self) {
                if let Some(inner) = self.inner.take() {
                    // The release runs on the first runtime; the others
                    // (other clients' connections) live until it ends.
                    let others = self.rts.others();
                    let release = async move {
                        let released = inner.release_dropped().await;
                        drop(others);
                        released
                    };
                    self.rts.first().release_on_drop($what, std::mem::take(&mut self.names), release);
                }
            }
        }
    };
}

blocking_group!(
    /// Several blocking locks held as one, all or nothing: the blocking
    /// face of [`crate::MultiLock`], with the same algorithm (it never
    /// holds one lock while waiting for another).
    ///
    /// The locks may come from different blocking clients (and so
    /// different Redis servers). Each call reads its owner on the calling
    /// thread, as a single lock's call does, and runs on the runtime of
    /// the first lock's client (another client's locks on their own); the
    /// guard keeps every client's runtime, and with it each watchdog, alive
    /// until it is released.
    ///
    /// ```rust,no_run
    /// # fn run(a: ferrisson::blocking::Client, b: ferrisson::blocking::Client) -> ferrisson::Result<()> {
    /// use std::time::Duration;
    /// use ferrisson::blocking::{DistributedLock, MultiLock};
    /// let both = MultiLock::new(vec![
    ///     Box::new(a.lock("account:7")) as Box<dyn DistributedLock>,
    ///     Box::new(b.fair_lock("ledger")),
    /// ]);
    /// if let Some(guard) = both.try_lock_for(Duration::from_secs(2))? {
    ///     // ... move the money ...
    ///     guard.unlock()?;
    /// }
    /// # Ok(()) }
    /// ```
    MultiLock over MultiLock, what: "multi-lock",
    /// The holds of a blocking [`MultiLock`]: the blocking face of
    /// [`crate::MultiLockGuard`]. [`MultiLockGuard::unlock`] releases them
    /// all; a drop does too, waiting as a [`LockGuard`]'s drop does.
    guard: MultiLockGuard over MultiLockGuard
);

blocking_group!(
    /// A lock held on a majority of independent Redis masters: the
    /// blocking face of [`crate::RedLock`], one lock per master, each from
    /// the blocking client of its master.
    ///
    /// Each call reads its owner on the calling thread and runs on the
    /// runtime of the first lock's client (another client's locks on their
    /// own); the guard keeps every client's runtime alive until it is
    /// released.
    ///
    /// ```rust,no_run
    /// # fn run(clients: Vec<ferrisson::blocking::Client>) -> ferrisson::Result<()> {
    /// use std::time::Duration;
    /// use ferrisson::blocking::{DistributedLock, RedLock};
    /// let lock = RedLock::new(
    ///     clients
    ///         .iter()
    ///         .map(|c| Box::new(c.lock("report:daily")) as Box<dyn DistributedLock>)
    ///         .collect(),
    /// );
    /// if let Some(guard) = lock.try_lock_with_lease(Duration::from_secs(1), Duration::from_secs(30))? {
    ///     println!("held on {} servers, valid for {:?}", guard.held(), guard.validity());
    ///     guard.unlock()?;
    /// }
    /// # Ok(()) }
    /// ```
    RedLock over RedLock, what: "RedLock",
    /// A blocking [`RedLock`] held on a majority: the blocking face of
    /// [`crate::RedLockGuard`], released on every server by
    /// [`RedLockGuard::unlock`] or on drop.
    guard: RedLockGuard over RedLockGuard
);

impl RedLock {
    /// How many locks make a majority: `N/2 + 1`.
    pub fn quorum(&self) -> usize {
        self.locks.len() / 2 + 1
    }
}

impl RedLockGuard {
    /// On how many servers the lock was taken (at least the quorum).
    pub fn held(&self) -> usize {
        self.inner.as_ref().map_or(0, |g| g.held())
    }

    /// With a lease, how much of the validity time is left, as
    /// [`crate::RedLockGuard::validity`]; `None` in watchdog mode.
    pub fn validity(&self) -> Option<Duration> {
        self.inner.as_ref().and_then(|g| g.validity())
    }
}

impl MultiLockGuard {
    /// The names of the locks held, in the multi-lock's order.
    pub fn names(&self) -> Vec<&str> {
        self.inner
            .as_ref()
            .map_or_else(Vec::new, |g| g.guards().iter().map(|g| g.name()).collect())
    }
}
