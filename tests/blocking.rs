//! The blocking API against a real `redis-server`, one private server per
//! test. Plain `#[test]`s on plain threads: no runtime around them. Every
//! wait for another thread is bounded, so a deadlock fails instead of
//! hanging.

use ferrisson_test_support as common;

use std::sync::mpsc::{self, Receiver};
use std::thread;
use std::time::{Duration, Instant};

use common::RedisServer;
use ferrisson::{blocking, Error};

/// Long enough that a wake-up by the lock's TTL (not by the unlock message)
/// would fail the tests that bound a hand-off.
const WATCHDOG: Duration = Duration::from_secs(30);

/// The bound on any one event a test waits for.
const BOUND: Duration = Duration::from_secs(20);

fn client(server: &RedisServer, watchdog: Duration) -> blocking::Client {
    blocking::Client::from_builder(
        ferrisson::Client::builder(server.url()).watchdog_timeout(watchdog),
    )
    .expect("connect")
}

/// A runtime of the caller's own, as an async part of the program would
/// have.
fn current_thread_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// The next message on `rx`, within [`BOUND`].
fn recv<T>(rx: &Receiver<T>) -> T {
    rx.recv_timeout(BOUND).expect("an event within the bound")
}

/// Waits until `cond` holds, checking every 10 ms, for at most [`BOUND`];
/// for state that changes in the background with no event to wait on.
fn eventually(mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + BOUND;
    while !cond() {
        assert!(
            Instant::now() < deadline,
            "condition not met within {BOUND:?}"
        );
        thread::sleep(Duration::from_millis(10));
    }
}

/// The calling thread re-enters (hold count 2); another thread is kept out,
/// waits, and is woken by the unlock message once the last hold goes.
#[test]
fn same_thread_reenters_and_another_thread_waits() {
    let server = RedisServer::start();
    let client = client(&server, WATCHDOG);
    let lock = client.lock("reentry");

    let first = lock.lock().unwrap();
    let second = lock.lock().unwrap();
    assert_eq!(lock.hold_count().unwrap(), 2);
    assert!(lock.is_held_by_current_task().unwrap());
    assert!(first.field().contains(":thread-"), "{}", first.field());
    assert_eq!(first.field(), second.field());

    let (tx, rx) = mpsc::channel();
    let other = lock.clone();
    let waiter = thread::spawn(move || {
        tx.send(("try_lock", other.try_lock().unwrap().is_some()))
            .unwrap();
        tx.send(("held", other.is_held_by_current_task().unwrap()))
            .unwrap();
        tx.send(("count", other.hold_count().unwrap() > 0)).unwrap();
        let guard = other.lock().unwrap();
        let got = Instant::now();
        tx.send(("locked", other.hold_count().unwrap() == 1))
            .unwrap();
        guard.unlock().unwrap();
        got
    });
    assert_eq!(recv(&rx), ("try_lock", false));
    assert_eq!(recv(&rx), ("held", false));
    assert_eq!(recv(&rx), ("count", false));

    second.unlock().unwrap();
    assert_eq!(lock.hold_count().unwrap(), 1);
    let released = Instant::now();
    first.unlock().unwrap();
    assert_eq!(recv(&rx), ("locked", true));
    let got = waiter.join().unwrap();
    assert!(
        got.duration_since(released) < Duration::from_secs(10),
        "the waiter was not woken by the unlock message"
    );
    assert!(!lock.is_locked().unwrap());
}

/// A guard moved to another thread releases the hold of the thread that
/// took it, and the hold stays that thread's while it travels.
#[test]
fn a_guard_moved_to_another_thread_unlocks_its_own_hold() {
    let server = RedisServer::start();
    let client = client(&server, WATCHDOG);
    let lock = client.lock("moved");
    let guard = lock.lock().unwrap();
    let owner = guard.field().to_owned();

    let other = lock.clone();
    let done = thread::spawn(move || {
        // This thread holds nothing, though it has the guard.
        assert!(!other.is_held_by_current_task().unwrap());
        assert_eq!(guard.field(), owner);
        guard.unlock()
    })
    .join()
    .unwrap();
    done.unwrap();
    assert!(!lock.is_locked().unwrap());
}

