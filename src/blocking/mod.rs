//! The blocking API: the same locks, semaphores, latch, jobs, leader
//! elections and fenced hashes for programs without an async runtime
//! (batch jobs, command-line tools, synchronous services).
//!
//! A [`Client`] here starts its own small tokio runtime (one worker thread,
//! named `ferrisson-blocking`) and keeps it until the client, and every
//! handle and guard made from it, is dropped. Each call runs its async
//! counterpart on that runtime and blocks the calling thread until it ends.
//! Between calls the runtime keeps running: the watchdog renews the leases of
//! held locks while your thread does its work, and unlock messages keep
//! arriving.
//!
//! ```rust,no_run
//! use std::time::Duration;
//! # fn run() -> ferrisson::Result<()> {
//! let client = ferrisson::blocking::Client::connect("redis://127.0.0.1/")?;
//! let lock = client.lock("nightly-report");
//!
//! let guard = lock.lock()?;                    // waits; watchdog mode
//! let again = lock.lock()?;                    // same thread: re-enters
//! assert_eq!(lock.hold_count()?, 2);
//! again.unlock()?;
//! guard.unlock()?;                             // last hold: deleted, waiter woken
//!
//! if let Some(_guard) = lock.try_lock_for(Duration::from_secs(5))? {
//!     // ... the work ...
//! } // dropped: released before the next line runs (see below)
//! # Ok(()) }
//! ```
//!
//! # Owners are threads
//!
//! A hold belongs to an owner, and the default owner of a blocking handle is
//! **the calling thread**: `thread-<n>`, the same id the async API gives a
//! call made outside a tokio task. So the same thread re-enters (the hold
//! count rises), another thread waits, and a blocking and an async call on
//! the same plain thread name the same owner (for `is_held_by`, say; each
//! client has its own id, so two clients never share holds). The owner is
//! read on the calling thread before the call goes to the runtime, so the
//! runtime's own threads never own anything. Called from inside a tokio
//! task (a `spawn_blocking` closure, an async task), the owner is that task,
//! `task-<id>`, as in the async API: two tasks on one worker thread never
//! share holds. Where the async docs say
//! "the current task", read "the current thread" here
//! ([`Lock::is_held_by_current_task`] asks about the calling thread). A guard
//! may move to another thread; its hold still belongs to the thread that
//! took it, and its `unlock` releases that hold. Name an owner yourself with
//! `with_owner` when one job spans several threads.
//!
//! # Guards and drop
//!
//! [`LockGuard::unlock`] is the documented path: it blocks until Redis
//! answers and reports a lost lease or a failed release. Dropping a guard
//! also releases it, and waits for that release at most the client's
//! response timeout ([`ClientBuilder::response_timeout`], 3 s by default).
//! Past that the release goes on in the background and the drop returns, so
//! a drop never blocks for long; a failure is only logged. As an async
//! guard's drop, that release is resent after a failed connection until it
//! gets through or the hold's lease runs out (while the runtime runs). A
//! guard dropped
//! on a thread with an async runtime's context does not wait at all. A guard
//! keeps its client's runtime alive, so its watchdog goes on renewing after
//! the [`Client`] is dropped. When the guard that goes is the last holder of
//! the runtime, the runtime does not stop under a release still running:
//! its drop gives the releases of dropped guards, permits and leaderships the response
//! timeout once more to end, and only then stops. On a thread with an async
//! runtime's context that wait (and the stop) happens on a thread of its
//! own, so the drop still returns at once. A release that has not ended by
//! then is given up, and that lock frees itself when its lease runs out.
//! The wait covers releases of guards, permits and leaderships only: what an acquire
//! left running (the give-back of an attempt a RedLock round gave up on, a
//! dropped call's undo) is not waited for, and when the runtime stops
//! under it, that hold too is freed by its lease.
//!
//! # Several locks as one
//!
//! [`MultiLock`] (all or nothing) and [`RedLock`] (a majority of
//! independent masters) take blocking handles as
//! `Box<dyn `[`DistributedLock`]`>`, from one client or several (one per
//! server). Each call reads its owner on the calling thread, as a single
//! lock's call does, and runs on the runtime of the first lock's client,
//! each other client's locks as tasks on their own client's runtime (so
//! what such a call leaves running, such as the give-back of an attempt a
//! RedLock round gave up on, stays with that client); the guard keeps
//! every client's runtime alive until it is released.
//!
//! # Jobs, elections and fenced hashes
//!
//! [`Client::job`], [`Client::leader_election`] and [`Client::fenced_hash`]
//! give the blocking faces of [`crate::Job`], [`crate::LeaderElection`] and
//! [`crate::FencedHash`], with their guarantees. They are not owned by the
//! calling thread: every run of a [`Job`] and every campaign is an owner of
//! its own, as in the async API. [`Job::run`] runs a plain closure on the
//! calling thread, given a [`Lease`], while the client's runtime holds
//! the job's lock. A [`Leadership`] is resigned by
//! [`Leadership::resign`] or, as a guard is released, by its drop (waiting
//! at most the response timeout, then going on in the background; see
//! above); [`Leadership::lost`] blocks until the leadership ends,
//! [`Leadership::lost_timeout`] at most a given time, and
//! [`Leadership::is_lost`] does not block. [`LeaderElection::observe`]
//! returns an [`Iterator`] of changes ([`LeaderObserver`]).
//!
//! # Inside an async runtime
//!
//! Blocking calls belong on plain threads, or in
//! `tokio::task::spawn_blocking` when the program also runs async code. On a
//! thread with a tokio runtime's context (a `spawn_blocking` thread, the body
//! of `block_on`, an async task), where tokio would panic at a nested
//! `block_on`, a call is driven by a short-lived helper thread while the
//! caller waits: it works, never panics, and runs as the calling task. In an async task it blocks the task's worker thread like any
//! blocking call (on a current-thread runtime, every other task waits with
//! it), so use the async API there. A guard, permit or leadership dropped on such a
//! thread is released in the background, without waiting.
//!
//! # Dropping the client
//!
//! The runtime stops when the client and the last handle and guard made from
//! it are gone (after the releases still running, as above): its thread
//! gets up to one second to stop, and is left to end
//! by itself after that. Dropped on a thread with an async runtime's
//! context it is not waited for.

