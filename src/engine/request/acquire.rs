//! The acquire of the locks and the semaphores: one [`Request`] per wait
//! (kept in a [`RequestSlot`]), its sends resent alike ([`send`], whose
//! [`Sending`] is each synchronizer's policy as data).

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::ScriptInvocation;
use tokio::runtime::Handle;
use tokio::time::Instant;

use crate::client::conn::Conn;
use crate::engine::finish::Finish;
use crate::engine::keys;
use crate::engine::object::Object;
use crate::error::is_connection_failure;

use super::give_back::{GiveBack, GrantedIn, KeepsLatched, Lasts, Taken};
use super::latch::Latch;
use super::resend::{resend, Resend};
use super::settle::{
    cancel, give_back_lost, grant_lasts, on_server, settle_at_shutdown, settle_lost,
};

/// The error of a send whose script ran after its deadline, and so took
/// nothing (the scripts reply [`LATE`]): its reply came later than its
/// caller waits for, as a timed-out reply would, and it is treated alike
/// (resent while the wait allows).
pub(crate) fn late() -> redis::RedisError {
    std::io::Error::new(std::io::ErrorKind::TimedOut, LATE_TEXT).into()
}

/// What [`late`] says.
const LATE_TEXT: &str = "the acquire ran after its caller gave up on it, and took nothing";

/// Whether `err` is [`late`]'s.
fn is_late(err: &redis::RedisError) -> bool {
    err.is_timeout() && err.to_string().contains(LATE_TEXT)
}

/// What an acquire script replies when it ran after its send's deadline
/// (the fenced lock's: `{0, LATE}`).
pub(crate) const LATE: i64 = -5;

/// The acquire request of one wait, shared by its attempts: every send of
/// it carries its id, whose latch makes it count once however many sends
/// reach Redis (a resend of a granted request is answered as granted, or,
/// once what it took is gone, as [spent](Answer::Spent)). A
/// send whose reply is lost leaves the outcome unknown until a later send
/// of the same request answers; a request that is never granted while its
/// outcome is unknown is settled once, when its last user lets it go (the
/// wait, or an attempt finishing in the background).
pub(crate) struct Request<T: Taken> {
    on: Object,
    taken: Arc<T>,
    /// The acquire latch.
    pub(crate) latch: Arc<Latch>,
    /// When it was made: before its first send, so before any grant.
    born: Instant,
    outcome: Mutex<Outcome>,
    /// The latest deadline of the sends made of it, in epoch ms by the
    /// server's clock (0 before any): no send of it runs after it (see
    /// `settle_at_shutdown`).
    sends_end: Arc<AtomicU64>,
    runtime: Handle,
}

#[derive(Default)]
struct Outcome {
    /// Some send got no reply; how long what the longest-lasting such send
    /// took lasts, should it have been granted.
    lost: Option<Lasts>,
    /// When the first send that got no reply was sent: a grant answered by
    /// a later send may have been taken then.
    lost_since: Option<Instant>,
    /// When the last send was made.
    last_sent: Option<Instant>,
    /// A send was granted, or answered that an earlier one was: the
    /// request is spent, with nothing left to settle.
    spent: bool,
    /// After a lost send, what keeps the owner's calls of the lock latched
    /// until the request is settled (see [`Taken::keep_latched`]); shared
    /// with a give-back of what the lost send took.
    keeps_latched: Option<Arc<KeepsLatched>>,
}

impl<T: Taken> Request<T> {
    /// A new request on `name` whose sends take what lasts at most
    /// `lasts`.
    pub(crate) fn new(on: &Object, taken: T, lasts: Lasts, runtime: Handle) -> Self {
        let (client, name) = (on.client(), on.shared_name());
        let latch = keys::acquire_latch(name, &client.request_id());
        let latch_ttl = Self::latch_ttl(client.config(), lasts);
        Request {
            on: on.clone(),
            taken: Arc::new(taken),
            latch: Arc::new(Latch::new(client, name, latch, latch_ttl, runtime.clone())),
            born: Instant::now(),
            outcome: Mutex::new(Outcome::default()),
            sends_end: Arc::new(AtomicU64::new(0)),
            runtime,
        }
    }

    /// What a grant of it takes.
    pub(crate) fn taken(&self) -> &T {
        &self.taken
    }

