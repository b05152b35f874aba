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
//! A lost reply of another command of the owner on the same hash (the
//! reentrant, spin, fenced and fair locks' layout) keeps that owner's calls
//! of that lock latched while the lost send may still run (see
//! `lock::gate`): an acquire's until its request is settled or answered,
//! a release's that no resend got through while its unlock latch would
//! last. Other owners, and the
//! owner's other locks, stay lean. A semaphore's or a read-write lock's
//! lost reply changes nothing here: no lean call writes their keys.

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
use crate::engine::scripts::{self, LEAN_ACQUIRE, LEAN_RELEASE, LEAN_SETTLE, UNLOCK_MESSAGE};
use crate::engine::telemetry;
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

/// Whether `kind`'s calls on `client` pass the owner's gate (see
/// `lock::gate`): the client was asked for the lean protocol, and the kind
/// writes the hash a lean call reads (the plain lock's layout, shared by
/// the fenced and fair locks, which pass it latched so that no lean call
/// of the same owner runs beside them).
pub(super) fn gated(client: &crate::Client, kind: Kind) -> bool {
    client.lean_asked() && on_lean_hash(kind)
}

/// Whether `kind` writes the hash a lean call reads: the plain lock's
/// layout, shared by the spin, fenced and fair locks.
pub(super) fn on_lean_hash(kind: Kind) -> bool {
    matches!(
        kind,
        Kind::Plain(_) | Kind::Spin(_) | Kind::Fenced | Kind::Fair { .. }
    )
}

/// Whether a lean script's `reply` says it took nothing and the latched
/// call is to go instead (it ran after its deadline, or before a
/// not-before); counted for `call`. Its deadline is checked before its
/// not-before: a `TOO_LATE` says the clock's offset is off, forgotten.
fn took_nothing(client: &crate::Client, key: &HoldKey, call: &'static str, reply: i64) -> bool {
    match reply {
        TOO_LATE => client.forget_clock(&key.name),
        NOT_YET => {}
        _ => return false,
    }
    telemetry::lean_sent(call, "latched");
    true
}

/// What a lean acquire's send came to.
#[derive(Debug)]
pub(super) enum Took {
    /// The owner holds the lock now.
    Granted,
    /// Held by another: its TTL (ms, -1 without one).
    Held(i64),
    /// It took nothing and the latched acquire is to go instead: it ran
    /// after its deadline or before the owner's not-before, or it was
    /// never sent (the server's clock could not be read).
    Latched,
    /// Its reply was lost (this error): settled in the background, the
    /// owner's gate closed until then.
    Lost(redis::RedisError),
}

/// Until when, by this clock, what a lean send made now, whose hold lasts
/// `lasts`, may stand: it runs within one response timeout, the hold it
/// takes or keeps lasts `lasts` from then, and a drift margin more.
fn surely_ended(client: &crate::Client, lasts: Duration) -> Instant {
    let span = client.config().response_timeout + lasts;
    Instant::now() + span + drift_margin(span)
}

/// Sends one lean acquire of `key`'s owner on `lock` with a TTL of
/// `ttl_ms`; `ticket` is the gate's lean claim,
/// which the caller keeps until its guard is made, and the send keeps
/// until its reply is dealt with.
///
/// # Cancel safety
/// Cancel safe: once sent, its reply is read on `runtime` whatever becomes
/// of the caller, and the owner's gate stays closed until it is dealt
/// with: a grant whose caller left is released, a lost reply settled (or,
/// when the runtime shuts down first, until what it took has surely
/// ended).
pub(super) async fn acquire(
    lock: &Object,
    key: &HoldKey,
    ttl_ms: u64,
    ticket: Arc<Ticket>,
    runtime: &Handle,
) -> redis::RedisResult<Took> {
    let client = lock.client();
    let lasts = Duration::from_millis(ttl_ms);
    let deadline = match client.send_deadline_on(&lock.conn(), &key.name).await {
        Ok(deadline) => deadline,
        // Nothing sent: the latched acquire, with its resends, goes.
        Err(err) if is_connection_failure(&err) => {
            telemetry::lean_sent("acquire", "latched");
            return Ok(Took::Latched);
        }
        Err(err) => return Err(err),
    };
    let mut call = scripts::evalsha(&LEAN_ACQUIRE, &[&key.name]);
    call.arg(ttl_ms).arg(&*key.field).arg(deadline).arg(0);
    // Closed before it goes, and opened when its reply is read: a send
    // dropped on its way (its runtime shut down) keeps the gate closed
    // until what it may have taken has surely ended.
    Gates::get().close(key, deadline, surely_ended(client, lasts));
    let mut conn = lock.conn();
    let request = async move { call.query_async::<Option<i64>>(&mut conn).await };
    let (left_lock, left_key, left_runtime) = (lock.clone(), key.clone(), runtime.clone());
    let orphan = move |reply: redis::RedisResult<Option<i64>>| async move {
        match reply {
            Err(err) if is_connection_failure(&err) => {
                lost(&left_lock, &left_key, (deadline, lasts), &left_runtime);
            }
            reply => {
                Gates::get().settled(&left_key, deadline);
                // Taken for a caller that left: released at once (its
                // reply was read: no copy of it is left to run).
                if matches!(reply, Ok(None)) {
                    give_back(&left_lock, &left_key, lasts).await;
                }
            }
        }
        // The gate opens (or waits for the settle) only now.
        drop(ticket);
    };
    // At a runtime's shutdown, with the reply on its way: settled as a
    // lost reply is, on a connection of its own (see `Finish::rescued_by`).
    let rescue = {
        let key = key.clone();
        lock.rescue(move |lock| {
            let key = key.clone();
            async move {
                settle_until_answered(&lock, &key, deadline, lasts).await;
            }
        })
    };
    let reply = crate::engine::finish::Finish::new(runtime.clone(), request, orphan)
        .rescued_by(rescue)
        .await;
    let reply = match reply {
        Err(err) if is_connection_failure(&err) => {
            telemetry::lean_sent("acquire", "lost");
            lost(lock, key, (deadline, lasts), runtime);
            return Ok(Took::Lost(err));
        }
        reply => reply,
    };
    Gates::get().settled(key, deadline);
    let took = match reply? {
        None => Took::Granted,
        Some(nothing) if took_nothing(client, key, "acquire", nothing) => return Ok(Took::Latched),
        Some(pttl) => Took::Held(pttl),
    };
    telemetry::lean_sent("acquire", "answered");
    Ok(took)
}

