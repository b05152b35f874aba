//! What every handle is: a name on a client.
//!
//! A synchronizer's handle (the semaphore, the latch, a lock's core...) is
//! an [`Object`] and what is its own: the object checks the name before a
//! call writes anything, maps Redis's errors to the crate's under that
//! name, and runs a call that finishes even if its caller leaves.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use redis::ScriptInvocation;

use crate::client::conn::Conn;
use crate::engine::backoff::SOON;
use crate::engine::finish::{runtime, spawn_to_end, Finish, Rescue};
use crate::engine::keys;
use crate::engine::request::Latch;
use crate::engine::scripts::{READ_COUNT, SET_IF_MISSING};
use crate::engine::waiting::{self, Channel, Tried, Wait, Watcher};
use crate::{args, Client, Error, Result};

/// A name on a client, and what kind of thing it names (for errors).
#[derive(Clone)]
pub(crate) struct Object {
    client: Client,
    name: Arc<str>,
    /// What the caller called it, for errors about its name: "lock",
    /// "semaphore", "latch", "election", "job"...
    what: &'static str,
    /// What ferrisson keeps at its key, for [`Error::WrongType`]: the
    /// same as `what` but for objects built over another (an election's
    /// fenced lock, a job's lock).
    expected: &'static str,
    /// The connection its calls go on, when not the client's: work rerun
    /// at a runtime's shutdown runs on a connection of its own (see
    /// [`Object::spawn_to_end`]).
    /// Boxed: only that rare work has one, and a guard carries its lock's
    /// object.
    conn: Option<Box<Conn>>,
}

impl Object {
    pub(crate) fn new(client: Client, name: String, what: &'static str) -> Object {
        Object::named(client, name.into(), what)
    }

    /// [`Object::new`] of a name already shared.
    pub(crate) fn named(client: Client, name: Arc<str>, what: &'static str) -> Object {
        Object {
            client,
            name,
            what,
            expected: what,
            conn: None,
        }
    }

    /// The same object, its calls sent on `conn`.
    fn on(&self, conn: Conn) -> Object {
        Object {
            conn: Some(Box::new(conn)),
            ..self.clone()
        }
    }

    /// Runs `work` as a task on `runtime`, and makes sure it ends: when the
    /// runtime shuts down first, `work` runs again from its start, on a
    /// thread and a connection of its own, and the shutdown waits for it
    /// (see [`spawn_to_end`](crate::engine::finish::spawn_to_end)). `work`
    /// is given the object to send on, and must be safe to run twice.
    pub(crate) fn spawn_to_end<W, F>(&self, runtime: &tokio::runtime::Handle, work: W)
    where
        W: Fn(Object) -> F + Send + Sync + 'static,
        F: Future<Output = ()> + Send + 'static,
    {
        let obj = self.clone();
        spawn_to_end(self.conn(), self.client.clone(), runtime, move |conn| {
            work(obj.on(conn))
        });
    }

    /// A [`Rescue`] for a [`Finish`]ed request on the object: `work`, given
    /// the object bound to a connection of its own, runs when the request's
    /// task is dropped unfinished at its runtime's shutdown (see
    /// [`Finish::rescued_by`]). It must be safe to run after any part of
    /// the request, and twice.
    pub(crate) fn rescue<W, F>(&self, work: W) -> Rescue
    where
        W: Fn(Object) -> F + Send + Sync + 'static,
        F: Future<Output = ()> + Send + 'static,
    {
        let obj = self.clone();
        Rescue::new(
            self.client.clone(),
            Arc::new(move |conn| Box::pin(work(obj.on(conn)))),
        )
    }

    /// The object's name: its key, or the stem of its keys.
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// [`Object::name`], shared.
    pub(crate) fn shared_name(&self) -> &Arc<str> {
        &self.name
    }

    /// The client it is a name on: for the handles' public `client()` and
    /// for handles made from it (a read-write lock's sides).
    pub(crate) fn client(&self) -> &Client {
        &self.client
    }

    /// The client's settings.
    pub(crate) fn config(&self) -> &crate::Config {
        self.client.config()
    }

