//! The model's steps: what a client sends, reads and does on a timeout.

use super::*;

/// The reentrant lock's protocol, as a [`Model`].
#[derive(Clone, Debug)]
pub struct LockModel {
    pub bounds: Bounds,
    pub mutation: Mutation,
    /// Ticks a client's local lease runs past the server's TTL: 0, as the
    /// client counts it (from the acquire's first send); more shows what
    /// the lease is for.
    pub local_lease_slack: Time,
    /// A fenced lock (tokens on every grant).
    pub fenced: bool,
    /// The resource takes a write only if its token is at least the
    /// highest it took (fencing); otherwise it takes every write.
    pub resource_checks_tokens: bool,
    /// Replicas: `Some(true)` with replica sync (after a grant, the
    /// client touches its latch and sends `WAIT` on that connection; a
    /// grant too few replicas acknowledged is given back), `Some(false)`
    /// with asynchronous replication only.
    pub replica: Option<bool>,
    /// How many replicas (with `replica`).
    pub replicas: u8,
    /// How many replicas must acknowledge a grant (`Replicas::AtLeast`);
    /// 0: one of those online, and none when the master has none
    /// (`Replicas::Online`).
    pub wanted: u8,
    /// The first replica starts offline (syncing) and comes online later:
    /// with `Replicas::Online`, the client counts the online replicas as
    /// the library does (`ROLE`, a count kept per client through
    /// failovers) rather than all of them.
    pub offline: bool,
    /// The lean protocol: an acquire and a release go without latches,
    /// presence-based and bounded by their deadlines, when the owner's
    /// gate is open (it holds nothing else, has no dropped guard's release
    /// on its way, and left no hold standing), else latched as before. On
    /// one server only (not with replicas, nor for the fenced lock, whose
    /// token the latch keeps).
    pub lean: bool,
    /// Renewals carry no deadline (`renew.lua` takes none): one may run at
    /// any time after its send, not only within the window.
    pub late_renewals: bool,
    /// A lean call whose reply its client still awaits may reach Redis
    /// past its deadline: the script answers `TooLate` and changes nothing
    /// (otherwise it never runs after its deadline, as every request).
    pub late_lean: bool,
    /// A lost lean release gets its first settle whatever the resend
    /// budget, as a lost lean acquire does (the library settles until it
    /// is answered). Off, only within the budget: a client out of it gives
    /// up and starts nothing more, which keeps the bound sets small where
    /// this is not what they check.
    pub settle_lost_releases: bool,
    /// A release carries the end of its hold's lease as its deadline, which
    /// the script checks by the server's clock: one that reaches Redis
    /// later changes nothing (the owner's next hold may be there).
    pub release_deadlines: bool,
    /// Settles run again, in all: after a give-back is answered, its
    /// client may run the settle of the grant once more from its start,
    /// as a rescue at a runtime's end runs restartable work again. The
    /// give-back then goes again under a fresh request id, in the
    /// background, its reply not read (the settle before it is left out:
    /// the give-back's script checks the grant's latch as that does).
    pub reruns: u8,
}

impl LockModel {
    pub fn new(bounds: Bounds, mutation: Mutation) -> Self {
        LockModel {
            bounds,
            mutation,
            local_lease_slack: 0,
            fenced: false,
            resource_checks_tokens: false,
            replica: None,
            replicas: 1,
            wanted: 1,
            offline: false,
            lean: false,
            late_renewals: false,
            late_lean: false,
            settle_lost_releases: false,
            release_deadlines: false,
            reruns: 0,
        }
    }

    /// The lean protocol within `bounds`, with `mutation`. Its releases
    /// carry their hold's lease's end as their deadline
    /// (`release_deadlines`), lean or latched: a lean call answered
    /// `NotYet` or `TooLate` goes latched, and a latched release whose
    /// replies were lost, running after its hold's lease ran out, would
    /// otherwise take the owner's next hold (the latched protocol's
    /// delayed-release limit).
    pub fn lean(bounds: Bounds, mutation: Mutation) -> Self {
        LockModel {
            lean: true,
            release_deadlines: true,
            ..LockModel::new(bounds, mutation)
        }
    }

