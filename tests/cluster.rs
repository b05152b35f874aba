//! Redis Cluster: three masters spawned by the test with `redis-server`
//! and joined with `redis-cli --cluster create`. Runs with `--features
//! cluster` (README's test command uses `--all-features`).
#![cfg(feature = "cluster")]

use ferrisson_test_support as common;

use std::time::Duration;

use common::cluster::{
    blocked_clients, cluster, cluster_with_password, cluster_with_replicas, join_empty_master,
    keyslot, listeners, master_and_replica, move_slot, owner, serves, sharded_pubsub, wait_calls,
    WATCHDOG,
};
use common::{eventually, soon, within, RedisServer};
use ferrisson::config::PubSubMode;
use tokio::time::Instant;

/// A client of the cluster `nodes`, with a short watchdog timeout. Here,
/// not in the test support: `Client::cluster_builder` is there only with
/// the library's `cluster` feature, which this test requires and the test
/// support never turns on.
async fn client(nodes: &[RedisServer]) -> ferrisson::Client {
    ferrisson::Client::cluster_builder(nodes.iter().map(RedisServer::url))
        .watchdog_timeout(WATCHDOG)
        .build()
        .await
        .unwrap()
}

/// The pub/sub mode a cluster client takes by default on the servers under
/// test.
fn default_mode() -> PubSubMode {
    if sharded_pubsub() {
        PubSubMode::Sharded
    } else {
        PubSubMode::Classic
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locks_on_every_node_reenter_renew_and_release() {
    let nodes = cluster().await;
    let client = client(&nodes).await;
    assert_eq!(client.config().pubsub_mode, default_mode());
    let mut guards = Vec::new();
    for i in 0..60 {
        let lock = client.lock(format!("spread:{i}"));
        guards.push(soon(lock.lock()).await.unwrap());
        guards.push(soon(lock.lock()).await.unwrap());
        assert_eq!(soon(lock.hold_count()).await.unwrap(), 2);
    }
    for node in &nodes {
        assert!(
            node.cmd(&["DBSIZE"]).as_int().unwrap() > 0,
            "a node holds no lock"
        );
    }
    // Three watchdog timeouts: renewals, grouped by slot, keep all of them.
    tokio::time::sleep(WATCHDOG * 3).await;
    assert!(guards.iter().all(|g| !g.is_lease_lost()));
    assert_eq!(client.held_locks(), 60);
    for guard in guards {
        soon(guard.unlock()).await.unwrap();
    }
    assert_eq!(client.held_locks(), 0);
    for node in &nodes {
        eventually(Duration::from_secs(5), || async {
            node.cmd(&["DBSIZE"]).as_int() == Some(0)
        })
        .await;
        // Replica sync is on by default, and masters without replicas are
        // not waited on.
        assert_eq!(wait_calls(node), 0);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_are_woken_by_sharded_messages() {
    let nodes = cluster().await;
    // The holder's TTL (its 30 s watchdog) is not what wakes the waiter.
    let a = ferrisson::Client::cluster_builder(nodes.iter().map(RedisServer::url))
        .watchdog_timeout(Duration::from_secs(30))
        .build()
        .await
        .unwrap();
    let b = client(&nodes).await;
    for name in ["wake:1", "wake:2", "wake:3", "{wake}:4"] {
        let guard = soon(a.lock(name).lock()).await.unwrap();
        let lock = b.lock(name);
        let waiting = tokio::spawn(async move { lock.lock().await.unwrap() });
        tokio::time::sleep(Duration::from_millis(50)).await;
        let released = Instant::now();
        soon(guard.unlock()).await.unwrap();
        let next = within(Duration::from_secs(10), waiting).await.unwrap();
        // The message, not the TTL (30 s), woke it.
        assert!(
            released.elapsed() < Duration::from_secs(3),
            "{name}: {:?}",
            released.elapsed()
        );
        // force_unlock wakes the next waiter too.
        let lock = a.lock(name);
        let waiting = tokio::spawn(async move { lock.lock().await.unwrap() });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(soon(b.lock(name).force_unlock()).await.unwrap());
        let last = within(Duration::from_secs(10), waiting).await.unwrap();
        next.leak();
        soon(last.unlock()).await.unwrap();
    }
}

/// Classic pub/sub forced on a cluster that has sharded (to match Java
/// clients whose sharded mode is off): unlock messages go out by PUBLISH,
/// which a plain SUBSCRIBE on any node hears, and classic waiters are woken
/// by them, not by the holder's TTL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forced_classic_mode_wakes_classic_waiters() {
    let nodes = cluster().await;
    let classic = || {
        ferrisson::Client::cluster_builder(nodes.iter().map(RedisServer::url))
            .watchdog_timeout(Duration::from_secs(30))
            .pubsub_mode(PubSubMode::Classic)
            .build()
    };
    let (a, b) = (
        soon(classic()).await.unwrap(),
        soon(classic()).await.unwrap(),
    );
    assert_eq!(a.config().pubsub_mode, PubSubMode::Classic);
    for name in ["classic:1", "classic:2", "{classic}:3"] {
        let channel = match name {
            "{classic}:3" => "redisson_lock__channel:{classic}:3".to_owned(),
            _ => format!("redisson_lock__channel:{{{name}}}"),
        };
        let guard = soon(a.lock(name).lock()).await.unwrap();
        let lock = b.lock(name);
        let waiting = tokio::spawn(async move { lock.lock().await.unwrap() });
        eventually(Duration::from_secs(10), || async {
            nodes
                .iter()
                .map(|node| common::subscribers(node, &channel))
                .sum::<i64>()
                == 1
        })
        .await;
        let listener = common::RawSubscriber::new(&nodes[0], &channel);
        let released = Instant::now();
        soon(guard.unlock()).await.unwrap();
        let next = within(Duration::from_secs(10), waiting).await.unwrap();
        assert!(
            released.elapsed() < Duration::from_secs(3),
            "{name}: {:?}",
            released.elapsed()
        );
        assert_eq!(
            common::next_message(listener).await,
            Some((channel.clone(), "0".to_owned())),
            "{name}"
        );
        soon(next.unlock()).await.unwrap();
    }
}

/// Every key and channel of a lock lives in its name's slot, and the whole
/// family runs on the cluster.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_key_of_a_lock_is_in_its_names_slot() {
    let nodes = cluster().await;
    let client = client(&nodes).await;
    let node = &nodes[0];
    let name = "family";
    let slot = keyslot(node, name);
    let fenced = soon(client.fenced_lock(name).lock()).await.unwrap();
    assert!(fenced.token() > 0);
    soon(fenced.unlock()).await.unwrap();
    let fair = soon(client.fair_lock(name).lock()).await.unwrap();
    soon(fair.unlock()).await.unwrap();
    let rw = client.read_write_lock(name);
    let read = soon(rw.read().lock()).await.unwrap();
    let field = read.field().to_owned();
    soon(read.unlock()).await.unwrap();
    let write = soon(rw.write().lock()).await.unwrap();
    soon(write.unlock()).await.unwrap();
    for key in [
        format!("redisson_lock__channel:{{{name}}}"),
        format!("redisson_unlock_latch:{{{name}}}:0123"),
        format!("redisson_lock_token:{{{name}}}"),
        format!("redisson_lock_queue:{{{name}}}"),
        format!("redisson_lock_timeout:{{{name}}}"),
        format!("redisson_lock__channel:{{{name}}}:{field}"),
        format!("redisson_rwlock:{{{name}}}"),
        format!("{{{name}}}:{field}:rwlock_timeout:1"),
    ] {
        assert_eq!(keyslot(node, &key), slot, "{key}");
    }
}

/// A master that holds none of our locks dies: the locks on the other
/// masters are held, renewed and released as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_master_does_not_disturb_locks_on_the_others() {
    let mut nodes = cluster().await;
    let client = client(&nodes).await;
    // Names whose slots are not on the node that will die.
    let victim_port = nodes[2].port();
    let mut names = Vec::new();
    for i in 0.. {
        let name = format!("survivor:{i}");
        let slot = keyslot(&nodes[0], &name);
        let shards = nodes[2].cmd(&["CLUSTER", "NODES"]).as_string().unwrap();
        let victim_serves = shards
            .lines()
            .any(|line| line.contains(&format!(":{victim_port}@")) && serves(line, slot));
        if !victim_serves {
            names.push(name);
        }
        if names.len() == 5 {
            break;
        }
    }
    let mut guards = Vec::new();
    for name in &names {
        guards.push(soon(client.lock(name.as_str()).lock()).await.unwrap());
    }
    nodes[2].stop();
    tokio::time::sleep(WATCHDOG * 3).await;
    assert!(
        guards.iter().all(|g| !g.is_lease_lost()),
        "a lease was lost"
    );
    for guard in guards {
        soon(guard.unlock()).await.unwrap();
    }
    let again = soon(client.lock(names[0].as_str()).lock()).await.unwrap();
    soon(again.unlock()).await.unwrap();
}

/// A manual failover moves a held lock's slot to the replica: the lock is
/// kept (it was replicated), renewed on the new master, and its release
/// wakes a waiter subscribed before the failover.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_survives_a_master_failover_and_its_release_wakes_the_waiter() {
    let nodes = cluster_with_replicas().await;
    // A lease that outlasts the failover's own pause of writes: a manual
    // failover pauses the old master's writers (renewals included) for up
    // to Redis's 5 s manual-failover timeout, and the key must not run out
    // on the new master meanwhile. With 3 s, a loaded machine once lost it
    // (EXISTS 0 on the new master).
    let watchdog = Duration::from_secs(15);
    let connect = || {
        ferrisson::Client::cluster_builder(nodes[..3].iter().map(RedisServer::url))
            .watchdog_timeout(watchdog)
            .build()
    };
    let a = soon(connect()).await.unwrap();
    let b = soon(connect()).await.unwrap();
    let name = "failover";
    let slot = keyslot(&nodes[0], name);
    let (master, replica) = master_and_replica(&nodes, slot).await;

    let guard = soon(a.lock(name).lock()).await.unwrap();
    let lock = b.lock(name);
    let waiting = tokio::spawn(async move { lock.lock().await.unwrap() });
    eventually(Duration::from_secs(5), || async {
        listeners(&nodes, &[master], name) == Some(1)
    })
    .await;

    // The replica takes over, with the lock it replicated.
    nodes[replica].cmd(&["CLUSTER", "FAILOVER"]);
    eventually(Duration::from_secs(20), || async {
        nodes[replica].role().as_deref() == Some("master")
    })
    .await;
    assert_eq!(nodes[replica].cmd(&["EXISTS", name]).as_int(), Some(1));

    // Renewals follow the slot: the new master sees one (its TTL of the
    // key rises between two readings) within two watchdog timeouts.
    let pttl = || nodes[replica].pttl(name);
    let deadline = Instant::now() + watchdog * 2;
    let mut before = pttl();
    loop {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let now = pttl();
        if now > before {
            break;
        }
        assert!(Instant::now() < deadline, "no renewal on the new master");
        before = now;
    }
    assert!(!guard.is_lease_lost(), "the lease was lost in the failover");

    // The server dropped the waiter's shard subscription when the slot
    // moved; the client subscribed again, on a node of the slot's shard (a
    // replica serves shard channels too).
    eventually(Duration::from_secs(10), || async {
        listeners(&nodes, &[replica, master], name) == Some(1)
    })
    .await;
    let released = Instant::now();
    soon(guard.unlock()).await.unwrap();
    let next = within(Duration::from_secs(10), waiting).await.unwrap();
    println!("waiter woken {:?} after the release", released.elapsed());
    // By the message, in milliseconds. Without it, the waiter would wake
    // when it looks again (every third of the watchdog timeout, 5 s) or at
    // the lock's TTL (15 s); half the look-again interval is the bound.
    assert!(
        released.elapsed() < watchdog / 6,
        "{:?}",
        released.elapsed()
    );
    soon(next.unlock()).await.unwrap();

    // Scripts run on the new master (loaded again if it did not have them).
    let again = soon(a.fenced_lock(name).lock()).await.unwrap();
    soon(again.unlock()).await.unwrap();
}

