//! The client: connections, identity, registry and pub/sub, shared by every
//! lock it hands out.

mod builder;
mod clock;
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
    inner: Arc<ClientInner>,
}

// Private to `client/`: the rest of the crate reaches a client through the
// methods below (and handles through their `Object`).
struct ClientInner {
    id: Uuid,
    /// Owner fields made from `id`, shared by the holds of one owner.
    fields: crate::engine::keys::OwnerFields,
    conn: Conn,
    /// How work left at a runtime's shutdown opens a connection.
    reopen: conn::Reopen,
    pubsub: Arc<PubSub>,
    registry: Registry,
    sweeper: Sweeper,
    /// Release request ids are this plus a count: 32 hex digits, unique per
    /// client, without a call to the system's random source per release.
    request_base: u128,
    requests: AtomicU64,
    /// Replica sync's refusal flag and replica counts.
    replicas: replicas::ReplicaState,
    /// Readings of the servers' clocks, for the acquires' deadlines.
    clocks: clock::ServerClocks,
    config: Config,
    /// Host and port only: never the credentials.
    addr: String,
}

/// The crate's door to a client: what its handles and the engine use.
impl Client {
    /// A handle on the command connection.
    pub(crate) fn conn(&self) -> Conn {
        self.inner.conn.clone()
    }

    /// How to open a connection of its own, for work left at a runtime's
    /// shutdown (whose connection that runtime may have driven).
    pub(crate) fn reconnect(&self) -> conn::Reconnect {
        let inner = &self.inner;
        conn::Reconnect::new(
            inner.reopen.clone(),
            inner.conn.clone(),
            inner.config.clone(),
        )
    }

    /// The subscription connection.
    pub(crate) fn pubsub(&self) -> &Arc<PubSub> {
        &self.inner.pubsub
    }

    /// The watchdog's registry of held leases.
    pub(crate) fn registry(&self) -> &Registry {
        &self.inner.registry
    }

    /// The sweeper of latches left behind.
    pub(crate) fn sweeper(&self) -> &Sweeper {
        &self.inner.sweeper
    }

    /// Owner fields made from the client's id.
    pub(crate) fn fields(&self) -> &crate::engine::keys::OwnerFields {
        &self.inner.fields
    }

    /// The command the scripts publish unlock messages with.
    pub(crate) fn publish(&self) -> &'static str {
        self.inner.publish()
    }

    /// Whether the client's config has the lean protocol on (by default,
    /// one server without replica sync): its locks' calls then pass the
    /// owners' gates, see `lock::gate`.
    pub(crate) fn lean_asked(&self) -> bool {
        self.inner.config.lean
    }

    /// A new id for one release request (and its resends).
    pub(crate) fn request_id(&self) -> String {
        self.inner.request_id()
    }

    /// With replica sync on, how many replicas acknowledged the writes so
    /// far on `key`'s connection (see `ClientInner::replicated`).
    pub(crate) async fn replicated(&self, key: &str) -> Option<replicas::Replicated> {
        self.inner.replicated(key).await
    }

    /// With replica sync on, how many replicas acknowledged the grant whose
    /// acquire latch is `latch` (see `ClientInner::grant_replicated`).
    pub(crate) async fn grant_replicated(
        &self,
        key: &str,
        latch: &str,
        latch_ttl: u64,
    ) -> Option<replicas::Replicated> {
        self.inner.grant_replicated(key, latch, latch_ttl).await
    }
}

