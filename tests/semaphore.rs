//! The semaphore and the permit-expirable semaphore against a real
//! `redis-server`, one private server per test.

use ferrisson_test_support as common;

use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::rng::Rng;
use common::{
    client, eventually, exists, next_message, settled, soon, within, RawSubscriber, RedisServer,
};
use ferrisson::{Error, PermitId};

const WATCHDOG: Duration = Duration::from_secs(30);

fn get(server: &RedisServer, key: &str) -> Option<String> {
    server.cmd(&["GET", key]).as_string()
}

/// Many tasks in two clients take and give back 1 or 2 permits of 3: the
/// permits in use never exceed 3 (none is handed out twice), the count in
/// Redis never goes negative, and every permit is back at the end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permits_are_never_negative_nor_handed_out_twice() {
    let server = RedisServer::start();
    let clients = [
        client(&server, WATCHDOG).await,
        client(&server, WATCHDOG).await,
    ];
    assert!(soon(clients[0].semaphore("sem").try_set_permits(3))
        .await
        .unwrap());
    let in_use = Arc::new(AtomicI64::new(0));
    let peak = Arc::new(AtomicI64::new(0));
    let negative = Arc::new(AtomicUsize::new(0));
    const TASKS: usize = 10;
    const ROUNDS: usize = 40;
    let mut tasks = Vec::new();
    for task in 0..TASKS {
        let sem = clients[task % 2].semaphore("sem");
        let (in_use, peak, negative) = (
            Arc::clone(&in_use),
            Arc::clone(&peak),
            Arc::clone(&negative),
        );
        tasks.push(tokio::spawn(async move {
            for round in 0..ROUNDS {
                let n = 1 + ((task + round) % 2) as u32;
                sem.acquire_many(n).await.unwrap();
                let now = in_use.fetch_add(i64::from(n), Ordering::SeqCst) + i64::from(n);
                peak.fetch_max(now, Ordering::SeqCst);
                if sem.available_permits().await.unwrap() < 0 {
                    negative.fetch_add(1, Ordering::SeqCst);
                }
                tokio::task::yield_now().await;
                in_use.fetch_sub(i64::from(n), Ordering::SeqCst);
                sem.release_many(n).await.unwrap();
            }
        }));
    }
    for task in tasks {
        within(Duration::from_secs(120), task).await.unwrap();
    }
    let peak = peak.load(Ordering::SeqCst);
    println!(
        "{} acquisitions, peak permits in use {peak} of 3",
        TASKS * ROUNDS
    );
    assert!(peak <= 3, "{peak} permits were in use at once");
    assert_eq!(negative.load(Ordering::SeqCst), 0);
    assert_eq!(get(&server, "sem").as_deref(), Some("3"));
    for client in &clients {
        settled(client).await;
    }
}

/// A waiter is woken by the release's message, long before it would look
/// again by itself (every 10 s with the default watchdog timeout).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_wakes_the_waiter() {
    let server = RedisServer::start();
    let (a, b) = (
        client(&server, WATCHDOG).await,
        client(&server, WATCHDOG).await,
    );
    assert!(a.semaphore("sem").try_set_permits(0).await.unwrap());
    let sem = a.semaphore("sem");
    let waiter = tokio::spawn(async move {
        sem.acquire_many(2).await.unwrap();
        Instant::now()
    });
    eventually(Duration::from_secs(10), || async { a.subscriptions() == 1 }).await;
    b.semaphore("sem").release().await.unwrap();
    // One permit is not enough for the waiter: it goes on waiting.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!waiter.is_finished());
    let released = Instant::now();
    b.semaphore("sem").add_permits(1).await.unwrap();
    let woke = within(Duration::from_secs(5), waiter).await.unwrap();
    println!("release to acquire: {:?}", woke - released);
    assert_eq!(get(&server, "sem").as_deref(), Some("0"));
    settled(&a).await;
}