/// A slot that moves to a node the client has not heard of: its EVALSHA
/// follows the MOVED there, while a `SCRIPT LOAD` goes to the nodes the
/// client knows. A script the newcomer lacks still runs, at once (as
/// after a failover to a replica the client had not met).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slot_moved_to_a_node_the_client_never_met_runs_its_scripts() {
    let mut nodes = cluster().await;
    let client = client(&nodes).await;
    let name = "newcomer";
    let slot = keyslot(&nodes[0], name);
    let from = owner(&nodes, slot);
    // The client has run the lock's scripts, on the nodes it knows.
    let guard = soon(client.lock(name).lock()).await.unwrap();
    soon(guard.unlock()).await.unwrap();

    nodes.push(join_empty_master(&nodes).await);
    move_slot(&nodes, slot, from, 3);
    let guard = soon(client.lock(name).try_lock()).await.unwrap();
    assert!(guard.is_some(), "the free lock was not taken");
    assert_eq!(nodes[3].cmd(&["EXISTS", name]).as_int(), Some(1));
    soon(guard.unwrap().unlock()).await.unwrap();
    assert_eq!(nodes[3].cmd(&["EXISTS", name]).as_int(), Some(0));
}

/// Replica sync on a cluster: WAIT goes to the master of the lock's slot,
/// and an acquire its replica did not acknowledge is given back. By
/// default the master's online replicas are waited for, as Redisson does;
/// `replica_sync_with(None)` turns it off.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replica_sync_waits_on_the_slots_master() {
    let nodes = cluster_with_replicas().await;
    // WAIT returns as soon as the replica acknowledges; the bound is for
    // the frozen replica below, and generous, because this binary's other
    // tests start clusters meanwhile (a replica's first sync forks its
    // master), which can hold a healthy replica's answer up past 500 ms
    // on two cores.
    let client = client_of(&nodes, |b| {
        b.replica_sync(1, Duration::from_secs(5), ferrisson::config::Unsynced::Fail)
            .response_timeout(Duration::from_secs(10))
    })
    .await;
    let name = "synced";
    let (master, replica) = master_and_replica(&nodes, keyslot(&nodes[0], name)).await;
    let guard = soon(client.lock(name).lock()).await.unwrap();
    // The lock hash (beside it, for a moment, the acquire's latch).
    assert_eq!(
        nodes[replica]
            .cmd(&["KEYS", name])
            .as_array()
            .map(<[_]>::len),
        Some(1),
        "not on the replica yet"
    );
    soon(guard.unlock()).await.unwrap();
    assert_eq!(
        wait_calls(&nodes[master]),
        2,
        "one WAIT per acquire and release"
    );
    let elsewhere: u64 = (0..nodes.len())
        .filter(|&i| i != master)
        .map(|i| wait_calls(&nodes[i]))
        .sum();
    assert_eq!(elsewhere, 0);

    // The replica is frozen: the acquire is given back and fails.
    nodes[replica].freeze();
    let err = soon(client.lock(name).lock()).await;
    nodes[replica].thaw();
    let err = err.unwrap_err();
    assert!(
        matches!(err, ferrisson::Error::NotReplicated { .. }),
        "{err}"
    );
    assert_eq!(nodes[master].cmd(&["EXISTS", name]).as_int(), Some(0));

    // The default is Redisson's: the slot's master waits for its replica.
    // A WAIT is counted when it returns, which a server may do after the
    // client returned: none may still block when the count is read.
    eventually(Duration::from_secs(10), || async {
        blocked_clients(&nodes[master]) == 0
    })
    .await;
    let waits = wait_calls(&nodes[master]);
    let default = client_of(&nodes, |b| b).await;
    let guard = soon(default.lock(name).lock()).await.unwrap();
    // (A cluster replica answers key commands with MOVED; KEYS it serves.)
    assert_eq!(
        nodes[replica]
            .cmd(&["KEYS", name])
            .as_array()
            .map(<[_]>::len),
        Some(1),
        "not on the replica yet"
    );
    soon(guard.unlock()).await.unwrap();
    assert_eq!(wait_calls(&nodes[master]), waits + 2);
    // And it can be turned off.
    let waits = wait_calls(&nodes[master]);
    let off = client_of(&nodes, |b| b.replica_sync_with(None)).await;
    let guard = soon(off.lock(name).lock()).await.unwrap();
    soon(guard.unlock()).await.unwrap();
    assert_eq!(wait_calls(&nodes[master]), waits);
}

