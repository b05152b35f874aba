//! Lease extension against a real `redis-server`, one private server per
//! test: `LockGuard::extend` (owner-checked) and `LockGuard::keep_alive`
//! (a leased hold handed to the watchdog), on every lock kind.

use ferrisson_test_support as common;

use std::time::Duration;

use common::{client, eventually, owned_lock_of, settled, soon, within, RedisServer, LOCK_KINDS};
use ferrisson::Error;

const WATCHDOG: Duration = Duration::from_millis(1200);

/// A leased hold extended while held: the key's TTL and the guard's lease
/// both become the new lease (from 3 s to 30 s), on every kind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leased_hold_is_extended_while_held() {
    let server = RedisServer::start();
    let client = client(&server, WATCHDOG).await;
    for kind in LOCK_KINDS {
        let name = format!("extend:{}", kind.replace(' ', "-"));
        let lock = owned_lock_of(&client, kind, &name, Some("o"));
        let mut guard = soon(lock.lock_with_lease(Duration::from_secs(3)))
            .await
            .unwrap();
        soon(guard.extend(Duration::from_secs(30))).await.unwrap();
        let ttl = server.pttl(&name);
        println!("{kind}: extended from 3 s to 30 s: PTTL {ttl} ms");
        assert!(ttl > 10_000, "{kind}: PTTL {ttl}");
        assert_eq!(guard.lease(), Some(Duration::from_secs(30)), "{kind}");
        assert!(!guard.is_lease_lost(), "{kind}");
        soon(guard.unlock()).await.unwrap();
        assert_eq!(server.cmd(&["EXISTS", &name]).as_int(), Some(0), "{kind}");
    }
    settled(&client).await;
}

/// An extension is owner-checked: once the lock is gone (force-unlocked
/// here), it is refused with `NotHeld` and the guard counts its lease as
/// lost; a second try sends nothing and says `LeaseLost`. Nothing is
/// recreated.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_extension_of_a_hold_that_is_gone_is_refused() {
    let server = RedisServer::start();
    let client = client(&server, WATCHDOG).await;
    for kind in LOCK_KINDS {
        let name = format!("gone:{}", kind.replace(' ', "-"));
        let lock = owned_lock_of(&client, kind, &name, Some("o"));
        let mut guard = soon(lock.lock_with_lease(Duration::from_secs(30)))
            .await
            .unwrap();
        assert!(soon(lock.force_unlock()).await.unwrap(), "{kind}");
        let err = soon(guard.extend(Duration::from_secs(30)))
            .await
            .unwrap_err();
        assert!(matches!(err, Error::NotHeld { .. }), "{kind}: {err}");
        assert!(guard.is_lease_lost(), "{kind}");
        let err = soon(guard.extend(Duration::from_secs(30)))
            .await
            .unwrap_err();
        assert!(matches!(err, Error::LeaseLost { .. }), "{kind}: {err}");
        let err = soon(guard.keep_alive()).await.unwrap_err();
        assert!(matches!(err, Error::LeaseLost { .. }), "{kind}: {err}");
        assert_eq!(server.cmd(&["EXISTS", &name]).as_int(), Some(0), "{kind}");
        drop(guard);
    }
    settled(&client).await;
}

/// A watchdog-mode guard: `extend` is refused (the watchdog renews it),
/// `keep_alive` changes nothing; a bad lease is refused before anything is
/// sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watchdog_guards_and_bad_leases() {
    let server = RedisServer::start();
    let client = client(&server, WATCHDOG).await;
    let lock = client.lock("watched");
    let mut guard = soon(lock.lock()).await.unwrap();
    let err = soon(guard.extend(Duration::from_secs(5)))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(_)), "{err}");
    soon(guard.keep_alive()).await.unwrap();
    assert_eq!(guard.lease(), None);
    soon(guard.unlock()).await.unwrap();

    let mut leased = soon(lock.lock_with_lease(Duration::from_secs(5)))
        .await
        .unwrap();
    for bad in [Duration::ZERO, Duration::from_secs(u64::MAX / 4)] {
        let err = soon(leased.extend(bad)).await.unwrap_err();
        assert!(matches!(err, Error::InvalidArgument(_)), "{bad:?}: {err}");
    }
    assert_eq!(leased.lease(), Some(Duration::from_secs(5)));
    soon(leased.unlock()).await.unwrap();
    settled(&client).await;
}

