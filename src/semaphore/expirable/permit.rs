//! A permit: its id, and the permit its acquire hands out.

use super::*;

/// A permit's id: 16 random bytes, shown as 32 hex digits, as in Redisson.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PermitId(pub(super) [u8; 16]);

impl PermitId {
    pub(super) fn random() -> PermitId {
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

/// One permit of a [`PermitExpirableSemaphore`], from its acquire.
///
/// Release it with [`Permit::release`] (or
/// [`PermitExpirableSemaphore::release`]), which reports what happened.
/// A permit taken with a lease can be handed to the watchdog
/// ([`Permit::keep_alive`]), which then renews it while the permit lives,
/// as it does a lock taken in watchdog mode; [`Permit::lease_handle`]
/// watches it from another task.
/// Dropping it releases it in the background on the runtime it was taken
/// on, like a [`LockGuard`](crate::LockGuard): never blocking, never
/// panicking, a failure only logged; that release is resent after a failed
/// connection until it gets through or the lease has surely ended (an hour
/// at most without a lease). [`Permit::leak`] keeps it out
/// instead, to be released later by id, or to expire.
#[must_use = "the permit is released as soon as it is dropped"]
#[clippy::has_significant_drop]
pub struct Permit {
    pub(super) hold: Option<PermitHold>,
    pub(super) id: PermitId,
    /// Its lease as this process counts it (from the send of the acquire,
    /// or of the watchdog's last renewal), which `keep_alive` and
    /// `update_lease` replace; what its [`Lease`] handles read. Its lease
    /// in ms is `None` while the watchdog renews it.
    slot: Arc<Slot>,
    /// It has no lease (it never expires): its slot's lease then runs as
    /// long as the longest lease, and is never lost.
    endless: bool,
    /// Handed to the watchdog: the end its lease had then, by this
    /// process's clock (Redis keeps the longer of it and the renewals'),
    /// and the watchdog's TTL.
    kept: Option<(Instant, Duration)>,
}

pub(super) struct PermitHold {
    /// The semaphore the permit is of.
    pub(super) semaphore: Object,
    pub(super) runtime: Handle,
    /// What the watchdog knows the permit by: the semaphore's
    /// `{name}:timeout`, and the id's 32 hex digits.
    key: HoldKey,
    /// When it was granted, for the hold-time figure.
    #[cfg(feature = "metrics")]
    pub(super) granted: std::time::Instant,
}

impl PermitHold {
    /// The hold of a permit `id` of `semaphore`, granted now.
    pub(super) fn new(semaphore: Object, runtime: Handle, id: PermitId) -> PermitHold {
        let key = HoldKey::new(
            Arc::from(keys::permit_timeouts(semaphore.name())),
            Arc::from(id.to_string()),
        );
        PermitHold {
            semaphore,
            runtime,
            key,
            #[cfg(feature = "metrics")]
            granted: std::time::Instant::now(),
        }
    }

    /// Reports the hold's time, once it is given back.
    fn released(&self) {
        #[cfg(feature = "metrics")]
        {
            telemetry::released(
                self.semaphore.subject(EXPIRABLE_KIND),
                self.granted.elapsed(),
            );
        }
    }
}

impl fmt::Debug for Permit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Permit")
            .field("id", &self.id)
            .field("semaphore", &self.hold.as_ref().map(|h| h.semaphore.name()))
            .field("remaining_lease", &self.remaining_lease())
            .field("renewed", &self.slot.lease().lease_ms.is_none())
            .finish()
    }
}

impl Permit {
    /// The permit `id` of `hold`, taken with a lease of `lease_ms` (none:
    /// it never expires) by a request first sent at `start`.
    pub(super) fn new(
        hold: PermitHold,
        id: PermitId,
        lease_ms: Option<u64>,
        start: Instant,
    ) -> Permit {
        let slot = Slot::new(Some(0), LeaseState::leased(start));
        let mut permit = Permit {
            hold: Some(hold),
            id,
            slot,
            endless: false,
            kept: None,
        };
        permit.set_lease(lease_ms, start);
        permit
    }

