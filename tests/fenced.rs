//! The fenced lock against a real `redis-server`, one private server per
//! test.

use ferrisson_test_support as common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{client, eventually, exists, settled, soon, within, RedisServer};

const WATCHDOG: Duration = Duration::from_millis(1200);

/// Tokens in the order the holds were taken rise strictly: across tasks,
/// clients and re-entries.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_rise_strictly_across_holders_and_reentries() {
    let server = RedisServer::start();
    let clients = [
        client(&server, WATCHDOG).await,
        client(&server, WATCHDOG).await,
    ];
    let seen: Arc<Mutex<Vec<u64>>> = Arc::default();
    const TASKS: usize = 6;
    const ROUNDS: usize = 25;
    let mut tasks = Vec::new();
    for task in 0..TASKS {
        let lock = clients[task % 2].fenced_lock("fenced");
        let seen = Arc::clone(&seen);
        tasks.push(tokio::spawn(async move {
            for _ in 0..ROUNDS {
                let outer = lock.lock().await.unwrap();
                seen.lock().unwrap().push(outer.token());
                let inner = lock.lock().await.unwrap();
                seen.lock().unwrap().push(inner.token());
                inner.unlock().await.unwrap();
                outer.unlock().await.unwrap();
            }
        }));
    }
    for task in tasks {
        within(Duration::from_secs(60), task).await.unwrap();
    }
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), TASKS * ROUNDS * 2);
    assert!(
        seen.windows(2).all(|w| w[0] < w[1]),
        "tokens did not rise in acquisition order"
    );
    let last = server
        .cmd(&["GET", "redisson_lock_token:{fenced}"])
        .as_string()
        .unwrap();
    assert_eq!(last, seen.last().unwrap().to_string());
}

/// PROTOCOL.md: the counter's name (brace rule included), no TTL; the lock
/// itself is the reentrant lock's hash; other locks carry no token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_token_counter_is_redissons() {
    let server = RedisServer::start();
    let client = client(&server, WATCHDOG).await;
    let guard = soon(client.fenced_lock("{user}:7").lock()).await.unwrap();
    let token = guard.token();
    assert_eq!(
        server
            .cmd(&["GET", "redisson_lock_token:{user}:7"])
            .as_string(),
        Some(token.to_string())
    );
    assert_eq!(
        server
            .cmd(&["PTTL", "redisson_lock_token:{user}:7"])
            .as_int(),
        Some(-1)
    );
    assert_eq!(
        server.cmd(&["TYPE", "{user}:7"]).as_string().as_deref(),
        Some("hash")
    );
    // The same hash: the same owner re-enters through a plain handle (whose
    // guard has no token: the type has no such call).
    let plain = soon(client.lock("{user}:7").try_lock())
        .await
        .unwrap()
        .expect("the owner re-enters");
    soon(plain.unlock()).await.unwrap();
    soon(guard.unlock()).await.unwrap();
    settled(&client).await;
    eventually(Duration::from_secs(5), || async {
        !exists(&server, "{user}:7")
    })
    .await;
    // The counter outlives the lock: the next token is higher still.
    let next = soon(client.fenced_lock("{user}:7").lock()).await.unwrap();
    assert!(next.token() > token);
    soon(next.unlock()).await.unwrap();
}

/// What the token is for: a holder paused past its lease writes late, and
/// the resource, which keeps the highest token it saw, refuses it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_holders_write_is_refused_by_token() {
    let server = RedisServer::start();
    let a = client(&server, WATCHDOG).await;
    let b = client(&server, WATCHDOG).await;
    let highest = Mutex::new(0u64);
    let write = |token: u64| {
        let mut highest = highest.lock().unwrap();
        if token < *highest {
            return false;
        }
        *highest = token;
        true
    };

    let stale = soon(
        a.fenced_lock("resource")
            .lock_with_lease(Duration::from_millis(200)),
    )
    .await
    .unwrap();
    // `a` pauses past its lease; `b` gets in and writes.
    let fresh = within(Duration::from_secs(10), b.fenced_lock("resource").lock())
        .await
        .unwrap();
    assert!(fresh.token() > stale.token());
    assert!(write(fresh.token()));
    // `a` wakes and writes with its old token: refused.
    assert!(!write(stale.token()));
    assert!(stale.is_lease_lost());
    assert!(soon(stale.unlock()).await.unwrap_err().is_lease_lost());
    soon(fresh.unlock()).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_fenced_lock_futures_leave_no_hold() {
    let server = RedisServer::start();
    let client = client(&server, WATCHDOG).await;
    let lock = client.fenced_lock("dropped");
    for cut in 0..30u64 {
        let _ = tokio::time::timeout(Duration::from_micros(cut * 100), lock.lock()).await;
    }
    settled(&client).await;
    eventually(Duration::from_secs(5), || async {
        !exists(&server, "dropped")
    })
    .await;
    // Tokens drawn by given-back holds are skipped, never reused.
    let guard = soon(lock.lock()).await.unwrap();
    let drawn: u64 = server
        .cmd(&["GET", "redisson_lock_token:{dropped}"])
        .as_string()
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(guard.token(), drawn);
    soon(guard.unlock()).await.unwrap();
}

/// The counter is floored by the server's clock (so that a Redis that
/// lost it does not hand out lower tokens), and stays Redisson's: a
/// Redisson `RFencedLock` draws its token with a plain INCR of it, and
/// tokens keep rising through both, each one the counter's value.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_rise_through_redissons_incr_and_a_lost_counter() {
    let server = RedisServer::start();
    let client = client(&server, WATCHDOG).await;
    let lock = client.fenced_lock("mixed");
    let counter = "redisson_lock_token:{mixed}";
    let draw = || async {
        let guard = soon(lock.lock()).await.unwrap();
        let token = guard.token();
        soon(guard.unlock()).await.unwrap();
        token
    };
    let first = draw().await;
    // What Redisson's acquire does to the counter.
    let redissons = server.cmd(&["INCR", counter]).as_int().unwrap();
    assert_eq!(u64::try_from(redissons).unwrap(), first + 1);
    let after = draw().await;
    assert!(after > first + 1, "{after} after Redisson's {redissons}");
    assert_eq!(
        server.cmd(&["GET", counter]).as_string(),
        Some(after.to_string())
    );
    // A counter ahead of the clock is raised by one, as by Redisson.
    server.cmd(&["SET", counter, "4000000000000000"]);
    assert_eq!(draw().await, 4_000_000_000_000_001);
    // A counter lost (deleted, as by a restart without persistence):
    // the next token is still above every token before the loss but the
    // one set ahead of the clock (which no grant had drawn).
    server.cmd(&["DEL", counter]);
    let lost = draw().await;
    assert!(lost > after, "{lost} after {after}");
    // Tokens are exact as the fence's Lua numbers (below 2^53).
    assert!(lost <= ferrisson::config::MAX_FENCE_TOKEN);
}
