//! Acquiring a lock: acquire -> wait_for -> attempt, and the request each
//! wait sends under one id.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::gate::{Busy, Claim, Gates, Ticket};
use super::info::Extra;
use super::kind::{AcquireArgs, Granted};
use super::lean::{self, Took};
use super::queue::{leave_queue, FairOwners, Queue, QueueExit};
use super::release::give_back_hold;
use super::slot::EXPIRY_SLACK;
use super::{Guards, Kind, LockCore};
use super::{LockGuard, Resend};
use crate::args;
use crate::config::MAX_DURATION;
use crate::engine::finish::{runtime, Finish};
use crate::engine::object::Object;
use crate::engine::request::{
    send, Answer, GiveBack, GrantedIn, KeepsLatched, Lasts, Latch, Request, RequestSlot, Sending,
    Taken,
};
use crate::engine::telemetry::{self, Subject};
use crate::engine::waiting::{self, Channel, Tried, Wait};
use crate::engine::watchdog::{HoldKey, LeaseState, Renew, RenewCall};
use crate::{Error, Result};

impl LockCore {
    /// Acquires within `wait` (`None`: no limit), with `lease` (`None`:
    /// watchdog mode).
    pub(super) async fn acquire(
        &self,
        wait: Option<Duration>,
        lease: Option<Duration>,
    ) -> Result<Option<LockGuard>> {
        let acquire = || self.acquire_in(wait, lease);
        telemetry::acquire(
            self.subject(),
            self.obj.shared_name(),
            acquire,
            Option::is_some,
        )
        .await
    }

