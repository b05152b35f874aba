//! The lean protocol's gate: one per (lock, owner) of this process, which
//! every call of the owner that sends to the lock passes (see
//! `docs/model.md`, "The lean protocol").
//!
//! A call goes lean (no latch: a presence-based script bounded by its
//! deadline) only while nothing else of the owner's may change the lock:
//! no other call of it in flight, no work of it in the background (a
//! dropped guard's release, a give-back, a settle), no hold of it that a
//! guard owns, no lean send of it whose reply was lost and is not settled
//! yet, and no latched send of it whose reply was lost that may still run
//! (see [`Gates::quiet`]). (The model lets an owner go lean again after a
//! lost latched send at once, with a not-before the script checks; the
//! library waits instead, sending latched meanwhile, so its lean sends
//! carry no not-before: it does less than the model allows.)
//!
//! Only one call holds the gate's lean claim at a time, and a lost lean
//! send closes the gate to every call of the owner (lean or latched) until
//! a settle of it is answered: no clock says when it may open.

use std::sync::{Arc, LazyLock};

use tokio::sync::futures::Notified;
use tokio::sync::Notify;
use tokio::time::Instant;

use super::holds::PruneAt;
use crate::engine::watchdog::{HoldKey, HoldMap};

/// One owner's gate on one lock.
#[derive(Debug, Default)]
struct Gate {
    /// Calls of the owner in flight, each with its [`Ticket`].
    calls: u32,
    /// One of them is a lean send whose reply is awaited.
    lean: bool,
    /// Work of the owner going on in the background, each with its
    /// [`Busy`].
    background: u32,
    /// The latest deadline, in epoch ms by the server's clock, of the
    /// owner's lean sends whose replies were not read, not settled yet (0:
    /// none).
    lean_until: u64,
    /// When, by this clock, what those sends may have left has surely
    /// ended: the gate opens then even if no settle was answered (a
    /// settle cancelled with its runtime, or one that never got through).
    lean_expires: Option<Instant>,
    /// Holds of the owner that were leaked (`LockGuard::leak`), each as
    /// until when it may stand in Redis by this clock (asked anew: a
    /// watchdog's renewals move it on). While one may stand with no guard
    /// here to count it, no call of the owner goes lean (the entry is kept
    /// for it); one that has surely ended is forgotten.
    leaked: Vec<StandsUntil>,
    /// Until when, by this clock, a latched send of the owner whose reply
    /// was lost may still run (see [`Gates::quiet`]): no call of the owner
    /// goes lean before then.
    quiet_until: Option<Instant>,
    /// Told when the gate may open; made by the first claim that waits
    /// (most gates live and go with no waiter).
    changed: Option<Arc<Notify>>,
}

impl Gate {
    /// Whether nothing of the owner's is in the gate, so that its entry
    /// may go.
    fn idle(&self) -> bool {
        self.calls == 0
            && self.background == 0
            && self.lean_until == 0
            && self.leaked.is_empty()
            && self.quiet_until.is_none()
    }

    /// Forgets the leaked holds that have surely ended by `now`, and the
    /// lost latched sends that can no longer run.
    fn forget_ended(&mut self, now: Instant) {
        self.leaked.retain(|stands_until| (stands_until.0)() > now);
        if self.quiet_until.is_some_and(|until| until <= now) {
            self.quiet_until = None;
        }
    }
}

/// Until when a leaked hold may stand in Redis, by this clock.
pub(crate) struct StandsUntil(Box<dyn Fn() -> Instant + Send + Sync>);

impl StandsUntil {
    pub(crate) fn new(until: impl Fn() -> Instant + Send + Sync + 'static) -> StandsUntil {
        StandsUntil(Box::new(until))
    }
}

impl std::fmt::Debug for StandsUntil {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("StandsUntil").field(&(self.0)()).finish()
    }
}

/// When [`Gates::leaked`] or [`Gates::quiet`] next forgets the leaked
/// holds that have ended and the lost sends that can no longer run, and
/// the gates left idle by that.
static PRUNE_AT: PruneAt = PruneAt::new();

/// The gates of every (lock, owner) of this process. An owner's field
/// names its client's id, so the clients of a process share the map
/// without meeting in it.
#[derive(Debug, Default)]
pub(crate) struct Gates(HoldMap<Gate>);

static GATES: LazyLock<Gates> = LazyLock::new(Gates::default);

/// What a call got at the gate.
#[derive(Debug)]
pub(crate) enum Claim {
    /// It goes lean.
    Lean(Ticket),
    /// It goes latched.
    Latched(Ticket),
}

