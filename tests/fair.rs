//! The fair lock against a real `redis-server`, one private server per
//! test.

use ferrisson_test_support as common;

use std::time::Duration;

use common::{
    client, eventually, exists, next_message, settled, soon, within, RawSubscriber, RedisServer,
};
use tokio::time::Instant;

const WATCHDOG: Duration = Duration::from_millis(1200);
const QUEUE: &str = "redisson_lock_queue:{line}";
const TIMEOUTS: &str = "redisson_lock_timeout:{line}";

fn queue(server: &RedisServer) -> Vec<String> {
    server
        .cmd(&["LRANGE", QUEUE, "0", "-1"])
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_string().unwrap())
        .collect()
}

fn score(server: &RedisServer, member: &str) -> Option<i64> {
    server
        .cmd(&["ZSCORE", TIMEOUTS, member])
        .as_string()
        .map(|s| s.parse::<f64>().unwrap() as i64)
}

/// The server's clock in epoch milliseconds, as the scripts read it.
fn server_now(server: &RedisServer) -> i64 {
    let time = server.cmd(&["TIME"]);
    let parts = time.as_array().unwrap();
    let secs: i64 = parts[0].as_string().unwrap().parse().unwrap();
    let micros: i64 = parts[1].as_string().unwrap().parse().unwrap();
    secs * 1000 + micros / 1000
}

/// Waiters queued one after the other, over two clients, get the lock in
/// that order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_get_the_lock_first_come_first_served() {
    let server = RedisServer::start();
    let clients = [
        client(&server, WATCHDOG).await,
        client(&server, WATCHDOG).await,
    ];
    let held = soon(clients[0].fair_lock("line").lock()).await.unwrap();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    const WAITERS: usize = 6;
    for i in 0..WAITERS {
        let lock = clients[i % 2].fair_lock("line");
        let tx = tx.clone();
        tokio::spawn(async move {
            let guard = lock.lock().await.unwrap();
            tx.send(i).unwrap();
            tokio::time::sleep(Duration::from_millis(5)).await;
            guard.unlock().await.unwrap();
        });
        // The next one starts once this one stands in line.
        eventually(Duration::from_secs(5), || async {
            queue(&server).len() == i + 1
        })
        .await;
    }
    soon(held.unlock()).await.unwrap();
    let mut order = Vec::new();
    for _ in 0..WAITERS {
        order.push(within(Duration::from_secs(10), rx.recv()).await.unwrap());
    }
    assert_eq!(order, (0..WAITERS).collect::<Vec<_>>());
    eventually(Duration::from_secs(5), || async {
        !exists(&server, "line")
    })
    .await;
    assert!(queue(&server).is_empty());
    assert!(!exists(&server, TIMEOUTS));
    for client in &clients {
        settled(client).await;
    }
}

/// A waiter whose process died (an entry nobody serves) holds the line up
/// until its waiter timeout, not longer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_waiter_is_skipped_after_its_timeout() {
    let server = RedisServer::start();
    let client = client(&server, WATCHDOG).await;
    let held = soon(client.fair_lock("line").lock()).await.unwrap();
    // A waiter of another process that died in line: dead 2 s from now
    // (the live waiter must queue behind it before then).
    let dead_at = server_now(&server) + 2000;
    server.cmd(&["RPUSH", QUEUE, "dead-client:1"]);
    server.cmd(&["ZADD", TIMEOUTS, &dead_at.to_string(), "dead-client:1"]);

    let lock = client
        .fair_lock("line")
        .with_waiter_timeout(Duration::from_secs(2));
    let waiting = tokio::spawn(async move {
        let guard = lock.lock().await.unwrap();
        (Instant::now(), guard)
    });
    eventually(Duration::from_secs(5), || async {
        queue(&server).len() == 2
    })
    .await;
    let released = Instant::now();
    soon(held.unlock()).await.unwrap();
    let (acquired, guard) = within(Duration::from_secs(10), waiting).await.unwrap();
    let waited = acquired - released;
    let now = server_now(&server);
    assert!(
        now >= dead_at,
        "got in {} ms before the dead waiter's time",
        dead_at - now
    );
    assert!(waited < Duration::from_secs(5), "{waited:?}");
    println!("the dead waiter held the line {waited:?} after the release");
    soon(guard.unlock()).await.unwrap();
    assert!(queue(&server).is_empty());
}

