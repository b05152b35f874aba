//! The one release of a hold: idempotent per request id, resent on a
//! failed connection.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Mutex;

use crate::client::conn::Conn;
use crate::engine::keys;
use crate::engine::object::error_about;
use crate::engine::request;
use crate::engine::request::give_back::{latch_ttl_ms, surely_ended};
use crate::engine::watchdog::{HoldKey, LeaseState};
use crate::lock::kind::{DoneMark, ReleaseArgs};
use crate::lock::Kind;
use crate::{Client, Error, Result};

/// How a release is resent when its send fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Resend {
    /// After a failed connection, up to `release_attempts` sends: a release
    /// its caller awaits (`unlock`), which then reports the failure.
    Bounded,
    /// Until it gets through, or until the hold has surely expired in
    /// Redis, and only while its lease runs ([`ReleaseCall::stands`]): a
    /// release nobody awaits (a give-back of a hold its caller
    /// never saw, a dropped guard's). Its lease counts from the start of
    /// the release (Redis set it earlier); while this client's watchdog
    /// renews the owner's key (the owner holds it through other guards),
    /// the hold lives on with it, and so do the resends; as it does while
    /// another hold of the owner that shares the key stands (see
    /// [`ReleaseCall::stands`]).
    UntilExpired,
}

/// What a release stands by: until when the hold it releases surely still
/// stands in Redis, by this process's clock.
pub(crate) trait Stands: Sync {
    /// Whether the hold surely stands at `at`.
    fn stands_at(&self, at: Instant) -> bool;
    /// The latest instant it surely stands until, as known now; `None`
    /// when it is known lost.
    fn deadline(&self) -> Option<Instant>;
}

impl Stands for LeaseState {
    fn stands_at(&self, at: Instant) -> bool {
        LeaseState::stands_at(self, at)
    }

    fn deadline(&self) -> Option<Instant> {
        self.stands_until()
    }
}

/// A release's answer from Redis.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Answer {
    /// What the script replied: 0 when holds of the owner remain (the TTL
    /// reset to the release's lease), 1 when it was the last, 2 when the
    /// last is kept.
    pub(crate) reply: i64,
    /// With holds remaining, the TTL (ms) the key got when the script says
    /// (a read release: the longest remaining read hold's).
    pub(crate) kept_ms: Option<u64>,
    /// When the first send of the release went: the send that ran went no
    /// earlier.
    pub(crate) first_sent: Instant,
}

/// Sends one release of `owner`'s hold on `name` with `kind`'s script,
/// resending it with the same request id when the connection fails, as
/// `resend` says. `lease_ms`: the TTL the key gets back when holds remain,
/// and the longest the hold lasts.
pub(crate) async fn release_hold(
    client: &Client,
    kind: Kind,
    name: &str,
    owner: &str,
    lease_ms: u64,
    stands: Option<&LeaseState>,
    resend: Resend,
) -> Result<()> {
    let stands = stands.map(|lease| lease as &dyn Stands);
    let request_id = client.request_id();
    let conn = client.conn();
    let release = ReleaseCall {
        kind,
        name,
        owner,
        lease_ms,
        request_id: &request_id,
        stands,
        keep_until: None,
        done: None,
        grant: None,
    };
    release_hold_as(client, conn, &release, resend)
        .await
        .map(|_| ())
}

/// One release request: what [`release_hold_as`] sends.
#[derive(Clone, Copy)]
pub(crate) struct ReleaseCall<'a> {
    pub(crate) kind: Kind,
    pub(crate) name: &'a str,
    pub(crate) owner: &'a str,
    pub(crate) lease_ms: u64,
    /// Chosen by the caller: a second call with the same id (the same
    /// release, run again after its runtime shut down, on a connection of
    /// its own) releases nothing more.
    pub(crate) request_id: &'a str,
    /// The lease the hold stands by, where the caller knows it (a guard's,
    /// the watchdog's of the owner's other holds, or, for a give-back, the
    /// TTL counted from the first send that may have taken the hold): the
    /// release is sent, and sent again, only while that lease runs by this
    /// client's clock (else it fails: `LeaseLost` before any send, the last
    /// send's error after one). Past its end the hold may be gone, and the
    /// owner may hold the lock anew: a release reaching Redis then would
    /// take that newer hold (the hash counts holds per owner, not per
    /// acquire). `None` when nothing is known of it (`Lock::unlock` of a
    /// hold with neither a guard nor a watchdog entry here). A guard's
    /// release stands by every hold of its owner that shares the key with
    /// it (see [`Standing`](super::holds::Standing)): its count stays in
    /// the key while any of them keeps it alive, and a release resent until
    /// the hold has surely expired is resent that long.
    pub(crate) stands: Option<&'a dyn Stands>,
    /// Until when the owner keeps its last hold instead of releasing it (a
    /// job's "at least for"): each send asks for the time left then,
    /// rounded up; a send at or after it releases.
    pub(crate) keep_until: Option<Instant>,
    /// The occurrence a job's run marks done with its last hold's release.
    pub(crate) done: Option<&'a DoneMark>,
    /// For a give-back (the release of a hold whose caller never got it),
    /// the acquire latch of the request that took it: released only while
    /// the latch shows that grant, so that a give-back reaching a master
    /// that lost the grant in a failover takes none of the owner's other
    /// holds there (it replies as "not held"). `None` for a guard's release.
    pub(crate) grant: Option<&'a str>,
}