    /// Whether `id`'s next acquire or release goes lean: the lean protocol
    /// on one server, for a lock with no token, and no dropped guard's
    /// release of the owner's on its way (the mutations: always). The
    /// owner's other sends whose replies it never read are waited for by
    /// the server's clock: the lean request carries their latest deadline
    /// as its not-before ([`Self::not_yet`]).
    pub(super) fn lean_gate_open(&self, state: &State, id: ClientId) -> bool {
        let c = &state.clients[id as usize];
        self.lean
            && self.replica.is_none()
            && !self.fenced
            && match self.mutation {
                Mutation::NoLeanGate | Mutation::LeanGateIgnoresBackground => true,
                _ => c.background.is_none(),
            }
    }

    /// Whether a lean acquire or release with this not-before, run at
    /// `now`, answers `NotYet` and changes nothing: the server's clock is
    /// not past it (the mutations: never).
    pub(super) fn not_yet(&self, now: Time, not_before: Time) -> bool {
        !matches!(
            self.mutation,
            Mutation::NoLeanGate | Mutation::LeanGateIgnoresLostSends
        ) && now < not_before
    }

    /// What a lean request run at `now` answers before it looks at the
    /// lock, changing nothing (`None`: it goes on): `TooLate` at or past
    /// its own deadline, else `NotYet` while the server's clock is not past
    /// its not-before (an acquire's or a release's: `Self::not_yet`; a
    /// settle's, the latest deadline of the lost sends it settles:
    /// `Self::settle_too_soon`). Not a lean request: `None`.
    pub(super) fn lean_refusal(&self, now: Time, sent: Sent) -> Option<Reply> {
        let early = match sent.op {
            Op::LeanAcquire(_, _, not_before) | Op::LeanRelease(_, not_before) => {
                self.not_yet(now, not_before)
            }
            Op::LeanSettle(_, until, intent) => self.settle_too_soon(now, until, intent),
            _ => return None,
        };
        if sent.until > 0 && now >= sent.until {
            Some(Reply::TooLate)
        } else {
            early.then_some(Reply::NotYet)
        }
    }

    /// Whether a lean settle with this intent, for lost sends whose latest
    /// deadline is `until`, run at `now`, answers `NotYet`: the server's
    /// clock is not past it (the mutations: never, or not to release).
    pub(super) fn settle_too_soon(&self, now: Time, until: Time, intent: Intent) -> bool {
        let unchecked = matches!(
            (self.mutation, intent),
            (Mutation::LeanSettleNoClockCheck, _)
                | (Mutation::LeanReleaseSettleNoClockCheck, Intent::Release)
        );
        !unchecked && now < until
    }

    /// Whether `id` may start an acquire at all: not while a lean send of
    /// its own that changes the lock, its reply never read, is not settled
    /// (the mutation: always). No clock says when: only a settle's answer.
    pub(super) fn may_start(&self, state: &State, id: ClientId) -> bool {
        let c = &state.clients[id as usize];
        self.mutation == Mutation::NoWaitAfterLostLean || c.lean_until == 0
    }

    /// `id`'s release of its hold (`req`): lean when the gate is open,
    /// else latched.
    pub(super) fn release(&self, state: &mut State, id: ClientId, req: ReqId) {
        let lean = self.lean_gate_open(state, id);
        let c = &mut state.clients[id as usize];
        c.phase = match lean {
            true => Phase::LeanReleasing { req, resends: 0 },
            false => Phase::Releasing { req, resends: 0 },
        };
        let op = match lean {
            true => Op::LeanRelease(req, c.quiet_until),
            false => Op::Release(req, c.lease),
        };
        self.send(state, id, op);
    }

    /// `id`'s send in flight gets no reply it will read: until its
    /// deadline it may still run. A lean one that changes the lock keeps
    /// the owner's next request back until then.
    pub(super) fn lost_send(&self, state: &mut State, id: ClientId, changes_lock: bool) {
        if !self.lean {
            return;
        }
        let c = &mut state.clients[id as usize];
        let until = c.sent_at + self.bounds.window;
        if changes_lock || self.mutation != Mutation::QuietOnLostLeanSendsOnly {
            c.quiet_until = c.quiet_until.max(until);
        }
        if changes_lock {
            c.lean_until = c.lean_until.max(until);
        }
    }