/// A waiter that gives up (its wait ran out, or its future was dropped)
/// leaves the line at once, and the scores behind it move up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_that_gives_up_leaves_the_line() {
    let server = RedisServer::start();
    let holder = client(&server, WATCHDOG).await;
    let waiters = client(&server, WATCHDOG).await;
    let held = soon(holder.fair_lock("line").lock()).await.unwrap();
    let timeout = Duration::from_secs(60);

    // First in line: gives up after 3 s (time for the others to queue).
    let first = waiters.fair_lock("line").with_waiter_timeout(timeout);
    let gives_up = tokio::spawn(async move {
        first
            .try_lock_for(Duration::from_secs(3))
            .await
            .unwrap()
            .is_none()
    });
    eventually(Duration::from_secs(5), || async {
        queue(&server).len() == 1
    })
    .await;
    // Second in line: its future is dropped later.
    let second = waiters.fair_lock("line").with_waiter_timeout(timeout);
    let dropped = tokio::spawn(async move { second.lock().await.map(|g| g.leak()) });
    eventually(Duration::from_secs(5), || async {
        queue(&server).len() == 2
    })
    .await;
    // Third in line: stays.
    let third = waiters.fair_lock("line").with_waiter_timeout(timeout);
    let stays = tokio::spawn(async move { third.lock().await.unwrap() });
    eventually(Duration::from_secs(5), || async {
        queue(&server).len() == 3
    })
    .await;
    let line = queue(&server);
    let third_before = score(&server, &line[2]).unwrap();

    assert!(soon(gives_up).await.unwrap());
    assert_eq!(
        queue(&server),
        line[1..].to_vec(),
        "the first left the line"
    );
    let third_after = score(&server, &line[2]).unwrap();
    assert_eq!(third_before - third_after, timeout.as_millis() as i64);

    dropped.abort();
    eventually(Duration::from_secs(5), || async {
        queue(&server) == line[2..].to_vec()
    })
    .await;
    assert_eq!(score(&server, &line[1]), None);

    soon(held.unlock()).await.unwrap();
    let guard = within(Duration::from_secs(5), stays).await.unwrap();
    soon(guard.unlock()).await.unwrap();
    assert!(queue(&server).is_empty());
    assert!(!exists(&server, TIMEOUTS));
    settled(&waiters).await;
    assert!(!exists(&server, "line"));
}

/// PROTOCOL.md for the fair lock: the hash, the queue and timeout keys, the
/// waiter's own channel and its `0`; one attempt does not queue.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_layout_is_redissons() {
    let server = RedisServer::start();
    let holder = client(&server, WATCHDOG).await;
    let other = client(&server, WATCHDOG).await;
    let held = soon(holder.fair_lock("line").lock()).await.unwrap();
    assert_eq!(
        server.cmd(&["TYPE", "line"]).as_string().as_deref(),
        Some("hash")
    );
    assert_eq!(
        server
            .cmd(&["HGET", "line", held.field()])
            .as_string()
            .as_deref(),
        Some("1")
    );
    assert!(soon(other.fair_lock("line").try_lock())
        .await
        .unwrap()
        .is_none());
    assert!(queue(&server).is_empty(), "one attempt joined the line");

    let lock = other.fair_lock("line");
    let waiting = tokio::spawn(async move { lock.lock().await.unwrap() });
    eventually(Duration::from_secs(5), || async {
        queue(&server).len() == 1
    })
    .await;
    let field = queue(&server)[0].clone();
    assert!(field.starts_with(&other.id().to_string()));
    let before = server_now(&server);
    let dead_at = score(&server, &field).unwrap();
    // The lock's TTL (the watchdog's 1.2 s) plus the 300 s default.
    assert!(
        dead_at > before + 300_000 && dead_at <= before + 301_300,
        "{}",
        dead_at - before
    );
    let channel = format!("redisson_lock__channel:{{line}}:{field}");
    let sub = RawSubscriber::new(&server, &channel);
    soon(held.unlock()).await.unwrap();
    assert_eq!(next_message(sub).await, Some((channel, "0".into())));
    let guard = soon(waiting).await.unwrap();
    assert_eq!(guard.field(), field);
    assert!(queue(&server).is_empty());
    soon(guard.unlock()).await.unwrap();
    assert!(soon(holder.fair_lock("line").force_unlock()).await.is_ok());
}

