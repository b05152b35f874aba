//! What a lock holds right now: `info()` on every lock kind.

use std::time::Duration;

use super::LockCore;
use crate::engine::keys;
use crate::engine::scripts::LOCK_INFO;
use crate::{Error, Result};

/// What a lock holds, read in one call by `info()` (on every lock type):
/// its holders, its TTL, and what only some kinds have (a read-write
/// lock's mode, a fair lock's queue, a fenced lock's token).
///
/// It reads Redisson's layout, so it shows locks taken by Redisson clients
/// too (their owner id is the Java thread id). It is a snapshot: the lock
/// may change as soon as it is read.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct LockInfo {
    /// Who holds the lock, and how many holds each has; empty when it is
    /// free. A read-write lock lists its readers (and its writer, whose
    /// read holds, if any, come as a second entry).
    pub holders: Vec<Holder>,
    /// How long until the lock expires; `None` when it is free.
    pub ttl: Option<Duration>,
    /// A read-write lock's mode; `None` when it is free, and for the other
    /// kinds.
    pub mode: Option<LockMode>,
    /// A fair lock's waiters in line, first in line first; empty for the
    /// other kinds.
    pub queue: Vec<QueuedWaiter>,
    /// A fenced lock's current token (the last one drawn); `None` for the
    /// other kinds, or when none was ever drawn.
    pub token: Option<u64>,
}

/// Who holds a lock: one of [`LockInfo::holders`], the leader of an
/// election ([`LeaderElection::leader`](crate::LeaderElection::leader),
/// [`LeaderChange::Leader`](crate::LeaderChange::Leader)), the runner that
/// holds a job ([`JobRun::Skipped`](crate::JobRun::Skipped)).
///
/// Two are equal when they are the same holder in the same state (ids,
/// label, holds, write, term): the [`ttl`](Holder::ttl), which runs down
/// between two reads of one hold, is not compared.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Holder {
    /// The holding client's id ([`Client::id`](crate::Client::id), or a
    /// Redisson client's UUID).
    pub client_id: String,
    /// The owner within that client: `task-<id>`, `thread-<n>`, the id
    /// given to `with_owner`, `<label>~<id>` for a leader's campaign or a
    /// job's run, or a Redisson client's thread id.
    pub owner_id: String,
    /// The label a leader campaigned with ([`LeaderElection::campaign`](crate::LeaderElection::campaign))
    /// or a job's runner runs with ([`Job::label`](crate::Job::label)),
    /// read from the owner id; `None` for any other holder (a plain lock's,
    /// a Redisson client's).
    pub label: Option<String>,
    /// How many holds it has (re-entries count).
    pub holds: u32,
    /// Whether these are write holds of a read-write lock.
    pub write: bool,
    /// A fenced lock's current token, the one its latest acquire drew,
    /// as [`LockInfo::token`]: a leader's term. For a holder of the name
    /// as a plain lock (a Redisson `RLock`), which draws none, the last
    /// token drawn before it; `None` for the other kinds, or when none was
    /// drawn (or Redis lost the counter since).
    pub term: Option<u64>,
    /// How long the lock lives unless renewed, as [`LockInfo::ttl`] (a
    /// read lock's holders share its hash's); `None` without a TTL.
    pub ttl: Option<Duration>,
}

impl PartialEq for Holder {
    fn eq(&self, other: &Holder) -> bool {
        let Holder {
            client_id,
            owner_id,
            label,
            holds,
            write,
            term,
            ttl: _,
        } = self;
        (client_id, owner_id, label, holds, write, term)
            == (
                &other.client_id,
                &other.owner_id,
                &other.label,
                &other.holds,
                &other.write,
                &other.term,
            )
    }
}

impl Eq for Holder {}

/// A read-write lock's mode, in [`LockInfo::mode`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LockMode {
    /// Held by readers (and perhaps a writer's own read holds).
    Read,
    /// Held by a writer.
    Write,
}

/// One waiter in a fair lock's line, in [`LockInfo::queue`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct QueuedWaiter {
    /// The waiting client's id.
    pub client_id: String,
    /// The owner within that client.
    pub owner_id: String,
    /// Its place in line, 0 for the first.
    pub position: usize,
    /// How long until the others skip it as dead unless it shows itself
    /// again (by the server's clock); `None` when its entry has no
    /// deadline.
    pub timeout: Option<Duration>,
}