    /// Whether `op` is a lean request.
    pub(super) fn is_lean(op: Op) -> bool {
        matches!(
            op,
            Op::LeanAcquire(..) | Op::LeanRelease(..) | Op::LeanSettle(..)
        )
    }

    /// Whether the network may copy `sent`: a latched request at any time;
    /// a lean one only once its client no longer reads its reply (the
    /// same bytes sent again on a new connection after the old one broke;
    /// the mutation: at any time, a hidden resend whose reply is read).
    pub(super) fn may_copy(&self, state: &State, sent: Sent) -> bool {
        !Self::is_lean(sent.op)
            || self.mutation == Mutation::HiddenResend
            || !self.awaited(state, sent)
    }

    /// A lock on a master with a replica that a failover promotes, with
    /// replica sync or without.
    pub fn replicated(bounds: Bounds, sync: bool) -> Self {
        LockModel {
            replica: Some(sync),
            ..LockModel::new(bounds, Mutation::None)
        }
    }

    /// A fenced lock guarding a resource that checks tokens, or not.
    pub fn fenced(bounds: Bounds, resource_checks_tokens: bool) -> Self {
        LockModel {
            fenced: true,
            resource_checks_tokens,
            ..LockModel::new(bounds, Mutation::None)
        }
    }

    pub(super) fn send(&self, state: &mut State, client: ClientId, op: Op) {
        let now = state.now;
        let c = &mut state.clients[client as usize];
        c.send += 1;
        // Kept in the lean protocol only, which needs it (its gate):
        // elsewhere it would split states the same to the protocol.
        if self.lean {
            c.sent_at = now;
        }
        let window_end = now + self.bounds.window;
        let until = match op {
            Op::Release(..) => self.release_until(c.deadline),
            // A grant's lease ends as its acquire's would have.
            Op::GiveBack(..) => self.release_until(c.since + c.lease),
            // (The mutation: none.)
            _ if Self::is_lean(op) && self.mutation == Mutation::LeanNoDeadline => 0,
            // A lean release: its send's deadline, as the library sends
            // it (not the earlier of that and its lease's end: while it
            // may run, the gate keeps the owner's next hold off, and it
            // touches no other owner's; the sets hold either way).
            Op::LeanRelease(..) => window_end,
            Op::LeanAcquire(..) | Op::LeanSettle(..) => window_end,
            _ => 0,
        };
        let sent = Sent {
            client,
            send: c.send,
            op,
            at: state.now,
            until,
        };
        state.requests.push(sent);
        state.requests.sort();
    }

    /// The deadline a release of a hold whose lease ends at `lease_end`
    /// carries (0: none, without `release_deadlines`).
    pub(super) fn release_until(&self, lease_end: Time) -> Time {
        match self.release_deadlines {
            true => lease_end,
            false => 0,
        }
    }

    pub(super) fn next_req(state: &mut State, client: ClientId) -> ReqId {
        let c = &mut state.clients[client as usize];
        c.requests += 1;
        ReqId {
            client,
            seq: c.requests,
        }
    }

    /// Whether `sent`'s client still waits for its reply.
    pub(super) fn awaited(&self, state: &State, sent: Sent) -> bool {
        let c = &state.clients[sent.client as usize];
        match sent.op {
            Op::Renew(at) => c.phase == Phase::Holding && c.renewing == Some(at),
            Op::Dropped(req, _) => {
                c.phase != Phase::Crashed && c.background.is_some_and(|b| b.req == req)
            }
            _ => c.phase != Phase::Crashed && c.send == sent.send,
        }
    }

