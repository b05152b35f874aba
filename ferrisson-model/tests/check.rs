//! The model checked exhaustively within its bounds, each mutation's
//! counterexample found and printed, and the limits the model documents
//! shown as counterexamples too.

mod common;

use ferrisson_model::{Bounds, LockModel, Mutation};
use stateright::{Checker, Expectation, Model};

const ONE_HOLDER: &str = "at most one holder";
const COUNTS: &str = "the server counts what its owner holds";
const IN_ORDER: &str = "the resource takes writes in the order of grants";

/// Checks every state within `bounds`, and says how many there were.
fn holds(bounds: Bounds) {
    holds_for(LockModel::new(bounds, Mutation::None));
}

/// Checks every state of `model`.
fn holds_for(model: LockModel) {
    let what = format!("{:?}", model.bounds);
    common::holds(model, &what);
}

#[test]
#[ignore = "over 10 s: .ci/run runs it once, with --ignored"]
fn the_protocol_holds_through_lost_replies_and_late_sends() {
    holds(Bounds::lost_replies());
}

#[test]
fn the_protocol_holds_through_leases_running_out_renewals_and_a_crash() {
    holds(Bounds::time());
}

#[test]
#[ignore = "over 10 s: .ci/run runs it once, with --ignored"]
fn the_protocol_holds_when_a_dropped_guards_release_meets_the_owners_next_acquire() {
    holds(Bounds::dropped());
}

/// A settle run again from its start (a rescue at a runtime's end runs
/// restartable work again) gives back under a fresh request id: the grant
/// it gives back must show nothing to give any more.
fn rerun(mutation: Mutation) -> LockModel {
    LockModel {
        reruns: 1,
        ..LockModel::new(Bounds::rerun(), mutation)
    }
}

#[test]
#[ignore = "over 10 s: .ci/run runs it once, with --ignored"]
fn the_protocol_holds_when_a_settle_runs_again_after_its_give_back() {
    holds_for(rerun(Mutation::None));
}

#[test]
fn a_give_back_that_leaves_its_grant_lets_a_settle_run_again_release_the_owners_next_hold() {
    found(rerun(Mutation::GiveBackLeavesGrant), ONE_HOLDER);
}

#[test]
#[ignore = "over 10 s: .ci/run runs it once, with --ignored"]
fn the_protocol_holds_when_requests_arrive_late_while_leases_run_out() {
    holds(Bounds::late());
}

#[test]
#[ignore = "over a minute: .ci/run runs it once, with --ignored"]
fn the_protocol_holds_when_one_owners_holds_have_different_leases() {
    holds(Bounds::mixed_leases());
}

#[test]
#[ignore = "over a minute: .ci/run runs it once, with --ignored"]
fn the_protocol_holds_when_resent_requests_arrive_late() {
    holds(Bounds::late_resends());
}

/// Checks every state of `model`, and says how many there were: every
/// property holds but `except` (a limit the bounds reach, shown apart).
fn holds_except(model: LockModel, except: &[&str]) {
    let what = format!("{:?} (not checked: {except:?})", model.bounds);
    let properties = model.properties();
    let checker = common::checked_whole(model, &what);
    for property in properties {
        if property.expectation == Expectation::Always && !except.contains(&property.name) {
            assert!(
                checker.discovery(property.name).is_none(),
                "\"{}\" fails",
                property.name
            );
        }
    }
}

/// Checks `model` until `property` fails, and prints how.
fn found(model: LockModel, property: &'static str) {
    let what = format!("{} within {:?}", model.mutation, model.bounds);
    common::found(model, &what, property);
}

#[test]
fn without_the_acquire_latch_a_resent_acquire_counts_twice() {
    let model = LockModel::new(Bounds::lost_replies(), Mutation::NoAcquireLatch);
    found(model, COUNTS);
}

/// Redisson's issue 7367 itself, replayed: an acquire whose reply was lost
/// is resent, both sends run, and without the latch the owner is counted
/// twice for the one hold it believes it has. Five steps; the search above
/// stops at the first run it meets (a settle that finds nothing to give
/// back), which is not always the shortest.
#[test]
fn without_the_acquire_latch_redissons_issue_7367_replays_in_five_steps() {
    use ferrisson_model::{counts_agree, Action};
    let model = LockModel::new(Bounds::lost_replies(), Mutation::NoAcquireLatch);
    let steps = [
        Action::Acquire(0),
        Action::Timeout(0),
        Action::Run(0),
        Action::Run(0),
        Action::Deliver(0),
    ];
    let mut state = model.init_states().remove(0);
    for step in steps {
        let mut possible = Vec::new();
        model.actions(&state, &mut possible);
        assert!(
            possible.contains(&step),
            "{step:?} is not possible in {state:?}"
        );
        state = model
            .next_state(&state, step)
            .expect("a step the model takes");
    }
    assert!(state.at_rest(), "{state:?}");
    assert_eq!((state.clients[0].count, state.server.count_of(0)), (1, 2));
    assert!(!counts_agree(&state));
}

