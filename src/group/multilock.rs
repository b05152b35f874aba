//! The multi-lock: several locks taken as one, all or nothing.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use tokio::time::Instant;

use crate::args;
use crate::engine::waiting::{self, pause_before_retry};
use crate::{Backoff, DistributedLock, Error, LockGuard, Result};

/// Several locks held as one: Redisson's `RedissonMultiLock`. The locks
/// may be of any kind, from different clients and different Redis servers.
///
/// An acquire takes every lock or none: when one is busy, the ones already
/// taken are released before anything waits. It never holds one lock
/// while waiting for another, so two multi-locks over the same locks, in
/// any order, cannot deadlock:
///
/// 1. wait (within the budget) for the first lock, holding nothing;
/// 2. take each other lock with one attempt, no wait;
/// 3. if one is busy, release everything taken, pause (from 1 ms, doubling
///    up to 128 ms, with jitter, as [`Backoff::default`]), and go back to 1
///    waiting for the busy one first.
///
/// Against Redisson's multi-lock, which holds and waits (it takes its locks
/// in order and, holding the first, waits up to 1.5 s per lock for the
/// next), over the same locks in the opposite order, this default still
/// gets its turns: the other side lets go of both between its critical
/// sections, and this one is then waiting for the lock that was busy. In
/// bench scenario 9 (`docs/benchmarks.md`), against one and two such
/// contenders in tight loops, its longest wait was under 100 ms. A bounded
/// hold-and-wait mode was measured there too and left out: it lost every
/// standoff to the other side taking its first lock back at once, and got
/// no turn in 10 s.
///
/// One [`MultiLockGuard`] releases them all. An acquire that returns
/// without a guard (`None` or an error) holds nothing: the locks it took
/// were released, all at once, before it returned (with a wait, those
/// releases are waited for until the end of the wait plus its margin, and a
/// release still unanswered then goes on in the background). A release that
/// fails (a server out of reach) leaves that hold to expire with its lease.
///
/// With a wait, the acquire returns by the end of the wait plus a small
/// margin (as [`Lock::try_lock_for`](crate::Lock::try_lock_for)), whatever
/// a server does: a lock's attempt still unanswered then finishes in the
/// background, and what it took is given back.
///
/// ```no_run
/// # async fn run(a: ferrisson::Client, b: ferrisson::Client) -> ferrisson::Result<()> {
/// use std::time::Duration;
/// use ferrisson::{DistributedLock, MultiLock};
/// // An account on one Redis, a ledger on another: both or neither.
/// let both = MultiLock::new(vec![
///     Box::new(a.lock("account:7")) as Box<dyn DistributedLock>,
///     Box::new(b.fair_lock("ledger")),
/// ]);
/// if let Some(guard) = both.try_lock_for(Duration::from_secs(2)).await? {
///     // ... move the money ...
///     guard.unlock().await?;
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct MultiLock {
    locks: Vec<Arc<dyn DistributedLock>>,
    backoff: Backoff,
}

impl MultiLock {
    /// A multi-lock over `locks`, taken in this order (after a busy lock,
    /// that one first).
    pub fn new(locks: Vec<Box<dyn DistributedLock>>) -> MultiLock {
        MultiLock {
            locks: locks.into_iter().map(Arc::from).collect(),
            backoff: Backoff::default(),
        }
    }

    /// The locks, in their order.
    pub fn locks(&self) -> impl Iterator<Item = &dyn DistributedLock> {
        self.locks.iter().map(|lock| &**lock)
    }

    /// Waits until every lock is held, each in watchdog mode.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a multi-lock without locks; any error
    /// of one lock's acquire (whatever was taken is released first).
    ///
    /// # Cancel safety
    /// Cancel safe: a dropped future leaves no hold behind (the holds taken
    /// so far are released in the background, and each lock's own acquire
    /// is cancel safe).
    pub async fn lock(&self) -> Result<MultiLockGuard> {
        self.acquire(None, None)
            .await?
            .ok_or_else(|| Error::no_deadline("multi-lock"))
    }

    /// Waits until every lock is held, each for `lease` at most.
    ///
    /// # Errors
    /// As [`MultiLock::lock`], and [`Error::InvalidArgument`] for a bad
    /// lease.
    ///
    /// # Cancel safety
    /// As [`MultiLock::lock`].
    pub async fn lock_with_lease(&self, lease: Duration) -> Result<MultiLockGuard> {
        self.acquire(None, Some(lease))
            .await?
            .ok_or_else(|| Error::no_deadline("multi-lock"))
    }

