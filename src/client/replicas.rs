//! Replica sync: after a write, `WAIT` for the replicas of the master that
//! took it, as many as the settings ask or, by default on Sentinel and
//! Cluster, every replica that master reports online. A grant's `WAIT`
//! goes behind a write of its acquire latch, in one pipeline (see
//! [`ClientInner::grant_replicated`]): `WAIT` counts the writes of its own
//! connection only.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use dashmap::DashMap;

use super::conn::Conn;
use super::ClientInner;
use crate::config::Replicas;

/// How long a count of a master's online replicas is trusted (Redisson
/// rescans its topology once a second by default).
const COUNT_FRESH_FOR: Duration = Duration::from_secs(1);

/// What the replicas said of the writes so far.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Replicated {
    /// Enough acknowledged.
    pub(crate) enough: bool,
    /// How many acknowledged.
    pub(crate) acked: u32,
    /// How many had to.
    pub(crate) wanted: u32,
}

/// The state replica sync keeps on a client.
#[derive(Debug, Default)]
pub(crate) struct ReplicaState {
    /// Set once the server refused WAIT or ROLE: replica sync is off from
    /// then on.
    refused: AtomicBool,
    /// Online replicas by master: by slot on a cluster, slot 0 elsewhere;
    /// with when they were counted.
    counts: DashMap<u16, (u32, Instant)>,
}

impl ReplicaState {
    /// Turns sync off after the server refused `command`, with one warning.
    fn refuse(&self, command: &str, err: &redis::RedisError) {
        if !self.refused.swap(true, Ordering::Relaxed) {
            tracing::warn!(error = %err,
                "the server refuses {command}: replica sync is off for this client");
        }
    }
}

/// Which master carries `key`'s writes, as the count cache names it.
fn master_of(conn: &Conn, key: &str) -> u16 {
    if conn.is_cluster() {
        crate::engine::keys::slot(key.as_bytes())
    } else {
        0
    }
}

impl ClientInner {
    /// With replica sync on, waits for the replicas to acknowledge the
    /// writes so far on the connection that carries `key`'s (a release's,
    /// sent on it just before). `None` when
    /// there is nothing to wait for: sync is off, the server refused it, or
    /// (in [`Replicas::Online`]) the master has no replica online.
    pub(crate) async fn replicated(&self, key: &str) -> Option<Replicated> {
        let sync = self.config.replica_sync?;
        let state = &self.replicas;
        if state.refused.load(Ordering::Relaxed) {
            return None;
        }
        let (wait_for, wanted) = match sync.replicas {
            Replicas::AtLeast(n) => (n, n),
            Replicas::Online => match self.online_replicas(key).await {
                Ok(0) => return None,
                Ok(n) => (n, 1),
                Err(None) => return None,
                Err(Some(err)) => {
                    tracing::warn!(error = %err, "ROLE failed: the replicas are not known");
                    return Some(Replicated {
                        enough: false,
                        acked: 0,
                        wanted: 1,
                    });
                }
            },
        };
        let timeout_ms = sync.timeout.as_millis() as u64;
        match self.conn.wait_for_replicas(key, wait_for, timeout_ms).await {
            Ok(acked) => {
                if acked < wait_for {
                    // A replica may have gone: count them again next time.
                    state.counts.remove(&master_of(&self.conn, key));
                }
                Some(Replicated {
                    enough: acked >= wanted,
                    acked,
                    wanted,
                })
            }
            // The server answered with an error: it does not allow WAIT.
            Err(err) if err.code().is_some() => {
                state.refuse("WAIT", &err);
                None
            }
            Err(err) => {
                tracing::warn!(error = %err, "WAIT for replicas failed");
                Some(Replicated {
                    enough: false,
                    acked: 0,
                    wanted,
                })
            }
        }
    }

