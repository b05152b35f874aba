//! The blocking permit-expirable semaphore and its permits.

use std::sync::Arc;
use std::time::Duration;

use super::{blocking_calls, blocking_object, Runtime};
use crate::{PermitId, Result};

blocking_object!(
    /// A permit-expirable semaphore, from
    /// [`blocking::Client::permit_expirable_semaphore`](super::Client::permit_expirable_semaphore):
    /// the blocking face of [`crate::PermitExpirableSemaphore`]. Each acquire
    /// returns a [`Permit`] with its own id, and a leased permit goes back by
    /// itself when its lease ends.
    PermitExpirableSemaphore
);

impl PermitExpirableSemaphore {
    blocking_calls! { PermitExpirableSemaphore;
        /// Sets the number of permits if it was never set; whether this
        /// call set it.
        fn try_set_permits(&self, permits: u32) -> bool;
        /// Adds `permits` and wakes waiters.
        fn add_permits(&self, permits: i64) -> ();
        /// Gives back the permit `id`, from anywhere.
        fn release_by_id(&self, id: PermitId) -> ();
        /// Gives back the permit `id` if it is out; whether it was.
        fn try_release(&self, id: PermitId) -> bool;
        /// Gives back every permit of `ids`.
        fn release_many(&self, ids: &[PermitId]) -> ();
        /// Sets the lease of the permit `id` (`None`: no lease).
        fn update_lease_by_id(&self, id: PermitId, lease: Option<Duration>) -> ();
        /// How long the permit `id`'s lease has left; `None` without one.
        fn lease_of(&self, id: PermitId) -> Option<Duration>;
        /// How many permits are out.
        fn acquired_permits(&self) -> i64;
        /// How many permits the semaphore has, out or not.
        fn permits(&self) -> i64;
        /// Sets the number of permits; the change it made.
        fn set_permits(&self, permits: u32) -> i64;
        /// How many permits are available now.
        fn available_permits(&self) -> i64;
        /// Takes every available permit; how many it took.
        fn drain_permits(&self) -> i64;
    }

    /// Wraps the async permits of one acquire.
    fn wrap(&self, permits: Vec<crate::Permit>) -> Vec<Permit> {
        permits
            .into_iter()
            .map(|p| Permit::new(p, &self.rt))
            .collect()
    }

    /// Waits for a permit without a lease.
    ///
    /// # Errors
    /// As [`crate::PermitExpirableSemaphore::acquire`], and
    /// [`Error::Blocking`](crate::Error::Blocking) when the call cannot be run.
    pub fn acquire(&self) -> Result<Permit> {
        let permit = self.rt.run(self.inner.acquire())?;
        Ok(Permit::new(permit, &self.rt))
    }

    /// Waits for a permit that goes back by itself after `lease`.
    ///
    /// # Errors
    /// As [`crate::PermitExpirableSemaphore::acquire_with_lease`], and
    /// [`Error::Blocking`](crate::Error::Blocking) when the call cannot be run.
    pub fn acquire_with_lease(&self, lease: Duration) -> Result<Permit> {
        let permit = self.rt.run(self.inner.acquire_with_lease(lease))?;
        Ok(Permit::new(permit, &self.rt))
    }

    /// One attempt at a permit without a lease.
    ///
    /// # Errors
    /// As [`crate::PermitExpirableSemaphore::try_acquire`], and
    /// [`Error::Blocking`](crate::Error::Blocking) when the call cannot be run.
    pub fn try_acquire(&self) -> Result<Option<Permit>> {
        let permit = self.rt.run(self.inner.try_acquire())?;
        Ok(permit.map(|p| Permit::new(p, &self.rt)))
    }

    /// Waits at most `wait` for a permit without a lease.
    ///
    /// # Errors
    /// As [`crate::PermitExpirableSemaphore::try_acquire_for`], and
    /// [`Error::Blocking`](crate::Error::Blocking) when the call cannot be run.
    pub fn try_acquire_for(&self, wait: Duration) -> Result<Option<Permit>> {
        let permit = self.rt.run(self.inner.try_acquire_for(wait))?;
        Ok(permit.map(|p| Permit::new(p, &self.rt)))
    }