    /// The command a script publishes with: `publish`, or `spublish` on a
    /// cluster (the channel then lives in the object's slot).
    pub(crate) fn publish(&self) -> &'static str {
        self.client.publish()
    }

    /// Whether the client talks to a Redis Cluster.
    pub(crate) fn is_cluster(&self) -> bool {
        self.client.conn().is_cluster()
    }

    /// A new request id, unique to this client: the end of a request's
    /// latch keys.
    pub(crate) fn request_id(&self) -> String {
        self.client.request_id()
    }

    /// The hash field of `owner` on this client,
    /// `<client-uuid>:<owner><suffix>`.
    pub(crate) fn owner_field(&self, owner: &str, suffix: &str) -> Arc<str> {
        self.client.fields().field(owner, suffix)
    }

    /// Deletes `latch`, a request's latch that no send of it needs any
    /// more, soon (batched with others, in the background).
    pub(crate) fn discard_latch(&self, latch: String) {
        self.client.sweeper().discard(latch);
    }

    /// The client's watchdog: the holds it keeps alive.
    pub(crate) fn registry(&self) -> &crate::engine::watchdog::Registry {
        self.client.registry()
    }

    /// The same object, called `what` in errors about its name and
    /// `expected` in errors about its key's data: an election's or a job's
    /// lock is named as the election or the job the caller asked for.
    pub(crate) fn called(self, what: &'static str, expected: &'static str) -> Object {
        Object {
            what,
            expected,
            ..self
        }
    }

    /// Who this object's figures are about, in metrics, as a `kind`.
    pub(crate) fn subject(&self, kind: &'static str) -> crate::engine::telemetry::Subject<'_> {
        crate::engine::telemetry::Subject {
            kind,
            name: (self.client.config().metric_lock_names).then_some(&*self.name),
        }
    }

    /// What ferrisson keeps at the object's key, as [`Error::WrongType`]
    /// names it.
    pub(crate) fn expected(&self) -> &'static str {
        self.expected
    }

    /// Refuses a bad name ([`Error::InvalidArgument`]), and a client whose
    /// runtime is gone ([`Error::RuntimeGone`](crate::Error::RuntimeGone));
    /// every call checks them before it sends anything.
    pub(crate) fn checked(&self) -> Result<()> {
        args::name(self.what, &self.name)?;
        self.client.check_runtime()
    }

    /// The crate's error for what Redis replied about this object.
    pub(crate) fn error(&self, err: redis::RedisError) -> Error {
        error_about(err, &self.name, self.expected)
    }

    /// A handle on the connection the object's calls go on.
    pub(crate) fn conn(&self) -> Conn {
        match &self.conn {
            Some(conn) => Conn::clone(conn),
            None => self.client.conn(),
        }
    }

    /// Runs `request` to its end on the current runtime, even when the
    /// caller's future is dropped after it was sent (see [`Finish`]).
    pub(crate) async fn finish<T, F>(&self, request: F) -> Result<T>
    where
        T: Send + 'static,
        F: Future<Output = redis::RedisResult<T>> + Send + 'static,
    {
        Finish::detached(runtime()?, request)
            .await
            .map_err(|e| self.error(e))
    }

    /// Runs one script call to its end, even when the caller's future is
    /// dropped after it was sent: a cold call is what it sends.
    ///
    /// # Cancel safety
    /// Cancel safe: once sent, the call completes in the background.
    pub(crate) async fn run<T>(&self, call: ScriptInvocation<'static>) -> Result<T>
    where
        T: redis::FromRedisValue + Send + 'static,
    {
        let mut conn = self.conn();
        self.finish(async move { call.invoke_async::<T>(&mut conn).await })
            .await
    }

    /// Sets the object's key to `value` unless it exists, publishing
    /// `message` on `channel`; whether it was set. With `ttl_ms`, the key
    /// expires that long after. A semaphore's permits and a latch's count
    /// are set so, once.
    ///
    /// # Cancel safety
    /// Cancel safe: once sent, the call completes in the background.
    pub(crate) async fn set_if_missing(
        &self,
        channel: String,
        value: impl redis::ToRedisArgs + Send + 'static,
        message: String,
        ttl_ms: Option<u64>,
    ) -> Result<bool> {
        let mut call = SET_IF_MISSING.prepare_invoke();
        call.key(&*self.name)
            .key(channel)
            .arg(value)
            .arg(message)
            .arg(self.client.publish())
            .arg(ttl_ms.unwrap_or(0));
        Ok(self.run::<i64>(call).await? == 1)
    }
}

/// Waits on the object: a call's limits, its wait for a release, a watch.
impl Object {
    /// The limits of a call on this object that waits `wait` from now
    /// (see [`Wait::new`]).
    pub(crate) fn wait_limits(&self, wait: Option<Duration>) -> Result<Wait> {
        Wait::new(&self.client, wait)
    }

    /// Tries `attempt` until it is done or `wait`'s deadline passes,
    /// woken on `channel` (see [`waiting::wait_on`]).
    ///
    /// # Cancel safety
    /// Cancel safe if each `attempt` is: a dropped wait leaves its
    /// subscription at once.
    pub(crate) async fn wait_on<T, F, Fut>(
        &self,
        channel: impl Fn() -> Channel,
        wait: Wait,
        attempt: F,
    ) -> Result<Option<T>>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<Tried<T>>>,
    {
        waiting::wait_on(&self.client, channel, wait, attempt).await
    }

    /// One round of `watcher`'s watch on this object (see
    /// [`Watcher::watch`]).
    ///
    /// # Cancel safety
    /// Cancel safe if each `attempt` is: the watcher keeps its
    /// subscription for the next call.
    pub(crate) async fn watch<T, F, Fut>(
        &self,
        watcher: &mut Watcher,
        deadline: Option<tokio::time::Instant>,
        attempt: F,
    ) -> Result<Option<T>>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<Tried<T>>>,
    {
        watcher.watch(&self.client, deadline, attempt).await
    }
}

