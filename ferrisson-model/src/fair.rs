//! A model of the fair lock's queue (Redisson's `RFairLock` layout): a
//! lock hash, a queue of waiting owners in the order they came, and a
//! message on each waiter's own channel when its turn comes: a release
//! wakes the first in line, and a first in line that gives up while the
//! lock is free wakes the next (so that the release that woke it is not
//! lost).
//!
//! The lock's hold and its latches are the reentrant lock's (`crate`'s
//! model checks them with lost replies and leases running out); here
//! nothing is lost and no lease runs out, and the checks are the queue's:
//! one holder, first come first served, and every waiter served or gone
//! by pub/sub alone (no look-again timer).
//!
//! [`Server`] can also keep time ([`Clock`]): the hold's and the latches'
//! ends, each waiter's score (when it counts as dead), the purge of dead
//! waiters at the head of the line and the scores' shifts. The checks do
//! not use it; the conformance test does, to hold the scripts' scores to
//! the model's.

use std::fmt;

use stateright::{Model, Property};

use crate::{ClientId, Latch, ReqId};

/// One rule broken on purpose.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Mutation {
    #[default]
    None,
    /// A newcomer takes a free lock although others are in line.
    Barging,
    /// A first in line that gives up while the lock is free wakes nobody:
    /// the release that woke it is lost, and the next waiter sleeps.
    LeaveWakesNobody,
    /// A wait that ends while its attempt is in flight leaves the line at
    /// once, not after the attempt's reply: the attempt, run after the
    /// leave, puts the owner back in line, where nobody waits for it.
    LeaveBeforeReply,
}

impl fmt::Display for Mutation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

/// The bounds of one check.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Bounds {
    pub clients: u8,
    /// Acquires per client.
    pub acquires: u8,
    /// Waits that end before their grant, in all.
    pub give_ups: u8,
}

impl Bounds {
    /// Three clients, one acquire each, one wait that ends early.
    pub fn three() -> Bounds {
        Bounds {
            clients: 3,
            acquires: 1,
            give_ups: 1,
        }
    }

    /// Three clients, two acquires each, two waits that end early.
    pub fn twice() -> Bounds {
        Bounds {
            clients: 3,
            acquires: 2,
            give_ups: 2,
        }
    }
}

/// What Redis holds.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Server {
    /// The lock hash: its owner and count.
    pub hold: Option<(ClientId, u8)>,
    /// The queue list (the timeout set has the same members).
    pub queue: Vec<ClientId>,
    /// Acquire latches (they run out only with a clock). Sorted.
    pub acquire_latches: Vec<(ReqId, Latch)>,
    /// Unlock latches: request, the first reply. Sorted.
    pub unlock_latches: Vec<(ReqId, u8)>,
    /// Time, when it is modelled; without it nothing runs out and no
    /// waiter counts as dead.
    pub clock: Option<Clock>,
}

/// Time on a [`Server`] that keeps it, in ticks. A waiter's score is when
/// it counts as dead (the timeout set's score): a new waiter's is the one
/// ahead of it (or, first in line, the hold's end) plus the waiter
/// timeout, and a grant or a leave moves the waiters behind one timeout
/// sooner (they moved up a place).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Clock {
    pub now: i32,
    /// The lease a grant, a re-entry or a partial release sets.
    pub lease: i32,
    /// The waiter timeout.
    pub waiter: i32,
    /// The TTL of a latch.
    pub latch_ttl: i32,
    /// When the hold ends (while there is one).
    pub hold_ends: i32,
    /// Each waiter's score, in the queue's order.
    pub scores: Vec<i32>,
    /// When each acquire latch ends, by request (sorted).
    pub acquire_ends: Vec<(ReqId, i32)>,
    /// When each unlock latch ends, by request (sorted).
    pub unlock_ends: Vec<(ReqId, i32)>,
}

impl Clock {
    /// A clock at 0.
    pub fn new(lease: i32, waiter: i32, latch_ttl: i32) -> Clock {
        Clock {
            lease,
            waiter,
            latch_ttl,
            ..Clock::default()
        }
    }
}

/// A reply, as the client reads it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Reply {
    /// Acquire: held now (nil).
    Granted,
    /// Acquire: wait (queued when asked to join).
    Refused,
    /// Acquire: the request is spent (-2).
    Spent,
    /// Release: 1 the last hold, 0 holds remain.
    Released(u8),
    /// Release: the owner holds nothing (nil).
    NotHeld,
    /// Leave: whether the owner was in line.
    Left(bool),
}

