//! Acquiring a lock: acquire -> wait_for -> attempt, and the request each
//! wait sends under one id.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::queue::{leave_queue, FairOwners, QueueExit};
use super::{release_hold, LockGuard};
use super::{Attempt, Kind, LockCore};
use crate::acquire_latch::settle_lost;
use crate::args;
use crate::config::Unsynced;
use crate::config::MAX_DURATION;
use crate::error::is_connection_failure;
use crate::finish::{runtime, Finish};
use crate::scripts::{
    ACQUIRE, ACQUIRE_CANCEL, FAIR_ACQUIRE, FENCED_ACQUIRE, READ_ACQUIRE, WRITE_ACQUIRE,
};
use crate::waiting::{self, Channel, Tried};
use crate::watchdog::{renew_call, HoldKey, LeaseState};
use crate::{keys, Client, Error, Result};

impl LockCore {
    /// Acquires within `wait` (`None`: no limit), with `lease` (`None`:
    /// watchdog mode).
    pub(super) async fn acquire(
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
        let waiter_timeout = self.kind.waiter_timeout();
        let queue = waiter_timeout.is_some() && wait != Some(Duration::ZERO);
        let waiter_ms = match waiter_timeout {
            Some(timeout) if queue => args::duration("waiter timeout", timeout, MAX_DURATION)?,
            _ => 0,
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

    /// The attempts and waits of [`LockCore::acquire`] until `deadline`.
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
        let slot = RequestSlot::default();
        let req = AcquireRequest {
            key: (Arc::clone(&self.name), Arc::clone(field)),
            lease_ms,
            waiter_ms,
            deadline,
            slot: &slot,
        };
        let attempt = || async {
            Ok(match self.attempt(&req).await? {
                Ok(guard) => Tried::Done(guard),
                // The holder's TTL: the lock is free by then.
                Err(ttl) if ttl > 0 => Tried::Again(Some(Duration::from_millis(ttl as u64))),
                Err(0) => Tried::Again(Some(Duration::from_millis(1))),
                // No TTL: only a release (or a periodic look) frees it.
                Err(_) => Tried::Again(None),
            })
        };
        if let Some(backoff) = self.kind.backoff() {
            return waiting::spin(backoff, deadline, attempt).await;
        }
        let channel = Channel {
            name: match self.kind {
                // Each fair waiter is woken on its own channel.
                Kind::Fair { .. } => format!("{}:{field}", self.kind.channel(&self.name)),
                kind => kind.channel(&self.name),
            },
            // A release wakes one waiter.
            broadcast: false,
        };
        waiting::wait_on(&self.client, channel, deadline, attempt).await
    }

    /// One acquire attempt: send the wait's request (resent on a lost
    /// reply), confirm a grant that came back late, make the guard, and
    /// check the replicas. `Err(ttl)` when someone else holds the lock.
    async fn attempt(&self, req: &AcquireRequest<'_>) -> Result<Attempt> {
        let runtime = runtime()?;
        let ttl_ms = self.hold_ttl(req);
        let sent = Instant::now();
        let token = match self.send_latched(req, ttl_ms, &runtime).await? {
            Granted::Yes(token) => token,
            Granted::No(ttl) => return Ok(Err(ttl)),
            Granted::Unexpected(reply) => {
                return Err(Error::UnexpectedReply {
                    script: "fenced_acquire",
                    reply,
                })
            }
            Granted::Upgrade => {
                let owner = &req.key.1;
                return Err(Error::UpgradeRefused {
                    name: self.name.to_string(),
                    owner: owner.strip_suffix(":write").unwrap_or(owner).to_owned(),
                });
            }
        };
        let Some(sent) = self.confirm_if_late(req, sent, ttl_ms, &runtime).await? else {
            return Ok(Err(0));
        };
        let guard = self.hold(req, sent, token, runtime);
        self.check_replicas(guard).await
    }

    /// The TTL the acquire sets: the lease, or the watchdog timeout. A
    /// leased hold taken inside a watchdog hold must not shorten the key's
    /// TTL below what the watchdog's schedule expects.
    fn hold_ttl(&self, req: &AcquireRequest<'_>) -> u64 {
        let inner = &self.client.inner;
        let watchdog_ms = inner.config.watchdog_timeout.as_millis() as u64;
        match req.lease_ms {
            None => watchdog_ms,
            Some(ms) if inner.registry.contains(&req.key) => ms.max(watchdog_ms),
            Some(ms) => ms,
        }
    }

    /// Sends the wait's request, resending it under the same id on a
    /// connection failure (once always, more until the deadline). Safe to
    /// resend: the request's acquire latch makes a resend return the first
    /// outcome instead of taking a second hold. A caller that leaves gets
    /// its grant given back (and a fair waiter's queue entry left).
    async fn send_latched(
        &self,
        req: &AcquireRequest<'_>,
        ttl_ms: u64,
        runtime: &tokio::runtime::Handle,
    ) -> Result<Granted> {
        let inner = &self.client.inner;
        let (name, owner) = (Arc::clone(&req.key.0), Arc::clone(&req.key.1));
        let (kind, waiter_ms, deadline) = (self.kind, req.waiter_ms, req.deadline);
        // The attempts of one wait share their request while it is young
        // enough (see `Request`).
        let request = req
            .slot
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
        let mut conn = inner.conn.clone();
        let send = async move {
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
        let (name, owner) = (Arc::clone(&req.key.0), Arc::clone(&req.key.1));
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
        Finish::new(runtime.clone(), send, give_back)
            .await
            .map_err(|e| self.error(e))
    }

    /// When a watchdog-mode grant came back so late that its first renewal
    /// is due (or, for all this client knows, its TTL already ran out),
    /// confirms it is still held before a guard goes out, as that renewal
    /// would. The time the hold's lease counts from; `None` when it is no
    /// longer held. A failed confirm gives the hold back at once rather than
    /// at its TTL's end.
    async fn confirm_if_late(
        &self,
        req: &AcquireRequest<'_>,
        sent: Instant,
        ttl_ms: u64,
        runtime: &tokio::runtime::Handle,
    ) -> Result<Option<Instant>> {
        let watchdog = self.client.inner.config.watchdog_timeout;
        if req.lease_ms.is_some() || Instant::now() < sent + watchdog / 3 {
            return Ok(Some(sent));
        }
        match self.confirm(&req.key).await {
            Ok((true, confirmed)) => Ok(Some(confirmed)),
            Ok((false, _)) => Ok(None),
            Err(err) => {
                self.give_back_in_background(&req.key, ttl_ms, runtime);
                Err(err)
            }
        }
    }

    /// The guard of a grant: registered with the watchdog, or leased from
    /// `sent`.
    fn hold(
        &self,
        req: &AcquireRequest<'_>,
        sent: Instant,
        token: Option<u64>,
        runtime: tokio::runtime::Handle,
    ) -> LockGuard {
        let inner = &self.client.inner;
        let key = req.key.clone();
        let lease = match req.lease_ms {
            None => inner
                .registry
                .hold(key.clone(), sent, self.kind == Kind::Read),
            Some(ms) => LeaseState::leased(sent + Duration::from_millis(ms)),
        };
        LockGuard::new(
            self.client.clone(),
            self.kind,
            key,
            req.lease_ms,
            lease,
            runtime,
        )
        .with_token(token)
    }

    /// With replica sync configured: waits for the replicas to acknowledge
    /// the hold, and gives it back when too few did (then retries later or
    /// fails, as configured).
    async fn check_replicas(&self, guard: LockGuard) -> Result<Attempt> {
        let inner = &self.client.inner;
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

/// What every attempt of one wait asks for.
struct AcquireRequest<'a> {
    /// The lock's name and the owner's field.
    key: HoldKey,
    /// The lease; `None` in watchdog mode.
    lease_ms: Option<u64>,
    /// A fair lock's waiter timeout when the wait queues; else 0.
    waiter_ms: u64,
    /// When the wait ends; resends stop there too.
    deadline: Option<Instant>,
    /// The request id the attempts share.
    slot: &'a RequestSlot,
}

impl LockCore {
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
        Kind::Reentrant | Kind::Spin(_) => pttl(
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
        Kind::Fair { .. } => pttl(
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
