//! RedLock over five spawned `redis-server`s: it holds with two of them
//! killed, refuses with three killed, and never has two holders at once.

use ferrisson_test_support as common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::proxy::Proxy;
use common::{exists, settled, soon, within, RedisServer};
use ferrisson::{Client, DistributedLock, Error, RedLock};

const WATCHDOG: Duration = Duration::from_millis(1500);

/// One client per server, with short timeouts: a dead server must fail
/// fast, not hold up a round.
async fn connect_all(servers: &[RedisServer]) -> Vec<Client> {
    let mut clients = Vec::new();
    for server in servers {
        clients.push(
            soon(
                Client::builder(server.url())
                    .watchdog_timeout(WATCHDOG)
                    .response_timeout(Duration::from_millis(300))
                    .connection_timeout(Duration::from_millis(300))
                    .build(),
            )
            .await
            .expect("connect"),
        );
    }
    clients
}

fn redlock(clients: &[Client], name: &str) -> RedLock {
    RedLock::new(
        clients
            .iter()
            .map(|c| Box::new(c.lock(name)) as Box<dyn DistributedLock>)
            .collect(),
    )
}

fn holders(servers: &[RedisServer], name: &str) -> usize {
    servers.iter().filter(|s| exists(s, name)).count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holds_with_two_servers_killed_refuses_with_three() {
    let mut servers: Vec<RedisServer> = (0..5).map(|_| RedisServer::start()).collect();
    let clients = connect_all(&servers).await;
    let lock = redlock(&clients, "report");
    assert_eq!(lock.quorum(), 3);
    let lease = Duration::from_secs(10);

    let guard = soon(lock.lock_with_lease(lease)).await.unwrap();
    // All five, unless one answered later than the grace the round gives
    // after the majority (a loaded machine): that one is given back.
    assert!(guard.held() >= lock.quorum(), "{}", guard.held());
    let validity = guard.validity().unwrap();
    assert!(validity <= lease && validity > lease / 2, "{validity:?}");
    guard.unlock().await.unwrap();
    common::eventually(Duration::from_secs(10), || async {
        holders(&servers, "report") == 0
    })
    .await;

    servers[0].stop();
    servers[1].stop();
    let started = Instant::now();
    let guard = soon(lock.try_lock_with_lease(Duration::from_secs(5), lease))
        .await
        .unwrap()
        .expect("three of five make a majority");
    println!(
        "with 2 of 5 servers down: held on {} in {:?}",
        guard.held(),
        started.elapsed()
    );
    assert_eq!(guard.held(), 3);
    assert_eq!(holders(&servers[2..], "report"), 3);
    assert!(!guard.is_lease_lost());
    guard.unlock().await.unwrap();
    assert_eq!(holders(&servers[2..], "report"), 0);

    // Watchdog mode too.
    let guard = soon(lock.lock()).await.unwrap();
    assert_eq!(guard.validity(), None);
    guard.unlock().await.unwrap();

    servers[2].stop();
    let started = Instant::now();
    let refused = soon(lock.try_lock_with_lease(Duration::from_secs(1), lease))
        .await
        .unwrap();
    println!(
        "with 3 of 5 servers down: refused after {:?}",
        started.elapsed()
    );
    assert!(refused.is_none(), "two of five are not a majority");
    // The minority taken is released: within the wait's margin, or, on a
    // busy machine, in the background right after.
    let released = || async { holders(&servers[3..], "report") == 0 };
    common::eventually(Duration::from_secs(10), released).await;
    assert!(soon(lock.try_lock()).await.unwrap().is_none());
    common::eventually(Duration::from_secs(10), released).await;
}

/// Three contenders, each with its own five clients, fight over one
/// RedLock while a server is killed half way: never two holders at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn never_two_holders() {
    let mut servers: Vec<RedisServer> = (0..5).map(|_| RedisServer::start()).collect();
    let inside = Arc::new(AtomicUsize::new(0));
    let overlaps = Arc::new(AtomicUsize::new(0));
    let acquired = Arc::new(AtomicUsize::new(0));
    const CONTENDERS: usize = 3;
    const ROUNDS: usize = 30;
    let mut tasks = Vec::new();
    let mut all_clients = Vec::new();
    for _ in 0..CONTENDERS {
        let clients = connect_all(&servers).await;
        let lock = redlock(&clients, "job");
        all_clients.push(clients);
        let (inside, overlaps, acquired) = (
            Arc::clone(&inside),
            Arc::clone(&overlaps),
            Arc::clone(&acquired),
        );
        tasks.push(tokio::spawn(async move {
            for round in 0..ROUNDS {
                let guard = if round % 2 == 0 {
                    lock.lock_with_lease(Duration::from_secs(10)).await.unwrap()
                } else {
                    lock.lock().await.unwrap()
                };
                acquired.fetch_add(1, Ordering::SeqCst);
                if inside.fetch_add(1, Ordering::SeqCst) != 0 {
                    overlaps.fetch_add(1, Ordering::SeqCst);
                }
                tokio::time::sleep(Duration::from_millis(1)).await;
                inside.fetch_sub(1, Ordering::SeqCst);
                // Held on a bare majority that includes the server killed
                // meanwhile, fewer than a majority can be released: an error
                // by the contract (those holds end with their lease), and
                // only then.
                if let Err(err) = guard.unlock().await {
                    assert!(err.is_connection_error(), "{err}");
                }
            }
        }));
    }
    let started = Instant::now();
    // Half way, one server dies.
    common::eventually(Duration::from_secs(60), || async {
        acquired.load(Ordering::SeqCst) >= CONTENDERS * ROUNDS / 2
    })
    .await;
    servers[4].stop();
    for task in tasks {
        within(Duration::from_secs(120), task).await.unwrap();
    }
    println!(
        "{} RedLock acquisitions by {CONTENDERS} contenders in {:?}, a server killed half way; overlaps {}",
        acquired.load(Ordering::SeqCst),
        started.elapsed(),
        overlaps.load(Ordering::SeqCst)
    );
    assert_eq!(overlaps.load(Ordering::SeqCst), 0);
    // A winning round drops the attempts still running after its grace;
    // those give back in the background.
    common::eventually(Duration::from_secs(10), || async {
        holders(&servers[..4], "job") == 0
    })
    .await;
    for clients in &all_clients {
        for client in &clients[..4] {
            settled(client).await;
        }
    }
}