    /// The latch lives as long as any send of the request may reach Redis
    /// or be settled, and at least as long as the hold it records (were it
    /// shorter, a send that arrives after it would count a granted re-entry
    /// twice). A request is reused for one resend window after its birth,
    /// and each attempt's sends fit in one more window; hence the sum.
    /// What never expires by itself (a semaphore's permits) is
    /// settled by the wait's next try, up to a look-again (a third of the
    /// watchdog timeout) after the attempt that lost a send, when the
    /// message that would wake it sooner is lost: the latch outlives that
    /// pause too. Were it shorter (a look-again of about two windows, a
    /// watchdog timeout near 100 s with the default timeouts), the settle
    /// would find no grant, and the permits a lost send took would never
    /// come back (found by the protocol model, `ferrisson-model`).
    fn latch_ttl(config: &crate::config::Config, lasts: Lasts) -> u64 {
        let window = config.unlock_latch_ttl_ms();
        let (ttl_ms, settled_by) = match lasts {
            Lasts::Ms(ms) => (ms, 0),
            Lasts::UntilReleased => (
                0,
                u64::try_from(config.renewal_interval().as_millis()).unwrap_or(u64::MAX),
            ),
        };
        ttl_ms
            .max(window)
            .saturating_add(window)
            .saturating_add(settled_by)
    }

    /// Whether a new attempt taking what lasts `lasts` may send this
    /// request again:
    /// not granted (nor spent) yet, within one resend window of its birth, and, after
    /// a lost send, within that send's TTL (while what it may have taken
    /// still stands, a resend's "granted" means that).
    fn reusable(&self, lasts: Lasts) -> bool {
        let config = self.on.config();
        let outcome = self.outcome.lock().unwrap_or_else(|p| p.into_inner());
        let window = config.unlock_latch_ttl_ms();
        let limit = match outcome.lost.and_then(Lasts::ms) {
            Some(lost) => window.min(lost),
            None => window,
        };
        !outcome.spent
            && self.born.elapsed() < Duration::from_millis(limit)
            && self.latch.ttl >= Self::latch_ttl(config, lasts)
    }

    /// A send made at `sent` got no reply: perhaps it reached Redis and
    /// took what lasts `lasts`.
    pub(crate) fn lost(&self, lasts: Lasts, sent: Instant) {
        let mut outcome = self.outcome.lock().unwrap_or_else(|p| p.into_inner());
        outcome.lost = Some(outcome.lost.map_or(lasts, |l| l.max(lasts)));
        outcome.lost_since = Some(outcome.lost_since.map_or(sent, |t| t.min(sent)));
        if outcome.keeps_latched.is_none() && !outcome.spent {
            outcome.keeps_latched = self.taken.keep_latched(&self.on).map(Arc::new);
        }
    }

    /// When the last send of it was made (its birth, before any).
    fn last_sent(&self) -> Instant {
        let outcome = self.outcome.lock().unwrap_or_else(|p| p.into_inner());
        outcome.last_sent.unwrap_or(self.born)
    }

    /// When the lease of a grant answered to a send made at `sent` began,
    /// at the earliest: that send, or an earlier one of this request that
    /// got no reply (the grant may have been taken by it). Not the
    /// request's birth: the attempts of one wait share the request, and a
    /// refusal answered in between took nothing.
    pub(crate) fn lease_start(&self, sent: Instant) -> Instant {
        let outcome = self.outcome.lock().unwrap_or_else(|p| p.into_inner());
        outcome.lost_since.map_or(sent, |lost| lost.min(sent))
    }

    /// Whether the request must be settled: a send of it got no reply and
    /// none was granted.
    fn unsettled(&self) -> bool {
        let outcome = self.outcome.lock().unwrap_or_else(|p| p.into_inner());
        !outcome.spent && outcome.lost.is_some()
    }

    /// Settles the request now, once: marks it cancelled, or gives back
    /// what a lost send took. A connection failure leaves it unsettled
    /// (its drop, or the next call, tries again).
    async fn settle_now(&self) -> redis::RedisResult<()> {
        let mut conn = self.on.conn();
        let granted = cancel(&mut conn, &self.latch.key, self.latch.ttl).await?;
        let (lost, keeps_latched) = {
            let mut outcome = self.outcome.lock().unwrap_or_else(|p| p.into_inner());
            let lost = outcome.lost.take().zip(outcome.lost_since);
            (lost, outcome.keeps_latched.clone())
        };
        if let (Some(granted), Some(lost)) = (granted, lost) {
            let lost = grant_lasts(lost, granted);
            // The request no longer says it is unsettled: once started, the
            // give-back goes on in the background if this call is dropped.
            let on = self.on.clone();
            let taken = Arc::clone(&self.taken);
            let latch = Arc::new(Latch::new(
                self.on.client(),
                self.on.shared_name(),
                self.latch.key.clone(),
                self.latch.ttl,
                self.runtime.clone(),
            ));
            let give_back = give_back_lost(on, taken, lost, latch);
            let give_back = async move {
                give_back.await;
                drop(keeps_latched);
            };
            Finish::detached(self.runtime.clone(), give_back).await;
        }
        Ok(())
    }