    /// One attempt at every lock, watchdog mode: all, or none and `None`.
    ///
    /// # Errors
    /// As [`MultiLock::lock`].
    ///
    /// # Cancel safety
    /// As [`MultiLock::lock`].
    pub async fn try_lock(&self) -> Result<Option<MultiLockGuard>> {
        self.acquire(Some(Duration::ZERO), None).await
    }

    /// Every lock within `wait` in all, watchdog mode; `None` when the
    /// budget ran out (nothing is held then).
    ///
    /// # Errors
    /// As [`MultiLock::lock`], and [`Error::InvalidArgument`] for a wait
    /// over a year.
    ///
    /// # Cancel safety
    /// As [`MultiLock::lock`].
    pub async fn try_lock_for(&self, wait: Duration) -> Result<Option<MultiLockGuard>> {
        self.acquire(Some(wait), None).await
    }

    /// Every lock within `wait` in all, each held for `lease` at most.
    ///
    /// # Errors
    /// As [`MultiLock::try_lock_for`], and [`Error::InvalidArgument`] for
    /// a bad lease.
    ///
    /// # Cancel safety
    /// As [`MultiLock::lock`].
    pub async fn try_lock_with_lease(
        &self,
        wait: Duration,
        lease: Duration,
    ) -> Result<Option<MultiLockGuard>> {
        self.acquire(Some(wait), Some(lease)).await
    }

    async fn acquire(
        &self,
        wait: Option<Duration>,
        lease: Option<Duration>,
    ) -> Result<Option<MultiLockGuard>> {
        if self.locks.is_empty() {
            return Err(Error::invalid("a multi-lock needs at least one lock"));
        }
        let deadline = args::deadline(wait)?;
        // With a wait, the call ends by its end plus a margin, whatever a
        // server does: a lock's call cut there finishes in the background
        // and gives back what it took (each lock's acquire is cancel safe);
        // releases still running then go on in the background. (A zero
        // wait makes one attempt at each lock, each bounded as its
        // `try_lock`.)
        let bound = deadline
            .filter(|_| wait.is_some_and(|w| !w.is_zero()))
            .map(|d| d + waiting::margin(wait.unwrap_or_default()));
        let mut first = 0;
        let mut round = 0u32;
        loop {
            let remaining = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            if round > 0 && remaining == Some(Duration::ZERO) {
                // Not even a zero-wait attempt: it would take longer.
                return Ok(None);
            }
            let lock = &self.locks[first];
            let call = async {
                match (remaining, lease) {
                    (None, None) => lock.lock().await.map(Some),
                    (None, Some(lease)) => lock.lock_with_lease(lease).await.map(Some),
                    (Some(wait), None) => lock.try_lock_for(wait).await,
                    (Some(wait), Some(lease)) => lock.try_lock_with_lease(wait, lease).await,
                }
            };
            // The lock's own wait ends at the deadline (see `Wait`).
            let Some(guard) = call.await? else {
                return Ok(None);
            };
            // Dropped guards release in the background: an error or a
            // cancelled call below leaves nothing held.
            let mut held: Vec<(usize, LockGuard)> = vec![(first, guard)];
            let mut busy = None;
            for (i, lock) in self.locks.iter().enumerate().filter(|(i, _)| *i != first) {
                let call = async {
                    match lease {
                        None => lock.try_lock().await,
                        Some(lease) => lock.try_lock_with_lease(Duration::ZERO, lease).await,
                    }
                };
                let Some(taken) = waiting::until(bound, call).await else {
                    // The wait ran out with that lock's reply still to come.
                    release_all(held.into_iter().map(|(_, g)| g), bound).await;
                    return Ok(None);
                };
                match taken {
                    Ok(Some(guard)) => held.push((i, guard)),
                    Ok(None) => {
                        busy = Some(i);
                        break;
                    }
                    // A server out of reach for a moment: wait for that
                    // lock first, which rides it out as a lock's own wait
                    // does.
                    Err(err) if err.may_wait_out() => {
                        tracing::debug!(lock = %lock.name(), error = %err, "multi-lock: no connection");
                        busy = Some(i);
                        break;
                    }
                    Err(err) => {
                        release_all(held.into_iter().map(|(_, g)| g), bound).await;
                        return Err(err);
                    }
                }
            }
            let Some(busy) = busy else {
                held.sort_by_key(|(i, _)| *i);
                return Ok(Some(MultiLockGuard {
                    guards: held.into_iter().map(|(_, g)| g).collect(),
                }));
            };
            release_all(held.into_iter().map(|(_, g)| g), bound).await;
            tracing::debug!(lock = %self.locks[busy].name(), "multi-lock: busy; released the rest to wait for it");
            first = busy;
            if !pause_before_retry(&self.backoff, &mut round, deadline).await {
                return Ok(None);
            }
        }
    }
}

