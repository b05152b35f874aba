//! The multi-lock against real `redis-server`s: locks on two servers, taken
//! all or nothing.

use ferrisson_test_support as common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{client, eventually, exists, settled, soon, within, RedisServer};
use ferrisson::{Client, DistributedLock, Error, MultiLock};

const WATCHDOG: Duration = Duration::from_millis(1500);

fn multi(locks: Vec<Box<dyn DistributedLock>>) -> MultiLock {
    MultiLock::new(locks)
}

/// Locks `a` (first server) and `b`, `c` (second server), as seen by `client_a`
/// and `client_b`.
fn abc(client_a: &Client, client_b: &Client) -> Vec<Box<dyn DistributedLock>> {
    vec![
        Box::new(client_a.lock("a")),
        Box::new(client_b.lock("b")),
        Box::new(client_b.fair_lock("c")),
    ]
}

/// While one lock is busy, the multi-lock takes none (and keeps none while
/// it waits); once free, it takes all, and its guard releases all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn all_or_nothing() {
    let (one, two) = (RedisServer::start(), RedisServer::start());
    let (a, b) = (client(&one, WATCHDOG).await, client(&two, WATCHDOG).await);
    let other = client(&two, WATCHDOG).await;
    let blocker = other.lock("b").lock().await.unwrap();
    let locks = multi(abc(&a, &b));
    assert!(locks.try_lock().await.unwrap().is_none());
    assert!(
        !exists(&one, "a") && !exists(&two, "c"),
        "a failed try keeps nothing"
    );
    let waiter = {
        let locks = locks.clone();
        tokio::spawn(async move { locks.try_lock_for(Duration::from_secs(30)).await.unwrap() })
    };
    // While it waits for `b`, it holds nothing else.
    eventually(Duration::from_secs(10), || async { b.subscriptions() == 1 }).await;
    assert!(!exists(&one, "a") && !exists(&two, "c"));
    blocker.unlock().await.unwrap();
    let guard = within(Duration::from_secs(10), waiter)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(guard.guards().len(), 3);
    assert_eq!(guard.guards()[0].name(), "a");
    assert!(exists(&one, "a") && exists(&two, "b") && exists(&two, "c"));
    assert!(!guard.is_lease_lost());
    guard.unlock().await.unwrap();
    assert!(!exists(&one, "a") && !exists(&two, "b") && !exists(&two, "c"));
    // A budget that runs out gives `None` and leaves nothing.
    let blocker = other.lock("b").lock().await.unwrap();
    let started = Instant::now();
    assert!(soon(locks.try_lock_for(Duration::from_millis(300)))
        .await
        .unwrap()
        .is_none());
    assert!(started.elapsed() >= Duration::from_millis(300));
    assert!(!exists(&one, "a") && !exists(&two, "c"));
    blocker.unlock().await.unwrap();
    settled(&a).await;
    settled(&b).await;
}

/// Tasks taking the same three locks in opposite orders, in other clients,
/// never deadlock, and never share the critical section.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opposite_orders_never_deadlock() {
    let (one, two) = (RedisServer::start(), RedisServer::start());
    let mut tasks = Vec::new();
    let inside = Arc::new(AtomicUsize::new(0));
    let overlaps = Arc::new(AtomicUsize::new(0));
    const TASKS: usize = 4;
    const ROUNDS: usize = 25;
    let started = Instant::now();
    for task in 0..TASKS {
        let (a, b) = (client(&one, WATCHDOG).await, client(&two, WATCHDOG).await);
        let mut locks = abc(&a, &b);
        if task % 2 == 1 {
            locks.reverse();
        }
        let locks = multi(locks);
        let (inside, overlaps) = (Arc::clone(&inside), Arc::clone(&overlaps));
        tasks.push(tokio::spawn(async move {
            for round in 0..ROUNDS {
                let guard = if round % 2 == 0 {
                    locks.lock().await.unwrap()
                } else {
                    locks
                        .lock_with_lease(Duration::from_secs(10))
                        .await
                        .unwrap()
                };
                if inside.fetch_add(1, Ordering::SeqCst) != 0 {
                    overlaps.fetch_add(1, Ordering::SeqCst);
                }
                tokio::task::yield_now().await;
                inside.fetch_sub(1, Ordering::SeqCst);
                guard.unlock().await.unwrap();
            }
            (a, b)
        }));
    }
    let mut clients = Vec::new();
    for task in tasks {
        clients.push(within(Duration::from_secs(120), task).await.unwrap());
    }
    println!(
        "{} multi-lock acquisitions in opposite orders in {:?}; overlaps {}",
        TASKS * ROUNDS,
        started.elapsed(),
        overlaps.load(Ordering::SeqCst)
    );
    assert_eq!(overlaps.load(Ordering::SeqCst), 0);
    for (a, b) in &clients {
        settled(a).await;
        settled(b).await;
    }
    assert!(!exists(&one, "a") && !exists(&two, "b") && !exists(&two, "c"));
}

/// An error from one lock fails the call and releases what was taken; an
/// empty multi-lock is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_release_what_was_taken() {
    let (one, two) = (RedisServer::start(), RedisServer::start());
    let (a, b) = (client(&one, WATCHDOG).await, client(&two, WATCHDOG).await);
    two.cmd(&["SET", "b", "not a lock"]);
    let locks = multi(abc(&a, &b));
    assert!(matches!(locks.lock().await, Err(Error::WrongType { .. })));
    assert!(
        !exists(&one, "a"),
        "the lock taken before the error was released"
    );
    assert!(matches!(
        multi(vec![]).try_lock().await,
        Err(Error::InvalidArgument(_))
    ));
    settled(&a).await;
}

/// The guard reports a lost lease when any one lock is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_lock_is_reported() {
    let (one, two) = (RedisServer::start(), RedisServer::start());
    let (a, b) = (client(&one, WATCHDOG).await, client(&two, WATCHDOG).await);
    let locks = multi(abc(&a, &b));
    let guard = locks.lock().await.unwrap();
    b.lock("b").force_unlock().await.unwrap();
    within(Duration::from_secs(10), guard.lease_lost()).await;
    assert!(guard.is_lease_lost());
    assert!(guard.unlock().await.is_err(), "one of the holds was lost");
    assert!(
        !exists(&one, "a") && !exists(&two, "c"),
        "the others were released"
    );
}

/// Multi-lock acquires dropped at random points leave nothing held, no
/// watchdog entry and no subscription, while another holder comes and goes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_acquires_leave_nothing() {
    let (one, two) = (RedisServer::start(), RedisServer::start());
    let (a, b) = (client(&one, WATCHDOG).await, client(&two, WATCHDOG).await);
    let locks = multi(abc(&a, &b));
    let other = client(&two, WATCHDOG).await;
    let hog = {
        let lock = other.lock("b");
        tokio::spawn(async move {
            for _ in 0..300 {
                let guard = lock.lock().await.unwrap();
                tokio::time::sleep(Duration::from_millis(1)).await;
                guard.unlock().await.unwrap();
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        })
    };
    let mut kept = 0;
    for cut in common::cut_points(600, Duration::from_micros(1500)) {
        if let Ok(guard) = tokio::time::timeout(cut, locks.lock()).await {
            kept += 1;
            guard.unwrap().unlock().await.unwrap();
        }
    }
    within(Duration::from_secs(60), hog).await.unwrap();
    println!("600 multi-lock acquires, {kept} completed, the rest dropped");
    settled(&a).await;
    settled(&b).await;
    eventually(Duration::from_secs(10), || async {
        !exists(&one, "a") && !exists(&two, "b") && !exists(&two, "c")
    })
    .await;
}
