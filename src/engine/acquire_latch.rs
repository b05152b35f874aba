//! What the retry-safe acquires of the locks and the semaphores share.
//!
//! Every acquire script takes an *acquire latch* key named by its request
//! id: a resend of the same request counts once, and a request whose
//! replies were all lost is settled here, by that latch (one [`cancel`],
//! now or in the background). Both send their requests by [`send`], whose
//! [`Sending`] is each one's policy as data, so a lost reply is resent
//! alike. The attempts of one wait share one [`Request`] (kept in a
//! [`RequestSlot`]); what a grant took, and its one give-back, is the
//! [`Taken`] of each synchronizer.

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::ScriptInvocation;
use tokio::runtime::Handle;
use tokio::time::Instant;

use crate::client::conn::Conn;
use crate::engine::finish::{spawn_to_end, Finish};
use crate::engine::keys;
use crate::engine::request::{self, Resend};
use crate::engine::scripts::{ACQUIRE_CANCEL, ACQUIRE_GRANTED};
use crate::error::is_connection_failure;
use crate::Client;

/// One settle of a request whose replies were all lost, by its acquire
/// latch: closes the latch, so that a send arriving late changes nothing,
/// and says whether a send of it was granted (then what it took is the
/// caller's to give back, by [`give_back_lost`]): `Some` with when that
/// grant was made, by this client's clock. The latch TTL is the request's:
/// the grant wrote it with that TTL, and a closed latch keeps it too.
async fn cancel(
    conn: &mut Conn,
    latch: &str,
    latch_ttl: u64,
) -> redis::RedisResult<Option<GrantedIn>> {
    let sent = Instant::now();
    let (left, on_server): (i64, u64) = ACQUIRE_CANCEL
        .key(latch)
        .arg(latch_ttl)
        .invoke_async(conn)
        .await?;
    let answered = Instant::now();
    Ok(u64::try_from(left).ok().map(|left| GrantedIn {
        on_server: (left <= latch_ttl).then_some(on_server),
        ..granted_in(sent, answered, latch_ttl, left)
    }))
}

/// When a grant was made, by this client's clock, as a settle sent at
/// `sent` and answered at `answered` tells it, having found its latch
/// (written by the grant with a TTL of `latch_ttl` ms) with `left` ms to
/// live: the settle ran between the two, and the grant `latch_ttl - left`
/// ms before it by the server's clock (give or take the ms both are
/// truncated to, and a thousandth for the two clocks' rates).
///
/// A latch with more than `latch_ttl` left was lengthened by a parked
/// give-back of its grant (see `Latch::stretch`), and tells nothing of its
/// age: taken as the oldest it can be, a grant whose lease is surely over.
fn granted_in(sent: Instant, answered: Instant, latch_ttl: u64, left: u64) -> GrantedIn {
    let age = match left > latch_ttl {
        true => latch_ttl,
        false => latch_ttl - left,
    };
    let slack = age / 1000 + 2;
    let most = Duration::from_millis(age.saturating_add(slack));
    let least = Duration::from_millis(age.saturating_sub(slack));
    GrantedIn::between(
        sent.checked_sub(most).unwrap_or(sent),
        answered.checked_sub(least).unwrap_or(answered),
    )
}

/// When a grant was made, by this client's clock: no earlier than `from`,
/// no later than `by`. What it took lasts from then: until `from` plus its
/// TTL at least, and its count surely stood in its key from `by` on. A
/// grant found by its settle also knows when it ran by the server's clock
/// (`on_server`, ms since the Unix epoch, a ms or two after the TTL it
/// set), which compares with another grant's free of network delays.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct GrantedIn {
    pub(crate) from: Instant,
    pub(crate) by: Instant,
    pub(crate) on_server: Option<u64>,
}

impl GrantedIn {
    /// Between `from` and `by` (`from` when `by` is earlier).
    pub(crate) fn between(from: Instant, by: Instant) -> GrantedIn {
        GrantedIn {
            from,
            by: by.max(from),
            on_server: None,
        }
    }

    /// At `at`, as far as this client can tell.
    pub(crate) fn at(at: Instant) -> GrantedIn {
        GrantedIn::between(at, at)
    }
}

