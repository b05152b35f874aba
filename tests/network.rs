//! Network faults between the client and Redis, through a TCP proxy in the
//! test: latency, dropped connections, and a black hole. The promise under
//! test: when renewals cannot get through, the holder is told its lease is
//! lost no later than the server lets the key expire, so it stops before
//! another can start.

use ferrisson_test_support as common;

use std::time::Duration;

use common::proxy::Proxy;
use common::{client, client_at, eventually, soon, within, RedisServer};
use tokio::time::Instant;

const WATCHDOG: Duration = Duration::from_millis(1500);

/// The client's deadline is the watchdog timeout less a drift margin
/// (a tenth of it) after the request of the last confirmed renewal.
const MARGIN: Duration = Duration::from_millis(150);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_black_hole_loses_the_lease_before_the_server_expires_it() {
    common::init_tracing();
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    let holder = client_at(&proxy.url(), WATCHDOG).await;
    let other = client(&server, WATCHDOG).await;
    let mut figures = Vec::new();
    // Black-hole at several points of the renewal period.
    for (round, offset) in [0u64, 170, 340, 420].into_iter().enumerate() {
        let name = format!("black-hole:{round}");
        let guard = soon(holder.lock(&name).lock()).await.unwrap();
        let waiter = {
            let lock = other.lock(&name);
            tokio::spawn(async move {
                let guard = lock.lock().await.unwrap();
                (Instant::now(), guard)
            })
        };
        eventually(Duration::from_secs(10), || async {
            other.subscriptions() == 1
        })
        .await;
        tokio::time::sleep(Duration::from_millis(offset)).await;
        proxy.black_hole(true);
        // The latest the server can let the key go: its TTL now (a renewal
        // already on its way can only push that later).
        let ttl = server.cmd(&["PTTL", &name]).as_int().unwrap();
        let expires = Instant::now() + Duration::from_millis(ttl as u64);
        // When the holder is told, by the library's own deadline (what is
        // left of the lease, read until it is lost: a renewal's reply on
        // its way may still push it later), not by when this task wakes,
        // which a busy machine can delay past the margin.
        let lease = guard.lease_handle();
        let mut told = Instant::now();
        let watching = async {
            while !lease.is_lost() {
                let now = Instant::now();
                let left = lease.remaining();
                if !left.is_zero() {
                    told = told.max(now + left);
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        };
        within(WATCHDOG * 3, watching).await;
        within(WATCHDOG * 3, guard.lease_lost()).await;
        let (acquired, next) = within(Duration::from_secs(20), waiter).await.unwrap();
        println!(
            "black hole {offset} ms into the period: holder told {:.0} ms before the server's \
             expiry; next holder {:.0} ms after the holder was told",
            (expires.saturating_duration_since(told)).as_secs_f64() * 1e3,
            (acquired - told).as_secs_f64() * 1e3
        );
        assert!(
            told <= expires,
            "told after the server could expire the key"
        );
        assert!(
            acquired > told,
            "the next holder started before the first was told"
        );
        figures.push(expires.saturating_duration_since(told));
        assert!(soon(guard.unlock()).await.unwrap_err().is_lease_lost());
        soon(next.unlock()).await.unwrap();
        proxy.black_hole(false);
        proxy.drop_connections();
        assert_eq!(holder.held_locks(), 0);
    }
    let least = figures.iter().min().unwrap();
    println!(
        "black hole: the holder was told at least {least:?} before expiry (margin {MARGIN:?})"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn latency_within_the_slack_keeps_the_lease() {
    common::init_tracing();
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    let holder = client_at(&proxy.url(), WATCHDOG).await;
    // 150 ms each way: a round trip of 300 ms against a renewal every
    // 500 ms and 1350 ms of slack.
    proxy.set_latency(Duration::from_millis(150));
    let started = Instant::now();
    let guard = soon(holder.lock("latency").lock()).await.unwrap();
    let acquire = started.elapsed();
    let held_from = Instant::now();
    while held_from.elapsed() < WATCHDOG * 3 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(
            !guard.is_lease_lost(),
            "lost the lease at {:?} (acquire took {acquire:?})",
            held_from.elapsed()
        );
        let ttl = server.cmd(&["PTTL", "latency"]).as_int().unwrap();
        assert!(ttl > 0, "key expired under latency");
    }
    let started = Instant::now();
    soon(guard.unlock()).await.unwrap();
    println!(
        "latency 150 ms each way: acquire {acquire:?}, release {:?}, lease kept over {:?}",
        started.elapsed(),
        WATCHDOG * 3
    );
    assert!(!common::exists(&server, "latency"));
}

/// Dropped connections cost no lease: a renewal that meets a cut is sent
/// again on the new connection, and one sent at the moment of a cut that
/// gets neither a reply nor an error (seen in the `redis` crate, for as
/// long as the response timeout, 3 s here against a 1.5 s lease) is sent
/// again beside it. Several holds, so that their renewals meet the cuts at
/// many points.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_connections_keep_the_lease_and_wake_waiters() {
    common::init_tracing();
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    let build = || {
        ferrisson::Client::builder(proxy.url())
            .watchdog_timeout(WATCHDOG)
            .build()
    };
    let holder = soon(build()).await.unwrap();
    let waiting = soon(build()).await.unwrap();
    let guard = soon(holder.lock("dropped").lock()).await.unwrap();
    // More holds, taken at different points of the renewal period.
    let mut others = Vec::new();
    for i in 0..7 {
        tokio::time::sleep(Duration::from_millis(70)).await;
        others.push(
            soon(holder.lock(format!("dropped:{i}")).lock())
                .await
                .unwrap(),
        );
    }
    let waiter = {
        let lock = waiting.lock("dropped");
        tokio::spawn(async move { lock.lock().await.unwrap() })
    };
    eventually(Duration::from_secs(10), || async {
        waiting.subscriptions() == 1
    })
    .await;
    // Every connection cut every 300 ms, for three watchdog timeouts.
    let cuts = (WATCHDOG * 3).as_millis() / 300;
    for _ in 0..cuts {
        proxy.drop_connections();
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(
            !guard.is_lease_lost() && others.iter().all(|g| !g.is_lease_lost()),
            "a dropped connection cost a lease"
        );
    }
    assert!(server.cmd(&["PTTL", "dropped"]).as_int().unwrap() > 0);
    assert!(!waiter.is_finished(), "the waiter got a held lock");
    let released = Instant::now();
    soon(guard.unlock()).await.unwrap();
    let next = within(Duration::from_secs(10), waiter).await.unwrap();
    println!(
        "{cuts} connection cuts over {:?}: 8 leases kept; waiter woken {:?} after the release \
         ({} connections accepted)",
        WATCHDOG * 3,
        released.elapsed(),
        proxy.accepted()
    );
    soon(next.unlock()).await.unwrap();
    for other in others {
        soon(other.unlock()).await.unwrap();
    }
}

/// `lock()` without a deadline rides out a connection cut: its attempt and
/// its subscription (or, for a spin lock, its later tries) may meet the
/// dead connections.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_rides_out_a_cut_just_before_it() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    let c = client_at(&proxy.url(), WATCHDOG).await;
    let other = client(&server, WATCHDOG).await;
    const ROUNDS: usize = 20;
    for round in 0..ROUNDS {
        // Held by another for a moment, so that the waiter subscribes.
        let held = soon(other.lock("cut").lock_with_lease(Duration::from_millis(50)))
            .await
            .unwrap();
        proxy.drop_connections();
        // The spin lock, which has no subscription, in every other round.
        let lock = match round % 2 {
            0 => common::lock_of(&c, "reentrant", "cut"),
            _ => common::lock_of(&c, "spin", "cut"),
        };
        let guard = soon(lock.lock())
            .await
            .unwrap_or_else(|e| panic!("round {round}: {e}"));
        soon(guard.unlock()).await.unwrap();
        drop(held);
    }
    println!("{ROUNDS} cuts just before lock() (lock and spin lock): every lock() got the lock");
}

/// A leased holder awaiting the loss of its hold learns of a force unlock
/// soon though the look at its hold that the unlock message prompts is
/// cut on its way: the look is made again after a pause, not left until
/// the next message (or the lease's end).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_force_unlock_is_noticed_though_the_look_it_prompts_is_cut() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    let c = client_at(&proxy.url(), WATCHDOG).await;
    let other = client(&server, WATCHDOG).await;
    let lease = Duration::from_secs(60);
    let guard = soon(c.lock("look").lock_with_lease(lease)).await.unwrap();
    let looks = || calls(&server, "hexists");
    let lost = guard.lease_lost();
    tokio::pin!(lost);
    // The holder listens, and has looked once.
    tokio::select! {
        () = &mut lost => panic!("the lease was lost before anyone unlocked"),
        () = eventually(Duration::from_secs(10), || async { looks() == 1 }) => {}
    }
    proxy.cut_before_next("HEXISTS");
    assert!(soon(other.lock("look").force_unlock()).await.unwrap());
    within(lease / 3, &mut lost).await;
    assert_eq!(proxy.cut_commands(), 1, "the look was not cut");
    assert!(guard.is_lease_lost());
}

