//! A leadership: the fenced lock's guard of one campaign, resigned by its
//! release and announced after it.

use std::sync::Arc;

use super::{announcement, LeaderElection, RESIGNED};
use crate::{FencedGuard, Result};

/// The leadership of one campaign, from [`LeaderElection::campaign`]: held
/// while it lives, kept by the watchdog.
///
/// Dropping it resigns in the background (the lock's release, resent until
/// it gets through or the lease runs out, then the announcement), as a
/// dropped [`LockGuard`](crate::LockGuard) releases; a program that returns
/// normally leaves no leadership behind.
#[must_use = "the leadership is resigned as soon as it is dropped"]
#[clippy::has_significant_drop]
pub struct Leadership {
    /// `None` once resigned.
    guard: Option<FencedGuard>,
    term: u64,
    label: String,
    election: LeaderElection,
}

impl std::fmt::Debug for Leadership {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Leadership")
            .field("name", &self.election.name())
            .field("term", &self.term)
            .field("label", &self.label)
            .field("lost", &self.is_lost())
            .finish()
    }
}

impl Leadership {
    /// The leadership `guard` won for `label` in `election`.
    pub(super) fn new(guard: FencedGuard, label: &str, election: LeaderElection) -> Leadership {
        Leadership {
            term: guard.token(),
            guard: Some(guard),
            label: label.to_owned(),
            election,
        }
    }

    /// The term: higher than every earlier term and fencing token of this
    /// name, whoever drew it. Send it with every write made as leader.
    pub fn term(&self) -> u64 {
        self.term
    }

    /// The label this candidate campaigned with.
    pub fn label(&self) -> &str {
        &self.label
    }

    /// The election's name.
    pub fn name(&self) -> &str {
        self.election.name()
    }

    /// Whether the leadership is known to be over, as
    /// [`LockGuard::is_lease_lost`](crate::LockGuard::is_lease_lost): its
    /// lock found gone by the watchdog, or its lease run out by this
    /// process's clock (checked at once after a pause).
    pub fn is_lost(&self) -> bool {
        self.guard.as_ref().is_none_or(FencedGuard::is_lease_lost)
    }

    /// Resolves when the leadership ended without a resignation, as
    /// [`LockGuard::lease_lost`](crate::LockGuard::lease_lost): the lock
    /// expired during a stall, was force-unlocked or lost with a Redis
    /// restart, or renewals could not get through before the lease would
    /// have run out (the client gives up a little before the server would,
    /// so that this leader stops before another starts). After a restart
    /// that lost the lock it resolves about 20 ms and a few round trips
    /// after Redis answers again, when a rival may be granted too (see
    /// [`LeaderElection`]). Never resolves while it leads: use it in a
    /// `tokio::select!` beside the work.
    ///
    /// # Cancel safety
    /// Cancel safe: it only waits.
    pub async fn lost(&self) {
        if let Some(guard) = &self.guard {
            guard.lease_lost().await;
        }
    }

    /// Resigns: releases the lock, so that another candidate leads, and
    /// announces it to the observers.
    ///
    /// # Errors
    /// As [`LockGuard::unlock`](crate::LockGuard::unlock):
    /// [`Error::LeaseLost`](crate::Error::LeaseLost) when the leadership had already ended (nothing
    /// is sent), [`Error::NotHeld`](crate::Error::NotHeld) when Redis says the lock was gone,
    /// [`Error::Redis`](crate::Error::Redis) when every send failed (the leadership then ends
    /// with its lease).
    ///
    /// # Cancel safety
    /// Cancel safe: once started, the release runs to its end in the
    /// background if the future is dropped; the announcement may then be
    /// missing (observers read again on their own).
    pub async fn resign(mut self) -> Result<()> {
        let Some(guard) = self.guard.take() else {
            return Ok(());
        };
        guard.unlock().await?;
        let announce = announcement(self.election.client(), self.name(), RESIGNED.into());
        announce.send().await;
        Ok(())
    }
}

impl Leadership {
    /// Resigns a leadership whose resignation nobody waits on for long
    /// (the blocking API's drop waits a moment): as its drop does, the
    /// release is resent until it gets through or the lease runs out, and
    /// the resignation is announced once it got through.
    #[cfg(feature = "blocking")]
    pub(crate) async fn resign_dropped(mut self) -> Result<()> {
        let Some(guard) = self.guard.take() else {
            return Ok(());
        };
        crate::LockGuard::from(guard).release_dropped().await?;
        let announce = announcement(self.election.client(), self.name(), RESIGNED.into());
        announce.send().await;
        Ok(())
    }
}

impl Drop for Leadership {
    fn drop(&mut self) {
        let Some(guard) = self.guard.take() else {
            return;
        };
        // The release goes on in the background, as a dropped guard's,
        // and the announcement after it got through, in the same work:
        // both are finished at a runtime's shutdown (see
        // `LockGuard::unlock_in_background_then`).
        let announce = Arc::new(announcement(
            self.election.client(),
            self.name(),
            RESIGNED.into(),
        ));
        guard.unlock_in_background_then(Arc::new(move |lock| {
            let announce = Arc::clone(&announce);
            Box::pin(async move { announce.send_on(&lock).await })
        }));
    }
}
