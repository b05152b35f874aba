//! The lean protocol (no latch where the owner's gate is open) checked
//! within the reentrant lock model's bounds, and each of its guards shown
//! by the mutation that removes it.

use std::time::Instant;

use ferrisson_model::{Bounds, LockModel, Mutation};
use stateright::{Checker, HasDiscoveries, Model};

const ONE_HOLDER: &str = "at most one holder";
const COUNTS: &str = "the server counts what its owner holds";

/// Checks every state of `model`, and says how many there were.
fn holds(model: LockModel) {
    let started = Instant::now();
    let bounds = model.bounds;
    let checker = model.checker().spawn_dfs().join();
    println!(
        "lean within {bounds:?}: {} states ({} unique), depth {}, checked in {:.1?}",
        checker.state_count(),
        checker.unique_state_count(),
        checker.max_depth(),
        started.elapsed()
    );
    checker.assert_properties();
}

/// Checks `model` until `property` fails, and prints how.
fn found(model: LockModel, property: &'static str) {
    let started = Instant::now();
    let what = format!("{} within {:?}", model.mutation, model.bounds);
    let checker = model
        .checker()
        .finish_when(HasDiscoveries::AnyOf([property].into()))
        .spawn_bfs()
        .join();
    let actions = checker.assert_any_discovery(property).into_actions();
    println!(
        "lean, {what}: \"{property}\" fails after {} steps (found in {:.1?}):",
        actions.len(),
        started.elapsed()
    );
    for action in actions {
        println!("  {action:?}");
    }
}

/// Lost replies with a copy of a lost send: one tick, so a lost lean
/// acquire is settled after its deadline.
fn lost_and_copied() -> Bounds {
    Bounds {
        duplicates: 1,
        ..Bounds::lost_replies()
    }
}

#[test]
fn the_lean_protocol_holds_through_leases_running_out_renewals_and_a_crash() {
    holds(LockModel::lean(Bounds::time(), Mutation::None));
}

#[test]
fn the_lean_protocol_holds_through_lost_replies_and_copies_of_lost_sends() {
    holds(LockModel::lean(lost_and_copied(), Mutation::None));
}

#[test]
fn the_lean_protocol_holds_when_a_dropped_guards_release_meets_the_owners_next_acquire() {
    holds(LockModel::lean(Bounds::dropped(), Mutation::None));
}

#[test]
fn the_lean_protocol_holds_when_requests_arrive_late_while_leases_run_out() {
    holds(LockModel::lean(Bounds::late(), Mutation::None));
}

#[test]
fn the_lean_protocol_holds_when_resent_requests_arrive_late() {
    holds(LockModel::lean(Bounds::late_resends(), Mutation::None));
}

#[test]
#[ignore = "about a minute: .ci/run runs it once, with --ignored"]
fn the_lean_protocol_holds_when_one_owners_holds_have_different_leases() {
    holds(LockModel::lean(Bounds::mixed_leases(), Mutation::None));
}

#[test]
fn a_lean_acquire_that_counts_counts_a_copy_of_a_lost_send_twice() {
    found(
        LockModel::lean(lost_and_copied(), Mutation::LeanCounts),
        COUNTS,
    );
}

#[test]
fn a_lean_acquire_settled_before_its_deadline_lets_a_late_copy_take_a_hold_nobody_owns() {
    found(
        LockModel::lean(lost_and_copied(), Mutation::LeanSettleEarly),
        COUNTS,
    );
}

#[test]
fn lean_scripts_without_a_deadline_let_a_lost_acquire_run_after_its_settle() {
    found(
        LockModel::lean(lost_and_copied(), Mutation::LeanNoDeadline),
        COUNTS,
    );
}

#[test]
fn a_lean_send_with_a_hidden_resend_takes_a_hold_nobody_owns() {
    found(
        LockModel::lean(lost_and_copied(), Mutation::HiddenResend),
        COUNTS,
    );
}

#[test]
fn without_the_gate_a_lean_acquire_takes_a_hold_a_dropped_guards_release_then_takes_away() {
    found(
        LockModel::lean(Bounds::dropped(), Mutation::NoLeanGate),
        ONE_HOLDER,
    );
}
