//! The leader election against a real `redis-server`, one private server
//! per test.

use ferrisson_test_support as common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::proxy::Proxy;
use common::{
    client, client_at, eventually, exists, next_message, settled, soon, within, RawSubscriber,
    RedisServer,
};
use ferrisson::config::{MAX_FENCE_TOKEN, MAX_LEADER_LABEL_LEN};
use ferrisson::{Error, FencedWrite, Holder, LeaderChange, LeaderObserver};

const WATCHDOG: Duration = Duration::from_millis(1200);

/// The next change an observer reports; a bound far above the watchdog
/// timeout (an observer reads again at least every third of it).
async fn next(observer: &mut LeaderObserver) -> LeaderChange {
    within(Duration::from_secs(20), observer.next())
        .await
        .expect("an observer's stream does not end")
        .expect("an observer waits out what it can")
}

/// Waits until the election `name` has left nothing on the server but its
/// token counter (the request latches go in the background).
async fn only_the_counter_is_left(server: &RedisServer, name: &str) {
    let counter = ferrisson::layout::fencing_token(name);
    eventually(Duration::from_secs(10), || async {
        server.keys("*") == [counter.as_str()]
    })
    .await;
}

fn leader(change: LeaderChange) -> Holder {
    match change {
        LeaderChange::Leader(leader) => leader,
        LeaderChange::NoLeader => panic!("expected a leader, got none"),
    }
}

/// Campaigns from three clients, several each at once: never two leaders,
/// and the terms rise strictly in the order the leaderships began.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_leader_at_a_time_with_rising_terms() {
    let server = RedisServer::start();
    // Renewals are not under test: a lease far above any stall of a busy
    // machine, so that each leadership ends with its resignation.
    let lease = Duration::from_secs(30);
    let clients = [
        client(&server, lease).await,
        client(&server, lease).await,
        client(&server, lease).await,
    ];
    let leading = Arc::new(AtomicUsize::new(0));
    let terms: Arc<Mutex<Vec<u64>>> = Arc::default();
    const TASKS: usize = 6;
    const ROUNDS: usize = 15;
    let mut tasks = Vec::new();
    for task in 0..TASKS {
        let election = clients[task % 3].leader_election("leader");
        let (leading, terms) = (Arc::clone(&leading), Arc::clone(&terms));
        tasks.push(tokio::spawn(async move {
            for _ in 0..ROUNDS {
                let leadership = election.campaign(&format!("task-{task}")).await.unwrap();
                assert_eq!(leading.fetch_add(1, Ordering::SeqCst), 0, "two leaders");
                terms.lock().unwrap().push(leadership.term());
                tokio::task::yield_now().await;
                leading.fetch_sub(1, Ordering::SeqCst);
                leadership.resign().await.unwrap();
            }
        }));
    }
    for task in tasks {
        within(Duration::from_secs(90), task).await.unwrap();
    }
    let terms = terms.lock().unwrap().clone();
    assert_eq!(terms.len(), TASKS * ROUNDS);
    assert!(
        terms.windows(2).all(|w| w[0] < w[1]),
        "terms did not rise in the order the leaderships began: {terms:?}"
    );
    for client in &clients {
        settled(client).await;
    }
    assert!(!exists(&server, "leader"));
}

/// Redisson's layout: the election is a fenced lock whose holder's field
/// is `<client-id>:<label>~<campaign-id>`, its term the counter's value;
/// `leader()` reads them back; a resignation leaves only the counter.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_leader_is_a_fenced_lock_holder_with_its_label() {
    let server = RedisServer::start();
    let client = client(&server, WATCHDOG).await;
    let election = client.leader_election("{svc}:leader");
    assert_eq!(soon(election.leader()).await.unwrap(), None);
    let leadership = soon(election.campaign("10.0.0.7:8080")).await.unwrap();
    let term = leadership.term();
    assert!(term > 0);
    assert_eq!(leadership.label(), "10.0.0.7:8080");
    assert_eq!(leadership.name(), "{svc}:leader");
    assert!(!leadership.is_lost());

    let fields = server.cmd(&["HGETALL", "{svc}:leader"]);
    let fields = fields.as_array().unwrap();
    assert_eq!(fields.len(), 2, "one holder");
    let field = fields[0].as_string().unwrap();
    let owner = field
        .strip_prefix(&format!("{}:10.0.0.7:8080~", client.id()))
        .expect("the field is <client-id>:<label>~<campaign-id>");
    assert!(owner.len() == 32 && owner.bytes().all(|b| b.is_ascii_hexdigit()));
    assert_eq!(fields[1].as_string().as_deref(), Some("1"));
    assert_eq!(
        server
            .cmd(&["GET", "redisson_lock_token:{svc}:leader"])
            .as_string(),
        Some(term.to_string())
    );

    let now = soon(election.leader()).await.unwrap().expect("a leader");
    assert_eq!(now.term, Some(term));
    assert_eq!(now.label.as_deref(), Some("10.0.0.7:8080"));
    assert_eq!(now.client_id, client.id().to_string());
    assert_eq!(now.owner_id, field.split_once(':').unwrap().1);

    soon(leadership.resign()).await.unwrap();
    settled(&client).await;
    assert_eq!(soon(election.leader()).await.unwrap(), None);
    only_the_counter_is_left(&server, "{svc}:leader").await;
}