/// Futures dropped at every stage (before the send, with an attempt in
/// flight, while waiting in line), with the lock held and with it free:
/// no hold, no place in line, no registry entry, no subscription.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_fair_lock_futures_leave_nothing() {
    let server = RedisServer::start();
    let holder = client(&server, WATCHDOG).await;
    let client = self::client(&server, WATCHDOG).await;
    let lock = client.fair_lock("line");
    let held = soon(holder.fair_lock("line").lock()).await.unwrap();
    for cut in 0..30u64 {
        let _ = tokio::time::timeout(Duration::from_micros(cut * 200), lock.lock()).await;
    }
    eventually(Duration::from_secs(5), || async {
        queue(&server).is_empty()
    })
    .await;
    soon(held.unlock()).await.unwrap();
    for cut in 0..30u64 {
        let _ = tokio::time::timeout(Duration::from_micros(cut * 100), lock.lock()).await;
    }
    settled(&client).await;
    eventually(Duration::from_secs(5), || async {
        !exists(&server, "line") && queue(&server).is_empty() && !exists(&server, TIMEOUTS)
    })
    .await;
    // The line still works.
    let guard = soon(holder.fair_lock("line").lock()).await.unwrap();
    soon(guard.unlock()).await.unwrap();
}

/// A queue whose last entry has no score in the timeout set (half written,
/// by a crashed client or by hand) does not break the acquire: a new waiter
/// queues behind the holder's TTL, and the entry without a score is dropped
/// once it reaches the head.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queue_entry_without_a_score_breaks_nothing() {
    let server = RedisServer::start();
    let holder = client(&server, WATCHDOG).await;
    let waiters = client(&server, WATCHDOG).await;
    let held = soon(holder.fair_lock("line").lock()).await.unwrap();
    let first = waiters.fair_lock("line");
    let first = tokio::spawn(async move { first.lock().await });
    eventually(Duration::from_secs(5), || async {
        queue(&server).len() == 1
    })
    .await;
    server.cmd(&["RPUSH", QUEUE, "ghost:1"]);
    let second = waiters.fair_lock("line");
    let gave_up = soon(second.try_lock_for(Duration::from_millis(200))).await;
    assert!(matches!(gave_up, Ok(None)), "{gave_up:?}");
    soon(held.unlock()).await.unwrap();
    let guard = within(Duration::from_secs(5), first)
        .await
        .unwrap()
        .unwrap();
    soon(guard.unlock()).await.unwrap();
    let guard = soon(second.lock()).await.unwrap();
    assert!(
        queue(&server).is_empty(),
        "the entry without a score is gone"
    );
    soon(guard.unlock()).await.unwrap();
    settled(&waiters).await;
}

/// A release that finds the lock already gone (expired, or deleted behind
/// the holder's back) still wakes the first waiter, as Redisson's does: the
/// waiter does not sit out the rest of the TTL it last saw.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_that_finds_the_lock_gone_still_wakes_the_first_waiter() {
    let server = RedisServer::start();
    // A long watchdog timeout: a waiter that is not woken looks again only
    // after the TTL it saw, 30 s.
    let watchdog = Duration::from_secs(30);
    let holder = client(&server, watchdog).await;
    let waiters = client(&server, watchdog).await;
    let held = soon(holder.fair_lock("line").lock()).await.unwrap();
    let lock = waiters.fair_lock("line");
    let waiting = tokio::spawn(async move { lock.lock().await });
    eventually(Duration::from_secs(5), || async {
        queue(&server).len() == 1
    })
    .await;
    server.cmd(&["DEL", "line"]);
    assert!(soon(held.unlock()).await.is_err(), "nothing was held");
    let guard = within(Duration::from_secs(5), waiting)
        .await
        .unwrap()
        .unwrap();
    soon(guard.unlock()).await.unwrap();
    settled(&waiters).await;
}