/// Releases every guard at once, logging failures (each then expires with
/// its lease); past `by`, the releases still running go on in the
/// background.
async fn release_all(guards: impl IntoIterator<Item = LockGuard>, by: Option<Instant>) {
    let _ = waiting::until(by, unlock_all(guards.into_iter().collect())).await;
}

/// Releases every guard at once as their drops do (see
/// [`LockGuard::release_dropped`]); the first error.
#[cfg(feature = "blocking")]
pub(crate) async fn release_dropped(guards: Vec<LockGuard>) -> Result<()> {
    futures_util::future::join_all(guards.into_iter().map(LockGuard::release_dropped))
        .await
        .into_iter()
        .find_map(Result::err)
        .map_or(Ok(()), Err)
}

/// Releases every guard at once; the outcome of each release, in order.
pub(crate) async fn unlock_all(guards: Vec<LockGuard>) -> Vec<Result<()>> {
    futures_util::future::join_all(guards.into_iter().map(|guard| async move {
        let name = guard.name().to_owned();
        let released = guard.unlock().await;
        if let Err(err) = &released {
            tracing::debug!(lock = %name, error = %err, "could not release one lock; it expires with its lease");
        }
        released
    }))
    .await
}

/// The holds of a [`MultiLock`], one per lock, in the multi-lock's order.
/// Released all at once by [`MultiLockGuard::unlock`], or on drop (in the
/// background, as [`LockGuard`]).
#[must_use = "the locks are released as soon as the guard is dropped"]
#[clippy::has_significant_drop]
#[derive(Debug)]
pub struct MultiLockGuard {
    guards: Vec<LockGuard>,
}

impl MultiLockGuard {
    /// The guard of each lock, in the multi-lock's order.
    pub fn guards(&self) -> &[LockGuard] {
        &self.guards
    }

    /// Whether any of the leases is known to be lost.
    pub fn is_lease_lost(&self) -> bool {
        self.guards.iter().any(LockGuard::is_lease_lost)
    }

    /// Resolves when any of the locks is known to be no longer held (see
    /// [`LockGuard::lease_lost`]): the multi-lock no longer protects all.
    ///
    /// # Cancel safety
    /// Cancel safe: it only waits.
    pub async fn lease_lost(&self) {
        lost_count(&self.guards, 1).await;
    }

    /// Releases every hold, each as [`LockGuard::unlock`], all at once: a
    /// server that does not answer holds up no other release.
    ///
    /// # Errors
    /// The first error of the releases; every release is tried.
    ///
    /// # Cancel safety
    /// Cancel safe: the releases are sent at once, and each, once started,
    /// completes in the background.
    pub async fn unlock(self) -> Result<()> {
        unlock_all(self.guards)
            .await
            .into_iter()
            .find_map(Result::err)
            .map_or(Ok(()), Err)
    }

    /// Releases every hold as their drops do: the blocking API's drop.
    #[cfg(feature = "blocking")]
    pub(crate) async fn release_dropped(self) -> Result<()> {
        release_dropped(self.guards).await
    }
}

/// Resolves once at least `lost` of `guards` report their lease lost.
pub(crate) async fn lost_count(guards: &[LockGuard], lost: usize) {
    let mut waits: Vec<Option<Pin<Box<dyn Future<Output = ()> + Send + '_>>>> = guards
        .iter()
        .map(|g| Some(Box::pin(g.lease_lost()) as Pin<Box<dyn Future<Output = ()> + Send>>))
        .collect();
    let mut done = 0;
    std::future::poll_fn(|cx| {
        for wait in waits.iter_mut() {
            if let Some(fut) = wait {
                if fut.as_mut().poll(cx).is_ready() {
                    *wait = None;
                    done += 1;
                }
            }
        }
        if done >= lost {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    })
    .await
}
