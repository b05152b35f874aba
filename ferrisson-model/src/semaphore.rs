//! A model of the semaphore's protocol (Redisson's `RSemaphore` layout): a
//! count of available permits that any client takes and gives back, the
//! acquire latch that makes a resent take count once, the settle of a take
//! whose replies were lost and the give-back of what it took (with its own
//! latch, so that a resent give-back counts once), and the pub/sub message
//! that wakes a waiter when permits come back.
//!
//! A wait runs as `Semaphore::acquire` runs it: a first try without a
//! subscription; once refused, a subscription, then a try before each wait
//! (the wake-up registered before the try, so that a message published
//! while it flies is not missed). Its tries send one request while the
//! request is young (one resend window from its birth), so that an earlier
//! send that took permits late is found by the latch and counted once; an
//! older request is settled (when a send of it was lost) and replaced.
//! The look-again timer is modelled as a try that a waiter may make once
//! the count changed since its last try (a timer that fires while nothing
//! changed finds nothing new), so that a waiter nothing can wake shows as
//! one that waits forever.
//!
//! Checked: the permits clients hold never exceed the total; at rest the
//! count accounts for every permit (available plus held is the total, less
//! what a release whose reply was lost may have left taken); and no waiter
//! waits forever (pub/sub alone wakes it when no message is lost; the
//! look-again timer when one is).

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
    /// The waiter listens for messages only once its try was refused
    /// (not before it sends it): a release between the try's run and the
    /// refusal's arrival wakes nobody.
    NotifyAfterTry,
    /// Once subscribed, the waiter waits without trying again: a release
    /// between its first (unsubscribed) try and its subscription wakes
    /// nobody.
    NoTryAfterSubscribe,
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
    /// The longest pause of a waiter between a try and the next, when the
    /// count changed meanwhile (the look-again timer: a third of the
    /// watchdog timeout in the library).
    pub look_again: Time,
    /// How long an acquire latch lives. The library's rule for what never
    /// expires by itself (a semaphore's permits): two windows (a request
    /// is sent for one window from its birth, and each send may take one
    /// more to reach Redis) and a look-again (the wait settles an old
    /// request at its next try). A give-back's latch outlives its resends
    /// and any bound here.
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
            look_again: 1,
            latch_ttl: 3,
        }
    }

    /// Time: requests that grow old and are replaced, latches that run
    /// out, lost replies.
    pub fn time() -> Bounds {
        Bounds {
            max_time: 2,
            give_ups: 0,
            ..Bounds::lost_replies()
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
            look_again: 1,
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
            look_again: 1,
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
    /// Give-back latches: request, the count its first run left (they
    /// outlive every bound here). Sorted.
    pub give_back_latches: Vec<(ReqId, i16)>,
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

    /// `lua/semaphore_give_back.lua`: give back what a take took, once
    /// per give-back request `req`; and whether it published (a replayed
    /// give-back does not).
    pub fn give_back(&mut self, req: ReqId, permits: u8, mutation: Mutation) -> (Reply, bool) {
        if mutation != Mutation::NoGiveBackLatch {
            if let Some((_, first)) = self.give_back_latches.iter().find(|(r, _)| *r == req) {
                return (Reply::Count(*first), false);
            }
        }
        self.available += i16::from(permits);
        if mutation != Mutation::NoGiveBackLatch {
            self.give_back_latches.push((req, self.available));
            self.give_back_latches.sort();
        }
        (Reply::Count(self.available), true)
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

    /// Time passes to `now`: acquire latches that ran out are gone.
    pub fn expire(&mut self, now: Time) {
        self.acquire_latches.retain(|(_, _, at)| *at > now);
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

/// The request a wait's tries send: its id, when it was born, and the
/// resends after a lost reply so far (a bound on the copies in flight).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Wait {
    pub req: ReqId,
    pub born: Time,
    pub resends: u8,
}

/// What a client is doing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Phase {
    Idle,
    /// A try in flight.
    Trying(Wait),
    /// Its first try was refused: it subscribes (what is published before
    /// the subscription is not delivered to it).
    Subscribing(Wait),
    /// Refused: waiting for a message (or the look-again timer).
    Waiting(Wait),
    Holding,
    /// A release sent (once: a release has no latch, and is not resent).
    Releasing,
    /// Settling a request a send of which was lost; the wait goes on
    /// afterwards with a new request when `wait`, else it ends.
    Settling {
        req: ReqId,
        resends: u8,
        wait: bool,
    },
    /// Giving back what a settled request was found to have taken.
    GivingBack {
        req: ReqId,
        resends: u8,
        wait: bool,
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
    /// It held a permit at some time.
    pub held: bool,
    /// Subscribed to the semaphore's channel.
    pub subscribed: bool,
    /// A message came while its try was in flight: it tries again at once
    /// after a refusal.
    pub woken: bool,
    /// A send of its wait's current request got no reply.
    pub lost: bool,
    /// The count's changes when it last tried (see [`State::changes`]).
    pub seen: u8,
    /// When it last tried.
    pub tried: Time,
    /// When it last sent: a timeout comes within a window of it.
    pub sent: Time,
    /// Releases whose reply was lost: the count may lack their permits.
    pub unsure: u8,
}

impl Client {
    fn new() -> Self {
        Client {
            phase: Phase::Idle,
            requests: 0,
            acquires: 0,
            ended: 0,
            held: false,
            subscribed: false,
            woken: false,
            lost: false,
            seen: 0,
            tried: 0,
            sent: 0,
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
    /// Changes of the count so far (takes and gives): a look-again finds
    /// something new only after one.
    pub changes: u8,
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
    /// next try finds in the latch).
    pub fn at_rest(&self) -> bool {
        self.requests.is_empty()
            && self.replies.is_empty()
            && self.clients.iter().all(|c| match c.phase {
                Phase::Idle | Phase::Holding => true,
                Phase::Waiting(_) | Phase::Subscribing(_) => !c.lost,
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
    /// A client's call timed out: it sends again.
    Timeout(ClientId),
    /// A refused waiter subscribes.
    Subscribe(ClientId),
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
    /// The waiter's look-again timer (the refusal's hint, or every third
    /// of the watchdog timeout, in the library): off, pub/sub alone must
    /// wake every waiter.
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

    /// Client `id` stops reading what it sent before.
    fn forget(state: &mut State, id: ClientId) {
        for r in state.requests.iter_mut().filter(|r| r.client == id) {
            r.awaited = false;
        }
        state.replies.retain(|a| a.client != id);
    }

    /// Client `id` sends `op`: it reads no reply of what it sent before.
    fn send(state: &mut State, id: ClientId, op: Op) {
        Self::forget(state, id);
        state.clients[id as usize].sent = state.now;
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

    /// A new request for client `id`'s wait.
    fn new_wait(state: &mut State, id: ClientId) -> Wait {
        let req = Self::next_req(state, id);
        state.clients[id as usize].lost = false;
        Wait {
            req,
            born: state.now,
            resends: 0,
        }
    }

    /// A try of the wait's request, or, once the request is old, of a new
    /// one (the old one settled first when a send of it was lost).
    fn attempt(&self, state: &mut State, id: ClientId, wait: Wait) {
        if state.now >= wait.born + self.bounds.window {
            if state.clients[id as usize].lost {
                state.clients[id as usize].phase = Phase::Settling {
                    req: wait.req,
                    resends: 0,
                    wait: true,
                };
                Self::send(state, id, Op::Settle(wait.req));
                return;
            }
            let wait = Self::new_wait(state, id);
            return self.attempt(state, id, wait);
        }
        let (changes, now) = (state.changes, state.now);
        let c = &mut state.clients[id as usize];
        c.phase = Phase::Trying(wait);
        c.woken = false;
        c.seen = changes;
        c.tried = now;
        Self::send(state, id, Op::Acquire(wait.req));
    }

    /// The acquire ends, granted or not.
    fn end(state: &mut State, id: ClientId, granted: bool) {
        Self::forget(state, id);
        let c = &mut state.clients[id as usize];
        c.phase = if granted { Phase::Holding } else { Phase::Idle };
        c.ended += 1;
        c.held |= granted;
        c.subscribed = false;
        c.woken = false;
        c.lost = false;
    }

    /// The settle (and give-back) of a request is over: the wait goes on
    /// with a new request, or ends.
    fn settled(&self, state: &mut State, id: ClientId, wait: bool) {
        if wait {
            let next = Self::new_wait(state, id);
            self.attempt(state, id, next);
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
            (Phase::Trying(_), Reply::Taken(true)) => Self::end(state, id, true),
            (Phase::Trying(wait), Reply::Taken(false)) if !c.subscribed => {
                state.clients[id as usize].phase = Phase::Subscribing(wait)
            }
            (Phase::Trying(wait), Reply::Taken(false)) if c.woken => self.attempt(state, id, wait),
            (Phase::Trying(wait), Reply::Taken(false)) => {
                state.clients[id as usize].phase = Phase::Waiting(wait)
            }
            (Phase::Releasing, _) => state.clients[id as usize].phase = Phase::Idle,
            (Phase::Settling { wait, .. }, Reply::Settled(true)) => {
                let give_back = Self::next_req(state, id);
                state.clients[id as usize].phase = Phase::GivingBack {
                    req: give_back,
                    resends: 0,
                    wait,
                };
                Self::send(state, id, Op::GiveBack(give_back));
            }
            (Phase::Settling { wait, .. }, _) | (Phase::GivingBack { wait, .. }, _) => {
                self.settled(state, id, wait)
            }
            _ => {}
        }
    }

    /// A call timed out: sent again (a try's request, while young; a
    /// settle or a give-back, which are safe to resend), or, for a
    /// release, given up on.
    fn time_out(&self, state: &mut State, id: ClientId) {
        let c = state.clients[id as usize];
        match c.phase {
            Phase::Trying(wait) => {
                state.clients[id as usize].lost = true;
                let wait = Wait {
                    resends: wait.resends + 1,
                    ..wait
                };
                // A resend is a try again (the library waits out a send
                // that found no connection the same way).
                self.attempt(state, id, wait);
            }
            Phase::Settling { req, resends, wait } => {
                state.clients[id as usize].phase = Phase::Settling {
                    req,
                    resends: resends + 1,
                    wait,
                };
                Self::send(state, id, Op::Settle(req));
            }
            Phase::GivingBack { req, resends, wait } => {
                state.clients[id as usize].phase = Phase::GivingBack {
                    req,
                    resends: resends + 1,
                    wait,
                };
                Self::send(state, id, Op::GiveBack(req));
            }
            Phase::Releasing => {
                // It cannot learn whether its release counted: the count
                // may lack a permit.
                Self::forget(state, id);
                let c = &mut state.clients[id as usize];
                c.phase = Phase::Idle;
                c.unsure += 1;
            }
            _ => {}
        }
    }

    /// Whether client `id`'s call may time out: within a window of its
    /// send and the resend bound, or when nothing of it is in flight (its
    /// request never reached Redis).
    fn may_time_out(&self, state: &State, id: ClientId) -> bool {
        let c = &state.clients[id as usize];
        let max = self.bounds.resends;
        let within = match c.phase {
            Phase::Trying(wait) => wait.resends < max,
            Phase::Settling { resends, .. } | Phase::GivingBack { resends, .. } => resends < max,
            Phase::Releasing => max > 0,
            _ => return false,
        };
        (within && state.now < c.sent + self.bounds.window) || !self.in_flight(state, id)
    }

    /// Whether a timeout or a look-again is due: time cannot pass until it
    /// fires. A call whose request never reached Redis (dropped when its
    /// window passed) times out within that window; a waiter looks again
    /// within the look-again once the count changed.
    fn due(&self, state: &State) -> bool {
        state.clients.iter().enumerate().any(|(i, c)| {
            let id = i as ClientId;
            let waiting = matches!(c.phase, Phase::Waiting(_));
            let calling = !matches!(
                c.phase,
                Phase::Idle | Phase::Holding | Phase::Subscribing(_)
            ) && !waiting;
            (calling && !self.in_flight(state, id))
                || (self.look_again
                    && waiting
                    && state.changes > c.seen
                    && state.now >= c.tried + self.bounds.look_again)
        })
    }

    /// Whether something client `id` awaits is in flight.
    fn in_flight(&self, state: &State, id: ClientId) -> bool {
        state.requests.iter().any(|r| r.client == id && r.awaited)
            || state.replies.iter().any(|a| a.client == id)
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
            changes: 0,
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
                Phase::Subscribing(_) => actions.push(Action::Subscribe(id)),
                Phase::Waiting(_) if self.look_again && state.changes > c.seen => {
                    actions.push(Action::LookAgain(id))
                }
                _ => {}
            }
            if self.may_time_out(state, id) {
                actions.push(Action::Timeout(id));
            }
            if matches!(
                c.phase,
                Phase::Trying(_) | Phase::Subscribing(_) | Phase::Waiting(_)
            ) && state.give_ups_left > 0
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
        if state.now < self.bounds.max_time && !self.due(state) {
            actions.push(Action::Tick);
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut state = last.clone();
        let (b, m) = (&self.bounds, self.mutation);
        match action {
            Action::Acquire(id) => {
                state.clients[id as usize].acquires += 1;
                let wait = Self::new_wait(&mut state, id);
                self.attempt(&mut state, id, wait);
            }
            Action::Release(id) => {
                state.clients[id as usize].phase = Phase::Releasing;
                Self::send(&mut state, id, Op::Release);
            }
            Action::Timeout(id) => self.time_out(&mut state, id),
            Action::Subscribe(id) => {
                let Phase::Subscribing(wait) = state.clients[id as usize].phase else {
                    return None;
                };
                state.clients[id as usize].subscribed = true;
                if m == Mutation::NoTryAfterSubscribe {
                    state.clients[id as usize].phase = Phase::Waiting(wait);
                } else {
                    self.attempt(&mut state, id, wait);
                }
            }
            Action::GiveUp(id) => {
                state.give_ups_left -= 1;
                let c = state.clients[id as usize];
                let (req, lost) = match c.phase {
                    // Its try's reply is not read: what it took is settled.
                    Phase::Trying(wait) => (wait.req, true),
                    Phase::Subscribing(wait) | Phase::Waiting(wait) => (wait.req, c.lost),
                    _ => return None,
                };
                if lost {
                    let c = &mut state.clients[id as usize];
                    c.phase = Phase::Settling {
                        req,
                        resends: 0,
                        wait: false,
                    };
                    c.subscribed = false;
                    Self::send(&mut state, id, Op::Settle(req));
                } else {
                    Self::end(&mut state, id, false);
                }
            }
            Action::LookAgain(id) => {
                let Phase::Waiting(wait) = state.clients[id as usize].phase else {
                    return None;
                };
                self.attempt(&mut state, id, wait);
            }
            Action::Run(i) => {
                let sent = state.requests.remove(i);
                let now = state.now;
                let before = state.server.available;
                let server = &mut state.server;
                let (reply, published) = match sent.op {
                    Op::Acquire(req) => (server.acquire(now, req, 1, b, m), false),
                    Op::Release => (server.release(1), true),
                    Op::Settle(req) => (server.settle(now, req, b), false),
                    Op::GiveBack(req) => server.give_back(req, 1, m),
                };
                if state.server.available != before {
                    state.changes += 1;
                }
                if published {
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
                    Phase::Waiting(wait) if c.subscribed => {
                        state.woke = true;
                        self.attempt(&mut state, id, wait)
                    }
                    Phase::Trying(_) if c.subscribed && m != Mutation::NotifyAfterTry => {
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
                    // Or a permit may have leaked: a release whose reply
                    // was lost may have counted, or not.
                    s.clients.iter().all(|c| c.ended == m.bounds.acquires)
                        || s.clients.iter().any(|c| c.unsure > 0)
                },
            ),
            Property::sometimes("every client held a permit", |_, s: &State| {
                s.clients.iter().all(|c| c.held)
            }),
            Property::sometimes("a message woke a waiter", |_, s: &State| s.woke),
        ]
    }
}

/// At rest, the available count plus the permits held is the total, less
/// what the clients' lost releases may have left taken, never more.
pub fn count_accounts(s: &State, total: u8) -> bool {
    if !s.at_rest() {
        return true;
    }
    let missing = i16::from(total) - s.server.available - i16::from(s.held());
    let unsure: i16 = s.clients.iter().map(|c| i16::from(c.unsure)).sum();
    (0..=unsure).contains(&missing)
}
