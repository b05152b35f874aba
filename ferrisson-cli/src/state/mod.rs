//! What a key is (found from Redis: its type and its companion keys) and
//! what it holds, as one [`State`] that prints as text or as JSON.

use std::fmt::Write as _;

/// How many of one reader's holds have their expiries read.
const MAX_READ_HOLDS_SHOWN: u32 = 100;

use redis::AsyncCommands;
use serde::Serialize;

mod show;

use crate::conn::Target;
use crate::layout;
use crate::Fail;

/// The kinds of synchronizer the inspector knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum Kind {
    /// A reentrant lock (also a spin or non-reentrant lock: same layout).
    Lock,
    /// A fair lock: a lock with a queue of waiters.
    FairLock,
    /// A read-write lock.
    ReadWriteLock,
    /// A lock with a fencing token.
    FencedLock,
    /// A leader election: a fenced lock whose holder campaigned.
    LeaderElection,
    /// A semaphore.
    Semaphore,
    /// A semaphore whose permits have leases.
    PermitExpirableSemaphore,
    /// A count-down latch.
    CountDownLatch,
}

impl Kind {
    pub(crate) fn label(self) -> &'static str {
        match self {
            Kind::Lock => "lock",
            Kind::FairLock => "fair lock",
            Kind::ReadWriteLock => "read-write lock",
            Kind::FencedLock => "fenced lock",
            Kind::LeaderElection => "leader election",
            Kind::Semaphore => "semaphore",
            Kind::PermitExpirableSemaphore => "permit-expirable semaphore",
            Kind::CountDownLatch => "count-down latch",
        }
    }

    pub(crate) fn is_lock(self) -> bool {
        matches!(
            self,
            Kind::Lock
                | Kind::FairLock
                | Kind::ReadWriteLock
                | Kind::FencedLock
                | Kind::LeaderElection
        )
    }
}

/// What `detect` found at a name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Found {
    /// No key and no companion key: a free lock, or nothing at all.
    Nothing,
    /// A synchronizer; `also` is another kind the same data could be (a
    /// number is a semaphore or a latch).
    Object { kind: Kind, also: Option<Kind> },
    /// A key of some other use; the text says what it is.
    Other(String),
}

/// Finds what `name` is from its type and its companion keys.
pub(crate) async fn detect(target: &Target, name: &str) -> Result<Found, Fail> {
    let mut conn = target.raw.clone();
    let kind: String = redis::cmd("TYPE").arg(name).query_async(&mut conn).await?;
    let exists = |key: String| {
        let mut conn = target.raw.clone();
        async move { conn.exists::<_, bool>(key).await }
    };
    let object = |kind| Found::Object { kind, also: None };
    if layout::is_companion(name) && kind != "none" {
        // A queue, a token, a timeout set: part of another object.
        return Ok(Found::Other(format!("a {kind}")));
    }
    match kind.as_str() {
        "hash" => {
            let fields: Vec<(String, String)> = conn.hgetall(name).await?;
            let mut mode = false;
            for (field, value) in &fields {
                if field == "mode" {
                    mode = true;
                } else if !layout::is_lock_hold(field, value) {
                    return Ok(Found::Other(format!(
                        "a hash whose field `{field}` = `{value}` is no lock hold"
                    )));
                }
            }
            if mode {
                Ok(object(Kind::ReadWriteLock))
            } else if exists(layout::fair_queue(name)).await?
                || exists(layout::fair_timeouts(name)).await?
            {
                Ok(object(Kind::FairLock))
            } else if exists(layout::fencing_token(name)).await? {
                let campaigned = fields.iter().any(|(field, _)| {
                    field
                        .split_once(':')
                        .and_then(|(_, owner)| layout::campaign_label(owner))
                        .is_some()
                });
                if campaigned || observed(target, name).await {
                    Ok(object(Kind::LeaderElection))
                } else {
                    Ok(object(Kind::FencedLock))
                }
            } else {
                Ok(object(Kind::Lock))
            }
        }
        "string" => {
            let value: String = conn.get(name).await?;
            if !layout::is_count(&value) {
                return Ok(Found::Other(format!(
                    "a string that is no count of permits (`{}`)",
                    value.chars().take(40).collect::<String>()
                )));
            }
            if exists(layout::permit_timeouts(name)).await? {
                return Ok(object(Kind::PermitExpirableSemaphore));
            }
            // A semaphore and a latch are both a number: their listeners
            // tell them apart when there are any.
            let latch = subscribers(target, &[layout::latch_channel(name)]).await;
            let semaphore = subscribers(target, &[layout::semaphore_channel(name)]).await;
            if latch > 0 && semaphore == 0 {
                Ok(Found::Object {
                    kind: Kind::CountDownLatch,
                    also: Some(Kind::Semaphore),
                })
            } else {
                Ok(Found::Object {
                    kind: Kind::Semaphore,
                    also: Some(Kind::CountDownLatch),
                })
            }
        }
        "none" => {
            if exists(layout::fencing_token(name)).await? {
                // A free election keeps only its counter, as a fenced lock
                // does: its observers tell it apart.
                if observed(target, name).await {
                    Ok(object(Kind::LeaderElection))
                } else {
                    Ok(object(Kind::FencedLock))
                }
            } else if exists(layout::fair_queue(name)).await? {
                Ok(object(Kind::FairLock))
            } else if exists(layout::permit_timeouts(name)).await? {
                Ok(object(Kind::PermitExpirableSemaphore))
            } else {
                Ok(Found::Nothing)
            }
        }
        other => Ok(Found::Other(format!("a {other}"))),
    }
}

