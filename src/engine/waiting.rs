//! The wait of every synchronizer: try, and while that fails, sleep until
//! a message on the object's channel (or a hint's time, or the deadline),
//! then try again; and the spin lock's wait, which has no channel.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::time::Instant;

use crate::client::pubsub::{Subscription, TakenWake};
use crate::engine::backoff::{NO_CONNECTION, SOON};
use crate::{args, Backoff, Client, Error, Result};

/// What one try gave.
pub(crate) enum Tried<T> {
    /// Done, with this.
    Done(T),
    /// Not yet; try again at the latest after this long, when the object
    /// frees itself (a lock's TTL, a permit's lease). `None`: only a
    /// message can change it, so the waiter looks again every third of the
    /// client's watchdog timeout, in case a message was lost.
    Again(Option<Duration>),
}

impl<T> Tried<T> {
    /// Held by another for `pttl` ms, as Redis's PTTL says (-1: no TTL):
    /// free by then, or on a message.
    pub(crate) fn after_pttl(pttl: i64) -> Tried<T> {
        match u64::try_from(pttl) {
            Ok(0) => Tried::soon(),
            Ok(ms) => Tried::Again(Some(Duration::from_millis(ms))),
            Err(_) => Tried::Again(None),
        }
    }

    /// Not yet, but try again at once.
    pub(crate) fn soon() -> Tried<T> {
        Tried::Again(Some(SOON))
    }
}

/// The time limits of one call that waits (an acquire, a latch's wait).
///
/// - With a wait (`try_lock_for(w)`, `w > 0`): no try starts after the
///   wait, and the call returns by its end plus a small margin (see
///   [`margin`]) whatever the server does. A try still in flight then is
///   left to finish in the background, where what it took is given back
///   (see the acquire latch).
/// - Without one (`try_lock()`, a zero wait): one try, whose sends are
///   repeated after a failed connection only within one response timeout
///   of the call; the call returns by then, plus replica sync's waits (the
///   acquire's, and a give-back's when too few replicas acknowledged).
/// - As long as it takes (`None`): no limit.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Wait {
    /// No try starts after it.
    pub(crate) deadline: Option<Instant>,
    /// The call returns by then.
    pub(crate) bound: Option<Instant>,
    /// A send that met a failed connection is sent again only before it.
    pub(crate) resend_until: Option<Instant>,
}

impl Wait {
    /// The limits of a call on `client` that waits `wait` from now
    /// (`None`: as long as it takes); a wait over
    /// [`MAX_DURATION`](crate::config::MAX_DURATION) is refused.
    pub(crate) fn new(client: &Client, wait: Option<Duration>) -> Result<Wait> {
        let now = Instant::now();
        let deadline = args::deadline(wait)?;
        let config = client.config();
        Ok(match (wait, deadline) {
            (Some(wait), Some(deadline)) if !wait.is_zero() => Wait {
                deadline: Some(deadline),
                bound: Some(deadline + margin(wait).min(config.response_timeout)),
                resend_until: Some(deadline),
            },
            (Some(_), deadline) => {
                let sync = config.replica_sync.map_or(Duration::ZERO, |s| s.timeout);
                let one_send = now + config.response_timeout;
                Wait {
                    deadline,
                    bound: Some(one_send + sync * 2),
                    resend_until: Some(one_send),
                }
            }
            (None, _) => Wait {
                deadline: None,
                bound: None,
                resend_until: None,
            },
        })
    }
}

/// How long past the end of a wait of `wait` a call waits for the reply of
/// its try still in flight, and for its clean-up (a fair waiter's leave of
/// the queue, the releases of a multi-lock or RedLock that did not get them
/// all), before leaving them to finish in the background: a tenth of the
/// wait, between 100 ms and 1 s (never more than the response timeout, for
/// one client's calls). So a wait shorter than a round trip to Redis still
/// has its one try answered.
pub(crate) fn margin(wait: Duration) -> Duration {
    (wait / 10).clamp(Duration::from_millis(100), Duration::from_secs(1))
}