/// `granted` with the grant's server time, read from its latch
/// (`acquire_granted.lua`, which changes nothing): a hold given back after
/// its lease, by this client's clock, may still share its key with another
/// hold of its owner, which the two grants' server times tell where a late
/// reply blurs this client's. As it was when the latch is gone already
/// (deleted once its request was spent) or cannot be read.
async fn on_server(client: &Client, latch: &str, latch_ttl: u64, granted: GrantedIn) -> GrantedIn {
    let read: redis::RedisResult<(i64, u64)> = ACQUIRE_GRANTED
        .key(latch)
        .arg(latch_ttl)
        .invoke_async(&mut client.conn())
        .await;
    match read {
        // Not a lengthened latch (see `granted_in`), whose age is unknown.
        Ok((left, at)) if (0..=latch_ttl as i64).contains(&left) => GrantedIn {
            on_server: Some(at),
            ..granted
        },
        _ => granted,
    }
}

/// What a request whose replies were lost took, and when: no earlier than
/// its first lost send, nor than its settle learnt.
fn grant_lasts((lasts, since): (Lasts, Instant), granted: GrantedIn) -> (Lasts, GrantedIn) {
    let bounded = GrantedIn::between(since.max(granted.from), granted.by);
    (
        lasts,
        GrantedIn {
            on_server: granted.on_server,
            ..bounded
        },
    )
}

/// Gives back what a request whose replies were lost took (its send was
/// granted after all), naming its latch as the give-back's grant, then
/// closes the latch: another of its sends may still reach Redis. A
/// give-back parked for later (see `give_back_hold`) keeps the latch as it
/// is, and it is closed when that one goes.
async fn give_back_lost<T: Taken>(
    client: Client,
    name: Arc<str>,
    taken: Arc<T>,
    (lasts, granted): (Lasts, GrantedIn),
    latch: Arc<Latch>,
) {
    tracing::debug!(%name, "an acquire whose reply was lost was granted; giving it back");
    taken
        .give_back(
            &client,
            &name,
            lasts,
            granted,
            Some(&latch),
            GiveBack::ReplyLost,
        )
        .await;
    match Arc::try_unwrap(latch) {
        Ok(latch) => close(&client, &name, &latch.key, latch.ttl).await,
        Err(parked) => parked.retire_when_let_go(true),
    }
}

/// Closes a request's latch (`x`, for `latch_ttl` ms) once nothing is
/// left to settle: a send of it that still reaches Redis changes nothing
/// and says so, and a second settle of it gives nothing back twice. Sent
/// again after a connection failure, on the `SETTLE_LOST` schedule, for
/// as long as the latch may live (the settles of other requests beside it
/// may lose their replies, each loss cutting the connection this one goes
/// on: sent once, it was lost so now and then). Then best effort: a latch
/// left granted makes a late send change nothing too (every acquire
/// script takes nothing anew for it), and is settled once as long as its
/// settle is not started twice.
async fn close(client: &Client, name: &str, latch: &str, latch_ttl: u64) {
    let deadline = Instant::now() + Duration::from_millis(latch_ttl);
    let go_on = |_: &redis::RedisError| Instant::now() < deadline;
    let closed: redis::RedisResult<()> = request::send(
        Resend::settle(),
        "closing a spent request's latch",
        name,
        go_on,
        |_| {
            let mut conn = client.conn();
            let mut set = redis::cmd("SET");
            set.arg(latch).arg("x").arg("PX").arg(latch_ttl);
            async move { set.query_async(&mut conn).await }
        },
    )
    .await;
    if let Err(err) = closed {
        tracing::debug!(%name, error = %err,
            "could not close a spent request's latch; it answers late sends alike");
    }
}

