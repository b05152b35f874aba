//! Scenario 11: the hand-off after an idle hold. One waiter waits on a
//! lock another client holds; nothing runs for a while; the holder
//! unlocks. The time from the unlock call to the waiter's `lock()`
//! returning is set against a raw round trip made after the same idle, in
//! the same sitting: a machine waking from idle slows both. A subscriber
//! of the bench's own, on the lock's channel, marks when the unlock message
//! reached this process, which splits the hand-off into its steps.

use std::time::{Duration, Instant};

use redis::aio::ConnectionManagerConfig;
use redis::{IntoConnectionInfo, ProtocolVersion};
use serde_json::{json, Value};
use tokio::sync::mpsc::UnboundedReceiver;

use crate::measure::{f, Samples, Table};
use crate::scenarios::{flush, raw_call, script_acquire, script_release};
use crate::Bench;

/// When each message on `channel` reached this process: stamped where the
/// connection reads it (a multiplexed connection calls its push sender in
/// its own reading task) or, with `managed`, where a `ConnectionManager`
/// (the library's kind of subscription connection) hands it on, after a
/// second task. The connection stays subscribed while the first value is
/// kept; the stamps come in order on the receiver.
pub(crate) async fn message_clock(
    bench: &Bench,
    channel: &str,
    managed: bool,
) -> (Box<dyn std::any::Any + Send>, UnboundedReceiver<Instant>) {
    let (stamps, stamped) = tokio::sync::mpsc::unbounded_channel();
    let stamp = move |push: redis::PushInfo| {
        if push.kind == redis::PushKind::Message {
            let _ = stamps.send(Instant::now());
        }
        Ok::<(), std::convert::Infallible>(())
    };
    let info = bench.url.as_str().into_connection_info().expect("the URL");
    let resp3 = info
        .redis_settings()
        .clone()
        .set_protocol(ProtocolVersion::RESP3);
    let client = redis::Client::open(info.set_redis_settings(resp3)).expect("the URL");
    let kept: Box<dyn std::any::Any + Send> = if managed {
        let config = ConnectionManagerConfig::new().set_push_sender(stamp);
        let mut conn = client
            .get_connection_manager_with_config(config)
            .await
            .expect("the bench's subscriber");
        conn.subscribe(channel).await.expect("SUBSCRIBE");
        Box::new(conn)
    } else {
        let config = redis::AsyncConnectionConfig::new().set_push_sender(stamp);
        let mut conn = client
            .get_multiplexed_async_connection_with_config(&config)
            .await
            .expect("the bench's subscriber");
        conn.subscribe(channel).await.expect("SUBSCRIBE");
        Box::new(conn)
    };
    (kept, stamped)
}