/// `try_acquire` and `try_acquire_for` give up without taking anything
/// and without a subscription left behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tries_give_up_cleanly() {
    let server = RedisServer::start();
    let client = client(&server, WATCHDOG).await;
    let sem = client.semaphore("sem");
    assert!(
        !sem.try_acquire().await.unwrap(),
        "an unset semaphore has no permits"
    );
    sem.try_set_permits(2).await.unwrap();
    assert!(!sem.try_acquire_many(3).await.unwrap());
    let started = Instant::now();
    assert!(
        !soon(sem.try_acquire_many_for(3, Duration::from_millis(300)))
            .await
            .unwrap()
    );
    assert!(started.elapsed() >= Duration::from_millis(300));
    assert!(sem.try_acquire_many(2).await.unwrap());
    assert_eq!(sem.available_permits().await.unwrap(), 0);
    settled(&client).await;
}

/// PROTOCOL.md: the count is a string at the plain name, the channel is
/// `redisson_sc:{name}` and carries the new count; setting is once only;
/// drain takes what is there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_layout_is_redissons() {
    let server = RedisServer::start();
    let client = client(&server, WATCHDOG).await;
    let sem = client.semaphore("jobs");
    assert_eq!(sem.available_permits().await.unwrap(), 0);
    let sub = RawSubscriber::new(&server, "redisson_sc:{jobs}");
    assert!(sem.try_set_permits(5).await.unwrap());
    assert_eq!(
        server.cmd(&["TYPE", "jobs"]).as_string().as_deref(),
        Some("string")
    );
    assert_eq!(get(&server, "jobs").as_deref(), Some("5"));
    assert!(!sem.try_set_permits(9).await.unwrap(), "set only once");
    assert_eq!(get(&server, "jobs").as_deref(), Some("5"));
    let mut sub = sub;
    let first = tokio::task::spawn_blocking(move || {
        let m = sub.next_message(Duration::from_secs(10));
        (m, sub)
    });
    let (message, sub) = first.await.unwrap();
    assert_eq!(message, Some(("redisson_sc:{jobs}".into(), "5".into())));
    sem.acquire_many(2).await.unwrap();
    sem.release().await.unwrap();
    assert_eq!(
        next_message(sub).await,
        Some(("redisson_sc:{jobs}".into(), "4".into()))
    );
    assert_eq!(sem.drain_permits().await.unwrap(), 4);
    assert_eq!(get(&server, "jobs").as_deref(), Some("0"));
    assert_eq!(sem.drain_permits().await.unwrap(), 0);
    // A tagged name keeps its tag in the channel.
    let sub = RawSubscriber::new(&server, "redisson_sc:{t}:1");
    client.semaphore("{t}:1").release().await.unwrap();
    assert_eq!(
        next_message(sub).await,
        Some(("redisson_sc:{t}:1".into(), "1".into()))
    );
}