/// Settles a request whose replies were all lost in the background, once
/// nobody sends it any more: [`cancel`], tried on the `SETTLE_LOST`
/// schedule for as long as the latch lives, and a grant found given back.
async fn settle_lost<T: Taken>(
    client: Client,
    conn: Conn,
    name: Arc<str>,
    taken: Arc<T>,
    lost: (Lasts, Instant),
    latch: String,
    latch_ttl: u64,
) {
    let deadline = Instant::now() + Duration::from_millis(latch_ttl);
    let go_on = |_: &redis::RedisError| Instant::now() < deadline;
    let (conn, latch_key) = (&conn, latch.as_str());
    let settled = request::send(
        Resend::settle().after_a_pause(),
        "settle check",
        &name,
        go_on,
        move |_| {
            let mut conn = conn.clone();
            async move { cancel(&mut conn, latch_key, latch_ttl).await }
        },
    )
    .await;
    match settled {
        Ok(None) => {}
        Ok(Some(granted)) => {
            let lost = grant_lasts(lost, granted);
            let latch = Arc::new(Latch::new(
                &client,
                &name,
                latch,
                latch_ttl,
                Handle::current(),
            ));
            give_back_lost(client, name, taken, lost, latch).await;
        }
        Err(err) if is_connection_failure(&err) => {
            tracing::warn!(%name, error = %err,
                "could not learn whether a request whose reply was lost took a hold or permits; \
                 a hold expires with its lease");
        }
        Err(err) => {
            tracing::warn!(%name, error = %err, "could not settle a request whose reply was lost");
        }
    }
}

/// The error of a send whose script ran after its deadline, and so took
/// nothing (the scripts reply [`LATE`]): its reply came later than its
/// caller waits for, as a timed-out reply would, and it is treated alike
/// (resent while the wait allows).
pub(crate) fn late() -> redis::RedisError {
    std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        "the acquire ran after its caller gave up on it, and took nothing",
    )
    .into()
}

/// What an acquire script replies when it ran after its send's deadline
/// (the fenced lock's: `{0, LATE}`).
pub(crate) const LATE: i64 = -5;

/// Why a grant is given back: its caller left before the reply came, or
/// every reply of its request was lost.
#[derive(Debug, Clone, Copy)]
pub(crate) enum GiveBack {
    /// The caller's future was dropped after the request was sent, and Redis
    /// granted it.
    CallerLeft,
    /// No reply came; settling the request found it granted.
    ReplyLost,
    /// Replica sync is on and too few replicas acknowledged the grant.
    Unsynced,
    /// A grant whose reply came so late that its first renewal was due
    /// could not be confirmed (a lock's, in watchdog mode).
    Unconfirmed,
}

impl GiveBack {
    /// For the log line of a give-back that failed.
    pub(crate) fn why(self) -> &'static str {
        match self {
            GiveBack::CallerLeft => "the caller left before the grant arrived",
            GiveBack::ReplyLost => "the reply of the grant was lost",
            GiveBack::Unsynced => "too few replicas acknowledged the grant",
            GiveBack::Unconfirmed => "a late grant could not be confirmed",
        }
    }
}

/// How long what a grant takes lasts on the server: a send whose reply was
/// lost may have taken it for that long, and a lock's give-back restores
/// it as the key's TTL.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Lasts {
    /// A TTL of this many ms (a lock's hold, a leased permit).
    Ms(u64),
    /// Until given back (a semaphore's permits, a permit without a lease).
    UntilReleased,
}

impl Lasts {
    /// The TTL in ms; `None` for what lasts until given back.
    pub(crate) fn ms(self) -> Option<u64> {
        match self {
            Lasts::Ms(ms) => Some(ms),
            Lasts::UntilReleased => None,
        }
    }
}

/// What a granted acquire took (a hold, permits, a permit by id), and how
/// to give it back when nobody will own it.
pub(crate) trait Taken: Send + Sync + 'static {
    /// Whether its give-back stands by other grants of the same owner, and
    /// so wants to know when a grant whose caller left ran by the server's
    /// clock (a lock's hold); permits stand alone.
    const WANTS_GRANT_TIME: bool = false;

    /// Undoes one grant of the request on `name`; `lasts` is how long the
    /// longest grant of a send of it lasts (a lock's give-back restores it
    /// as the TTL), and `granted` when it began to (no earlier than the
    /// first send that may have taken it): a lock's hold surely stands
    /// until `granted.from` + `lasts` by this client's clock, and its
    /// give-back is not sent after that (the owner may hold the lock anew
    /// by then) unless another hold of the owner that shared its key
    /// stands still. `grant` is the latch of the request granted, when
    /// the give-back may name it (a lock's releases only while it shows
    /// the grant); a give-back that must outlive it keeps the `Arc`. Logs
    /// its own failure, saying `why`.
    fn give_back(
        &self,
        client: &Client,
        name: &str,
        lasts: Lasts,
        granted: GrantedIn,
        grant: Option<&Arc<Latch>>,
        why: GiveBack,
    ) -> impl Future<Output = ()> + Send;
}

