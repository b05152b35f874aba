//! The semaphore: a count of permits in Redis, taken and given back by
//! anyone.

pub(crate) mod expirable;
use std::sync::Arc;
use std::time::Duration;

use tokio::runtime::Handle;
use tokio::time::Instant;

use crate::args;
use crate::config::MAX_DURATION;
use crate::engine::finish::runtime;
use crate::engine::keys;
use crate::engine::object::Object;
use crate::engine::request::give_back::{resend_until, NEVER_EXPIRES};
use crate::engine::request::{
    self, Answer, GiveBack, GrantedIn, KeepsLatched, Lasts, Latch, Request, RequestSlot, Sending,
    Taken, Unclaimed,
};
use crate::engine::scripts::{
    SEMAPHORE_ACQUIRE, SEMAPHORE_DELETE, SEMAPHORE_DRAIN, SEMAPHORE_GIVE_BACK, SEMAPHORE_RELEASE,
};
use crate::engine::telemetry;
use crate::engine::waiting::{Channel, Tried};
use crate::{Client, Error, Result};

/// A distributed counting semaphore, from [`Client::semaphore`]: Redisson's
/// `RSemaphore`, on the same key and channel.
///
/// The semaphore is a number of available permits, at the plain key
/// `name`. [`acquire`](Semaphore::acquire) takes permits (waiting until
/// enough are available), [`release`](Semaphore::release) gives them back
/// and wakes the waiters through the channel `redisson_sc:{name}`.
///
/// # Not owner-bound
/// As in Redisson, permits belong to nobody: any caller may release
/// permits, whether or not it took them, and releases may raise the count
/// above where it started. Nothing gives back the permits of a holder that
/// crashed: they are lost until someone calls
/// [`add_permits`](Semaphore::add_permits). When holders may die, use the
/// [`PermitExpirableSemaphore`](crate::PermitExpirableSemaphore), whose
/// permits carry a lease and come back by themselves.
///
/// A semaphore that was never set has no permits: set it once with
/// [`try_set_permits`](Semaphore::try_set_permits).
///
/// # Guarantees
/// These hold for both semaphores (this one and the
/// [`PermitExpirableSemaphore`](crate::PermitExpirableSemaphore)):
/// - Permits in use never exceed the permits set, and no acquire takes the
///   count below zero. Taking permits away
///   ([`add_permits`](Semaphore::add_permits) with a negative number, as
///   Redisson's `addPermits(-n)`) may: acquires then wait until releases
///   bring the count back above what they ask.
/// - Acquires are cancel safe and safe against lost replies, as a lock's
///   are (see [Cancel safety](crate#cancel-safety)): a take whose reply
///   is lost is resent under its request id and counts once, permits taken
///   for a caller that left are given back, and so are those of a request
///   whose every reply was lost.
/// - Here, a release (or a latch's count-down) whose reply is lost is not
///   sent again: it is not idempotent, and its error says the connection
///   failed. The give-back of permits nobody got is the exception: it
///   carries its own latch and is resent until it gets through, for an
///   hour at most. A permit-expirable semaphore's release names its
///   permit, so it is safe to repeat, and a dropped permit's is resent.
///
/// ```no_run
/// # async fn run(client: ferrisson::Client) -> ferrisson::Result<()> {
/// let slots = client.semaphore("exports:slots");
/// slots.try_set_permits(4).await?; // no-op when already set
/// slots.acquire().await?;
/// // ... at most four exports run at once, across every process ...
/// slots.release().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Semaphore {
    obj: Object,
}

impl std::fmt::Debug for Semaphore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Semaphore")
            .field("name", self.obj.shared_name())
            .finish_non_exhaustive()
    }
}

impl Semaphore {
    pub(crate) fn new(client: Client, name: String) -> Semaphore {
        Semaphore {
            obj: Object::new(client, name, "semaphore"),
        }
    }

    /// The semaphore's name, which is also its key.
    pub fn name(&self) -> &str {
        self.obj.shared_name()
    }

    /// Sets the number of permits, if the semaphore is not set yet; whether
    /// it was set by this call. A set semaphore is left as it is, so every
    /// process may call this at start-up. Zero is allowed: a semaphore
    /// whose permits come from [`release`](Semaphore::release) alone.
    /// Redisson's `trySetPermits`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a bad name, [`Error::WrongType`] when
    /// the key holds other data, [`Error::Redis`].
    ///
    /// # Cancel safety
    /// Cancel safe: once sent, the call completes in the background.
    pub async fn try_set_permits(&self, permits: u32) -> Result<bool> {
        self.set_permits_once(permits, None).await
    }

