//! A model of the semaphore's protocol (Redisson's `RSemaphore` layout): a
//! count of available permits that any client takes and gives back, the
//! acquire latch that makes a resent take count once, the settle of a take
//! whose replies were lost and the give-back of what it took (with its own
//! latch, so that a resent give-back counts once), and the pub/sub message
//! that wakes a waiter when permits come back.
//!
//! A wait keeps one request id for all its attempts (as
//! `Semaphore::acquire` does): a refused attempt waits for a message (or
//! the look-again timer) and sends the same request again, so that an
//! earlier send of it that took permits late is found by the latch and
//! counted once.
//!
//! Checked: the permits clients hold never exceed the total; at rest the
//! count accounts for every permit (available plus held is the total, less
//! what a call that failed may have left taken); and no waiter waits
//! forever while permits come back (pub/sub alone wakes it when no message
//! is lost; the look-again timer wakes it when one is).

use std::fmt;

use stateright::{Model, Property};

use crate::{ClientId, Latch, ReqId, Time};

/// One rule broken on purpose.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Mutation {
    #[default]
    None,
    /// The take keeps no latch: a resend after a lost reply takes the
    /// permits twice.
    NoAcquireLatch,
    /// The give-back keeps no latch: a resend after a lost reply gives
    /// the permits back twice, and more permits go out than there are.
    NoGiveBackLatch,
    /// The waiter listens for messages only once its attempt was refused
    /// (not before it sends it): a release between the attempt's run and
    /// the refusal's arrival wakes nobody.
    NotifyAfterTry,
}

impl fmt::Display for Mutation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

/// The bounds of one check.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Bounds {
    /// Clients.
    pub clients: u8,
    /// Permits in all (the count the semaphore starts with).
    pub total: u8,
    /// Acquires per client (one permit each).
    pub acquires: u8,
    /// Resends per request after a timeout.
    pub resends: u8,
    /// Waits that end before their grant (a bound that ran out, a dropped
    /// future), in all.
    pub give_ups: u8,
    /// Pub/sub messages the network may lose, in all.
    pub losses: u8,
    /// The clock stops here.
    pub max_time: Time,
    /// How long a request may fly before it reaches Redis: after that it
    /// never does.
    pub window: Time,
    /// How long an acquire or give-back latch lives: more than the window.
    pub latch_ttl: Time,
}

impl Bounds {
    /// Lost replies, resends, late sends and waits that end early: two
    /// clients, one permit, one acquire each, one resend per call, one
    /// wait given up.
    pub fn lost_replies() -> Bounds {
        Bounds {
            clients: 2,
            total: 1,
            acquires: 1,
            resends: 1,
            give_ups: 1,
            losses: 0,
            max_time: 1,
            window: 1,
            latch_ttl: 3,
        }
    }

    /// Waiting and waking: two clients, one permit, two acquires of each,
    /// nothing lost but what a bound allows.
    pub fn waiting() -> Bounds {
        Bounds {
            clients: 2,
            total: 1,
            acquires: 2,
            resends: 0,
            give_ups: 0,
            losses: 0,
            max_time: 0,
            window: 1,
            latch_ttl: 3,
        }
    }

    /// Three clients and two permits, with lost replies and a wait that
    /// ends early.
    pub fn three_clients() -> Bounds {
        Bounds {
            clients: 3,
            total: 2,
            acquires: 1,
            resends: 0,
            give_ups: 1,
            losses: 0,
            max_time: 0,
            window: 1,
            latch_ttl: 3,
        }
    }
}

/// What Redis holds: the count, and the latches.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Server {
    /// Available permits (`INCRBY` may take it anywhere).
    pub available: i16,
    /// Acquire latches: request, value, when it runs out. Sorted.
    pub acquire_latches: Vec<(ReqId, Latch, Time)>,
    /// Give-back latches: request, the count its first run left, when it
    /// runs out. Sorted.
    pub give_back_latches: Vec<(ReqId, i16, Time)>,
}

/// A script's reply, as the client reads it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Reply {
    /// Take: whether the permits were taken (1 or 0).
    Taken(bool),
    /// Release, give-back: the new count (also the message published).
    Count(i16),
    /// Settle: whether the request had been granted.
    Settled(bool),
}

