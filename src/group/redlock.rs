//! RedLock: one lock over N independent Redis masters, held by a majority.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use tokio::time::Instant;

use crate::args;
use crate::engine::waiting::{self, pause_before_retry};
use crate::group::multilock::{lost_count, unlock_all};
use crate::{Backoff, DistributedLock, Error, LockGuard, Result};

/// The RedLock algorithm over locks on N independent Redis masters
/// (Redisson's `RedissonRedLock`): the lock is held when a majority of them,
/// `N/2 + 1`, was taken within the validity time.
///
/// Each round tries every lock at once, each with one attempt (bounded by
/// a tenth of the lease, at least 10 ms and at most 1 s, so a server that
/// does not answer cannot hold the round up; and cut short once a majority
/// answered yes, after a grace as long again). The round wins when a
/// majority was taken and time is left of the lease once the round's
/// elapsed time and a clock-drift allowance (1% of the lease plus 2 ms)
/// are taken off. Otherwise the round waits for every attempt still in
/// flight (each within its bound), releases every lock taken, all at once,
/// and, while the wait allows, a new round starts after a pause with
/// jitter. In watchdog mode the lease is the smallest watchdog timeout of
/// the locks' clients, and each client's watchdog renews its own lock.
///
/// So an acquire that returns without a guard (`None` or an error) holds
/// nothing on any server that answered: its holds were released before it
/// returned. Only an attempt that had not answered within its bound (a
/// silent or partitioned server) is given back in the background, as a
/// dropped lock acquire is (resent until it gets through, or until its
/// lease has run out), and so is a release that a server did not
/// answer by the end of the wait plus its margin.
///
/// With a wait, the rounds after the first are cut to the end of the wait
/// plus a small margin (as [`Lock::try_lock_for`](crate::Lock::try_lock_for)):
/// the acquire returns by then, or by the end of its first round when that
/// is later (one round, each attempt within its bound, always runs).
///
/// # What it guarantees, and what it does not
/// Redisson deprecated its `RedLock`, and the critique it answered
/// (Martin Kleppmann's "How to do distributed locking", 2016) still holds.
/// RedLock keeps one holder at a time only while
///
/// - the servers' clocks run at about the same rate as the holder's (a
///   server whose clock jumps forward expires the key early),
/// - no process pauses (GC, swap, a stopped VM) longer than the validity
///   left, and
/// - a server that restarts does so without the keys it lost, and stays
///   down for at least a lease (or persists every write with
///   `appendfsync always`); otherwise it can grant the lock again to a
///   second holder while the first still counts it in its majority.
///
/// None of those is checked, and a lock that is safe only on assumptions
/// about time cannot stop a holder that wakes up late from writing. For
/// correctness (not just efficiency), use one
/// [`fenced lock`](crate::Client::fenced_lock) and have the resource
/// refuse stale tokens: a RedLock has no single counter to draw tokens
/// from. What RedLock does give: the lock survives the loss of a minority
/// of servers, with no replication between them.
///
/// ```no_run
/// # async fn run(clients: Vec<ferrisson::Client>) -> ferrisson::Result<()> {
/// use std::time::Duration;
/// use ferrisson::{DistributedLock, RedLock};
/// // One client per independent master (five, say).
/// let lock = RedLock::new(
///     clients
///         .iter()
///         .map(|c| Box::new(c.lock("report:daily")) as Box<dyn DistributedLock>)
///         .collect(),
/// );
/// if let Some(guard) = lock.try_lock_with_lease(Duration::from_secs(1), Duration::from_secs(30)).await? {
///     println!("held on {} of 5, valid for {:?}", guard.held(), guard.validity());
///     guard.unlock().await?;
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct RedLock {
    locks: Vec<Arc<dyn DistributedLock>>,
    backoff: Backoff,
}

impl RedLock {
    /// A RedLock over `locks`, one per independent Redis master (locks on
    /// one server, or on a master and its replica, defeat the point).
    pub fn new(locks: Vec<Box<dyn DistributedLock>>) -> RedLock {
        RedLock {
            locks: locks.into_iter().map(Arc::from).collect(),
            backoff: Backoff::default(),
        }
    }

