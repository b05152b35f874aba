//! The spin lock and the `DistributedLock` trait against a real
//! `redis-server`, one private server per test.

use ferrisson_test_support as common;

use std::time::Duration;

use common::{client, count_under_lock, soon, subscribers, RedisServer};
use ferrisson::{Backoff, DistributedLock};
use tokio::time::Instant;

const WATCHDOG: Duration = Duration::from_millis(1200);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spin_locks_exclude_and_progress_without_subscribing() {
    let server = RedisServer::start();
    let clients = [
        client(&server, WATCHDOG).await,
        client(&server, WATCHDOG).await,
    ];
    const TASKS: usize = 8;
    const EACH: usize = 40;
    let locks = (0..TASKS)
        .map(|t| clients[t % 2].spin_lock("spun"))
        .collect();
    let counter = count_under_lock(&server, locks, EACH, "spun:counter").await;
    assert_eq!(counter, (TASKS * EACH) as i64, "lost updates");
    for client in &clients {
        assert_eq!(client.subscribes_sent(), 0);
        assert_eq!(client.subscriptions(), 0);
        assert_eq!(client.held_locks(), 0);
    }
    assert_eq!(subscribers(&server, "redisson_lock__channel:{spun}"), 0);
}

/// The same hash: a spin lock and a reentrant lock of one name exclude each
/// other, and the spinning waiter gets in once the other lets go.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spin_lock_and_a_lock_of_one_name_exclude_each_other() {
    let server = RedisServer::start();
    let client = client(&server, WATCHDOG).await;
    let held = client.lock("shared");
    let guard = soon(held.lock()).await.unwrap();
    let spinner = client
        .spin_lock("shared")
        .with_backoff(Backoff::new(Duration::from_millis(2), Duration::from_millis(20)).unwrap());
    let waiting = tokio::spawn(async move {
        let guard = spinner.lock().await.unwrap();
        (Instant::now(), guard)
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!waiting.is_finished(), "the spin lock got in while held");
    let released = Instant::now();
    soon(guard.unlock()).await.unwrap();
    let (acquired, spun) = soon(waiting).await.unwrap();
    // One pause at most: 20 ms, with room for a loaded machine.
    assert!(acquired - released < Duration::from_secs(2));
    assert!(soon(client.lock("shared").try_lock())
        .await
        .unwrap()
        .is_none());
    soon(spun.unlock()).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spin_wait_gives_up_on_time_and_a_dropped_one_leaves_nothing() {
    let server = RedisServer::start();
    let holder = client(&server, WATCHDOG).await;
    let spinner = client(&server, WATCHDOG).await;
    let guard = soon(holder.lock("busy").lock()).await.unwrap();

    let started = Instant::now();
    let none = soon(
        spinner
            .spin_lock("busy")
            .try_lock_for(Duration::from_millis(300)),
    )
    .await
    .unwrap();
    assert!(none.is_none());
    let waited = started.elapsed();
    assert!(waited >= Duration::from_millis(300), "{waited:?}");

    // Dropped while spinning, at many points.
    for cut in 0..20u64 {
        let lock = spinner.spin_lock("busy");
        let _ = tokio::time::timeout(Duration::from_millis(cut * 3), lock.lock()).await;
    }
    soon(guard.unlock()).await.unwrap();
    let lock = spinner.spin_lock("busy");
    for cut in 0..20u64 {
        let _ = tokio::time::timeout(Duration::from_micros(cut * 150), lock.lock()).await;
    }
    // Whatever those futures had taken is given back in the background.
    common::settled(&spinner).await;
    common::eventually(Duration::from_secs(5), || async {
        !common::exists(&server, "busy")
    })
    .await;
}

/// Any kind of lock behind one trait object.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locks_of_every_kind_work_as_trait_objects() {
    let server = RedisServer::start();
    let client = client(&server, WATCHDOG).await;
    let locks: Vec<Box<dyn DistributedLock>> = vec![
        Box::new(client.lock("dyn:a")),
        Box::new(client.spin_lock("dyn:b")),
    ];
    for lock in &locks {
        let outer = soon(lock.lock()).await.unwrap();
        let inner = soon(lock.try_lock_for(Duration::from_millis(50)))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(soon(lock.hold_count()).await.unwrap(), 2);
        assert!(soon(lock.is_locked()).await.unwrap());
        assert!(soon(lock.remaining_ttl()).await.unwrap().is_some());
        soon(inner.unlock()).await.unwrap();
        soon(outer.unlock()).await.unwrap();
        let leased = soon(lock.lock_with_lease(Duration::from_secs(5)))
            .await
            .unwrap();
        assert!(soon(lock.force_unlock()).await.unwrap());
        assert!(soon(leased.unlock()).await.unwrap_err().is_not_held());
        let leased = soon(lock.try_lock_with_lease(Duration::ZERO, Duration::from_secs(5)))
            .await
            .unwrap()
            .expect("the lock is free");
        assert!(soon(lock.force_unlock()).await.unwrap());
        assert!(soon(leased.unlock()).await.unwrap_err().is_not_held());
        assert!(!soon(lock.is_locked()).await.unwrap());
    }
    assert_eq!(locks[0].name(), "dyn:a");
}
