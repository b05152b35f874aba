//! The reentrant lock handle.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use redis::AsyncCommands;
use tokio::time::Instant;

use crate::args;
use crate::config::Unsynced;
use crate::config::MAX_DURATION;
use crate::error::is_connection_failure;
use crate::finish::{runtime, Finish};
use crate::guard::{release_hold, LockGuard};
use crate::scripts::{
    ACQUIRE, ACQUIRE_CANCEL, FAIR_ACQUIRE, FAIR_FORCE_UNLOCK, FAIR_LEAVE, FENCED_ACQUIRE,
    FORCE_UNLOCK, READ_ACQUIRE, UNLOCK_MESSAGE, WAKE_ALL_MESSAGE, WRITE_ACQUIRE,
};
use crate::waiting::{self, Channel, Tried};
use crate::watchdog::{renew_call, HoldKey, LeaseState};
use crate::Backoff;
use crate::{keys, Client, Error, Result};

/// How long a fair lock's queued waiter may stay silent before the others
/// skip it, by default: 300 s, as Redisson.
pub const DEFAULT_FAIR_WAITER_TIMEOUT: Duration = Duration::from_secs(300);

/// A reentrant distributed lock, from [`Client::lock`].
///
/// The handle is cheap (`Clone`, `Send + Sync`) and holds nothing by itself:
/// each successful acquire returns a [`LockGuard`], and the lock is held
/// while any guard of it is.
///
/// # Owners and reentrancy
/// Holds belong to an *owner*: by default the tokio task that calls, as
/// Redisson uses the Java thread. A task that already holds the lock
/// re-enters it at once (the hold count rises); any other task, or any other
/// [`Client`], waits. Code outside a tokio task (the body of
/// `#[tokio::main]`, which runs in `block_on`) is owned by its thread.
///
/// When the work that releases a lock is not the task that took it (a guard
/// handed to a spawned task that takes the lock again, a job that spans
/// several tasks), name the owner yourself with [`Lock::with_owner`]: every
/// handle with the same owner id on the same client shares the holds.
///
/// # Waiting
/// Waiters subscribe to the lock's channel and are woken by the unlock
/// message, not by polling; each wait is also bounded by the lock's
/// remaining TTL, so a lost message costs at most the rest of the lease.
#[derive(Clone)]
pub struct Lock {
    client: Client,
    name: Arc<str>,
    owner: Option<Arc<str>>,
    /// `Some`: a spin lock, which polls instead of subscribing.
    spin: Option<Backoff>,
    kind: Kind,
    /// Fair lock: how long a queued waiter may stay silent before the
    /// others skip it.
    waiter_timeout: Duration,
}

impl std::fmt::Debug for Lock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lock")
            .field("name", &self.name)
            .field("owner", &self.owner)
            .field("spin", &self.spin)
            .field("kind", &self.kind)
            .field("waiter_timeout", &self.waiter_timeout)
            .field("client", &self.client.inner.id)
            .finish()
    }
}

static NEXT_THREAD_OWNER: AtomicU64 = AtomicU64::new(1);

thread_local! {
    static THREAD_OWNER: u64 = NEXT_THREAD_OWNER.fetch_add(1, Ordering::Relaxed);
}

/// The owner id of the caller: its tokio task, or else its thread.
fn current_owner_id() -> String {
    match tokio::task::try_id() {
        Some(id) => format!("task-{id}"),
        None => format!("thread-{}", THREAD_OWNER.with(|n| *n)),
    }
}

/// Which lock of the family a handle is: it picks the scripts, the hash
/// field, the channel and the renewal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// Redisson's `RLock`.
    Reentrant,
    /// `RFencedLock`: `RLock` plus a token counter.
    Fenced,
    /// The read side of `RReadWriteLock`.
    Read,
    /// The write side of `RReadWriteLock`: fields end in `:write`.
    Write,
    /// `RFairLock`: `RLock` with a queue of waiters, each woken on its own
    /// channel.
    Fair,
}

impl Kind {
    /// The channel this kind's waiters listen on and its releases publish
    /// to; for the fair lock, the prefix of each waiter's own channel.
    pub(crate) fn channel(self, name: &str) -> String {
        match self {
            Kind::Reentrant | Kind::Fenced | Kind::Fair => keys::lock_channel(name),
            Kind::Read | Kind::Write => keys::rwlock_channel(name),
        }
    }
}

/// The result of one acquire attempt: a guard, or the holder's PTTL in ms.
pub(crate) type Attempt = std::result::Result<LockGuard, i64>;

impl Lock {
    pub(crate) fn new(client: Client, name: String) -> Lock {
        Lock {
            client,
            name: name.into(),
            owner: None,
            spin: None,
            kind: Kind::Reentrant,
            waiter_timeout: DEFAULT_FAIR_WAITER_TIMEOUT,
        }
    }

    /// The same fair lock, with waiters that count as dead after `timeout`
    /// of silence (default 300 s, as Redisson): a waiter whose process died
    /// blocks the queue that long at most. It only matters to a fair lock
    /// ([`Client::fair_lock`]); a bad value is reported by the first call.
    pub fn with_waiter_timeout(&self, timeout: Duration) -> Lock {
        Lock {
            waiter_timeout: timeout,
            ..self.clone()
        }
    }

    pub(crate) fn of_kind(client: Client, name: String, kind: Kind) -> Lock {
        Lock {
            kind,
            ..Lock::new(client, name)
        }
    }

    pub(crate) fn spinning(client: Client, name: String) -> Lock {
        Lock {
            spin: Some(Backoff::default()),
            ..Lock::new(client, name)
        }
    }

    /// The same lock, waiting as a spin lock: no subscription, attempts
    /// spaced by `backoff` (see [`Client::spin_lock`]).
    pub fn with_backoff(&self, backoff: Backoff) -> Lock {
        Lock {
            spin: Some(backoff),
            ..self.clone()
        }
    }

