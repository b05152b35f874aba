//! The read-write lock's protocol as a stateright [`Model`]: the clients'
//! steps, the transitions and the properties checked.

use super::*;

/// The read-write lock's protocol, as a [`Model`].
#[derive(Clone, Debug)]
pub struct RwLockModel {
    pub bounds: Bounds,
    pub mutation: Mutation,
}

impl RwLockModel {
    pub fn new(bounds: Bounds, mutation: Mutation) -> Self {
        RwLockModel { bounds, mutation }
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

    fn attempt(state: &mut State, id: ClientId, side: Side, req: ReqId, resends: u8) {
        let c = &mut state.clients[id as usize];
        c.phase = Phase::Trying { side, req, resends };
        c.woken = false;
        Self::send(state, id, Op::Acquire(side, req));
    }

    fn end(state: &mut State, id: ClientId) {
        let c = &mut state.clients[id as usize];
        c.phase = Phase::Idle;
        c.ended += 1;
        c.subscribed = false;
        c.woken = false;
        c.lost = false;
    }

    fn read(&self, state: &mut State, answer: Answer) {
        let id = answer.client;
        let c = state.clients[id as usize];
        match (c.phase, answer.reply) {
            (Phase::Trying { side, .. }, Reply::Granted) => {
                let c = &mut state.clients[id as usize];
                match side {
                    Side::Read => c.read += 1,
                    Side::Write => c.write += 1,
                }
                Self::end(state, id);
            }
            // No upgrade: the caller is told at once.
            (Phase::Trying { .. }, Reply::NoUpgrade) => Self::end(state, id),
            (Phase::Trying { side, resends, .. }, Reply::Spent) => {
                // A lost send's grant, gone since: the wait goes on with a
                // new request.
                let req = Self::next_req(state, id);
                state.clients[id as usize].lost = false;
                Self::attempt(state, id, side, req, resends)
            }
            (Phase::Trying { side, req, resends }, Reply::Refused) if c.woken => {
                Self::attempt(state, id, side, req, resends)
            }
            (Phase::Trying { side, req, resends }, Reply::Refused) => {
                state.clients[id as usize].phase = Phase::Waiting { side, req, resends }
            }
            (Phase::Releasing(_), _) => state.clients[id as usize].phase = Phase::Idle,
            (Phase::Settling { side, .. }, Reply::Settled(true)) => {
                let give_back = Self::next_req(state, id);
                state.clients[id as usize].phase = Phase::GivingBack(side);
                Self::send(state, id, Op::Release(side, give_back));
            }
            (Phase::Settling { .. }, _) | (Phase::GivingBack(_), _) => Self::end(state, id),
            _ => {}
        }
    }
}

impl Model for RwLockModel {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        let client = Client {
            phase: Phase::Idle,
            read: 0,
            write: 0,
            requests: 0,
            acquires: 0,
            ended: 0,
            subscribed: false,
            woken: false,
            lost: false,
        };
        vec![State {
            server: Server::default(),
            clients: vec![client; self.bounds.clients as usize],
            requests: Vec::new(),
            replies: Vec::new(),
            messages: Vec::new(),
            give_ups_left: self.bounds.give_ups,
        }]
    }

