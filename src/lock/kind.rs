//! Every difference between the kinds of lock: the scripts each sends and
//! how it reads their replies, its hash field, channel and unlock message,
//! its renewal, its wait and what its reads show. The rest of `lock/` asks
//! `Kind` and never matches on it, so a new kind makes the compiler list
//! here each place to decide.

use std::time::Duration;

use redis::{RedisResult, ScriptInvocation, Value};

use super::info::Extra;
use super::queue::Queue;
use crate::engine::keys;
use crate::engine::request::{late, LATE};
use crate::engine::scripts::{
    ACQUIRE, FAIR_ACQUIRE, FAIR_FORCE_UNLOCK, FAIR_RELEASE, FENCED_ACQUIRE, FORCE_UNLOCK,
    READ_ACQUIRE, READ_RELEASE, RELEASE, UNLOCK_MESSAGE, WAKE_ALL_MESSAGE, WRITE_ACQUIRE,
    WRITE_RELEASE,
};
use crate::engine::watchdog::Renewal;
use crate::Backoff;

/// One acquire request, as every kind's script takes it.
pub(super) struct AcquireArgs<'a> {
    pub(super) name: &'a str,
    /// The owner's hash field.
    pub(super) field: &'a str,
    /// The request's acquire latch, which makes its resends safe.
    pub(super) latch: &'a str,
    /// The TTL a grant sets, in ms.
    pub(super) ttl_ms: u64,
    /// How long the latch lives, in ms.
    pub(super) latch_ttl: u64,
    /// Whether the attempt joins a fair lock's queue, and for how long.
    pub(super) queue: Queue,
    /// When the send's caller gives up on its reply, in epoch ms by the
    /// server's clock: the script takes nothing after it.
    pub(super) deadline: u64,
}

/// A job's occurrence that the release of its run's hold marks done, in
/// the same script call (`release.lua`'s `KEYS[4]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DoneMark {
    /// The job's last occurrence done, [`job_done`](crate::engine::keys::job_done).
    pub(crate) key: String,
    /// The occurrence the run served.
    pub(crate) occurrence: u64,
    /// How long the job remembers it, in ms.
    pub(crate) ttl_ms: u64,
}

/// One release request, as every kind's script takes it.
pub(super) struct ReleaseArgs<'a> {
    pub(super) name: &'a str,
    /// The owner's hash field.
    pub(super) field: &'a str,
    /// The request's unlock latch, which makes its resends safe.
    pub(super) latch: &'a str,
    /// The TTL left to the owner's other holds, in ms.
    pub(super) lease_ms: u64,
    /// `publish` or `spublish`.
    pub(super) publish: &'static str,
    /// How long the latch lives, in ms.
    pub(super) latch_ttl: u64,
    /// The last hold is kept this many ms (at least 1) instead of
    /// released ([`LockGuard::keep_until`](super::LockGuard::keep_until);
    /// the kinds that [`Kind::keeps`] only).
    pub(super) keep_ms: Option<u64>,
    /// A job's occurrence the last hold's release marks done (the plain
    /// kinds' script only).
    pub(super) done: Option<&'a DoneMark>,
    /// A give-back's grant: the acquire latch of the request whose hold it
    /// gives back. The script then releases only while the latch shows the
    /// grant (a master that lost the grant in a failover has no latch
    /// either), and otherwise replies nil and writes nothing.
    pub(super) grant: Option<&'a str>,
}

/// What one acquire script call replied.
pub(super) enum Granted {
    /// Held now, with the fencing token of a fenced lock.
    Yes(Option<u64>),
    /// Held by someone else, for this PTTL (ms; -1 without a TTL).
    No(i64),
    /// The request was granted by an earlier send whose reply was lost,
    /// and that hold is gone since (or the request was given up): nothing
    /// changed.
    Spent,
    /// A reply the script never gives.
    Unexpected(String),
    /// The owner reads and asked to write: it would wait for itself.
    Upgrade,
    /// The owner holds a non-reentrant lock and asked for it again.
    Reacquire,
}

/// What the acquire scripts reply to a request that takes nothing more:
/// granted before and its hold gone since, or given up.
const SPENT: i64 = -2;

/// What the write acquire script replies to a refused upgrade.
const UPGRADE: i64 = -3;

/// What the acquire scripts reply to a non-reentrant lock's holder that
/// asks again.
const REACQUIRE: i64 = -4;

/// The suffix of a write hold's field.
const WRITE_SUFFIX: &str = ":write";

