//! The semaphore's model checked exhaustively within its bounds, and each
//! mutation's counterexample found and printed.

mod common;

use ferrisson_model::semaphore::{Bounds, Mutation, SemaphoreModel};

const WITHIN_TOTAL: &str = "permits out never exceed the total";
const COUNTS: &str = "the count accounts for every permit";
const NO_WAITER_STUCK: &str = "no waiter waits forever";

/// Checks every state of `model`.
fn holds(model: SemaphoreModel) {
    let what = format!("{:?} (look-again: {})", model.bounds, model.look_again);
    common::holds(model, &what);
}

/// Checks `model` until `property` fails, and prints how.
fn found(model: SemaphoreModel, property: &'static str) {
    let what = format!("{} within {:?}", model.mutation, model.bounds);
    common::found(model, &what, property);
}

#[test]
#[ignore = "over 10 s: .ci/run runs it once, with --ignored"]
fn the_semaphore_holds_through_lost_replies_late_sends_and_waits_that_end() {
    holds(SemaphoreModel::new(Bounds::lost_replies(), Mutation::None));
}

#[test]
#[ignore = "over 10 s: .ci/run runs it once, with --ignored"]
fn the_semaphore_holds_while_requests_grow_old_and_latches_run_out() {
    holds(SemaphoreModel::new(Bounds::time(), Mutation::None));
}

#[test]
fn the_semaphore_holds_with_three_clients_and_two_permits() {
    holds(SemaphoreModel::new(Bounds::three_clients(), Mutation::None));
}

/// Pub/sub alone wakes every waiter when no message is lost.
#[test]
fn pub_sub_alone_wakes_every_waiter() {
    holds(SemaphoreModel::without_look_again(
        Bounds::waiting(),
        Mutation::None,
    ));
}

/// The look-again timer wakes a waiter whose message was lost.
#[test]
fn the_look_again_wakes_a_waiter_whose_message_was_lost() {
    let bounds = Bounds {
        losses: 1,
        ..Bounds::waiting()
    };
    holds(SemaphoreModel::new(bounds, Mutation::None));
}

/// The library's rule before the fix of 2026-11-27: an acquire latch of
/// two windows, for permits that never expire. A settle that comes later
/// than that after the grant (after a look-again of about two windows, or
/// a settle whose send was lost) finds no grant, and the permits a lost
/// send took are never given back. The latch now also covers the
/// look-again; a settle delayed longer by an outage is a limit.
#[test]
fn a_settle_after_the_latch_ran_out_never_gives_the_permits_back() {
    let bounds = Bounds {
        max_time: 3,
        look_again: 2,
        latch_ttl: 2,
        ..Bounds::time()
    };
    found(SemaphoreModel::new(bounds, Mutation::None), COUNTS);
}

/// Without the latch, a take whose reply was lost is counted wrong: a
/// resend takes again, or a settle finds nothing to give back.
#[test]
fn without_the_acquire_latch_a_take_whose_reply_was_lost_is_counted_wrong() {
    let bounds = Bounds {
        total: 2,
        ..Bounds::lost_replies()
    };
    let model = SemaphoreModel::new(bounds, Mutation::NoAcquireLatch);
    found(model, COUNTS);
}

/// The grant's latch, closed by the give-back, also keeps a resend of it
/// from counting again while the latch lives: the give-back's own latch
/// is what counts once the grant's ran out (or for a give-back that names
/// no grant, as one of permits never handed out).
#[test]
fn without_the_give_back_latch_more_permits_go_out_than_there_are() {
    let bounds = Bounds {
        acquires: 2,
        max_time: 2,
        latch_ttl: 1,
        ..Bounds::lost_replies()
    };
    let model = SemaphoreModel::new(bounds, Mutation::NoGiveBackLatch);
    found(model, WITHIN_TOTAL);
}

