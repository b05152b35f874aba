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
use crate::engine::waiting::{Channel, Tried};
use crate::engine::watchdog::{HoldKey, LeaseState, Renew, RenewCall, Renewal};
use crate::engine::{keys, scripts::EXPIRABLE};
use crate::lock::{Lease, Slot};
use crate::{Client, Error, Result};

mod give_back;
mod permit;
mod take;

use give_back::{call, give_back, PermitsOut};
use permit::PermitHold;
pub use permit::{Permit, PermitId};

/// The `kind` label of a permit-expirable semaphore's figures.
const EXPIRABLE_KIND: &str = "permit_expirable_semaphore";

/// The score of a permit without a lease (see [`keys::PERMIT_NO_EXPIRY`]).
const NO_EXPIRY: i64 = keys::PERMIT_NO_EXPIRY;

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
            .field("name", self.obj.shared_name())
            .finish_non_exhaustive()
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
        self.obj.shared_name()
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
        crate::Semaphore::new(self.obj.client().clone(), self.obj.name().to_string())
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
    /// Cancel safe: once sent, the release completes in the background
    /// (resent for up to an hour when the connection fails it).
    pub async fn release_many(&self, ids: &[PermitId]) -> Result<()> {
        self.obj.checked()?;
        if ids.is_empty() {
            return Err(Error::invalid("no permit ids to release"));
        }
        let (semaphore, ids) = (self.obj.clone(), Arc::new(ids.to_vec()));
        let release = {
            let (semaphore, ids) = (semaphore.clone(), Arc::clone(&ids));
            async move { give_back(&semaphore, &ids, None).await }
        };
        // Its caller gone, a send that the connection failed is resent as
        // a dropped permit's release (safe: a second send finds the first
        // id not out, and gives nothing back), for as long as a permit
        // without a lease is.
        let until = Instant::now() + NEVER_EXPIRES;
        let orphan = move |given: Result<Option<PermitId>>| async move {
            if matches!(&given, Err(err) if err.is_connection_error()) {
                let runtime = tokio::runtime::Handle::current();
                semaphore.spawn_to_end(&runtime, move |semaphore| {
                    let ids = Arc::clone(&ids);
                    async move {
                        match give_back(&semaphore, &ids, Some(until)).await {
                            Ok(None) => {}
                            // All or none: the first send went through, or
                            // one of them ran out meanwhile.
                            Ok(Some(id)) => tracing::debug!(semaphore = %semaphore.name(),
                                permit = %id, "permits released by id: one was not out"),
                            Err(err) => tracing::warn!(semaphore = %semaphore.name(),
                                error = %err, "could not release permits by id"),
                        }
                    }
                });
            }
        };
        match Finish::new(runtime()?, release, orphan).await? {
            None => {
                self.obj.release_synced().await;
                Ok(())
            }
            Some(id) => Err(self.not_out(id)),
        }
    }

    /// Sets a new lease on a permit that is still out, counted from now;
    /// with `None`, the permit no longer expires. A permit the watchdog
    /// kept ([`Permit::keep_alive`]) is no longer renewed, from before the
    /// update is sent (a renewal already on its way may still lengthen
    /// the lease in Redis, once); should the update fail, it runs out with
    /// its last renewal's lease.
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
        permit.stop_renewal();
        let sent = Instant::now();
        let lease_ms = self.update(permit.id, lease).await?;
        permit.set_lease(lease_ms, sent);
        Ok(())
    }

    /// As [`update_lease`](Self::update_lease), for the permit `id` taken
    /// by this or any other client (Redisson's `updateLeaseTime`); the
    /// holder's [`Permit`], if any, keeps its own count of its lease. A
    /// permit the watchdog keeps gets the watchdog's lease again at its
    /// next renewal, should it be longer.
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
        let call = call(&self.obj, op, ids, number);
        self.obj.run(call).await
    }

    fn not_out(&self, id: PermitId) -> Error {
        Error::PermitNotOut {
            name: self.obj.name().to_string(),
            permit: id.to_string(),
        }
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
