//! The settle of a request whose replies were all lost: by its latch,
//! once nobody sends it any more ([`cancel`], now or in the background),
//! and what a grant found there took given back.

use std::sync::Arc;
use std::time::Duration;

use tokio::runtime::Handle;
use tokio::time::Instant;

use crate::client::conn::Conn;
use crate::engine::object::Object;
use crate::engine::scripts::{ACQUIRE_CANCEL, ACQUIRE_GRANTED};
use crate::error::is_connection_failure;

use super::give_back::{GiveBack, GrantedIn, Lasts, Taken};
use super::latch::{close, Latch};
use super::resend::{resend, Resend};

/// One settle of a request whose replies were all lost, by its acquire
/// latch: closes the latch, so that a send arriving late changes nothing,
/// and says whether a send of it was granted (then what it took is the
/// caller's to give back, by [`give_back_lost`]): `Some` with when that
/// grant was made, by this client's clock. The latch TTL is the request's:
/// the grant wrote it with that TTL, and a closed latch keeps it too.
pub(super) async fn cancel(
    conn: &mut Conn,
    latch: &str,
    latch_ttl: u64,
) -> redis::RedisResult<Option<GrantedIn>> {
    let sent = Instant::now();
    let (left, on_server): (i64, u64) = ACQUIRE_CANCEL
        .key(latch)
        .arg(latch_ttl)
        .invoke_async(conn)
        .await?;
    let answered = Instant::now();
    Ok(u64::try_from(left).ok().map(|left| GrantedIn {
        on_server: (left <= latch_ttl).then_some(on_server),
        ..granted_in(sent, answered, latch_ttl, left)
    }))
}

/// When a grant was made, by this client's clock, as a settle sent at
/// `sent` and answered at `answered` tells it, having found its latch
/// (written by the grant with a TTL of `latch_ttl` ms) with `left` ms to
/// live: the settle ran between the two, and the grant `latch_ttl - left`
/// ms before it by the server's clock (give or take the ms both are
/// truncated to, and a thousandth for the two clocks' rates).
///
/// A latch with more than `latch_ttl` left was lengthened by a parked
/// give-back of its grant (see `Latch::stretch`), and tells nothing of its
/// age: taken as the oldest it can be, a grant whose lease is surely over.
pub(super) fn granted_in(sent: Instant, answered: Instant, latch_ttl: u64, left: u64) -> GrantedIn {
    let age = match left > latch_ttl {
        true => latch_ttl,
        false => latch_ttl - left,
    };
    let slack = age / 1000 + 2;
    let most = Duration::from_millis(age.saturating_add(slack));
    let least = Duration::from_millis(age.saturating_sub(slack));
    GrantedIn::between(
        sent.checked_sub(most).unwrap_or(sent),
        answered.checked_sub(least).unwrap_or(answered),
    )
}

/// `granted` narrowed by what the grant's latch tells (`acquire_granted.lua`,
/// which changes nothing): when the grant ran, by its age, and by the
/// server's clock. A request whose earlier sends got no reply only knows
/// that its grant came after the first of them, which may be seconds
/// before the send granted: taken as the grant's time, it would call the
/// hold's lease over before its give-back went out and leave the hold in
/// a key another hold of its owner keeps. And a hold given back after its
/// lease, by this client's clock, may still share its key with another
/// hold of its owner, which the two grants' server times tell where a late
/// reply blurs this client's. As it was when the latch is gone already
/// (deleted once its request was spent) or cannot be read.
pub(super) async fn on_server(
    on: &Object,
    latch: &str,
    latch_ttl: u64,
    granted: GrantedIn,
) -> GrantedIn {
    let client = on.client();
    // A read that a cut fails is sent again, for one response timeout:
    // the wide window it falls back to may call the hold's lease over
    // when it is not, and park a give-back that could go now. Each send
    // times its own round trip.
    let until = Instant::now() + client.config().response_timeout;
    let go_on = |_: &redis::RedisError| Instant::now() < until;
    let read = resend(
        Resend::settle(),
        "reading when a grant ran",
        on.name(),
        go_on,
        |_| async move {
            let sent = Instant::now();
            let read: (i64, u64) = ACQUIRE_GRANTED
                .key(latch)
                .arg(latch_ttl)
                .invoke_async(&mut client.conn())
                .await?;
            Ok((read, sent, Instant::now()))
        },
    )
    .await;
    match read {
        // Not a lengthened latch (see `granted_in`), whose age is unknown.
        Ok(((left, at), sent, answered)) if (0..=latch_ttl as i64).contains(&left) => {
            let told = granted_in(sent, answered, latch_ttl, left as u64);
            GrantedIn {
                on_server: Some(at),
                ..GrantedIn::between(granted.from.max(told.from), granted.by.min(told.by))
            }
        }
        _ => granted,
    }
}

/// What a request whose replies were lost took, and when: no earlier than
/// its first lost send, nor than its settle learnt.
pub(super) fn grant_lasts(
    (lasts, since): (Lasts, Instant),
    granted: GrantedIn,
) -> (Lasts, GrantedIn) {
    let bounded = GrantedIn::between(since.max(granted.from), granted.by);
    (
        lasts,
        GrantedIn {
            on_server: granted.on_server,
            ..bounded
        },
    )
}

