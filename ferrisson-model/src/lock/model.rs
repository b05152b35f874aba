//! The reentrant lock's protocol as a stateright [`Model`]: its actions,
//! its transitions and the properties checked.

use super::*;

impl Model for LockModel {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        vec![State {
            now: 0,
            server: Server {
                fenced: self.fenced,
                ..Server::default()
            },
            clients: vec![Client::new(); self.bounds.clients as usize],
            requests: Vec::new(),
            replies: Vec::new(),
            duplicates_left: self.bounds.duplicates,
            crashes_left: self.bounds.crashes,
            drops_left: self.bounds.drops,
            cancels_left: self.bounds.cancels,
            writes: Vec::new(),
            grants: Vec::new(),
            resource: Resource::default(),
            waits: Vec::new(),
            replicas: match self.replica {
                Some(_) => vec![
                    Server {
                        fenced: self.fenced,
                        ..Server::default()
                    };
                    self.replicas as usize
                ],
                None => Vec::new(),
            },
            failovers_left: self.bounds.failovers,
            failovers: 0,
            restarts_left: self.bounds.restarts,
            reruns_left: self.reruns,
            online: match (self.replica, self.offline) {
                (Some(_), true) => {
                    let mut online = vec![true; self.replicas as usize];
                    online[0] = false;
                    online
                }
                _ => Vec::new(),
            },
        }]
    }

    fn actions(&self, state: &State, actions: &mut Vec<Action>) {
        for (i, c) in state.clients.iter().enumerate() {
            let id = i as ClientId;
            match c.phase {
                Phase::Idle
                    if c.acquires < self.bounds.acquires_of(id) && self.may_start(state, id) =>
                {
                    actions.push(Action::Acquire(id))
                }
                Phase::Holding if c.believes_it_holds(state.now) => {
                    actions.push(Action::Release(id));
                    if state.drops_left > 0 && c.background.is_none() {
                        actions.push(Action::Drop(id));
                    }
                    if c.writes < self.bounds.writes {
                        actions.push(Action::Write(id));
                    }
                    // Only a watchdog hold is renewed.
                    if c.renewing.is_none()
                        && c.renewals < self.bounds.renewals
                        && c.lease == self.bounds.lease
                    {
                        actions.push(Action::Renew(id));
                    }
                }
                Phase::Holding => actions.push(Action::LetGo(id)),
                Phase::Acquiring { .. }
                | Phase::Releasing { .. }
                | Phase::Settling(_)
                | Phase::Syncing { .. }
                | Phase::GivingBack { .. }
                | Phase::LeanAcquiring { .. }
                | Phase::LeanSettling { .. }
                | Phase::LeanReleasing { .. }
                | Phase::LeanLost { .. }
                | Phase::LeanReleaseLost { .. } => actions.push(Action::Timeout(id)),
                _ => {}
            }
            let leaves = match c.phase {
                Phase::LeanAcquiring { .. }
                | Phase::LeanLost { .. }
                | Phase::LeanSettling { .. } => !c.left,
                // A lean release itself, not its settle.
                Phase::LeanReleasing { resends, .. } => resends == 0,
                _ => false,
            };
            if leaves && state.cancels_left > 0 {
                actions.push(Action::Cancel(id));
            }
            if c.phase != Phase::Crashed && state.crashes_left > 0 {
                actions.push(Action::Crash(id));
            }
            if let Some(b) = c.background {
                if c.phase != Phase::Crashed
                    && b.resends < self.bounds.drop_resends
                    && self.may_resend_dropped(state.now, b)
                {
                    actions.push(Action::ResendDropped(id));
                }
            }
            if c.given_back.is_some() && c.phase != Phase::Crashed && state.reruns_left > 0 {
                actions.push(Action::Rerun(id));
            }
        }
        for i in 0..state.requests.len() {
            if i > 0 && state.requests[i] == state.requests[i - 1] {
                continue;
            }
            actions.push(Action::Run(i));
            if state.duplicates_left > 0 && self.may_copy(state, state.requests[i]) {
                actions.push(Action::Duplicate(i));
            }
        }
        for i in 0..state.replies.len() {
            if i > 0 && state.replies[i] == state.replies[i - 1] {
                continue;
            }
            actions.push(Action::Deliver(i));
        }
        for i in 0..state.writes.len() {
            actions.push(Action::Land(i));
        }
        for (i, replica) in state.replicas.iter().enumerate() {
            if !state.online.get(i).copied().unwrap_or(true) {
                actions.push(Action::ComeOnline(i));
                continue;
            }
            if *replica != state.server {
                actions.push(Action::Replicate(i));
            }
            if state.failovers_left > 0 {
                actions.push(Action::Failover(i));
            }
        }
        if state.restarts_left > 0 {
            actions.push(Action::Restart);
        }
        for i in 0..state.waits.len() {
            if i > 0 && state.waits[i] == state.waits[i - 1] {
                continue;
            }
            actions.push(Action::WaitReturns(i));
        }
        if state.now < self.bounds.max_time {
            actions.push(Action::Tick);
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut state = last.clone();
        let (b, m) = (&self.bounds, self.mutation);
        match action {
            Action::Acquire(id) => {
                let req = Self::next_req(&mut state, id);
                let now = state.now;
                let lean = self.lean_gate_open(&state, id);
                let c = &mut state.clients[id as usize];
                // The first client's later acquires take a lease of their
                // own, when the bounds give one.
                c.lease = match (id, c.acquires, b.long_lease) {
                    (0, before, long) if before > 0 && long > 0 => long,
                    _ => b.lease,
                };
                c.phase = match lean {
                    true => Phase::LeanAcquiring { req },
                    false => Phase::Acquiring {
                        req,
                        since: now,
                        resends: 0,
                    },
                };
                c.acquires += 1;
                c.lost = false;
                c.since = now;
                let lease = c.lease;
                let op = match lean {
                    true => Op::LeanAcquire(req, lease, c.quiet_until),
                    false => Op::Acquire(req, lease),
                };
                self.send(&mut state, id, op);
            }
            Action::Renew(id) => {
                let now = state.now;
                state.clients[id as usize].renewing = Some(now);
                state.clients[id as usize].renewals += 1;
                // The watchdog's own connection: its send number is not the
                // client's.
                let sent = Sent {
                    client: id,
                    send: 0,
                    op: Op::Renew(now),
                    at: now,
                    until: 0,
                };
                state.requests.push(sent);
                state.requests.sort();
            }
            Action::Release(id) => {
                let req = Self::next_req(&mut state, id);
                // The watchdog stops: a renewal in flight is not read.
                state.clients[id as usize].renewing = None;
                self.release(&mut state, id, req);
            }
            Action::LetGo(id) => {
                let c = &mut state.clients[id as usize];
                c.phase = Phase::Idle;
                c.count = 0;
                c.renewing = None;
                c.abandoned += 1;
            }
            Action::Drop(id) => {
                let req = Self::next_req(&mut state, id);
                let now = state.now;
                let c = &mut state.clients[id as usize];
                let lease = c.lease;
                c.background = Some(Background {
                    req,
                    deadline: c.deadline,
                    until: now + lease + 1,
                    resends: 0,
                    lease,
                });
                c.phase = Phase::Idle;
                c.count = 0;
                c.renewing = None;
                state.drops_left -= 1;
                // Its own connection, as the watchdog's.
                let sent = Sent {
                    client: id,
                    send: 0,
                    op: Op::Dropped(req, lease),
                    at: now,
                    until: self.release_until(c.deadline),
                };
                state.requests.push(sent);
                state.requests.sort();
            }
            Action::ResendDropped(id) => {
                let now = state.now;
                let c = &mut state.clients[id as usize];
                let bg = c.background.as_mut()?;
                bg.resends += 1;
                let until = self.release_until(bg.deadline);
                let sent = Sent {
                    client: id,
                    send: 0,
                    op: Op::Dropped(bg.req, bg.lease),
                    at: now,
                    until,
                };
                state.requests.push(sent);
                state.requests.sort();
            }
            Action::Rerun(id) => {
                let (grant, until) = state.clients[id as usize].given_back.take()?;
                state.reruns_left -= 1;
                let req = Self::next_req(&mut state, id);
                // Its own connection: its reply is not read.
                let sent = Sent {
                    client: id,
                    send: 0,
                    op: Op::GiveBack(req, grant),
                    at: state.now,
                    until,
                };
                state.requests.push(sent);
                state.requests.sort();
            }
            Action::Write(id) => {
                let c = &mut state.clients[id as usize];
                c.writes += 1;
                let write = (id, c.token, c.grant);
                state.writes.push(write);
                state.writes.sort();
            }
            Action::Land(i) => {
                let (_, token, grant) = state.writes.remove(i);
                let r = &mut state.resource;
                if !self.resource_checks_tokens || token >= r.highest {
                    r.out_of_order |= grant < r.latest_grant;
                    r.highest = r.highest.max(token);
                    r.latest_grant = r.latest_grant.max(grant);
                }
            }
            Action::Replicate(i) => {
                state.replicas[i] = state.server.clone();
            }
            Action::ComeOnline(i) => {
                state.replicas[i] = state.server.clone();
                state.online[i] = true;
            }
            Action::Failover(i) => {
                state.server = state.replicas.remove(i);
                if !state.online.is_empty() {
                    state.online.remove(i);
                }
                for replica in &mut state.replicas {
                    *replica = state.server.clone();
                }
                state.failovers_left -= 1;
                state.failovers += 1;
                // The old master's connections broke: its `WAIT`s fail.
                for (sent, _) in std::mem::take(&mut state.waits) {
                    self.wait_returns(&mut state, sent, None);
                }
            }
            Action::Restart => {
                let token = match m {
                    Mutation::TokensStartOver => 0,
                    _ => state.server.token,
                };
                state.server = Server {
                    fenced: state.server.fenced,
                    token,
                    ..Server::default()
                };
                for replica in &mut state.replicas {
                    *replica = state.server.clone();
                }
                state.restarts_left -= 1;
                state.failovers += 1;
                // Its connections broke: its `WAIT`s fail.
                for (sent, _) in std::mem::take(&mut state.waits) {
                    self.wait_returns(&mut state, sent, None);
                }
            }
            Action::WaitReturns(i) => {
                let (sent, offset) = state.waits.remove(i);
                let online = &state.online;
                let acked = (state.replicas.iter().enumerate())
                    .filter(|(i, r)| online.get(*i).copied().unwrap_or(true) && r.offset >= offset)
                    .count();
                // Fewer than counted: a replica may have gone; counted
                // again next time.
                let c = &mut state.clients[sent.client as usize];
                if c.online_seen.is_some_and(|seen| (acked as u8) < seen) {
                    c.online_seen = None;
                }
                self.wait_returns(&mut state, sent, Some(acked as u8));
            }
            Action::Timeout(id) => self.time_out(&mut state, id),
            Action::Cancel(id) => {
                // The call in flight is not read any more: lost, and
                // settled all the same.
                match state.clients[id as usize].phase {
                    Phase::LeanAcquiring { req } => {
                        self.lost_send(&mut state, id, true);
                        let c = &mut state.clients[id as usize];
                        c.phase = Phase::LeanLost { req, resends: 0 };
                        c.send += 1;
                        c.left = true;
                    }
                    Phase::LeanReleasing { req, resends: 0 } => {
                        self.lost_send(&mut state, id, true);
                        let c = &mut state.clients[id as usize];
                        c.phase = Phase::LeanReleaseLost { req, resends: 0 };
                        c.send += 1;
                    }
                    _ => state.clients[id as usize].left = true,
                }
                state.cancels_left -= 1;
            }
            Action::Crash(id) => {
                let c = &mut state.clients[id as usize];
                c.phase = Phase::Crashed;
                c.count = 0;
                c.renewing = None;
                state.crashes_left -= 1;
            }
            Action::Run(i) => {
                let sent = state.requests.remove(i);
                if let Op::Sync(..) = sent.op {
                    self.run_sync(&mut state, sent);
                    return Some(state);
                }
                // With replicas, a script that wrote moves the offset.
                let before = (!state.replicas.is_empty()).then(|| state.server.clone());
                let granted_before = match sent.op {
                    Op::Acquire(req, _) => state.server.latch(req) == Some(Latch::Granted),
                    _ => false,
                };
                let held_before = state.server.held_by(sent.client);
                let now = state.now;
                let server = &mut state.server;
                // The lean scripts' checks of the server's clock, in the
                // scripts' order: the call's own deadline, then its
                // not-before.
                let reply = match self.lean_refusal(now, sent) {
                    Some(refusal) => refusal,
                    None => match sent.op {
                        Op::Acquire(req, ttl) => {
                            server.acquire_with(now, req, ttl, b, m, true, false)
                        }
                        // Past the end of its hold's lease (a give-back: its
                        // grant's), and not answered from its latch: nothing
                        // changes.
                        Op::Release(req, _) | Op::Dropped(req, _) | Op::GiveBack(req, _)
                            if sent.until > 0
                                && now >= sent.until
                                && !server.unlock_latched(req) =>
                        {
                            Reply::TooLate
                        }
                        Op::Release(req, ttl) | Op::Dropped(req, ttl) => {
                            server.release_keeping(now, req, ttl, b, m, 0)
                        }
                        Op::Renew(_) => server.renew(now, sent.client, b.lease, m),
                        Op::Settle(req) => server.settle(now, req, b),
                        Op::GiveBack(req, grant) => server.give_back(now, req, grant, b, m),
                        Op::LeanAcquire(_, ttl, _) => server.lean_acquire(now, sent.client, ttl, m),
                        Op::LeanRelease(..) => server.lean_release(sent.client),
                        Op::LeanSettle(_, _, intent) => {
                            server.lean_settle(now, sent.client, intent, m)
                        }
                        Op::Sync(..) => unreachable!("run above"),
                    },
                };
                if before.is_some_and(|before| before != state.server) {
                    state.server.offset += 1;
                }
                // A lean acquire's grant is new when the owner held nothing
                // before it.
                let lean_new = matches!(sent.op, Op::LeanAcquire(..))
                    && reply == Reply::Granted
                    && !held_before;
                let new_grant = lean_new
                    || matches!(
                        (sent.op, reply, granted_before),
                        (Op::Acquire(..), Reply::Granted, false)
                    );
                if let (Op::Acquire(req, _) | Op::LeanAcquire(req, ..), true) = (sent.op, new_grant)
                {
                    // A new grant (not a resend answered from the latch).
                    let place = state.grants.len() as u8 + 1;
                    state.grants.retain(|(r, _)| *r != req);
                    state.grants.push((req, place));
                    state.grants.sort();
                }
                // A reply nobody reads is not sent: its client dropped the
                // connection (a timed-out send), stopped renewing, or
                // crashed.
                if self.awaited(&state, sent) {
                    let (token, grant) = match sent.op {
                        Op::Acquire(req, _) | Op::LeanAcquire(req, ..)
                            if reply == Reply::Granted =>
                        {
                            (
                                state.server.token_of(req),
                                state
                                    .grants
                                    .iter()
                                    .find(|(r, _)| *r == req)
                                    .map_or(0, |(_, g)| *g),
                            )
                        }
                        _ => (0, 0),
                    };
                    let answer = Answer {
                        to: sent,
                        reply,
                        token,
                        grant,
                        // Kept for the mutation only: otherwise it would
                        // split states that are the same to the protocol.
                        wrote: match (new_grant, m) {
                            (true, Mutation::SyncWithoutTouch) => {
                                (state.failovers, state.server.offset)
                            }
                            _ => (0, 0),
                        },
                    };
                    state.replies.push(answer);
                    state.replies.sort();
                }
            }
            Action::Duplicate(i) => {
                let copy = state.requests[i];
                state.requests.push(copy);
                state.requests.sort();
                state.duplicates_left -= 1;
            }
            Action::Deliver(i) => {
                let answer = state.replies.remove(i);
                if state.clients[answer.to.client as usize].phase != Phase::Crashed {
                    self.read(&mut state, answer);
                }
            }
            Action::Tick => {
                state.now += 1;
                let now = state.now;
                state.server.expire(now);
                for replica in &mut state.replicas {
                    replica.expire(now);
                }
                // What did not reach Redis within the window never will.
                let window = self.bounds.window;
                // (Without a deadline, a lean request may run at any time.)
                let no_deadline = m == Mutation::LeanNoDeadline;
                let late_renewals = self.late_renewals;
                // A lean request past its deadline may still reach Redis,
                // which answers `TooLate` and changes nothing: its reply is
                // on its way now (read if its client still waits for it).
                let late: Vec<Sent> = (state.requests.iter())
                    .filter(|r| self.late_lean && Self::is_lean(r.op))
                    .filter(|r| r.until > 0 && now >= r.until)
                    .filter(|r| self.awaited(&state, **r))
                    .copied()
                    .collect();
                for to in late {
                    state.replies.push(Answer {
                        to,
                        reply: Reply::TooLate,
                        token: 0,
                        grant: 0,
                        wrote: (0, 0),
                    });
                }
                state.replies.sort();
                state.requests.retain(|r| match Self::is_lean(r.op) {
                    true => no_deadline || now < r.until,
                    false => r.at + window > now || (late_renewals && matches!(r.op, Op::Renew(_))),
                });
                for (i, c) in state.clients.iter_mut().enumerate() {
                    let id = i as ClientId;
                    // A dropped guard's release that will not be sent
                    // again, with no send of it in flight: what it held
                    // stands until its TTL ends.
                    if let Some(bg) = c.background {
                        let dropped = Op::Dropped(bg.req, bg.lease);
                        let in_flight = state.requests.iter().any(|r| r.op == dropped)
                            || state.replies.iter().any(|a| a.to.op == dropped);
                        let more = bg.resends < self.bounds.drop_resends
                            && self.may_resend_dropped(now, bg);
                        if !in_flight && !more {
                            c.background = None;
                            c.abandoned += 1;
                        }
                    }
                    // What it let go of has run out on the server, and
                    // nothing it sent can take the lock any more.
                    if c.abandoned > 0
                        && !state.server.held_by(id)
                        && state.requests.iter().all(|r| r.client != id)
                    {
                        c.abandoned = 0;
                    }
                }
            }
        }
        Some(state)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always(
                "the resource takes writes in the order of grants",
                |_, s: &State| !s.resource.out_of_order,
            ),
            Property::always("no two holds share a token", |m: &LockModel, s: &State| {
                !m.fenced || {
                    let mut tokens: Vec<u8> = s
                        .clients
                        .iter()
                        .filter(|c| c.phase == Phase::Holding)
                        .map(|c| c.token)
                        .collect();
                    let n = tokens.len();
                    tokens.sort();
                    tokens.dedup();
                    tokens.len() == n && !tokens.contains(&0)
                }
            }),
            Property::always("at most one holder", |_, s: &State| {
                s.clients
                    .iter()
                    .filter(|c| c.believes_it_holds(s.now))
                    .count()
                    <= 1
            }),
            Property::always(
                "the server counts what its owner holds",
                |m: &LockModel, s: &State| {
                    // A failover may bring back a hold whose release the
                    // replica lacked (it stands until its TTL): not checked
                    // after one.
                    s.failovers_left < m.bounds.failovers
                        || s.restarts_left < m.bounds.restarts
                        || counts_agree(s)
                },
            ),
            Property::sometimes("a client holds", |_, s: &State| {
                s.clients.iter().any(|c| c.believes_it_holds(s.now))
            }),
            // (Lean releases keep no latch to count them by.)
            Property::sometimes(
                "both clients released a hold",
                |m: &LockModel, s: &State| {
                    m.lean
                        || s.server.unlock_latches.len() >= 2
                            && s.server
                                .unlock_latches
                                .iter()
                                .any(|(r, _, _)| r.client == 0)
                            && s.server
                                .unlock_latches
                                .iter()
                                .any(|(r, _, _)| r.client == 1)
                },
            ),
        ]
    }
}

/// At rest, each live client's count is the server's for it: no hold
/// taken twice, none nobody owns, none lost while its lease runs. Two
/// exceptions are the design's: a hold let go of unreleased (out of
/// resends, its local lease ran out, or a dropped guard's release stopped
/// at the lease's end) stands until its TTL ends, also under the owner's
/// next hold, and a hold whose lease ran out is gone from the server
/// first.
pub fn counts_agree(s: &State) -> bool {
    if !s.at_rest() {
        return true;
    }
    s.clients.iter().enumerate().all(|(i, c)| {
        let server = s.server.count_of(i as ClientId);
        c.phase == Phase::Crashed
            || server == c.count
            || (c.abandoned > 0 && server >= c.count && server <= c.count + c.abandoned)
            || (c.count == 1 && server == 0 && s.now >= c.deadline)
    })
}
