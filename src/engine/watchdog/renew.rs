//! How the watchdog renews: the renewal kinds, one renewal call, and its
//! hedged sends.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::*;

/// How a hold's lease is renewed. The watchdog's own word: the kinds of
/// lock each say which theirs is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Renewal {
    /// The hold's hash, with `renew.lua`.
    Hash,
    /// A read hold of a read-write lock: the hash and the hold's timeout
    /// keys, with `renew_read.lua`.
    ReadHold,
    /// A permit of a permit-expirable semaphore: its score in the
    /// semaphore's `{name}:timeout`, with `renew_permits.lua`. Its
    /// [`HoldKey`] is that key's name and the permit id's 32 hex digits.
    Permit,
}

impl Renewal {
    fn script(self) -> &'static redis::Script {
        match self {
            Renewal::Hash => &RENEW,
            Renewal::ReadHold => &RENEW_READ,
            Renewal::Permit => &RENEW_PERMITS,
        }
    }

    /// Most holds renewed by one call: a read hold sends two keys (its
    /// hash and its timeout keys' prefix) and costs the server about three
    /// times a plain hold, so its calls take half as many. A permit sends
    /// one key and costs about what a plain hold does.
    pub(super) fn holds_per_call(self) -> usize {
        match self {
            Renewal::Hash | Renewal::Permit => RENEW_BATCH,
            Renewal::ReadHold => RENEW_BATCH / 2,
        }
    }
}

/// How a watchdog hold is renewed: its script, and the TTL each renewal
/// sets (the TTL its acquire set).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Renew {
    pub(crate) renewal: Renewal,
    pub(crate) ttl: Duration,
}

/// Most keys sent by one renewal script call. Redisson sends 100; twice
/// that halves the calls, and with them the client's and the server's work
/// per call, which is most of the client's share at a million held locks.
/// A call of 200 plain holds keeps the server about half a millisecond.
pub(crate) const RENEW_BATCH: usize = 200;

/// One renewal script call for some holds of one [`Renewal`]:
/// each key's TTL raised to the given TTL (a longer one kept) if its owner
/// still holds it; Redis replies the positions of the holds that are gone,
/// usually none.
///
/// Built as one EVALSHA command rather than a `ScriptInvocation`, whose
/// keys and arguments are each a `Vec<u8>` of their own, and sized before
/// it is written: a renewal sends two hundred keys, and a million held
/// locks send a hundred thousand a second at the default timeout.
pub(crate) struct RenewCall {
    holds: usize,
    cmd: redis::Cmd,
}

impl RenewCall {
    pub(crate) fn new<'a>(
        renewal: Renewal,
        timeout: Duration,
        holds: impl Iterator<Item = &'a HoldKey> + Clone,
    ) -> RenewCall {
        let script = renewal.script();
        let read = renewal == Renewal::ReadHold;
        let permit = renewal == Renewal::Permit;
        // Lengths only: they sit in the keys' pointers, so sizing the
        // command reads no name or field.
        let (count, bytes) = holds.clone().fold((0, 0), |(count, bytes), hold| {
            // `{name}:<field>:rwlock_timeout`, near enough.
            let prefix = if read {
                hold.name.len() + hold.field.len() + 18
            } else {
                0
            };
            // A permit's id goes as its 16 bytes.
            let field = if permit { 16 } else { hold.field.len() };
            (count + 1, bytes + hold.name.len() + prefix + field)
        });
        let keys = if read { 2 * count } else { count };
        // EVALSHA, the hash, the key count, the keys, the lease, the fields.
        let mut cmd = redis::Cmd::with_capacity(4 + keys + count, 80 + bytes);
        cmd.arg("EVALSHA").arg(script.get_hash()).arg(keys);
        for hold in holds.clone() {
            cmd.arg(&*hold.name);
            if read {
                cmd.arg(keys::rwlock_timeout_prefix(&hold.name, &hold.field));
            }
        }
        cmd.arg(timeout.as_millis() as u64);
        for hold in holds {
            match permit {
                true => cmd.arg(&permit_bytes(&hold.field)[..]),
                false => cmd.arg(&*hold.field),
            };
        }
        RenewCall { holds: count, cmd }
    }

    /// Sends the call (the connection loads the script again when Redis
    /// lost it, as for every script). Returns the indices (from 0,
    /// ascending) of the holds whose owner no longer holds the key.
    pub(crate) async fn send(&self, conn: &mut Conn) -> redis::RedisResult<Vec<usize>> {
        let reply: redis::Value = self.cmd.query_async(conn).await?;
        self.gone(reply)
    }

    /// The reply's 1-based positions as indices, checked: an array (an
    /// empty one says every hold was renewed, so nothing else may stand for
    /// it) whose items each name one of the call's holds, in ascending
    /// order.
    fn gone(&self, reply: redis::Value) -> redis::RedisResult<Vec<usize>> {
        let unexpected = |what: String| {
            redis::RedisError::from((
                redis::ErrorKind::UnexpectedReturnType,
                "unexpected renewal reply",
                what,
            ))
        };
        let redis::Value::Array(positions) = reply else {
            return Err(unexpected(format!("{reply:?}")));
        };
        let mut gone: Vec<usize> = Vec::with_capacity(positions.len());
        for position in positions {
            let index = match position {
                redis::Value::Int(p) => usize::try_from(p).ok().and_then(|p| p.checked_sub(1)),
                _ => None,
            }
            .filter(|&i| i < self.holds && gone.last().is_none_or(|&last| last < i));
            let Some(index) = index else {
                return Err(unexpected(format!(
                    "position {position:?} for {} holds",
                    self.holds
                )));
            };
            gone.push(index);
        }
        Ok(gone)
    }
}