mod election;
mod expirable;
mod fenced_hash;
mod job;
mod latch;
mod lock;
mod multi;
mod semaphore;

pub use election::{LeaderElection, LeaderObserver, Leadership};
pub use expirable::{Permit, PermitExpirableSemaphore};
pub use fenced_hash::FencedHash;
pub use job::{Job, Lease};
pub use latch::CountDownLatch;
pub use lock::{
    FairLock, FencedGuard, FencedLock, Lock, LockGuard, NonReentrantFairLock, NonReentrantLock,
    ReadLock, ReadWriteLock, SpinLock, WriteLock,
};
pub use multi::{DistributedLock, MultiLock, MultiLockGuard, RedLock, RedLockGuard};
pub use semaphore::Semaphore;

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use redis::IntoConnectionInfo;
use tokio::runtime::Handle;
use tokio_util::task::TaskTracker;
use uuid::Uuid;

use crate::{ClientBuilder, Config, Error, Result};

/// How long the last drop of a client's runtime waits for its thread.
const SHUTDOWN_WAIT: Duration = Duration::from_secs(1);

/// The runtime of one blocking client, shared by its handles and guards.
pub(crate) struct Runtime {
    /// `None` only while it is dropped.
    rt: Option<tokio::runtime::Runtime>,
    /// How long a guard's drop waits for its release, and the runtime's
    /// last drop for the releases still running.
    release_wait: Duration,
    /// The releases of dropped guards, permits and leaderships, each a task on `rt`:
    /// the runtime's last drop lets them end before it stops.
    releases: TaskTracker,
}

impl Runtime {
    /// A handle to the tokio runtime, to spawn on it; `None` only while it
    /// is dropped.
    fn handle(&self) -> Option<Handle> {
        self.rt.as_ref().map(|rt| rt.handle().clone())
    }

    /// Runs `fut` on this runtime, blocking the calling thread until it ends
    /// (see [`drive`]).
    fn run<T: Send>(&self, fut: impl Future<Output = Result<T>> + Send) -> Result<T> {
        match &self.rt {
            Some(rt) => drive(rt, fut)?,
            None => Err(Error::RuntimeGone),
        }
    }