/// A client of the cluster's first three nodes, built as `settings` says.
async fn client_of(
    nodes: &[RedisServer],
    settings: impl FnOnce(ferrisson::ClientBuilder) -> ferrisson::ClientBuilder,
) -> ferrisson::Client {
    let builder = ferrisson::Client::cluster_builder(nodes[..3].iter().map(RedisServer::url));
    soon(settings(builder).build()).await.unwrap()
}

/// Resharding moves a held lock's slot to another master: the lock moves
/// with it and is renewed there, and the waiter's shard subscription
/// follows, so the release wakes it at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resharded_slot_takes_its_lock_and_subscription_along() {
    let nodes = cluster().await;
    // A lease far longer than a wake-up by message.
    let watchdog = Duration::from_secs(6);
    let connect = || {
        ferrisson::Client::cluster_builder(nodes.iter().map(RedisServer::url))
            .watchdog_timeout(watchdog)
            .build()
    };
    let a = soon(connect()).await.unwrap();
    let b = soon(connect()).await.unwrap();
    let name = "resharded";
    let slot = keyslot(&nodes[0], name);
    let from = owner(&nodes, slot);
    let to = (from + 1) % 3;

    let guard = soon(a.lock(name).lock()).await.unwrap();
    let lock = b.lock(name);
    let waiting = tokio::spawn(async move { lock.lock().await.unwrap() });
    eventually(Duration::from_secs(5), || async { b.subscriptions() == 1 }).await;
    eventually(Duration::from_secs(5), || async {
        listeners(&nodes, &[from], name) == Some(1)
    })
    .await;

    move_slot(&nodes, slot, from, to);
    assert_eq!(nodes[to].cmd(&["EXISTS", name]).as_int(), Some(1));
    eventually(Duration::from_secs(10), || async {
        listeners(&nodes, &[to], name) == Some(1)
    })
    .await;
    // Renewed on the new node: two renewal periods later it is still held.
    tokio::time::sleep(watchdog * 2 / 3).await;
    assert!(!guard.is_lease_lost());
    assert!(nodes[to].cmd(&["PTTL", name]).as_int().unwrap() > 0);

    let released = Instant::now();
    soon(guard.unlock()).await.unwrap();
    let next = within(Duration::from_secs(10), waiting).await.unwrap();
    assert!(
        released.elapsed() < Duration::from_secs(2),
        "{:?}",
        released.elapsed()
    );
    soon(next.unlock()).await.unwrap();
}

