//! The read-write lock against a real `redis-server`, one private server
//! per test.

use ferrisson_test_support as common;

use std::time::Duration;

use common::{
    client, eventually, exists, next_message, settled, soon, within, RawSubscriber, RedisServer,
    RespValue,
};
use ferrisson::Error;
use tokio::time::Instant;

const WATCHDOG: Duration = Duration::from_millis(1200);
/// A watchdog whose TTL is far longer than any hand-off by message.
const ROOMY: Duration = Duration::from_secs(30);

fn hash(server: &RedisServer, key: &str) -> Vec<(String, String)> {
    let all = server.cmd(&["HGETALL", key]);
    let flat: Vec<String> = all
        .as_array()
        .unwrap_or(&[])
        .iter()
        .map(RespValue::as_string)
        .map(Option::unwrap)
        .collect();
    let mut pairs: Vec<(String, String)> = flat
        .chunks(2)
        .map(|pair| (pair[0].clone(), pair[1].clone()))
        .collect();
    pairs.sort();
    pairs
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_share_and_a_waiting_writer_enters_after_the_last() {
    let server = RedisServer::start();
    // The readers' TTL (their 30 s watchdog) would wake the writer far
    // later than the unlock message does.
    let a = client(&server, ROOMY).await;
    let b = client(&server, ROOMY).await;
    let writer = client(&server, WATCHDOG).await;
    let ra = soon(a.read_write_lock("doc").read().lock()).await.unwrap();
    let rb = soon(b.read_write_lock("doc").read().try_lock())
        .await
        .unwrap()
        .expect("readers share");
    assert!(soon(
        writer
            .read_write_lock("doc")
            .write()
            .try_lock_for(Duration::from_millis(100))
    )
    .await
    .unwrap()
    .is_none());

    let write = writer.read_write_lock("doc").write();
    let waiting = tokio::spawn(async move {
        let guard = write.lock().await.unwrap();
        (Instant::now(), guard)
    });
    soon(ra.unlock()).await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!waiting.is_finished(), "the writer got in beside a reader");
    let released = Instant::now();
    soon(rb.unlock()).await.unwrap();
    let (acquired, guard) = soon(waiting).await.unwrap();
    // Woken by the message, not by the TTL (the watchdog's 30 s).
    assert!(acquired - released < ROOMY / 6, "{:?}", acquired - released);
    assert!(soon(a.read_write_lock("doc").read().try_lock())
        .await
        .unwrap()
        .is_none());
    soon(guard.unlock()).await.unwrap();
    assert!(!exists(&server, "doc"));
}

/// A write unlock publishes `1`, which wakes every waiter: all waiting
/// readers get in together, and a writer stays out while they read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_unlock_wakes_every_waiting_reader() {
    let server = RedisServer::start();
    let holder = client(&server, ROOMY).await;
    let others = client(&server, WATCHDOG).await;
    let sub = RawSubscriber::new(&server, "redisson_rwlock:{doc}");
    let writing = soon(holder.read_write_lock("doc").write().lock())
        .await
        .unwrap();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    for _ in 0..4 {
        let read = others.read_write_lock("doc").read();
        let tx = tx.clone();
        tokio::spawn(async move {
            let guard = read.lock().await.unwrap();
            tx.send(guard).unwrap();
        });
    }
    eventually(Duration::from_secs(5), || async {
        others.subscriptions() == 1
    })
    .await;
    soon(writing.unlock()).await.unwrap();
    assert_eq!(
        next_message(sub).await,
        Some(("redisson_rwlock:{doc}".into(), "1".into()))
    );
    // Well before the TTL (the holder's 30 s watchdog) would have let
    // them in.
    let mut readers = Vec::new();
    for _ in 0..4 {
        readers.push(within(ROOMY / 6, rx.recv()).await.unwrap());
    }
    assert!(soon(holder.read_write_lock("doc").write().try_lock())
        .await
        .unwrap()
        .is_none());
    for reader in readers {
        soon(reader.unlock()).await.unwrap();
    }
    assert!(!exists(&server, "doc"));
    settled(&others).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_may_downgrade_and_a_reader_may_not_upgrade() {
    let server = RedisServer::start();
    let client = client(&server, WATCHDOG).await;
    let other = self::client(&server, WATCHDOG).await;
    let rw = client.read_write_lock("doc");

    // A writer excludes other writers, and re-enters its own write lock.
    let writing = soon(rw.write().lock()).await.unwrap();
    assert!(soon(other.read_write_lock("doc").write().try_lock())
        .await
        .unwrap()
        .is_none());
    let again = soon(rw.write().lock()).await.unwrap();
    assert_eq!(soon(rw.write().hold_count()).await.unwrap(), 2);
    soon(again.unlock()).await.unwrap();

    // Downgrade: write, then read, then let the write go.
    let reading = soon(rw.read().lock()).await.expect("a writer may read");
    assert_eq!(soon(rw.write().hold_count()).await.unwrap(), 1);
    assert_eq!(soon(rw.read().hold_count()).await.unwrap(), 1);
    assert!(soon(other.read_write_lock("doc").read().try_lock())
        .await
        .unwrap()
        .is_none());
    soon(writing.unlock()).await.unwrap();
    assert!(soon(rw.read().is_locked()).await.unwrap());
    assert!(!soon(rw.write().is_locked()).await.unwrap());
    let shared = soon(other.read_write_lock("doc").read().try_lock())
        .await
        .unwrap()
        .expect("readers enter once the write is gone");

    // Upgrade: refused at once, nothing changed.
    let before = hash(&server, "doc");
    let started = Instant::now();
    let err = soon(rw.write().lock()).await.unwrap_err();
    assert!(matches!(err, Error::UpgradeRefused { .. }), "{err}");
    assert!(started.elapsed() < Duration::from_secs(1));
    let err = soon(rw.write().try_lock_for(Duration::from_secs(30)))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::UpgradeRefused { .. }), "{err}");
    assert_eq!(hash(&server, "doc"), before);

    soon(reading.unlock()).await.unwrap();
    soon(shared.unlock()).await.unwrap();
    assert!(!exists(&server, "doc"));
    settled(&client).await;
}

