//! Settings of a [`Client`](crate::Client) and their defaults, and the
//! limits and defaults of each synchronizer.

use std::time::Duration;

/// Default watchdog timeout: the lease of a lock taken without one, renewed
/// every third of it (Redisson's `lockWatchdogTimeout`).
pub const DEFAULT_WATCHDOG_TIMEOUT: Duration = Duration::from_secs(30);

/// The smallest watchdog timeout a client accepts: below it the renewal
/// period (a third) leaves no room for a round trip.
pub const MIN_WATCHDOG_TIMEOUT: Duration = Duration::from_millis(30);

/// The longest name of a lock or other object, in bytes (64 KiB): every
/// command carries the name, often more than once.
pub const MAX_NAME_LEN: usize = 64 * 1024;

/// The largest lease, watchdog timeout or wait any call accepts (one year).
pub const MAX_DURATION: Duration = Duration::from_secs(365 * 24 * 3600);

/// Default time Redis has to answer one command before it counts as failed.
pub const DEFAULT_RESPONSE_TIMEOUT: Duration = Duration::from_secs(3);

/// The ACL command rules a Redis user needs for everything ferrisson does
/// on one server or behind Sentinel, as `ACL SETUSER` takes them: the Lua
/// scripts (`@scripting`) and the commands they run (`@hash`, `@string`,
/// `@keyspace`, `@list` and `@sortedset` for the data, `@pubsub` for the
/// unlock messages, `TIME` for the server's clock), and the connection's
/// own (`@connection`: `HELLO`, `PING`), and for replica sync `WAIT`
/// (`@keyspace` on Redis 6, `@connection` later) and `ROLE`, which counts
/// the master's online replicas (without it, sync is turned off with one
/// warning). The same on Redis 6.2, 7, 8 and Valkey 8; the suite runs
/// every kind of synchronizer, and replica sync, as a user with exactly
/// these.
///
/// The user also needs its keys and channels: `~*` and `&*`, or patterns
/// that cover the names used and the `redisson_*` channels (and, for a
/// leader election, `ferrisson_election__channel:*`; for a fenced hash,
/// the keys `ferrisson_fence*`).
pub const ACL_RULES: &str =
    "+@scripting +@hash +@string +@keyspace +@list +@sortedset +@pubsub +time +@connection +role";

/// Default time to open a connection.
pub const DEFAULT_CONNECTION_TIMEOUT: Duration = Duration::from_secs(5);

/// Default number of sends of one release or acquire when the connection
/// fails; the unlock and acquire latches make the repeats safe.
pub const DEFAULT_RELEASE_ATTEMPTS: u32 = 4;

/// What an acquire does when too few replicas acknowledged it in time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Unsynced {
    /// Give the hold back and fail the call with
    /// [`Error::NotReplicated`](crate::Error::NotReplicated).
    Fail,
    /// Give the hold back and try again, within the call's wait (a
    /// `try_lock` without a wait then returns `None`).
    Retry,
}

/// Default time an acquire or release waits for replicas under replica
/// sync (Redisson's `slavesSyncTimeout`).
pub const DEFAULT_REPLICA_SYNC_TIMEOUT: Duration = Duration::from_secs(1);

/// Replica sync: after each acquire and release, wait until replicas
/// acknowledged the write (`WAIT replicas timeout`), as Redisson's
/// `checkLockSyncedSlaves`. A lock only the master knows of is lost if the
/// master fails before replicating it; this narrows that window, it does
/// not close it (replication stays asynchronous).
///
/// An acquire's `WAIT` covers its grant whatever connection carried it:
/// `WAIT` counts the writes of its own connection only (on a connection
/// that wrote nothing it counts every replica online at once, a frozen one
/// too), so it goes in one pipeline right behind `PEXPIRE` of the grant's
/// acquire latch, on one connection to the master of the name's slot. The
/// latch is written with the grant by one script: found, the grant is on
/// that master and ahead of the `PEXPIRE` in its replication stream; not
/// found (a failover to a master that never got the grant), the acquire
/// counts as acknowledged by no replica. A release's `WAIT` covers the
/// writes of the connection that carried it, as before.
///
/// On by default for [`Client::sentinel_builder`] and
/// [`Client::cluster_builder`] ([`ReplicaSync::REDISSON`]), off for one
/// server.
///
// The builders of features that are off link to the guide's sections.
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
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplicaSync {
    /// Which replicas are waited for, and how many must acknowledge.
    pub replicas: Replicas,
    /// How long to wait for them: at least 1 ms, and short enough that
    /// `WAIT`'s reply, which comes when this is up, arrives within the
    /// response timeout (a tenth of it, at least 100 ms and at most half,
    /// is kept for the way back: 2.7 s at most for the default 3 s).
    pub timeout: Duration,
    /// What an acquire does when they did not.
    pub on_unsynced: Unsynced,
}