/// Runs `call` until `bound` (`None`: to its end); `None` when the bound
/// passed first (the call is dropped: it must be cancel safe).
pub(crate) async fn until<T>(bound: Option<Instant>, call: impl Future<Output = T>) -> Option<T> {
    match bound {
        Some(bound) => tokio::time::timeout_at(bound, call).await.ok(),
        None => Some(call.await),
    }
}

/// Runs `waiting` (a wait whose tries set `answered` once one of them had a
/// reply) until `bound`. Past it the wait is dropped: what its try in
/// flight sent finishes in the background (every try is cancel safe), and
/// the call ends with `Ok(None)` when a try had its reply (the wait ran
/// out), or a timeout error when none had (nothing is known of the object).
async fn bounded<T>(
    bound: Option<Instant>,
    answered: &AtomicBool,
    waiting: impl Future<Output = Result<Option<T>>>,
) -> Result<Option<T>> {
    let Some(bound) = bound else {
        return waiting.await;
    };
    match tokio::time::timeout_at(bound, waiting).await {
        Ok(done) => done,
        Err(_) if answered.load(Ordering::Acquire) => Ok(None),
        Err(_) => Err(no_reply()),
    }
}

/// The error of a call whose time ran out before any reply: a timeout, so
/// a connection error ([`Error::is_connection_error`]).
pub(crate) fn no_reply() -> Error {
    Error::Redis(redis::RedisError::from(std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        "no reply from Redis within the call's time; its request is settled in the background",
    )))
}

/// Which channel a waiter listens on.
pub(crate) struct Channel {
    /// The channel's name.
    pub(crate) name: String,
    /// Whether every message wakes every local waiter (a semaphore's new
    /// count, a latch's zero) rather than one (a lock's release).
    pub(crate) broadcast: bool,
}

/// Calls `attempt` until it is [`Tried::Done`] or `deadline` passes
/// (`Ok(None)`). The first try goes out without a subscription; after it,
/// the waiter subscribes to `channel` (made then: a call whose first try
/// succeeds never names it) and tries again before each wait, so
/// a message sent between a try and its wait is not missed. A waiter also
/// tries again when the try's hint says (see [`Tried::Again`]): a lost
/// message costs at most that long. Bounding a lock waiter by a third of
/// the watchdog timeout as well made the long torture run (160 000
/// acquisitions) a third slower, so the hint alone bounds it, as in
/// Redisson.
///
/// A moment without a connection (a cut, a restart, a failover) is waited
/// out: a try or a subscription that meets one pauses 100 ms and tries
/// again. Only the first try of a call with a deadline returns it, so that
/// a `try_lock_for` on a dead server fails with its first try (the sends
/// that try makes, see `release_attempts`) rather than at the end of its
/// wait.
///
/// The call returns by `wait`'s bound whatever the server does (see
/// [`Wait`]).
///
/// # Cancel safety
/// Cancel safe if each `attempt` is: a dropped wait leaves its
/// subscription at once.
pub(super) async fn wait_on<T, F, Fut>(
    client: &Client,
    channel: impl Fn() -> Channel,
    wait: Wait,
    attempt: F,
) -> Result<Option<T>>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Tried<T>>>,
{
    let answered = AtomicBool::new(false);
    let waiting = wait_on_in(client, channel, wait.deadline, attempt, &answered);
    bounded(wait.bound, &answered, waiting).await
}

/// [`wait_on`] without its bound.
async fn wait_on_in<T, F, Fut>(
    client: &Client,
    channel: impl Fn() -> Channel,
    deadline: Option<Instant>,
    mut attempt: F,
    answered: &AtomicBool,
) -> Result<Option<T>>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Tried<T>>>,
{
    // The channel's name is made only for a wait that needs it: most
    // first tries succeed.
    let what = || channel().name;
    if let Tried::Done(done) = first_try(&mut attempt, what, deadline, answered).await? {
        return Ok(Some(done));
    }
    // Boxed: the wait is far larger than the first try, and every call's
    // future (moved as it is made and awaited) would carry it.
    Box::pin(wait_subscribed(client, channel, deadline, attempt)).await
}

