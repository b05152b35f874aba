//! The lean protocol (`ClientBuilder::lean`, on by default for one
//! server): an owner that holds nothing
//! takes and releases its one hold with scripts that write no latch key,
//! on Redisson's layout; a lost lean send is settled past its deadline,
//! and a lost reply keeps only its owner's calls of that lock latched, while
//! the lost send may run; a caller that leaves leaves no hold behind.

use ferrisson_test_support as common;

use std::time::Duration;

use common::proxy::Proxy;
use common::{eventually, runtime, soon, within, RedisServer};
use ferrisson::{Client, Error, Lock};

const WATCHDOG: Duration = Duration::from_secs(3);

async fn lean_client(url: &str, timeouts: Duration) -> Client {
    soon(
        Client::builder(url)
            .watchdog_timeout(WATCHDOG)
            .response_timeout(timeouts)
            .connection_timeout(timeouts)
            .lean(true)
            .build(),
    )
    .await
    .unwrap()
}

fn keys(server: &RedisServer) -> Vec<String> {
    let mut keys: Vec<String> = server
        .cmd(&["KEYS", "*"])
        .as_array()
        .unwrap()
        .iter()
        .map(|key| key.as_string().unwrap())
        .collect();
    keys.sort();
    keys
}

fn lean_acquire() -> redis::Script {
    redis::Script::new(include_str!("../lua/lean_acquire.lua"))
}

fn lean_release() -> redis::Script {
    redis::Script::new(include_str!("../lua/lean_release.lua"))
}

