//! The permit-expirable semaphore: permits with ids and leases, which come
//! back by themselves when their holder dies.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use tokio::runtime::Handle;
use tokio::time::Instant;

use crate::args;
use crate::config::MAX_DURATION;
use crate::engine::finish::{runtime, Finish};
use crate::engine::object::Object;
use crate::engine::request::give_back::{resend_until, surely_ended, NEVER_EXPIRES};
use crate::engine::request::{
    self, Answer, GiveBack, GrantedIn, Lasts, Latch, Request, RequestSlot, Sending, Taken,
    Unclaimed,
};
use crate::engine::telemetry;
use crate::engine::waiting::{wait_on, Channel, Tried, Wait};
use crate::engine::{keys, scripts::EXPIRABLE};
use crate::{Client, Error, Result};

/// The `kind` label of a permit-expirable semaphore's figures.
const EXPIRABLE_KIND: &str = "permit_expirable_semaphore";

/// The score of a permit without a lease, as Redisson writes it
/// (`Long.MAX_VALUE / 10000`): far beyond any expiry.
const NO_EXPIRY: i64 = 922_337_203_685_477;

/// A permit's id: 16 random bytes, shown as 32 hex digits, as in Redisson.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PermitId([u8; 16]);

impl PermitId {
    fn random() -> PermitId {
        PermitId(*uuid::Uuid::new_v4().as_bytes())
    }

    /// The 16 bytes, as the sorted set stores them.
    pub fn as_bytes(&self) -> &[u8; 16] {
        &self.0
    }
}

impl fmt::Display for PermitId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.iter().try_for_each(|b| write!(f, "{b:02x}"))
    }
}

impl fmt::Debug for PermitId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PermitId({self})")
    }
}

impl FromStr for PermitId {
    type Err = Error;

    /// Parses 32 hex digits (either case), as [`PermitId`] displays and
    /// Redisson hands out.
    fn from_str(text: &str) -> Result<PermitId> {
        let bad = || Error::invalid(format!("a permit id is 32 hex digits, got `{text}`"));
        // Only hex digits: `u8::from_str_radix` alone would take a sign.
        if text.len() != 32 || !text.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(bad());
        }
        let mut bytes = [0u8; 16];
        for (i, byte) in bytes.iter_mut().enumerate() {
            *byte = u8::from_str_radix(&text[2 * i..2 * i + 2], 16).map_err(|_| bad())?;
        }
        Ok(PermitId(bytes))
    }
}

/// A semaphore whose permits have ids and, optionally, leases, from
/// [`Client::permit_expirable_semaphore`]: Redisson's
/// `RPermitExpirableSemaphore`, on the same keys.
///
/// Each acquire takes one permit and returns a [`Permit`] with its own id.
/// A permit taken with a lease goes back to the semaphore when the lease
/// runs out, by the Redis server's clock: every call on the semaphore, from
/// any client, first takes back the permits whose lease ended, and a waiter
/// wakes when the first lease it waits on ends. So a holder that dies loses
/// its permit at most one lease later, with no one to clean up.
///
/// Layout: the available permits at the key `name`, the permits out in the
/// sorted set `{name}:timeout` (member: the id's 16 bytes; score: when the
/// lease ends, in epoch ms), the channel `redisson_sc:{name}`. Its
/// guarantees are the [`Semaphore`](crate::Semaphore)'s, but for its
/// releases, which name their permits and are safe to repeat.
///
/// # Clocks in a fleet shared with Redisson
/// The lease ends are epoch milliseconds kept in Redis (as are a
/// [`FairLock`](crate::FairLock)'s queue deadlines). ferrisson's scripts
/// read them against the server's clock (`TIME`); Redisson computes them
/// on each Java client's own clock and passes them in. So where Java and
/// Rust clients share the semaphore, a JVM whose clock runs ahead takes
/// permits back early: with 5 s of skew, a one-permit semaphore was seen
/// with two holders. Keep every client host on NTP, with skew well under
/// a lease, or keep this semaphore and the fair lock to one language. The
/// other synchronizers use only TTLs, which the server keeps.
///
/// ```no_run
/// # async fn run(client: ferrisson::Client) -> ferrisson::Result<()> {
/// use std::time::Duration;
/// let seats = client.permit_expirable_semaphore("gpu:seats");
/// seats.try_set_permits(2).await?;
/// let permit = seats.acquire_with_lease(Duration::from_secs(60)).await?;
/// println!("seat {} is mine for a minute", permit.id());
/// // ... work; if this process dies, the seat comes back within a minute ...
/// seats.release(permit).await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct PermitExpirableSemaphore {
    obj: Object,
}

impl fmt::Debug for PermitExpirableSemaphore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PermitExpirableSemaphore")
            .field("name", &self.obj.name)
            .finish_non_exhaustive()
    }
}