/// A holder of the same name as a plain fenced lock (what a Redisson
/// `RFencedLock` is) and the candidates exclude each other, and its tokens
/// and the terms come from one counter.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fenced_lock_holder_and_the_candidates_exclude_each_other() {
    let server = RedisServer::start();
    let client = client(&server, WATCHDOG).await;
    let election = client.leader_election("shared");
    let lock = client.fenced_lock("shared");

    let held = soon(lock.lock()).await.unwrap();
    assert!(soon(election.try_campaign("pod-a"))
        .await
        .unwrap()
        .is_none());
    let other = soon(election.leader())
        .await
        .unwrap()
        .expect("the lock's holder leads");
    assert_eq!(other.label, None);
    assert_eq!(other.term, Some(held.token()));
    assert!(
        soon(election.campaign_for("pod-a", Duration::from_millis(300)))
            .await
            .unwrap()
            .is_none()
    );
    let token = held.token();
    soon(held.unlock()).await.unwrap();

    let leadership = soon(election.campaign("pod-a")).await.unwrap();
    assert!(leadership.term() > token);
    assert!(soon(lock.try_lock()).await.unwrap().is_none());
    let term = leadership.term();
    drop(leadership);
    let after = within(Duration::from_secs(10), lock.lock()).await.unwrap();
    assert!(after.token() > term);
    soon(after.unlock()).await.unwrap();
}

/// A holder of the name as a plain lock (a Redisson `RLock`) draws no
/// fencing token: with no counter on the name, it leads with no term,
/// not with a term of 0; once a token was drawn, it shows that one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_lock_holder_leads_with_no_term_until_a_token_was_drawn() {
    let server = RedisServer::start();
    let client = client(&server, WATCHDOG).await;
    let election = client.leader_election("plain");

    let held = soon(client.lock("plain").lock()).await.unwrap();
    let seen = soon(election.leader())
        .await
        .unwrap()
        .expect("the lock's holder leads");
    assert_eq!((seen.term, seen.label), (None, None));
    soon(held.unlock()).await.unwrap();

    let fenced = soon(client.fenced_lock("plain").lock()).await.unwrap();
    let token = fenced.token();
    soon(fenced.unlock()).await.unwrap();
    let held = soon(client.lock("plain").lock()).await.unwrap();
    let seen = soon(election.leader()).await.unwrap().expect("a leader");
    assert_eq!(seen.term, Some(token));
    soon(held.unlock()).await.unwrap();
}

/// An observer sees who leads at first, then every change in order, none
/// twice: a campaign, a resignation, a campaign by another client, a
/// dropped leadership.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn observers_see_every_change_in_order_and_none_twice() {
    let server = RedisServer::start();
    let a = client(&server, WATCHDOG).await;
    let b = client(&server, WATCHDOG).await;
    let watcher = client(&server, WATCHDOG).await;
    let mut observer = watcher.leader_election("observed").observe();
    assert_eq!(next(&mut observer).await, LeaderChange::NoLeader);

    let first = soon(a.leader_election("observed").campaign("a"))
        .await
        .unwrap();
    let seen = leader(next(&mut observer).await);
    assert_eq!(
        (seen.term, seen.label.as_deref()),
        (Some(first.term()), Some("a"))
    );
    soon(first.resign()).await.unwrap();
    assert_eq!(next(&mut observer).await, LeaderChange::NoLeader);

    let second = soon(b.leader_election("observed").campaign("b"))
        .await
        .unwrap();
    let seen = leader(next(&mut observer).await);
    assert_eq!(
        (seen.term, seen.label.as_deref()),
        (Some(second.term()), Some("b"))
    );
    assert_eq!(seen.client_id, b.id().to_string());
    drop(second);
    assert_eq!(next(&mut observer).await, LeaderChange::NoLeader);

    // Nothing more happened: nothing more is reported, through several
    // of the observer's own reads.
    assert!(
        tokio::time::timeout(WATCHDOG * 2, observer.next())
            .await
            .is_err(),
        "a change reported twice"
    );
    drop(observer);
    settled(&watcher).await;
}