/// What a granted request took, between its grant and its handing out (the
/// replicas' acknowledgement is awaited in between): given back in the
/// background if dropped unclaimed, when the caller left or its wait's
/// time ran out meanwhile. For what lasts until given back (the
/// semaphores' permits): its give-back says [`Lasts::UntilReleased`], and
/// a lock's hold, which restores a TTL, does not go through it.
pub(crate) struct Unclaimed<T: Taken> {
    client: Client,
    name: Arc<str>,
    taken: Option<T>,
    runtime: Handle,
}

impl<T: Taken> Unclaimed<T> {
    pub(crate) fn new(client: &Client, name: &Arc<str>, taken: T, runtime: Handle) -> Self {
        Unclaimed {
            client: client.clone(),
            name: Arc::clone(name),
            taken: Some(taken),
            runtime,
        }
    }

    /// It is the caller's now.
    pub(crate) fn claim(mut self) {
        self.taken = None;
    }

    /// Gives it back now, for `why`; cancel safe (once started, the
    /// give-back goes on in the background).
    pub(crate) async fn give_back(mut self, why: GiveBack) {
        if let Some(taken) = self.taken.take() {
            let (client, name) = (self.client.clone(), Arc::clone(&self.name));
            let give_back = async move {
                taken
                    .give_back(
                        &client,
                        &name,
                        Lasts::UntilReleased,
                        GrantedIn::at(Instant::now()),
                        None,
                        why,
                    )
                    .await
            };
            Finish::detached(self.runtime.clone(), give_back).await;
        }
    }
}

impl<T: Taken> Drop for Unclaimed<T> {
    fn drop(&mut self) {
        if let Some(taken) = self.taken.take() {
            let (client, name) = (self.client.clone(), Arc::clone(&self.name));
            self.runtime.spawn(async move {
                taken
                    .give_back(
                        &client,
                        &name,
                        Lasts::UntilReleased,
                        GrantedIn::at(Instant::now()),
                        None,
                        GiveBack::CallerLeft,
                    )
                    .await;
            });
        }
    }
}

/// A request's acquire latch, shared by the request and the give-backs of
/// what it took: a lock's give-back names it, and releases only while it
/// shows the grant, so it stands until every give-back is done. Once the
/// request is spent, the last to let it go retires it: deletes it, or
/// closes it (`x`) when a send of the request got no reply (a copy may
/// still reach Redis, and must take nothing).
pub(crate) struct Latch {
    client: Client,
    name: Arc<str>,
    /// The key.
    pub(crate) key: String,
    /// Its TTL (ms).
    pub(crate) ttl: u64,
    /// How it is retired when let go: `None` while nothing is decided (its
    /// settle, or nobody, closes it), `Some(closed)` once its request is
    /// spent.
    retire: Mutex<Option<bool>>,
    runtime: Handle,
}

impl std::fmt::Debug for Latch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Latch")
            .field("key", &self.key)
            .field("ttl", &self.ttl)
            .finish_non_exhaustive()
    }
}

impl Latch {
    fn new(client: &Client, name: &Arc<str>, key: String, ttl: u64, runtime: Handle) -> Self {
        Latch {
            client: client.clone(),
            name: Arc::clone(name),
            key,
            ttl,
            retire: Mutex::new(None),
            runtime,
        }
    }

    /// When the last user lets it go, it is closed (`closed`) or deleted.
    fn retire_when_let_go(&self, closed: bool) {
        let mut retire = self.retire.lock().unwrap_or_else(|p| p.into_inner());
        *retire = Some(retire.unwrap_or(false) || closed);
    }

    /// Makes it live at least until `until` (a give-back parked until then
    /// names it; the latch's own TTL may end sooner): best effort, as a
    /// `PTTL` and a `PEXPIRE` that only lengthens it (a shorter TTL would
    /// let a late send of its request count again). Nothing is written
    /// when it is gone.
    pub(crate) async fn stretch(&self, until: Instant) {
        let want = until.saturating_duration_since(Instant::now());
        let want = u64::try_from(want.as_millis()).unwrap_or(u64::MAX).max(1);
        let mut conn = self.client.conn();
        let left: redis::RedisResult<i64> = redis::cmd("PTTL")
            .arg(&self.key)
            .query_async(&mut conn)
            .await;
        let stretched: redis::RedisResult<()> = match left {
            // Gone (-2), or shorter than wanted: a latch always has a TTL.
            Ok(left) if left >= 0 && (left as u64) < want => {
                redis::cmd("PEXPIRE")
                    .arg(&self.key)
                    .arg(want)
                    .query_async(&mut conn)
                    .await
            }
            Ok(_) => Ok(()),
            Err(err) => Err(err),
        };
        if let Err(err) = stretched {
            tracing::debug!(name = %self.name, error = %err,
                "could not keep a parked give-back's latch; the give-back finds it gone \
                 once it expires, and its hold then ends with its TTL");
        }
    }
}

