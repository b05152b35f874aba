//! The guard of one hold.

use std::sync::Arc;
use std::time::Duration;

use tokio::runtime::Handle;
use tokio::time::Instant;

use super::holds::Guards;
use super::lease::{Lease, Released, ReleasedTx};
use super::release::Release;
use super::slot::Slot;
use super::{DoneMark, Kind, Resend};
use crate::engine::finish::Finish;
use crate::engine::object::{error_about, Object};
use crate::engine::request::Latch;
use crate::engine::takeover::{HeldLease, Takeover};
use crate::engine::telemetry::{self, Subject};
use crate::engine::watchdog::{HoldKey, LeaseState, Renew, RenewCall};
use crate::{Error, Result};

/// One hold of a [`Lock`](crate::Lock), from a successful acquire.
///
/// Each acquire returns its own guard, also when it re-entered a lock its
/// owner already held; releasing a guard drops one hold, and the last release
/// deletes the lock and wakes a waiter.
///
/// Release it with [`LockGuard::unlock`], which reports what happened.
/// Dropping a guard without `unlock` releases it in the background on the
/// runtime the lock was taken on: it never blocks and never panics, but it
/// is not immediate, and a failure is only logged. Since nobody waits on
/// it, that release is resent after a failed connection (with backoff, up
/// to a second apart) until it gets through or the hold's lease runs out,
/// or, later, that of another hold of its owner that shares the lock's key
/// with it (the owner's holds share one key, whose count keeps this hold
/// while any of them keeps the key; after that the owner may hold the lock
/// anew, in a new key, which a late resend would release), so a network
/// cut does not leave the lock held to the end of its lease. When that runtime shuts down before the release ended (or
/// had shut down already), its drop, or the guard's, sends the release once
/// more on a thread and a connection of their own, waiting at most the
/// client's connection and response timeouts: a program that returns
/// normally leaves no hold behind.
///
/// [`Lock::unlock`](crate::Lock::unlock) beside a live guard releases the
/// newest guard's hold; that guard then sends nothing when it goes.
///
/// The guard is `Send + 'static`: it can move into a spawned task. Its hold
/// still belongs to the owner that took it (the task that called `lock`),
/// so that owner re-enters while the guard lives.
#[must_use = "the lock is released as soon as the guard is dropped"]
#[clippy::has_significant_drop]
pub struct LockGuard {
    hold: Option<Hold>,
    /// The fencing token of a fenced lock's acquire.
    token: Option<u64>,
}

struct Hold {
    /// The lock held.
    lock: Object,
    kind: Kind,
    key: HoldKey,
    /// This hold in the client's map of live guards, where
    /// [`Lock::unlock`](crate::Lock::unlock) may claim it; it holds the
    /// hold's lease, which `extend` and `keep_alive` replace.
    slot: Arc<Slot>,
    runtime: Handle,
    /// Until when the release keeps the hold instead (see
    /// [`LockGuard::keep_until`]).
    keep_until: Option<Instant>,
    /// The job's occurrence its release marks done (see
    /// [`LockGuard::mark_done`]).
    done: Option<DoneMark>,
    /// When the hold was granted, for the hold time in metrics; `None` for
    /// a hold given back before its caller saw it.
    #[cfg(feature = "metrics")]
    since: Option<Instant>,
    /// The listening for this hold's end by another, made by the first
    /// caller that awaits its loss; stopped when the hold ends.
    takeover: std::sync::OnceLock<Arc<Takeover>>,
}

impl std::fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut d = f.debug_struct("LockGuard");
        if let Some(hold) = &self.hold {
            d.field("name", &hold.key.name)
                .field("owner", &hold.key.field)
                .field("lease_ms", &hold.slot.lease().lease_ms)
                .field("lease_lost", &hold.slot.lease().state.is_lost())
                .field("token", &self.token);
        }
        d.finish()
    }
}

impl LockGuard {
    pub(crate) fn new(
        lock: Object,
        kind: Kind,
        key: HoldKey,
        lease_ms: Option<u64>,
        lease: Arc<LeaseState>,
        runtime: Handle,
    ) -> LockGuard {
        let slot = Slot::new(lease_ms, Arc::clone(&lease));
        Guards::get().add(
            &key,
            &slot,
            lock.registry(),
            kind == Kind::Read,
            kind.ttl_only_rises(),
        );
        LockGuard {
            hold: Some(Hold {
                lock,
                kind,
                key,
                slot,
                runtime,
                keep_until: None,
                done: None,
                #[cfg(feature = "metrics")]
                since: Some(Instant::now()),
                takeover: std::sync::OnceLock::new(),
            }),
            token: None,
        }
    }

