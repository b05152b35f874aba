//! A model of the permit-expirable semaphore's protocol (Redisson's
//! `RPermitExpirableSemaphore` layout): a count of available permits and a
//! sorted set of the permits out, each with its id and the time its lease
//! ends, by which the server takes it back. A take sends ids of its own
//! making with an acquire latch (so that a resend takes once), a release
//! names the permit it gives back (so that a resend, or a give-back of a
//! permit that expired meanwhile, releases nobody else's), and a holder
//! counts its lease from its take's first send. A holder whose permit the
//! watchdog keeps renews it (`lua/renew_permits.lua`): a renewal only
//! lengthens the lease of a permit still out, never takes one back or
//! puts one out, and the holder counts the renewed lease from the
//! renewal's send.
//!
//! Checked: at no time do more clients believe they hold a permit with a
//! lease that has not run out than there are permits; every operation
//! keeps the count and the permits out adding up to the total.

use std::fmt;

use stateright::{Model, Property};

use crate::{ClientId, Latch, ReqId, Time};

/// One rule broken on purpose.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Mutation {
    #[default]
    None,
    /// The take keeps no latch: a resend after a lost reply takes a second
    /// permit, that no id names.
    NoAcquireLatch,
    /// The holder counts its lease from the grant's reply, not from the
    /// take's first send: the server takes the permit back while the
    /// holder still believes it holds it.
    LeaseFromReply,
    /// A renewal sets the lease of a permit that is not out (it expired and
    /// went back): a permit is out that the count did not give.
    RenewRecreates,
    /// The holder counts a renewed lease from the renewal's reply, not from
    /// its send: the server takes the permit back while the holder still
    /// believes it holds it.
    RenewFromReply,
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
    /// Permits in all.
    pub total: u8,
    /// Takes per client (one permit each).
    pub acquires: u8,
    /// Resends per request after a timeout.
    pub resends: u8,
    /// The clock stops here.
    pub max_time: Time,
    /// A permit's lease.
    pub lease: Time,
    /// How long a request may fly before it reaches Redis.
    pub window: Time,
    /// How long an acquire latch lives: the longer of the lease and the
    /// window, plus the window.
    pub latch_ttl: Time,
    /// Renewals per hold by the watchdog.
    pub renewals: u8,
}

impl Bounds {
    /// Two clients, one permit, leases that run out, lost replies and one
    /// resend per call.
    pub fn leases() -> Bounds {
        Bounds {
            clients: 2,
            total: 1,
            acquires: 1,
            resends: 1,
            max_time: 3,
            lease: 2,
            window: 1,
            latch_ttl: 3,
            renewals: 0,
        }
    }

    /// Two clients, one permit, a holder whose permit the watchdog renews
    /// twice, leases that run out, lost replies and one resend per call.
    pub fn renewals() -> Bounds {
        Bounds {
            max_time: 4,
            renewals: 2,
            ..Bounds::leases()
        }
    }

    /// Three clients and two permits, leases that run out, lost replies.
    pub fn three_clients() -> Bounds {
        Bounds {
            clients: 3,
            total: 2,
            resends: 0,
            ..Bounds::leases()
        }
    }
}

/// What Redis holds.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Server {
    /// Available permits.
    pub available: i16,
    /// The permits out (`{name}:timeout`): each take's permit id (its
    /// request), and when its lease ends. Sorted.
    pub out: Vec<(ReqId, Time)>,
    /// Acquire latches: request, value, when it runs out. Sorted.
    pub acquire_latches: Vec<(ReqId, Latch, Time)>,
}

