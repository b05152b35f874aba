//! The locks: the shared core and `Lock` (the reentrant lock); each kind's
//! differences in `kind`, the acquire steps in `acquire`, the release in
//! `release`, the fair queue in `queue`.

mod acquire;
mod face;
mod fair;
mod fenced;
mod gate;
mod guard;
mod holds;
mod info;
mod kind;
mod lean;
mod lease;
mod non_reentrant;
mod parking;
mod queue;
mod release;
mod rwlock;
mod slot;
mod spin;

pub(crate) use crate::engine::request::release::Resend;
pub use fair::FairLock;
pub use fenced::{FencedGuard, FencedLock};
pub use guard::LockGuard;
use holds::Guards;
use info::Extra;
pub use info::{Holder, LockInfo, LockMode, QueuedWaiter};
pub(crate) use kind::DoneMark;
pub(crate) use kind::{Kind, Reentry};
pub use lease::{Lease, Released};
pub use non_reentrant::{NonReentrantFairLock, NonReentrantLock};
pub(crate) use release::release_hold;
pub use rwlock::{ReadLock, ReadWriteLock, WriteLock};
pub(crate) use slot::Slot;
pub use spin::SpinLock;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::engine::finish::{runtime, Finish};
use crate::engine::keys;
use crate::engine::object::Object;
use crate::engine::watchdog::HoldKey;
use crate::{Client, Error, Result};

/// What every lock handle is: a name on a client, an owner and a kind.
/// The public types ([`Lock`], [`SpinLock`], [`FairLock`], [`FencedLock`],
/// [`ReadLock`], [`WriteLock`]) are thin faces over it.
#[derive(Clone)]
pub(crate) struct LockCore {
    /// The lock's name on its client.
    obj: Object,
    owner: Option<Arc<str>>,
    kind: Kind,
    /// The TTL of this handle's watchdog-mode holds; `None`: the client's
    /// watchdog timeout.
    watchdog_lease: Option<Duration>,
}

impl LockCore {
    /// Writes the handle's fields under the face's name `what`.
    fn debug_as(&self, what: &str, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct(what)
            .field("name", self.obj.shared_name())
            .field("owner", &self.owner)
            .field("kind", &format_args!("{}", self.kind.label()))
            .field("watchdog_lease", &self.watchdog_lease)
            .field("client", &self.obj.client().id())
            .finish()
    }
}

static NEXT_THREAD_OWNER: AtomicU64 = AtomicU64::new(1);

thread_local! {
    static THREAD_OWNER: u64 = NEXT_THREAD_OWNER.fetch_add(1, Ordering::Relaxed);
}

/// The owner id of the caller: its tokio task, or else its thread (the
/// default owner of async and blocking calls alike).
pub(crate) fn current_owner_id() -> String {
    match tokio::task::try_id() {
        Some(id) => format!("task-{id}"),
        None => thread_owner_id(),
    }
}

/// The owner id of the calling thread, `thread-<n>`: the default owner of
/// calls made outside a task.
fn thread_owner_id() -> String {
    format!("thread-{}", THREAD_OWNER.with(|n| *n))
}

/// A reentrant distributed lock, from [`Client::lock`].
///
/// The handle is cheap (`Clone`, `Send + Sync`) and holds nothing by itself:
/// each successful acquire returns a [`LockGuard`], and the lock is held
/// while any guard of it is.
///
/// # Owners and reentrancy
/// Holds belong to an *owner*: by default the tokio task that calls, as
/// Redisson uses the Java thread. A task that already holds the lock
/// re-enters it at once (the hold count rises); any other task, or any other
/// [`Client`], waits. Code outside a tokio task (the body of
/// `#[tokio::main]`, which runs in `block_on`) is owned by its thread.
///
/// When the work that releases a lock is not the task that took it (a guard
/// handed to a spawned task that takes the lock again, a job that spans
/// several tasks), name the owner yourself with [`Lock::with_owner`]: every
/// handle with the same owner id on the same client shares the holds.
///
/// # Waiting
/// Waiters subscribe to the lock's channel and are woken by the unlock
/// message, not by polling; each wait is also bounded by the lock's
/// remaining TTL, so a lost message costs at most the rest of the lease.
#[derive(Clone)]
pub struct Lock {
    core: LockCore,
}