/// [`release_hold`] on `conn`, for a request the caller made.
pub(crate) async fn release_hold_as(
    client: &Client,
    conn: Conn,
    release: &ReleaseCall<'_>,
    resend: Resend,
) -> Result<Answer> {
    let ReleaseCall {
        kind,
        name,
        owner,
        lease_ms,
        request_id,
        stands,
        keep_until,
        done,
        grant,
    } = *release;
    let config = client.config();
    let latch = keys::unlock_latch(name, request_id);
    let until = Until(Mutex::new(surely_ended(
        config,
        Instant::now(),
        Duration::from_millis(lease_ms),
    )));
    let watched: Option<HoldKey> =
        (resend == Resend::UntilExpired).then(|| HoldKey::new(Arc::from(name), Arc::from(owner)));
    let policy = match resend {
        Resend::Bounded => request::Resend::awaited(config),
        Resend::UntilExpired => request::Resend::until_through(),
    };
    let sent = AtomicU32::new(0);
    let first_sent = Instant::now();
    // The failure before the lease ran out, if a send failed.
    let failed: Mutex<Option<redis::RedisError>> = Mutex::new(None);
    let go_on = |err: &redis::RedisError| {
        *failed.lock().unwrap_or_else(|p| p.into_inner()) = Some(err.clone());
        resend == Resend::Bounded || Instant::now() < until.get()
    };
    let (latch, watched, conn, until, sent) = (&latch, &watched, &conn, &until, &sent);
    let reply = request::resend(policy, "release", name, go_on, move |_| async move {
        // Checked right before each send (a resend's pause, a rerun after
        // the runtime shut down, may have taken it past the lease's end).
        if stands.is_some_and(|lease| !lease.stands_at(Instant::now())) {
            return Ok(Sent::LeaseOver);
        }
        sent.fetch_add(1, Ordering::Relaxed);
        let latch_ttl = match watched {
            None => config.unlock_latch_ttl_ms(),
            Some(key) => {
                if let Some(ttl) = client.registry().ttl_of(key) {
                    let renewed = surely_ended(config, Instant::now(), ttl);
                    until.at_least(renewed);
                }
                // Nor before the holds it stands by have surely ended (a
                // grant of the owner that joined it since, or a release
                // that left holds, moves that on: like a renewal, only by a
                // call that got through, when this release's resends do
                // too, so a send that ran wrote a latch they still meet).
                if let Some(deadline) = stands.and_then(|s| s.deadline()) {
                    until.at_least(surely_ended(config, deadline, Duration::ZERO));
                }
                // Every resend of it must meet the latch a send that ran
                // wrote. Resends stop at `until`; and it moves on only while
                // the watchdog's renewals get through, when this release's
                // resends do too.
                latch_ttl_ms(config, until.get())
            }
        };
        let call = kind.release(&ReleaseArgs {
            name,
            field: owner,
            latch,
            lease_ms,
            publish: client.publish(),
            latch_ttl,
            keep_ms: keep_until.map_or(0, |until| {
                ceil_ms(until.saturating_duration_since(Instant::now()))
            }),
            done,
            grant,
        });
        let mut conn = conn.clone();
        call.invoke_async::<Option<i64>>(&mut conn)
            .await
            .map(Sent::Replied)
    })
    .await;
    let reply = match reply {
        Ok(Sent::Replied(reply)) => reply,
        Ok(Sent::LeaseOver) => {
            return Err(
                match failed.into_inner().unwrap_or_else(|p| p.into_inner()) {
                    Some(err) => error_about(err, name, "lock"),
                    None => Error::LeaseLost {
                        name: name.to_owned(),
                    },
                },
            )
        }
        Err(err) => return Err(error_about(err, name, "lock")),
    };
    let sent = sent.load(Ordering::Relaxed);
    if reply.is_some() {
        // The script wrote the latch; it only matters to sends of this
        // request: have it deleted rather than left to its TTL, unless a
        // send failed, which may still reach Redis and must find it (or
        // release a second time: a re-entered hold, or the owner's next).
        if sent == 1 {
            client.sweeper().discard(latch.clone());
        }
        let verdict = client.replicated(name).await;
        if let Some(verdict) = verdict.filter(|v| !v.enough) {
            tracing::warn!(lock = %name, acked = verdict.acked,
                "too few replicas acknowledged a release in time; it stands on the master");
        }
    }
    match reply {
        Some(reply @ 0..=2) => Ok(Answer {
            reply,
            kept_ms: None,
            first_sent,
        }),
        // Holds remain, the key kept for that many ms (a read release).
        Some(reply) if reply < 0 => Ok(Answer {
            reply: 0,
            kept_ms: Some(reply.unsigned_abs()),
            first_sent,
        }),
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

/// Until when a release nobody awaits is resent: moved on, never back, by
/// what each send learns.
struct Until(Mutex<Instant>);

impl Until {
    fn get(&self) -> Instant {
        *self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn at_least(&self, at: Instant) {
        let mut until = self.0.lock().unwrap_or_else(|p| p.into_inner());
        *until = (*until).max(at);
    }
}

/// What one send of a release came to.
enum Sent {
    /// Redis's reply.
    Replied(Option<i64>),
    /// Nothing sent: the lease the release stands by ran out before it.
    LeaseOver,
}

/// `left` in whole milliseconds, rounded up: a hold kept for it lasts at
/// least that long.
fn ceil_ms(left: Duration) -> u64 {
    let ms = left.as_millis() as u64;
    match left > Duration::from_millis(ms) {
        true => ms + 1,
        false => ms,
    }
}