/// Loads the lean scripts, so that the next command of a lock is its
/// script.
async fn warm_up(client: &Client) {
    let guard = soon(client.lock("warm-up").lock()).await.unwrap();
    soon(guard.unlock()).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lean_hold_is_redissons_hash_and_leaves_no_key_behind() {
    let server = RedisServer::start();
    let client = lean_client(&server.url(), Duration::from_secs(3)).await;
    let lock = client.lock("lean:layout");
    let guard = soon(lock.lock()).await.unwrap();
    assert_eq!(
        keys(&server),
        ["lean:layout"],
        "no latch key beside the hash"
    );
    let field = guard.field().to_owned();
    let count = server.cmd(&["HGET", "lean:layout", &field]).as_string();
    assert_eq!(count.as_deref(), Some("1"));
    let pttl = server.cmd(&["PTTL", "lean:layout"]).as_int().unwrap();
    assert!(pttl > 0 && pttl <= WATCHDOG.as_millis() as i64, "{pttl}");
    let unlocked = common::RawSubscriber::new(&server, "redisson_lock__channel:{lean:layout}");
    soon(guard.unlock()).await.unwrap();
    assert_eq!(
        common::next_message(unlocked).await,
        Some(("redisson_lock__channel:{lean:layout}".into(), "0".into()))
    );
    assert!(keys(&server).is_empty(), "{:?}", keys(&server));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reentered_lean_hold_counts_and_releases_as_redissons() {
    let server = RedisServer::start();
    let client = lean_client(&server.url(), Duration::from_secs(3)).await;
    let lock = client.lock("lean:reentry");
    let outer = soon(lock.lock()).await.unwrap();
    let inner = soon(lock.lock()).await.unwrap();
    let field = outer.field().to_owned();
    let count = |server: &RedisServer| server.cmd(&["HGET", "lean:reentry", &field]).as_string();
    assert_eq!(count(&server).as_deref(), Some("2"));
    soon(inner.unlock()).await.unwrap();
    assert_eq!(count(&server).as_deref(), Some("1"));
    soon(outer.unlock()).await.unwrap();
    assert!(!common::exists(&server, "lean:reentry"));
    // And the other way round: the outer hold released first.
    let outer = soon(lock.lock()).await.unwrap();
    let inner = soon(lock.lock()).await.unwrap();
    soon(outer.unlock()).await.unwrap();
    assert_eq!(count(&server).as_deref(), Some("1"));
    soon(inner.unlock()).await.unwrap();
    assert!(!common::exists(&server, "lean:reentry"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lean_and_latched_clients_exclude_each_other() {
    let server = RedisServer::start();
    let lean = lean_client(&server.url(), Duration::from_secs(3)).await;
    let latched = soon(
        Client::builder(server.url())
            .watchdog_timeout(WATCHDOG)
            .lean(false)
            .build(),
    )
    .await
    .unwrap();
    let locks = vec![
        lean.lock("lean:mixed"),
        lean.lock("lean:mixed"),
        latched.lock("lean:mixed"),
        latched.lock("lean:mixed"),
    ];
    let count = common::count_under_lock(&server, locks, 50, "lean:mixed:count").await;
    assert_eq!(count, 200);
    let spins = vec![lean.spin_lock("lean:spin"), latched.spin_lock("lean:spin")];
    let count = common::count_under_lock(&server, spins, 30, "lean:spin:count").await;
    assert_eq!(count, 60);
    assert!(!common::exists(&server, "lean:mixed"));
    assert!(!common::exists(&server, "lean:spin"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_owners_two_calls_at_once_hold_twice_and_release_once_each() {
    let server = RedisServer::start();
    let client = lean_client(&server.url(), Duration::from_secs(3)).await;
    let lock = client.lock("lean:join").with_owner("one");
    for _ in 0..20 {
        let (a, b) = soon(async { tokio::join!(lock.lock(), lock.lock()) }).await;
        let (a, b) = (a.unwrap(), b.unwrap());
        let field = a.field().to_owned();
        let count = server.cmd(&["HGET", "lean:join", &field]).as_string();
        assert_eq!(count.as_deref(), Some("2"));
        let (ra, rb) = soon(async { tokio::join!(a.unlock(), b.unlock()) }).await;
        ra.unwrap();
        rb.unwrap();
        assert!(!common::exists(&server, "lean:join"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_lean_acquire_is_settled_and_the_owner_goes_lean_again() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    let timeouts = Duration::from_secs(1);
    let client = lean_client(&proxy.url(), timeouts).await;
    warm_up(&client).await;
    let unlocked = common::RawSubscriber::new(&server, "redisson_lock__channel:{lean:lost}");
    proxy.lose_next_reply_to(lean_acquire().get_hash());
    let lock = client.lock("lean:lost").with_owner("o");
    // The lost send took the lock; the settle, past its deadline, lets it
    // go (the message says so), and the wait then takes it.
    let guard = within(Duration::from_secs(20), lock.lock()).await.unwrap();
    assert_eq!(proxy.lost_replies(), 1);
    assert_eq!(
        common::next_message(unlocked).await,
        Some(("redisson_lock__channel:{lean:lost}".into(), "0".into())),
        "the settle released what the lost send took"
    );
    let field = guard.field().to_owned();
    let count = server.cmd(&["HGET", "lean:lost", &field]).as_string();
    assert_eq!(count.as_deref(), Some("1"), "one hold, not two");
    soon(guard.unlock()).await.unwrap();
    assert!(!common::exists(&server, "lean:lost"));
    // Settled, the lost send can do nothing more: the owner's next hold
    // goes lean.
    assert!(!goes_latched(&proxy, &lock).await, "lean again");
}

/// Whether `lock`'s next `lock()` sends the latched acquire: the reply to
/// the next call of `acquire.lua` (loaded before: its SHA1 is what is
/// sent) is held until seen (a lean acquire ends first). Nothing else may
/// send an acquire meanwhile. Unlocks what it took.
async fn goes_latched(proxy: &Proxy, lock: &Lock) -> bool {
    let held = proxy.held_replies();
    let latched_acquire = redis::Script::new(include_str!("../lua/acquire.lua"));
    proxy.hold_next_reply_to(latched_acquire.get_hash());
    let locking = tokio::spawn({
        let lock = lock.clone();
        async move { lock.lock().await }
    });
    let mut latched = false;
    eventually(Duration::from_secs(20), || {
        latched = proxy.held_replies() > held;
        let done = latched || locking.is_finished();
        async move { done }
    })
    .await;
    proxy.release_held();
    let guard = soon(locking).await.unwrap().unwrap();
    soon(guard.unlock()).await.unwrap();
    latched
}

/// A latched acquire whose replies were all lost is settled in the
/// background, and what it took given back: until then its owner's calls
/// of that lock go latched (a lean acquire would take the lost grant's hold
/// as its own, and the give-back then take it away). The settle's first
/// reply is held, so that the owner's next acquire meets it unsettled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_latched_acquire_keeps_its_owner_latched_until_settled() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    let client = lean_client(&proxy.url(), Duration::from_secs(1)).await;
    warm_up(&client).await;
    // Loads the latched acquire's script.
    let loads = soon(client.lock("lean:loads").try_lock()).await.unwrap();
    soon(loads.expect("a free lock").unlock()).await.unwrap();
    let lock = client.lock("lean:busy").with_owner("o");
    proxy.lose_next_reply_to_then_refuse("ferrisson_acquire_latch:{lean:busy}");
    assert!(soon(lock.try_lock()).await.is_err(), "no reply got through");
    assert_eq!(proxy.lost_replies(), 1);
    let field = format!("{}:o", client.id());
    let count = || server.cmd(&["HGET", "lean:busy", &field]).as_string();
    assert_eq!(count().as_deref(), Some("1"), "the lost send took the lock");
    let cancel = redis::Script::new(include_str!("../lua/acquire_cancel.lua"));
    let held = proxy.held_replies();
    proxy.hold_next_reply_to(cancel.get_hash());
    proxy.refuse(false);
    eventually(Duration::from_secs(20), || {
        let seen = proxy.held_replies() > held;
        async move { seen }
    })
    .await;
    // Unsettled: the owner's acquire is latched, and counts a second hold.
    let locking = tokio::spawn({
        let lock = lock.clone();
        async move { lock.lock().await }
    });
    eventually(Duration::from_secs(20), || {
        let two = count().as_deref() == Some("2");
        async move { two }
    })
    .await;
    proxy.release_held();
    let guard = soon(locking).await.unwrap().unwrap();
    // The give-back takes the lost grant's hold, and the guard's stands.
    eventually(Duration::from_secs(20), || {
        let one = count().as_deref() == Some("1");
        async move { one }
    })
    .await;
    soon(guard.unlock()).await.unwrap();
    assert!(!common::exists(&server, "lean:busy"));
}

/// A latched release whose reply was lost, and that ended with no latch
/// written by a send that got through, may still run while its unlock
/// latch would last: until then its owner's calls of that lock go latched
/// (a lean acquire would take the hold the late release then deletes),
/// and no other owner's, nor the owner's calls of other locks. Then the
/// owner goes lean again. A resend that got through wrote the latch, which
/// every late send meets: the owner goes lean at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_latched_release_keeps_its_owner_latched_on_that_lock_while_it_may_run() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    let client = lean_client(&proxy.url(), Duration::from_secs(1)).await;
    warm_up(&client).await;
    let lock = client.lock("lean:quiet").with_owner("o");
    // A call with a time limit sends the latched acquire, and its hold's
    // release is latched too.
    let guard = soon(lock.try_lock()).await.unwrap().expect("a free lock");
    proxy.lose_next_reply_to("redisson_unlock_latch:{lean:quiet}");
    soon(guard.unlock()).await.unwrap();
    assert_eq!(proxy.lost_replies(), 1);
    assert!(!goes_latched(&proxy, &lock).await, "resent and answered");
    // Every reply lost: the unlock fails, and its sends may still run.
    let guard = soon(lock.try_lock()).await.unwrap().expect("a free lock");
    proxy.lose_next_reply_to_then_refuse("redisson_unlock_latch:{lean:quiet}");
    assert!(soon(guard.unlock()).await.is_err(), "no reply got through");
    assert_eq!(proxy.lost_replies(), 2);
    proxy.refuse(false);
    assert!(!common::exists(&server, "lean:quiet"));
    assert!(goes_latched(&proxy, &lock).await, "the owner on that lock");
    let other_owner = client.lock("lean:quiet").with_owner("p");
    assert!(!goes_latched(&proxy, &other_owner).await, "another owner");
    let other_lock = client.lock("lean:quiet:other").with_owner("o");
    assert!(!goes_latched(&proxy, &other_lock).await, "another lock");
    // The unlock latch's TTL (the release's resend window, 7.5 s with these
    // timeouts) and a drift margin: lean again after it, not for good
    // latched.
    eventually(Duration::from_secs(60), || {
        let (lock, proxy) = (lock.clone(), &proxy);
        async move { !goes_latched(proxy, &lock).await }
    })
    .await;
    assert!(!common::exists(&server, "lean:quiet"));
}

/// A lost reply holds back lean calls only when the lost send wrote the
/// hash a lean call writes: a semaphore acquire and a write lock's release
/// whose replies are lost (resent, and answered once) leave the client's
/// locks lean.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_semaphores_or_read_write_locks_lost_reply_leaves_the_locks_lean() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    let client = lean_client(&proxy.url(), Duration::from_secs(1)).await;
    warm_up(&client).await;
    let semaphore = client.semaphore("lean:sem");
    assert!(soon(semaphore.try_set_permits(2)).await.unwrap());
    // Loads its script, so that the next acquire is the script itself.
    assert!(soon(semaphore.try_acquire()).await.unwrap());
    proxy.lose_next_reply_to("lean:sem");
    assert!(soon(semaphore.try_acquire()).await.unwrap());
    assert_eq!(proxy.lost_replies(), 1);
    assert_eq!(soon(semaphore.available_permits()).await.unwrap(), 0);
    soon(semaphore.release_many(2)).await.unwrap();
    let write = client.read_write_lock("lean:rw").write();
    // Loads the write lock's scripts.
    soon(soon(write.lock()).await.unwrap().unlock())
        .await
        .unwrap();
    let guard = soon(write.lock()).await.unwrap();
    proxy.lose_next_reply_to("lean:rw");
    soon(guard.unlock()).await.unwrap();
    assert_eq!(proxy.lost_replies(), 2);
    assert!(!common::exists(&server, "lean:rw"));
    // Still lean: the next hold writes no acquire latch.
    let guard = soon(client.lock("lean:after-sem").lock()).await.unwrap();
    let latches: Vec<String> = keys(&server)
        .into_iter()
        .filter(|key| key.starts_with("ferrisson_acquire_latch:") && key.contains("after-sem"))
        .collect();
    assert_eq!(latches, Vec::<String>::new(), "the lock went latched");
    soon(guard.unlock()).await.unwrap();
    assert!(!common::exists(&server, "lean:after-sem"));
}

/// Whatever call sent it (`lock()`, with a lease or not, the spin lock's),
/// a lean acquire whose reply is lost is settled and sent again as the
/// latched acquire: the call gets the lock, with one hold.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_lean_acquire_is_sent_again_latched() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    let timeouts = Duration::from_secs(1);
    for case in ["lock_with_lease", "spin lock"] {
        // A client of its own each.
        let client = lean_client(&proxy.url(), timeouts).await;
        warm_up(&client).await;
        let name = format!("lean:again:{case}");
        let lost = proxy.lost_replies();
        proxy.lose_next_reply_to(lean_acquire().get_hash());
        let limit = Duration::from_secs(20);
        let guard = match case {
            "lock_with_lease" => {
                within(
                    limit,
                    client.lock(&name).lock_with_lease(Duration::from_secs(60)),
                )
                .await
            }
            _ => within(limit, client.spin_lock(&name).lock()).await,
        };
        let guard = guard.unwrap_or_else(|e| panic!("{case}: {e}"));
        assert_eq!(proxy.lost_replies(), lost + 1, "{case}: no reply was lost");
        let count = server.cmd(&["HGET", &name, guard.field()]).as_string();
        assert_eq!(count.as_deref(), Some("1"), "{case}: one hold, not two");
        soon(guard.unlock()).await.unwrap();
        assert!(!common::exists(&server, &name), "{case}");
    }
}

/// A leaked hold stands with no guard to count it: the owner's next
/// acquire goes latched and counts a second hold (a lean one would take
/// the hold as its own and count none). Once the leaked hold has surely
/// ended, the owner goes lean again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leaked_hold_keeps_its_owner_latched_until_it_has_ended() {
    let server = RedisServer::start();
    let client = lean_client(&server.url(), Duration::from_secs(1)).await;
    let lock = client.lock("lean:leaked").with_owner("o");
    let leaked = soon(lock.lock()).await.unwrap();
    let field = leaked.field().to_owned();
    leaked.leak();
    let guard = soon(lock.lock()).await.unwrap();
    let count = server.cmd(&["HGET", "lean:leaked", &field]).as_string();
    assert_eq!(count.as_deref(), Some("2"), "the leaked hold and this one");
    soon(guard.unlock()).await.unwrap();
    soon(lock.unlock()).await.unwrap();

    // A leaked hold with a lease: once it has ended, lean again.
    let lock = client.lock("lean:leaked:ends").with_owner("o");
    let lease = Duration::from_millis(500);
    let leaked = soon(lock.lock_with_lease(lease)).await.unwrap();
    // By this clock the hold may stand until its lease's end counted from
    // its send, plus the time its reply took and a few ms of Redis's
    // expiry: surely by a second lease from now.
    let ended = tokio::time::Instant::now() + lease * 2;
    leaked.leak();
    eventually(Duration::from_secs(10), || async {
        keys(&server).is_empty()
    })
    .await;
    tokio::time::sleep_until(ended).await;
    let guard = soon(lock.lock()).await.unwrap();
    assert_eq!(
        keys(&server),
        ["lean:leaked:ends"],
        "lean again: no latch key"
    );
    soon(guard.unlock()).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_lean_release_is_settled_before_the_unlock_returns() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    let client = lean_client(&proxy.url(), Duration::from_secs(1)).await;
    warm_up(&client).await;
    let lock = client.lock("lean:lost-release");
    let guard = soon(lock.lock()).await.unwrap();
    proxy.lose_next_reply_to(lean_release().get_hash());
    within(Duration::from_secs(20), guard.unlock())
        .await
        .unwrap();
    assert_eq!(proxy.lost_replies(), 1);
    assert!(!common::exists(&server, "lean:lost-release"));
    let guard = soon(lock.lock()).await.unwrap();
    soon(guard.unlock()).await.unwrap();
    assert!(!common::exists(&server, "lean:lost-release"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caller_that_leaves_its_lean_acquire_leaves_no_hold() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    let client = lean_client(&proxy.url(), Duration::from_secs(3)).await;
    warm_up(&client).await;
    let unlocked = common::RawSubscriber::new(&server, "redisson_lock__channel:{lean:left}");
    proxy.hold_next_reply_to(lean_acquire().get_hash());
    let lock = client.lock("lean:left").with_owner("left");
    let wait = tokio::spawn(async move { lock.lock().await.map(|_guard| ()) });
    eventually(Duration::from_secs(10), || async {
        proxy.held_replies() == 1
    })
    .await;
    wait.abort();
    assert!(wait.await.unwrap_err().is_cancelled());
    proxy.release_held();
    assert_eq!(
        common::next_message(unlocked).await,
        Some(("redisson_lock__channel:{lean:left}".into(), "0".into())),
        "the hold the caller left was not released"
    );
    assert!(!common::exists(&server, "lean:left"));
    // The owner takes it again.
    let lock = client.lock("lean:left").with_owner("left");
    let guard = soon(lock.lock()).await.unwrap();
    soon(guard.unlock()).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lean_is_refused_with_replica_sync() {
    let server = RedisServer::start();
    let built = Client::builder(server.url())
        .lean(true)
        .replica_sync_with(Some(ferrisson::config::ReplicaSync::REDISSON))
        .build()
        .await;
    assert!(matches!(built, Err(Error::InvalidArgument(_))), "{built:?}");
}

/// A client of one server sends the lean protocol by default, where the
/// call can wait for a lost reply's settle: `lock()` goes lean, a
/// `try_lock()` or `try_lock_for()` sends the latched acquire (resent on a
/// lost reply within its time). `lean(false)`, and replica sync unless `lean(true)` is asked
/// for (refused, above), send the latched protocol only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_server_goes_lean_by_default_where_a_call_waits_as_long_as_it_takes() {
    let server = RedisServer::start();
    // Whether the server has run `script` (the client loads a script with
    // its first call; none is loaded before).
    let sent = |script: &redis::Script| {
        let exists = server.cmd(&["SCRIPT", "EXISTS", script.get_hash()]);
        exists.as_array().unwrap()[0].as_int() == Some(1)
    };
    let client = soon(Client::builder(server.url()).build()).await.unwrap();
    assert!(client.config().lean);
    let lock = client.lock("default:lean");
    let guard = soon(lock.try_lock()).await.unwrap().expect("free");
    soon(guard.unlock()).await.unwrap();
    let long = Duration::from_secs(60);
    let guard = soon(lock.try_lock_for(long)).await.unwrap().expect("free");
    soon(guard.unlock()).await.unwrap();
    assert!(!sent(&lean_acquire()), "a call with a time limit went lean");
    // That pair's latches are deleted a moment later.
    eventually(Duration::from_secs(10), || async {
        keys(&server).is_empty()
    })
    .await;
    let guard = soon(lock.lock()).await.unwrap();
    assert!(sent(&lean_acquire()), "lock() sent the latched acquire");
    assert_eq!(keys(&server), ["default:lean"], "no latch key beside it");
    soon(guard.unlock()).await.unwrap();
    assert!(sent(&lean_release()));
    assert!(keys(&server).is_empty(), "{:?}", keys(&server));

    server.cmd(&["SCRIPT", "FLUSH"]);
    let latched = soon(Client::builder(server.url()).lean(false).build())
        .await
        .unwrap();
    assert!(!latched.config().lean);
    let guard = soon(latched.lock("default:latched").lock()).await.unwrap();
    soon(guard.unlock()).await.unwrap();
    assert!(!sent(&lean_acquire()) && !sent(&lean_release()));
    let synced = soon(
        Client::builder(server.url())
            .replica_sync_with(Some(ferrisson::config::ReplicaSync::REDISSON))
            .build(),
    )
    .await
    .unwrap();
    assert!(!synced.config().lean, "replica sync goes by the latch");
}

#[cfg(feature = "cluster")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lean_is_refused_for_a_cluster_before_it_connects() {
    // Nothing listens there: the refusal comes first.
    let built = Client::cluster_builder(["redis://127.0.0.1:1"])
        .lean(true)
        .build()
        .await;
    assert!(
        matches!(&built, Err(Error::InvalidArgument(what)) if what.contains("one server")),
        "{built:?}"
    );
}

/// A lean hold kept by a spawned task when the program's runtime ends is
/// released by then, and a lean guard that outlives its runtime is
/// released when it is dropped: nothing is left behind.
#[test]
fn lean_holds_are_released_when_the_program_returns() {
    let server = RedisServer::start();
    for multi_thread in [false, true] {
        let rt = runtime(multi_thread);
        let kept = rt.block_on(async {
            let client = lean_client(&server.url(), Duration::from_secs(3)).await;
            let lock = client.lock("lean:exit:task");
            let (held_tx, held) = tokio::sync::oneshot::channel();
            tokio::spawn(async move {
                let _guard = lock.lock().await.unwrap();
                held_tx.send(()).unwrap();
                std::future::pending::<()>().await;
            });
            soon(held).await.unwrap();
            soon(client.lock("lean:exit:after").lock()).await.unwrap()
        });
        assert!(common::exists(&server, "lean:exit:task"));
        drop(rt);
        let at = format!("multi_thread: {multi_thread}");
        assert!(!common::exists(&server, "lean:exit:task"), "{at}");
        assert!(common::exists(&server, "lean:exit:after"), "{at}");
        drop(kept);
        assert!(!common::exists(&server, "lean:exit:after"), "{at}");
        assert!(server.keys("*").is_empty(), "{at}: {:?}", server.keys("*"));
    }
}