    /// Marks the hold as taken with the lean acquire: its release may go
    /// lean too (see `lock::lean`).
    pub(crate) fn mark_lean(&self) {
        if let Some(hold) = &self.hold {
            hold.slot.mark_lean();
        }
    }

    pub(crate) fn with_token(mut self, token: Option<u64>) -> LockGuard {
        self.token = token;
        self
    }

    /// The fencing token a fenced acquire drew; `None` for other locks.
    pub(crate) fn token(&self) -> Option<u64> {
        self.token
    }

    /// Has this hold's release, by [`unlock`](LockGuard::unlock) or by a
    /// drop, keep the lock held by its owner until `until` instead, when it
    /// is the owner's last hold: the key keeps one hold of the owner with
    /// the time then left as its TTL, nothing is published, and the lock
    /// expires then (ShedLock's `lockAtLeastFor`, a [`Job`](crate::Job)'s
    /// "at least for"). A release at or after `until`, or one that leaves
    /// other holds of the owner, releases as usual. Nothing is sent now;
    /// a later call replaces the instant.
    ///
    /// The hold so kept is no guard's: nothing renews it, and
    /// [`Lock::force_unlock`](crate::Lock::force_unlock) ends it. It is
    /// still its owner's: the same owner's `lock` meanwhile re-enters it
    /// (a non-reentrant lock refuses), and that hold's release leaves the
    /// kept count in the key to its TTL, which the re-entry may have
    /// raised; `unlock` of the owner releases it at once. So keep a hold
    /// under an owner of its own ([`Lock::with_owner`](crate::Lock::with_owner)),
    /// as a [`Job`](crate::Job)'s runs each are.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for the guard of a fair, read or write
    /// lock, whose release scripts (Redisson's layout) keep no hold, and
    /// for an instant more than [`MAX_DURATION`](crate::config::MAX_DURATION)
    /// from now; nothing changes then.
    pub fn keep_until(&mut self, until: Instant) -> Result<()> {
        let Some(hold) = self.hold.as_mut() else {
            return Ok(());
        };
        if !hold.kind.keeps() {
            return Err(Error::invalid(format!(
                "a {} keeps no hold after its release; keep_until is for the lock, spin, fenced and non-reentrant locks",
                hold.kind.label()
            )));
        }
        let left = until.saturating_duration_since(Instant::now());
        if left > crate::config::MAX_DURATION {
            return Err(Error::invalid(format!(
                "keep_until must be at most {:?} from now, got {left:?}",
                crate::config::MAX_DURATION
            )));
        }
        hold.keep_until = Some(until);
        Ok(())
    }

    /// Has this hold's release, whether `unlock` or a drop's, mark a job's
    /// occurrence done in the same script call, when it is the owner's
    /// last hold and the owner still holds it. For the plain kinds only
    /// (`release.lua`).
    pub(crate) fn mark_done(&mut self, done: DoneMark) {
        if let Some(hold) = self.hold.as_mut() {
            debug_assert!(hold.kind.keeps(), "only release.lua marks an occurrence");
            hold.done = Some(done);
        }
    }

    /// A handle on this hold's lease, which does not borrow the guard:
    /// to watch the lease from another task (see [`Lease`]).
    pub fn lease_handle(&self) -> Lease {
        match self.hold() {
            Some(hold) => Lease::new(Arc::clone(&hold.slot), Some(hold.takeover())),
            None => Lease::ended(),
        }
    }

    fn hold(&self) -> Option<&Hold> {
        self.hold.as_ref()
    }

    /// The lock's name.
    pub fn name(&self) -> &str {
        self.hold().map_or("", |h| &h.key.name)
    }

    /// The owner id of this hold: the task's (`task-<n>`), the thread's
    /// (`thread-<n>`), or the one given with `with_owner`. It is what
    /// [`Lock::is_held_by`](crate::Lock::is_held_by) and `with_owner` take.
    pub fn owner(&self) -> &str {
        self.hold().map_or("", |h| h.kind.owner_id(&h.key.field))
    }

