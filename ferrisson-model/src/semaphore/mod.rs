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
    /// A give-back leaves its grant's latch showing the grant (ferrisson's
    /// give-back before 2026-12-07): a settle of the grant run again (a
    /// rescue at a runtime's end runs it from its start), once the first
    /// give-back's own latch is gone, gives the permits back twice.
    GiveBackLeavesGrant,
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
    /// Give-back: its grant's latch is closed (another give-back of the
    /// grant ran): nothing given.
    Closed,
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

    /// `lua/semaphore_give_back.lua`: give back what a take, request
    /// `grant`, took, once per give-back request `req`; and whether it
    /// published (a replayed give-back does not). A grant whose latch is
    /// closed gives nothing (`Closed`): another give-back of it ran. One
    /// that runs closes the grant's latch, when it is there (permits never
    /// expire: a give-back whose grant's latch ran out still gives), so
    /// that a settle run again finds nothing to give back.
    pub fn give_back(
        &mut self,
        req: ReqId,
        grant: ReqId,
        permits: u8,
        mutation: Mutation,
    ) -> (Reply, bool) {
        if mutation != Mutation::NoGiveBackLatch {
            if let Some((_, first)) = self.give_back_latches.iter().find(|(r, _)| *r == req) {
                return (Reply::Count(*first), false);
            }
        }
        if self.latch(grant) == Some(Latch::Cancelled) {
            return (Reply::Closed, false);
        }
        self.available += i16::from(permits);
        if mutation != Mutation::GiveBackLeavesGrant {
            for (r, latch, _) in self.acquire_latches.iter_mut() {
                if *r == grant {
                    *latch = Latch::Cancelled;
                }
            }
        }
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
    /// A give-back, and its grant (the request that took the permits).
    GiveBack(ReqId, ReqId),
    /// A settle of a grant given back, run again (see
    /// `SemaphoreModel::reruns`): its settle, then, when that finds the
    /// grant, a give-back under this request.
    Rerun(ReqId, ReqId),
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
    /// Giving back what a settled request, `grant`, was found to have
    /// taken.
    GivingBack {
        req: ReqId,
        grant: ReqId,
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
    /// Its last give-back's grant, while its settle may run again.
    pub given_back: Option<ReqId>,
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
            given_back: None,
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
    /// Settles that may still run again (`SemaphoreModel::reruns`).
    pub reruns_left: u8,
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
    /// The settle of a grant given back runs again (a rescue at a
    /// runtime's end runs restartable work from its start), in the
    /// background: its reply is not read.
    Rerun(ClientId),
    /// Time passes one tick.
    Tick,
}

mod model;
pub use model::{count_accounts, SemaphoreModel};