/// A dropped guard is released before the drop returns, and a waiting
/// thread then gets the lock.
#[test]
fn a_dropped_guard_releases_the_lock() {
    let server = RedisServer::start();
    let client = client(&server, WATCHDOG);
    let lock = client.lock("dropped");

    let guard = lock.lock().unwrap();
    drop(guard);
    assert!(!lock.is_locked().unwrap(), "released before drop returned");
    assert_eq!(client.held_locks(), 0);

    let guard = lock.lock().unwrap();
    let (tx, rx) = mpsc::channel();
    let other = lock.clone();
    let waiter = thread::spawn(move || {
        tx.send(()).unwrap();
        let guard = other.try_lock_for(BOUND).unwrap();
        guard.is_some()
    });
    recv(&rx);
    drop(guard);
    assert!(waiter.join().unwrap(), "the waiter got the lock");
}

/// A guard dropped while Redis does not answer returns after the release
/// wait (the response timeout) instead of hanging; the release goes on in
/// the background, and the lock is free once Redis answers again (the
/// default 30 s lease is far off: only the release can have freed it).
#[test]
fn a_drop_never_blocks_for_long() {
    let server = RedisServer::start();
    let wait = Duration::from_millis(300);
    let client = blocking::Client::from_builder(
        ferrisson::Client::builder(server.url()).response_timeout(wait),
    )
    .unwrap();
    let lock = client.lock("frozen");
    let guard = lock.lock().unwrap();

    server.freeze();
    let started = Instant::now();
    drop(guard);
    let took = started.elapsed();
    server.thaw();
    assert!(took >= wait, "the drop waited for the release: {took:?}");
    assert!(took < Duration::from_secs(5), "the drop returned: {took:?}");
    eventually(|| !lock.is_locked().unwrap_or(true));
}

/// The watchdog renews the lease while the thread is busy past several
/// leases: the runtime runs between calls.
#[test]
fn the_watchdog_renews_while_the_thread_works() {
    let server = RedisServer::start();
    let watchdog = Duration::from_secs(1);
    let client = client(&server, watchdog);
    let rival = self::client(&server, watchdog);
    let lock = client.lock("long-job");

    let guard = lock.lock().unwrap();
    // The "work": a plain blocking sleep, three leases long.
    thread::sleep(watchdog * 3);
    assert!(!guard.is_lease_lost());
    assert!(lock.is_locked().unwrap());
    assert!(rival.lock("long-job").try_lock().unwrap().is_none());
    assert_eq!(client.held_locks(), 1);
    guard.unlock().unwrap();
    assert_eq!(client.held_locks(), 0);
    assert!(!lock.is_locked().unwrap());
}

/// Leased holds, their expiry, `extend`, `force_unlock`, `info` and
/// `remaining_ttl`.
#[test]
fn leases_and_the_reading_calls() {
    let server = RedisServer::start();
    let client = client(&server, WATCHDOG);
    let lock = client.lock("leased");

    assert_eq!(lock.remaining_ttl().unwrap(), None);
    let mut guard = lock.lock_with_lease(Duration::from_secs(60)).unwrap();
    assert_eq!(guard.lease(), Some(Duration::from_secs(60)));
    let ttl = lock.remaining_ttl().unwrap().unwrap();
    assert!(ttl > Duration::from_secs(50) && ttl <= Duration::from_secs(60));
    guard.extend(Duration::from_secs(120)).unwrap();
    assert!(lock.remaining_ttl().unwrap().unwrap() > Duration::from_secs(100));
    let info = lock.info().unwrap();
    assert_eq!(info.holders.len(), 1);
    assert!(lock.force_unlock().unwrap());
    assert!(!lock.is_locked().unwrap());
    assert!(guard.unlock().is_err(), "the hold was force-unlocked");

    let short = lock
        .try_lock_with_lease(Duration::ZERO, Duration::from_millis(100))
        .unwrap()
        .unwrap();
    eventually(|| !lock.is_locked().unwrap());
    assert!(short.is_lease_lost());
    drop(short);
}