impl Claim {
    /// The call's ticket, whichever way it goes, given up with the claim.
    pub(crate) fn into_ticket(self) -> Ticket {
        match self {
            Claim::Lean(ticket) | Claim::Latched(ticket) => ticket,
        }
    }

    /// The call's ticket, whichever way it goes.
    #[cfg(test)]
    pub(crate) fn ticket(&self) -> &Ticket {
        match self {
            Claim::Lean(ticket) | Claim::Latched(ticket) => ticket,
        }
    }
}

/// A call of the owner in flight. Dropped, it leaves the gate (and gives
/// up its lean claim, if any).
#[derive(Debug)]
pub(crate) struct Ticket {
    gates: &'static Gates,
    key: HoldKey,
    lean: bool,
}

impl Ticket {
    /// Whether the call holds the gate's lean claim.
    #[cfg(test)]
    pub(crate) fn is_lean(&self) -> bool {
        self.lean
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        self.gates.leave(&self.key, |gate| {
            gate.calls = gate.calls.saturating_sub(1);
            if self.lean {
                gate.lean = false;
            }
        });
    }
}

/// Work of the owner in the background: while it lives, no call of the
/// owner goes lean.
#[derive(Debug)]
pub(crate) struct Busy {
    gates: &'static Gates,
    key: HoldKey,
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.gates.leave(&self.key, |gate| {
            gate.background = gate.background.saturating_sub(1);
        });
    }
}