impl Lock {
    pub(crate) fn new(client: Client, name: String) -> Lock {
        Lock {
            core: LockCore::new(client, name, Kind::REENTRANT),
        }
    }
}

impl Lock {
    /// The same lock, named as what it serves in errors (a job).
    pub(crate) fn called(self, what: &'static str, expected: &'static str) -> Lock {
        Lock {
            core: self.core.called(what, expected),
        }
    }

    /// The same lock, whose watchdog-mode holds have a TTL of `lease` (see
    /// [`LockCore::with_watchdog_lease`]). Only for owners of their own (a
    /// job's runs): every handle of one owner must take the same TTL.
    pub(crate) fn with_watchdog_lease(&self, lease: Duration) -> Lock {
        Lock {
            core: self.core.with_watchdog_lease(lease),
        }
    }
}

face::lock_face!(Lock, guard: LockGuard = face::plain);

impl LockCore {
    pub(crate) fn new(client: Client, name: String, kind: Kind) -> LockCore {
        LockCore {
            obj: Object::new(client, name, "lock"),
            owner: None,
            kind,
            watchdog_lease: None,
        }
    }

    pub(crate) fn kind(&self) -> Kind {
        self.kind
    }

    /// The same lock, named `what` in errors about its name and `expected`
    /// in errors about its key's data (see [`Object::called`]).
    pub(crate) fn called(self, what: &'static str, expected: &'static str) -> LockCore {
        LockCore {
            obj: self.obj.called(what, expected),
            ..self
        }
    }

    /// The same handle with another kind (a new backoff or waiter timeout).
    pub(crate) fn with_kind(&self, kind: Kind) -> LockCore {
        LockCore {
            kind,
            ..self.clone()
        }
    }

    /// The same fair lock (reentrant or not), with waiters that count as
    /// dead after `timeout` of silence.
    pub(crate) fn with_waiter_timeout(&self, timeout: Duration) -> LockCore {
        self.with_kind(Kind::Fair {
            waiter_timeout: timeout,
            reentry: self.kind.reentry(),
        })
    }

    /// The same lock, whose watchdog-mode holds have a TTL of `lease`
    /// instead of the client's watchdog timeout (renewed every third of
    /// it by the same watchdog). Checked by the first acquire (see
    /// [`check_watchdog_lease`]).
    pub(crate) fn with_watchdog_lease(&self, lease: Duration) -> LockCore {
        LockCore {
            watchdog_lease: Some(lease),
            ..self.clone()
        }
    }

    /// The TTL this handle's watchdog-mode holds are taken with: its own
    /// watchdog lease, or the client's watchdog timeout.
    pub(crate) fn watchdog_ttl(&self) -> Duration {
        self.watchdog_lease
            .unwrap_or(self.obj.config().watchdog_timeout)
    }

    /// A fair lock's waiter timeout.
    pub(crate) fn waiter_timeout(&self) -> Duration {
        self.kind
            .waiter_timeout()
            .unwrap_or(crate::config::DEFAULT_FAIR_WAITER_TIMEOUT)
    }

    /// The lock's name: the Redis key of its hash.
    pub(crate) fn name(&self) -> &str {
        self.obj.shared_name()
    }

    /// The same lock, owned by `owner` instead of the calling task.
    ///
    /// Use it when holds must be shared or released across tasks: every
    /// handle with the same owner id on the same client re-enters the other's
    /// holds. The id must be non-empty and must not end in `:write` (that
    /// suffix marks Redisson's write-lock holders); a bad id is reported by
    /// the first call.
    pub(crate) fn with_owner(&self, owner: impl Into<String>) -> LockCore {
        LockCore {
            owner: Some(owner.into().into()),
            ..self.clone()
        }
    }

    /// The client this handle belongs to.
    pub(crate) fn client(&self) -> &Client {
        self.obj.client()
    }

    /// The lock as an object on its client.
    pub(crate) fn object(&self) -> &Object {
        &self.obj
    }