/// One call of the script, with the arguments of `op`.
/// One call of the script, with the arguments of `op`: `ids` (their raw
/// bytes, concatenated) and `number` (a lease in ms, or the total).
fn call(
    client: &Client,
    name: &str,
    op: &str,
    ids: &[PermitId],
    number: u64,
) -> redis::ScriptInvocation<'static> {
    let mut invocation = EXPIRABLE.prepare_invoke();
    invocation
        .key(name)
        .key(keys::permit_timeouts(name))
        .key(keys::semaphore_channel(name))
        .arg(op)
        .arg(client.publish())
        .arg(ids.iter().flat_map(|id| id.0).collect::<Vec<u8>>())
        .arg(number)
        .arg(NO_EXPIRY);
    invocation
}

/// Gives back the permits `ids`, all or none: `Ok(None)` when they were
/// all out, else the first that was not (and none was given back). With
/// `until`, a send that fails on the connection is resent until then (a
/// release by id is idempotent: a second finds the permit not out).
///
/// Sent on the connection `semaphore` is bound to. Safe to send twice: a
/// permit given back is no longer out, and the second send finds it
/// missing.
async fn give_back(
    semaphore: &Object,
    ids: &[PermitId],
    until: Option<Instant>,
) -> Result<Option<PermitId>> {
    let (client, name) = (&semaphore.client, &*semaphore.name);
    let send = |_| {
        let mut conn = semaphore.conn();
        let release = call(client, name, "release", ids, 0);
        async move { release.invoke_async::<i64>(&mut conn).await }
    };
    let released = match until {
        Some(until) => resend_until(client.config(), name, until, send).await,
        None => send(0).await,
    };
    let released = released.map_err(|e| semaphore.error(e))?;
    match released {
        1 => Ok(None),
        missing if missing < 0 => Ok(ids.get((-missing - 1) as usize).copied()),
        other => Err(Error::UnexpectedReply {
            script: "expirable release",
            reply: other.to_string(),
        }),
    }
}

impl PermitExpirableSemaphore {
    pub(crate) fn new(client: Client, name: String) -> PermitExpirableSemaphore {
        PermitExpirableSemaphore {
            obj: Object::new(client, name, "semaphore"),
        }
    }

    /// The semaphore's name, which is also its key.
    pub fn name(&self) -> &str {
        &self.obj.name
    }

    /// Sets the number of permits, if the semaphore is not set yet; whether
    /// it was set by this call (see [`Semaphore::try_set_permits`]).
    ///
    /// [`Semaphore::try_set_permits`]: crate::Semaphore::try_set_permits
    ///
    /// # Errors
    /// [`Error::InvalidArgument`], [`Error::WrongType`], [`Error::Redis`].
    ///
    /// # Cancel safety
    /// Cancel safe: once sent, the call completes in the background.
    pub async fn try_set_permits(&self, permits: u32) -> Result<bool> {
        self.counter().try_set_permits(permits).await
    }

    /// Adds `permits` to the available ones and wakes the waiters; a
    /// negative number takes them away: as
    /// [`Semaphore::add_permits`](crate::Semaphore::add_permits), whose
    /// errors and cancel safety it shares.
    ///
    /// # Errors
    /// As [`Semaphore::add_permits`](crate::Semaphore::add_permits).
    ///
    /// # Cancel safety
    /// Cancel safe: once sent, the call completes in the background.
    pub async fn add_permits(&self, permits: i64) -> Result<()> {
        self.counter().add_permits(permits).await
    }

    /// The count of available permits alone: the key and channel of a
    /// plain [`Semaphore`](crate::Semaphore) of the same name.
    fn counter(&self) -> crate::Semaphore {
        crate::Semaphore::new(self.obj.client.clone(), self.obj.name.to_string())
    }

    /// Takes one permit without a lease, waiting as long as it takes. The
    /// permit is out until released: if its holder dies, it is lost, as a
    /// [`Semaphore`](crate::Semaphore)'s; prefer
    /// [`acquire_with_lease`](Self::acquire_with_lease).
    ///
    /// A take whose reply is lost (the connection failed after the send)
    /// is sent again under the same request id and permit ids, as a lock's
    /// acquire is (see [Cancel safety](crate#cancel-safety)): a resend of a
    /// take that was granted is answered "granted" and takes nothing more,
    /// so a lost reply neither takes a second permit nor leaves one out.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`], [`Error::WrongType`], [`Error::Redis`]
    /// for an error Redis replies (connection failures are waited out, and
    /// the take resent).
    ///
    /// # Cancel safety
    /// Cancel safe: a dropped future leaves no permit out. When the take
    /// was already sent, it completes in the background and its permit is
    /// given back. Nobody awaits that give-back: it is resent after a
    /// failed connection until it gets through, or until the permit's lease
    /// has surely ended (an hour at most, for a permit without a lease).
    pub async fn acquire(&self) -> Result<Permit> {
        self.take(None, None)
            .await?
            .ok_or_else(|| Error::no_deadline("expirable"))
    }