/// [`wait_on_in`] after a first try that did not succeed: subscribe, try
/// again, and watch.
async fn wait_subscribed<T, F, Fut>(
    client: &Client,
    channel: impl Fn() -> Channel,
    deadline: Option<Instant>,
    mut attempt: F,
) -> Result<Option<T>>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Tried<T>>>,
{
    let Channel { name, broadcast } = channel();
    if expired(deadline, Instant::now()) {
        return Ok(None);
    }
    let pubsub = &client.pubsub();
    let subscription = loop {
        let subscribe = async {
            match broadcast {
                true => pubsub.subscribe_broadcast(name.clone()).await,
                false => pubsub.subscribe(name.clone()).await,
            }
        };
        let subscribed = match deadline {
            Some(deadline) => match tokio::time::timeout_at(deadline, subscribe).await {
                Ok(subscribed) => subscribed,
                Err(_) => return Ok(None),
            },
            None => subscribe.await,
        };
        match subscribed {
            Ok(subscription) => break subscription,
            // A subscription connection that is down is waited out like
            // the command connection, with a deadline too (only the first
            // try returns a connection error): pause, try again,
            // subscribe again.
            Err(err) if err.may_wait_out() => {
                tracing::debug!(channel = %name, error = %err, "cannot subscribe; waiting to try again");
                let Some(pause) = cut_to(deadline, NO_CONNECTION) else {
                    return Ok(None);
                };
                tokio::time::sleep(pause).await;
                match attempt().await {
                    Ok(Tried::Done(done)) => return Ok(Some(done)),
                    Ok(Tried::Again(_)) => {}
                    Err(err) if err.may_wait_out() => {}
                    Err(err) => return Err(err),
                }
            }
            Err(err) => return Err(err),
        }
    };
    let look_again = client.config().renewal_interval();
    Watcher::subscribed(Channel { name, broadcast }, subscription, look_again)
        .watch(client, deadline, attempt)
        .await
}

/// A watch of a channel: the one loop that tries again on each message on
/// it, or when the last try's hint says, until a try is done. It serves
/// [`wait_on`] (subscribed before its loop) and the observers that keep
/// watching across calls (an election's: a watcher that subscribes by
/// itself, and watches on a timer alone while it cannot).
pub(crate) struct Watcher {
    channel: Channel,
    subscription: Option<Subscription>,
    /// When to try subscribing again after a failed try.
    subscribe_at: Instant,
    /// How long a try that gives no hint waits for a message.
    look_again: Duration,
}

/// What one round of a watch came to.
enum Round<T> {
    /// A try was done, or the deadline passed (`None`).
    Over(Option<T>),
    /// Waited for a message (`woken`), or the pause's end.
    Waited { woken: bool },
    /// Not subscribed: waits this long, or subscribes meanwhile.
    Unsubscribed(Duration),
}

impl Watcher {
    /// A watcher of `channel` that subscribes by itself (see
    /// [`Watcher::watch`]); a try without a hint waits `look_again`.
    pub(crate) fn new(channel: Channel, look_again: Duration) -> Watcher {
        Watcher {
            channel,
            subscription: None,
            subscribe_at: Instant::now(),
            look_again,
        }
    }

    /// A watcher of the channel `subscription` listens on.
    fn subscribed(channel: Channel, subscription: Subscription, look_again: Duration) -> Watcher {
        Watcher {
            channel,
            subscription: Some(subscription),
            subscribe_at: Instant::now(),
            look_again,
        }
    }