/// The calls Redisson users migrate with: one-permit shorthands, permits
/// taken away by `add_permits(-n)` (the count may go below zero; the new
/// count is published as any release's), `release_if_exists`,
/// `try_set_permits_with_ttl`, `delete`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redissons_other_calls() {
    let server = RedisServer::start();
    let client = client(&server, WATCHDOG).await;
    let sem = client.semaphore("calls");
    // A missing semaphore is not created by release_if_exists.
    assert!(!soon(sem.release_if_exists(2)).await.unwrap());
    assert!(!exists(&server, "calls"));
    assert!(soon(sem.try_set_permits(3)).await.unwrap());
    assert!(soon(sem.release_if_exists(2)).await.unwrap());
    assert_eq!(get(&server, "calls").as_deref(), Some("5"));

    // One permit each.
    assert!(soon(sem.try_acquire()).await.unwrap());
    soon(sem.acquire()).await.unwrap();
    assert!(soon(sem.try_acquire_for(Duration::from_millis(10)))
        .await
        .unwrap());
    assert_eq!(get(&server, "calls").as_deref(), Some("2"));

    // Taking permits away publishes the new count; below zero is allowed,
    // and acquires wait until releases bring it back.
    let sub = RawSubscriber::new(&server, "redisson_sc:{calls}");
    soon(sem.add_permits(-5)).await.unwrap();
    assert_eq!(
        next_message(sub).await,
        Some(("redisson_sc:{calls}".into(), "-3".into()))
    );
    assert_eq!(soon(sem.available_permits()).await.unwrap(), -3);
    assert!(!soon(sem.try_acquire()).await.unwrap());
    soon(sem.add_permits(4)).await.unwrap();
    assert!(soon(sem.try_acquire()).await.unwrap());
    assert_eq!(get(&server, "calls").as_deref(), Some("0"));
    for bad in [0, i64::MAX, -(i64::from(u32::MAX) + 1)] {
        let err = soon(sem.add_permits(bad)).await.unwrap_err();
        assert!(matches!(err, Error::InvalidArgument(_)), "{bad}: {err}");
    }
    assert_eq!(get(&server, "calls").as_deref(), Some("0"));

    // Deleted: gone, and release_if_exists leaves it gone.
    assert!(soon(sem.delete()).await.unwrap());
    assert!(!soon(sem.delete()).await.unwrap());
    assert!(!exists(&server, "calls"));
    assert!(!soon(sem.release_if_exists(1)).await.unwrap());
    assert!(!exists(&server, "calls"));

    // Set once with a TTL; releases keep it.
    let ttl = Duration::from_secs(20);
    assert!(soon(sem.try_set_permits_with_ttl(2, ttl)).await.unwrap());
    assert!(!soon(sem.try_set_permits_with_ttl(7, ttl)).await.unwrap());
    assert_eq!(get(&server, "calls").as_deref(), Some("2"));
    soon(sem.release()).await.unwrap();
    let pttl = server.cmd(&["PTTL", "calls"]).as_int().unwrap();
    assert!(pttl > 0 && pttl <= 20_000, "PTTL {pttl}");
    let err = soon(
        client
            .semaphore("other")
            .try_set_permits_with_ttl(1, Duration::ZERO),
    )
    .await
    .unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(_)), "{err}");
    assert!(!exists(&server, "other"));
    settled(&client).await;
}

/// Bad input is refused with a clear error and writes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_refused() {
    let server = RedisServer::start();
    let client = client(&server, WATCHDOG).await;
    let sem = client.semaphore("sem");
    for result in [
        sem.acquire_many(0).await.map(|_| ()),
        sem.try_acquire_many(0).await.map(|_| ()),
        sem.release_many(0).await,
        sem.add_permits(0).await,
        sem.try_acquire_for(Duration::from_secs(400 * 24 * 3600))
            .await
            .map(|_| ()),
        client.semaphore("").try_set_permits(1).await.map(|_| ()),
        client.semaphore("").available_permits().await.map(|_| ()),
    ] {
        assert!(
            matches!(result, Err(Error::InvalidArgument(_))),
            "{result:?}"
        );
    }
    assert!(!exists(&server, "sem"));
    server.cmd(&["HSET", "hash", "f", "1"]);
    let hash = client.semaphore("hash");
    assert!(matches!(
        hash.try_acquire().await,
        Err(Error::WrongType { .. })
    ));
    assert!(matches!(hash.release().await, Err(Error::WrongType { .. })));
    assert!(matches!(
        hash.available_permits().await,
        Err(Error::WrongType { .. })
    ));
    server.cmd(&["SET", "text", "many"]);
    // A string that is no integer is no semaphore: another type's data.
    let err = client.semaphore("text").try_acquire().await.unwrap_err();
    assert!(
        matches!(&err, Error::WrongType { key_type, .. } if key_type == "string"),
        "{err}"
    );
    assert_eq!(get(&server, "text").as_deref(), Some("many"));
}

/// Thousands of acquires dropped at random points (before the send, in
/// flight, while waiting) never leave a permit taken.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_acquires_take_nothing() {
    let server = RedisServer::start();
    let client = client(&server, WATCHDOG).await;
    let sem = client.semaphore("sem");
    sem.try_set_permits(2).await.unwrap();
    // Another task takes every permit now and then, so that dropped
    // acquires are also caught while waiting.
    let stop = Arc::new(AtomicUsize::new(0));
    let hog = {
        let (sem, stop) = (sem.clone(), Arc::clone(&stop));
        tokio::spawn(async move {
            while stop.load(Ordering::SeqCst) == 0 {
                sem.acquire_many(2).await.unwrap();
                tokio::time::sleep(Duration::from_millis(1)).await;
                sem.release_many(2).await.unwrap();
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        })
    };
    let mut jitter = Rng::from_env("semaphore cancellation");
    let mut kept = 0;
    for i in 0..1500 {
        let cut = Duration::from_micros(jitter.below(600));
        let n = 1 + (i % 2) as u32;
        if let Ok(result) = tokio::time::timeout(cut, sem.acquire_many(n)).await {
            result.unwrap();
            kept += 1;
            sem.release_many(n).await.unwrap();
        }
    }
    stop.store(1, Ordering::SeqCst);
    within(Duration::from_secs(20), hog).await.unwrap();
    println!("1500 acquires, {kept} completed, the rest dropped");
    eventually(Duration::from_secs(10), || async {
        sem.available_permits().await.unwrap() == 2
    })
    .await;
    settled(&client).await;
}