    fn actions(&self, state: &State, actions: &mut Vec<Action>) {
        for (i, c) in state.clients.iter().enumerate() {
            let id = i as ClientId;
            match c.phase {
                Phase::Idle => {
                    if c.acquires < self.bounds.acquires {
                        // One hold of each side at most: a read acquire
                        // from nothing or beside its write hold, a write
                        // acquire from nothing.
                        if c.read == 0 {
                            actions.push(Action::Acquire(id, Side::Read));
                        }
                        if c.read == 0 && c.write == 0 {
                            actions.push(Action::Acquire(id, Side::Write));
                        }
                    }
                    if c.read > 0 {
                        actions.push(Action::Release(id, Side::Read));
                    }
                    if c.write > 0 {
                        actions.push(Action::Release(id, Side::Write));
                    }
                }
                Phase::Trying { resends, .. } => {
                    if resends < self.bounds.resends {
                        actions.push(Action::Timeout(id));
                    }
                    if state.give_ups_left > 0 {
                        actions.push(Action::GiveUp(id));
                    }
                }
                Phase::Waiting { .. } if state.give_ups_left > 0 => {
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
            Action::Acquire(id, side) => {
                let req = Self::next_req(&mut state, id);
                let c = &mut state.clients[id as usize];
                c.acquires += 1;
                c.lost = false;
                c.subscribed = true;
                Self::attempt(&mut state, id, side, req, 0);
            }
            Action::Release(id, side) => {
                let req = Self::next_req(&mut state, id);
                let c = &mut state.clients[id as usize];
                match side {
                    Side::Read => c.read -= 1,
                    Side::Write => c.write -= 1,
                }
                c.phase = Phase::Releasing(side);
                Self::send(&mut state, id, Op::Release(side, req));
            }
            Action::Timeout(id) => {
                let Phase::Trying { side, req, resends } = state.clients[id as usize].phase else {
                    return None;
                };
                state.clients[id as usize].lost = true;
                Self::attempt(&mut state, id, side, req, resends + 1);
            }
            Action::GiveUp(id) => {
                state.give_ups_left -= 1;
                let c = state.clients[id as usize];
                let (side, req, lost) = match c.phase {
                    // Its attempt's reply is not read: settled.
                    Phase::Trying { side, req, .. } => (side, req, true),
                    Phase::Waiting { side, req, .. } => (side, req, c.lost),
                    _ => return None,
                };
                if lost {
                    let c = &mut state.clients[id as usize];
                    c.phase = Phase::Settling { side, req };
                    c.subscribed = false;
                    Self::send(&mut state, id, Op::Settle(req));
                } else {
                    Self::end(&mut state, id);
                    for r in state.requests.iter_mut().filter(|r| r.client == id) {
                        r.awaited = false;
                    }
                }
            }
            Action::Run(i) => {
                let sent = state.requests.remove(i);
                let (reply, published) = match sent.op {
                    Op::Acquire(side, req) => (state.server.acquire(side, req, m), false),
                    Op::Release(side, req) => state.server.release(side, req, m),
                    Op::Settle(req) => (state.server.settle(req), false),
                };
                if published {
                    for (i, c) in state.clients.iter().enumerate() {
                        if c.subscribed {
                            state.messages.push(i as ClientId);
                        }
                    }
                    state.messages.sort();
                }
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
            Action::Wake(i) => {
                let id = state.messages.remove(i);
                let c = state.clients[id as usize];
                match c.phase {
                    Phase::Waiting { side, req, resends } if c.subscribed => {
                        Self::attempt(&mut state, id, side, req, resends)
                    }
                    Phase::Trying { .. } if c.subscribed => state.clients[id as usize].woken = true,
                    _ => {}
                }
            }
        }
        Some(state)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always("no writer beside another owner's hold", |_, s: &State| {
                s.clients.iter().enumerate().all(|(i, c)| {
                    c.write == 0
                        || s.clients
                            .iter()
                            .enumerate()
                            .all(|(j, o)| i == j || (o.read == 0 && o.write == 0))
                })
            }),
            Property::always("the hash counts what each owner holds", |_, s: &State| {
                !s.at_rest()
                    || s.clients.iter().enumerate().all(|(i, c)| {
                        let id = i as ClientId;
                        s.server.count_of(id, Side::Read) == c.read
                            && s.server.count_of(id, Side::Write) == c.write
                    })
            }),
            Property::eventually("every wait ends", |m: &RwLockModel, s: &State| {
                s.clients.iter().all(|c| c.ended == m.bounds.acquires)
            }),
            Property::sometimes("two owners read at once", |_, s: &State| {
                s.clients.iter().filter(|c| c.read > 0).count() >= 2
            }),
            Property::sometimes(
                "a writer took a read hold (where the bounds allow two acquires)",
                |m: &RwLockModel, s: &State| {
                    m.bounds.acquires < 2 || s.clients.iter().any(|c| c.read > 0 && c.write > 0)
                },
            ),
        ]
    }
}