/// A settle run again from its start (a rescue at a runtime's end runs
/// restartable work again), under a fresh give-back id: the grant it gives
/// back must show nothing to give any more.
fn rerun(mutation: Mutation) -> SemaphoreModel {
    SemaphoreModel {
        reruns: 1,
        ..SemaphoreModel::new(
            Bounds {
                give_ups: 0,
                ..Bounds::lost_replies()
            },
            mutation,
        )
    }
}

#[test]
fn the_semaphore_holds_when_a_settle_runs_again_after_its_give_back() {
    holds(rerun(Mutation::None));
}

#[test]
fn a_give_back_that_leaves_its_grant_lets_a_settle_run_again_give_twice() {
    found(rerun(Mutation::GiveBackLeavesGrant), WITHIN_TOTAL);
}

#[test]
fn a_waiter_that_does_not_try_again_once_subscribed_sleeps_through_a_release() {
    let model =
        SemaphoreModel::without_look_again(Bounds::waiting(), Mutation::NoTryAfterSubscribe);
    found(model, NO_WAITER_STUCK);
}

#[test]
fn a_waiter_that_listens_only_after_its_refusal_sleeps_through_a_release() {
    let model = SemaphoreModel::without_look_again(Bounds::waiting(), Mutation::NotifyAfterTry);
    found(model, NO_WAITER_STUCK);
}

/// A limit of pub/sub: without the look-again timer, a lost message
/// leaves a waiter asleep while permits are free.
#[test]
fn a_limit_without_the_look_again_a_lost_message_leaves_a_waiter_asleep() {
    let bounds = Bounds {
        losses: 1,
        ..Bounds::waiting()
    };
    found(
        SemaphoreModel::without_look_again(bounds, Mutation::None),
        NO_WAITER_STUCK,
    );
}

/// The permit-expirable semaphore.
mod expirable {
    use ferrisson_model::expirable::{Bounds, ExpirableModel, Mutation};

    const WITHIN_TOTAL: &str = "permits out never exceed the total";
    const ADDS_UP: &str = "the count and the permits out add up to the total";

    fn found(model: ExpirableModel, property: &'static str) {
        let what = format!("{} within {:?}", model.mutation, model.bounds);
        super::common::found(model, &what, property);
    }

    fn holds(bounds: Bounds) {
        let model = ExpirableModel::new(bounds, Mutation::None);
        super::common::holds(model, &format!("{bounds:?}"));
    }

    #[test]
    fn the_expirable_semaphore_holds_through_leases_running_out_and_lost_replies() {
        holds(Bounds::leases());
    }

    #[test]
    fn the_expirable_semaphore_holds_with_three_clients_and_two_permits() {
        holds(Bounds::three_clients());
    }

    #[test]
    fn the_expirable_semaphore_holds_while_the_watchdog_renews_a_permit() {
        holds(Bounds::renewals());
    }

    #[test]
    fn a_renewal_that_puts_a_permit_back_out_breaks_the_count() {
        found(
            ExpirableModel::new(Bounds::renewals(), Mutation::RenewRecreates),
            ADDS_UP,
        );
    }

    #[test]
    fn a_renewed_lease_counted_from_the_reply_outlives_the_servers() {
        found(
            ExpirableModel::new(Bounds::renewals(), Mutation::RenewFromReply),
            WITHIN_TOTAL,
        );
    }

    #[test]
    fn without_the_acquire_latch_a_resent_take_takes_a_permit_no_id_names() {
        // Two permits: with one, the resend finds none left.
        let bounds = Bounds {
            total: 2,
            ..Bounds::leases()
        };
        found(
            ExpirableModel::new(bounds, Mutation::NoAcquireLatch),
            ADDS_UP,
        );
    }

    #[test]
    fn a_lease_counted_from_the_reply_outlives_the_servers() {
        found(
            ExpirableModel::new(Bounds::leases(), Mutation::LeaseFromReply),
            WITHIN_TOTAL,
        );
    }
}