    /// The backoff of a spin-lock handle; `None` for a handle that waits for
    /// unlock messages.
    pub fn backoff(&self) -> Option<Backoff> {
        self.spin
    }

    /// The lock's name: the Redis key of its hash.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The same lock, owned by `owner` instead of the calling task.
    ///
    /// Use it when holds must be shared or released across tasks: every
    /// handle with the same owner id on the same client re-enters the other's
    /// holds. The id must be non-empty and must not end in `:write` (that
    /// suffix marks Redisson's write-lock holders); a bad id is reported by
    /// the first call.
    pub fn with_owner(&self, owner: impl Into<String>) -> Lock {
        Lock {
            owner: Some(owner.into().into()),
            ..self.clone()
        }
    }

    /// The client this handle belongs to.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The hash field of the calling owner, `<client-uuid>:<owner-id>`;
    /// checks the name and owner.
    fn field(&self) -> Result<Arc<str>> {
        args::name("lock", &self.name)?;
        let owner = match &self.owner {
            Some(owner) => {
                if owner.is_empty() {
                    return Err(Error::invalid("owner id must not be empty"));
                }
                if owner.ends_with(":write") {
                    return Err(Error::invalid(format!(
                        "owner id `{owner}` must not end in `:write`"
                    )));
                }
                owner.to_string()
            }
            None => current_owner_id(),
        };
        let suffix = if self.kind == Kind::Write {
            ":write"
        } else {
            ""
        };
        Ok(format!("{}:{owner}{suffix}", self.client.inner.id).into())
    }

    /// Waits until the lock is held, then keeps it alive with the watchdog
    /// until the guard is released.
    ///
    /// The lease is the client's watchdog timeout (default 30 s), renewed
    /// every third of it while the guard lives; if the process dies the lock
    /// frees itself at most one watchdog timeout later.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a bad name or owner,
    /// [`Error::WrongType`] when the key holds other data,
    /// [`Error::Redis`] when Redis fails.
    ///
    /// # Cancel safety
    /// Cancel safe: a dropped future leaves no hold in Redis, no registry
    /// entry and no subscription. An acquire already sent when the future is
    /// dropped is completed in the background and given back.
    ///
    /// Retry safe: an acquire whose reply is lost is sent again under the
    /// same request id, and a resend of a granted request returns the first
    /// outcome instead of taking a second hold. The tries of one wait share
    /// that request (a new one after a resend window), so a wait through an
    /// outage settles it once: when the wait ends without the lock, a hold
    /// one of its unanswered sends may have taken is given back in the
    /// background (the acquire latch, see the README's implementation
    /// notes).
    pub async fn lock(&self) -> Result<LockGuard> {
        self.acquire(None, None)
            .await?
            .ok_or_else(|| Error::no_deadline("acquire"))
    }

    /// Waits until the lock is held, for `lease` at most: no watchdog; the
    /// lock frees itself when the lease runs out, released or not.
    ///
    /// # Errors
    /// As [`Lock::lock`], and [`Error::InvalidArgument`] for a lease under
    /// 1 ms or over [`MAX_DURATION`].
    ///
    /// # Cancel safety
    /// Cancel safe, as [`Lock::lock`].
    pub async fn lock_with_lease(&self, lease: Duration) -> Result<LockGuard> {
        self.acquire(None, Some(lease))
            .await?
            .ok_or_else(|| Error::no_deadline("acquire"))
    }

    /// One attempt, watchdog mode: `Some(guard)` when the lock was free or
    /// already held by this owner, `None` when someone else holds it.
    ///
    /// # Errors
    /// As [`Lock::lock`].
    ///
    /// # Cancel safety
    /// Cancel safe, as [`Lock::lock`].
    pub async fn try_lock(&self) -> Result<Option<LockGuard>> {
        self.acquire(Some(Duration::ZERO), None).await
    }

    /// Waits at most `wait` for the lock, watchdog mode. A zero wait makes
    /// one attempt.
    ///
    /// # Errors
    /// As [`Lock::lock`], and [`Error::InvalidArgument`] for a wait over
    /// [`MAX_DURATION`].
    ///
    /// # Cancel safety
    /// Cancel safe, as [`Lock::lock`].
    pub async fn try_lock_for(&self, wait: Duration) -> Result<Option<LockGuard>> {
        self.acquire(Some(wait), None).await
    }

    /// Waits at most `wait` for the lock, held for `lease` at most.
    ///
    /// # Errors
    /// As [`Lock::lock_with_lease`] and [`Lock::try_lock_for`].
    ///
    /// # Cancel safety
    /// Cancel safe, as [`Lock::lock`].
    pub async fn try_lock_with_lease(
        &self,
        wait: Duration,
        lease: Duration,
    ) -> Result<Option<LockGuard>> {
        self.acquire(Some(wait), Some(lease)).await
    }

    /// Whether anyone holds the lock.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a bad name, [`Error::Redis`].
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads.
    pub async fn is_locked(&self) -> Result<bool> {
        self.field()?;
        let mut conn = self.client.inner.conn.clone();
        let mode = match self.kind {
            Kind::Reentrant | Kind::Fenced | Kind::Fair => {
                return conn.exists(&*self.name).await.map_err(|e| self.error(e));
            }
            Kind::Read => "read",
            Kind::Write => "write",
        };
        let held: Option<String> = conn
            .hget(&*self.name, "mode")
            .await
            .map_err(|e| self.error(e))?;
        Ok(held.as_deref() == Some(mode))
    }

    /// Whether this handle's owner (by default, the calling task) holds the
    /// lock.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`], [`Error::WrongType`], [`Error::Redis`].
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads.
    pub async fn is_held_by_current_task(&self) -> Result<bool> {
        let field = self.field()?;
        let mut conn = self.client.inner.conn.clone();
        conn.hexists(&*self.name, &*field)
            .await
            .map_err(|e| self.error(e))
    }