    /// Calls `attempt` until it is [`Tried::Done`] or `deadline` passes
    /// (`Ok(None)`), between tries waiting for a message on the channel,
    /// or the try's hint ([`Tried::Again`]). A message sent while a try is
    /// in flight still wakes it (the wake-up is registered before the
    /// try). A try that met no connection is tried again after a pause.
    /// Without a subscription, it subscribes when it is time (for at most
    /// the pause: a subscription that takes long does not hold up the next
    /// try; a failed one is tried again a look-again later), and waits on
    /// the timer alone meanwhile.
    ///
    /// A watch woken by a lock's release that ends before its next try
    /// was answered (dropped, its deadline, an error) passes the wake-up
    /// on to another waiter of the client (see [`TakenWake`]).
    ///
    /// # Cancel safety
    /// Cancel safe if each `attempt` is: the watcher keeps its
    /// subscription for the next call.
    pub(crate) async fn watch<T, F, Fut>(
        &mut self,
        client: &Client,
        deadline: Option<Instant>,
        mut attempt: F,
    ) -> Result<Option<T>>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<Tried<T>>>,
    {
        let mut owed = TakenWake::default();
        loop {
            let (round, answered) = self.round(deadline, &mut attempt).await?;
            if answered {
                owed.served();
            }
            match round {
                Round::Over(done) => return Ok(done),
                Round::Waited { woken: true } => {
                    // One owed at a time: this waiter tries next.
                    owed.served();
                    if let Some(subscription) = &self.subscription {
                        owed = subscription.took_wake();
                    }
                }
                Round::Waited { woken: false } => {}
                Round::Unsubscribed(pause) if Instant::now() >= self.subscribe_at => {
                    tokio::select! {
                        () = self.subscribe(client) => {}
                        () = tokio::time::sleep(pause) => {}
                    }
                }
                Round::Unsubscribed(pause) => tokio::time::sleep(pause).await,
            }
        }
    }

    /// One try, and the wait for a message after it; and whether the try
    /// was answered (done, or refused).
    async fn round<T, F, Fut>(
        &self,
        deadline: Option<Instant>,
        attempt: &mut F,
    ) -> Result<(Round<T>, bool)>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<Tried<T>>>,
    {
        let notified = self.subscription.as_ref().map(Subscription::notified);
        let mut notified = std::pin::pin!(notified);
        // Registered before the try: a message published while the try is
        // in flight still wakes this watcher.
        if let Some(notified) = notified.as_mut().as_pin_mut() {
            notified.enable();
        }
        let (pause, answered) = match attempt().await {
            Ok(Tried::Done(done)) => return Ok((Round::Over(Some(done)), true)),
            Ok(Tried::Again(hint)) => (hint.unwrap_or(self.look_again), true),
            // A try that met no connection mostly never left; one whose
            // reply was lost is settled with the request it sent (when the
            // wait lets that request go).
            Err(err) if err.may_wait_out() => {
                tracing::debug!(channel = %self.channel.name, error = %err,
                    "no connection; waiting to try again");
                (NO_CONNECTION, false)
            }
            Err(err) => return Err(err),
        };
        let Some(pause) = cut_to(deadline, pause) else {
            return Ok((Round::Over(None), answered));
        };
        let round = match notified.as_pin_mut() {
            Some(notified) => {
                let woken = tokio::select! {
                    () = notified => true,
                    () = tokio::time::sleep(pause) => false,
                };
                Round::Waited { woken }
            }
            None => Round::Unsubscribed(pause),
        };
        Ok((round, answered))
    }

    /// Subscribes to the channel, for at most a look-again; on failure,
    /// tries again a look-again later.
    async fn subscribe(&mut self, client: &Client) {
        let Channel { name, broadcast } = &self.channel;
        let pubsub = client.pubsub();
        let subscribe = async {
            match broadcast {
                true => pubsub.subscribe_broadcast(name.clone()).await,
                false => pubsub.subscribe(name.clone()).await,
            }
        };
        match tokio::time::timeout(self.look_again, subscribe).await {
            Ok(Ok(subscription)) => self.subscription = Some(subscription),
            Ok(Err(err)) => {
                tracing::debug!(channel = %name, error = %err,
                    "cannot subscribe; trying on a timer meanwhile");
                self.subscribe_at = Instant::now() + self.look_again;
            }
            Err(_) => {
                tracing::debug!(channel = %name,
                    "no answer to the subscription; trying on a timer meanwhile");
                self.subscribe_at = Instant::now() + self.look_again;
            }
        }
    }