/// A cluster whose nodes require a password: every connection the client
/// opens to any node (commands, subscriptions) authenticates.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_password_reaches_every_node() {
    let nodes = cluster_with_password("clu5ter-pw").await;
    let urls = || {
        nodes
            .iter()
            .map(|n| format!("redis://:clu5ter-pw@127.0.0.1:{}/", n.port()))
            .collect::<Vec<_>>()
    };
    let a = soon(ferrisson::Client::cluster_builder(urls()).build())
        .await
        .unwrap();
    let b = soon(ferrisson::Client::cluster_builder(urls()).build())
        .await
        .unwrap();
    let mut guards = Vec::new();
    for i in 0..30 {
        guards.push(soon(a.lock(format!("authed:{i}")).lock()).await.unwrap());
    }
    for node in &nodes {
        assert!(node.cmd(&["DBSIZE"]).as_int().unwrap() > 0);
    }
    let lock = b.lock("authed:0");
    let waiting = tokio::spawn(async move { lock.lock().await.unwrap() });
    eventually(Duration::from_secs(5), || async { b.subscriptions() == 1 }).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    let released = Instant::now();
    for guard in guards {
        soon(guard.unlock()).await.unwrap();
    }
    let next = within(Duration::from_secs(10), waiting).await.unwrap();
    assert!(released.elapsed() < Duration::from_secs(10));
    soon(next.unlock()).await.unwrap();
    assert!(!format!("{a:?}").contains("clu5ter-pw"));
}

