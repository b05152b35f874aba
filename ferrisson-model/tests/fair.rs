//! The fair lock's queue checked exhaustively within its bounds, and each
//! mutation's counterexample found and printed.

mod common;

use ferrisson_model::fair::{Bounds, FairModel, Mutation};

/// Checks `model` until `property` fails, and prints how.
fn found(model: FairModel, property: &'static str) {
    let what = format!("{} within {:?}", model.mutation, model.bounds);
    common::found(model, &what, property);
}

/// Checks every state within `bounds`.
fn holds(bounds: Bounds) {
    common::holds(
        FairModel::new(bounds, Mutation::None),
        &format!("{bounds:?}"),
    );
}

#[test]
fn the_fair_queue_serves_in_order_and_wakes_every_waiter() {
    holds(Bounds::three());
}

#[test]
fn the_fair_queue_holds_with_two_acquires_each_and_two_waits_that_end_early() {
    holds(Bounds::twice());
}

#[test]
fn a_newcomer_that_barges_in_overtakes_the_line() {
    found(
        FairModel::new(Bounds::three(), Mutation::Barging),
        "first come, first served",
    );
}

#[test]
fn a_first_in_line_that_leaves_without_waking_the_next_leaves_it_asleep() {
    found(
        FairModel::new(Bounds::three(), Mutation::LeaveWakesNobody),
        "every waiter is served or gone",
    );
}

#[test]
fn a_wait_that_leaves_before_its_attempts_reply_is_put_back_in_line() {
    found(
        FairModel::new(Bounds::three(), Mutation::LeaveBeforeReply),
        "every waiter is served or gone",
    );
}