/// Which lock of the family a handle is, with the settings only that kind
/// has: it picks the scripts, the hash field, the channel, the renewal and
/// the way waiters wait. Every per-kind difference is a `match` on it, so a
/// new kind makes the compiler list each place to decide.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// Redisson's `RLock` (`getNonReentrantLock` when its re-acquires are
    /// refused).
    Plain(Reentry),
    /// `getSpinLock`: `RLock`'s hash and scripts; its waiters poll with this
    /// backoff instead of subscribing.
    Spin(Backoff),
    /// `RFencedLock`: `RLock` plus a token counter.
    Fenced,
    /// The read side of `RReadWriteLock`.
    Read,
    /// The write side of `RReadWriteLock`: fields end in `:write`.
    Write,
    /// `getFairLock`: `RLock` with a queue of waiters, each woken on its own
    /// channel (`getNonReentrantFairLock` when its re-acquires are
    /// refused).
    Fair {
        /// How long a queued waiter may stay silent before the others
        /// skip it.
        waiter_timeout: Duration,
        /// What the holder's re-acquire does.
        reentry: Reentry,
    },
}

/// What a holder's acquire of a lock it holds already does: the one
/// difference between Redisson's lock and its non-reentrant lock, and
/// between its fair lock and its non-reentrant fair lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reentry {
    /// Taken again: the owner's hold count goes up.
    Counted,
    /// Refused with
    /// [`Error::NonReentrantReacquire`](crate::Error::NonReentrantReacquire).
    Refused,
}

impl Kind {
    /// Redisson's `RLock`.
    pub(crate) const REENTRANT: Kind = Kind::Plain(Reentry::Counted);
}

impl Kind {
    /// The channel this kind's waiters listen on and its releases publish
    /// to; for the fair lock, the prefix of each waiter's own channel.
    pub(crate) fn channel(self, name: &str) -> String {
        match self {
            Kind::Plain(_) | Kind::Spin(_) | Kind::Fenced | Kind::Fair { .. } => {
                keys::lock_channel(name)
            }
            Kind::Read | Kind::Write => keys::rwlock_channel(name),
        }
    }

