//! The workspace's test support, for the tests of ferrisson, of its
//! inspector (ferrisson-cli) and of the protocol model (ferrisson-model),
//! and for the examples: a private `redis-server` per test (and clusters,
//! sentinels and TLS servers of them), a fault-injecting proxy, child
//! processes, a seeded generator, and helpers that turn a hang into a
//! failure.
//!
//! Feature `client` (on by default): the helpers that make or use a
//! `ferrisson::Client` (builders, `settled`, lock boxes, the cancellation
//! helpers). The model's tests turn it off, so that they build without the
//! library. Nothing here depends on one of the library's optional features:
//! a test that needs one (cluster, sentinel, TLS) turns it on in its own
//! crate, and no feature of these tests is enabled behind its back.

#[cfg(feature = "client")]
pub mod cancel;
pub mod child;
pub mod clock;
pub mod cluster;
mod frames;
pub mod proxy;
mod resp;
pub mod rng;
pub mod sentinel;
pub mod server;
pub mod tls;

use std::future::Future;
use std::time::Duration;

pub use server::{RawSubscriber, RedisServer, RespValue};

/// Every await in a test goes through this: a deadlock fails the test
/// instead of hanging the suite.
pub async fn within<F: Future>(limit: Duration, fut: F) -> F::Output {
    match tokio::time::timeout(limit, fut).await {
        Ok(out) => out,
        Err(_) => panic!("timed out after {limit:?}"),
    }
}

/// [`within`] with a generous default for one lock operation.
pub async fn soon<F: Future>(fut: F) -> F::Output {
    within(Duration::from_secs(20), fut).await
}

/// `count` timeouts under `bound`, for cutting an operation short at many
/// points of its course: the i-th is `i * 7919` µs modulo `bound`, so that
/// successive cuts land far apart and, over the run, all over the range
/// (7919 is prime). The same points on every run.
pub fn cut_points(count: u64, bound: Duration) -> impl Iterator<Item = Duration> {
    let bound = u64::try_from(bound.as_micros()).expect("a bound in µs that fits a u64");
    (0..count).map(move |i| Duration::from_micros((i * 7919) % bound))
}

/// A client with a short watchdog timeout, so tests see several renewals.
#[cfg(feature = "client")]
pub async fn client(server: &RedisServer, watchdog: Duration) -> ferrisson::Client {
    client_at(&server.url(), watchdog).await
}

/// [`client_at`] with a response and a connection timeout of `timeouts`
/// each (a proxy's link made slow or cut needs its own).
#[cfg(feature = "client")]
pub async fn client_with_timeouts(
    url: &str,
    watchdog: Duration,
    timeouts: Duration,
) -> ferrisson::Client {
    connect(builder_with_timeouts(url, watchdog, timeouts)).await
}

/// The builder of [`client_with_timeouts`], for a test that sets more.
#[cfg(feature = "client")]
pub fn builder_with_timeouts(
    url: &str,
    watchdog: Duration,
    timeouts: Duration,
) -> ferrisson::ClientBuilder {
    ferrisson::Client::builder(url)
        .watchdog_timeout(watchdog)
        .response_timeout(timeouts)
        .connection_timeout(timeouts)
}