    /// Takes one permit that comes back by itself after `lease`, waiting
    /// as long as it takes.
    ///
    /// # Errors
    /// As [`acquire`](Self::acquire), and [`Error::InvalidArgument`] for a
    /// lease under 1 ms or over a year.
    ///
    /// # Cancel safety
    /// As [`acquire`](Self::acquire).
    pub async fn acquire_with_lease(&self, lease: Duration) -> Result<Permit> {
        self.take(None, Some(lease))
            .await?
            .ok_or_else(|| Error::no_deadline("expirable"))
    }

    /// Takes one permit without a lease if one is available now. It waits
    /// for its one reply the client's response timeout at most, once (with
    /// replica sync, plus the replicas' acknowledgement), as
    /// [`Lock::try_lock`](crate::Lock::try_lock); a take whose reply is lost
    /// within that time is sent again, as [`acquire`](Self::acquire) says.
    ///
    /// # Errors
    /// As [`acquire`](Self::acquire), and connection failures (a server
    /// that does not answer within the response timeout among them). A
    /// permit the take may have taken is then given back in the background
    /// once Redis can be reached: none is left out.
    ///
    /// # Cancel safety
    /// As [`acquire`](Self::acquire).
    pub async fn try_acquire(&self) -> Result<Option<Permit>> {
        self.take(Some(Duration::ZERO), None).await
    }

    /// Takes one permit without a lease, waiting at most `wait`. It
    /// returns by the end of the wait plus a small margin, whatever the
    /// server does, as [`Lock::try_lock_for`](crate::Lock::try_lock_for):
    /// a take still unanswered then finishes in the background, and the
    /// permit it took is given back.
    ///
    /// # Errors
    /// As [`acquire`](Self::acquire), and [`Error::InvalidArgument`] for a
    /// wait over a year. The first try's take is resent after a lost
    /// reply while the wait lasts, up to [`release_attempts`] sends; a
    /// connection failure on the first try is returned (later ones are
    /// waited out within the wait), and so is a timeout when no try had its
    /// reply by the end of the margin. A permit the take may have taken is
    /// given back in the background.
    ///
    /// [`release_attempts`]: crate::ClientBuilder::release_attempts
    ///
    /// # Cancel safety
    /// As [`acquire`](Self::acquire).
    pub async fn try_acquire_for(&self, wait: Duration) -> Result<Option<Permit>> {
        self.take(Some(wait), None).await
    }

    /// Takes one permit that comes back by itself after `lease`, waiting at
    /// most `wait`.
    ///
    /// # Errors
    /// As [`try_acquire_for`](Self::try_acquire_for), and
    /// [`Error::InvalidArgument`] for a bad lease.
    ///
    /// # Cancel safety
    /// As [`acquire`](Self::acquire).
    pub async fn try_acquire_with_lease(
        &self,
        wait: Duration,
        lease: Duration,
    ) -> Result<Option<Permit>> {
        self.take(Some(wait), Some(lease)).await
    }

    /// Takes `permits` permits at once, all or none, each with its own id
    /// and without a lease, waiting as long as it takes: Redisson's
    /// `acquire(permits)`.
    ///
    /// # Errors
    /// As [`acquire`](Self::acquire), and [`Error::InvalidArgument`] for
    /// zero permits or more than 100 000 at once.
    ///
    /// # Cancel safety
    /// As [`acquire`](Self::acquire): a dropped future leaves none of them
    /// out.
    pub async fn acquire_many(&self, permits: u32) -> Result<Vec<Permit>> {
        self.take_many(permits, None, None)
            .await?
            .ok_or_else(|| Error::no_deadline("expirable"))
    }

    /// As [`acquire_many`](Self::acquire_many), each permit coming back by
    /// itself after `lease`: Redisson's `acquire(permits, leaseTime, unit)`.
    ///
    /// # Errors
    /// As [`acquire_many`](Self::acquire_many), and
    /// [`Error::InvalidArgument`] for a bad lease.
    ///
    /// # Cancel safety
    /// As [`acquire`](Self::acquire).
    pub async fn acquire_many_with_lease(
        &self,
        permits: u32,
        lease: Duration,
    ) -> Result<Vec<Permit>> {
        self.take_many(permits, None, Some(lease))
            .await?
            .ok_or_else(|| Error::no_deadline("expirable"))
    }

    /// Takes `permits` permits at once, all or none, if they are available
    /// now (one attempt, as [`try_acquire`](Self::try_acquire)).
    ///
    /// # Errors
    /// As [`acquire_many`](Self::acquire_many) and
    /// [`try_acquire`](Self::try_acquire).
    ///
    /// # Cancel safety
    /// As [`acquire`](Self::acquire).
    pub async fn try_acquire_many(&self, permits: u32) -> Result<Option<Vec<Permit>>> {
        self.take_many(permits, Some(Duration::ZERO), None).await
    }