impl Drop for Latch {
    fn drop(&mut self) {
        let retire = self.retire.get_mut().unwrap_or_else(|p| p.into_inner());
        match retire.take() {
            None => {}
            Some(false) => self.client.sweeper().discard(std::mem::take(&mut self.key)),
            Some(true) => {
                let (client, name) = (self.client.clone(), Arc::clone(&self.name));
                let (latch, ttl) = (std::mem::take(&mut self.key), self.ttl);
                self.runtime
                    .spawn(async move { close(&client, &name, &latch, ttl).await });
            }
        }
    }
}

/// The acquire request of one wait, shared by its attempts: every send of
/// it carries its id, whose latch makes it count once however many sends
/// reach Redis (a resend of a granted request is answered as granted, or,
/// once what it took is gone, as [spent](Answer::Spent)). A
/// send whose reply is lost leaves the outcome unknown until a later send
/// of the same request answers; a request that is never granted while its
/// outcome is unknown is settled once, when its last user lets it go (the
/// wait, or an attempt finishing in the background).
pub(crate) struct Request<T: Taken> {
    client: Client,
    name: Arc<str>,
    taken: Arc<T>,
    /// The acquire latch.
    pub(crate) latch: Arc<Latch>,
    /// When it was made: before its first send, so before any grant.
    born: Instant,
    outcome: Mutex<Outcome>,
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
}