    /// As [`try_set_permits`](Semaphore::try_set_permits), and the
    /// semaphore's key expires `ttl` later (the permits with it): Redisson's
    /// `trySetPermits(permits, timeToLive)`. Later releases keep that TTL.
    ///
    /// # Errors
    /// As [`try_set_permits`](Semaphore::try_set_permits), and
    /// [`Error::InvalidArgument`] for a TTL under 1 ms or over
    /// [`MAX_DURATION`].
    ///
    /// # Cancel safety
    /// Cancel safe: once sent, the call completes in the background.
    pub async fn try_set_permits_with_ttl(&self, permits: u32, ttl: Duration) -> Result<bool> {
        let ttl_ms = args::duration("ttl", ttl, MAX_DURATION)?;
        self.set_permits_once(permits, Some(ttl_ms)).await
    }

    async fn set_permits_once(&self, permits: u32, ttl_ms: Option<u64>) -> Result<bool> {
        self.obj.checked()?;
        let channel = keys::semaphore_channel(self.obj.shared_name());
        self.obj
            .set_if_missing(channel, permits, permits.to_string(), ttl_ms)
            .await
    }

    /// Adds `permits` to the available ones (setting the semaphore if it
    /// was not set) and wakes the waiters; a negative number takes them
    /// away, as Redisson's `addPermits(-n)` does. Taking away may leave the
    /// count below zero: acquires then wait until releases bring it back
    /// above what they ask.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a bad name, zero permits, or more
    /// than `u32::MAX` either way; [`Error::WrongType`] when the key holds
    /// other data, [`Error::Redis`].
    ///
    /// # Cancel safety
    /// Cancel safe: once sent, the call completes in the background.
    pub async fn add_permits(&self, permits: i64) -> Result<()> {
        self.obj.checked()?;
        if permits == 0 || permits.unsigned_abs() > u64::from(u32::MAX) {
            return Err(Error::invalid(format!(
                "permits to add must be non-zero and at most {} either way, got {permits}",
                u32::MAX
            )));
        }
        self.give(permits, false).await.map(drop)
    }

    /// Gives one permit back, whoever took it, and wakes the waiters.
    /// Redisson's `release()`.
    ///
    /// A release is not repeated when its reply is lost (the connection
    /// dropped after the send): it may or may not have happened, and the
    /// error says so ([`Error::is_connection_error`]); check with
    /// [`available_permits`](Semaphore::available_permits) before giving
    /// it again.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a bad name, [`Error::WrongType`] when
    /// the key holds other data, [`Error::Redis`].
    ///
    /// # Cancel safety
    /// Cancel safe: once sent, the release completes in the background.
    pub async fn release(&self) -> Result<()> {
        self.release_many(1).await
    }

    /// Gives `permits` back, as [`release`](Semaphore::release) gives one:
    /// Redisson's `release(permits)`.
    ///
    /// # Errors
    /// As [`release`](Semaphore::release), and [`Error::InvalidArgument`]
    /// for zero permits.
    ///
    /// # Cancel safety
    /// As [`release`](Semaphore::release).
    pub async fn release_many(&self, permits: u32) -> Result<()> {
        self.obj.checked()?;
        let permits = args::permits(permits)?;
        self.give(permits.into(), false).await.map(drop)
    }

    /// Gives `permits` back only if the semaphore exists (it was set and
    /// not deleted, and its TTL, if any, has not run out); whether it did.
    /// A semaphore that is gone stays gone: nothing is written.
    ///
    /// # Errors
    /// As [`release_many`](Semaphore::release_many).
    ///
    /// # Cancel safety
    /// As [`release`](Semaphore::release).
    pub async fn release_if_exists(&self, permits: u32) -> Result<bool> {
        self.obj.checked()?;
        let permits = args::permits(permits)?;
        Ok(self.give(permits.into(), true).await?.is_some())
    }