/// The last waiter on a channel leaves, and the unsubscribe is cut on its
/// way: it is sent again, and the channel is not subscribed for the
/// client's life (the connection, which keeps every channel the server has
/// not confirmed leaving, subscribes it again when it reconnects).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unsubscribe_cut_on_its_way_is_sent_again() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    let c = client_at(&proxy.url(), WATCHDOG).await;
    let other = client(&server, WATCHDOG).await;
    let held = soon(
        other
            .lock("unsub:a")
            .lock_with_lease(Duration::from_secs(60)),
    )
    .await
    .unwrap();
    let (a, b) = (
        "redisson_lock__channel:{unsub:a}",
        "redisson_lock__channel:{unsub:b}",
    );
    // A waiter subscribes to `a`, then leaves; its unsubscribe is cut.
    let lock = c.lock("unsub:a");
    let waiter = tokio::spawn(async move { lock.lock().await.map(|_| ()) });
    eventually(Duration::from_secs(10), || async {
        common::subscribers(&server, a) == 1
    })
    .await;
    proxy.cut_before_next("UNSUBSCRIBE");
    waiter.abort();
    assert!(waiter.await.unwrap_err().is_cancelled());
    eventually(Duration::from_secs(10), || async {
        proxy.cut_commands() == 1
    })
    .await;
    // Another channel's waiter makes sure the connection is up again
    // (having subscribed again to what it keeps).
    let _held_b = soon(
        other
            .lock("unsub:b")
            .lock_with_lease(Duration::from_secs(60)),
    )
    .await
    .unwrap();
    let lock = c.lock("unsub:b");
    let waiter = tokio::spawn(async move { lock.lock().await.map(|_| ()) });
    eventually(Duration::from_secs(10), || async {
        common::subscribers(&server, b) == 1
    })
    .await;
    eventually(Duration::from_secs(10), || async {
        common::subscribers(&server, a) == 0
    })
    .await;
    waiter.abort();
    drop(held);
}