/// Whether a leader election's observers listen on its channel.
async fn observed(target: &Target, name: &str) -> bool {
    subscribers(target, &[layout::election_channel(name)]).await > 0
}

/// How many connections listen on `channels` (classic and sharded pub/sub).
pub(crate) async fn subscribers(target: &Target, channels: &[String]) -> u64 {
    let mut total = 0;
    for command in ["NUMSUB", "SHARDNUMSUB"] {
        let mut conn = target.raw.clone();
        let mut cmd = redis::cmd("PUBSUB");
        cmd.arg(command).arg(channels);
        // SHARDNUMSUB is Redis 7's: older servers refuse it, and count 0.
        if let Ok(counts) = cmd.query_async::<Vec<(String, u64)>>(&mut conn).await {
            total += counts.iter().map(|(_, n)| n).sum::<u64>();
        }
    }
    total
}

/// One holder of a lock.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub(crate) struct Holder {
    pub(crate) client_id: String,
    pub(crate) owner_id: String,
    /// The label of a holder whose owner id is `<label>~<32 hex>`: a
    /// leader's campaign, a job's run (`ferrisson run --label`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) label: Option<String>,
    pub(crate) holds: u32,
    /// Write holds of a read-write lock.
    pub(crate) write: bool,
    /// A read-write lock's read holds: each one's TTL in ms, oldest first
    /// (`null` when its timeout key is gone).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) read_hold_ttls_ms: Option<Vec<Option<u64>>>,
}

/// One waiter in a fair lock's queue.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub(crate) struct Waiter {
    pub(crate) position: usize,
    pub(crate) client_id: String,
    pub(crate) owner_id: String,
    /// Until the others skip it as dead, in ms.
    pub(crate) timeout_ms: Option<u64>,
}

/// One permit out of a permit-expirable semaphore.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub(crate) struct PermitOut {
    /// The permit id, 32 hex digits.
    pub(crate) id: String,
    /// Until its lease ends, in ms (0: ended, reclaimed by the next call);
    /// `None` (JSON `null`) for a permit without a lease.
    pub(crate) expires_in_ms: Option<u64>,
}

/// Who leads a leader election.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub(crate) struct LeaderView {
    /// The label it campaigned with; `None` for a holder that did not
    /// campaign (a Redisson `RFencedLock`).
    pub(crate) label: Option<String>,
    /// Its term: the lock's token.
    pub(crate) term: Option<u64>,
    pub(crate) client_id: String,
    pub(crate) owner_id: String,
}

/// What one object holds, read from Redis.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub(crate) struct State {
    pub(crate) name: String,
    /// `None` when there is no key at the name.
    pub(crate) kind: Option<Kind>,
    /// Another kind the same data could be (a number is a semaphore or a
    /// latch alike).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) could_also_be: Option<Kind>,
    /// The key's TTL in ms; `None` without a key or without a TTL.
    pub(crate) ttl_ms: Option<u64>,
    pub(crate) holders: Vec<Holder>,
    /// A read-write lock's mode, `read` or `write`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) mode: Option<&'static str>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) queue: Vec<Waiter>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) fencing_token: Option<u64>,
    /// A leader election's leader; `None` when nobody leads (and for the
    /// other kinds).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) leader: Option<LeaderView>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) permits_available: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) permits_out: Option<Vec<PermitOut>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) count: Option<i64>,
    /// Connections subscribed to the object's channel(s).
    pub(crate) subscribers: u64,
}

