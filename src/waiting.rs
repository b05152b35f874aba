//! The wait of every synchronizer: try, and while that fails, sleep until
//! a message on the object's channel (or a hint's time, or the deadline),
//! then try again; and the spin lock's wait, which has no channel.

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

use crate::{Backoff, Client, Result};

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

/// How long a waiter pauses after a try that found no connection.
const NO_CONNECTION_PAUSE: Duration = Duration::from_millis(100);

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
/// the waiter subscribes to `channel` and tries again before each wait, so
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
/// # Cancel safety
/// Cancel safe if each `attempt` is: a dropped wait leaves its
/// subscription at once.
pub(crate) async fn wait_on<T, F, Fut>(
    client: &Client,
    channel: Channel,
    deadline: Option<Instant>,
    mut attempt: F,
) -> Result<Option<T>>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Tried<T>>>,
{
    let Channel { name, broadcast } = channel;
    if let Tried::Done(done) = first_try(&mut attempt, &name, deadline).await? {
        return Ok(Some(done));
    }
    if expired(deadline, Instant::now()) {
        return Ok(None);
    }
    let pubsub = &client.inner.pubsub;
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
            // Without a deadline, a subscription connection that is down
            // is waited out like the command connection: pause, try
            // again, subscribe again.
            Err(err) if deadline.is_none() && err.may_wait_out() => {
                tracing::debug!(channel = %name, error = %err, "cannot subscribe; waiting to try again");
                tokio::time::sleep(NO_CONNECTION_PAUSE).await;
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
    let look_again = client.inner.config.renewal_interval();
    loop {
        let notified = subscription.notified();
        tokio::pin!(notified);
        // Registered before the try: a message published while the try is
        // in flight still wakes this waiter.
        notified.as_mut().enable();
        let pause = match attempt().await {
            Ok(Tried::Done(done)) => return Ok(Some(done)),
            Ok(Tried::Again(hint)) => hint.unwrap_or(look_again),
            // A try that met no connection mostly never left; one whose
            // reply was lost is settled with the request it sent (when the
            // wait lets that request go).
            Err(err) if err.may_wait_out() => {
                tracing::debug!(channel = %name, error = %err, "no connection; waiting to try again");
                NO_CONNECTION_PAUSE
            }
            Err(err) => return Err(err),
        };
        let Some(pause) = cut_to(deadline, pause) else {
            return Ok(None);
        };
        tokio::select! {
            _ = &mut notified => {}
            _ = tokio::time::sleep(pause) => {}
        }
    }
}

/// The wait of a spin lock: like [`wait_on`] without a channel, tries
/// spaced by `backoff`, each pause also cut to the hint of the last try
/// (the holder's TTL: the lock is free by then).
///
/// # Cancel safety
/// Cancel safe if each `attempt` is.
pub(crate) async fn spin<T, F, Fut>(
    backoff: Backoff,
    deadline: Option<Instant>,
    mut attempt: F,
) -> Result<Option<T>>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Tried<T>>>,
{
    let mut tried = first_try(&mut attempt, "spin lock", deadline).await?;
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
                    let Some(pause) = cut_to(deadline, NO_CONNECTION_PAUSE) else {
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
/// a deadline, and counts as a failed try when there is none.
async fn first_try<T, F, Fut>(
    attempt: &mut F,
    what: &str,
    deadline: Option<Instant>,
) -> Result<Tried<T>>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Tried<T>>>,
{
    match attempt().await {
        Err(err) if deadline.is_none() && err.may_wait_out() => {
            tracing::debug!(%what, error = %err, "no connection; waiting to try again");
            Ok(Tried::Again(Some(NO_CONNECTION_PAUSE)))
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