impl ReplicaSync {
    /// Redisson's default in every replicated deployment: wait up to 1 s
    /// for every replica the master has online, require one of them, and
    /// give back and retry an acquire none acknowledged.
    pub const REDISSON: ReplicaSync = ReplicaSync {
        replicas: Replicas::Online,
        timeout: DEFAULT_REPLICA_SYNC_TIMEOUT,
        on_unsynced: Unsynced::Retry,
    };
}

/// Which replicas replica sync waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Replicas {
    /// This many must acknowledge (at least 1): `WAIT n timeout`. A master
    /// with fewer replicas fails every check.
    AtLeast(u32),
    /// The replicas the master reports online (`ROLE`, read at most once a
    /// second per master and again after a shortfall) are all waited for,
    /// and one acknowledgement is enough, as Redisson counts its available
    /// replicas and fails only when none was synced. A master with no
    /// replica online is not waited on; the count is taken on the master
    /// that answers for the grant, in one pipeline behind a write of its
    /// acquire latch, so a failover to a master without replicas that
    /// never got the grant fails the check rather than skipping it. A count
    /// is trusted for a second: a failover inside that second meets the old
    /// count (a shortfall on a master without replicas, or a missing latch).
    Online,
}
/// How unlock messages travel: Redisson's two modes. Clients that disagree
/// do not hear each other, so a Java service and a Rust one sharing locks
/// must use the same ([`ClientBuilder::pubsub_mode`](crate::ClientBuilder::pubsub_mode)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum PubSubMode {
    /// A setting only, never a connected client's mode: sharded on a
    /// cluster that supports it (probed with `PUBSUB SHARDNUMSUB`, as
    /// Redisson probes it by default), classic elsewhere.
    Auto,
    /// PUBLISH and SUBSCRIBE: one server, or a cluster without sharded
    /// pub/sub (before Redis 7).
    Classic,
    /// SPUBLISH and SSUBSCRIBE, each channel on the node of its slot: a
    /// Redis 7+ cluster, probed with `PUBSUB SHARDNUMSUB` as Redisson does.
    Sharded,
}

/// The settings a client runs with; see [`ClientBuilder`](crate::ClientBuilder).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Config {
    /// Lease of watchdog-mode locks; renewed every third of it.
    pub watchdog_timeout: Duration,
    /// Time Redis has to answer one command.
    pub response_timeout: Duration,
    /// Time to open a connection.
    pub connection_timeout: Duration,
    /// Sends of one awaited release, or one acquire, when the connection
    /// fails (an acquire's within its call's time; a release nobody waits
    /// on is resent until the hold's lease runs out).
    pub release_attempts: u32,
    /// Waiting for replicas after writes; `None`: no waiting (the default
    /// on one server; Sentinel and Cluster default to
    /// [`ReplicaSync::REDISSON`]).
    pub replica_sync: Option<ReplicaSync>,
    /// How unlock messages travel: as asked of the builder (default
    /// [`PubSubMode::Auto`]); a connected client's config holds the mode it
    /// found or was told, `Classic` or `Sharded`.
    pub pubsub_mode: PubSubMode,
    /// Whether metrics (feature `metrics`) carry a `name` label with the
    /// lock's name, besides its kind. Default `false`: names can be
    /// unbounded.
    pub metric_lock_names: bool,
    /// Whether the reentrant and spin locks may send the lean protocol
    /// (`lua/lean_acquire.lua`, `lua/lean_release.lua`: no latch keys) for
    /// an owner's one hold; see [`ClientBuilder::lean`](crate::ClientBuilder::lean).
    /// A builder starts with `true` for one server and `false` for a
    /// cluster or sentinels, and `build` turns its default off where
    /// replica sync is asked for. `Config::default()`: `false`.
    pub lean: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            watchdog_timeout: DEFAULT_WATCHDOG_TIMEOUT,
            response_timeout: DEFAULT_RESPONSE_TIMEOUT,
            connection_timeout: DEFAULT_CONNECTION_TIMEOUT,
            release_attempts: DEFAULT_RELEASE_ATTEMPTS,
            replica_sync: None,
            pubsub_mode: PubSubMode::Auto,
            metric_lock_names: false,
            lean: false,
        }
    }
}