    /// How many holds this handle's owner has on the lock (0 when none).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`], [`Error::WrongType`], [`Error::Redis`],
    /// and [`Error::UnexpectedReply`] when the field is not a count.
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads.
    pub async fn hold_count(&self) -> Result<u32> {
        let field = self.field()?;
        let mut conn = self.client.inner.conn.clone();
        let count: Option<String> = conn
            .hget(&*self.name, &*field)
            .await
            .map_err(|e| self.error(e))?;
        match count {
            None => Ok(0),
            Some(text) => text.parse().map_err(|_| Error::UnexpectedReply {
                script: "hold count (HGET)",
                reply: text,
            }),
        }
    }

    /// How long until the lock expires: `None` when nobody holds it (or the
    /// key has no TTL, which no Redisson or ferrisson lock has).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`], [`Error::Redis`].
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads.
    pub async fn remaining_ttl(&self) -> Result<Option<Duration>> {
        self.field()?;
        let mut conn = self.client.inner.conn.clone();
        let ms: i64 = conn.pttl(&*self.name).await.map_err(|e| self.error(e))?;
        Ok((ms >= 0).then(|| Duration::from_millis(ms as u64)))
    }

    /// Deletes the lock whoever holds it and wakes a waiter. Returns whether
    /// there was a lock to delete. The holders' guards learn it at their next
    /// renewal (`lease_lost`) or release (an error).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`], [`Error::WrongType`] (the key holds other
    /// data, which is left alone), [`Error::Redis`].
    ///
    /// # Cancel safety
    /// Cancel safe: once sent, the delete completes in the background.
    pub async fn force_unlock(&self) -> Result<bool> {
        self.field()?;
        let mut conn = self.client.inner.conn.clone();
        let name = Arc::clone(&self.name);
        let kind = self.kind;
        let publish = self.client.inner.publish();
        let request = async move {
            if kind == Kind::Fair {
                return FAIR_FORCE_UNLOCK
                    .key(&*name)
                    .key(keys::fair_queue(&name))
                    .key(keys::fair_timeouts(&name))
                    .key(kind.channel(&name))
                    .arg(UNLOCK_MESSAGE)
                    .arg(publish)
                    .invoke_async::<i64>(&mut conn)
                    .await;
            }
            FORCE_UNLOCK
                .key(&*name)
                .key(kind.channel(&name))
                .arg(match kind {
                    Kind::Reentrant | Kind::Fenced | Kind::Fair => UNLOCK_MESSAGE,
                    Kind::Read | Kind::Write => WAKE_ALL_MESSAGE,
                })
                .arg(publish)
                .invoke_async::<i64>(&mut conn)
                .await
        };
        let reply = Finish::detached(runtime()?, request)
            .await
            .map_err(|e| self.error(e))?;
        match reply {
            0 => Ok(false),
            1 => Ok(true),
            other => Err(Error::UnexpectedReply {
                script: "force_unlock",
                reply: other.to_string(),
            }),
        }
    }

    /// Releases one hold of this handle's owner without a guard, as
    /// Redisson's `unlock()` does: for holds whose guard was given up with
    /// [`LockGuard::leak`]. Prefer [`LockGuard::unlock`] otherwise: a guard
    /// still alive for the released hold would release another one when it
    /// goes.
    ///
    /// # Errors
    /// [`Error::NotHeld`] when the owner holds nothing on this lock (as in
    /// Redisson, unlocking what you do not hold is an error);
    /// [`Error::InvalidArgument`], [`Error::WrongType`], [`Error::Redis`].
    ///
    /// # Cancel safety
    /// Cancel safe: once started, the release runs to its end in the
    /// background if the future is dropped.
    pub async fn unlock(&self) -> Result<()> {
        let field = self.field()?;
        let client = self.client.clone();
        let name = Arc::clone(&self.name);
        let kind = self.kind;
        let release = async move {
            let key: HoldKey = (name, field);
            let inner = &client.inner;
            let watchdog_ms = inner.config.watchdog_timeout.as_millis() as u64;
            inner.registry.release_any(&key);
            release_hold(&client, kind, &key.0, &key.1, watchdog_ms).await
        };
        Finish::detached(runtime()?, release).await
    }

    fn error(&self, err: redis::RedisError) -> Error {
        Error::from_redis(err, &self.name)
    }

    /// Acquires within `wait` (`None`: no limit), with `lease` (`None`:
    /// watchdog mode).
    async fn acquire(
        &self,
        wait: Option<Duration>,
        lease: Option<Duration>,
    ) -> Result<Option<LockGuard>> {
        let field = self.field()?;
        let lease_ms = lease
            .map(|lease| args::duration("lease", lease, MAX_DURATION))
            .transpose()?;
        let deadline = args::deadline(wait)?;
        // A fair lock's waiter joins the queue with its first attempt (one
        // attempt alone does not): whatever ends the wait other than the
        // lock takes it out again, at once.
        let queue = self.kind == Kind::Fair && wait != Some(Duration::ZERO);
        let waiter_ms = if queue {
            args::duration("waiter timeout", self.waiter_timeout, MAX_DURATION)?
        } else {
            0
        };
        let mut exit = QueueExit {
            lock: self,
            field: Arc::clone(&field),
            waiter_ms,
            armed: queue,
            wait: None,
        };
        if queue {
            // While this wait goes on, no leave of this owner's entry (one
            // of an earlier wait, still being resent or sent late) takes it
            // out: the entry is this wait's too. (Were this future dropped
            // meanwhile, `exit` leaves anew.)
            let key: HoldKey = (Arc::clone(&self.name), Arc::clone(&field));
            exit.wait = Some(FairOwners::begin_wait(&self.client, &key).await);
        }
        let result = self.wait_for(&field, lease_ms, deadline, waiter_ms).await;
        match result {
            Ok(Some(_)) => exit.armed = false,
            Ok(None) => exit.leave().await,
            // Dropping `exit` leaves the queue in the background.
            Err(_) => {}
        }
        result
    }