/// A runtime of its own for a test that ends one (a program's end):
/// multi-threaded (two workers) or current-thread.
pub fn runtime(multi_thread: bool) -> tokio::runtime::Runtime {
    let mut builder = if multi_thread {
        tokio::runtime::Builder::new_multi_thread()
    } else {
        tokio::runtime::Builder::new_current_thread()
    };
    builder
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

/// Builds `builder`'s client, within the tests' time for a step.
#[cfg(feature = "client")]
pub async fn connect(builder: ferrisson::ClientBuilder) -> ferrisson::Client {
    soon(builder.build()).await.unwrap()
}

/// [`client`] for a URL (a proxy's, say) rather than a server.
#[cfg(feature = "client")]
pub async fn client_at(url: &str, watchdog: Duration) -> ferrisson::Client {
    soon(
        ferrisson::Client::builder(url)
            .watchdog_timeout(watchdog)
            .build(),
    )
    .await
    .expect("connect")
}

/// Waits until `cond` holds, checking every 10 ms, for at most `limit`;
/// for state that changes in the background with no event to wait on.
pub async fn eventually<F, Fut>(limit: Duration, mut cond: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + limit;
    while !cond().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "condition not met within {limit:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

pub fn exists(server: &RedisServer, key: &str) -> bool {
    server.cmd(&["EXISTS", key]).as_int() == Some(1)
}

pub fn init_tracing() {
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    use tracing_subscriber::Layer;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| "ferrisson=warn".into());
    let _ = tracing_subscriber::registry()
        .with(
            tracing_subscriber::fmt::layer()
                .with_test_writer()
                .with_filter(filter),
        )
        .with(GiveBackFailures)
        .try_init();
}

/// The names of the locks and semaphores whose give-back of a grant, or
/// whose release of a dropped guard, failed in this process so far (the
/// library's warnings "could not give back ...", "release of a dropped
/// guard failed ...", "could not learn whether a request ... took a
/// hold" and their lean acquire's kin: what the grant or the guard held
/// stays until its lease ends, as documented), once [`init_tracing`] has
/// run.
pub fn failed_give_backs() -> std::collections::BTreeSet<String> {
    FAILED_GIVE_BACKS.lock().unwrap().clone()
}

static FAILED_GIVE_BACKS: std::sync::Mutex<std::collections::BTreeSet<String>> =
    std::sync::Mutex::new(std::collections::BTreeSet::new());

/// Records the names in the library's give-back warnings.
struct GiveBackFailures;

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for GiveBackFailures {
    fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        if *event.metadata().level() != tracing::Level::WARN {
            return;
        }
        #[derive(Default)]
        struct Fields {
            message: String,
            name: Option<String>,
        }
        impl tracing::field::Visit for Fields {
            fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
                match field.name() {
                    "message" => self.message = format!("{value:?}"),
                    "lock" | "semaphore" | "name" => self.name = Some(format!("{value:?}")),
                    _ => {}
                }
            }
        }
        let mut fields = Fields::default();
        event.record(&mut fields);
        // A give-back, or a dropped guard's release, that never got
        // through, or a settling that could not learn what its request
        // took (a lean acquire's too): the hold stays until its lease
        // ends (as documented).
        let failed = [
            "could not give back",
            "could not learn whether",
            "release of a dropped guard failed",
            "could not release a hold a lean acquire took",
            "a lean send whose reply was lost could not be settled",
        ]
        .iter()
        .any(|start| fields.message.starts_with(start));
        if let (true, Some(name)) = (failed, fields.name) {
            FAILED_GIVE_BACKS.lock().unwrap().insert(name);
        }
    }
}

/// Waits until `client` holds nothing and waits on nothing: the registry
/// and the subscriptions are empty (unsubscribing runs in the background).
#[cfg(feature = "client")]
pub async fn settled(client: &ferrisson::Client) {
    eventually(Duration::from_secs(10), || async {
        client.held_locks() == 0 && client.subscriptions() == 0
    })
    .await;
}

/// The next message a raw subscriber sees, within 10 s.
pub async fn next_message(mut sub: RawSubscriber) -> Option<(String, String)> {
    tokio::task::spawn_blocking(move || sub.next_message(Duration::from_secs(10)))
        .await
        .expect("subscriber thread")
}

/// How many connections the server counts as subscribed to `channel`.
pub fn subscribers(server: &RedisServer, channel: &str) -> i64 {
    server
        .cmd(&["PUBSUB", "NUMSUB", channel])
        .as_array()
        .and_then(|reply| reply.get(1).and_then(RespValue::as_int))
        .expect("PUBSUB NUMSUB reply")
}

/// Runs `rounds` lock-protected read-modify-writes of the counter `key` in
/// one task per handle (GET, yield, SET: updates are lost unless the lock
/// excludes), and returns the counter's final value.
#[cfg(feature = "client")]
pub async fn count_under_lock(
    server: &RedisServer,
    locks: Vec<impl ferrisson::DistributedLock + 'static>,
    rounds: usize,
    key: &str,
) -> i64 {
    let mut tasks = Vec::new();
    for lock in locks {
        let url = server.url();
        let key = key.to_owned();
        tasks.push(tokio::spawn(async move {
            let raw = redis::Client::open(url).unwrap();
            let mut raw = raw.get_multiplexed_async_connection().await.unwrap();
            for _ in 0..rounds {
                let guard = lock.lock().await.unwrap();
                let n: i64 = redis::cmd("GET")
                    .arg(&key)
                    .query_async::<Option<i64>>(&mut raw)
                    .await
                    .unwrap()
                    .unwrap_or(0);
                tokio::task::yield_now().await;
                let _: () = redis::cmd("SET")
                    .arg(&key)
                    .arg(n + 1)
                    .query_async(&mut raw)
                    .await
                    .unwrap();
                guard.unlock().await.unwrap();
            }
        }));
    }
    for task in tasks {
        within(Duration::from_secs(120), task).await.unwrap();
    }
    server
        .cmd(&["GET", key])
        .as_string()
        .map_or(0, |n| n.parse().unwrap())
}