    /// Adds `permits` (negative: takes them away), only if the key exists
    /// when `if_exists`; the new count, `None` when nothing was done.
    async fn give(&self, permits: i64, if_exists: bool) -> Result<Option<i64>> {
        let name = self.obj.name();
        let mut call = SEMAPHORE_RELEASE.prepare_invoke();
        call.key(name)
            .key(keys::semaphore_channel(name))
            .arg(permits)
            .arg(self.obj.publish())
            .arg(if if_exists { "1" } else { "0" });
        let given = self.obj.run::<Option<i64>>(call).await?;
        if given.is_some() {
            self.obj.release_synced().await;
        }
        Ok(given)
    }

    /// Deletes the semaphore (its permits with it); whether it existed.
    /// Waiters go on waiting: a semaphore that is not set has no permits.
    /// Redisson's `delete()`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a bad name, [`Error::WrongType`] when
    /// the key holds other data (which is not deleted), [`Error::Redis`].
    ///
    /// # Cancel safety
    /// Cancel safe: once sent, the delete completes in the background.
    pub async fn delete(&self) -> Result<bool> {
        self.obj.checked()?;
        let mut call = SEMAPHORE_DELETE.prepare_invoke();
        call.key(self.obj.name());
        Ok(self.obj.run::<i64>(call).await? == 1)
    }

    /// Takes one permit, waiting as long as it takes until one is
    /// available: Redisson's `acquire()`. Waiters are woken by each
    /// release's message; with more waiters than permits, which of them
    /// goes first is not defined.
    ///
    /// A take whose reply is lost (the connection failed after the send)
    /// is sent again under the same request id, as a lock's acquire is
    /// (see [Cancel safety](crate#cancel-safety)): a resend of a take that
    /// was granted is answered "granted" and takes nothing more, so a lost
    /// reply neither takes the permits twice nor leaves them taken.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a bad name, [`Error::WrongType`] when
    /// the key holds other data, [`Error::Redis`] for an error Redis
    /// replies (connection failures are waited out, and the take resent).
    ///
    /// # Cancel safety
    /// Cancel safe: a dropped future takes no permits. When the take was
    /// already sent, it completes in the background and the permits it
    /// took are given back. Nobody awaits that give-back: it is resent
    /// after a failed connection (under its own request id, so it counts
    /// once) until it gets through, for up to an hour.
    pub async fn acquire(&self) -> Result<()> {
        self.acquire_many(1).await
    }

    /// Takes `permits` at once, waiting as long as it takes:
    /// Redisson's `acquire(permits)`.
    ///
    /// # Errors
    /// As [`acquire`](Semaphore::acquire), and [`Error::InvalidArgument`]
    /// for zero permits.
    ///
    /// # Cancel safety
    /// As [`acquire`](Semaphore::acquire).
    pub async fn acquire_many(&self, permits: u32) -> Result<()> {
        match self.take(permits, None).await? {
            true => Ok(()),
            false => Err(Error::no_deadline("semaphore_acquire")),
        }
    }

    /// Takes one permit if one is available now; whether it did.
    /// Redisson's `tryAcquire()`. It waits for its one reply the client's
    /// response timeout at most, once (with replica sync, plus the
    /// replicas' acknowledgement), as
    /// [`Lock::try_lock`](crate::Lock::try_lock); a take whose reply is lost
    /// within that time is sent again, as [`acquire`](Semaphore::acquire)
    /// says.
    ///
    /// # Errors
    /// As [`acquire`](Semaphore::acquire), and connection failures (a
    /// server that does not answer within the response timeout among
    /// them). Permits the take may have taken are then given back in the
    /// background once Redis can be reached: none is left taken.
    ///
    /// # Cancel safety
    /// As [`acquire`](Semaphore::acquire).
    pub async fn try_acquire(&self) -> Result<bool> {
        self.try_acquire_many(1).await
    }

    /// Takes `permits` if they are available now; whether it did.
    ///
    /// # Errors
    /// As [`try_acquire`](Semaphore::try_acquire), and
    /// [`Error::InvalidArgument`] for zero permits.
    ///
    /// # Cancel safety
    /// As [`acquire`](Semaphore::acquire).
    pub async fn try_acquire_many(&self, permits: u32) -> Result<bool> {
        self.take(permits, Some(Duration::ZERO)).await
    }