/// The semaphores and the latch on a cluster: names on different masters,
/// waiters woken by sharded messages (the watchdog's look-again interval,
/// 10 s here, is not what wakes them: the checks allow 3 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn semaphores_and_latches_wake_by_sharded_messages() {
    let nodes = cluster().await;
    let a = long_client(&nodes).await;
    let b = long_client(&nodes).await;
    assert_eq!(a.config().pubsub_mode, default_mode());
    for name in ["sem:1", "sem:2", "sem:3", "{sem}:4"] {
        let sem = a.semaphore(name);
        assert!(soon(sem.try_set_permits(0)).await.unwrap());
        let waiting = {
            let sem = b.semaphore(name);
            tokio::spawn(async move { sem.acquire().await.unwrap() })
        };
        eventually(Duration::from_secs(10), || async { b.subscriptions() == 1 }).await;
        let released = Instant::now();
        soon(sem.release()).await.unwrap();
        within(Duration::from_secs(10), waiting).await.unwrap();
        assert!(
            released.elapsed() < Duration::from_secs(3),
            "{name}: {:?}",
            released.elapsed()
        );

        let seats = a.permit_expirable_semaphore(format!("{name}:seats"));
        soon(seats.try_set_permits(1)).await.unwrap();
        let permit = soon(seats.acquire_with_lease(Duration::from_millis(200)))
            .await
            .unwrap();
        let next = soon(
            b.permit_expirable_semaphore(format!("{name}:seats"))
                .acquire(),
        )
        .await
        .unwrap();
        assert!(soon(permit.release())
            .await
            .unwrap_err()
            .is_permit_not_out());
        soon(next.release()).await.unwrap();

        let latch = a.count_down_latch(format!("{name}:latch"));
        assert!(soon(latch.try_set_count(1)).await.unwrap());
        let waiting = {
            let latch = b.count_down_latch(format!("{name}:latch"));
            tokio::spawn(async move { latch.wait().await.unwrap() })
        };
        eventually(Duration::from_secs(10), || async { b.subscriptions() == 1 }).await;
        let opened = Instant::now();
        assert_eq!(soon(latch.count_down()).await.unwrap(), 0);
        within(Duration::from_secs(10), waiting).await.unwrap();
        assert!(
            opened.elapsed() < Duration::from_secs(3),
            "{name}: {:?}",
            opened.elapsed()
        );
        eventually(Duration::from_secs(10), || async { b.subscriptions() == 0 }).await;
    }
}