/// Threads that name one owner share its holds; `unlock` on the handle
/// releases a leaked hold.
#[test]
fn a_named_owner_spans_threads() {
    let server = RedisServer::start();
    let client = client(&server, WATCHDOG);
    let lock = client.lock("job").with_owner("job-17");
    lock.lock().unwrap().leak();
    let other = lock.clone();
    let count = thread::spawn(move || {
        let guard = other.try_lock().unwrap().expect("the same owner re-enters");
        let count = other.hold_count().unwrap();
        guard.unlock().unwrap();
        count
    })
    .join()
    .unwrap();
    assert_eq!(count, 2);
    assert!(lock.is_held_by_current_task().unwrap());
    assert!(lock.is_held_by("job-17").unwrap());
    lock.unlock().unwrap();
    assert!(!lock.is_locked().unwrap());
    assert!(lock.unlock().unwrap_err().is_not_held());
}

/// In an async task a blocking call neither panics (tokio would, at a
/// nested `block_on`) nor deadlocks: a helper thread drives it, as the
/// calling task (its own owner, as in the async API). A guard dropped there is released in the background, and
/// a client dropped there does not panic.
#[test]
fn calls_in_an_async_task_do_not_panic() {
    let server = RedisServer::start();
    let client = client(&server, WATCHDOG);
    let lock = client.lock("inside");
    let guard = lock.lock().unwrap();

    let rt = current_thread_runtime();
    let url = server.url();
    let inner = lock.clone();
    let moved = client.clone();
    let task = rt.spawn(async move {
        // A current-thread runtime runs its tasks on the thread that called
        // block_on, this test's thread, which holds the lock; the task is
        // another owner all the same, and shares none of it.
        assert_eq!(inner.hold_count().unwrap(), 0);
        assert!(inner.try_lock().unwrap().is_none());
        let fresh = blocking::Client::connect(url.as_str()).unwrap();
        assert!(fresh.lock("inside").try_lock().unwrap().is_none());
        // Released in the background, without waiting and without a panic.
        drop(guard);
        drop(fresh);
        drop(moved);
        drop(inner);
    });
    rt.block_on(task).unwrap();
    eventually(|| !lock.is_locked().unwrap());

    // The last handle of a client, dropped in a task.
    let other = self::client(&server, WATCHDOG);
    rt.block_on(rt.spawn(async move { drop(other) })).unwrap();
}

/// With a runtime's context but outside its tasks (a `spawn_blocking`
/// thread, the body of `block_on`), calls work, and run as the calling
/// thread.
#[test]
fn calls_work_in_spawn_blocking_and_in_block_on() {
    let server = RedisServer::start();
    let client = client(&server, WATCHDOG);
    let lock = client.lock("beside");
    let rt = current_thread_runtime();

    let held = lock.lock().unwrap();
    let inner = lock.clone();
    rt.block_on(async move {
        // The body of block_on runs on this test's thread: it re-enters.
        let again = inner.lock().unwrap();
        assert_eq!(inner.hold_count().unwrap(), 2);
        again.unlock().unwrap();
        assert_eq!(inner.hold_count().unwrap(), 1);
        // A spawn_blocking thread is another owner.
        let other = inner.clone();
        let kept_out = tokio::task::spawn_blocking(move || other.try_lock().unwrap().is_none())
            .await
            .unwrap();
        assert!(kept_out);
    });
    held.unlock().unwrap();

    let inner = lock.clone();
    let count = rt
        .block_on(async move {
            tokio::task::spawn_blocking(move || {
                let guard = inner.lock().unwrap();
                let count = inner.hold_count().unwrap();
                drop(guard); // no waiting here: released in the background
                count
            })
            .await
        })
        .unwrap();
    assert_eq!(count, 1);
    eventually(|| !lock.is_locked().unwrap());
}

