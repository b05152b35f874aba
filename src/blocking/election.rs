//! The blocking leader election, its leadership and its observer.

use std::sync::Arc;
use std::time::Duration;

use futures_util::stream::FusedStream;

use super::{blocking_calls, blocking_object, Runtime};
use crate::{Error, Holder, LeaderChange, Result};

blocking_object!(
    /// A leader election, from
    /// [`blocking::Client::leader_election`](super::Client::leader_election):
    /// the blocking face of [`crate::LeaderElection`], with the same
    /// guarantees (one leader per name at a time, terms that only rise,
    /// a lease of the client's watchdog timeout, or of the election's own,
    /// [`LeaderElection::lease`]).
    ///
    /// Every campaign is a candidate of its own, whichever thread makes it:
    /// a campaign is not owned by the calling thread as a blocking lock's
    /// hold is, so two campaigns of one thread exclude each other.
    ///
    /// ```rust,no_run
    /// # fn run() -> ferrisson::Result<()> {
    /// let client = ferrisson::blocking::Client::connect("redis://127.0.0.1/")?;
    /// let election = client.leader_election("billing:leader");
    /// let leadership = election.campaign("pod-a")?;   // waits to lead
    /// let state = client.fenced_hash("billing:state");
    /// for step in 0..10 {
    ///     if leadership.is_lost() {
    ///         break; // another may lead now: stop writing
    ///     }
    ///     let _ = state.set("step", &step.to_string(), leadership.term())?;
    /// }
    /// leadership.resign()?;
    /// # Ok(()) }
    /// ```
    LeaderElection
);

impl LeaderElection {
    /// The same election whose leaderships take `lease` as their own
    /// watchdog lease, as [`crate::LeaderElection::lease`]: a leader cut
    /// off is succeeded within about that long. A bad lease is refused
    /// when a campaign is made, before anything is sent.
    pub fn lease(self, lease: Duration) -> LeaderElection {
        LeaderElection {
            inner: self.inner.lease(lease),
            rt: self.rt,
        }
    }

    blocking_calls! { LeaderElection;
        /// Ends whoever leads, from outside (an operator's call): deletes
        /// the lock and announces the vacancy. A deposed leader blocked in
        /// [`Leadership::lost`] is told within a round trip; otherwise its
        /// watchdog finds the lock gone at its next renewal. Whether
        /// somebody led.
        fn depose(&self) -> bool;
        /// Who leads now, read in one call without campaigning; `None` when
        /// nobody does.
        fn leader(&self) -> Option<Holder>;
    }

    /// Waits until this candidate leads, then keeps the leadership alive
    /// with the watchdog until it is resigned or dropped.
    ///
    /// # Errors
    /// As [`crate::LeaderElection::campaign`] (a bad label is refused
    /// before anything is sent), and [`Error::Blocking`] when the call
    /// cannot be run.
    pub fn campaign(&self, label: &str) -> Result<Leadership> {
        let leadership = self.rt.run(self.inner.campaign(label))?;
        Ok(Leadership::new(leadership, &self.rt))
    }

    /// One attempt: `Some` when this candidate leads now, `None` when
    /// another leads.
    ///
    /// # Errors
    /// As [`crate::LeaderElection::try_campaign`], and [`Error::Blocking`]
    /// when the call cannot be run.
    pub fn try_campaign(&self, label: &str) -> Result<Option<Leadership>> {
        let leadership = self.rt.run(self.inner.try_campaign(label))?;
        Ok(leadership.map(|l| Leadership::new(l, &self.rt)))
    }

    /// Waits at most `wait` to lead: `None` when another still leads then.
    ///
    /// # Errors
    /// As [`crate::LeaderElection::campaign_for`], and [`Error::Blocking`]
    /// when the call cannot be run.
    pub fn campaign_for(&self, label: &str, wait: Duration) -> Result<Option<Leadership>> {
        let leadership = self.rt.run(self.inner.campaign_for(label, wait))?;
        Ok(leadership.map(|l| Leadership::new(l, &self.rt)))
    }

    /// Follows the election, as [`crate::LeaderElection::observe`]: an
    /// [`Iterator`] whose first item is who leads now, then one item per
    /// change, in order, none twice. Each `next` blocks until the next
    /// change; [`LeaderObserver::next_timeout`] waits at most a given time.
    pub fn observe(&self) -> LeaderObserver {
        LeaderObserver {
            inner: Some(self.inner.observe()),
            rt: Arc::clone(&self.rt),
        }
    }
}

/// The leadership of one campaign, from [`LeaderElection::campaign`]: the
/// blocking face of [`crate::Leadership`], held while it lives and kept by
/// the watchdog (on the client's runtime, while the thread works).
///
/// [`Leadership::resign`] resigns and reports the outcome. Dropping it
/// resigns too, as a dropped [`LockGuard`](super::LockGuard) releases: the
/// drop waits for the release at most the client's response timeout (3 s
/// by default; not at all on a thread with an async runtime's context),
/// then the release goes on in the background, resent until it gets
/// through or the lease runs out, and the resignation is announced to the
/// observers once it got through. A program that returns normally leaves
/// no leadership behind (see [the module docs](super#guards-and-drop)).
#[must_use = "the leadership is resigned as soon as it is dropped"]
#[clippy::has_significant_drop]
pub struct Leadership {
    /// `None` once resigned.
    inner: Option<crate::Leadership>,
    rt: Arc<Runtime>,
}

impl std::fmt::Debug for Leadership {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("blocking::Leadership")
            .field("inner", &self.inner)
            .finish()
    }
}

