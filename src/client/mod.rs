//! The client: connections, identity, registry and pub/sub, shared by every
//! lock it hands out.

mod builder;
#[cfg(feature = "cluster")]
mod cluster;
pub(crate) mod conn;
pub(crate) mod pubsub;
mod replicas;
mod scripting;
#[cfg(feature = "sentinel")]
pub(crate) mod sentinel;

#[cfg(any(feature = "cluster", feature = "sentinel"))]
use builder::node_list;
pub use builder::ClientBuilder;
use builder::Target;
use conn::Conn;
use pubsub::PubSub;

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use redis::IntoConnectionInfo;
use uuid::Uuid;

use crate::config::Config;
use crate::engine::sweeper::Sweeper;
use crate::engine::watchdog::Registry;
use crate::Result;

/// A connection to Redis that hands out locks.
///
/// A `Client` is a cheap handle: clone it rather than wrapping it in a
/// mutex or an `Arc`. It owns two connections, one for commands and one for
/// pub/sub subscriptions, both reconnecting by themselves
/// ([`redis::aio::ConnectionManager`]; on a cluster, the `redis` crate's
/// cluster connection), and one random UUID that names this client in
/// every lock it holds (`<client-uuid>:<owner-id>` hash fields, as in
/// Redisson). Two `Client`s, in one process or in two, exclude each other.
///
/// - **On reconnect**: commands fail while Redis is unreachable and work
///   again once the connection is back; subscriptions are renewed by the
///   subscription connection, and waiters are woken to try again. A lost
///   connection also makes the watchdog renew every held lease at once, so
///   a Redis that came back empty (or a new master that never got a hold)
///   is noticed as soon as it answers.
/// - **On its runtime's shutdown**: the client's background work runs on
///   the runtime it was built on. Once that runtime is gone, the holds the
///   watchdog kept are reported lost, and every new call fails with
///   [`Error::RuntimeGone`](crate::Error::RuntimeGone): build the client on
///   a runtime that outlives its use.
/// - **On lease loss**: the watchdog marks every guard on that lock as lost
///   ([`LockGuard::lease_lost`](crate::LockGuard::lease_lost)) and logs a
///   warning.
/// - **On drop**: dropping every clone of a client does not release its
///   locks; the guards keep the client alive until they are released.
#[derive(Clone)]
pub struct Client {
    pub(crate) inner: Arc<ClientInner>,
}

pub(crate) struct ClientInner {
    pub(crate) id: Uuid,
    /// Owner fields made from `id`, shared by the holds of one owner.
    pub(crate) fields: crate::engine::keys::OwnerFields,
    pub(crate) conn: Conn,
    /// How work left at a runtime's shutdown opens a connection.
    pub(crate) reopen: conn::Reopen,
    pub(crate) pubsub: Arc<PubSub>,
    pub(crate) registry: Registry,
    pub(crate) sweeper: Sweeper,
    /// Release request ids are this plus a count: 32 hex digits, unique per
    /// client, without a call to the system's random source per release.
    request_base: u128,
    requests: AtomicU64,
    /// Replica sync's refusal flag and replica counts.
    replicas: replicas::ReplicaState,
    pub(crate) config: Config,
    /// Host and port only: never the credentials.
    addr: String,
}

impl ClientInner {
    /// The command the scripts publish unlock messages with.
    pub(crate) fn publish(&self) -> &'static str {
        match self.config.pubsub_mode {
            crate::config::PubSubMode::Sharded => "spublish",
            // A connected client's mode is never `Auto` (the builder
            // resolves it).
            crate::config::PubSubMode::Classic | crate::config::PubSubMode::Auto => "publish",
        }
    }

    /// A new id for one release request (and its resends), as 32 hex digits.
    pub(crate) fn request_id(&self) -> String {
        let n = self.requests.fetch_add(1, Ordering::Relaxed);
        format!("{:032x}", self.request_base.wrapping_add(u128::from(n)))
    }
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client")
            .field("id", &self.inner.id)
            .field("addr", &self.inner.addr)
            .field("config", &self.inner.config)
            .field("held_locks", &self.held_locks())
            .finish()
    }
}

