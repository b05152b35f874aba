//! Every retry-safe request of the crate, and the one loop that resends
//! them ([`resend()`], each request's [`Resend`] policy as data).
//!
//! Every acquire script takes an *acquire latch* key named by its request
//! id ([`latch`]): a resend of the same request counts once, and a request
//! whose replies were all lost is settled by that latch ([`settle`]). The
//! locks and the semaphores send their acquires alike ([`acquire`]); what a
//! grant took, and its one give-back, is the [`Taken`] of each
//! synchronizer ([`give_back`]), and a give-back is resent until it gets
//! through or what it gives back has surely ended.

pub(crate) mod acquire;
pub(crate) mod give_back;
pub(crate) mod latch;
pub(crate) mod release;
pub(crate) mod resend;
pub(crate) mod settle;

pub(crate) use acquire::{late, send, Answer, Request, RequestSlot, Sending, LATE};
pub(crate) use give_back::{GiveBack, GrantedIn, KeepsLatched, Lasts, Taken, Unclaimed};
pub(crate) use latch::Latch;
pub(crate) use resend::{resend, Resend};