    /// Waits at most `wait` for a permit with a lease.
    ///
    /// # Errors
    /// As [`crate::PermitExpirableSemaphore::try_acquire_with_lease`], and
    /// [`Error::Blocking`](crate::Error::Blocking) when the call cannot be run.
    pub fn try_acquire_with_lease(
        &self,
        wait: Duration,
        lease: Duration,
    ) -> Result<Option<Permit>> {
        let permit = self
            .rt
            .run(self.inner.try_acquire_with_lease(wait, lease))?;
        Ok(permit.map(|p| Permit::new(p, &self.rt)))
    }

    /// Waits for `permits` permits at once, without a lease.
    ///
    /// # Errors
    /// As [`crate::PermitExpirableSemaphore::acquire_many`], and
    /// [`Error::Blocking`](crate::Error::Blocking) when the call cannot be run.
    pub fn acquire_many(&self, permits: u32) -> Result<Vec<Permit>> {
        let permits = self.rt.run(self.inner.acquire_many(permits))?;
        Ok(self.wrap(permits))
    }

    /// Waits for `permits` permits at once, each with `lease`.
    ///
    /// # Errors
    /// As [`crate::PermitExpirableSemaphore::acquire_many_with_lease`], and
    /// [`Error::Blocking`](crate::Error::Blocking) when the call cannot be run.
    pub fn acquire_many_with_lease(&self, permits: u32, lease: Duration) -> Result<Vec<Permit>> {
        let permits = self
            .rt
            .run(self.inner.acquire_many_with_lease(permits, lease))?;
        Ok(self.wrap(permits))
    }

    /// Takes `permits` permits at once if they are available now.
    ///
    /// # Errors
    /// As [`crate::PermitExpirableSemaphore::try_acquire_many`], and
    /// [`Error::Blocking`](crate::Error::Blocking) when the call cannot be run.
    pub fn try_acquire_many(&self, permits: u32) -> Result<Option<Vec<Permit>>> {
        let permits = self.rt.run(self.inner.try_acquire_many(permits))?;
        Ok(permits.map(|p| self.wrap(p)))
    }

    /// Waits at most `wait` for `permits` permits at once.
    ///
    /// # Errors
    /// As [`crate::PermitExpirableSemaphore::try_acquire_many_for`], and
    /// [`Error::Blocking`](crate::Error::Blocking) when the call cannot be run.
    pub fn try_acquire_many_for(
        &self,
        permits: u32,
        wait: Duration,
    ) -> Result<Option<Vec<Permit>>> {
        let permits = self
            .rt
            .run(self.inner.try_acquire_many_for(permits, wait))?;
        Ok(permits.map(|p| self.wrap(p)))
    }

    /// Waits at most `wait` for `permits` permits at once, each with
    /// `lease`.
    ///
    /// # Errors
    /// As [`crate::PermitExpirableSemaphore::try_acquire_many_with_lease`],
    /// and [`Error::Blocking`](crate::Error::Blocking) when the call cannot
    /// be run.
    pub fn try_acquire_many_with_lease(
        &self,
        permits: u32,
        wait: Duration,
        lease: Duration,
    ) -> Result<Option<Vec<Permit>>> {
        let permits = self
            .rt
            .run(self.inner.try_acquire_many_with_lease(permits, wait, lease))?;
        Ok(permits.map(|p| self.wrap(p)))
    }

    /// Gives `permit` back and wakes the waiters, as [`Permit::release`].
    ///
    /// # Errors
    /// As [`crate::PermitExpirableSemaphore::release`], and
    /// [`Error::Blocking`](crate::Error::Blocking) when the call cannot be run.
    pub fn release(&self, permit: Permit) -> Result<()> {
        permit.release()
    }

