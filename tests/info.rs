//! Introspection against a real `redis-server`, one private server per
//! test: `info()` on every lock kind, `is_held_by`, and the fenced lock's
//! `current_token`, on locks taken by ferrisson and on Redisson's layout
//! written by hand (as a Java client leaves it).

use ferrisson_test_support as common;

use std::time::Duration;

use common::{client, eventually, lock_of, owned_lock_of, settled, soon, RedisServer, LOCK_KINDS};
use ferrisson::{LockMode, QueuedWaiter};

const WATCHDOG: Duration = Duration::from_millis(1500);

/// Every kind: a free lock shows nothing; a held one shows its holder
/// (this client, the owner given, its count) and a TTL within the lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_kind_shows_its_holder_and_ttl() {
    let server = RedisServer::start();
    let client = client(&server, WATCHDOG).await;
    for kind in LOCK_KINDS {
        let name = format!("info:{}", kind.replace(' ', "-"));
        let lock = owned_lock_of(&client, kind, &name, Some("worker-1"));
        let free = soon(lock.info()).await.unwrap();
        assert!(
            free.holders.is_empty() && free.ttl.is_none(),
            "{kind}: {free:?}"
        );
        let guard = soon(lock.lock()).await.unwrap();
        let info = soon(lock.info()).await.unwrap();
        println!("{kind}: {info:?}");
        assert_eq!(info.holders.len(), 1, "{kind}: {info:?}");
        let holder = &info.holders[0];
        assert_eq!(holder.client_id, client.id().to_string(), "{kind}");
        assert_eq!(holder.owner_id, "worker-1", "{kind}");
        assert_eq!(holder.holds, 1, "{kind}");
        assert_eq!(holder.write, kind == "write", "{kind}");
        let ttl = info.ttl.expect("a held lock has a TTL");
        assert!(ttl <= WATCHDOG && ttl > Duration::ZERO, "{kind}: {ttl:?}");
        let mode = match kind {
            "read" => Some(LockMode::Read),
            "write" => Some(LockMode::Write),
            _ => None,
        };
        assert_eq!(info.mode, mode, "{kind}");
        assert_eq!(info.token.is_some(), kind == "fenced", "{kind}");
        assert!(info.queue.is_empty(), "{kind}");
        assert!(soon(lock.is_held_by("worker-1")).await.unwrap(), "{kind}");
        assert!(!soon(lock.is_held_by("worker-2")).await.unwrap(), "{kind}");
        soon(guard.unlock()).await.unwrap();
        assert!(!soon(lock.is_held_by("worker-1")).await.unwrap(), "{kind}");
    }
    settled(&client).await;
}

/// Re-entries count; a read-write lock shows every reader, and a writer's
/// own read holds as a second entry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counts_and_read_holds() {
    let server = RedisServer::start();
    let client = client(&server, WATCHDOG).await;
    let lock = client.lock("counted").with_owner("o");
    let first = soon(lock.lock()).await.unwrap();
    let second = soon(lock.lock()).await.unwrap();
    let info = soon(lock.info()).await.unwrap();
    assert_eq!(info.holders[0].holds, 2, "{info:?}");
    drop((first, second));

    let rw = client.read_write_lock("shared");
    let a = soon(rw.read().with_owner("a").lock()).await.unwrap();
    let b = soon(rw.read().with_owner("b").lock()).await.unwrap();
    let info = soon(rw.read().info()).await.unwrap();
    assert_eq!(info.mode, Some(LockMode::Read));
    let mut owners: Vec<_> = info
        .holders
        .iter()
        .map(|h| (h.owner_id.as_str(), h.write))
        .collect();
    owners.sort();
    assert_eq!(owners, [("a", false), ("b", false)], "{info:?}");
    soon(a.unlock()).await.unwrap();
    soon(b.unlock()).await.unwrap();

    let writer = soon(rw.write().with_owner("w").lock()).await.unwrap();
    let downgrade = soon(rw.read().with_owner("w").lock()).await.unwrap();
    let info = soon(rw.write().info()).await.unwrap();
    assert_eq!(info.mode, Some(LockMode::Write));
    let mut holds: Vec<_> = info
        .holders
        .iter()
        .map(|h| (h.owner_id.as_str(), h.write, h.holds))
        .collect();
    holds.sort();
    assert_eq!(holds, [("w", false, 1), ("w", true, 1)], "{info:?}");
    soon(downgrade.unlock()).await.unwrap();
    soon(writer.unlock()).await.unwrap();
    eventually(Duration::from_secs(5), || async {
        client.held_locks() == 0
    })
    .await;
    settled(&client).await;
}