impl Leadership {
    fn new(inner: crate::Leadership, rt: &Arc<Runtime>) -> Leadership {
        Leadership {
            inner: Some(inner),
            rt: Arc::clone(rt),
        }
    }

    /// The term: higher than every earlier term and fencing token of this
    /// name. Send it with every write made as leader.
    pub fn term(&self) -> u64 {
        self.inner.as_ref().map_or(0, crate::Leadership::term)
    }

    /// The label this candidate campaigned with.
    pub fn label(&self) -> &str {
        self.inner.as_ref().map_or("", crate::Leadership::label)
    }

    /// The election's name.
    pub fn name(&self) -> &str {
        self.inner.as_ref().map_or("", crate::Leadership::name)
    }

    /// Whether the leadership is known to be over, as
    /// [`crate::Leadership::is_lost`]. It does not block: check it between
    /// steps of the work.
    pub fn is_lost(&self) -> bool {
        self.inner.as_ref().is_none_or(crate::Leadership::is_lost)
    }

    /// Blocks until the leadership ended without a resignation, as
    /// [`crate::Leadership::lost`]: the lock expired during a stall, was
    /// deposed (told within a round trip), or renewals could not get
    /// through in time. Never returns while it leads; from a thread of its
    /// own beside the work (the leadership is `Sync`), or use
    /// [`Leadership::lost_timeout`].
    ///
    /// # Errors
    /// [`Error::Blocking`] when the call cannot be run.
    pub fn lost(&self) -> Result<()> {
        match &self.inner {
            Some(inner) => self.rt.run(async {
                inner.lost().await;
                Ok(())
            }),
            None => Ok(()),
        }
    }

    /// Blocks at most `timeout` for the leadership to end, as
    /// [`Leadership::lost`]: whether it did.
    ///
    /// # Errors
    /// [`Error::Blocking`] when the call cannot be run.
    pub fn lost_timeout(&self, timeout: Duration) -> Result<bool> {
        match &self.inner {
            Some(inner) => self
                .rt
                .run(async { Ok(tokio::time::timeout(timeout, inner.lost()).await.is_ok()) }),
            None => Ok(true),
        }
    }

    /// Resigns: releases the lock, so that another candidate leads, and
    /// announces it to the observers, blocking until Redis answered both.
    ///
    /// # Errors
    /// As [`crate::Leadership::resign`] ([`Error::LeaseLost`] when the
    /// leadership had already ended, and nothing is sent), and
    /// [`Error::Blocking`] when the call cannot be run (the leadership is
    /// then resigned in the background, as by an async leadership's drop).
    pub fn resign(mut self) -> Result<()> {
        match self.inner.take() {
            Some(inner) => self.rt.run(inner.resign()),
            None => Ok(()),
        }
    }
}

impl Drop for Leadership {
    fn drop(&mut self) {
        if let Some(inner) = self.inner.take() {
            let name = inner.name().to_owned();
            self.rt
                .release_on_drop("leadership", name, inner.resign_dropped());
        }
    }
}

/// The changes of an election, from [`LeaderElection::observe`]: the
/// blocking face of [`crate::LeaderObserver`], an [`Iterator`] of
/// [`LeaderChange`]s.
///
/// Each [`next`](Iterator::next) blocks until the next change. A moment
/// without a connection is waited out, as by the async observer; any other
/// error is the last item, and after it the iterator ends (`None`, as
/// often as it is called). [`Error::Blocking`] (the call could not be run)
/// does not end it. It holds one subscription per client and name while
/// it lives, given up when it is dropped.
#[must_use = "an observer reports nothing unless iterated"]
pub struct LeaderObserver {
    /// `None` only while it is dropped.
    inner: Option<crate::LeaderObserver>,
    rt: Arc<Runtime>,
}

impl std::fmt::Debug for LeaderObserver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("blocking::LeaderObserver")
            .finish_non_exhaustive()
    }
}

impl LeaderObserver {
    /// Waits at most `timeout` for the next change: `Ok(None)` when none
    /// came by then. No change is lost to a timeout: the next call goes on
    /// where this one stopped.
    ///
    /// # Errors
    /// The error that ends the observer, as its iterator's last item; once
    /// it has ended, [`Error::Blocking`]. [`Error::Blocking`] also when the
    /// call cannot be run.
    pub fn next_timeout(&mut self, timeout: Duration) -> Result<Option<LeaderChange>> {
        let ended = || Error::Blocking("the leader observer has ended with an error".into());
        let Some(inner) = self.inner.as_mut() else {
            return Err(ended());
        };
        if inner.is_terminated() {
            return Err(ended());
        }
        match self
            .rt
            .run(async { Ok(tokio::time::timeout(timeout, inner.next()).await) })?
        {
            Err(_elapsed) => Ok(None),
            Ok(Some(change)) => change.map(Some),
            Ok(None) => Err(ended()),
        }
    }
}

impl Iterator for LeaderObserver {
    type Item = Result<LeaderChange>;

    fn next(&mut self) -> Option<Result<LeaderChange>> {
        let inner = self.inner.as_mut()?;
        if inner.is_terminated() {
            return None;
        }
        match self.rt.run(async { Ok(inner.next().await) }) {
            Ok(change) => change,
            Err(err) => Some(Err(err)),
        }
    }
}

impl std::iter::FusedIterator for LeaderObserver {}

impl Drop for LeaderObserver {
    fn drop(&mut self) {
        // Dropped in the client's runtime's context, so that its
        // subscription is given up on that runtime (outside any runtime,
        // the channel would only be forgotten, still subscribed).
        if let (Some(inner), Some(handle)) = (self.inner.take(), self.rt.handle()) {
            let _entered = handle.enter();
            drop(inner);
        }
    }
}
