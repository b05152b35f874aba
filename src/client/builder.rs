//! Settings for a client, and connecting it to one server, a cluster or the
//! master the sentinels name.

use std::fmt;
use std::time::Duration;

use redis::aio::ConnectionManagerConfig;
#[cfg(any(feature = "cluster", feature = "sentinel"))]
use redis::IntoConnectionInfo;
use redis::{ConnectionInfo, ProtocolVersion};

use super::conn::Conn;
use super::pubsub::PubSub;
use super::Client;
use crate::config::Config;
use crate::Result;

/// Settings for a [`Client`], from [`Client::builder`].
///
/// ```no_run
/// # async fn run() -> ferrisson::Result<()> {
/// use std::time::Duration;
/// let client = ferrisson::Client::builder("redis://127.0.0.1/")
///     .watchdog_timeout(Duration::from_secs(30))
///     .build()
///     .await?;
/// # Ok(()) }
/// ```
///
/// # One server, with ACL users and TLS
///
/// A user and password go in the URL, and every connection the client opens
/// (commands and subscriptions) authenticates with them. The user needs the
/// lock keys, the `redisson_*` channels (`&*` or narrower) and the commands
/// in [`ACL_RULES`](crate::config::ACL_RULES) (or `+@all`). A user who may not run scripts, like a
/// server without them, is refused by `build()` with
/// [`Error::ScriptingUnavailable`](crate::Error::ScriptingUnavailable). `rediss://` needs the crate's `tls` feature (rustls,
/// with ring for its cryptography: no system library) or its `native-tls`
/// feature (the platform's TLS). A private CA is trusted with
/// `ClientBuilder::tls_root_certificate`:
///
/// ```rust,no_run
/// # #[cfg(any(feature = "tls", feature = "native-tls"))]
/// # async fn run(ca_pem: Vec<u8>) -> ferrisson::Result<()> {
/// let client = ferrisson::Client::builder("rediss://locker:secret@redis.internal:6380/")
///     .tls_root_certificate(ca_pem) // PEM; omit it to use the system's trust store
///     .build()
///     .await?;
/// # Ok(()) }
/// ```
///
/// A missing or refused password, an untrusted certificate or an unreachable
/// server fails `build()` at once with
/// [`Error::Connect`](crate::Error::Connect), whose text names the address
/// (never the password), carries the server's or the TLS library's reason
/// and says what to check. Secrets never appear in the `Debug` output of a
/// client, builder, lock or guard: they print the host and port only.
///
/// rustls takes its cryptography from a process-wide provider. When the
/// program has installed none, `build()` for a `rediss://` address installs
/// ring's (with feature `tls`), and the program's other rustls clients then
/// use it too. A program that wants another one (aws-lc-rs, a FIPS build)
/// installs it before building its first client. Turning on `tls` also turns
/// on rustls's `ring` feature for the whole program: where aws-lc-rs is on
/// too, rustls no longer picks a provider by itself, so such a program
/// installs one in `main`.
///
/// Turn on one TLS feature, not both. With both, the redis crate uses rustls
/// without the system's trust store: a server is then trusted only through
/// `tls_root_certificate`.
///
///
/// # Replica sync
///
/// With a replica behind the master, a fresh lock exists only on the master
/// until replication carries it over. If the master fails in between, the
/// promoted replica has no lock, and a second holder can get in. Replica sync
/// narrows that window, as Redisson's `checkLockSyncedSlaves` does: after each
/// acquire and release (of a lock, a semaphore's permits or an expirable
/// permit) the client sends `WAIT replicas timeout`. `WAIT` counts only the
/// writes of the connection it is sent on, so an acquire's goes in one
/// pipeline right behind a write of the grant's acquire latch (`PEXPIRE` to
/// its TTL), on one connection to the master of the lock's slot: the replicas
/// it counts have the grant, whatever connection carried it (a resend
/// answered from the latch on a new connection, a reconnect or a failover
/// in between), and a master that has no latch (a failover to a server that
/// never got the grant) counts as no replica acknowledging. An acquire that
/// too few replicas acknowledged is given back, then fails with
/// [`Error::NotReplicated`](crate::Error::NotReplicated) or is tried again within the call's wait
/// ([`config::Unsynced`](crate::config::Unsynced)).
///
/// Behind Sentinel and on a Cluster it is on by default, as in Redisson
/// ([`config::ReplicaSync::REDISSON`](crate::config::ReplicaSync::REDISSON)): every replica the master reports
/// online (`ROLE`, counted at most once a second, in the pipeline behind the
/// latch's write; a count of none is not kept for a grant) is waited for up
/// to 1 s, one acknowledgement is enough, a master without replicas is not
/// waited on (once the count finds the grant on it), and an acquire none
/// acknowledged is given back and tried
/// again. On
/// one server it is off unless asked for:
///
/// ```rust,no_run
/// # async fn run() -> ferrisson::Result<()> {
/// use std::time::Duration;
/// use ferrisson::config::Unsynced;
/// let client = ferrisson::Client::builder("redis://master.internal/")
///     .replica_sync(1, Duration::from_millis(500), Unsynced::Retry)
///     .build()
///     .await?;
/// # Ok(()) }
/// ```
///
/// Its price is latency: each acquire and release waits one more round trip
/// and the replicas' acknowledgement (an acquire's pipeline of `PEXPIRE`
/// and `WAIT` is that one round trip, as a lone `WAIT` was). On one machine that about doubles a
/// lock and unlock (`docs/benchmarks.md`, scenario 8); across a network it
/// adds the slowest replica's round trip. A replica that hangs while staying
/// connected makes every write wait the whole timeout until its master drops
/// it. [`ClientBuilder::replica_sync_with`]`(None)` turns it off.
///
/// It does not make replication synchronous. A replica that acknowledged can
/// still lag behind on the next write, and WAIT says nothing of which replica
/// will be promoted. Fencing tokens remain the way to make a resource refuse a
/// stale holder. A server that refuses WAIT or ROLE (some managed services do,
/// and ACL users without them) gets one attempt and a warning; the client
/// then locks without sync. Releases that too
/// few replicas acknowledged are logged, not undone.
///
#[must_use = "a builder does nothing until `build` is awaited"]
pub struct ClientBuilder {
    target: Target,
    /// The user and password of the masters a sentinel names.
    #[cfg(feature = "sentinel")]
    master_auth: Option<redis::RedisConnectionInfo>,
    config: Config,
    /// Whether `config.replica_sync` is the deployment's default, which
    /// `build` fits to the response timeout, rather than the program's.
    default_sync: bool,
    /// Whether `config.lean` is the program's (`ClientBuilder::lean`)
    /// rather than the deployment's default, which `build` turns off where
    /// replica sync is asked for.
    lean_asked: bool,
    /// PEM of the CA that signed the server's certificate, when it is not
    /// in the system's trust store.
    #[cfg(any(feature = "tls", feature = "native-tls"))]
    tls_root: Option<Vec<u8>>,
}

