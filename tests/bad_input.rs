//! Bad input, as a table: each input with the error it must give (or the
//! plain success it must have), for every lock kind where it applies.
//! Nothing panics, and a refused call writes nothing.

use ferrisson_test_support as common;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use common::{client, soon, RedisServer};
use ferrisson::config::MAX_DURATION;
use ferrisson::config::MAX_NAME_LEN;
use ferrisson::{Client, DistributedLock, Error, LockGuard};

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
    let left: Vec<String> = server
        .keys("*")
        .into_iter()
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

/// Data ferrisson did not write, under a synchronizer's name: a Go fleet's
/// `SET NX` lock (a string that is no number), a list, a set, a zset, a
/// stream, and a hash whose fields are no lock holds (`HSET user:1 name
/// bob`). Each setup, with the key type it must be reported as.
const FOREIGN: [(&str, &[&str]); 6] = [
    ("string", &["SET", "wrong", "go-fleet-9f2c", "NX"]),
    ("list", &["RPUSH", "wrong", "a", "b"]),
    ("set", &["SADD", "wrong", "a"]),
    ("zset", &["ZADD", "wrong", "1", "a"]),
    ("stream", &["XADD", "wrong", "1-1", "f", "v"]),
    ("hash", &["HSET", "wrong", "name", "bob", "age", "7"]),
];

/// One call of a synchronizer, its result's value dropped.
type Probe = Pin<Box<dyn Future<Output = ferrisson::Result<()>> + Send>>;

fn probe<T>(call: impl Future<Output = ferrisson::Result<T>> + Send + 'static) -> Probe {
    Box::pin(async move { call.await.map(drop) })
}

/// `(name, probe)` for each call: `object.call(args).await`, on a clone
/// of `object` of its own.
macro_rules! probes {
    ($object:expr; $($call:ident($($arg:expr),*)),* $(,)?) => {
        vec![$({
            let object = $object.clone();
            (stringify!($call), probe(async move { object.$call($($arg),*).await }))
        }),*]
    };
}

/// Runs every probe and checks that each fails with `WrongType` naming
/// `key`, its type `key_type`, and `expected`.
async fn all_refused(
    what: &str,
    probes: Vec<(&'static str, Probe)>,
    key: &str,
    key_type: &str,
    expected: &str,
) -> usize {
    let count = probes.len();
    for (call, probe) in probes {
        match soon(probe).await {
            Err(Error::WrongType {
                name,
                key_type: found,
                expected: kept,
            }) => {
                assert_eq!(
                    (name.as_str(), found.as_str(), kept),
                    (key, key_type, expected),
                    "{what}, {call}"
                );
            }
            other => panic!("{what}, {call}: expected WrongType, got {other:?}"),
        }
    }
    count
}

/// Whether `key` still holds what `before` (its DUMP) held, and nothing
/// else was written.
fn left_alone(server: &RedisServer, key: &str, before: &common::RespValue, what: &str) {
    assert_eq!(
        &server.cmd(&["DUMP", key]),
        before,
        "{what}: the data was changed"
    );
    assert_eq!(
        server.cmd(&["DBSIZE"]).as_int(),
        Some(1),
        "{what}: something was written"
    );
}

/// Every call of every lock kind, on data that is no lock: `WrongType`
/// naming the key's type, and the data untouched (`force_unlock` deletes
/// nothing, the reads do not answer as if it were a lock).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_calls_refuse_keys_of_another_type_and_leave_them() {
    let server = RedisServer::start();
    let client = client(&server, Duration::from_secs(30)).await;
    let (lease, wait) = (Duration::from_secs(10), Duration::from_millis(10));
    let mut refused = 0;
    for (key_type, setup) in FOREIGN {
        server.cmd(&["FLUSHALL"]);
        server.cmd(setup);
        let before = server.cmd(&["DUMP", "wrong"]);
        for kind in KINDS {
            let what = format!("{key_type}, {kind}");
            let lock = handle(&client, kind, "wrong");
            let probes = probes![lock;
                lock(), try_lock(), lock_with_lease(lease), try_lock_for(wait),
                try_lock_with_lease(wait, lease), unlock(), force_unlock(),
                is_locked(), is_held_by_current_task(), is_held_by("task-1"),
                hold_count(), remaining_ttl(), info(),
            ];
            refused += all_refused(&what, probes, "wrong", key_type, "lock").await;
            left_alone(&server, "wrong", &before, &what);
        }
        let fenced = client.fenced_lock("wrong");
        let probes = probes![fenced; current_token()];
        refused += all_refused(key_type, probes, "wrong", key_type, "lock").await;
        left_alone(&server, "wrong", &before, key_type);
    }
    println!(
        "foreign data under a lock's name: {refused} calls ({} key types x {} kinds) refused \
         with its type, data untouched",
        FOREIGN.len(),
        KINDS.len()
    );
}

