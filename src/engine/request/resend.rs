//! How a retry-safe request is sent again: one loop, [`resend`], that every
//! resend of the crate goes through (an acquire's, a release's, a
//! give-back's, a settle's, a latch's close, a fair waiter's leave), each
//! with its [`Resend`] policy as data. What makes a resend safe (a latch,
//! or a command that does the same twice) is each request's own.

use std::future::Future;

use crate::config::Config;
use crate::engine::backoff::{Schedule, LEAVE_QUEUE, RESEND, SETTLE_LOST};
use crate::error::{is_connection_failure, may_get_through};

/// When a request is sent again, and how far apart.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Resend {
    /// The pause before each resend.
    schedule: Schedule,
    /// Sends at most, the first included; `None`: as long as time allows.
    sends: Option<u32>,
    /// Which failures a resend may mend.
    mends: fn(&redis::RedisError) -> bool,
    /// Whether the first send waits a pause too (a check of what a request
    /// whose reply was just lost did, which a send still in flight may yet
    /// change).
    pause_first: bool,
}

impl Resend {
    /// A request its caller awaits (an acquire, an `unlock`): after a
    /// failed connection, up to `release_attempts` sends.
    pub(crate) fn awaited(config: &Config) -> Resend {
        Resend {
            schedule: RESEND,
            sends: Some(config.release_attempts.max(1)),
            mends: is_connection_failure,
            pause_first: false,
        }
    }

    /// A give-back or a release nobody awaits: until it gets through, as
    /// long as time allows, also after a failover (a demoted master, a slot
    /// no node serves yet).
    pub(crate) fn until_through() -> Resend {
        Resend {
            schedule: RESEND,
            sends: None,
            mends: may_get_through,
            pause_first: false,
        }
    }

    /// A settle of a request whose replies were lost, and its latch's
    /// close: jittered on their own schedule (the settles of the requests
    /// that one cut lost start together, on one connection).
    pub(crate) fn settle() -> Resend {
        Resend {
            schedule: SETTLE_LOST,
            sends: None,
            mends: is_connection_failure,
            pause_first: false,
        }
    }

    /// A fair waiter's leave of the queue, resent in the background.
    pub(crate) fn leave_queue() -> Resend {
        Resend {
            schedule: LEAVE_QUEUE,
            sends: None,
            mends: is_connection_failure,
            pause_first: false,
        }
    }

    /// The same, with a pause before the first send too.
    pub(crate) fn after_a_pause(self) -> Resend {
        Resend {
            pause_first: true,
            ..self
        }
    }
}

/// Sends a request by `send` (given the send's number, from 0) and sends
/// it again after a failure, as `policy` says: when the policy's failures
/// include it, sends are left, and `go_on` (told the failure, before the
/// pause) allows it. Returns the first reply, or the failure that ended
/// the sends. `what` and `name` (the object's) name the request in the
/// log.
///
/// # Cancel safety
/// What a dropped call leaves is what its sends left: each request says
/// why a send that may have run is safe.
pub(crate) async fn resend<T, Fut>(
    policy: Resend,
    what: &str,
    name: &str,
    mut go_on: impl FnMut(&redis::RedisError) -> bool,
    mut send: impl FnMut(u32) -> Fut,
) -> redis::RedisResult<T>
where
    Fut: Future<Output = redis::RedisResult<T>>,
{
    let mut pauses = 0u32;
    let mut pause = || {
        let pause = policy.schedule.pause(pauses);
        pauses = pauses.saturating_add(1);
        pause
    };
    if policy.pause_first {
        tokio::time::sleep(pause()).await;
    }
    let mut sent = 0u32;
    loop {
        match send(sent).await {
            Err(err)
                if (policy.mends)(&err)
                    && policy
                        .sends
                        .is_none_or(|sends| sent.saturating_add(1) < sends)
                    && go_on(&err) =>
            {
                tracing::debug!(%name, error = %err, "{what} failed; sending it again");
                tokio::time::sleep(pause()).await;
                sent = sent.saturating_add(1);
            }
            reply => return reply,
        }
    }
}
