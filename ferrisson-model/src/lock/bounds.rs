//! The reentrant lock model's mutations and bounds.

use super::*;

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
    /// A give-back leaves its grant's latch showing the grant (ferrisson's
    /// give-back before 2026-12-07): a settle of the grant run again (a
    /// rescue at a runtime's end runs it from its start) gives back once
    /// more under a fresh request id, and releases the owner's next hold.
    GiveBackLeavesGrant,
    /// The lean acquire counts (`HINCRBY`) where it should find: two
    /// copies of one lost send (a client that sends the same bytes again
    /// on a new connection) take two counts, and the settle finds one
    /// hold for the owner's two.
    LeanCounts,
    /// The lean settle acts whatever the server's clock says (the client's
    /// own clock is not trusted to have waited for the lost sends'
    /// deadline): a lost lean acquire that runs after the settle found
    /// nothing takes a hold nobody owns, and a lost lean release that runs
    /// after its settle was answered deletes the owner's next hold.
    LeanSettleNoClockCheck,
    /// The lean settle to release acts whatever the server's clock says
    /// (the settle to take still checks it): a lost lean release that runs
    /// after its settle was answered deletes the owner's next hold.
    LeanReleaseSettleNoClockCheck,
    /// Lean requests go whatever else the owner has on its way (a dropped
    /// guard's release, or sends whose replies were lost): a lean acquire
    /// finds that hold and answers it as granted, and the release on its
    /// way then takes it from under the new holder. Both guards of the
    /// gate removed: the client's check of its background and the
    /// scripts' not-before.
    NoLeanGate,
    /// The gate ignores a dropped guard's release on its way (the scripts
    /// still check their not-before): as [`Mutation::NoLeanGate`], by the
    /// background release alone.
    LeanGateIgnoresBackground,
    /// The lean settle that finds the owner's hold leaves its TTL as it
    /// is: a hold left standing by an acquire whose caller left, adopted by
    /// the settle of the owner's next lean acquire, expires before the
    /// lease that the client counts from that acquire's send.
    LeanSettleKeepsTtl,
    /// A lean release that ran past its deadline (`TooLate`: it changed
    /// nothing) is read as released: the hold stands while its owner
    /// counts none.
    LeanTooLateReleased,
    /// The lean scripts ignore their not-before (the client still waits
    /// for a dropped guard's release): a lost latched release that runs
    /// after a lean acquire found its hold takes it away.
    LeanGateIgnoresLostSends,
    /// A lost latched send leaves the owner's not-before as it is (only a
    /// lost lean send raises it; the library before 2026-12-07 turned the
    /// whole client latched instead): a lost latched release that runs
    /// after a lean acquire found its hold takes it away.
    QuietOnLostLeanSendsOnly,
    /// After a lean send whose reply was lost and never settled (out of
    /// resends), the owner's next acquire goes without waiting for a
    /// settle's answer:
    /// that send, still on its way, changes the new hold (a lean release
    /// deletes it).
    NoWaitAfterLostLean,
    /// A lean send whose reply was read may still have a copy on its way
    /// (a client that sends the same bytes again on a new connection,
    /// as redis-rs's cluster connection does after a broken one): a copy
    /// of a granted lean acquire that runs after the hold's release takes
    /// a hold nobody owns. The lean protocol needs its sends sent once.
    HiddenResend,
    /// Lean scripts with no deadline: a lost lean acquire may run after
    /// the settle that waited for its deadline.
    LeanNoDeadline,
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
    /// Lean acquires whose caller may leave (the future dropped), in all.
    pub cancels: u8,
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
            cancels: 0,
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
            cancels: 0,
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
            cancels: 0,
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
            cancels: 0,
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
            cancels: 0,
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
            cancels: 0,
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

    /// A settle run again (with `LockModel::reruns`): the first client's
    /// first acquire loses its reply and is settled, what it took given
    /// back; its second may then hold while the give-back goes again.
    pub fn rerun() -> Bounds {
        Bounds {
            drops: 0,
            drop_resends: 0,
            ..Bounds::dropped()
        }
    }
}

impl fmt::Display for Mutation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}