/// A reply, as the client reads it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Reply {
    /// Take: nil (taken), or how long to wait (refused).
    Taken(bool),
    /// Release: 1, or -1 when the permit is not out.
    Released(bool),
    /// Settle: whether the request had been granted.
    Settled(bool),
    /// Renew: whether the permit was still out (its lease lengthened).
    Renewed(bool),
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

    fn is_out(&self, permit: ReqId) -> bool {
        self.out.iter().any(|(p, _)| *p == permit)
    }

    /// `lua/expirable.lua`, acquire: one permit whose id is `req`'s.
    pub fn acquire(&mut self, now: Time, req: ReqId, b: &Bounds, mutation: Mutation) -> Reply {
        let latch = match mutation {
            Mutation::NoAcquireLatch => None,
            _ => self.latch(req),
        };
        match latch {
            Some(Latch::Cancelled) => Reply::Taken(false),
            // Granted before: nil while its permit is out, refused once it
            // is not.
            Some(Latch::Granted) => Reply::Taken(self.is_out(req)),
            None if self.available >= 1 => {
                self.available -= 1;
                // `ZADD`: a permit id already out gets the new lease.
                self.out.retain(|(p, _)| *p != req);
                self.out.push((req, now + b.lease));
                self.out.sort();
                if mutation != Mutation::NoAcquireLatch {
                    self.set_latch(req, Latch::Granted, now + b.latch_ttl);
                }
                Reply::Taken(true)
            }
            None => Reply::Taken(false),
        }
    }

    /// `lua/expirable.lua`, release of the permit `permit`.
    pub fn release(&mut self, permit: ReqId) -> Reply {
        if !self.is_out(permit) {
            return Reply::Released(false);
        }
        self.out.retain(|(p, _)| *p != permit);
        self.available += 1;
        Reply::Released(true)
    }

    /// `lua/renew_permits.lua`, for one permit: a permit still out whose
    /// lease has not ended gets `ttl` from now, or keeps a longer lease;
    /// a permit not out (or whose lease ended, before any script took it
    /// back) is left alone. Whether the permit was renewed.
    pub fn renew(&mut self, now: Time, permit: ReqId, ttl: Time, mutation: Mutation) -> bool {
        match self.out.iter_mut().find(|(p, _)| *p == permit) {
            Some((_, at)) if *at > now => {
                *at = (*at).max(now + ttl);
                true
            }
            None if mutation == Mutation::RenewRecreates => {
                self.out.push((permit, now + ttl));
                self.out.sort();
                true
            }
            _ => false,
        }
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

    /// Time passes to `now`: latches that ran out are gone, and permits
    /// whose lease ended go back (every script does this first, by the
    /// server's clock).
    pub fn expire(&mut self, now: Time) {
        self.acquire_latches.retain(|(_, _, at)| *at > now);
        let before = self.out.len();
        self.out.retain(|(_, at)| *at > now);
        self.available += (before - self.out.len()) as i16;
    }
}

/// What a client asks of Redis.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Op {
    Acquire(ReqId),
    /// A release (or a give-back) of the permit with this id.
    Release(ReqId),
    Settle(ReqId),
    /// The watchdog's renewal of the permit with this id.
    Renew(ReqId),
}

/// A request in flight.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Sent {
    pub client: ClientId,
    pub op: Op,
    /// When it was sent.
    pub at: Time,
    /// Its client still reads its reply.
    pub awaited: bool,
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
    Trying {
        req: ReqId,
        resends: u8,
    },
    /// Holding the permit `req` took, until its local lease ends.
    Holding {
        req: ReqId,
        deadline: Time,
    },
    Releasing {
        req: ReqId,
        resends: u8,
    },
    Settling(ReqId),
    /// Giving back the permit a settled take was found to have taken.
    GivingBack {
        req: ReqId,
        resends: u8,
    },
}

/// One client.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Client {
    pub phase: Phase,
    pub requests: u8,
    pub acquires: u8,
    /// When its current take was first sent: its lease counts from then.
    pub since: Time,
    /// A send of its current take got no reply.
    pub lost: bool,
    /// Renewals sent for its current hold.
    pub renewals: u8,
    /// When its last renewal was sent: a renewed lease counts from then.
    pub renewed_at: Time,
}

impl Client {
    /// Whether it believes it holds a permit whose lease has not run out.
    pub fn believes_it_holds(&self, now: Time) -> bool {
        matches!(self.phase, Phase::Holding { deadline, .. } if now < deadline)
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
}

/// A step of the system.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// A client starts a take of one permit.
    Acquire(ClientId),
    /// A holder releases its permit.
    Release(ClientId),
    /// The watchdog renews a holder's permit.
    Renew(ClientId),
    /// A holder whose lease ran out lets the permit go (its release would
    /// fail: the server took it back).
    LetGo(ClientId),
    /// A client's call times out: it resends, or gives up.
    Timeout(ClientId),
    /// Redis runs the request at this index.
    Run(usize),
    /// The reply at this index reaches its client.
    Deliver(usize),
    /// Time passes one tick.
    Tick,
}