    /// Sets `permit`'s lease (`None`: no lease).
    ///
    /// # Errors
    /// As [`crate::PermitExpirableSemaphore::update_lease`], and
    /// [`Error::Blocking`](crate::Error::Blocking) when the call cannot be run.
    pub fn update_lease(&self, permit: &mut Permit, lease: Option<Duration>) -> Result<()> {
        match permit.inner.as_mut() {
            Some(inner) => self.rt.run(self.inner.update_lease(inner, lease)),
            None => Ok(()),
        }
    }
}

/// One permit of a blocking [`PermitExpirableSemaphore`]: the blocking face
/// of [`crate::Permit`].
///
/// [`Permit::release`] gives it back and reports the outcome. Dropping it
/// gives it back too, waiting at most the client's response timeout, as a
/// [`LockGuard`](super::LockGuard) does. [`Permit::leak`] keeps it out.
#[must_use = "the permit is released as soon as it is dropped"]
#[clippy::has_significant_drop]
pub struct Permit {
    /// `None` once released or leaked.
    inner: Option<crate::Permit>,
    id: PermitId,
    rt: Arc<Runtime>,
}

impl std::fmt::Debug for Permit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("blocking::Permit")
            .field("inner", &self.inner)
            .finish()
    }
}

impl Permit {
    fn new(inner: crate::Permit, rt: &Arc<Runtime>) -> Permit {
        Permit {
            id: inner.id(),
            inner: Some(inner),
            rt: Arc::clone(rt),
        }
    }

    /// The permit's id.
    pub fn id(&self) -> PermitId {
        self.id
    }

    /// The name of the semaphore it came from.
    pub fn name(&self) -> &str {
        self.inner.as_ref().map_or("", |p| p.name())
    }

    /// How long until its lease ends, by this process's clock (a drift
    /// margin before the server's: see
    /// [`Permit::remaining_lease`](crate::Permit::remaining_lease)); `None`
    /// without a lease.
    pub fn remaining_lease(&self) -> Option<Duration> {
        self.inner.as_ref().and_then(|p| p.remaining_lease())
    }

    /// Whether its lease has ended, by this process's clock, or the
    /// watchdog found it no longer out (see [`crate::Permit::is_expired`]).
    pub fn is_expired(&self) -> bool {
        self.inner.as_ref().is_some_and(|p| p.is_expired())
    }

    /// Hands the permit to the watchdog, as [`crate::Permit::keep_alive`]:
    /// renewed while the permit lives.
    ///
    /// # Errors
    /// As [`crate::Permit::keep_alive`], and
    /// [`Error::Blocking`](crate::Error::Blocking) when the call cannot be
    /// run.
    pub fn keep_alive(&mut self) -> Result<()> {
        match self.inner.as_mut() {
            Some(permit) => self.rt.run(permit.keep_alive()),
            None => Ok(()),
        }
    }

    /// A handle on the permit's lease, as [`crate::Permit::lease_handle`]:
    /// another thread may watch it while this one works.
    pub fn lease_handle(&self) -> super::Lease {
        let inner = self
            .inner
            .as_ref()
            .map_or_else(crate::Lease::ended, crate::Permit::lease_handle);
        super::Lease::new(inner, Arc::clone(&self.rt))
    }

    /// Keeps the permit out: nothing is released, now or on drop.
    pub fn leak(mut self) {
        if let Some(permit) = self.inner.take() {
            permit.leak();
        }
    }

    /// Gives the permit back and wakes the waiters, blocking until Redis
    /// answers.
    ///
    /// # Errors
    /// As [`crate::Permit::release`], and
    /// [`Error::Blocking`](crate::Error::Blocking) when the call cannot be
    /// run (the permit is then released in the background, as on drop).
    pub fn release(mut self) -> Result<()> {
        match self.inner.take() {
            Some(permit) => self.rt.run(permit.release()),
            None => Ok(()),
        }
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        if let Some(permit) = self.inner.take() {
            let name = permit.name().to_owned();
            self.rt
                .release_on_drop("permit", name, permit.release_dropped());
        }
    }
}