/// A permit's release whose caller leaves while the send is on its way,
/// and whose send the connection then fails (it never reaches the server),
/// is resent in the background: a permit taken without a lease comes back.
/// The same for a release by id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permit_release_left_before_its_send_failed_is_resent() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    let c = client_at(&proxy.url(), WATCHDOG).await;
    let other = client(&server, WATCHDOG).await;
    let seats = c.permit_expirable_semaphore("seats");
    assert!(soon(seats.try_set_permits(2)).await.unwrap());
    let watch = other.permit_expirable_semaphore("seats");
    let (first, second) = (
        soon(seats.acquire()).await.unwrap(),
        soon(seats.acquire()).await.unwrap(),
    );
    let second = second.id();
    let release = "\r\nrelease\r\n";
    proxy.hold_next_command(release);
    let by_permit = tokio::spawn(async move { first.release().await });
    left_before_its_send_failed(&proxy, by_permit, 1).await;
    eventually(Duration::from_secs(10), || async {
        soon(watch.available_permits()).await.unwrap() == 1
    })
    .await;
    proxy.hold_next_command(release);
    let by_id = tokio::spawn(async move { seats.release_many(&[second]).await });
    left_before_its_send_failed(&proxy, by_id, 2).await;
    eventually(Duration::from_secs(10), || async {
        soon(watch.available_permits()).await.unwrap() == 2
    })
    .await;
}

/// Waits until the proxy holds the `nth` command, then drops `call`, and
/// cuts the connection before the command goes on: it never reaches the
/// server.
async fn left_before_its_send_failed<T: std::fmt::Debug>(
    proxy: &Proxy,
    call: tokio::task::JoinHandle<T>,
    nth: usize,
) {
    eventually(Duration::from_secs(10), || async {
        proxy.held_commands() == nth
    })
    .await;
    call.abort();
    assert!(call.await.unwrap_err().is_cancelled());
    proxy.drop_connections();
    proxy.release_held();
}

/// A waiter that joins a channel while the unsubscribe of its last waiter
/// is still on its way (its reply timed out; the server runs it later)
/// subscribes again, and hears the unlock: it does not take the channel
/// for subscribed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_joining_while_an_unsubscribe_is_on_its_way_is_woken() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    let timeout = Duration::from_millis(500);
    let c = common::client_with_timeouts(&proxy.url(), WATCHDOG, timeout).await;
    let other = client(&server, WATCHDOG).await;
    let lease = Duration::from_secs(60);
    let held = soon(other.lock("late-unsub").lock_with_lease(lease))
        .await
        .unwrap();
    let channel = "redisson_lock__channel:{late-unsub}";
    let lock = c.lock("late-unsub");
    let first = tokio::spawn({
        let lock = lock.clone();
        async move { lock.lock().await.map(|_| ()) }
    });
    eventually(Duration::from_secs(10), || async {
        common::subscribers(&server, channel) == 1
    })
    .await;
    // The first leaves; its unsubscribe is held on its way to the server.
    proxy.hold_next_command("UNSUBSCRIBE");
    first.abort();
    assert!(first.await.unwrap_err().is_cancelled());
    eventually(Duration::from_secs(10), || async {
        proxy.held_commands() == 1
    })
    .await;
    // A second waiter joins; the unsubscribe's reply times out, and only
    // then does the command reach the server.
    let second = tokio::spawn(async move { lock.lock().await.map(|_| ()) });
    tokio::time::sleep(timeout * 4).await;
    proxy.release_held();
    eventually(Duration::from_secs(10), || async {
        calls(&server, "unsubscribe") >= 1
    })
    .await;
    eventually(Duration::from_secs(10), || async {
        common::subscribers(&server, channel) == 1
    })
    .await;
    soon(held.unlock()).await.unwrap();
    within(lease / 6, second).await.unwrap().unwrap();
}

