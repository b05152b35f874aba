//! Give-backs nobody waits on: a hold or permits an acquire took for a
//! caller that never got them (it left, its wait ran out, the reply was
//! lost, the replicas did not acknowledge), and the release of a dropped
//! guard or permit. Each is resent, with backoff, until it gets through or
//! until what it gives back has surely ended on the server (a lock's hold:
//! until its lease has run out by this client's clock, after which the
//! owner may hold the lock anew): a network cut longer than a few sends
//! must not leave a hold behind until it expires, nor forever what never
//! expires.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::runtime::Handle;
use tokio::time::Instant;

use super::resend::{resend, Resend};
use crate::config::Config;
use crate::engine::finish::Finish;
use crate::engine::object::Object;
use crate::engine::watchdog::drift_margin;

use super::latch::Latch;

/// How long a give-back of what never expires (a semaphore's permits, a
/// permit taken without a lease) is resent, at most: an hour. Its latch,
/// which makes the resends safe, lives that long too.
pub(crate) const NEVER_EXPIRES: Duration = Duration::from_secs(3600);

/// By when what lasted `lease` from `from` (seen from this client: the
/// moment Redis ran the command that set it is no later) has surely ended
/// on the server: the lease, one response timeout for the reply that told
/// of it, and a drift margin (a tenth of the lease, at most 1 s).
pub(crate) fn surely_ended(config: &Config, from: Instant, lease: Duration) -> Instant {
    from + lease + config.response_timeout + drift_margin(lease)
}

/// Sends a give-back with `send` (given how long its latch must live, in
/// ms, to cover every resend of it) until it gets a reply, fails for a
/// reason a resend cannot mend, or `until` has passed. Resends of one
/// give-back must be safe: a latch, or an idempotent command.
pub(crate) async fn resend_until<T, F, Fut>(
    config: &Config,
    name: &str,
    until: Instant,
    mut send: F,
) -> redis::RedisResult<T>
where
    F: FnMut(u64) -> Fut,
    Fut: Future<Output = redis::RedisResult<T>>,
{
    let go_on = |_: &redis::RedisError| Instant::now() < until;
    resend(Resend::until_through(), "a give-back", name, go_on, |_| {
        send(latch_ttl_ms(config, until))
    })
    .await
}

/// How long the latch of a give-back resent until `until` must live when
/// it is written now: past `until`, by one release's resend window (a send
/// still in flight then may run later).
pub(crate) fn latch_ttl_ms(config: &Config, until: Instant) -> u64 {
    let window = config.unlock_latch_ttl_ms();
    let left = until.saturating_duration_since(Instant::now()).as_millis();
    u64::try_from(left)
        .unwrap_or(u64::MAX)
        .saturating_add(window)
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

/// What keeps an owner's calls of a lock from going lean while it lives
/// (see [`Taken::keep_latched`]).
pub(crate) type KeepsLatched = Box<dyn Send + Sync>;

/// What a granted acquire took (a hold, permits, a permit by id), and how
/// to give it back when nobody will own it.
pub(crate) trait Taken: Send + Sync + 'static {
    /// Whether its give-back stands by other grants of the same owner, and
    /// so wants to know when a grant whose caller left ran by the server's
    /// clock (a lock's hold); permits stand alone.
    const WANTS_GRANT_TIME: bool = false;

    /// A send of its acquire on `on` lost its reply, and may still run:
    /// what keeps the owner's calls of the same lock from going lean until
    /// the request is settled or answered (a lean acquire would take the
    /// hold the lost send took as its own, and the request's give-back
    /// then take it away). `None` where no lean call meets it: permits,
    /// holds of the read-write lock's layout, a client not asked for the
    /// lean protocol. Each kind says (no default: a new one must).
    fn keep_latched(&self, on: &Object) -> Option<KeepsLatched>;

    /// Undoes one grant of the request on `on`; `lasts` is how long the
    /// longest grant of a send of it lasts (a lock's give-back restores it
    /// as the TTL), and `granted` when it began to (no earlier than the
    /// first send that may have taken it): a lock's hold surely stands
    /// until `granted.from` + `lasts` by this client's clock, and its
    /// give-back is not sent after that (the owner may hold the lock anew
    /// by then) unless another hold of the owner that shared its key
    /// stands still. `grant` is the latch of the request granted, when
    /// the give-back may name it (a lock's releases only while it shows
    /// the grant); a give-back that must outlive it keeps the `Arc`. Logs
    /// its own failure, saying `why`. Whether `grant` needs no close of
    /// its own: the give-back's script closed it (`x`), so that a settle
    /// of the request run again finds nothing to give back, or found it
    /// gone (past its TTL, which outlasts every send's deadline: a late
    /// send of the request changes nothing).
    ///
    /// It may run again from its start, on a connection of its own, when
    /// its runtime shut down before it ended (see `Finish::rescued_by`),
    /// after any part of the first run: a second run must give nothing
    /// back twice (a settle run again finds the grant closed by the
    /// first; permits: one give-back id per grant, whose latch stays while
    /// another run may send).
    fn give_back(
        &self,
        on: &Object,
        lasts: Lasts,
        granted: GrantedIn,
        grant: Option<&Arc<Latch>>,
        why: GiveBack,
    ) -> impl Future<Output = bool> + Send;
}