    /// The attempts and waits of [`Lock::acquire`] until `deadline`.
    /// `waiter_ms` > 0: a fair lock's waiter, queued by its attempts.
    async fn wait_for(
        &self,
        field: &Arc<str>,
        lease_ms: Option<u64>,
        deadline: Option<Instant>,
        waiter_ms: u64,
    ) -> Result<Option<LockGuard>> {
        // One request id for the whole wait (renewed when it grows old):
        // sends whose replies were lost are settled once, when it goes.
        let request = RequestSlot::default();
        let attempt = || async {
            Ok(
                match self
                    .attempt(&request, field, lease_ms, waiter_ms, deadline)
                    .await?
                {
                    Ok(guard) => Tried::Done(guard),
                    // The holder's TTL: the lock is free by then.
                    Err(ttl) if ttl > 0 => Tried::Again(Some(Duration::from_millis(ttl as u64))),
                    Err(0) => Tried::Again(Some(Duration::from_millis(1))),
                    // No TTL: only a release (or a periodic look) frees it.
                    Err(_) => Tried::Again(None),
                },
            )
        };
        if let Some(backoff) = self.spin {
            return waiting::spin(backoff, deadline, attempt).await;
        }
        let channel = Channel {
            name: match self.kind {
                // Each fair waiter is woken on its own channel.
                Kind::Fair => format!("{}:{field}", self.kind.channel(&self.name)),
                kind => kind.channel(&self.name),
            },
            // A release wakes one waiter.
            broadcast: false,
        };
        waiting::wait_on(&self.client, channel, deadline, attempt).await
    }

    /// One acquire attempt for `field`, under the wait's `request`;
    /// `waiter_ms` > 0 queues a fair lock's waiter with that waiter
    /// timeout. A retry-safe attempt is resent on a connection failure
    /// once, and again until `deadline`.
    async fn attempt(
        &self,
        request: &RequestSlot,
        field: &Arc<str>,
        lease_ms: Option<u64>,
        waiter_ms: u64,
        deadline: Option<Instant>,
    ) -> Result<Attempt> {
        let inner = &self.client.inner;
        let runtime = runtime()?;
        let key: HoldKey = (Arc::clone(&self.name), Arc::clone(field));
        let watchdog_ms = inner.config.watchdog_timeout.as_millis() as u64;
        // A leased hold taken inside a watchdog hold must not shorten the
        // key's TTL below what the watchdog's schedule expects.
        let ttl_ms = match lease_ms {
            None => watchdog_ms,
            Some(ms) if inner.registry.contains(&key) => ms.max(watchdog_ms),
            Some(ms) => ms,
        };

        let sent = Instant::now();
        let mut conn = inner.conn.clone();
        let (name, owner) = (Arc::clone(&key.0), Arc::clone(&key.1));
        let kind = self.kind;
        // Acquires are safe to resend: each request has an id and leaves a
        // latch, so that a resend after a lost reply returns the first
        // outcome instead of taking a second hold. The attempts of one wait
        // share their request while it is young enough (see `Request`).
        let request = request
            .get(ttl_ms, || Request {
                client: self.client.clone(),
                kind,
                name: Arc::clone(&name),
                owner: Arc::clone(&owner),
                latch: keys::acquire_latch(&name, &inner.request_id()),
                latch_ttl: Request::latch_ttl(&inner.config, ttl_ms),
                born: Instant::now(),
                outcome: std::sync::Mutex::new(Outcome::default()),
                runtime: runtime.clone(),
            })
            .await
            .map_err(|e| self.error(e))?;
        let sends = inner.config.release_attempts.max(1);
        let client = self.client.clone();
        let request = async move {
            let (latch, latch_ttl) = (&request.latch, request.latch_ttl);
            let mut sent = 0;
            loop {
                sent += 1;
                let reply = send_acquire(
                    kind, &mut conn, &name, &owner, latch, ttl_ms, latch_ttl, waiter_ms,
                )
                .await;
                if matches!(&reply, Err(err) if is_connection_failure(err)) {
                    // Perhaps it reached Redis: its outcome is unknown.
                    request.lost(ttl_ms);
                }
                // One resend always (a single lost reply must not fail a
                // `try_lock`), more until the caller's deadline.
                let resend =
                    sent < sends && (sent == 1 || deadline.is_none_or(|d| Instant::now() < d));
                match reply {
                    Err(err) if resend && is_connection_failure(&err) => {
                        tracing::debug!(lock = %name, error = %err, "acquire failed; sending it again");
                        tokio::time::sleep(Duration::from_millis(100 * sent as u64)).await;
                    }
                    // A request still unknown is settled when the wait lets
                    // it go (`Request`'s drop): once per request, not per
                    // attempt.
                    Err(err) => return Err(err),
                    Ok(Granted::Yes(token)) => {
                        request.granted(&client);
                        return Ok(Granted::Yes(token));
                    }
                    reply => return reply,
                }
            }
        };
        let client = self.client.clone();
        let (name, owner) = (Arc::clone(&key.0), Arc::clone(&key.1));
        let give_back = move |reply: redis::RedisResult<Granted>| async move {
            if waiter_ms > 0 && !matches!(reply, Ok(Granted::Yes(_))) {
                // Perhaps queued by this very attempt: leave the line
                // (unless a newer wait of the owner is in it).
                let key: HoldKey = (name.clone(), owner.clone());
                leave_queue(FairOwners::use_of(&client, &key), waiter_ms).await;
            }
            if let Ok(Granted::Yes(_)) = reply {
                // The caller left after Redis granted the hold: undo it,
                // leaving the key's TTL as this acquire set it.
                if let Err(err) = release_hold(&client, kind, &name, &owner, ttl_ms).await {
                    tracing::warn!(lock = %name, %owner, error = %err,
                        "could not give back a hold taken by a cancelled acquire; it expires with its lease");
                }
            }
        };
        let reply = Finish::new(runtime.clone(), request, give_back)
            .await
            .map_err(|e| self.error(e))?;
        match reply {
            Granted::No(ttl) => Ok(Err(ttl)),
            Granted::Unexpected(reply) => Err(Error::UnexpectedReply {
                script: "fenced_acquire",
                reply,
            }),
            Granted::Upgrade => Err(Error::UpgradeRefused {
                name: self.name.to_string(),
                owner: key.1.strip_suffix(":write").unwrap_or(&key.1).to_owned(),
            }),
            Granted::Yes(token) => {
                let mut sent = sent;
                let watchdog = inner.config.watchdog_timeout;
                if lease_ms.is_none() && Instant::now() >= sent + watchdog / 3 {
                    // The grant came back so late that its first renewal is
                    // due (or, for all this client knows, its TTL already
                    // ran out): confirm it is still held before handing out
                    // a guard, as that renewal would.
                    match self.confirm(&key).await {
                        Ok((true, confirmed)) => sent = confirmed,
                        Ok((false, _)) => return Ok(Err(0)),
                        Err(err) => {
                            // No guard goes out for this grant: give the
                            // hold back now rather than at its TTL's end.
                            self.give_back_in_background(&key, ttl_ms, &runtime);
                            return Err(err);
                        }
                    }
                }
                let lease = match lease_ms {
                    None => inner.registry.hold(key.clone(), sent, kind == Kind::Read),
                    Some(ms) => LeaseState::leased(sent + Duration::from_millis(ms)),
                };
                let guard =
                    LockGuard::new(self.client.clone(), kind, key, lease_ms, lease, runtime)
                        .with_token(token);
                if let (Some((false, acked)), Some(sync)) = (
                    inner.replicated(&self.name).await,
                    inner.config.replica_sync,
                ) {
                    // Only the master knows of this hold: give it back.
                    if let Err(err) = guard.unlock().await {
                        tracing::warn!(lock = %self.name, error = %err,
                            "could not give back a hold the replicas did not acknowledge; it expires with its lease");
                    }
                    return match sync.on_unsynced {
                        Unsynced::Retry => Ok(Err(sync.timeout.as_millis() as i64)),
                        _ => Err(Error::NotReplicated {
                            name: self.name.to_string(),
                            acked,
                            wanted: sync.replicas,
                        }),
                    };
                }
                Ok(Ok(guard))
            }
        }
    }
}