/// Errors that are not about reaching a server fail the call; an empty
/// RedLock is refused; a majority held elsewhere refuses.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_and_contention() {
    let servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    // Roomy attempt bounds (500 ms): an attempt over its bound is given
    // back in the background, outside the promise checked below.
    let mut clients = Vec::new();
    for server in &servers {
        clients.push(roomy_client(server.url()).await);
    }
    assert!(matches!(
        RedLock::new(vec![]).try_lock().await,
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        redlock(&clients, "").try_lock().await,
        Err(Error::InvalidArgument(_))
    ));
    // On two of three, so that the round cannot end with a majority before
    // both refusals are in.
    servers[1].cmd(&["SET", "typed", "x"]);
    servers[2].cmd(&["SET", "typed", "x"]);
    assert!(matches!(
        redlock(&clients, "typed").try_lock().await,
        Err(Error::WrongType { .. })
    ));
    assert_eq!(
        holders(&servers, "typed"),
        2,
        "only the foreign keys are left"
    );
    // Two of three held by someone else: refused; one of three: granted.
    let other = connect_all(&servers).await;
    let a = other[0].lock("shared").lock().await.unwrap();
    let b = other[1].lock("shared").lock().await.unwrap();
    let lock = redlock(&clients, "shared");
    assert!(lock.try_lock().await.unwrap().is_none());
    assert_eq!(holders(&servers, "shared"), 2);
    b.unlock().await.unwrap();
    let guard = lock.try_lock().await.unwrap().expect("two of three");
    assert_eq!(guard.held(), 2);
    guard.unlock().await.unwrap();
    a.unlock().await.unwrap();
    assert_eq!(holders(&servers, "shared"), 0);
}

/// RedLock acquires dropped at random points, while another contender
/// comes and goes, leave nothing held on any server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_acquires_leave_nothing() {
    let servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let clients = connect_all(&servers).await;
    let others = connect_all(&servers).await;
    let lock = redlock(&clients, "cancel");
    let hog = {
        let lock = redlock(&others, "cancel");
        tokio::spawn(async move {
            for _ in 0..150 {
                let guard = lock.lock().await.unwrap();
                tokio::time::sleep(Duration::from_millis(1)).await;
                guard.unlock().await.unwrap();
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        })
    };
    let mut kept = 0;
    for cut in common::cut_points(600, Duration::from_micros(1500)) {
        if let Ok(guard) =
            tokio::time::timeout(cut, lock.lock_with_lease(Duration::from_secs(30))).await
        {
            kept += 1;
            guard.unwrap().unlock().await.unwrap();
        }
    }
    within(Duration::from_secs(60), hog).await.unwrap();
    println!("600 RedLock acquires, {kept} completed, the rest dropped");
    for client in clients.iter().chain(&others) {
        settled(client).await;
    }
    common::eventually(Duration::from_secs(10), || async {
        holders(&servers, "cancel") == 0
    })
    .await;
}