/// What a granted request took, between its grant and its handing out (the
/// replicas' acknowledgement is awaited in between): given back in the
/// background if dropped unclaimed, when the caller left or its wait's
/// time ran out meanwhile. For what lasts until given back (the
/// semaphores' permits): its give-back says [`Lasts::UntilReleased`], and
/// a lock's hold, which restores a TTL, does not go through it.
pub(crate) struct Unclaimed<T: Taken> {
    on: Object,
    taken: Option<Arc<T>>,
    runtime: Handle,
}

impl<T: Taken> Unclaimed<T> {
    pub(crate) fn new(on: &Object, taken: T, runtime: Handle) -> Self {
        Unclaimed {
            on: on.clone(),
            taken: Some(Arc::new(taken)),
            runtime,
        }
    }

    /// It is the caller's now.
    pub(crate) fn claim(mut self) {
        self.taken = None;
    }

    /// Gives it back now, for `why`; cancel safe (once started, the
    /// give-back goes on in the background, and is finished at a runtime's
    /// shutdown, see [`Finish::rescued_by`]).
    pub(crate) async fn give_back(mut self, why: GiveBack) {
        let Some(taken) = self.taken.take() else {
            return;
        };
        let granted = GrantedIn::at(Instant::now());
        let work = move |on| give_back_on(on, Arc::clone(&taken), granted, why);
        let first = work(self.on.clone());
        Finish::detached(self.runtime.clone(), first)
            .rescued_by(self.on.rescue(work))
            .await;
    }
}

/// One run of an unclaimed grant's give-back, on `on`: what a drop, an
/// awaited give-back and their rescues run alike (safe to run twice, see
/// [`Taken::give_back`]).
async fn give_back_on<T: Taken>(on: Object, taken: Arc<T>, granted: GrantedIn, why: GiveBack) {
    taken
        .give_back(&on, Lasts::UntilReleased, granted, None, why)
        .await;
}

impl<T: Taken> Drop for Unclaimed<T> {
    fn drop(&mut self) {
        let Some(taken) = self.taken.take() else {
            return;
        };
        // Finished even when the runtime shuts down first (see
        // `spawn_to_end`): each give-back is safe to run twice.
        let (granted, why) = (GrantedIn::at(Instant::now()), GiveBack::CallerLeft);
        self.on.spawn_to_end(&self.runtime, move |on| {
            give_back_on(on, Arc::clone(&taken), granted, why)
        });
    }
}