    /// How many locks make a majority: `N/2 + 1`.
    pub fn quorum(&self) -> usize {
        self.locks.len() / 2 + 1
    }

    /// Waits until a majority is held, in watchdog mode.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a RedLock without locks, or an error
    /// of a lock that is not about reaching its server (a bad name, a key
    /// of another type): those fail the call, after releasing what was
    /// taken, when they arrive before the round ends (a round with a
    /// majority ends after a grace; a later reply is not waited for). A
    /// server that cannot be reached only counts against the majority.
    ///
    /// # Cancel safety
    /// Cancel safe: a dropped future leaves no hold behind (each lock's
    /// acquire is cancel safe, and holds taken are released on drop).
    pub async fn lock(&self) -> Result<RedLockGuard> {
        self.acquire(None, None)
            .await?
            .ok_or_else(|| Error::no_deadline("RedLock"))
    }

    /// Waits until a majority is held, each lock for `lease`.
    ///
    /// # Errors
    /// As [`RedLock::lock`], and [`Error::InvalidArgument`] for a bad lease.
    ///
    /// # Cancel safety
    /// As [`RedLock::lock`].
    pub async fn lock_with_lease(&self, lease: Duration) -> Result<RedLockGuard> {
        self.acquire(None, Some(lease))
            .await?
            .ok_or_else(|| Error::no_deadline("RedLock"))
    }

    /// One round, watchdog mode.
    ///
    /// # Errors
    /// As [`RedLock::lock`].
    ///
    /// # Cancel safety
    /// As [`RedLock::lock`].
    pub async fn try_lock(&self) -> Result<Option<RedLockGuard>> {
        self.acquire(Some(Duration::ZERO), None).await
    }

    /// Rounds until a majority is held or `wait` has passed, watchdog mode.
    ///
    /// # Errors
    /// As [`RedLock::lock`], and [`Error::InvalidArgument`] for a wait over
    /// a year.
    ///
    /// # Cancel safety
    /// As [`RedLock::lock`].
    pub async fn try_lock_for(&self, wait: Duration) -> Result<Option<RedLockGuard>> {
        self.acquire(Some(wait), None).await
    }

    /// Rounds until a majority is held or `wait` has passed, each lock for
    /// `lease`.
    ///
    /// # Errors
    /// As [`RedLock::try_lock_for`], and [`Error::InvalidArgument`] for a
    /// bad lease.
    ///
    /// # Cancel safety
    /// As [`RedLock::lock`].
    pub async fn try_lock_with_lease(
        &self,
        wait: Duration,
        lease: Duration,
    ) -> Result<Option<RedLockGuard>> {
        self.acquire(Some(wait), Some(lease)).await
    }

    async fn acquire(
        &self,
        wait: Option<Duration>,
        lease: Option<Duration>,
    ) -> Result<Option<RedLockGuard>> {
        if self.locks.is_empty() {
            return Err(Error::invalid("a RedLock needs at least one lock"));
        }
        let deadline = args::deadline(wait)?;
        // With a wait, the rounds after the first, and every round's
        // releases, end by its end plus a margin (releases still running
        // then go on in the background).
        let bound = deadline
            .filter(|_| wait.is_some_and(|w| !w.is_zero()))
            .map(|d| d + waiting::margin(wait.unwrap_or_default()));
        let mut round = 0u32;
        loop {
            let ends = bound.filter(|_| round > 0);
            if let Some(guard) = self.round(lease, ends, bound).await? {
                return Ok(Some(guard));
            }
            if !pause_before_retry(&self.backoff, &mut round, deadline).await {
                return Ok(None);
            }
        }
    }