impl ClientInner {
    /// The command the scripts publish unlock messages with.
    fn publish(&self) -> &'static str {
        match self.config.pubsub_mode {
            crate::config::PubSubMode::Sharded => "spublish",
            // A connected client's mode is never `Auto` (the builder
            // resolves it).
            crate::config::PubSubMode::Classic | crate::config::PubSubMode::Auto => "publish",
        }
    }

    /// A new id for one release request (and its resends), as 32 hex digits.
    fn request_id(&self) -> String {
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
    /// [`Error::Redis`](crate::Error::Redis) when the URL is malformed,
    /// [`Error::Connect`](crate::Error::Connect) when the server cannot be
    /// reached or refuses the credentials; see [`ClientBuilder::build`].
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
    ///
    /// # Redis Cluster
    ///
    /// With the crate's `cluster` feature, `Client::cluster_builder(nodes)`
    /// connects through the `redis` crate's cluster connection. Any of the nodes
    /// will do; the rest are discovered.
    ///
    /// ```rust,no_run
    /// # #[cfg(feature = "cluster")]
    /// # async fn run() -> ferrisson::Result<()> {
    /// let client = ferrisson::Client::cluster_builder([
    ///     "redis://10.0.0.1:7000/",
    ///     "redis://10.0.0.2:7000/",
    /// ])
    /// .build()
    /// .await?;
    /// let guard = client.lock("orders:42").lock().await?; // same API as on one server
    /// guard.unlock().await?;
    /// # Ok(()) }
    /// ```
    ///
    /// - Every key and channel of a lock carries its name's hash tag (Redisson's
    ///   brace rule), so each script runs on the one node that owns the slot.
    ///   When a node answers NOSCRIPT, the script is loaded on every node the
    ///   client knows and that call goes whole (EVAL) to the node of its slot.
    /// - Watchdog renewals are batched per slot (a script's keys must share one),
    ///   still 200 keys at most per call (100 read holds, of two keys each).
    /// - Unlock messages use sharded pub/sub (SPUBLISH inside the scripts,
    ///   SSUBSCRIBE) when the cluster supports it, probed with `PUBSUB
    ///   SHARDNUMSUB` as Redisson does; classic pub/sub otherwise. The mode in
    ///   use is [`Config::pubsub_mode`] (`client.config().pubsub_mode`). A Java
    ///   service sharing the locks must use the same mode, or the two do not hear
    ///   each other's unlocks: when its `shardedSubscriptionMode` is forced, force
    ///   the same with [`ClientBuilder::pubsub_mode`] (`Classic` or `Sharded`).
    /// - A master that dies takes its slots' locks with it until its replica is
    ///   promoted (asynchronous replication: a fresh lock may be lost, as on one
    ///   server). Locks on the other masters carry on. Replica sync works here too:
    ///   WAIT goes to the master of the lock's slot: an acquire's in one pipeline
    ///   behind a write of the grant's acquire latch (so it covers the grant on
    ///   whatever connection it came), a release's on the connection that carried
    ///   the write.
    /// - When a slot moves (a failover, a resharding), the server drops its shard
    ///   subscriptions. The client subscribes again (the cluster connection routes
    ///   it to a node of the slot's shard) and wakes the waiters to try again. A
    ///   waiter whose attempt found no connection to the slot's node (mid-failover)
    ///   waits and tries again instead of failing: that attempt never left.
    ///
    /// `tests/cluster.rs` runs against clusters made by `redis-cli --cluster
    /// create`. With three masters: locks on every node, re-entry and renewals,
    /// wake-ups by sharded messages, the slot of every key, and a master killed
    /// while locks on the others are held. With three masters and a replica each: a
    /// held lock survives `CLUSTER FAILOVER` (kept, renewed on the new master,
    /// scripts loaded again), and its release wakes, within milliseconds, a waiter
    /// that subscribed before the failover. Also: a slot moved by resharding
    /// (`CLUSTER SETSLOT`, `MIGRATE`) takes a held lock and its waiter's
    /// subscription along; replica sync waits on the slot's master; and nodes that
    /// require a password get it on every connection.
    ///
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
    ///
    /// # Sentinel
    ///
    /// With the crate's `sentinel` feature, `Client::sentinel_builder(sentinels,
    /// service)` asks the sentinels (through the `redis` crate's sentinel client)
    /// for the master of `service`. It asks again whenever a command says the
    /// server is no longer the master (READONLY) or cannot be reached. Commands and
    /// subscriptions then move to the new master, without restarting anything.
    /// Waiters ride out the switch and keep waiting.
    ///
    /// ```rust,no_run
    /// # #[cfg(feature = "sentinel")]
    /// # async fn run() -> ferrisson::Result<()> {
    /// let client = ferrisson::Client::sentinel_builder(
    ///     ["redis://10.0.0.1:26379/", "redis://10.0.0.2:26379/"],
    ///     "mymaster",
    /// )
    /// .sentinel_master_auth(Some("locker"), "secret") // the masters' ACL user
    /// .build()
    /// .await?;
    /// # Ok(()) }
    /// ```
    ///
    /// What a failover does to a lock held across it: replication is asynchronous,
    /// and until the old master is demoted it keeps accepting the holder's
    /// renewals, which never reach the promoted replica. If that window is longer
    /// than what was left of the lease, the lock is gone on the new master. The
    /// holder is then told (`lease_lost()`, and `unlock()` returns `LeaseLost`) at
    /// its first renewal on the new master, and a waiter gets the lock.
    /// `tests/sentinel.rs` (one master, one replica, one sentinel,
    /// `SENTINEL FAILOVER`, a 10 s lease) sees exactly that: the lock is lost and
    /// reported lost, and the client follows the new master. Replica sync narrows
    /// the window for acquires and releases, not for renewals; fencing tokens are
    /// what make a resource refuse the old holder. The sentinels' own credentials
    /// go in their URLs. The masters' go in `sentinel_master_auth(user, password)`,
    /// used by every connection to a master.
    ///
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

    /// How many (lock, owner) pairs the watchdog keeps alive right now,
    /// and permits it keeps ([`Permit::keep_alive`](crate::Permit::keep_alive)).
    /// Zero when no watchdog-mode guard or kept permit is held.
    pub fn held_locks(&self) -> usize {
        self.inner.registry.len()
    }
}

/// Counters the suite and the bench read to show that waiters share one
/// subscription: not part of the API (feature `test-counters`, which the
/// crate's own tests and examples turn on; hidden from the docs).
#[cfg(feature = "test-counters")]
impl Client {
    /// How many lock channels this client is subscribed to (or still
    /// unsubscribing from) right now: one per lock name with local waiters.
    #[doc(hidden)]
    pub fn subscriptions(&self) -> usize {
        self.inner.pubsub.len()
    }

    /// How many SUBSCRIBE commands this client has sent since it started.
    #[doc(hidden)]
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
        let sweeper = Sweeper::new(
            conn.clone(),
            conn::Reconnect::new(reopen.clone(), conn.clone(), config.clone()),
        );
        let id = Uuid::new_v4();
        let pubsub = Arc::new(pubsub);
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(PubSub::revive(Arc::downgrade(&pubsub)));
        }
        Client {
            inner: Arc::new(ClientInner {
                id,
                fields: crate::engine::keys::OwnerFields::new(id),
                conn,
                reopen,
                pubsub,
                registry,
                sweeper,
                request_base: Uuid::new_v4().as_u128(),
                requests: AtomicU64::new(0),
                replicas: replicas::ReplicaState::default(),
                clocks: clock::ServerClocks::default(),
                config,
                addr,
            }),
        }
    }
}