pub(crate) async fn handoff_from_idle(bench: &mut Bench) -> Value {
    flush(bench).await;
    let rounds = bench.options.pick(300, 40);
    let idle = Duration::from_millis(20);
    let watchdog = ferrisson::config::DEFAULT_WATCHDOG_TIMEOUT;
    let (holder, waiter) = (bench.client(watchdog).await, bench.client(watchdog).await);
    let name = "bench:idle";
    let channel = format!("redisson_lock__channel:{{{name}}}");
    let mut conn = bench.raw.clone();
    // The bench's own subscriber: when each unlock message is read here;
    // with `--split`, a second one: when a `ConnectionManager` (as the
    // library's) hands it on.
    let (_read, mut messages) = message_clock(bench, &channel, false).await;
    let mut managed = match bench.options.split {
        true => Some(message_clock(bench, &channel, true).await),
        false => None,
    };
    // The waiter's subscription, and the bench's.
    let subscribed = 2 + i64::from(managed.is_some());
    let mut handed_on = Samples::default();
    let (mut handoffs, mut raws) = (Samples::default(), Samples::default());
    // Unlock call → unlock returned; → message here; message → lock returned.
    let (mut releases, mut messaged, mut woken) =
        (Samples::default(), Samples::default(), Samples::default());
    let (mut raw_acquires, mut raw_releases) = (Samples::default(), Samples::default());
    for _ in 0..rounds {
        let held = holder.lock(name).lock().await.expect("lock");
        let lock = waiter.lock(name);
        let waiting = tokio::spawn(async move {
            let guard = lock.lock().await.expect("the waiter's lock");
            (Instant::now(), guard)
        });
        // The waiter has subscribed (and found the lock held).
        loop {
            let (_, subscribers): (String, i64) = redis::cmd("PUBSUB")
                .arg("NUMSUB")
                .arg(&channel)
                .query_async(&mut bench.admin)
                .await
                .expect("PUBSUB NUMSUB");
            if subscribers == subscribed {
                break;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        tokio::time::sleep(idle).await;
        let start = Instant::now();
        raw_call(&mut conn, "bench:idle:raw").await;
        raws.push(start.elapsed());
        // ferrisson's own scripts, sent raw after the same idle: what of
        // the unlock's time is the server's (a cold script), not the
        // library's.
        tokio::time::sleep(idle).await;
        let start = Instant::now();
        let request = script_acquire(&mut conn, "bench:idle:script").await;
        raw_acquires.push(start.elapsed());
        tokio::time::sleep(idle).await;
        let start = Instant::now();
        script_release(&mut conn, "bench:idle:script", request).await;
        raw_releases.push(start.elapsed());
        tokio::time::sleep(idle).await;
        while messages.try_recv().is_ok() {}
        if let Some((_, handed)) = &mut managed {
            while handed.try_recv().is_ok() {}
        }
        let unlocked = Instant::now();
        held.unlock().await.expect("unlock");
        releases.push(unlocked.elapsed());
        let message = messages.recv().await.expect("the subscriber's messages");
        if let Some((_, handed)) = &mut managed {
            let handed_at = handed.recv().await.expect("the manager's messages");
            handed_on.push(handed_at.saturating_duration_since(message));
        }
        let (acquired, guard) = waiting.await.expect("the waiter panicked");
        handoffs.push(acquired - unlocked);
        messaged.push(message.saturating_duration_since(unlocked));
        woken.push(acquired.saturating_duration_since(message));
        guard.unlock().await.expect("the waiter's unlock");
    }
    let (p50, p99, raw) = (handoffs.p50(), handoffs.p99(), raws.p50());
    let (per_idle_raw, per_rtt) = (p50 / raw, p50 / bench.rtt_us);
    let mut table = Table::new(
        format!(
            "11. Hand-off after an idle hold: {rounds} rounds, {} ms idle before each step",
            idle.as_millis()
        ),
        &[
            "hand-offs",
            "p50 µs",
            "p99 µs",
            "raw round trip after idle, p50 µs",
            "p50 in those",
            "p50 in scenario 1's round trips",
        ],
    );
    table.row(vec![
        handoffs.len().to_string(),
        f(p50, 1),
        f(p99, 1),
        f(raw, 1),
        f(per_idle_raw, 2),
        f(per_rtt, 2),
    ]);
    table.print();
    let mut steps = Table::new(
        "11b. Its steps, p50 of each (they need not add up)",
        &["step", "p50 µs", "in raw round trips after idle"],
    );
    let mut step_rows = vec![
        ("ferrisson's acquire script, sent raw", raw_acquires.p50()),
        ("ferrisson's release script, sent raw", raw_releases.p50()),
        ("unlock call to unlock returned", releases.p50()),
        (
            "unlock call to the message at the bench's subscriber",
            messaged.p50(),
        ),
        ("the message to the waiter's lock returned", woken.p50()),
    ];
    if managed.is_some() {
        step_rows.push((
            "the message handed on by a ConnectionManager, after it was read",
            handed_on.p50(),
        ));
    }
    for (step, us) in step_rows {
        steps.row(vec![step.to_string(), f(us, 1), f(us / raw, 2)]);
    }
    steps.print();
    println!(
        "(hand-off: from the holder's unlock call to the waiter's lock returning; the waiter is \
         another client, subscribed before the idle)"
    );
    bench.check(
        "hand-off after an idle hold at most 3 raw round trips at p50",
        format!(
            "{p50:.1} µs = {per_idle_raw:.2} raw round trips after the same idle ({raw:.1} µs), \
             {per_rtt:.2} of scenario 1's"
        ),
        per_idle_raw <= 3.0,
    );
    json!({
        "rounds": rounds, "idle_ms": idle.as_millis() as u64,
        "handoff_p50_us": p50, "handoff_p99_us": p99,
        "raw_after_idle_p50_us": raw, "handoff_p50_idle_round_trips": per_idle_raw,
        "handoff_p50_round_trips": per_rtt,
        "steps_p50_us": {
            "raw_acquire_script": raw_acquires.p50(), "raw_release_script": raw_releases.p50(),
            "release": releases.p50(), "message": messaged.p50(), "to_lock": woken.p50(),
            "manager_hand_on": handed_on.p50(),
        },
    })
}