impl Client {
    /// Connects with the default settings.
    ///
    /// `url` is anything the `redis` crate accepts as connection info, e.g.
    /// `"redis://127.0.0.1/"` or `"redis://user:secret@host:6379/0"`.
    ///
    /// # Errors
    /// [`Error::Redis`](crate::Error::Redis) when the URL is malformed or
    /// Redis cannot be reached.
    ///
    /// # Cancel safety
    /// Cancel safe: a dropped call opens nothing that outlives it.
    pub async fn connect(url: impl IntoConnectionInfo) -> Result<Client> {
        Client::builder(url).build().await
    }

    /// Starts a [`ClientBuilder`] for a Redis Cluster, reached through any
    /// of `nodes` (the others are discovered). Every lock's keys share its
    /// name's hash slot, so each script runs on one node; unlock messages
    /// use sharded pub/sub when the cluster supports it (Redis 7+).
    ///
    /// # Errors
    /// The builder's `build` reports a malformed URL or an empty list.
    #[cfg(feature = "cluster")]
    pub fn cluster_builder<T: IntoConnectionInfo>(
        nodes: impl IntoIterator<Item = T>,
    ) -> ClientBuilder {
        ClientBuilder::new(Target::Cluster(node_list(
            nodes,
            "a cluster needs at least one node",
        )))
    }

    /// Starts a [`ClientBuilder`] for the master that the Redis Sentinels
    /// at `sentinels` monitor as `service`. The client asks them for the
    /// master, and asks again when the master stops answering as one (a
    /// failover): commands and subscriptions then move to the new master,
    /// without restarting anything. The sentinels' own user and password go
    /// in their URLs; the master's are set with
    /// [`ClientBuilder::sentinel_master_auth`].
    #[cfg(feature = "sentinel")]
    pub fn sentinel_builder<T: IntoConnectionInfo>(
        sentinels: impl IntoIterator<Item = T>,
        service: impl Into<String>,
    ) -> ClientBuilder {
        ClientBuilder::new(Target::Sentinel {
            sentinels: node_list(sentinels, "sentinel mode needs at least one sentinel"),
            service: service.into(),
        })
    }

    /// Starts a [`ClientBuilder`] for `url`.
    pub fn builder(url: impl IntoConnectionInfo) -> ClientBuilder {
        ClientBuilder::new(Target::Single(url.into_connection_info()))
    }

    /// This client's UUID: the first half of every owner field it writes.
    pub fn id(&self) -> Uuid {
        self.inner.id
    }

    /// The settings this client runs with.
    pub fn config(&self) -> &Config {
        &self.inner.config
    }

    /// How many (lock, owner) pairs the watchdog keeps alive right now.
    /// Zero when no watchdog-mode guard is held.
    pub fn held_locks(&self) -> usize {
        self.inner.registry.len()
    }

    /// How many lock channels this client is subscribed to (or still
    /// unsubscribing from) right now: one per lock name with local waiters.
    pub fn subscriptions(&self) -> usize {
        self.inner.pubsub.len()
    }

    /// How many SUBSCRIBE commands this client has sent since it started.
    pub fn subscribes_sent(&self) -> u64 {
        self.inner.pubsub.subscribes_sent()
    }
}

impl Client {
    /// Refuses to work once the runtime this client was built on has shut
    /// down: its watchdog and pub/sub listener went with it.
    pub(crate) fn check_runtime(&self) -> Result<()> {
        if self.inner.registry.runtime_gone() {
            return Err(crate::Error::RuntimeGone);
        }
        Ok(())
    }

    fn assemble(
        conn: Conn,
        reopen: conn::Reopen,
        pubsub: PubSub,
        config: Config,
        addr: String,
    ) -> Client {
        let registry = Registry::new(
            conn.clone(),
            config.watchdog_timeout,
            config.metric_lock_names,
            Arc::clone(&pubsub.reconnected),
        );
        let sweeper = Sweeper::new(conn.clone());
        let id = Uuid::new_v4();
        Client {
            inner: Arc::new(ClientInner {
                id,
                fields: crate::engine::keys::OwnerFields::new(id),
                conn,
                reopen,
                pubsub: Arc::new(pubsub),
                registry,
                sweeper,
                request_base: Uuid::new_v4().as_u128(),
                requests: AtomicU64::new(0),
                replicas: replicas::ReplicaState::default(),
                config,
                addr,
            }),
        }
    }
}
