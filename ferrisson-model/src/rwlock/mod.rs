//! A model of the read-write lock's protocol (Redisson's `RReadWriteLock`
//! layout): one hash with a `mode` (`read` or `write`) and a count per
//! owner and side, read holds shared by any owners, a write hold by one,
//! a writer that may take read holds too (a downgrade: when its last write
//! hold goes, the mode becomes `read` and its read holds stay), and a
//! message on the lock's channel when the lock goes free, or from write to
//! read, that wakes every waiter.
//!
//! Acquires are resent after a lost reply under their request id (the
//! acquire latch counts them once), a wait that ends early settles its
//! request and gives back what it took; nothing else is lost, no lease
//! runs out (the reentrant lock's model checks those), and waiters are
//! woken by pub/sub alone. Checked: no writer while another owner reads or
//! writes; at rest the hash counts what each owner holds; every wait ends.
//!
//! [`Server`] can also keep time ([`Clock`]): the hash's and the latches'
//! ends and each read hold's timeout key, which the releases and the read
//! renewal look at. The checks do not use it; the conformance test does.

use std::fmt;

use stateright::{Model, Property};

use crate::{ClientId, Latch, ReqId};

/// One rule broken on purpose.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Mutation {
    #[default]
    None,
    /// A read acquire is granted in write mode whoever writes (not only
    /// to the writer itself).
    ReadBesideAnyWriter,
    /// The last write release deletes the hash although its owner still
    /// holds read holds (not turning it to read mode).
    WriteReleaseDropsReads,
    /// The last release publishes nothing: waiters sleep on.
    ReleaseWakesNobody,
}

impl fmt::Display for Mutation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

/// A side of the lock.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Side {
    Read,
    Write,
}

/// The bounds of one check.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Bounds {
    pub clients: u8,
    /// Acquires per client (either side).
    pub acquires: u8,
    /// Resends per acquire after a timeout.
    pub resends: u8,
    /// Waits that end before their grant, in all.
    pub give_ups: u8,
}

impl Bounds {
    /// Two clients, two acquires each (a downgrade needs two), one resend,
    /// one wait that ends early.
    pub fn two() -> Bounds {
        Bounds {
            clients: 2,
            acquires: 2,
            resends: 1,
            give_ups: 1,
        }
    }

    /// Three clients, one acquire each, one resend.
    pub fn three() -> Bounds {
        Bounds {
            clients: 3,
            acquires: 1,
            resends: 1,
            give_ups: 1,
        }
    }
}

/// What Redis holds: the hash (its mode and each owner's counts), and the
/// latches. A read hold's timeout key is modelled only with a clock.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Server {
    /// `None`: no hash.
    pub mode: Option<Side>,
    /// Read counts per owner (fields `<owner>`). Sorted, no zeros.
    pub readers: Vec<(ClientId, u8)>,
    /// The write count of the writer (field `<owner>:write`).
    pub writer: Option<(ClientId, u8)>,
    /// Acquire latches. Sorted.
    pub acquire_latches: Vec<(ReqId, Latch)>,
    /// Unlock latches: request, the first reply. Sorted.
    pub unlock_latches: Vec<(ReqId, u8)>,
    /// Time, when it is modelled; without it nothing runs out.
    pub clock: Option<Clock>,
}

/// Time on a [`Server`] that keeps it, in ticks.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Clock {
    pub now: i32,
    /// The lease of a grant (and of a write release that leaves holds,
    /// the least TTL it leaves).
    pub lease: i32,
    /// The TTL of a latch.
    pub latch_ttl: i32,
    /// When the hash ends (while there is one).
    pub hash_ends: i32,
    /// The read holds' timeout keys, `{name}:<owner>:rwlock_timeout:<n>`:
    /// owner, n, when the key ends. Keys live on their own: one may
    /// outlive the hash, or be counted in it no more. Sorted.
    pub holds: Vec<(ClientId, u8, i32)>,
    /// When each acquire latch ends, by request (sorted).
    pub acquire_ends: Vec<(ReqId, i32)>,
    /// When each unlock latch ends, by request (sorted).
    pub unlock_ends: Vec<(ReqId, i32)>,
    /// The releases that left read holds behind: the ticks they replied
    /// (the longest read hold left, which the hash's TTL became; the
    /// script replies it negated, in ms). Sorted.
    pub longest: Vec<(ReqId, i32)>,
}

impl Clock {
    /// A clock at 0.
    pub fn new(lease: i32, latch_ttl: i32) -> Clock {
        Clock {
            lease,
            latch_ttl,
            ..Clock::default()
        }
    }

    /// The longest time left of the read holds the hash counts (`readers`),
    /// by their timeout keys; `None` when every such key has run out.
    fn longest(&self, readers: &[(ClientId, u8)]) -> Option<i32> {
        self.holds
            .iter()
            .filter(|(owner, n, _)| readers.iter().any(|(o, count)| o == owner && n <= count))
            .map(|(_, _, end)| end - self.now)
            .max()
    }