/// A blocking and an async call on the same plain thread use the same
/// owner id, `thread-<n>`.
#[test]
fn blocking_and_async_agree_on_the_thread_owner() {
    let server = RedisServer::start();
    let client = client(&server, WATCHDOG);
    let guard = client.lock("agree").lock().unwrap();
    let rt = current_thread_runtime();
    let url = server.url();
    let owner = rt.block_on(async move {
        let async_client = ferrisson::Client::connect(url.as_str()).await.unwrap();
        let guard = async_client.lock("agree-async").lock().await.unwrap();
        let owner = guard.field().to_owned();
        guard.unlock().await.unwrap();
        owner
    });
    let thread_id = |field: &str| field.split_once(':').unwrap().1.to_owned();
    assert_eq!(thread_id(&owner), thread_id(guard.field()));
    assert!(thread_id(&owner).starts_with("thread-"));
    guard.unlock().unwrap();
}

/// Dropping the client returns promptly; a guard outliving it keeps the
/// runtime, so its watchdog goes on renewing and its unlock works.
#[test]
fn dropping_the_client() {
    let server = RedisServer::start();
    let watchdog = Duration::from_secs(1);
    let client = client(&server, watchdog);
    let lock = client.lock("outlived");
    let guard = lock.lock().unwrap();
    let started = Instant::now();
    drop(lock);
    drop(client);
    assert!(started.elapsed() < Duration::from_secs(5));
    thread::sleep(watchdog * 3);
    assert!(!guard.is_lease_lost());
    let started = Instant::now();
    guard.unlock().unwrap();
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(server.cmd(&["EXISTS", "outlived"]).as_int(), Some(0));

    // A client that was never used drops at once too.
    let client = self::client(&server, WATCHDOG);
    let started = Instant::now();
    drop(client);
    assert!(started.elapsed() < Duration::from_secs(5));
}

/// The other lock kinds: fencing tokens rise, readers share, a writer is
/// alone, a non-reentrant lock refuses its holder, a spin lock excludes.
#[test]
fn the_other_lock_kinds() {
    let server = RedisServer::start();
    let client = client(&server, WATCHDOG);

    let fenced = client.fenced_lock("fenced");
    let a = fenced.lock().unwrap();
    let b = fenced.lock().unwrap();
    assert!(b.token() > a.token());
    assert_eq!(fenced.current_token().unwrap(), Some(b.token()));
    b.unlock().unwrap();
    a.unlock().unwrap();

    let rw = client.read_write_lock("rw");
    let read = rw.read().lock().unwrap();
    let reader = rw.read();
    let writer = rw.write();
    let (shared, excluded) = thread::spawn(move || {
        let shared = reader.try_lock().unwrap().is_some();
        let excluded = writer.try_lock().unwrap().is_none();
        (shared, excluded)
    })
    .join()
    .unwrap();
    assert!(shared && excluded);
    read.unlock().unwrap();

    let once = client.non_reentrant_lock("once");
    let guard = once.lock().unwrap();
    let err = once.try_lock().unwrap_err();
    assert!(matches!(err, Error::NonReentrantReacquire { .. }), "{err}");
    guard.unlock().unwrap();

    let spin = client.spin_lock("spin");
    let guard = spin.lock().unwrap();
    let other = spin.clone();
    let waited = thread::spawn(move || other.try_lock_for(BOUND).unwrap().is_some());
    guard.unlock().unwrap();
    assert!(waited.join().unwrap());

    let fair = client.fair_lock("fair");
    fair.lock().unwrap().unlock().unwrap();
}

/// A semaphore's waiter on another thread is woken by a release.
#[test]
fn semaphore_permits_across_threads() {
    let server = RedisServer::start();
    let client = client(&server, WATCHDOG);
    let seats = client.semaphore("seats");
    assert!(seats.try_set_permits(2).unwrap());
    assert!(!seats.try_set_permits(5).unwrap());
    seats.acquire().unwrap();
    assert!(seats.try_acquire().unwrap());
    assert!(!seats.try_acquire().unwrap());
    assert_eq!(seats.available_permits().unwrap(), 0);

    let (tx, rx) = mpsc::channel();
    let other = seats.clone();
    let waiter = thread::spawn(move || {
        tx.send(()).unwrap();
        other.try_acquire_for(BOUND).unwrap()
    });
    recv(&rx);
    seats.release().unwrap();
    assert!(waiter.join().unwrap());
    seats.release_many(2).unwrap();
    assert_eq!(seats.drain_permits().unwrap(), 2);
    assert!(seats.delete().unwrap());
}