    /// Who this lock's figures are about, in metrics.
    pub(super) fn subject(&self) -> Subject<'_> {
        self.obj.subject(self.kind.label())
    }

    /// [`LockCore::acquire`], inside its span.
    async fn acquire_in(
        &self,
        wait: Option<Duration>,
        lease: Option<Duration>,
    ) -> Result<Option<LockGuard>> {
        let field = self.field()?;
        if let Some(ttl) = self.watchdog_lease {
            super::check_watchdog_lease("watchdog lease", ttl)?;
        }
        let lease_ms = lease
            .map(|lease| args::duration("lease", lease, MAX_DURATION))
            .transpose()?;
        let limits = self.obj.wait_limits(wait)?;
        // A fair lock's waiter joins the queue with its first attempt (one
        // attempt alone does not): whatever ends the wait other than the
        // lock takes it out again, at once.
        let queue = match self.kind.waiter_timeout() {
            Some(timeout) if wait != Some(Duration::ZERO) => Queue::Joins {
                waiter_ms: args::duration("waiter timeout", timeout, MAX_DURATION)?,
            },
            _ => Queue::No,
        };
        let mut exit = QueueExit {
            lock: self,
            field: Arc::clone(&field),
            waiter_ms: queue.waiter_ms(),
            armed: queue != Queue::No,
            wait: None,
        };
        if queue != Queue::No {
            // While this wait goes on, no leave of this owner's entry (one
            // of an earlier wait, still being resent or sent late) takes it
            // out: the entry is this wait's too. (Were this future dropped
            // meanwhile, `exit` leaves anew.)
            let key = HoldKey::new(Arc::clone(self.obj.shared_name()), Arc::clone(&field));
            exit.wait = Some(FairOwners::begin_wait(&self.obj, &key).await);
        }
        let result = self.wait_for(&field, lease_ms, limits, queue).await;
        match result {
            Ok(Some(_)) => exit.armed = false,
            // The leave is waited for within the call's bound (the wait's
            // margin); a server that does not answer in it gets the leave in
            // the background.
            Ok(None) => {
                let _ = waiting::until(limits.bound, exit.leave()).await;
            }
            // Dropping `exit` leaves the queue in the background.
            Err(_) => {}
        }
        result
    }

    /// The attempts and waits of [`LockCore::acquire`] within `limits`.
    /// `queue`: whether its attempts join a fair lock's queue.
    async fn wait_for(
        &self,
        field: &Arc<str>,
        lease_ms: Option<u64>,
        limits: Wait,
        queue: Queue,
    ) -> Result<Option<LockGuard>> {
        // One request id for the whole wait (renewed when it grows old):
        // sends whose replies were lost are settled once, when it goes.
        let slot = RequestSlot::default();
        let req = AcquireRequest {
            key: HoldKey::new(Arc::clone(self.obj.shared_name()), Arc::clone(field)),
            lease_ms,
            queue,
            limits,
            slot: &slot,
        };
        let attempt = || self.attempt(&req);
        if let Some(backoff) = self.kind.backoff() {
            return waiting::spin(backoff, limits, attempt).await;
        }
        let channel = || Channel {
            name: self.kind.waiter_channel(self.obj.shared_name(), field),
            // A release wakes one waiter.
            broadcast: false,
        };
        self.obj.wait_on(channel, limits, attempt).await
    }

    /// One acquire attempt: send the wait's request (resent on a lost
    /// reply), confirm a grant that came back late, make the guard, and
    /// check the replicas.
    async fn attempt(&self, req: &AcquireRequest<'_>) -> Result<Tried<LockGuard>> {
        let runtime = runtime()?;
        if let Some(held) = self.wait_out_stale_count(req).await? {
            return Ok(held);
        }
        let ttl_ms = self.hold_ttl(req);
        // The owner's gate, when the client may send the lean protocol:
        // its ticket is kept until the guard is made.
        let Some(claim) = self.pass_gate(req, true).await else {
            // The call's time ran out at the gate.
            return Ok(Tried::soon());
        };
        let mut sent = Instant::now();
        let (granted, lean, _ticket) = match claim {
            Some(Claim::Lean(ticket)) => {
                let ticket = Arc::new(ticket);
                let claim = Arc::clone(&ticket);
                let took = lean::acquire(&self.obj, &req.key, ttl_ms, claim, &runtime).await;
                match took.map_err(|e| self.error(e))? {
                    Took::Granted => (Granted::Yes(None), true, Some(ticket)),
                    Took::Held(pttl) => return Ok(Tried::after_pttl(pttl)),
                    // Sent again as the latched acquire: after a lost
                    // reply once the settle opens the gate (what the lost
                    // send took is released by then), so that it is resent
                    // within the call's time as a latched send's is; after
                    // a `Latched` reply as another call of the owner (a
                    // settle of an older request, on its way, passes the
                    // gate first). The lean claim goes before. Only calls
                    // without a time limit go lean, so the gate's wait does
                    // not run out; were it to, a lost reply's call fails
                    // with its connection error.
                    took @ (Took::Lost(_) | Took::Latched) => {
                        drop(ticket);
                        let again =
                            Box::pin(self.latched_after_gate(req, ttl_ms, &runtime)).await?;
                        let Some((granted, ticket, at)) = again else {
                            return match took {
                                Took::Lost(err) => Err(self.error(err)),
                                _ => Ok(Tried::soon()),
                            };
                        };
                        sent = at;
                        (granted, false, ticket)
                    }
                }
            }
            claim => {
                let ticket = claim.map(|claim| Arc::new(claim.into_ticket()));
                // Boxed, as the latched send after a lean one is: a
                // lean `lock()` moves its future on every call, which
                // need not be as large as the latched send's.
                let granted = Box::pin(self.send_latched(req, ttl_ms, &runtime)).await?;
                (granted, false, ticket)
            }
        };
        let token = match granted {
            Granted::Yes(token) => token,
            // The holder's TTL: the lock is free by then.
            Granted::No(pttl) => return Ok(Tried::after_pttl(pttl)),
            // What an earlier send of the request took is gone: the next
            // attempt sends a new request.
            Granted::Spent => return Ok(Tried::soon()),
            Granted::Unexpected(reply) => {
                return Err(Error::UnexpectedReply {
                    script: "fenced_acquire",
                    reply,
                })
            }
            Granted::Reacquire => {
                return Err(Error::NonReentrantReacquire {
                    name: self.obj.name().to_string(),
                    owner: req.key.field.to_string(),
                })
            }
            Granted::Upgrade => {
                let owner = &req.key.field;
                return Err(Error::UpgradeRefused {
                    name: self.obj.name().to_string(),
                    owner: owner.strip_suffix(":write").unwrap_or(owner).to_owned(),
                });
            }
        };
        // The grant may have been taken by an earlier send whose reply was
        // lost: its lease counts from there.
        // A lean grant names no latch (a give-back of it releases the
        // owner's one hold).
        let (sent, grant) = match lean {
            true => (sent, None),
            false => (req.slot.lease_start(sent), req.slot.latch()),
        };
        let Some(sent) = self
            .confirm_if_late(req, sent, ttl_ms, grant.clone(), &runtime)
            .await?
        else {
            return Ok(Tried::soon());
        };
        let guard = self.hold(req, sent, ttl_ms, token, runtime);
        if lean {
            guard.mark_lean();
        }
        self.check_replicas(guard, grant).await
    }

    /// Passes the owner's gate (see `lock::gate`) when the client was
    /// asked for the lean protocol and this kind writes the hash a lean
    /// call reads, lean when `lean` asks and the kind and the client may:
    /// `Some(None)` when there is no gate to pass, `None` when the call's
    /// time ran out while it waited there.
    async fn pass_gate(&self, req: &AcquireRequest<'_>, lean: bool) -> Option<Option<Claim>> {
        let client = self.obj.client();
        if !lean::gated(client, self.kind) {
            return Some(None);
        }
        let key = &req.key;
        // An acquire goes lean only in a call that waits as long as it
        // takes (`lock()`: no deadline). A lean send is never resent: a
        // lost reply is settled once the send's deadline has passed on the
        // server's clock (a response timeout at least), and only then is
        // the latched acquire sent. A call with a time limit (`try_lock()`,
        // `try_lock_for()`) sends the latched acquire, whose resends keep
        // within its limit, and a first try that meets a dead server fails
        // at once rather than at the end of its wait.
        let go_lean = lean && lean::capable(self.kind) && req.limits.deadline.is_none();
        let claim = Gates::get().claim(key, go_lean, || Guards::get().holds_nothing(key));
        match req.limits.bound {
            Some(bound) => tokio::time::timeout_at(bound, claim).await.ok().map(Some),
            None => Some(Some(claim.await)),
        }
    }

    /// The latched acquire after a lean one took nothing: passes the
    /// owner's gate latched, then sends. The grant, the gate's ticket kept
    /// until the guard is made, and when the send went (a lease counts from
    /// there); `None` when the call's time ran out at the gate.
    async fn latched_after_gate(
        &self,
        req: &AcquireRequest<'_>,
        ttl_ms: u64,
        runtime: &tokio::runtime::Handle,
    ) -> Result<Option<(Granted, Option<Arc<Ticket>>, Instant)>> {
        let Some(claim) = self.pass_gate(req, false).await else {
            return Ok(None);
        };
        let sent = Instant::now();
        let ticket = claim.map(|claim| Arc::new(claim.into_ticket()));
        let granted = self.send_latched(req, ttl_ms, runtime).await?;
        Ok(Some((granted, ticket, sent)))
    }

    /// Waits, before a grant, for the end of a key that holds a count of
    /// this owner no live guard owns (a hold whose release was never sent,
    /// its lease run out by this clock first, or never got through: see
    /// `Guards::lingering`): a grant would re-enter it, raise its TTL to
    /// this hold's and keep that count in the key, where no release takes
    /// it out. Redis is asked only when such a count may stand, and the
    /// wait lasts until the count is gone (given back: Redis is asked again
    /// every 100 ms) or the key's TTL ends, within the call's time: past
    /// it, the lock counts as held that long (`Some`).
    async fn wait_out_stale_count(
        &self,
        req: &AcquireRequest<'_>,
    ) -> Result<Option<Tried<LockGuard>>> {
        if !self.kind.holds_share_ttl() || !Guards::get().lingering(&req.key) {
            return Ok(None);
        }
        // No try starts after a wait's deadline; one try without a wait
        // keeps half its send's time for the send.
        let limit = match (req.limits.deadline, req.limits.resend_until) {
            (Some(deadline), Some(resend)) if resend > deadline => {
                Some(deadline + (resend - deadline) / 2)
            }
            (deadline, _) => deadline,
        };
        loop {
            let (hash, pttl, ..) = self.read_lock(Extra::Plain).await?;
            let stale = super::hash_value(&hash, &req.key.field).is_some();
            let Some(ms) = u64::try_from(pttl).ok().filter(|_| stale) else {
                Guards::get().forget_lingering(&req.key);
                return Ok(None);
            };
            let now = Instant::now();
            let end = now + Duration::from_millis(ms) + EXPIRY_SLACK;
            // A give-back on its way may take the count out before the
            // key's end: looked at again meanwhile.
            let next = end.min(now + STALE_LOOK_AGAIN);
            if limit.is_some_and(|limit| end > limit) {
                return Ok(Some(Tried::Again(Some(end - now))));
            }
            tokio::time::sleep_until(next).await;
            if next == end {
                Guards::get().forget_lingering(&req.key);
                return Ok(None);
            }
            // A call of the owner beside this one took a hold meanwhile
            // (perhaps the very count looked at): a live hold keeps the
            // key, and a re-entry joins it by right.
            if !Guards::get().lingering(&req.key) {
                return Ok(None);
            }
        }
    }

    /// The TTL the acquire sets: the lease, or the handle's watchdog TTL
    /// (see [`LockCore::watchdog_ttl`]). A hold taken inside a watchdog
    /// hold of the owner must not shorten the key's TTL below what the
    /// watchdog's schedule expects (the TTL that hold's lease renews to).
    fn hold_ttl(&self, req: &AcquireRequest<'_>) -> u64 {
        let renewed = self.obj.registry().ttl_of(&req.key);
        let renewed_ms = renewed.map(|ttl| ttl.as_millis() as u64);
        let watchdog_ms = self.watchdog_ttl().as_millis() as u64;
        // Nor below the lease another leased hold of the owner still has;
        // but for read holds, whose script keeps one timeout key per hold
        // and the hash as long as the longest.
        let left = || {
            if !self.kind.holds_share_ttl() {
                return 0;
            }
            Guards::get()
                .lease_left(&req.key)
                .map_or(0, |left| left.as_millis() as u64)
        };
        match (req.lease_ms, renewed_ms) {
            (None, renewed) => watchdog_ms.max(renewed.unwrap_or(0)),
            (Some(ms), Some(renewed)) => ms.max(renewed),
            (Some(ms), None) => ms.max(left()),
        }
    }

    /// Sends the wait's request, resending it under the same id on a
    /// connection failure (up to `release_attempts` sends, and only while
    /// the wait allows: see [`Wait`] and `request::send`, the
    /// semaphores' too). Safe to resend: the request's acquire latch makes a
    /// resend return the first outcome instead of taking a second hold. A
    /// caller that leaves gets its grant given back (and a fair waiter's
    /// queue entry left).
    async fn send_latched(
        &self,
        req: &AcquireRequest<'_>,
        ttl_ms: u64,
        runtime: &tokio::runtime::Handle,
    ) -> Result<Granted> {
        let (name, owner) = (Arc::clone(&req.key.name), Arc::clone(&req.key.field));
        let (kind, queue, limits) = (self.kind, req.queue, req.limits);
        // The attempts of one wait share their request while it is young
        // enough (see `Request`).
        let hold = Hold {
            kind,
            owner: Arc::clone(&owner),
        };
        let new = || Request::new(&self.obj, hold, Lasts::Ms(ttl_ms), runtime.clone());
        let request = (req.slot.get(Lasts::Ms(ttl_ms), new).await).map_err(|e| self.error(e))?;
        let (build_name, build_owner) = (Arc::clone(&name), Arc::clone(&owner));
        let build = move |latch: &str, latch_ttl: u64, deadline: u64| {
            kind.acquire(&AcquireArgs {
                name: &build_name,
                field: &build_owner,
                latch,
                ttl_ms,
                latch_ttl,
                queue,
                deadline,
            })
        };
        let how = Sending {
            build,
            decode: move |reply| kind.granted(reply),
            resend_until: limits.resend_until,
            lasts: Lasts::Ms(ttl_ms),
        };
        let answer = |reply: &Granted| match reply {
            Granted::Yes(_) => Answer::Granted,
            Granted::Spent => Answer::Spent,
            _ => Answer::Refused,
        };
        let lock = self.obj.clone();
        let key = req.key.clone();
        // No call of the owner goes lean while this send may still be on
        // its way, or what it took given back.
        let busy = self.gate_busy(&key);
        let orphaned = move |granted: bool| async move {
            let _busy = busy;
            if let (Queue::Joins { waiter_ms }, false) = (queue, granted) {
                // Perhaps queued by this very attempt: leave the line
                // (unless a newer wait of the owner is in it).
                leave_queue(FairOwners::use_of(&lock, &key), waiter_ms).await;
            }
        };
        send(request, runtime.clone(), how, answer, orphaned)
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
        grant: Option<Arc<Latch>>,
        runtime: &tokio::runtime::Handle,
    ) -> Result<Option<Instant>> {
        let ttl = Duration::from_millis(ttl_ms);
        if req.lease_ms.is_some() || Instant::now() < sent + ttl / 3 {
            return Ok(Some(sent));
        }
        match self.confirm(&req.key, ttl, sent, grant.clone()).await {
            Ok((true, confirmed)) => Ok(Some(confirmed)),
            Ok((false, _)) => Ok(None),
            Err(err) => {
                // The grant was made after `sent`, and before its reply.
                let granted = GrantedIn::between(sent, Instant::now());
                self.give_back_in_background(&req.key, (granted, ttl_ms), grant, runtime);
                Err(err)
            }
        }
    }

    /// The guard of a grant: registered with the watchdog (renewed to the
    /// `ttl_ms` its acquire set), or leased from `sent`.
    fn hold(
        &self,
        req: &AcquireRequest<'_>,
        sent: Instant,
        ttl_ms: u64,
        token: Option<u64>,
        runtime: tokio::runtime::Handle,
    ) -> LockGuard {
        let client = self.obj.client();
        let key = req.key.clone();
        let lease = match req.lease_ms {
            None => {
                let how = Renew {
                    renewal: self.kind.renewal(),
                    ttl: Duration::from_millis(ttl_ms),
                };
                client
                    .registry()
                    .hold(key.clone(), sent, how, self.kind.label())
            }
            Some(ms) => LeaseState::leased_from(sent, Duration::from_millis(ms)),
        };
        LockGuard::new(
            self.obj.clone(),
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
    /// fails, as configured); `latch` is the granted request's, which the
    /// sync goes by and the give-back names.
    async fn check_replicas(
        &self,
        guard: LockGuard,
        latch: Option<Arc<Latch>>,
    ) -> Result<Tried<LockGuard>> {
        let (name, grant) = (self.obj.shared_name(), latch.clone());
        let give_back = |guard: LockGuard| async move {
            // Only the master knows of this hold.
            match guard.give_back(grant).await {
                Ok(()) => {}
                Err(err @ Error::NotHeld { .. }) => {
                    tracing::debug!(lock = %name, error = %err,
                    "nothing to give back: the master that answers has no hold of the owner, or \
                     not this grant (a failover lost it)")
                }
                Err(err) => tracing::warn!(lock = %name, error = %err,
                    "could not give back a hold the replicas did not acknowledge; it expires with its lease"),
            }
        };
        self.obj
            .keep_if_synced(latch.as_deref(), guard, give_back)
            .await
    }
}

/// How often an acquire waiting out a stale count of its owner looks
/// again (see `LockCore::wait_out_stale_count`).
const STALE_LOOK_AGAIN: Duration = Duration::from_millis(100);

/// What every attempt of one wait asks for.
struct AcquireRequest<'a> {
    /// The lock's name and the owner's field.
    key: HoldKey,
    /// The lease; `None` in watchdog mode.
    lease_ms: Option<u64>,
    /// Whether the attempts join a fair lock's queue.
    queue: Queue,
    /// When the wait ends, and until when a failed send goes again.
    limits: Wait,
    /// The request id the attempts share.
    slot: &'a RequestSlot<Hold>,
}