/// A reader that dies (here: a leased hold never released) loses its hold
/// by itself; the live reader carries on under the watchdog, and a waiting
/// writer enters once the live reader leaves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_readers_hold_expires_while_others_read_on() {
    let server = RedisServer::start();
    let crashed = client(&server, WATCHDOG).await;
    let live = client(&server, WATCHDOG).await;
    let writer = client(&server, WATCHDOG).await;
    let dead = soon(
        crashed
            .read_write_lock("doc")
            .read()
            .lock_with_lease(Duration::from_millis(300)),
    )
    .await
    .unwrap();
    let dead_key = format!("{{doc}}:{}:rwlock_timeout:1", dead.field());
    dead.leak();
    let reading = soon(live.read_write_lock("doc").read().lock())
        .await
        .unwrap();
    let live_key = format!("{{doc}}:{}:rwlock_timeout:1", reading.field());
    let write = writer.read_write_lock("doc").write();
    let waiting = tokio::spawn(async move { write.lock().await.unwrap() });

    eventually(Duration::from_secs(5), || async {
        !exists(&server, &dead_key)
    })
    .await;
    // Three watchdog timeouts: the live reader's hold is renewed throughout.
    let until = Instant::now() + WATCHDOG * 3;
    while Instant::now() < until {
        assert!(server.pttl(&live_key) > 0, "the live reader's hold expired");
        assert!(server.pttl("doc") > 0);
        assert!(!waiting.is_finished(), "the writer got in beside a reader");
        tokio::time::sleep(WATCHDOG / 4).await;
    }
    assert!(!reading.is_lease_lost());
    let released = Instant::now();
    soon(reading.unlock()).await.unwrap();
    let guard = soon(waiting).await.unwrap();
    assert!(
        released.elapsed() < WATCHDOG / 2,
        "{:?}",
        released.elapsed()
    );
    soon(guard.unlock()).await.unwrap();
    assert_eq!(live.held_locks(), 0);
}