/// An expirable permit whose lease ends comes back by itself: a waiter
/// gets it no earlier than the lease allows (and promptly after, woken by
/// the lease's end), and the late holder's release says it was not out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_permits_come_back_by_themselves() {
    let server = RedisServer::start();
    let (a, b) = (
        client(&server, WATCHDOG).await,
        client(&server, WATCHDOG).await,
    );
    let sem = a.permit_expirable_semaphore("seats");
    assert!(sem.try_set_permits(1).await.unwrap());
    let lease = Duration::from_millis(400);
    let sent = Instant::now();
    let permit = sem.acquire_with_lease(lease).await.unwrap();
    assert_eq!(permit.id().to_string().len(), 32);
    assert!(permit.remaining_lease().unwrap() <= lease);
    let other = b.permit_expirable_semaphore("seats");
    let second = soon(other.acquire()).await.unwrap();
    let gap = sent.elapsed();
    println!("lease {lease:?}: the next holder got the permit after {gap:?}");
    assert!(
        gap >= lease,
        "taken back after {gap:?}, before its lease of {lease:?}"
    );
    assert!(gap < lease + Duration::from_secs(3), "{gap:?}");
    assert!(permit.is_expired());
    let err = permit.release().await.unwrap_err();
    assert!(err.is_permit_not_out(), "{err}");
    // The late release gave nothing back: the new holder's permit is out.
    assert_eq!(other.available_permits().await.unwrap(), 0);
    second.release().await.unwrap();
    assert_eq!(other.available_permits().await.unwrap(), 1);
    settled(&a).await;
    settled(&b).await;
}

/// PROTOCOL.md: the count at `name`, the permits out in `{name}:timeout`
/// with the id's 16 raw bytes as member and the lease's end (epoch ms) as
/// score, or Redisson's no-expiry score; ids travel as 32 hex digits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_expirable_layout_is_redissons() {
    let server = RedisServer::start();
    let client = client(&server, WATCHDOG).await;
    let sem = client.permit_expirable_semaphore("gpu");
    sem.try_set_permits(3).await.unwrap();
    let leased = sem
        .acquire_with_lease(Duration::from_secs(60))
        .await
        .unwrap();
    let forever = sem.acquire().await.unwrap();
    assert_eq!(get(&server, "gpu").as_deref(), Some("1"));
    let raw = redis::Client::open(server.url()).unwrap();
    let mut raw = raw.get_multiplexed_async_connection().await.unwrap();
    let out: Vec<(Vec<u8>, f64)> = redis::cmd("ZRANGE")
        .arg("{gpu}:timeout")
        .arg(0)
        .arg(-1)
        .arg("WITHSCORES")
        .query_async(&mut raw)
        .await
        .unwrap();
    assert_eq!(out.len(), 2);
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as f64;
    assert_eq!(out[0].0, leased.id().as_bytes().to_vec());
    assert!(
        (out[0].1 - (now_ms + 60_000.0)).abs() < 5_000.0,
        "{}",
        out[0].1
    );
    assert_eq!(out[1].0, forever.id().as_bytes().to_vec());
    assert_eq!(out[1].1, 922_337_203_685_477.0);
    // Ids parse back, in either case, and nothing else does.
    let text = forever.id().to_string();
    assert_eq!(text.parse::<PermitId>().unwrap(), forever.id());
    assert_eq!(
        text.to_uppercase().parse::<PermitId>().unwrap(),
        forever.id()
    );
    for bad in [
        "",
        "xyz",
        &text[..31],
        &format!("{text}0"),
        &format!("{}g", &text[..31]),
        // A sign is not a hex digit, even where a number parser takes it.
        &format!("+{}", &text[1..]),
        &format!("{}+f{}", &text[..4], &text[6..]),
        &format!("-{}", &text[1..]),
    ] {
        assert!(bad.parse::<PermitId>().is_err(), "{bad}");
    }
    leased.release().await.unwrap();
    forever.release().await.unwrap();
    assert_eq!(get(&server, "gpu").as_deref(), Some("3"));
    assert!(!exists(&server, "{gpu}:timeout"));
}