impl Config {
    /// How often the watchdog renews a lease: a third of the watchdog timeout.
    pub fn renewal_interval(&self) -> Duration {
        self.watchdog_timeout / 3
    }

    /// How long a release's latch key lives in Redis: long enough to cover
    /// every resend of that release (Redisson derives it the same way from
    /// its timeout and retry settings).
    pub(crate) fn unlock_latch_ttl_ms(&self) -> u64 {
        let per_attempt = self.response_timeout + Duration::from_millis(1500);
        let total = per_attempt.saturating_mul(self.release_attempts.max(1));
        total.as_millis().clamp(1, 3_600_000) as u64
    }

    pub(crate) fn validate(&self) -> crate::Result<()> {
        use crate::Error;
        if self.watchdog_timeout < MIN_WATCHDOG_TIMEOUT {
            return Err(Error::invalid(format!(
                "watchdog timeout {:?} is too small to renew: it must be at least {:?}",
                self.watchdog_timeout, MIN_WATCHDOG_TIMEOUT
            )));
        }
        if self.watchdog_timeout > MAX_DURATION {
            return Err(Error::invalid(format!(
                "watchdog timeout {:?} is larger than {:?}",
                self.watchdog_timeout, MAX_DURATION
            )));
        }
        if self.response_timeout.is_zero() || self.response_timeout > MAX_DURATION {
            return Err(Error::invalid(format!(
                "response timeout must be between 1 ms and {:?}, got {:?}",
                MAX_DURATION, self.response_timeout
            )));
        }
        if self.connection_timeout.is_zero() || self.connection_timeout > MAX_DURATION {
            return Err(Error::invalid(format!(
                "connection timeout must be between 1 ms and {:?}, got {:?}",
                MAX_DURATION, self.connection_timeout
            )));
        }
        if self.release_attempts == 0 {
            return Err(Error::invalid("release attempts must be at least 1"));
        }
        if self.lean && self.replica_sync.is_some() {
            return Err(Error::invalid(
                "the lean protocol is not taken with replica sync, which goes by the acquire latch",
            ));
        }
        if let Some(sync) = self.replica_sync {
            if sync.replicas == Replicas::AtLeast(0) {
                return Err(Error::invalid("replica sync needs at least 1 replica"));
            }
            if sync.timeout.is_zero() || sync.timeout > MAX_DURATION {
                return Err(Error::invalid(format!(
                    "replica sync timeout must be between 1 ms and {MAX_DURATION:?}, got {:?}",
                    sync.timeout
                )));
            }
            let longest = longest_sync_for(self.response_timeout);
            if sync.timeout > longest {
                return Err(Error::invalid(format!(
                    "replica sync timeout ({:?}) must leave room for WAIT's reply within the \
                     response timeout ({:?}): {longest:?} at most",
                    sync.timeout, self.response_timeout
                )));
            }
        }
        Ok(())
    }

    /// The default replica sync of a cluster or Sentinel client, fitted to
    /// the response timeout: Redisson's 1 s, or less when the response
    /// timeout leaves no room for it (see [`longest_sync_for`]). A sync the
    /// program asked for is not fitted, but checked by `validate`.
    pub(crate) fn fit_default_sync(&mut self) {
        let longest = longest_sync_for(self.response_timeout);
        if let Some(sync) = self.replica_sync.as_mut() {
            sync.timeout = sync.timeout.min(longest).max(Duration::from_millis(1));
        }
    }
}

/// The longest replica sync timeout a response timeout leaves room for.
/// `WAIT` replies when its timeout is up, and its reply must still arrive
/// within the response timeout: a tenth of it (at least 100 ms, at most
/// half) is kept for the way back.
pub(crate) fn longest_sync_for(response_timeout: Duration) -> Duration {
    let margin = (response_timeout / 10)
        .max(Duration::from_millis(100))
        .min(response_timeout / 2);
    response_timeout - margin
}

// The limits and defaults of each synchronizer.

/// The longest label a candidate may give, in bytes.
pub const MAX_LEADER_LABEL_LEN: usize = 256;

/// The largest token a fenced write takes, 2^53 - 1: the scripts compare
/// tokens as Lua numbers, doubles, which hold every integer below 2^53
/// exactly.
pub const MAX_FENCE_TOKEN: u64 = (1 << 53) - 1;