    /// The hash field of this hold in Redis, `<client-uuid>:<owner-id>`
    /// (`...:write` for a write hold), as Redisson writes it.
    pub fn field(&self) -> &str {
        self.hold().map_or("", |h| &h.key.field)
    }

    /// The lease this hold was taken with; `None` in watchdog mode.
    pub fn lease(&self) -> Option<Duration> {
        self.hold()
            .and_then(|h| h.slot.lease().lease_ms)
            .map(Duration::from_millis)
    }

    /// Whether the lease is known to be lost (see [`LockGuard::lease_lost`]),
    /// or has run out by this process's clock: the lease counted from the
    /// send of the acquire, or in watchdog mode the watchdog timeout less the
    /// drift margin counted from the send of the last renewal Redis
    /// confirmed. So a holder that checks it right after a pause (a stopped
    /// process, a starved runtime) learns the truth at once, before the
    /// watchdog has run.
    ///
    /// Also true once [`Lock::unlock`](crate::Lock::unlock) released this
    /// guard's hold.
    pub fn is_lease_lost(&self) -> bool {
        self.hold().is_none_or(|h| h.slot.is_lost())
    }

    /// Resolves when the lock is known to be no longer this guard's.
    ///
    /// In watchdog mode: when a renewal finds the lock gone (expired during
    /// a stall, force-unlocked, Redis restarted) or renewals could not get
    /// through before the lease would have run out. The client gives up a
    /// little before the server would (a tenth of the watchdog timeout, at
    /// most a second), so that the holder stops before another can start.
    /// With a lease: when the lease runs out by this process's clock,
    /// counted from when the acquire was sent.
    ///
    /// Either way, when [`Lock::unlock`](crate::Lock::unlock) released
    /// this guard's hold, and when another ends the hold (a force-unlock, a leader's
    /// deposition, a Redisson client's `forceUnlock`): within a round trip
    /// of the unlock message on the lock's channel. The first call
    /// subscribes to that channel, and every message there makes the
    /// holder look whether it still holds (one `HEXISTS`); the listening
    /// ends with the hold. A fair lock's force-unlock wakes only its next
    /// waiter's channel: its holder learns it at the next renewal, as one
    /// forced out before the subscription was confirmed does.
    ///
    /// Never resolves while the lock is safely held: use it in a
    /// `tokio::select!` beside the work it protects.
    ///
    /// # Cancel safety
    /// Cancel safe: it only waits.
    pub async fn lease_lost(&self) {
        self.lease_handle().lost().await;
    }

    /// Extends a leased hold: its lease becomes `lease` from now, here, and
    /// the key's TTL in Redis becomes at least that, if the owner still
    /// holds the lock. An extension may also shorten the guard's lease, not
    /// the key's TTL: it is the owner's for all its holds of this lock, so
    /// Redis keeps a longer one (another hold's lease, the one the watchdog
    /// renews a watchdog-mode hold of the owner to, or this hold's own
    /// before). A hold whose shortened lease ran out before its `unlock`
    /// leaves the key to that TTL.
    ///
    /// # Errors
    /// - [`Error::InvalidArgument`] for a lease under 1 ms or over
    ///   [`MAX_DURATION`](crate::config::MAX_DURATION), and for a
    ///   watchdog-mode guard (the watchdog renews it).
    /// - [`Error::LeaseLost`] when the lease was already known lost:
    ///   nothing is sent.
    /// - [`Error::NotHeld`] when Redis says the owner no longer holds the
    ///   lock (its lease ran out, or it was force-unlocked); the guard then
    ///   counts its lease as lost.
    /// - [`Error::Redis`] when the call fails; the lease stays as it was.
    ///
    /// # Cancel safety
    /// Cancel safe: a dropped future leaves the guard's lease as it was
    /// (the key's TTL may have been extended in Redis, which only makes
    /// the guard's own count the more careful one).
    pub async fn extend(&mut self, lease: Duration) -> Result<()> {
        let lease_ms = crate::args::duration("lease", lease, crate::config::MAX_DURATION)?;
        let hold = self.live_hold()?;
        if hold.slot.lease().lease_ms.is_none() {
            return Err(Error::invalid(
                "a watchdog-mode hold is renewed by the watchdog; extend is for leased holds",
            ));
        }
        let ttl = match hold.lock.registry().ttl_of(&hold.key) {
            Some(renewed) => lease.max(renewed),
            None => lease,
        };
        let sent = hold.renew(ttl).await?;
        hold.slot
            .set_lease(Some(lease_ms), LeaseState::leased_from(sent, lease));
        Ok(())
    }