#[test]
fn a_granted_latch_that_takes_again_lets_a_late_send_take_a_hold_nobody_owns() {
    let model = LockModel::new(Bounds::lost_replies(), Mutation::GrantedLatchTakesAgain);
    found(model, COUNTS);
}

#[test]
fn a_renewal_that_recreates_lets_a_lease_outlive_its_unlock() {
    let model = LockModel::new(Bounds::time(), Mutation::RenewRecreates);
    found(model, COUNTS);
}

#[test]
fn a_dropped_guards_release_resent_past_its_lease_releases_the_owners_next_hold() {
    let model = LockModel::new(Bounds::dropped(), Mutation::DroppedReleasePastLease);
    found(model, ONE_HOLDER);
}

#[test]
fn a_give_back_sent_past_its_grants_lease_releases_the_owners_next_hold() {
    let model = LockModel::new(Bounds::dropped(), Mutation::GiveBackPastLease);
    found(model, ONE_HOLDER);
}

/// A release that reaches Redis after its hold ran out, with no owner
/// check, takes the count off the next holder's hold: that holder believes
/// it holds a lock the server has let go. Found only when
/// requests may arrive late: with a window of one tick every request runs
/// before a hold can run out under it.
#[test]
fn a_release_that_ignores_its_owner_releases_the_next_holders_hold() {
    let model = LockModel::new(Bounds::late(), Mutation::ReleaseIgnoresOwner);
    found(model, COUNTS);
}

/// A renewal that reaches Redis after its hold ran out, with no owner
/// check, renews the next holder's hold and answers its sender that it
/// still holds.
#[test]
fn a_renewal_that_ignores_its_owner_keeps_a_holder_that_lost_the_lock() {
    let model = LockModel::new(Bounds::late(), Mutation::RenewIgnoresOwner);
    found(model, ONE_HOLDER);
}

/// A watchdog hold's release (a dropped guard's, in the background) made
/// while it was its owner's only hold carries the watchdog's lease; it
/// reaches Redis after the owner took the lock again with a longer lease
/// of its own. Setting the TTL it carries cuts that lease short: the key
/// expires while its holder still counts on it, and another takes it.
#[test]
fn a_release_that_shortens_the_ttl_cuts_a_longer_lease_of_its_owner_short() {
    let model = LockModel::new(Bounds::mixed_leases(), Mutation::ReleaseShortensTtl);
    found(model, ONE_HOLDER);
}

/// The same by a renewal sent before its hold's release and run after
/// the owner's next, longer, leased hold was granted.
#[test]
fn a_renewal_that_shortens_the_ttl_cuts_a_longer_lease_of_its_owner_short() {
    let model = LockModel::new(Bounds::mixed_leases(), Mutation::RenewShortensTtl);
    found(model, ONE_HOLDER);
}

/// The same by an acquire its caller gave up on (timed out, its settle
/// lost), run after the owner's next, longer, leased hold was granted: a
/// re-entry.
#[test]
fn a_re_entry_that_shortens_the_ttl_cuts_a_longer_lease_of_its_owner_short() {
    let model = LockModel::new(Bounds::mixed_leases(), Mutation::ReentryShortensTtl);
    found(model, ONE_HOLDER);
}

/// Without the unlock latch, a dropped guard's release resent after its
/// first send ran takes a second count: here the owner's next hold.
#[test]
fn without_the_unlock_latch_a_resent_release_counts_twice() {
    let model = LockModel::new(Bounds::dropped(), Mutation::NoUnlockLatch);
    found(model, ONE_HOLDER);
}

/// A fenced lock whose resource checks tokens: whatever the pauses and
/// leases running out, the resource takes writes in token order, and no
/// two holds share a token.
#[test]
fn a_resource_that_checks_tokens_takes_writes_in_the_order_of_grants() {
    holds_for(LockModel::fenced(Bounds::fencing(), true));
}

/// A limit of any lock on Redis: a master without persistence that
/// restarts empty (its replicas sync the empty data set from it) forgets
/// every hold, and another client takes the lock while the first still
/// believes it holds (until its next renewal finds the hold gone).
#[test]
fn a_limit_a_restart_that_loses_data_allows_two_holders() {
    found(
        LockModel::fenced(
            Bounds {
                restarts: 1,
                ..Bounds::fencing()
            },
            true,
        ),
        ONE_HOLDER,
    );
}