    /// Runs `release` (of something dropped) as a task on this runtime and
    /// waits for it at most the release wait; past it the task goes on, and
    /// the runtime's last drop gives it the release wait again before the
    /// runtime stops (see [`Runtime`]'s `Drop`). On a thread with a
    /// runtime's context it does not wait at all. Never panics: failures
    /// are logged, as `what` on `name`.
    fn release_on_drop(
        &self,
        what: &'static str,
        name: String,
        release: impl Future<Output = Result<()>> + Send + 'static,
    ) {
        let Some(rt) = self.rt.as_ref() else {
            // Only while the runtime is dropped, when no guard is left.
            return;
        };
        let owned = name.clone();
        let task = self.releases.spawn_on(
            async move {
                match release.await {
                    Ok(()) => {}
                    Err(
                        err @ (Error::LeaseLost { .. }
                        | Error::NotHeld { .. }
                        | Error::PermitNotOut { .. }),
                    ) => {
                        tracing::debug!(what, name = %owned, error = %err, "dropped, and no longer held");
                    }
                    Err(err) => {
                        tracing::warn!(what, name = %owned, error = %err,
                            "release on drop failed; it expires with its lease, if it has one");
                    }
                }
            },
            rt.handle(),
        );
        if in_runtime_context() {
            return;
        }
        let wait = self.release_wait;
        if let Ok(Err(_)) = drive(rt, async move { tokio::time::timeout(wait, task).await }) {
            tracing::warn!(
                what,
                %name,
                ?wait,
                "release on drop is still running; it goes on in the background"
            );
        }
    }
}

impl fmt::Debug for Runtime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Runtime")
            .field("release_wait", &self.release_wait)
            .field("releases_running", &self.releases.len())
            .finish_non_exhaustive()
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        let Some(rt) = self.rt.take() else {
            return;
        };
        self.releases.close();
        if self.releases.is_empty() {
            stop(rt);
            return;
        }
        // Releases still running: give them the release wait to end, then
        // stop. Inside another runtime, where this thread must not block,
        // a thread of its own does both.
        let (releases, wait) = (self.releases.clone(), self.release_wait);
        let drain = move |rt: tokio::runtime::Runtime| {
            rt.block_on(async {
                if tokio::time::timeout(wait, releases.wait()).await.is_err() {
                    tracing::warn!(
                        running = releases.len(),
                        ?wait,
                        "releases of dropped guards did not end before the runtime stopped; \
                         those locks expire with their leases"
                    );
                }
            });
            rt.shutdown_timeout(SHUTDOWN_WAIT);
        };
        if !in_runtime_context() {
            drain(rt);
            return;
        }
        // The runtime goes to the thread once it runs, so that a thread
        // that cannot start leaves it here, to be stopped without waiting.
        let (handover, received) = std::sync::mpsc::channel();
        let spawned = std::thread::Builder::new()
            .name("ferrisson-blocking-stop".into())
            .spawn(move || {
                if let Ok(rt) = received.recv() {
                    drain(rt);
                }
            });
        let left = match spawned {
            Ok(_) => handover.send(rt).err().map(|unsent| unsent.0),
            Err(_) => Some(rt),
        };
        if let Some(rt) = left {
            tracing::warn!("no thread to finish the releases of dropped guards; they are dropped");
            rt.shutdown_background();
        }
    }
}

/// Stops `rt` without blocking for long, and without blocking at all (nor
/// panicking, as tokio does when a runtime is dropped there) inside another
/// runtime.
fn stop(rt: tokio::runtime::Runtime) {
    if in_runtime_context() {
        rt.shutdown_background();
    } else {
        rt.shutdown_timeout(SHUTDOWN_WAIT);
    }
}

/// Drives `fut` to its end on `rt`, blocking the calling thread.
///
/// On a plain thread the caller drives it (`block_on`). On a thread with a
/// runtime's context (a `spawn_blocking` thread, the body of another
/// runtime's `block_on`, an async task), where tokio's `block_on` may panic,
/// a helper thread drives it while the caller waits.
fn drive<T: Send>(rt: &tokio::runtime::Runtime, fut: impl Future<Output = T> + Send) -> Result<T> {
    if !in_runtime_context() {
        return Ok(rt.block_on(fut));
    }
    std::thread::scope(|scope| {
        let helper = std::thread::Builder::new()
            .name("ferrisson-blocking-call".into())
            .spawn_scoped(scope, || rt.block_on(fut))
            .map_err(|e| Error::Blocking(format!("no thread to run the call on: {e}")))?;
        match helper.join() {
            Ok(out) => Ok(out),
            Err(panic) => std::panic::resume_unwind(panic),
        }
    })
}