    fn set_hold(&mut self, owner: ClientId, n: u8) {
        let end = self.now + self.lease;
        self.holds.retain(|(o, k, _)| (*o, *k) != (owner, n));
        self.holds.push((owner, n, end));
        self.holds.sort();
    }
}

/// A reply, as the client reads it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Reply {
    /// Acquire: held now (nil).
    Granted,
    /// Acquire: held by others (its PTTL).
    Refused,
    /// Acquire: spent (-2).
    Spent,
    /// Write acquire by an owner that reads: no upgrade (-3).
    NoUpgrade,
    /// Release: 1 the lock is free (or read mode now), 0 holds remain.
    Released(u8),
    /// Release: the owner holds nothing on that side (nil).
    NotHeld,
    /// Settle: whether the request had been granted.
    Settled(bool),
    /// Acquire: run past its deadline, nothing changed (-5).
    TooLate,
}

impl Server {
    pub fn latch(&self, req: ReqId) -> Option<Latch> {
        self.acquire_latches
            .iter()
            .find(|(r, _)| *r == req)
            .map(|(_, latch)| *latch)
    }

    /// `owner`'s count on `side`.
    pub fn count_of(&self, owner: ClientId, side: Side) -> u8 {
        match side {
            Side::Read => self
                .readers
                .iter()
                .find(|(o, _)| *o == owner)
                .map_or(0, |(_, n)| *n),
            Side::Write => self
                .writer
                .filter(|(o, _)| *o == owner)
                .map_or(0, |(_, n)| n),
        }
    }

    /// A grant of `req`: its latch; with a clock the hash's end, at least
    /// a lease from now (`fresh`: a new hash, exactly that).
    fn grant(&mut self, req: ReqId, fresh: bool) -> Reply {
        self.acquire_latches.push((req, Latch::Granted));
        self.acquire_latches.sort();
        if let Some(clock) = self.clock.as_mut() {
            let end = clock.now + clock.lease;
            clock.hash_ends = if fresh { end } else { clock.hash_ends.max(end) };
            clock.acquire_ends.push((req, clock.now + clock.latch_ttl));
            clock.acquire_ends.sort();
        }
        Reply::Granted
    }

    /// One more read hold of `owner`, and with a clock its timeout key.
    fn add_read(&mut self, owner: ClientId) {
        let n = match self.readers.iter_mut().find(|(o, _)| *o == owner) {
            Some((_, n)) => {
                *n += 1;
                *n
            }
            None => {
                self.readers.push((owner, 1));
                self.readers.sort();
                1
            }
        };
        if let Some(clock) = self.clock.as_mut() {
            clock.set_hold(owner, n);
        }
    }

    /// `lua/read_acquire.lua` or `lua/write_acquire.lua`.
    pub fn acquire(&mut self, side: Side, req: ReqId, mutation: Mutation) -> Reply {
        self.acquire_with(side, req, mutation, false)
    }

    /// As [`Server::acquire`]; `too_late`: the call runs past its
    /// deadline, and changes nothing.
    pub fn acquire_with(
        &mut self,
        side: Side,
        req: ReqId,
        mutation: Mutation,
        too_late: bool,
    ) -> Reply {
        if too_late {
            return Reply::TooLate;
        }
        let owner = req.client;
        match self.latch(req) {
            Some(Latch::Cancelled) => return Reply::Spent,
            Some(Latch::Granted) if self.count_of(owner, side) > 0 => return Reply::Granted,
            Some(Latch::Granted) => return Reply::Spent,
            None => {}
        }
        match (side, self.mode) {
            (Side::Read, None) => {
                self.mode = Some(Side::Read);
                self.add_read(owner);
                self.grant(req, true)
            }
            (Side::Read, Some(Side::Read)) => {
                self.add_read(owner);
                self.grant(req, false)
            }
            (Side::Read, Some(Side::Write))
                if self.count_of(owner, Side::Write) > 0
                    || mutation == Mutation::ReadBesideAnyWriter =>
            {
                self.add_read(owner);
                self.grant(req, false)
            }
            (Side::Write, None) => {
                self.mode = Some(Side::Write);
                self.writer = Some((owner, 1));
                self.grant(req, true)
            }
            (Side::Write, Some(Side::Write)) if self.count_of(owner, Side::Write) > 0 => {
                self.writer = Some((owner, self.count_of(owner, Side::Write) + 1));
                self.grant(req, false)
            }
            (Side::Write, Some(Side::Read)) if self.count_of(owner, Side::Read) > 0 => {
                Reply::NoUpgrade
            }
            _ => Reply::Refused,
        }
    }