/// How many calls of `command` (lower case) the server has served.
fn calls(server: &RedisServer, command: &str) -> u64 {
    let stats = server.cmd(&["INFO", "commandstats"]).as_string().unwrap();
    let prefix = format!("cmdstat_{command}:calls=");
    stats
        .lines()
        .find_map(|line| line.strip_prefix(prefix.as_str()))
        .and_then(|rest| rest.split(',').next()?.parse::<u64>().ok())
        .unwrap_or(0)
}

/// A wait with a deadline rides out a cut of its subscription (a restart
/// while it subscribes): only its first try returns a connection error, so
/// the waiter subscribes again and gets the lock once it is released.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_with_a_deadline_rides_out_a_cut_of_its_subscription() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    let c = client_at(&proxy.url(), WATCHDOG).await;
    let other = client(&server, WATCHDOG).await;
    let held = soon(other.lock("sub-cut").lock()).await.unwrap();
    proxy.cut_before_next("SUBSCRIBE");
    let waiter = {
        let lock = c.lock("sub-cut");
        tokio::spawn(async move { lock.try_lock_for(Duration::from_secs(60)).await })
    };
    eventually(Duration::from_secs(10), || async {
        proxy.cut_commands() == 1 || waiter.is_finished()
    })
    .await;
    assert_eq!(proxy.cut_commands(), 1, "the subscription was not cut");
    soon(held.unlock()).await.unwrap();
    let guard = within(Duration::from_secs(20), waiter)
        .await
        .unwrap()
        .unwrap_or_else(|e| panic!("the wait failed on its subscription's cut: {e}"))
        .expect("the lock, within the wait");
    soon(guard.unlock()).await.unwrap();
}

/// A lock held for a minute by a client straight on the server, and a
/// waiter on it whose client goes through a proxy, subscribed.
struct HeldAndWaited {
    server: RedisServer,
    proxy: Proxy,
    held: ferrisson::LockGuard,
    waiter: tokio::task::JoinHandle<ferrisson::Result<ferrisson::LockGuard>>,
    channel: String,
    // Kept for the test's life.
    _clients: [ferrisson::Client; 2],
}

impl HeldAndWaited {
    const LEASE: Duration = Duration::from_secs(60);

    async fn start(name: &str) -> HeldAndWaited {
        let server = RedisServer::start();
        let proxy = Proxy::start(server.port());
        let c = client_at(&proxy.url(), WATCHDOG).await;
        let other = client(&server, WATCHDOG).await;
        let held = soon(other.lock(name).lock_with_lease(Self::LEASE))
            .await
            .unwrap();
        let waiter = {
            let lock = c.lock(name);
            tokio::spawn(async move { lock.lock().await })
        };
        let setup = HeldAndWaited {
            server,
            proxy,
            held,
            waiter,
            channel: format!("redisson_lock__channel:{{{name}}}"),
            _clients: [c.clone(), other],
        };
        eventually(Duration::from_secs(10), || async {
            c.subscriptions() == 1 && setup.subscribers() == 1
        })
        .await;
        setup
    }

    /// The connections the server counts on the lock's channel.
    fn subscribers(&self) -> i64 {
        common::subscribers(&self.server, &self.channel)
    }

    /// Releases the held lock; the waiter gets it soon (well before the
    /// hint of its last try, the holder's lease).
    async fn hand_over(self) {
        assert!(!self.waiter.is_finished(), "the waiter got a held lock");
        soon(self.held.unlock()).await.unwrap();
        self.proxy.release_held();
        let guard = within(Self::LEASE / 6, self.waiter)
            .await
            .unwrap()
            .unwrap_or_else(|e| panic!("the wait failed: {e}"));
        soon(guard.unlock()).await.unwrap();
    }
}

/// A release published while the waiter's subscription connection was
/// down reaches nobody there: once the connection has subscribed again,
/// the waiters try the lock again, rather than sleep on until the hint of
/// their last try (the holder's lease, a minute here).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_tries_again_once_its_subscription_is_back() {
    let setup = HeldAndWaited::start("resub").await;
    let (server, proxy) = (&setup.server, &setup.proxy);
    // Every connection cut; the subscription connection's SUBSCRIBE, when
    // it reconnects, held in the proxy (let go after the release). The
    // waiter, woken by the cut, tries again on its new command connection
    // and finds the lock held.
    let tries = calls(server, "evalsha");
    proxy.hold_next_command("SUBSCRIBE");
    proxy.drop_connections();
    eventually(Duration::from_secs(10), || async {
        proxy.held_commands() == 1 && calls(server, "evalsha") > tries
    })
    .await;
    assert_eq!(
        setup.subscribers(),
        0,
        "subscribed again before the release"
    );
    setup.hand_over().await;
}

/// A subscription connection that stayed down longer than it reconnects by
/// itself (the `redis` crate's connection manager gives up after six tries,
/// 6 to 13 s, until a command is sent on it) comes back while waiters count
/// on it, and they hear the next release.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscription_down_longer_than_its_reconnects_comes_back() {
    let setup = HeldAndWaited::start("revive").await;
    // Longer than the connection manager's six tries at their longest
    // (12.6 s of pauses), with room for a busy machine's timers.
    setup.proxy.refuse(true);
    tokio::time::sleep(Duration::from_secs(20)).await;
    setup.proxy.refuse(false);
    eventually(Duration::from_secs(10), || async {
        setup.subscribers() == 1
    })
    .await;
    setup.hand_over().await;
}

