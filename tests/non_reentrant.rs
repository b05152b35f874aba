//! The non-reentrant locks (Redisson's `getNonReentrantLock` and
//! `getNonReentrantFairLock`) against a real `redis-server`, one private
//! server per test: the hazard they exist for (futures of one task share
//! an owner), the refusal, and the layout they share with the reentrant
//! locks.

use ferrisson_test_support as common;

use std::time::Duration;

use common::{client, eventually, exists, settled, soon, RedisServer};
use ferrisson::{Client, DistributedLock, Error};

const WATCHDOG: Duration = Duration::from_millis(1200);

/// The non-reentrant kinds, as `common::lock_of` names them.
const KINDS: [&str; 2] = ["non-reentrant", "non-reentrant fair"];

fn lock_of(
    client: &Client,
    kind: &str,
    name: &str,
    owner: Option<&str>,
) -> Box<dyn DistributedLock> {
    common::owned_lock_of(client, kind, name, owner)
}

fn hold_of(server: &RedisServer, name: &str, field: &str) -> Option<String> {
    server.cmd(&["HGET", name, field]).as_string()
}

/// The hazard: two branches of one `join!` share the task, hence the
/// owner, and on the reentrant lock the second re-enters the first's hold.
/// Both "critical sections" hold the lock at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_branches_of_one_join_re_enter_a_reentrant_lock() {
    let server = RedisServer::start();
    let client = client(&server, WATCHDOG).await;
    for lock in [
        Box::new(client.lock("hazard")) as Box<dyn DistributedLock>,
        Box::new(client.fair_lock("hazard")),
    ] {
        let (first, second) = soon(async { tokio::join!(lock.lock(), lock.lock()) }).await;
        let (first, second) = (first.unwrap(), second.unwrap());
        assert_eq!(
            soon(lock.hold_count()).await.unwrap(),
            2,
            "both branches hold it"
        );
        soon(first.unlock()).await.unwrap();
        soon(second.unlock()).await.unwrap();
        assert!(!exists(&server, "hazard"));
    }
    settled(&client).await;
}

/// On a non-reentrant lock, the second branch of the same `join!` is
/// refused with `NonReentrantReacquire`; the first hold stands, with a
/// count of 1, and nothing was written for the refusal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_non_reentrant_lock_the_second_branch_is_refused() {
    let server = RedisServer::start();
    let client = client(&server, WATCHDOG).await;
    for kind in KINDS {
        let lock = lock_of(&client, kind, "once", None);
        let (first, second) = soon(async { tokio::join!(lock.lock(), lock.lock()) }).await;
        let (guard, refused) = match (first, second) {
            (Ok(guard), Err(err)) | (Err(err), Ok(guard)) => (guard, err),
            (first, second) => {
                panic!("{kind}: one branch must hold it, one be refused: {first:?}, {second:?}")
            }
        };
        assert!(
            matches!(&refused, Error::NonReentrantReacquire { name, .. } if name == "once"),
            "{kind}: {refused}"
        );
        println!("{kind}: the second branch got: {refused}");
        assert_eq!(soon(lock.hold_count()).await.unwrap(), 1, "{kind}");
        // The refusal took nothing and wrote no latch: once the grant's
        // latch is swept, none is left.
        eventually(Duration::from_secs(5), || async {
            server
                .cmd(&["KEYS", "ferrisson_acquire_latch:*"])
                .as_array()
                .is_some_and(|keys| keys.is_empty())
        })
        .await;
        // A try_lock and a leased acquire are refused alike.
        let again = soon(lock.try_lock()).await.unwrap_err();
        assert!(
            matches!(again, Error::NonReentrantReacquire { .. }),
            "{kind}: {again}"
        );
        let leased = soon(lock.lock_with_lease(Duration::from_secs(5)))
            .await
            .unwrap_err();
        assert!(
            matches!(leased, Error::NonReentrantReacquire { .. }),
            "{kind}: {leased}"
        );
        assert_eq!(soon(lock.hold_count()).await.unwrap(), 1, "{kind}");
        soon(guard.unlock()).await.unwrap();
        assert!(!exists(&server, "once"), "{kind}");
    }
    settled(&client).await;
}

