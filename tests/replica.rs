//! Replica sync: WAIT after acquires and releases, against a real master
//! and replica (two `redis-server` processes per test).

use ferrisson_test_support as common;

use std::time::Duration;

use common::proxy::Proxy;
use common::{eventually, soon, RedisServer};
use ferrisson::config::{ReplicaSync, Replicas, Unsynced};
use ferrisson::Error;
use tokio::time::Instant;

fn stat(server: &RedisServer, command: &str, field: &str) -> u64 {
    let info = server.cmd(&["INFO", "commandstats"]).as_string().unwrap();
    let prefix = format!("cmdstat_{command}:");
    info.lines()
        .find_map(|line| line.strip_prefix(prefix.as_str()))
        .and_then(|rest| {
            rest.split(',')
                .find_map(|pair| pair.strip_prefix(&format!("{field}=")))
        })
        .map_or(0, |n| n.parse().unwrap())
}

/// A master and a replica in sync.
async fn pair() -> (RedisServer, RedisServer) {
    let master = RedisServer::start();
    let replica =
        RedisServer::start_with_args(&["--replicaof", "127.0.0.1", &master.port().to_string()]);
    eventually(Duration::from_secs(10), || async {
        let info = replica.cmd(&["INFO", "replication"]).as_string().unwrap();
        info.contains("master_link_status:up")
    })
    .await;
    // WAIT counts the replica once it acknowledges, not as soon as its
    // link is up.
    eventually(Duration::from_secs(10), || async {
        common::replicas_acknowledge(&master, 1)
    })
    .await;
    // The tests count commands from here on (the WAITs above excluded).
    master.cmd(&["CONFIG", "RESETSTAT"]);
    (master, replica)
}

/// The replica sync timeout of a client whose acquires must fall short: the
/// replica is frozen or gone, so no machine is too slow for it.
const SHORT: Duration = Duration::from_millis(500);

/// The replica sync timeout of a client whose writes the replica must
/// acknowledge: generous, so that a replica descheduled or paged out for a
/// moment on a busy machine does not fail the test. (A 500 ms timeout made
/// `acquire()` fail with `NotReplicated` there.)
const GENEROUS: Duration = Duration::from_secs(10);

/// The response timeout of a client waiting for replicas `timeout` at
/// most: WAIT's reply must arrive within it.
fn response_for(timeout: Duration) -> Duration {
    timeout + Duration::from_secs(5)
}

/// A client waiting for one replica, `timeout` at most.
async fn synced_client(
    master: &RedisServer,
    on_unsynced: Unsynced,
    timeout: Duration,
) -> ferrisson::Client {
    ferrisson::Client::builder(master.url())
        .replica_sync(1, timeout, on_unsynced)
        .response_timeout(response_for(timeout))
        .build()
        .await
        .unwrap()
}

/// A frozen replica (it acknowledges nothing until the test thaws it, or
/// this is dropped).
struct Frozen<'a>(&'a RedisServer);