/// Every call of both semaphores and the latch, on data that is no count
/// (a string that is no integer among them): `WrongType` naming the key's
/// type, and the data untouched (`delete` deletes nothing).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn semaphore_and_latch_calls_refuse_keys_of_another_type_and_leave_them() {
    let server = RedisServer::start();
    let client = client(&server, Duration::from_secs(30)).await;
    let (lease, wait) = (Duration::from_secs(10), Duration::from_millis(10));
    let id: ferrisson::PermitId = "00112233445566778899aabbccddeeff".parse().unwrap();
    let mut refused = 0;
    for (key_type, setup) in FOREIGN {
        server.cmd(&["FLUSHALL"]);
        server.cmd(setup);
        let before = server.cmd(&["DUMP", "wrong"]);

        let semaphore = client.semaphore("wrong");
        let probes = probes![semaphore;
            try_set_permits(3), try_set_permits_with_ttl(3, lease), add_permits(2),
            add_permits(-2), release(), release_many(2), release_if_exists(1), delete(),
            acquire(), acquire_many(2), try_acquire(), try_acquire_many(2),
            try_acquire_for(wait), try_acquire_many_for(2, wait), available_permits(),
            drain_permits(),
        ];
        let what = format!("{key_type}, semaphore");
        refused += all_refused(&what, probes, "wrong", key_type, "semaphore").await;
        left_alone(&server, "wrong", &before, &what);

        let expirable = client.permit_expirable_semaphore("wrong");
        let probes = probes![expirable;
            try_set_permits(3), add_permits(2), acquire(), acquire_with_lease(lease),
            try_acquire(), try_acquire_for(wait), try_acquire_with_lease(wait, lease),
            acquire_many(2), acquire_many_with_lease(2, lease), try_acquire_many(2),
            try_acquire_many_for(2, wait), try_acquire_many_with_lease(2, wait, lease), add_permits(-2),
            release_by_id(id), try_release(id), release_many(&[id]),
            update_lease_by_id(id, Some(lease)), lease_of(id), acquired_permits(),
            permits(), set_permits(4), available_permits(), drain_permits(),
        ];
        let what = format!("{key_type}, permit-expirable semaphore");
        refused += all_refused(&what, probes, "wrong", key_type, "semaphore").await;
        left_alone(&server, "wrong", &before, &what);

        let latch = client.count_down_latch("wrong");
        let probes = probes![latch;
            try_set_count(2), count_down(), count(), wait(), wait_for(wait), delete(),
        ];
        let what = format!("{key_type}, latch");
        refused += all_refused(&what, probes, "wrong", key_type, "latch").await;
        left_alone(&server, "wrong", &before, &what);
    }
    println!(
        "foreign data under a semaphore's or latch's name: {refused} calls ({} key types) \
         refused with its type, data untouched",
        FOREIGN.len()
    );
}

/// A helper key of another type beside a free object: a fenced lock's
/// token counter (text, a list), a fair lock's queue and waiter deadlines,
/// a permit-expirable semaphore's permits out. The error names the helper
/// key and its type, and nothing is written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn helper_keys_of_another_type_are_refused_and_left_alone() {
    let server = RedisServer::start();
    let client = client(&server, Duration::from_secs(30)).await;
    let (lease, wait) = (Duration::from_secs(10), Duration::from_millis(10));
    let cases: [(&str, &[&str], &str); 6] = [
        (
            "string",
            &["SET", "redisson_lock_token:{l}", "abc"],
            "fencing token counter",
        ),
        (
            "list",
            &["RPUSH", "redisson_lock_token:{l}", "a"],
            "fencing token counter",
        ),
        (
            "string",
            &["SET", "redisson_lock_queue:{l}", "a"],
            "fair lock queue",
        ),
        (
            "hash",
            &["HSET", "redisson_lock_timeout:{l}", "a", "1"],
            "fair lock waiter deadlines",
        ),
        ("string", &["SET", "{l}:timeout", "a"], "set of permits out"),
        ("list", &["RPUSH", "{l}:timeout", "a"], "set of permits out"),
    ];
    for (key_type, setup, expected) in cases {
        server.cmd(&["FLUSHALL"]);
        server.cmd(setup);
        let key = setup[1];
        let before = server.cmd(&["DUMP", key]);
        let what = format!("{key_type} at {key}");
        let probes = match expected {
            "fencing token counter" => {
                let lock = client.fenced_lock("l");
                probes![lock; lock(), try_lock(), try_lock_for(wait), info(), current_token()]
            }
            "set of permits out" => {
                let pool = client.permit_expirable_semaphore("l");
                probes![pool;
                    try_acquire(), try_acquire_with_lease(wait, lease), available_permits(),
                    acquired_permits(), permits(), set_permits(2), drain_permits(),
                ]
            }
            _ => {
                let fair = client.fair_lock("l");
                probes![fair; lock(), try_lock(), try_lock_for(wait), info(), force_unlock()]
            }
        };
        all_refused(&what, probes, key, key_type, expected).await;
        left_alone(&server, key, &before, &what);
        assert!(
            !common::exists(&server, "l"),
            "{what}: the object was written"
        );
    }
}

/// A Redis that refuses scripts (EVAL and EVALSHA renamed away, as a
/// server without a scripting engine answers), and a user whose ACL
/// forbids them: `build()` refuses the client with an error that says so,
/// rather than every call failing later; nothing is written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_that_refuses_scripts_is_refused_at_connect() {
    let server = RedisServer::start_with_args(&[
        "--rename-command",
        "EVALSHA",
        "",
        "--rename-command",
        "EVAL",
        "",
    ]);
    let err = soon(Client::connect(server.url())).await.unwrap_err();
    assert!(
        matches!(&err, Error::ScriptingUnavailable { addr, reason }
            if addr.contains(&server.port().to_string()) && reason.contains("unknown command")),
        "{err}"
    );
    assert!(!err.is_connection_error(), "{err}");
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
    let err = soon(Client::connect(url)).await.unwrap_err();
    assert!(
        matches!(&err, Error::ScriptingUnavailable { reason, .. }
            if reason.contains("no permissions")),
        "{err}"
    );
    assert!(
        err.to_string().contains("does not run Lua scripts"),
        "{err}"
    );
    assert_eq!(server.cmd(&["DBSIZE"]).as_int(), Some(0));
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
