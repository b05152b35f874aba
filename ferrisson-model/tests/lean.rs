//! The lean protocol (no latch where the owner's gate is open) checked
//! within the reentrant lock model's bounds, and each of its guards shown
//! by the mutation that removes it.

mod common;

use ferrisson_model::{Bounds, LockModel, Mutation};

const ONE_HOLDER: &str = "at most one holder";
const COUNTS: &str = "the server counts what its owner holds";

/// Checks every state of the lean `model`.
fn holds(model: LockModel) {
    let what = format!("lean within {:?}", model.bounds);
    common::holds(model, &what);
}

/// Checks the lean `model` until `property` fails, and prints how.
fn found(model: LockModel, property: &'static str) {
    let what = format!("lean, {} within {:?}", model.mutation, model.bounds);
    common::found(model, &what, property);
}

/// Lost replies with a copy of a lost send: one tick, so a lost lean
/// acquire can be settled after its deadline.
fn lost_and_copied() -> Bounds {
    Bounds {
        duplicates: 1,
        ..Bounds::lost_replies()
    }
}

/// Lost replies and the owner's next acquire: the first client acquires
/// twice, with a resend per call, no renewal, one tick.
fn lost_then_again() -> Bounds {
    Bounds {
        first_acquires: 2,
        renewals: 0,
        ..Bounds::lost_replies()
    }
}

/// A caller that leaves its lean acquire, and the owner's next acquire
/// (no resend, two ticks).
fn cancelled() -> Bounds {
    Bounds {
        cancels: 1,
        drops: 0,
        drop_resends: 0,
        ..Bounds::dropped()
    }
}

/// A caller that leaves its lean acquire or release, with a resend per
/// call: the settle of a cancelled release, and its resend (one acquire
/// each, one tick; with the owner's next acquire too, over ten minutes).
fn cancelled_and_resent() -> Bounds {
    Bounds {
        resends: 1,
        max_time: 1,
        first_acquires: 1,
        ..cancelled()
    }
}

/// A dropped guard's release that is lost and not resent, a caller that
/// leaves its lean acquire, and the owner's next acquire, with a lease
/// over twice the window and time for it to run out: the next acquire's
/// settle may find the hold the dropped guard left standing.
fn stale() -> Bounds {
    Bounds {
        drop_resends: 0,
        cancels: 1,
        max_time: 3,
        lease: 3,
        // The client's rule: the longer of the lease and the window, plus
        // the window.
        latch_ttl: 4,
        ..Bounds::dropped()
    }
}

#[test]
#[ignore = "about 20 s: .ci/run runs it once, with --ignored"]
fn the_lean_protocol_holds_when_a_settle_finds_a_hold_left_standing() {
    holds(LockModel::lean(stale(), Mutation::None));
}

/// The settle adopts the hold a dropped guard left standing without
/// raising its TTL: it expires while the client still counts on it, and
/// the other client takes the lock.
#[test]
fn a_lean_settle_that_keeps_the_ttl_of_a_hold_left_standing_allows_two_holders() {
    found(
        LockModel::lean(stale(), Mutation::LeanSettleKeepsTtl),
        ONE_HOLDER,
    );
}

#[test]
fn the_lean_protocol_holds_through_leases_running_out_renewals_and_a_crash() {
    holds(LockModel::lean(Bounds::time(), Mutation::None));
}

#[test]
#[ignore = "about a minute: .ci/run runs it once, with --ignored"]
fn the_lean_protocol_holds_through_lost_replies_and_copies_of_lost_sends() {
    holds(LockModel::lean(lost_and_copied(), Mutation::None));
}

#[test]
#[ignore = "about 30 s: .ci/run runs it once, with --ignored"]
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
#[ignore = "over two minutes: .ci/run runs it once, with --ignored"]
fn the_lean_protocol_holds_when_lost_replies_meet_the_owners_next_acquire() {
    holds(LockModel::lean(lost_then_again(), Mutation::None));
}

/// With lean calls that reach Redis past their deadline (`-5`), and a
/// first settle of every lost lean release.
fn late_lean(bounds: Bounds, mutation: Mutation) -> LockModel {
    LockModel {
        late_lean: true,
        settle_lost_releases: true,
        ..LockModel::lean(bounds, mutation)
    }
}

/// With a first settle of every lost lean release, whatever the resend
/// budget (a client that gives up on one starts nothing more: the other
/// sets let it, which keeps them small).
fn settling(bounds: Bounds) -> LockModel {
    LockModel {
        settle_lost_releases: true,
        ..LockModel::lean(bounds, Mutation::None)
    }
}

#[test]
fn the_lean_protocol_holds_when_a_caller_leaves_its_acquire() {
    holds(LockModel::lean(cancelled(), Mutation::None));
}

/// The settle of a lost release (here a cancelled one), and lean calls
/// that reach Redis past their deadline.
#[test]
#[ignore = "about 40 s: .ci/run runs it once, with --ignored"]
fn the_lean_protocol_holds_when_a_caller_leaves_and_lean_calls_arrive_past_their_deadline() {
    holds(late_lean(cancelled(), Mutation::None));
}

