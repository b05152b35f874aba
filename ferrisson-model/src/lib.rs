//! A model of ferrisson's reentrant lock protocol on Redis, checked by the
//! [`stateright`] model checker: every interleaving of two clients'
//! acquires, renewals and releases, within bounds, over a network that
//! delays, reorders, duplicates and loses, while time passes.
//!
//! It models what the `lua/` scripts do to the keys, each script one atomic
//! step as Redis runs it ([`Server`]), and what a client does with their
//! replies ([`Client`]): the acquire latch that makes a resent acquire
//! count once, the unlock latch that makes a resent release release once,
//! the settle of an acquire whose replies were all lost, the watchdog's
//! renewals, the local lease deadline counted from the acquire's send, and
//! a dropped guard's release going on in the background while its owner
//! acquires again.
//! `docs/model.md` says what is checked, within which bounds, and what is
//! not modelled.
//!
//! [`Mutation`]s break one rule each; the checker must then find the
//! failure that rule prevents (tests/check.rs). The conformance test
//! (tests/conformance/) holds [`Server`] and the other models to the real
//! scripts.

use std::fmt;

pub mod expirable;
pub mod fair;
pub mod rwlock;
pub mod semaphore;

use stateright::{Model, Property};

/// Logical time, in ticks.
pub type Time = u8;

/// A client: 0 or 1 (or 2).
pub type ClientId = u8;

/// A request id: its client, and that client's count.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ReqId {
    pub client: ClientId,
    pub seq: u8,
}

/// One rule of the protocol broken on purpose: the checker must find what
/// it guards against.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Mutation {
    /// The protocol as the scripts and the client run it.
    #[default]
    None,
    /// The acquire script keeps no latch: a resend after a lost reply
    /// takes a second hold (Redisson's issue 7367).
    NoAcquireLatch,
    /// A granted latch answers "granted" only while the owner holds, and
    /// otherwise takes the lock anew: a late copy of a granted send takes
    /// a hold nobody owns (ferrisson's rule before it was fixed).
    GrantedLatchTakesAgain,
    /// The renewal sets the owner's hold whether or not it still stands:
    /// a renewal that runs after the release brings the lock back
    /// (Redisson's issue 7272, a lease that outlives its unlock).
    RenewRecreates,
    /// A dropped guard's release is resent until its hold has surely
    /// expired counted from the drop (the lease and a response timeout),
    /// not only while the guard's lease runs: a resend that arrives after
    /// the owner took the lock again releases that newer hold (ferrisson's
    /// rule before the fix of 2026-11-27).
    DroppedReleasePastLease,
    /// The give-back of a grant whose replies were lost is sent whenever
    /// the settle finds the grant, also after its lease ran out: it
    /// releases the owner's newer hold (the same fix).
    GiveBackPastLease,
    /// The release takes a count off whatever hold stands, whoever owns
    /// it: a release that reaches Redis after its hold ran out releases
    /// the next holder's (found only when requests may arrive late).
    ReleaseIgnoresOwner,
    /// The renewal sets the TTL of whatever hold stands: a renewal that
    /// reaches Redis after its hold ran out stretches the next holder's
    /// lease past what that holder's watchdog knows (found only when
    /// requests may arrive late).
    RenewIgnoresOwner,
    /// A release that leaves holds sets the key's TTL to the lease it
    /// carries, also when that is shorter than the TTL left: a watchdog
    /// hold's release that reaches Redis after its owner took a longer
    /// leased hold cuts that lease short (ferrisson's release before
    /// 2026-12-02, found once holds of one owner could have different
    /// leases).
    ReleaseShortensTtl,
    /// The renewal sets the key's TTL to the watchdog's lease, also when
    /// that is shorter than the TTL left: a renewal that reaches Redis
    /// after its hold was released and the owner took a longer leased hold
    /// cuts that lease short (the same fix).
    RenewShortensTtl,
    /// A re-entry sets the key's TTL to its own lease, also when that is
    /// shorter than the TTL left: an acquire its caller gave up on (timed
    /// out, its settle lost) that reaches Redis after the owner took the
    /// lock again with a longer lease cuts that lease short (the same fix).
    ReentryShortensTtl,
    /// The release keeps no unlock latch: a resent release whose first
    /// send ran takes a second count off the owner's hold.
    NoUnlockLatch,
    /// Replica sync sends `WAIT` alone, without first touching the grant's
    /// latch on the same connection: `WAIT` counts only the writes of the
    /// connection it is sent on, so after a grant answered from the latch
    /// (no write) or on a connection opened since (a reconnect, a
    /// failover) it waits for nothing and reports a sync that never
    /// happened.
    SyncWithoutTouch,
    /// The token counter starts over after a restart that loses data
    /// (ferrisson's fenced acquire before its tokens were floored by the
    /// server's clock): the next holder's token is no higher than the
    /// last one.
    TokensStartOver,
    /// `Replicas::Online` trusts a cached count of no replica online (the
    /// library caches the count for a second, per master, and keeps it
    /// through a failover): the grant is neither looked for on the
    /// master nor waited for, though a replica came online since and may
    /// be promoted without it.
    TrustsCachedZero,
    /// A give-back releases the owner's hold whether or not the grant it
    /// gives back is on the server (ferrisson's give-back today): after a
    /// failover that lost the grant, a give-back that reaches the new
    /// master (a resend, or a command the cluster client sends on after
    /// `MOVED`) releases the owner's next hold there.
    GiveBackIgnoresLatch,
}

