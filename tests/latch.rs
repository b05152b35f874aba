//! The count-down latch against a real `redis-server`, one private server
//! per test.

use ferrisson_test_support as common;

use std::time::{Duration, Instant};

use common::{
    client, eventually, exists, next_message, settled, soon, within, RawSubscriber, RedisServer,
};
use ferrisson::Error;

const WATCHDOG: Duration = Duration::from_secs(30);

/// Every waiter, in two clients, opens at zero and not before; each is
/// woken by the message (the fallback look is 10 s away).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_waiter_opens_at_zero() {
    let server = RedisServer::start();
    let clients = [
        client(&server, WATCHDOG).await,
        client(&server, WATCHDOG).await,
    ];
    let counter = client(&server, WATCHDOG).await;
    let latch = counter.count_down_latch("ready");
    assert!(latch.try_set_count(3).await.unwrap());
    let mut waiters = Vec::new();
    for i in 0..10 {
        let latch = clients[i % 2].count_down_latch("ready");
        waiters.push(tokio::spawn(async move {
            latch.wait().await.unwrap();
            Instant::now()
        }));
    }
    eventually(Duration::from_secs(10), || async {
        clients.iter().all(|c| c.subscriptions() == 1)
    })
    .await;
    assert_eq!(latch.count_down().await.unwrap(), 2);
    assert_eq!(latch.count_down().await.unwrap(), 1);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        waiters.iter().all(|w| !w.is_finished()),
        "opened before zero"
    );
    assert_eq!(latch.count().await.unwrap(), 1);
    let opened = Instant::now();
    assert_eq!(latch.count_down().await.unwrap(), 0);
    let mut slowest = Duration::ZERO;
    for waiter in waiters {
        let woke = within(Duration::from_secs(5), waiter).await.unwrap();
        slowest = slowest.max(woke - opened);
    }
    println!("10 waiters opened; the last {slowest:?} after the final count-down");
    assert!(!exists(&server, "ready"), "zero deletes the key");
    assert_eq!(latch.count().await.unwrap(), 0);
    // An open latch stays open.
    assert_eq!(latch.count_down().await.unwrap(), 0);
    assert!(!exists(&server, "ready"));
    soon(latch.wait()).await.unwrap();
    for client in &clients {
        settled(client).await;
    }
}

/// PROTOCOL.md: the count is a string at the plain name; setting it
/// publishes `1` and reaching zero publishes `0` on
/// `redisson_countdownlatch__channel__{name}` (braces added even around a
/// name that has its own, as Redisson does); a set latch is not set again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_layout_is_redissons() {
    let server = RedisServer::start();
    let client = client(&server, WATCHDOG).await;
    let latch = client.count_down_latch("boot");
    let channel = "redisson_countdownlatch__channel__{boot}";
    let sub = RawSubscriber::new(&server, channel);
    assert!(latch.try_set_count(2).await.unwrap());
    assert_eq!(next_message(sub).await, Some((channel.into(), "1".into())));
    assert_eq!(
        server.cmd(&["GET", "boot"]).as_string().as_deref(),
        Some("2")
    );
    assert!(!latch.try_set_count(5).await.unwrap());
    assert_eq!(
        server.cmd(&["GET", "boot"]).as_string().as_deref(),
        Some("2")
    );
    latch.count_down().await.unwrap();
    let sub = RawSubscriber::new(&server, channel);
    latch.count_down().await.unwrap();
    assert_eq!(next_message(sub).await, Some((channel.into(), "0".into())));
    // Once open, it can be set again.
    assert!(latch.try_set_count(1).await.unwrap());
    // A count set by Redisson (a plain SET) is honoured.
    server.cmd(&["SET", "{t}:2", "1"]);
    let tagged = client.count_down_latch("{t}:2");
    let sub = RawSubscriber::new(&server, "redisson_countdownlatch__channel__{{t}:2}");
    assert_eq!(tagged.count().await.unwrap(), 1);
    tagged.count_down().await.unwrap();
    assert_eq!(
        next_message(sub).await,
        Some((
            "redisson_countdownlatch__channel__{{t}:2}".into(),
            "0".into()
        ))
    );
}

/// `delete` opens the latch for every waiter; `wait_for` gives up at its
/// timeout without a subscription left behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_opens_and_wait_for_times_out() {
    let server = RedisServer::start();
    let client = client(&server, WATCHDOG).await;
    let latch = client.count_down_latch("gate");
    assert!(
        latch.wait_for(Duration::from_millis(10)).await.unwrap(),
        "an unset latch is open"
    );
    latch.try_set_count(5).await.unwrap();
    let started = Instant::now();
    assert!(!soon(latch.wait_for(Duration::from_millis(300)))
        .await
        .unwrap());
    assert!(started.elapsed() >= Duration::from_millis(300));
    settled(&client).await;
    let waiter = {
        let latch = latch.clone();
        tokio::spawn(async move { latch.wait_for(Duration::from_secs(60)).await.unwrap() })
    };
    eventually(Duration::from_secs(10), || async {
        client.subscriptions() == 1
    })
    .await;
    assert!(latch.delete().await.unwrap());
    assert!(within(Duration::from_secs(5), waiter).await.unwrap());
    assert!(!latch.delete().await.unwrap());
    settled(&client).await;
}

/// Bad input is refused with a clear error and writes nothing; waits
/// dropped at random points leave no subscription.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_and_dropped_waits() {
    let server = RedisServer::start();
    let client = client(&server, WATCHDOG).await;
    let latch = client.count_down_latch("gate");
    assert!(matches!(
        latch.try_set_count(0).await,
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        latch.try_set_count(u64::MAX).await,
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        client.count_down_latch("").count_down().await,
        Err(Error::InvalidArgument(_))
    ));
    assert!(!exists(&server, "gate"));
    server.cmd(&["HSET", "hash", "f", "1"]);
    let hash = client.count_down_latch("hash");
    assert!(matches!(
        hash.count_down().await,
        Err(Error::WrongType { .. })
    ));
    assert!(matches!(hash.count().await, Err(Error::WrongType { .. })));
    assert!(matches!(hash.wait().await, Err(Error::WrongType { .. })));

    latch.try_set_count(1).await.unwrap();
    for cut in common::cut_points(500, Duration::from_micros(900)) {
        let _ = tokio::time::timeout(cut, latch.wait()).await;
    }
    settled(&client).await;
    assert_eq!(latch.count().await.unwrap(), 1);
}