impl LockCore {
    /// Background work of `key`'s owner on this lock, when the client was
    /// asked for the lean protocol: no call of the owner goes lean while
    /// it lives (see `lock::gate`).
    fn gate_busy(&self, key: &HoldKey) -> Option<Busy> {
        lean::gated(self.obj.client(), self.kind).then(|| Gates::get().busy(key))
    }

    /// Releases one hold of `key` that no guard will own, in the
    /// background; `ttl_ms` is what the acquire set as the key's TTL, and
    /// `grant` the latch of the request granted (see `give_back_hold`).
    fn give_back_in_background(
        &self,
        key: &HoldKey,
        (granted, ttl_ms): (GrantedIn, u64),
        grant: Option<Arc<Latch>>,
        runtime: &tokio::runtime::Handle,
    ) {
        let lock = self.obj.clone();
        let hold = Hold::of(self.kind, key);
        let busy = self.gate_busy(key);
        runtime.spawn(async move {
            let _busy = busy;
            let why = GiveBack::Unconfirmed;
            let lasts = Lasts::Ms(ttl_ms);
            let grant = grant.as_ref();
            hold.give_back(&lock, lasts, granted, grant, why).await;
        });
    }

    /// Renews `key` alone to `ttl`, as the watchdog would: whether its
    /// owner still holds it, and when the renewal was sent. A caller that
    /// leaves meanwhile has the hold given back in the background (also
    /// when the renewal fails: then as granted after `acquired`, when the
    /// acquire was sent), naming `grant`, the latch of the request granted.
    async fn confirm(
        &self,
        key: &HoldKey,
        ttl: Duration,
        acquired: Instant,
        grant: Option<Arc<Latch>>,
    ) -> Result<(bool, Instant)> {
        let call = RenewCall::new(self.kind.renewal(), ttl, std::iter::once(key));
        let mut conn = self.obj.conn();
        let sent = Instant::now();
        let request = async move { call.send(&mut conn).await };
        let lock = self.obj.clone();
        let hold = Hold::of(self.kind, key);
        let busy = self.gate_busy(key);
        let give_back = move |reply: redis::RedisResult<Vec<usize>>| async move {
            let _busy = busy;
            let granted = match reply {
                // The renewal, sent at `sent` and answered by now, set the
                // key's TTL.
                Ok(gone) if gone.is_empty() => GrantedIn::between(sent, Instant::now()),
                // The hold is gone already.
                Ok(_) => return,
                // Whether the renewal ran is unknown: the hold is given
                // back as the acquire's grant, made after `acquired` (as
                // the caller would have, had it stayed).
                Err(_) => GrantedIn::between(acquired, Instant::now()),
            };
            let lasts = Lasts::Ms(ttl.as_millis() as u64);
            let (grant, why) = (grant.as_ref(), GiveBack::CallerLeft);
            hold.give_back(&lock, lasts, granted, grant, why).await;
        };
        let reply = Finish::new(runtime()?, request, give_back)
            .await
            .map_err(|e| self.error(e))?;
        Ok((reply.is_empty(), sent))
    }
}

