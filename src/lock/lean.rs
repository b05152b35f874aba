//! The lean protocol's sends (`docs/model.md`, "The lean protocol"): an
//! owner that holds nothing of a reentrant or spin lock, with nothing of
//! it on its way (its [gate](super::gate) says so), takes its one hold with
//! `lua/lean_acquire.lua` and releases it with `lua/lean_release.lua`,
//! neither of which writes a latch key. Each send carries its deadline by
//! the server's clock (one response timeout from the send, as a latched
//! acquire's) and is never sent again: a copy of it runs before that
//! deadline or not at all. A send whose reply is lost closes the owner's
//! gate, and is settled by `lua/lean_settle.lua` once the server's clock is
//! past its deadline: the hold it may have taken, or kept, is released
//! then (nothing else of the owner's can have changed the lock meanwhile).
//!
//! The client turns to the latched protocol for good after the first lost
//! reply of a lock's command (see `Client::lean_off`): a latched release
//! whose reply was lost carries no deadline, so no later lean call could
//! wait it out.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use redis::ScriptInvocation;
use tokio::runtime::Handle;
use tokio::time::Instant;

use super::gate::{Gates, Ticket};
use super::kind::{Kind, Reentry};
use crate::engine::keys;
use crate::engine::object::Object;
use crate::engine::scripts::{LEAN_ACQUIRE, LEAN_RELEASE, LEAN_SETTLE, UNLOCK_MESSAGE};
use crate::engine::watchdog::{drift_margin, HoldKey};
use crate::error::is_connection_failure;

/// What a lean script replies when it ran after its send's deadline.
const TOO_LATE: i64 = -5;

/// What a lean script replies when it ran before the owner's not-before.
const NOT_YET: i64 = -6;

/// How long a settle waits before it asks again, while the server's clock
/// is not past the lost sends' deadline, or after its own send failed.
const SETTLE_AGAIN: Duration = Duration::from_millis(50);

/// Whether `kind`'s holds may go lean: the reentrant lock's and the spin
/// lock's (the same hash and scripts). A non-reentrant lock's re-acquire
/// must be refused, which the lean acquire does not tell.
pub(super) fn capable(kind: Kind) -> bool {
    matches!(kind, Kind::Plain(Reentry::Counted) | Kind::Spin(_))
}

/// What a lean acquire's send came to.
#[derive(Debug)]
pub(super) enum Took {
    /// The owner holds the lock now.
    Granted,
    /// Held by another: its TTL (ms, -1 without one).
    Held(i64),
    /// It ran after its deadline and took nothing.
    TooLate,
    /// It ran before the owner's not-before and took nothing: the latched
    /// acquire goes instead.
    NotYet,
    /// Its reply was lost: settled in the background, the owner's gate
    /// closed until then.
    Lost,
}

/// Sends one lean acquire of `key`'s owner on `lock` with a TTL of
/// `ttl_ms`, carrying `not_before`; `ticket` is the gate's lean claim,
/// which the caller keeps until its guard is made, and the send keeps
/// until its reply is dealt with.
///
/// # Cancel safety
/// Cancel safe: once sent, its reply is read on `runtime` whatever becomes
/// of the caller, and the owner's gate stays closed until it is dealt
/// with: a grant whose caller left is released, a lost reply settled.
pub(super) async fn acquire(
    lock: &Object,
    key: &HoldKey,
    ttl_ms: u64,
    (ticket, not_before): (Arc<Ticket>, u64),
    runtime: &Handle,
) -> redis::RedisResult<Took> {
    let client = lock.client();
    let lasts = Duration::from_millis(ttl_ms);
    let deadline = client.send_deadline(&key.name).await?;
    let mut call = LEAN_ACQUIRE.key(&*key.name);
    call.arg(ttl_ms)
        .arg(&*key.field)
        .arg(deadline)
        .arg(not_before);
    let mut conn = lock.conn();
    let request = async move { call.invoke_async::<Option<i64>>(&mut conn).await };
    let (left_lock, left_key, left_runtime) = (lock.clone(), key.clone(), runtime.clone());
    let orphan = move |reply: redis::RedisResult<Option<i64>>| async move {
        match reply {
            // Taken for a caller that left: released at once (its reply
            // was read: no copy of it is left to run).
            Ok(None) => give_back(&left_lock, &left_key, lasts).await,
            Err(err) if is_connection_failure(&err) => {
                lost(&left_lock, &left_key, (deadline, lasts), &left_runtime);
            }
            Ok(_) | Err(_) => {}
        }
        // The gate opens (or waits for the settle) only now.
        drop(ticket);
    };
    let reply = crate::engine::finish::Finish::new(runtime.clone(), request, orphan).await;
    let took = match reply {
        Ok(None) => Took::Granted,
        Ok(Some(TOO_LATE)) => {
            client.forget_clock(&key.name);
            Took::TooLate
        }
        Ok(Some(NOT_YET)) => return Ok(Took::NotYet),
        Ok(Some(pttl)) => Took::Held(pttl),
        Err(err) if is_connection_failure(&err) => {
            lost(lock, key, (deadline, lasts), runtime);
            return Ok(Took::Lost);
        }
        Err(err) => return Err(err),
    };
    Gates::get().answered(key, not_before);
    Ok(took)
}