/// A leader cut off from Redis: its `lost()` resolves before its lease
/// would end, a waiting candidate leads within about a lease with a higher
/// term, and an observer reports the old leader gone and the new one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_off_leader_is_replaced_within_a_lease() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    let cut_off = client_at(&proxy.url(), WATCHDOG).await;
    let other = client(&server, WATCHDOG).await;
    let mut observer = other.leader_election("cut").observe();
    assert_eq!(next(&mut observer).await, LeaderChange::NoLeader);

    let old = soon(cut_off.leader_election("cut").campaign("old"))
        .await
        .unwrap();
    assert_eq!(
        leader(next(&mut observer).await).label.as_deref(),
        Some("old")
    );
    let election = other.leader_election("cut");
    let waiting = tokio::spawn(async move { election.campaign("new").await });

    proxy.refuse(true);
    within(WATCHDOG * 10, old.lost()).await;
    assert!(old.is_lost());
    let new = within(WATCHDOG * 10, waiting).await.unwrap().unwrap();
    assert!(new.term() > old.term());
    // The vacancy between the two may be shorter than a read (the waiter
    // takes the lock the moment it expires): reported or not, the new
    // leader comes next.
    let seen = match next(&mut observer).await {
        LeaderChange::NoLeader => leader(next(&mut observer).await),
        LeaderChange::Leader(seen) => seen,
    };
    assert_eq!(
        (seen.term, seen.label.as_deref()),
        (Some(new.term()), Some("new"))
    );

    // The old leader's resignation is refused without a send: it knew.
    assert!(old.resign().await.unwrap_err().is_lease_lost());
    proxy.refuse(false);
    soon(new.resign()).await.unwrap();
}

/// An election's own lease sets its failover time, not the client's
/// watchdog timeout (30 s here): the leader's lock lives `LEASE`, renewed
/// by the same watchdog that keeps the client's other locks to 30 s; the
/// leader stays in office over several leases; cut off from Redis, it is
/// replaced about a lease after its last renewal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_election_lease_sets_the_failover_time() {
    const LEASE: Duration = Duration::from_millis(1500);
    const CLIENT_WATCHDOG: Duration = Duration::from_secs(30);
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    let cut_off = client_at(&proxy.url(), CLIENT_WATCHDOG).await;
    let other = client(&server, CLIENT_WATCHDOG).await;

    let old = soon(
        cut_off
            .leader_election("leased")
            .lease(LEASE)
            .campaign("old"),
    )
    .await
    .unwrap();
    let plain = soon(cut_off.lock("plain").lock()).await.unwrap();
    let pttl = |key: &str| server.pttl(key);
    assert!((1..=LEASE.as_millis() as i64).contains(&pttl("leased")));
    assert!(pttl("plain") > LEASE.as_millis() as i64 * 2);

    let election = other.leader_election("leased").lease(LEASE);
    let waiting = tokio::spawn(async move { election.campaign("new").await });
    // Renewed every third of its lease: in office for four leases, and the
    // rival does not get in.
    let kept = tokio::time::timeout(LEASE * 4, old.lost()).await;
    assert!(kept.is_err(), "a renewed leader lost its office");
    assert!(!old.is_lost() && !waiting.is_finished());
    assert!((1..=LEASE.as_millis() as i64).contains(&pttl("leased")));
    // The client's other lock kept the client's timeout meanwhile.
    assert!(pttl("plain") > LEASE.as_millis() as i64 * 2);

    let cut = tokio::time::Instant::now();
    proxy.refuse(true);
    let new = within(LEASE * 3, waiting).await.unwrap().unwrap();
    let failover = cut.elapsed();
    println!("election failover with a {LEASE:?} lease: {failover:?}");
    assert!(failover <= LEASE * 3, "{failover:?}");
    assert!(new.term() > old.term());
    // The old leader knew before the rival led: it gives up before the
    // server would.
    assert!(old.is_lost());
    within(LEASE, old.lost()).await;
    assert!(old.resign().await.unwrap_err().is_lease_lost());
    proxy.refuse(false);
    soon(new.resign()).await.unwrap();
    drop(plain);
}

/// A leader whose lock is deleted behind its back (a force-unlock) learns
/// it from the watchdog.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_learns_its_lock_was_deleted() {
    let server = RedisServer::start();
    let client = client(&server, WATCHDOG).await;
    let leadership = soon(client.leader_election("deleted").campaign("a"))
        .await
        .unwrap();
    assert!(soon(client.fenced_lock("deleted").force_unlock())
        .await
        .unwrap());
    within(WATCHDOG * 3, leadership.lost()).await;
    assert!(leadership.is_lost());
    let err = soon(leadership.resign()).await.unwrap_err();
    assert!(err.is_lease_lost() || err.is_not_held(), "{err:?}");
    settled(&client).await;
}