/// A reply cut off inside its frame (the connection closed after a part of
/// it) is a lost reply: the acquire is resent on a new connection and
/// takes its hold once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reply_cut_inside_its_frame_is_a_lost_reply() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    let c = client_at(&proxy.url(), WATCHDOG).await;
    let name = "cut-inside";
    let lock = c.lock(name);
    let lease = Duration::from_secs(60);
    // The scripts loaded: the next acquire is one EVALSHA, its reply the
    // script's.
    let guard = soon(lock.lock_with_lease(lease)).await.unwrap();
    soon(guard.unlock()).await.unwrap();
    // The client deletes that pair's latches a few milliseconds later, on
    // the same connection, with a DEL that names the lock too. Its reply
    // must be in before the cut is armed: sent beside the acquire, the
    // two replies may come in one chunk, and the cut then falls inside
    // the DEL's reply, after the acquire's reply came whole.
    eventually(Duration::from_secs(10), || async {
        server.keys(&format!("*latch:{{{name}}}*")).is_empty()
    })
    .await;
    // Replies come in order: this one's follows the DEL's.
    assert!(!soon(lock.is_locked()).await.unwrap());
    let connections = proxy.accepted();
    proxy.cut_inside_reply_to(name);
    let guard = soon(lock.try_lock_with_lease(Duration::ZERO, lease))
        .await
        .unwrap_or_else(|e| panic!("the cut reply failed the call: {e}"))
        .expect("the lock, free");
    assert!(proxy.accepted() > connections, "no reply was cut");
    assert_eq!(soon(lock.hold_count()).await.unwrap(), 1);
    soon(guard.unlock()).await.unwrap();
    assert!(!common::exists(&server, name));
}

/// A semaphore's `acquire()` and a latch's `wait()` ride out a connection
/// cut just before them, as `lock()` does: their first try and their
/// subscription may both meet the dead connections.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn semaphore_and_latch_waits_ride_out_a_cut_just_before_them() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    let c = client_at(&proxy.url(), WATCHDOG).await;
    let other = client(&server, WATCHDOG).await;
    assert!(soon(other.semaphore("cut:sem").try_set_permits(0))
        .await
        .unwrap());
    const ROUNDS: usize = 20;
    for round in 0..ROUNDS {
        proxy.drop_connections();
        let waiter = {
            let semaphore = c.semaphore("cut:sem");
            tokio::spawn(async move { semaphore.acquire().await })
        };
        // Woken by the release once subscribed; a failed wait ends early.
        eventually(Duration::from_secs(10), || async {
            c.subscriptions() == 1 || waiter.is_finished()
        })
        .await;
        soon(other.semaphore("cut:sem").release()).await.unwrap();
        within(Duration::from_secs(10), waiter)
            .await
            .unwrap()
            .unwrap_or_else(|e| panic!("semaphore, round {round}: {e}"));

        assert!(soon(other.count_down_latch("cut:latch").try_set_count(1))
            .await
            .unwrap());
        proxy.drop_connections();
        let waiter = {
            let latch = c.count_down_latch("cut:latch");
            tokio::spawn(async move { latch.wait().await })
        };
        eventually(Duration::from_secs(10), || async {
            c.subscriptions() == 1 || waiter.is_finished()
        })
        .await;
        soon(other.count_down_latch("cut:latch").count_down())
            .await
            .unwrap();
        within(Duration::from_secs(10), waiter)
            .await
            .unwrap()
            .unwrap_or_else(|e| panic!("latch, round {round}: {e}"));
    }
    println!("{ROUNDS} cuts just before acquire() and wait(): every one got through");
}

/// A fair-lock waiter whose wait ends while the server is unreachable
/// cannot leave the queue at once; it leaves once the server is back, not
/// after the waiter timeout (300 s), so the line behind it moves on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fair_waiter_leaves_the_queue_once_the_server_is_back() {
    common::init_tracing();
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    let holder = client(&server, WATCHDOG).await;
    let waiting = soon(
        ferrisson::Client::builder(proxy.url())
            .watchdog_timeout(WATCHDOG)
            .response_timeout(Duration::from_millis(300))
            .build(),
    )
    .await
    .unwrap();
    let guard = soon(holder.fair_lock("line").lock()).await.unwrap();
    let queued = || server.cmd(&["LLEN", "redisson_lock_queue:{line}"]).as_int();
    let waiter = {
        let lock = waiting.fair_lock("line");
        // Long enough to be queued before the outage, on a loaded machine too.
        tokio::spawn(async move { lock.try_lock_for(Duration::from_secs(3)).await })
    };
    eventually(Duration::from_secs(10), || async { queued() == Some(1) }).await;
    proxy.refuse(true);
    // It gives up: at the end of its wait, or with a connection error.
    let gave_up = within(Duration::from_secs(20), waiter).await.unwrap();
    assert!(!matches!(gave_up, Ok(Some(_))), "{gave_up:?}");
    assert_eq!(queued(), Some(1), "the leave cannot have got through");
    proxy.refuse(false);
    let back = std::time::Instant::now();
    eventually(Duration::from_secs(10), || async { queued() == Some(0) }).await;
    println!(
        "left the queue {:?} after the server came back",
        back.elapsed()
    );
    soon(guard.unlock()).await.unwrap();
}