    /// Its lease from now on: `lease_ms` from `start` (none: it never
    /// expires). A permit the watchdog renewed is no longer its.
    pub(super) fn set_lease(&mut self, lease_ms: Option<u64>, start: Instant) {
        self.stop_renewal();
        self.endless = lease_ms.is_none();
        self.kept = None;
        let (ms, end) = match lease_ms {
            Some(ms) => (ms, lease_end(start, ms)),
            None => (0, Instant::now() + MAX_DURATION),
        };
        self.slot.set_lease(Some(ms), LeaseState::leased(end));
    }

    /// Takes the permit off the watchdog's schedule, if it was on it: its
    /// lease then ends with the last renewal's (or is lost, as it was), and
    /// its handles wait for that end.
    pub(super) fn stop_renewal(&self) {
        let lease = self.slot.lease();
        if let (None, Some(hold)) = (lease.lease_ms, &self.hold) {
            hold.semaphore.registry().release(&hold.key, &lease.state);
            let ttl_ms = lease
                .state
                .watchdog_ttl()
                .map_or(0, |t| t.as_millis() as u64);
            let ended = LeaseState::leased(lease.state.deadline());
            if lease.state.is_lost() {
                ended.mark_lost();
            }
            self.slot.set_lease(Some(ttl_ms), ended);
        }
    }

    /// The permit's id.
    pub fn id(&self) -> PermitId {
        self.id
    }

    /// The name of the semaphore it came from (as a guard's
    /// [`name`](crate::LockGuard::name)).
    pub fn name(&self) -> &str {
        self.hold.as_ref().map_or("", |h| h.semaphore.name())
    }

    /// How long until its lease ends, by this process's clock: counted
    /// from the send of the acquire, less a drift margin (a tenth of the
    /// lease, at most 1 s), so never later than the server's; kept by the
    /// watchdog, until its next renewal would be too late. Zero once the
    /// lease is known lost; `None` for a permit without a lease.
    pub fn remaining_lease(&self) -> Option<Duration> {
        (!self.endless).then(|| self.lease_handle().remaining())
    }

    /// Whether its lease has ended, by this process's clock (see
    /// [`remaining_lease`](Self::remaining_lease)), or the watchdog found
    /// the permit no longer out: true once the server may have taken the
    /// permit back.
    pub fn is_expired(&self) -> bool {
        !self.endless && self.lease_handle().is_lost()
    }