/// A deposed leader that awaits `lost()` is told at once (the deposition
/// publishes on the lock's channel), not at its watchdog's next renewal
/// (10 s with this 30 s timeout).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deposed_leader_is_told_at_once() {
    let server = RedisServer::start();
    let leader = client(&server, Duration::from_secs(30)).await;
    let operator = client(&server, Duration::from_secs(30)).await;
    let leadership = Arc::new(
        soon(leader.leader_election("deposed").campaign("a"))
            .await
            .unwrap(),
    );
    let lost = {
        let leadership = Arc::clone(&leadership);
        tokio::spawn(async move { leadership.lost().await })
    };
    eventually(Duration::from_secs(10), || async {
        leader.subscriptions() == 1
    })
    .await;
    assert!(soon(operator.leader_election("deposed").depose())
        .await
        .unwrap());
    within(Duration::from_secs(5), lost).await.unwrap();
    assert!(leadership.is_lost());
}

/// An observer through a Redis restart that lost everything: it reports
/// the leader gone, then the next one; the old leader is told.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_observer_follows_through_a_restart() {
    let mut server = RedisServer::start();
    let a = client(&server, WATCHDOG).await;
    let watcher = client(&server, WATCHDOG).await;
    let mut observer = watcher.leader_election("restarted").observe();
    assert_eq!(next(&mut observer).await, LeaderChange::NoLeader);
    let old = soon(a.leader_election("restarted").campaign("a"))
        .await
        .unwrap();
    assert_eq!(
        leader(next(&mut observer).await).label.as_deref(),
        Some("a")
    );

    server.restart();
    assert_eq!(next(&mut observer).await, LeaderChange::NoLeader);
    within(WATCHDOG * 3, old.lost()).await;
    let new = within(
        Duration::from_secs(10),
        watcher.leader_election("restarted").campaign("b"),
    )
    .await
    .unwrap();
    let seen = leader(next(&mut observer).await);
    assert_eq!(
        (seen.term, seen.label.as_deref()),
        (Some(new.term()), Some("b"))
    );
    drop(old);
    soon(new.resign()).await.unwrap();
}

/// Dropped campaigns, while another leads and while nobody does, leave no
/// hold, no subscription and nothing in Redis but the counter.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_campaigns_leave_nothing_behind() {
    let server = RedisServer::start();
    let client = client(&server, WATCHDOG).await;
    let holder = common::client(&server, WATCHDOG).await;
    let election = client.leader_election("dropped");
    let held = soon(holder.leader_election("dropped").campaign("holder"))
        .await
        .unwrap();
    for cut in 0..20u64 {
        let _ = tokio::time::timeout(
            Duration::from_micros(cut * 300),
            election.campaign("dropped"),
        )
        .await;
    }
    soon(held.resign()).await.unwrap();
    for cut in 0..20u64 {
        let _ = tokio::time::timeout(
            Duration::from_micros(cut * 100),
            election.campaign("dropped"),
        )
        .await;
    }
    settled(&client).await;
    settled(&holder).await;
    assert_eq!(soon(election.leader()).await.unwrap(), None);
    only_the_counter_is_left(&server, "dropped").await;
}

/// Bad input is refused with `InvalidArgument` before anything is sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_names_and_labels_are_refused_and_write_nothing() {
    let server = RedisServer::start();
    let client = client(&server, WATCHDOG).await;
    let invalid = |result: ferrisson::Result<_>| matches!(result, Err(Error::InvalidArgument(_)));
    let election = client.leader_election("ok");
    assert!(invalid(soon(election.campaign("")).await.map(drop)));
    let long = "x".repeat(MAX_LEADER_LABEL_LEN + 1);
    assert!(invalid(soon(election.try_campaign(&long)).await.map(drop)));
    assert!(invalid(
        soon(election.campaign_for("a\nb", Duration::from_secs(1)))
            .await
            .map(drop)
    ));
    // An election's lease is its client's watchdog timeout: a zero one is
    // refused when the client is built, before anything is sent.
    let zero_lease = ferrisson::Client::builder(server.url())
        .watchdog_timeout(Duration::ZERO)
        .build()
        .await;
    assert!(invalid(zero_lease.map(drop)));
    // An election's own lease: zero, too short to renew, too long.
    for lease in [
        Duration::ZERO,
        Duration::from_millis(10),
        ferrisson::config::MAX_DURATION * 2,
    ] {
        let leased = client.leader_election("ok").lease(lease);
        assert!(invalid(soon(leased.campaign("a")).await.map(drop)));
        assert!(invalid(soon(leased.try_campaign("a")).await.map(drop)));
    }
    let unnamed = client.leader_election("");
    assert!(invalid(soon(unnamed.campaign("a")).await.map(drop)));
    assert!(invalid(soon(unnamed.leader()).await.map(drop)));
    let mut observer = unnamed.observe();
    assert!(invalid(
        soon(observer.next()).await.expect("one item").map(drop)
    ));
    assert!(soon(observer.next()).await.is_none(), "the stream ends");
    assert!(soon(observer.next()).await.is_none(), "and stays ended");
    assert!(futures_util::stream::FusedStream::is_terminated(&observer));
    // Refused before anything was sent: no subscription either.
    assert_eq!(client.subscriptions(), 0);
    assert_eq!(server.cmd(&["DBSIZE"]).as_int(), Some(0));
    settled(&client).await;
}