/// Whether `master`'s WAIT counts `replicas` replicas yet (within 1 s): a
/// replica whose link is up may not acknowledge for a moment.
pub fn replicas_acknowledge(master: &RedisServer, replicas: usize) -> bool {
    master
        .try_cmd(&["WAIT", &replicas.to_string(), "1000"])
        .ok()
        .and_then(|acked| acked.as_int())
        == Some(replicas as i64)
}

/// The lock types, by the names the tests give them.
#[cfg(feature = "client")]
pub const LOCK_KINDS: [&str; 8] = [
    "reentrant",
    "spin",
    "fenced",
    "fair",
    "read",
    "write",
    "non-reentrant",
    "non-reentrant fair",
];

/// A handle to the lock `name` of `kind` (one of [`LOCK_KINDS`]; the read
/// and write sides are those of the read-write lock `name`), as a trait
/// object so that a test can treat every kind alike.
#[cfg(feature = "client")]
pub fn lock_of(
    client: &ferrisson::Client,
    kind: &str,
    name: &str,
) -> Box<dyn ferrisson::DistributedLock> {
    owned_lock_of(client, kind, name, None)
}

/// [`lock_of`], owned by `owner` when one is given.
#[cfg(feature = "client")]
pub fn owned_lock_of(
    client: &ferrisson::Client,
    kind: &str,
    name: &str,
    owner: Option<&str>,
) -> Box<dyn ferrisson::DistributedLock> {
    macro_rules! owned {
        ($lock:expr) => {{
            let lock = $lock;
            match owner {
                Some(owner) => {
                    Box::new(lock.with_owner(owner)) as Box<dyn ferrisson::DistributedLock>
                }
                None => Box::new(lock),
            }
        }};
    }
    match kind {
        "spin" => owned!(client.spin_lock(name)),
        "fenced" => owned!(client.fenced_lock(name)),
        "fair" => owned!(client.fair_lock(name)),
        "read" => owned!(client.read_write_lock(name).read()),
        "write" => owned!(client.read_write_lock(name).write()),
        "reentrant" => owned!(client.lock(name)),
        "non-reentrant" => owned!(client.non_reentrant_lock(name)),
        "non-reentrant fair" => owned!(client.non_reentrant_fair_lock(name)),
        other => panic!("no lock kind {other:?}"),
    }
}

/// Takes and gives back, once each: every kind of lock (`<prefix>:<kind>`,
/// see [`LOCK_KINDS`]) when `each_lock` is set, else the reentrant lock
/// `prefix`; one permit of the semaphore `<prefix>:sem` and one of the
/// permit-expirable semaphore `<prefix>:seats`, each set to `permits`
/// first. The scripts are loaded then, and the objects exist.
#[cfg(feature = "client")]
pub async fn take_and_give_back_each(
    client: &ferrisson::Client,
    prefix: &str,
    each_lock: bool,
    permits: u32,
) {
    let locks: Vec<Box<dyn ferrisson::DistributedLock>> = if each_lock {
        LOCK_KINDS
            .iter()
            .map(|kind| lock_of(client, kind, &format!("{prefix}:{kind}")))
            .collect()
    } else {
        vec![Box::new(client.lock(prefix))]
    };
    for lock in locks {
        // `lock()` sends the lean scripts (on one server, by default),
        // `try_lock()` the latched ones: both loaded.
        let guard = soon(lock.lock()).await.unwrap();
        soon(guard.unlock()).await.unwrap();
        let guard = soon(lock.try_lock()).await.unwrap().expect("free");
        soon(guard.unlock()).await.unwrap();
    }
    let sem = client.semaphore(format!("{prefix}:sem"));
    assert!(soon(sem.try_set_permits(permits)).await.unwrap());
    soon(sem.acquire()).await.unwrap();
    soon(sem.release()).await.unwrap();
    let seats = client.permit_expirable_semaphore(format!("{prefix}:seats"));
    assert!(soon(seats.try_set_permits(permits)).await.unwrap());
    soon(soon(seats.acquire()).await.unwrap().release())
        .await
        .unwrap();
}