impl<'a> Frozen<'a> {
    fn new(replica: &'a RedisServer) -> Frozen<'a> {
        replica.freeze();
        Frozen(replica)
    }
}

impl Drop for Frozen<'_> {
    fn drop(&mut self) {
        self.0.thaw();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquires_and_releases_wait_for_the_replica() {
    let (master, replica) = pair().await;
    let client = synced_client(&master, Unsynced::Fail, GENEROUS).await;
    let guard = soon(client.lock("synced").lock()).await.unwrap();
    assert_eq!(stat(&master, "wait", "calls"), 1);
    // When lock() returns, the replica has the hold.
    assert_eq!(replica.cmd(&["EXISTS", "synced"]).as_int(), Some(1));
    soon(guard.unlock()).await.unwrap();
    assert_eq!(stat(&master, "wait", "calls"), 2);
    assert_eq!(replica.cmd(&["EXISTS", "synced"]).as_int(), Some(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unacknowledged_acquire_is_given_back_and_fails() {
    let (master, replica) = pair().await;
    let client = synced_client(&master, Unsynced::Fail, SHORT).await;
    // Make sure the script is loaded before the freeze (by a client that
    // waits for the replica as long as it takes).
    let warming = synced_client(&master, Unsynced::Fail, GENEROUS).await;
    let warm = soon(warming.lock("warm").lock()).await.unwrap();
    soon(warm.unlock()).await.unwrap();

    let frozen = Frozen::new(&replica);
    let err = soon(client.lock("unsynced").lock()).await.unwrap_err();
    assert!(
        matches!(
            err,
            Error::NotReplicated {
                acked: 0,
                wanted: 1,
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(
        master.cmd(&["EXISTS", "unsynced"]).as_int(),
        Some(0),
        "not given back"
    );
    assert_eq!(client.held_locks(), 0);
    drop(frozen);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unacknowledged_acquire_is_retried_within_the_wait() {
    let (master, replica) = pair().await;
    let client = synced_client(&master, Unsynced::Retry, SHORT).await;
    let warming = synced_client(&master, Unsynced::Fail, GENEROUS).await;
    let warm = soon(warming.lock("warm").lock()).await.unwrap();
    soon(warm.unlock()).await.unwrap();

    let frozen = Frozen::new(&replica);
    // One attempt (the acquire's WAIT, then the give-back's): given back,
    // no lock.
    assert!(soon(client.lock("retried").try_lock())
        .await
        .unwrap()
        .is_none());
    assert_eq!(master.cmd(&["EXISTS", "retried"]).as_int(), Some(0));
    // With a wait: held once the replica acknowledges again, not before.
    let waits = stat(&master, "wait", "calls");
    let waiter = {
        let lock = client.lock("retried");
        tokio::spawn(async move {
            let guard = lock.try_lock_for(Duration::from_secs(60)).await;
            (Instant::now(), guard)
        })
    };
    // Its first attempt's WAIT fell short: it is trying again.
    eventually(Duration::from_secs(20), || async {
        stat(&master, "wait", "calls") > waits
    })
    .await;
    let thawed = Instant::now();
    drop(frozen);
    let (got, guard) = soon(waiter).await.unwrap();
    let guard = guard.unwrap().expect("held after the replica came back");
    assert!(got > thawed, "held before the replica could acknowledge");
    assert_eq!(replica.cmd(&["EXISTS", "retried"]).as_int(), Some(1));
    soon(guard.unlock()).await.unwrap();
}

/// What names the acquire script's call on `name` (its latch key): no
/// other command before that call's sync does (the latches of earlier
/// calls, deleted in the background, name other synchronizers).
fn acquire_of(name: &str) -> String {
    format!("ferrisson_acquire_latch:{{{name}}}")
}

/// A client through `proxy` waiting for one replica, `timeout` at most,
/// failing an acquire too few acknowledged.
async fn proxied_synced_client(proxy: &Proxy, sync: ReplicaSync) -> ferrisson::Client {
    soon(
        ferrisson::Client::builder(proxy.url())
            .replica_sync_with(Some(sync))
            .response_timeout(response_for(sync.timeout))
            .build(),
    )
    .await
    .unwrap()
}

/// Takes and gives back `name` as a lock, a semaphore and a
/// permit-expirable semaphore (two permits each) by a client that waits
/// for the replica as long as it takes: the scripts loaded and the
/// semaphores set before a freeze.
async fn warm_up(master: &RedisServer, name: &str) {
    let warming = synced_client(master, Unsynced::Fail, GENEROUS).await;
    common::take_and_give_back_each(&warming, name, false, 2).await;
}

/// Asserts `what` failed as unacknowledged by the replica.
fn assert_not_replicated<T>(what: &str, result: ferrisson::Result<T>) {
    match result {
        Err(Error::NotReplicated { acked: 0, .. }) => {}
        Err(err) => panic!("{what}: {err}"),
        Ok(_) => panic!("{what}: reported synced, but the replica never got the grant"),
    }
}

/// Asserts that nothing of the three grants on `name` stands on the
/// master (each was given back).
async fn assert_given_back(master: &RedisServer, name: &str) {
    let (sem, seats) = (format!("{name}:sem"), format!("{name}:seats"));
    let zset = format!("{{{name}:seats}}:timeout");
    eventually(Duration::from_secs(20), || async {
        master.cmd(&["EXISTS", name]).as_int() == Some(0)
            && master.cmd(&["GET", &sem]).as_string().as_deref() == Some("2")
            && master.cmd(&["GET", &seats]).as_string().as_deref() == Some("2")
            && master.cmd(&["ZCARD", &zset]).as_int() == Some(0)
    })
    .await;
}

/// WAIT counts the writes of the connection it is sent on, and a fresh
/// connection has none: there, with the replica frozen (connected, acking
/// nothing), `WAIT 1` answers 1 at once. An acquire whose reply is lost
/// is resent on a new connection and answered from its latch, which
/// writes nothing there: the sync must still cover the grant, which the
/// frozen replica never got. (Before, the resend's WAIT on the new
/// connection answered 1 at once, and the acquire said synced.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_replayed_on_a_new_connection_is_synced_or_given_back() {
    // Its warnings (a failed sync, give-back or resend) print should it fail.
    common::init_tracing();
    let (master, replica) = pair().await;
    warm_up(&master, "replayed").await;
    let proxy = Proxy::start(master.port());
    let sync = ReplicaSync {
        timeout: SHORT,
        on_unsynced: Unsynced::Fail,
        ..ReplicaSync::REDISSON
    };
    for sync in [
        sync,
        ReplicaSync {
            replicas: Replicas::AtLeast(1),
            ..sync
        },
    ] {
        let client = proxied_synced_client(&proxy, sync).await;
        let frozen = Frozen::new(&replica);
        let lost = proxy.lost_replies();
        proxy.lose_next_reply_to(&acquire_of("replayed"));
        let held = soon(client.lock("replayed").lock()).await;
        assert_eq!(proxy.lost_replies(), lost + 1, "no reply was lost");
        assert_not_replicated("lock", held);
        proxy.lose_next_reply_to(&acquire_of("replayed:sem"));
        let sem = client.semaphore("replayed:sem");
        assert_not_replicated("semaphore", soon(sem.acquire()).await);
        assert_eq!(proxy.lost_replies(), lost + 2, "no reply was lost");
        proxy.lose_next_reply_to(&acquire_of("replayed:seats"));
        let seats = client.permit_expirable_semaphore("replayed:seats");
        assert_not_replicated("permit", soon(seats.acquire()).await);
        assert_eq!(proxy.lost_replies(), lost + 3, "no reply was lost");
        assert_given_back(&master, "replayed").await;
        drop(frozen);
    }
}

/// The connection that carried a grant breaks as soon as its reply is in,
/// before the sync: whether the sync then fails or goes on a new
/// connection, a grant the frozen replica never got is not called synced.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_whose_connection_breaks_before_the_sync_is_not_called_synced() {
    let (master, replica) = pair().await;
    warm_up(&master, "cut").await;
    let proxy = Proxy::start(master.port());
    let sync = ReplicaSync {
        replicas: Replicas::AtLeast(1),
        timeout: SHORT,
        on_unsynced: Unsynced::Fail,
    };
    let client = proxied_synced_client(&proxy, sync).await;
    let frozen = Frozen::new(&replica);
    proxy.cut_after_reply_to(&acquire_of("cut"));
    assert_not_replicated("lock", soon(client.lock("cut").lock()).await);
    proxy.cut_after_reply_to(&acquire_of("cut:sem"));
    let sem = client.semaphore("cut:sem");
    assert_not_replicated("semaphore", soon(sem.acquire()).await);
    proxy.cut_after_reply_to(&acquire_of("cut:seats"));
    let seats = client.permit_expirable_semaphore("cut:seats");
    assert_not_replicated("permit", soon(seats.acquire()).await);
    assert_given_back(&master, "cut").await;
    drop(frozen);
}

/// A failover between the grant and the sync, to a master that never got
/// the grant and has no replica online (Redisson's setting then waits for
/// none): the sync finds the grant missing there, and the acquire is not
/// called synced. The client is behind one address, which sends the
/// connections opened after the grant's to the new master; the grant's
/// connection breaks once its reply is in. Whether the client's next
/// command goes out on that broken connection (and fails) or on a new one
/// is a race: the rounds make the new one all but certain to come up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_missing_on_a_new_master_without_replicas_is_not_called_synced() {
    const ROUNDS: usize = 6;
    let (master, replica) = pair().await;
    warm_up(&master, "moved").await;
    let promoted = RedisServer::start();
    let proxy = Proxy::start(master.port());
    let sync = ReplicaSync {
        timeout: SHORT,
        on_unsynced: Unsynced::Fail,
        ..ReplicaSync::REDISSON
    };
    // The replica gets none of the grants.
    let frozen = Frozen::new(&replica);
    for round in 0..ROUNDS {
        // A new client, on the old master: it counts the replicas after
        // its first grant, on whatever master answers then.
        proxy.retarget(master.port());
        let client = proxied_synced_client(&proxy, sync).await;
        proxy.retarget(promoted.port());
        let name = format!("moved:{round}");
        proxy.cut_after_reply_to(&acquire_of(&name));
        assert_not_replicated("lock", soon(client.lock(&name).lock()).await);
        assert_eq!(master.cmd(&["EXISTS", &name]).as_int(), Some(1));
        assert_eq!(promoted.cmd(&["EXISTS", &name]).as_int(), Some(0));
    }
    drop(frozen);
}

/// A server that refuses WAIT (here: an ACL user without it) gets one
/// refused WAIT, a warning, and locking goes on without sync.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_refuses_wait_degrades_to_no_sync() {
    let (master, _replica) = pair().await;
    master.cmd(&[
        "ACL", "SETUSER", "nowait", "on", ">pw", "~*", "&*", "+@all", "-wait",
    ]);
    let url = format!("redis://nowait:pw@127.0.0.1:{}/", master.port());
    let client = ferrisson::Client::builder(url)
        .replica_sync(1, SHORT, Unsynced::Fail)
        .build()
        .await
        .unwrap();
    for _ in 0..5 {
        let guard = soon(client.lock("degraded").lock()).await.unwrap();
        soon(guard.unlock()).await.unwrap();
    }
    let refused = stat(&master, "wait", "rejected_calls") + stat(&master, "wait", "calls");
    assert_eq!(refused, 1, "WAIT was sent more than once");
}

/// Replica sync covers the semaphores: an acquire or release returns once
/// the replica has it (one WAIT each).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn semaphore_acquires_and_releases_wait_for_the_replica() {
    let (master, replica) = pair().await;
    let client = synced_client(&master, Unsynced::Fail, GENEROUS).await;
    let sem = client.semaphore("sem");
    assert!(soon(sem.try_set_permits(2)).await.unwrap());
    let waits = stat(&master, "wait", "calls");
    soon(sem.acquire()).await.unwrap();
    assert_eq!(stat(&master, "wait", "calls"), waits + 1);
    assert_eq!(
        replica.cmd(&["GET", "sem"]).as_string().as_deref(),
        Some("1")
    );
    soon(sem.release()).await.unwrap();
    assert_eq!(stat(&master, "wait", "calls"), waits + 2);
    assert_eq!(
        replica.cmd(&["GET", "sem"]).as_string().as_deref(),
        Some("2")
    );

    let seats = client.permit_expirable_semaphore("seats");
    assert!(soon(seats.try_set_permits(1)).await.unwrap());
    let waits = stat(&master, "wait", "calls");
    let permit = soon(seats.acquire()).await.unwrap();
    assert_eq!(stat(&master, "wait", "calls"), waits + 1);
    assert_eq!(replica.cmd(&["ZCARD", "{seats}:timeout"]).as_int(), Some(1));
    soon(permit.release()).await.unwrap();
    assert_eq!(stat(&master, "wait", "calls"), waits + 2);
    assert_eq!(replica.cmd(&["ZCARD", "{seats}:timeout"]).as_int(), Some(0));
}

/// A semaphore acquire the replica did not acknowledge is given back and
/// fails, as a lock's does: the master's count is whole again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unacknowledged_semaphore_acquire_is_given_back_and_fails() {
    let (master, replica) = pair().await;
    let client = synced_client(&master, Unsynced::Fail, SHORT).await;
    let sem = client.semaphore("sem");
    let seats = client.permit_expirable_semaphore("seats");
    // The semaphores set and the scripts loaded before the freeze (by a
    // client that waits for the replica as long as it takes).
    let warming = synced_client(&master, Unsynced::Fail, GENEROUS).await;
    let (warm_sem, warm_seats) = (
        warming.semaphore("sem"),
        warming.permit_expirable_semaphore("seats"),
    );
    assert!(soon(warm_sem.try_set_permits(2)).await.unwrap());
    assert!(soon(warm_seats.try_set_permits(2)).await.unwrap());
    assert!(soon(warm_sem.try_acquire()).await.unwrap());
    soon(warm_sem.release()).await.unwrap();
    soon(soon(warm_seats.acquire()).await.unwrap().release())
        .await
        .unwrap();

    let frozen = Frozen::new(&replica);
    let err = soon(sem.acquire()).await.unwrap_err();
    assert!(
        matches!(err, Error::NotReplicated { acked: 0, .. }),
        "{err}"
    );
    assert_eq!(
        master.cmd(&["GET", "sem"]).as_string().as_deref(),
        Some("2")
    );
    let err = soon(seats.acquire()).await.map(drop).unwrap_err();
    assert!(
        matches!(err, Error::NotReplicated { acked: 0, .. }),
        "{err}"
    );
    assert_eq!(master.cmd(&["ZCARD", "{seats}:timeout"]).as_int(), Some(0));
    assert_eq!(
        master.cmd(&["GET", "seats"]).as_string().as_deref(),
        Some("2")
    );
    drop(frozen);
}

/// One server's builder waits for no replica unless asked, even when the
/// server has one (Sentinel and Cluster builders wait by default: see
/// `tests/sentinel.rs` and `tests/cluster.rs`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_server_waits_for_no_replica_unless_asked() {
    let (master, _replica) = pair().await;
    let client = ferrisson::Client::connect(master.url()).await.unwrap();
    let guard = soon(client.lock("plain").lock()).await.unwrap();
    soon(guard.unlock()).await.unwrap();
    assert_eq!(stat(&master, "wait", "calls"), 0);
    assert_eq!(stat(&master, "role", "calls"), 0);
}

/// Redisson's setting, asked of one server's builder: every replica the
/// master reports online is waited for (one ROLE, then one WAIT a write);
/// once the replica is gone, a shortfall makes the client count again, and
/// the acquire goes through without waiting for a replica that is not
/// there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn online_replicas_are_counted_and_counted_again_when_one_goes() {
    let (master, mut replica) = pair().await;
    // Redisson's setting; the replica acknowledges every write, in a
    // generous time (a slow acknowledgement would be retried, and counted).
    let redisson = |timeout| ReplicaSync {
        timeout,
        ..ReplicaSync::REDISSON
    };
    let client = ferrisson::Client::builder(master.url())
        .replica_sync_with(Some(redisson(GENEROUS)))
        .response_timeout(response_for(GENEROUS))
        .build()
        .await
        .unwrap();
    let started = Instant::now();
    for _ in 0..10 {
        let guard = soon(client.lock("online").lock()).await.unwrap();
        assert_eq!(replica.cmd(&["EXISTS", "online"]).as_int(), Some(1));
        soon(guard.unlock()).await.unwrap();
    }
    assert_eq!(stat(&master, "wait", "calls"), 20);
    // Counted at most once a second.
    let roles = stat(&master, "role", "calls");
    assert!(
        roles >= 1 && roles <= 1 + started.elapsed().as_secs(),
        "{roles} ROLEs in {:?}",
        started.elapsed()
    );

    // A replica that is online but answers nothing: the acquire is given
    // back and, without a wait, not tried again. (A client whose WAITs
    // must fall short waits a short time.)
    let client = ferrisson::Client::builder(master.url())
        .replica_sync_with(Some(redisson(SHORT)))
        .build()
        .await
        .unwrap();
    let frozen = Frozen::new(&replica);
    let none = soon(client.lock("online").try_lock()).await;
    drop(frozen);
    assert!(none.unwrap().is_none(), "held without the replica");
    assert_eq!(master.cmd(&["EXISTS", "online"]).as_int(), Some(0));

    replica.stop();
    eventually(Duration::from_secs(10), || async {
        !master
            .cmd(&["INFO", "replication"])
            .as_string()
            .unwrap()
            .contains("connected_slaves:1")
    })
    .await;
    // The count may still say one replica: that WAIT falls short, the hold
    // is given back, the replicas are counted again (none), and the retry
    // holds it without waiting. (Or the count is a second old: counted
    // again first.)
    let roles = stat(&master, "role", "calls");
    let guard = soon(client.lock("online").lock()).await.unwrap();
    let waits = stat(&master, "wait", "calls");
    soon(guard.unlock()).await.unwrap();
    assert_eq!(
        stat(&master, "wait", "calls"),
        waits,
        "a master without replicas is not waited on"
    );
    assert!(stat(&master, "role", "calls") > roles);
}

/// A count of no replica online is not kept for a grant: each grant on a
/// master without replicas looks for its latch and counts the replicas
/// again (in one round trip, as a grant's `WAIT` does), so that a replica
/// that came online within the second the count is kept for is waited
/// for, and a grant a failover lost is not called synced (the model's
/// `TrustsCachedZero`: two holders). Releases keep the count.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_count_of_no_online_replica_is_not_kept_for_a_grant() {
    let master = RedisServer::start();
    let client = ferrisson::Client::builder(master.url())
        .replica_sync_with(Some(ReplicaSync {
            timeout: SHORT,
            ..ReplicaSync::REDISSON
        }))
        .build()
        .await
        .unwrap();
    master.cmd(&["CONFIG", "RESETSTAT"]);
    for _ in 0..3 {
        let guard = soon(client.lock("alone").lock()).await.unwrap();
        soon(guard.unlock()).await.unwrap();
    }
    assert!(
        stat(&master, "role", "calls") >= 3,
        "{} ROLEs for 3 grants",
        stat(&master, "role", "calls")
    );
    assert_eq!(stat(&master, "wait", "calls"), 0, "no replica is waited on");
}

/// A script's write on a replica (a master demoted by a failover, not yet
/// known as such) is refused with READONLY on every server: what Sentinel
/// following and waiting out a failover go by. Redis 6 wraps a script's
/// error in `ERR Error running script`, where READONLY was not seen.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_on_a_replica_is_readonly_on_every_server() {
    let (_master, replica) = pair().await;
    let client = soon(ferrisson::Client::connect(replica.url()))
        .await
        .unwrap();
    let err = soon(client.lock("demoted").try_lock()).await.unwrap_err();
    match &err {
        Error::Redis(redis) => assert_eq!(redis.code(), Some("READONLY"), "{err}"),
        other => panic!("{other}"),
    }
    let sem = client.semaphore("demoted:sem");
    let err = soon(sem.try_set_permits(1)).await.unwrap_err();
    match &err {
        Error::Redis(redis) => assert_eq!(redis.code(), Some("READONLY"), "{err}"),
        other => panic!("{other}"),
    }
}