    /// Takes `permits` permits at once, all or none, waiting at most
    /// `wait`: Redisson's `tryAcquire(permits, waitTime, unit)`.
    ///
    /// # Errors
    /// As [`acquire_many`](Self::acquire_many) and
    /// [`try_acquire_for`](Self::try_acquire_for).
    ///
    /// # Cancel safety
    /// As [`acquire`](Self::acquire).
    pub async fn try_acquire_many_for(
        &self,
        permits: u32,
        wait: Duration,
    ) -> Result<Option<Vec<Permit>>> {
        self.take_many(permits, Some(wait), None).await
    }

    /// As [`try_acquire_many_for`](Self::try_acquire_many_for), each permit
    /// coming back by itself after `lease`: Redisson's
    /// `tryAcquire(permits, waitTime, leaseTime, unit)`.
    ///
    /// # Errors
    /// As [`try_acquire_many_for`](Self::try_acquire_many_for), and
    /// [`Error::InvalidArgument`] for a bad lease.
    ///
    /// # Cancel safety
    /// As [`acquire`](Self::acquire).
    pub async fn try_acquire_many_with_lease(
        &self,
        permits: u32,
        wait: Duration,
        lease: Duration,
    ) -> Result<Option<Vec<Permit>>> {
        self.take_many(permits, Some(wait), Some(lease)).await
    }

    /// Gives the permit back and wakes the waiters.
    ///
    /// # Errors
    /// [`Error::PermitNotOut`] when the permit's lease had run out (it went
    /// back by itself, and may be someone else's now: nothing else is
    /// touched); [`Error::WrongType`] when the keys hold other data;
    /// [`Error::Redis`] when the connection failed (a lost reply is safe to
    /// retry with [`release_by_id`](Self::release_by_id): a second release
    /// of one id finds it not out).
    ///
    /// # Cancel safety
    /// Cancel safe: once sent, the release completes in the background.
    pub async fn release(&self, permit: Permit) -> Result<()> {
        permit.release().await
    }

    /// Gives back the permit `id`, taken by this or any other client (ids
    /// travel as text: [`PermitId`] parses Redisson's).
    ///
    /// # Errors
    /// As [`release`](Self::release).
    ///
    /// # Cancel safety
    /// Cancel safe: once sent, the release completes in the background.
    pub async fn release_by_id(&self, id: PermitId) -> Result<()> {
        self.release_many(&[id]).await
    }

    /// Gives back the permit `id` if it is out; whether it was (Redisson's
    /// `tryRelease`).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`], [`Error::WrongType`], [`Error::Redis`].
    ///
    /// # Cancel safety
    /// Cancel safe: once sent, the release completes in the background.
    pub async fn try_release(&self, id: PermitId) -> Result<bool> {
        match self.release_many(&[id]).await {
            Ok(()) => Ok(true),
            Err(Error::PermitNotOut { .. }) => Ok(false),
            Err(err) => Err(err),
        }
    }

    /// Gives back the permits `ids`, all or none (Redisson's
    /// `release(permitIds)`): when one of them is not out, none is given
    /// back and the error names it.
    ///
    /// # Errors
    /// [`Error::PermitNotOut`] naming the first id that is not out;
    /// [`Error::InvalidArgument`] for no ids; [`Error::WrongType`],
    /// [`Error::Redis`].
    ///
    /// # Cancel safety
    /// Cancel safe: once sent, the release completes in the background.
    pub async fn release_many(&self, ids: &[PermitId]) -> Result<()> {
        self.obj.checked()?;
        if ids.is_empty() {
            return Err(Error::invalid("no permit ids to release"));
        }
        let (semaphore, ids) = (self.obj.clone(), ids.to_vec());
        let release = async move { give_back(&semaphore, &ids, None).await };
        match Finish::detached(runtime()?, release).await? {
            None => {
                self.obj.release_synced().await;
                Ok(())
            }
            Some(id) => Err(self.not_out(id)),
        }
    }

    /// Sets a new lease on a permit that is still out, counted from now;
    /// with `None`, the permit no longer expires.
    ///
    /// # Errors
    /// [`Error::PermitNotOut`] when its lease had run out already (it is
    /// not taken again), [`Error::InvalidArgument`] for a lease under 1 ms
    /// or over a year, [`Error::WrongType`], [`Error::Redis`].
    ///
    /// # Cancel safety
    /// Cancel safe: once sent, the update completes in the background; the
    /// permit's local lease is only changed when it succeeded.
    pub async fn update_lease(&self, permit: &mut Permit, lease: Option<Duration>) -> Result<()> {
        let sent = Instant::now();
        let lease_ms = self.update(permit.id, lease).await?;
        permit.expires = lease_ms.map(|ms| lease_end(sent, ms));
        Ok(())
    }

