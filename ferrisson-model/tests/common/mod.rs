//! What each model check of these tests does: a model checked whole, or
//! until one property fails, and what was found printed (`--nocapture`
//! shows it).

use std::fmt::Debug;
use std::hash::Hash;
use std::time::Instant;

use stateright::{Checker, HasDiscoveries, Model};

/// Checks every state of `model` (`what` names it in the line printed),
/// says how many there were, and returns the checker to assert on.
pub fn checked_whole<M>(model: M, what: &str) -> impl Checker<M>
where
    M: Model + Send + Sync + 'static,
    M::State: Hash + Send + Sync + Clone + PartialEq + Debug + 'static,
    M::Action: Clone + PartialEq + Debug,
{
    let started = Instant::now();
    let checker = model.checker().spawn_dfs().join();
    println!(
        "{what}: {} states ({} unique), depth {}, checked in {:.1?}",
        checker.state_count(),
        checker.unique_state_count(),
        checker.max_depth(),
        started.elapsed()
    );
    checker
}

/// Checks every state of `model`: every property holds.
pub fn holds<M>(model: M, what: &str)
where
    M: Model + Send + Sync + 'static,
    M::State: Hash + Send + Sync + Clone + PartialEq + Debug + 'static,
    M::Action: Clone + PartialEq + Debug,
{
    checked_whole(model, what).assert_properties();
}

/// Checks `model` (`what`: its mutation and bounds) until `property`
/// fails, and prints the steps that break it.
pub fn found<M>(model: M, what: &str, property: &'static str)
where
    M: Model + Send + Sync + 'static,
    M::State: Hash + Send + Sync + Clone + PartialEq + Debug + 'static,
    M::Action: Clone + PartialEq + Debug,
{
    let started = Instant::now();
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