/// Permits with ids: a waiter on another thread gets the permit a release
/// gives back, a dropped permit is given back before the drop returns, and
/// a leased permit comes back by itself.
#[test]
fn expirable_permits_across_threads() {
    let server = RedisServer::start();
    let client = client(&server, WATCHDOG);
    let seats = client.permit_expirable_semaphore("gpu");
    assert!(seats.try_set_permits(1).unwrap());
    let permit = seats.acquire().unwrap();
    assert_eq!(permit.name(), "gpu");
    assert!(seats.try_acquire().unwrap().is_none());

    let (tx, rx) = mpsc::channel();
    let other = seats.clone();
    let waiter = thread::spawn(move || {
        tx.send(()).unwrap();
        let permit = other.try_acquire_for(BOUND).unwrap();
        permit.map(|p| p.id())
    });
    recv(&rx);
    let first = permit.id();
    permit.release().unwrap();
    let second = waiter.join().unwrap().expect("the waiter got the permit");
    assert_ne!(first, second);
    // The waiter's permit was dropped with its thread: given back.
    assert_eq!(seats.available_permits().unwrap(), 1);

    let mut leased = seats.acquire_with_lease(Duration::from_secs(60)).unwrap();
    assert!(seats.lease_of(leased.id()).unwrap().is_some());
    seats.update_lease(&mut leased, None).unwrap();
    assert_eq!(seats.lease_of(leased.id()).unwrap(), None);
    let id = leased.id();
    leased.leak();
    assert_eq!(seats.acquired_permits().unwrap(), 1);
    seats.release_by_id(id).unwrap();

    let short = seats
        .try_acquire_with_lease(Duration::ZERO, Duration::from_millis(100))
        .unwrap()
        .unwrap();
    eventually(|| seats.available_permits().unwrap() == 1);
    assert!(short.is_expired());
    assert!(short.release().unwrap_err().is_permit_not_out());
}

/// The blocking face of a permit kept by the watchdog: `keep_alive` keeps
/// it out past its lease, its lease handle (read on another thread) says
/// so, and says it lost once another client released it by id.
#[test]
fn a_blocking_permit_kept_by_the_watchdog() {
    let server = RedisServer::start();
    let watchdog = Duration::from_millis(600);
    let client = client(&server, watchdog);
    let seats = client.permit_expirable_semaphore("kept");
    assert!(seats.try_set_permits(1).unwrap());
    let mut permit = seats
        .acquire_with_lease(Duration::from_millis(200))
        .unwrap();
    permit.keep_alive().unwrap();
    let lease = permit.lease_handle();
    assert!(lease.is_renewed());
    assert!(seats.try_acquire_for(3 * watchdog).unwrap().is_none());
    assert!(!permit.is_expired());
    let watcher = thread::spawn(move || lease.lost_timeout(BOUND).unwrap());
    seats.release_by_id(permit.id()).unwrap();
    assert!(watcher.join().unwrap(), "the handle saw the permit lost");
    assert!(permit.is_expired());
    assert!(permit.release().unwrap_err().is_permit_not_out());
}

/// A latch opens a waiting thread at zero and not before.
#[test]
fn latch_opens_a_waiting_thread() {
    let server = RedisServer::start();
    let client = client(&server, WATCHDOG);
    let latch = client.count_down_latch("ready");
    assert!(latch.try_set_count(2).unwrap());

    let (tx, rx) = mpsc::channel();
    let other = latch.clone();
    let waiter = thread::spawn(move || {
        tx.send(()).unwrap();
        other.wait_for(BOUND).unwrap()
    });
    recv(&rx);
    assert_eq!(latch.count_down().unwrap(), 1);
    assert!(!latch.wait_for(Duration::from_millis(10)).unwrap());
    assert_eq!(latch.count_down().unwrap(), 0);
    assert!(waiter.join().unwrap());
    assert_eq!(latch.count().unwrap(), 0);
    latch.wait().unwrap();
}