impl State {
    fn empty(name: &str, kind: Option<Kind>) -> State {
        State {
            name: name.to_owned(),
            kind,
            could_also_be: None,
            ttl_ms: None,
            holders: Vec::new(),
            mode: None,
            queue: Vec::new(),
            fencing_token: None,
            leader: None,
            permits_available: None,
            permits_out: None,
            count: None,
            subscribers: 0,
        }
    }
}

/// Finds what `name` is (unless `forced`) and reads its state; a key of
/// another use is an error that says what the key is.
pub(crate) async fn inspect(
    target: &Target,
    name: &str,
    forced: Option<Kind>,
) -> Result<State, Fail> {
    inspect_remembering(target, name, forced, None).await
}

/// As [`inspect`], where a name without any key reads as a free object of
/// the kind `remembered` (one seen before), when there is one.
pub(crate) async fn inspect_remembering(
    target: &Target,
    name: &str,
    forced: Option<Kind>,
    remembered: Option<Kind>,
) -> Result<State, Fail> {
    let (kind, also) = match (detect(target, name).await?, forced) {
        (Found::Nothing, asked) => match asked.or(remembered) {
            None => return Ok(State::empty(name, None)),
            Some(kind) => (kind, None),
        },
        // Not asked: the kind seen before while the data allows it (a fair
        // lock whose line emptied is still one), else what is found now.
        (Found::Object { kind, also }, None) => match remembered {
            // An election shows itself once a candidate leads: it is no
            // longer read as the fenced lock it looked like while free.
            Some(seen)
                if seen != kind
                    && kind != Kind::LeaderElection
                    && may_read_as(kind, also, seen) =>
            {
                (seen, None)
            }
            _ => (kind, also),
        },
        (Found::Object { kind, also }, Some(asked)) => {
            if !may_read_as(kind, also, asked) {
                return Err(Fail(format!(
                    "`{name}` is a {}, not a {}: --kind only chooses between kinds its data \
                     cannot tell apart (a number: a semaphore, a latch or a permit-expirable \
                     semaphore with no permit out; a plain lock or a fair or fenced lock with \
                     nobody waiting and no token)",
                    kind.label(),
                    asked.label()
                )));
            }
            (asked, None)
        }
        (Found::Other(what), _) => {
            let helper = if layout::is_companion(name) {
                " (a helper key beside a synchronizer: inspect the object's own name)"
            } else {
                ""
            };
            return Err(Fail(format!(
                "`{name}` is not a synchronizer: the key holds {what}{helper}"
            )));
        }
    };
    let mut state = read(target, name, kind).await?;
    state.could_also_be = also;
    Ok(state)
}

/// The kind a watch goes on reading as: the first one known, except that a
/// fenced lock turns out to be a leader election once a candidate leads.
pub(crate) fn refined(watched: Option<Kind>, now: Option<Kind>) -> Option<Kind> {
    match (watched, now) {
        (Some(Kind::FencedLock), Some(Kind::LeaderElection)) => now,
        _ => watched.or(now),
    }
}

/// Whether data found to be a `found` (or its look-alike `also`) may be
/// read as the kind `asked`: the same kind, its look-alike, a plain lock's
/// hash as a fair or fenced lock (alike when nobody waits and no token was
/// drawn), or a number as a permit-expirable semaphore with no permit out.
fn may_read_as(found: Kind, also: Option<Kind>, asked: Kind) -> bool {
    let plain_or_extra = |kind| {
        matches!(
            kind,
            Kind::Lock | Kind::FairLock | Kind::FencedLock | Kind::LeaderElection
        )
    };
    let fenced = |kind| matches!(kind, Kind::FencedLock | Kind::LeaderElection);
    found == asked
        || also == Some(asked)
        || (found == Kind::Lock && plain_or_extra(asked))
        || (fenced(found) && fenced(asked))
        || (asked == Kind::PermitExpirableSemaphore
            && (found == Kind::Semaphore || also == Some(Kind::Semaphore)))
}