impl Server {
    pub fn latch(&self, req: ReqId) -> Option<Latch> {
        self.acquire_latches
            .iter()
            .find(|(r, _)| *r == req)
            .map(|(_, latch)| *latch)
    }

    fn held_by(&self, owner: ClientId) -> bool {
        self.hold.is_some_and(|(o, _)| o == owner)
    }

    /// `lua/fair_acquire.lua` (reentrant, joining the line when `join`);
    /// the owners woken (none: a grant wakes nobody).
    pub fn acquire(&mut self, req: ReqId, join: bool, mutation: Mutation) -> Reply {
        self.acquire_waiting(req, join, mutation).0
    }

    /// As [`Server::acquire`], with the wait a refusal names when the
    /// server keeps time, in ticks: the hold's time left, or while the
    /// lock is free and another waiter is first, how long until the
    /// waiter ahead would count as dead (0: less than a tick).
    pub fn acquire_waiting(
        &mut self,
        req: ReqId,
        join: bool,
        mutation: Mutation,
    ) -> (Reply, Option<i32>) {
        let owner = req.client;
        match self.latch(req) {
            Some(Latch::Cancelled) => return (Reply::Spent, None),
            Some(Latch::Granted) if self.held_by(owner) => return (Reply::Granted, None),
            Some(Latch::Granted) => return (Reply::Spent, None),
            None => {}
        }
        self.purge();
        let first = self.queue.first().is_none_or(|&head| head == owner);
        if self.hold.is_none() && (first || mutation == Mutation::Barging) {
            if let Some(at) = self.queue.iter().position(|&w| w == owner) {
                self.leave_line(at);
            }
            self.hold = Some((owner, 1));
            self.granted(req);
            if let Some(clock) = self.clock.as_mut() {
                let waiter = clock.waiter;
                clock.scores.iter_mut().for_each(|score| *score -= waiter);
            }
            return (Reply::Granted, None);
        }
        if let Some((_, count)) = self.hold.as_mut().filter(|(o, _)| *o == owner) {
            *count += 1;
            self.granted(req);
            return (Reply::Granted, None);
        }
        let queued = self.queue.contains(&owner);
        if join && !queued {
            self.queue.push(owner);
        }
        let Some(clock) = self.clock.as_mut() else {
            return (Reply::Refused, None);
        };
        let left = match self.hold {
            Some(_) => clock.hold_ends - clock.now,
            None => 0,
        };
        if !join && !queued {
            return (Reply::Refused, Some(left));
        }
        let mine = match self.queue.iter().position(|&w| w == owner) {
            Some(at) if at < clock.scores.len() => clock.scores[at],
            _ => {
                // Behind the last waiter's score, or the hold's end.
                let ahead = clock
                    .scores
                    .last()
                    .map_or(left, |last| (last - clock.now).max(0));
                let mine = ahead + clock.waiter + clock.now;
                clock.scores.push(mine);
                mine
            }
        };
        if left > 0 {
            return (Reply::Refused, Some(left));
        }
        (
            Reply::Refused,
            Some((mine - clock.waiter - clock.now).max(0)),
        )
    }

    /// A grant or re-entry of `req`: its latch, and with a clock the
    /// hold's new end.
    fn granted(&mut self, req: ReqId) {
        self.acquire_latches.push((req, Latch::Granted));
        self.acquire_latches.sort();
        if let Some(clock) = self.clock.as_mut() {
            clock.hold_ends = clock.now + clock.lease;
            clock.acquire_ends.push((req, clock.now + clock.latch_ttl));
            clock.acquire_ends.sort();
        }
    }

    /// A release's latch, replying `first`; with a clock the hold's new
    /// end when holds remain.
    fn released(&mut self, req: ReqId, first: u8) {
        self.unlock_latches.push((req, first));
        self.unlock_latches.sort();
        if let Some(clock) = self.clock.as_mut() {
            // The TTL rises to the lease, never falls (a later hold of the
            // owner may have set a longer one).
            if first == 0 {
                clock.hold_ends = clock.hold_ends.max(clock.now + clock.lease);
            }
            clock.unlock_ends.push((req, clock.now + clock.latch_ttl));
            clock.unlock_ends.sort();
        }
    }