    /// Leaves the channel (a watch that ended keeps nothing).
    pub(crate) fn stop(&mut self) {
        self.subscription = None;
    }
}

/// The wait of a spin lock: like [`wait_on`] without a channel, tries
/// spaced by `backoff`, each pause also cut to the hint of the last try
/// (the holder's TTL: the lock is free by then).
///
/// # Cancel safety
/// Cancel safe if each `attempt` is.
pub(crate) async fn spin<T, F, Fut>(backoff: Backoff, wait: Wait, attempt: F) -> Result<Option<T>>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Tried<T>>>,
{
    let answered = AtomicBool::new(false);
    let waiting = spin_in(backoff, wait.deadline, attempt, &answered);
    bounded(wait.bound, &answered, waiting).await
}

/// [`spin`] without its bound.
async fn spin_in<T, F, Fut>(
    backoff: Backoff,
    deadline: Option<Instant>,
    mut attempt: F,
    answered: &AtomicBool,
) -> Result<Option<T>>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Tried<T>>>,
{
    let mut tried = first_try(&mut attempt, || "spin lock".into(), deadline, answered).await?;
    let mut failed = 0u32;
    loop {
        let pause = match tried {
            Tried::Done(done) => return Ok(Some(done)),
            Tried::Again(hint) => {
                let pause = backoff.pause(failed);
                failed = failed.saturating_add(1);
                hint.map_or(pause, |hint| pause.min(hint + Duration::from_millis(1)))
            }
        };
        let Some(pause) = cut_to(deadline, pause) else {
            return Ok(None);
        };
        tokio::time::sleep(pause).await;
        tried = loop {
            match attempt().await {
                Ok(tried) => break tried,
                Err(err) if err.may_wait_out() => {
                    tracing::debug!(error = %err, "no connection; waiting to try again");
                    let Some(pause) = cut_to(deadline, NO_CONNECTION) else {
                        return Ok(None);
                    };
                    tokio::time::sleep(pause).await;
                }
                Err(err) => return Err(err),
            }
        };
    }
}

/// The first try of a wait: a connection failure is returned when there is
/// a deadline, and counts as a failed try when there is none. A reply
/// sets `answered`.
async fn first_try<T, F, Fut>(
    attempt: &mut F,
    what: impl Fn() -> String,
    deadline: Option<Instant>,
    answered: &AtomicBool,
) -> Result<Tried<T>>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Tried<T>>>,
{
    let tried = attempt().await;
    if tried.is_ok() {
        answered.store(true, Ordering::Release);
    }
    match tried {
        Err(err) if deadline.is_none() && err.may_wait_out() => {
            tracing::debug!(what = %what(), error = %err, "no connection; waiting to try again");
            Ok(Tried::Again(Some(NO_CONNECTION)))
        }
        tried => tried,
    }
}

fn expired(deadline: Option<Instant>, now: Instant) -> bool {
    deadline.is_some_and(|d| now >= d)
}

/// `pause` cut to what is left before `deadline`; `None` once it passed.
fn cut_to(deadline: Option<Instant>, pause: Duration) -> Option<Duration> {
    match deadline {
        None => Some(pause),
        Some(deadline) => {
            let now = Instant::now();
            (now < deadline).then(|| pause.min(deadline - now))
        }
    }
}

/// Sleeps the `round`-th pause of `backoff` before another try, cut to the
/// deadline; `false` (without sleeping) when the deadline has passed.
pub(crate) async fn pause_before_retry(
    backoff: &Backoff,
    round: &mut u32,
    deadline: Option<Instant>,
) -> bool {
    let mut pause = backoff.pause(*round);
    *round = round.saturating_add(1);
    if let Some(deadline) = deadline {
        let now = Instant::now();
        if now >= deadline {
            return false;
        }
        pause = pause.min(deadline - now);
    }
    tokio::time::sleep(pause).await;
    true
}