/// Through a restart that loses data, fencing keeps writes in the order
/// of grants: the token counter is gone with the data, but tokens are
/// floored by the server's clock, so the next holder's is higher than the
/// last one, and the resource refuses the first holder's late write.
#[test]
fn with_fencing_writes_stay_in_order_through_a_restart_that_loses_data() {
    holds_except(
        LockModel::fenced(
            Bounds {
                restarts: 1,
                ..Bounds::fencing()
            },
            true,
        ),
        &[ONE_HOLDER],
    );
}

/// Without the floor (a counter that starts over), the next holder's token
/// is no higher than the last one's, and the resource takes the first
/// holder's late write after the next holder's.
#[test]
fn when_tokens_start_over_after_a_restart_writes_go_out_of_order() {
    let mut model = LockModel::fenced(
        Bounds {
            restarts: 1,
            ..Bounds::fencing()
        },
        true,
    );
    model.mutation = Mutation::TokensStartOver;
    found(model, IN_ORDER);
}

/// A limit the lease alone cannot close: a holder that paused (or whose
/// write the network held) past its lease writes after the next holder
/// did. Without fencing the resource takes it; with fencing (above) it
/// refuses it.
#[test]
fn a_limit_a_paused_holder_writes_late_without_fencing() {
    found(LockModel::fenced(Bounds::fencing(), false), IN_ORDER);
}

/// With replica sync (every write on the replica before its reply), a
/// failover keeps one holder.
#[test]
fn with_replica_sync_a_failover_keeps_one_holder() {
    holds_for(LockModel::replicated(Bounds::failover(), true));
}

/// Replica sync as the client runs it: the grant's reply, then the
/// latch's touch and `WAIT` on one connection (a request of its own, which
/// a failover can break), with a resend answered from the latch, and one
/// failover. One replica.
#[test]
#[ignore = "about 3 minutes: .ci/run runs it once, with --ignored"]
fn with_replica_sync_resends_and_a_failover_keep_one_holder() {
    holds_for(LockModel::replicated(Bounds::replica_sync(), true));
}

/// Two replicas, both of which must acknowledge (`Replicas::AtLeast(2)`):
/// the failover promotes either, and the other syncs from it anew.
#[test]
#[ignore = "over 10 s: .ci/run runs it once, with --ignored"]
fn with_replica_sync_of_both_replicas_a_failover_keeps_one_holder() {
    let mut model = LockModel::replicated(Bounds::failover(), true);
    model.replicas = 2;
    model.wanted = 2;
    holds_for(model);
}

/// A limit of replica sync that waits for fewer replicas than there are
/// (`Replicas::AtLeast(1)` of two, or `Replicas::Online`'s one of those
/// online): a failover that promotes a replica that did not acknowledge
/// the grant lets the other client in. Sentinel and Cluster prefer the
/// replica with the highest offset, but promote another when that one is
/// unreachable.
#[test]
#[ignore = "over 10 s: .ci/run runs it once, with --ignored"]
fn a_limit_a_failover_to_a_replica_that_did_not_acknowledge_allows_two_holders() {
    let mut model = LockModel::replicated(Bounds::failover(), true);
    model.replicas = 2;
    model.wanted = 1;
    found(model, ONE_HOLDER);
}

/// `WAIT` alone counts only the writes of its own connection: sent on a
/// connection opened after a failover that lost the grant, it waits for
/// nothing (with `Replicas::Online` and no replica left, nothing at all)
/// and reports a sync that never happened; the other client then takes
/// the lock on the promoted replica.
#[test]
fn a_sync_without_the_latchs_touch_reports_a_sync_that_never_happened() {
    let mut model = LockModel::replicated(Bounds::failover(), true);
    model.wanted = 0;
    model.mutation = Mutation::SyncWithoutTouch;
    found(model, ONE_HOLDER);
}

/// `Replicas::Online`: one online replica must acknowledge, none when the
/// master has none (after the failover).
#[test]
fn with_replica_sync_of_the_online_replicas_a_failover_keeps_one_holder() {
    let mut model = LockModel::replicated(Bounds::failover(), true);
    model.wanted = 0;
    holds_for(model);
}

/// `Replicas::Online` where the replica is offline (a full sync) when the
/// first grant counts the online replicas, and comes online later: the
/// client keeps the count, but not a count of none, so a later grant
/// counts again, waits for the replica, and a failover to it keeps one
/// holder. (Sentinel and Cluster promote a replica that was online.)
fn online_model(mutation: Mutation) -> LockModel {
    let mut model = LockModel::replicated(
        Bounds {
            first_acquires: 2,
            max_time: 0,
            ..Bounds::failover()
        },
        true,
    );
    model.wanted = 0;
    model.offline = true;
    model.mutation = mutation;
    model
}

#[test]
#[ignore = "over a minute: .ci/run runs it once, with --ignored"]
fn with_replica_sync_of_the_online_replicas_a_replica_coming_online_keeps_one_holder() {
    holds_for(online_model(Mutation::None));
}