/// A leader election and a fenced hash on a cluster: names on different
/// masters; observers and waiting candidates woken by sharded messages
/// (the look-again, 10 s with this 30 s watchdog, is not what wakes them:
/// the checks allow half of it); the fence in the hash's slot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn elections_and_fenced_hashes_work_on_every_master() {
    let nodes = cluster().await;
    let a = long_client(&nodes).await;
    let b = long_client(&nodes).await;
    let quick = Duration::from_secs(5);
    for name in ["elect:1", "elect:2", "elect:3", "{elect}:4"] {
        let mut observer = b.leader_election(name).observe();
        assert_eq!(
            soon(observer.next()).await.unwrap().unwrap(),
            ferrisson::LeaderChange::NoLeader
        );
        // Waiting for the next change: subscribed.
        let observing = tokio::spawn(async move {
            let change = observer.next().await.unwrap().unwrap();
            (change, observer)
        });
        eventually(Duration::from_secs(10), || async { b.subscriptions() == 1 }).await;
        let first = soon(a.leader_election(name).campaign("a")).await.unwrap();
        let (change, mut observer) = within(quick, observing).await.unwrap();
        match change {
            ferrisson::LeaderChange::Leader(leader) => {
                assert_eq!(
                    (leader.term, leader.label.as_deref()),
                    (Some(first.term()), Some("a"))
                );
            }
            other => panic!("{name}: {other:?}"),
        }
        let state = a.fenced_hash(format!("{name}:state"));
        assert_eq!(
            soon(state.set("by", "a", first.term())).await.unwrap(),
            ferrisson::FencedWrite::Written
        );

        let waiting = {
            let election = b.leader_election(name);
            tokio::spawn(async move { election.campaign("b").await.unwrap() })
        };
        eventually(Duration::from_secs(10), || async { b.subscriptions() == 2 }).await;
        let first_term = first.term();
        soon(first.resign()).await.unwrap();
        let second = within(quick, waiting).await.unwrap();
        assert!(second.term() > first_term);
        // The vacancy may be too short to see; the new leader comes next.
        let mut seen = within(quick, observer.next()).await.unwrap().unwrap();
        if seen == ferrisson::LeaderChange::NoLeader {
            seen = within(quick, observer.next()).await.unwrap().unwrap();
        }
        assert!(
            matches!(&seen, ferrisson::LeaderChange::Leader(l) if l.term == Some(second.term())),
            "{name}: {seen:?}"
        );
        let late = first_term;
        assert_eq!(
            soon(state.set("by", "b", second.term())).await.unwrap(),
            ferrisson::FencedWrite::Written
        );
        assert_eq!(
            soon(state.set("by", "a, late", late)).await.unwrap(),
            ferrisson::FencedWrite::Refused {
                highest: second.term()
            }
        );
        soon(second.resign()).await.unwrap();
        assert_eq!(
            within(quick, observer.next()).await.unwrap().unwrap(),
            ferrisson::LeaderChange::NoLeader
        );
        drop(observer);
        eventually(Duration::from_secs(10), || async { b.subscriptions() == 0 }).await;
    }
}

