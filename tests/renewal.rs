//! The watchdog's renewal schedule with many locks: renewals that fall due
//! together share script calls, and one bad key does not cost the others
//! their leases. One private `redis-server` per test.

use ferrisson_test_support as common;

use std::time::Duration;

use common::{client, eventually, soon, within, RedisServer};
use ferrisson::LockGuard;
use tokio::time::Instant;

/// Long enough that a renewal held up by a loaded machine (two cores, a
/// busy loop on one) still arrives within the two-thirds of the timeout
/// left after it falls due.
const WATCHDOG: Duration = Duration::from_secs(2);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_locks_are_renewed_together_and_kept() {
    let server = RedisServer::start();
    let client = client(&server, WATCHDOG).await;
    const LOCKS: usize = 250;
    // One after the other, so that the holds are granted in the order
    // their acquires were sent (a hold that falls due before the batch
    // open at its grant starts a batch of its own: it is never renewed
    // late).
    let taking = Instant::now();
    let mut guards: Vec<LockGuard> = Vec::new();
    for i in 0..LOCKS {
        guards.push(soon(client.lock(format!("many:{i}")).lock()).await.unwrap());
    }
    assert_eq!(client.held_locks(), LOCKS);
    let span = taking.elapsed();

    // Three whole timeouts: nine renewal periods, none of which may miss.
    server.cmd(&["CONFIG", "RESETSTAT"]);
    let window = WATCHDOG * 3;
    tokio::time::sleep(window).await;
    let calls = server.evalsha_calls();

    for i in 0..LOCKS {
        let ttl = server
            .cmd(&["PTTL", &format!("many:{i}")])
            .as_int()
            .unwrap();
        assert!(ttl > 0, "many:{i} has PTTL {ttl} after three timeouts");
    }
    assert!(guards.iter().all(|g| !g.is_lease_lost()));
    // One call per key per period would be 250 x 9 = 2250. The watchdog
    // puts the holds due within its coalescing window (a thirtieth of the
    // timeout) after a batch's first in that batch, renewed together, 200
    // keys a call, and renews a key at most twice that window early: so
    // however long a loaded machine took to take the locks, each period
    // has at most one call per window of that time (and one more per 200
    // keys), and a period lasts at least a third of the timeout less twice
    // the window.
    let unbatched =
        (LOCKS as u32 * window.as_millis() as u32 / (WATCHDOG / 3).as_millis() as u32) as u64;
    let coalescing = WATCHDOG / 30;
    let batches = (span.as_millis() / coalescing.as_millis()) as u64 + 1 + (LOCKS / 200) as u64;
    let periods = (window.as_millis() / (WATCHDOG / 3 - coalescing * 2).as_millis()) as u64 + 1;
    assert!(
        calls <= batches * periods,
        "{calls} renewal calls for {LOCKS} keys taken over {span:?}, in {window:?}: \
         at most {batches} batches x {periods} periods (one call per key: {unbatched})"
    );
    println!(
        "{calls} renewal calls for {LOCKS} keys taken over {span:?}, in {window:?} \
         (one per key: {unbatched})"
    );

    for guard in guards {
        soon(guard.unlock()).await.unwrap();
    }
    assert_eq!(client.held_locks(), 0);
    // Locks and, once swept, the releases' latches are gone.
    eventually(Duration::from_secs(5), || async {
        server.cmd(&["DBSIZE"]).as_int() == Some(0)
    })
    .await;
}

/// Someone deletes one of our locks and writes a string under its name:
/// that lease is lost, and the locks renewed in the same call keep theirs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_turned_into_another_type_loses_only_its_own_lease() {
    let server = RedisServer::start();
    let client = client(&server, WATCHDOG).await;
    let names = ["batch:a", "batch:b", "batch:c"];
    let mut guards = Vec::new();
    for name in names {
        guards.push(soon(client.lock(name).lock()).await.unwrap());
    }
    server.cmd(&["DEL", "batch:b"]);
    server.cmd(&["SET", "batch:b", "not a lock"]);
    only_the_middle_lease_is_lost(&server, &client, names, guards).await;
    // The string was left alone, by the renewals and by the unlock.
    assert_eq!(
        server.cmd(&["GET", "batch:b"]).as_string().as_deref(),
        Some("not a lock")
    );
}

/// The same with read holds, renewed with their timeout keys: the middle
/// one of three read locks is deleted, and only its lease is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_read_lock_loses_only_its_own_lease() {
    let server = RedisServer::start();
    let client = client(&server, WATCHDOG).await;
    let names = ["batch:rw:a", "batch:rw:b", "batch:rw:c"];
    let mut guards = Vec::new();
    for name in names {
        guards.push(
            soon(client.read_write_lock(name).read().lock())
                .await
                .unwrap(),
        );
    }
    server.cmd(&["DEL", "batch:rw:b"]);
    only_the_middle_lease_is_lost(&server, &client, names, guards).await;
}