/// A client for `url` whose RedLock attempts have a roomy bound: a watchdog
/// timeout of 5 s gives each attempt 500 ms.
async fn roomy_client(url: String) -> Client {
    soon(
        Client::builder(url)
            .watchdog_timeout(Duration::from_secs(5))
            .build(),
    )
    .await
    .expect("connect")
}

/// Whether `name` shows up on `server` at any look, 5 ms apart, over
/// `span`: a hold that an acquire left behind in flight would.
async fn ever_held(server: &RedisServer, name: &str, span: Duration) -> bool {
    let until = Instant::now() + span;
    while Instant::now() < until {
        if exists(server, name) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    false
}

/// An acquire that returns without a guard holds nothing once it returns,
/// even when a server answers after the outcome was decided: the round
/// waits for that answer and releases what it took before returning.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acquire_without_a_guard_holds_nothing_once_it_returns() {
    let servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let slow = Proxy::start(servers[0].port());
    let clients = vec![
        roomy_client(slow.url()).await,
        roomy_client(servers[1].url()).await,
        roomy_client(servers[2].url()).await,
    ];
    // The first server answers 60 ms late; the other two answer at once.
    slow.set_latency(Duration::from_millis(30));

    // Two refusals decide the round before the slow grant is in.
    servers[1].cmd(&["SET", "typed", "x"]);
    servers[2].cmd(&["SET", "typed", "x"]);
    let failed = soon(redlock(&clients, "typed").try_lock()).await;
    assert!(matches!(failed, Err(Error::WrongType { .. })), "{failed:?}");
    assert!(
        !ever_held(&servers[0], "typed", Duration::from_millis(500)).await,
        "a hold of the failed acquire showed up after it returned"
    );

    // Two of three held elsewhere: `None`, and nothing of ours left.
    let others = connect_all(&servers).await;
    let a = soon(others[1].lock("shared").lock()).await.unwrap();
    let b = soon(others[2].lock("shared").lock()).await.unwrap();
    assert!(soon(redlock(&clients, "shared").try_lock())
        .await
        .unwrap()
        .is_none());
    assert!(
        !ever_held(&servers[0], "shared", Duration::from_millis(500)).await,
        "a hold of the refused acquire showed up after it returned"
    );
    soon(a.unlock()).await.unwrap();
    soon(b.unlock()).await.unwrap();
    for client in clients.iter().chain(&others) {
        settled(client).await;
    }
}

/// A guard's release goes to every server at once: a silent server holds
/// up only its own release, not the others'.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_server_does_not_hold_up_the_other_releases() {
    let servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let silent = Proxy::start(servers[0].port());
    let mut urls = vec![silent.url()];
    urls.extend(servers[1..].iter().map(RedisServer::url));
    // The client's default timeouts: a release to a silent server takes
    // its time to give up.
    let mut clients = Vec::new();
    for url in urls {
        clients.push(roomy_client(url).await);
    }
    let lock = redlock(&clients, "release");
    // A round ends a grace after its majority: on a loaded machine the
    // third reply (through the proxy) can miss it, and that lock is given
    // back. The test needs all three held: it takes the lock again until
    // they are.
    let mut tries = 0;
    let guard = loop {
        let guard = soon(lock.lock_with_lease(Duration::from_secs(30)))
            .await
            .unwrap();
        if guard.held() == 3 {
            break guard;
        }
        tries += 1;
        assert!(tries < 20, "the third lock missed the grace {tries} times");
        soon(guard.unlock()).await.unwrap();
    };
    silent.black_hole(true);
    let started = Instant::now();
    let unlock = tokio::spawn(guard.unlock());
    common::eventually(Duration::from_secs(2), || async {
        holders(&servers[1..], "release") == 0
    })
    .await;
    let others_released = started.elapsed();
    println!("the two answering servers released in {others_released:?}");
    // Two of three released: a majority, so the unlock succeeds once the
    // silent server's release gives up.
    within(Duration::from_secs(60), unlock)
        .await
        .unwrap()
        .unwrap();
    println!(
        "the silent server's release gave up after {:?}",
        started.elapsed()
    );
    silent.black_hole(false);
}