/// The bounds of one check.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Bounds {
    /// Clients, each one owner.
    pub clients: u8,
    /// Acquire requests per client, but the first.
    pub acquires: u8,
    /// Acquire requests of the first client.
    pub first_acquires: u8,
    /// Resends per request after a timeout.
    pub resends: u8,
    /// Renewals per client.
    pub renewals: u8,
    /// Copies the network may make of requests in flight, in all.
    pub duplicates: u8,
    /// Clients that may crash, in all.
    pub crashes: u8,
    /// Guards that may be dropped, in all: the release goes on in the
    /// background while the owner acquires again.
    pub drops: u8,
    /// Resends of a dropped guard's release.
    pub drop_resends: u8,
    /// Writes each holder may send to the resource the lock guards.
    pub writes: u8,
    /// Failovers to the replica, in all (with a replica).
    pub failovers: u8,
    /// Restarts of the master that lose its data (no persistence; its
    /// replicas sync the empty data set from it), in all.
    pub restarts: u8,
    /// The clock stops here.
    pub max_time: Time,
    /// A hold's lease (the watchdog timeout): the TTL an acquire and a
    /// renewal set.
    pub lease: Time,
    /// The lease of the first client's acquires after its first, taken
    /// with a lease of their own (never renewed); 0: every acquire is in
    /// watchdog mode, with `lease`.
    pub long_lease: Time,
    /// How long a request may fly before it reaches Redis: after that it
    /// never does (its connection is long closed). The client's resend
    /// window: (response timeout + 1.5 s) x release attempts, 18 s by
    /// default.
    pub window: Time,
    /// How long an acquire or unlock latch lives: at least the window
    /// (an acquire latch: the longer of the lease and the window, plus the
    /// window, as the client sets it; a release's: the window, or more).
    pub latch_ttl: Time,
}

impl Bounds {
    /// Acquire requests client `id` makes.
    pub fn acquires_of(&self, id: ClientId) -> u8 {
        match id {
            0 => self.first_acquires,
            _ => self.acquires,
        }
    }

    /// Lost replies, resends and late sends: two clients, one acquire
    /// each, one resend per call, one renewal, one tick of time.
    pub fn lost_replies() -> Bounds {
        Bounds {
            clients: 2,
            acquires: 1,
            first_acquires: 1,
            resends: 1,
            renewals: 1,
            duplicates: 0,
            crashes: 0,
            drops: 0,
            drop_resends: 0,
            writes: 0,
            failovers: 0,
            restarts: 0,
            max_time: 1,
            lease: 2,
            long_lease: 0,
            window: 1,
            latch_ttl: 3,
        }
    }

    /// Time: leases that run out, renewals, a crash; no lost reply.
    pub fn time() -> Bounds {
        Bounds {
            clients: 2,
            acquires: 1,
            first_acquires: 1,
            resends: 0,
            renewals: 1,
            duplicates: 0,
            crashes: 1,
            drops: 0,
            drop_resends: 0,
            writes: 0,
            failovers: 0,
            restarts: 0,
            max_time: 3,
            lease: 2,
            long_lease: 0,
            window: 1,
            latch_ttl: 3,
        }
    }

    /// A fenced lock and the resource it guards: each holder writes once,
    /// its write may land late (its holder paused, or the network slow),
    /// while leases run out and the other client takes the lock.
    pub fn fencing() -> Bounds {
        Bounds {
            clients: 2,
            acquires: 1,
            first_acquires: 1,
            resends: 0,
            renewals: 0,
            duplicates: 0,
            crashes: 0,
            drops: 0,
            drop_resends: 0,
            writes: 1,
            failovers: 0,
            restarts: 0,
            max_time: 3,
            lease: 2,
            long_lease: 0,
            window: 1,
            latch_ttl: 3,
        }
    }

    /// Holds of one owner with different leases: the first client's
    /// second acquire takes a lease of its own, twice the watchdog's,
    /// while the release of its first hold (a drop's, in the background,
    /// or an unlock's) or that hold's renewal is still on its way; time
    /// runs until the shorter lease could have ended under the longer.
    pub fn mixed_leases() -> Bounds {
        Bounds {
            long_lease: 4,
            renewals: 1,
            max_time: 2,
            // The client's rule: the longer of the TTL and the window, plus
            // the window.
            latch_ttl: 5,
            ..Bounds::dropped()
        }
    }