    /// As [`update_lease`](Self::update_lease), for the permit `id` taken
    /// by this or any other client (Redisson's `updateLeaseTime`); the
    /// holder's [`Permit`], if any, keeps its own count of its lease.
    ///
    /// # Errors
    /// As [`update_lease`](Self::update_lease).
    ///
    /// # Cancel safety
    /// Cancel safe: once sent, the update completes in the background.
    pub async fn update_lease_by_id(&self, id: PermitId, lease: Option<Duration>) -> Result<()> {
        self.update(id, lease).await.map(drop)
    }

    /// Sets the lease of `id`; the lease in ms it set.
    async fn update(&self, id: PermitId, lease: Option<Duration>) -> Result<Option<u64>> {
        self.obj.checked()?;
        let lease_ms = lease
            .map(|lease| args::duration("lease", lease, MAX_DURATION))
            .transpose()?;
        let updated = self.run("update", &[id], lease_ms.unwrap_or(0)).await?;
        if updated != 1 {
            return Err(self.not_out(id));
        }
        Ok(lease_ms)
    }

    /// What is left of the lease of the permit `id`, by the server's clock
    /// (Redisson's `getLeaseTime`-style read): `None` for a permit without
    /// a lease.
    ///
    /// # Errors
    /// [`Error::PermitNotOut`] when the permit is not out;
    /// [`Error::InvalidArgument`], [`Error::WrongType`], [`Error::Redis`].
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads (and takes back expired permits, as every
    /// call does).
    pub async fn lease_of(&self, id: PermitId) -> Result<Option<Duration>> {
        self.obj.checked()?;
        match self.run("lease", &[id], 0).await? {
            -2 => Err(self.not_out(id)),
            -1 => Ok(None),
            ms => Ok(Some(Duration::from_millis(ms.max(0) as u64))),
        }
    }

    /// How many permits are out now (Redisson's `acquiredPermits`), after
    /// taking back the expired.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`], [`Error::WrongType`], [`Error::Redis`].
    ///
    /// # Cancel safety
    /// Cancel safe: once sent, the call completes in the background.
    pub async fn acquired_permits(&self) -> Result<i64> {
        self.count("out").await
    }

    /// The total of permits: available plus out (Redisson's `getPermits`),
    /// after taking back the expired.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`], [`Error::WrongType`], [`Error::Redis`].
    ///
    /// # Cancel safety
    /// Cancel safe: once sent, the call completes in the background.
    pub async fn permits(&self) -> Result<i64> {
        self.count("total").await
    }

    /// Makes the total of permits `permits` (Redisson's `setPermits`): the
    /// available count becomes `permits` less those out (below zero when
    /// more are out; they are not taken back), and waiters are woken.
    /// Returns the new available count.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`], [`Error::WrongType`], [`Error::Redis`].
    ///
    /// # Cancel safety
    /// Cancel safe: once sent, the call completes in the background.
    pub async fn set_permits(&self, permits: u32) -> Result<i64> {
        self.obj.checked()?;
        self.run("set", &[], permits.into()).await
    }

    /// How many permits are available now, after taking back the expired.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`], [`Error::WrongType`], [`Error::Redis`].
    ///
    /// # Cancel safety
    /// Cancel safe: once sent, the call completes in the background.
    pub async fn available_permits(&self) -> Result<i64> {
        self.count("available").await
    }

    /// Takes every available permit, after taking back the expired; how
    /// many it took. Drained permits are not out: no id names them.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`], [`Error::WrongType`], [`Error::Redis`].
    ///
    /// # Cancel safety
    /// Cancel safe: once sent, the call completes in the background.
    pub async fn drain_permits(&self) -> Result<i64> {
        self.count("drain").await
    }

    async fn count(&self, op: &'static str) -> Result<i64> {
        self.obj.checked()?;
        self.run(op, &[], 0).await
    }

    /// Runs `op` to its end, even if the caller leaves.
    async fn run(&self, op: &'static str, ids: &[PermitId], number: u64) -> Result<i64> {
        let call = call(&self.obj.client, &self.obj.name, op, ids, number);
        self.obj.run(call).await
    }

    fn not_out(&self, id: PermitId) -> Error {
        Error::PermitNotOut {
            name: self.obj.name.to_string(),
            permit: id.to_string(),
        }
    }

    async fn take(
        &self,
        wait: Option<Duration>,
        lease: Option<Duration>,
    ) -> Result<Option<Permit>> {
        Ok(self
            .take_many(1, wait, lease)
            .await?
            .and_then(|mut permits| permits.pop()))
    }

    /// Takes `n` permits at once, all or none.
    async fn take_many(
        &self,
        n: u32,
        wait: Option<Duration>,
        lease: Option<Duration>,
    ) -> Result<Option<Vec<Permit>>> {
        let subject = self.obj.subject(EXPIRABLE_KIND);
        let take = || self.take_many_in(n, wait, lease);
        telemetry::acquire(subject, &self.obj.name, take, Option::is_some).await
    }

    /// [`PermitExpirableSemaphore::take_many`], inside its span.
    async fn take_many_in(
        &self,
        n: u32,
        wait: Option<Duration>,
        lease: Option<Duration>,
    ) -> Result<Option<Vec<Permit>>> {
        self.obj.checked()?;
        let n = args::permits(n)?;
        if n > MAX_PERMITS_AT_ONCE {
            return Err(Error::invalid(format!(
                "at most {MAX_PERMITS_AT_ONCE} permits are taken at once, got {n}"
            )));
        }
        let lease_ms = lease
            .map(|lease| args::duration("lease", lease, MAX_DURATION))
            .transpose()?;
        let limits = Wait::new(&self.obj.client, wait)?;
        let runtime = runtime()?;
        // One request (and its permit ids) for the whole wait, renewed when
        // it grows old: a resend after a lost reply takes the permits once.
        let slot = RequestSlot::default();
        let attempt = || self.try_take(n, lease_ms, &slot, limits.resend_until, runtime.clone());
        let channel = Channel {
            name: keys::semaphore_channel(&self.obj.name),
            broadcast: true,
        };
        wait_on(&self.obj.client, channel, limits, attempt).await
    }

    /// One attempt of the wait's request to take `n` permits under the
    /// request's ids (resent on a lost reply, more while the wait lasts):
    /// the permits, or wait (until the first permit out expires, when one
    /// will).
    async fn try_take(
        &self,
        n: u32,
        lease_ms: Option<u64>,
        slot: &RequestSlot<PermitsOut>,
        resend_until: Option<Instant>,
        runtime: Handle,
    ) -> Result<Tried<Vec<Permit>>> {
        // What the sends take lasts the lease (0: until released).
        let ttl_ms = lease_ms.unwrap_or(0);
        let new = || {
            let out = PermitsOut::new((0..n).map(|_| PermitId::random()).collect(), lease_ms);
            Request::new(
                &self.obj.client,
                &self.obj.name,
                out,
                ttl_ms,
                runtime.clone(),
            )
        };
        let request = slot.get(ttl_ms, new).await.map_err(|e| self.obj.error(e))?;
        let ids = request.taken().ids.clone();
        let (sent, this) = (Instant::now(), Arc::clone(&request));
        let (client, name, build_ids) = (
            self.obj.client.clone(),
            Arc::clone(&self.obj.name),
            ids.clone(),
        );
        let build = move |latch: &str, latch_ttl: u64, deadline: u64| {
            let lease = lease_ms.unwrap_or(0);
            let mut call = call(&client, &name, "acquire", &build_ids, lease);
            call.key(latch).arg(latch_ttl).arg(deadline);
            call
        };
        // The script replies nil for permits taken, else how long to wait.
        let answer = |reply: &Option<i64>| Answer::granted_if(reply.is_none());
        let lasts = lease_ms.map_or(Lasts::UntilReleased, Lasts::Ms);
        let how = Sending {
            build,
            // Ran after its deadline: took nothing, as a timed-out reply.
            decode: |reply| match redis::from_redis_value::<Option<i64>>(reply)? {
                Some(request::LATE) => Err(request::late()),
                reply => Ok(reply),
            },
            resend_until,
            lasts,
        };
        let reply = request::send(request, runtime.clone(), how, answer, |_| async {})
            .await
            .map_err(|e| self.obj.error(e))?;
        if reply.is_none() {
            // Given back should this attempt be dropped before it returns.
            let (client, name) = (&self.obj.client, &self.obj.name);
            let out = PermitsOut::new(ids.clone(), lease_ms);
            let taken = Unclaimed::new(client, name, out, runtime.clone());
            let give_back = |taken: Unclaimed<PermitsOut>| taken.give_back(GiveBack::Unsynced);
            let latch = slot.latch();
            match self
                .obj
                .keep_if_synced(latch.as_deref(), taken, give_back)
                .await?
            {
                // Claimed by the permits made below, with no await between.
                Tried::Done(taken) => taken.claim(),
                Tried::Again(after) => return Ok(Tried::Again(after)),
            }
        }
        // The lease counts from this send, or from an earlier one of the
        // request whose reply was lost (it may have taken the permits).
        let start = this.lease_start(sent);
        Ok(match reply {
            None => Tried::Done(
                ids.iter()
                    .map(|&id| Permit {
                        hold: Some(PermitHold {
                            client: self.obj.client.clone(),
                            name: Arc::clone(&self.obj.name),
                            runtime: runtime.clone(),
                            #[cfg(feature = "metrics")]
                            granted: std::time::Instant::now(),
                        }),
                        id,
                        expires: lease_ms.map(|ms| lease_end(start, ms)),
                    })
                    .collect(),
            ),
            // Until the first lease ends, but no longer than a look-again:
            // that lease may be anyone's and long, and a wait whose message
            // was lost settles its old request at its next try, which must
            // come while the request's latch lives (see `Request`).
            Some(ms) if ms > 0 => Tried::Again(Some(
                Duration::from_millis(ms as u64).min(self.obj.client.config().renewal_interval()),
            )),
            Some(_) => Tried::Again(None),
        })
    }
}

/// When a lease of `ms` begun by the server after `start` ends by this
/// process's clock: no later than on the server's. The server reads its
/// clock in whole milliseconds, truncated, and the two clocks may run at
/// slightly different rates: the drift margin the watchdog takes for a
/// lock's lease is taken off here too.
fn lease_end(start: Instant, ms: u64) -> Instant {
    let lease = Duration::from_millis(ms);
    start + lease - crate::engine::watchdog::drift_margin(lease)
}

/// The most permits one acquire takes: their ids travel in one argument.
const MAX_PERMITS_AT_ONCE: u32 = 100_000;

/// A permit-expirable semaphore's grant: the permits of these ids, each
/// given back by its own release (one that expired meanwhile does not keep
/// the others out), resent until it gets through or the permit's lease has
/// surely ended ([`NEVER_EXPIRES`] without a lease).
struct PermitsOut {
    ids: Vec<PermitId>,
    /// Their lease; `None`: none.
    lease_ms: Option<u64>,
}

impl PermitsOut {
    fn new(ids: Vec<PermitId>, lease_ms: Option<u64>) -> PermitsOut {
        PermitsOut { ids, lease_ms }
    }
}

impl Taken for PermitsOut {
    async fn give_back(
        &self,
        client: &Client,
        name: &str,
        _lasts: Lasts,
        _granted: GrantedIn,
        // Permits are no holds of an owner: a give-back takes back only
        // the ones its request took, whatever the master.
        _grant: Option<&Arc<Latch>>,
        why: GiveBack,
    ) {
        // The grant came before this: its lease ends by then.
        let now = Instant::now();
        let until = match self.lease_ms {
            Some(ms) => surely_ended(client.config(), now, Duration::from_millis(ms)),
            None => now + NEVER_EXPIRES,
        };
        let semaphore = Object::new(client.clone(), name.to_owned(), "semaphore");
        for &id in &self.ids {
            if let Err(err) = give_back(&semaphore, &[id], Some(until)).await {
                tracing::warn!(semaphore = %name, permit = %id, error = %err, why = why.why(),
                    "could not give back a permit an acquire took");
            }
        }
    }
}

/// One permit of a [`PermitExpirableSemaphore`], from its acquire.
///
/// Release it with [`Permit::release`] (or
/// [`PermitExpirableSemaphore::release`]), which reports what happened.
/// Dropping it releases it in the background on the runtime it was taken
/// on, like a [`LockGuard`](crate::LockGuard): never blocking, never
/// panicking, a failure only logged; that release is resent after a failed
/// connection until it gets through or the lease has surely ended (an hour
/// at most without a lease). [`Permit::leak`] keeps it out
/// instead, to be released later by id, or to expire.
#[must_use = "the permit is released as soon as it is dropped"]
#[clippy::has_significant_drop]
pub struct Permit {
    hold: Option<PermitHold>,
    id: PermitId,
    /// When the lease ends by this process's clock (from the send of the
    /// acquire); `None` without a lease.
    expires: Option<Instant>,
}

struct PermitHold {
    client: Client,
    name: Arc<str>,
    runtime: Handle,
    /// When it was granted, for the hold-time figure.
    #[cfg(feature = "metrics")]
    granted: std::time::Instant,
}

impl PermitHold {
    /// The semaphore the permit is of, its calls on the client's
    /// connection.
    fn semaphore(&self) -> Object {
        Object::named(self.client.clone(), Arc::clone(&self.name), "semaphore")
    }