    /// The time a refused acquire names (the hash's PTTL), in ticks, with
    /// a clock and a hash.
    pub fn time_left(&self) -> Option<i32> {
        let clock = self.clock.as_ref()?;
        self.mode.map(|_| clock.hash_ends - clock.now)
    }

    fn unlatch(&mut self, req: ReqId, first: u8) -> Reply {
        self.unlock_latches.push((req, first));
        self.unlock_latches.sort();
        if let Some(clock) = self.clock.as_mut() {
            clock.unlock_ends.push((req, clock.now + clock.latch_ttl));
            clock.unlock_ends.sort();
        }
        Reply::Released(first)
    }

    /// With a clock, the longest read hold left of those the hash counts,
    /// in ticks: `Some(0)` when none is left (no clock: `None`).
    fn longest_read_hold(&self) -> Option<i32> {
        let clock = self.clock.as_ref()?;
        Some(clock.longest(&self.readers).unwrap_or(0).max(0))
    }

    /// The hash is gone.
    fn clear(&mut self) {
        self.mode = None;
        self.readers.clear();
        self.writer = None;
    }

    /// With a clock, the ticks a release that left read holds replied
    /// (negated, in ms, by the script); `None` for any other release.
    pub fn longest_replied(&self, req: ReqId) -> Option<i32> {
        let clock = self.clock.as_ref()?;
        clock
            .longest
            .iter()
            .find(|(r, _)| *r == req)
            .map(|(_, ticks)| *ticks)
    }

    /// `lua/read_release.lua` or `lua/write_release.lua`; and whether it
    /// published. With a clock, a release that leaves read holds sets the
    /// hash's end to the longest of them (see [`Server::longest_replied`]),
    /// and read holds whose keys all ran out count as none.
    pub fn release(&mut self, side: Side, req: ReqId, mutation: Mutation) -> (Reply, bool) {
        if let Some((_, first)) = self.unlock_latches.iter().find(|(r, _)| *r == req) {
            return (Reply::Released(*first), false);
        }
        let owner = req.client;
        let n = self.count_of(owner, side);
        if n == 0 || (side == Side::Write && self.mode != Some(Side::Write)) {
            return (Reply::NotHeld, false);
        }
        match side {
            Side::Read => {
                self.readers.retain(|(o, _)| *o != owner);
                if n > 1 {
                    self.readers.push((owner, n - 1));
                    self.readers.sort();
                }
                if let Some(clock) = self.clock.as_mut() {
                    clock.holds.retain(|(o, k, _)| (*o, *k) != (owner, n));
                }
                // Other holds remain (live read holds, or the writer).
                if !self.readers.is_empty() || self.writer.is_some() {
                    match self.longest_read_hold() {
                        Some(longest) if longest > 0 => {
                            let clock = self.clock.as_mut().unwrap();
                            clock.hash_ends = clock.now + longest;
                            clock.longest.push((req, longest));
                            clock.longest.sort();
                            return (self.unlatch(req, 0), false);
                        }
                        Some(_) if self.writer.is_none() => {}
                        _ => return (self.unlatch(req, 0), false),
                    }
                }
            }
            Side::Write => {
                if n > 1 {
                    self.writer = Some((owner, n - 1));
                    // The TTL rises to the lease, never falls (a later hold
                    // of the owner may have set a longer one).
                    if let Some(clock) = self.clock.as_mut() {
                        clock.hash_ends = clock.hash_ends.max(clock.now + clock.lease);
                    }
                    return (self.unlatch(req, 0), false);
                }
                self.writer = None;
                let reads_left = match self.longest_read_hold() {
                    Some(longest) => longest > 0,
                    None => !self.readers.is_empty(),
                };
                if reads_left && mutation != Mutation::WriteReleaseDropsReads {
                    self.mode = Some(Side::Read);
                    if let Some(longest) = self.longest_read_hold() {
                        let clock = self.clock.as_mut().unwrap();
                        clock.hash_ends = clock.now + longest;
                    }
                    let published = mutation != Mutation::ReleaseWakesNobody;
                    return (self.unlatch(req, 1), published);
                }
            }
        }
        self.clear();
        let published = mutation != Mutation::ReleaseWakesNobody;
        (self.unlatch(req, 1), published)
    }

    /// `lua/read_release.lua` or `lua/write_release.lua` as the give-back
    /// of the hold `grant` took, under its own request `req`: a release
    /// while the grant's latch shows the grant (or `req` ran before: a
    /// replay), else `NotHeld`, nothing written. A give-back that runs
    /// closes the grant's latch (`x`), as the lock's does (see
    /// `lock::Server::give_back`).
    pub fn give_back(
        &mut self,
        side: Side,
        req: ReqId,
        grant: ReqId,
        mutation: Mutation,
    ) -> (Reply, bool) {
        let replay = self.unlock_latches.iter().any(|(r, _)| *r == req);
        if !replay && self.latch(grant) != Some(Latch::Granted) {
            return (Reply::NotHeld, false);
        }
        if !replay {
            crate::close_grant(&mut self.acquire_latches, grant);
        }
        self.release(side, req, mutation)
    }