/// The settle of every lost release, through leases running out,
/// renewals and a crash (two ticks).
#[test]
#[ignore = "about 40 s: .ci/run runs it once, with --ignored"]
fn the_lean_protocol_holds_when_every_lost_release_is_settled() {
    holds(settling(Bounds {
        max_time: 2,
        ..Bounds::time()
    }));
}

#[test]
#[ignore = "about two minutes: .ci/run runs it once, with --ignored"]
fn the_lean_protocol_holds_when_one_owners_holds_have_different_leases() {
    holds(LockModel::lean(Bounds::mixed_leases(), Mutation::None));
}

#[test]
#[ignore = "about 30 s: .ci/run runs it once, with --ignored"]
fn the_lean_protocol_holds_when_a_caller_leaves_and_calls_are_resent() {
    holds(late_lean(cancelled_and_resent(), Mutation::None));
}

/// A lean release that reaches Redis past its deadline changes nothing
/// (`-5`): read as released, the hold stands while its owner counts none.
#[test]
fn a_lean_release_past_its_deadline_read_as_released_leaves_a_hold_nobody_counts() {
    found(
        late_lean(Bounds::time(), Mutation::LeanTooLateReleased),
        COUNTS,
    );
}

#[test]
fn a_lean_acquire_that_counts_counts_a_copy_of_a_lost_send_twice() {
    found(
        LockModel::lean(lost_and_copied(), Mutation::LeanCounts),
        COUNTS,
    );
}

/// The client's clock is not trusted to have waited for the lost sends'
/// deadline: the settle script checks the server's.
#[test]
fn a_lean_settle_that_ignores_the_servers_clock_lets_a_late_copy_take_a_hold_nobody_owns() {
    found(
        LockModel::lean(lost_and_copied(), Mutation::LeanSettleNoClockCheck),
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

/// A dropped guard's release with every reply lost, and no time passing:
/// the owner's next acquires meet it while it may still run.
fn lost_latched_release() -> Bounds {
    Bounds {
        first_acquires: 3,
        max_time: 0,
        ..Bounds::dropped()
    }
}

/// A latched release whose replies were all lost may still run until its
/// deadline: a lean acquire that finds its hold before then loses it.
#[test]
fn a_gate_that_ignores_lost_sends_lets_a_lost_release_take_a_lean_holders_hold() {
    found(
        LockModel::lean(lost_latched_release(), Mutation::LeanGateIgnoresLostSends),
        ONE_HOLDER,
    );
}

/// A latched release whose replies were all lost raises the owner's
/// not-before as a lean send's does: without it, a lean acquire sent once
/// the release is given up finds the hold the release then takes away.
#[test]
fn a_lost_latched_send_that_leaves_the_not_before_lets_a_lost_release_take_a_lean_hold() {
    found(
        LockModel::lean(lost_latched_release(), Mutation::QuietOnLostLeanSendsOnly),
        ONE_HOLDER,
    );
}

/// A lean release whose reply was lost and never settled may still run:
/// the owner's next acquire, sent at once, takes a hold it then deletes.
#[test]
fn an_acquire_that_does_not_wait_for_a_lost_lean_release_loses_its_hold_to_it() {
    found(
        LockModel::lean(Bounds::dropped(), Mutation::NoWaitAfterLostLean),
        ONE_HOLDER,
    );
}

/// The settle to release checks the server's clock, as the settle to take
/// does: without it, a lost lean release still on its way deletes the
/// owner's next hold.
#[test]
fn a_lean_settle_to_release_that_ignores_the_servers_clock_loses_the_next_hold() {
    found(
        LockModel::lean(lost_then_again(), Mutation::LeanReleaseSettleNoClockCheck),
        ONE_HOLDER,
    );
}

/// The gate's own guard, without the scripts' not-before's help: a
/// dropped guard's release on its way takes the hold a lean acquire found.
#[test]
fn a_gate_that_ignores_a_dropped_guards_release_lets_it_take_a_lean_holders_hold() {
    found(
        LockModel::lean(Bounds::dropped(), Mutation::LeanGateIgnoresBackground),
        ONE_HOLDER,
    );
}

/// A renewal carries no deadline (`renew.lua` takes none): let one run at
/// any time after its send, and the lean protocol still holds. A late
/// renewal raises the TTL of a hold its owner still has, and nothing else.
#[test]
fn the_lean_protocol_holds_when_renewals_run_late() {
    holds(LockModel {
        late_renewals: true,
        ..LockModel::lean(Bounds::time(), Mutation::None)
    });
}

/// The same where one owner's holds have different leases (the gate's
/// not-before does not wait for a lost renewal).
#[test]
#[ignore = "up to four minutes: .ci/run runs it once, with --ignored"]
fn the_lean_protocol_holds_when_renewals_run_late_beside_holds_with_other_leases() {
    holds(LockModel {
        late_renewals: true,
        ..LockModel::lean(Bounds::mixed_leases(), Mutation::None)
    });
}