    /// The waiter at `at` leaves the line (and its score the set).
    fn leave_line(&mut self, at: usize) {
        self.queue.remove(at);
        if let Some(clock) = self.clock.as_mut() {
            if at < clock.scores.len() {
                clock.scores.remove(at);
            }
        }
    }

    /// Dead waiters at the head of the line leave it (with a clock: those
    /// whose score is not past now).
    fn purge(&mut self) {
        while let (Some(clock), Some(_)) = (&self.clock, self.queue.first()) {
            match clock.scores.first() {
                Some(&score) if score > clock.now => break,
                _ => self.leave_line(0),
            }
        }
    }

    /// A tick passes: the hold and the latches whose end comes run out.
    /// Nothing without a clock.
    pub fn tick(&mut self) {
        let Some(clock) = self.clock.as_mut() else {
            return;
        };
        clock.now += 1;
        let now = clock.now;
        if self.hold.is_some() && clock.hold_ends <= now {
            self.hold = None;
        }
        crate::expire_latches(now, &mut self.acquire_latches, &mut clock.acquire_ends);
        crate::expire_latches(now, &mut self.unlock_latches, &mut clock.unlock_ends);
    }

    /// `lua/fair_release.lua`; and the owner it wakes, if any.
    pub fn release(&mut self, req: ReqId) -> (Reply, Option<ClientId>) {
        if let Some((_, first)) = self.unlock_latches.iter().find(|(r, _)| *r == req) {
            return (Reply::Released(*first), None);
        }
        self.purge();
        let owner = req.client;
        let Some((holder, count)) = self.hold else {
            // Gone already: the first in line may take it now.
            return (Reply::NotHeld, self.queue.first().copied());
        };
        if holder != owner {
            return (Reply::NotHeld, None);
        }
        if count > 1 {
            self.hold = Some((holder, count - 1));
            self.released(req, 0);
            return (Reply::Released(0), None);
        }
        self.hold = None;
        self.released(req, 1);
        (Reply::Released(1), self.queue.first().copied())
    }

    /// `lua/fair_release.lua` as the give-back of the hold `grant` took,
    /// under its own request `req`: a release while the grant's latch
    /// shows the grant (or `req` ran before: a replay), else `NotHeld`,
    /// nothing written and nobody woken. A give-back that runs closes the
    /// grant's latch (`x`), as the lock's does (see
    /// `lock::Server::give_back`).
    pub fn give_back(&mut self, req: ReqId, grant: ReqId) -> (Reply, Option<ClientId>) {
        let replay = self.unlock_latches.iter().any(|(r, _)| *r == req);
        if !replay && self.latch(grant) != Some(Latch::Granted) {
            return (Reply::NotHeld, None);
        }
        if !replay {
            crate::close_grant(&mut self.acquire_latches, grant);
        }
        self.release(req)
    }

    /// `lua/fair_force_unlock.lua`: the lock opened whoever holds it
    /// (`Released(1)`, or `Released(0)` when it was not held), and the
    /// first live waiter woken (dead ones purged first).
    pub fn force_unlock(&mut self) -> (Reply, Option<ClientId>) {
        if self.hold.take().is_none() {
            return (Reply::Released(0), None);
        }
        self.purge();
        (Reply::Released(1), self.queue.first().copied())
    }

    /// `lua/fair_leave.lua`; and the owner it wakes, if any.
    pub fn leave(&mut self, owner: ClientId, mutation: Mutation) -> (Reply, Option<ClientId>) {
        let Some(at) = self.queue.iter().position(|&w| w == owner) else {
            return (Reply::Left(false), None);
        };
        self.leave_line(at);
        if let Some(clock) = self.clock.as_mut() {
            // Those behind move up a place.
            let waiter = clock.waiter;
            clock.scores[at..]
                .iter_mut()
                .for_each(|score| *score -= waiter);
        }
        let wake = match (at, self.hold, self.queue.first()) {
            (0, None, Some(&next)) if mutation != Mutation::LeaveWakesNobody => Some(next),
            _ => None,
        };
        (Reply::Left(true), wake)
    }
}

/// What a client asks of Redis.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Op {
    Acquire(ReqId),
    Release(ReqId),
    Leave,
}

/// A request in flight.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Sent {
    pub client: ClientId,
    pub op: Op,
}

/// A reply in flight.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Answer {
    pub client: ClientId,
    pub reply: Reply,
}