/// PROTOCOL.md for the read-write lock: the hash's `mode` and fields, the
/// per-hold timeout keys and their TTLs, the write field's suffix, the
/// channel.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_layout_is_redissons() {
    let server = RedisServer::start();
    let client = client(&server, Duration::from_secs(30)).await;
    let rw = client.read_write_lock("doc");
    // Leased holds: each timeout key's TTL is its own hold's lease.
    let first = soon(rw.read().lock_with_lease(Duration::from_secs(20)))
        .await
        .unwrap();
    let second = soon(rw.read().lock_with_lease(Duration::from_secs(5)))
        .await
        .unwrap();
    let field = first.field().to_owned();
    assert_eq!(second.field(), field);
    assert_eq!(
        hash(&server, "doc"),
        vec![(field.clone(), "2".into()), ("mode".into(), "read".into())]
    );
    let one = server.pttl(&format!("{{doc}}:{field}:rwlock_timeout:1"));
    let two = server.pttl(&format!("{{doc}}:{field}:rwlock_timeout:2"));
    assert!(one > 15_000 && one <= 20_000, "{one}");
    assert!(two > 0 && two <= 5_000, "{two}");
    // The hash lives as long as its longest hold.
    let whole = server.pttl("doc");
    assert!(whole > 15_000 && whole <= 20_000, "{whole}");
    soon(second.unlock()).await.unwrap();
    assert!(!exists(
        &server,
        &format!("{{doc}}:{field}:rwlock_timeout:2")
    ));
    soon(first.unlock()).await.unwrap();
    assert!(!exists(&server, "doc"));

    let sub = RawSubscriber::new(&server, "redisson_rwlock:{doc}");
    let writing = soon(rw.write().lock()).await.unwrap();
    assert!(writing.field().ends_with(":write"));
    assert_eq!(
        hash(&server, "doc"),
        vec![
            (writing.field().to_owned(), "1".into()),
            ("mode".into(), "write".into())
        ]
    );
    soon(writing.unlock()).await.unwrap();
    assert_eq!(
        next_message(sub).await,
        Some(("redisson_rwlock:{doc}".into(), "1".into()))
    );
    // A name with a hash tag keeps it in every key.
    let tagged = soon(client.read_write_lock("{user}:7").read().lock())
        .await
        .unwrap();
    assert!(exists(
        &server,
        &format!("{{user}}:7:{}:rwlock_timeout:1", tagged.field())
    ));
    soon(tagged.unlock()).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_read_and_write_futures_leave_nothing() {
    let server = RedisServer::start();
    let holder = client(&server, WATCHDOG).await;
    let client = self::client(&server, WATCHDOG).await;
    let rw = client.read_write_lock("doc");
    // While a writer holds it: the futures wait, then are dropped.
    let writing = soon(holder.read_write_lock("doc").write().lock())
        .await
        .unwrap();
    for cut in 0..10u64 {
        let _ = tokio::time::timeout(Duration::from_millis(cut * 5), rw.read().lock()).await;
        let _ = tokio::time::timeout(Duration::from_millis(cut * 5), rw.write().lock()).await;
    }
    soon(writing.unlock()).await.unwrap();
    // While it is free: dropped at every stage of the acquire.
    for cut in 0..30u64 {
        let _ = tokio::time::timeout(Duration::from_micros(cut * 100), rw.read().lock()).await;
        let _ = tokio::time::timeout(Duration::from_micros(cut * 100), rw.write().lock()).await;
    }
    settled(&client).await;
    eventually(Duration::from_secs(5), || async {
        server.keys("*doc*").is_empty()
    })
    .await;
}

/// When a writer's last write hold goes while it still has read holds
/// (a downgrade), the hash lives on as long as those read holds do, not
/// as long as the write's lease: a read hold that ran out before (its
/// timeout key expired: a crashed or dropped reader) holds nothing, and
/// the hash goes with the write. (Before, the stale count stayed for the
/// rest of the write's lease: `cancel_fuzz` left such hashes behind.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_release_leaves_the_hash_no_longer_than_the_writers_read_holds() {
    let server = RedisServer::start();
    let client = client(&server, WATCHDOG).await;
    let rw = client.read_write_lock("downgrade");
    let (read, write) = (rw.read().with_owner("job"), rw.write().with_owner("job"));
    let field = format!("{}:job", client.id());
    let timeout_key = |n: u32| format!("{{downgrade}}:{field}:rwlock_timeout:{n}");

    // A read hold that runs out under a 30 s write.
    let writing = soon(write.lock_with_lease(ROOMY)).await.unwrap();
    let short = Duration::from_millis(300);
    soon(read.lock_with_lease(short)).await.unwrap().leak();
    eventually(Duration::from_secs(10), || async {
        !exists(&server, &timeout_key(1))
    })
    .await;
    assert!(server.pttl("downgrade") > 20_000, "the write's lease");
    soon(writing.unlock()).await.unwrap();
    assert!(
        !exists(&server, "downgrade"),
        "a read count whose hold ran out outlived the write: {:?}",
        hash(&server, "downgrade")
    );

    // A live read hold keeps the hash, for its own lease.
    let writing = soon(write.lock_with_lease(ROOMY)).await.unwrap();
    let lease = Duration::from_secs(5);
    let reading = soon(read.lock_with_lease(lease)).await.unwrap();
    soon(writing.unlock()).await.unwrap();
    let ttl = server.pttl("downgrade");
    assert!(
        ttl > 0 && ttl <= lease.as_millis() as i64,
        "the hash's TTL after the write went: {ttl} ms"
    );
    let mut fields = hash(&server, "downgrade");
    fields.sort();
    let mut expected = vec![
        ("mode".to_owned(), "read".to_owned()),
        (field.clone(), "1".to_owned()),
    ];
    expected.sort();
    assert_eq!(fields, expected);
    soon(reading.unlock()).await.unwrap();
    assert!(!exists(&server, "downgrade"));
    settled(&client).await;
}
