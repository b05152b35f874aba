//! The clients, the network's requests and replies, and the whole state.

use super::*;

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
    /// A lean acquire (no latch), the TTL it sets, and its not-before:
    /// the latest deadline of the owner's sends whose replies it never
    /// read (the script runs only once the server's clock is past it).
    LeanAcquire(ReqId, Time, Time),
    /// A lean release (no latch), and its not-before (as the acquire's).
    LeanRelease(ReqId, Time),
    /// The settle of the owner's lean sends whose replies were lost: the
    /// latest of their deadlines (the script acts only once the server's
    /// clock is past it), and what it does then.
    LeanSettle(ReqId, Time, Intent),
    /// Replica sync after a grant: the latch's touch, then `WAIT`, on one
    /// connection. It carries what the mutation's `WAIT` alone would
    /// count: the grant's offset, when a write on the connection (the
    /// failovers so far, and the offset; 0: none).
    Sync(ReqId, u8, u8),
}

/// What a lean settle does once no lost lean send of its owner can run
/// any more.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Intent {
    /// Reads whether the owner holds the lock (a lost lean acquire's), and
    /// raises that hold's TTL to the lease carried (never lowers it): the
    /// hold found may be an older one of the owner's, left standing, whose
    /// TTL ends before the lease the client counts from its acquire's send.
    Take(Time),
    /// Releases the owner's hold (a lost lean release's), as the lean
    /// release does.
    Release,
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
    /// The deadline by the server's clock that its script checks (0: none;
    /// a release's under `LockModel::release_deadlines`): run at or past
    /// it, it changes nothing and answers `TooLate`.
    pub until: Time,
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
    /// A lean acquire sent.
    LeanAcquiring {
        req: ReqId,
    },
    /// A lean acquire whose reply was lost (or a settle of it answered
    /// `NotYet`, or ran too late), to be settled; `resends` of the settle
    /// so far. The client's clock is not trusted to tell when the
    /// acquire's deadline has passed: it may settle at any time, and the
    /// script checks. Settled also when its caller left (`Client::left`).
    LeanLost {
        req: ReqId,
        resends: u8,
    },
    /// Settling a lost lean acquire; `resends` so far.
    LeanSettling {
        req: ReqId,
        resends: u8,
    },
    /// A lean release sent, or (`resends` over 0) its settle.
    LeanReleasing {
        req: ReqId,
        resends: u8,
    },
    /// A lean release (or its settle) whose reply was lost, or a settle
    /// answered `NotYet`: settled next, at any time.
    LeanReleaseLost {
        req: ReqId,
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
    /// When its last send on its own connection was made (kept in the lean
    /// protocol only).
    pub sent_at: Time,
    /// The latest deadline of its sends whose replies it never read, of
    /// every kind (the lean protocol): until then, one of them may still
    /// run. Its lean requests carry it as their not-before, which the
    /// scripts check by the server's clock (the client's is not trusted).
    pub quiet_until: Time,
    /// The latest deadline of its lean sends that change the lock and
    /// whose replies it never read (the lean protocol); 0: none. Until a
    /// settle of them is answered, no other request of this owner goes (by
    /// no clock: the settle's script acts only past this deadline by the
    /// server's).
    pub lean_until: Time,
    /// The caller of its lean acquire left (the future dropped): the
    /// acquire is settled all the same, and a hold it took given back.
    pub left: bool,
    /// Its last give-back's grant, and that give-back's deadline, while
    /// its settle may run again (`LockModel::reruns`).
    pub given_back: Option<(ReqId, Time)>,
}

impl Client {
    pub(super) fn new() -> Self {
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
            sent_at: 0,
            quiet_until: 0,
            lean_until: 0,
            left: false,
            given_back: None,
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
    pub cancels_left: u8,
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
    /// Settles that may still run again (`LockModel::reruns`).
    pub reruns_left: u8,
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
    /// The caller of a lean acquire or release leaves (drops its future):
    /// its send in flight is lost, and the call is settled all the same (in
    /// the background, in the library), what an acquire took given back;
    /// the owner starts nothing else until then.
    Cancel(ClientId),
    /// A dropped guard's release timed out: it is sent again.
    ResendDropped(ClientId),
    /// The settle of a grant given back runs again (`LockModel::reruns`):
    /// its give-back goes once more, under a fresh request id.
    Rerun(ClientId),
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