/// Whether the calling thread has a tokio runtime's context.
fn in_runtime_context() -> bool {
    Handle::try_current().is_ok()
}

/// Defines blocking methods that run the async method of the same name on
/// `self.handle()` and return its result.
macro_rules! blocking_calls {
    ($async:ident; $(
        $(#[$doc:meta])*
        fn $name:ident(&self $(, $arg:ident: $ty:ty)* $(,)?) -> $out:ty;
    )*) => {
        $(
            $(#[$doc])*
            ///
            /// # Errors
            #[doc = concat!(
                "As [`", stringify!($async), "::", stringify!($name), "`](crate::",
                stringify!($async), "::", stringify!($name), "), and ",
                "[`Error::Blocking`](crate::Error::Blocking) when the call cannot be run."
            )]
            pub fn $name(&self $(, $arg: $ty)*) -> $crate::Result<$out> {
                let handle = self.handle();
                self.rt.run(handle.$name($($arg),*))
            }
        )*
    };
}

pub(crate) use blocking_calls;

/// Defines the blocking face of an ownerless async handle of the same name
/// (a semaphore, a latch): the struct, `Debug`, `new`, `handle` and `name`.
macro_rules! blocking_object {
    ($(#[$doc:meta])* $face:ident) => {
        $(#[$doc])*
        #[derive(Clone)]
        pub struct $face {
            inner: $crate::$face,
            rt: std::sync::Arc<$crate::blocking::Runtime>,
        }

        impl std::fmt::Debug for $face {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.debug_struct(concat!("blocking::", stringify!($face)))
                    .field("inner", &self.inner)
                    .finish()
            }
        }

        impl $face {
            pub(super) fn new(
                inner: $crate::$face,
                rt: &std::sync::Arc<$crate::blocking::Runtime>,
            ) -> $face {
                $face {
                    inner,
                    rt: std::sync::Arc::clone(rt),
                }
            }

            /// The async handle each call runs.
            fn handle(&self) -> &$crate::$face {
                &self.inner
            }

            /// The name: its Redis key.
            pub fn name(&self) -> &str {
                self.inner.name()
            }
        }
    };
}

pub(crate) use blocking_object;

/// A client that runs its own runtime: the entry point of the blocking API.
///
/// Cheap to clone (the clones share the connection and the runtime), and
/// `Send + Sync`: clone it for each thread rather than connecting again, as
/// each connected client has a runtime thread and connections of its own.
/// See [the module docs](self) for owners, guards and drop.
#[derive(Clone)]
pub struct Client {
    inner: crate::Client,
    rt: Arc<Runtime>,
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("blocking::Client")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

impl Client {
    /// Starts the client's runtime and connects with the default settings,
    /// as [`crate::Client::connect`].
    ///
    /// # Errors
    /// [`Error::Redis`] when the URL is malformed, [`Error::Connect`] when
    /// the server cannot be reached or refuses the credentials;
    /// [`Error::Blocking`] when the runtime cannot start.
    pub fn connect(url: impl IntoConnectionInfo) -> Result<Client> {
        Client::from_builder(crate::Client::builder(url))
    }

    /// Starts the client's runtime and builds `builder` on it: every
    /// setting of [`ClientBuilder`] (watchdog timeout, cluster, sentinel,
    /// TLS) applies.
    ///
    /// ```rust,no_run
    /// use std::time::Duration;
    /// # fn run() -> ferrisson::Result<()> {
    /// let builder = ferrisson::Client::builder("redis://127.0.0.1/")
    ///     .watchdog_timeout(Duration::from_secs(10));
    /// let client = ferrisson::blocking::Client::from_builder(builder)?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// As [`ClientBuilder::build`], and [`Error::Blocking`] when the runtime
    /// cannot start.
    pub fn from_builder(builder: ClientBuilder) -> Result<Client> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("ferrisson-blocking")
            .enable_all()
            .build()
            .map_err(|e| Error::Blocking(format!("the client's runtime did not start: {e}")))?;
        let inner = match drive(&rt, builder.build()).and_then(|built| built) {
            Ok(inner) => inner,
            Err(err) => {
                stop(rt);
                return Err(err);
            }
        };
        let release_wait = inner.config().response_timeout;
        Ok(Client {
            inner,
            rt: Arc::new(Runtime {
                rt: Some(rt),
                release_wait,
                releases: TaskTracker::new(),
            }),
        })
    }

    /// A handle to the reentrant lock `name`, as [`crate::Client::lock`].
    pub fn lock(&self, name: impl Into<String>) -> Lock {
        Lock::new(self.inner.lock(name), &self.rt)
    }

    /// A handle to the spin lock `name`, as [`crate::Client::spin_lock`].
    pub fn spin_lock(&self, name: impl Into<String>) -> SpinLock {
        SpinLock::new(self.inner.spin_lock(name), &self.rt)
    }

    /// A handle to the fenced lock `name`, as [`crate::Client::fenced_lock`].
    pub fn fenced_lock(&self, name: impl Into<String>) -> FencedLock {
        FencedLock::new(self.inner.fenced_lock(name), &self.rt)
    }

    /// A handle to the fair lock `name`, as [`crate::Client::fair_lock`].
    pub fn fair_lock(&self, name: impl Into<String>) -> FairLock {
        FairLock::new(self.inner.fair_lock(name), &self.rt)
    }

    /// A handle to the non-reentrant lock `name`, as
    /// [`crate::Client::non_reentrant_lock`].
    pub fn non_reentrant_lock(&self, name: impl Into<String>) -> NonReentrantLock {
        NonReentrantLock::new(self.inner.non_reentrant_lock(name), &self.rt)
    }

    /// A handle to the non-reentrant fair lock `name`, as
    /// [`crate::Client::non_reentrant_fair_lock`].
    pub fn non_reentrant_fair_lock(&self, name: impl Into<String>) -> NonReentrantFairLock {
        NonReentrantFairLock::new(self.inner.non_reentrant_fair_lock(name), &self.rt)
    }

    /// A handle to the read-write lock `name`, as
    /// [`crate::Client::read_write_lock`].
    pub fn read_write_lock(&self, name: impl Into<String>) -> ReadWriteLock {
        ReadWriteLock::new(self.inner.read_write_lock(name), &self.rt)
    }

    /// A handle to the semaphore `name`, as [`crate::Client::semaphore`].
    pub fn semaphore(&self, name: impl Into<String>) -> Semaphore {
        Semaphore::new(self.inner.semaphore(name), &self.rt)
    }

    /// A handle to the permit-expirable semaphore `name`, as
    /// [`crate::Client::permit_expirable_semaphore`].
    pub fn permit_expirable_semaphore(&self, name: impl Into<String>) -> PermitExpirableSemaphore {
        PermitExpirableSemaphore::new(self.inner.permit_expirable_semaphore(name), &self.rt)
    }

    /// A handle to the count-down latch `name`, as
    /// [`crate::Client::count_down_latch`].
    pub fn count_down_latch(&self, name: impl Into<String>) -> CountDownLatch {
        CountDownLatch::new(self.inner.count_down_latch(name), &self.rt)
    }

    /// The job `name`, which is also the key of its lock, as
    /// [`crate::Client::job`]. Nothing is sent until [`Job::run`].
    pub fn job(&self, name: impl Into<String>) -> Job {
        Job::new(self.inner.job(name), &self.rt)
    }

    /// A leader election on `name`, which is also the key of its fenced
    /// lock, as [`crate::Client::leader_election`]. Nothing is sent until a
    /// call.
    pub fn leader_election(&self, name: impl Into<String>) -> LeaderElection {
        LeaderElection::new(self.inner.leader_election(name), &self.rt)
    }

    /// The hash at `key`, written with fencing tokens, as
    /// [`crate::Client::fenced_hash`]. Nothing is sent until a call.
    pub fn fenced_hash(&self, key: impl Into<String>) -> FencedHash {
        FencedHash::new(self.inner.fenced_hash(key), &self.rt)
    }

    /// This client's UUID, the first half of its owner fields.
    pub fn id(&self) -> Uuid {
        self.inner.id()
    }

    /// The settings the client was built with.
    pub fn config(&self) -> &Config {
        self.inner.config()
    }

    /// How many holds the watchdog is renewing for this client.
    pub fn held_locks(&self) -> usize {
        self.inner.held_locks()
    }
}