/// What a client connects to.
// A builder is made once per client: its size does not matter, and with
// `tls` and `cluster` but not `sentinel` one server's info outweighs a list.
#[allow(clippy::large_enum_variant)]
pub(super) enum Target {
    /// One server.
    Single(redis::RedisResult<ConnectionInfo>),
    /// A Redis Cluster, through any of these nodes.
    #[cfg(feature = "cluster")]
    Cluster(redis::RedisResult<Vec<ConnectionInfo>>),
    /// The master the sentinels monitor as `service`.
    #[cfg(feature = "sentinel")]
    Sentinel {
        sentinels: redis::RedisResult<Vec<ConnectionInfo>>,
        service: String,
    },
}

impl Target {
    /// Whether any address given is a `rediss://` one.
    #[cfg(feature = "tls")]
    fn uses_tls(&self) -> bool {
        let tls =
            |info: &ConnectionInfo| matches!(info.addr(), redis::ConnectionAddr::TcpTls { .. });
        match self {
            Target::Single(info) => info.as_ref().is_ok_and(tls),
            #[cfg(feature = "cluster")]
            Target::Cluster(nodes) => nodes.as_ref().is_ok_and(|nodes| nodes.iter().any(tls)),
            #[cfg(feature = "sentinel")]
            Target::Sentinel { sentinels, .. } => {
                sentinels.as_ref().is_ok_and(|nodes| nodes.iter().any(tls))
            }
        }
    }
}

/// The connection infos of `nodes`; `empty` is the error for none.
#[cfg(any(feature = "cluster", feature = "sentinel"))]
pub(super) fn node_list<T: IntoConnectionInfo>(
    nodes: impl IntoIterator<Item = T>,
    empty: &'static str,
) -> redis::RedisResult<Vec<ConnectionInfo>> {
    let nodes = nodes
        .into_iter()
        .map(IntoConnectionInfo::into_connection_info)
        .collect::<redis::RedisResult<Vec<_>>>()?;
    if nodes.is_empty() {
        return Err(redis::RedisError::from((
            redis::ErrorKind::InvalidClientConfig,
            empty,
        )));
    }
    Ok(nodes)
}

