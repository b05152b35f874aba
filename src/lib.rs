//! Distributed locks and other synchronizers on Redis, on the same keys as
//! [Redisson](https://redisson.org), the Java library.
//!
//! For services with several replicas, one of which at a time must do a
//! thing (a cron job, a payment, leadership), and for teams coming from Java
//! whose Rust and Java services must exclude each other on the same lock
//! names. The reentrant [`Lock`]:
//!
//! - survives a crashed holder: every hold has a lease on the server;
//! - stays alive while its holder works: a watchdog renews the lease every
//!   third of it, and tells the holder when it is ever lost;
//! - wakes the next waiter by pub/sub as soon as it is released;
//! - is reentrant per owner (by default the tokio task), with a hold count;
//! - keeps Redisson's layout exactly (keys, fields, channels, messages), so
//!   it excludes a Java service using Redisson on the same name.
//!
//! Around it, on Redisson's layouts too: spin, fenced, fair, non-reentrant
//! and read-write locks, two semaphores, a count-down latch, a multi-lock
//! and RedLock. The suite runs on Redis 6.2, 7.0 and 8.2 and Valkey 8.1, on
//! one server, a Cluster and Sentinel. The async API runs on tokio; programs
//! without a runtime use the [blocking API](#without-an-async-runtime).
//!
//! ```rust,no_run
//! use std::time::Duration;
//! # async fn run() -> ferrisson::Result<()> {
//! let client = ferrisson::Client::connect("redis://127.0.0.1/").await?;
//! let lock = client.lock("orders:42"); // cheap, Clone, Send + Sync
//!
//! let guard = lock.lock().await?; // waits; the watchdog keeps it
//! // ... one replica at a time ...
//! guard.unlock().await?; // the next waiter is woken
//!
//! if let Some(guard) = lock.try_lock_for(Duration::from_secs(1)).await? {
//!     guard.unlock().await?;
//! }
//! # Ok(()) }
//! ```
//!
//! # Which synchronizer do I need?
//!
//! | You need | Type | From | Redisson |
//! |---|---|---|---|
//! | one holder at a time, reentrant | [`Lock`] | [`Client::lock`] | `RLock` (`getLock`) |
//! | the same, for very many locks with waiters: waiters poll, no subscription | [`SpinLock`] | [`Client::spin_lock`] | `getSpinLock` |
//! | one holder, and a token so the resource can refuse a late writer | [`FencedLock`] | [`Client::fenced_lock`] | `RFencedLock` |
//! | one leader among replicas, with a term that fences and a label the others read; changes followed as a stream | [`LeaderElection`] ([`Leadership`], [`LeaderObserver`]) | [`Client::leader_election`] | none: an `RFencedLock` underneath |
//! | data in Redis that only the latest holder or leader may write: a late writer's lower token is refused | [`FencedHash`] | [`Client::fenced_hash`] | none |
//! | a scheduled job on several replicas: one runs each occurrence ([`Job::every`] names it), the others skip it ("at most for", "at least for", as ShedLock) | [`Job`] ([`JobRun`], [`Lease`]) | [`Client::job`] | none: an `RLock` underneath, and a record of the last occurrence done |
//! | one holder, served in arrival order | [`FairLock`] | [`Client::fair_lock`] | `getFairLock` |
//! | one holder, never re-entered: its holder asking again is refused (see [the hazard](#owners-and-reentrancy)) | [`NonReentrantLock`], [`NonReentrantFairLock`] | [`Client::non_reentrant_lock`], [`Client::non_reentrant_fair_lock`] | `getNonReentrantLock`, `getNonReentrantFairLock` |
//! | many readers or one writer | [`ReadWriteLock`] ([`ReadLock`], [`WriteLock`]) | [`Client::read_write_lock`] | `RReadWriteLock` |
//! | at most N at a time; anyone may give permits back | [`Semaphore`] | [`Client::semaphore`] | `RSemaphore` |
//! | at most N at a time; a dead holder's permit comes back by itself | [`PermitExpirableSemaphore`] ([`Permit`]) | [`Client::permit_expirable_semaphore`] | `RPermitExpirableSemaphore` |
//! | wait until N things have happened | [`CountDownLatch`] | [`Client::count_down_latch`] | `RCountDownLatch` |
//! | several locks as one, all or none | [`MultiLock`] | [`MultiLock::new`] | `RedissonMultiLock` |
//! | one lock over independent masters, held by a majority | [`RedLock`] | [`RedLock::new`] | `RedissonRedLock` (deprecated) |
//!
//! The election is what etcd's `concurrency.Election` (`Campaign`,
//! `Leader`, `Observe`, `Resign`, the revision as a fencing token) and
//! Curator's `LeaderLatch` give, on Redis and on a lock a Redisson client
//! shares; how it compares, and where Redis's asynchronous replication
//! makes it weaker than etcd, is in [`LeaderElection`]'s docs.
//!
//! The job is the answer to "my cron job runs on every replica": what
//! ShedLock's `@SchedulerLock(lockAtMostFor, lockAtLeastFor)` gives Java
//! services, on a lock a Redisson client shares; drive it from any
//! scheduler (the `cron` example uses `tokio-cron-scheduler`). Beyond
//! ShedLock, a run names the occurrence it serves ([`Job::every`]: the
//! scheduled instant nearest to its start; or [`Job::occurrence`]), and
//! the run that completes it records it: a replica that fires late finds
//! it done ([`JobRun::AlreadyDone`]) however short the run, where a lock
//! alone needs a `lockAtLeastFor` longer than the replicas' clocks ever
//! differ. What remains: with `every`, a run must start within half a
//! period of its instant by its own host's clock (500 ms for a schedule
//! of every second). For a shell command, the inspector's
//! `ferrisson run NAME --every PERIOD -- COMMAND` does the same across
//! hosts, as `consul lock` and `flock` do (see `docs/cli.md`).
//!
//! Every handle is cheap to clone and sends nothing until used. Every lock
//! has the API of [`Lock`], whose methods' docs are the contract (the other
//! kinds' say what differs), and implements the sealed [`DistributedLock`]
//! trait, so code can hold `&dyn DistributedLock` and a [`MultiLock`] or
//! [`RedLock`] can take any of them.
//!
//! # Owners and reentrancy
//!
//! A hold belongs to an owner. By default the owner is the calling tokio task,
//! as Redisson uses the Java thread. The same task re-enters (the hold count
//! rises); any other task, or any other [`Client`], waits. Code outside a task
//! (the body of `#[tokio::main]`) is owned by its thread. A guard is
//! `Send + 'static` and may move into another task, but its hold still belongs
//! to the task that took it.
//!
//! When one logical owner spans several tasks, name it:
//! `lock.with_owner("job-17")` ([`Lock::with_owner`]). Every handle with that
//! owner id on the same client shares its holds, and [`Lock::unlock`] releases
//! one of them without a guard (for holds given up with [`LockGuard::leak`]).
//! Releasing what you do not hold is an error ([`Error::NotHeld`]), as in
//! Redisson.
//!
//! **The hazard: futures that share a task share an owner.** Futures polled
//! inside one task (the branches of `join!` or `select!`, the items of
//! `FuturesUnordered` or `buffer_unordered`) all run as that task. On a
//! reentrant lock the second of them re-enters the first one's hold, and two
//! "critical sections" run at once. Two fixes:
//! - a [`NonReentrantLock`] (or [`NonReentrantFairLock`]), Redisson's
//!   `getNonReentrantLock`: the holder asking again is refused with
//!   [`Error::NonReentrantReacquire`] instead of let in;
//! - one explicit owner per concurrent branch (`with_owner`), so that the
//!   branches wait for each other.
//!
//! ```rust,no_run
//! # async fn run(client: ferrisson::Client) -> ferrisson::Result<()> {
//! let lock = client.lock("report");
//! let section = |lock: ferrisson::Lock| async move {
//!     let guard = lock.lock().await?;
//!     // ... one branch's critical section ...
//!     guard.unlock().await
//! };
//! // The second branch waits until the first lets go.
//! let (a, b) = tokio::join!(
//!     section(lock.with_owner("branch-a")),
//!     section(lock.with_owner("branch-b")),
//! );
//! a?;
//! b?;
//! # Ok(()) }
//! ```
//!
//! Semaphores and the latch have no owners: their permits and counts belong to
//! nobody.
//!
//! # Guards and drop
//!
//! Each successful acquire returns its own guard: a [`LockGuard`] (a
//! [`FencedGuard`] for the fenced lock, a [`MultiLockGuard`] or a
//! [`RedLockGuard`]), also when it re-entered. A guard is `#[must_use]`.
//! `guard.unlock().await` is the documented path: it reports a lost lease or a
//! failed release. Dropping a guard releases it in the background, on the
//! runtime it was taken on. That never blocks and never panics, but it is not
//! immediate, and a failure is only logged. Since nobody waits on it, it is
//! resent after a failed connection until it gets through or the hold's
//! lease runs out, or that of another hold of its owner that keeps the
//! lock's key (see [Time limits](#time-limits)). A release that never got
//! through leaves its count in the key, which lives as long as its owner's
//! other holds keep it: the owner still holds the lock then, once more than
//! its guards say, until it releases the rest and the key's TTL (the last
//! lease or watchdog renewal) runs out. A dropped [`Permit`] is
//! released the same way, and a fair waiter whose wait was dropped leaves the
//! queue the same way.
//!
//! [`Lock::unlock`] is Redisson's `unlock()`: where a guard of the same owner
//! is alive, it releases the newest guard's hold, and that guard's drop then
//! sends nothing. So `let _g = lock.lock().await?; ...; lock.unlock().await?;`
//! releases once, as in Java, and never a hold taken later.
//!
//! ## Runtimes and the end of a program
//!
//! A program that returns normally leaves nothing behind: no hold, no permit,
//! no queue entry. A release still pending when its runtime shuts down (a
//! guard dropped on the last line of `#[tokio::main]`, a dropped `Runtime`,
//! the end of a `#[tokio::test]`) is not lost with the runtime's tasks: the
//! runtime's drop runs it once more, on a thread and a connection of its own,
//! and waits for it: all the releases left share at most the connection and
//! response timeouts (5 s and 3 s by default), however many there are (a
//! release that Redis answered in time leaves the next its own window). So
//! is a call whose reply is still on its way then (an acquire in a task the
//! runtime drops, an unlock): an acquire is settled by its request id, and
//! what it took (a hold, permits) given back; an unlock is sent again under
//! its own id. `Runtime::shutdown_background` does not wait, and a
//! crash or `std::process::exit` leaves the holds to their leases.
//!
//! A [`Client`] runs its background work (the watchdog, the pub/sub listener,
//! the connection) on the runtime it was built on. Build it in the runtime
//! that uses it, or on one that outlives every use: a client whose runtime
//! has shut down reports the holds its watchdog kept as lost at once
//! ([`LockGuard::lease_lost`] resolves) and refuses every new call with
//! [`Error::RuntimeGone`]. In tests, build a client in each `#[tokio::test]`
//! rather than sharing one through a static: each test's runtime ends with the
//! test. A client may be used from other runtimes while its own runs, provided
//! that its own runs its tasks by itself (a multi-thread runtime, or one whose
//! `block_on` is in progress).
//!
//! A guard tells its holder when the lock is no longer its own, so long work
//! can stop instead of running unprotected:
//!
//! ```rust,no_run
//! # async fn work() {}
//! # async fn run(lock: ferrisson::Lock) -> ferrisson::Result<()> {
//! let guard = lock.lock().await?;
//! tokio::select! {
//!     _ = work() => guard.unlock().await?,
//!     _ = guard.lease_lost() => eprintln!("lease lost: stopped"),
//! }
//! # Ok(()) }
//! ```
//!
//! [`LockGuard::is_lease_lost`] answers the same question without waiting,
//! and [`LockGuard::lease_handle`] gives a [`Lease`] that asks it from
//! another task, while the work owns the guard.
//!
//! # Without an async runtime
//!
//! Batch jobs, command-line tools and synchronous services use [`blocking`]
//! (feature `blocking`): the same handles as blocking calls, owned by the
//! calling thread, on a runtime of the client's own that keeps renewing
//! leases between calls.
//!
//! # Cancel safety
//!
//! Every async method is cancel safe, and its docs say how. A `lock()` or
//! `try_lock_for()` future dropped at any point leaves no hold in Redis, no
//! entry in the watchdog registry, no fair-queue entry and no subscription. An
//! acquire already sent when the future is dropped is completed in the
//! background and given back. A dropped `unlock()` still completes its release.
//! Dropped acquires and waits of the semaphores, the latch, the multi-lock and
//! RedLock leave nothing behind either.
//!
//! Acquires of every lock kind, and of both semaphores, are also safe to send
//! again, and all are resent the same way. When the connection fails before the
//! reply comes, the same request (the same id) is sent again while the call's
//! time allows (see [Time limits](#time-limits)), up to `release_attempts`
//! sends ([`ClientBuilder::release_attempts`]), each pause up to 100 ms longer
//! (from half of that, at random, so that the resends of requests that one
//! cut failed together part). A
//! resend of a request that was granted returns the first outcome (the first
//! fencing token, the same permit ids) instead of taking a second hold or more
//! permits; once a lock's hold it took is gone (expired, released, forced
//! open), it takes nothing at all, and a wait goes on with a new request. The tries of one wait send the same request. When no send of a
//! call's first try got a reply, the call fails with the connection error
//! (`lock()` and `acquire()` wait the outage out), and the request is settled
//! in the background: what it took is given back if it was granted (the hold
//! released, the permits returned), and it is marked cancelled if it was not,
//! so that it changes nothing should it still reach Redis.
//!
//! On one server without replica sync (unless built with
//! [`ClientBuilder::lean`]`(false)`), the reentrant and spin locks send an
//! owner's one hold another way, the lean protocol: an owner that holds
//! nothing of the lock takes and releases its one hold with scripts that
//! keep no latch key, each send bounded by a deadline on the server's
//! clock and never resent. A lost reply is settled once that deadline has
//! passed (what the send took is released), and the owner's next call on
//! the lock waits for it. A latched request whose reply was lost keeps its
//! owner's calls of that lock latched while it may still run. An acquire goes lean only in a call that waits as long as it
//! takes (`lock()`, `lock_with_lease()`), which sends the latched request
//! once the settle is answered; `try_lock()` and `try_lock_for()` send the
//! latched request, resent within their time.
//! Re-entries, a cluster, sentinels and every other synchronizer are as
//! above.
//!
//! # Time limits
//!
//! How long a call may take, whatever the server does (frozen, partitioned,
//! slow):
//!
//! - **With a wait** (`try_lock_for`, the semaphores' `try_acquire_for`, the
//!   latch's `wait_for`, the multi-lock's and RedLock's): by the end of the
//!   wait plus a margin of a tenth of it, from 100 ms to 1 s (never more
//!   than the response timeout). An attempt unanswered by then finishes in
//!   the background, where what it took is given back; the call returns
//!   `Ok(None)` if an earlier attempt was answered, else a timeout error.
//! - **Without a wait** (`try_lock`, `try_acquire`): one response timeout
//!   (3 s by default); replica sync adds its own.
//! - **As long as it takes** (`lock`, `acquire`, `wait`): connection
//!   failures are waited out.
//! - **An awaited release** (`guard.unlock()`): up to `release_attempts`
//!   sends, then an error; the hold expires with its lease.
//! - **A release nobody waits on** (a dropped guard or permit, the
//!   give-back of what a caller never got): resent, up to a second apart,
//!   until it gets through or, for a lock's hold, its lease runs out
//!   (below); for a semaphore's permits, until they have surely ended in
//!   Redis (for what never expires, an hour). A network cut longer than an
//!   awaited release's sends so leaves nothing behind once it heals.
//! - **No release of a lock's hold is sent once its lease has run out** by
//!   this client's clock (a guard's lease; for a hold nested in a watchdog
//!   hold of the same owner, the watchdog's; for the give-back of a hold
//!   nobody got, counted from the first send that may have taken it, or,
//!   when every reply was lost, from the grant itself: the settle reads
//!   when it ran from its request's latch). A
//!   guard's release stands by the leases of its owner's other holds of
//!   the lock too, where one was alive with it (held, or its release not
//!   answered yet) or was granted while it stood, and by the TTL such a
//!   hold's release set: the owner's holds share one key, so the released
//!   hold's count lives as long as any of them keeps the key (a dropped
//!   watchdog hold beside a 60 s leased one, its own lease run out in an
//!   outage, is still released once the network is back). A give-back
//!   stands by the owner's holds granted before its own lease (from its
//!   first send) ended that still keep the key (a read re-entry whose
//!   grant is found after its own 3 s watchdog lease, inside a 60 s leased
//!   read hold, is still given back). A read lock's hash, with every
//!   owner's count in it, lives as long as any read hold: a read hold's
//!   release stands by every owner's read holds of the lock on its client.
//!   Past all of them: the
//!   hold may be gone by then, and its owner may hold the lock anew, which
//!   a late release would take, Redis counting holds per owner, not per
//!   acquire. The hold, if it still stands, ends with its lease. One case
//!   is left: a leased hold taken inside a watchdog hold of the same owner
//!   whose watchdog lease is lost (the key expired while renewals could not
//!   get through), when the owner holds the lock anew before that leased
//!   hold is released: the release takes the newer hold.
//! - **A lock's TTL only rises while its owner keeps holds of it**: a
//!   re-entry, a renewal and a release that leaves holds raise the key's
//!   TTL to their lease and keep a longer one. Each carries what its
//!   client knew when it was made, and may reach Redis after a later call
//!   of the same owner (a dropped guard's release run after the owner's
//!   next acquire, a resend, a renewal sent before its hold's release, an
//!   acquire given up on): a longer lease taken meanwhile is never cut
//!   short, nor by another hold's `extend`.
//!   The price: when a leased hold's lease ran out under a watchdog hold
//!   of its owner, the key lives on after the watchdog hold's release for
//!   what is left of the last renewal (at most a watchdog timeout), with
//!   the count of the leased hold, whose `unlock` sends nothing (its lease
//!   is lost); the same after `extend` to a shorter lease that ran out. If
//!   the owner takes the lock again meanwhile, that count rides along
//!   until the owner holds nothing for a TTL. A read lock's hash is the
//!   exception: it follows its holds' keys, as Redisson's does (a read
//!   release deletes the owner's newest key, whichever hold it was).
//!
//! # Errors
//!
//! One `#[non_exhaustive]` enum, [`Error`], whose variants say what went
//! wrong and what was left as it was. [`Error::is_connection_error`] tells
//! when retrying may help. Not getting the lock within a wait is
//! `Ok(None)` (`false` for semaphores and latches), not an error. Bad input
//! is [`Error::InvalidArgument`], and nothing is written for it; a key
//! holding data ferrisson did not write is [`Error::WrongType`], and is
//! left alone by every call. Nothing panics on any input.
//!
//! # Guarantees
//!
//! The fault suite checks these against real servers, processes and a
//! network proxy; its figures are in `docs/faults.md` in the repository.
//!
//! - **Leases run on Redis's clock.** A hold lasts until released or until
//!   its lease runs out on the server. A crashed process's lock is free at
//!   most one watchdog timeout (30 s by default) after its last renewal.
//! - **The watchdog never recreates a lock that is gone.** When a renewal
//!   finds it gone (expired in a stall, force-unlocked, a Redis that
//!   restarted empty), every guard on it sees
//!   [`lease_lost`](LockGuard::lease_lost) resolve. While Redis is out of
//!   reach, renewals are retried until the lease would run out less a
//!   margin (a tenth, at most 1 s), so the holder hears before the server
//!   can let the key go; a renewal that finds no connection is sent again
//!   20 ms later, so a holder hears that Redis came back empty a few round
//!   trips after it answers (when another may already take the lock); one
//!   that gets neither a reply nor an error is sent again beside it at a
//!   third and at two thirds of the time from its send to the deadline (a
//!   request sent as its connection is cut can wait the whole response
//!   timeout).
//! - **Every lease has a local deadline too**, counted from the send of the
//!   acquire or of the last confirmed renewal: a holder waking from a pause
//!   finds [`LockGuard::is_lease_lost`] true before any other code of it
//!   runs, and its `unlock()` fails with `LeaseLost` without touching the
//!   next holder's hold. An acquire answered after its first renewal was
//!   due is confirmed by a renewal before its guard is handed out.
//! - **Resent calls count once.** Acquires (the acquire latch) and releases
//!   (Redisson's unlock latch) are resent after a lost reply, and a lost
//!   reply neither takes a second hold nor leaves one behind. One case
//!   escapes the acquire latch: a granted hold deleted behind its owner's
//!   back (a force unlock), then taken again by the same owner before the
//!   latch expires, is given back when the old request is settled. A
//!   waiter rides out connection failures, of its subscription too (a
//!   release published while that connection was down is made up for by
//!   a try once it has subscribed again, however long it was down); a
//!   call on a server that is down fails after one reconnect attempt.
//! - **A grant never outlives the caller that gave up on it.** Each send
//!   of an acquire (every lock kind, both semaphores) carries its
//!   deadline: the instant its caller gives up on the reply (one response
//!   timeout after the send), by the server's clock. A script that runs
//!   later takes nothing. So a `try_lock()` that timed out on a frozen or
//!   overloaded server, in a program that returned (or crashed, or called
//!   `exit`) right after, is not granted when the server wakes and runs
//!   what waited in its socket. The server's clock is read with `TIME`
//!   (from the master of the call's slot on a cluster) before a client's
//!   first acquire and then once a minute: a server that does not answer
//!   it gets no acquire at all. The limit: the deadline is as right as
//!   that reading. It is made earlier by the reading's error (half its
//!   round trip), so a reply still arriving in the last moments before
//!   the timeout may say "too late" (the call fails as on a timeout); a
//!   server whose clock steps back, or a failover to a master whose clock
//!   differs, moves the deadline by that much until the next reading. A
//!   send that ran before its deadline and whose reply was then lost is
//!   granted, and settled as any lost reply above: given back by the
//!   running program, or, at its runtime's end, within the rescue's
//!   connection and response timeouts, reaching a server that answers by
//!   then (else the hold expires with its lease).
//! - **A lost wake-up costs at most the lock's remaining TTL**: each wait is
//!   bounded by it (a semaphore or latch waiter without such a bound looks
//!   again every third of the watchdog timeout).
//!
//! What no lock can promise:
//!
//! - **A pause longer than the lease, inside the holder** (SIGSTOP,
//!   swapping, a long blocking call): another holder may start before it
//!   wakes, and code that checked its guard, froze, then writes, writes
//!   late. A clock that jumps is not covered either: the margin covers a
//!   drift of a tenth of the lease, not a jump.
//! - **A failover that loses writes.** Replication is asynchronous: a lock
//!   written to a master that dies before replicating it is lost on the
//!   promoted replica, and two holders can exist. Replica sync (`WAIT`, see
//!   [`ClientBuilder`]) narrows that window; it does not close it.
//!
//! Where a resource must never accept a stale holder's write, use
//! [fencing tokens](FencedLock): the resource refuses a token lower than the
//! highest it has seen, and a late writer is refused instead of overwriting
//! the next holder's work (the counter is replicated like the lock, so a
//! failover that loses writes can hand a token out twice; tokens are
//! floored by the server's clock, so a Redis that lost the counter does
//! not start them again from 1). A leader's
//! term ([`LeaderElection`]) is such a token. For data kept in Redis,
//! [`FencedHash`] does the check in the server, in one script; in SQL,
//! keep the highest token in the row and let the database refuse a lower
//! one in the same statement:
//! `UPDATE jobs SET state = $1, fence = $2 WHERE id = $3 AND fence <= $2`
//! (no row updated: a later holder has written; stop). Each
//! synchronizer's own promises are in its docs: the semaphores'
//! ([`Semaphore`]), the multi-lock's and RedLock's ([`MultiLock`],
//! [`RedLock`]), and the clocks to mind in a fleet shared with Redisson
//! ([`PermitExpirableSemaphore`], [`FairLock`]).
//!
//! # Deployments
//!
//! One server, with ACL users, TLS and replica sync: [`ClientBuilder`]. A
//! Redis Cluster: [`Client::cluster_builder`] (feature `cluster`). Redis
//! Sentinel: [`Client::sentinel_builder`] (feature `sentinel`). Each says
//! how it is set up and what differs there.
//!
//! # Redisson compatibility
//!
//! ferrisson keeps Redisson's layout exactly, so the two exclude each other on
//! the same names:
//!
//! - a lock is a hash at the plain name: field `<client-uuid>:<owner-id>`,
//!   value the hold count, TTL the lease. ferrisson's owner ids are
//!   `task-<id>`, `thread-<n>` or yours; Redisson's are Java thread ids;
//! - a final release publishes `0` on `redisson_lock__channel:{name}`, and runs
//!   under Redisson's unlock latch, so a resent release answers the first
//!   answer instead of releasing twice;
//! - the watchdog default is 30 s, renewed every 10 s, as Redisson's
//!   `lockWatchdogTimeout`;
//! - the fair lock, read-write lock, fenced lock, both semaphores and the
//!   count-down latch use Redisson's keys, channels and messages too.
//!
//! Every key, field, channel and message, per synchronizer, and the contract
//! every script keeps, are in `lua/README.md` in the repository. The Lua
//! scripts in `lua/` are ours, written from that layout. On a cluster both
//! sides must use the same pub/sub mode (see [`Client::cluster_builder`]),
//! and in a mixed fleet mind the clocks (see [`PermitExpirableSemaphore`]).
//!
//! # Metrics and traces
//!
//! With the `metrics` feature, the locks and semaphores report acquires,
//! waits, hold times, lost leases, renewals and subscriptions through the
//! [`metrics`](https://docs.rs/metrics) crate's facade, labelled by kind
//! (and by name only with `ClientBuilder::metric_lock_names(true)`). Every
//! acquire and every guard's release also runs in a `tracing` span
//! (`ferrisson.acquire`, `ferrisson.release`), with or without the
//! feature. The list of figures is `docs/metrics.md` in the repository.
//!
//! # Cargo features
//!
//! | feature | what it adds |
//! |---|---|
//! | `tls` | `rediss://` URLs, through the `redis` crate's rustls support, with ring as the crypto provider (builds with a C compiler, no system library); `ClientBuilder::tls_root_certificate` |
//! | `native-tls` | `rediss://` URLs through native-tls instead: the platform's TLS library (OpenSSL on Linux, built from source by the crate, so no libssl-dev is needed); when `tls` is on too, rustls is used |
//! | `metrics` | figures through the `metrics` facade (see [Metrics and traces](#metrics-and-traces)); `ClientBuilder::metric_lock_names` |
//! | `cluster` | Redis Cluster, through the `redis` crate's async cluster connection; `Client::cluster_builder` |
//! | `sentinel` | Redis Sentinel: the master is found, and found again after a failover; `Client::sentinel_builder`, `ClientBuilder::sentinel_master_auth` |
//! | `blocking` | [`blocking`]: the same handles for programs without an async runtime |
//! | `full` | every feature above but `native-tls` (what the test suite runs with) |
//!
//! None is on by default.
// The docs link the blocking API, which a build without its feature lacks
// (docs.rs builds with every feature).
#![cfg_attr(not(feature = "blocking"), allow(rustdoc::broken_intra_doc_links))]