/// The middle one of three held locks, `guards` in the order of `names`,
/// was taken from its owner: its lease is lost and its unlock says so,
/// while the other two are renewed for two more timeouts and unlock.
async fn only_the_middle_lease_is_lost(
    server: &RedisServer,
    client: &ferrisson::Client,
    names: [&str; 3],
    mut guards: Vec<LockGuard>,
) {
    within(WATCHDOG * 2, guards[1].lease_lost()).await;
    assert_eq!(client.held_locks(), 2);
    let until = Instant::now() + WATCHDOG * 2;
    while Instant::now() < until {
        tokio::time::sleep(WATCHDOG / 4).await;
        for name in [names[0], names[2]] {
            let ttl = server.cmd(&["PTTL", name]).as_int().unwrap();
            assert!(ttl > 0, "{name}: PTTL {ttl}");
        }
    }
    assert!(!guards[0].is_lease_lost() && !guards[2].is_lease_lost());
    let c = guards.pop().unwrap();
    let b = guards.pop().unwrap();
    let a = guards.pop().unwrap();
    assert!(soon(b.unlock()).await.unwrap_err().is_lease_lost());
    soon(a.unlock()).await.unwrap();
    soon(c.unlock()).await.unwrap();
    assert_eq!(client.held_locks(), 0);
}

/// A lock released while its renewal is on the schedule is not renewed
/// again: a new holder's TTL is never pushed by the old holder's watchdog.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_released_lock_is_not_renewed_for_the_next_holder() {
    let server = RedisServer::start();
    let ours = client(&server, WATCHDOG).await;
    for round in 0..20 {
        let guard = soon(ours.lock("passed-on").lock()).await.unwrap();
        soon(guard.unlock()).await.unwrap();
        // Another service takes it with a short lease of its own.
        let field = format!("other-service:{round}");
        server.cmd(&["HSET", "passed-on", &field, "1"]);
        server.cmd(&["PEXPIRE", "passed-on", "300"]);
        tokio::time::sleep(WATCHDOG / 20).await;
        let ttl = server.cmd(&["PTTL", "passed-on"]).as_int().unwrap();
        assert!(ttl <= 300, "round {round}: PTTL {ttl} after our release");
        server.cmd(&["DEL", "passed-on"]);
    }
    assert_eq!(ours.held_locks(), 0);
}

/// Holds taken and released again and again while renewals come and go: a
/// renewal reply about an earlier hold never marks a later one lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewals_of_earlier_holds_do_not_touch_later_ones() {
    let server = RedisServer::start();
    // A renewal every 200 ms, with 400 ms to spare.
    let watchdog = Duration::from_millis(600);
    let client = client(&server, watchdog).await;
    let lock = client.lock("cycled");
    for round in 0..40u64 {
        let guard = soon(lock.lock()).await.unwrap();
        // 0 to 399 ms: some holds see a renewal, some are released while
        // one is in flight.
        tokio::time::sleep(Duration::from_millis(round * 37 % 400)).await;
        assert!(!guard.is_lease_lost(), "round {round}");
        soon(guard.unlock()).await.unwrap();
    }
    assert_eq!(client.held_locks(), 0);
}

/// Renewals survive a Redis that forgot its scripts (`SCRIPT FLUSH`, as
/// after a restart of a persistent server): the script is loaded again and
/// no lease is lost, for plain holds and read holds alike.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewals_load_the_script_again_after_a_flush() {
    let server = RedisServer::start();
    let client = client(&server, WATCHDOG).await;
    let plain = soon(client.lock("flushed:plain").lock()).await.unwrap();
    let read = soon(client.read_write_lock("flushed:rw").read().lock())
        .await
        .unwrap();
    server.cmd(&["SCRIPT", "FLUSH"]);
    // Two whole timeouts: six renewal periods, each after the flush.
    tokio::time::sleep(WATCHDOG * 2).await;
    assert!(!plain.is_lease_lost());
    assert!(!read.is_lease_lost());
    for name in ["flushed:plain", "flushed:rw"] {
        let ttl = server.cmd(&["PTTL", name]).as_int().unwrap();
        assert!(
            ttl > 0,
            "{name} has PTTL {ttl} two timeouts after the flush"
        );
    }
    soon(plain.unlock()).await.unwrap();
    soon(read.unlock()).await.unwrap();
    assert_eq!(client.held_locks(), 0);
}
