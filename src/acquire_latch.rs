//! What the retry-safe acquires of the locks and the semaphores share.
//!
//! Every acquire script takes an *acquire latch* key named by its request
//! id: a resend of the same request counts once, and a request whose
//! replies were all lost is settled here, by that latch.

use std::time::Duration;

use tokio::time::Instant;

use crate::error::is_connection_failure;
use crate::scripts::ACQUIRE_CANCEL;
use crate::Client;

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
