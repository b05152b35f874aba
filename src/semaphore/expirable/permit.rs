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
    /// When the lease ends by this process's clock (from the send of the
    /// acquire); `None` without a lease.
    pub(super) expires: Option<Instant>,
}

pub(super) struct PermitHold {
    /// The semaphore the permit is of.
    pub(super) semaphore: Object,
    pub(super) runtime: Handle,
    /// When it was granted, for the hold-time figure.
    #[cfg(feature = "metrics")]
    pub(super) granted: std::time::Instant,
}

impl PermitHold {
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
        self.hold.as_ref().map_or("", |h| h.semaphore.name())
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
        let semaphore = hold.semaphore.clone();
        let runtime = hold.runtime.clone();
        let release = async move {
            let given = give_back(&hold.semaphore, &[id], None).await;
            if let Ok(None) = given {
                hold.released();
            }
            given
        };
        match Finish::detached(runtime, release).await? {
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
        let Some(hold) = self.hold.take() else {
            return Ok(());
        };
        let until = self.dropped_until(&hold);
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
    /// the server), or for [`NEVER_EXPIRES`] without a lease.
    fn dropped_until(&self, hold: &PermitHold) -> Instant {
        let config = hold.semaphore.config();
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
        let semaphore = hold.semaphore.clone();
        let hold = Arc::new(hold);
        // Finished even when the runtime shuts down first (see
        // `Object::spawn_to_end`): a program that returns normally leaves
        // no permit out.
        semaphore.spawn_to_end(&runtime, move |semaphore| {
            let hold = Arc::clone(&hold);
            async move {
                match give_back(&semaphore, &[id], Some(until)).await {
                    Ok(None) => hold.released(),
                    Ok(Some(_)) => tracing::debug!(semaphore = %hold.semaphore.name(), permit = %id,
                        "dropped permit had expired already"),
                    Err(err) => tracing::warn!(semaphore = %hold.semaphore.name(), permit = %id, error = %err,
                        "could not release a dropped permit"),
                }
            }
        });
    }
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
