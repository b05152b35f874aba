//! What the retry-safe acquires of the locks and the semaphores share.
//!
//! Every acquire script takes an *acquire latch* key named by its request
//! id: a resend of the same request counts once, and a request whose
//! replies were all lost is settled here, by that latch.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use redis::{FromRedisValue, ScriptInvocation};
use tokio::runtime::Handle;
use tokio::time::Instant;

use crate::error::is_connection_failure;
use crate::finish::Finish;
use crate::scripts::ACQUIRE_CANCEL;
use crate::{keys, Client};

/// Settles a request whose replies were all lost, by its acquire latch:
/// marks it cancelled so that a late arrival changes nothing, or, when it
/// was granted, runs `give_back`. Tries for as long as the latch lives.
/// Shared by the locks and the semaphores.
pub(crate) async fn settle_lost<F, Fut>(
    client: Client,
    name: &str,
    latch: String,
    latch_ttl: u64,
    give_back: F,
) where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let deadline = Instant::now() + Duration::from_millis(latch_ttl);
    let mut conn = client.inner.conn.clone();
    let mut pause = Duration::from_millis(100);
    while Instant::now() < deadline {
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_secs(1));
        let settled: redis::RedisResult<i64> = ACQUIRE_CANCEL
            .key(&latch)
            .arg(latch_ttl)
            .invoke_async(&mut conn)
            .await;
        match settled {
            Ok(0) => return,
            Ok(_) => {
                give_back().await;
                client.inner.sweeper.discard(latch);
                return;
            }
            Err(err) if is_connection_failure(&err) => {}
            Err(err) => {
                tracing::warn!(%name, error = %err, "could not settle a request whose reply was lost");
                return;
            }
        }
    }
    tracing::warn!(%name,
        "could not learn whether a request whose reply was lost took a hold or permits; \
         a hold expires with its lease");
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
}

impl GiveBack {
    /// For the log line of a give-back that failed.
    pub(crate) fn why(self) -> &'static str {
        match self {
            GiveBack::CallerLeft => "the caller left before the grant arrived",
            GiveBack::ReplyLost => "the reply of the grant was lost",
        }
    }
}

/// The TTL of a semaphore's acquire latch: it outlives every resend and
/// settle of its request.
fn permit_latch_ttl(config: &crate::config::Config) -> u64 {
    (config.watchdog_timeout.as_millis() as u64).max(config.unlock_latch_ttl_ms())
}

/// Sends one latched acquire of `name` and returns its reply; the script is
/// built by `build` from the latch key and its TTL (milliseconds), and
/// `granted` tells a grant from a refusal.
///
/// Whatever becomes of the caller, a grant is never left behind:
/// - granted and answered: the latch is swept;
/// - every reply lost: the request is settled in the background by its
///   latch ([`settle_lost`]), and a grant found there is given back;
/// - granted after the caller's future was dropped: given back.
///
/// `give_back` undoes one grant; it logs its own failure.
///
/// # Cancel safety
/// Cancel safe: once sent, the request runs to its end on `runtime`.
pub(crate) async fn send_latched<R, G, Fut>(
    client: &Client,
    name: &Arc<str>,
    runtime: Handle,
    build: impl FnOnce(&str, u64) -> ScriptInvocation<'static>,
    granted: fn(&R) -> bool,
    give_back: G,
) -> redis::RedisResult<R>
where
    R: FromRedisValue + Send + 'static,
    G: Fn(GiveBack) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let latch = keys::acquire_latch(name, &client.inner.request_id());
    let latch_ttl = permit_latch_ttl(&client.inner.config);
    let invocation = build(&latch, latch_ttl);
    let mut conn = client.inner.conn.clone();
    let request = {
        let (client, name, give_back) = (client.clone(), Arc::clone(name), give_back.clone());
        async move {
            let reply = invocation.invoke_async::<R>(&mut conn).await;
            match &reply {
                Ok(reply) if granted(reply) => client.inner.sweeper.discard(latch),
                Err(err) if is_connection_failure(err) => {
                    let give_back = move || give_back(GiveBack::ReplyLost);
                    tokio::spawn(async move {
                        settle_lost(client, &name, latch, latch_ttl, give_back).await
                    });
                }
                _ => {}
            }
            reply
        }
    };
    let orphan = move |reply: redis::RedisResult<R>| async move {
        if reply.as_ref().is_ok_and(granted) {
            give_back(GiveBack::CallerLeft).await;
        }
    };
    Finish::new(runtime, request, orphan).await
}