    /// Takes one permit, waiting at most `wait` for it; whether it did.
    /// It returns by the end of the wait plus a small margin, whatever the
    /// server does, as [`Lock::try_lock_for`](crate::Lock::try_lock_for):
    /// a take still unanswered then finishes in the background, and the
    /// permits it took are given back.
    ///
    /// # Errors
    /// As [`acquire`](Semaphore::acquire), and [`Error::InvalidArgument`]
    /// for a wait over [`MAX_DURATION`](crate::config::MAX_DURATION). The
    /// first try's take is resent after a lost reply while the wait lasts,
    /// up to [`release_attempts`] sends; a connection failure on the first
    /// try is returned (later ones are waited out within the wait), and so
    /// is a timeout when no try had its reply by the end of the margin.
    /// Permits the take may have taken are given back in the background.
    ///
    /// [`release_attempts`]: crate::ClientBuilder::release_attempts
    ///
    /// # Cancel safety
    /// As [`acquire`](Semaphore::acquire).
    pub async fn try_acquire_for(&self, wait: Duration) -> Result<bool> {
        self.take(1, Some(wait)).await
    }

    /// Takes `permits`, waiting at most `wait` for them; whether it did.
    ///
    /// # Errors
    /// As [`try_acquire_for`](Semaphore::try_acquire_for), and
    /// [`Error::InvalidArgument`] for zero permits.
    ///
    /// # Cancel safety
    /// As [`acquire`](Semaphore::acquire).
    pub async fn try_acquire_many_for(&self, permits: u32, wait: Duration) -> Result<bool> {
        self.take(permits, Some(wait)).await
    }

    /// How many permits are available now (negative only when a Redisson
    /// client reduced the permits below zero).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`], [`Error::WrongType`], [`Error::Redis`].
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads.
    pub async fn available_permits(&self) -> Result<i64> {
        self.obj.checked()?;
        self.obj.read_count().await
    }

    /// Takes every available permit; how many it took.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`], [`Error::WrongType`], [`Error::Redis`].
    ///
    /// # Cancel safety
    /// Cancel safe: once sent, the call completes in the background (and
    /// the permits stay taken).
    pub async fn drain_permits(&self) -> Result<i64> {
        self.obj.checked()?;
        let mut call = SEMAPHORE_DRAIN.prepare_invoke();
        call.key(self.obj.name());
        self.obj.run(call).await
    }

    async fn take(&self, permits: u32, wait: Option<Duration>) -> Result<bool> {
        let subject = self.obj.subject("semaphore");
        telemetry::acquire(
            subject,
            self.obj.shared_name(),
            || self.take_in(permits, wait),
            |got| *got,
        )
        .await
    }

    /// [`Semaphore::take`], inside its span.
    async fn take_in(&self, permits: u32, wait: Option<Duration>) -> Result<bool> {
        self.obj.checked()?;
        let permits = args::permits(permits)?;
        let limits = self.obj.wait_limits(wait)?;
        let runtime = runtime()?;
        // One request id for the whole wait (renewed when it grows old): a
        // resend after a lost reply takes the permits once.
        let slot = RequestSlot::default();
        let attempt = || self.try_take(permits, &slot, limits.resend_until, runtime.clone());
        let channel = || Channel {
            name: keys::semaphore_channel(self.obj.shared_name()),
            broadcast: true,
        };
        Ok(self.obj.wait_on(channel, limits, attempt).await?.is_some())
    }

    /// One attempt of the wait's request to take `permits` (resent on a
    /// lost reply, more while the wait lasts): done, or wait for the next
    /// release.
    async fn try_take(
        &self,
        permits: u32,
        slot: &RequestSlot<Permits>,
        resend_until: Option<Instant>,
        runtime: Handle,
    ) -> Result<Tried<()>> {
        let lasts = Lasts::UntilReleased;
        let new = || {
            Request::new(
                &self.obj,
                Permits::new(&self.obj, permits),
                lasts,
                runtime.clone(),
            )
        };
        let request = slot.get(lasts, new).await.map_err(|e| self.obj.error(e))?;
        let name = Arc::clone(self.obj.shared_name());
        let build = move |latch: &str, latch_ttl: u64, deadline: u64| {
            let mut call = SEMAPHORE_ACQUIRE.prepare_invoke();
            call.key(&*name)
                .key(latch)
                .arg(permits)
                .arg(latch_ttl)
                .arg(deadline);
            call
        };
        let answer = |reply: &i64| Answer::granted_if(*reply == 1);
        let how = Sending {
            build,
            // Ran after its deadline: took nothing, as a timed-out reply.
            decode: |reply| match redis::from_redis_value::<i64>(reply)? {
                request::LATE => Err(request::late()),
                reply => Ok(reply),
            },
            resend_until,
            lasts: Lasts::UntilReleased,
        };
        let sent = request::send(request, runtime.clone(), how, answer, |_| async {});
        match sent.await {
            Ok(1) => {}
            Ok(_) => return Ok(Tried::Again(None)),
            Err(err) => return Err(self.obj.error(err)),
        }
        // Given back should this attempt be dropped before it returns.
        let taken = Unclaimed::new(&self.obj, Permits::new(&self.obj, permits), runtime);
        let give_back = |taken: Unclaimed<Permits>| taken.give_back(GiveBack::Unsynced);
        let latch = slot.latch();
        let kept = self.obj.keep_if_synced(latch.as_deref(), taken, give_back);
        Ok(match kept.await? {
            Tried::Done(taken) => {
                taken.claim();
                Tried::Done(())
            }
            Tried::Again(after) => Tried::Again(after),
        })
    }
}