/// A lease can be renewed while the permit is out (not after), and a
/// permit can be released by id from another client, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_update_and_ids_release_once() {
    let server = RedisServer::start();
    let (a, b) = (
        client(&server, WATCHDOG).await,
        client(&server, WATCHDOG).await,
    );
    let sem = a.permit_expirable_semaphore("seats");
    sem.try_set_permits(2).await.unwrap();
    let mut permit = sem
        .acquire_with_lease(Duration::from_millis(2000))
        .await
        .unwrap();
    sem.update_lease(&mut permit, Some(Duration::from_secs(60)))
        .await
        .unwrap();
    assert!(permit.remaining_lease().unwrap() > Duration::from_secs(50));
    // Past the first lease (time is the subject here).
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(
        sem.available_permits().await.unwrap(),
        1,
        "the renewed lease still holds"
    );
    // Handed to another process by id.
    let id: PermitId = permit.id().to_string().parse().unwrap();
    permit.leak();
    let other = b.permit_expirable_semaphore("seats");
    other.release_by_id(id).await.unwrap();
    assert!(other
        .release_by_id(id)
        .await
        .unwrap_err()
        .is_permit_not_out());
    assert_eq!(sem.available_permits().await.unwrap(), 2);

    let mut short = sem
        .acquire_with_lease(Duration::from_millis(100))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(400)).await;
    let err = sem
        .update_lease(&mut short, Some(Duration::from_secs(60)))
        .await
        .unwrap_err();
    assert!(err.is_permit_not_out(), "{err}");
    assert_eq!(
        sem.available_permits().await.unwrap(),
        2,
        "an expired permit is not taken again"
    );
    short.leak();
    assert!(matches!(
        sem.update_lease(&mut sem.acquire().await.unwrap(), Some(Duration::ZERO))
            .await,
        Err(Error::InvalidArgument(_))
    ));
}

/// A dropped permit goes back by itself; a waiter on a semaphore whose
/// permits have no lease waits for the release message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_permits_go_back() {
    let server = RedisServer::start();
    let client = client(&server, WATCHDOG).await;
    let sem = client.permit_expirable_semaphore("seats");
    sem.try_set_permits(1).await.unwrap();
    let permit = sem.acquire().await.unwrap();
    let waiter = {
        let sem = sem.clone();
        tokio::spawn(async move { sem.acquire().await.unwrap() })
    };
    eventually(Duration::from_secs(10), || async {
        client.subscriptions() == 1
    })
    .await;
    drop(permit);
    let second = within(Duration::from_secs(5), waiter).await.unwrap();
    drop(second);
    eventually(Duration::from_secs(10), || async {
        sem.available_permits().await.unwrap() == 1
    })
    .await;
    assert!(!exists(&server, "{seats}:timeout"));
    settled(&client).await;
}

