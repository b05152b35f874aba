//! The command connection: one server through a `ConnectionManager`, or a
//! Redis Cluster through the `redis` crate's cluster connection (feature
//! `cluster`), behind one type that runs commands and scripts alike.

use redis::aio::{ConnectionLike, ConnectionManager, MultiplexedConnection};
use redis::{Cmd, Pipeline, RedisFuture, Value};

use super::scripting::RawSend;

/// A command connection; cheap to clone (both kinds are handles).
#[derive(Clone)]
pub(crate) enum Conn {
    /// One server (or a master behind a proxy).
    Single(ConnectionManager),
    /// One server, one connection that is not reopened: what work left at
    /// a runtime's shutdown runs on (see [`Reopen`]).
    Direct(MultiplexedConnection),
    /// A Redis Cluster: each command goes to the node of its keys' slot.
    #[cfg(feature = "cluster")]
    Cluster(redis::cluster_async::ClusterConnection),
    /// The master that Redis Sentinel names, followed across failovers.
    #[cfg(feature = "sentinel")]
    Sentinel(std::sync::Arc<crate::client::sentinel::Follower>),
}

impl Conn {
    /// Whether commands go to a cluster, where keys of one call must share
    /// a slot.
    pub(crate) fn is_cluster(&self) -> bool {
        #[cfg(feature = "cluster")]
        if matches!(self, Conn::Cluster(_)) {
            return true;
        }
        false
    }
}

impl Conn {
    /// `WAIT replicas timeout` on the connection that carried the writes to
    /// `key`: the command connection, or on a cluster the connection to the
    /// master of `key`'s slot. Replies how many replicas acknowledged.
    pub(crate) async fn wait_for_replicas(
        &self,
        key: &str,
        replicas: u32,
        timeout_ms: u64,
    ) -> redis::RedisResult<u32> {
        let mut wait = redis::cmd("WAIT");
        wait.arg(replicas).arg(timeout_ms);
        Ok(redis::from_redis_value(
            self.on_master_of(key, wait).await?,
        )?)
    }

    /// How many replicas the master of `key` has online, by `ROLE` (which
    /// lists only the replicas in sync with it); 0 from a server that is
    /// no master.
    pub(crate) async fn online_replicas(&self, key: &str) -> redis::RedisResult<u32> {
        let role = self.on_master_of(key, redis::cmd("ROLE")).await?;
        Ok(online_in_role(role))
    }

    /// The replica sync of a grant: `PEXPIRE latch ttl_ms` and `then`
    /// (`WAIT` or `ROLE`) in one pipeline, so on one connection, to the
    /// master that carries `latch`'s writes (on a cluster, the master of
    /// its slot), whatever connection carried the grant. Replies whether
    /// the latch is on that master, and `then`'s reply.
    ///
    /// The latch is written with its grant, by one script: found there,
    /// the grant is there too, and the PEXPIRE, a write of this connection
    /// behind it in that master's replication stream, makes a `WAIT` right
    /// behind it count only replicas that have the grant. (`WAIT` counts
    /// the writes of the connection it is sent on: on a connection that
    /// wrote nothing, it counts every replica online at once.)
    ///
    /// # Cancel safety
    /// Cancel safe: dropped, the pipeline may still run, which only sets
    /// the latch's TTL again.
    pub(crate) async fn touch_latch_then(
        &self,
        latch: &str,
        ttl_ms: u64,
        then: Cmd,
    ) -> redis::RedisResult<(bool, Value)> {
        let mut pipe = redis::pipe();
        pipe.cmd("PEXPIRE").arg(latch).arg(ttl_ms).add_command(then);
        let replies = self.pipeline_on_master_of(latch, pipe).await?;
        let mut replies = replies.into_iter().map(|reply| reply.extract_error());
        match (replies.next(), replies.next()) {
            (Some(touched), Some(then)) => {
                let touched: i64 = redis::from_redis_value(touched?)?;
                Ok((touched == 1, then?))
            }
            _ => Err(redis::RedisError::from((
                redis::ErrorKind::Client,
                "a pipeline of two commands got fewer replies",
            ))),
        }
    }

    /// Runs `pipe` (not atomic) where the writes to `key` go, on one
    /// connection.
    async fn pipeline_on_master_of(
        &self,
        key: &str,
        pipe: Pipeline,
    ) -> redis::RedisResult<Vec<Value>> {
        let count = pipe.len();
        match self.clone() {
            #[cfg(feature = "cluster")]
            Conn::Cluster(mut conn) => {
                use redis::cluster_routing::{Route, SingleNodeRoutingInfo, SlotAddr};
                let route = Route::new(crate::engine::keys::slot(key.as_bytes()), SlotAddr::Master);
                conn.route_pipeline(pipe, 0, count, SingleNodeRoutingInfo::SpecificNode(route))
                    .await
            }
            mut conn => {
                let _ = key;
                conn.req_packed_commands(&pipe, 0, count).await
            }
        }
    }