impl Server {
    /// A semaphore with `total` permits.
    pub fn with(total: u8) -> Server {
        Server {
            available: total.into(),
            ..Server::default()
        }
    }

    pub fn latch(&self, req: ReqId) -> Option<Latch> {
        self.acquire_latches
            .iter()
            .find(|(r, _, _)| *r == req)
            .map(|(_, latch, _)| *latch)
    }

    fn set_latch(&mut self, req: ReqId, latch: Latch, expires: Time) {
        self.acquire_latches.retain(|(r, _, _)| *r != req);
        self.acquire_latches.push((req, latch, expires));
        self.acquire_latches.sort();
    }

    /// `lua/semaphore_acquire.lua`: take `permits`.
    pub fn acquire(
        &mut self,
        now: Time,
        req: ReqId,
        permits: u8,
        b: &Bounds,
        mutation: Mutation,
    ) -> Reply {
        let latch = match mutation {
            Mutation::NoAcquireLatch => None,
            _ => self.latch(req),
        };
        match latch {
            Some(Latch::Cancelled) => Reply::Taken(false),
            Some(Latch::Granted) => Reply::Taken(true),
            None if self.available >= i16::from(permits) => {
                self.available -= i16::from(permits);
                if mutation != Mutation::NoAcquireLatch {
                    self.set_latch(req, Latch::Granted, now + b.latch_ttl);
                }
                Reply::Taken(true)
            }
            None => Reply::Taken(false),
        }
    }

    /// `lua/semaphore_release.lua`: give `permits` (a release, no latch).
    pub fn release(&mut self, permits: i16) -> Reply {
        self.available += permits;
        Reply::Count(self.available)
    }

    /// `lua/semaphore_give_back.lua`: give back what request `req`'s take
    /// took, once per give-back request.
    pub fn give_back(
        &mut self,
        now: Time,
        req: ReqId,
        permits: u8,
        b: &Bounds,
        mutation: Mutation,
    ) -> Reply {
        if mutation != Mutation::NoGiveBackLatch {
            if let Some((_, first, _)) = self.give_back_latches.iter().find(|(r, _, _)| *r == req) {
                return Reply::Count(*first);
            }
        }
        self.available += i16::from(permits);
        if mutation != Mutation::NoGiveBackLatch {
            self.give_back_latches
                .push((req, self.available, now + b.latch_ttl));
            self.give_back_latches.sort();
        }
        Reply::Count(self.available)
    }

    /// `lua/acquire_cancel.lua`.
    pub fn settle(&mut self, now: Time, req: ReqId, b: &Bounds) -> Reply {
        match self.latch(req) {
            None => {
                self.set_latch(req, Latch::Cancelled, now + b.latch_ttl);
                Reply::Settled(false)
            }
            Some(Latch::Cancelled) => Reply::Settled(false),
            Some(Latch::Granted) => Reply::Settled(true),
        }
    }

    /// Time passes to `now`: latches that ran out are gone.
    pub fn expire(&mut self, now: Time) {
        self.acquire_latches.retain(|(_, _, at)| *at > now);
        self.give_back_latches.retain(|(_, _, at)| *at > now);
    }
}

/// What a client asks of Redis.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Op {
    Acquire(ReqId),
    Release,
    Settle(ReqId),
    GiveBack(ReqId),
}

/// A request in flight.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Sent {
    pub client: ClientId,
    pub op: Op,
    /// When it was sent.
    pub at: Time,
    /// Its client still reads its reply (it has sent nothing since).
    pub awaited: bool,
}

/// A reply in flight.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Answer {
    pub client: ClientId,
    pub op: Op,
    pub reply: Reply,
}

/// What a client is doing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Phase {
    Idle,
    /// An attempt of its wait's request in flight; `resends` so far.
    Trying {
        req: ReqId,
        resends: u8,
    },
    /// Refused: waiting for a message (or the look-again timer), with the
    /// resends made so far.
    Waiting {
        req: ReqId,
        resends: u8,
    },
    Holding,
    /// A release sent (once: a release has no latch, and is not resent).
    Releasing,
    /// Settling a take that sends were lost of.
    Settling(ReqId),
    /// Giving back what a settled take was found to have taken.
    GivingBack {
        req: ReqId,
        resends: u8,
    },
}