/// Expirable acquires dropped at random points leave no permit out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_expirable_acquires_leave_no_permit_out() {
    let server = RedisServer::start();
    let client = client(&server, WATCHDOG).await;
    let sem = client.permit_expirable_semaphore("seats");
    sem.try_set_permits(1).await.unwrap();
    let stop = Arc::new(AtomicUsize::new(0));
    let hog = {
        let (sem, stop) = (sem.clone(), Arc::clone(&stop));
        tokio::spawn(async move {
            while stop.load(Ordering::SeqCst) == 0 {
                let permit = sem.acquire().await.unwrap();
                tokio::time::sleep(Duration::from_millis(1)).await;
                permit.release().await.unwrap();
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        })
    };
    let mut jitter = Rng::from_env("expirable cancellation");
    let mut kept = 0;
    for i in 0..1500 {
        let cut = Duration::from_micros(jitter.below(600));
        let acquire = async {
            if i % 2 == 0 {
                sem.acquire().await
            } else {
                sem.acquire_with_lease(Duration::from_secs(60)).await
            }
        };
        if let Ok(permit) = tokio::time::timeout(cut, acquire).await {
            kept += 1;
            permit.unwrap().release().await.unwrap();
        }
    }
    stop.store(1, Ordering::SeqCst);
    within(Duration::from_secs(20), hog).await.unwrap();
    println!("1500 expirable acquires, {kept} completed, the rest dropped");
    eventually(Duration::from_secs(10), || async {
        sem.available_permits().await.unwrap() == 1
    })
    .await;
    assert!(!exists(&server, "{seats}:timeout"));
    settled(&client).await;
}

/// The permit-expirable semaphore's calls Redisson users migrate with:
/// several permits at once (all or none), an all-or-nothing release of
/// several ids, `try_release`, the total and the count out, `set_permits`,
/// a lease read from the server and updated by id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expirable_calls_redisson_users_migrate_with() {
    let server = RedisServer::start();
    let client = client(&server, WATCHDOG).await;
    let sem = client.permit_expirable_semaphore("rows");
    let out = || server.cmd(&["ZCARD", "{rows}:timeout"]).as_int().unwrap();
    assert!(soon(sem.try_set_permits(5)).await.unwrap());
    let lease = Duration::from_secs(30);
    let taken = soon(sem.acquire_many_with_lease(3, lease)).await.unwrap();
    let ids: Vec<PermitId> = taken.iter().map(|p| p.id()).collect();
    assert_eq!(ids.len(), 3);
    assert!(ids[0] != ids[1] && ids[1] != ids[2] && ids[0] != ids[2]);
    assert_eq!(out(), 3);
    assert_eq!(get(&server, "rows").as_deref(), Some("2"));
    // Three are not there: none is taken.
    assert!(soon(sem.try_acquire_many(3)).await.unwrap().is_none());
    assert_eq!((out(), get(&server, "rows").as_deref()), (3, Some("2")));
    assert_eq!(soon(sem.permits()).await.unwrap(), 5);
    assert_eq!(soon(sem.acquired_permits()).await.unwrap(), 3);

    // The lease, by the server's clock; updated by id.
    let left = soon(sem.lease_of(ids[0])).await.unwrap().unwrap();
    assert!(left > Duration::from_secs(20) && left <= lease, "{left:?}");
    soon(sem.update_lease_by_id(ids[0], None)).await.unwrap();
    assert_eq!(soon(sem.lease_of(ids[0])).await.unwrap(), None);
    soon(sem.update_lease_by_id(ids[0], Some(Duration::from_secs(90))))
        .await
        .unwrap();
    let left = soon(sem.lease_of(ids[0])).await.unwrap().unwrap();
    assert!(left > Duration::from_secs(60), "{left:?}");
    for permit in taken {
        permit.leak();
    }

    // All or none: one id that is not out keeps the others out.
    let stranger: PermitId = "000000000000000000000000000000ff".parse().unwrap();
    let err = soon(sem.release_many(&[ids[0], stranger]))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, Error::PermitNotOut { permit, .. } if *permit == stranger.to_string()),
        "{err}"
    );
    assert_eq!(out(), 3);
    soon(sem.release_many(&[ids[0], ids[1]])).await.unwrap();
    assert_eq!((out(), get(&server, "rows").as_deref()), (1, Some("4")));
    assert!(!soon(sem.try_release(ids[0])).await.unwrap());
    assert!(soon(sem.try_release(ids[2])).await.unwrap());
    assert!(matches!(
        soon(sem.lease_of(ids[2])).await.unwrap_err(),
        Error::PermitNotOut { .. }
    ));

    // The total: set to 2 with one permit out leaves one available.
    let one = soon(sem.acquire()).await.unwrap();
    assert_eq!(soon(sem.set_permits(2)).await.unwrap(), 1);
    assert_eq!(soon(sem.permits()).await.unwrap(), 2);
    assert_eq!(soon(sem.available_permits()).await.unwrap(), 1);
    soon(one.release()).await.unwrap();
    assert_eq!(soon(sem.available_permits()).await.unwrap(), 2);

    for err in [
        soon(sem.acquire_many(0)).await.map(drop).unwrap_err(),
        soon(sem.release_many(&[])).await.unwrap_err(),
    ] {
        assert!(matches!(err, Error::InvalidArgument(_)), "{err}");
    }
    settled(&client).await;
}

