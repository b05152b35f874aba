//! How a retry-safe request is sent again: one loop, [`resend`], that every
//! resend of the crate goes through (an acquire's, a release's, a
//! give-back's, a settle's, a latch's close, a fair waiter's leave), each
//! with its [`Resend`] policy as data. What makes a resend safe (a latch,
//! or a command that does the same twice) is each request's own.

use std::future::Future;

use crate::config::Config;
use crate::engine::backoff::{Failures, Schedule, LEAVE_QUEUE, RESEND, SETTLE_LOST};
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
    let mut failures = Failures::on(policy.schedule);
    let mut pause = || failures.pause();
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

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::time::Duration;

    use tokio::time::Instant;

    use super::*;

    fn cut() -> redis::RedisError {
        std::io::Error::new(std::io::ErrorKind::ConnectionReset, "cut").into()
    }

    fn refused() -> redis::RedisError {
        (redis::ErrorKind::Client, "refused").into()
    }

    /// Sends by `policy`, every send failing with `fail()`; `go_on` allows
    /// that many resends. How many sends went, and the send numbers seen.
    async fn failing(
        policy: Resend,
        fail: fn() -> redis::RedisError,
        resends: u32,
    ) -> (u32, Vec<u32>) {
        let (sends, asked) = (AtomicU32::new(0), AtomicU32::new(0));
        let seen = std::sync::Mutex::new(Vec::new());
        let go_on = |err: &redis::RedisError| {
            assert!((policy.mends)(err));
            asked.fetch_add(1, Ordering::Relaxed) < resends
        };
        let reply: redis::RedisResult<()> = resend(policy, "a test", "n", go_on, |n| {
            sends.fetch_add(1, Ordering::Relaxed);
            seen.lock().unwrap().push(n);
            async move { Err(fail()) }
        })
        .await;
        assert!(reply.is_err());
        (sends.into_inner(), seen.into_inner().unwrap())
    }

    #[tokio::test]
    async fn an_awaited_request_is_sent_as_often_as_configured() {
        let config = Config {
            release_attempts: 3,
            ..Config::default()
        };
        let started = Instant::now();
        let (sends, seen) = failing(Resend::awaited(&config), cut, u32::MAX).await;
        assert_eq!((sends, seen), (3, vec![0, 1, 2]));
        // Two pauses, of at least half of 100 ms and of 200 ms.
        assert!(started.elapsed() >= Duration::from_millis(150));
        // A failure a resend cannot mend is not resent.
        assert_eq!(
            failing(Resend::awaited(&config), refused, u32::MAX).await.0,
            1
        );
    }

    #[tokio::test]
    async fn time_ends_the_resends_of_a_request_sent_until_it_gets_through() {
        let (sends, seen) = failing(Resend::until_through(), cut, 2).await;
        assert_eq!((sends, seen), (3, vec![0, 1, 2]));
        let (sends, _) = failing(Resend::settle(), cut, 0).await;
        assert_eq!(sends, 1);
    }

    #[tokio::test]
    async fn a_check_after_a_pause_waits_before_its_first_send() {
        let started = Instant::now();
        let (sends, _) = failing(Resend::settle().after_a_pause(), cut, 0).await;
        assert_eq!(sends, 1);
        assert!(started.elapsed() >= Duration::from_millis(50));
    }

    #[tokio::test]
    async fn a_reply_ends_the_sends() {
        let sends = AtomicU32::new(0);
        let reply = resend(
            Resend::until_through(),
            "a test",
            "n",
            |_| true,
            |n| {
                sends.fetch_add(1, Ordering::Relaxed);
                async move {
                    if n < 2 {
                        Err(cut())
                    } else {
                        Ok(n)
                    }
                }
            },
        )
        .await;
        assert_eq!(reply.unwrap(), 2);
        assert_eq!(sends.into_inner(), 3);
    }
}