    /// Reports the hold's time, once it is given back.
    fn released(&self) {
        #[cfg(feature = "metrics")]
        {
            let object = self.client.config();
            telemetry::released(
                telemetry::Subject {
                    kind: EXPIRABLE_KIND,
                    name: object.metric_lock_names.then_some(&*self.name),
                },
                self.granted.elapsed(),
            );
        }
    }
}

impl fmt::Debug for Permit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Permit")
            .field("id", &self.id)
            .field("semaphore", &self.hold.as_ref().map(|h| &h.name))
            .field("expires", &self.expires)
            .finish()
    }
}

impl Permit {
    /// The permit's id.
    pub fn id(&self) -> PermitId {
        self.id
    }

    /// The name of the semaphore it came from (as a guard's
    /// [`name`](crate::LockGuard::name)).
    pub fn name(&self) -> &str {
        self.hold.as_ref().map_or("", |h| &h.name)
    }

    /// How long until its lease ends, by this process's clock: counted
    /// from the send of the acquire, less a drift margin (a tenth of the
    /// lease, at most 1 s), so never later than the server's; `None` for
    /// a permit without a lease.
    pub fn remaining_lease(&self) -> Option<Duration> {
        self.expires
            .map(|at| at.saturating_duration_since(Instant::now()))
    }