/// The permit-expirable semaphore's protocol, as a [`Model`].
#[derive(Clone, Debug)]
pub struct ExpirableModel {
    pub bounds: Bounds,
    pub mutation: Mutation,
}

impl ExpirableModel {
    pub fn new(bounds: Bounds, mutation: Mutation) -> Self {
        ExpirableModel { bounds, mutation }
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

    /// Client `id` stops reading replies, and goes idle.
    fn idle(state: &mut State, id: ClientId) {
        for r in state.requests.iter_mut().filter(|r| r.client == id) {
            r.awaited = false;
        }
        state.replies.retain(|a| a.client != id);
        let c = &mut state.clients[id as usize];
        c.phase = Phase::Idle;
        c.lost = false;
    }

    fn next_req(state: &mut State, id: ClientId) -> ReqId {
        let c = &mut state.clients[id as usize];
        c.requests += 1;
        ReqId {
            client: id,
            seq: c.requests,
        }
    }

    fn read(&self, state: &mut State, answer: Answer) {
        let id = answer.client;
        let c = state.clients[id as usize];
        match (c.phase, answer.reply) {
            (Phase::Trying { req, .. }, Reply::Taken(true)) => {
                let start = match self.mutation {
                    Mutation::LeaseFromReply => state.now,
                    _ => c.since,
                };
                let c = &mut state.clients[id as usize];
                c.phase = Phase::Holding {
                    req,
                    deadline: start + self.bounds.lease,
                };
                c.lost = false;
            }
            (Phase::Holding { req, deadline }, Reply::Renewed(true)) => {
                let start = match self.mutation {
                    Mutation::RenewFromReply => state.now,
                    _ => c.renewed_at,
                };
                state.clients[id as usize].phase = Phase::Holding {
                    req,
                    deadline: deadline.max(start + self.bounds.lease),
                };
            }
            // Not out: the lease is lost, the holder lets go.
            (Phase::Holding { .. }, Reply::Renewed(false)) => Self::idle(state, id),
            (Phase::Trying { req, .. }, Reply::Taken(false)) if c.lost => {
                // A lost send of it may have taken a permit: settled.
                state.clients[id as usize].phase = Phase::Settling(req);
                Self::send(state, id, Op::Settle(req));
            }
            (Phase::Settling(req), Reply::Settled(true)) => {
                state.clients[id as usize].phase = Phase::GivingBack { req, resends: 0 };
                Self::send(state, id, Op::Release(req));
            }
            // Refused (the model's waiter gives up), settled, released,
            // given back.
            (Phase::Trying { .. }, _)
            | (Phase::Settling(_), _)
            | (Phase::Releasing { .. }, _)
            | (Phase::GivingBack { .. }, _) => Self::idle(state, id),
            _ => {}
        }
    }

    fn time_out(&self, state: &mut State, id: ClientId) {
        let resends_max = self.bounds.resends;
        let c = state.clients[id as usize];
        let (phase, op) = match c.phase {
            Phase::Trying { req, resends } if resends < resends_max => (
                Phase::Trying {
                    req,
                    resends: resends + 1,
                },
                Op::Acquire(req),
            ),
            Phase::Trying { req, .. } => (Phase::Settling(req), Op::Settle(req)),
            // A release names its permit: resending it is safe.
            Phase::Releasing { req, resends } if resends < resends_max => (
                Phase::Releasing {
                    req,
                    resends: resends + 1,
                },
                Op::Release(req),
            ),
            Phase::GivingBack { req, resends } if resends < resends_max => (
                Phase::GivingBack {
                    req,
                    resends: resends + 1,
                },
                Op::Release(req),
            ),
            // Out of resends: what it took goes back when its lease ends.
            Phase::Releasing { .. } | Phase::Settling(_) | Phase::GivingBack { .. } => {
                Self::idle(state, id);
                return;
            }
            _ => return,
        };
        let c = &mut state.clients[id as usize];
        if matches!(c.phase, Phase::Trying { .. }) {
            c.lost = true;
        }
        c.phase = phase;
        Self::send(state, id, op);
    }
}

impl Model for ExpirableModel {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        let client = Client {
            phase: Phase::Idle,
            requests: 0,
            acquires: 0,
            since: 0,
            lost: false,
            renewals: 0,
            renewed_at: 0,
        };
        vec![State {
            now: 0,
            server: Server::with(self.bounds.total),
            clients: vec![client; self.bounds.clients as usize],
            requests: Vec::new(),
            replies: Vec::new(),
        }]
    }