    /// `lua/renew_read.lua` for one owner: with a clock, each of its read
    /// holds' keys that still stands, and the hash, lasts at least a lease
    /// from now; whether the owner has read holds left (else it is
    /// named gone).
    pub fn renew_read(&mut self, owner: ClientId) -> bool {
        let count = self.count_of(owner, Side::Read);
        if count == 0 {
            return false;
        }
        if let Some(clock) = self.clock.as_mut() {
            // Each hold's key rises to the lease, never falls (a later hold
            // of the owner may have a longer lease).
            let end = clock.now + clock.lease;
            for (o, n, ends) in clock.holds.iter_mut() {
                if *o == owner && *n <= count {
                    *ends = (*ends).max(end);
                }
            }
            clock.hash_ends = clock.hash_ends.max(end);
        }
        true
    }

    /// A tick passes: the hash, the read holds' keys and the latches whose
    /// end comes run out. Nothing without a clock.
    pub fn tick(&mut self) {
        let Some(clock) = self.clock.as_mut() else {
            return;
        };
        clock.now += 1;
        let now = clock.now;
        let hash_gone = self.mode.is_some() && clock.hash_ends <= now;
        clock.holds.retain(|(_, _, end)| *end > now);
        crate::expire_latches(now, &mut self.acquire_latches, &mut clock.acquire_ends);
        crate::expire_latches(now, &mut self.unlock_latches, &mut clock.unlock_ends);
        let unlocks = &self.unlock_latches;
        clock
            .longest
            .retain(|(req, _)| unlocks.iter().any(|(r, _)| r == req));
        if hash_gone {
            self.clear();
        }
    }

    /// `lua/acquire_cancel.lua`.
    pub fn settle(&mut self, req: ReqId) -> Reply {
        match self.latch(req) {
            None => {
                self.acquire_latches.push((req, Latch::Cancelled));
                self.acquire_latches.sort();
                if let Some(clock) = self.clock.as_mut() {
                    clock.acquire_ends.push((req, clock.now + clock.latch_ttl));
                    clock.acquire_ends.sort();
                }
                Reply::Settled(false)
            }
            Some(Latch::Cancelled) => Reply::Settled(false),
            Some(Latch::Granted) => Reply::Settled(true),
        }
    }
}

/// What a client asks of Redis.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Op {
    Acquire(Side, ReqId),
    Release(Side, ReqId),
    Settle(ReqId),
}

/// A request in flight.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Sent {
    pub client: ClientId,
    pub op: Op,
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
        side: Side,
        req: ReqId,
        resends: u8,
    },
    Waiting {
        side: Side,
        req: ReqId,
        resends: u8,
    },
    Releasing(Side),
    Settling {
        side: Side,
        req: ReqId,
    },
    /// Giving back what a settled acquire took.
    GivingBack(Side),
}

/// One client, one owner.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Client {
    pub phase: Phase,
    /// Its read and write holds.
    pub read: u8,
    pub write: u8,
    pub requests: u8,
    pub acquires: u8,
    /// Acquires that ended, granted or not.
    pub ended: u8,
    /// Subscribed to the lock's channel (while it waits).
    pub subscribed: bool,
    /// A message came while its attempt was in flight.
    pub woken: bool,
    /// A send of its current acquire got no reply.
    pub lost: bool,
}

/// The whole system.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct State {
    pub server: Server,
    pub clients: Vec<Client>,
    pub requests: Vec<Sent>,
    pub replies: Vec<Answer>,
    /// Messages in flight, to each subscriber. Sorted.
    pub messages: Vec<ClientId>,
    pub give_ups_left: u8,
}

impl State {
    /// Nothing in flight, and nobody mid-call (a waiter whose sends were
    /// all answered holds nothing it does not know of).
    pub fn at_rest(&self) -> bool {
        self.requests.is_empty()
            && self.replies.is_empty()
            && self.clients.iter().all(|c| match c.phase {
                Phase::Idle => true,
                Phase::Waiting { .. } => !c.lost,
                _ => false,
            })
    }
}

/// A step of the system.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// A client starts an acquire of a side (a writer may take a read
    /// hold: a downgrade).
    Acquire(ClientId, Side),
    /// A client releases a hold of a side.
    Release(ClientId, Side),
    /// An acquire's send timed out: resent.
    Timeout(ClientId),
    /// A wait ends before its grant.
    GiveUp(ClientId),
    Run(usize),
    Deliver(usize),
    /// The message at this index reaches its subscriber.
    Wake(usize),
}

mod model;
pub use model::RwLockModel;