/// A permit id's 16 bytes from the 32 hex digits of its [`HoldKey`]'s
/// field (written by the permit's own code, so well formed; anything else
/// would name no permit, and its renewal would find it gone).
fn permit_bytes(hex: &str) -> [u8; 16] {
    let mut bytes = [0u8; 16];
    for (i, byte) in bytes.iter_mut().enumerate() {
        *byte = hex
            .get(2 * i..2 * i + 2)
            .and_then(|pair| u8::from_str_radix(pair, 16).ok())
            .unwrap_or(0);
    }
    bytes
}

/// Renews one call's worth (up to [`RENEW_BATCH`] keys) of a batch that
/// fell due. The calls of one batch go out side by side, each in its own
/// task: a stalled reply holds up no other call, and each lease is read
/// by the task that sends it, while it is in the cache.
pub(super) async fn renew_chunk(shared: Arc<Shared>, chunk: Vec<Arc<LeaseState>>, how: Renew) {
    let sent = Instant::now();
    let live = shared.live(chunk, sent);
    if !live.is_empty() {
        renew(&shared, live, sent, how).await;
    }
}

/// Renews one call's worth of leases of one renewal and TTL (`how`) in
/// one script call sent at `sent`.
async fn renew(shared: &Shared, batch: Vec<Arc<LeaseState>>, sent: Instant, how: Renew) {
    let Renew {
        renewal,
        ttl: timeout,
    } = how;
    let deadline = batch
        .iter()
        .map(|lease| lease.deadline())
        .min()
        .unwrap_or(sent + timeout);
    let call = RenewCall::new(
        renewal,
        timeout,
        batch
            .iter()
            .filter_map(|lease| lease.watched.as_ref().map(|w| &w.key)),
    );
    // Only watched leases are scheduled: the reply's positions are the
    // batch's indices.
    debug_assert_eq!(call.holds, batch.len());
    let reply = match send_hedged(&call, &shared.conn, sent, deadline).await {
        Some((at, Ok(gone))) => Ok((at, gone)),
        Some((_, Err(err))) => Err((err.to_string(), lost_connection(&err))),
        None => Err(("no reply before the first lease ran out".into(), false)),
    };
    match reply {
        Ok((at, gone)) => {
            let confirmed = at + timeout - drift_margin(timeout);
            let mut kept = Vec::with_capacity(batch.len() - gone.len());
            let mut gone = gone.into_iter().peekable();
            for (index, lease) in batch.into_iter().enumerate() {
                if gone.next_if_eq(&index).is_some() {
                    shared.lose(
                        &lease,
                        "no longer held by its owner (expired, deleted, released or taken)",
                        Lost::Gone,
                    );
                } else {
                    lease.extend(confirmed);
                    kept.push(lease);
                }
            }
            shared.reschedule(kept, at + timeout / 3);
        }
        Err((error, lost_connection)) => {
            let first = batch[0].watched.as_ref().map_or("", |w| &*w.key.name);
            telemetry::renewal_failed(batch.len());
            // A connection found lost or refused is retried almost at once:
            // the connection reconnects in the background, and Redis may
            // come back empty (a restart without persistence), when a rival
            // can take the lock at once: the holder must hear of it as soon
            // as Redis answers, not a retry interval later. A retry that
            // finds the reconnection still under way waits for it, so this
            // adds no load on a Redis that is down.
            let pause = if lost_connection {
                tracing::debug!(keys = batch.len(), %first, %error, "lease renewal found no connection; retrying");
                reconnect_retry(timeout)
            } else {
                tracing::warn!(keys = batch.len(), %first, %error, "lease renewal failed; retrying");
                retry_interval(timeout)
            };
            shared.reschedule(batch, (Instant::now() + pause).min(deadline));
        }
    }
}