/// One client.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Client {
    pub phase: Phase,
    /// Requests made so far.
    pub requests: u8,
    /// Acquires started so far.
    pub acquires: u8,
    /// Acquires that ended, granted or not.
    pub ended: u8,
    /// Subscribed to the semaphore's channel (from the wait's start to its
    /// end).
    pub subscribed: bool,
    /// A message came since its current attempt was sent: it tries again
    /// at once after a refusal.
    pub woken: bool,
    /// A send of its current take got no reply.
    pub lost: bool,
    /// Permits a call that failed may have left taken (a release or a
    /// give-back whose replies were lost, a settle that never got
    /// through): the count may lack them.
    pub unsure: u8,
}

impl Client {
    fn new() -> Self {
        Client {
            phase: Phase::Idle,
            requests: 0,
            acquires: 0,
            ended: 0,
            subscribed: false,
            woken: false,
            lost: false,
            unsure: 0,
        }
    }
}

/// The whole system.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct State {
    pub now: Time,
    pub server: Server,
    pub clients: Vec<Client>,
    /// Requests in flight (a multiset, sorted).
    pub requests: Vec<Sent>,
    /// Replies in flight (a multiset, sorted).
    pub replies: Vec<Answer>,
    /// Pub/sub messages in flight, to each subscriber (sorted).
    pub messages: Vec<ClientId>,
    pub give_ups_left: u8,
    pub losses_left: u8,
    /// A message woke a waiter (for the reachability check).
    pub woke: bool,
}

impl State {
    /// Permits the clients hold.
    pub fn held(&self) -> u8 {
        self.clients
            .iter()
            .filter(|c| c.phase == Phase::Holding)
            .count() as u8
    }

    /// Nothing in flight and nobody mid-call (a waiter whose sends were
    /// all answered holds nothing; one with a lost send may hold what its
    /// next attempt finds in the latch).
    pub fn at_rest(&self) -> bool {
        self.requests.is_empty()
            && self.replies.is_empty()
            && self.clients.iter().all(|c| match c.phase {
                Phase::Idle | Phase::Holding => true,
                Phase::Waiting { .. } => !c.lost,
                _ => false,
            })
    }
}

/// A step of the system.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// A client starts a wait for one permit.
    Acquire(ClientId),
    /// A holder releases its permit.
    Release(ClientId),
    /// A client's call times out: it resends, or gives up.
    Timeout(ClientId),
    /// A waiter's wait ends before its grant.
    GiveUp(ClientId),
    /// A waiter's look-again timer fires: it tries again.
    LookAgain(ClientId),
    /// Redis runs the request at this index.
    Run(usize),
    /// The reply at this index reaches its client.
    Deliver(usize),
    /// The message at this index reaches its subscriber.
    Wake(usize),
    /// The network loses the message at this index.
    Lose(usize),
    /// Time passes one tick.
    Tick,
}

/// The semaphore's protocol, as a [`Model`].
#[derive(Clone, Debug)]
pub struct SemaphoreModel {
    pub bounds: Bounds,
    pub mutation: Mutation,
    /// The waiter's look-again timer (every third of the watchdog timeout
    /// in the library): off, pub/sub alone must wake every waiter.
    pub look_again: bool,
}

impl SemaphoreModel {
    pub fn new(bounds: Bounds, mutation: Mutation) -> Self {
        SemaphoreModel {
            bounds,
            mutation,
            look_again: true,
        }
    }

    /// Pub/sub alone, without the look-again timer.
    pub fn without_look_again(bounds: Bounds, mutation: Mutation) -> Self {
        SemaphoreModel {
            look_again: false,
            ..SemaphoreModel::new(bounds, mutation)
        }
    }

