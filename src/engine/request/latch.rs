//! A request's acquire latch: the key every send of the request names,
//! which makes it count once, and which a give-back of what it took names
//! too (see [`Latch`]).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::runtime::Handle;
use tokio::time::Instant;

use crate::client::conn::Conn;
use crate::Client;

use super::resend::{resend, Resend};

/// A request's acquire latch, shared by the request and the give-backs of
/// what it took: a give-back names it, and gives only while it shows the
/// grant (a lock's; permits: while it is not closed), closing it when it
/// runs, so it stands until every give-back is done. Once the
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
    pub(super) fn new(
        client: &Client,
        name: &Arc<str>,
        key: String,
        ttl: u64,
        runtime: Handle,
    ) -> Self {
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
    pub(super) fn retire_when_let_go(&self, closed: bool) {
        let mut retire = self.retire.lock().unwrap_or_else(|p| p.into_inner());
        *retire = Some(retire.unwrap_or(false) || closed);
    }

    /// Makes it live at least until `until` (a give-back parked until then
    /// names it; the latch's own TTL may end sooner): a `PTTL` and a
    /// `PEXPIRE` that only lengthens it (a shorter TTL would let a late
    /// send of its request count again), resent after a connection
    /// failure on the `SETTLE_LOST` schedule while the latch may still
    /// live (a parked give-back's latch lost to one cut connection would
    /// leave its hold's count in a key another hold of its owner keeps).
    /// Nothing is written when it is gone.
    pub(crate) async fn stretch(&self, until: Instant) {
        let ends = Instant::now() + Duration::from_millis(self.ttl);
        let go_on = |_: &redis::RedisError| Instant::now() < ends;
        let stretched: redis::RedisResult<()> = resend(
            Resend::settle(),
            "keeping a parked give-back's latch",
            &self.name,
            go_on,
            |_| async move {
                let want = until.saturating_duration_since(Instant::now());
                let want = u64::try_from(want.as_millis()).unwrap_or(u64::MAX).max(1);
                let mut conn = self.client.conn();
                let left: i64 = redis::cmd("PTTL")
                    .arg(&self.key)
                    .query_async(&mut conn)
                    .await?;
                // Gone (-2), or shorter than wanted: a latch always has a
                // TTL.
                if left >= 0 && (left as u64) < want {
                    redis::cmd("PEXPIRE")
                        .arg(&self.key)
                        .arg(want)
                        .query_async::<()>(&mut conn)
                        .await?;
                }
                Ok(())
            },
        )
        .await;
        if let Err(err) = stretched {
            tracing::warn!(name = %self.name, error = %err,
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
                self.runtime.spawn(async move {
                    close(&client.conn(), &name, &latch, ttl).await;
                });
            }
        }
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
/// script takes nothing anew for it), and a settle of it run again finds
/// its grant closed by the give-back's script (see `Taken::give_back`).
/// Sent on `conn` (the object's: a settle run at a runtime's shutdown has
/// a connection of its own).
pub(crate) async fn close(conn: &Conn, name: &str, latch: &str, latch_ttl: u64) {
    let deadline = Instant::now() + Duration::from_millis(latch_ttl);
    let go_on = |_: &redis::RedisError| Instant::now() < deadline;
    let closed: redis::RedisResult<()> = resend(
        Resend::settle(),
        "closing a spent request's latch",
        name,
        go_on,
        |_| {
            let mut conn = conn.clone();
            let mut set = redis::cmd("SET");
            set.arg(latch).arg("x").arg("PX").arg(latch_ttl);
            async move { set.query_async(&mut conn).await }
        },
    )
    .await;
    if let Err(err) = &closed {
        tracing::debug!(%name, error = %err,
            "could not close a spent request's latch; it answers late sends alike");
    }
}