/// A permit whose wait outlasted its lease still has its whole lease once
/// granted: the lease counts from the send that took it, not from the
/// wait's first attempt. (Before the fix, such a permit was born expired
/// by the client's clock.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permit_granted_after_a_long_wait_has_its_whole_lease() {
    let server = RedisServer::start();
    let (holder, waiter) = (
        client(&server, WATCHDOG).await,
        client(&server, WATCHDOG).await,
    );
    let name = "long-wait";
    let lease = Duration::from_secs(2);
    assert!(holder
        .permit_expirable_semaphore(name)
        .try_set_permits(1)
        .await
        .unwrap());
    let held = soon(holder.permit_expirable_semaphore(name).acquire())
        .await
        .unwrap();
    let waiting = {
        let sem = waiter.permit_expirable_semaphore(name);
        tokio::spawn(async move { sem.acquire_with_lease(lease).await.unwrap() })
    };
    eventually(Duration::from_secs(10), || async {
        waiter.subscriptions() == 1
    })
    .await;
    // The wait outlasts the lease it asks for.
    tokio::time::sleep(lease + Duration::from_millis(500)).await;
    soon(held.release()).await.unwrap();
    let permit = soon(waiting).await.unwrap();
    let left = permit.remaining_lease().unwrap();
    assert!(!permit.is_expired(), "born expired");
    assert!(
        left > Duration::from_millis(1000),
        "{left:?} of {lease:?} left"
    );
    soon(permit.release()).await.unwrap();
}

/// A permit's own clock never says it is still out once the server took
/// it back: the server reads its clock in whole milliseconds, so a client
/// that ended the lease exactly a lease after its send was up to 1 ms
/// late. Each round asks as soon as the permit comes back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permit_is_expired_by_its_own_clock_once_the_server_took_it_back() {
    let server = RedisServer::start();
    let client = client(&server, WATCHDOG).await;
    let sem = client.permit_expirable_semaphore("expiring");
    assert!(sem.try_set_permits(1).await.unwrap());
    for round in 0..20 {
        let permit = soon(sem.acquire_with_lease(Duration::from_millis(20)))
            .await
            .unwrap();
        // The script that reads the count takes expired permits back.
        within(Duration::from_secs(10), async {
            while sem.available_permits().await.unwrap() == 0 {}
        })
        .await;
        assert!(
            permit.is_expired(),
            "round {round}: taken back, and still {:?} left by the permit's clock",
            permit.remaining_lease()
        );
    }
}

/// A permit handed to the watchdog (`Permit::keep_alive`) stays out past
/// its own lease for as long as it lives: another client waiting three
/// watchdog timeouts gets nothing, the server still counts it out, and its
/// lease handle says the watchdog renews it. Released, it is back at once,
/// and its handle counts it lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permit_kept_by_the_watchdog_outlives_its_lease_until_released() {
    let server = RedisServer::start();
    let watchdog = Duration::from_millis(600);
    let (a, b) = (
        client(&server, watchdog).await,
        client(&server, WATCHDOG).await,
    );
    let sem = a.permit_expirable_semaphore("kept");
    assert!(sem.try_set_permits(1).await.unwrap());
    let mut permit = soon(sem.acquire_with_lease(Duration::from_millis(200)))
        .await
        .unwrap();
    let handle = permit.lease_handle();
    assert!(!handle.is_renewed());
    soon(permit.keep_alive()).await.unwrap();
    assert!(handle.is_renewed(), "the handle follows keep_alive");
    assert_eq!(a.held_locks(), 1);
    let other = b.permit_expirable_semaphore("kept");
    let waited = soon(other.try_acquire_for(3 * watchdog)).await.unwrap();
    assert!(waited.is_none(), "the kept permit was taken back");
    assert!(!permit.is_expired());
    assert!(!handle.is_lost());
    assert!(permit.remaining_lease().unwrap() <= watchdog);
    let left = other.lease_of(permit.id()).await.unwrap().unwrap();
    assert!(left > Duration::ZERO && left <= watchdog, "{left:?}");
    soon(permit.release()).await.unwrap();
    assert!(
        handle.is_lost(),
        "a released permit's handle counts it lost"
    );
    assert_eq!(a.held_locks(), 0, "a released permit is no longer renewed");
    assert_eq!(other.available_permits().await.unwrap(), 1);
    // Nothing renews it any more: a new holder keeps it by its own lease.
    let next = soon(other.acquire_with_lease(WATCHDOG)).await.unwrap();
    next.release().await.unwrap();
    settled(&a).await;
    settled(&b).await;
}