impl fmt::Debug for ClientBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Host and port only: never the credentials.
        let addrs: Vec<String> = match &self.target {
            Target::Single(info) => info.iter().map(|i| i.addr().to_string()).collect(),
            #[cfg(feature = "cluster")]
            Target::Cluster(nodes) => nodes
                .iter()
                .flatten()
                .map(|i| i.addr().to_string())
                .collect(),
            #[cfg(feature = "sentinel")]
            Target::Sentinel { sentinels, .. } => sentinels
                .iter()
                .flatten()
                .map(|i| i.addr().to_string())
                .collect(),
        };
        f.debug_struct("ClientBuilder")
            .field("addrs", &addrs)
            .field("config", &self.config)
            .finish()
    }
}

impl ClientBuilder {
    pub(super) fn new(target: Target) -> ClientBuilder {
        let mut config = Config::default();
        // Redisson waits for replicas wherever there are any; a single
        // server (or a proxy in front of one) has none to wait for.
        if !matches!(target, Target::Single(_)) {
            config.replica_sync = Some(crate::config::ReplicaSync::REDISSON);
        }
        // The lean protocol where its sends go once: to one server.
        config.lean = matches!(target, Target::Single(_));
        ClientBuilder {
            target,
            #[cfg(feature = "sentinel")]
            master_auth: None,
            config,
            default_sync: true,
            lean_asked: false,
            #[cfg(any(feature = "tls", feature = "native-tls"))]
            tls_root: None,
        }
    }

    /// The lease of locks taken without one, renewed by the watchdog every
    /// third of it. Default 30 s ([`DEFAULT_WATCHDOG_TIMEOUT`](crate::config::DEFAULT_WATCHDOG_TIMEOUT));
    /// at least 30 ms.
    pub fn watchdog_timeout(mut self, timeout: Duration) -> Self {
        self.config.watchdog_timeout = timeout;
        self
    }

    /// How unlock messages travel (Redisson's `subscriptionMode` /
    /// `shardedSubscriptionMode`). The default, [`PubSubMode::Auto`], uses
    /// sharded pub/sub on a cluster that supports it and classic pub/sub
    /// elsewhere, as Redisson's default does. A cluster shared with Java
    /// clients whose sharded mode is forced on or off must be matched here,
    /// or wake-ups between them are lost (waiters then wait for the
    /// holder's TTL). `Sharded` is for a cluster: [`build`](Self::build)
    /// refuses it elsewhere, and on a cluster that lacks it.
    ///
    /// [`PubSubMode::Auto`]: crate::config::PubSubMode::Auto
    pub fn pubsub_mode(mut self, mode: crate::config::PubSubMode) -> Self {
        self.config.pubsub_mode = mode;
        self
    }

    /// How long Redis has to answer one command. Default 3 s. With
    /// replica sync on, `WAIT`'s reply must arrive within it too: a
    /// cluster's or Sentinel's default sync is shortened to fit, a sync
    /// the program set is refused by `build` when it does not fit.
    pub fn response_timeout(mut self, timeout: Duration) -> Self {
        self.config.response_timeout = timeout;
        self
    }

    /// How long opening a connection may take. Default 5 s.
    pub fn connection_timeout(mut self, timeout: Duration) -> Self {
        self.config.connection_timeout = timeout;
        self
    }

    /// Waits after each acquire and release (of a lock, a semaphore's
    /// permits or an expirable permit) until `replicas` replicas
    /// acknowledged it, for `timeout` at most (`WAIT`); an acquire that too
    /// few acknowledged is given back and, by `on_unsynced`, fails or is
    /// tried again; `timeout` must leave room for the reply to `WAIT`
    /// within the [response timeout](Self::response_timeout) (see
    /// [`ReplicaSync::timeout`](crate::config::ReplicaSync::timeout)). A
    /// release that too few acknowledged is logged. When the
    /// server refuses `WAIT` (some managed services do), the client says so
    /// once in a warning and stops waiting. See [`ReplicaSync`](crate::config::ReplicaSync);
    /// [`replica_sync_with`](Self::replica_sync_with) takes the other
    /// settings.
    pub fn replica_sync(
        self,
        replicas: u32,
        timeout: Duration,
        on_unsynced: crate::config::Unsynced,
    ) -> Self {
        self.replica_sync_with(Some(crate::config::ReplicaSync {
            replicas: crate::config::Replicas::AtLeast(replicas),
            timeout,
            on_unsynced,
        }))
    }