    /// Hands the permit to the watchdog: from now on it is renewed while
    /// the permit lives, to the client's
    /// [watchdog timeout](crate::ClientBuilder::watchdog_timeout) from each
    /// renewal (every third of it), as a lock taken in watchdog mode is;
    /// its lease in Redis becomes at least that at once. A holder that dies
    /// loses the permit one watchdog timeout after the last renewal, or at
    /// the end of its own lease when that is later: the renewals never
    /// shorten a lease, and never put back a permit that is no longer out.
    /// A permit without a lease, or one the watchdog keeps already, is left
    /// as it is.
    ///
    /// Releasing, dropping or [leaking](Self::leak) the permit, or
    /// [`update_lease`](PermitExpirableSemaphore::update_lease), ends the
    /// renewals (a renewal already on its way may still lengthen the lease
    /// in Redis once, never past a watchdog timeout from when it runs).
    /// Watch for a lost permit with [`lease_lost`](Self::lease_lost) or a
    /// [`lease_handle`](Self::lease_handle).
    ///
    /// # Errors
    /// - [`Error::PermitNotOut`] when the permit is no longer out (its
    ///   lease ran out, or it was released by id); its lease then counts
    ///   as lost. Nothing is sent when the lease had run out by this
    ///   process's clock already.
    /// - [`Error::Redis`] when the call fails; the lease stays as it was.
    ///
    /// # Cancel safety
    /// Cancel safe: a dropped future leaves the permit leased as it was
    /// (its lease in Redis may have been lengthened, which only makes the
    /// permit's own count the more careful one).
    pub async fn keep_alive(&mut self) -> Result<()> {
        let Some(hold) = &self.hold else {
            return Ok(());
        };
        if self.endless {
            return Ok(());
        }
        if self.is_expired() {
            return Err(self.not_out(hold));
        }
        let before = self.slot.lease();
        if before.lease_ms.is_none() {
            return Ok(());
        }
        let semaphore = &hold.semaphore;
        let ttl = semaphore.config().watchdog_timeout;
        let call = RenewCall::new(Renewal::Permit, ttl, std::iter::once(&hold.key));
        let mut conn = semaphore.conn();
        let sent = Instant::now();
        let gone = call.send(&mut conn).await.map_err(|e| semaphore.error(e))?;
        if !gone.is_empty() {
            if !before.state.is_lost() {
                telemetry::lease_lost(semaphore.subject(EXPIRABLE_KIND));
            }
            before.state.mark_lost();
            return Err(self.not_out(hold));
        }
        let how = Renew {
            renewal: Renewal::Permit,
            ttl,
        };
        let watched = (semaphore.registry()).hold(hold.key.clone(), sent, how, EXPIRABLE_KIND);
        self.slot.set_lease(None, watched);
        self.kept = Some((before.state.deadline(), ttl));
        Ok(())
    }

    fn not_out(&self, hold: &PermitHold) -> Error {
        Error::PermitNotOut {
            name: hold.semaphore.name().to_string(),
            permit: self.id.to_string(),
        }
    }

    /// A handle on the permit's lease, as a lock guard's
    /// [`lease_handle`](crate::LockGuard::lease_handle): it follows
    /// [`keep_alive`](Self::keep_alive) and
    /// [`update_lease`](PermitExpirableSemaphore::update_lease), and counts
    /// the permit as lost once it is released or dropped. A permit without
    /// a lease reads as never lost, its lease as long as the longest
    /// ([`MAX_DURATION`]).
    pub fn lease_handle(&self) -> Lease {
        Lease::new(Arc::clone(&self.slot), None)
    }

    /// Resolves when the permit's lease is lost: it ran out by this
    /// process's clock, or the watchdog found the permit no longer out (or
    /// could not renew it in time). Never resolves while the permit is
    /// safely out; for a permit without a lease, never.
    ///
    /// # Cancel safety
    /// Cancel safe: it only waits.
    pub async fn lease_lost(&self) {
        self.lease_handle().lost().await;
    }

    /// Keeps the permit out: nothing is released, now or on drop.
    /// Release it later with [`PermitExpirableSemaphore::release_by_id`],
    /// or let its lease run out. The verb of
    /// [`LockGuard::leak`](crate::LockGuard::leak). A permit the watchdog
    /// kept is no longer renewed: it runs out a watchdog timeout after its
    /// last renewal, or at the end of its own lease when that is later.
    /// A [`lease_handle`](Self::lease_handle) taken before counts it lost
    /// once the last renewal's lease ends.
    pub fn leak(mut self) {
        self.stop_renewal();
        self.hold = None;
    }

    /// Takes the permit's hold for its release: off the watchdog's
    /// schedule, and its lease handles told it ended.
    fn claim(&mut self) -> Option<PermitHold> {
        self.stop_renewal();
        let hold = self.hold.take()?;
        self.slot.claim();
        Some(hold)
    }

