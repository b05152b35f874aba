//! The semaphore's protocol as a stateright [`Model`]: the clients'
//! steps, the transitions and the properties checked.

use super::*;

/// The semaphore's protocol, as a [`Model`].
#[derive(Clone, Debug)]
pub struct SemaphoreModel {
    pub bounds: Bounds,
    pub mutation: Mutation,
    /// The waiter's look-again timer (the refusal's hint, or every third
    /// of the watchdog timeout, in the library): off, pub/sub alone must
    /// wake every waiter.
    pub look_again: bool,
    /// Settles run again, in all: after a give-back is answered, its
    /// client may run the settle of its grant once more from its start,
    /// under a fresh give-back id (the library keeps one id per grant, but
    /// lets its latch go once the give-back is answered).
    pub reruns: u8,
}

impl SemaphoreModel {
    pub fn new(bounds: Bounds, mutation: Mutation) -> Self {
        SemaphoreModel {
            bounds,
            mutation,
            look_again: true,
            reruns: 0,
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
            (Phase::Settling { req, wait, .. }, Reply::Settled(true)) => {
                let give_back = Self::next_req(state, id);
                state.clients[id as usize].phase = Phase::GivingBack {
                    req: give_back,
                    grant: req,
                    resends: 0,
                    wait,
                };
                Self::send(state, id, Op::GiveBack(give_back, req));
            }
            (Phase::GivingBack { grant, wait, .. }, _) => {
                if self.reruns > 0 {
                    state.clients[id as usize].given_back = Some(grant);
                }
                self.settled(state, id, wait)
            }
            (Phase::Settling { wait, .. }, _) => self.settled(state, id, wait),
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
            Phase::GivingBack {
                req,
                grant,
                resends,
                wait,
            } => {
                state.clients[id as usize].phase = Phase::GivingBack {
                    req,
                    grant,
                    resends: resends + 1,
                    wait,
                };
                Self::send(state, id, Op::GiveBack(req, grant));
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
            reruns_left: self.reruns,
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
            if c.given_back.is_some() && state.reruns_left > 0 {
                actions.push(Action::Rerun(id));
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
                    Op::GiveBack(req, grant) => server.give_back(req, grant, 1, m),
                    // Its settle and its give-back, back to back (a latch
                    // that runs out between the two is not modelled).
                    Op::Rerun(req, grant) => match server.settle(now, grant, b) {
                        Reply::Settled(true) => server.give_back(req, grant, 1, m),
                        settled => (settled, false),
                    },
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
            Action::Rerun(id) => {
                let grant = state.clients[id as usize].given_back.take()?;
                state.reruns_left -= 1;
                let req = Self::next_req(&mut state, id);
                state.requests.push(Sent {
                    client: id,
                    op: Op::Rerun(req, grant),
                    at: state.now,
                    awaited: false,
                });
                state.requests.sort();
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