    /// Requests that reach Redis late: up to a tick after their send (the
    /// window two ticks, latches four: the client's rule), while leases
    /// run out, with renewals and a crash. The release's and the
    /// renewal's owner checks matter only here: with a window of one, a
    /// request runs before any hold can run out under it.
    pub fn late() -> Bounds {
        Bounds {
            window: 2,
            latch_ttl: 4,
            ..Bounds::time()
        }
    }

    /// Resends that arrive late: lost replies and a resend per call, as in
    /// [`Bounds::lost_replies`], with requests that reach Redis up to a
    /// tick after their send while a lease runs out.
    pub fn late_resends() -> Bounds {
        Bounds {
            window: 2,
            latch_ttl: 4,
            max_time: 2,
            renewals: 0,
            ..Bounds::lost_replies()
        }
    }

    /// A replica and one failover to it, with no resend and no time
    /// passing: what the promoted replica lacks.
    pub fn failover() -> Bounds {
        Bounds {
            clients: 2,
            acquires: 1,
            first_acquires: 1,
            resends: 0,
            renewals: 0,
            duplicates: 0,
            crashes: 0,
            drops: 0,
            drop_resends: 0,
            writes: 0,
            failovers: 1,
            restarts: 0,
            max_time: 1,
            lease: 2,
            long_lease: 0,
            window: 1,
            latch_ttl: 3,
        }
    }

    /// Replica sync as the client runs it (the grant, then the latch's
    /// touch and `WAIT` as a request of their own), with a resend, and one
    /// failover, with no time passing: for a lock with one replica or two.
    pub fn replica_sync() -> Bounds {
        Bounds {
            clients: 2,
            acquires: 1,
            first_acquires: 1,
            resends: 1,
            renewals: 0,
            duplicates: 0,
            crashes: 0,
            drops: 0,
            drop_resends: 0,
            writes: 0,
            failovers: 1,
            restarts: 0,
            max_time: 0,
            lease: 2,
            long_lease: 0,
            window: 1,
            latch_ttl: 3,
        }
    }

    /// A dropped guard: its release goes on in the background, resent
    /// after a timeout, while its owner acquires again; the lease runs
    /// out meanwhile. Two acquires of the first client, one of the other,
    /// one drop.
    pub fn dropped() -> Bounds {
        Bounds {
            clients: 2,
            acquires: 1,
            first_acquires: 2,
            resends: 0,
            renewals: 0,
            duplicates: 0,
            crashes: 0,
            drops: 1,
            drop_resends: 1,
            writes: 0,
            failovers: 0,
            restarts: 0,
            max_time: 2,
            lease: 2,
            long_lease: 0,
            window: 1,
            latch_ttl: 3,
        }
    }
}

/// The lock hash: one owner field and its count, and the key's TTL as the
/// time it runs out.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Hold {
    pub owner: ClientId,
    pub count: u8,
    pub expires: Time,
}

/// An acquire latch's value: `1` (granted) or `x` (given up).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Latch {
    Granted,
    Cancelled,
}

/// What Redis holds.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Server {
    pub hold: Option<Hold>,
    /// Acquire latches: request, value, when it runs out. Sorted.
    pub acquire_latches: Vec<(ReqId, Latch, Time)>,
    /// Unlock latches: request, the first reply (1 last hold, 0 holds
    /// remain), when it runs out. Sorted.
    pub unlock_latches: Vec<(ReqId, u8, Time)>,
    /// A fenced lock (`lua/fenced_acquire.lua`): every grant raises the
    /// token counter, which never expires, and the latch keeps the token.
    pub fenced: bool,
    /// The token counter (`redisson_lock_token:{name}`).
    pub token: u8,
    /// The token each granted request got, as its latch keeps it. Sorted.
    pub tokens: Vec<(ReqId, u8)>,
    /// The replication offset: the writes so far (kept with a replica
    /// only). A replica's copy has the offset it reached.
    pub offset: u8,
}

/// A script's reply, as the client reads it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Reply {
    /// Acquire: held now (nil).
    Granted,
    /// Acquire: held by another (its PTTL).
    Refused,
    /// Acquire: the request is spent (-2): granted before and its hold
    /// gone since, or given up.
    Spent,
    /// Acquire of a non-reentrant lock by its holder (-4): nothing changes.
    NotReentrant,
    /// Acquire run after its call's deadline (-5): nothing changes.
    TooLate,
    /// Release: 1 the last hold, 0 holds remain, 2 the last hold kept
    /// (a job's "at least for").
    Released(u8),
    /// Release: the owner holds nothing (nil).
    NotHeld,
    /// Renewal: whether the owner still held it.
    Renewed(bool),
    /// Settle: whether the request had been granted.
    Settled(bool),
    /// Replica sync: whether enough replicas acknowledged the grant (false
    /// also when its latch is gone from the master, or `WAIT` failed).
    Synced(bool),
}