impl<T: Taken> Request<T> {
    /// A new request on `name` whose sends set at most `ttl_ms` (0 when
    /// what they take does not expire).
    pub(crate) fn new(
        client: &Client,
        name: &Arc<str>,
        taken: T,
        ttl_ms: u64,
        runtime: Handle,
    ) -> Self {
        let latch = keys::acquire_latch(name, &client.request_id());
        let latch_ttl = Self::latch_ttl(client.config(), ttl_ms);
        Request {
            client: client.clone(),
            name: Arc::clone(name),
            taken: Arc::new(taken),
            latch: Arc::new(Latch::new(client, name, latch, latch_ttl, runtime.clone())),
            born: Instant::now(),
            outcome: Mutex::new(Outcome::default()),
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
    /// What never expires by itself (`ttl_ms` 0: a semaphore's permits) is
    /// settled by the wait's next try, up to a look-again (a third of the
    /// watchdog timeout) after the attempt that lost a send, when the
    /// message that would wake it sooner is lost: the latch outlives that
    /// pause too. Were it shorter (a look-again of about two windows, a
    /// watchdog timeout near 100 s with the default timeouts), the settle
    /// would find no grant, and the permits a lost send took would never
    /// come back (found by the protocol model, `ferrisson-model`).
    fn latch_ttl(config: &crate::config::Config, ttl_ms: u64) -> u64 {
        let window = config.unlock_latch_ttl_ms();
        let settled_by = match ttl_ms {
            0 => u64::try_from(config.renewal_interval().as_millis()).unwrap_or(u64::MAX),
            _ => 0,
        };
        ttl_ms
            .max(window)
            .saturating_add(window)
            .saturating_add(settled_by)
    }

    /// Whether a new attempt setting `ttl_ms` may send this request again:
    /// not granted (nor spent) yet, within one resend window of its birth, and, after
    /// a lost send, within that send's TTL (while what it may have taken
    /// still stands, a resend's "granted" means that).
    fn reusable(&self, ttl_ms: u64) -> bool {
        let config = self.client.config();
        let outcome = self.outcome.lock().unwrap_or_else(|p| p.into_inner());
        let window = config.unlock_latch_ttl_ms();
        let limit = match outcome.lost.and_then(Lasts::ms) {
            Some(lost) => window.min(lost),
            None => window,
        };
        !outcome.spent
            && self.born.elapsed() < Duration::from_millis(limit)
            && self.latch.ttl >= Self::latch_ttl(config, ttl_ms)
    }

    /// A send made at `sent` got no reply: perhaps it reached Redis and
    /// took what lasts `lasts`.
    pub(crate) fn lost(&self, lasts: Lasts, sent: Instant) {
        let mut outcome = self.outcome.lock().unwrap_or_else(|p| p.into_inner());
        outcome.lost = Some(outcome.lost.map_or(lasts, |l| l.max(lasts)));
        outcome.lost_since = Some(outcome.lost_since.map_or(sent, |t| t.min(sent)));
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
        let mut conn = self.client.conn();
        let granted = cancel(&mut conn, &self.latch.key, self.latch.ttl).await?;
        let lost = {
            let mut outcome = self.outcome.lock().unwrap_or_else(|p| p.into_inner());
            outcome.lost.take().zip(outcome.lost_since)
        };
        if let (Some(granted), Some(lost)) = (granted, lost) {
            let lost = grant_lasts(lost, granted);
            // The request no longer says it is unsettled: once started, the
            // give-back goes on in the background if this call is dropped.
            let (client, name) = (self.client.clone(), Arc::clone(&self.name));
            let taken = Arc::clone(&self.taken);
            let latch = Arc::new(Latch::new(
                &self.client,
                &self.name,
                self.latch.key.clone(),
                self.latch.ttl,
                self.runtime.clone(),
            ));
            let give_back = give_back_lost(client, name, taken, lost, latch);
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
        let (client, name, taken) = (
            self.client.clone(),
            Arc::clone(&self.name),
            Arc::clone(&self.taken),
        );
        let (latch, latch_ttl) = (self.latch.key.clone(), self.latch.ttl);
        // Finished even when the runtime shuts down first (see
        // `spawn_to_end`): settling twice is harmless.
        let runtime = self.runtime.clone();
        spawn_to_end(&self.client, &runtime, move |conn| {
            let (client, name, taken, latch) = (
                client.clone(),
                Arc::clone(&name),
                Arc::clone(&taken),
                latch.clone(),
            );
            settle_lost(client, conn, name, taken, lost, latch, latch_ttl)
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
    /// setting `ttl_ms`, else a new one. An unsettled old request is
    /// settled first, so that what it took is never given back after the
    /// new request took its own (a lock's give-back would take the new
    /// hold's count). Cancel safe: an old request dropped mid-settle
    /// settles in the background.
    pub(crate) async fn get(
        &self,
        ttl_ms: u64,
        new: impl FnOnce() -> Request<T>,
    ) -> redis::RedisResult<Arc<Request<T>>> {
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
    let client = &request.client;
    // A lost reply is sent again within the wait (for a one-attempt call,
    // within one response timeout of it: see `Wait`), so that one dropped
    // connection does not fail it, and a server that does not answer costs
    // one timeout, not two.
    let go_on = |_: &redis::RedisError| resend_until.is_none_or(|until| Instant::now() < until);
    let send = &send;
    let reply = request::send(
        Resend::awaited(client.config()),
        "acquire",
        &request.name,
        go_on,
        move |_| async move {
            // When this send's caller gives up on its reply, by the
            // server's clock: run later, the script takes nothing. A server
            // that does not tell its clock gets nothing sent.
            let deadline = client.send_deadline(&request.latch.key).await?;
            let at = Instant::now();
            request
                .outcome
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .last_sent = Some(at);
            let reply = send(client.conn(), deadline).await;
            if matches!(&reply, Err(err) if is_connection_failure(err)) {
                // Perhaps it reached Redis: its outcome is unknown.
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
/// - reply lost: the request is resent at once, and by the wait's next
///   attempt; when the wait ends first, it is settled in the background by
///   its latch, and a grant found there is given back;
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
    let (client, name) = (request.client.clone(), Arc::clone(&request.name));
    let asked = Arc::clone(&request);
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
                true => on_server(&client, &latch.key, latch.ttl, granted).await,
                false => granted,
            };
            let why = GiveBack::CallerLeft;
            taken
                .give_back(&client, &name, lasts, granted, Some(&latch), why)
                .await;
        }
        drop(latch);
        orphaned(was_granted).await;
    };
    Finish::new(runtime, send, orphan).await
}