    /// The acquire script call of this kind for `a`.
    pub(super) fn acquire(self, a: &AcquireArgs<'_>) -> ScriptInvocation<'static> {
        let reentrant = match self.reentry() {
            Reentry::Counted => "1",
            Reentry::Refused => "0",
        };
        let (name, field) = (a.name, a.field);
        match self {
            Kind::Plain(_) | Kind::Spin(_) => {
                let mut call = ACQUIRE.key(name);
                call.key(a.latch)
                    .arg(a.ttl_ms)
                    .arg(field)
                    .arg(a.latch_ttl)
                    .arg(reentrant)
                    .arg(a.deadline);
                call
            }
            Kind::Fenced => {
                let mut call = FENCED_ACQUIRE.key(name);
                call.key(keys::fencing_token(name))
                    .key(a.latch)
                    .arg(a.ttl_ms)
                    .arg(field)
                    .arg(a.latch_ttl)
                    .arg(a.deadline);
                call
            }
            Kind::Fair { .. } => {
                let mut call = FAIR_ACQUIRE.key(name);
                call.key(keys::fair_queue(name))
                    .key(keys::fair_timeouts(name))
                    .key(a.latch)
                    .arg(a.ttl_ms)
                    .arg(field)
                    .arg(a.queue.waiter_ms())
                    .arg(if a.queue == Queue::No { "0" } else { "1" })
                    .arg(a.latch_ttl)
                    .arg(reentrant)
                    .arg(a.deadline);
                call
            }
            Kind::Read => {
                let mut call = READ_ACQUIRE.key(name);
                call.key(keys::rwlock_timeout_prefix(name, field))
                    .key(a.latch)
                    .arg(a.ttl_ms)
                    .arg(field)
                    .arg(format!("{field}{WRITE_SUFFIX}"))
                    .arg(a.latch_ttl)
                    .arg(a.deadline);
                call
            }
            Kind::Write => {
                let mut call = WRITE_ACQUIRE.key(name);
                call.key(a.latch)
                    .arg(a.ttl_ms)
                    .arg(field)
                    .arg(field.strip_suffix(WRITE_SUFFIX).unwrap_or(field))
                    .arg(a.latch_ttl)
                    .arg(a.deadline);
                call
            }
        }
    }

    /// What this kind's acquire reply says.
    /// A script that ran after its send's deadline took nothing: the error
    /// of a reply that timed out ([`late`]).
    pub(super) fn granted(self, reply: Value) -> RedisResult<Granted> {
        let pttl = |reply: Option<i64>| match reply {
            Some(LATE) => Err(late()),
            None => Ok(Granted::Yes(None)),
            Some(REACQUIRE) => Ok(Granted::Reacquire),
            Some(SPENT) => Ok(Granted::Spent),
            Some(ttl) => Ok(Granted::No(ttl)),
        };
        Ok(match self {
            Kind::Fenced => match redis::from_redis_value::<Vec<i64>>(reply)?.as_slice() {
                [0, LATE] => return Err(late()),
                [1, token] if *token > 0 => Granted::Yes(Some(*token as u64)),
                [0, SPENT] => Granted::Spent,
                [0, ttl] => Granted::No(*ttl),
                other => Granted::Unexpected(format!("{other:?}")),
            },
            Kind::Write => match redis::from_redis_value::<Option<i64>>(reply)? {
                Some(UPGRADE) => Granted::Upgrade,
                other => pttl(other)?,
            },
            Kind::Plain(_) | Kind::Spin(_) | Kind::Fair { .. } | Kind::Read => {
                pttl(redis::from_redis_value(reply)?)?
            }
        })
    }

    /// The release script call of this kind for `r`.
    pub(super) fn release(self, r: &ReleaseArgs<'_>) -> ScriptInvocation<'static> {
        let (name, field) = (r.name, r.field);
        let channel = self.channel(name);
        if self == Kind::Read {
            let mut call = READ_RELEASE.key(name);
            call.key(&channel)
                .key(keys::rwlock_timeout_prefix(name, field))
                .key(keys::rwlock_key_prefix(name))
                .key(r.latch)
                .arg(UNLOCK_MESSAGE)
                .arg(field)
                .arg(r.publish)
                .arg(r.latch_ttl);
            if let Some(grant) = r.grant {
                call.key(grant);
            }
            return call;
        }
        // The others share one shape: the hash, their own keys, the
        // channel and the latch; message, lease, owner, publish, TTL.
        let script = match self {
            Kind::Fair { .. } => &*FAIR_RELEASE,
            Kind::Write => &*WRITE_RELEASE,
            Kind::Plain(_) | Kind::Spin(_) | Kind::Fenced | Kind::Read => &*RELEASE,
        };
        let mut call = script.key(name);
        if self.queues() {
            call.key(keys::fair_queue(name))
                .key(keys::fair_timeouts(name));
        }
        call.key(&channel).key(r.latch);
        if self == Kind::Write {
            // The writer's read holds, which may outlast its last write.
            call.key(keys::rwlock_key_prefix(name));
        }
        call.arg(self.unlock_message())
            .arg(r.lease_ms)
            .arg(field)
            .arg(r.publish)
            .arg(r.latch_ttl);
        if r.keep_ms.is_some() || r.done.is_some() {
            debug_assert!(
                std::ptr::eq(script, &*RELEASE),
                "only release.lua keeps a hold or marks an occurrence"
            );
            // No deadline (0), and the script's 0 for the keep: release the
            // last hold.
            call.arg(0).arg(r.keep_ms.unwrap_or(0));
        }
        if let Some(done) = r.done {
            call.key(&done.key).arg(done.occurrence).arg(done.ttl_ms);
        }
        if let Some(grant) = r.grant {
            // The last key of every release script; `release.lua` tells it
            // from a job's occurrence by the missing ARGV[8].
            debug_assert!(
                r.done.is_none(),
                "a give-back marks no job's occurrence done"
            );
            call.key(grant);
        }
        call
    }

    /// The force-unlock script call of this kind (`publish`: `publish` or
    /// `spublish`).
    pub(super) fn force_unlock(
        self,
        name: &str,
        publish: &'static str,
    ) -> ScriptInvocation<'static> {
        let mut call = if self.queues() {
            let mut call = FAIR_FORCE_UNLOCK.key(name);
            call.key(keys::fair_queue(name))
                .key(keys::fair_timeouts(name));
            call
        } else {
            FORCE_UNLOCK.key(name)
        };
        call.key(self.channel(name))
            .arg(self.unlock_message())
            .arg(publish);
        call
    }

    /// The message a release publishes: a read-write lock's wakes every
    /// waiter (readers may all go in), the others' one.
    pub(super) fn unlock_message(self) -> &'static str {
        match self {
            Kind::Read | Kind::Write => WAKE_ALL_MESSAGE,
            Kind::Plain(_) | Kind::Spin(_) | Kind::Fenced | Kind::Fair { .. } => UNLOCK_MESSAGE,
        }
    }

    /// Whether this kind's release can keep the owner's last hold for a
    /// while instead (and mark a job's occurrence done): the kinds whose
    /// release is `release.lua`.
    pub(super) fn keeps(self) -> bool {
        match self {
            Kind::Plain(_) | Kind::Spin(_) | Kind::Fenced => true,
            Kind::Fair { .. } | Kind::Read | Kind::Write => false,
        }
    }

    /// Whether waiters queue (the fair lock): each is woken on its own
    /// channel, and a release and a force-unlock also touch the queue.
    pub(super) fn queues(self) -> bool {
        match self {
            Kind::Fair { .. } => true,
            Kind::Plain(_) | Kind::Spin(_) | Kind::Fenced | Kind::Read | Kind::Write => false,
        }
    }

