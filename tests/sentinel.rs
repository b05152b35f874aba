//! Redis Sentinel: a master, a replica and a sentinel, spawned by the test;
//! the client follows the master through a failover. Runs with
//! `--features sentinel` (README's test command uses `--all-features`).
#![cfg(feature = "sentinel")]

use ferrisson_test_support as common;

use std::time::Duration;

use common::sentinel::{Sentinel, SENTINEL_ACTS};
use common::{eventually, soon, within, RedisServer};
use tokio::time::Instant;

/// A master, its replica (in sync) and a sentinel that knows the replica
/// and is connected to it, so that it can promote it.
async fn master_replica_sentinel() -> (RedisServer, RedisServer, Sentinel) {
    let master = RedisServer::start();
    let replica =
        RedisServer::start_with_args(&["--replicaof", "127.0.0.1", &master.port().to_string()]);
    eventually(Duration::from_secs(10), || async {
        let info = replica.try_cmd(&["INFO", "replication"]).ok();
        info.and_then(|i| i.as_string())
            .is_some_and(|i| i.contains("master_link_status:up"))
    })
    .await;
    let sentinel = Sentinel::start(&master);
    // The sentinel must know the replica, and be connected to it, to
    // promote it.
    eventually(Duration::from_secs(20), || async {
        let replicas = sentinel.cli(&["SENTINEL", "REPLICAS", "mymaster"]);
        replicas.contains(&replica.port().to_string()) && !replicas.contains("disconnected")
    })
    .await;
    (master, replica, sentinel)
}