    /// A send was granted, or answered that the request is [spent](Answer::Spent):
    /// nothing of it is left to settle. Its latch then only matters to
    /// sends whose replies were lost, which may still reach Redis, to the
    /// grant's replica sync (which goes by the latch: it must be on the
    /// master that answers the sync) and to a give-back of the grant (which
    /// names it): once the request and every give-back let it go, it is
    /// deleted, or, after a lost send, closed for its TTL (see [`Latch`]).
    pub(crate) fn spent(&self) {
        let lost = {
            let mut outcome = self.outcome.lock().unwrap_or_else(|p| p.into_inner());
            outcome.spent = true;
            // Nothing to settle: a late send meets the latch.
            outcome.keeps_latched = None;
            outcome.lost.is_some()
        };
        self.latch.retire_when_let_go(lost);
    }
}

impl<T: Taken> Drop for Request<T> {
    fn drop(&mut self) {
        let outcome = self.outcome.get_mut().unwrap_or_else(|p| p.into_inner());
        let outcome = std::mem::take(outcome);
        let (false, Some(lost)) = (outcome.spent, outcome.lost.zip(outcome.lost_since)) else {
            return;
        };
        // Nobody sends it any more (a send that timed out may still wait
        // in Redis: the settle comes later on the same connection): settle
        // whether one was granted, and give back what it took.
        let (on, taken) = (self.on.clone(), Arc::clone(&self.taken));
        let (latch, latch_ttl) = (self.latch.key.clone(), self.latch.ttl);
        // Finished even when the runtime shuts down first (see
        // `spawn_to_end`), then on a connection of its own, the give-back
        // too: settling twice is harmless (the first closes the latch).
        let runtime = self.runtime.clone();
        // The owner's calls of the lock stay latched until the settle ends.
        let keeps_latched = outcome.keeps_latched;
        on.clone().spawn_to_end(&runtime, move |on| {
            let _keeps_latched = &keeps_latched;
            let (taken, latch) = (Arc::clone(&taken), latch.clone());
            let conn = on.conn();
            settle_lost(on, conn, taken, lost, latch, latch_ttl)
        });
    }
}

/// The request the attempts of one wait send, replaced when it is spent or
/// too old to send again.
pub(crate) struct RequestSlot<T: Taken>(Mutex<Option<Arc<Request<T>>>>);

impl<T: Taken> Default for RequestSlot<T> {
    fn default() -> Self {
        RequestSlot(Mutex::new(None))
    }
}

impl<T: Taken> RequestSlot<T> {
    /// The acquire latch of the current request: after a grant, the latch
    /// of the request granted, which the replica sync goes by and a
    /// give-back of the grant names (it stands while they hold it, see
    /// [`Request::spent`]).
    pub(crate) fn latch(&self) -> Option<Arc<Latch>> {
        let slot = self.0.lock().unwrap_or_else(|p| p.into_inner());
        slot.as_ref().map(|request| Arc::clone(&request.latch))
    }

    /// [`Request::lease_start`] of the current request: when the lease of
    /// a grant answered to a send made at `sent` began, at the earliest.
    pub(crate) fn lease_start(&self, sent: Instant) -> Instant {
        let slot = self.0.lock().unwrap_or_else(|p| p.into_inner());
        slot.as_ref()
            .map_or(sent, |request| request.lease_start(sent))
    }