    /// The channel one waiter of this kind listens on: the fair lock's
    /// own per waiter, the others' shared.
    pub(super) fn waiter_channel(self, name: &str, field: &str) -> String {
        if self.queues() {
            format!("{}:{field}", self.channel(name))
        } else {
            self.channel(name)
        }
    }

    /// The end of this kind's hash fields after the owner: `:write` for a
    /// write hold.
    pub(super) fn field_suffix(self) -> &'static str {
        match self {
            Kind::Write => WRITE_SUFFIX,
            Kind::Plain(_) | Kind::Spin(_) | Kind::Fenced | Kind::Fair { .. } | Kind::Read => "",
        }
    }

    /// The owner id in one of this kind's hash fields
    /// (`<client-uuid>:<owner-id>`, a write hold's with `:write`: the UUID
    /// has no colon).
    pub(super) fn owner_id(self, field: &str) -> &str {
        let owner = field.split_once(':').map_or(field, |(_, owner)| owner);
        owner.strip_suffix(self.field_suffix()).unwrap_or(owner)
    }

    /// The read-write lock's `mode` that says this side is held; `None`
    /// for the kinds whose hash is held while it exists.
    pub(super) fn mode(self) -> Option<&'static str> {
        match self {
            Kind::Read => Some("read"),
            Kind::Write => Some("write"),
            Kind::Plain(_) | Kind::Spin(_) | Kind::Fenced | Kind::Fair { .. } => None,
        }
    }

    /// Whether the owner's holds share the hash's TTL, so that a leased
    /// acquire never sets it below another hold's lease. A read hold keeps
    /// a timeout key of its own (and the hash lives as the longest).
    pub(super) fn holds_share_ttl(self) -> bool {
        self.renewal() == Renewal::Hash
    }

    /// Whether no script lowers the hash's TTL while the owner keeps holds
    /// there: a re-entry, a renewal and a release that leaves holds only
    /// raise it (only a keep, the last release or a force-unlock lower or
    /// end it). Not the read-write lock's hash: a write release that leaves
    /// only read holds sets it to the longest of those.
    pub(super) fn ttl_only_rises(self) -> bool {
        matches!(
            self,
            Kind::Plain(_) | Kind::Spin(_) | Kind::Fenced | Kind::Fair { .. }
        )
    }

    /// What a read of this kind asks beside the hash: the fair lock's
    /// queue, the fenced lock's token.
    pub(super) fn extra(self) -> Extra {
        match self {
            Kind::Fair { .. } => Extra::Queue,
            Kind::Fenced => Extra::Token,
            Kind::Plain(_) | Kind::Spin(_) | Kind::Read | Kind::Write => Extra::Plain,
        }
    }

    /// The kind's `kind` label in metrics.
    pub(crate) fn label(self) -> &'static str {
        match self {
            Kind::Plain(Reentry::Counted) => "lock",
            Kind::Plain(Reentry::Refused) => "non_reentrant_lock",
            Kind::Spin(_) => "spin_lock",
            Kind::Fenced => "fenced_lock",
            Kind::Read => "read_lock",
            Kind::Write => "write_lock",
            Kind::Fair {
                reentry: Reentry::Counted,
                ..
            } => "fair_lock",
            Kind::Fair {
                reentry: Reentry::Refused,
                ..
            } => "non_reentrant_fair_lock",
        }
    }

    /// How the watchdog renews a hold of this kind.
    pub(crate) fn renewal(self) -> Renewal {
        match self {
            Kind::Read => Renewal::ReadHold,
            Kind::Plain(_) | Kind::Spin(_) | Kind::Fenced | Kind::Write | Kind::Fair { .. } => {
                Renewal::Hash
            }
        }
    }

    /// A spin lock's backoff; `None` for the kinds that subscribe.
    pub(crate) fn backoff(self) -> Option<Backoff> {
        match self {
            Kind::Spin(backoff) => Some(backoff),
            _ => None,
        }
    }

    /// A fair lock's waiter timeout; `None` for the kinds without a queue.
    pub(crate) fn waiter_timeout(self) -> Option<Duration> {
        match self {
            Kind::Fair { waiter_timeout, .. } => Some(waiter_timeout),
            _ => None,
        }
    }

    /// What the holder's re-acquire does: taken again (its hold count
    /// goes up) or refused.
    pub(crate) fn reentry(self) -> Reentry {
        match self {
            Kind::Plain(reentry) | Kind::Fair { reentry, .. } => reentry,
            Kind::Spin(_) | Kind::Fenced | Kind::Read | Kind::Write => Reentry::Counted,
        }
    }
}