    /// Whether its lease has ended, by this process's clock (see
    /// [`remaining_lease`](Self::remaining_lease)): true once the server
    /// may have taken the permit back.
    pub fn is_expired(&self) -> bool {
        self.expires.is_some_and(|at| Instant::now() >= at)
    }

    /// Keeps the permit out: nothing is released, now or on drop.
    /// Release it later with [`PermitExpirableSemaphore::release_by_id`],
    /// or let its lease run out. The verb of
    /// [`LockGuard::leak`](crate::LockGuard::leak).
    pub fn leak(mut self) {
        self.hold = None;
    }

    /// Gives the permit back and wakes the waiters.
    ///
    /// # Errors
    /// As [`PermitExpirableSemaphore::release`].
    ///
    /// # Cancel safety
    /// Cancel safe: once sent, the release completes in the background.
    pub async fn release(mut self) -> Result<()> {
        let Some(hold) = self.hold.take() else {
            return Ok(());
        };
        let id = self.id;
        let name = Arc::clone(&hold.name);
        let runtime = hold.runtime.clone();
        let client = hold.client.clone();
        let release = async move {
            let given = give_back(&hold.semaphore(), &[id], None).await;
            if let Ok(None) = given {
                hold.released();
            }
            given
        };
        match Finish::detached(runtime, release).await? {
            None => {
                Object::new(client, name.to_string(), "semaphore")
                    .release_synced()
                    .await;
                Ok(())
            }
            Some(_) => Err(Error::PermitNotOut {
                name: name.to_string(),
                permit: id.to_string(),
            }),
        }
    }
}