    /// Replica sync as `sync` says, or off with `None`. The default is
    /// [`ReplicaSync::REDISSON`] for [`Client::sentinel_builder`] and
    /// [`Client::cluster_builder`] (every replica the master has online is
    /// waited for up to 1 s, one acknowledgement is enough, an acquire none
    /// acknowledged is given back and tried again: Redisson's
    /// `checkLockSyncedSlaves`; less than 1 s when the
    /// [response timeout](Self::response_timeout) leaves no room for it),
    /// and off for one server.
    ///
    /// What it costs: each acquire and release waits one more round trip
    /// to the master and the replicas' acknowledgement (on one machine,
    /// lock and unlock take about twice as long; `docs/benchmarks.md`,
    /// scenario 8). A replica that stops answering but stays connected
    /// makes every write wait the whole timeout until the master drops it
    /// (its `repl-timeout`, 60 s by default).
    ///
    /// [`ReplicaSync::REDISSON`]: crate::config::ReplicaSync::REDISSON
    // The builders of features that are off link to the crate docs.
    #[cfg_attr(
        feature = "sentinel",
        doc = "[`Client::sentinel_builder`]: crate::Client::sentinel_builder"
    )]
    #[cfg_attr(
        not(feature = "sentinel"),
        doc = "[`Client::sentinel_builder`]: crate#deployments"
    )]
    #[cfg_attr(
        feature = "cluster",
        doc = "[`Client::cluster_builder`]: crate::Client::cluster_builder"
    )]
    #[cfg_attr(
        not(feature = "cluster"),
        doc = "[`Client::cluster_builder`]: crate#deployments"
    )]
    pub fn replica_sync_with(mut self, sync: Option<crate::config::ReplicaSync>) -> Self {
        self.config.replica_sync = sync;
        self.default_sync = false;
        self
    }

    /// How many times one release, or one acquire, is sent when the
    /// connection fails (resends are safe: the unlock and acquire latches,
    /// see `lua/README.md`; a lean send, see [`ClientBuilder::lean`], is
    /// never resent, its lost reply settled instead). Default 4. An acquire resends only within its
    /// call's time (one response timeout for a `try_lock()`, the wait for a
    /// `try_lock_for`). A release nobody waits on (a give-back, a dropped
    /// guard's) is not limited by it: it is resent until it gets through or
    /// the hold's lease runs out (see the crate docs, "Time limits").
    pub fn release_attempts(mut self, attempts: u32) -> Self {
        self.config.release_attempts = attempts;
        self
    }

    /// Whether the reentrant and spin locks send the lean protocol: an
    /// owner that holds nothing of a lock, with nothing of it on its way,
    /// takes and releases its one hold with scripts that write no latch
    /// key (`lua/lean_acquire.lua`, `lua/lean_release.lua`), each send
    /// bounded by its deadline on the server's clock and never resent; a
    /// lost reply is settled (`lua/lean_settle.lua`) once that deadline has
    /// passed, and the owner's next call on that lock waits for the settle.
    /// Every other call (a re-entry, a release that leaves holds, a job's
    /// release) sends the latched scripts. The layout Redisson reads is the
    /// same either way. After a latched command of a lock whose reply was
    /// lost, that owner's calls of that lock send the latched protocol
    /// while the lost command may still run (an acquire's until its request
    /// is settled, a release's that never got through while its unlock
    /// latch would last); other
    /// owners and other locks stay lean.
    ///
    /// A lean send is never resent, so an acquire goes lean only in a call
    /// that waits as long as it takes (`lock()`, `lock_with_lease()`): a
    /// lost reply is settled once its send's deadline (a response timeout)
    /// has passed on the server's clock, and the latched acquire goes then.
    /// A call with a time limit (`try_lock()`, `try_lock_for()`) sends the
    /// latched acquire, resent on a lost reply within its limit. An awaited
    /// `unlock()` whose lean reply is lost waits for the settle, as long as
    /// its resends could have taken.
    ///
    /// On by default for one server without replica sync (a cluster or
    /// sentinels, and replica sync, go by the acquire latch: there the
    /// default is off, and `lean(true)` makes `build` fail). `lean(false)`
    /// sends the latched protocol for every call.
    pub fn lean(mut self, on: bool) -> Self {
        self.config.lean = on;
        self.lean_asked = true;
        self
    }

    /// Labels the metrics of each lock with its name (label `name`), besides
    /// its kind. Off by default: a service that makes locks per order or
    /// per user would make a time series per lock. Feature `metrics`.
    #[cfg(feature = "metrics")]
    pub fn metric_lock_names(mut self, on: bool) -> Self {
        self.config.metric_lock_names = on;
        self
    }

    /// Trusts the certificate authority in `pem` (one or more PEM
    /// certificates) for `rediss://` connections: for servers with
    /// certificates from a private CA. With rustls (`tls`) it replaces the
    /// system's trust store; with `native-tls` it is trusted besides it.
    /// Features `tls` (rustls) or `native-tls`; for one server (a cluster
    /// or sentinel builder refuses it in `build`).
    #[cfg(any(feature = "tls", feature = "native-tls"))]
    pub fn tls_root_certificate(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.tls_root = Some(pem.into());
        self
    }

    /// The ACL user (`None`: the default user) and password of the masters
    /// the sentinels name, for [`Client::sentinel_builder`]; every
    /// connection to a master (commands and subscriptions) authenticates
    /// with them.
    #[cfg(feature = "sentinel")]
    pub fn sentinel_master_auth(mut self, username: Option<&str>, password: &str) -> Self {
        let mut auth = redis::RedisConnectionInfo::default().set_password(password);
        if let Some(username) = username {
            auth = auth.set_username(username);
        }
        self.master_auth = Some(auth);
        self
    }

    /// Checks the settings and connects.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for
    /// impossible settings (a watchdog timeout under 30 ms, a zero timeout,
    /// a private TLS root certificate for a cluster or sentinels, the lean
    /// protocol for a cluster, sentinels or with replica sync);
    /// [`Error::Redis`](crate::Error::Redis) for a malformed URL;
    /// [`Error::Connect`](crate::Error::Connect) for one server that
    /// cannot be reached or refuses the credentials (a cluster or
    /// sentinels: [`Error::Redis`](crate::Error::Redis));
    /// [`Error::ScriptingUnavailable`](crate::Error::ScriptingUnavailable)
    /// for a server that does not run Lua scripts, or an ACL user who may
    /// not run them; [`Error::NoRuntime`](crate::Error::NoRuntime) outside
    /// a tokio runtime.
    ///
    /// # Cancel safety
    /// Cancel safe: a dropped call opens nothing that outlives it.
    pub async fn build(mut self) -> Result<Client> {
        // Its connection, watchdog and listener are tasks on this runtime.
        crate::engine::finish::runtime()?;
        #[cfg(any(feature = "cluster", feature = "sentinel"))]
        if self.config.lean && !matches!(self.target, Target::Single(_)) {
            return Err(crate::Error::invalid(
                "the lean protocol is only taken for one server, not a cluster or sentinels",
            ));
        }
        if self.default_sync {
            self.config.fit_default_sync();
        }
        // Replica sync goes by the acquire latch: the lean protocol is
        // refused with it when asked for, and not taken by default.
        if !self.lean_asked && self.config.replica_sync.is_some() {
            self.config.lean = false;
        }
        self.config.validate()?;
        #[cfg(feature = "tls")]
        if self.target.uses_tls() {
            install_crypto_provider();
        }
        #[cfg(all(
            any(feature = "tls", feature = "native-tls"),
            any(feature = "cluster", feature = "sentinel")
        ))]
        if self.tls_root.is_some() && !matches!(self.target, Target::Single(_)) {
            return Err(crate::Error::invalid(
                "a private TLS root certificate is only taken for one server, not a cluster or sentinels",
            ));
        }
        let manager_config = ConnectionManagerConfig::new()
            .set_response_timeout(Some(self.config.response_timeout))
            .set_connection_timeout(Some(self.config.connection_timeout));
        match self.target {
            Target::Single(info) => {
                let config = unclustered(self.config)?;
                #[cfg(any(feature = "tls", feature = "native-tls"))]
                let tls_root = self.tls_root;
                #[cfg(not(any(feature = "tls", feature = "native-tls")))]
                let tls_root = None;
                connect_single(info?, tls_root, config, manager_config).await
            }
            #[cfg(feature = "cluster")]
            Target::Cluster(nodes) => {
                let nodes = nodes?;
                let addr = nodes[0].addr().to_string();
                let mut config = self.config;
                let (conn, reopen, pubsub, mode) = super::cluster::connect(nodes, &config).await?;
                config.pubsub_mode = mode;
                Ok(Client::assemble(conn, reopen, pubsub, config, addr))
            }
            #[cfg(feature = "sentinel")]
            Target::Sentinel { sentinels, service } => {
                let config = unclustered(self.config)?;
                let (follower, master) = super::sentinel::Follower::connect(
                    sentinels?,
                    &service,
                    self.master_auth,
                    manager_config.clone(),
                    config.response_timeout,
                )
                .await?;
                let addr = follower.master();
                let mut conn = Conn::Sentinel(std::sync::Arc::clone(&follower));
                super::scripting::check(&mut conn, &addr).await?;
                let pubsub = PubSub::connect(master, manager_config).await?;
                let client =
                    Client::assemble(conn, super::conn::Reopen::Same, pubsub, config, addr);
                follower.attach(&client.inner.pubsub);
                Ok(client)
            }
        }
    }
}