    /// One attempt at every lock at once, each within its bound, cut to
    /// `ends`; the releases of a round that did not win are waited for
    /// until `bound` at most.
    async fn round(
        &self,
        lease: Option<Duration>,
        ends: Option<Instant>,
        bound: Option<Instant>,
    ) -> Result<Option<RedLockGuard>> {
        let ttl = match lease {
            Some(lease) => lease,
            None => self
                .locks
                .iter()
                .map(|lock| lock.watchdog_timeout())
                .min()
                .unwrap_or_default(),
        };
        let per_attempt = (ttl / 10).clamp(Duration::from_millis(10), Duration::from_secs(1));
        let start = Instant::now();
        let per_attempt = match ends {
            Some(ends) => per_attempt.min(ends.saturating_duration_since(start)),
            None => per_attempt,
        };
        let attempts = self
            .locks
            .iter()
            .map(|lock| {
                Box::pin(async move {
                    let attempt = async {
                        match lease {
                            None => lock.try_lock().await,
                            Some(lease) => lock.try_lock_with_lease(Duration::ZERO, lease).await,
                        }
                    };
                    // A dropped attempt is cancel safe: nothing is left held.
                    match tokio::time::timeout(per_attempt, attempt).await {
                        Ok(Ok(Some(guard))) => ServerReply::Held(guard),
                        Ok(Ok(None)) => ServerReply::Busy,
                        Ok(Err(err)) => ServerReply::Failed(err),
                        Err(_) => ServerReply::Silent,
                    }
                }) as Pin<Box<dyn Future<Output = ServerReply> + Send + '_>>
            })
            .collect();
        let replies = gather(attempts, self.quorum()).await;
        let mut guards = Vec::new();
        let mut failure = None;
        for (lock, reply) in self.locks.iter().zip(replies) {
            match reply.unwrap_or(ServerReply::Silent) {
                ServerReply::Held(guard) => guards.push(guard),
                ServerReply::Busy => {}
                ServerReply::Failed(err) if err.may_wait_out() => {
                    tracing::debug!(lock = %lock.name(), error = %err, "RedLock: a server failed");
                }
                ServerReply::Failed(err) => {
                    failure.get_or_insert(err);
                }
                ServerReply::Silent => {
                    tracing::debug!(lock = %lock.name(), "RedLock: a server did not answer in time");
                }
            }
        }
        let drift = ttl / 100 + Duration::from_millis(2);
        let valid_until = start + ttl.saturating_sub(drift);
        if let Some(err) = failure {
            release_all(guards, bound).await;
            return Err(err);
        }
        if guards.len() >= self.quorum() && Instant::now() < valid_until {
            return Ok(Some(RedLockGuard {
                guards,
                quorum: self.quorum(),
                valid_until: lease.map(|_| valid_until),
            }));
        }
        release_all(guards, bound).await;
        Ok(None)
    }
}

/// What one server's lock gave in a round.
enum ServerReply {
    /// Taken: a guard.
    Held(LockGuard),
    /// Held by someone else.
    Busy,
    /// The attempt failed.
    Failed(Error),
    /// No answer within the round's bound per server (or dropped once a
    /// majority was in).
    Silent,
}

/// Polls every attempt in the caller's task (so each lock's default owner
/// is the caller, as when it calls the lock itself) until all are done,
/// each within its own bound. One shortcut: once a majority was taken, the
/// others have a grace as long again as that took (plus 5 ms), and the
/// attempts still running then are dropped (which leaves nothing held: a
/// dropped acquire gives back in the background) and come back as `None`.
/// A round without a majority waits for every attempt, so that what they
/// took is released before the round returns.
async fn gather<'a>(
    mut attempts: Vec<Pin<Box<dyn Future<Output = ServerReply> + Send + 'a>>>,
    quorum: usize,
) -> Vec<Option<ServerReply>> {
    let n = attempts.len();
    let start = Instant::now();
    let mut outputs: Vec<Option<ServerReply>> = (0..n).map(|_| None).collect();
    let mut grace: Option<Pin<Box<tokio::time::Sleep>>> = None;
    std::future::poll_fn(|cx| {
        for (attempt, out) in attempts.iter_mut().zip(outputs.iter_mut()) {
            if out.is_none() {
                if let Poll::Ready(reply) = attempt.as_mut().poll(cx) {
                    *out = Some(reply);
                }
            }
        }
        let done = outputs.iter().filter(|out| out.is_some()).count();
        let won = outputs
            .iter()
            .filter(|out| matches!(out, Some(ServerReply::Held(_))))
            .count();
        if done == n {
            return Poll::Ready(());
        }
        if won >= quorum {
            let grace = grace.get_or_insert_with(|| {
                Box::pin(tokio::time::sleep(
                    start.elapsed() + Duration::from_millis(5),
                ))
            });
            if grace.as_mut().poll(cx).is_ready() {
                return Poll::Ready(());
            }
        }
        Poll::Pending
    })
    .await;
    drop(attempts);
    outputs
}

