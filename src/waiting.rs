//! The wait of the semaphores and the latch: try, and while that fails,
//! sleep until a message on the object's channel (or a hint's time, or the
//! deadline), then try again.

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

use crate::config::MAX_DURATION;
use crate::{Backoff, Client, Error, Result};

/// What one try gave.
pub(crate) enum Tried<T> {
    /// Done, with this.
    Done(T),
    /// Not yet; try again at the latest after this long (`None`: only a
    /// message, or the periodic look, can change it).
    Again(Option<Duration>),
}

/// How long a waiter pauses after a try that found no connection.
const NO_CONNECTION_PAUSE: Duration = Duration::from_millis(100);

/// Calls `attempt` until it is [`Tried::Done`] or `deadline` passes
/// (`Ok(None)`). The first try goes out without a subscription; after it,
/// the waiter subscribes to `channel`, whose every message wakes every
/// local waiter, and tries again before each wait, so a message sent
/// between a try and its wait is not missed. A waiter with no hint looks
/// again every third of the client's watchdog timeout, in case a message
/// was lost. Connection failures are waited out (100 ms pauses), but for
/// the first try of a call with a deadline, which returns them.
///
/// # Cancel safety
/// Cancel safe if each `attempt` is: a dropped wait leaves its
/// subscription at once.
pub(crate) async fn wait_on<T, F, Fut>(
    client: &Client,
    channel: String,
    deadline: Option<Instant>,
    mut attempt: F,
) -> Result<Option<T>>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Tried<T>>>,
{
    let expired = |now: Instant| deadline.is_some_and(|d| now >= d);
    match attempt().await {
        Ok(Tried::Done(done)) => return Ok(Some(done)),
        Ok(Tried::Again(_)) => {}
        Err(err) if deadline.is_none() && err.may_wait_out() => {
            tracing::debug!(%channel, error = %err, "no connection; waiting to try again");
        }
        Err(err) => return Err(err),
    }
    if expired(Instant::now()) {
        return Ok(None);
    }
    let subscribe = client.inner.pubsub.subscribe_broadcast(channel);
    let subscription = match deadline {
        Some(deadline) => match tokio::time::timeout_at(deadline, subscribe).await {
            Ok(subscription) => subscription?,
            Err(_) => return Ok(None),
        },
        None => subscribe.await?,
    };
    let look_again = client.inner.config.renewal_interval();
    loop {
        let notified = subscription.notified();
        tokio::pin!(notified);
        // Registered before the try: a message published while the try is
        // in flight still wakes this waiter.
        notified.as_mut().enable();
        let mut pause = match attempt().await {
            Ok(Tried::Done(done)) => return Ok(Some(done)),
            Ok(Tried::Again(hint)) => hint.unwrap_or(look_again).min(look_again),
            Err(err) if err.may_wait_out() => NO_CONNECTION_PAUSE,
            Err(err) => return Err(err),
        };
        let now = Instant::now();
        if expired(now) {
            return Ok(None);
        }
        if let Some(deadline) = deadline {
            pause = pause.min(deadline - now);
        }
        tokio::select! {
            _ = &mut notified => {}
            _ = tokio::time::sleep(pause) => {}
        }
    }
}

/// The deadline of a wait, checked.
pub(crate) fn deadline(wait: Option<Duration>) -> Result<Option<Instant>> {
    match wait {
        Some(wait) if wait > MAX_DURATION => Err(Error::invalid(format!(
            "wait must be at most {MAX_DURATION:?}, got {wait:?}"
        ))),
        Some(wait) => Ok(Some(Instant::now() + wait)),
        None => Ok(None),
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