    /// The hash field of the calling owner, `<client-uuid>:<owner-id>`;
    /// checks the name and owner.
    fn field(&self) -> Result<Arc<str>> {
        self.obj.checked()?;
        let owner = match &self.owner {
            Some(owner) => {
                if owner.is_empty() {
                    return Err(Error::invalid("owner id must not be empty"));
                }
                if owner.ends_with(":write") {
                    return Err(Error::invalid(format!(
                        "owner id `{owner}` must not end in `:write`"
                    )));
                }
                owner.to_string()
            }
            None => current_owner_id(),
        };
        let suffix = self.kind.field_suffix();
        Ok(self.obj.owner_field(&owner, suffix))
    }

    /// The work of [`Lock::lock`](crate::Lock::lock) for every face,
    /// whose docs are the contract.
    pub(crate) async fn lock(&self) -> Result<LockGuard> {
        self.acquire(None, None)
            .await?
            .ok_or_else(|| Error::no_deadline("acquire"))
    }

    /// The work of [`Lock::lock_with_lease`](crate::Lock::lock_with_lease) for every face,
    /// whose docs are the contract.
    pub(crate) async fn lock_with_lease(&self, lease: Duration) -> Result<LockGuard> {
        self.acquire(None, Some(lease))
            .await?
            .ok_or_else(|| Error::no_deadline("acquire"))
    }

    /// The work of [`Lock::try_lock`](crate::Lock::try_lock) for every face,
    /// whose docs are the contract.
    pub(crate) async fn try_lock(&self) -> Result<Option<LockGuard>> {
        self.acquire(Some(Duration::ZERO), None).await
    }

    /// The work of [`Lock::try_lock_for`](crate::Lock::try_lock_for) for every face,
    /// whose docs are the contract.
    pub(crate) async fn try_lock_for(&self, wait: Duration) -> Result<Option<LockGuard>> {
        self.acquire(Some(wait), None).await
    }

    /// The work of [`Lock::try_lock_with_lease`](crate::Lock::try_lock_with_lease) for every face,
    /// whose docs are the contract.
    pub(crate) async fn try_lock_with_lease(
        &self,
        wait: Duration,
        lease: Duration,
    ) -> Result<Option<LockGuard>> {
        self.acquire(Some(wait), Some(lease)).await
    }

    /// The work of [`Lock::is_locked`](crate::Lock::is_locked) for every face,
    /// whose docs are the contract.
    pub(crate) async fn is_locked(&self) -> Result<bool> {
        self.field()?;
        let (hash, ..) = self.read_lock(Extra::Plain).await?;
        Ok(match self.kind.mode() {
            None => !hash.is_empty(),
            Some(mode) => hash_value(&hash, "mode") == Some(mode),
        })
    }

    /// The work of [`Lock::is_held_by_current_task`](crate::Lock::is_held_by_current_task) for every face,
    /// whose docs are the contract.
    pub(crate) async fn is_held_by_current_task(&self) -> Result<bool> {
        Ok(self.own_holds().await?.is_some())
    }

    /// The work of [`Lock::hold_count`](crate::Lock::hold_count) for every face,
    /// whose docs are the contract.
    pub(crate) async fn hold_count(&self) -> Result<u32> {
        match self.own_holds().await? {
            None => Ok(0),
            Some(text) => text.parse().map_err(|_| Error::UnexpectedReply {
                script: "lock_info (hold count)",
                reply: text,
            }),
        }
    }

    /// The value of this handle's owner's field, `None` when it has none.
    async fn own_holds(&self) -> Result<Option<String>> {
        let field = self.field()?;
        let (hash, ..) = self.read_lock(Extra::Plain).await?;
        match hash_value(&hash, &field) {
            Some(value) if !keys::is_lock_hold(&field, value) => Err(self.not_a_lock_hash()),
            value => Ok(value.map(str::to_owned)),
        }
    }

    /// The work of [`Lock::remaining_ttl`](crate::Lock::remaining_ttl) for every face,
    /// whose docs are the contract.
    pub(crate) async fn remaining_ttl(&self) -> Result<Option<Duration>> {
        self.field()?;
        let (_, ms, ..) = self.read_lock(Extra::Plain).await?;
        Ok((ms >= 0).then(|| Duration::from_millis(ms as u64)))
    }