/// The handles and guards cross threads.
#[test]
fn handles_and_guards_are_send_and_sync() {
    fn send_sync<T: Send + Sync + 'static>() {}
    fn send<T: Send + 'static>() {}
    send_sync::<blocking::Client>();
    send_sync::<blocking::Lock>();
    send_sync::<blocking::FencedLock>();
    send_sync::<blocking::ReadWriteLock>();
    send_sync::<blocking::Semaphore>();
    send_sync::<blocking::CountDownLatch>();
    send::<blocking::LockGuard>();
    send::<blocking::FencedGuard>();
    send_sync::<blocking::PermitExpirableSemaphore>();
    send::<blocking::Permit>();
    send_sync::<blocking::MultiLock>();
    send_sync::<blocking::RedLock>();
    send::<blocking::MultiLockGuard>();
    send::<blocking::RedLockGuard>();
    send_sync::<Box<dyn blocking::DistributedLock>>();
}

/// Whether `key` exists on `server`, asked outside ferrisson.
fn exists(server: &RedisServer, key: &str) -> bool {
    server.cmd(&["EXISTS", key]).as_int() == Some(1)
}

fn multi(locks: Vec<Box<dyn blocking::DistributedLock>>) -> blocking::MultiLock {
    blocking::MultiLock::new(locks)
}

/// A multi-lock over two clients on two servers: all or nothing, owned by
/// the calling thread (another thread is kept out, waits, and gets both
/// once they are released), and released by drop.
#[test]
fn a_multi_lock_across_two_servers() {
    let (one, two) = (RedisServer::start(), RedisServer::start());
    let (a, b) = (client(&one, WATCHDOG), client(&two, WATCHDOG));
    let both = multi(vec![
        Box::new(a.lock("account")),
        Box::new(b.fair_lock("ledger")),
    ]);
    assert_eq!(
        both.locks().map(|l| l.name()).collect::<Vec<_>>(),
        ["account", "ledger"]
    );

    let guard = both.lock().unwrap();
    assert_eq!(guard.names(), ["account", "ledger"]);
    assert!(exists(&one, "account") && exists(&two, "ledger"));
    assert!(!guard.is_lease_lost());

    // Another thread: kept out of the multi-lock, and of each lock alone.
    let (tx, rx) = mpsc::channel();
    let (other, ledger) = (both.clone(), b.fair_lock("ledger"));
    let waiter = thread::spawn(move || {
        assert!(other.try_lock().unwrap().is_none());
        assert!(ledger.try_lock().unwrap().is_none());
        tx.send(()).unwrap();
        let got = other
            .try_lock_for(BOUND)
            .unwrap()
            .expect("both, once released");
        tx.send(()).unwrap();
        got
    });
    recv(&rx);
    guard.unlock().unwrap();
    recv(&rx);
    let theirs = waiter.join().unwrap();
    assert!(exists(&one, "account") && exists(&two, "ledger"));
    drop(theirs);
    assert!(!exists(&one, "account") && !exists(&two, "ledger"));

    // One lock busy: nothing is held after the attempt.
    let busy = b.fair_lock("ledger").with_owner("rival").lock().unwrap();
    assert!(both.try_lock().unwrap().is_none());
    assert!(!exists(&one, "account"));
    busy.unlock().unwrap();

    // Leases, and the thread re-enters a reentrant lock it holds.
    let leased = both.lock_with_lease(Duration::from_secs(30)).unwrap();
    let again = both
        .try_lock_with_lease(Duration::ZERO, Duration::from_secs(30))
        .unwrap()
        .expect("the same thread re-enters");
    assert_eq!(a.lock("account").hold_count().unwrap(), 2);
    again.unlock().unwrap();
    leased.unlock().unwrap();
    assert!(!exists(&one, "account") && !exists(&two, "ledger"));

    let empty = multi(Vec::new());
    assert!(matches!(empty.try_lock(), Err(Error::InvalidArgument(_))));
}

