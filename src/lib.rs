//! Distributed locks and other synchronizers on Redis, on the same keys as
//! [Redisson](https://redisson.org), the Java library.
//!
//! You run several replicas of a service, and one of them at a time must do a
//! thing: a cron job, a plan rotation, a payment. Or you come from Java, know
//! Redisson's `RLock`, and want a Rust service and a Java service to exclude
//! each other on the same lock names. ferrisson's reentrant lock, [`Lock`]:
//!
//! - survives a crashed holder: every hold has a lease, and a dead process's
//!   hold ends when the lease runs out;
//! - stays alive while its holder works: a watchdog renews the lease every
//!   third of it, and tells the holder if the lease is ever lost;
//! - wakes the next waiter as soon as it is released, by pub/sub, not polling;
//! - is reentrant per owner (by default the tokio task), with a hold count;
//! - keeps Redisson's exact layout in Redis (keys, hash fields, channels,
//!   messages, and what each script does), so it excludes a Java service that
//!   uses Redisson on the same name.
//!
//! The rest of Redisson's family sits around it, on Redisson's layouts too:
//! spin, fenced, fair and read-write locks, two semaphores, a count-down latch,
//! a multi-lock and RedLock. ferrisson speaks RESP3 and runs Lua scripts; its
//! suite runs on Redis 6.2, 7.0 and 8.2 and Valkey 8.1. On Redis 6.2, which
//! has no sharded pub/sub, a cluster client uses classic pub/sub.
//! Its async API runs on a tokio runtime; programs without one use the
//! [blocking API](#without-an-async-runtime).
//!
//! ```rust,no_run
//! use std::time::Duration;
//! # async fn run() -> ferrisson::Result<()> {
//! # let (wait, lease) = (Duration::from_secs(1), Duration::from_secs(10));
//! let client = ferrisson::Client::builder("redis://127.0.0.1/")
//!     .watchdog_timeout(Duration::from_secs(30)) // the default; renewed every 10 s
//!     .build()
//!     .await?;
//! let lock = client.lock("orders:42");      // cheap, Clone, Send + Sync
//!
//! let guard = lock.lock().await?;                          // waits; watchdog mode
//! let again = lock.lock().await?;                          // same task: re-enters
//! assert_eq!(lock.hold_count().await?, 2);
//! again.unlock().await?;                                   // one hold less
//! guard.unlock().await?;                                   // last hold: deleted, waiter woken
//!
//! let guard = lock.lock_with_lease(lease).await?;          // expires after `lease`
//! guard.unlock().await?;
//! let maybe = lock.try_lock().await?;                      // one attempt
//! let maybe = lock.try_lock_for(wait).await?;              // waits at most `wait`
//! let maybe = lock.try_lock_with_lease(wait, lease).await?;
//!
//! lock.is_locked().await?;                  // anyone holds it
//! lock.is_held_by_current_task().await?;    // this owner holds it
//! lock.remaining_ttl().await?;              // Option<Duration>
//! lock.force_unlock().await?;               // whoever holds it; wakes a waiter
//! client.id();                              // this client's UUID
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
//! | one holder, served in arrival order | [`FairLock`] | [`Client::fair_lock`] | `getFairLock` |
//! | one holder, never re-entered: its holder asking again is refused (see [the hazard](#owners-and-reentrancy)) | [`NonReentrantLock`], [`NonReentrantFairLock`] | [`Client::non_reentrant_lock`], [`Client::non_reentrant_fair_lock`] | `getNonReentrantLock`, `getNonReentrantFairLock` |
//! | many readers or one writer | [`ReadWriteLock`] ([`ReadLock`], [`WriteLock`]) | [`Client::read_write_lock`] | `RReadWriteLock` |
//! | at most N at a time; anyone may give permits back | [`Semaphore`] | [`Client::semaphore`] | `RSemaphore` |
//! | at most N at a time; a dead holder's permit comes back by itself | [`PermitExpirableSemaphore`] ([`Permit`]) | [`Client::permit_expirable_semaphore`] | `RPermitExpirableSemaphore` |
//! | wait until N things have happened | [`CountDownLatch`] | [`Client::count_down_latch`] | `RCountDownLatch` |
//! | several locks as one, all or none | [`MultiLock`] | [`MultiLock::new`] | `RedissonMultiLock` |
//! | one lock over independent masters, held by a majority | [`RedLock`] | [`RedLock::new`] | `RedissonRedLock` (deprecated) |
//!
//! Every handle is cheap to clone, and sends nothing until it is used. The
//! locks ([`Lock`], [`SpinLock`], [`FencedLock`], [`FairLock`],
//! [`NonReentrantLock`], [`NonReentrantFairLock`], [`ReadLock`] and
//! [`WriteLock`]) all have the API of [`Lock`] above: waits, leases, the
//! watchdog, guards and owners. Each implements the sealed [`DistributedLock`]
//! trait, so code can take `&dyn DistributedLock` or keep a
//! `Vec<Box<dyn DistributedLock>>`, and a [`MultiLock`] or [`RedLock`] can
//! hold any of them.
//!
//! Each type's docs say how it works and what it costs: the spin lock's
//! backoff, the fencing token, the fair lock's line, the read-write lock's
//! downgrade, whose permits belong to whom, the latch's reset, the
//! multi-lock's deadlock freedom and RedLock's limits.
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
//! resent after a failed connection until it gets through or the hold has
//! surely expired (see [Time limits](#time-limits)). A dropped [`Permit`] is
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
//! response timeouts (3 s and 3 s by default), however many there are. `Runtime::shutdown_background` does not wait, and a
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
//! [`LockGuard::is_lease_lost`] answers the same question without waiting.
//!
//! # Without an async runtime
//!
//! Batch jobs, command-line tools and synchronous services use [`blocking`]
//! (feature `blocking`): the same handles, guards and permits as plain
//! blocking calls, owned by the calling thread, on a small runtime of the
//! client's own that keeps renewing leases between calls. Its module docs
//! say how drops, owners and threads behave there.
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
//! sends ([`ClientBuilder::release_attempts`]), each pause 100 ms longer. A
//! resend of a request that was granted returns the first outcome (the first
//! fencing token, the same permit ids) instead of taking a second hold or more
//! permits. The tries of one wait send the same request. When no send of a
//! call's first try got a reply, the call fails with the connection error
//! (`lock()` and `acquire()` wait the outage out), and the request is settled
//! in the background: what it took is given back if it was granted (the hold
//! released, the permits returned), and it is marked cancelled if it was not,
//! so that it changes nothing should it still reach Redis.
//!
//! # Time limits
//!
//! How long a call may take, whatever the server does (frozen, partitioned,
//! slow), and what goes on after it returned:
//!
//! - **With a wait** (`try_lock_for`, `try_lock_with_lease`, the semaphores'
//!   `try_acquire_for` and kin, the latch's `wait_for`, and the multi-lock's
//!   and RedLock's `try_lock_for`): the call returns by the end of the wait plus
//!   a small margin, a tenth of the wait, from 100 ms to 1 s (never more than
//!   the response timeout). No attempt starts after the wait; one whose reply
//!   has not come by the end of the margin is left to finish in the background,
//!   where what it took is given back. The call then returns `Ok(None)`
//!   (`false`) when an earlier attempt had its reply, and a timeout error (a
//!   connection error) when none had. A RedLock round that has begun runs to its
//!   end (each attempt within its bound): a `try_lock_for` returns by the end of
//!   its first round when that is later.
//! - **Without a wait** (`try_lock()`, `try_acquire()`): one attempt, whose
//!   reply is waited for one response timeout (3 s by default). A send that met
//!   a failed connection is sent again within that time, never after it: a
//!   server that does not answer costs one timeout, not two. Replica sync adds
//!   its own timeout (twice, when too few replicas acknowledged and the grant
//!   is given back).
//! - **As long as it takes** (`lock()`, `acquire()`, `wait()`): connection
//!   failures are waited out.
//! - **An awaited release** (`guard.unlock()`, `Lock::unlock`): up to
//!   `release_attempts` sends after failed connections, 100 ms, 200 ms... apart;
//!   then an error, and the hold expires with its lease.
//! - **A release nobody waits on**: the give-back of what an acquire took for a
//!   caller that never got it (it left, its wait ran out, every reply was lost,
//!   too few replicas acknowledged), and the release of a dropped guard or
//!   permit. It is resent with backoff (up to a second apart) until it gets
//!   through, or until what it gives back has surely ended in Redis: the lease
//!   from the start of the release, one response timeout and a drift margin;
//!   while this client's watchdog renews the owner's key (other guards hold it),
//!   as long as that lasts; for what never expires (a semaphore's permits, a
//!   permit without a lease), an hour. Each resend counts once (a latch, or a
//!   release by permit id). So a network cut longer than an awaited release's
//!   sends leaves nothing behind once the network is back.
//!
//! # Errors
//!
//! One enum, [`Error`], `#[non_exhaustive]`:
//!
//! - `Redis`: Redis refused the command or could not be reached.
//!   [`Error::is_connection_error`] says whether retrying may help.
//! - `NotHeld`: Redis says the owner holds nothing: a release by a non-owner,
//!   a guard whose hold was deleted behind its back (force unlock, restart),
//!   or `Lock::unlock` (no guard) after the lease ran out.
//! - `LeaseLost`: the guard's lease had run out by its clock: known before a
//!   call, so nothing was sent, or by the time Redis answered a release that
//!   found the hold gone (it ran out on the way). A guard's clock never runs
//!   ahead of the server's, so a lease that ran out is always `LeaseLost`.
//! - `InvalidArgument`: an empty or over-long name (over [`MAX_NAME_LEN`]), a
//!   zero or over-a-year lease or wait, a watchdog timeout under 30 ms, a bad
//!   owner id. Zero permits, a latch count of zero and an empty multi-lock are
//!   refused too.
//! - `WrongType`: the key holds data ferrisson did not write (another type;
//!   for a lock, a hash whose fields are no lock holds; for a semaphore or a
//!   latch, a string that is no integer). Every call refuses it, reads and
//!   deletes included, names its type, and leaves it alone.
//! - `RuntimeGone`: the runtime the client was built on has shut down.
//! - `UpgradeRefused`: a reader asked for the write lock.
//! - `NotReplicated`: replica sync is on and too few replicas acknowledged an
//!   acquire; the hold was given back.
//! - `PermitNotOut`: a permit of a permit-expirable semaphore that expired or
//!   was released already.
//! - `Blocking`: the blocking API could not start its runtime or a thread.
//! - `UnexpectedReply`: a script replied something its contract does not allow.
//!
//! Not getting the lock within a wait is `Ok(None)` (`false` for semaphores and
//! latches), not an error. Nothing panics on any input.
//!
//! # Guarantees
//!
//! What ferrisson promises, and where each promise ends. The fault suite checks
//! them against real servers, real processes and a real network proxy; its
//! figures are in `docs/faults.md` in the repository.
//!
//! **Leases run on Redis's clock.** A hold lasts until it is released, or until
//! its lease runs out on the server. In watchdog mode the lease is the watchdog
//! timeout (30 s by default), renewed every third of it while a guard lives. A
//! crashed process's lock is free at most one watchdog timeout after its last
//! renewal, and not before its TTL runs out.
//!
//! **What the watchdog promises.**
//!
//! - A renewal never recreates a lock that is gone.
//! - When a renewal finds the lock gone (it expired during a stall, it was
//!   force-unlocked, Redis restarted), every guard on it sees `lease_lost()`
//!   resolve, and a warning is logged.
//! - When Redis cannot be reached, renewals are retried until the lease would
//!   run out, less a margin (a tenth of the timeout, at most 1 s), counted from
//!   the send of the last renewal Redis confirmed. So the holder is told before
//!   the server can let the key expire.
//! - Every lease also has a deadline by the local clock: a leased hold's runs
//!   from the send of its acquire, a watchdog hold's from the send of its last
//!   confirmed renewal (the timeout less the margin).
//!   [`LockGuard::is_lease_lost`] checks it. A holder that wakes from a pause
//!   learns that its lease is gone before any other code of it runs, without
//!   waiting for the watchdog task. Its `unlock()` then fails with `LeaseLost`
//!   and sends nothing, so a new holder's hold is untouched.
//! - An acquire whose reply comes after its first renewal was due (a paused
//!   server, high latency) is confirmed with a renewal before its guard is
//!   handed out.
//! - A leased hold has no watchdog. Its `lease_lost()` resolves when the lease
//!   runs out by the local clock.
//!
//! **What no lock can promise.**
//!
//! - A pause longer than the lease, inside the holder. A frozen process
//!   (SIGSTOP, swapping, a long blocking call on the runtime) cannot stop when
//!   its lease runs out, and another holder may start before it wakes. The
//!   measures above only make it notice first thing on waking. Code that
//!   checked its guard, then froze, then writes, writes late.
//! - A clock that jumps. The client's deadline runs on its own clock. The
//!   margin covers a drift of a tenth of the timeout between the client's and
//!   the server's clocks over one lease, not a jump.
//! - When a resource must never accept a stale holder's write, a lock is not
//!   enough: use fencing tokens ([`Client::fenced_lock`]).
//!
//! **Failover and fencing.**
//!
//! - Redis replication is asynchronous. A lock written to a master that fails
//!   before replicating it is lost on the promoted replica, and two holders can
//!   exist. Replica sync (WAIT, see [Deployments](#deployments)) narrows that
//!   window. It does not close it.
//! - Fencing closes the gap where the resource can check. Pass `guard.token()`
//!   with every write, and have the resource refuse a token lower than the
//!   highest it has seen. A late writer (a frozen holder; a holder whose lock
//!   was lost on failover before the counter was) is then refused instead of
//!   overwriting the next holder's work.
//! - The token counter is replicated like the lock, so a failover that loses
//!   writes can hand the same token out twice.
//!
//! **Waiting.**
//!
//! - A lost wake-up message (a reconnect at the wrong moment) costs at most the
//!   lock's remaining TTL, or, on a permit-expirable semaphore with leased
//!   permits out, the time until the first lease ends: each wait is bounded by
//!   it. A semaphore or latch waiter with no such bound looks again every third
//!   of the watchdog timeout.
//! - A waiter already waiting rides out connection failures (refused, dropped,
//!   no node for the slot, a demoted master's READONLY) and tries again.
//! - A fair-lock waiter that gives up while the server is unreachable has its
//!   leave resent in the background until it gets through, so the line behind
//!   it does not wait out the waiter timeout.
//!
//! **Connection errors and resent calls.**
//!
//! - A call that fails with a connection error can be retried once the
//!   connection is back. Both connections reopen by themselves.
//! - A call on a server that is down fails after one reconnect attempt (about
//!   the connection timeout), not after the connection manager's default
//!   backoff of about 9 s.
//! - Releases are resent safely (the unlock latch), and so are acquires (the
//!   acquire latch, see [Cancel safety](#cancel-safety)): a lost reply neither
//!   takes a second hold nor leaves one behind.
//! - A give-back, or a dropped guard's release, caught in a network cut gets
//!   through once the network is back, as long as the hold may still stand
//!   (see [Time limits](#time-limits)): the hold is not left to its lease's end.
//! - One case escapes the acquire latch. If a granted hold is deleted behind
//!   its owner's back (a force unlock, or a release that shortened the key's
//!   TTL), and the same owner takes the lock again before the latch expires,
//!   settling the old request gives back that newer hold.
//!
//! **Semaphores and the latch.**
//!
//! - A semaphore's permits are not owner-bound and have no lease: a holder
//!   that dies keeps its permits forever. Use the permit-expirable semaphore,
//!   whose permits come back at most one lease later, by the server's clock.
//! - Permits in use never exceed the permits set, and ferrisson's acquires
//!   never take the count below zero. Taking permits away
//!   ([`Semaphore::add_permits`] with a negative number, Redisson's
//!   `addPermits(-n)`) may; acquires then wait until releases bring it back.
//! - Acquires are cancel safe (permits taken by a dropped call are given back)
//!   and safe against lost replies, as the locks' are: a take whose reply is
//!   lost is resent under the same request id and takes its permits once, and
//!   the permits taken by a request whose every reply was lost are given back
//!   in the background. A lost reply never takes permits twice nor leaves
//!   them taken.
//! - A release or a count-down whose reply is lost is not resent: it is not
//!   idempotent, and the error says the connection failed. The give-back of
//!   permits an acquire took for a caller that never got them is the
//!   exception: it carries its own latch, and is resent until it gets through
//!   (for up to an hour).
//!
//! **Multi-lock and RedLock.**
//!
//! - A multi-lock is as safe as each of its locks, and adds no deadlock.
//! - RedLock is safe only under timing assumptions (see [`RedLock`]). It
//!   survives the loss of a minority of its servers.
//! - After an acquire of either returns without a guard (`None` or an error),
//!   it holds nothing: the locks it took were released, all at once, before it
//!   returned, and a RedLock round first waits for its attempts still in flight
//!   (each within its bound) to release what they took. The exceptions: an
//!   attempt whose server had not answered within that bound, and, with a
//!   wait, an attempt or a release a server had not answered by the end of the
//!   wait plus its margin (see [Time limits](#time-limits)). Those are given
//!   back or released in the background, resent until they get through or the
//!   lease has surely ended.
//! - A guard's release goes to every server at once, so a silent server holds
//!   up no other release.
//!
//! **Clocks in a fleet shared with Redisson.** Two objects keep times as epoch
//! milliseconds in Redis: the fair lock's queue deadlines and the
//! permit-expirable semaphore's leases. ferrisson's scripts read the Redis
//! server's clock (`TIME`). Redisson computes those times on each Java client's
//! own clock and passes them in. When Java and Rust clients share such an
//! object, a JVM whose clock runs ahead takes permits back (or skips fair
//! waiters) early: with 5 s of skew, a one-permit semaphore was seen with two
//! holders. Keep every client host on NTP, with skew well under a lease (or
//! under the fair lock's waiter timeout), or keep fair locks and
//! permit-expirable semaphores to one language. The other objects (locks,
//! read-write locks, semaphores, the latch) use only TTLs, which the server
//! keeps, and are not affected.
//!
//! # Deployments
//!
//! One server, with ACL users, TLS and replica sync: [`ClientBuilder`]. A
//! Redis Cluster: [`Client::cluster_builder`] (feature `cluster`). Redis
//! Sentinel: [`Client::sentinel_builder`] (feature `sentinel`). Each says
//! how it is set up, with an example, and what differs there.
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
//! sides must use the same pub/sub mode (see [Redis Cluster](#redis-cluster)),
//! and in a mixed fleet mind the clocks (see [Guarantees](#guarantees)).
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
//!
//! None is on by default.

// The docs link the blocking API, which a build without its feature lacks
// (docs.rs builds with every feature).
#![cfg_attr(not(feature = "blocking"), allow(rustdoc::broken_intra_doc_links))]

// The synchronizers.
mod count_down_latch;
mod distributed;
mod group;
mod lock;
mod semaphore;

pub use count_down_latch::CountDownLatch;
pub use distributed::DistributedLock;
pub use group::multilock::{MultiLock, MultiLockGuard};
pub use group::redlock::{RedLock, RedLockGuard};
pub use lock::{
    FairLock, FencedGuard, FencedLock, Lock, LockGuard, LockHolder, LockInfo, LockMode,
    NonReentrantFairLock, NonReentrantLock, QueuedWaiter, ReadLock, ReadWriteLock, SpinLock,
    WriteLock, DEFAULT_FAIR_WAITER_TIMEOUT,
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
pub use config::ACL_RULES;
pub use config::MAX_NAME_LEN;
pub use engine::backoff::Backoff;
pub use error::{Error, Result};

/// README.md's examples, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