/// Other data under the name is refused, not read as a leader, and left
/// alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn other_data_under_the_name_is_refused() {
    let server = RedisServer::start();
    let client = client(&server, WATCHDOG).await;
    server.cmd(&["SET", "taken", "x"]);
    let election = client.leader_election("taken");
    let err = soon(election.campaign("a")).await.unwrap_err();
    assert!(matches!(err, Error::WrongType { .. }), "{err:?}");
    let err = soon(election.leader()).await.unwrap_err();
    assert!(matches!(err, Error::WrongType { .. }), "{err:?}");
    assert_eq!(
        server.cmd(&["GET", "taken"]).as_string().as_deref(),
        Some("x")
    );
    settled(&client).await;
}

/// Fenced writes: a token at least the fence writes and raises it (the
/// same token again too); a lower one is refused and changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fenced_hash_refuses_a_lower_token() {
    let server = RedisServer::start();
    let client = client(&server, WATCHDOG).await;
    let state = client.fenced_hash("{svc}:state");
    let read = soon(state.get("offset")).await.unwrap();
    assert_eq!((read.value, read.fence), (None, None));
    assert_eq!(
        soon(state.set("offset", "10", 5)).await.unwrap(),
        FencedWrite::Written
    );
    assert_eq!(
        soon(state.set("offset", "11", 5)).await.unwrap(),
        FencedWrite::Written
    );
    assert_eq!(
        soon(state.set("offset", "stale", 4)).await.unwrap(),
        FencedWrite::Refused { highest: 5 }
    );
    assert_eq!(
        soon(state.set("other", "stale", 1)).await.unwrap(),
        FencedWrite::Refused { highest: 5 }
    );
    assert_eq!(
        soon(state.set("other", "x", 7)).await.unwrap(),
        FencedWrite::Written
    );
    let read = soon(state.get("offset")).await.unwrap();
    assert_eq!((read.value.as_deref(), read.fence), (Some("11"), Some(7)));
    assert_eq!(
        server
            .cmd(&["GET", "ferrisson_fence:{svc}:state"])
            .as_string()
            .as_deref(),
        Some("7")
    );
    assert_eq!(
        server
            .cmd(&["HGET", "{svc}:state", "other"])
            .as_string()
            .as_deref(),
        Some("x")
    );
    assert_eq!(
        server
            .cmd(&["PTTL", "ferrisson_fence:{svc}:state"])
            .as_int(),
        Some(-1)
    );
}

/// A fenced write refused for bad input or other data under the key
/// writes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fenced_hash_refuses_bad_input_and_other_data() {
    let server = RedisServer::start();
    let client = client(&server, WATCHDOG).await;
    let invalid =
        |result: ferrisson::Result<FencedWrite>| matches!(result, Err(Error::InvalidArgument(_)));
    let state = client.fenced_hash("state");
    assert!(invalid(soon(state.set("f", "v", 0)).await));
    assert!(invalid(
        soon(state.set("f", "v", MAX_FENCE_TOKEN + 1)).await
    ));
    assert!(invalid(soon(client.fenced_hash("").set("f", "v", 1)).await));
    assert_eq!(server.cmd(&["DBSIZE"]).as_int(), Some(0));

    server.cmd(&["SET", "state", "mine"]);
    let err = soon(state.set("f", "v", 1)).await.unwrap_err();
    assert!(matches!(err, Error::WrongType { .. }), "{err:?}");
    server.cmd(&["DEL", "state"]);
    server.cmd(&["SET", "ferrisson_fence:{state}", "not a number"]);
    let err = soon(state.set("f", "v", 1)).await.unwrap_err();
    assert!(matches!(err, Error::WrongType { .. }), "{err:?}");
    let err = soon(state.get("f")).await.unwrap_err();
    assert!(matches!(err, Error::WrongType { .. }), "{err:?}");
    // A fence no double holds exactly (written by hand) is refused too,
    // rather than compared rounded.
    server.cmd(&["SET", "ferrisson_fence:{state}", "9007199254740993"]);
    let err = soon(state.set("f", "v", MAX_FENCE_TOKEN))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::WrongType { .. }), "{err:?}");
    server.cmd(&["SET", "ferrisson_fence:{state}", "not a number"]);
    assert!(!exists(&server, "state"));
    assert_eq!(
        server
            .cmd(&["GET", "ferrisson_fence:{state}"])
            .as_string()
            .as_deref(),
        Some("not a number")
    );
}