    fn actions(&self, state: &State, actions: &mut Vec<Action>) {
        for (i, c) in state.clients.iter().enumerate() {
            let id = i as ClientId;
            match c.phase {
                Phase::Idle if c.acquires < self.bounds.acquires => {
                    actions.push(Action::Acquire(id))
                }
                Phase::Idle => {}
                Phase::Holding { .. } if c.believes_it_holds(state.now) => {
                    actions.push(Action::Release(id));
                    if c.renewals < self.bounds.renewals {
                        actions.push(Action::Renew(id));
                    }
                }
                Phase::Holding { .. } => actions.push(Action::LetGo(id)),
                _ => actions.push(Action::Timeout(id)),
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
                let c = &mut state.clients[id as usize];
                c.acquires += 1;
                c.lost = false;
                c.since = now;
                c.renewals = 0;
                c.phase = Phase::Trying { req, resends: 0 };
                Self::send(&mut state, id, Op::Acquire(req));
            }
            Action::Release(id) => {
                let Phase::Holding { req, .. } = state.clients[id as usize].phase else {
                    return None;
                };
                state.clients[id as usize].phase = Phase::Releasing { req, resends: 0 };
                Self::send(&mut state, id, Op::Release(req));
            }
            Action::Renew(id) => {
                let Phase::Holding { req, .. } = state.clients[id as usize].phase else {
                    return None;
                };
                let now = state.now;
                let c = &mut state.clients[id as usize];
                c.renewals += 1;
                c.renewed_at = now;
                Self::send(&mut state, id, Op::Renew(req));
            }
            Action::LetGo(id) => Self::idle(&mut state, id),
            Action::Timeout(id) => self.time_out(&mut state, id),
            Action::Run(i) => {
                let sent = state.requests.remove(i);
                let now = state.now;
                let server = &mut state.server;
                let reply = match sent.op {
                    Op::Acquire(req) => server.acquire(now, req, b, m),
                    Op::Release(req) => server.release(req),
                    Op::Settle(req) => server.settle(now, req, b),
                    Op::Renew(req) => Reply::Renewed(server.renew(now, req, b.lease, m)),
                };
                if sent.awaited {
                    state.replies.push(Answer {
                        client: sent.client,
                        reply,
                    });
                    state.replies.sort();
                }
            }
            Action::Deliver(i) => {
                let answer = state.replies.remove(i);
                self.read(&mut state, answer);
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
        let mut properties = vec![
            Property::always(
                "permits out never exceed the total",
                |m: &ExpirableModel, s: &State| {
                    s.clients
                        .iter()
                        .filter(|c| c.believes_it_holds(s.now))
                        .count()
                        <= m.bounds.total as usize
                },
            ),
            Property::always(
                "the count and the permits out add up to the total",
                |m: &ExpirableModel, s: &State| {
                    s.server.available + s.server.out.len() as i16 == i16::from(m.bounds.total)
                },
            ),
            Property::sometimes("both clients held a permit", |_, s: &State| {
                s.server
                    .acquire_latches
                    .iter()
                    .filter(|(_, latch, _)| *latch == Latch::Granted)
                    .map(|(r, _, _)| r.client)
                    .collect::<std::collections::BTreeSet<_>>()
                    .len()
                    >= 2
            }),
            Property::sometimes("a permit ran out on the server", |_, s: &State| {
                s.now > 0
                    && s.server.out.is_empty()
                    && s.clients
                        .iter()
                        .any(|c| matches!(c.phase, Phase::Holding { .. }))
            }),
        ];
        if self.bounds.renewals > 0 {
            properties.push(Property::sometimes(
                "a renewal kept a permit past its first lease",
                |m: &ExpirableModel, s: &State| {
                    s.clients
                        .iter()
                        .any(|c| c.believes_it_holds(s.now) && s.now >= c.since + m.bounds.lease)
                },
            ));
        }
        properties
    }
}