/// A multi-lock's `lock()` whose second lock's server cannot be reached for
/// a while: it waits for that lock (holding nothing) instead of failing,
/// and holds both once the server is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multi_lock_waits_out_a_server_out_of_reach() {
    let (one, two) = (RedisServer::start(), RedisServer::start());
    let proxy = Proxy::start(two.port());
    let a = client(&one, WATCHDOG).await;
    let b = client_at(&proxy.url(), WATCHDOG).await;
    proxy.refuse(true);
    proxy.drop_connections();
    let waiter = {
        let multi = ferrisson::MultiLock::new(vec![
            Box::new(a.lock("multi:a")) as Box<dyn ferrisson::DistributedLock>,
            Box::new(b.lock("multi:b")),
        ]);
        tokio::spawn(async move { multi.lock().await })
    };
    // Out of reach for a while (time is the subject): no error, and the
    // first lock is not kept while it waits.
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert!(!waiter.is_finished(), "{:?}", waiter.await);
    eventually(Duration::from_secs(10), || async {
        !common::exists(&one, "multi:a")
    })
    .await;
    let back = Instant::now();
    proxy.refuse(false);
    let guard = within(Duration::from_secs(20), waiter)
        .await
        .unwrap()
        .unwrap();
    println!(
        "multi-lock held both {:?} after the second server came back",
        back.elapsed()
    );
    assert!(common::exists(&one, "multi:a") && common::exists(&two, "multi:b"));
    soon(guard.unlock()).await.unwrap();
}

/// What nobody waits on keeps trying across a network cut longer than an
/// awaited release's sends take (`release_attempts`, 4, spaced 100 to
/// 300 ms apart), and gets through once the network is back, long before
/// the lease would have freed anything: the give-back of a hold whose
/// caller left before the grant came (cut right after the grant's reply),
/// of a re-entry inside a watchdog hold (which the watchdog keeps alive
/// meanwhile), of a semaphore's permit, and the release of a dropped guard.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn give_backs_and_dropped_guards_outlast_a_network_cut() {
    common::init_tracing();
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    // A watchdog that outlasts the cut: the watchdog hold stays alive.
    let watchdog = Duration::from_secs(10);
    let c = client_at(&proxy.url(), watchdog).await;
    let cut = Duration::from_secs(3);
    let lease = Duration::from_secs(60);
    // Every script loaded: each acquire below is one command. (`lock()`
    // sends the lean scripts, `try_lock()` the latched ones.)
    let warm = soon(c.lock("cut:warm").lock()).await.unwrap();
    soon(warm.unlock()).await.unwrap();
    let warm = soon(c.lock("cut:warm").try_lock()).await.unwrap().unwrap();
    soon(warm.unlock()).await.unwrap();
    let sem = c.semaphore("cut:sem");
    assert!(soon(sem.try_set_permits(1)).await.unwrap());
    assert!(soon(sem.try_acquire()).await.unwrap());
    soon(sem.release()).await.unwrap();
    let held = soon(c.lock("cut:watched").with_owner("o").lock())
        .await
        .unwrap();
    let count = |name: &str, field: &str| {
        server
            .cmd(&["HGET", name, field])
            .as_string()
            .and_then(|n| n.parse::<i64>().ok())
    };
    let permits = || server.cmd(&["GET", "cut:sem"]).as_string();

    // A caller that leaves before the grant arrives; the grant's reply
    // gets through, then the network is cut for `cut`.
    async fn left_then_cut<T: std::fmt::Debug>(
        proxy: &Proxy,
        pattern: &str,
        call: impl std::future::Future<Output = T>,
        cut: Duration,
    ) {
        proxy.set_latency(Duration::from_millis(200));
        proxy.refuse_after_reply_to(pattern);
        let left = tokio::time::timeout(Duration::from_millis(100), call).await;
        assert!(left.is_err(), "the caller got its reply: {left:?}");
        eventually(Duration::from_secs(10), || async { proxy.refusing() }).await;
        proxy.set_latency(Duration::ZERO);
        tokio::time::sleep(cut).await;
    }

    let lock = c.lock("cut:left");
    let call = lock.try_lock_with_lease(Duration::ZERO, lease);
    left_then_cut(&proxy, "ferrisson_acquire_latch:{cut:left}", call, cut).await;
    assert!(
        common::exists(&server, "cut:left"),
        "the give-back got through a cut"
    );
    proxy.refuse(false);
    let back = Instant::now();
    eventually(Duration::from_secs(10), || async {
        !common::exists(&server, "cut:left")
    })
    .await;
    println!(
        "a hold whose caller left, cut for {cut:?}: given back {:?} after the network came back",
        back.elapsed()
    );

    let field = held.field().to_owned();
    let lock = c.lock("cut:watched").with_owner("o");
    let call = lock.try_lock_with_lease(Duration::ZERO, lease);
    left_then_cut(&proxy, "ferrisson_acquire_latch:{cut:watched}", call, cut).await;
    assert_eq!(count("cut:watched", &field), Some(2));
    proxy.refuse(false);
    eventually(Duration::from_secs(10), || async {
        count("cut:watched", &field) == Some(1)
    })
    .await;
    assert!(
        !held.is_lease_lost(),
        "the watchdog hold was lost in the cut"
    );
    soon(held.unlock()).await.unwrap();
    assert!(!common::exists(&server, "cut:watched"), "a re-entry stayed");

    let call = sem.try_acquire();
    left_then_cut(&proxy, "ferrisson_acquire_latch:{cut:sem}", call, cut).await;
    assert_eq!(permits().as_deref(), Some("0"));
    proxy.refuse(false);
    eventually(Duration::from_secs(10), || async {
        permits().as_deref() == Some("1")
    })
    .await;

    let guard = soon(c.lock("cut:dropped").lock_with_lease(lease))
        .await
        .unwrap();
    proxy.refuse(true);
    drop(guard);
    tokio::time::sleep(cut).await;
    assert!(common::exists(&server, "cut:dropped"));
    proxy.refuse(false);
    eventually(Duration::from_secs(10), || async {
        !common::exists(&server, "cut:dropped")
    })
    .await;
    // Nothing more: every permit back, no lock left.
    assert_eq!(permits().as_deref(), Some("1"));
    common::settled(&c).await;
}

