//! A model of ferrisson's reentrant lock protocol on Redis, checked by the
//! [`stateright`] model checker: every interleaving of two clients'
//! acquires, renewals and releases, within bounds, over a network that
//! delays, reorders, duplicates and loses, while time passes.
//!
//! It models what the `lua/` scripts do to the keys, each script one atomic
//! step as Redis runs it ([`Server`]), and what a client does with their
//! replies ([`Client`]): the acquire latch that makes a resent acquire
//! count once, the unlock latch that makes a resent release release once,
//! the settle of an acquire whose replies were all lost, the watchdog's
//! renewals, the local lease deadline counted from the acquire's send, and
//! a dropped guard's release going on in the background while its owner
//! acquires again; and the lean protocol, which drops the latches where
//! the owner's gate is open ([`LockModel::lean`]).
//! `docs/model.md` says what is checked, within which bounds, and what is
//! not modelled.
//!
//! [`Mutation`]s break one rule each; the checker must then find the
//! failure that rule prevents (tests/check.rs). The conformance test
//! (tests/conformance/) holds [`Server`] and the other models to the real
//! scripts.

pub mod expirable;
pub mod fair;
pub mod rwlock;
pub mod semaphore;

/// Logical time, in ticks.
pub type Time = u8;

/// A client: 0 or 1 (or 2).
pub type ClientId = u8;

/// A request id: its client, and that client's count.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ReqId {
    pub client: ClientId,
    pub seq: u8,
}

/// An acquire latch's value: `1` (granted) or `x` (given up).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Latch {
    Granted,
    Cancelled,
}

/// A tick of a server's clock for its latches: those whose end (in
/// `ends`, by request) is past `now` stay, with their ends; the others are
/// gone.
pub(crate) fn expire_latches<V>(
    now: i32,
    latches: &mut Vec<(ReqId, V)>,
    ends: &mut Vec<(ReqId, i32)>,
) {
    ends.retain(|(_, end)| *end > now);
    latches.retain(|(req, _)| ends.iter().any(|(r, _)| r == req));
}

/// A give-back that ran closes its grant's latch (`x`, its TTL kept, as
/// the release scripts' `close_grant`): a settle of the grant run again
/// finds nothing more to give back.
pub(crate) fn close_grant(latches: &mut [(ReqId, Latch)], grant: ReqId) {
    for (req, latch) in latches.iter_mut() {
        if *req == grant {
            *latch = Latch::Cancelled;
        }
    }
}

mod lock;
pub use lock::*;