    /// Client `id` sends `op`: it reads no reply of what it sent before.
    fn send(state: &mut State, id: ClientId, op: Op) {
        for r in state.requests.iter_mut().filter(|r| r.client == id) {
            r.awaited = false;
        }
        state.replies.retain(|a| a.client != id);
        state.requests.push(Sent {
            client: id,
            op,
            at: state.now,
            awaited: true,
        });
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

    /// An attempt of the wait's request (the resends a wait may make are
    /// counted over its attempts: a bound on the copies in flight).
    fn attempt(state: &mut State, id: ClientId, req: ReqId, resends: u8) {
        let c = &mut state.clients[id as usize];
        c.phase = Phase::Trying { req, resends };
        c.woken = false;
        Self::send(state, id, Op::Acquire(req));
    }

    /// The acquire ends, granted or not.
    fn end(state: &mut State, id: ClientId, granted: bool) {
        let c = &mut state.clients[id as usize];
        c.phase = if granted { Phase::Holding } else { Phase::Idle };
        c.ended += 1;
        c.subscribed = false;
        c.woken = false;
        c.lost = false;
    }

    /// The wait's request is let go: settled if a send of it was lost.
    fn settle_or_end(state: &mut State, id: ClientId, req: ReqId) {
        if state.clients[id as usize].lost {
            let c = &mut state.clients[id as usize];
            c.phase = Phase::Settling(req);
            c.subscribed = false;
            Self::send(state, id, Op::Settle(req));
        } else {
            Self::end(state, id, false);
        }
    }

    /// Redis published a new count: every subscriber gets a message.
    fn publish(state: &mut State) {
        for (i, c) in state.clients.iter().enumerate() {
            if c.subscribed {
                state.messages.push(i as ClientId);
            }
        }
        state.messages.sort();
    }

    fn read(&self, state: &mut State, answer: Answer) {
        let id = answer.client;
        let c = state.clients[id as usize];
        match (c.phase, answer.reply) {
            (Phase::Trying { .. }, Reply::Taken(true)) => Self::end(state, id, true),
            (Phase::Trying { req, resends }, Reply::Taken(false)) if c.woken => {
                Self::attempt(state, id, req, resends)
            }
            (Phase::Trying { req, resends }, Reply::Taken(false)) => {
                state.clients[id as usize].phase = Phase::Waiting { req, resends }
            }
            (Phase::Releasing, _) => state.clients[id as usize].phase = Phase::Idle,
            (Phase::Settling(_), Reply::Settled(true)) => {
                let give_back = Self::next_req(state, id);
                state.clients[id as usize].phase = Phase::GivingBack {
                    req: give_back,
                    resends: 0,
                };
                Self::send(state, id, Op::GiveBack(give_back));
            }
            (Phase::Settling(_), _) | (Phase::GivingBack { .. }, _) => Self::end(state, id, false),
            _ => {}
        }
    }

    fn time_out(&self, state: &mut State, id: ClientId) {
        let resends_max = self.bounds.resends;
        let c = state.clients[id as usize];
        match c.phase {
            Phase::Trying { req, resends } if resends < resends_max => {
                let c = &mut state.clients[id as usize];
                c.phase = Phase::Trying {
                    req,
                    resends: resends + 1,
                };
                c.lost = true;
                Self::send(state, id, Op::Acquire(req));
            }
            Phase::Trying { req, .. } => {
                state.clients[id as usize].lost = true;
                Self::settle_or_end(state, id, req);
            }
            Phase::GivingBack { req, resends } if resends < resends_max => {
                state.clients[id as usize].phase = Phase::GivingBack {
                    req,
                    resends: resends + 1,
                };
                Self::send(state, id, Op::GiveBack(req));
            }
            Phase::Releasing | Phase::Settling(_) | Phase::GivingBack { .. } => {
                // It cannot learn whether its call counted: the count may
                // lack a permit (a leak the client logs).
                if c.phase != Phase::Releasing {
                    Self::end(state, id, false);
                } else {
                    state.clients[id as usize].phase = Phase::Idle;
                }
                let c = &mut state.clients[id as usize];
                c.unsure += 1;
                for r in state.requests.iter_mut().filter(|r| r.client == id) {
                    r.awaited = false;
                }
                state.replies.retain(|a| a.client != id);
            }
            _ => {}
        }
    }
}

impl Model for SemaphoreModel {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        vec![State {
            now: 0,
            server: Server::with(self.bounds.total),
            clients: vec![Client::new(); self.bounds.clients as usize],
            requests: Vec::new(),
            replies: Vec::new(),
            messages: Vec::new(),
            give_ups_left: self.bounds.give_ups,
            losses_left: self.bounds.losses,
            woke: false,
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
                Phase::Waiting { .. } => {
                    if self.look_again {
                        actions.push(Action::LookAgain(id));
                    }
                }
                Phase::Idle => {}
                _ => actions.push(Action::Timeout(id)),
            }
            if matches!(c.phase, Phase::Trying { .. } | Phase::Waiting { .. })
                && state.give_ups_left > 0
            {
                actions.push(Action::GiveUp(id));
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
                if state.losses_left > 0 {
                    actions.push(Action::Lose(i));
                }
            }
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
                let c = &mut state.clients[id as usize];
                c.acquires += 1;
                c.lost = false;
                // Subscribed before the first attempt.
                c.subscribed = true;
                Self::attempt(&mut state, id, req, 0);
            }
            Action::Release(id) => {
                state.clients[id as usize].phase = Phase::Releasing;
                Self::send(&mut state, id, Op::Release);
            }
            Action::Timeout(id) => self.time_out(&mut state, id),
            Action::GiveUp(id) => {
                state.give_ups_left -= 1;
                let req = match state.clients[id as usize].phase {
                    Phase::Trying { req, .. } => {
                        // Its attempt's reply is not read: what it took is
                        // settled.
                        state.clients[id as usize].lost = true;
                        req
                    }
                    Phase::Waiting { req, .. } => req,
                    _ => return None,
                };
                Self::settle_or_end(&mut state, id, req);
            }
            Action::LookAgain(id) => {
                let Phase::Waiting { req, resends } = state.clients[id as usize].phase else {
                    return None;
                };
                Self::attempt(&mut state, id, req, resends);
            }
            Action::Run(i) => {
                let sent = state.requests.remove(i);
                let now = state.now;
                let server = &mut state.server;
                let reply = match sent.op {
                    Op::Acquire(req) => server.acquire(now, req, 1, b, m),
                    Op::Release => server.release(1),
                    Op::Settle(req) => server.settle(now, req, b),
                    Op::GiveBack(req) => server.give_back(now, req, 1, b, m),
                };
                if matches!(sent.op, Op::Release | Op::GiveBack(_)) {
                    Self::publish(&mut state);
                }
                if sent.awaited {
                    state.replies.push(Answer {
                        client: sent.client,
                        op: sent.op,
                        reply,
                    });
                    state.replies.sort();
                }
            }
            Action::Deliver(i) => {
                let answer = state.replies.remove(i);
                self.read(&mut state, answer);
            }
            Action::Wake(i) => {
                let id = state.messages.remove(i);
                let c = state.clients[id as usize];
                match c.phase {
                    Phase::Waiting { req, resends } if c.subscribed => {
                        state.woke = true;
                        Self::attempt(&mut state, id, req, resends)
                    }
                    Phase::Trying { .. } if c.subscribed && m != Mutation::NotifyAfterTry => {
                        state.clients[id as usize].woken = true
                    }
                    _ => {}
                }
            }
            Action::Lose(i) => {
                state.messages.remove(i);
                state.losses_left -= 1;
            }
            Action::Tick => {
                state.now += 1;
                let now = state.now;
                state.server.expire(now);
                let window = self.bounds.window;
                state.requests.retain(|r| r.at + window > now);
            }
        }
        Some(state)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always(
                "permits out never exceed the total",
                |m: &SemaphoreModel, s: &State| s.held() <= m.bounds.total,
            ),
            Property::always(
                "the count accounts for every permit",
                |m: &SemaphoreModel, s: &State| count_accounts(s, m.bounds.total),
            ),
            Property::eventually(
                "no waiter waits forever",
                |m: &SemaphoreModel, s: &State| {
                    // Or a permit may have leaked: a call that failed may
                    // have left it taken, and nobody gives it back.
                    s.clients.iter().all(|c| c.ended == m.bounds.acquires)
                        || s.clients.iter().any(|c| c.unsure > 0)
                },
            ),
            Property::sometimes("every client held a permit", |_, s: &State| {
                s.clients.iter().all(|c| c.ended > 0) && s.held() > 0
            }),
            Property::sometimes("a message woke a waiter", |_, s: &State| s.woke),
        ]
    }
}

/// At rest, the available count plus the permits held is the total, less
/// what the clients' failed calls may have left taken, never more.
pub fn count_accounts(s: &State, total: u8) -> bool {
    if !s.at_rest() {
        return true;
    }
    let missing = i16::from(total) - s.server.available - i16::from(s.held());
    let unsure: i16 = s.clients.iter().map(|c| i16::from(c.unsure)).sum();
    (0..=unsure).contains(&missing)
}
