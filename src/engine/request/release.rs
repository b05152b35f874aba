//! The one release of a hold: idempotent per request id (its *unlock
//! latch*), resent on a failed connection. What it sends is its
//! synchronizer's script ([`release`]'s `build`), and what the reply
//! means is the synchronizer's too: this is the request's life, from the
//! first send to the sweep of its latch.

use std::sync::Mutex;
use std::time::Duration;

use redis::ScriptInvocation;
use tokio::time::Instant;

use super::give_back::{latch_ttl_ms, surely_ended};
use super::resend::resend;
use crate::engine::keys;
use crate::engine::object::Object;
use crate::engine::watchdog::{drift_margin, HoldKey, LeaseState};
use crate::{Error, Result};

/// How a release is resent when its send fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Resend {
    /// After a failed connection, up to `release_attempts` sends: a release
    /// its caller awaits (`unlock`), which then reports the failure.
    Bounded,
    /// Until it gets through, or until the hold has surely expired in
    /// Redis, and only while its lease runs ([`Release::stands`]): a
    /// release nobody awaits (a give-back of a hold its caller
    /// never saw, a dropped guard's). Its lease counts from the start of
    /// the release (Redis set it earlier); while this client's watchdog
    /// renews the owner's key (the owner holds it through other guards),
    /// the hold lives on with it, and so do the resends; as it does while
    /// another hold of the owner that shares the key stands (see
    /// [`Release::stands`]).
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

/// One release request of `owner`'s hold on an object.
#[derive(Clone, Copy)]
pub(crate) struct Release<'a> {
    /// The owner's field in the object's hash.
    pub(crate) owner: &'a str,
    /// The TTL the key gets back when holds remain, and the longest the
    /// hold lasts.
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
    /// it: its count stays in the key while any of them keeps it alive,
    /// and a release resent until the hold has surely expired is resent
    /// that long.
    pub(crate) stands: Option<&'a dyn Stands>,
    /// How it is resent.
    pub(crate) resend: Resend,
}

/// What each send of a release names: its synchronizer's script takes them.
pub(crate) struct Sending<'a> {
    /// The unlock latch of the request.
    pub(crate) latch: &'a str,
    /// How long the latch lives (ms): every resend must meet the latch a
    /// send that ran wrote.
    pub(crate) latch_ttl: u64,
}

/// A release's reply from Redis, and when its first send went (the send
/// that ran went no earlier).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Released {
    /// The script's reply; `None`: the owner held nothing.
    pub(crate) reply: Option<i64>,
    pub(crate) first_sent: Instant,
}

/// Sends one release of a hold on `obj` (on the connection `obj` is
/// bound to) with the script `build` makes, resending it with the same
/// request id when the connection fails, as `release.resend` says; `what`
/// names the hold's object in errors. `lost` is told, when a send's reply
/// was lost and no later send wrote the latch (the release ended
/// unanswered, or answered that the owner held nothing), until when (by
/// this clock) such a send may still run: as long as the latch it would
/// write lasts, and a drift margin more (the latched protocol's bound on a
/// late send; a lock's owner goes latched until then, see `lock::gate`).
/// A latch written meets every late send, which then releases nothing.
///
/// # Cancel safety
/// A send that may have run wrote the request's latch: a resend of it,
/// or a rerun of the whole release under the same request id, releases
/// nothing more.
pub(crate) async fn release(
    obj: &Object,
    release: &Release<'_>,
    lost: &(dyn Fn(Instant) + Sync),
    build: impl Fn(Sending<'_>) -> ScriptInvocation<'static>,
) -> Result<Released> {
    let Release {
        owner,
        lease_ms,
        request_id,
        stands,
        resend: how,
    } = *release;
    let (client, name) = (obj.client(), obj.name());
    let config = client.config();
    let latch = keys::unlock_latch(name, request_id);
    let until = Until(Mutex::new(surely_ended(
        config,
        Instant::now(),
        Duration::from_millis(lease_ms),
    )));
    let watched = (how == Resend::UntilExpired)
        .then(|| HoldKey::new(obj.shared_name().clone(), std::sync::Arc::from(owner)));
    let policy = match how {
        Resend::Bounded => super::Resend::awaited(config),
        Resend::UntilExpired => super::Resend::until_through(),
    };
    let first_sent = Instant::now();
    // The failure before the lease ran out, if a send failed.
    let failed: Mutex<Option<redis::RedisError>> = Mutex::new(None);
    // Until when a send whose reply was lost may run, if one was.
    let lost_until: Until = Until(Mutex::new(first_sent));
    let lost_until = &lost_until;
    let go_on = |err: &redis::RedisError| {
        *failed.lock().unwrap_or_else(|p| p.into_inner()) = Some(err.clone());
        how == Resend::Bounded || Instant::now() < until.get()
    };
    let (latch, watched, until, build) = (&latch, &watched, &until, &build);
    let sent = resend(policy, "release", name, go_on, move |n| async move {
        // Checked right before each send (a resend's pause, a rerun after
        // the runtime shut down, may have taken it past the lease's end).
        if stands.is_some_and(|lease| !lease.stands_at(Instant::now())) {
            return Ok(Sent::LeaseOver);
        }
        let latch_ttl = match watched {
            None => config.unlock_latch_ttl_ms(),
            Some(key) => {
                if let Some(ttl) = client.registry().ttl_of(key) {
                    until.at_least(surely_ended(config, Instant::now(), ttl));
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
        let mut conn = obj.conn();
        let reply = build(Sending { latch, latch_ttl })
            .invoke_async::<Option<i64>>(&mut conn)
            .await
            .inspect_err(|err| {
                if crate::error::is_connection_failure(err) {
                    // It may still run, with no deadline, as long as its
                    // latch would last.
                    let lasts = Duration::from_millis(latch_ttl);
                    lost_until.at_least(Instant::now() + lasts + drift_margin(lasts));
                }
            })?;
        Ok(Sent::Replied {
            reply,
            sends: n + 1,
        })
    })
    .await;
    if !matches!(sent, Ok(Sent::Replied { reply: Some(_), .. })) && lost_until.get() > first_sent {
        lost(lost_until.get());
    }
    let (reply, sends) = match sent {
        Ok(Sent::Replied { reply, sends }) => (reply, sends),
        Ok(Sent::LeaseOver) => {
            return Err(
                match failed.into_inner().unwrap_or_else(|p| p.into_inner()) {
                    Some(err) => obj.error(err),
                    None => Error::LeaseLost {
                        name: name.to_owned(),
                    },
                },
            )
        }
        Err(err) => return Err(obj.error(err)),
    };
    if reply.is_some() {
        // The script wrote the latch; it only matters to sends of this
        // request: have it deleted rather than left to its TTL, unless a
        // send failed, which may still reach Redis and must find it (or
        // release a second time: a re-entered hold, or the owner's next).
        if sends == 1 {
            client.sweeper().discard(latch.clone());
        }
        obj.release_synced().await;
    }
    Ok(Released { reply, first_sent })
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
    /// Redis's reply, to the send numbered `sends` from 1.
    Replied { reply: Option<i64>, sends: u32 },
    /// Nothing sent: the lease the release stands by ran out before it.
    LeaseOver,
}