/// Releases a hold a lean acquire took for a caller that left, with the
/// lean release (its gate still closed by the acquire's claim).
async fn give_back(lock: &Object, key: &HoldKey, lasts: Duration) {
    let lost_at = AtomicU64::new(0);
    loop {
        match release(lock, key, (0, lasts), &lost_at).await {
            // Too late by a clock reading that was behind: sent again.
            Ok(Let::Latched) => continue,
            Ok(_) => return,
            Err(err) => {
                tracing::warn!(lock = %key.name, owner = %key.field, error = %err,
                    "could not release a hold a lean acquire took for a caller that left; \
                     it ends with its lease");
                return;
            }
        }
    }
}

/// What a lean release's send came to.
#[derive(Debug)]
pub(super) enum Let {
    /// The owner held the lock: the key is deleted, waiters told.
    Released,
    /// The owner held nothing.
    NotHeld,
    /// It took nothing (too late, or before the not-before): the latched
    /// release goes instead.
    Latched,
    /// A reply the script does not give.
    Unexpected(i64),
    /// Its reply was lost; the settle that followed, awaited, released
    /// the hold if it still stood (`true`), or was never answered
    /// (`false`: the hold, if it stood, has ended with its lease by now).
    Settled(bool),
}

/// Sends one lean release of `key`'s owner's one hold on `lock`, carrying
/// `not_before` (the caller holds the gate's lean claim); `lasts`: the
/// longest the hold may last from now (its TTL); a lost reply is
/// settled here, and `lost` records its deadline first, so that a release
/// run again from its start settles instead of sending (see
/// `Object::spawn_to_end`).
pub(super) async fn release(
    lock: &Object,
    key: &HoldKey,
    (not_before, lasts): (u64, Duration),
    lost_at: &AtomicU64,
) -> redis::RedisResult<Let> {
    let client = lock.client();
    let deadline = client.send_deadline(&key.name).await?;
    let mut call = LEAN_RELEASE.key(&*key.name);
    call.key(keys::lock_channel(&key.name))
        .arg(UNLOCK_MESSAGE)
        .arg(&*key.field)
        .arg(lock.publish())
        .arg(deadline)
        .arg(not_before);
    let reply = call.invoke_async::<Option<i64>>(&mut lock.conn()).await;
    let let_go = match reply {
        Ok(Some(1)) => Let::Released,
        Ok(None) => Let::NotHeld,
        Ok(Some(TOO_LATE)) => {
            client.forget_clock(&key.name);
            return Ok(Let::Latched);
        }
        Ok(Some(NOT_YET)) => return Ok(Let::Latched),
        Ok(Some(other)) => Let::Unexpected(other),
        Err(err) if is_connection_failure(&err) => {
            lost_at.store(deadline, Ordering::Release);
            client.lean_off();
            Gates::get().lost(key, deadline, true);
            let answered = settle_until_answered(lock, key, deadline, lasts).await;
            return Ok(Let::Settled(answered));
        }
        Err(err) => return Err(err),
    };
    Gates::get().answered(key, not_before);
    Ok(let_go)
}