impl Server {
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

    fn held_by(&self, owner: ClientId) -> bool {
        self.hold.is_some_and(|h| h.owner == owner)
    }

    /// The owner's count (0: not its hold).
    pub fn count_of(&self, owner: ClientId) -> u8 {
        self.hold
            .filter(|h| h.owner == owner)
            .map_or(0, |h| h.count)
    }

    /// `lua/acquire.lua`, for a reentrant lock.
    pub fn acquire(&mut self, now: Time, req: ReqId, b: &Bounds, mutation: Mutation) -> Reply {
        self.acquire_with(now, req, b.lease, b, mutation, true, false)
    }

    /// `lua/acquire.lua` with its other arguments: the TTL it sets
    /// (`ttl`), a non-reentrant lock (`reentrant` false) refuses its
    /// holder; a call that runs after its deadline (`too_late`) changes
    /// nothing.
    #[allow(clippy::too_many_arguments)]
    pub fn acquire_with(
        &mut self,
        now: Time,
        req: ReqId,
        ttl: Time,
        b: &Bounds,
        mutation: Mutation,
        reentrant: bool,
        too_late: bool,
    ) -> Reply {
        if too_late {
            return Reply::TooLate;
        }
        let owner = req.client;
        let latch = match mutation {
            Mutation::NoAcquireLatch => None,
            _ => self.latch(req),
        };
        match latch {
            Some(Latch::Cancelled) => return Reply::Spent,
            Some(Latch::Granted) if self.held_by(owner) => return Reply::Granted,
            Some(Latch::Granted) if mutation != Mutation::GrantedLatchTakesAgain => {
                return Reply::Spent
            }
            _ => {}
        }
        match &mut self.hold {
            None => {
                self.hold = Some(Hold {
                    owner,
                    count: 1,
                    expires: now + ttl,
                })
            }
            Some(h) if h.owner == owner && !reentrant => return Reply::NotReentrant,
            Some(h) if h.owner == owner => {
                h.count += 1;
                h.expires = match mutation {
                    Mutation::ReentryShortensTtl => now + ttl,
                    _ => h.expires.max(now + ttl),
                };
            }
            Some(_) => return Reply::Refused,
        }
        if mutation != Mutation::NoAcquireLatch {
            self.set_latch(req, Latch::Granted, now + b.latch_ttl);
        }
        if self.fenced {
            self.token += 1;
            self.tokens.push((req, self.token));
            self.tokens.sort();
        }
        Reply::Granted
    }

    /// The token a granted request got (0: none, or not fenced).
    pub fn token_of(&self, req: ReqId) -> u8 {
        self.tokens
            .iter()
            .find(|(r, _)| *r == req)
            .map_or(0, |(_, t)| *t)
    }

    /// `lua/release.lua`, with the lease `b.lease`.
    pub fn release(&mut self, now: Time, req: ReqId, b: &Bounds, mutation: Mutation) -> Reply {
        self.release_keeping(now, req, b.lease, b, mutation, 0)
    }

    /// `lua/release.lua` with its lease (`ttl`: the TTL a release that
    /// leaves holds sets, unless the key's is longer) and a keep (a job's
    /// "at least for", in ticks; 0 none): the last hold is kept, its TTL
    /// set to the keep.
    pub fn release_keeping(
        &mut self,
        now: Time,
        req: ReqId,
        ttl: Time,
        b: &Bounds,
        mutation: Mutation,
        keep: Time,
    ) -> Reply {
        let latched = self.unlock_latches.iter().find(|(r, _, _)| *r == req);
        if let (Some((_, first, _)), false) = (latched, mutation == Mutation::NoUnlockLatch) {
            return Reply::Released(*first);
        }
        let owner = req.client;
        let ignores_owner = mutation == Mutation::ReleaseIgnoresOwner;
        let Some(h) = self
            .hold
            .as_mut()
            .filter(|h| ignores_owner || h.owner == owner)
        else {
            return Reply::NotHeld;
        };
        let first = if h.count > 1 {
            h.count -= 1;
            h.expires = match mutation {
                Mutation::ReleaseShortensTtl => now + ttl,
                _ => h.expires.max(now + ttl),
            };
            0
        } else if keep > 0 {
            h.expires = now + keep;
            2
        } else {
            self.hold = None;
            1
        };
        if mutation != Mutation::NoUnlockLatch {
            self.unlock_latches.push((req, first, now + b.latch_ttl));
            self.unlock_latches.sort();
        }
        Reply::Released(first)
    }