/// What a client is doing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Phase {
    Idle,
    /// An attempt in flight.
    Trying(ReqId),
    /// Refused: waiting for a message on its own channel.
    Waiting(ReqId),
    Holding,
    Releasing,
    /// Its wait ended early while an attempt was in flight: the attempt's
    /// reply is awaited, then what it took is given back, or the line left
    /// (as the library's abandoned attempt does).
    Abandoned(ReqId),
    /// Its wait ended early: leaving the line (or giving back a grant
    /// nobody got).
    Leaving,
}

/// One client, one owner.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Client {
    pub phase: Phase,
    pub requests: u8,
    pub acquires: u8,
    /// Acquires that ended, granted or not.
    pub ended: u8,
    /// A message came while its attempt was in flight.
    pub woken: bool,
}

/// The whole system.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct State {
    pub server: Server,
    pub clients: Vec<Client>,
    /// Requests in flight (a multiset, sorted).
    pub requests: Vec<Sent>,
    /// Replies in flight (a multiset, sorted).
    pub replies: Vec<Answer>,
    /// Messages in flight, each to its owner's channel (sorted).
    pub messages: Vec<ClientId>,
    pub give_ups_left: u8,
    /// Clients in the order the queue took them in, and whether each was
    /// served (granted) or left since (a ghost, for the order check).
    pub line: Vec<(ClientId, bool)>,
    /// A client was granted while one that came before it waited on.
    pub overtaken: bool,
}

/// A step of the system.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    Acquire(ClientId),
    Release(ClientId),
    /// A waiter's wait ends before its grant.
    GiveUp(ClientId),
    Run(usize),
    Deliver(usize),
    /// The message at this index reaches its owner.
    Wake(usize),
}

/// The fair lock's queue, as a [`Model`].
#[derive(Clone, Debug)]
pub struct FairModel {
    pub bounds: Bounds,
    pub mutation: Mutation,
}

impl FairModel {
    pub fn new(bounds: Bounds, mutation: Mutation) -> Self {
        FairModel { bounds, mutation }
    }

    fn send(state: &mut State, id: ClientId, op: Op) {
        state.requests.push(Sent { client: id, op });
        state.requests.sort();
    }

    fn next_req(state: &mut State, id: ClientId) -> ReqId {
        let c = &mut state.clients[id as usize];
        c.requests += 1;
        ReqId {
            client: id,
            seq: c.requests,
        }
    }

    fn attempt(state: &mut State, id: ClientId, req: ReqId) {
        let c = &mut state.clients[id as usize];
        c.phase = Phase::Trying(req);
        c.woken = false;
        Self::send(state, id, Op::Acquire(req));
    }

    fn wake(state: &mut State, owner: Option<ClientId>) {
        if let Some(owner) = owner {
            state.messages.push(owner);
            state.messages.sort();
        }
    }

    fn read(&self, state: &mut State, answer: Answer) {
        let id = answer.client;
        let c = state.clients[id as usize];
        match (c.phase, answer.reply) {
            (Phase::Trying(_), Reply::Granted) => {
                let c = &mut state.clients[id as usize];
                c.phase = Phase::Holding;
                c.ended += 1;
            }
            (Phase::Trying(req), Reply::Refused) if c.woken => Self::attempt(state, id, req),
            (Phase::Trying(req), Reply::Refused) => {
                state.clients[id as usize].phase = Phase::Waiting(req)
            }
            (Phase::Releasing, _) => state.clients[id as usize].phase = Phase::Idle,
            (Phase::Abandoned(_), Reply::Granted) => {
                // Nobody got it: given back.
                let give_back = Self::next_req(state, id);
                state.clients[id as usize].phase = Phase::Leaving;
                Self::send(state, id, Op::Release(give_back));
            }
            (Phase::Abandoned(_), _) => {
                state.clients[id as usize].phase = Phase::Leaving;
                Self::send(state, id, Op::Leave);
            }
            (Phase::Leaving, _) => {
                let c = &mut state.clients[id as usize];
                c.phase = Phase::Idle;
                c.ended += 1;
            }
            _ => {}
        }
    }
}