/// A lock's grant: one hold of an owner, given back by one release.
pub(super) struct Hold {
    kind: Kind,
    owner: Arc<str>,
}

impl Hold {
    /// A hold of `key`'s owner, of a lock of `kind`.
    fn of(kind: Kind, key: &HoldKey) -> Hold {
        Hold {
            kind,
            owner: Arc::clone(&key.field),
        }
    }
}

impl Taken for Hold {
    const WANTS_GRANT_TIME: bool = true;

    fn keep_latched(&self, lock: &Object) -> Option<KeepsLatched> {
        let key = || HoldKey::new(Arc::clone(lock.shared_name()), Arc::clone(&self.owner));
        lean::gated(lock.client(), self.kind)
            .then(|| Box::new(Gates::get().busy(&key())) as KeepsLatched)
    }

    async fn give_back(
        &self,
        lock: &Object,
        lasts: Lasts,
        granted: GrantedIn,
        grant: Option<&Arc<Latch>>,
        why: GiveBack,
    ) -> bool {
        // The release keeps the key's TTL at least what the acquire set (a
        // leased re-entry inside a watchdog hold keeps the watchdog's TTL);
        // a lock's grant always sets one.
        let name = lock.name();
        let watchdog_ms = lock.config().watchdog_timeout.as_millis() as u64;
        let ttl_ms = lasts.ms().unwrap_or(watchdog_ms);
        let owner = &self.owner;
        let resend = Resend::UntilExpired;
        let key = HoldKey::new(Arc::clone(lock.shared_name()), Arc::clone(owner));
        let (named, grant) = (grant.is_some(), grant.map(Arc::clone));
        let released = give_back_hold(lock, self.kind, &key, ttl_ms, granted, resend, grant);
        match released.await {
            // The script ran past its grant's check, and closed the grant
            // (`release.lua` and the others' `close_grant`).
            Ok(()) => named,
            // Its lease ran out before the give-back could be sent: the
            // hold is gone, or ends with its TTL; the owner may hold anew.
            Err(err @ Error::LeaseLost { .. }) => {
                tracing::debug!(lock = %name, %owner, error = %err, why = why.why(),
                    "a hold an acquire took ran out before it could be given back");
                false
            }
            // The release names the grant's latch: a master without it
            // never had the grant (a failover lost it), or the hold is gone
            // (the grant closed then, when it showed; closed again all the
            // same, which a latch that is gone needs).
            Err(err @ Error::NotHeld { .. }) => {
                tracing::debug!(lock = %name, %owner, error = %err, why = why.why(),
                    "nothing to give back: the master that answers has no hold of the owner, \
                     or not this grant (a failover lost it)");
                false
            }
            Err(err) => {
                tracing::warn!(lock = %name, %owner, error = %err, why = why.why(),
                    "could not give back a hold an acquire took; it expires with its lease");
                false
            }
        }
    }
}