/// A cluster client with a 30 s watchdog: its look-again (10 s) is far
/// longer than a message takes.
async fn long_client(nodes: &[RedisServer]) -> ferrisson::Client {
    ferrisson::Client::cluster_builder(nodes.iter().map(RedisServer::url))
        .watchdog_timeout(Duration::from_secs(30))
        .build()
        .await
        .unwrap()
}

/// A fenced hash whose key has braces but no hash tag (an empty one, one
/// never closed, a `}` alone) writes and reads on a cluster: its fence is
/// in its slot by Redis's rule.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fenced_hash_whose_key_has_no_hash_tag_keeps_its_fence_in_its_slot() {
    let nodes = cluster().await;
    let client = long_client(&nodes).await;
    for key in ["cfg{}v2", "{open", "open}", "a}b", "{}{x}", "x{y}z"] {
        let hash = client.fenced_hash(key);
        assert_eq!(
            soon(hash.set("f", "v", 7)).await.unwrap(),
            ferrisson::FencedWrite::Written,
            "{key}"
        );
        assert_eq!(
            soon(hash.set("f", "late", 6)).await.unwrap(),
            ferrisson::FencedWrite::Refused { highest: 7 },
            "{key}"
        );
        let read = soon(hash.get("f")).await.unwrap();
        assert_eq!(
            (read.value.as_deref(), read.fence),
            (Some("v"), Some(7)),
            "{key}"
        );
    }
}

/// Permits kept by the watchdog on a cluster: the semaphores sit on
/// different masters, and their permits are renewed there (one renewal
/// call per slot) past their own leases until released.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kept_permits_are_renewed_on_every_master() {
    let nodes = cluster().await;
    let watchdog = Duration::from_millis(600);
    let a = client_of(&nodes, |b| b.watchdog_timeout(watchdog)).await;
    let b = long_client(&nodes).await;
    let names = ["kept:1", "kept:2", "kept:3", "{kept}:4"];
    let mut permits = Vec::new();
    for name in names {
        let seats = a.permit_expirable_semaphore(name);
        soon(seats.try_set_permits(1)).await.unwrap();
        let mut permit = soon(seats.acquire_with_lease(Duration::from_millis(200)))
            .await
            .unwrap();
        soon(permit.keep_alive()).await.unwrap();
        permits.push(permit);
    }
    let waited = soon(
        b.permit_expirable_semaphore(names[0])
            .try_acquire_for(3 * watchdog),
    )
    .await
    .unwrap();
    assert!(waited.is_none(), "a kept permit was taken back");
    for (name, permit) in names.iter().zip(permits) {
        assert!(!permit.is_expired(), "{name}");
        let seats = b.permit_expirable_semaphore(*name);
        assert_eq!(soon(seats.available_permits()).await.unwrap(), 0, "{name}");
        soon(permit.release()).await.unwrap();
        assert_eq!(soon(seats.available_permits()).await.unwrap(), 1, "{name}");
    }
}
