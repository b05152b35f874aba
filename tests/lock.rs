//! The reentrant lock against a real `redis-server`, one private server per
//! test.

use ferrisson_test_support as common;

use std::sync::Arc;
use std::time::Duration;

use common::{
    client, count_under_lock, eventually, exists, next_message, owned_lock_of, settled, soon,
    subscribers, within, RawSubscriber, RedisServer, RespValue,
};
use ferrisson::{Error, LockGuard};
use tokio::time::Instant;

const WATCHDOG: Duration = Duration::from_millis(1200);

/// For a test whose subject is not the watchdog's timing.
const LONG_WATCHDOG: Duration = Duration::from_secs(30);

/// Guards move into spawned tasks; handles are shared between them.
#[test]
fn guard_and_handles_are_send_and_static() {
    fn send_static<T: Send + 'static>() {}
    fn send_sync_clone<T: Send + Sync + Clone + 'static>() {}
    send_static::<LockGuard>();
    send_sync_clone::<ferrisson::Lock>();
    send_sync_clone::<ferrisson::Client>();
    send_static::<Error>();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reentrancy_counts_holds_and_the_last_release_deletes() {
    let server = RedisServer::start();
    let client = client(&server, WATCHDOG).await;
    for depth in [1u32, 2, 10, 100] {
        let lock = client.lock(format!("reentrant:{depth}"));
        let mut guards = Vec::new();
        for level in 1..=depth {
            guards.push(soon(lock.lock()).await.unwrap());
            assert_eq!(soon(lock.hold_count()).await.unwrap(), level);
        }
        assert!(soon(lock.is_held_by_current_task()).await.unwrap());
        while let Some(guard) = guards.pop() {
            soon(guard.unlock()).await.unwrap();
            assert_eq!(soon(lock.hold_count()).await.unwrap(), guards.len() as u32);
        }
        assert!(
            !exists(&server, lock.name()),
            "key left after the last release"
        );
        assert!(!soon(lock.is_locked()).await.unwrap());
    }
    assert_eq!(client.held_locks(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_and_clients_exclude_each_other() {
    let server = RedisServer::start();
    let clients = [
        client(&server, WATCHDOG).await,
        client(&server, WATCHDOG).await,
    ];
    const TASKS_PER_CLIENT: usize = 8;
    const ROUNDS: usize = 150;
    let locks = clients
        .iter()
        .flat_map(|client| (0..TASKS_PER_CLIENT).map(|_| client.lock("exclusion")))
        .collect();
    let counter = count_under_lock(&server, locks, ROUNDS, "counter").await;
    let total = (clients.len() * TASKS_PER_CLIENT * ROUNDS) as i64;
    assert_eq!(counter, total, "lost updates");
    println!("{total} acquisitions over 2 clients x {TASKS_PER_CLIENT} tasks, no lost update");
    assert!(!exists(&server, "exclusion"));
    for client in &clients {
        assert_eq!(client.held_locks(), 0);
        settled(client).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn releasing_what_you_do_not_hold_is_an_error() {
    let server = RedisServer::start();
    let a = client(&server, WATCHDOG).await;
    let b = client(&server, WATCHDOG).await;
    let guard = soon(a.lock("not-mine").lock()).await.unwrap();

    // Another client.
    let err = soon(b.lock("not-mine").unlock()).await.unwrap_err();
    assert!(err.is_not_held(), "{err}");
    let text = err.to_string();
    assert!(
        text.contains("not-mine") && text.contains(&b.id().to_string()),
        "{text}"
    );

    // Another task of the same client.
    let lock = a.lock("not-mine");
    let err = soon(tokio::spawn(async move { lock.unlock().await }))
        .await
        .unwrap()
        .unwrap_err();
    assert!(err.is_not_held(), "{err}");

    // A lock nobody holds.
    let err = soon(a.lock("nobody").unlock()).await.unwrap_err();
    assert!(err.is_not_held(), "{err}");

    // The holder's hold survived all of that.
    assert_eq!(soon(a.lock("not-mine").hold_count()).await.unwrap(), 1);
    soon(guard.unlock()).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leaked_hold_is_released_by_its_owner() {
    let server = RedisServer::start();
    let client = client(&server, WATCHDOG).await;
    let lock = client.lock("leaked").with_owner("job-7");
    soon(lock.lock()).await.unwrap().leak();
    assert_eq!(client.held_locks(), 1, "the watchdog keeps a leaked hold");
    // Another task with the same explicit owner re-enters.
    let other = lock.clone();
    let count = soon(tokio::spawn(async move {
        other.lock().await.unwrap().leak();
        other.hold_count().await.unwrap()
    }))
    .await
    .unwrap();
    assert_eq!(count, 2);
    soon(lock.unlock()).await.unwrap();
    // Another task, same explicit owner: it may release.
    let other = lock.clone();
    soon(tokio::spawn(async move { other.unlock().await }))
        .await
        .unwrap()
        .unwrap();
    assert!(!exists(&server, "leaked"));
    assert_eq!(client.held_locks(), 0);
    assert!(soon(lock.unlock()).await.unwrap_err().is_not_held());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_lease_frees_the_lock_and_the_late_release_fails() {
    let server = RedisServer::start();
    let a = client(&server, WATCHDOG).await;
    let b = client(&server, WATCHDOG).await;
    // Long enough that the checks below run before it ends, on a loaded
    // machine too.
    let lease = Duration::from_millis(1000);
    let started = Instant::now();
    let old = soon(a.lock("leased").lock_with_lease(lease)).await.unwrap();
    assert_eq!(old.lease(), Some(lease));
    let ttl = soon(a.lock("leased").remaining_ttl())
        .await
        .unwrap()
        .unwrap();
    assert!(ttl <= lease && ttl > Duration::ZERO, "{ttl:?}");

    // B waits and gets it once the lease runs out, no earlier.
    let new = soon(b.lock("leased").lock()).await.unwrap();
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(900),
        "acquired after {waited:?}"
    );
    soon(old.lease_lost()).await;
    assert!(old.is_lease_lost());

    let err = soon(old.unlock()).await.unwrap_err();
    assert!(err.is_lease_lost(), "{err}");
    assert!(
        soon(b.lock("leased").is_locked()).await.unwrap(),
        "the late release touched the new holder's lock"
    );
    soon(new.unlock()).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_after_force_unlock_is_not_held() {
    let server = RedisServer::start();
    let client = client(&server, Duration::from_secs(30)).await;
    let lock = client.lock("forced");
    let guard = soon(lock.lock()).await.unwrap();
    assert!(soon(lock.force_unlock()).await.unwrap());
    assert!(!soon(lock.force_unlock()).await.unwrap());
    let err = soon(guard.unlock()).await.unwrap_err();
    assert!(err.is_not_held(), "{err}");
    assert_eq!(client.held_locks(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_watchdog_keeps_a_lock_alive_and_stops_on_release() {
    let server = RedisServer::start();
    let holder = client(&server, WATCHDOG).await;
    let other = client(&server, WATCHDOG).await;
    let lock = holder.lock("watched");
    let guard = soon(lock.lock()).await.unwrap();
    assert_eq!(holder.held_locks(), 1);

    // Four watchdog timeouts: without renewals it would be gone after one.
    let until = Instant::now() + WATCHDOG * 4;
    while Instant::now() < until {
        assert!(soon(other.lock("watched").try_lock())
            .await
            .unwrap()
            .is_none());
        let ttl = soon(lock.remaining_ttl())
            .await
            .unwrap()
            .expect("key has a TTL");
        assert!(ttl <= WATCHDOG, "{ttl:?}");
        tokio::time::sleep(WATCHDOG / 4).await;
    }
    assert!(!guard.is_lease_lost());

    soon(guard.unlock()).await.unwrap();
    assert_eq!(holder.held_locks(), 0, "the watchdog did not stop");
    assert!(!exists(&server, "watched"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_lost_fires_when_the_key_is_deleted_behind_the_holder() {
    let server = RedisServer::start();
    let client = client(&server, WATCHDOG).await;
    let outer = soon(client.lock("stolen").lock()).await.unwrap();
    let inner = soon(client.lock("stolen").lock()).await.unwrap();
    assert_eq!(server.cmd(&["DEL", "stolen"]).as_int(), Some(1));
    // Both holds learn it by the next renewal: a third of the timeout.
    within(WATCHDOG * 2, outer.lease_lost()).await;
    within(WATCHDOG * 2, inner.lease_lost()).await;
    assert_eq!(client.held_locks(), 0, "the registry forgot the key");
    assert!(soon(outer.unlock()).await.unwrap_err().is_lease_lost());
    assert!(soon(inner.unlock()).await.unwrap_err().is_lease_lost());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn force_unlock_wakes_a_waiter_at_once() {
    let server = RedisServer::start();
    let a = client(&server, WATCHDOG).await;
    let b = client(&server, WATCHDOG).await;
    let held = soon(a.lock("wake").lock_with_lease(Duration::from_secs(60)))
        .await
        .unwrap();
    let waiter = {
        let lock = b.lock("wake");
        tokio::spawn(async move { lock.lock().await })
    };
    eventually(Duration::from_secs(5), || async { b.subscriptions() == 1 }).await;
    let forced = Instant::now();
    assert!(soon(b.lock("wake").force_unlock()).await.unwrap());
    let guard = within(Duration::from_secs(5), waiter)
        .await
        .unwrap()
        .unwrap();
    let woke = forced.elapsed();
    println!("force_unlock to waiter acquired: {woke:?} (lease was 60 s)");
    assert!(woke < Duration::from_secs(5));
    soon(guard.unlock()).await.unwrap();
    assert!(soon(held.unlock()).await.unwrap_err().is_not_held());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unlock_wakes_the_waiter_long_before_the_ttl() {
    let server = RedisServer::start();
    let a = client(&server, Duration::from_secs(30)).await;
    let b = client(&server, Duration::from_secs(30)).await;
    let held = soon(a.lock("handoff").lock()).await.unwrap();
    let waiter = {
        let lock = b.lock("handoff");
        tokio::spawn(async move {
            let guard = lock.lock().await?;
            Ok::<_, Error>((Instant::now(), guard))
        })
    };
    eventually(Duration::from_secs(5), || async { b.subscriptions() == 1 }).await;
    let released = Instant::now();
    soon(held.unlock()).await.unwrap();
    let (acquired, guard) = within(Duration::from_secs(10), waiter)
        .await
        .unwrap()
        .unwrap();
    let handoff = acquired - released;
    println!("hand-off after unlock: {handoff:?} (TTL was up to 30 s)");
    assert!(handoff < Duration::from_secs(5), "{handoff:?}");
    soon(guard.unlock()).await.unwrap();
    settled(&b).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn try_lock_for_gives_up_after_its_wait() {
    let server = RedisServer::start();
    let a = client(&server, WATCHDOG).await;
    let b = client(&server, WATCHDOG).await;
    let held = soon(a.lock("busy").lock()).await.unwrap();
    assert!(soon(b.lock("busy").try_lock()).await.unwrap().is_none());
    let started = Instant::now();
    let got = soon(b.lock("busy").try_lock_for(Duration::from_millis(300)))
        .await
        .unwrap();
    assert!(got.is_none());
    assert!(started.elapsed() >= Duration::from_millis(300));
    soon(held.unlock()).await.unwrap();
    let got = soon(
        b.lock("busy")
            .try_lock_with_lease(Duration::from_secs(1), Duration::from_secs(5)),
    )
    .await
    .unwrap()
    .expect("free now");
    assert_eq!(got.lease(), Some(Duration::from_secs(5)));
    soon(got.unlock()).await.unwrap();
    settled(&b).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_lock_futures_leave_nothing_behind() {
    common::init_tracing();
    let server = RedisServer::start();
    // Long: a hold left behind stands far longer than the checks below
    // wait, and the holder's lasts through a stalled machine.
    let holder = client(&server, LONG_WATCHDOG).await;
    let c = client(&server, LONG_WATCHDOG).await;

    // Waiters on a held lock, dropped while waiting.
    let held = soon(holder.lock("cancel").lock()).await.unwrap();
    for i in 0..50u64 {
        let lock = c.lock("cancel");
        let limit = Duration::from_micros(200 * i);
        let _ = tokio::time::timeout(limit, lock.lock()).await;
        let _ = tokio::time::timeout(limit, lock.try_lock_for(Duration::from_secs(10))).await;
    }
    soon(held.unlock()).await.unwrap();

    // Acquires of a free lock, dropped before, during and after the send.
    for i in 0..300u64 {
        let lock = c.lock("cancel");
        let limit = Duration::from_micros(i * 3);
        let _ = tokio::time::timeout(limit, lock.lock()).await;
        // The guard of any acquire that finished is dropped here too.
    }
    // Give-backs and drops run in the background: wait for them to settle.
    eventually(Duration::from_secs(10), || async {
        !exists(&server, "cancel")
            && c.held_locks() == 0
            && c.subscriptions() == 0
            && subscribers(&server, "redisson_lock__channel:{cancel}") == 0
    })
    .await;
    // And the lock is free for anyone. Within a wait: an acquire dropped
    // after it was handed to the connection still runs, perhaps only after
    // the look above, and its grant is given back then.
    let guard = soon(holder.lock("cancel").try_lock_for(Duration::from_secs(10)))
        .await
        .unwrap()
        .expect("free");
    soon(guard.unlock()).await.unwrap();
    assert!(!common::failed_give_backs().contains("cancel"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_guard_releases_in_the_background() {
    let server = RedisServer::start();
    let client = client(&server, WATCHDOG).await;
    let sub = RawSubscriber::new(&server, "redisson_lock__channel:{dropped}");
    {
        let _guard = soon(client.lock("dropped").lock()).await.unwrap();
    }
    let message = next_message(sub).await;
    assert_eq!(
        message,
        Some(("redisson_lock__channel:{dropped}".into(), "0".into()))
    );
    assert!(!exists(&server, "dropped"));
    settled(&client).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_registry_is_empty_after_many_cycles() {
    let server = RedisServer::start();
    let client = client(&server, WATCHDOG).await;
    let mut tasks = Vec::new();
    for t in 0..8 {
        let client = client.clone();
        tasks.push(tokio::spawn(async move {
            for i in 0..100 {
                let lock = client.lock(format!("cycle:{}", (t + i) % 5));
                let outer = lock.lock().await.unwrap();
                let inner = lock.lock().await.unwrap();
                inner.unlock().await.unwrap();
                outer.unlock().await.unwrap();
            }
        }));
    }
    for task in tasks {
        within(Duration::from_secs(60), task).await.unwrap();
    }
    assert_eq!(client.held_locks(), 0);
    settled(&client).await;
    for k in 0..5 {
        assert!(!exists(&server, &format!("cycle:{k}")));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locking_works_after_script_flush() {
    let server = RedisServer::start();
    let client = client(&server, WATCHDOG).await;
    let lock = client.lock("flushed");
    soon(soon(lock.lock()).await.unwrap().unlock())
        .await
        .unwrap();
    assert_eq!(
        server.cmd(&["SCRIPT", "FLUSH"]),
        RespValue::Simple("OK".into())
    );
    let guard = soon(lock.lock()).await.unwrap();
    assert_eq!(soon(lock.hold_count()).await.unwrap(), 1);
    soon(guard.unlock()).await.unwrap();
    assert!(!exists(&server, "flushed"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_restart_loses_the_lease_and_locking_resumes() {
    common::init_tracing();
    let mut server = RedisServer::start();
    let client = client(&server, WATCHDOG).await;
    let guard = soon(client.lock("restart").lock()).await.unwrap();
    server.restart(); // no persistence: every key is gone
    within(WATCHDOG * 3, guard.lease_lost()).await;
    assert_eq!(client.held_locks(), 0);
    let err = soon(guard.unlock()).await.unwrap_err();
    assert!(err.is_lease_lost(), "{err}");

    // Commands work again once the connection is back.
    let lock = client.lock("restart");
    let mut again = None;
    for _ in 0..100 {
        match soon(lock.try_lock()).await {
            Ok(guard) => {
                again = guard;
                break;
            }
            Err(err) => {
                assert!(err.is_connection_error(), "{err}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
    let again = again.expect("locking works after the restart");
    assert_eq!(soon(lock.hold_count()).await.unwrap(), 1);
    soon(again.unlock()).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_are_woken_after_the_pubsub_connection_comes_back() {
    let mut server = RedisServer::start();
    let a = client(&server, WATCHDOG).await;
    let b = client(&server, WATCHDOG).await;
    let lease = Duration::from_secs(60);
    server.restart();
    // Both clients reconnect on their next command.
    let mut held = None;
    for _ in 0..100 {
        if let Ok(Some(guard)) =
            soon(a.lock("resub").try_lock_with_lease(Duration::ZERO, lease)).await
        {
            held = Some(guard);
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let held = held.expect("reconnected");
    let waiter = {
        let lock = b.lock("resub");
        tokio::spawn(async move { lock.lock().await })
    };
    eventually(Duration::from_secs(10), || async { b.subscriptions() == 1 }).await;
    let released = Instant::now();
    soon(held.unlock()).await.unwrap();
    let guard = within(Duration::from_secs(10), waiter)
        .await
        .unwrap()
        .unwrap();
    assert!(released.elapsed() < Duration::from_secs(10));
    soon(guard.unlock()).await.unwrap();
}

/// PROTOCOL.md, field by field: the hash, its TTL, the channel and message,
/// and the latch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_layout_is_redissons() {
    let server = RedisServer::start();
    let client = client(&server, Duration::from_secs(30)).await;
    let sub = RawSubscriber::new(&server, "redisson_lock__channel:{orders:42}");
    let lock = client.lock("orders:42");
    // In a task, the owner id is the task's id.
    let (first, second, task_id) = soon(tokio::spawn({
        let lock = lock.clone();
        async move {
            let first = lock.lock().await.unwrap();
            let second = lock.lock().await.unwrap();
            (first, second, tokio::task::id().to_string())
        }
    }))
    .await
    .unwrap();
    let field = format!("{}:task-{task_id}", client.id());
    assert_eq!(second.field(), field);
    let all = server.cmd(&["HGETALL", "orders:42"]);
    let all: Vec<String> = all
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_string().unwrap())
        .collect();
    assert_eq!(all, vec![field.clone(), "2".to_owned()]);
    assert_eq!(
        server.cmd(&["TYPE", "orders:42"]).as_string().as_deref(),
        Some("hash")
    );
    let pttl = server.cmd(&["PTTL", "orders:42"]).as_int().unwrap();
    assert!(pttl > 25_000 && pttl <= 30_000, "{pttl}");
    // The field's owner part is a canonical v4 UUID.
    let uuid = client.id().to_string();
    assert_eq!(uuid.len(), 36);
    assert_eq!(&uuid[14..15], "4");

    // A non-final release publishes nothing; the final one publishes `0`.
    soon(second.unlock()).await.unwrap();
    assert_eq!(
        server
            .cmd(&["HGET", "orders:42", &field])
            .as_string()
            .as_deref(),
        Some("1")
    );
    soon(first.unlock()).await.unwrap();
    let message = next_message(sub).await;
    assert_eq!(
        message,
        Some(("redisson_lock__channel:{orders:42}".into(), "0".into()))
    );
    assert!(!exists(&server, "orders:42"));

    // Latch keys are deleted after each release.
    eventually(Duration::from_secs(5), || async {
        server.keys("redisson_unlock_latch:*").is_empty()
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_with_a_hash_tag_keeps_its_tag() {
    let server = RedisServer::start();
    let client = client(&server, WATCHDOG).await;
    let sub = RawSubscriber::new(&server, "redisson_lock__channel:{user}:7");
    let guard = soon(client.lock("{user}:7").lock()).await.unwrap();
    assert!(exists(&server, "{user}:7"));
    soon(guard.unlock()).await.unwrap();
    let message = next_message(sub).await;
    assert_eq!(
        message,
        Some(("redisson_lock__channel:{user}:7".into(), "0".into()))
    );
}

/// A Java service holding the lock with Redisson, simulated with the raw
/// commands Redisson's scripts run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redisson_holder_excludes_us_and_its_unlock_wakes_us() {
    let server = RedisServer::start();
    let client = client(&server, WATCHDOG).await;
    let java = "6f1c2a0e-1b2c-4d3e-8f40-123456789abc:57";
    server.cmd(&["HINCRBY", "shared-job", java, "1"]);
    server.cmd(&["PEXPIRE", "shared-job", "30000"]);
    let lock = client.lock("shared-job");
    assert!(soon(lock.try_lock()).await.unwrap().is_none());
    let ttl = soon(lock.remaining_ttl()).await.unwrap().unwrap();
    assert!(ttl > Duration::from_secs(25));

    let waiter = {
        let lock = lock.clone();
        tokio::spawn(async move { lock.lock().await })
    };
    eventually(Duration::from_secs(5), || async {
        client.subscriptions() == 1
    })
    .await;
    // Redisson's final unlock: delete and publish `0`.
    server.cmd(&["DEL", "shared-job"]);
    server.cmd(&["PUBLISH", "redisson_lock__channel:{shared-job}", "0"]);
    let guard = within(Duration::from_secs(5), waiter)
        .await
        .unwrap()
        .unwrap();
    // And now Redisson's acquire would see our field and wait.
    let fields = server.cmd(&["HKEYS", "shared-job"]);
    assert_eq!(fields.as_array().unwrap().len(), 1);
    assert_ne!(fields.as_array().unwrap()[0].as_string().unwrap(), java);
    soon(guard.unlock()).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_gets_a_clear_error_and_writes_nothing() {
    let server = RedisServer::start();
    let client = client(&server, WATCHDOG).await;
    let invalid = |r: ferrisson::Result<Option<LockGuard>>| match r {
        Err(Error::InvalidArgument(text)) => text,
        other => panic!("expected InvalidArgument, got {other:?}"),
    };
    let lock = client.lock("input");

    let text = invalid(soon(client.lock("").try_lock()).await);
    assert!(text.contains("empty"), "{text}");
    let text = invalid(soon(client.lock("x".repeat(1 << 20)).try_lock()).await);
    assert!(text.contains("bytes"), "{text}");
    let text = invalid(soon(lock.try_lock_with_lease(Duration::ZERO, Duration::ZERO)).await);
    assert!(text.contains("lease"), "{text}");
    let text =
        invalid(soon(lock.try_lock_with_lease(Duration::ZERO, Duration::from_micros(10))).await);
    assert!(text.contains("lease"), "{text}");
    let text = invalid(soon(lock.try_lock_with_lease(Duration::ZERO, Duration::MAX)).await);
    assert!(text.contains("lease"), "{text}");
    let text = invalid(soon(lock.try_lock_for(Duration::MAX)).await);
    assert!(text.contains("wait"), "{text}");
    let text = invalid(soon(lock.with_owner("").try_lock()).await);
    assert!(text.contains("owner"), "{text}");
    let text = invalid(soon(lock.with_owner("w:write").try_lock()).await);
    assert!(text.contains(":write"), "{text}");
    assert!(matches!(
        soon(lock.lock_with_lease(Duration::ZERO)).await,
        Err(Error::InvalidArgument(_))
    ));
    assert_eq!(
        server.cmd(&["DBSIZE"]).as_int(),
        Some(0),
        "a refused call wrote"
    );

    // Settings no watchdog can keep.
    let err = soon(
        ferrisson::Client::builder(server.url())
            .watchdog_timeout(Duration::from_millis(5))
            .build(),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(err, Error::InvalidArgument(ref t) if t.contains("too small to renew")),
        "{err}"
    );
    let err = soon(ferrisson::Client::connect("not a url"))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Redis(_)), "{err}");

    // A key that holds other data.
    server.cmd(&["SET", "taken", "payload"]);
    let other = client.lock("taken");
    for result in [
        soon(other.try_lock()).await.map(|_| ()),
        soon(other.force_unlock()).await.map(|_| ()),
        soon(other.hold_count()).await.map(|_| ()),
        soon(other.unlock()).await,
    ] {
        assert!(
            matches!(
                result,
                Err(Error::WrongType { ref name, ref key_type, .. })
                    if name == "taken" && key_type == "string"
            ),
            "{result:?}"
        );
    }
    assert_eq!(
        server.cmd(&["GET", "taken"]).as_string().as_deref(),
        Some("payload")
    );
}

/// Outside any task (the body of `block_on`), the thread is the owner.
#[test]
fn code_outside_a_task_owns_by_thread() {
    let server = RedisServer::start();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let client = client(&server, WATCHDOG).await;
        let lock = client.lock("main-thread");
        let outer = soon(lock.lock()).await.unwrap();
        assert!(outer.field().contains(":thread-"), "{}", outer.field());
        let inner = soon(lock.lock()).await.unwrap();
        assert_eq!(soon(lock.hold_count()).await.unwrap(), 2);
        // A spawned task is another owner.
        let other = lock.clone();
        let got = soon(tokio::spawn(async move {
            other.try_lock().await.map(|g| g.is_some())
        }))
        .await
        .unwrap()
        .unwrap();
        assert!(!got);
        soon(inner.unlock()).await.unwrap();
        soon(outer.unlock()).await.unwrap();
    });
}

/// A guard moved into another task still belongs to the task that took it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guard_can_move_into_a_spawned_task() {
    let server = RedisServer::start();
    let client = client(&server, WATCHDOG).await;
    let guard = soon(client.lock("moved").lock()).await.unwrap();
    let released = Arc::new(tokio::sync::Notify::new());
    let done = Arc::clone(&released);
    let task = tokio::spawn(async move {
        guard.unlock().await.unwrap();
        done.notify_one();
    });
    soon(released.notified()).await;
    soon(task).await.unwrap();
    assert!(!exists(&server, "moved"));
}

/// With Redis gone, renewals fail; the holder is told before the lease the
/// server granted could have run out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_redis_loses_the_lease_within_the_timeout() {
    common::init_tracing();
    let mut server = RedisServer::start();
    let client = client(&server, WATCHDOG).await;
    let guard = soon(client.lock("unreachable").lock()).await.unwrap();
    // The server's TTL runs from the last confirmed renewal (or the acquire),
    // which was sent before this instant.
    let alive_at_most_until = Instant::now() + WATCHDOG;
    server.stop();
    within(WATCHDOG * 3, guard.lease_lost()).await;
    let told = Instant::now();
    println!(
        "lease lost reported {:?} before the latest possible expiry",
        alive_at_most_until.saturating_duration_since(told)
    );
    assert!(told <= alive_at_most_until, "told too late");
    assert_eq!(client.held_locks(), 0);
    assert!(soon(guard.unlock()).await.unwrap_err().is_lease_lost());
}

/// Many local waiters share one subscription; each release hands the lock to
/// one of them, and the subscription goes with the last.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_waiters_share_one_subscription() {
    let server = RedisServer::start();
    let holder = client(&server, WATCHDOG).await;
    let waiters = client(&server, WATCHDOG).await;
    const WAITERS: usize = 20;
    let held = soon(holder.lock("shared-sub").lock()).await.unwrap();
    let (done_tx, mut done_rx) = tokio::sync::mpsc::unbounded_channel();
    for i in 0..WAITERS {
        let lock = waiters.lock("shared-sub");
        let done = done_tx.clone();
        tokio::spawn(async move {
            let guard = lock.lock().await.unwrap();
            guard.unlock().await.unwrap();
            done.send(i).unwrap();
        });
    }
    drop(done_tx);
    eventually(Duration::from_secs(10), || async {
        server
            .cmd(&["PUBSUB", "NUMSUB", "redisson_lock__channel:{shared-sub}"])
            .as_array()
            .and_then(|a| a.get(1).and_then(RespValue::as_int))
            == Some(1)
    })
    .await;
    assert_eq!(waiters.subscriptions(), 1);
    assert_eq!(
        waiters.subscribes_sent(),
        1,
        "one SUBSCRIBE for all waiters"
    );

    soon(held.unlock()).await.unwrap();
    let mut finished = 0;
    while within(Duration::from_secs(30), done_rx.recv())
        .await
        .is_some()
    {
        finished += 1;
    }
    assert_eq!(finished, WAITERS);
    settled(&waiters).await;
    assert_eq!(
        subscribers(&server, "redisson_lock__channel:{shared-sub}"),
        0
    );
    assert_eq!(waiters.held_locks(), 0);
    assert!(!exists(&server, "shared-sub"));
}

/// A leased hold nested in a watchdog hold lives as long as the watchdog
/// keeps the key, and its release still counts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leased_hold_inside_a_watchdog_hold_is_kept_and_released() {
    let server = RedisServer::start();
    let client = client(&server, WATCHDOG).await;
    let lock = client.lock("mixed");
    let outer = soon(lock.lock()).await.unwrap();
    let nested = soon(lock.lock_with_lease(Duration::from_millis(100)))
        .await
        .unwrap();
    // The nested lease must not shorten the key's TTL under the watchdog's.
    let ttl = soon(lock.remaining_ttl()).await.unwrap().unwrap();
    assert!(ttl > WATCHDOG / 2, "{ttl:?}");
    soon(nested.lease_lost()).await; // its own lease, by the local clock
    tokio::time::sleep(WATCHDOG).await;
    assert_eq!(soon(lock.hold_count()).await.unwrap(), 2);
    soon(nested.unlock()).await.unwrap();
    assert_eq!(soon(lock.hold_count()).await.unwrap(), 1);
    soon(outer.unlock()).await.unwrap();
    assert!(!exists(&server, "mixed"));
    settled(&client).await;
}

/// With the server down, each send of a call fails after one reconnect
/// attempt, not after the connection manager's default backoff (six
/// retries, 100 ms doubling: 6.3 s before the first command hears of it);
/// once the server is back, calls work again.
///
/// The response timeout is set far above that backoff, so that it is not
/// what ends the call: a `try_lock` makes its four sends (three pauses of
/// 100 to 300 ms) and fails, in about a second here. The bound is the
/// default backoff, which a single send that waited it out would exceed,
/// not this machine's speed (a run on a loaded machine once took 3 s, when
/// a 3 s response timeout was the bound).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_on_a_server_that_is_down_fails_fast() {
    let mut server = RedisServer::start();
    let client = soon(
        ferrisson::Client::builder(server.url())
            .watchdog_timeout(WATCHDOG)
            .connection_timeout(Duration::from_millis(500))
            .response_timeout(Duration::from_secs(30))
            .build(),
    )
    .await
    .unwrap();
    let lock = client.lock("down");
    soon(lock.try_lock()).await.unwrap().unwrap().leak();
    server.stop();
    let mut slowest = Duration::ZERO;
    for _ in 0..3 {
        let started = std::time::Instant::now();
        let err = soon(lock.try_lock()).await.unwrap_err();
        assert!(err.is_connection_error(), "{err}");
        slowest = slowest.max(started.elapsed());
    }
    println!("try_lock with the server down failed after {slowest:?} at most");
    // The default backoff's delays alone: 100 + 200 + ... + 3 200 ms.
    let default_backoff = Duration::from_millis(6300);
    assert!(slowest < default_backoff, "{slowest:?}");
    server.restart();
    eventually(Duration::from_secs(20), || async {
        matches!(lock.try_lock().await, Ok(Some(_)))
    })
    .await;
}

/// A holder that awaits `lease_lost` learns of a force-unlock by another
/// client at once (the unlock message on the lock's channel), not at the
/// watchdog's next renewal (10 s with this 30 s timeout), nor, for a
/// leased hold, at its lease's end (60 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_force_unlocked_holder_is_told_at_once() {
    let server = RedisServer::start();
    let holder = client(&server, Duration::from_secs(30)).await;
    let operator = client(&server, Duration::from_secs(30)).await;
    let watched = soon(holder.lock("forced:watchdog").lock()).await.unwrap();
    let leased = soon(
        holder
            .lock("forced:leased")
            .lock_with_lease(Duration::from_secs(60)),
    )
    .await
    .unwrap();
    for (name, guard) in [("forced:watchdog", watched), ("forced:leased", leased)] {
        let guard = Arc::new(guard);
        let waiting = {
            let guard = Arc::clone(&guard);
            tokio::spawn(async move { guard.lease_lost().await })
        };
        // Listening: the holder's client subscribed to the lock's channel.
        eventually(Duration::from_secs(10), || async {
            holder.subscriptions() == 1
        })
        .await;
        assert!(!guard.is_lease_lost());
        let forced = Instant::now();
        assert!(soon(operator.lock(name).force_unlock()).await.unwrap());
        // Well before the next renewal, a third of the 30 s timeout.
        within(Duration::from_secs(5), waiting).await.unwrap();
        assert!(guard.is_lease_lost(), "{name}");
        assert!(forced.elapsed() < Duration::from_secs(5));
        eprintln!(
            "{name}: told {:?} after the force-unlock was sent",
            forced.elapsed()
        );
        let guard = Arc::into_inner(guard).unwrap();
        assert!(soon(guard.unlock()).await.unwrap_err().is_lease_lost());
        // The listening ended with the hold.
        eventually(Duration::from_secs(10), || async {
            holder.subscriptions() == 0
        })
        .await;
    }
    assert_eq!(holder.held_locks(), 0);
}

/// `keep_until` has the owner's last release keep the lock held until
/// then (ShedLock's "at least for"): the key stays, one hold of the
/// owner, with the time left as its TTL, nothing renews it, and another
/// owner cannot take it; a keep already past releases as usual. The
/// kinds whose release keeps nothing (fair, read, write) refuse it, and
/// their release is as usual.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keep_until_leaves_the_lock_held_after_the_last_release() {
    let server = RedisServer::start();
    let client = client(&server, WATCHDOG).await;
    let keep = Duration::from_secs(5);
    for kind in ["reentrant", "spin", "fenced", "non-reentrant"] {
        let name = format!("kept:{}", kind.replace(' ', "-"));
        let lock = owned_lock_of(&client, kind, &name, Some("o"));
        let mut guard = soon(lock.lock()).await.unwrap();
        guard.keep_until(Instant::now() + keep).unwrap();
        soon(guard.unlock()).await.unwrap();
        let ttl = server.cmd(&["PTTL", &name]).as_int().unwrap();
        assert!(
            ttl > 0 && ttl <= keep.as_millis() as i64,
            "{kind}: PTTL {ttl}"
        );
        assert_eq!(soon(lock.hold_count()).await.unwrap(), 1, "{kind}");
        assert_eq!(client.held_locks(), 0, "{kind}: nothing renews it");
        let other = owned_lock_of(&client, kind, &name, Some("p"));
        assert!(soon(other.try_lock()).await.unwrap().is_none(), "{kind}");
        assert!(soon(lock.force_unlock()).await.unwrap(), "{kind}");

        let mut guard = soon(lock.lock()).await.unwrap();
        guard.keep_until(Instant::now()).unwrap();
        soon(guard.unlock()).await.unwrap();
        assert!(!exists(&server, &name), "{kind}");
    }
    for kind in ["fair", "non-reentrant fair", "read", "write"] {
        let name = format!("unkept:{}", kind.replace(' ', "-"));
        let lock = owned_lock_of(&client, kind, &name, Some("o"));
        let mut guard = soon(lock.lock()).await.unwrap();
        let err = guard.keep_until(Instant::now() + keep).unwrap_err();
        assert!(matches!(err, Error::InvalidArgument(_)), "{kind}: {err}");
        soon(guard.unlock()).await.unwrap();
        assert!(!exists(&server, &name), "{kind}");
    }
    settled(&client).await;
}

/// `unlock_in_background` lets the lock go as a drop does, without
/// waiting, and its `Released` tells when it ended: `true` once Redis
/// released the hold (the key is gone by then, for every clone), `false`
/// for a hold another ended (force-unlocked: Redis says it is not held).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_in_the_background_tells_when_it_ended() {
    let server = RedisServer::start();
    let client = client(&server, WATCHDOG).await;
    let lock = client.lock("background");
    let guard = soon(lock.lock()).await.unwrap();
    let released = guard.unlock_in_background();
    let again = released.clone();
    assert!(soon(released.wait()).await);
    assert!(!exists(&server, "background"));
    assert!(soon(again.wait()).await);

    let guard = soon(lock.lock()).await.unwrap();
    assert!(soon(lock.force_unlock()).await.unwrap());
    assert!(!soon(guard.unlock_in_background().wait()).await);
    settled(&client).await;
}

/// Each re-entry released inside a long hold leaves a record of how long
/// its release kept the owner's key; the next one outlasts it, so the
/// records do not pile up with the re-entries, and none stays once the
/// owner's last hold is released.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reentries_inside_a_long_hold_leave_no_pile_of_records() {
    let server = RedisServer::start();
    let client = client(&server, WATCHDOG).await;
    let lock = client.lock("reentries:records");
    let outer = soon(lock.lock()).await.unwrap();
    for _ in 0..200 {
        let leased = soon(lock.lock_with_lease(Duration::from_secs(60)))
            .await
            .unwrap();
        soon(leased.unlock()).await.unwrap();
        let watched = soon(lock.lock()).await.unwrap();
        soon(watched.unlock()).await.unwrap();
    }
    let records = client.hold_records();
    assert!(records <= 3, "{records} records of one live hold");
    soon(outer.unlock()).await.unwrap();
    assert_eq!(client.hold_records(), 0);
    assert!(!exists(&server, "reentries:records"));
}