    /// `lua/renew.lua`, for one key, with the lease `ttl`: the TTL it sets
    /// unless the key's is longer.
    pub fn renew(&mut self, now: Time, owner: ClientId, ttl: Time, mutation: Mutation) -> Reply {
        match &mut self.hold {
            Some(h) if h.owner == owner || mutation == Mutation::RenewIgnoresOwner => {
                h.expires = match mutation {
                    Mutation::RenewShortensTtl => now + ttl,
                    _ => h.expires.max(now + ttl),
                };
                Reply::Renewed(true)
            }
            None if mutation == Mutation::RenewRecreates => {
                self.hold = Some(Hold {
                    owner,
                    count: 1,
                    expires: now + ttl,
                });
                Reply::Renewed(true)
            }
            _ => Reply::Renewed(false),
        }
    }

    /// A give-back of `grant` under request `req`: `lua/release.lua`,
    /// when the grant's latch shows it granted (or `req` ran before: a
    /// replay), else nothing is released (`NotHeld`); under
    /// `GiveBackIgnoresLatch`, the release alone.
    pub fn give_back(
        &mut self,
        now: Time,
        req: ReqId,
        grant: ReqId,
        b: &Bounds,
        mutation: Mutation,
    ) -> Reply {
        let replay = self.unlock_latches.iter().any(|(r, _, _)| *r == req);
        if !replay
            && mutation != Mutation::GiveBackIgnoresLatch
            && self.latch(grant) != Some(Latch::Granted)
        {
            return Reply::NotHeld;
        }
        self.release(now, req, b, mutation)
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

    /// Time passes to `now`: what ran out is gone.
    pub fn expire(&mut self, now: Time) {
        if self.hold.is_some_and(|h| h.expires <= now) {
            self.hold = None;
        }
        let latches = &self.acquire_latches;
        self.tokens
            .retain(|(r, _)| latches.iter().any(|(l, _, at)| l == r && *at > now));
        self.acquire_latches.retain(|(_, _, at)| *at > now);
        self.unlock_latches.retain(|(_, _, at)| *at > now);
    }
}

/// What a client asks of Redis.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Op {
    /// An acquire, and the TTL it sets.
    Acquire(ReqId, Time),
    /// A release, and the lease it carries: the TTL it sets when holds
    /// remain, fixed when the release was made.
    Release(ReqId, Time),
    /// The watchdog's renewal, sent at this time.
    Renew(Time),
    Settle(ReqId),
    /// A dropped guard's release, sent in the background, and its lease
    /// (as [`Op::Release`]'s).
    Dropped(ReqId, Time),
    /// A give-back (its own request) of a grant (the acquire's request):
    /// it releases only while the grant's latch shows it granted, so that
    /// a give-back of a grant a failover lost does not take the owner's
    /// next hold.
    GiveBack(ReqId, ReqId),
    /// Replica sync after a grant: the latch's touch, then `WAIT`, on one
    /// connection. It carries what the mutation's `WAIT` alone would
    /// count: the grant's offset, when a write on the connection (the
    /// failovers so far, and the offset; 0: none).
    Sync(ReqId, u8, u8),
}

/// A request in flight: its client's send number (a reply to an older
/// send is not read: the client dropped that connection), and what it asks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Sent {
    pub client: ClientId,
    pub send: u8,
    pub op: Op,
    /// When it was sent.
    pub at: Time,
}

/// A reply in flight, to the send that asked.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Answer {
    pub to: Sent,
    pub reply: Reply,
    /// A fenced grant's token (0 otherwise).
    pub token: u8,
    /// A grant's place in the order of grants (0 otherwise).
    pub grant: u8,
    /// A new grant's write: the failovers before it and its offset (0: a
    /// grant answered from its latch, which wrote nothing).
    pub wrote: (u8, u8),
}

/// What a client is doing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Phase {
    Idle,
    /// An acquire sent first at `since`; `resends` so far.
    Acquiring {
        req: ReqId,
        since: Time,
        resends: u8,
    },
    Holding,
    Releasing {
        req: ReqId,
        resends: u8,
    },
    /// Settling an acquire whose sends were lost (a timeout, or a refusal
    /// after one). Not resent here (the client retries it for as long as
    /// the latch lives; a settle that never gets through leaves what the
    /// acquire took to its TTL, which one that gives up models).
    Settling(ReqId),
    /// Granted; waiting for the replicas to acknowledge the grant (replica
    /// sync). A grant they do not is given back.
    Syncing {
        req: ReqId,
    },
    /// Giving back what a settled acquire was found to have taken.
    GivingBack {
        req: ReqId,
        grant: ReqId,
        resends: u8,
    },
    Crashed,
}