/// Settles a lost lean release whose deadline `lost_at` holds (see
/// [`release`]): what a release run again from its start does instead of
/// sending.
pub(super) async fn settle_lost_release(
    lock: &Object,
    key: &HoldKey,
    lost_at: u64,
    lasts: Duration,
) -> bool {
    settle_until_answered(lock, key, lost_at, lasts).await
}

/// A lean acquire's reply was lost: the owner's gate closes until the
/// settle, in the background (to its end, see `Object::spawn_to_end`),
/// releases what it may have taken.
fn lost(lock: &Object, key: &HoldKey, (deadline, lasts): (u64, Duration), runtime: &Handle) {
    lock.client().lean_off();
    Gates::get().lost(key, deadline, true);
    let key = key.clone();
    lock.spawn_to_end(runtime, move |lock| {
        let key = key.clone();
        // The gate is closed meanwhile: nothing else of the owner's
        // changes the lock, so a hold of the owner's found then is the one
        // the lost send took.
        async move {
            settle_until_answered(&lock, &key, deadline, lasts).await;
        }
    });
}

/// Sends `lua/lean_settle.lua` to release until it is answered (a lost
/// settle's own deadline joins what the next waits out), then opens the
/// gate: whether a settle was answered.
///
/// A server that does not answer is asked until what the lost sends may
/// have left has surely ended by this clock: a hold lasts at most `lasts`
/// from a send that ran before its deadline, one response timeout from now
/// at the latest (a drift margin more). The gate opens then too.
async fn settle_until_answered(
    lock: &Object,
    key: &HoldKey,
    mut lost_until: u64,
    lasts: Duration,
) -> bool {
    let client = lock.client();
    let mut ended = Instant::now() + client.config().response_timeout + lasts;
    ended += drift_margin(ended - Instant::now());
    let answered = loop {
        if Instant::now() >= ended {
            tracing::warn!(lock = %key.name, owner = %key.field,
                "a lean send whose reply was lost could not be settled; what it took has ended \
                 with its lease");
            break false;
        }
        let own = match client.send_deadline(&key.name).await {
            Ok(own) => own,
            Err(_) => {
                tokio::time::sleep(SETTLE_AGAIN).await;
                continue;
            }
        };
        match settle_call(lock, key, lost_until, own)
            .invoke_async::<Option<i64>>(&mut lock.conn())
            .await
        {
            Ok(Some(NOT_YET)) => {
                // The server's clock is not past the lost sends' deadline:
                // asked again about when it will be, by this clock.
                let wait = lost_until.saturating_sub(own.saturating_sub(ms(client)));
                let wait = Duration::from_millis(wait).clamp(SETTLE_AGAIN, ms_dur(client));
                tokio::time::sleep_until(Instant::now() + wait).await;
            }
            Ok(Some(TOO_LATE)) => client.forget_clock(&key.name),
            Ok(_) => break true,
            Err(err) if is_connection_failure(&err) => {
                // It may still run until its own deadline: waited out too.
                lost_until = lost_until.max(own);
                Gates::get().lost(key, own, true);
                ended = ended.max(Instant::now() + client.config().response_timeout + lasts);
                tokio::time::sleep(SETTLE_AGAIN).await;
            }
            Err(err) => {
                tracing::warn!(lock = %key.name, owner = %key.field, error = %err,
                    "could not settle a lean send whose reply was lost; its hold, if it took \
                     one, ends with its lease");
                break false;
            }
        }
    };
    Gates::get().settled(key, lost_until);
    answered
}

/// The settle to release the owner's hold once the server's clock is past
/// `lost_until`, with its own deadline `own`.
fn settle_call(
    lock: &Object,
    key: &HoldKey,
    lost_until: u64,
    own: u64,
) -> ScriptInvocation<'static> {
    let mut call = LEAN_SETTLE.key(&*key.name);
    call.key(keys::lock_channel(&key.name))
        .arg(&*key.field)
        .arg(lost_until)
        .arg("release")
        .arg(UNLOCK_MESSAGE)
        .arg(lock.publish())
        .arg(own);
    call
}

/// The response timeout in ms: how far ahead of the send a deadline is.
fn ms(client: &crate::Client) -> u64 {
    client.config().response_timeout.as_millis() as u64
}

/// The response timeout: the longest a settle waits before it asks again.
fn ms_dur(client: &crate::Client) -> Duration {
    client.config().response_timeout
}