impl Lock {
    /// Releases one hold of `key` that no guard will own, in the
    /// background; `ttl_ms` is what the acquire set as the key's TTL.
    fn give_back_in_background(
        &self,
        key: &HoldKey,
        ttl_ms: u64,
        runtime: &tokio::runtime::Handle,
    ) {
        let (client, kind) = (self.client.clone(), self.kind);
        let (name, owner) = (Arc::clone(&key.0), Arc::clone(&key.1));
        runtime.spawn(async move {
            if let Err(err) = release_hold(&client, kind, &name, &owner, ttl_ms).await {
                tracing::warn!(lock = %name, %owner, error = %err,
                    "could not give back a hold whose grant could not be confirmed; it expires with its lease");
            }
        });
    }

    /// Renews `key` alone, as the watchdog would: whether its owner still
    /// holds it, and when the renewal was sent. A caller that leaves
    /// meanwhile has the hold given back in the background.
    async fn confirm(&self, key: &HoldKey) -> Result<(bool, Instant)> {
        let inner = &self.client.inner;
        let call = renew_call(
            self.kind == Kind::Read,
            inner.config.watchdog_timeout,
            std::iter::once(key),
        );
        let mut conn = inner.conn.clone();
        let sent = Instant::now();
        let request = async move { call.invoke_async::<Vec<i64>>(&mut conn).await };
        let (client, kind) = (self.client.clone(), self.kind);
        let (name, owner) = (Arc::clone(&key.0), Arc::clone(&key.1));
        let give_back = move |reply: redis::RedisResult<Vec<i64>>| async move {
            if reply.is_ok_and(|r| r == [1]) {
                let lease_ms = client.inner.config.watchdog_timeout.as_millis() as u64;
                let _ = release_hold(&client, kind, &name, &owner, lease_ms).await;
            }
        };
        let reply = Finish::new(runtime()?, request, give_back)
            .await
            .map_err(|e| self.error(e))?;
        Ok((reply == [1], sent))
    }
}

/// Takes a fair lock's waiter out of the queue when its wait ends without
/// the lock: at once with [`QueueExit::leave`], or in the background when
/// dropped armed (an error, or the caller's future dropped).
struct QueueExit<'a> {
    lock: &'a Lock,
    field: Arc<str>,
    waiter_ms: u64,
    armed: bool,
    /// The wait in progress, ended before the leave (which another wait of
    /// the same owner in progress would skip).
    wait: Option<OwnerUse>,
}

impl QueueExit<'_> {
    async fn leave(&mut self) {
        self.wait = None;
        if std::mem::take(&mut self.armed) {
            let key: HoldKey = (Arc::clone(&self.lock.name), Arc::clone(&self.field));
            let leave = FairOwners::use_of(&self.lock.client, &key);
            let send = leave_queue(leave, self.waiter_ms);
            // Runs to its end even if the caller is dropped meanwhile.
            match runtime() {
                Ok(runtime) => Finish::detached(runtime, send).await,
                Err(_) => send.await,
            }
        }
    }
}

impl Drop for QueueExit<'_> {
    fn drop(&mut self) {
        self.wait = None;
        if !self.armed {
            return;
        }
        let Ok(runtime) = runtime() else {
            // No runtime: the entry counts as dead after the waiter timeout.
            return;
        };
        let key: HoldKey = (Arc::clone(&self.lock.name), Arc::clone(&self.field));
        let leave = FairOwners::use_of(&self.lock.client, &key);
        runtime.spawn(leave_queue(leave, self.waiter_ms));
    }
}

/// The fair-lock waits of each owner in progress, by lock name and owner
/// field. An owner has one queue entry, shared by its waits: a leave (at
/// the end of a wait, resent after a failed connection, or sent by an
/// abandoned attempt once its reply is in) is sent only while none of that
/// owner's waits is in progress, so a late leave cannot take out the entry
/// of a newer wait. An entry lives while it is used ([`OwnerUse`]).
#[derive(Default)]
pub(crate) struct FairOwners(dashmap::DashMap<HoldKey, Arc<FairOwner>>);