/// A give-back that releases whatever the owner holds, not only the grant
/// it gives back: a grant whose sync failed (a failover lost it) is given
/// back, the give-back reaches the new master late, after the owner took
/// the lock there again (no replica left to wait for), and releases that
/// hold; the other client takes the lock. The give-back checks the
/// grant's latch.
#[test]
#[ignore = "over 10 s: .ci/run runs it once, with --ignored"]
fn a_give_back_that_ignores_its_grants_latch_takes_the_owners_next_hold() {
    let mut model = online_model(Mutation::GiveBackIgnoresLatch);
    model.offline = false;
    found(model, ONE_HOLDER);
}

/// A client that trusts its count of no online replica (kept for a second,
/// and through a failover) skips the sync of its next grant: the replica
/// that came online meanwhile lacks it, is promoted, and the other client
/// takes the lock there.
#[test]
#[ignore = "over 10 s: .ci/run runs it once, with --ignored"]
fn trusting_a_kept_count_of_no_online_replica_allows_two_holders() {
    found(online_model(Mutation::TrustsCachedZero), ONE_HOLDER);
}

/// A limit: without replica sync, a failover that promotes a replica the
/// grant had not reached yet lets a second client take the lock while the
/// first believes it holds it.
#[test]
fn a_limit_a_failover_without_replica_sync_allows_two_holders() {
    found(LockModel::replicated(Bounds::failover(), false), ONE_HOLDER);
}

/// With replica sync, fencing holds through a failover: a grant the
/// promoted replica lacks was never answered, so its token was never used.
#[test]
#[ignore = "about a minute: .ci/run runs it once, with --ignored"]
fn with_replica_sync_fencing_holds_through_a_failover() {
    let mut model = LockModel::fenced(
        Bounds {
            failovers: 1,
            ..Bounds::fencing()
        },
        true,
    );
    model.replica = Some(true);
    holds_for(model);
}

/// A limit of fencing: a failover without replica sync can set the token
/// counter back (the promoted replica lacks the last grant), and the next
/// holder gets a token no higher than the last one: a resource that takes
/// equal or higher tokens takes the older holder's write after it.
#[test]
fn a_limit_fencing_tokens_go_back_after_a_failover_without_replica_sync() {
    let mut model = LockModel::fenced(
        Bounds {
            failovers: 1,
            ..Bounds::fencing()
        },
        true,
    );
    model.replica = Some(false);
    found(model, IN_ORDER);
}

/// The dropped-guard set with requests that reach Redis up to two ticks
/// after their send, and the dropped guard's release not resent.
fn delayed_release() -> Bounds {
    Bounds {
        window: 2,
        latch_ttl: 4,
        max_time: 3,
        drop_resends: 0,
        ..Bounds::dropped()
    }
}

/// A limit of the rule that a release is sent only while its hold's lease
/// runs: one sent in time but delayed on its way (a network that holds it,
/// a Redis paused) past the hold's end still takes the owner's next hold.
/// The checks above let a request reach Redis within one tick of its send
/// (`window: 1`); here within two.
#[test]
#[ignore = "over 10 s: .ci/run runs it once, with --ignored"]
fn a_limit_a_release_delayed_past_its_holds_end_takes_the_owners_next_hold() {
    let bounds = delayed_release();
    found(LockModel::new(bounds, Mutation::None), ONE_HOLDER);
}

/// A limit, not a bug: a request the transport itself delivers twice
/// (TCP does not) after its caller was refused and went away is not
/// settled, and may take a hold nobody owns until its lease ends.
#[test]
fn a_limit_a_request_the_transport_duplicates_may_take_an_orphan_hold() {
    let bounds = Bounds {
        resends: 0,
        duplicates: 1,
        ..Bounds::lost_replies()
    };
    found(LockModel::new(bounds, Mutation::None), COUNTS);
}

/// The lease is what keeps one holder: with a lease that outlives the
/// local deadline (a clock that runs slow, say), two clients believe they
/// hold at once. Shown here by a client whose local lease is one tick
/// longer than the server's TTL.
#[test]
fn a_limit_a_local_lease_longer_than_the_servers_allows_two_holders() {
    let mut model = LockModel::new(Bounds::time(), Mutation::None);
    model.local_lease_slack = 1;
    found(model, ONE_HOLDER);
}

/// The limit above closed: a release that carries the end of its hold's
/// lease as its deadline, checked by the server's clock, changes nothing
/// when it reaches Redis later, and the owner's next hold stays.
#[test]
#[ignore = "over 10 s: .ci/run runs it once, with --ignored"]
fn a_release_that_checks_its_leases_end_never_takes_the_owners_next_hold() {
    let bounds = delayed_release();
    holds_for(LockModel {
        release_deadlines: true,
        ..LockModel::new(bounds, Mutation::None)
    });
}