// The synchronizers.
mod count_down_latch;
mod distributed;
mod election;
mod fenced_hash;
mod group;
mod job;
mod lock;
mod semaphore;

pub use count_down_latch::CountDownLatch;
pub use distributed::DistributedLock;
pub use election::{LeaderChange, LeaderElection, LeaderObserver, Leadership};
pub use fenced_hash::{FencedHash, FencedValue, FencedWrite};
pub use group::multilock::{MultiLock, MultiLockGuard};
pub use group::redlock::{RedLock, RedLockGuard};
pub use job::{Job, JobRun};
pub use lock::{
    FairLock, FencedGuard, FencedLock, Holder, Lease, Lock, LockGuard, LockInfo, LockMode,
    NonReentrantFairLock, NonReentrantLock, QueuedWaiter, ReadLock, ReadWriteLock, Released,
    SpinLock, WriteLock,
};
pub use semaphore::expirable::{Permit, PermitExpirableSemaphore, PermitId};
pub use semaphore::Semaphore;

// What they share: the client and its settings, errors, and the machinery
// under every handle.
mod args;
#[cfg(feature = "blocking")]
pub mod blocking;
mod checks;
mod client;
pub mod config;
mod engine;
mod error;
#[doc(hidden)]
pub mod layout;

pub use client::{Client, ClientBuilder};
pub use config::Config;
pub use engine::backoff::Backoff;
pub use error::{Error, Result};

/// README.md's examples, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