/// Other owners wait as on any lock, and get it when the holder lets go;
/// a fair waiter's queue entry is left alone by the holder's refusal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn other_owners_wait_as_usual() {
    let server = RedisServer::start();
    let client = client(&server, WATCHDOG).await;
    for kind in KINDS {
        let holder = lock_of(&client, kind, "turns", Some("a"));
        let held = soon(holder.lock()).await.unwrap();
        let other = lock_of(&client, kind, "turns", Some("b"));
        assert!(soon(other.try_lock()).await.unwrap().is_none(), "{kind}");
        let wait = tokio::spawn(async move {
            let guard = other.lock().await?;
            let count = other.hold_count().await?;
            guard.unlock().await?;
            Ok::<_, Error>(count)
        });
        if kind == "non-reentrant fair" {
            let waiter = format!("{}:b", client.id());
            eventually(Duration::from_secs(5), || async {
                server
                    .cmd(&["LRANGE", "redisson_lock_queue:{turns}", "0", "-1"])
                    .as_array()
                    .is_some_and(|queue| {
                        queue.len() == 1 && queue[0].as_string().as_deref() == Some(waiter.as_str())
                    })
            })
            .await;
            let refused = soon(holder.try_lock_for(Duration::from_secs(1)))
                .await
                .unwrap_err();
            assert!(
                matches!(refused, Error::NonReentrantReacquire { .. }),
                "{refused}"
            );
            let queue = server.cmd(&["LRANGE", "redisson_lock_queue:{turns}", "0", "-1"]);
            assert_eq!(
                queue.as_array().map(|q| q.len()),
                Some(1),
                "the waiter kept its place"
            );
        }
        soon(held.unlock()).await.unwrap();
        let count = soon(wait).await.unwrap().unwrap();
        assert_eq!(count, 1, "{kind}: the waiter held it once");
        assert!(!exists(&server, "turns"), "{kind}");
    }
    settled(&client).await;
}

/// The layout is the reentrant lock's (and the fair lock's): one field
/// `<client-id>:<owner>` holding 1, the watchdog's TTL; so a non-reentrant
/// holder excludes reentrant ones of the same name and the other way
/// round.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_layout_is_the_reentrant_locks() {
    let server = RedisServer::start();
    let client = client(&server, WATCHDOG).await;
    for (kind, reentrant) in [
        (
            "non-reentrant",
            Box::new(client.lock("shared").with_owner("r")) as Box<dyn DistributedLock>,
        ),
        (
            "non-reentrant fair",
            Box::new(client.fair_lock("shared").with_owner("r")),
        ),
    ] {
        let lock = lock_of(&client, kind, "shared", Some("n"));
        let guard = soon(lock.lock()).await.unwrap();
        let field = format!("{}:n", client.id());
        assert_eq!(
            hold_of(&server, "shared", &field).as_deref(),
            Some("1"),
            "{kind}"
        );
        assert_eq!(server.cmd(&["HLEN", "shared"]).as_int(), Some(1), "{kind}");
        let pttl = server.cmd(&["PTTL", "shared"]).as_int().unwrap();
        assert!(
            pttl > 0 && pttl <= WATCHDOG.as_millis() as i64,
            "{kind}: PTTL {pttl}"
        );
        assert!(
            soon(reentrant.try_lock()).await.unwrap().is_none(),
            "{kind}"
        );
        soon(guard.unlock()).await.unwrap();

        let guard = soon(reentrant.lock()).await.unwrap();
        assert!(soon(lock.try_lock()).await.unwrap().is_none(), "{kind}");
        soon(guard.unlock()).await.unwrap();
        assert!(!exists(&server, "shared"), "{kind}");
    }
    settled(&client).await;
}