    /// A client reads a reply to its current send.
    pub(super) fn read(&self, state: &mut State, answer: Answer) {
        let id = answer.to.client;
        let c = state.clients[id as usize];
        // The local lease: the acquire's (its own, or the watchdog's), or a
        // renewal's.
        let lease = c.lease + self.local_lease_slack;
        if let Op::Renew(at) = answer.to.op {
            // The watchdog's reply: read while it still renews this hold.
            if c.phase == Phase::Holding && c.renewing == Some(at) {
                let c = &mut state.clients[id as usize];
                c.renewing = None;
                if answer.reply == Reply::Renewed(true) {
                    c.deadline = c
                        .deadline
                        .max(at + self.bounds.lease + self.local_lease_slack);
                } else {
                    c.phase = Phase::Idle;
                    c.count = 0;
                }
            }
            return;
        }
        if let Op::Dropped(req, _) = answer.to.op {
            if c.background.is_some_and(|b| b.req == req) {
                let c = &mut state.clients[id as usize];
                c.background = None;
                // Past its lease's end: the hold stands until its TTL ends.
                if answer.reply == Reply::TooLate {
                    c.abandoned += 1;
                }
            }
            return;
        }
        if answer.to.send != c.send {
            return;
        }
        match (c.phase, answer.reply) {
            (Phase::Acquiring { req, since, .. }, Reply::Granted) => {
                let c = &mut state.clients[id as usize];
                c.lost = false;
                c.token = answer.token;
                c.grant = answer.grant;
                if self.replica == Some(true) {
                    c.phase = Phase::Syncing { req };
                    let (failovers, offset) = answer.wrote;
                    self.send(state, id, Op::Sync(req, failovers, offset));
                } else {
                    c.phase = Phase::Holding;
                    c.count = 1;
                    c.deadline = since + lease;
                }
            }
            (Phase::Syncing { .. }, Reply::Synced(true)) => {
                let c = &mut state.clients[id as usize];
                c.phase = Phase::Holding;
                c.count = 1;
                c.deadline = c.since + lease;
            }
            (Phase::Syncing { req }, _) => self.give_back_unsynced(state, id, req),
            (Phase::Acquiring { req, .. }, Reply::Refused) if c.lost => {
                // Nobody sends it any more, and a lost send of it may still
                // take the lock: settled.
                state.clients[id as usize].phase = Phase::Settling(req);
                self.send(state, id, Op::Settle(req));
            }
            // Past its lease's end: the hold stands until its TTL ends.
            (Phase::Releasing { .. }, Reply::TooLate) => {
                let c = &mut state.clients[id as usize];
                c.phase = Phase::Idle;
                c.count = 0;
                c.abandoned += 1;
            }
            (Phase::Releasing { .. }, _) => {
                let c = &mut state.clients[id as usize];
                c.phase = Phase::Idle;
                c.count = 0;
            }
            (Phase::Settling(_), Reply::Settled(true))
                if !self.may_give_back(state.now, c.since + c.lease) =>
            {
                // Its lease has run out: the hold is gone, or ends with its
                // TTL; the owner may hold anew.
                let c = &mut state.clients[id as usize];
                c.phase = Phase::Idle;
                c.lost = false;
                c.abandoned += 1;
            }
            (Phase::Settling(grant), Reply::Settled(true)) => {
                let give_back = Self::next_req(state, id);
                state.clients[id as usize].phase = Phase::GivingBack {
                    req: give_back,
                    grant,
                    resends: 0,
                };
                self.send(state, id, Op::GiveBack(give_back, grant));
            }
            // The owner's other sends may still run (the server's clock is
            // not past their deadline): nothing changed, and the call goes
            // latched.
            (Phase::LeanAcquiring { req }, Reply::NotYet) => {
                let c = &mut state.clients[id as usize];
                c.phase = Phase::Acquiring {
                    req,
                    since: c.since,
                    resends: 0,
                };
                let lease = c.lease;
                self.send(state, id, Op::Acquire(req, lease));
            }
            // (The mutation: past its deadline, read as released.)
            (Phase::LeanReleasing { .. }, Reply::TooLate)
                if self.mutation == Mutation::LeanTooLateReleased
                    && matches!(answer.to.op, Op::LeanRelease(..)) =>
            {
                let c = &mut state.clients[id as usize];
                c.phase = Phase::Idle;
                c.count = 0;
            }
            // Not yet, or past its deadline (it ran late, and changed
            // nothing; no copy of it is left to run): the release goes
            // latched, while the hold's lease runs (the library's rule for
            // every release's send); past it, the hold stands until its
            // TTL ends.
            (Phase::LeanReleasing { .. }, Reply::NotYet | Reply::TooLate)
                if matches!(answer.to.op, Op::LeanRelease(..)) && state.now >= c.deadline =>
            {
                let c = &mut state.clients[id as usize];
                c.phase = Phase::Idle;
                c.count = 0;
                c.abandoned += 1;
            }
            (Phase::LeanReleasing { req, .. }, Reply::NotYet | Reply::TooLate)
                if matches!(answer.to.op, Op::LeanRelease(..)) =>
            {
                let c = &mut state.clients[id as usize];
                c.phase = Phase::Releasing { req, resends: 0 };
                let lease = c.lease;
                self.send(state, id, Op::Release(req, lease));
            }
            // A settle's answer: the lost sends are past their deadlines.
            // Its caller left: what it took is given back.
            (Phase::LeanSettling { .. }, Reply::Settled(true)) if c.left => {
                let c = &mut state.clients[id as usize];
                c.lean_until = 0;
                c.left = false;
                c.count = 1;
                // The grant's lease, counted from its acquire's send: the
                // give-back's deadline.
                c.deadline = c.since + c.lease;
                let give_back = Self::next_req(state, id);
                self.release(state, id, give_back);
            }
            (Phase::LeanAcquiring { .. }, Reply::Granted)
            | (Phase::LeanSettling { .. }, Reply::Settled(true)) => {
                // Its lease counts from the acquire's send, as a latched
                // one's: a settled grant whose lease ran out meanwhile is
                // let go of (`LetGo`).
                let c = &mut state.clients[id as usize];
                c.phase = Phase::Holding;
                c.count = 1;
                c.deadline = c.since + lease;
                c.token = answer.token;
                c.grant = answer.grant;
                c.lean_until = 0;
            }
            // Settled too soon (by a client clock ahead of the server's), or
            // the settle ran after its own deadline (a lost reply): settled
            // again later, as a resend.
            (Phase::LeanSettling { req, resends }, Reply::NotYet | Reply::TooLate) => {
                let c = &mut state.clients[id as usize];
                if resends < self.bounds.resends {
                    c.phase = Phase::LeanLost {
                        req,
                        resends: resends + 1,
                    };
                } else {
                    // Given up: nothing of the owner's goes any more (the
                    // library settles until it is answered).
                    c.phase = Phase::Idle;
                    c.left = false;
                    c.abandoned += 1;
                }
            }
            // A lean release's settle that ran too soon or too late changed
            // nothing: settled again, as a lost one.
            (Phase::LeanReleasing { req, resends }, Reply::NotYet | Reply::TooLate) => {
                state.clients[id as usize].phase = Phase::LeanReleaseLost { req, resends };
            }
            // Refused, or too late (nothing taken).
            (Phase::LeanAcquiring { .. }, _) => {
                state.clients[id as usize].phase = Phase::Idle;
            }
            (Phase::LeanSettling { .. }, _) => {
                let c = &mut state.clients[id as usize];
                c.phase = Phase::Idle;
                c.left = false;
                c.lean_until = 0;
            }
            (Phase::LeanReleasing { .. }, _) => {
                let c = &mut state.clients[id as usize];
                c.phase = Phase::Idle;
                c.count = 0;
                c.lean_until = 0;
            }
            // A give-back past its grant's lease end: what the grant took
            // stands until its TTL ends.
            (Phase::GivingBack { .. }, Reply::TooLate) => {
                let c = &mut state.clients[id as usize];
                c.phase = Phase::Idle;
                c.lost = false;
                c.abandoned += 1;
            }
            // Refused or spent with nothing to settle, settled, given back.
            (Phase::Acquiring { .. }, Reply::Refused | Reply::Spent)
            | (Phase::Settling(_), _)
            | (Phase::GivingBack { .. }, _) => {
                let c = &mut state.clients[id as usize];
                if let (Phase::GivingBack { grant, .. }, true) = (c.phase, self.reruns > 0) {
                    c.given_back = Some((grant, answer.to.until));
                }
                c.phase = Phase::Idle;
                c.lost = false;
            }
            _ => {}
        }
    }