/// A leader stalled past its lease (its runtime's only thread blocked, as
/// in a long pause): another leads with a higher term and writes; the old
/// one, woken, knows it lost and its write is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_leaders_late_write_is_refused() {
    let server = RedisServer::start();
    let url = server.url();
    let (term_tx, term_rx) = std::sync::mpsc::channel();
    let (wake_tx, wake_rx) = std::sync::mpsc::channel::<()>();
    let stalled = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async move {
            let client = client_at(&url, WATCHDOG).await;
            let leadership = soon(client.leader_election("stalled").campaign("old"))
                .await
                .unwrap();
            term_tx.send(leadership.term()).unwrap();
            // The stall: nothing on this runtime runs, the watchdog neither.
            wake_rx.recv().unwrap();
            let lost = leadership.is_lost();
            let write = soon(client.fenced_hash("stalled:state").set(
                "owner",
                "old",
                leadership.term(),
            ))
            .await
            .unwrap();
            drop(leadership);
            settled(&client).await;
            (lost, write)
        })
    });
    let old_term = tokio::task::spawn_blocking(move || term_rx.recv().unwrap())
        .await
        .unwrap();
    let other = client(&server, WATCHDOG).await;
    let new = within(
        WATCHDOG * 5,
        other.leader_election("stalled").campaign("new"),
    )
    .await
    .unwrap();
    assert!(new.term() > old_term);
    assert_eq!(
        soon(
            other
                .fenced_hash("stalled:state")
                .set("owner", "new", new.term())
        )
        .await
        .unwrap(),
        FencedWrite::Written
    );
    wake_tx.send(()).unwrap();
    let (lost, write) = tokio::task::spawn_blocking(move || stalled.join().unwrap())
        .await
        .unwrap();
    assert!(
        lost,
        "the stalled leader knows it lost, first thing on waking"
    );
    assert_eq!(
        write,
        FencedWrite::Refused {
            highest: new.term()
        }
    );
    assert_eq!(
        server
            .cmd(&["HGET", "stalled:state", "owner"])
            .as_string()
            .as_deref(),
        Some("new")
    );
    soon(new.resign()).await.unwrap();
}

/// The announcements: a new leader's term after its campaign, `0` after a
/// resignation and after a dropped leadership's release, each sent once
/// the lock has changed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn campaigns_and_resignations_are_announced_after_the_change() {
    let server = RedisServer::start();
    let client = client(&server, WATCHDOG).await;
    let election = client.leader_election("announced");
    let channel = "ferrisson_election__channel:{announced}";

    let heard = next_message(RawSubscriber::new(&server, channel));
    let leadership = soon(election.campaign("a")).await.unwrap();
    let (on, message) = heard.await.expect("the campaign is announced");
    assert_eq!(
        (on.as_str(), message),
        (channel, leadership.term().to_string())
    );

    let heard = next_message(RawSubscriber::new(&server, channel));
    soon(leadership.resign()).await.unwrap();
    assert_eq!(heard.await.expect("the resignation is announced").1, "0");

    let mut subscriber = RawSubscriber::new(&server, channel);
    let leadership = soon(election.campaign("b")).await.unwrap();
    let term = leadership.term().to_string();
    subscriber = tokio::task::spawn_blocking(move || {
        let heard = subscriber.next_message(Duration::from_secs(10));
        assert_eq!(heard.expect("the campaign is announced").1, term);
        subscriber
    })
    .await
    .unwrap();
    drop(leadership);
    let heard = next_message(subscriber).await;
    assert_eq!(heard.expect("the dropped leadership is announced").1, "0");
    assert!(
        !exists(&server, "announced"),
        "announced before the release"
    );
    settled(&client).await;
}

