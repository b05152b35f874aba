//! Bad input, as a table: each input with the error it must give (or the
//! plain success it must have), for every lock kind where it applies.
//! Nothing panics, and a refused call writes nothing.

mod common;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use common::{client, soon, RedisServer};
use ferrisson::config::MAX_DURATION;
use ferrisson::{Client, DistributedLock, Error, LockGuard, MAX_NAME_LEN};

const KINDS: [&str; 8] = common::LOCK_KINDS;

fn handle(client: &Client, kind: &str, name: &str) -> Arc<dyn DistributedLock> {
    handle_owned(client, kind, name, None)
}

/// [`handle`], owned by `owner` when one is given.
fn handle_owned(
    client: &Client,
    kind: &str,
    name: &str,
    owner: Option<&str>,
) -> Arc<dyn DistributedLock> {
    Arc::from(common::owned_lock_of(client, kind, name, owner))
}

/// What a call must give.
#[derive(Debug, Clone, Copy)]
enum Expect {
    /// `InvalidArgument` whose text contains this.
    Invalid(&'static str),
    /// `WrongType` naming the lock.
    WrongType,
    /// `Redis` whose text contains this (a refusal by the server).
    Refused(&'static str),
    /// Success (a guard, released again).
    Held,
    /// Success with a lease so short (1 ms) that it may have run out by
    /// the release, which then says so: `LeaseLost`, whether the guard's
    /// clock knew before the release was sent or by the time Redis answered
    /// that the hold was gone.
    HeldBriefly,
    /// `Ok(None)`: the lock is someone else's.
    NotGot,
}

type Call = Pin<Box<dyn Future<Output = ferrisson::Result<Option<LockGuard>>> + Send>>;

/// The acquire calls of a handle, each with a good lease and wait unless
/// the case varies them.
fn calls(
    lock: &Arc<dyn DistributedLock>,
    lease: Duration,
    wait: Duration,
) -> Vec<(&'static str, Call)> {
    let (a, b, c, d, e) = (
        Arc::clone(lock),
        Arc::clone(lock),
        Arc::clone(lock),
        Arc::clone(lock),
        Arc::clone(lock),
    );
    vec![
        ("lock", Box::pin(async move { a.lock().await.map(Some) })),
        ("try_lock", Box::pin(async move { b.try_lock().await })),
        (
            "lock_with_lease",
            Box::pin(async move { c.lock_with_lease(lease).await.map(Some) }),
        ),
        (
            "try_lock_for",
            Box::pin(async move { d.try_lock_for(wait).await }),
        ),
        (
            "try_lock_with_lease",
            Box::pin(async move { e.try_lock_with_lease(wait, lease).await }),
        ),
    ]
}

async fn check(what: &str, result: ferrisson::Result<Option<LockGuard>>, expect: Expect) {
    match (expect, result) {
        (Expect::Invalid(text), Err(Error::InvalidArgument(message))) => {
            assert!(message.contains(text), "{what}: {message}");
        }
        (Expect::WrongType, Err(Error::WrongType { .. })) => {}
        (Expect::Refused(text), Err(Error::Redis(err))) => {
            assert!(err.to_string().contains(text), "{what}: {err}");
        }
        (Expect::Held, Ok(Some(guard))) => soon(guard.unlock()).await.unwrap(),
        (Expect::HeldBriefly, Ok(Some(guard))) => match soon(guard.unlock()).await {
            Ok(()) => {}
            Err(err) => assert!(err.is_lease_lost(), "{what}: {err}"),
        },
        (Expect::NotGot, Ok(None)) => {}
        (expect, got) => panic!("{what}: expected {expect:?}, got {got:?}"),
    }
}

/// One row: case, name, lease, wait, owner, and a word the error must have.
type Case<'a> = (
    &'a str,
    &'a str,
    Duration,
    Duration,
    Option<&'a str>,
    &'static str,
);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_inputs_give_their_error_and_write_nothing() {
    let server = RedisServer::start();
    let client = client(&server, Duration::from_secs(30)).await;
    let ms = Duration::from_millis;
    let good_lease = Duration::from_secs(10);
    let good_wait = ms(10);
    let huge_name = "x".repeat(1 << 20);
    let too_long = "y".repeat(MAX_NAME_LEN + 1);
    // (case, name, lease, wait, owner, expected error)
    let table: Vec<Case> = vec![
        ("empty name", "", good_lease, good_wait, None, "empty"),
        (
            "1 MiB name",
            &huge_name,
            good_lease,
            good_wait,
            None,
            "bytes",
        ),
        (
            "name one byte too long",
            &too_long,
            good_lease,
            good_wait,
            None,
            "bytes",
        ),
        (
            "zero lease",
            "input",
            Duration::ZERO,
            good_wait,
            None,
            "lease",
        ),
        (
            "lease under 1 ms",
            "input",
            Duration::from_nanos(999_999),
            good_wait,
            None,
            "lease",
        ),
        (
            "lease over the maximum",
            "input",
            MAX_DURATION + ms(1),
            good_wait,
            None,
            "lease",
        ),
        (
            "lease of u64::MAX ms",
            "input",
            ms(u64::MAX),
            good_wait,
            None,
            "lease",
        ),
        (
            "lease of Duration::MAX",
            "input",
            Duration::MAX,
            good_wait,
            None,
            "lease",
        ),
        (
            "wait over the maximum",
            "input",
            good_lease,
            MAX_DURATION + ms(1),
            None,
            "wait",
        ),
        (
            "wait of Duration::MAX",
            "input",
            good_lease,
            Duration::MAX,
            None,
            "wait",
        ),
        (
            "empty owner",
            "input",
            good_lease,
            good_wait,
            Some(""),
            "owner",
        ),
        (
            "owner ending in :write",
            "input",
            good_lease,
            good_wait,
            Some("me:write"),
            ":write",
        ),
    ];
    let mut refused = 0;
    for (case, name, lease, wait, owner, text) in &table {
        for kind in KINDS {
            let lock = handle_owned(&client, kind, name, *owner);
            for (call, fut) in calls(&lock, *lease, *wait) {
                // Lease and wait cases only apply to the calls that take one.
                let applies = match *text {
                    "lease" => call.contains("lease"),
                    "wait" => call.ends_with("_for") || call == "try_lock_with_lease",
                    _ => true,
                };
                if !applies {
                    continue;
                }
                check(
                    &format!("{case}, {kind}, {call}"),
                    soon(fut).await,
                    Expect::Invalid(text),
                )
                .await;
                refused += 1;
            }
            if !matches!(*text, "lease" | "wait") {
                // Every other call of the handle refuses it too.
                for result in [
                    soon(lock.is_locked()).await.map(|_| ()),
                    soon(lock.hold_count()).await.map(|_| ()),
                    soon(lock.force_unlock()).await.map(|_| ()),
                    soon(lock.unlock()).await,
                ] {
                    assert!(
                        matches!(result, Err(Error::InvalidArgument(_))),
                        "{case}, {kind}: {result:?}"
                    );
                    refused += 1;
                }
            }
        }
    }
    // A bad waiter timeout, for the fair lock's waits.
    let fair = client
        .fair_lock("input")
        .with_waiter_timeout(Duration::ZERO);
    check(
        "zero waiter timeout",
        soon(fair.lock()).await.map(Some),
        Expect::Invalid("waiter"),
    )
    .await;
    refused += 1;
    assert_eq!(
        server.cmd(&["DBSIZE"]).as_int(),
        Some(0),
        "a refused call wrote to Redis"
    );
    println!(
        "bad input: {refused} refused calls over {} cases x {} lock kinds; 0 writes",
        table.len(),
        KINDS.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn odd_but_valid_inputs_work() {
    let server = RedisServer::start();
    let client = client(&server, Duration::from_secs(30)).await;
    let other = client_for(&server).await;
    let ms = Duration::from_millis;
    let longest = "z".repeat(MAX_NAME_LEN);
    let names = [
        "{",
        "}",
        "{}",
        "a{b}c",
        "{{x}}",
        "}{",
        "\0",
        "nul\0inside",
        "\u{1}\u{7f}\u{ff}",
        "é✓🦀",
        "line\r\nbreak",
        " ",
        "*",
        "mode",
        longest.as_str(),
    ];
    for name in names {
        for kind in KINDS {
            let lock = handle(&client, kind, name);
            let guard = soon(lock.lock()).await.unwrap();
            // Another client is excluded (readers share with readers).
            if kind != "read" {
                let theirs = handle(&other, kind, name);
                assert!(
                    soon(theirs.try_lock()).await.unwrap().is_none(),
                    "{name:?} {kind}"
                );
            }
            assert!(soon(lock.is_locked()).await.unwrap(), "{name:?} {kind}");
            soon(guard.unlock()).await.unwrap();
            assert!(!soon(lock.is_locked()).await.unwrap(), "{name:?} {kind}");
        }
    }
    // Edge durations: 1 ms lease, the longest lease and wait, zero and 1 ns
    // waits (one attempt), on a lock someone else holds and a free one.
    let lock = client.lock("edges");
    for (lease, wait, expect) in [
        (ms(1), Duration::ZERO, Expect::HeldBriefly),
        (MAX_DURATION, Duration::ZERO, Expect::Held),
        (ms(10_000), MAX_DURATION, Expect::Held),
        (ms(10_000), Duration::from_nanos(1), Expect::Held),
    ] {
        check(
            &format!("free, lease {lease:?}, wait {wait:?}"),
            soon(lock.try_lock_with_lease(wait, lease)).await,
            expect,
        )
        .await;
    }
    let theirs = soon(other.lock("edges").lock()).await.unwrap();
    for wait in [Duration::ZERO, Duration::from_nanos(1), ms(1)] {
        check(
            &format!("held, wait {wait:?}"),
            soon(lock.try_lock_for(wait)).await,
            Expect::NotGot,
        )
        .await;
    }
    soon(theirs.unlock()).await.unwrap();
    // The fenced counter, the only key meant to stay.
    let left = server.cmd(&["KEYS", "*"]);
    let left: Vec<String> = left
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|k| k.as_string())
        .filter(|k| !k.starts_with("redisson_lock_token:") && !k.contains("_latch:"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
    println!(
        "{} odd names x {} kinds locked, excluded and released",
        names.len(),
        KINDS.len()
    );
}

async fn client_for(server: &RedisServer) -> Client {
    client(server, Duration::from_secs(30)).await
}

/// Keys of another type under the lock's name (someone else's data), and a
/// fencing counter that is not a number: the error, and the data untouched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_of_the_wrong_type_are_left_alone() {
    let server = RedisServer::start();
    let client = client(&server, Duration::from_secs(30)).await;
    let setups: [(&str, &[&str]); 4] = [
        ("string", &["SET", "wrong", "payload"]),
        ("list", &["RPUSH", "wrong", "a", "b"]),
        ("set", &["SADD", "wrong", "a"]),
        ("zset", &["ZADD", "wrong", "1", "a"]),
    ];
    for (what, setup) in setups {
        server.cmd(&["FLUSHALL"]);
        server.cmd(setup);
        let before = server.cmd(&["DUMP", "wrong"]);
        for kind in KINDS {
            let lock = handle(&client, kind, "wrong");
            for (call, fut) in calls(&lock, Duration::from_secs(10), Duration::from_millis(10)) {
                check(
                    &format!("{what}, {kind}, {call}"),
                    soon(fut).await,
                    Expect::WrongType,
                )
                .await;
            }
            let err = soon(lock.unlock()).await.unwrap_err();
            assert!(
                matches!(err, Error::WrongType { ref name } if name == "wrong"),
                "{err}"
            );
        }
        assert_eq!(server.cmd(&["DUMP", "wrong"]), before, "{what} was changed");
        assert_eq!(
            server.cmd(&["DBSIZE"]).as_int(),
            Some(1),
            "{what}: something was written"
        );
    }

    // The fencing counter holds text, or a list.
    for (what, setup) in [
        ("text", &["SET", "redisson_lock_token:{fenced}", "abc"][..]),
        ("list", &["RPUSH", "redisson_lock_token:{fenced}", "a"][..]),
    ] {
        server.cmd(&["FLUSHALL"]);
        server.cmd(setup);
        let lock = client.fenced_lock("fenced");
        let result = soon(lock.try_lock()).await;
        assert!(result.is_err(), "{what}: {result:?}");
        assert!(
            !common::exists(&server, "fenced"),
            "{what}: the lock was taken though the token could not be drawn"
        );
    }
    println!(
        "wrong types: 4 key types x {} kinds refused, data untouched",
        KINDS.len()
    );
}

/// A Redis that refuses scripts (EVAL and EVALSHA renamed away), and a user
/// whose ACL forbids them: a clear Redis error, no panic, nothing written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_that_refuses_scripts_gives_an_error() {
    let server = RedisServer::start_with_args(&[
        "--rename-command",
        "EVALSHA",
        "",
        "--rename-command",
        "EVAL",
        "",
    ]);
    let client = client(&server, Duration::from_secs(30)).await;
    for kind in KINDS {
        let lock = handle(&client, kind, "no-scripts");
        for (call, fut) in calls(&lock, Duration::from_secs(10), Duration::from_millis(10)) {
            check(
                &format!("no scripts, {kind}, {call}"),
                soon(fut).await,
                Expect::Refused("unknown command"),
            )
            .await;
        }
    }
    assert_eq!(server.cmd(&["DBSIZE"]).as_int(), Some(0));

    let server = RedisServer::start();
    server.cmd(&[
        "ACL",
        "SETUSER",
        "noscript",
        "on",
        ">secret",
        "~*",
        "&*",
        "+@all",
        "-@scripting",
    ]);
    let url = format!("redis://noscript:secret@127.0.0.1:{}/", server.port());
    let client = soon(Client::connect(url)).await.unwrap();
    for kind in KINDS {
        let lock = handle(&client, kind, "no-scripts");
        for (call, fut) in calls(&lock, Duration::from_secs(10), Duration::from_millis(10)) {
            check(
                &format!("ACL, {kind}, {call}"),
                soon(fut).await,
                Expect::Refused("no permissions"),
            )
            .await;
        }
    }
    assert_eq!(server.cmd(&["DBSIZE"]).as_int(), Some(0));
    println!("scripts refused (renamed away, or by ACL): every acquire of every kind gives a Redis error, nothing written");
}

/// The pub/sub mode: sharded is for a cluster, so one server refuses it at
/// `build` (before any connection is used for locks); auto and classic
/// give a classic client there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sharded_pubsub_is_refused_off_a_cluster() {
    use ferrisson::config::PubSubMode;
    let server = RedisServer::start();
    let err = soon(
        Client::builder(server.url())
            .pubsub_mode(PubSubMode::Sharded)
            .build(),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(&err, Error::InvalidArgument(text) if text.contains("Cluster")),
        "{err}"
    );
    for mode in [PubSubMode::Auto, PubSubMode::Classic] {
        let client = soon(Client::builder(server.url()).pubsub_mode(mode).build())
            .await
            .unwrap();
        assert_eq!(client.config().pubsub_mode, PubSubMode::Classic, "{mode:?}");
    }
    assert_eq!(server.cmd(&["DBSIZE"]).as_int(), Some(0));
}