pub(crate) struct FairOwner {
    /// The owner's waits in progress.
    waits: std::sync::atomic::AtomicUsize,
    /// Held across each leave's send: a wait that begins waits for the
    /// send in flight, and the sends after it see the wait.
    sending: tokio::sync::Mutex<()>,
}

/// One use of an owner's entry: a wait in progress (`wait`), or a leave
/// still to be sent. The last use removes the entry.
struct OwnerUse {
    client: Client,
    key: HoldKey,
    owner: Arc<FairOwner>,
    wait: bool,
}

impl FairOwners {
    fn use_of(client: &Client, key: &HoldKey) -> OwnerUse {
        let owner = client
            .inner
            .fair_owners
            .0
            .entry(key.clone())
            .or_insert_with(|| {
                Arc::new(FairOwner {
                    waits: std::sync::atomic::AtomicUsize::new(0),
                    sending: tokio::sync::Mutex::new(()),
                })
            })
            .clone();
        OwnerUse {
            client: client.clone(),
            key: key.clone(),
            owner,
            wait: false,
        }
    }

    /// Begins a wait of `key`'s owner, once a leave's send in flight is
    /// over. Cancel safe: dropped, the wait is over.
    async fn begin_wait(client: &Client, key: &HoldKey) -> OwnerUse {
        let mut wait = FairOwners::use_of(client, key);
        wait.owner.waits.fetch_add(1, Ordering::AcqRel);
        wait.wait = true;
        drop(wait.owner.sending.lock().await);
        wait
    }
}

impl Drop for OwnerUse {
    fn drop(&mut self) {
        if self.wait {
            self.owner.waits.fetch_sub(1, Ordering::AcqRel);
        }
        // Every other use clones the entry through the map, under the
        // shard's lock: a count of two (the map's and this one) is final.
        self.client
            .inner
            .fair_owners
            .0
            .remove_if(&self.key, |_, owner| {
                Arc::ptr_eq(owner, &self.owner) && Arc::strong_count(owner) == 2
            });
    }
}

impl std::fmt::Debug for FairOwners {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FairOwners")
            .field("owners", &self.0.len())
            .finish()
    }
}

impl OwnerUse {
    /// Sends a leave unless a wait of the owner is in progress: `None`
    /// then (that wait leaves when it ends).
    async fn send_leave(&self, waiter_ms: u64) -> Option<redis::RedisResult<()>> {
        let _sending = self.owner.sending.lock().await;
        if self.owner.waits.load(Ordering::Acquire) > 0 {
            return None;
        }
        Some(send_leave(&self.client, &self.key.0, &self.key.1, waiter_ms).await)
    }
}

/// Removes the owner of `leave` from the fair lock's queue, unless one of
/// its waits is in progress. A send that meets a failed connection is
/// resent in the background until it gets through (for up to the waiter
/// timeout); other failures are logged (the entry then counts as dead
/// after the waiter timeout).
async fn leave_queue(leave: OwnerUse, waiter_ms: u64) {
    let (name, owner) = (Arc::clone(&leave.key.0), Arc::clone(&leave.key.1));
    let failed = match leave.send_leave(waiter_ms).await {
        None | Some(Ok(())) => return,
        Some(Err(err)) if is_connection_failure(&err) => err,
        Some(Err(err)) => {
            tracing::warn!(lock = %name, %owner, error = %err,
                "could not leave the fair lock's queue; the entry is skipped after the waiter timeout");
            return;
        }
    };
    // Leaving is idempotent (a second leave finds nobody to remove): resend
    // it in the background until it gets through, for as long as the entry
    // would hold the line up (the waiter timeout), so that the waiters
    // behind it do not wait for the timeout.
    tracing::debug!(lock = %name, %owner, error = %failed,
        "leaving the fair lock's queue failed; sending it again in the background");
    let Ok(runtime) = runtime() else {
        return;
    };
    runtime.spawn(async move {
        let give_up = Instant::now() + Duration::from_millis(waiter_ms);
        let mut pause = Duration::from_millis(50);
        loop {
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_secs(1));
            match leave.send_leave(waiter_ms).await {
                None | Some(Ok(())) => return,
                Some(Err(err)) if is_connection_failure(&err) && Instant::now() < give_up => {
                    tracing::debug!(lock = %name, error = %err, "leaving the fair lock's queue failed again");
                }
                Some(Err(err)) => {
                    tracing::warn!(lock = %name, %owner, error = %err,
                        "could not leave the fair lock's queue; the entry is skipped after the waiter timeout");
                    return;
                }
            }
        }
    });
}

/// One send of the fair lock's leave script.
async fn send_leave(
    client: &Client,
    name: &str,
    field: &str,
    waiter_ms: u64,
) -> redis::RedisResult<()> {
    let mut conn = client.inner.conn.clone();
    FAIR_LEAVE
        .key(keys::fair_queue(name))
        .key(keys::fair_timeouts(name))
        .key(name)
        .key(keys::lock_channel(name))
        .arg(field)
        .arg(waiter_ms)
        .arg(UNLOCK_MESSAGE)
        .arg(client.inner.publish())
        .invoke_async::<i64>(&mut conn)
        .await
        .map(drop)
}

