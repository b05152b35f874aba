//! The read-write lock's model checked exhaustively within its bounds, and
//! each mutation's counterexample found and printed.

use std::time::Instant;

use ferrisson_model::rwlock::{Bounds, Mutation, RwLockModel};
use stateright::{Checker, HasDiscoveries, Model};

const EXCLUSIVE: &str = "no writer beside another owner's hold";
const COUNTS: &str = "the hash counts what each owner holds";
const ENDS: &str = "every wait ends";

fn holds(bounds: Bounds) {
    let started = Instant::now();
    let checker = RwLockModel::new(bounds, Mutation::None)
        .checker()
        .spawn_dfs()
        .join();
    println!(
        "{bounds:?}: {} states ({} unique), depth {}, checked in {:.1?}",
        checker.state_count(),
        checker.unique_state_count(),
        checker.max_depth(),
        started.elapsed()
    );
    checker.assert_properties();
}

fn found(model: RwLockModel, property: &'static str) {
    let started = Instant::now();
    let what = format!("{} within {:?}", model.mutation, model.bounds);
    let checker = model
        .checker()
        .finish_when(HasDiscoveries::AnyOf([property].into()))
        .spawn_bfs()
        .join();
    let actions = checker.assert_any_discovery(property).into_actions();
    println!(
        "{what}: \"{property}\" fails after {} steps (found in {:.1?}):",
        actions.len(),
        started.elapsed()
    );
    for action in actions {
        println!("  {action:?}");
    }
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