/// A holder that announces nothing (a fenced lock, as a Redisson client's
/// `RFencedLock`) is seen by an observer's own reads: taken, and let go.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn observers_see_a_silent_holder_come_and_go() {
    let server = RedisServer::start();
    let client = client(&server, WATCHDOG).await;
    let mut observer = client.leader_election("silent").observe();
    assert_eq!(next(&mut observer).await, LeaderChange::NoLeader);
    let held = soon(client.fenced_lock("silent").lock()).await.unwrap();
    let seen = leader(next(&mut observer).await);
    assert_eq!((seen.term, seen.label), (Some(held.token()), None));
    soon(held.unlock()).await.unwrap();
    assert_eq!(next(&mut observer).await, LeaderChange::NoLeader);
}

/// A campaign on `client` that waits out a Redis coming back (its first
/// calls may meet the connection it lost), as a candidate's loop does;
/// returns the leadership and when it was granted.
async fn campaign_through_a_restart(
    client: &ferrisson::Client,
    label: &str,
) -> (ferrisson::Leadership, std::time::Instant) {
    within(Duration::from_secs(20), async {
        loop {
            match client.leader_election("restarted").campaign(label).await {
                Ok(leadership) => return (leadership, std::time::Instant::now()),
                // Not the grant under test: the next try, after a pause.
                Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
            }
        }
    })
    .await
}

/// A Redis without persistence restarts under a leader of term 4: its
/// lock and the term counter are gone. A rival elected at once still gets
/// a term above 4, so a resource fenced at 4 (here a fenced hash on
/// another server, which kept its data) takes the rival's writes and
/// refuses the old leader's late ones.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn terms_keep_rising_when_redis_comes_back_empty() {
    let mut server = RedisServer::start();
    let store = RedisServer::start();
    // Renewals are not under test here: a lease far above any stall.
    let lease = Duration::from_secs(30);
    let a = client(&server, lease).await;
    let b = client(&server, lease).await;
    let a_store = client(&store, lease).await.fenced_hash("state");
    let b_store = client(&store, lease).await.fenced_hash("state");
    let election = a.leader_election("restarted");
    for _ in 0..3 {
        let leadership = soon(election.campaign("a")).await.unwrap();
        soon(leadership.resign()).await.unwrap();
    }
    let old = soon(election.campaign("a")).await.unwrap();
    let old_term = old.term();
    assert!(old_term >= 4, "term {old_term}");
    assert_eq!(
        soon(a_store.set("owner", "a", old_term)).await.unwrap(),
        FencedWrite::Written
    );

    server.restart(); // no persistence: every key is gone
    let (new, _) = campaign_through_a_restart(&b, "b").await;
    assert!(
        new.term() > old_term,
        "the rival's term {} after the old leader's {old_term}",
        new.term()
    );
    println!(
        "Redis back empty: the rival's term {} after the old leader's {old_term}",
        new.term()
    );
    assert_eq!(
        soon(b_store.set("owner", "b", new.term())).await.unwrap(),
        FencedWrite::Written
    );
    assert_eq!(
        soon(a_store.set("owner", "a late", old_term))
            .await
            .unwrap(),
        FencedWrite::Refused {
            highest: new.term()
        }
    );
    drop(old);
    soon(new.resign()).await.unwrap();
}

/// The bound `Leadership::lost` keeps after Redis comes back empty: the
/// watchdog renews again a reconnection pause after a failed connection
/// (50 ms at most), so the old leader is told at most a pause and a few
/// round trips after Redis answers again, when a rival may be granted
/// too. Checked generously: ten pauses after the rival's grant.
const TOLD_AFTER_A_RIVAL: Duration = Duration::from_millis(500);

/// A Redis without persistence restarts under a leader, and a rival
/// campaigns at once: the old leader's `lost()` resolves when the rival
/// is granted, or within the documented bound after (not at a renewal
/// retry a second later, nor at its next renewal a third of the lease
/// later).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_old_leader_is_told_of_an_empty_restart_when_a_rival_leads() {
    let mut server = RedisServer::start();
    // The default lease: renewals every 10 s, retries every second.
    let lease = Duration::from_secs(30);
    let a = client(&server, lease).await;
    let b = client(&server, lease).await;
    let old = soon(a.leader_election("restarted").campaign("a"))
        .await
        .unwrap();
    let old = Arc::new(old);
    let told = tokio::spawn({
        let old = Arc::clone(&old);
        async move {
            old.lost().await;
            std::time::Instant::now()
        }
    });

    // Redis down for a moment, longer than the clients' first attempts to
    // reconnect (about 200 ms), then back without its data.
    server.stop();
    tokio::time::sleep(Duration::from_millis(400)).await;
    server.restart(); // no persistence: every key is gone
    let back = std::time::Instant::now();
    let (new, granted) = campaign_through_a_restart(&b, "b").await;
    let told = within(lease, told).await.unwrap();
    println!(
        "Redis answering again: the rival granted after {:?}, the old leader told after {:?} \
         (lease {lease:?})",
        granted - back,
        told.saturating_duration_since(back),
    );
    assert!(
        told <= granted + TOLD_AFTER_A_RIVAL,
        "the old leader was told {:?} after the rival's grant",
        told - granted
    );
    soon(new.resign()).await.unwrap();
}