/// Splits an owner field, `<client-id>:<owner-id>`, at its first colon (a
/// client id is a UUID, which has none).
fn split_field(field: &str) -> (String, String) {
    match field.split_once(':') {
        Some((client, owner)) => (client.to_owned(), owner.to_owned()),
        None => (field.to_owned(), String::new()),
    }
}

/// What `lock_info.lua` replies: hash, PTTL, queue, scores, now, token.
pub(super) type Reply = (Vec<String>, i64, Vec<String>, Vec<String>, i64, i64);

/// What `lock_info.lua` reads besides the lock's hash.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Extra {
    /// Nothing more.
    Plain,
    /// A fair lock's queue and waiter deadlines.
    Queue,
    /// A fenced lock's token counter.
    Token,
}

impl LockCore {
    /// Reads the lock with `lock_info.lua`, and `extra`: every read of a
    /// lock goes through it, so that each one refuses a key that is no
    /// lock hash ([`Error::WrongType`]) rather than answer about it.
    pub(super) async fn read_lock(&self, extra: Extra) -> Result<Reply> {
        self.obj.checked()?;
        let name = self.obj.name();
        let mut call = LOCK_INFO.prepare_invoke();
        call.key(name);
        match extra {
            Extra::Queue => {
                call.key(keys::fair_queue(name))
                    .key(keys::fair_timeouts(name))
                    .arg("fair");
            }
            Extra::Token => {
                call.key(keys::fencing_token(name)).arg("fenced");
            }
            Extra::Plain => {
                call.arg("plain");
            }
        }
        let mut conn = self.obj.conn();
        call.invoke_async(&mut conn)
            .await
            .map_err(|e| self.error(e))
    }

    /// The error for a lock hash with a field that is no lock hold, which
    /// the script's look (one HSCAN page) did not reach.
    pub(super) fn not_a_lock_hash(&self) -> Error {
        Error::WrongType {
            name: self.obj.name().to_string(),
            key_type: "hash".into(),
            expected: self.obj.expected(),
        }
    }

    /// What the lock holds now, read in one call.
    pub(crate) async fn info(&self) -> Result<LockInfo> {
        let (hash, pttl, queue, scores, now, token) = self.read_lock(self.kind.extra()).await?;
        let mut info = LockInfo {
            ttl: (pttl > 0).then(|| Duration::from_millis(pttl as u64)),
            token: u64::try_from(token).ok(),
            ..LockInfo::default()
        };
        for pair in hash.chunks_exact(2) {
            let (field, value) = (&pair[0], &pair[1]);
            if field == "mode" {
                info.mode = match value.as_str() {
                    "read" => Some(LockMode::Read),
                    "write" => Some(LockMode::Write),
                    _ => None,
                };
                continue;
            }
            if !keys::is_lock_hold(field, value) {
                return Err(self.not_a_lock_hash());
            }
            let holds = value.parse().map_err(|_| Error::UnexpectedReply {
                script: "lock_info",
                reply: format!("hold count {value:?} of {field:?}"),
            })?;
            let (field, write) = match field.strip_suffix(":write") {
                Some(owner) if self.kind.mode().is_some() => (owner, true),
                _ => (field.as_str(), false),
            };
            let (client_id, owner_id) = split_field(field);
            info.holders.push(Holder {
                label: keys::campaign_label(&owner_id).map(str::to_owned),
                client_id,
                owner_id,
                holds,
                write,
                term: info.token,
                ttl: info.ttl,
            });
        }
        let deadlines: std::collections::HashMap<&str, f64> = scores
            .chunks_exact(2)
            .filter_map(|pair| Some((pair[0].as_str(), pair[1].parse().ok()?)))
            .collect();
        for (position, field) in queue.iter().enumerate() {
            let (client_id, owner_id) = split_field(field);
            let timeout = deadlines
                .get(field.as_str())
                .map(|&at| Duration::from_millis((at as i64).saturating_sub(now).max(0) as u64));
            info.queue.push(QueuedWaiter {
                client_id,
                owner_id,
                position,
                timeout,
            });
        }
        Ok(info)
    }

    /// Whether `owner` of this client holds the lock.
    pub(crate) async fn is_held_by(&self, owner: &str) -> Result<bool> {
        self.with_owner(owner).is_held_by_current_task().await
    }

    /// A fenced lock's current token, read from its counter (with the
    /// lock's hash, so that a key of another type is refused here too).
    pub(crate) async fn current_token(&self) -> Result<Option<u64>> {
        let (.., token) = self.read_lock(Extra::Token).await?;
        Ok(u64::try_from(token).ok())
    }
}