    /// Runs `cmd` where the writes to `key` go.
    pub(super) async fn on_master_of(&self, key: &str, cmd: Cmd) -> redis::RedisResult<Value> {
        match self.clone() {
            #[cfg(feature = "cluster")]
            Conn::Cluster(mut conn) => {
                use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
                let route = Route::new(crate::engine::keys::slot(key.as_bytes()), SlotAddr::Master);
                conn.route_command(
                    cmd,
                    RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(route)),
                )
                .await
            }
            mut conn => {
                let _ = key;
                cmd.query_async(&mut conn).await
            }
        }
    }
}

/// How many replicas a `ROLE` reply lists (those in sync with the master);
/// 0 from a server that is no master.
pub(crate) fn online_in_role(role: Value) -> u32 {
    let parts = match role {
        Value::Array(parts) => parts,
        _ => return 0,
    };
    let is_master = match parts.first() {
        Some(Value::BulkString(b)) => b.as_slice() == b"master",
        Some(Value::SimpleString(s)) => s == "master",
        _ => false,
    };
    match parts.get(2) {
        Some(Value::Array(replicas)) if is_master => replicas.len() as u32,
        _ => 0,
    }
}

impl std::fmt::Debug for Conn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.is_cluster() {
            "Conn::Cluster"
        } else {
            "Conn::Single"
        })
    }
}

impl RawSend for Conn {
    /// `cmd` as it is, on the connection underneath.
    fn send<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::Single(conn) => conn.req_packed_command(cmd),
            Conn::Direct(conn) => conn.req_packed_command(cmd),
            #[cfg(feature = "cluster")]
            Conn::Cluster(conn) => conn.req_packed_command(cmd),
            #[cfg(feature = "sentinel")]
            Conn::Sentinel(follower) => Box::pin(follower.request(cmd)),
        }
    }
}

/// Every command goes through [`scripting::run`](super::scripting::run):
/// a script the server lost is loaded or sent whole, and a script's error
/// keeps its own code on every server version.
impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(super::scripting::run(self, cmd))
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        let replies = match self {
            Conn::Single(conn) => conn.req_packed_commands(pipeline, offset, count),
            Conn::Direct(conn) => conn.req_packed_commands(pipeline, offset, count),
            #[cfg(feature = "cluster")]
            Conn::Cluster(conn) => conn.req_packed_commands(pipeline, offset, count),
            #[cfg(feature = "sentinel")]
            Conn::Sentinel(follower) => {
                Box::pin(follower.request_pipeline(pipeline, offset, count))
            }
        };
        Box::pin(async move {
            let replies = replies.await?;
            replies
                .into_iter()
                .map(|reply| super::scripting::unwrapped(Ok(reply)))
                .collect()
        })
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Single(conn) => conn.get_db(),
            Conn::Direct(conn) => conn.get_db(),
            #[cfg(feature = "cluster")]
            Conn::Cluster(conn) => conn.get_db(),
            #[cfg(feature = "sentinel")]
            Conn::Sentinel(follower) => follower.db(),
        }
    }
}

/// How to open a new command connection on another runtime. The client's
/// own connection runs on the runtime it was built on: once that runtime
/// shuts down (or while it does, its tasks no longer polled), work left to
/// finish (the release of a dropped guard) opens a connection of its own.
#[derive(Clone)]
pub(crate) enum Reopen {
    /// A new connection to the one server.
    Single(Box<redis::Client>),
    /// A new cluster connection.
    #[cfg(feature = "cluster")]
    Cluster(Box<redis::cluster::ClusterClient>),
    /// No new connection: the client's own (a sentinel's master is found
    /// by the follower's connections).
    #[cfg(feature = "sentinel")]
    Same,
}

impl Reopen {
    /// A command connection for the current runtime.
    pub(crate) async fn open(
        &self,
        current: &Conn,
        config: &crate::config::Config,
    ) -> redis::RedisResult<Conn> {
        let _ = (current, config);
        match self {
            Reopen::Single(client) => {
                let settings = redis::AsyncConnectionConfig::new()
                    .set_connection_timeout(Some(config.connection_timeout))
                    .set_response_timeout(Some(config.response_timeout));
                Ok(Conn::Direct(
                    client
                        .get_multiplexed_async_connection_with_config(&settings)
                        .await?,
                ))
            }
            #[cfg(feature = "cluster")]
            Reopen::Cluster(client) => Ok(Conn::Cluster(client.get_async_connection().await?)),
            #[cfg(feature = "sentinel")]
            Reopen::Same => Ok(current.clone()),
        }
    }
}

/// What opens a connection of its own later, on another runtime, without
/// the client: the sweeper, which the client owns, keeps one, and a
/// client would keep itself alive through it.
#[derive(Clone)]
pub(crate) struct Reconnect {
    reopen: Reopen,
    current: Conn,
    config: crate::config::Config,
}

impl Reconnect {
    pub(crate) fn new(reopen: Reopen, current: Conn, config: crate::config::Config) -> Reconnect {
        Reconnect {
            reopen,
            current,
            config,
        }
    }

    /// A command connection for the current runtime.
    pub(crate) async fn open(&self) -> redis::RedisResult<Conn> {
        self.reopen.open(&self.current, &self.config).await
    }

    /// The client's settings (its timeouts bound a rescue).
    pub(crate) fn config(&self) -> &crate::config::Config {
        &self.config
    }
}

impl std::fmt::Debug for Reopen {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Reopen")
    }
}
