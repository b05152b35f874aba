//! Following the master that Redis Sentinel names (feature `sentinel`).
//!
//! The `redis` crate's `SentinelClient` finds the current master; this
//! keeps a connection manager to it, and asks again when a command says the
//! server is no longer the master (READONLY) or cannot be reached: then the
//! command connection, and the subscriptions, move to the new master.

use std::sync::{Arc, OnceLock, RwLock, Weak};

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::sentinel::{SentinelClient, SentinelNodeConnectionInfo, SentinelServerType};
use redis::{Cmd, ConnectionInfo, Pipeline, RedisResult, Value};

use crate::client::pubsub::PubSub;
use crate::Result;

/// The command connection to whichever server is the master.
pub(crate) struct Follower {
    sentinel: tokio::sync::Mutex<SentinelClient>,
    /// To build the sentinel client anew when its cached connections hang.
    rebuild: (
        Vec<ConnectionInfo>,
        String,
        Option<SentinelNodeConnectionInfo>,
    ),
    /// How long one question to the sentinels may take.
    patience: std::time::Duration,
    config: ConnectionManagerConfig,
    /// The master's connection and address.
    current: RwLock<(ConnectionManager, String)>,
    /// The client's subscriptions, moved along with the master.
    pubsub: OnceLock<Weak<PubSub>>,
}

impl std::fmt::Debug for Follower {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Follower")
            .field("master", &self.master())
            .finish_non_exhaustive()
    }
}

/// The master the sentinels name now, as a `redis` client speaking RESP3.
async fn current_master(sentinel: &mut SentinelClient) -> RedisResult<(redis::Client, String)> {
    let client = sentinel.async_get_client().await?;
    let info = client.get_connection_info().clone();
    let addr = info.addr().to_string();
    let resp3 = info
        .redis_settings()
        .clone()
        .set_protocol(redis::ProtocolVersion::RESP3);
    let info = info
        .set_redis_settings(resp3)
        .set_tcp_settings(super::builder::tcp_settings());
    Ok((redis::Client::open(info)?, addr))
}

impl Follower {
    /// Asks the sentinels in `sentinels` for the master of `service`, and
    /// connects to it; `auth` carries the master's user and password.
    pub(crate) async fn connect(
        sentinels: Vec<ConnectionInfo>,
        service: &str,
        auth: Option<redis::RedisConnectionInfo>,
        config: ConnectionManagerConfig,
        patience: std::time::Duration,
    ) -> Result<(Arc<Follower>, redis::Client)> {
        let node = auth
            .map(|redis| SentinelNodeConnectionInfo::default().set_redis_connection_info(redis));
        let rebuild = (sentinels, service.to_owned(), node);
        let mut sentinel = SentinelClient::build(
            rebuild.0.clone(),
            rebuild.1.clone(),
            rebuild.2.clone(),
            SentinelServerType::Master,
        )?;
        let (client, addr) = current_master(&mut sentinel).await?;
        let conn = client
            .get_connection_manager_with_config(config.clone())
            .await?;
        let follower = Arc::new(Follower {
            sentinel: tokio::sync::Mutex::new(sentinel),
            rebuild,
            patience,
            config,
            current: RwLock::new((conn, addr)),
            pubsub: OnceLock::new(),
        });
        Ok((follower, client))
    }

    /// Moves `pubsub` along with the master from now on.
    pub(crate) fn attach(&self, pubsub: &Arc<PubSub>) {
        let _ = self.pubsub.set(Arc::downgrade(pubsub));
    }

    pub(crate) fn master(&self) -> String {
        self.current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .1
            .clone()
    }

    fn conn(&self) -> ConnectionManager {
        self.current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .0
            .clone()
    }

    /// Whether `err` says the master may have changed.
    fn stale(err: &redis::RedisError) -> bool {
        err.code() == Some("READONLY")
            || err.is_connection_refusal()
            || err.is_io_error()
            || err.is_connection_dropped()
            || crate::error::is_cut_reply(err)
    }

    /// Asks the sentinels again; moves the connections when they name
    /// another master.
    async fn rediscover(&self) {
        tracing::debug!(master = %self.master(), "asking the sentinels for the master");
        let mut sentinel = self.sentinel.lock().await;
        let asked = tokio::time::timeout(self.patience, current_master(&mut sentinel)).await;
        let (client, addr) = match asked {
            Ok(Ok(found)) => found,
            Ok(Err(err)) => {
                tracing::warn!(error = %err, "the sentinels named no master");
                return;
            }
            Err(_) => {
                // A cached connection to a sentinel (or to the old master)
                // stopped answering: start over with fresh ones next time.
                tracing::warn!("the sentinels did not answer in time; reconnecting to them");
                let (sentinels, service, node) = self.rebuild.clone();
                match SentinelClient::build(sentinels, service, node, SentinelServerType::Master) {
                    Ok(fresh) => *sentinel = fresh,
                    Err(err) => tracing::warn!(error = %err, "cannot rebuild the sentinel client"),
                }
                return;
            }
        };
        if addr == self.master() {
            tracing::debug!(master = %addr, "the sentinels name the same master");
            return;
        }
        match client
            .get_connection_manager_with_config(self.config.clone())
            .await
        {
            Ok(conn) => {
                tracing::warn!(master = %addr, "the sentinels name a new master; following it");
                *self.current.write().unwrap_or_else(|e| e.into_inner()) = (conn, addr);
            }
            Err(err) => {
                tracing::warn!(master = %addr, error = %err, "cannot reach the new master yet");
                return;
            }
        }
        if let Some(pubsub) = self.pubsub.get().and_then(Weak::upgrade) {
            if let Err(err) = pubsub.follow(client, self.config.clone()).await {
                tracing::warn!(error = %err, "subscriptions could not move to the new master");
            }
        }
    }

    /// Whether a reply says the master may have changed: an error, or a
    /// server error value (replies carry READONLY as a value until the
    /// caller converts them).
    fn stale_reply(reply: &RedisResult<Value>) -> bool {
        match reply {
            Err(err) => Follower::stale(err),
            Ok(Value::ServerError(err)) => err.code() == "READONLY",
            Ok(_) => false,
        }
    }

    pub(crate) async fn request(&self, cmd: &Cmd) -> RedisResult<Value> {
        // A Redis 6 master demoted by a failover wraps its READONLY in the
        // script's error: unwrapped first, or it would not be followed.
        let reply = super::scripting::unwrapped(self.conn().req_packed_command(cmd).await);
        if Follower::stale_reply(&reply) {
            self.rediscover().await;
        }
        reply
    }

    pub(crate) async fn request_pipeline(
        &self,
        pipeline: &Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisResult<Vec<Value>> {
        let reply = self
            .conn()
            .req_packed_commands(pipeline, offset, count)
            .await;
        if reply.as_ref().is_err_and(Follower::stale) {
            self.rediscover().await;
        }
        reply
    }

    pub(crate) fn db(&self) -> i64 {
        self.conn().get_db()
    }
}