    /// Gives the permit back and wakes the waiters.
    ///
    /// # Errors
    /// As [`PermitExpirableSemaphore::release`].
    ///
    /// # Cancel safety
    /// Cancel safe: once sent, the release completes in the background
    /// (resent, as a dropped permit's, when the connection fails it).
    pub async fn release(mut self) -> Result<()> {
        let until = self.dropped_until();
        let Some(hold) = self.claim() else {
            return Ok(());
        };
        let id = self.id;
        let semaphore = hold.semaphore.clone();
        let runtime = hold.runtime.clone();
        let hold = Arc::new(hold);
        let release = {
            let hold = Arc::clone(&hold);
            async move {
                let given = give_back(&hold.semaphore, &[id], None).await;
                if let Ok(None) = given {
                    hold.released();
                }
                given
            }
        };
        // Its caller gone, a send that the connection failed is resent as
        // a dropped permit's release: nobody is told to retry it.
        let orphan = move |given: Result<Option<PermitId>>| async move {
            if matches!(&given, Err(err) if err.is_connection_error()) {
                release_in_background(hold, id, until);
            }
        };
        match Finish::new(runtime, release, orphan).await? {
            None => {
                semaphore.release_synced().await;
                Ok(())
            }
            Some(_) => Err(Error::PermitNotOut {
                name: semaphore.name().to_string(),
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
        let until = self.dropped_until();
        let Some(hold) = self.claim() else {
            return Ok(());
        };
        match give_back(&hold.semaphore, &[self.id], Some(until)).await? {
            None => {
                hold.released();
                Ok(())
            }
            Some(id) => Err(Error::PermitNotOut {
                name: hold.semaphore.name().to_string(),
                permit: id.to_string(),
            }),
        }
    }

    /// Until when the release of a dropped permit is resent: until its
    /// lease has surely ended (here it ends a drift margin, at most 1 s,
    /// before the server's; a reply in flight and a drift margin more on
    /// the server), or for [`NEVER_EXPIRES`] without a lease. Kept by the
    /// watchdog, Redis keeps the longer of its own lease and the
    /// renewals', and one renewal may still be on its way: until the later
    /// of that lease's end and two watchdog timeouts from now.
    fn dropped_until(&self) -> Instant {
        match (&self.hold, self.endless) {
            (Some(hold), false) => {
                let config = hold.semaphore.config();
                let mut at = self.slot.lease().state.deadline();
                if let Some((before, ttl)) = self.kept {
                    at = at.max(before).max(Instant::now() + 2 * ttl);
                }
                at + config.response_timeout + Duration::from_secs(2)
            }
            _ => Instant::now() + NEVER_EXPIRES,
        }
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        // Nobody waits on it: resent until it gets through, or until the
        // lease has surely ended.
        let until = self.dropped_until();
        let Some(hold) = self.claim() else {
            return;
        };
        release_in_background(Arc::new(hold), self.id, until);
    }
}

/// Releases the permit `id` of `hold` in the background, resent until it
/// gets through or `until`. Finished even when the runtime shuts down
/// first (see `Object::spawn_to_end`): a program that returns normally
/// leaves no permit out.
fn release_in_background(hold: Arc<PermitHold>, id: PermitId, until: Instant) {
    let runtime = hold.runtime.clone();
    let semaphore = hold.semaphore.clone();
    semaphore.spawn_to_end(&runtime, move |semaphore| {
        let hold = Arc::clone(&hold);
        async move {
            match give_back(&semaphore, &[id], Some(until)).await {
                Ok(None) => hold.released(),
                Ok(Some(_)) => tracing::debug!(semaphore = %hold.semaphore.name(), permit = %id,
                    "the permit was not out: it had expired, or an earlier send went through"),
                Err(err) => {
                    tracing::warn!(semaphore = %hold.semaphore.name(), permit = %id, error = %err,
                    "could not release a permit")
                }
            }
        }
    });
}

/// When a lease of `ms` begun by the server after `start` ends by this
/// process's clock: no later than on the server's. The server reads its
/// clock in whole milliseconds, truncated, and the two clocks may run at
/// slightly different rates: the drift margin the watchdog takes for a
/// lock's lease is taken off here too.
pub(super) fn lease_end(start: Instant, ms: u64) -> Instant {
    let lease = Duration::from_millis(ms);
    start + lease - crate::engine::watchdog::drift_margin(lease)
}