/// Makes ring the process's rustls crypto provider, unless the program has
/// chosen one: rustls finds none by itself when its dependants enable more
/// than one (ring here, aws-lc-rs elsewhere), and the redis crate's TLS
/// setup would then fail. Called only for `rediss://` addresses.
#[cfg(feature = "tls")]
fn install_crypto_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // An error means another thread installed one first: that one holds.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

/// The TCP settings of every connection to a Redis server: no Nagle
/// delay. A lock's commands are small and each waits on the one before (a
/// release, then the waiter's acquire), so a write held back for the
/// previous one's acknowledgement is pure latency.
pub(crate) fn tcp_settings() -> redis::io::tcp::TcpSettings {
    redis::io::tcp::TcpSettings::default().set_nodelay(true)
}

/// Connects a client to one server, over TLS with `tls_root` as the CA
/// when given (feature `tls` or `native-tls`).
async fn connect_single(
    info: ConnectionInfo,
    tls_root: Option<Vec<u8>>,
    config: Config,
    manager_config: ConnectionManagerConfig,
) -> Result<Client> {
    let addr = info.addr().to_string();
    // RESP3 on both: a connection closed by the server is noticed (and
    // reopened) at once, not by the next command failing.
    let resp3 = info
        .redis_settings()
        .clone()
        .set_protocol(ProtocolVersion::RESP3);
    let info = info
        .set_redis_settings(resp3)
        .set_tcp_settings(tcp_settings());
    let redis_client = match tls_root {
        #[cfg(any(feature = "tls", feature = "native-tls"))]
        Some(pem) => redis::Client::build_with_tls(
            info,
            redis::TlsCertificates {
                client_tls: None,
                root_cert: Some(pem),
            },
        )?,
        _ => redis::Client::open(info)?,
    };
    // One plain connection first: a refused password, a bad certificate or
    // an unreachable server fails here at once, where the managers would
    // retry it with backoff for seconds.
    let probe = redis::AsyncConnectionConfig::new()
        .set_connection_timeout(Some(config.connection_timeout))
        .set_response_timeout(Some(config.response_timeout));
    drop(
        redis_client
            .get_multiplexed_async_connection_with_config(&probe)
            .await
            .map_err(|e| crate::Error::connect(&addr, e))?,
    );
    // Commands on a server that is down fail after one reconnect attempt
    // (the default retries with backoff for about 9 s before a command
    // hears of it); the next command tries again.
    let command_config = manager_config.clone().set_number_of_retries(1);
    let mut conn = Conn::Single(
        redis_client
            .get_connection_manager_with_config(command_config)
            .await
            .map_err(|e| crate::Error::connect(&addr, e))?,
    );
    super::scripting::check(&mut conn, &addr).await?;
    let reopen = super::conn::Reopen::Single(Box::new(redis_client.clone()));
    let pubsub = PubSub::connect(redis_client, manager_config).await?;
    Ok(Client::assemble(conn, reopen, pubsub, config, addr))
}

/// The config of a client that is not on a cluster: classic pub/sub (a
/// sharded mode asked for is refused).
fn unclustered(mut config: Config) -> Result<Config> {
    use crate::config::PubSubMode;
    match config.pubsub_mode {
        PubSubMode::Sharded => Err(crate::Error::invalid(
            "sharded pub/sub is for a Redis Cluster; one server or Sentinel uses classic pub/sub",
        )),
        _ => {
            config.pubsub_mode = PubSubMode::Classic;
            Ok(config)
        }
    }
}
