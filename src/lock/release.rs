//! A lock's release: its kind's script, and what the reply says. The
//! request itself (its latch, its resends, its sweep) is the engine's
//! ([`request::release()`]).

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::engine::object::Object;
use crate::engine::request::release::{self as request, Release, Resend, Stands};
use crate::engine::watchdog::LeaseState;
use crate::lock::kind::{DoneMark, ReleaseArgs};
use crate::lock::Kind;
use crate::{Client, Error, Result};

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
    name: &Arc<str>,
    owner: &str,
    lease_ms: u64,
    stands: Option<&LeaseState>,
    resend: Resend,
) -> Result<()> {
    let request_id = client.request_id();
    let release = ReleaseCall {
        kind,
        release: Release {
            owner,
            lease_ms,
            request_id: &request_id,
            stands: stands.map(|lease| lease as &dyn Stands),
            resend,
        },
        keep_until: None,
        done: None,
        grant: None,
    };
    let lock = Object::named(client.clone(), Arc::clone(name), "lock");
    release_hold_as(&lock, &release).await.map(|_| ())
}

/// One release request of a lock's hold: what [`release_hold_as`] sends.
#[derive(Clone, Copy)]
pub(crate) struct ReleaseCall<'a> {
    pub(crate) kind: Kind,
    /// The request: whose hold, under which id, standing by what, resent
    /// how.
    pub(crate) release: Release<'a>,
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

/// [`release_hold`] of the hold on `lock` (sent on the connection `lock`
/// is bound to), for a request the caller made.
pub(crate) async fn release_hold_as(lock: &Object, call: &ReleaseCall<'_>) -> Result<Answer> {
    let ReleaseCall {
        kind,
        release,
        keep_until,
        done,
        grant,
    } = *call;
    let publish = lock.client.publish();
    let released = request::release(lock, &release, |sending| {
        kind.release(&ReleaseArgs {
            name: &lock.name,
            field: release.owner,
            latch: sending.latch,
            lease_ms: release.lease_ms,
            publish,
            latch_ttl: sending.latch_ttl,
            keep_ms: keep_until.map_or(0, |until| {
                ceil_ms(until.saturating_duration_since(Instant::now()))
            }),
            done,
            grant,
        })
    })
    .await?;
    let first_sent = released.first_sent;
    match released.reply {
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
            name: lock.name.to_string(),
            owner: release.owner.to_owned(),
        }),
        Some(other) => Err(Error::UnexpectedReply {
            script: "release",
            reply: other.to_string(),
        }),
    }
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