/// A dropped guard's release, going on in the background.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Background {
    pub req: ReqId,
    /// The guard's lease's local end.
    pub deadline: Time,
    /// When its hold has surely expired, counted from the drop (the
    /// old rule's bound).
    pub until: Time,
    pub resends: u8,
    /// The lease the release carries.
    pub lease: Time,
}

/// One client, one owner.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Client {
    pub phase: Phase,
    /// The holds it has guards for (0 or 1).
    pub count: u8,
    /// Its lease's local end: the acquire's first send (or the last
    /// confirmed renewal's send) plus the lease.
    pub deadline: Time,
    /// A renewal in flight, sent at this time.
    pub renewing: Option<Time>,
    /// Its current send number.
    pub send: u8,
    /// Requests made so far.
    pub requests: u8,
    /// Acquires started so far.
    pub acquires: u8,
    /// Renewals sent so far.
    pub renewals: u8,
    /// Holds it let go of without a release it could learn the end of:
    /// the server's may stand until their TTL ends.
    pub abandoned: u8,
    /// A send of its current acquire got no reply.
    pub lost: bool,
    /// A dropped guard's release in the background.
    pub background: Option<Background>,
    /// When its current (or last) acquire was first sent: what that
    /// acquire took lasts at least the lease from then.
    pub since: Time,
    /// The lease of its current (or last) acquire: the watchdog's, renewed,
    /// or a lease of its own, not renewed.
    pub lease: Time,
    /// Its hold's fencing token (a fenced lock).
    pub token: u8,
    /// Its hold's place in the order of grants.
    pub grant: u8,
    /// Writes it sent to the resource so far.
    pub writes: u8,
    /// The count of online replicas it last saw (`Replicas::Online`, in
    /// models where replicas come online), kept through a failover as the
    /// library's cache is.
    pub online_seen: Option<u8>,
}

impl Client {
    fn new() -> Self {
        Client {
            phase: Phase::Idle,
            count: 0,
            deadline: 0,
            renewing: None,
            send: 0,
            requests: 0,
            acquires: 0,
            renewals: 0,
            abandoned: 0,
            lost: false,
            background: None,
            since: 0,
            lease: 0,
            token: 0,
            grant: 0,
            writes: 0,
            online_seen: None,
        }
    }

    /// Whether it believes it holds the lock with a lease not yet run out.
    pub fn believes_it_holds(&self, now: Time) -> bool {
        self.phase == Phase::Holding && now < self.deadline
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
    pub duplicates_left: u8,
    pub crashes_left: u8,
    pub drops_left: u8,
    /// Writes on their way to the resource: writer, token, and the
    /// writer's grant (its place in the order of grants). Sorted.
    pub writes: Vec<(ClientId, u8, u8)>,
    /// Grants so far, in the order Redis made them (not the token
    /// counter, which a failover may set back): each granted request
    /// and its place. Sorted by request.
    pub grants: Vec<(ReqId, u8)>,
    pub resource: Resource,
    /// The replicas' copies of the keys (each with the offset it
    /// reached).
    pub replicas: Vec<Server>,
    /// `WAIT`s the master runs: the send, and the offset it waits for.
    /// Sorted.
    pub waits: Vec<(Sent, u8)>,
    pub failovers_left: u8,
    /// Failovers and restarts so far: each replaces every connection.
    pub failovers: u8,
    pub restarts_left: u8,
    /// Whether each replica is online (`LockModel::offline`; empty: all
    /// are). An offline replica takes no writes and counts for no `WAIT`
    /// until it comes online (a full sync), and is not promoted.
    pub online: Vec<bool>,
}

/// The resource the lock guards: it takes writes, and with fencing checks
/// their tokens (`UPDATE ... WHERE fence <= $token`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Resource {
    /// The highest token of a write it took.
    pub highest: u8,
    /// The latest grant whose holder's write it took.
    pub latest_grant: u8,
    /// It took a write of an earlier grant after one of a later grant: a
    /// holder whose lease ran out wrote after the next holder did.
    pub out_of_order: bool,
}

impl State {
    /// Nothing in flight and nobody mid-call: the moment the counts must
    /// agree.
    pub fn at_rest(&self) -> bool {
        self.requests.is_empty()
            && self.replies.is_empty()
            && self.waits.is_empty()
            && self.clients.iter().all(|c| {
                matches!(c.phase, Phase::Idle | Phase::Holding | Phase::Crashed)
                    && c.background.is_none()
            })
    }
}