/// A dropped guard's release that cannot get through is not sent again
/// once its lease has run out by the guard's clock: the hold may be gone
/// by then, and its owner may hold the lock anew (its next `lock()`),
/// which a late resend would release, the hash counting holds per owner,
/// not per acquire. Here the network comes back once the old hold has
/// expired, and the owner takes the lock again through the same client
/// (its connection back, the old release's resends could get through
/// too): the newer hold stands.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_guards_release_is_not_resent_past_its_lease() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    let c = client_at(&proxy.url(), WATCHDOG).await;
    let warm = soon(c.lock("stale:warm").lock()).await.unwrap();
    soon(warm.unlock()).await.unwrap();
    let name = "stale:release";
    let lease = Duration::from_secs(4);
    let lock = c.lock(name).with_owner("job");
    let guard = soon(lock.lock_with_lease(lease)).await.unwrap();
    let field = guard.field().to_owned();
    // Dropped halfway through its lease, in an outage (time is the
    // subject): by a rule that resends until the hold has surely expired
    // counted from the drop, the resends would go on for the rest of the
    // lease after it ran out.
    tokio::time::sleep(lease / 2).await;
    proxy.refuse(true);
    let dropped = Instant::now();
    drop(guard);
    eventually(lease + Duration::from_secs(5), || async {
        !common::exists(&server, name)
    })
    .await;
    proxy.refuse(false);
    let newer = soon(lock.lock_with_lease(Duration::from_secs(60)))
        .await
        .unwrap();
    // Until when that rule would resend: the drop, the lease, a response
    // timeout and a margin; then a resend's longest pause (1 s).
    let old_rule_ends = dropped
        + lease
        + c.config().response_timeout
        + Duration::from_secs(1)
        + Duration::from_secs(1);
    tokio::time::sleep_until(old_rule_ends).await;
    assert_eq!(
        server.cmd(&["HGET", name, &field]).as_string().as_deref(),
        Some("1"),
        "a resend of the old hold's release took the newer hold"
    );
    assert!(!newer.is_lease_lost());
    soon(newer.unlock()).await.unwrap();
}

/// A release that reaches Redis after the lease ran out there (sent while
/// the guard's clock still had lease left, delayed on the way) fails with
/// `LeaseLost`, as one the guard knew to be too late: by the reply, the
/// guard's clock (which never runs ahead of the server's) says so too. A
/// hold deleted behind the guard's back while its lease lasts is `NotHeld`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_that_arrives_after_the_lease_says_lease_lost() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    let c = client_at(&proxy.url(), WATCHDOG).await;
    let lease = Duration::from_secs(1);
    let lock = c.lock("late-release");
    let guard = soon(lock.lock_with_lease(lease)).await.unwrap();
    // Each way: the release runs on the server after the lease has ended.
    proxy.set_latency(lease);
    assert!(!guard.is_lease_lost());
    let err = soon(guard.unlock()).await.unwrap_err();
    assert!(err.is_lease_lost(), "{err}");
    proxy.set_latency(Duration::ZERO);

    let guard = soon(lock.lock_with_lease(Duration::from_secs(60)))
        .await
        .unwrap();
    server.cmd(&["DEL", "late-release"]);
    let err = soon(guard.unlock()).await.unwrap_err();
    assert!(err.is_not_held(), "{err}");
}