/// Gives back what a request whose replies were lost took (its send was
/// granted after all), naming its latch as the give-back's grant, then
/// closes the latch unless the give-back's script did: another of its
/// sends may still reach Redis. A give-back parked for later (see
/// `give_back_hold`) keeps the latch as it is, and it is closed when that
/// one goes.
pub(super) async fn give_back_lost<T: Taken>(
    on: Object,
    taken: Arc<T>,
    (lasts, granted): (Lasts, GrantedIn),
    latch: Arc<Latch>,
) {
    let name = on.name();
    tracing::debug!(%name, "an acquire whose reply was lost was granted; giving it back");
    let why = GiveBack::ReplyLost;
    let closed = taken
        .give_back(&on, lasts, granted, Some(&latch), why)
        .await;
    match Arc::try_unwrap(latch) {
        Ok(_) if closed => {}
        Ok(latch) => {
            close(&on.conn(), name, &latch.key, latch.ttl).await;
        }
        Err(parked) => parked.retire_when_let_go(true),
    }
}

/// Settles a request at a runtime's shutdown (its reply was on its way, or
/// the give-back of an orphaned grant was not done), on the rescue's
/// connection, by its latch. A latch found is settled by [`settle_lost`]
/// at once: a grant is given back, a closed latch left as it is. A latch
/// missing is looked for again until the server's clock is past
/// `sends_end`, the latest deadline of the request's sends (epoch ms by
/// the server's clock; 0 when none was sent): missing then, nothing was
/// granted, nor can be, and nothing is written. [`settle_lost`] would
/// close it (`x`, for the latch's TTL, tens of seconds), a key that a
/// program that returns normally must not leave behind. That wait is at
/// most one response timeout (a send's deadline is that much after it),
/// within the rescue's window; a deadline further off than that (the
/// server's clock stepped back since the reading the deadline came from)
/// is not waited for, and the latch is closed as before.
///
/// Limit: "nothing can run past its deadline" holds on one server clock
/// that does not go back. A send still on its way that lands on another
/// master whose clock is behind (a failover, a slot moved meanwhile) may
/// still be granted, as it may after any settle of a missing latch that
/// did not replicate; its hold then ends with its lease.
pub(super) async fn settle_at_shutdown<T: Taken>(
    on: Object,
    taken: Arc<T>,
    lost: (Lasts, Instant),
    latch: String,
    latch_ttl: u64,
    sends_end: u64,
) {
    if sends_end == 0 {
        // Never sent: nothing of it can run, and nothing is settled.
        return;
    }
    let conn = on.conn();
    match to_settle(&on, &conn, &latch, sends_end).await {
        Ok(false) => {}
        // Found, not known, or not to wait for: settled as a lost request
        // is.
        Ok(true) | Err(_) => settle_lost(on, conn, taken, lost, latch, latch_ttl).await,
    }
}

/// Whether the request of `latch` is to be settled: `true` as soon as the
/// latch is found, or when `sends_end` (epoch ms) is more than a response
/// timeout ahead of the server's clock; `false` when the latch is missing
/// at a moment the server's clock is past `sends_end`. The clock is read
/// before the latch each time: a send that ran before that reading wrote
/// what it wrote already, and one that runs after it is past its deadline
/// and writes nothing.
async fn to_settle(
    on: &Object,
    conn: &Conn,
    latch: &str,
    sends_end: u64,
) -> redis::RedisResult<bool> {
    let response = on.client().config().response_timeout;
    let longest = u64::try_from(response.as_millis()).unwrap_or(u64::MAX);
    loop {
        let now = on.client().server_ms_on(conn, latch).await?;
        let found: i64 = redis::cmd("EXISTS")
            .arg(latch)
            .query_async(&mut conn.clone())
            .await?;
        if found > 0 {
            return Ok(true);
        }
        if now > sends_end {
            return Ok(false);
        }
        let left = sends_end - now;
        if left > longest {
            return Ok(true);
        }
        tokio::time::sleep(Duration::from_millis(left + 1)).await;
    }
}

/// Settles a request whose replies were all lost in the background, once
/// nobody sends it any more: [`cancel`], tried on the `SETTLE_LOST`
/// schedule for as long as the latch lives, and a grant found given back.
pub(super) async fn settle_lost<T: Taken>(
    on: Object,
    conn: Conn,
    taken: Arc<T>,
    lost: (Lasts, Instant),
    latch: String,
    latch_ttl: u64,
) {
    let name = Arc::clone(on.shared_name());
    let deadline = Instant::now() + Duration::from_millis(latch_ttl);
    let go_on = |_: &redis::RedisError| Instant::now() < deadline;
    let (conn, latch_key) = (&conn, latch.as_str());
    let settled = resend(
        Resend::settle().after_a_pause(),
        "settle check",
        &name,
        go_on,
        move |_| {
            let mut conn = conn.clone();
            async move { cancel(&mut conn, latch_key, latch_ttl).await }
        },
    )
    .await;
    match settled {
        Ok(None) => {}
        Ok(Some(granted)) => {
            let lost = grant_lasts(lost, granted);
            let latch = Arc::new(Latch::new(
                on.client(),
                on.shared_name(),
                latch,
                latch_ttl,
                Handle::current(),
            ));
            give_back_lost(on, taken, lost, latch).await;
        }
        Err(err) if is_connection_failure(&err) => {
            tracing::warn!(%name, error = %err,
                "could not learn whether a request whose reply was lost took a hold or permits; \
                 a hold expires with its lease");
        }
        Err(err) => {
            tracing::warn!(%name, error = %err, "could not settle a request whose reply was lost");
        }
    }
}