/// The longest label a runner may give, in bytes.
pub const MAX_JOB_LABEL_LEN: usize = 256;

/// The highest occurrence id a job takes ([`Job::occurrence`](crate::Job::occurrence)): 2^53 - 1,
/// the last integer Redis's Lua compares exactly. The instants
/// [`Job::every`](crate::Job::every) names, in ms since the Unix epoch, stay below it for
/// some 285 000 years.
pub const MAX_OCCURRENCE: u64 = (1 << 53) - 1;

/// How long a job remembers its last occurrence done, unless
/// [`Job::remember_for`](crate::Job::remember_for) says otherwise: a day, or with [`Job::every`](crate::Job::every),
/// ten periods when that is longer (at most a year).
pub const DEFAULT_REMEMBER: Duration = Duration::from_secs(24 * 3600);

/// How long a fair lock's queued waiter may stay silent before the others
/// skip it, by default: 300 s, as Redisson.
pub const DEFAULT_FAIR_WAITER_TIMEOUT: Duration = Duration::from_secs(300);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_match_redisson() {
        let c = Config::default();
        c.validate().unwrap();
        assert_eq!(c.renewal_interval(), Duration::from_secs(10));
        // Redisson: (3000 + 1500) * 4 = 18000 ms.
        assert_eq!(c.unlock_latch_ttl_ms(), 18_000);
        assert_eq!(c.replica_sync, None);
        // Redisson: checkLockSyncedSlaves true, slavesSyncTimeout 1000 ms.
        let redisson = ReplicaSync::REDISSON;
        assert_eq!(redisson.replicas, Replicas::Online);
        assert_eq!(redisson.timeout, Duration::from_secs(1));
        assert_eq!(redisson.on_unsynced, Unsynced::Retry);
        Config {
            replica_sync: Some(redisson),
            ..Config::default()
        }
        .validate()
        .unwrap();
    }

    #[test]
    fn impossible_settings_are_refused() {
        let c = Config {
            watchdog_timeout: Duration::from_millis(10),
            ..Config::default()
        };
        assert!(c
            .validate()
            .unwrap_err()
            .to_string()
            .contains("too small to renew"));
        let c = Config {
            response_timeout: Duration::ZERO,
            ..Config::default()
        };
        assert!(c.validate().is_err());
        let c = Config {
            release_attempts: 0,
            ..Config::default()
        };
        assert!(c.validate().is_err());
        for (replicas, timeout) in [(0, 100), (1, 0)] {
            let c = Config {
                replica_sync: Some(ReplicaSync {
                    replicas: Replicas::AtLeast(replicas),
                    timeout: Duration::from_millis(timeout),
                    on_unsynced: Unsynced::Fail,
                }),
                ..Config::default()
            };
            assert!(c.validate().is_err(), "{replicas} replicas, {timeout} ms");
        }
        // WAIT's reply comes after its timeout; the response timeout must
        // leave room for it.
        assert_eq!(
            longest_sync_for(DEFAULT_RESPONSE_TIMEOUT),
            Duration::from_millis(2_700)
        );
        assert_eq!(
            longest_sync_for(Duration::from_millis(500)),
            Duration::from_millis(400)
        );
        assert_eq!(
            longest_sync_for(Duration::from_millis(100)),
            Duration::from_millis(50)
        );
        for timeout in [
            Duration::from_millis(2_701),
            DEFAULT_RESPONSE_TIMEOUT,
            DEFAULT_RESPONSE_TIMEOUT * 2,
        ] {
            let c = Config {
                replica_sync: Some(ReplicaSync {
                    timeout,
                    ..ReplicaSync::REDISSON
                }),
                ..Config::default()
            };
            let err = c.validate().unwrap_err().to_string();
            assert!(err.contains("must leave room for WAIT's reply"), "{err}");
        }
    }

    #[test]
    fn the_default_sync_fits_a_short_response_timeout() {
        for (response, expected) in [(3_000, 1_000), (800, 700), (300, 200), (50, 25)] {
            let mut c = Config {
                response_timeout: Duration::from_millis(response),
                replica_sync: Some(ReplicaSync::REDISSON),
                ..Config::default()
            };
            c.fit_default_sync();
            assert_eq!(
                c.replica_sync.unwrap().timeout,
                Duration::from_millis(expected),
                "{response} ms"
            );
            c.validate().unwrap();
        }
    }
}