    /// The work of [`Lock::force_unlock`](crate::Lock::force_unlock) for every face,
    /// whose docs are the contract.
    pub(crate) async fn force_unlock(&self) -> Result<bool> {
        self.field()?;
        let call = self
            .kind
            .force_unlock(self.obj.shared_name(), self.obj.publish());
        let reply = self.obj.run::<i64>(call).await?;
        match reply {
            0 => Ok(false),
            1 => Ok(true),
            other => Err(Error::UnexpectedReply {
                script: "force_unlock",
                reply: other.to_string(),
            }),
        }
    }

    /// The work of [`Lock::unlock`](crate::Lock::unlock) for every face,
    /// whose docs are the contract.
    pub(crate) async fn unlock(&self) -> Result<()> {
        let field = self.field()?;
        let lock = self.obj.clone();
        let key = HoldKey::new(Arc::clone(self.obj.shared_name()), field);
        let kind = self.kind;
        let release = async move {
            if let Some(slot) = Guards::get().claim_newest(&key) {
                let release = release::Release::prepare(lock, kind, key, slot)?;
                return release.send(Resend::Bounded).await;
            }
            // A watchdog hold without a guard (leaked): its lease bounds the
            // resends, as a guard's does, and the holds left keep its TTL.
            let lease = lock.registry().release_any(&key);
            let ttl = lease.as_ref().and_then(|lease| lease.watchdog_ttl());
            let watchdog_ms = ttl.unwrap_or(lock.config().watchdog_timeout).as_millis() as u64;
            let released = release_hold(
                &lock,
                kind,
                &key.field,
                watchdog_ms,
                lease.as_deref(),
                Resend::Bounded,
            )
            .await;
            if let Err(err) = &released {
                if !matches!(err, Error::NotHeld { .. }) {
                    // Not released: it stands in Redis until its TTL ends,
                    // at most a watchdog TTL after its lease's.
                    let until =
                        (lease.as_ref()).map_or_else(tokio::time::Instant::now, |l| l.deadline());
                    let ttl = Duration::from_millis(watchdog_ms);
                    Guards::get().lingers_until(&key, until + ttl + slot::EXPIRY_SLACK);
                }
            }
            released
        };
        Finish::detached(runtime()?, release).await
    }

    fn error(&self, err: redis::RedisError) -> Error {
        self.obj.error(err)
    }
}

/// Checks a watchdog lease (the TTL of a hold the watchdog renews): at
/// least [`MIN_WATCHDOG_TIMEOUT`](crate::config::MIN_WATCHDOG_TIMEOUT),
/// as the client's watchdog timeout, and at most
/// [`MAX_DURATION`](crate::config::MAX_DURATION). `what` names it in the
/// error.
pub(crate) fn check_watchdog_lease(what: &str, lease: Duration) -> Result<()> {
    use crate::config::{MAX_DURATION, MIN_WATCHDOG_TIMEOUT};
    if lease < MIN_WATCHDOG_TIMEOUT {
        return Err(Error::invalid(format!(
            "{what} {lease:?} is too short to renew: it must be at least {MIN_WATCHDOG_TIMEOUT:?}"
        )));
    }
    if lease > MAX_DURATION {
        return Err(Error::invalid(format!(
            "{what} must be at most {MAX_DURATION:?}, got {lease:?}"
        )));
    }
    Ok(())
}

/// The value of `field` in a hash read flat (field, value, field, ...).
fn hash_value<'a>(hash: &'a [String], field: &str) -> Option<&'a str> {
    hash.chunks_exact(2)
        .find(|pair| pair[0] == field)
        .map(|pair| pair[1].as_str())
}

// `Client`'s calls that hand out the locks: here, beside them, so that the
// client's module never names the handles built over it.
impl Client {
    /// A handle to the reentrant lock `name`. Nothing is sent to Redis until
    /// the handle is used; a bad name is reported by the first call.
    pub fn lock(&self, name: impl Into<String>) -> Lock {
        Lock::new(self.clone(), name.into())
    }

    /// A handle to the non-reentrant lock `name`, Redisson's
    /// `getNonReentrantLock`: the reentrant lock's hash (it excludes
    /// [`Client::lock`] holders of the same name), but an owner that holds
    /// it and asks again is refused
    /// ([`Error::NonReentrantReacquire`])
    /// instead of re-entering. For code whose futures share a task (`join!`,
    /// `select!`, `buffer_unordered`): see [`NonReentrantLock`].
    pub fn non_reentrant_lock(&self, name: impl Into<String>) -> NonReentrantLock {
        NonReentrantLock::new(self.clone(), name.into())
    }