/// A leased hold handed to the watchdog outlives its lease and a whole
/// watchdog timeout after the hand-over, renewed, and is released as any
/// watchdog hold.
///
/// The watchdog timeout is the test's own, and long: the client gives a
/// lease up once renewals have not got through for most of it, and a
/// machine with both cores busy has been seen to stall a process for more
/// than a second (the 1.2 s of the other tests here lost it then).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keep_alive_hands_a_leased_hold_to_the_watchdog() {
    const KEPT: Duration = Duration::from_secs(5);
    // A lost lease is told with its reason in the log.
    common::init_tracing();
    let server = RedisServer::start();
    let client = client(&server, KEPT).await;
    let kept = |kind: &'static str| {
        let (client, server) = (&client, &server);
        async move {
            let name = format!("kept:{kind}");
            let lock = owned_lock_of(client, kind, &name, Some("o"));
            let lease = Duration::from_millis(1500);
            let mut guard = soon(lock.lock_with_lease(lease)).await.unwrap();
            soon(guard.keep_alive()).await.unwrap();
            assert_eq!(guard.lease(), None, "{kind}");
            // Time is the subject: past the lease, and past the watchdog
            // TTL the hand-over set.
            tokio::time::sleep(lease + KEPT).await;
            assert!(!guard.is_lease_lost(), "{kind}");
            assert!(soon(lock.is_held_by("o")).await.unwrap(), "{kind}");
            soon(guard.unlock()).await.unwrap();
            assert_eq!(server.cmd(&["EXISTS", &name]).as_int(), Some(0), "{kind}");
        }
    };
    // Both kinds at once, each its own watchdog entry: both are counted
    // once handed over, before either is released.
    let counted = eventually(Duration::from_secs(10), || async {
        client.held_locks() == 2
    });
    tokio::join!(kept("reentrant"), kept("read"), counted);
    settled(&client).await;
}

/// A lease handle reads the hold's lease as its guard changes it: after
/// `extend` it counts the new lease, not running out with the first, and
/// a force-unlock after the extension is told at once (the listening
/// started under the first lease marks the new one lost); after
/// `keep_alive` it is renewed; once the hold is released it is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_handle_follows_extend_keep_alive_and_the_release() {
    let server = RedisServer::start();
    let holder = client(&server, WATCHDOG).await;
    let operator = client(&server, WATCHDOG).await;
    let lock = holder.lock("handle");
    // Long enough for the listening to start and `extend` to go through
    // on a busy machine.
    let first = Duration::from_secs(4);
    let mut guard = soon(lock.lock_with_lease(first)).await.unwrap();
    let lease = guard.lease_handle();
    assert!(!lease.is_lost() && !lease.is_renewed());
    assert!(lease.remaining() <= first);
    // Waiting under the first lease when the extension comes.
    let waiting = tokio::spawn({
        let lease = lease.clone();
        async move { lease.lost().await }
    });
    eventually(Duration::from_secs(10), || async {
        holder.subscriptions() == 1
    })
    .await;
    soon(guard.extend(Duration::from_secs(60))).await.unwrap();
    assert!(lease.remaining() > Duration::from_secs(30));
    // Time is the subject: past the first lease, the handle still holds.
    tokio::time::sleep(first + Duration::from_secs(1)).await;
    assert!(!lease.is_lost());
    assert!(!waiting.is_finished());
    // Told at once, not at the 60 s lease's end.
    assert!(soon(operator.lock("handle").force_unlock()).await.unwrap());
    within(Duration::from_secs(10), waiting).await.unwrap();
    assert!(lease.is_lost() && guard.is_lease_lost());
    assert_eq!(lease.remaining(), Duration::ZERO);
    assert!(soon(guard.unlock()).await.unwrap_err().is_lease_lost());

    let mut guard = soon(lock.lock_with_lease(first)).await.unwrap();
    let lease = guard.lease_handle();
    soon(guard.keep_alive()).await.unwrap();
    assert!(lease.is_renewed() && !lease.is_lost());
    let waiting = tokio::spawn({
        let lease = lease.clone();
        async move { lease.lost().await }
    });
    soon(guard.unlock()).await.unwrap();
    within(Duration::from_secs(10), waiting).await.unwrap();
    assert!(lease.is_lost());
    settled(&holder).await;
}
