//! The one release of a hold: idempotent per request id, resent on a
//! failed connection.

use std::time::Duration;

use crate::client::conn::Conn;
use crate::error::is_connection_failure;
use crate::lock::Kind;
use crate::scripts::{
    FAIR_RELEASE, READ_RELEASE, RELEASE, UNLOCK_MESSAGE, WAKE_ALL_MESSAGE, WRITE_RELEASE,
};
use crate::{keys, Client, Error, Result};

/// Sends one release of `owner`'s hold on `name` with `kind`'s script,
/// resending it with the same request id when the connection fails.
pub(crate) async fn release_hold(
    client: &Client,
    kind: Kind,
    name: &str,
    owner: &str,
    lease_ms: u64,
) -> Result<()> {
    let request_id = client.inner.request_id();
    let conn = client.inner.conn.clone();
    release_hold_as(client, conn, kind, name, owner, lease_ms, &request_id).await
}

/// [`release_hold`] on `conn`, under a request id the caller chose: a
/// second call with the same id (the same release, run again after its
/// runtime shut down, on a connection of its own) releases nothing more.
pub(crate) async fn release_hold_as(
    client: &Client,
    mut conn: Conn,
    kind: Kind,
    name: &str,
    owner: &str,
    lease_ms: u64,
    request_id: &str,
) -> Result<()> {
    let inner = &client.inner;
    let latch = keys::unlock_latch(name, request_id);
    let channel = kind.channel(name);
    let latch_ttl = inner.config.unlock_latch_ttl_ms();
    let attempts = inner.config.release_attempts.max(1);
    let mut sent = 0;
    let reply = loop {
        sent += 1;
        let call = if kind == Kind::Read {
            let mut call = READ_RELEASE.key(name);
            call.key(&channel)
                .key(keys::rwlock_timeout_prefix(name, owner))
                .key(keys::rwlock_key_prefix(name))
                .key(&latch)
                .arg(UNLOCK_MESSAGE)
                .arg(owner)
                .arg(inner.publish())
                .arg(latch_ttl);
            call
        } else {
            // The others share one shape: the hash, their own keys, the
            // channel and the latch; message, lease, owner, publish, TTL.
            let (script, queue, message) = match kind {
                Kind::Fair { .. } => (&*FAIR_RELEASE, true, UNLOCK_MESSAGE),
                Kind::Write => (&*WRITE_RELEASE, false, WAKE_ALL_MESSAGE),
                _ => (&*RELEASE, false, UNLOCK_MESSAGE),
            };
            let mut call = script.key(name);
            if queue {
                call.key(keys::fair_queue(name))
                    .key(keys::fair_timeouts(name));
            }
            call.key(&channel)
                .key(&latch)
                .arg(message)
                .arg(lease_ms)
                .arg(owner)
                .arg(inner.publish())
                .arg(latch_ttl);
            call
        };
        match call.invoke_async::<Option<i64>>(&mut conn).await {
            Ok(reply) => break reply,
            Err(err) if sent < attempts && is_connection_failure(&err) => {
                tracing::debug!(lock = %name, error = %err, "release failed; sending it again");
                tokio::time::sleep(Duration::from_millis(100 * sent as u64)).await;
            }
            Err(err) => return Err(Error::from_redis(err, name, "lock")),
        }
    };
    if reply.is_some() {
        // The script wrote the latch; it only matters to resends of this
        // request: have it deleted rather than left to its TTL.
        inner.sweeper.discard(latch);
        let verdict = inner.replicated(name).await;
        if let Some(verdict) = verdict.filter(|v| !v.enough) {
            tracing::warn!(lock = %name, acked = verdict.acked,
                "too few replicas acknowledged a release in time; it stands on the master");
        }
    }
    match reply {
        Some(0 | 1) => Ok(()),
        None => Err(Error::NotHeld {
            name: name.to_owned(),
            owner: owner.to_owned(),
        }),
        Some(other) => Err(Error::UnexpectedReply {
            script: "release",
            reply: other.to_string(),
        }),
    }
}