    /// Hands a leased hold to the watchdog: from now on it is renewed
    /// while the guard lives, as if it had been taken in watchdog mode
    /// (its key's TTL becomes at least the watchdog timeout at once). A
    /// watchdog-mode guard is left as it is.
    ///
    /// # Errors
    /// As [`LockGuard::extend`], but for the watchdog-mode refusal.
    ///
    /// # Cancel safety
    /// Cancel safe: a dropped future leaves the hold leased as it was (the
    /// key's TTL may have been extended in Redis).
    pub async fn keep_alive(&mut self) -> Result<()> {
        let hold = self.live_hold()?;
        if hold.slot.lease().lease_ms.is_none() {
            return Ok(());
        }
        // The TTL of a watchdog hold of the owner, when there is one: this
        // hold joins its lease.
        let lock = &hold.lock;
        let ttl = (lock.registry().ttl_of(&hold.key)).unwrap_or(lock.config().watchdog_timeout);
        let sent = hold.renew(ttl).await?;
        let how = Renew {
            renewal: hold.kind.renewal(),
            ttl,
        };
        let watched = (hold.lock.registry()).hold(hold.key.clone(), sent, how, hold.kind.label());
        hold.slot.set_lease(None, watched);
        Ok(())
    }

    /// The hold, while its lease is not known lost.
    fn live_hold(&mut self) -> Result<&mut Hold> {
        match self.hold.as_mut() {
            Some(hold) if !hold.slot.is_lost() => Ok(hold),
            hold => Err(Error::LeaseLost {
                name: hold.map_or_else(String::new, |h| h.key.name.to_string()),
            }),
        }
    }

    /// Gives up the guard but keeps the hold: nothing is released, now or on
    /// drop. In watchdog mode the watchdog goes on renewing it. Release it
    /// later with [`Lock::unlock`](crate::Lock::unlock) from the same owner,
    /// or let a lease run out.
    pub fn leak(mut self) {
        if let Some(hold) = self.hold.take() {
            hold.stop_listening();
            // No longer a guard's: `Lock::unlock` releases it as a hold
            // without one. Unless it already did: the slot then records
            // how that release left the key.
            // Its count stands with no guard to count it: the lean
            // acquire, which finds the owner's hold as its own, is off
            // (before the guard goes, so that no claim between sees
            // neither).
            if hold.lock.client().lean_asked() {
                let slot = Arc::clone(&hold.slot);
                super::gate::Gates::get().leaked(
                    &hold.key,
                    super::gate::StandsUntil::new(move || slot.may_stand_until()),
                );
            }
            if !hold.slot.is_claimed() {
                Guards::get().remove(&hold.key, &hold.slot);
            }
        }
    }

    /// Releases this hold; the last hold deletes the lock and wakes a waiter.
    /// When [`Lock::unlock`](crate::Lock::unlock) already released this
    /// guard's hold, nothing is sent and the call succeeds.
    ///
    /// # Errors
    /// - [`Error::LeaseLost`] when the lease had run out by the guard's
    ///   clock (see [`LockGuard::is_lease_lost`]): already before the
    ///   release, which is then not sent, so a lock someone else took since
    ///   is never touched; or by the time Redis answered that the owner
    ///   holds nothing (the lease ran out while the release was on its way;
    ///   the guard's clock never runs ahead of the server's, so a hold the
    ///   server let go at its lease's end is always reported so). (A leased
    ///   hold nested in a watchdog hold of the same owner lives as long as
    ///   the watchdog keeps the key, and is released normally.)
    /// - [`Error::NotHeld`] when Redis says the owner holds nothing while
    ///   the guard's clock still gives it lease: the lock was deleted behind
    ///   its back (force-unlocked; a restart or failover lost it).
    /// - [`Error::Redis`] when every send failed: `release_attempts` sends
    ///   ([`ClientBuilder::release_attempts`](crate::ClientBuilder::release_attempts)),
    ///   spaced up to 100 ms, 200 ms... apart (from half of that, at
    ///   random); the hold then expires with its
    ///   lease. (A dropped guard's release, which nobody awaits, is resent
    ///   until it gets through or its lease runs out.) No send is made
    ///   again after the lease ran out, nor that of every other hold of the
    ///   owner that shares the lock's key with this one (held beside it, or
    ///   taken while it stood), which keeps this hold's count in the key.
    ///
    /// # Cancel safety
    /// Cancel safe: once started, the release runs to its end in the
    /// background if the future is dropped.
    pub async fn unlock(self) -> Result<()> {
        self.release(Resend::Bounded, None).await
    }