impl Model for FairModel {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        let client = Client {
            phase: Phase::Idle,
            requests: 0,
            acquires: 0,
            ended: 0,
            woken: false,
        };
        vec![State {
            server: Server::default(),
            clients: vec![client; self.bounds.clients as usize],
            requests: Vec::new(),
            replies: Vec::new(),
            messages: Vec::new(),
            give_ups_left: self.bounds.give_ups,
            line: Vec::new(),
            overtaken: false,
        }]
    }

    fn actions(&self, state: &State, actions: &mut Vec<Action>) {
        for (i, c) in state.clients.iter().enumerate() {
            let id = i as ClientId;
            match c.phase {
                Phase::Idle if c.acquires < self.bounds.acquires => {
                    actions.push(Action::Acquire(id))
                }
                Phase::Holding => actions.push(Action::Release(id)),
                Phase::Waiting(_) | Phase::Trying(_) if state.give_ups_left > 0 => {
                    actions.push(Action::GiveUp(id))
                }
                _ => {}
            }
        }
        for i in 0..state.requests.len() {
            if i == 0 || state.requests[i] != state.requests[i - 1] {
                actions.push(Action::Run(i));
            }
        }
        for i in 0..state.replies.len() {
            if i == 0 || state.replies[i] != state.replies[i - 1] {
                actions.push(Action::Deliver(i));
            }
        }
        for i in 0..state.messages.len() {
            if i == 0 || state.messages[i] != state.messages[i - 1] {
                actions.push(Action::Wake(i));
            }
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut state = last.clone();
        let m = self.mutation;
        match action {
            Action::Acquire(id) => {
                let req = Self::next_req(&mut state, id);
                state.clients[id as usize].acquires += 1;
                // Subscribed to its own channel before the first attempt.
                Self::attempt(&mut state, id, req);
            }
            Action::Release(id) => {
                let req = Self::next_req(&mut state, id);
                state.clients[id as usize].phase = Phase::Releasing;
                Self::send(&mut state, id, Op::Release(req));
            }
            Action::GiveUp(id) => {
                state.give_ups_left -= 1;
                match state.clients[id as usize].phase {
                    Phase::Trying(req) if m != Mutation::LeaveBeforeReply => {
                        state.clients[id as usize].phase = Phase::Abandoned(req)
                    }
                    _ => {
                        state.clients[id as usize].phase = Phase::Leaving;
                        Self::send(&mut state, id, Op::Leave);
                    }
                }
            }
            Action::Run(i) => {
                let sent = state.requests.remove(i);
                let server = &mut state.server;
                let (reply, woken) = match sent.op {
                    Op::Acquire(req) => {
                        let queued = server.queue.contains(&sent.client);
                        let reply = server.acquire(req, true, m);
                        if !queued && server.queue.contains(&sent.client) {
                            state.line.push((sent.client, false));
                        }
                        if reply == Reply::Granted {
                            // Anyone who came before it and still waits
                            // was overtaken.
                            let mine = state.line.iter().rposition(|(c, _)| *c == sent.client);
                            let before = mine.unwrap_or(state.line.len());
                            state.overtaken |= state.line[..before]
                                .iter()
                                .any(|(c, done)| !done && *c != sent.client);
                            if let Some(at) = mine {
                                state.line[at].1 = true;
                            }
                        }
                        (reply, None)
                    }
                    Op::Release(req) => server.release(req),
                    Op::Leave => {
                        let (reply, woken) = server.leave(sent.client, m);
                        if let Some(at) = state.line.iter().rposition(|(c, _)| *c == sent.client) {
                            state.line[at].1 = true;
                        }
                        (reply, woken)
                    }
                };
                Self::wake(&mut state, woken);
                state.replies.push(Answer {
                    client: sent.client,
                    reply,
                });
                state.replies.sort();
            }
            Action::Deliver(i) => {
                let answer = state.replies.remove(i);
                self.read(&mut state, answer);
            }
            Action::Wake(i) => {
                let id = state.messages.remove(i);
                match state.clients[id as usize].phase {
                    Phase::Waiting(req) => Self::attempt(&mut state, id, req),
                    Phase::Trying(_) => state.clients[id as usize].woken = true,
                    _ => {}
                }
            }
        }
        Some(state)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always("at most one holder", |_, s: &State| {
                s.clients
                    .iter()
                    .filter(|c| c.phase == Phase::Holding)
                    .count()
                    <= 1
            }),
            Property::always("first come, first served", |_, s: &State| !s.overtaken),
            Property::eventually(
                "every waiter is served or gone",
                |m: &FairModel, s: &State| s.clients.iter().all(|c| c.ended == m.bounds.acquires),
            ),
            Property::sometimes("a waiter behind another was served", |_, s: &State| {
                s.line.len() >= 2 && s.line.iter().all(|(_, done)| *done)
            }),
        ]
    }
}