impl Gates {
    /// The process's gates.
    pub(crate) fn get() -> &'static Gates {
        &GATES
    }

    /// Passes the gate of `key`: waits while a lean send of the owner is
    /// unanswered or a lost one is not settled, then claims it. The claim
    /// is lean when `lean` asks for it (the call may go lean: the kind,
    /// the server and the call allow it), no other call or background work
    /// of the owner is on, no leaked hold of it may stand, no lost latched
    /// send of it may run ([`Gates::quiet`]), and `holds_nothing` says the
    /// owner holds nothing of the lock here (read under the gate's lock);
    /// latched otherwise.
    ///
    /// # Cancel safety
    /// Cancel safe: a future dropped while it waits has claimed nothing.
    pub(crate) async fn claim(
        &'static self,
        key: &HoldKey,
        lean: bool,
        holds_nothing: impl Fn() -> bool,
    ) -> Claim {
        loop {
            let notify: Arc<Notify>;
            let changed: (std::pin::Pin<Box<Notified<'_>>>, Option<Instant>) = {
                let mut gate = self.0.entry(key.clone()).or_default();
                if gate.lean_expires.is_some_and(|at| Instant::now() >= at) {
                    gate.lean_until = 0;
                    gate.lean_expires = None;
                }
                if !gate.lean && gate.lean_until == 0 {
                    if !gate.leaked.is_empty() || gate.quiet_until.is_some() {
                        gate.forget_ended(Instant::now());
                    }
                    let lean = lean
                        && gate.calls == 0
                        && gate.background == 0
                        && gate.leaked.is_empty()
                        && gate.quiet_until.is_none()
                        && holds_nothing();
                    gate.calls += 1;
                    gate.lean = lean;
                    let ticket = Ticket {
                        gates: self,
                        key: key.clone(),
                        lean,
                    };
                    return match lean {
                        true => Claim::Lean(ticket),
                        false => Claim::Latched(ticket),
                    };
                }
                // Enabled before the entry's lock goes: a change made
                // between the look and the wait is not missed.
                notify = Arc::clone(gate.changed.get_or_insert_with(Default::default));
                let mut changed = Box::pin(notify.notified());
                changed.as_mut().enable();
                (changed, gate.lean_expires)
            };
            match changed {
                (changed, Some(at)) => {
                    let _ = tokio::time::timeout_at(at, changed).await;
                }
                (changed, None) => changed.await,
            }
        }
    }

    /// A hold of the owner was leaked, and may stand until `stands_until`
    /// says: no call of the owner goes lean until then. Past a number of
    /// gates, those whose leaked holds have all ended (and nothing else
    /// keeps them) go.
    pub(crate) fn leaked(&self, key: &HoldKey, stands_until: StandsUntil) {
        self.0
            .entry(key.clone())
            .or_default()
            .leaked
            .push(stands_until);
        self.prune_if_due();
    }

    /// A latched send of the owner lost its reply, and may still run until
    /// `until` by this clock: no call of the owner goes lean until then (a
    /// lean acquire would take the hold such a release then deletes, or
    /// that such an acquire took, as its own). Its latch keeps it from
    /// counting twice beside the latched calls meanwhile. Other owners,
    /// and the owner's other locks, are not held back.
    ///
    /// An acquire's lost send needs no `until`: it carries its deadline,
    /// and until its request is settled the request keeps the owner's
    /// background busy (see [`Gates::busy`]). A release's carries none (the
    /// fair lock's script takes none): when no send of the release wrote
    /// its unlock latch (none got through, or the owner held nothing), it
    /// may run, and release, as long as that latch would last, the latched
    /// protocol's own bound on a late send. (A latch written meets it.)
    pub(crate) fn quiet(&self, key: &HoldKey, until: Instant) {
        {
            let mut gate = self.0.entry(key.clone()).or_default();
            gate.quiet_until = Some(gate.quiet_until.map_or(until, |at| at.max(until)));
        }
        self.prune_if_due();
    }

    /// Past a number of gates, drops those whose leaked holds have all
    /// ended and whose lost sends can no longer run (and that nothing else
    /// keeps).
    fn prune_if_due(&self) {
        PRUNE_AT.prune_if_due(self.0.len(), || {
            let now = Instant::now();
            self.0.retain(|_, gate| {
                gate.forget_ended(now);
                !gate.idle()
            });
            self.0.len()
        });
    }

    /// Background work of the owner starts: no call of it goes lean until
    /// the [`Busy`] is dropped.
    pub(crate) fn busy(&'static self, key: &HoldKey) -> Busy {
        self.0.entry(key.clone()).or_default().background += 1;
        Busy {
            gates: self,
            key: key.clone(),
        }
    }

    /// A lean send of the owner that may change the lock goes, or went
    /// and its reply is lost, with this deadline (epoch ms by the
    /// server's clock): the gate is closed to every call of the owner
    /// until it is [settled](Gates::settled) (its reply read, or a settle
    /// of it answered), or, by this clock, until `expires`.
    pub(crate) fn close(&self, key: &HoldKey, deadline: u64, expires: Instant) {
        let mut gate = self.0.entry(key.clone()).or_default();
        gate.lean_until = gate.lean_until.max(deadline);
        gate.lean_expires = Some(gate.lean_expires.map_or(expires, |at| at.max(expires)));
    }

    /// The latest deadline of the owner's lost lean sends not settled yet
    /// (0: none): what a settle carries.
    pub(crate) fn lean_until(&self, key: &HoldKey) -> u64 {
        self.0.get(key).map_or(0, |gate| gate.lean_until)
    }

    /// A settle of the owner's lost lean sends up to `until` was answered:
    /// none of them can run any more, and the gate opens (unless a later
    /// one was lost meanwhile).
    pub(crate) fn settled(&self, key: &HoldKey, until: u64) {
        self.leave(key, |gate| {
            if gate.lean_until <= until {
                gate.lean_until = 0;
                gate.lean_expires = None;
            }
        });
    }

    /// Changes `key`'s gate by `change`, tells its waiters, and removes it
    /// once idle.
    fn leave(&self, key: &HoldKey, change: impl FnOnce(&mut Gate)) {
        let removed = self.0.remove_if_mut(key, |_, gate| {
            change(gate);
            if gate.quiet_until.is_some() {
                gate.forget_ended(Instant::now());
            }
            if let Some(changed) = &gate.changed {
                changed.notify_waiters();
            }
            gate.idle()
        });
        drop(removed);
    }

    /// How many gates are kept (tests).
    #[cfg(test)]
    fn len(&self) -> usize {
        self.0.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gates() -> &'static Gates {
        Box::leak(Box::default())
    }

    fn key(owner: &str) -> HoldKey {
        HoldKey::new(Arc::from("gate-test"), Arc::from(owner))
    }

    #[tokio::test]
    async fn one_call_at_a_time_goes_lean() {
        let gates = gates();
        let k = key("a");
        let first = gates.claim(&k, true, || true).await;
        assert!(first.ticket().is_lean());
        // A second call of the owner while the first is in flight: latched.
        // (It waits while the lean send is unanswered.)
        let second = tokio::spawn(async move { gates.claim(&key("a"), true, || true).await });
        tokio::task::yield_now().await;
        assert!(!second.is_finished());
        drop(first);
        let second = second.await.unwrap();
        assert!(second.ticket().is_lean(), "the gate is free again");
        drop(second);
        assert_eq!(gates.len(), 0, "an idle gate goes");
    }

    #[tokio::test]
    async fn a_call_beside_another_or_background_work_goes_latched() {
        let gates = gates();
        let k = key("b");
        let latched = gates.claim(&k, false, || true).await;
        assert!(!latched.ticket().is_lean());
        assert!(!gates.claim(&k, true, || true).await.ticket().is_lean());
        drop(latched);
        let busy = gates.busy(&k);
        assert!(!gates.claim(&k, true, || true).await.ticket().is_lean());
        drop(busy);
        assert!(!gates.claim(&k, true, || false).await.ticket().is_lean());
        assert!(gates.claim(&k, true, || true).await.ticket().is_lean());
    }

    #[tokio::test]
    async fn a_lost_lean_send_closes_the_gate_until_settled() {
        let gates = gates();
        let k = key("c");
        let claim = gates.claim(&k, true, || true).await;
        let far = Instant::now() + std::time::Duration::from_secs(3600);
        gates.close(&k, 1_000, far);
        drop(claim);
        let next = tokio::spawn(async move { gates.claim(&key("c"), true, || true).await });
        tokio::task::yield_now().await;
        assert!(!next.is_finished(), "no call goes while it is unsettled");
        assert_eq!(gates.lean_until(&k), 1_000);
        gates.settled(&k, 1_000);
        assert!(next.await.unwrap().ticket().is_lean());
        assert_eq!(gates.len(), 0);
    }

    #[tokio::test]
    async fn a_later_loss_is_not_opened_by_an_earlier_settle() {
        let gates = gates();
        let k = key("d");
        let far = Instant::now() + std::time::Duration::from_secs(3600);
        gates.close(&k, 1_000, far);
        gates.close(&k, 2_000, far);
        gates.settled(&k, 1_000);
        assert_eq!(gates.lean_until(&k), 2_000);
        gates.settled(&k, 2_000);
        assert!(gates.claim(&k, true, || true).await.ticket().is_lean());
    }

    #[tokio::test]
    async fn a_closed_gate_opens_when_what_it_waits_for_has_surely_ended() {
        let gates = gates();
        let k = key("h");
        let soon = Instant::now() + std::time::Duration::from_millis(50);
        gates.close(&k, 1_000, soon);
        // Never settled (a settle cancelled with its runtime): the claim
        // goes once `soon` is past.
        assert!(gates.claim(&k, true, || true).await.ticket().is_lean());
        assert!(Instant::now() >= soon);
    }

    #[tokio::test]
    async fn a_lost_latched_send_keeps_its_owner_latched_while_it_may_run() {
        let gates = gates();
        let k = key("i");
        let soon = Instant::now() + std::time::Duration::from_millis(50);
        gates.quiet(&k, soon);
        assert!(!gates.claim(&k, true, || true).await.ticket().is_lean());
        assert!(
            gates
                .claim(&key("j"), true, || true)
                .await
                .ticket()
                .is_lean(),
            "another owner is not held back"
        );
        tokio::time::sleep_until(soon).await;
        let claim = gates.claim(&k, true, || true).await;
        assert!(claim.ticket().is_lean(), "lean once the send cannot run");
        drop(claim);
        assert_eq!(gates.len(), 0, "and its gate goes");
    }

    #[tokio::test]
    async fn a_dropped_wait_claims_nothing() {
        let gates = gates();
        let k = key("e");
        let first = gates.claim(&k, true, || true).await;
        let waiting = tokio::spawn(async move { gates.claim(&key("e"), true, || true).await });
        tokio::task::yield_now().await;
        waiting.abort();
        assert!(waiting.await.unwrap_err().is_cancelled());
        drop(first);
        assert_eq!(gates.len(), 0);
    }

    #[tokio::test]
    async fn a_leaked_hold_keeps_its_owner_latched_until_it_has_ended() {
        let gates = gates();
        let k = key("f");
        let ends = Arc::new(std::sync::Mutex::new(
            Instant::now() + std::time::Duration::from_secs(60),
        ));
        let until = Arc::clone(&ends);
        gates.leaked(&k, StandsUntil::new(move || *until.lock().unwrap()));
        assert!(!gates.claim(&k, true, || true).await.ticket().is_lean());
        assert_eq!(gates.len(), 1, "kept for the leaked hold");
        assert!(gates
            .claim(&key("g"), true, || true)
            .await
            .ticket()
            .is_lean());
        // Its end (a lease run out, renewals stopped) has passed.
        *ends.lock().unwrap() = Instant::now();
        let claim = gates.claim(&k, true, || true).await;
        assert!(claim.ticket().is_lean(), "the ended hold is forgotten");
        drop(claim);
        assert_eq!(gates.len(), 0, "and its gate goes");
    }
}