    /// Whether a dropped guard's release may be sent again at `now`: while
    /// the guard's lease runs (the mutation: until the hold has surely
    /// expired, counted from the drop).
    pub(super) fn may_resend_dropped(&self, now: Time, bg: Background) -> bool {
        match self.mutation {
            Mutation::DroppedReleasePastLease => now < bg.until,
            _ => now < bg.deadline,
        }
    }

    /// Whether the give-back of a grant whose lease runs until `deadline`
    /// may be sent at `now`: while it runs (the mutation: always).
    pub(super) fn may_give_back(&self, now: Time, deadline: Time) -> bool {
        self.mutation == Mutation::GiveBackPastLease || now < deadline
    }

    /// A grant too few replicas acknowledged (or whose sync failed) is
    /// given back, under a request of its own.
    pub(super) fn give_back_unsynced(&self, state: &mut State, id: ClientId, grant: ReqId) {
        let give_back = Self::next_req(state, id);
        state.clients[id as usize].phase = Phase::GivingBack {
            req: give_back,
            grant,
            resends: 0,
        };
        self.send(state, id, Op::GiveBack(give_back, grant));
    }

    /// Replica sync's request runs on the master: the latch's touch (a
    /// write on this connection, after the grant's), then `WAIT` for the
    /// offset it reached; a latch gone from this master (a failover lost
    /// the grant) answers at once that the grant is not synced.
    pub(super) fn run_sync(&self, state: &mut State, sent: Sent) {
        let Op::Sync(req, failovers, offset) = sent.op else {
            return;
        };
        if self.wanted == 0 && self.offline {
            return self.run_online_sync(state, sent, req);
        }
        let wait_for = if self.mutation == Mutation::SyncWithoutTouch {
            // `WAIT` alone counts the writes of its own connection: the
            // grant's, unless a failover replaced the connection since.
            Some(if failovers == state.failovers {
                offset
            } else {
                0
            })
        } else if state.server.latch(req) == Some(Latch::Granted) {
            let expires = state.now + self.bounds.latch_ttl;
            state.server.set_latch(req, Latch::Granted, expires);
            state.server.offset += 1;
            Some(state.server.offset)
        } else {
            None
        };
        match wait_for {
            // `Replicas::Online` on a master with no replica: nothing to
            // wait for.
            Some(_) if self.wanted == 0 && state.replicas.is_empty() => {
                self.wait_returns(state, sent, Some(0));
            }
            Some(offset) => {
                state.waits.push((sent, offset));
                state.waits.sort();
            }
            // No grant here to wait for: not synced.
            None => self.wait_returns(state, sent, None),
        }
    }