impl Object {
    /// The count at the object's key (a semaphore's permits, a latch's
    /// count): 0 when the key is missing, [`Error::WrongType`] when it is
    /// not a count.
    pub(crate) async fn read_count(&self) -> Result<i64> {
        let mut conn = self.conn();
        READ_COUNT
            .key(&*self.name)
            .invoke_async(&mut conn)
            .await
            .map_err(|e| self.error(e))
    }
}

/// What a grant becomes under replica sync.
enum Synced {
    /// Sync is off, or enough replicas acknowledged it: keep it.
    Yes,
    /// Too few did, and the client retries: give it back, try again after
    /// this long.
    Retry(std::time::Duration),
    /// Too few did: give it back, and fail with this.
    Failed(Error),
}

impl Object {
    /// The one replica check of a grant: with replica sync on, waits for
    /// the replicas to acknowledge the grant just answered, whose acquire
    /// latch is `latch`, and keeps what it took (`taken`) when enough did.
    /// When too few did, only the master knows of it: it is given back by
    /// `give_back` (which logs its own failure), and the attempt tries
    /// again after the sync's timeout, or fails with
    /// [`Error::NotReplicated`], as configured. The sync covers the grant
    /// whatever connection carried it (see `ClientInner::grant_replicated`);
    /// without a latch, it covers the writes of the current connection.
    pub(crate) async fn keep_if_synced<K, G, Fut>(
        &self,
        latch: Option<&Latch>,
        taken: K,
        give_back: G,
    ) -> Result<Tried<K>>
    where
        G: FnOnce(K) -> Fut,
        Fut: Future<Output = ()>,
    {
        match self.synced(latch).await {
            Synced::Yes => Ok(Tried::Done(taken)),
            Synced::Retry(after) => {
                give_back(taken).await;
                Ok(Tried::Again(Some(after.max(SOON))))
            }
            Synced::Failed(err) => {
                give_back(taken).await;
                Err(err)
            }
        }
    }

    /// What replica sync makes of the grant whose latch is `latch`.
    async fn synced(&self, latch: Option<&Latch>) -> Synced {
        let inner = &self.client;
        let verdict = match latch {
            Some(latch) => {
                inner
                    .grant_replicated(&self.name, &latch.key, latch.ttl)
                    .await
            }
            None => inner.replicated(&self.name).await,
        };
        match (verdict, inner.config().replica_sync) {
            (Some(verdict), Some(sync)) if !verdict.enough => match sync.on_unsynced {
                crate::config::Unsynced::Retry => Synced::Retry(sync.timeout),
                _ => Synced::Failed(Error::NotReplicated {
                    name: self.name.to_string(),
                    acked: verdict.acked,
                    wanted: verdict.wanted,
                }),
            },
            _ => Synced::Yes,
        }
    }

    /// With replica sync on, waits for the replicas to acknowledge a
    /// release just written; only warns when too few did (it stands on the
    /// master, as a lock's release does).
    pub(crate) async fn release_synced(&self) {
        let verdict = self.client.replicated(&self.name).await;
        if let Some(verdict) = verdict.filter(|v| !v.enough) {
            tracing::warn!(name = %self.name, acked = verdict.acked,
                "too few replicas acknowledged a release in time; it stands on the master");
        }
    }
}

/// Turns a WRONGTYPE reply about the `what` (`lock`, `semaphore`,
/// `latch`) named `name` into [`Error::WrongType`]; any other error is
/// [`Error::Redis`].
///
/// The scripts reply `WRONGTYPE holds a <type>: <key>`, naming the key
/// (the object's own, or a helper key) and its type. A WRONGTYPE of
/// Redis's own, which names neither, is taken to be about `name`.
pub(crate) fn error_about(err: redis::RedisError, name: &str, what: &'static str) -> Error {
    if err.code() != Some("WRONGTYPE") {
        return Error::Redis(err);
    }
    let said = err
        .detail()
        .and_then(|detail| detail.strip_prefix("holds a "))
        .and_then(|rest| rest.split_once(": "));
    let (key_type, key) = match said {
        Some((key_type, key)) => (key_type.to_owned(), key),
        None => (UNKNOWN_TYPE.to_owned(), name),
    };
    Error::WrongType {
        expected: keys::kept_at(name, key).unwrap_or(what),
        name: key.to_owned(),
        key_type,
    }
}

/// The `key_type` of a WRONGTYPE from Redis itself, which does not say.
const UNKNOWN_TYPE: &str = "value of another type";

impl std::fmt::Debug for Object {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Object")
            .field("name", &self.name)
            .field("what", &self.what)
            .field("expected", &self.expected)
            .finish_non_exhaustive()
    }
}