/// A step of the system.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// A client starts an acquire.
    Acquire(ClientId),
    /// A holder's watchdog sends a renewal.
    Renew(ClientId),
    /// A holder releases.
    Release(ClientId),
    /// A holder whose local lease ran out lets the hold go (its unlock
    /// fails with `LeaseLost`, touching nothing).
    LetGo(ClientId),
    /// A client's call times out: it resends, or gives up.
    Timeout(ClientId),
    /// A client crashes: it sends nothing more; what it sent still flies.
    Crash(ClientId),
    /// A holder drops its guard: the release goes on in the background,
    /// and the client is free to acquire again.
    Drop(ClientId),
    /// A dropped guard's release timed out: it is sent again.
    ResendDropped(ClientId),
    /// A holder writes to the resource with its token.
    Write(ClientId),
    /// The write at this index reaches the resource (late, if its writer
    /// paused meanwhile).
    Land(usize),
    /// A replica catches up with the master (asynchronous replication).
    Replicate(usize),
    /// An offline replica finishes its full sync: a copy of the master,
    /// online from now.
    ComeOnline(usize),
    /// The master fails and a replica is promoted, with what it has; the
    /// other replicas sync from it anew.
    Failover(usize),
    /// The master restarts empty: every hold and latch is gone, from its
    /// replicas too; the token counter, floored by the server's clock,
    /// still rises past every token before.
    Restart,
    /// The `WAIT` at this index returns (its replicas caught up, or its
    /// timeout).
    WaitReturns(usize),
    /// Redis runs the request at this index.
    Run(usize),
    /// The network copies the request at this index.
    Duplicate(usize),
    /// The reply at this index reaches its client.
    Deliver(usize),
    /// Time passes one tick.
    Tick,
}

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
        }
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

    fn send(state: &mut State, client: ClientId, op: Op) {
        let c = &mut state.clients[client as usize];
        c.send += 1;
        let sent = Sent {
            client,
            send: c.send,
            op,
            at: state.now,
        };
        state.requests.push(sent);
        state.requests.sort();
    }

    fn next_req(state: &mut State, client: ClientId) -> ReqId {
        let c = &mut state.clients[client as usize];
        c.requests += 1;
        ReqId {
            client,
            seq: c.requests,
        }
    }

    /// Whether `sent`'s client still waits for its reply.
    fn awaited(&self, state: &State, sent: Sent) -> bool {
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
    fn read(&self, state: &mut State, answer: Answer) {
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
                state.clients[id as usize].background = None;
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
                    Self::send(state, id, Op::Sync(req, failovers, offset));
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
            (Phase::Syncing { req }, _) => Self::give_back_unsynced(state, id, req),
            (Phase::Acquiring { req, .. }, Reply::Refused) if c.lost => {
                // Nobody sends it any more, and a lost send of it may still
                // take the lock: settled.
                state.clients[id as usize].phase = Phase::Settling(req);
                Self::send(state, id, Op::Settle(req));
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
                Self::send(state, id, Op::GiveBack(give_back, grant));
            }
            // Refused or spent with nothing to settle, settled, given back.
            (Phase::Acquiring { .. }, Reply::Refused | Reply::Spent)
            | (Phase::Settling(_), _)
            | (Phase::GivingBack { .. }, _) => {
                let c = &mut state.clients[id as usize];
                c.phase = Phase::Idle;
                c.lost = false;
            }
            _ => {}
        }
    }

    /// Whether a dropped guard's release may be sent again at `now`: while
    /// the guard's lease runs (the mutation: until the hold has surely
    /// expired, counted from the drop).
    fn may_resend_dropped(&self, now: Time, bg: Background) -> bool {
        match self.mutation {
            Mutation::DroppedReleasePastLease => now < bg.until,
            _ => now < bg.deadline,
        }
    }

    /// Whether the give-back of a grant whose lease runs until `deadline`
    /// may be sent at `now`: while it runs (the mutation: always).
    fn may_give_back(&self, now: Time, deadline: Time) -> bool {
        self.mutation == Mutation::GiveBackPastLease || now < deadline
    }

    /// A grant too few replicas acknowledged (or whose sync failed) is
    /// given back, under a request of its own.
    fn give_back_unsynced(state: &mut State, id: ClientId, grant: ReqId) {
        let give_back = Self::next_req(state, id);
        state.clients[id as usize].phase = Phase::GivingBack {
            req: give_back,
            grant,
            resends: 0,
        };
        Self::send(state, id, Op::GiveBack(give_back, grant));
    }

    /// Replica sync's request runs on the master: the latch's touch (a
    /// write on this connection, after the grant's), then `WAIT` for the
    /// offset it reached; a latch gone from this master (a failover lost
    /// the grant) answers at once that the grant is not synced.
    fn run_sync(&self, state: &mut State, sent: Sent) {
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
    fn run_online_sync(&self, state: &mut State, sent: Sent, req: ReqId) {
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

    fn wait_returns(&self, state: &mut State, sent: Sent, acked: Option<u8>) {
        let enough = acked.is_some_and(|acked| {
            acked >= self.wanted.max(1) || (self.wanted == 0 && state.replicas.is_empty())
        });
        self.answer_sync(state, sent, enough);
    }

    /// The reply of a replica sync, to its client if it still awaits it.
    fn answer_sync(&self, state: &mut State, sent: Sent, enough: bool) {
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
    fn time_out(&self, state: &mut State, id: ClientId) {
        let resends_max = self.bounds.resends;
        let c = state.clients[id as usize];
        if let Phase::Syncing { req } = c.phase {
            // `WAIT`'s reply lost: the sync failed, and the grant is given
            // back.
            return Self::give_back_unsynced(state, id, req);
        }
        let (phase, op) = match c.phase {
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
            Some(op) => Self::send(state, id, op),
            // No reply of the last send is read any more.
            None => state.clients[id as usize].send += 1,
        }
    }
}

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
                Phase::Idle if c.acquires < self.bounds.acquires_of(id) => {
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
                | Phase::GivingBack { .. } => actions.push(Action::Timeout(id)),
                _ => {}
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
        }
        for i in 0..state.requests.len() {
            if i > 0 && state.requests[i] == state.requests[i - 1] {
                continue;
            }
            actions.push(Action::Run(i));
            if state.duplicates_left > 0 {
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
                let c = &mut state.clients[id as usize];
                // The first client's later acquires take a lease of their
                // own, when the bounds give one.
                c.lease = match (id, c.acquires, b.long_lease) {
                    (0, before, long) if before > 0 && long > 0 => long,
                    _ => b.lease,
                };
                c.phase = Phase::Acquiring {
                    req,
                    since: now,
                    resends: 0,
                };
                c.acquires += 1;
                c.lost = false;
                c.since = now;
                let lease = c.lease;
                Self::send(&mut state, id, Op::Acquire(req, lease));
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
                };
                state.requests.push(sent);
                state.requests.sort();
            }
            Action::Release(id) => {
                let req = Self::next_req(&mut state, id);
                let c = &mut state.clients[id as usize];
                c.phase = Phase::Releasing { req, resends: 0 };
                // The watchdog stops: a renewal in flight is not read.
                c.renewing = None;
                let lease = c.lease;
                Self::send(&mut state, id, Op::Release(req, lease));
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
                };
                state.requests.push(sent);
                state.requests.sort();
            }
            Action::ResendDropped(id) => {
                let now = state.now;
                let c = &mut state.clients[id as usize];
                let bg = c.background.as_mut()?;
                bg.resends += 1;
                let sent = Sent {
                    client: id,
                    send: 0,
                    op: Op::Dropped(bg.req, bg.lease),
                    at: now,
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
                let now = state.now;
                let server = &mut state.server;
                let reply = match sent.op {
                    Op::Acquire(req, ttl) => server.acquire_with(now, req, ttl, b, m, true, false),
                    Op::Release(req, ttl) | Op::Dropped(req, ttl) => {
                        server.release_keeping(now, req, ttl, b, m, 0)
                    }
                    Op::Renew(_) => server.renew(now, sent.client, b.lease, m),
                    Op::Settle(req) => server.settle(now, req, b),
                    Op::GiveBack(req, grant) => server.give_back(now, req, grant, b, m),
                    Op::Sync(..) => unreachable!("run above"),
                };
                if before.is_some_and(|before| before != state.server) {
                    state.server.offset += 1;
                }
                let new_grant = matches!(
                    (sent.op, reply, granted_before),
                    (Op::Acquire(..), Reply::Granted, false)
                );
                if let (Op::Acquire(req, _), Reply::Granted, false) =
                    (sent.op, reply, granted_before)
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
                        Op::Acquire(req, _) if reply == Reply::Granted => (
                            state.server.token_of(req),
                            state
                                .grants
                                .iter()
                                .find(|(r, _)| *r == req)
                                .map_or(0, |(_, g)| *g),
                        ),
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
                state.requests.retain(|r| r.at + window > now);
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
            Property::sometimes("both clients released a hold", |_, s: &State| {
                s.server.unlock_latches.len() >= 2
                    && s.server
                        .unlock_latches
                        .iter()
                        .any(|(r, _, _)| r.client == 0)
                    && s.server
                        .unlock_latches
                        .iter()
                        .any(|(r, _, _)| r.client == 1)
            }),
        ]
    }
}

/// A tick of a server's clock for its latches: those whose end (in
/// `ends`, by request) is past `now` stay, with their ends; the others are
/// gone.
pub(crate) fn expire_latches<V>(
    now: i32,
    latches: &mut Vec<(ReqId, V)>,
    ends: &mut Vec<(ReqId, i32)>,
) {
    ends.retain(|(_, end)| *end > now);
    latches.retain(|(req, _)| ends.iter().any(|(r, _)| r == req));
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

impl fmt::Display for Mutation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}