/// Has the sentinel promote `replica`, and waits until it names it.
async fn fail_over(sentinel: &Sentinel, replica: &RedisServer) {
    // The replica may need a moment more to count as promotable.
    eventually(SENTINEL_ACTS, || async {
        sentinel
            .cli(&["SENTINEL", "FAILOVER", "mymaster"])
            .starts_with("OK")
    })
    .await;
    eventually(SENTINEL_ACTS, || async {
        sentinel.master_port() == Some(replica.port())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_client_follows_the_master_through_a_failover() {
    common::init_tracing();
    let (master, replica, sentinel) = master_replica_sentinel().await;

    // A lease longer than the failover's gap, in which renewals still go
    // to the old master and are not replicated: the new master's copy must
    // outlive it (without replica sync a shorter lease can be lost there,
    // and is then reported lost at the first renewal on the new master).
    let watchdog = Duration::from_secs(10);
    let connect = || {
        ferrisson::Client::sentinel_builder([sentinel.url()], "mymaster")
            .watchdog_timeout(watchdog)
            .build()
    };
    let a = soon(connect()).await.unwrap();
    let b = soon(connect()).await.unwrap();
    let guard = soon(a.lock("followed").lock()).await.unwrap();
    // Replica sync is on by default behind Sentinel: the acquire waited for
    // the master's replica, which has the hold.
    assert!(master
        .cmd(&["INFO", "commandstats"])
        .as_string()
        .unwrap()
        .contains("cmdstat_wait:calls="));
    assert_eq!(replica.cmd(&["EXISTS", "followed"]).as_int(), Some(1));
    let lock = b.lock("followed");
    let waiting = tokio::spawn(async move { lock.lock().await.unwrap() });
    eventually(Duration::from_secs(5), || async { b.subscriptions() == 1 }).await;
    eventually(Duration::from_secs(5), || async {
        replica
            .try_cmd(&["EXISTS", "followed"])
            .ok()
            .and_then(|v| v.as_int())
            == Some(1)
    })
    .await;

    fail_over(&sentinel, &replica).await;
    // Once the old master is demoted, the client finds the new one by
    // itself: a new lock lands there.
    eventually(SENTINEL_ACTS, || async {
        master.role().as_deref() == Some("slave")
    })
    .await;
    let fresh = soon(a.lock("after").lock()).await.unwrap();
    assert_eq!(replica.cmd(&["EXISTS", "after"]).as_int(), Some(1));
    soon(fresh.unlock()).await.unwrap();

    // The held lock: replication is asynchronous, so it may be kept or lost
    // in the failover (renewals that reached the old master after the
    // promotion were never replicated). What must hold: the client's view
    // agrees with the new master's, by the next renewal at the latest.
    let owner = guard.field().to_owned();
    eventually(Duration::from_secs(20), || async {
        match replica.try_cmd(&["HEXISTS", "followed", &owner]) {
            Ok(reply) => (reply.as_int() == Some(1)) != guard.is_lease_lost(),
            Err(_) => false,
        }
    })
    .await;
    let kept = !guard.is_lease_lost();
    println!(
        "the lock was {} in the failover",
        if kept {
            "kept"
        } else {
            "lost, and reported lost"
        }
    );
    let released = Instant::now();
    match guard.unlock().await {
        Ok(()) => assert!(kept),
        Err(err) => assert!(!kept && err.is_lease_lost(), "{err}"),
    }
    let next = within(Duration::from_secs(20), waiting).await.unwrap();
    println!(
        "the waiter got it {:?} after the release",
        released.elapsed()
    );
    if kept {
        // By the message (on the new master): the TTL (10 s) is far longer.
        assert!(
            released.elapsed() < Duration::from_secs(2),
            "{:?}",
            released.elapsed()
        );
    }
    soon(next.unlock()).await.unwrap();
}

/// A master with a password: the client authenticates every connection to
/// it (commands and subscriptions); a wrong password is a clear error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_masters_password_is_used_for_every_connection() {
    let master = RedisServer::start_with_args(&["--requirepass", "m4ster-pw"]);
    let sentinel = Sentinel::start_with(&master, "sentinel auth-pass mymaster m4ster-pw");
    let connect = |password: &'static str| {
        ferrisson::Client::sentinel_builder([sentinel.url()], "mymaster")
            .sentinel_master_auth(None, password)
            .build()
    };
    let a = soon(connect("m4ster-pw")).await.unwrap();
    let b = soon(connect("m4ster-pw")).await.unwrap();
    let guard = soon(a.lock("guarded").lock()).await.unwrap();
    let lock = b.lock("guarded");
    let waiting = tokio::spawn(async move { lock.lock().await.unwrap() });
    eventually(Duration::from_secs(5), || async { b.subscriptions() == 1 }).await;
    let released = Instant::now();
    soon(guard.unlock()).await.unwrap();
    let next = within(Duration::from_secs(10), waiting).await.unwrap();
    // Woken by the message on the authenticated subscription connection.
    assert!(released.elapsed() < Duration::from_secs(5));
    soon(next.unlock()).await.unwrap();
    assert!(!format!("{a:?}").contains("m4ster-pw"));

    let err = soon(connect("not-the-pw")).await.unwrap_err();
    assert!(!err.to_string().contains("not-the-pw"), "{err}");
}

/// A leader election through a failover, with replica sync (on by default
/// behind Sentinel): a campaign returns once the replica has the grant and
/// its term, so the promoted replica's counter is at least the leader's
/// term, and the next leader's term is higher. The leadership itself may
/// be kept or lost in the failover (renewals are not waited on); what
/// must hold is that the leader's view agrees with the new master's, and
/// an observer follows to the new master.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_election_keeps_its_terms_rising_through_a_failover() {
    let (master, replica, sentinel) = master_replica_sentinel().await;
    let connect = || {
        ferrisson::Client::sentinel_builder([sentinel.url()], "mymaster")
            .watchdog_timeout(Duration::from_secs(10))
            .build()
    };
    let a = soon(connect()).await.unwrap();
    let b = soon(connect()).await.unwrap();
    let watcher = soon(connect()).await.unwrap();
    let mut observer = watcher.leader_election("elected").observe();
    assert_eq!(
        soon(observer.next()).await.unwrap().unwrap(),
        ferrisson::LeaderChange::NoLeader
    );
    let leadership = soon(a.leader_election("elected").campaign("a"))
        .await
        .unwrap();
    let term = leadership.term();
    // Synced: the replica has the counter at the leader's term already.
    assert_eq!(
        replica
            .cmd(&["GET", "redisson_lock_token:{elected}"])
            .as_string(),
        Some(term.to_string())
    );
    match within(Duration::from_secs(20), observer.next())
        .await
        .unwrap()
        .unwrap()
    {
        ferrisson::LeaderChange::Leader(leader) => assert_eq!(leader.term, Some(term)),
        other => panic!("{other:?}"),
    }

    fail_over(&sentinel, &replica).await;
    eventually(SENTINEL_ACTS, || async {
        master.role().as_deref() == Some("slave")
    })
    .await;

    // The leader's view agrees with the new master's by the next renewal:
    // wait for one there (the key's TTL rises) or for the loss.
    let before = replica
        .try_cmd(&["PTTL", "elected"])
        .ok()
        .and_then(|t| t.as_int())
        .unwrap_or(-2);
    eventually(Duration::from_secs(30), || async {
        let now = replica
            .try_cmd(&["PTTL", "elected"])
            .ok()
            .and_then(|t| t.as_int())
            .unwrap_or(-2);
        now > before || leadership.is_lost()
    })
    .await;
    eventually(Duration::from_secs(20), || async {
        match replica.try_cmd(&["EXISTS", "elected"]) {
            Ok(reply) => (reply.as_int() == Some(1)) != leadership.is_lost(),
            Err(_) => false,
        }
    })
    .await;
    let kept = !leadership.is_lost();
    println!(
        "the leadership was {} in the failover",
        if kept {
            "kept"
        } else {
            "lost, and reported lost"
        }
    );
    match leadership.resign().await {
        Ok(()) => assert!(kept),
        Err(err) => assert!(!kept && err.is_lease_lost(), "{err}"),
    }
    let next = within(
        Duration::from_secs(20),
        b.leader_election("elected").campaign("b"),
    )
    .await
    .unwrap();
    assert!(next.term() > term, "{} after {term}", next.term());
    // The observer, on the new master, reports the new leader.
    let seen = within(Duration::from_secs(30), async {
        loop {
            match observer.next().await.unwrap().unwrap() {
                ferrisson::LeaderChange::Leader(leader) if leader.term == Some(next.term()) => {
                    break leader
                }
                _ => {}
            }
        }
    })
    .await;
    assert_eq!(seen.label.as_deref(), Some("b"));
    soon(next.resign()).await.unwrap();
}