    /// A handle to the non-reentrant fair lock `name`, Redisson's
    /// `getNonReentrantFairLock`: the [`FairLock`] whose holder is refused
    /// when it asks again, as [`Client::non_reentrant_lock`]'s.
    pub fn non_reentrant_fair_lock(&self, name: impl Into<String>) -> NonReentrantFairLock {
        NonReentrantFairLock::new(self.clone(), name.into())
    }

    /// A handle to the spin lock `name`: the reentrant lock's hash and
    /// scripts (it excludes [`Client::lock`] holders of the same name, and
    /// Redisson's `getLock` and `getSpinLock`), but its waiters poll with
    /// exponential backoff and jitter ([`Backoff`](crate::Backoff), 1 ms up
    /// to 128 ms by default; change it with
    /// [`SpinLock::with_backoff`]) instead of subscribing.
    ///
    /// For very many locks with waiters, where one subscription per lock
    /// name costs too much. The price: a waiter learns of a release up to
    /// one pause late, and polling waiters cost Redis one call per pause.
    pub fn spin_lock(&self, name: impl Into<String>) -> SpinLock {
        SpinLock::new(self.clone(), name.into())
    }

    /// A handle to the fenced lock `name`: the reentrant lock (same hash,
    /// waits, watchdog and release), and every successful acquire, re-entry
    /// included, also draws a fencing token from the counter
    /// `redisson_lock_token:{name}`, as Redisson's `RFencedLock`:
    /// [`FencedGuard::token`](crate::FencedGuard::token). Tokens rise strictly
    /// across all holders, forever (the counter has no TTL).
    ///
    /// A lease can run out while its holder is paused; the lock alone cannot
    /// stop that holder's late write. The token can: the protected resource
    /// keeps the highest token it has seen and refuses lower ones
    /// (`cargo run --example fencing`).
    pub fn fenced_lock(&self, name: impl Into<String>) -> FencedLock {
        FencedLock::new(self.clone(), name.into())
    }

    /// A handle to the fair lock `name`, Redisson's `getFairLock`: the
    /// reentrant lock, granted first come, first served across every client
    /// and process, through a queue of waiters
    /// (`redisson_lock_queue:{name}`, `redisson_lock_timeout:{name}`).
    ///
    /// - Each waiter is woken on its own channel when its turn comes.
    /// - A waiter that gives up (its wait ran out, its future was dropped,
    ///   an error) leaves the queue at once and the ones behind it move up.
    /// - A waiter whose process died is skipped once it has been silent for
    ///   the waiter timeout (default
    ///   [`DEFAULT_FAIR_WAITER_TIMEOUT`](crate::config::DEFAULT_FAIR_WAITER_TIMEOUT),
    ///   300 s; [`FairLock::with_waiter_timeout`]): until then the line waits
    ///   for it, which is the price of fairness.
    /// - `try_lock()` (one attempt) does not join the queue.
    pub fn fair_lock(&self, name: impl Into<String>) -> FairLock {
        FairLock::new(self.clone(), name.into())
    }

    /// A handle to the read-write lock `name`, Redisson's `RReadWriteLock`:
    /// its [`read`](ReadWriteLock::read) side admits many holders at once,
    /// its [`write`](ReadWriteLock::write) side one, and never both at once
    /// (but for one owner's downgrade).
    pub fn read_write_lock(&self, name: impl Into<String>) -> ReadWriteLock {
        ReadWriteLock::new(self.clone(), name.into())
    }
}

/// A counter the suite reads to show that released holds leave no records
/// behind: not part of the API (feature `test-counters`, as the client's
/// other counters; hidden from the docs). Here, beside the records, for
/// the client does not reach into the locks.
#[cfg(feature = "test-counters")]
impl Client {
    /// How many holds this client's guards keep a record of right now:
    /// live guards, and released holds whose record still tells how long
    /// the owner's key stands.
    #[doc(hidden)]
    pub fn hold_records(&self) -> usize {
        Guards::get().slots_of(&self.id().to_string())
    }
}