/// Reads the state of `name` as a `kind`.
pub(crate) async fn read(target: &Target, name: &str, kind: Kind) -> Result<State, Fail> {
    let mut state = State::empty(name, Some(kind));
    let mut conn = target.raw.clone();
    let client = &target.client;
    let mut channels = Vec::new();
    if kind.is_lock() {
        let info = match kind {
            Kind::FairLock => client.fair_lock(name).info().await,
            Kind::FencedLock | Kind::LeaderElection => client.fenced_lock(name).info().await,
            Kind::ReadWriteLock => client.read_write_lock(name).read().info().await,
            _ => client.lock(name).info().await,
        }
        .map_err(|e| Fail::from_lib(e, name))?;
        state.ttl_ms = info.ttl.map(|ttl| ttl.as_millis() as u64);
        state.mode = info.mode.map(|mode| match mode {
            ferrisson::LockMode::Read => "read",
            ferrisson::LockMode::Write => "write",
        });
        state.fencing_token = info.token;
        if kind == Kind::LeaderElection {
            state.leader = info.holders.first().map(|holder| LeaderView {
                label: layout::campaign_label(&holder.owner_id).map(str::to_owned),
                term: info.token,
                client_id: holder.client_id.clone(),
                owner_id: holder.owner_id.clone(),
            });
            channels.push(layout::election_channel(name));
        }
        for holder in info.holders {
            let mut read_hold_ttls_ms = None;
            if kind == Kind::ReadWriteLock && !holder.write {
                let field = format!("{}:{}", holder.client_id, holder.owner_id);
                let mut ttls = Vec::new();
                // A read hold count is small; a corrupt one is not read
                // key by key past the first hundred.
                for n in 1..=holder.holds.min(MAX_READ_HOLDS_SHOWN) {
                    let pttl: i64 = conn.pttl(layout::read_hold_key(name, &field, n)).await?;
                    ttls.push(u64::try_from(pttl).ok());
                }
                read_hold_ttls_ms = Some(ttls);
            }
            state.holders.push(Holder {
                label: layout::campaign_label(&holder.owner_id).map(str::to_owned),
                client_id: holder.client_id,
                owner_id: holder.owner_id,
                holds: holder.holds,
                write: holder.write,
                read_hold_ttls_ms,
            });
        }
        for waiter in info.queue {
            channels.push(format!(
                "{}:{}:{}",
                layout::lock_channel(name),
                waiter.client_id,
                waiter.owner_id
            ));
            state.queue.push(Waiter {
                position: waiter.position,
                client_id: waiter.client_id,
                owner_id: waiter.owner_id,
                timeout_ms: waiter.timeout.map(|t| t.as_millis() as u64),
            });
        }
        channels.push(match kind {
            Kind::ReadWriteLock => layout::rwlock_channel(name),
            _ => layout::lock_channel(name),
        });
    } else {
        // Plain reads: the library's calls on a permit-expirable semaphore
        // reclaim expired permits first, and an inspector changes nothing.
        let value: Option<i64> = conn.get(name).await?;
        let pttl: i64 = conn.pttl(name).await?;
        state.ttl_ms = u64::try_from(pttl).ok();
        match kind {
            Kind::CountDownLatch => {
                state.count = Some(value.unwrap_or(0));
                channels.push(layout::latch_channel(name));
            }
            _ => {
                state.permits_available = Some(value.unwrap_or(0));
                channels.push(layout::semaphore_channel(name));
            }
        }
        if kind == Kind::PermitExpirableSemaphore {
            let now = server_ms(target).await?;
            let permits: Vec<(Vec<u8>, f64)> = redis::cmd("ZRANGE")
                .arg(layout::permit_timeouts(name))
                .arg(0)
                .arg(-1)
                .arg("WITHSCORES")
                .query_async(&mut conn)
                .await?;
            state.permits_out = Some(
                permits
                    .into_iter()
                    .map(|(id, at)| PermitOut {
                        id: id.iter().fold(String::new(), |mut hex, b| {
                            let _ = write!(hex, "{b:02x}");
                            hex
                        }),
                        expires_in_ms: (at < layout::PERMIT_NO_EXPIRY as f64)
                            .then(|| (at as i64).saturating_sub(now).max(0) as u64),
                    })
                    .collect(),
            );
        }
    }
    state.subscribers = subscribers(target, &channels).await;
    Ok(state)
}

/// The server's clock, in epoch ms.
async fn server_ms(target: &Target) -> Result<i64, Fail> {
    let mut conn = target.raw.clone();
    let (secs, micros): (i64, i64) = redis::cmd("TIME").query_async(&mut conn).await?;
    Ok(secs * 1000 + micros / 1000)
}