/// Releases every guard at once (a silent server holds up only its own
/// release), logging failures: each of those holds expires with its lease.
/// Past `by`, the releases still running go on in the background.
async fn release_all(guards: Vec<LockGuard>, by: Option<Instant>) {
    let _ = waiting::until(by, unlock_all(guards)).await;
}

/// A RedLock held on a majority of its servers, from [`RedLock`]'s acquire.
/// Released on every server by [`RedLockGuard::unlock`], or on drop (in
/// the background, as [`LockGuard`]).
#[must_use = "the lock is released as soon as the guard is dropped"]
#[clippy::has_significant_drop]
#[derive(Debug)]
pub struct RedLockGuard {
    guards: Vec<LockGuard>,
    quorum: usize,
    /// With a lease: when the validity ends by this process's clock.
    valid_until: Option<Instant>,
}

impl RedLockGuard {
    /// On how many servers the lock was taken (at least the quorum).
    pub fn held(&self) -> usize {
        self.guards.len()
    }

    /// With a lease, how much of the validity time is left: the lease from
    /// the start of the winning round, less the drift allowance. `None` in
    /// watchdog mode, where the watchdogs renew it.
    pub fn validity(&self) -> Option<Duration> {
        self.valid_until
            .map(|at| at.saturating_duration_since(Instant::now()))
    }

    /// Whether the lock is known to be no longer held: the validity time
    /// ran out, or fewer than a majority of the holds are still held.
    pub fn is_lease_lost(&self) -> bool {
        let lost = self.guards.iter().filter(|g| g.is_lease_lost()).count();
        self.guards.len() - lost < self.quorum
            || self.valid_until.is_some_and(|at| Instant::now() >= at)
    }

    /// Resolves when the lock is known to be no longer held (see
    /// [`RedLockGuard::is_lease_lost`]).
    ///
    /// # Cancel safety
    /// Cancel safe: it only waits.
    pub async fn lease_lost(&self) {
        let minority_left = lost_count(&self.guards, self.guards.len() + 1 - self.quorum);
        match self.valid_until {
            Some(at) => {
                tokio::select! {
                    _ = minority_left => {}
                    _ = tokio::time::sleep_until(at) => {}
                }
            }
            None => minority_left.await,
        }
    }

    /// Releases the lock on every server it was taken on, all at once: a
    /// server that does not answer holds up no other release.
    ///
    /// # Errors
    /// The first error, when fewer than a majority of the releases
    /// succeeded; the holds not released expire with their lease. (A
    /// server that died holding it counts against the majority but is not
    /// an error by itself.)
    ///
    /// # Cancel safety
    /// Cancel safe: the releases are sent at once, and each, once started,
    /// completes in the background.
    pub async fn unlock(self) -> Result<()> {
        let mut released = 0;
        let mut first = None;
        for outcome in unlock_all(self.guards).await {
            match outcome {
                Ok(()) => released += 1,
                Err(err) => {
                    first.get_or_insert(err);
                }
            }
        }
        match first {
            Some(err) if released < self.quorum => Err(err),
            _ => Ok(()),
        }
    }

    /// Releases every hold as their drops do: the blocking API's drop.
    #[cfg(feature = "blocking")]
    pub(crate) async fn release_dropped(self) -> Result<()> {
        crate::group::multilock::release_dropped(self.guards).await
    }
}