/// Releases a hold a lean acquire took for a caller that left, with the
/// lean release (its gate still closed by the acquire's claim), sent again
/// while it runs too late, until the hold has surely ended.
async fn give_back(lock: &Object, key: &HoldKey, lasts: Duration) {
    let lost_at = AtomicU64::new(0);
    let ended = surely_ended(lock.client(), lasts);
    loop {
        match release(lock, key, lasts, &lost_at, None).await {
            Ok(Let::Latched) if Instant::now() < ended => {
                tokio::time::sleep(SETTLE_AGAIN).await;
            }
            Ok(Let::Latched) => {
                tracing::warn!(lock = %key.name, owner = %key.field,
                    "could not release a hold a lean acquire took for a caller that left; \
                     it has ended with its lease");
                return;
            }
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
    /// It took nothing (too late, before the not-before, or never sent:
    /// the server's clock could not be read): the latched release goes
    /// instead.
    Latched,
    /// A reply the script does not give.
    Unexpected(i64),
    /// Its reply was lost; the settle that followed, awaited, released
    /// the hold if it still stood (`true`), or was never answered
    /// (`false`: the hold, if it stood, has ended with its lease by now).
    Settled(bool),
}

/// Sends one lean release of `key`'s owner's one hold on `lock` (the
/// caller holds the gate's lean claim); `lasts`: the
/// longest the hold may last from now (its TTL). A lost reply is settled
/// in the background, awaited for `wait` at most (`None`: until it is
/// answered or gives up). `lost_at` holds the send's deadline from before it goes until
/// its reply is read, so that a release run again from its start (see
/// `Object::spawn_to_end`) settles instead of sending.
pub(super) async fn release(
    lock: &Object,
    key: &HoldKey,
    lasts: Duration,
    lost_at: &AtomicU64,
    wait: Option<Duration>,
) -> redis::RedisResult<Let> {
    let client = lock.client();
    let deadline = match client.send_deadline_on(&lock.conn(), &key.name).await {
        Ok(deadline) => deadline,
        Err(err) if is_connection_failure(&err) => {
            telemetry::lean_sent("release", "latched");
            return Ok(Let::Latched);
        }
        Err(err) => return Err(err),
    };
    let mut call = scripts::evalsha(&LEAN_RELEASE, &[&key.name, &keys::lock_channel(&key.name)]);
    call.arg(UNLOCK_MESSAGE)
        .arg(&*key.field)
        .arg(lock.publish())
        .arg(deadline)
        .arg(0);
    lost_at.store(deadline, Ordering::Release);
    Gates::get().close(key, deadline, surely_ended(client, lasts));
    let reply = call.query_async::<Option<i64>>(&mut lock.conn()).await;
    if matches!(&reply, Err(err) if is_connection_failure(err)) {
        telemetry::lean_sent("release", "lost");
        // Boxed: a cold path that need not size every release's future.
        return Ok(Let::Settled(
            Box::pin(settle_awaited(lock, key, (deadline, lasts), wait)).await,
        ));
    }
    lost_at.store(0, Ordering::Release);
    Gates::get().settled(key, deadline);
    let let_go = match reply? {
        Some(1) => Let::Released,
        None => Let::NotHeld,
        Some(nothing) if took_nothing(client, key, "release", nothing) => return Ok(Let::Latched),
        Some(other) => Let::Unexpected(other),
    };
    telemetry::lean_sent("release", "answered");
    Ok(let_go)
}

/// Settles the lost lean release of `key`'s owner sent with `deadline`, in
/// the background (to its end, see `Object::spawn_to_end`), and waits for
/// it `wait` at most (`None`: until it ends): whether a settle was
/// answered by then.
async fn settle_awaited(
    lock: &Object,
    key: &HoldKey,
    (deadline, lasts): (u64, Duration),
    wait: Option<Duration>,
) -> bool {
    let Ok(runtime) = crate::engine::finish::runtime() else {
        return settle_until_answered(lock, key, deadline, lasts).await;
    };
    let (told, mut answered) = tokio::sync::watch::channel(None);
    let told = Arc::new(told);
    let key = key.clone();
    lock.spawn_to_end(&runtime, move |lock| {
        let (key, told) = (key.clone(), Arc::clone(&told));
        async move {
            let answered = settle_until_answered(&lock, &key, deadline, lasts).await;
            told.send_replace(Some(answered));
        }
    });
    let settled = answered.wait_for(Option::is_some);
    let settled = match wait {
        Some(wait) => tokio::time::timeout(wait, settled).await.ok(),
        None => Some(settled.await),
    };
    settled.and_then(|told| told.ok().and_then(|answered| *answered)) == Some(true)
}

/// A lean acquire's reply was lost: the owner's gate stays closed until the
/// settle, in the background (to its end, see `Object::spawn_to_end`),
/// releases what it may have taken.
fn lost(lock: &Object, key: &HoldKey, (deadline, lasts): (u64, Duration), runtime: &Handle) {
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

/// Sends `lua/lean_settle.lua` to release until it is answered; also what
/// a lean release run again from its start (see [`release`]) does instead
/// of sending, with the deadline its `lost_at` holds (a lost
/// settle's own deadline joins what the next waits out, and so does any
/// later deadline the gate holds: a settle run again from its start goes
/// on from where the first run was), then opens the gate: whether a
/// settle was answered.
///
/// A server that does not answer, or answers with an error, is asked
/// until what the lost sends may have left has surely ended by this
/// clock (one response timeout from the last send that may run, the
/// hold's `lasts` and a drift margin): the gate opens then too.
pub(super) async fn settle_until_answered(
    lock: &Object,
    key: &HoldKey,
    lost_until: u64,
    lasts: Duration,
) -> bool {
    let client = lock.client();
    let mut lost_until = lost_until.max(Gates::get().lean_until(key));
    let mut ended = surely_ended(client, lasts);
    // The gate stays closed while this settle may send, and while its last
    // send may run (one response timeout past `ended`), whatever becomes
    // of it: the expiry it was given when the lost send went counts from
    // then, and were the owner's next hold taken after it, a later
    // `release` of this settle would delete that hold.
    let keep_closed = |lost_until: u64, ended: Instant| {
        let last_runs = client.config().response_timeout;
        Gates::get().close(key, lost_until, ended + last_runs + drift_margin(last_runs));
    };
    keep_closed(lost_until, ended);
    let mut warned = false;
    let answered = loop {
        if Instant::now() >= ended {
            tracing::warn!(lock = %key.name, owner = %key.field,
                "a lean send whose reply was lost could not be settled; what it took has ended \
                 with its lease");
            break false;
        }
        let own = match client.send_deadline_on(&lock.conn(), &key.name).await {
            Ok(own) => own,
            Err(_) => {
                tokio::time::sleep(SETTLE_AGAIN).await;
                continue;
            }
        };
        // Reading the clock may have taken a while: this send may run
        // until one response timeout from now.
        keep_closed(lost_until, ended.max(Instant::now()));
        let reply = settle_call(lock, key, lost_until, own)
            .invoke_async::<Option<i64>>(&mut lock.conn())
            .await;
        match reply {
            Ok(Some(NOT_YET)) => {
                // The server's clock is not past the lost sends' deadline:
                // asked again about when it will be, by this clock (`own`
                // is one response timeout ahead of the server's now).
                let ahead = client.config().response_timeout.as_millis() as u64;
                let now = own.saturating_sub(ahead);
                let wait = Duration::from_millis(lost_until.saturating_sub(now));
                let wait = wait.clamp(SETTLE_AGAIN, client.config().response_timeout);
                tokio::time::sleep(wait).await;
            }
            Ok(Some(TOO_LATE)) => client.forget_clock(&key.name),
            Ok(_) => break true,
            Err(err) => {
                if is_connection_failure(&err) {
                    // It may still run until its own deadline: waited out
                    // too.
                    lost_until = lost_until.max(own);
                    ended = ended.max(surely_ended(client, lasts));
                    keep_closed(lost_until, ended);
                } else if !warned {
                    warned = true;
                    tracing::warn!(lock = %key.name, owner = %key.field, error = %err,
                        "a settle of a lean send whose reply was lost failed; asked again");
                }
                tokio::time::sleep(SETTLE_AGAIN).await;
            }
        }
    };
    Gates::get().settled(key, lost_until);
    telemetry::lean_sent("settle", if answered { "answered" } else { "lost" });
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