    /// A `WAIT` returns with the replicas that reached its offset: or a
    /// failover broke its connection, or the latch was not there to touch
    /// (`acked: None`), which the client reads as not synced.
    /// `Replicas::Online` sync as the library runs it, with replicas that
    /// come online: a cached count of online replicas above 0 is used,
    /// otherwise the latch's touch and `ROLE` count them anew (under
    /// `TrustsCachedZero` a cached 0 answers at once); no grant on the
    /// master is a sync that failed; none online, nothing to wait for;
    /// else `WAIT` for that many, enough when one acknowledges.
    pub(super) fn run_online_sync(&self, state: &mut State, sent: Sent, req: ReqId) {
        let id = sent.client as usize;
        let seen = state.clients[id].online_seen;
        if seen == Some(0) && self.mutation == Mutation::TrustsCachedZero {
            return self.answer_sync(state, sent, true);
        }
        if state.server.latch(req) != Some(Latch::Granted) {
            state.clients[id].online_seen = None;
            return self.answer_sync(state, sent, false);
        }
        let expires = state.now + self.bounds.latch_ttl;
        state.server.set_latch(req, Latch::Granted, expires);
        state.server.offset += 1;
        let count = match seen {
            Some(n) if n > 0 => n,
            _ => {
                let n = state.online.iter().filter(|online| **online).count() as u8;
                state.clients[id].online_seen = Some(n);
                n
            }
        };
        if count == 0 {
            return self.answer_sync(state, sent, true);
        }
        state.waits.push((sent, state.server.offset));
        state.waits.sort();
    }

    pub(super) fn wait_returns(&self, state: &mut State, sent: Sent, acked: Option<u8>) {
        let enough = acked.is_some_and(|acked| {
            acked >= self.wanted.max(1) || (self.wanted == 0 && state.replicas.is_empty())
        });
        self.answer_sync(state, sent, enough);
    }

    /// The reply of a replica sync, to its client if it still awaits it.
    pub(super) fn answer_sync(&self, state: &mut State, sent: Sent, enough: bool) {
        if !self.awaited(state, sent) {
            return;
        }
        state.replies.push(Answer {
            to: sent,
            reply: Reply::Synced(enough),
            token: 0,
            grant: 0,
            wrote: (0, 0),
        });
        state.replies.sort();
    }

