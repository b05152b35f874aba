//! The read-write lock's model checked exhaustively within its bounds, and
//! each mutation's counterexample found and printed.

mod common;

use ferrisson_model::rwlock::{Bounds, Mutation, RwLockModel};

const EXCLUSIVE: &str = "no writer beside another owner's hold";
const COUNTS: &str = "the hash counts what each owner holds";
const ENDS: &str = "every wait ends";

/// Checks every state within `bounds`.
fn holds(bounds: Bounds) {
    common::holds(
        RwLockModel::new(bounds, Mutation::None),
        &format!("{bounds:?}"),
    );
}

/// Checks `model` until `property` fails, and prints how.
fn found(model: RwLockModel, property: &'static str) {
    let what = format!("{} within {:?}", model.mutation, model.bounds);
    common::found(model, &what, property);
}

#[test]
fn the_rwlock_holds_through_lost_replies_downgrades_and_a_wait_that_ends() {
    holds(Bounds::two());
}

#[test]
fn the_rwlock_holds_with_three_clients() {
    holds(Bounds::three());
}

#[test]
fn a_read_granted_beside_any_writer_breaks_exclusion() {
    found(
        RwLockModel::new(Bounds::two(), Mutation::ReadBesideAnyWriter),
        EXCLUSIVE,
    );
}

#[test]
fn a_write_release_that_drops_the_writers_reads_loses_them() {
    found(
        RwLockModel::new(Bounds::two(), Mutation::WriteReleaseDropsReads),
        COUNTS,
    );
}

#[test]
fn a_release_that_publishes_nothing_leaves_a_waiter_asleep() {
    found(
        RwLockModel::new(Bounds::two(), Mutation::ReleaseWakesNobody),
        ENDS,
    );
}