/// A dropped guard's release that meets a network cut is resent for as
/// long as its owner's key surely stands, not only for as long as the
/// guard's own lease: an owner's holds share one key, so another hold of
/// the owner keeps the dropped hold's count in it, and a release given up
/// at the dropped hold's own lease would leave that count behind until
/// the other hold's lease ran out, whenever that one is released. Here a
/// watchdog hold (whose lease nothing renews once it is dropped) is
/// dropped in an outage longer than that lease, while its owner also
/// holds the lock with a 60 s lease: once the network is back and that
/// hold is unlocked, the lock is free within a few resends, not after
/// 60 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_guards_release_outlasts_its_lease_while_another_hold_keeps_the_key() {
    common::init_tracing();
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    let c = client_at(&proxy.url(), WATCHDOG).await;
    let other = client(&server, WATCHDOG).await;
    let warm = soon(c.lock("kept:warm").lock()).await.unwrap();
    soon(warm.unlock()).await.unwrap();
    let name = "kept:release";
    let lease = Duration::from_secs(60);
    let lock = c.lock(name).with_owner("job");
    let watched = soon(lock.lock()).await.unwrap();
    let leased = soon(lock.lock_with_lease(lease)).await.unwrap();
    let field = watched.field().to_owned();
    proxy.refuse(true);
    let dropped = Instant::now();
    drop(watched);
    // Time is the subject: the outage outlasts the dropped hold's own
    // lease (the watchdog timeout from its last renewal) and a resend's
    // longest pause (1 s).
    tokio::time::sleep(WATCHDOG + Duration::from_secs(2)).await;
    assert_eq!(
        server.cmd(&["HGET", name, &field]).as_string().as_deref(),
        Some("2"),
        "a release got through the outage"
    );
    proxy.refuse(false);
    let back = Instant::now();
    soon(leased.unlock()).await.unwrap();
    // Well before the 60 s lease could free it.
    eventually(Duration::from_secs(10), || async {
        !common::exists(&server, name)
    })
    .await;
    println!(
        "a watchdog hold dropped in a {:?} outage beside a 60 s leased hold: the lock free {:?} \
         after the network came back",
        back - dropped,
        back.elapsed()
    );
    let guard = soon(other.lock(name).try_lock())
        .await
        .unwrap()
        .expect("the lock is free");
    soon(guard.unlock()).await.unwrap();
    common::settled(&c).await;
}

/// A client built for an address nothing listens at fails at once, with
/// an error that names the address and says what to check; it is a
/// connection error (the same call may succeed once a server is up).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_connection_names_the_address() {
    let port = common::server::free_port();
    let addr = format!("127.0.0.1:{port}");
    let err = soon(ferrisson::Client::connect(format!("redis://{addr}/")))
        .await
        .unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, ferrisson::Error::Connect { .. }), "{err:?}");
    assert!(text.contains(&addr), "{text}");
    assert!(text.contains("is redis-server running there"), "{text}");
    assert!(err.is_connection_error(), "{text}");
}

/// A release's message wakes one waiter of a client. When that waiter
/// leaves before its next try is answered (here: dropped while the server
/// cannot be reached), it passes the wake-up on: the client's other waiter
/// takes the free lock at once, not when its timer ends (the holder's TTL,
/// a minute here).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_woken_waiter_that_leaves_passes_its_wake_up_on() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    let watchdog = Duration::from_secs(60);
    // One send a try: a try cut on its way is not sent again.
    let builder = ferrisson::Client::builder(proxy.url())
        .watchdog_timeout(watchdog)
        .release_attempts(1);
    let client = common::connect(builder).await;
    let holder = common::client(&server, watchdog).await;
    let name = "network:pass-on";
    // The acquire script loaded.
    soon(soon(client.lock(name).lock()).await.unwrap().unlock())
        .await
        .unwrap();
    let guard = soon(holder.lock(name).lock()).await.unwrap();
    // Two waiters of the client, the first waiting before the second:
    // each has sent its first try and, subscribed, its second.
    let waiter = |owner: &'static str| {
        let before = server.evalsha_calls();
        let lock = client.lock(name).with_owner(owner);
        let waiting = tokio::spawn(async move { lock.lock().await });
        (waiting, before)
    };
    let tried_twice = |before: u64| {
        let server = &server;
        async move {
            eventually(Duration::from_secs(20), || async move {
                server.evalsha_calls() >= before + 2
            })
            .await
        }
    };
    let (first, before) = waiter("first");
    tried_twice(before).await;
    let (second, before) = waiter("second");
    tried_twice(before).await;
    // The first waiter's next try is cut on its way, and the server
    // refuses new connections from then on (the subscription's stays).
    proxy.cut_before_next_then_refuse_new(&format!("{}:first", client.id()));
    soon(guard.unlock()).await.unwrap();
    eventually(Duration::from_secs(20), || async {
        proxy.cut_commands() == 1
    })
    .await;
    first.abort();
    assert!(first.await.unwrap_err().is_cancelled());
    proxy.refuse(false);
    // Well within the second waiter's timer (its last try's hint: the
    // holder's TTL), and its look-again (a third of the watchdog timeout).
    let got = within(watchdog / 6, second).await.unwrap().unwrap();
    soon(got.unlock()).await.unwrap();
}