    /// A client's call timed out: resend while its budget lasts, else give
    /// up.
    pub(super) fn time_out(&self, state: &mut State, id: ClientId) {
        let resends_max = self.bounds.resends;
        let c = state.clients[id as usize];
        if let Phase::Syncing { req } = c.phase {
            // `WAIT`'s reply lost: the sync failed, and the grant is given
            // back.
            self.lost_send(state, id, false);
            return self.give_back_unsynced(state, id, req);
        }
        // The send in flight, if any, is lost: until its deadline it may
        // still run.
        match c.phase {
            Phase::LeanAcquiring { .. } | Phase::LeanReleasing { .. } => {
                self.lost_send(state, id, true)
            }
            Phase::LeanLost { .. } | Phase::LeanReleaseLost { .. } => {}
            _ => self.lost_send(state, id, false),
        }
        let lean_until = state.clients[id as usize].lean_until;
        let (phase, op) = match c.phase {
            Phase::LeanAcquiring { req } => (Phase::LeanLost { req, resends: 0 }, None),
            Phase::LeanReleasing { req, resends } => {
                (Phase::LeanReleaseLost { req, resends }, None)
            }
            // Settled after the lost sends' deadline, by the server's
            // clock: the client's is not trusted to have waited.
            Phase::LeanLost { req, resends } => (
                Phase::LeanSettling { req, resends },
                Some(Op::LeanSettle(req, lean_until, Intent::Take(c.lease))),
            ),
            Phase::LeanSettling { req, resends } if resends < resends_max => (
                Phase::LeanSettling {
                    req,
                    resends: resends + 1,
                },
                Some(Op::LeanSettle(req, lean_until, Intent::Take(c.lease))),
            ),
            // The first settle of a lost release goes whatever the budget
            // (as a lost acquire's does; `settle_lost_releases`); the
            // budget counts its resends.
            Phase::LeanReleaseLost { req, resends }
                if resends < resends_max + u8::from(self.settle_lost_releases) =>
            {
                (
                    Phase::LeanReleasing {
                        req,
                        resends: resends + 1,
                    },
                    Some(Op::LeanSettle(req, lean_until, Intent::Release)),
                )
            }
            // Out of resends: what it holds or may have taken stands
            // until its TTL ends.
            Phase::LeanSettling { .. } | Phase::LeanReleaseLost { .. } => {
                let c = &mut state.clients[id as usize];
                c.count = 0;
                c.left = false;
                c.abandoned += 1;
                (Phase::Idle, None)
            }
            Phase::Acquiring {
                req,
                since,
                resends,
            } if resends < resends_max => (
                Phase::Acquiring {
                    req,
                    since,
                    resends: resends + 1,
                },
                Some(Op::Acquire(req, c.lease)),
            ),
            Phase::Acquiring { req, .. } => (Phase::Settling(req), Some(Op::Settle(req))),
            Phase::Releasing { req, resends } if resends < resends_max => (
                Phase::Releasing {
                    req,
                    resends: resends + 1,
                },
                Some(Op::Release(req, c.lease)),
            ),
            Phase::GivingBack {
                req,
                grant,
                resends,
            } if resends < resends_max && self.may_give_back(state.now, c.since + c.lease) => (
                Phase::GivingBack {
                    req,
                    grant,
                    resends: resends + 1,
                },
                Some(Op::GiveBack(req, grant)),
            ),
            // Out of resends: what it held or may have taken stands until
            // its TTL ends.
            Phase::Releasing { .. } | Phase::Settling(_) | Phase::GivingBack { .. } => {
                let c = &mut state.clients[id as usize];
                c.count = 0;
                c.abandoned += 1;
                c.lost = false;
                (Phase::Idle, None)
            }
            _ => return,
        };
        let c = &mut state.clients[id as usize];
        if matches!(c.phase, Phase::Acquiring { .. }) {
            c.lost = true;
        }
        c.phase = phase;
        match op {
            Some(op) => self.send(state, id, op),
            // No reply of the last send is read any more.
            None => state.clients[id as usize].send += 1,
        }
    }
}