/// A RedLock over three servers holds with a majority (one server's lock
/// is taken by a rival), keeps out another thread, and is released on
/// every server it was taken on.
#[test]
fn a_red_lock_on_a_majority() {
    let servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let clients: Vec<blocking::Client> = servers.iter().map(|s| client(s, WATCHDOG)).collect();
    let red = blocking::RedLock::new(
        clients
            .iter()
            .map(|c| Box::new(c.lock("report")) as Box<dyn blocking::DistributedLock>)
            .collect(),
    );
    assert_eq!(red.quorum(), 2);
    let rival = clients[2]
        .lock("report")
        .with_owner("rival")
        .lock()
        .unwrap();

    let guard = red
        .try_lock_with_lease(BOUND, Duration::from_secs(30))
        .unwrap()
        .expect("a majority");
    assert_eq!(guard.held(), 2);
    assert!(guard.validity().is_some_and(|v| v > Duration::ZERO));
    assert!(!guard.is_lease_lost());

    let other = red.clone();
    let kept_out = thread::spawn(move || other.try_lock().unwrap().is_none());
    assert!(kept_out.join().unwrap());

    guard.unlock().unwrap();
    assert!(!exists(&servers[0], "report") && !exists(&servers[1], "report"));
    assert!(exists(&servers[2], "report"), "the rival's hold stays");
    rival.unlock().unwrap();

    // Watchdog mode, released by drop. A server that answered after the
    // round's grace had its hold given back in the background.
    let guard = red.lock().unwrap();
    assert_eq!(guard.validity(), None);
    drop(guard);
    eventually(|| servers.iter().all(|s| !exists(s, "report")));
}

/// A RedLock attempt that a round gives up on (its server stalls) is given
/// back on that server's own client runtime: the first client's runtime
/// stopping does not lose it.
#[test]
fn a_given_up_attempt_is_given_back_on_its_own_client() {
    let servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let mut clients: Vec<blocking::Client> = servers.iter().map(|s| client(s, WATCHDOG)).collect();
    let red = blocking::RedLock::new(
        clients
            .iter()
            .map(|c| Box::new(c.lock("stalled")) as Box<dyn blocking::DistributedLock>)
            .collect(),
    );
    // A first round loads the scripts everywhere.
    red.lock().unwrap().unlock().unwrap();

    servers[2].freeze();
    let guard = red.lock().unwrap();
    assert_eq!(guard.held(), 2, "the stalled server is left out");
    guard.unlock().unwrap();
    // Everything of the first two clients goes; the third stays.
    let third = clients.pop().unwrap();
    drop(red);
    drop(clients);
    servers[2].thaw();
    // The 30 s lease is far off: only the give-back can free it.
    eventually(|| !exists(&servers[2], "stalled"));
    drop(third);
}

/// A multi-lock's guard outlives the clients and the handle: every
/// client's watchdog keeps renewing, and its unlock releases both.
#[test]
fn a_multi_lock_guard_outlives_its_clients() {
    let (one, two) = (RedisServer::start(), RedisServer::start());
    let watchdog = Duration::from_secs(2);
    let (a, b) = (client(&one, watchdog), client(&two, watchdog));
    let both = multi(vec![Box::new(a.lock("x")), Box::new(b.lock("y"))]);
    let guard = both.lock().unwrap();
    drop((both, a, b));
    thread::sleep(watchdog * 5 / 2);
    assert!(!guard.is_lease_lost());
    assert!(exists(&one, "x") && exists(&two, "y"));
    guard.unlock().unwrap();
    assert!(!exists(&one, "x") && !exists(&two, "y"));
}