/// A bad election name is refused as the election's, not its lock's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_election_name_says_election() {
    let server = RedisServer::start();
    let client = client(&server, WATCHDOG).await;
    let err = soon(client.leader_election("").campaign("pod-a"))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(_)), "{err:?}");
    assert!(
        err.to_string().contains("election name must not be empty"),
        "{err}"
    );
    let long = "e".repeat(ferrisson::config::MAX_NAME_LEN + 1);
    let err = soon(client.leader_election(long).leader())
        .await
        .unwrap_err();
    assert!(err.to_string().contains("election name is"), "{err}");
    assert_eq!(server.cmd(&["DBSIZE"]).as_int(), Some(0));
}

/// A campaign on a key that holds other data names the election and the
/// key, and leaves the data as it is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_campaign_on_other_data_names_the_election() {
    let server = RedisServer::start();
    let client = client(&server, WATCHDOG).await;
    server.cmd(&["SET", "billing:leader", "someone else's"]);
    let election = client.leader_election("billing:leader");
    for err in [
        soon(election.campaign("pod-a")).await.unwrap_err(),
        soon(election.try_campaign("pod-a")).await.unwrap_err(),
        soon(election.leader()).await.unwrap_err(),
    ] {
        assert!(matches!(err, Error::WrongType { .. }), "{err:?}");
        assert_eq!(
            err.to_string(),
            "key `billing:leader` holds a string, not a leader election (a fenced lock)"
        );
    }
    assert_eq!(
        server
            .cmd(&["GET", "billing:leader"])
            .as_string()
            .as_deref(),
        Some("someone else's")
    );
}

/// A fenced hash's value another program wrote that is not UTF-8: `get`
/// says so, names the hash and the field and points to `get_bytes`, which
/// reads it; `set_bytes` stores bytes as given.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fenced_hash_takes_bytes_and_says_when_a_value_is_no_text() {
    let server = RedisServer::start();
    let client = client(&server, WATCHDOG).await;
    let raw = redis::Client::open(server.url()).unwrap();
    let mut raw = soon(raw.get_multiplexed_async_connection()).await.unwrap();
    let bytes: &[u8] = &[0xff, 0x00, 0xfe, b'\n', 0x80];
    let _: i64 = soon(
        redis::cmd("HSET")
            .arg("blobs")
            .arg("f")
            .arg(bytes)
            .query_async(&mut raw),
    )
    .await
    .unwrap();
    let state = client.fenced_hash("blobs");
    let err = soon(state.get("f")).await.unwrap_err();
    assert!(matches!(err, Error::NotUtf8 { .. }), "{err:?}");
    assert_eq!(
        err.to_string(),
        "field `f` of fenced hash `blobs` is not UTF-8 text; read it with `FencedHash::get_bytes`"
    );
    let read = soon(state.get_bytes("f")).await.unwrap();
    assert_eq!(read.value.as_deref(), Some(bytes));
    assert_eq!(read.fence, None);

    // Written with a token, read back the same, bytes for bytes.
    let written: Vec<u8> = (0..=255).collect();
    assert_eq!(
        soon(state.set_bytes("g", &written, 7)).await.unwrap(),
        FencedWrite::Written
    );
    let stored: Vec<u8> = soon(
        redis::cmd("HGET")
            .arg("blobs")
            .arg("g")
            .query_async(&mut raw),
    )
    .await
    .unwrap();
    assert_eq!(stored, written);
    let read = soon(state.get_bytes("g")).await.unwrap();
    assert_eq!(read.value, Some(written));
    assert_eq!(read.fence, Some(7));
    assert_eq!(
        soon(state.set_bytes("g", b"late", 6)).await.unwrap(),
        FencedWrite::Refused { highest: 7 }
    );
    // Text still reads as text.
    assert_eq!(
        soon(state.set("h", "text", 7)).await.unwrap(),
        FencedWrite::Written
    );
    assert_eq!(
        soon(state.get("h")).await.unwrap().value.as_deref(),
        Some("text")
    );
}