    /// Releases the hold, resending as `resend` says; a give-back names
    /// its `grant` (see [`ReleaseCall::grant`](super::release::ReleaseCall::grant)).
    async fn release(mut self, resend: Resend, grant: Option<Arc<Latch>>) -> Result<()> {
        match self.hold.take() {
            Some(hold) => {
                let runtime = hold.runtime.clone();
                let Some(mut release) = hold.claim()? else {
                    return Ok(());
                };
                release.grant = grant;
                let release = Arc::new(release);
                // At a runtime's shutdown, with the reply on its way: sent
                // again from its start, under the same request id, on a
                // connection of its own (see `Finish::rescued_by`).
                let rescue = release.lock().rescue({
                    let release = Arc::clone(&release);
                    move |lock| {
                        let release = Arc::clone(&release);
                        async move {
                            if let Err(err) = release.send_on(&lock, resend).await {
                                tracing::debug!(lock = %release.key.name, error = %err,
                                    "a release left at a runtime's shutdown did not go through");
                            }
                        }
                    }
                });
                Finish::detached(runtime, async move { release.send(resend).await })
                    .rescued_by(rescue)
                    .await
            }
            None => Ok(()),
        }
    }
}

impl LockGuard {
    /// Releases a hold its caller never saw (one the replicas did not
    /// acknowledge): as [`LockGuard::unlock`], but no hold time is
    /// reported for it, it is resent until it gets through or its lease
    /// runs out, and it names `grant`, the latch of the request granted:
    /// a failover that lost the grant lost the latch too, and the
    /// give-back then takes none of the owner's holds there.
    #[cfg_attr(not(feature = "metrics"), allow(unused_mut))]
    pub(crate) async fn give_back(mut self, grant: Option<Arc<Latch>>) -> Result<()> {
        #[cfg(feature = "metrics")]
        if let Some(hold) = self.hold.as_mut() {
            hold.since = None;
        }
        self.release(Resend::UntilExpired, grant).await
    }

    /// Releases a guard whose release nobody waits on for long (the
    /// blocking API's drop waits a moment): as its drop's release, resent
    /// until it gets through or its lease runs out.
    #[cfg(feature = "blocking")]
    pub(crate) async fn release_dropped(self) -> Result<()> {
        self.release(Resend::UntilExpired, None).await
    }
}

impl Hold {
    fn takeover(&self) -> Arc<Takeover> {
        Arc::clone(self.takeover.get_or_init(|| {
            Arc::new(Takeover::new(
                self.lock.client().clone(),
                self.kind.channel(&self.key.name),
                self.key.clone(),
                Arc::clone(&self.slot) as Arc<dyn HeldLease>,
            ))
        }))
    }

    /// The hold ends (released, or no longer a guard's): nobody listens
    /// for its end any more.
    fn stop_listening(&self) {
        if let Some(takeover) = self.takeover.get() {
            takeover.stop();
        }
    }

    /// Sets the key's TTL to `ttl` if the owner still holds it, as a
    /// renewal does; when the renewal was sent. A refusal marks the lease
    /// lost and is [`Error::NotHeld`].
    async fn renew(&self, ttl: Duration) -> Result<Instant> {
        let call = RenewCall::new(self.kind.renewal(), ttl, std::iter::once(&self.key));
        let mut conn = self.lock.conn();
        let sent = Instant::now();
        let gone = call
            .send(&mut conn)
            .await
            .map_err(|e| error_about(e, &self.key.name, "lock"))?;
        if !gone.is_empty() {
            let lease = self.slot.lease().state;
            if !lease.is_lost() {
                telemetry::lease_lost(self.subject());
            }
            lease.mark_lost();
            return Err(Error::NotHeld {
                name: self.key.name.to_string(),
                owner: self.key.field.to_string(),
            });
        }
        Ok(sent)
    }