    /// With replica sync on, waits for the replicas to acknowledge the
    /// grant whose acquire latch is `latch` (TTL `latch_ttl` ms): `None`
    /// when there is nothing to wait for (sync is off, the server refused
    /// it, or, in [`Replicas::Online`], the master that has the grant has
    /// no replica online).
    ///
    /// Unlike [`replicated`](Self::replicated), it covers the grant
    /// whatever connection carried it (a resend answered from the latch on
    /// a new connection, a reconnect or a failover since): `WAIT` goes
    /// right behind a write of the latch, on one connection
    /// ([`Conn::touch_latch_then`]), and the replicas it counts have the
    /// grant. A master that has no latch (a failover to a server that
    /// never got the grant) is too few replicas: acknowledged by none.
    /// Costs what a `WAIT` (and, once a second in
    /// [`Replicas::Online`], a `ROLE`; at every grant where the master was
    /// counted with none) did: one round trip each.
    ///
    /// # Cancel safety
    /// Cancel safe: it writes nothing but the latch's TTL; what the grant
    /// took is its caller's to give back when dropped.
    pub(crate) async fn grant_replicated(
        &self,
        key: &str,
        latch: &str,
        latch_ttl: u64,
    ) -> Option<Replicated> {
        let sync = self.config.replica_sync?;
        let state = &self.replicas;
        if state.refused.load(Ordering::Relaxed) {
            return None;
        }
        let missing = |wanted| {
            tracing::warn!(
                key,
                "the grant is not on the master that answers for it \
                (a failover since?): no replica has it"
            );
            Some(Replicated {
                enough: false,
                acked: 0,
                wanted,
            })
        };
        let failed = |wanted, command: &str, err: &redis::RedisError| {
            tracing::warn!(error = %err, "{command} for replicas failed");
            Some(Replicated {
                enough: false,
                acked: 0,
                wanted,
            })
        };
        let master = master_of(&self.conn, key);
        let (wait_for, wanted) = match sync.replicas {
            Replicas::AtLeast(n) => (n, n),
            Replicas::Online => match self.fresh_count(master) {
                Some(n) if n > 0 => (n, 1),
                // Counted anew on the master that answers for the latch,
                // which must have the grant even with no replica to wait
                // for. A count of none is not trusted: a replica may have
                // come online since (a count is kept a second, also
                // through a failover), and the grant would be neither
                // looked for nor waited for.
                _ => match self
                    .conn
                    .touch_latch_then(latch, latch_ttl, redis::cmd("ROLE"))
                    .await
                {
                    Ok((false, _)) => return missing(1),
                    Ok((true, role)) => {
                        let count = super::conn::online_in_role(role);
                        state.counts.insert(master, (count, Instant::now()));
                        if count == 0 {
                            return None;
                        }
                        (count, 1)
                    }
                    Err(err) if err.code().is_some() => {
                        state.refuse("ROLE", &err);
                        return None;
                    }
                    Err(err) => return failed(1, "ROLE", &err),
                },
            },
        };
        let mut wait = redis::cmd("WAIT");
        wait.arg(wait_for).arg(sync.timeout.as_millis() as u64);
        match self.conn.touch_latch_then(latch, latch_ttl, wait).await {
            Ok((false, _)) => {
                state.counts.remove(&master);
                missing(wanted)
            }
            Ok((true, acked)) => {
                let acked: u32 = match redis::from_redis_value(acked) {
                    Ok(acked) => acked,
                    Err(err) => return failed(wanted, "WAIT", &err.into()),
                };
                if acked < wait_for {
                    // A replica may have gone: count them again next time.
                    state.counts.remove(&master);
                }
                Some(Replicated {
                    enough: acked >= wanted,
                    acked,
                    wanted,
                })
            }
            // The server answered with an error: it does not allow WAIT.
            Err(err) if err.code().is_some() => {
                state.refuse("WAIT", &err);
                None
            }
            Err(err) => failed(wanted, "WAIT", &err),
        }
    }

    /// The count of online replicas of `master` when counted less than a
    /// second ago.
    fn fresh_count(&self, master: u16) -> Option<u32> {
        let entry = self.replicas.counts.get(&master)?;
        let (count, at) = *entry;
        (at.elapsed() < COUNT_FRESH_FOR).then_some(count)
    }

    /// How many replicas the master of `key` has online, counted at most
    /// once a second. `Err(None)` when the server refused ROLE (sync is
    /// then off), `Err(Some(..))` when it could not be asked.
    async fn online_replicas(
        &self,
        key: &str,
    ) -> std::result::Result<u32, Option<redis::RedisError>> {
        let master = master_of(&self.conn, key);
        if let Some(count) = self.fresh_count(master) {
            return Ok(count);
        }
        match self.conn.online_replicas(key).await {
            Ok(count) => {
                self.replicas.counts.insert(master, (count, Instant::now()));
                Ok(count)
            }
            Err(err) if err.code().is_some() => {
                self.replicas.refuse("ROLE", &err);
                Err(None)
            }
            Err(err) => Err(Some(err)),
        }
    }
}