/// A semaphore's grant: permits, given back by a release of as many under
/// its own request id, resent until it gets through (permits never
/// expire; for [`NEVER_EXPIRES`] at most).
struct Permits {
    count: u32,
    /// The give-back's unlock latch, made with the grant: a give-back run
    /// again from its start (at a runtime's shutdown) sends under the same
    /// id, and a first run that got through is replayed, not counted again.
    give_back: String,
    /// Runs of the give-back so far: a run beside or after another (a
    /// send of which may still land) leaves the latch to its TTL.
    runs: std::sync::atomic::AtomicU32,
}

impl Permits {
    fn new(semaphore: &Object, count: u32) -> Permits {
        let give_back = keys::unlock_latch(semaphore.name(), &semaphore.request_id());
        let runs = std::sync::atomic::AtomicU32::new(0);
        Permits {
            count,
            give_back,
            runs,
        }
    }
}

impl Taken for Permits {
    // A semaphore's key is no lock hash.
    fn keep_latched(&self, _: &Object) -> Option<KeepsLatched> {
        None
    }

    async fn give_back(
        &self,
        semaphore: &Object,
        _lasts: Lasts,
        _granted: GrantedIn,
        // Permits are no holds of an owner: a give-back takes back only
        // the ones its request took, whatever the master. The script
        // closes the grant's latch, and gives nothing for a closed one.
        grant: Option<&Arc<Latch>>,
        why: GiveBack,
    ) -> bool {
        let (permits, name) = (self.count, semaphore.name());
        let latch = self.give_back.clone();
        self.runs.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        let channel = keys::semaphore_channel(name);
        let mut sends = 0;
        let send = |latch_ttl: u64| {
            sends += 1;
            let mut conn = semaphore.conn();
            let mut call = SEMAPHORE_GIVE_BACK.prepare_invoke();
            call.key(name).key(&channel).key(&latch);
            if let Some(grant) = grant {
                call.key(&grant.key);
            }
            call.arg(permits).arg(semaphore.publish()).arg(latch_ttl);
            async move { call.invoke_async::<Option<i64>>(&mut conn).await }
        };
        let until = Instant::now() + NEVER_EXPIRES;
        match resend_until(semaphore.config(), name, until, send).await {
            Ok(_) => {
                // Kept to its TTL after a failed send, or beside another
                // run of the give-back, whose send may still reach Redis
                // and must find it (or add the permits twice: the grant it
                // names, closed, may be gone by then, deleted with its
                // request or run out, and a give-back finding none gives).
                let alone = self.runs.load(std::sync::atomic::Ordering::Acquire) == 1;
                if sends == 1 && alone {
                    semaphore.discard_latch(latch);
                }
                // Closed by the script (`nil`: by another run), or gone.
                grant.is_some()
            }
            Err(err) => {
                tracing::warn!(semaphore = %name, permits, error = %err, why = why.why(),
                    "could not give back permits an acquire took");
                false
            }
        }
    }
}

// `Client::semaphore`, beside the handle (the client never names it).
impl Client {
    /// A handle to the semaphore `name`, Redisson's `RSemaphore`: a count
    /// of permits that anyone takes and gives back (not owner-bound; see
    /// [`Semaphore`]).
    pub fn semaphore(&self, name: impl Into<String>) -> Semaphore {
        Semaphore::new(self.clone(), name.into())
    }
}