/// A kept permit that another client releases by id is found gone by the
/// next renewal: `lease_lost` resolves, the permit counts as expired, and
/// its own release says it was not out. One that was released, dropped or
/// leaked is no longer renewed: a leaked one comes back a watchdog timeout
/// after its last renewal, a dropped one at once. `keep_alive` of a permit
/// whose lease ran out sends nothing and says it is not out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kept_permit_is_lost_leaked_and_dropped_as_a_lock_is() {
    let server = RedisServer::start();
    let watchdog = Duration::from_millis(600);
    let (a, b) = (
        client(&server, watchdog).await,
        client(&server, WATCHDOG).await,
    );
    let sem = a.permit_expirable_semaphore("kept");
    let other = b.permit_expirable_semaphore("kept");
    assert!(sem.try_set_permits(1).await.unwrap());

    // Released by id elsewhere: lost.
    let mut permit = soon(sem.acquire_with_lease(WATCHDOG)).await.unwrap();
    soon(permit.keep_alive()).await.unwrap();
    other.release_by_id(permit.id()).await.unwrap();
    within(4 * watchdog, permit.lease_lost()).await;
    assert!(permit.is_expired());
    assert_eq!(permit.remaining_lease(), Some(Duration::ZERO));
    let err = permit.release().await.unwrap_err();
    assert!(err.is_permit_not_out(), "{err}");

    // Leaked: no longer renewed, back within its last renewal's lease.
    let mut permit = soon(sem.acquire_with_lease(Duration::from_millis(100)))
        .await
        .unwrap();
    soon(permit.keep_alive()).await.unwrap();
    let handle = permit.lease_handle();
    permit.leak();
    assert_eq!(a.held_locks(), 0, "a leaked permit is no longer renewed");
    let next = within(10 * watchdog, other.acquire()).await.unwrap();
    next.release().await.unwrap();
    // Its handle waits for the end of the last renewal's lease, no more.
    within(10 * watchdog, handle.lost()).await;

    // Given a lease of its own: no longer renewed.
    let mut permit = soon(sem.acquire_with_lease(WATCHDOG)).await.unwrap();
    soon(permit.keep_alive()).await.unwrap();
    soon(sem.update_lease(&mut permit, Some(Duration::from_millis(100))))
        .await
        .unwrap();
    assert_eq!(a.held_locks(), 0, "an updated permit is no longer renewed");
    assert!(!permit.lease_handle().is_renewed());
    let next = within(10 * watchdog, other.acquire()).await.unwrap();
    next.release().await.unwrap();
    assert!(permit.is_expired());
    drop(permit);

    // Dropped: given back in the background.
    let mut permit = soon(sem.acquire_with_lease(WATCHDOG)).await.unwrap();
    soon(permit.keep_alive()).await.unwrap();
    drop(permit);
    let next = within(Duration::from_secs(20), other.acquire())
        .await
        .unwrap();
    next.release().await.unwrap();

    // Its lease already ran out: refused, nothing sent.
    let mut permit = soon(sem.acquire_with_lease(Duration::from_millis(20)))
        .await
        .unwrap();
    eventually(Duration::from_secs(10), || async { permit.is_expired() }).await;
    let err = permit.keep_alive().await.unwrap_err();
    assert!(err.is_permit_not_out(), "{err}");
    drop(permit);
    settled(&a).await;
    settled(&b).await;
}