/// Sends one acquire of `kind`'s script; `latch` makes resends of the same
/// request safe.
#[allow(clippy::too_many_arguments)]
async fn send_acquire(
    kind: Kind,
    conn: &mut crate::client::conn::Conn,
    name: &str,
    owner: &str,
    latch: &str,
    ttl_ms: u64,
    latch_ttl: u64,
    waiter_ms: u64,
) -> redis::RedisResult<Granted> {
    let pttl = |reply: Option<i64>| reply.map_or(Granted::Yes(None), Granted::No);
    Ok(match kind {
        Kind::Reentrant => pttl(
            ACQUIRE
                .key(name)
                .key(latch)
                .arg(ttl_ms)
                .arg(owner)
                .arg(latch_ttl)
                .invoke_async(conn)
                .await?,
        ),
        Kind::Fenced => {
            let reply: Vec<i64> = FENCED_ACQUIRE
                .key(name)
                .key(keys::fencing_token(name))
                .key(latch)
                .arg(ttl_ms)
                .arg(owner)
                .arg(latch_ttl)
                .invoke_async(conn)
                .await?;
            match reply.as_slice() {
                [1, token] if *token > 0 => Granted::Yes(Some(*token as u64)),
                [0, ttl] => Granted::No(*ttl),
                other => Granted::Unexpected(format!("{other:?}")),
            }
        }
        Kind::Fair => pttl(
            FAIR_ACQUIRE
                .key(name)
                .key(keys::fair_queue(name))
                .key(keys::fair_timeouts(name))
                .key(latch)
                .arg(ttl_ms)
                .arg(owner)
                .arg(waiter_ms)
                .arg(if waiter_ms > 0 { "1" } else { "0" })
                .arg(latch_ttl)
                .invoke_async(conn)
                .await?,
        ),
        Kind::Read => pttl(
            READ_ACQUIRE
                .key(name)
                .key(keys::rwlock_timeout_prefix(name, owner))
                .key(latch)
                .arg(ttl_ms)
                .arg(owner)
                .arg(format!("{owner}:write"))
                .arg(latch_ttl)
                .invoke_async(conn)
                .await?,
        ),
        Kind::Write => {
            let reply: Option<i64> = WRITE_ACQUIRE
                .key(name)
                .key(latch)
                .arg(ttl_ms)
                .arg(owner)
                .arg(owner.strip_suffix(":write").unwrap_or(owner))
                .arg(latch_ttl)
                .invoke_async(conn)
                .await?;
            match reply {
                Some(UPGRADE) => Granted::Upgrade,
                other => pttl(other),
            }
        }
    })
}

/// Settles an acquire request some send of which got no reply and none of
/// which was granted: marks it cancelled so that a late arrival changes
/// nothing, or, when a lost send was granted, gives the hold back. Tries
/// for as long as the latch lives.
async fn settle_lost_acquire(
    client: Client,
    kind: Kind,
    name: Arc<str>,
    owner: Arc<str>,
    latch: String,
    lease_ms: u64,
    latch_ttl: u64,
) {
    let give_back = {
        let client = client.clone();
        let name = Arc::clone(&name);
        move || async move {
            tracing::debug!(lock = %name, %owner, "an acquire whose reply was lost took a hold; giving it back");
            if let Err(err) = release_hold(&client, kind, &name, &owner, lease_ms).await {
                tracing::warn!(lock = %name, %owner, error = %err,
                    "could not give back a hold taken by an acquire whose reply was lost; it expires with its lease");
            }
        }
    };
    settle_lost(client, &name, latch, latch_ttl, give_back).await;
}

/// Settles a request whose replies were all lost, by its acquire latch:
/// marks it cancelled so that a late arrival changes nothing, or, when it
/// was granted, runs `give_back`. Tries for as long as the latch lives.
/// Shared by the locks and the semaphores.
pub(crate) async fn settle_lost<F, Fut>(
    client: Client,
    name: &str,
    latch: String,
    latch_ttl: u64,
    give_back: F,
) where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let deadline = Instant::now() + Duration::from_millis(latch_ttl);
    let mut conn = client.inner.conn.clone();
    let mut pause = Duration::from_millis(100);
    while Instant::now() < deadline {
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_secs(1));
        let settled: redis::RedisResult<i64> = ACQUIRE_CANCEL
            .key(&latch)
            .arg(latch_ttl)
            .invoke_async(&mut conn)
            .await;
        match settled {
            Ok(0) => return,
            Ok(_) => {
                give_back().await;
                client.inner.sweeper.discard(latch);
                return;
            }
            Err(err) if is_connection_failure(&err) => {}
            Err(err) => {
                tracing::warn!(%name, error = %err, "could not settle a request whose reply was lost");
                return;
            }
        }
    }
    tracing::warn!(%name,
        "could not learn whether a request whose reply was lost took a hold or permits; \
         a hold expires with its lease");
}

/// The acquire request of one wait, shared by its attempts: every send of
/// it carries its id, whose latch makes it count once however many sends
/// reach Redis. A send whose reply is lost leaves the outcome unknown until
/// a later send of the same request answers; a request that is never
/// granted while its outcome is unknown is settled once, when its last user
/// lets it go (the wait, or an attempt finishing in the background).
struct Request {
    client: Client,
    kind: Kind,
    name: Arc<str>,
    owner: Arc<str>,
    latch: String,
    latch_ttl: u64,
    born: Instant,
    outcome: std::sync::Mutex<Outcome>,
    runtime: tokio::runtime::Handle,
}

#[derive(Default)]
struct Outcome {
    /// Some send got no reply; the TTL it set, should it have been granted.
    lost: Option<u64>,
    /// A send was granted: the request is spent.
    granted: bool,
}

impl Request {
    /// The latch lives as long as any send of the request may reach Redis
    /// or be settled, and at least as long as the hold it records (were it
    /// shorter, a send that arrives after it would count a granted re-entry
    /// twice). A request is reused for one resend window after its birth,
    /// and each attempt's sends fit in one more window; hence the sum.
    fn latch_ttl(config: &crate::config::Config, ttl_ms: u64) -> u64 {
        let window = config.unlock_latch_ttl_ms();
        ttl_ms.max(window).saturating_add(window)
    }

