//! A handle on one hold's lease, which outlives its guard's borrow.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::slot::Slot;
use crate::engine::takeover::Takeover;

/// A handle on the lease of one hold, from [`LockGuard::lease_handle`]
/// or [`Permit::lease_handle`](crate::Permit::lease_handle) (and given to
/// a [`Job`](crate::Job)'s closure): it tells whether the
/// hold is still safely held, without borrowing the guard, so a task
/// spawned beside the work can watch it while the work owns the guard.
/// Clones watch the same hold.
///
/// It follows the hold as the guard changes it: after
/// [`LockGuard::extend`] or [`LockGuard::keep_alive`] it reads the new
/// lease. Once the hold ends, released by its guard or by
/// [`Lock::unlock`](crate::Lock::unlock), it counts as lost: the lock is
/// no longer this hold's. A hold [leaked](crate::LockGuard::leak) is no
/// guard's any more: a handle taken before reads its lease as it was then,
/// and does not see its end.
///
/// [`LockGuard::lease_handle`]: crate::LockGuard::lease_handle
/// [`LockGuard::extend`]: crate::LockGuard::extend
/// [`LockGuard::keep_alive`]: crate::LockGuard::keep_alive
#[derive(Clone)]
pub struct Lease {
    slot: Arc<Slot>,
    /// The listening for the hold's end by another; shared with its guard.
    /// `None` for a guard that no longer held.
    takeover: Option<Arc<Takeover>>,
}

impl std::fmt::Debug for Lease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lease")
            .field("lost", &self.is_lost())
            .field("renewed", &self.is_renewed())
            .field("remaining", &self.remaining())
            .finish()
    }
}

impl Lease {
    pub(crate) fn new(slot: Arc<Slot>, takeover: Option<Arc<Takeover>>) -> Lease {
        Lease { slot, takeover }
    }

    /// The lease of no hold: lost.
    pub(crate) fn ended() -> Lease {
        Lease::new(Slot::ended(), None)
    }

    /// Whether the lease is known lost, has run out by this process's
    /// clock (as [`LockGuard::is_lease_lost`](crate::LockGuard::is_lease_lost)
    /// counts it), or the hold was released.
    pub fn is_lost(&self) -> bool {
        self.slot.is_lost()
    }

    /// Resolves when the lock is known to be no longer this hold's, as
    /// [`LockGuard::lease_lost`](crate::LockGuard::lease_lost) (also within
    /// a round trip of a force-unlock), or when the hold is released.
    /// Never resolves while the lock is safely held. Once it resolved, the
    /// lease counts as lost, even if an `extend` on its way meanwhile gets
    /// through.
    ///
    /// # Cancel safety
    /// Cancel safe: it only waits.
    pub async fn lost(&self) {
        if self.slot.is_claimed() {
            return;
        }
        if let Some(takeover) = &self.takeover {
            takeover.start();
        }
        loop {
            let changed = self.slot.changed();
            tokio::pin!(changed);
            // Registered before the look: an `extend` or a release in
            // between still wakes it.
            changed.as_mut().enable();
            if self.slot.is_claimed() {
                return;
            }
            let state = self.slot.lease().state;
            tokio::select! {
                () = state.wait_lost() => {
                    // The lease waited on, not one an `extend` put in its
                    // place meanwhile.
                    if Arc::ptr_eq(&self.slot.lease().state, &state) {
                        return;
                    }
                }
                () = &mut changed => {}
            }
        }
    }

    /// How long the lease runs from now unless renewed: with a lease, what
    /// is left of it; in watchdog mode, until the watchdog's next renewal
    /// would be too late. Zero once lost.
    pub fn remaining(&self) -> Duration {
        match self.is_lost() {
            true => Duration::ZERO,
            false => self.deadline().saturating_duration_since(Instant::now()),
        }
    }

    /// Whether the watchdog renews the lease: the hold was taken in
    /// watchdog mode, or handed to it by
    /// [`LockGuard::keep_alive`](crate::LockGuard::keep_alive) or
    /// [`Permit::keep_alive`](crate::Permit::keep_alive).
    pub fn is_renewed(&self) -> bool {
        self.slot.lease().lease_ms.is_none()
    }

    /// When the lease runs out unless renewed, by this process's clock.
    pub(crate) fn deadline(&self) -> Instant {
        self.slot.lease().state.deadline()
    }
}

/// The end of a release sent in the background, from
/// [`LockGuard::unlock_in_background`](crate::LockGuard::unlock_in_background):
/// to act once the lock is let go (announce it, say) without holding up
/// the caller. Clones wait for the same release; dropping it changes
/// nothing.
#[derive(Debug, Clone)]
pub struct Released {
    /// `None` until the release ended; then whether it got through.
    ended: tokio::sync::watch::Receiver<Option<bool>>,
}

/// The sending side of a [`Released`]: told once, by whichever run of the
/// background release ends it (it may run twice, see `spawn_to_end`).
pub(super) type ReleasedTx = Arc<tokio::sync::watch::Sender<Option<bool>>>;

impl Released {
    pub(super) fn channel() -> (ReleasedTx, Released) {
        let (tx, ended) = tokio::sync::watch::channel(None);
        (Arc::new(tx), Released { ended })
    }

    /// Waits for the release's end: `true` when Redis released the hold
    /// (or [`Lock::unlock`](crate::Lock::unlock) had claimed it before,
    /// whose own result tells);
    /// `false` when it was not sent (the lease was known lost), Redis said
    /// the owner held nothing, or it never got through before the lease
    /// ran out (or before the end of a runtime's shutdown, which waits for
    /// it a bounded time). Any runtime may wait, or none: it does not need
    /// the one the release runs on.
    ///
    /// # Cancel safety
    /// Cancel safe: it only waits.
    pub async fn wait(&self) -> bool {
        let mut ended = self.ended.clone();
        // Closed without an answer: every run of the release is gone.
        let answer = ended.wait_for(Option::is_some).await.map(|got| *got);
        answer.ok().flatten().unwrap_or(false)
    }
}