    /// Who this hold's figures are about, in metrics.
    fn subject(&self) -> Subject<'_> {
        Subject {
            kind: self.kind.label(),
            name: (self.lock.config().metric_lock_names).then_some(&*self.key.name),
        }
    }

    /// Takes this hold's release: `None` when `Lock::unlock` released it
    /// already; [`Error::LeaseLost`] when its lease is known lost (nothing
    /// is to be sent).
    fn claim(self) -> Result<Option<Release>> {
        self.stop_listening();
        // Released already, by `Lock::unlock`: not this guard's to send.
        if !self.slot.claim() {
            return Ok(None);
        }
        #[cfg(feature = "metrics")]
        if let Some(since) = self.since {
            telemetry::released(self.subject(), since.elapsed());
        }
        let (keep_until, done) = (self.keep_until, self.done);
        Release::prepare(self.lock, self.kind, self.key, self.slot)
            .map(|release| Some(release.keeping_until(keep_until).marking(done)))
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        self.release_in_background(None, None);
    }
}

/// Work to run after a background release got through, given the lock
/// bound to the release's connection; it may run twice (see
/// `Object::spawn_to_end`).
pub(crate) type AfterRelease = Arc<dyn Fn(Object) -> BoxFuture<()> + Send + Sync + 'static>;

type BoxFuture<T> = std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send + 'static>>;

impl LockGuard {
    /// Releases the hold as a drop does, without waiting: in the
    /// background, resent after a failed connection until it gets through
    /// or the lease runs out (or that of another hold of its owner that
    /// shares the lock's key), and finished at a runtime's shutdown. The
    /// [`Released`] it returns tells when it ended, and whether Redis
    /// released the hold: to act once the lock is let go, as a leader's
    /// resignation is announced only after its lock is.
    pub fn unlock_in_background(mut self) -> Released {
        let (told, released) = Released::channel();
        self.release_in_background(Some(told), None);
        released
    }

    /// As [`LockGuard::unlock_in_background`], and once Redis released the
    /// hold, runs `then` (given the lock bound to the connection the
    /// release went on) in the same background work: an announcement
    /// that must not come before the release (a leader's resignation). In
    /// the same work, not in a task of its own that waits for a
    /// [`Released`]: at a runtime's shutdown the tasks left are dropped,
    /// and each rerun, one at a time, so a waiting task rerun before the
    /// release's would wait for a release that no longer runs.
    pub(crate) fn unlock_in_background_then(mut self, then: AfterRelease) {
        self.release_in_background(None, Some(then));
    }

    /// Sends the release in the background; `told`, when there is one,
    /// learns how it ended, and `then`, when there is one, runs after it
    /// got through.
    fn release_in_background(&mut self, told: Option<ReleasedTx>, then: Option<AfterRelease>) {
        let tell = |got_through: bool| {
            if let Some(told) = &told {
                told.send_replace(Some(got_through));
            }
        };
        let Some(hold) = self.hold.take() else {
            return;
        };
        let runtime = hold.runtime.clone();
        let name = Arc::clone(&hold.key.name);
        let release = match hold.claim() {
            Ok(Some(release)) => Arc::new(release),
            // Claimed already, by `Lock::unlock`, whose own result tells.
            Ok(None) => return tell(true),
            Err(err) => {
                tracing::debug!(lock = %name, error = %err, "dropped guard was no longer held");
                return tell(false);
            }
        };
        // Nobody awaits it: resent until it gets through or its lease runs
        // out (or that of the owner's holds that share its key); and finished even when the runtime shuts down
        // first (see `spawn_to_end`): a program that returns normally
        // leaves no hold.
        release.lock().spawn_to_end(&runtime, move |lock| {
            let release = Arc::clone(&release);
            let (told, then) = (told.clone(), then.clone());
            async move {
                let answer = release.send_on(&lock, Resend::UntilExpired).await;
                if let Some(told) = told {
                    told.send_replace(Some(answer.is_ok()));
                }
                match answer {
                    Ok(()) => {
                        if let Some(then) = then {
                            then(lock).await;
                        }
                    }
                    Err(err @ (Error::LeaseLost { .. } | Error::NotHeld { .. })) => {
                        tracing::debug!(lock = %release.key.name, error = %err,
                            "dropped guard was no longer held");
                    }
                    Err(err) => {
                        tracing::warn!(lock = %release.key.name, error = %err,
                            "release of a dropped guard failed; the lock expires with its lease");
                    }
                }
            }
        });
    }
}