/// A fair lock shows its line in order, each waiter with its place and how
/// long until it would count as dead (at most the waiter timeout past the
/// holder's TTL).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fair_lock_shows_its_queue() {
    let server = RedisServer::start();
    let client = client(&server, WATCHDOG).await;
    let waiter_timeout = Duration::from_secs(20);
    let lock = client.fair_lock("line").with_waiter_timeout(waiter_timeout);
    let held = soon(lock.with_owner("holder").lock()).await.unwrap();
    let mut waits = Vec::new();
    for (i, owner) in ["first", "second"].into_iter().enumerate() {
        let waiter = lock.with_owner(owner);
        waits.push(tokio::spawn(async move { waiter.lock().await.map(drop) }));
        eventually(Duration::from_secs(5), || async {
            soon(lock.info()).await.unwrap().queue.len() == i + 1
        })
        .await;
    }
    let info = soon(lock.info()).await.unwrap();
    println!("fair: {info:?}");
    assert_eq!(info.holders.len(), 1);
    assert_eq!(info.holders[0].owner_id, "holder");
    let line: Vec<_> = info
        .queue
        .iter()
        .map(|w| (w.owner_id.as_str(), w.position))
        .collect();
    assert_eq!(line, [("first", 0), ("second", 1)]);
    for QueuedWaiter {
        client_id, timeout, ..
    } in &info.queue
    {
        assert_eq!(client_id, &client.id().to_string());
        let timeout = timeout.expect("a queued waiter has a deadline");
        assert!(timeout <= WATCHDOG + 2 * waiter_timeout, "{timeout:?}");
        assert!(timeout > Duration::ZERO, "{timeout:?}");
    }
    soon(held.unlock()).await.unwrap();
    for wait in waits {
        soon(wait).await.unwrap().unwrap();
    }
    assert!(soon(lock.info()).await.unwrap().queue.is_empty());
    settled(&client).await;
}

/// The fenced lock's token: `current_token` reads the counter without an
/// acquire, and `info` shows the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fenced_lock_shows_its_current_token() {
    let server = RedisServer::start();
    let client = client(&server, WATCHDOG).await;
    let lock = client.fenced_lock("fence");
    assert_eq!(soon(lock.current_token()).await.unwrap(), None);
    let guard = soon(lock.lock()).await.unwrap();
    let token = guard.token();
    assert_eq!(soon(lock.current_token()).await.unwrap(), Some(token));
    assert_eq!(soon(lock.info()).await.unwrap().token, Some(token));
    soon(guard.unlock()).await.unwrap();
    // The counter outlives the hold; reading it draws nothing.
    assert_eq!(soon(lock.current_token()).await.unwrap(), Some(token));
    assert_eq!(soon(lock.current_token()).await.unwrap(), Some(token));
    settled(&client).await;
}

/// Redisson's layout, written as a Java client leaves it (its UUID, a
/// thread id, a count, a TTL; a fair queue entry): `info` reads it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn it_reads_locks_taken_by_redisson_clients() {
    let server = RedisServer::start();
    let client = client(&server, WATCHDOG).await;
    let java = "6f1c3a52-2b9e-4d7c-9a57-1f0e6c2d8b41";
    server.cmd(&["HSET", "java", &format!("{java}:77"), "2"]);
    server.cmd(&["PEXPIRE", "java", "30000"]);
    server.cmd(&["RPUSH", "redisson_lock_queue:{java}", &format!("{java}:78")]);
    let far = 4_000_000_000_000_i64.to_string();
    server.cmd(&[
        "ZADD",
        "redisson_lock_timeout:{java}",
        &far,
        &format!("{java}:78"),
    ]);
    let info = soon(lock_of(&client, "fair", "java").info()).await.unwrap();
    println!("redisson's: {info:?}");
    assert_eq!(info.holders.len(), 1);
    assert_eq!(info.holders[0].client_id, java);
    assert_eq!(info.holders[0].owner_id, "77");
    assert_eq!(info.holders[0].holds, 2);
    assert!(info.ttl.is_some_and(|ttl| ttl <= Duration::from_secs(30)));
    assert_eq!(info.queue.len(), 1);
    assert_eq!(info.queue[0].owner_id, "78");
    assert_eq!(info.queue[0].position, 0);
    // Another type at the name is an error, not a guess.
    server.cmd(&["SET", "text", "x"]);
    let err = soon(client.lock("text").info()).await.unwrap_err();
    assert!(matches!(err, ferrisson::Error::WrongType { .. }), "{err}");
    settled(&client).await;
}