    /// Whether a new attempt setting `ttl_ms` may send this request again:
    /// not granted yet, within one resend window of its birth, and, after
    /// a lost send, within that send's TTL (while a hold it may have taken
    /// still stands, a resend's "granted" means that hold).
    fn reusable(&self, ttl_ms: u64) -> bool {
        let config = &self.client.inner.config;
        let outcome = self.outcome.lock().unwrap_or_else(|p| p.into_inner());
        let limit = config
            .unlock_latch_ttl_ms()
            .min(outcome.lost.unwrap_or(u64::MAX));
        !outcome.granted
            && self.born.elapsed() < Duration::from_millis(limit)
            && self.latch_ttl >= Request::latch_ttl(config, ttl_ms)
    }

    fn lost(&self, ttl_ms: u64) {
        if let Ok(mut outcome) = self.outcome.lock() {
            // The longest TTL a lost send set: the one a settle restores.
            outcome.lost = Some(outcome.lost.map_or(ttl_ms, |t| t.max(ttl_ms)));
        }
    }

    /// Whether the request must be settled: a send of it got no reply and
    /// none was granted.
    fn unsettled(&self) -> bool {
        let outcome = self.outcome.lock().unwrap_or_else(|p| p.into_inner());
        !outcome.granted && outcome.lost.is_some()
    }

    /// Settles the request now, once: marks it cancelled, or gives back
    /// the hold a lost send took. A connection failure leaves it
    /// unsettled (its drop, or the next call, tries again).
    async fn settle_now(&self) -> redis::RedisResult<()> {
        let mut conn = self.client.inner.conn.clone();
        let granted: i64 = ACQUIRE_CANCEL
            .key(&self.latch)
            .arg(self.latch_ttl)
            .invoke_async(&mut conn)
            .await?;
        let ttl_ms = {
            let mut outcome = self.outcome.lock().unwrap_or_else(|p| p.into_inner());
            outcome.lost.take()
        };
        if let (1, Some(ttl_ms)) = (granted, ttl_ms) {
            let (name, owner) = (&self.name, &self.owner);
            tracing::debug!(lock = %name, %owner, "an acquire whose reply was lost took a hold; giving it back");
            if let Err(err) = release_hold(&self.client, self.kind, name, owner, ttl_ms).await {
                tracing::warn!(lock = %name, %owner, error = %err,
                    "could not give back a hold taken by an acquire whose reply was lost; it expires with its lease");
            }
            self.client.inner.sweeper.discard(self.latch.clone());
        }
        Ok(())
    }

    /// A send was granted. Its latch then only matters to sends whose
    /// replies were lost: none, and it is deleted; some, and it is marked
    /// cancelled, so that such a send, arriving after the hold is gone,
    /// changes nothing instead of taking a hold nobody owns.
    fn granted(&self, client: &Client) {
        let lost = match self.outcome.lock() {
            Ok(mut outcome) => {
                outcome.granted = true;
                outcome.lost.is_some()
            }
            Err(_) => true,
        };
        if !lost {
            client.inner.sweeper.discard(self.latch.clone());
            return;
        }
        let mut conn = client.inner.conn.clone();
        let (latch, latch_ttl) = (self.latch.clone(), self.latch_ttl);
        let name = Arc::clone(&self.name);
        self.runtime.spawn(async move {
            let cancelled: redis::RedisResult<()> = redis::cmd("SET")
                .arg(&latch)
                .arg("x")
                .arg("PX")
                .arg(latch_ttl)
                .query_async(&mut conn)
                .await;
            if let Err(err) = cancelled {
                tracing::warn!(lock = %name, error = %err,
                    "could not close a granted request that had a lost send; it closes with its latch's TTL");
            }
        });
    }
}

impl Drop for Request {
    fn drop(&mut self) {
        let outcome = std::mem::take(self.outcome.get_mut().unwrap_or_else(|p| p.into_inner()));
        let (false, Some(ttl_ms)) = (outcome.granted, outcome.lost) else {
            return;
        };
        // Nobody sends it any more (a send that timed out may still wait
        // in Redis: the settle comes later on the same connection): settle
        // whether one took a hold, and give it back. The release resets the key's TTL to what
        // that send set (a leased re-entry inside a watchdog hold keeps the
        // watchdog's TTL).
        self.runtime.spawn(settle_lost_acquire(
            self.client.clone(),
            self.kind,
            Arc::clone(&self.name),
            Arc::clone(&self.owner),
            std::mem::take(&mut self.latch),
            ttl_ms,
            self.latch_ttl,
        ));
    }
}

/// The request the attempts of one wait send, replaced when it is spent or
/// too old to send again.
#[derive(Default)]
struct RequestSlot(std::sync::Mutex<Option<Arc<Request>>>);

impl RequestSlot {
    /// The request to send next: the current one while reusable, else a
    /// new one. An unsettled old request is settled first, so that a hold
    /// it took is never given back after the new request took one (the
    /// give-back would take the new hold's count). Cancel safe: an old
    /// request dropped mid-settle settles in the background.
    async fn get(
        &self,
        ttl_ms: u64,
        new: impl FnOnce() -> Request,
    ) -> redis::RedisResult<Arc<Request>> {
        let old = {
            let mut slot = self.0.lock().unwrap_or_else(|p| p.into_inner());
            match slot.as_ref() {
                Some(request) if request.reusable(ttl_ms) => return Ok(Arc::clone(request)),
                _ => slot.take(),
            }
        };
        if let Some(old) = old.filter(|old| old.unsettled()) {
            if let Err(err) = old.settle_now().await {
                // Tried again by the next attempt (or by its drop).
                *self.0.lock().unwrap_or_else(|p| p.into_inner()) = Some(old);
                return Err(err);
            }
        }
        let request = Arc::new(new());
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = Some(Arc::clone(&request));
        Ok(request)
    }
}

/// What one acquire script call replied.
enum Granted {
    /// Held now, with the fencing token of a fenced lock.
    Yes(Option<u64>),
    /// Held by someone else, for this PTTL (ms; -1 without a TTL).
    No(i64),
    /// A reply the script never gives.
    Unexpected(String),
    /// The owner reads and asked to write: it would wait for itself.
    Upgrade,
}

/// What the write acquire script replies to a refused upgrade.
const UPGRADE: i64 = -3;