/// How many copies of one renewal may be sent (see [`send_hedged`]).
const RENEWAL_SENDS: u32 = 3;

/// Sends `call` at `sent`, and again beside the copies still on their way
/// at each third of the time from `sent` to `deadline` that passes without
/// a reply ([`RENEWAL_SENDS`] copies at most, none at or after
/// `deadline`); replies the first reply with the instant its copy was
/// sent. A copy's error counts only once no other copy is on its way (the
/// last error is replied then); `None` when neither came by `deadline`.
///
/// One request can get neither a reply nor an error for as long as the
/// connection's response timeout (3 s by default, longer than a short
/// lease's slack): one sent on a connection at the moment it is cut was
/// seen to wait that long in the `redis` crate, while the connection
/// manager had already reconnected and other requests went through. A
/// copy sent later goes on the connection in use then. A copy that still
/// runs after the reply does what any renewal does (and what one resent
/// after an error did already): it sets the watchdog TTL where the owner
/// still holds the key.
///
/// # Cancel safety
/// Dropped, the copies on their way may still run, as one send may.
async fn send_hedged(
    call: &RenewCall,
    conn: &Conn,
    sent: Instant,
    deadline: Instant,
) -> Option<(Instant, redis::RedisResult<Vec<usize>>)> {
    use futures_util::stream::{FuturesUnordered, StreamExt};
    let send = |copy: u32, at: Instant| {
        let mut conn = conn.clone();
        telemetry::renewal_sent(call.holds);
        async move { (copy, at, call.send(&mut conn).await) }
    };
    let spacing = deadline.saturating_duration_since(sent) / 3;
    let mut copies = FuturesUnordered::new();
    copies.push(send(0, sent));
    let mut sends = 1;
    let mut next = sent + spacing;
    loop {
        tokio::select! {
            biased;
            Some((copy, at, answer)) = copies.next() => {
                if copy > 0 {
                    tracing::debug!(
                        keys = call.holds,
                        copy,
                        ok = answer.is_ok(),
                        "lease renewal answered by a later copy"
                    );
                }
                if answer.is_ok() || copies.is_empty() {
                    return Some((at, answer));
                }
            }
            () = tokio::time::sleep_until(deadline) => return None,
            () = tokio::time::sleep_until(next), if sends < RENEWAL_SENDS => {
                let now = Instant::now();
                if now >= deadline {
                    return None;
                }
                tracing::debug!(
                    keys = call.holds,
                    waited_ms = now.saturating_duration_since(sent).as_millis() as u64,
                    "lease renewal not answered yet; sending it again beside it"
                );
                copies.push(send(sends, now));
                sends += 1;
                next = now + spacing;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_renewal_reply_names_gone_holds_once_each_in_order() {
        let keys: Vec<HoldKey> = ["a", "b", "c"]
            .iter()
            .map(|name| HoldKey::new(Arc::from(*name), Arc::from("owner")))
            .collect();
        let call = RenewCall::new(Renewal::Hash, Duration::from_secs(30), keys.iter());
        let ints =
            |p: &[i64]| redis::Value::Array(p.iter().map(|&i| redis::Value::Int(i)).collect());
        assert_eq!(call.gone(ints(&[])).unwrap(), Vec::<usize>::new());
        assert_eq!(call.gone(ints(&[1, 3])).unwrap(), vec![0, 2]);
        assert_eq!(call.gone(ints(&[1, 2, 3])).unwrap(), vec![0, 1, 2]);
        // Out of range, repeated or out of order, not an array of integers
        // (a nil must not pass for "all renewed"): not a reply of this call.
        let bad = [
            ints(&[0]),
            ints(&[4]),
            ints(&[-1]),
            ints(&[2, 2]),
            ints(&[3, 1]),
            redis::Value::Nil,
            redis::Value::Int(0),
            redis::Value::Array(vec![redis::Value::Nil]),
        ];
        for reply in bad {
            let err = call.gone(reply.clone()).unwrap_err();
            assert_eq!(
                err.kind(),
                redis::ErrorKind::UnexpectedReturnType,
                "{reply:?}"
            );
        }
    }
}