/// Code that takes any blocking lock through the trait, fenced included.
#[test]
fn any_blocking_lock_through_the_trait() {
    let server = RedisServer::start();
    let client = client(&server, WATCHDOG);
    let locks: Vec<Box<dyn blocking::DistributedLock>> = vec![
        Box::new(client.lock("plain")),
        Box::new(client.spin_lock("spin")),
        Box::new(client.fenced_lock("fenced")),
        Box::new(client.fair_lock("fair")),
        Box::new(client.non_reentrant_lock("once")),
        Box::new(client.read_write_lock("rw").write()),
    ];
    for lock in &locks {
        let guard = lock.try_lock_for(BOUND).unwrap().expect("free");
        assert!(lock.is_locked().unwrap(), "{}", lock.name());
        assert!(lock.is_held_by_current_task().unwrap());
        assert_eq!(lock.hold_count().unwrap(), 1);
        assert_eq!(lock.info().unwrap().holders.len(), 1);
        // The owner field is `<client-uuid>:<owner-id>` (`:write` after it
        // for a write lock).
        let (_, field) = guard.field().split_once(':').unwrap();
        let owner = field.trim_end_matches(":write");
        assert!(lock.is_held_by(owner).unwrap(), "{}", guard.field());
        assert!(!lock.is_held_by("someone-else").unwrap());
        guard.unlock().unwrap();
        assert!(!lock.is_locked().unwrap());
        let leased = lock.lock_with_lease(Duration::from_secs(30)).unwrap();
        assert!(lock.remaining_ttl().unwrap().is_some());
        leased.leak();
        lock.unlock().unwrap();
        assert!(!lock.is_locked().unwrap());
        let leased = lock.lock_with_lease(Duration::from_secs(30)).unwrap();
        assert!(lock.force_unlock().unwrap());
        drop(leased);
    }
}

/// A guard that holds the last handle to its client's runtime: its drop
/// waits (within the response timeout, twice) for its release, even while
/// Redis stalls past the first wait, so the lock is free when the drop
/// returns (the 30 s lease is far off: only the release can free it).
#[test]
fn the_last_guard_drop_waits_for_its_release() {
    let server = RedisServer::start();
    let wait = Duration::from_secs(2);
    let client = blocking::Client::from_builder(
        ferrisson::Client::builder(server.url()).response_timeout(wait),
    )
    .unwrap();
    let lock = client.lock("last");
    let guard = lock.lock().unwrap();
    drop(lock);
    drop(client);

    server.freeze();
    let started = Instant::now();
    thread::scope(|scope| {
        scope.spawn(|| {
            thread::sleep(wait + wait / 4);
            server.thaw();
        });
        drop(guard);
        assert!(
            started.elapsed() >= wait,
            "the drop waited past the first wait"
        );
        assert!(!exists(&server, "last"), "released when the drop returned");
    });
}

/// The last guard dropped on a thread with an async runtime's context does
/// not block there, and its release still runs to its end: the runtime is
/// stopped by a thread of its own once the release is done.
#[test]
fn the_last_guard_dropped_in_an_async_context_is_still_released() {
    let server = RedisServer::start();
    let client = client(&server, WATCHDOG);
    let lock = client.lock("last-async");
    let guard = lock.lock().unwrap();
    drop(lock);
    drop(client);
    let started = Instant::now();
    current_thread_runtime().block_on(async move { drop(guard) });
    let took = started.elapsed();
    assert!(
        took < Duration::from_secs(2),
        "the drop did not wait: {took:?}"
    );
    eventually(|| !exists(&server, "last-async"));
}

/// A guard dropped while the network is cut, for longer than an awaited
/// release's sends take: the drop returns (after at most the response
/// timeout), and its release keeps trying in the background until the
/// network is back, long before the 60 s lease would free the lock. So does
/// a dropped permit's.
#[test]
fn a_guard_dropped_in_a_network_cut_is_released_once_it_is_back() {
    let server = RedisServer::start();
    let proxy = common::proxy::Proxy::start(server.port());
    let client = blocking::Client::from_builder(
        ferrisson::Client::builder(proxy.url()).watchdog_timeout(WATCHDOG),
    )
    .expect("connect");
    let lease = Duration::from_secs(60);
    let seats = client.permit_expirable_semaphore("cut:seats");
    assert!(seats.try_set_permits(1).unwrap());
    let permit = seats.acquire_with_lease(lease).unwrap();
    let guard = client.lock("cut:dropped").lock_with_lease(lease).unwrap();
    let out = || server.cmd(&["ZCARD", "{cut:seats}:timeout"]).as_int();
    proxy.refuse(true);
    drop(guard);
    drop(permit);
    // Longer than `release_attempts` (4) sends, spaced 100 to 300 ms apart.
    thread::sleep(Duration::from_secs(3));
    assert!(common::exists(&server, "cut:dropped"));
    assert_eq!(out(), Some(1));
    proxy.refuse(false);
    eventually(|| !common::exists(&server, "cut:dropped") && out() == Some(0));
}