    /// The request to send next: the current one while reusable by a send
    /// taking what lasts `lasts`, else a new one. An unsettled old request is
    /// settled first, so that what it took is never given back after the
    /// new request took its own (a lock's give-back would take the new
    /// hold's count). Cancel safe: an old request dropped mid-settle
    /// settles in the background.
    pub(crate) async fn get(
        &self,
        lasts: Lasts,
        new: impl FnOnce() -> Request<T>,
    ) -> redis::RedisResult<Arc<Request<T>>> {
        let old = {
            let mut slot = self.0.lock().unwrap_or_else(|p| p.into_inner());
            match slot.as_ref() {
                Some(request) if request.reusable(lasts) => return Ok(Arc::clone(request)),
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

/// What a reply of an acquire script says of its request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Answer {
    /// Granted: this send took it, or an earlier one whose reply was lost.
    Granted,
    /// A lock's request granted by an earlier send whose reply was lost,
    /// and the hold it took is gone since (expired, released, forced open;
    /// or the request was given up, latch `x`): it takes nothing more, and
    /// the wait goes on with a new one.
    Spent,
    /// Not granted (waits on, or fails, as the reply says).
    Refused,
}

impl Answer {
    /// [`Answer::Granted`] when `granted`, else [`Answer::Refused`]: for
    /// the semaphores, whose scripts never answer "spent" (a resend of a
    /// granted request takes no more permits, and is answered as granted,
    /// or, by the permit-expirable one once its permit is gone, refused).
    pub(crate) fn granted_if(granted: bool) -> Answer {
        if granted {
            Answer::Granted
        } else {
            Answer::Refused
        }
    }
}

/// Sends `request` by `send` (one call of its script, on the connection
/// it is given) and resends it under the same id after a connection
/// failure, while `resend_until` lasts (`None`: no limit; a one-attempt
/// call's lasts one response timeout, so a single dropped connection does
/// not fail it, and a server that does not answer costs it one timeout, not
/// two), up to `release_attempts` sends, as [`Resend::awaited`] says.
/// Safe to resend: the request's latch makes a resend of a granted request
/// answer "granted" (or "spent", once a lock's hold it took is gone)
/// without taking anything more. `answer` tells a grant
/// from the other replies; `lasts`: how long what a grant takes lasts,
/// which bounds the reuse of a request with a lost send. A request still
/// unknown after the last send is settled when the wait lets it go (`Request`'s
/// drop): once per request, not per attempt.
///
/// The locks and the semaphores share it.
async fn send_resending<T, R, Fut>(
    request: &Request<T>,
    resend_until: Option<Instant>,
    lasts: Lasts,
    answer: fn(&R) -> Answer,
    send: impl Fn(Conn, u64) -> Fut,
) -> redis::RedisResult<R>
where
    T: Taken,
    Fut: Future<Output = redis::RedisResult<R>>,
{
    let client = request.on.client();
    // A lost reply is sent again within the wait (for a one-attempt call,
    // within one response timeout of it: see `Wait`), so that one dropped
    // connection does not fail it, and a server that does not answer costs
    // one timeout, not two.
    let go_on = |_: &redis::RedisError| resend_until.is_none_or(|until| Instant::now() < until);
    let send = &send;
    let reply = resend(
        Resend::awaited(client.config()),
        "acquire",
        request.on.name(),
        go_on,
        move |_| async move {
            // When this send's caller gives up on its reply, by the
            // server's clock: run later, the script takes nothing. A server
            // that does not tell its clock gets nothing sent.
            let deadline = client.send_deadline(&request.latch.key).await?;
            request.sends_end.fetch_max(deadline, Ordering::AcqRel);
            let at = Instant::now();
            request
                .outcome
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .last_sent = Some(at);
            let reply = send(client.conn(), deadline).await;
            if matches!(&reply, Err(err) if is_late(err)) {
                // Late by a reading of the server's clock that may be
                // behind it: the next send reads the clock anew.
                client.forget_clock(&request.latch.key);
            }
            if matches!(&reply, Err(err) if is_connection_failure(err)) {
                // Perhaps it reached Redis: its outcome is unknown (and a
                // lean call of the owner on the same hash could not tell
                // it from its own: the request keeps them latched).
                request.lost(lasts, at);
            }
            reply
        },
    )
    .await;
    if matches!(&reply, Ok(reply) if answer(reply) != Answer::Refused) {
        request.spent();
    }
    reply
}

/// How one request is sent: what every synchronizer gives [`send`].
pub(crate) struct Sending<B, D> {
    /// Builds the script call of one send from the latch key, its TTL (ms)
    /// and the send's deadline (epoch ms by the server's clock, see
    /// [`late`]).
    pub(crate) build: B,
    /// Reads the script's reply.
    pub(crate) decode: D,
    /// Until when a lost reply is resent (see [`send_resending`]).
    pub(crate) resend_until: Option<Instant>,
    /// How long what a grant takes lasts: for a lock, the TTL this send
    /// sets, which the give-back of an orphaned grant restores.
    pub(crate) lasts: Lasts,
}

/// Sends `request` as `how` says, resent after a lost reply as
/// [`send_resending`] says, and returns the reply; `answer` reads what it
/// says of the request. The locks and both semaphores send this way.
///
/// Whatever becomes of the caller, a grant is never left behind:
/// - run after its caller gave up on the reply (its send's deadline, one
///   response timeout after it, by the server's clock: see
///   `Client::send_deadline`): it takes nothing, so a send that waited in
///   a frozen server's socket is not granted after its program exited;
/// - granted and answered: the latch is swept (or, after a lost send, left
///   for its TTL, so that a send arriving late changes nothing);
/// - reply lost: the request is resent after a short pause (see
///   [`Resend::awaited`]), and by the wait's next attempt; when the wait
///   ends first, it is settled in the background by its latch, and a grant
///   found there is given back;
/// - granted after the caller's future was dropped: given back, with the
///   TTL this send set, `lasts` (its [`Taken`]'s one give-back);
///   `orphaned` then runs too, told whether it was granted (a fair
///   waiter's attempt leaves the queue it may have joined).
///
/// # Cancel safety
/// Cancel safe: once sent, the request (and its resends) runs to its end
/// on `runtime`.
pub(crate) async fn send<T, R, B, D, O, OF>(
    request: Arc<Request<T>>,
    runtime: Handle,
    how: Sending<B, D>,
    answer: fn(&R) -> Answer,
    orphaned: O,
) -> redis::RedisResult<R>
where
    T: Taken,
    R: Send + 'static,
    B: Fn(&str, u64, u64) -> ScriptInvocation<'static> + Send + Sync + 'static,
    D: Fn(redis::Value) -> redis::RedisResult<R> + Send + Sync + 'static,
    O: FnOnce(bool) -> OF + Send + 'static,
    OF: Future<Output = ()> + Send,
{
    let Sending {
        build,
        decode,
        resend_until,
        lasts,
    } = how;
    let taken = Arc::clone(&request.taken);
    // This send's own TTL (`lasts`), not the request's first: the attempts
    // of one wait share the request, and a later one may set a longer TTL.
    let on = request.on.clone();
    let asked = Arc::clone(&request);
    // At a runtime's shutdown, with the reply on its way or the orphan's
    // give-back not done: the request settled by its latch, on a
    // connection of its own, once no send of it can run any more (see
    // `settle_at_shutdown`: a grant found given back, and nothing written
    // for a request never granted). After a give-back that went
    // through, the latch shows no grant any more (the give-back's script
    // closed it, see `Taken::give_back`): the rescue gives nothing back
    // twice, nor releases the owner's next hold.
    let rescue = {
        let (taken, latch) = (Arc::clone(&taken), Arc::clone(&request.latch));
        let (since, sends_end) = (request.born, Arc::clone(&request.sends_end));
        on.rescue(move |on| {
            let (taken, key, ttl) = (Arc::clone(&taken), latch.key.clone(), latch.ttl);
            let sends_end = sends_end.load(Ordering::Acquire);
            settle_at_shutdown(on, taken, (lasts, since), key, ttl, sends_end)
        })
    };
    let send = async move {
        let (build, decode) = (&build, &decode);
        let (latch, latch_ttl) = (request.latch.key.clone(), request.latch.ttl);
        let latch = &latch;
        let send = |mut conn: Conn, deadline: u64| async move {
            let invocation = build(latch, latch_ttl, deadline);
            decode(invocation.invoke_async(&mut conn).await?)
        };
        send_resending(&request, resend_until, lasts, answer, send).await
    };
    let orphan = move |reply: redis::RedisResult<R>| async move {
        let was_granted = reply.as_ref().is_ok_and(|r| answer(r) == Answer::Granted);
        // Granted by a send no earlier than the first that may have taken
        // it, and before this reply came.
        let granted = GrantedIn::between(asked.lease_start(asked.last_sent()), Instant::now());
        // The latch stands while the give-back names it.
        let latch = Arc::clone(&asked.latch);
        // The request is settled when its last holder lets it go: not held
        // here any longer than needed.
        drop(asked);
        if was_granted {
            let granted = match T::WANTS_GRANT_TIME {
                true => on_server(&on, &latch.key, latch.ttl, granted).await,
                false => granted,
            };
            let why = GiveBack::CallerLeft;
            // The latch is retired as its request says, closed or not.
            taken
                .give_back(&on, lasts, granted, Some(&latch), why)
                .await;
        }
        drop(latch);
        orphaned(was_granted).await;
    };
    Finish::new(runtime, send, orphan).rescued_by(rescue).await
}