impl Permit {
    /// Releases a permit whose release nobody waits on for long (the
    /// blocking API's drop waits a moment): as its drop's release, resent
    /// until it gets through or the lease has surely ended.
    #[cfg(feature = "blocking")]
    pub(crate) async fn release_dropped(mut self) -> Result<()> {
        let Some(hold) = self.hold.take() else {
            return Ok(());
        };
        let until = self.dropped_until(&hold);
        match give_back(&hold.semaphore(), &[self.id], Some(until)).await? {
            None => {
                hold.released();
                Ok(())
            }
            Some(id) => Err(Error::PermitNotOut {
                name: hold.name.to_string(),
                permit: id.to_string(),
            }),
        }
    }

    /// Until when the release of a dropped permit is resent: until its
    /// lease has surely ended (here it ends a drift margin, at most 1 s,
    /// before the server's; a reply in flight and a drift margin more on
    /// the server), or for [`NEVER_EXPIRES`] without a lease.
    fn dropped_until(&self, hold: &PermitHold) -> Instant {
        let config = &hold.client.config();
        match self.expires {
            Some(at) => at + config.response_timeout + Duration::from_secs(2),
            None => Instant::now() + NEVER_EXPIRES,
        }
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        let Some(hold) = self.hold.take() else {
            return;
        };
        let id = self.id;
        let runtime = hold.runtime.clone();
        // Nobody waits on it: resent until it gets through, or until the
        // lease has surely ended.
        let until = self.dropped_until(&hold);
        let semaphore = hold.semaphore();
        let hold = Arc::new(hold);
        // Finished even when the runtime shuts down first (see
        // `Object::spawn_to_end`): a program that returns normally leaves
        // no permit out.
        semaphore.spawn_to_end(&runtime, move |semaphore| {
            let hold = Arc::clone(&hold);
            async move {
                match give_back(&semaphore, &[id], Some(until)).await {
                    Ok(None) => hold.released(),
                    Ok(Some(_)) => tracing::debug!(semaphore = %hold.name, permit = %id,
                        "dropped permit had expired already"),
                    Err(err) => tracing::warn!(semaphore = %hold.name, permit = %id, error = %err,
                        "could not release a dropped permit"),
                }
            }
        });
    }
}

// `Client::permit_expirable_semaphore`, beside the handle (the client never
// names it).
impl Client {
    /// A handle to the permit-expirable semaphore `name`, Redisson's
    /// `RPermitExpirableSemaphore`: each permit has an id and, optionally,
    /// a lease after which it comes back by itself (see
    /// [`PermitExpirableSemaphore`]).
    pub fn permit_expirable_semaphore(&self, name: impl Into<String>) -> PermitExpirableSemaphore {
        PermitExpirableSemaphore::new(self.clone(), name.into())
    }
}
