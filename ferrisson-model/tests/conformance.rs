//! The model cannot drift from the code: random sequences of script calls
//! (acquires, resends and late copies of them, releases, renewals,
//! settles, a hold running out) go through the model's [`Server`] and, in
//! the same order, through the real `lua/` scripts on a spawned server;
//! after each step the replies and the keys must agree. The same for the
//! fenced lock, whose grants carry tokens.

#[allow(dead_code, unreachable_pub)]
#[path = "../../tests/common/rng.rs"]
mod rng;
#[allow(dead_code, unreachable_pub)]
#[path = "../../tests/common/server.rs"]
mod server;

use std::collections::BTreeMap;
use std::time::Duration;

use ferrisson_model::{Bounds, ClientId, Latch, Mutation, Reply, ReqId, Server, Time};
use redis::{Commands, Script, Value};
use rng::{announced_seed, Rng};
use server::RedisServer;

const NAME: &str = "model";
/// A second lock, held by owner 1 from each sequence's start until its
/// lease runs out, which a batched renewal may name beside the first.
const OTHER: &str = "model-other";
const CHANNEL: &str = "redisson_lock__channel:{model}";
/// Published after each step: every message before it is the step's.
const MARKER: &str = "redisson_lock__channel:{model}:marker";
/// One tick of the model's clock on Redis. A `Tick` step moves every key's
/// end one tick closer (PEXPIRE to what is left less a tick, or DEL when
/// nothing would be left), as the passing of a tick would: TTLs are then
/// compared with the model's, in ticks, with no wait.
const TICK_MS: u64 = 30_000;
/// How far below the model's a TTL may be when it is read: the wall time a
/// sequence takes, generously (a sequence takes milliseconds; a tick is
/// 30 s).
const TTL_SLACK_MS: i64 = 10_000;
/// A job's keep (`at_least_for`), in ticks.
const KEEP: Time = 1;
/// Steps per sequence, and sequences per run.
const STEPS: usize = 60;
const SEQUENCES: usize = 50;
/// The request ids each client draws from: few, so that resends and late
/// copies of one request are common.
const ACQUIRES: u8 = 3;
const RELEASES: u8 = 3;

/// The model's bounds here: only the lease and the latches' TTL count.
fn bounds() -> Bounds {
    Bounds {
        lease: 2,
        latch_ttl: 4,
        ..Bounds::lost_replies()
    }
}

fn ms(ticks: Time) -> u64 {
    u64::from(ticks) * TICK_MS
}

fn field(client: ClientId) -> String {
    format!("model-client-{client}:owner")
}

fn id(req: ReqId) -> String {
    format!("c{}-{}", req.client, req.seq)
}

fn acquire_latch(req: ReqId) -> String {
    format!("ferrisson_acquire_latch:{{{NAME}}}:{}", id(req))
}

fn unlock_latch(req: ReqId) -> String {
    format!("redisson_unlock_latch:{{{NAME}}}:{}", id(req))
}

/// An acquire's deadline (its last argument).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Deadline {
    /// None sent.
    None,
    /// An hour from now: not reached.
    Ahead,
    /// Long past: the call is too late.
    Passed,
}

/// A step of a sequence.
#[derive(Clone, Copy, Debug)]
enum Step {
    Acquire {
        req: ReqId,
        /// `false`: a non-reentrant lock's acquire (not for the fenced
        /// lock, which is reentrant).
        reentrant: bool,
        deadline: Deadline,
    },
    Release {
        req: ReqId,
        /// With a job's keep.
        keep: bool,
    },
    /// A batched renewal: the lock for one owner, and in the same call
    /// for another, of this lock or (`true`) of the other lock, `OTHER`
    /// (a batch carries many owners and locks).
    Renew(ClientId, Option<(ClientId, bool)>),
    Settle(ReqId),
    /// `acquire_granted.lua`: whether the request's latch shows a grant.
    Granted(ReqId),
    /// A tick passes: what runs out is gone.
    Tick,
    /// The hold's key is deleted (as by an operator).
    RunOut,
    /// `force_unlock.lua`: the lock opened whoever holds it.
    ForceUnlock,
}

fn draw(rng: &mut Rng, fenced: bool) -> Step {
    let client = rng.below(2) as ClientId;
    let acquire = ReqId {
        client,
        seq: 1 + rng.below(ACQUIRES as u64) as u8,
    };
    match rng.below(21) {
        0..=7 => Step::Acquire {
            req: acquire,
            reentrant: fenced || rng.below(5) > 0,
            deadline: match rng.below(10) {
                0..=3 => Deadline::None,
                4..=8 => Deadline::Ahead,
                _ => Deadline::Passed,
            },
        },
        8..=13 => Step::Release {
            req: ReqId {
                client,
                seq: 100 + rng.below(RELEASES as u64) as u8,
            },
            keep: rng.below(4) == 0,
        },
        14 | 15 => Step::Renew(
            client,
            (rng.below(2) == 0).then(|| (rng.below(2) as ClientId, rng.below(3) == 0)),
        ),
        16 => Step::Settle(acquire),
        17 | 18 => Step::Tick,
        19 => Step::Granted(acquire),
        _ if rng.below(2) == 0 => Step::RunOut,
        _ => Step::ForceUnlock,
    }
}

const TOKEN_KEY: &str = "redisson_lock_token:{model}";

/// The tokens the script drew in one sequence, in order. The script
/// floors each token by the server's clock (microseconds), so a real token
/// is not the model's count (1, 2, 3...) but stands for it by its rank:
/// each new token must be above every one before, as the model's are.
#[derive(Default)]
struct Drawn(Vec<i64>);

impl Drawn {
    /// The rank of a token a grant replied: a known one's, or the next
    /// for a new one, which must be the highest so far.
    fn rank(&mut self, token: i64) -> u8 {
        if let Some(rank) = self.known(token) {
            return rank;
        }
        assert!(
            self.0.last().is_none_or(|&last| token > last),
            "token {token} drawn after {:?}",
            self.0
        );
        self.0.push(token);
        u8::try_from(self.0.len()).expect("fewer than 256 grants a sequence")
    }

    /// The rank of a token Redis keeps (the counter, a latch): one a grant
    /// replied.
    fn known(&self, token: i64) -> Option<u8> {
        let index = self.0.iter().position(|&t| t == token)?;
        Some(u8::try_from(index + 1).expect("fewer than 256 grants a sequence"))
    }

    /// A kept value as the model writes it: a token by its rank, anything
    /// else (`x`) as it is.
    fn as_model(&self, kept: String) -> String {
        match kept.parse::<i64>() {
            Ok(token) => self
                .known(token)
                .unwrap_or_else(|| panic!("token {token} kept, never replied"))
                .to_string(),
            Err(_) => kept,
        }
    }
}

/// What a step answered: the reply as the model words it, a fenced
/// grant's token (by rank), a refusal's PTTL in ticks rounded up, and a
/// renewal's positions not renewed.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Outcome {
    reply: Reply,
    token: u8,
    /// A refusal's PTTL, in ticks (rounded up): the model's hold's end.
    left: Option<u64>,
    gone: Vec<u8>,
}

impl Outcome {
    fn reply(reply: Reply) -> Outcome {
        Outcome {
            reply,
            token: 0,
            left: None,
            gone: Vec::new(),
        }
    }
}

/// The scripts of `lua/`, each run by one of the comparisons here.
const SCRIPTS: &[(&str, &str)] = &[
    ("acquire.lua", include_str!("../../lua/acquire.lua")),
    (
        "fenced_acquire.lua",
        include_str!("../../lua/fenced_acquire.lua"),
    ),
    ("release.lua", include_str!("../../lua/release.lua")),
    ("renew.lua", include_str!("../../lua/renew.lua")),
    (
        "acquire_cancel.lua",
        include_str!("../../lua/acquire_cancel.lua"),
    ),
    (
        "fair_acquire.lua",
        include_str!("../../lua/fair_acquire.lua"),
    ),
    (
        "fair_release.lua",
        include_str!("../../lua/fair_release.lua"),
    ),
    ("fair_leave.lua", include_str!("../../lua/fair_leave.lua")),
    (
        "read_acquire.lua",
        include_str!("../../lua/read_acquire.lua"),
    ),
    (
        "write_acquire.lua",
        include_str!("../../lua/write_acquire.lua"),
    ),
    (
        "read_release.lua",
        include_str!("../../lua/read_release.lua"),
    ),
    (
        "write_release.lua",
        include_str!("../../lua/write_release.lua"),
    ),
    ("renew_read.lua", include_str!("../../lua/renew_read.lua")),
    (
        "set_if_missing.lua",
        include_str!("../../lua/set_if_missing.lua"),
    ),
    (
        "latch_count_down.lua",
        include_str!("../../lua/latch_count_down.lua"),
    ),
    (
        "latch_delete.lua",
        include_str!("../../lua/latch_delete.lua"),
    ),
    ("read_count.lua", include_str!("../../lua/read_count.lua")),
    (
        "semaphore_delete.lua",
        include_str!("../../lua/semaphore_delete.lua"),
    ),
    (
        "semaphore_drain.lua",
        include_str!("../../lua/semaphore_drain.lua"),
    ),
    (
        "job_last_done.lua",
        include_str!("../../lua/job_last_done.lua"),
    ),
    ("publish.lua", include_str!("../../lua/publish.lua")),
    ("fenced_get.lua", include_str!("../../lua/fenced_get.lua")),
    ("fenced_set.lua", include_str!("../../lua/fenced_set.lua")),
    (
        "force_unlock.lua",
        include_str!("../../lua/force_unlock.lua"),
    ),
    (
        "fair_force_unlock.lua",
        include_str!("../../lua/fair_force_unlock.lua"),
    ),
    (
        "acquire_granted.lua",
        include_str!("../../lua/acquire_granted.lua"),
    ),
    ("lock_info.lua", include_str!("../../lua/lock_info.lua")),
    (
        "semaphore_acquire.lua",
        include_str!("../../lua/semaphore_acquire.lua"),
    ),
    (
        "semaphore_release.lua",
        include_str!("../../lua/semaphore_release.lua"),
    ),
    (
        "semaphore_give_back.lua",
        include_str!("../../lua/semaphore_give_back.lua"),
    ),
    ("expirable.lua", include_str!("../../lua/expirable.lua")),
];

/// A script file of `lua/`, as it is.
fn lua(file: &str) -> &'static str {
    SCRIPTS
        .iter()
        .find(|(name, _)| *name == file)
        .map(|(_, text)| *text)
        .unwrap_or_else(|| panic!("no script {file} here"))
}

/// A script of `lua/` as it is, or with `mutant` when it is that one's.
fn load(file: &str, mutant: Option<Mutant>) -> Script {
    match mutant.filter(|m| m.file == file) {
        Some(mutant) => Script::new(&mutant.apply(lua(file))),
        None => Script::new(lua(file)),
    }
}

/// Ticks (of a model with signed time) in ms.
fn ticks_ms(ticks: i32) -> i64 {
    i64::from(ticks) * TICK_MS as i64
}

/// Whether a time Redis reports, `real` ms, is the model's `ticks` from
/// now: no more than that (at least 1 ms where the model says less than a
/// tick: a script's floor), and no less than that less the slack.
fn time_agrees(real: i64, ticks: i32) -> bool {
    let expected = ticks_ms(ticks);
    real <= expected.max(1) && real > expected - TTL_SLACK_MS
}

/// Each key's value and PTTL, in one round trip.
fn values_and_pttls(conn: &mut redis::Connection, keys: &[String]) -> Vec<(Option<String>, i64)> {
    let mut pipe = redis::pipe();
    for key in keys {
        pipe.get(key).pttl(key);
    }
    pipe.query(conn).unwrap()
}

/// Every script in `lua/` is in `SCRIPTS`, which the comparisons load
/// theirs from: a script added to `lua/` fails here until a comparison
/// holds it to a model.
#[test]
fn every_script_in_lua_is_compared() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../lua");
    let mut files: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().into_string().unwrap())
        .filter(|name| name.ends_with(".lua"))
        .collect();
    files.sort();
    let mut listed: Vec<&str> = SCRIPTS.iter().map(|(name, _)| *name).collect();
    listed.sort();
    assert_eq!(files, listed, "the scripts of lua/ and those compared");
}

/// A script with one line changed: a plausible bug, which the comparison
/// with the model must catch.
#[derive(Clone, Copy, Debug)]
struct Mutant {
    file: &'static str,
    /// Text on one line of the script, and which occurrence of it (1: the
    /// first).
    from: &'static str,
    nth: usize,
    to: &'static str,
    /// The bug, in words.
    what: &'static str,
}

impl Mutant {
    fn apply(&self, text: &str) -> String {
        assert!(!self.from.contains('\n') && !self.to.contains('\n'));
        let at = text
            .match_indices(self.from)
            .nth(self.nth - 1)
            .unwrap_or_else(|| panic!("{self:?} no longer applies: the script changed"))
            .0;
        format!(
            "{}{}{}",
            &text[..at],
            self.to,
            &text[at + self.from.len()..]
        )
    }

    /// Whether the mutant still applies where it was written for (its
    /// text, as often as when it was written) and the script it makes
    /// still compiles on `redis`: else it is no bug of the script but a
    /// stale entry, and the test says so rather than count it caught.
    fn check(&self, occurrences: usize, redis: &RedisServer) {
        let text = lua(self.file);
        assert_eq!(
            text.matches(self.from).count(),
            occurrences,
            "{self:?} no longer applies as written: the script changed, update MUTANTS"
        );
        let mut conn = redis::Client::open(redis.url())
            .unwrap()
            .get_connection()
            .unwrap();
        let loaded: redis::RedisResult<String> = redis::cmd("SCRIPT")
            .arg("LOAD")
            .arg(self.apply(text))
            .query(&mut conn);
        assert!(loaded.is_ok(), "{self:?} does not compile: {loaded:?}");
    }
}

/// The scripts under test: `lua/` as it is, or with one mutant.
struct Scripts {
    acquire: Script,
    fenced_acquire: Script,
    release: Script,
    renew: Script,
    settle: Script,
    granted: Script,
    force_unlock: Script,
    lock_info: Script,
}

impl Scripts {
    fn load(mutant: Option<Mutant>) -> Scripts {
        let script = |file: &str| load(file, mutant);
        Scripts {
            acquire: script("acquire.lua"),
            fenced_acquire: script("fenced_acquire.lua"),
            release: script("release.lua"),
            renew: script("renew.lua"),
            settle: script("acquire_cancel.lua"),
            granted: script("acquire_granted.lua"),
            force_unlock: script("force_unlock.lua"),
            lock_info: script("lock_info.lua"),
        }
    }

    /// Runs `step` on Redis, and reads what it answered as the model
    /// words it (a fenced grant's token by its rank in `drawn`).
    fn run(
        &self,
        conn: &mut redis::Connection,
        step: Step,
        fenced: bool,
        drawn: &mut Drawn,
    ) -> Option<Outcome> {
        let deadline = |deadline| -> i64 {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_millis() as i64;
            match deadline {
                Deadline::None => 0,
                Deadline::Ahead => now + 3_600_000,
                Deadline::Passed => 1,
            }
        };
        let left = |pttl: i64| Some(pttl.max(0).unsigned_abs().div_ceil(TICK_MS));
        if let (
            true,
            Step::Acquire {
                req, deadline: d, ..
            },
        ) = (fenced, step)
        {
            let mut call = self.fenced_acquire.key(NAME);
            call.key(TOKEN_KEY)
                .key(acquire_latch(req))
                .arg(ms(bounds().lease))
                .arg(field(req.client))
                .arg(ms(bounds().latch_ttl));
            if d != Deadline::None {
                call.arg(deadline(d));
            }
            let reply: Vec<i64> = call.invoke(conn).unwrap();
            return Some(match reply[..] {
                [1, token] => Outcome {
                    token: drawn.rank(token),
                    ..Outcome::reply(Reply::Granted)
                },
                [0, -2] => Outcome::reply(Reply::Spent),
                [0, -5] => Outcome::reply(Reply::TooLate),
                [0, pttl] => Outcome {
                    left: left(pttl),
                    ..Outcome::reply(Reply::Refused)
                },
                _ => panic!("{step:?}: a reply the model has no word for: {reply:?}"),
            });
        }
        let reply: Value = match step {
            Step::Acquire {
                req,
                reentrant,
                deadline: d,
            } => {
                let mut call = self.acquire.key(NAME);
                call.key(acquire_latch(req))
                    .arg(ms(bounds().lease))
                    .arg(field(req.client))
                    .arg(ms(bounds().latch_ttl))
                    .arg(u8::from(reentrant));
                if d != Deadline::None {
                    call.arg(deadline(d));
                }
                call.invoke(conn).unwrap()
            }
            Step::Release { req, keep } => {
                let mut call = self.release.key(NAME);
                call.key(CHANNEL)
                    .key(unlock_latch(req))
                    .arg(0)
                    .arg(ms(bounds().lease))
                    .arg(field(req.client))
                    .arg("publish")
                    .arg(ms(bounds().latch_ttl));
                if keep {
                    call.arg(ms(KEEP));
                }
                call.invoke(conn).unwrap()
            }
            Step::Renew(first, second) => {
                let mut call = self.renew.key(NAME);
                if let Some((_, other)) = second {
                    call.key(if other { OTHER } else { NAME });
                }
                call.arg(ms(bounds().lease)).arg(field(first));
                if let Some((second, _)) = second {
                    call.arg(field(second));
                }
                call.invoke(conn).unwrap()
            }
            Step::Settle(req) => self
                .settle
                .key(acquire_latch(req))
                .arg(ms(bounds().latch_ttl))
                .invoke(conn)
                .unwrap(),
            Step::Granted(req) => self
                .granted
                .key(acquire_latch(req))
                .arg(ms(bounds().latch_ttl))
                .invoke(conn)
                .unwrap(),
            Step::ForceUnlock => self
                .force_unlock
                .key(NAME)
                .key(CHANNEL)
                .arg(0)
                .arg("publish")
                .invoke(conn)
                .unwrap(),
            Step::Tick => {
                tick(conn);
                return None;
            }
            Step::RunOut => {
                let _: i64 = conn.del(NAME).unwrap();
                return None;
            }
        };
        let outcome = match (step, reply) {
            (Step::Acquire { .. }, Value::Nil) => Outcome::reply(Reply::Granted),
            (Step::Acquire { .. }, Value::Int(-2)) => Outcome::reply(Reply::Spent),
            (Step::Acquire { .. }, Value::Int(-4)) => Outcome::reply(Reply::NotReentrant),
            (Step::Acquire { .. }, Value::Int(-5)) => Outcome::reply(Reply::TooLate),
            (Step::Acquire { .. }, Value::Int(pttl)) => Outcome {
                left: left(pttl),
                ..Outcome::reply(Reply::Refused)
            },
            (Step::Release { .. }, Value::Int(n)) => Outcome::reply(Reply::Released(n as u8)),
            (Step::Release { .. }, Value::Nil) => Outcome::reply(Reply::NotHeld),
            (Step::Renew(..), Value::Array(gone)) => Outcome {
                gone: gone
                    .iter()
                    .map(|at| redis::from_redis_value_ref(at).unwrap())
                    .collect(),
                ..Outcome::reply(Reply::Renewed(gone.is_empty()))
            },
            (Step::Settle(_) | Step::Granted(_), Value::Array(reply)) => Outcome::reply(
                Reply::Settled(matches!(reply.first(), Some(Value::Int(left)) if *left >= 0)),
            ),
            (Step::ForceUnlock, Value::Int(n)) => Outcome::reply(Reply::Released(n as u8)),
            (step, reply) => panic!("{step:?}: a reply the model has no word for: {reply:?}"),
        };
        Some(outcome)
    }
}

/// A tick passes on Redis: every key with a TTL ends a tick sooner, and
/// one that would have no time left is gone.
fn tick(conn: &mut redis::Connection) {
    let keys: Vec<String> = conn.keys("*").unwrap();
    for key in keys {
        let pttl: i64 = conn.pttl(&key).unwrap();
        if pttl < 0 {
            continue;
        }
        match pttl - TICK_MS as i64 {
            left if left > 0 => {
                let _: bool = conn.pexpire(&key, left).unwrap();
            }
            _ => {
                let _: i64 = conn.del(&key).unwrap();
            }
        }
    }
}

/// Runs `step` on the model at `now`.
/// Runs `step` on the model at `now`; `other` is when the other lock,
/// owner 1's, ends (`None`: gone).
fn model_run(
    server: &mut Server,
    other: &mut Option<Time>,
    now: &mut Time,
    step: Step,
) -> Option<Outcome> {
    let b = &bounds();
    let m = Mutation::None;
    let t = *now;
    let outcome = match step {
        Step::Acquire {
            req,
            reentrant,
            deadline,
        } => {
            let reply = server.acquire_with(t, req, b, m, reentrant, deadline == Deadline::Passed);
            Outcome {
                token: match reply {
                    Reply::Granted => server.token_of(req),
                    _ => 0,
                },
                left: match reply {
                    Reply::Refused => server.hold.map(|h| u64::from(h.expires - t)),
                    _ => None,
                },
                ..Outcome::reply(reply)
            }
        }
        Step::Release { req, keep } => {
            let keep = if keep { KEEP } else { 0 };
            Outcome::reply(server.release_keeping(t, req, b, m, keep))
        }
        Step::Renew(first, second) => {
            let mut gone = Vec::new();
            if server.renew(t, first, b, m) == Reply::Renewed(false) {
                gone.push(1);
            }
            match second {
                Some((owner, false)) if server.renew(t, owner, b, m) == Reply::Renewed(false) => {
                    gone.push(2)
                }
                Some((1, true)) if other.is_some() => *other = Some(t + b.lease),
                Some((_, true)) => gone.push(2),
                _ => {}
            }
            Outcome {
                gone: gone.clone(),
                ..Outcome::reply(Reply::Renewed(gone.is_empty()))
            }
        }
        Step::Settle(req) => Outcome::reply(server.settle(t, req, b)),
        Step::Granted(req) => {
            Outcome::reply(Reply::Settled(server.latch(req) == Some(Latch::Granted)))
        }
        Step::ForceUnlock => {
            Outcome::reply(Reply::Released(u8::from(server.hold.take().is_some())))
        }
        Step::Tick => {
            *now += 1;
            server.expire(*now);
            if other.is_some_and(|ends| ends <= *now) {
                *other = None;
            }
            return None;
        }
        Step::RunOut => {
            server.hold = None;
            return None;
        }
    };
    Some(outcome)
}

/// The messages the step just run published on the channels `pubsub`
/// listens on: every one before `marker`, published after the step.
fn published<T: redis::FromRedisValue>(
    conn: &mut redis::Connection,
    pubsub: &mut redis::PubSub<'_>,
    marker: &str,
) -> Vec<T> {
    let _: i64 = conn.publish(marker, "end").unwrap();
    let mut messages = Vec::new();
    loop {
        let message = pubsub.get_message().unwrap();
        if message.get_channel_name() == marker {
            return messages;
        }
        messages.push(message.get_payload::<T>().unwrap());
    }
}

/// Whether a key's PTTL is the model's end for it (`expires`, at `now`):
/// no more than the ticks left, and no less than that less the slack.
fn ttl_agrees(pttl: i64, expires: Time, now: Time) -> bool {
    let expected = ms(expires - now) as i64;
    pttl <= expected && pttl > expected - TTL_SLACK_MS
}

/// The keys Redis holds, and their TTLs, compared with the model's (a
/// token by its rank in `drawn`).
fn compare(
    conn: &mut redis::Connection,
    model: &Server,
    other: Option<Time>,
    now: Time,
    drawn: &Drawn,
    context: &str,
) {
    let hash: Vec<(String, String)> = conn.hgetall(OTHER).unwrap();
    let expected: Vec<(String, String)> =
        other.iter().map(|_| (field(1), "1".to_owned())).collect();
    assert_eq!(hash, expected, "{context}: the other lock's hash");
    if let Some(ends) = other {
        let pttl: i64 = conn.pttl(OTHER).unwrap();
        assert!(
            ttl_agrees(pttl, ends, now),
            "{context}: the other lock's TTL is {pttl} ms, the model's ends in {} ticks",
            ends - now
        );
    }
    let hash: Vec<(String, String)> = conn.hgetall(NAME).unwrap();
    let expected: Vec<(String, String)> = model
        .hold
        .iter()
        .map(|h| (field(h.owner), h.count.to_string()))
        .collect();
    assert_eq!(hash, expected, "{context}: the lock hash");
    // No key the model lacks.
    let keys: usize = redis::cmd("DBSIZE").query(conn).unwrap();
    let modelled = usize::from(model.hold.is_some())
        + usize::from(other.is_some())
        + model.acquire_latches.len()
        + model.unlock_latches.len()
        + usize::from(model.token > 0);
    assert_eq!(keys, modelled, "{context}: the number of keys");
    if model.fenced {
        let token: Option<i64> = conn.get(TOKEN_KEY).unwrap();
        let token = token.map(|t| drawn.known(t).expect("the counter holds a token replied"));
        let expected = (model.token > 0).then_some(model.token);
        assert_eq!(token, expected, "{context}: the token counter");
        let pttl: i64 = conn.pttl(TOKEN_KEY).unwrap();
        assert!(
            model.token == 0 || pttl == -1,
            "{context}: the token counter has a TTL ({pttl} ms)"
        );
    }
    if let Some(hold) = model.hold {
        let pttl: i64 = conn.pttl(NAME).unwrap();
        assert!(
            ttl_agrees(pttl, hold.expires, now),
            "{context}: the hold's TTL is {pttl} ms, the model's ends in {} ticks",
            hold.expires - now
        );
    }
    // Every latch the model may have, read in one round trip.
    let mut latches = Vec::new();
    for client in 0..2 {
        for seq in 1..=ACQUIRES {
            let req = ReqId { client, seq };
            let expected = model.acquire_latches.iter().find(|(r, _, _)| *r == req);
            let expected = expected.map(|(_, latch, expires)| {
                let value = match latch {
                    // A fenced grant's latch keeps its token.
                    Latch::Granted if model.fenced => model.token_of(req).to_string(),
                    Latch::Granted => "1".to_owned(),
                    Latch::Cancelled => "x".to_owned(),
                };
                (value, *expires)
            });
            latches.push((acquire_latch(req), expected));
        }
        for seq in 100..100 + RELEASES {
            let req = ReqId { client, seq };
            let expected = model.unlock_latches.iter().find(|(r, _, _)| *r == req);
            let expected = expected.map(|(_, first, expires)| (first.to_string(), *expires));
            latches.push((unlock_latch(req), expected));
        }
    }
    let keys: Vec<String> = latches.iter().map(|(key, _)| key.clone()).collect();
    let read = values_and_pttls(conn, &keys);
    for ((key, expected), (value, pttl)) in latches.into_iter().zip(read) {
        let value = match model.fenced && key.starts_with("ferrisson_acquire_latch") {
            true => value.map(|kept| drawn.as_model(kept)),
            false => value,
        };
        assert_eq!(
            value,
            expected.as_ref().map(|(v, _)| v.clone()),
            "{context}: {key}"
        );
        if let Some((_, expires)) = expected {
            assert!(
                ttl_agrees(pttl, expires, now),
                "{context}: {key}'s TTL is {pttl} ms, the model's ends in {} ticks",
                expires - now
            );
        }
    }
}

/// What `lock_info.lua` replies: the hash, its PTTL, the queue, the
/// timeout set with its scores, the server's time, the token counter.
type LockInfo = (
    Vec<(String, String)>,
    i64,
    Vec<String>,
    Vec<(String, i64)>,
    i64,
    i64,
);

/// `lock_info.lua` (`plain` or `fenced`) reads what the keys hold, as
/// read one by one: the hash, its PTTL (within the time between the
/// reads), no queue, the server's time and the token counter.
fn lock_info_agrees(conn: &mut redis::Connection, lock_info: &Script, fenced: bool, context: &str) {
    let kind = if fenced { "fenced" } else { "plain" };
    let (hash, pttl, queue, scores, now, token): LockInfo = lock_info
        .key(NAME)
        .key(TOKEN_KEY)
        .arg(kind)
        .invoke(conn)
        .unwrap();
    let expected: Vec<(String, String)> = conn.hgetall(NAME).unwrap();
    assert_eq!(hash, expected, "{context}: lock_info's hash");
    let (read_pttl, (seconds, micros)): (i64, (i64, i64)) =
        redis::pipe().pttl(NAME).cmd("TIME").query(conn).unwrap();
    let read_now = seconds * 1000 + micros / 1000;
    assert!(
        match (pttl, read_pttl) {
            (a, b) if a < 0 || b < 0 => a == b,
            (a, b) => a >= b && a - b <= TTL_SLACK_MS,
        },
        "{context}: lock_info's PTTL {pttl}, read after it {read_pttl}"
    );
    assert!(
        now <= read_now && read_now - now <= TTL_SLACK_MS,
        "{context}: lock_info's time {now}, read after it {read_now}"
    );
    assert!(
        queue.is_empty() && scores.is_empty(),
        "{context}: lock_info's queue"
    );
    let counter: Option<i64> = conn.get(TOKEN_KEY).unwrap();
    let expected = if fenced { counter.unwrap_or(-1) } else { -1 };
    assert_eq!(token, expected, "{context}: lock_info's token");
}

#[test]
fn the_model_and_the_scripts_agree_step_by_step() {
    let seed = announced_seed("model conformance");
    let redis = RedisServer::start();
    let seen = agree_step_by_step(&redis, seed, false, None);
    covered(&seen, false);
}

#[test]
fn the_fenced_model_and_the_scripts_agree_step_by_step() {
    let seed = announced_seed("fenced model conformance");
    let redis = RedisServer::start();
    let seen = agree_step_by_step(&redis, seed, true, None);
    covered(&seen, true);
}

/// Every reply the model knows was met, so that each rule was compared.
fn covered(seen: &BTreeMap<String, usize>, fenced: bool) {
    let mut expected = vec![
        "Granted",
        "Refused",
        "Spent",
        "TooLate",
        "Released(0)",
        "Released(1)",
        "Released(2)",
        "NotHeld",
        "Renewed(true)",
        "Renewed(false)",
        "Settled(true)",
        "Settled(false)",
        "published",
        "mixed batch",
        "other lock renewed",
        "tick",
        "forced open",
        "grant read",
    ];
    if !fenced {
        expected.push("NotReentrant");
    }
    for what in expected {
        assert!(seen.contains_key(what), "no step met {what}: {seen:?}");
    }
}

/// Runs the sequences of `seed` through the model and through the scripts
/// (with `mutant`, if any) on `redis`, and panics at the first
/// disagreement. Returns what the steps met.
fn agree_step_by_step(
    redis: &RedisServer,
    seed: u64,
    fenced: bool,
    mutant: Option<Mutant>,
) -> BTreeMap<String, usize> {
    let mut rng = Rng::new(seed);
    let client = redis::Client::open(redis.url()).unwrap();
    let mut conn = client.get_connection().unwrap();
    let mut subscriber = client.get_connection().unwrap();
    subscriber
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    // One subscription for the run (a dropped `PubSub` unsubscribes).
    let mut pubsub = subscriber.as_pubsub();
    pubsub.subscribe(CHANNEL).unwrap();
    pubsub.subscribe(MARKER).unwrap();
    let scripts = Scripts::load(mutant);
    let mut seen = BTreeMap::<String, usize>::new();
    for sequence in 0..SEQUENCES {
        let _: () = redis::cmd("FLUSHALL").query(&mut conn).unwrap();
        let mut model = Server {
            fenced,
            ..Server::default()
        };
        let mut now: Time = 0;
        let _: () = redis::pipe()
            .hset(OTHER, field(1), 1)
            .ignore()
            .pexpire(OTHER, ms(bounds().lease) as i64)
            .ignore()
            .query(&mut conn)
            .unwrap();
        let mut other = Some(bounds().lease);
        let mut steps = Vec::new();
        let mut drawn = Drawn::default();
        for _ in 0..STEPS {
            let step = draw(&mut rng, fenced);
            steps.push(step);
            let context = format!("seed {seed}, sequence {sequence}, steps {steps:?}");
            let held_before = model.hold.is_some();
            let real = scripts.run(&mut conn, step, fenced, &mut drawn);
            let real_published = published::<String>(&mut conn, &mut pubsub, MARKER);
            let modelled = model_run(&mut model, &mut other, &mut now, step);
            assert_eq!(real, modelled, "{context}: the reply");
            // The last hold's release (not a replay, not a keep) tells
            // the waiters, and so does a lock forced open.
            let expected: Vec<String> = match (step, &modelled) {
                (Step::Release { .. } | Step::ForceUnlock, Some(o))
                    if o.reply == Reply::Released(1) && held_before && model.hold.is_none() =>
                {
                    vec!["0".to_owned()]
                }
                _ => Vec::new(),
            };
            assert_eq!(real_published, expected, "{context}: the messages");
            compare(&mut conn, &model, other, now, &drawn, &context);
            lock_info_agrees(&mut conn, &scripts.lock_info, fenced, &context);
            if let Some(o) = &real {
                *seen.entry(format!("{:?}", o.reply)).or_default() += 1;
            }
            if !real_published.is_empty() {
                *seen.entry("published".to_owned()).or_default() += 1;
            }
            match (step, &real) {
                (Step::Renew(a, Some((b, false))), Some(o)) if a != b && o.gone.len() == 1 => {
                    *seen.entry("mixed batch".to_owned()).or_default() += 1;
                }
                (Step::Renew(_, Some((1, true))), Some(o)) if !o.gone.contains(&2) => {
                    *seen.entry("other lock renewed".to_owned()).or_default() += 1;
                }
                (Step::Tick, _) if model.hold.is_some() => {
                    *seen.entry("tick".to_owned()).or_default() += 1;
                }
                (Step::ForceUnlock, Some(o)) if o.reply == Reply::Released(1) => {
                    *seen.entry("forced open".to_owned()).or_default() += 1;
                }
                (Step::Granted(_), Some(o)) if o.reply == Reply::Settled(true) => {
                    *seen.entry("grant read".to_owned()).or_default() += 1;
                }
                _ => {}
            }
        }
    }
    println!(
        "model conformance (seed {seed}, fenced: {fenced}, mutant: {mutant:?}): {SEQUENCES} \
         sequences of {STEPS} steps agree; met: {seen:?}"
    );
    seen
}

/// One-line bugs in the scripts, each a plausible one. Every one must
/// make the model and the scripts disagree: a script change that no
/// comparison notices shows up here.
const MUTANTS: &[(Mutant, usize)] = &[
    (
        Mutant {
            file: "acquire.lua",
            from: "redis.call('pexpire', KEYS[1], ARGV[1])",
            nth: 2,
            to: "",
            what: "a re-entry keeps the old TTL",
        },
        2,
    ),
    (
        Mutant {
            file: "acquire.lua",
            from: "redis.call('pexpire', KEYS[1], ARGV[1])",
            nth: 2,
            to: "redis.call('pexpire', KEYS[1], ARGV[1] / 10)",
            what: "a re-entry sets a tenth of the lease",
        },
        2,
    ),
    (
        Mutant {
            file: "acquire.lua",
            from: "redis.call('pexpire', KEYS[1], ARGV[1])",
            nth: 1,
            to: "",
            what: "a first grant sets no TTL",
        },
        2,
    ),
    (
        Mutant {
            file: "acquire.lua",
            from: "redis.call('set', KEYS[2], 1, 'px', ARGV[3])",
            nth: 2,
            to: "",
            what: "a re-entry writes no latch",
        },
        2,
    ),
    (
        Mutant {
            file: "acquire.lua",
            from: "if latch == 'x' then",
            nth: 1,
            to: "if latch == 'X' then",
            what: "a given-up request arriving late is answered as granted while its owner holds",
        },
        1,
    ),
    (
        Mutant {
            file: "acquire.lua",
            from: "    return not_a_lock(KEYS[1]) or -2",
            nth: 1,
            to: "    return not_a_lock(KEYS[1]) or nil",
            what: "a late send of a spent grant answers granted",
        },
        1,
    ),
    (
        Mutant {
            file: "acquire.lua",
            from: "if ARGV[4] == '0' then",
            nth: 1,
            to: "if ARGV[4] == 0 then",
            what: "a non-reentrant lock lets its holder in again",
        },
        1,
    ),
    (
        Mutant {
            file: "acquire.lua",
            from: "if too_late(ARGV[5]) then",
            nth: 1,
            to: "if false then",
            what: "an acquire past its deadline takes the lock",
        },
        1,
    ),
    (
        Mutant {
            file: "fenced_acquire.lua",
            from: "if too_late(ARGV[4]) then",
            nth: 1,
            to: "if false then",
            what: "a fenced acquire past its deadline takes the lock",
        },
        1,
    ),
    (
        Mutant {
            file: "release.lua",
            from: "redis.call(ARGV[4], KEYS[2], ARGV[1])",
            nth: 1,
            to: "",
            what: "a last release publishes nothing",
        },
        1,
    ),
    (
        Mutant {
            file: "release.lua",
            from: "local keep = tonumber(ARGV[6] or '0') or 0",
            nth: 1,
            to: "local keep = 0",
            what: "a release ignores its keep",
        },
        1,
    ),
    (
        Mutant {
            file: "release.lua",
            from: "redis.call('pexpire', KEYS[1], keep)",
            nth: 1,
            to: "redis.call('pexpire', KEYS[1], ARGV[2])",
            what: "a keep sets the lease, not the keep",
        },
        1,
    ),
    (
        Mutant {
            file: "release.lua",
            from: "if done ~= false then",
            nth: 1,
            to: "if false then",
            what: "a resent release releases again",
        },
        1,
    ),
    (
        Mutant {
            file: "release.lua",
            from: "    redis.call('pexpire', KEYS[1], ARGV[2])",
            nth: 1,
            to: "",
            what: "a release that leaves holds keeps the old TTL",
        },
        1,
    ),
    (
        Mutant {
            file: "renew.lua",
            from: "ARGV[i + 1]",
            nth: 1,
            to: "ARGV[2]",
            what: "a batched renewal checks every key against the first key's owner",
        },
        1,
    ),
    (
        Mutant {
            file: "renew.lua",
            from: "redis.call('pexpire', key, ARGV[1])",
            nth: 1,
            to: "redis.call('pexpire', key, ARGV[1] * 2)",
            what: "a renewal sets twice the lease",
        },
        1,
    ),
    (
        Mutant {
            file: "acquire_cancel.lua",
            from: "redis.call('set', KEYS[1], 'x', 'px', ARGV[1])",
            nth: 1,
            to: "",
            what: "a settle leaves no mark (a late send of the request could still take the lock)",
        },
        1,
    ),
    (
        Mutant {
            file: "acquire_granted.lua",
            from: "if latch == false or latch == 'x' then",
            nth: 1,
            to: "if latch == false then",
            what: "a given-up request reads as granted",
        },
        1,
    ),
    (
        Mutant {
            file: "force_unlock.lua",
            from: "redis.call(ARGV[2], KEYS[2], ARGV[1])",
            nth: 1,
            to: "",
            what: "a lock forced open wakes nobody",
        },
        1,
    ),
    (
        Mutant {
            file: "force_unlock.lua",
            from: "if redis.call('del', KEYS[1]) == 0 then",
            nth: 1,
            to: "if redis.call('exists', KEYS[1]) == 0 then",
            what: "forcing a lock open leaves it held",
        },
        1,
    ),
    (
        Mutant {
            file: "lock_info.lua",
            from: "local pttl = redis.call('pttl', KEYS[1])",
            nth: 1,
            to: "local pttl = redis.call('ttl', KEYS[1])",
            what: "the inspector reads a lock's TTL in seconds",
        },
        1,
    ),
    (
        Mutant {
            file: "lock_info.lua",
            from: "        token = counter",
            nth: 1,
            to: "",
            what: "the inspector never reads a fenced lock's token counter",
        },
        1,
    ),
    (
        Mutant {
            file: "renew.lua",
            from: "redis.call('pexpire', key, ARGV[1])",
            nth: 1,
            to: "redis.call('pexpire', KEYS[1], ARGV[1])",
            what: "a batched renewal renews the first key for every pair",
        },
        1,
    ),
    (
        Mutant {
            file: "renew.lua",
            from: "redis.pcall('hexists', key, ARGV[i + 1])",
            nth: 1,
            to: "redis.pcall('hexists', KEYS[1], ARGV[i + 1])",
            what: "a batched renewal checks every owner on the first key",
        },
        1,
    ),
];

/// Runs `agree` (a comparison of a model and the scripts, which panics at
/// the first disagreement) on `lua/` as it is, and then on each of
/// `mutants`, with a few seeds drawn from the announced one, so that a
/// mutant whose bug shows only after a rare sequence is not missed by one
/// unlucky draw: each must fail under one of them, and each seed passes on
/// `lua/` as it is. A stale entry (its text no longer where it was
/// written, or a script that no longer compiles) fails outside the
/// comparison.
fn every_mutant_is_caught(
    name: &str,
    mutants: &[(Mutant, usize)],
    redis: &RedisServer,
    agree: impl Fn(u64, Option<Mutant>),
) {
    let seed = announced_seed(name);
    let seeds: Vec<u64> = (0..3u64)
        .map(|i| seed.wrapping_add(i.wrapping_mul(0x9E37_79B9_7F4A_7C15)))
        .collect();
    for &seed in &seeds {
        agree(seed, None);
    }
    let mut escaped = Vec::new();
    for (mutant, occurrences) in mutants {
        mutant.check(*occurrences, redis);
        let caught = seeds.iter().find(|&&seed| {
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| agree(seed, Some(*mutant))))
                .is_err()
        });
        match caught {
            Some(seed) => println!("caught: {} ({}, seed {seed})", mutant.what, mutant.file),
            None => escaped.push(mutant.what),
        }
    }
    assert!(
        escaped.is_empty(),
        "{name}, seeds {seeds:?}: mutants no comparison caught: {escaped:?}"
    );
}

/// Each mutant is caught: the comparison that passes on `lua/` as it is
/// fails on it, with the same seed.
#[test]
fn every_mutant_of_the_locks_scripts_is_caught() {
    let redis = RedisServer::start();
    every_mutant_is_caught(
        "model conformance, mutants",
        MUTANTS,
        &redis,
        |seed, mutant| match mutant {
            Some(m) => {
                let fenced = ["fenced_acquire.lua", "lock_info.lua"].contains(&m.file);
                agree_step_by_step(&redis, seed, fenced, mutant);
            }
            None => {
                agree_step_by_step(&redis, seed, false, None);
                agree_step_by_step(&redis, seed, true, None);
            }
        },
    );
}

/// The semaphore's scripts and its model ([`semaphore::Server`]).
mod semaphore_scripts {
    use std::time::Duration;

    use ferrisson_model::semaphore::{Bounds, Mutation, Reply, Server};
    use ferrisson_model::{ClientId, Latch, ReqId};
    use redis::{Commands, Script};

    use super::rng::{announced_seed, Rng};
    use super::server::RedisServer;
    use super::{every_mutant_is_caught, id, load, Mutant, SEQUENCES, STEPS};

    const NAME: &str = "model-semaphore";
    const CHANNEL: &str = "redisson_sc:{model-semaphore}";
    const MARKER: &str = "redisson_sc:{model-semaphore}:marker";
    const TOTAL: u8 = 3;
    const LATCH_TTL_MS: u64 = 120_000;
    const ACQUIRES: u8 = 3;
    const GIVE_BACKS: u8 = 2;

    fn acquire_latch(req: ReqId) -> String {
        format!("ferrisson_acquire_latch:{{{NAME}}}:{}", id(req))
    }

    fn give_back_latch(req: ReqId) -> String {
        format!("redisson_unlock_latch:{{{NAME}}}:{}", id(req))
    }

    #[derive(Clone, Copy, Debug)]
    enum Step {
        /// A take of this many permits.
        Acquire(ReqId, u8),
        Release,
        Settle(ReqId),
        GiveBack(ReqId),
        /// The acquire latch runs out (its key deleted).
        LatchGone(ReqId),
    }

    fn draw(rng: &mut Rng) -> Step {
        let client = rng.below(2) as ClientId;
        let acquire = ReqId {
            client,
            seq: 1 + rng.below(ACQUIRES as u64) as u8,
        };
        match rng.below(12) {
            0..=3 => Step::Acquire(acquire, 1 + rng.below(2) as u8),
            4..=5 => Step::Release,
            6..=7 => Step::Settle(acquire),
            8..=9 => Step::GiveBack(ReqId {
                client,
                seq: 100 + rng.below(GIVE_BACKS as u64) as u8,
            }),
            _ => Step::LatchGone(acquire),
        }
    }

    struct Scripts {
        acquire: Script,
        release: Script,
        settle: Script,
        give_back: Script,
    }

    impl Scripts {
        fn load(mutant: Option<Mutant>) -> Scripts {
            let script = |file: &str| load(file, mutant);
            Scripts {
                acquire: script("semaphore_acquire.lua"),
                release: script("semaphore_release.lua"),
                settle: script("acquire_cancel.lua"),
                give_back: script("semaphore_give_back.lua"),
            }
        }

        fn run(&self, conn: &mut redis::Connection, step: Step) -> Option<Reply> {
            Some(match step {
                Step::Acquire(req, permits) => {
                    let taken: i64 = self
                        .acquire
                        .key(NAME)
                        .key(acquire_latch(req))
                        .arg(permits)
                        .arg(LATCH_TTL_MS)
                        .invoke(conn)
                        .unwrap();
                    Reply::Taken(taken == 1)
                }
                Step::Release => {
                    let count: i64 = self
                        .release
                        .key(NAME)
                        .key(CHANNEL)
                        .arg(1)
                        .arg("publish")
                        .arg("0")
                        .invoke(conn)
                        .unwrap();
                    Reply::Count(count as i16)
                }
                Step::Settle(req) => {
                    let (left, _granted): (i64, i64) = self
                        .settle
                        .key(acquire_latch(req))
                        .arg(LATCH_TTL_MS)
                        .invoke(conn)
                        .unwrap();
                    Reply::Settled(left >= 0)
                }
                Step::GiveBack(req) => {
                    let count: i64 = self
                        .give_back
                        .key(NAME)
                        .key(CHANNEL)
                        .key(give_back_latch(req))
                        .arg(1)
                        .arg("publish")
                        .arg(LATCH_TTL_MS)
                        .invoke(conn)
                        .unwrap();
                    Reply::Count(count as i16)
                }
                Step::LatchGone(req) => {
                    let _: i64 = conn.del(acquire_latch(req)).unwrap();
                    return None;
                }
            })
        }
    }

    /// Runs `step` on the model: its reply, and whether it published.
    fn model_run(server: &mut Server, step: Step, b: &Bounds) -> (Option<Reply>, bool) {
        let now = 0;
        match step {
            Step::Acquire(req, permits) => (
                Some(server.acquire(now, req, permits, b, Mutation::None)),
                false,
            ),
            Step::Release => (Some(server.release(1)), true),
            Step::Settle(req) => (Some(server.settle(now, req, b)), false),
            Step::GiveBack(req) => {
                let (reply, published) = server.give_back(req, 1, Mutation::None);
                (Some(reply), published)
            }
            Step::LatchGone(req) => {
                server.acquire_latches.retain(|(r, _, _)| *r != req);
                (None, false)
            }
        }
    }

    fn compare(conn: &mut redis::Connection, model: &Server, context: &str) {
        let count: i64 = conn.get(NAME).unwrap();
        assert_eq!(count, i64::from(model.available), "{context}: the count");
        let keys: usize = redis::cmd("DBSIZE").query(conn).unwrap();
        let modelled = 1 + model.acquire_latches.len() + model.give_back_latches.len();
        assert_eq!(keys, modelled, "{context}: the number of keys");
        for client in 0..2 {
            let acquires = (1..=ACQUIRES).map(|seq| {
                let req = ReqId { client, seq };
                let expected = model.latch(req).map(|latch| match latch {
                    Latch::Granted => "1".to_owned(),
                    Latch::Cancelled => "x".to_owned(),
                });
                (acquire_latch(req), expected)
            });
            let give_backs = (100..100 + GIVE_BACKS).map(|seq| {
                let req = ReqId { client, seq };
                let expected = model.give_back_latches.iter().find(|(r, _)| *r == req);
                (
                    give_back_latch(req),
                    expected.map(|(_, first)| first.to_string()),
                )
            });
            for (key, expected) in acquires.chain(give_backs) {
                let latch: Option<String> = conn.get(&key).unwrap();
                assert_eq!(latch, expected, "{context}: {key}");
                // Nothing runs out within a run: each latch has its TTL.
                let pttl: i64 = conn.pttl(&key).unwrap();
                assert!(
                    latch.is_none() || (pttl > 0 && pttl <= LATCH_TTL_MS as i64),
                    "{context}: {key}'s PTTL is {pttl}"
                );
            }
        }
    }

    /// Runs the sequences of `seed` through the model and the scripts
    /// (with `mutant`, if any); panics at the first disagreement.
    fn agree_step_by_step(
        redis: &RedisServer,
        seed: u64,
        mutant: Option<Mutant>,
    ) -> std::collections::BTreeMap<String, usize> {
        let mut rng = Rng::new(seed);
        let client = redis::Client::open(redis.url()).unwrap();
        let mut conn = client.get_connection().unwrap();
        let mut subscriber = client.get_connection().unwrap();
        subscriber
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        // One subscription for the run (a dropped `PubSub` unsubscribes).
        let mut pubsub = subscriber.as_pubsub();
        pubsub.subscribe(CHANNEL).unwrap();
        pubsub.subscribe(MARKER).unwrap();
        let scripts = Scripts::load(mutant);
        let bounds = Bounds::lost_replies();
        let mut replies = std::collections::BTreeMap::<String, usize>::new();
        for sequence in 0..SEQUENCES {
            let _: () = redis::cmd("FLUSHALL").query(&mut conn).unwrap();
            let _: () = conn.set(NAME, TOTAL).unwrap();
            let mut model = Server::with(TOTAL);
            let mut steps = Vec::new();
            for _ in 0..STEPS {
                let step = draw(&mut rng);
                steps.push(step);
                let context = format!("seed {seed}, sequence {sequence}, steps {steps:?}");
                let real = scripts.run(&mut conn, step);
                let real_published = super::published::<i16>(&mut conn, &mut pubsub, MARKER);
                let (modelled, modelled_published) = model_run(&mut model, step, &bounds);
                assert_eq!(real, modelled, "{context}: the reply");
                // A step that publishes publishes the new count.
                let expected: Vec<i16> = match (modelled, modelled_published) {
                    (Some(Reply::Count(n)), true) => vec![n],
                    _ => Vec::new(),
                };
                assert_eq!(real_published, expected, "{context}: the messages");
                compare(&mut conn, &model, &context);
                let kind = match (real, real_published.is_empty()) {
                    (Some(Reply::Count(_)), false) => "Count, published".to_owned(),
                    (Some(Reply::Count(_)), true) => "Count, replayed".to_owned(),
                    (Some(reply), _) => format!("{reply:?}"),
                    (None, _) => "latch gone".to_owned(),
                };
                *replies.entry(kind).or_default() += 1;
            }
        }
        println!(
            "semaphore model conformance (seed {seed}, mutant: {mutant:?}): {SEQUENCES} sequences \
             of {STEPS} steps agree; replies seen: {replies:?}"
        );
        replies
    }

    #[test]
    fn the_semaphore_model_and_the_scripts_agree_step_by_step() {
        let seed = announced_seed("semaphore model conformance");
        let redis = RedisServer::start();
        let replies = agree_step_by_step(&redis, seed, None);
        for reply in [
            "Taken(true)",
            "Taken(false)",
            "Count, published",
            "Count, replayed",
            "Settled(true)",
            "Settled(false)",
        ] {
            assert!(
                replies.contains_key(reply),
                "no step replied {reply}: {replies:?}"
            );
        }
    }

    /// One-line bugs in the semaphore's scripts, each a plausible one.
    const MUTANTS: &[(Mutant, usize)] = &[
        (
            Mutant {
                file: "semaphore_acquire.lua",
                from: "if available ~= false and available >= tonumber(ARGV[1]) then",
                nth: 1,
                to: "if available ~= false and available >= 1 then",
                what: "a take of two permits goes through when one is left",
            },
            1,
        ),
        (
            Mutant {
                file: "semaphore_acquire.lua",
                from: "redis.call('set', KEYS[2], 1, 'px', ARGV[2])",
                nth: 1,
                to: "redis.call('set', KEYS[2], 1)",
                what: "a take's latch never runs out",
            },
            1,
        ),
        (
            Mutant {
                file: "semaphore_acquire.lua",
                from: "if latch == '1' then",
                nth: 1,
                to: "if false then",
                what: "a resent take takes again",
            },
            1,
        ),
        (
            Mutant {
                file: "semaphore_release.lua",
                from: "redis.call(ARGV[2], KEYS[2], value)",
                nth: 1,
                to: "",
                what: "a release tells no waiter",
            },
            1,
        ),
        (
            Mutant {
                file: "semaphore_give_back.lua",
                from: "redis.call('set', unlock_latch, value, 'px', ARGV[3])",
                nth: 1,
                to: "",
                what: "a resent give-back gives back twice",
            },
            1,
        ),
        (
            Mutant {
                file: "semaphore_give_back.lua",
                from: "redis.call(ARGV[2], KEYS[2], value)",
                nth: 1,
                to: "",
                what: "a give-back tells no waiter",
            },
            1,
        ),
    ];

    #[test]
    fn every_mutant_of_the_semaphores_scripts_is_caught() {
        let redis = RedisServer::start();
        every_mutant_is_caught(
            "semaphore model conformance, mutants",
            MUTANTS,
            &redis,
            |seed, mutant| {
                agree_step_by_step(&redis, seed, mutant);
            },
        );
    }
}

mod expirable_script {
    use ferrisson_model::expirable::{Bounds, Mutation, Reply, Server};
    use ferrisson_model::{ClientId, Latch, ReqId};
    use redis::{Commands, Script, Value};

    use super::rng::{announced_seed, Rng};
    use super::server::RedisServer;
    use super::{every_mutant_is_caught, id, load, Mutant, SEQUENCES, STEPS};

    const NAME: &str = "model-expirable";
    const TIMEOUTS: &str = "{model-expirable}:timeout";
    const CHANNEL: &str = "redisson_sc:{model-expirable}";
    const TOTAL: u8 = 2;
    const LEASE_MS: u64 = 60_000;
    const LATCH_TTL_MS: u64 = 120_000;
    const NO_EXPIRY: i64 = 922_337_203_685_477;
    const ACQUIRES: u8 = 3;

    fn acquire_latch(req: ReqId) -> String {
        format!("ferrisson_acquire_latch:{{{NAME}}}:{}", id(req))
    }

    /// The permit id a take sends: 16 bytes.
    fn permit(req: ReqId) -> String {
        format!("permit-c{}-s{:05}", req.client, req.seq)
    }

    #[derive(Clone, Copy, Debug)]
    enum Step {
        Acquire(ReqId),
        Release(ReqId),
        Settle(ReqId),
        /// The permit's lease ends (its score set in the past); the next
        /// script takes it back.
        RunOut(ReqId),
        /// A read: `available`, `out` or `total`.
        Read(&'static str),
        /// Every available permit taken.
        Drain,
    }

    /// What a step answered: a reply the model words, or a count.
    #[derive(Clone, Copy, Debug, PartialEq)]
    enum Got {
        Reply(Reply),
        Count(i64),
    }

    fn draw(rng: &mut Rng) -> Step {
        let req = ReqId {
            client: rng.below(2) as ClientId,
            seq: 1 + rng.below(ACQUIRES as u64) as u8,
        };
        match rng.below(13) {
            0..=3 => Step::Acquire(req),
            4..=5 => Step::Release(req),
            6..=7 => Step::Settle(req),
            8 | 9 => Step::RunOut(req),
            10 => Step::Read(["available", "out", "total"][rng.below(3) as usize]),
            11 if rng.below(3) == 0 => Step::Drain,
            _ => Step::Read("available"),
        }
    }

    fn call<'a>(
        script: &'a Script,
        op: &str,
        req: ReqId,
        number: u64,
    ) -> redis::ScriptInvocation<'a> {
        let mut call = script.prepare_invoke();
        call.key(NAME)
            .key(TIMEOUTS)
            .key(CHANNEL)
            .arg(op)
            .arg("publish")
            .arg(permit(req))
            .arg(number)
            .arg(NO_EXPIRY);
        call
    }

    /// An operation of the script that names no permit and replies a count.
    fn count(conn: &mut redis::Connection, script: &Script, op: &str) -> i64 {
        let any = ReqId { client: 0, seq: 0 };
        call(script, op, any, 0).invoke(conn).unwrap()
    }

    fn run(
        conn: &mut redis::Connection,
        script: &Script,
        settle: &Script,
        step: Step,
    ) -> Option<Got> {
        let reply = match step {
            Step::Acquire(req) => {
                let reply: Value = call(script, "acquire", req, LEASE_MS)
                    .key(acquire_latch(req))
                    .arg(LATCH_TTL_MS)
                    .invoke(conn)
                    .unwrap();
                Reply::Taken(reply == Value::Nil)
            }
            Step::Release(req) => {
                let reply: i64 = call(script, "release", req, 0).invoke(conn).unwrap();
                Reply::Released(reply == 1)
            }
            Step::Settle(req) => {
                let (left, _granted): (i64, i64) = settle
                    .key(acquire_latch(req))
                    .arg(LATCH_TTL_MS)
                    .invoke(conn)
                    .unwrap();
                Reply::Settled(left >= 0)
            }
            Step::RunOut(req) => {
                let _: i64 = redis::cmd("ZADD")
                    .arg(TIMEOUTS)
                    .arg("XX")
                    .arg(1)
                    .arg(permit(req))
                    .query(conn)
                    .unwrap();
                count(conn, script, "available");
                return None;
            }
            Step::Read(op) => return Some(Got::Count(count(conn, script, op))),
            Step::Drain => return Some(Got::Count(count(conn, script, "drain"))),
        };
        Some(Got::Reply(reply))
    }

    fn model_run(server: &mut Server, step: Step, b: &Bounds) -> Option<Got> {
        let now = 0;
        let reply = match step {
            Step::Acquire(req) => server.acquire(now, req, b, Mutation::None),
            Step::Release(req) => server.release(req),
            Step::Settle(req) => server.settle(now, req, b),
            Step::RunOut(req) => {
                // Its lease ends now: taken back at once.
                for out in server.out.iter_mut().filter(|(p, _)| *p == req) {
                    out.1 = now;
                }
                server.expire(now);
                return None;
            }
            Step::Read(op) => {
                let (available, out) = (i64::from(server.available), server.out.len() as i64);
                return Some(Got::Count(match op {
                    "available" => available,
                    "out" => out,
                    _ => available + out,
                }));
            }
            Step::Drain => {
                let taken = server.available.max(0);
                server.available -= taken;
                return Some(Got::Count(i64::from(taken)));
            }
        };
        Some(Got::Reply(reply))
    }

    fn compare(conn: &mut redis::Connection, model: &Server, context: &str) {
        let count: i64 = conn.get(NAME).unwrap();
        assert_eq!(count, i64::from(model.available), "{context}: the count");
        let out: Vec<String> = conn.zrange(TIMEOUTS, 0, -1).unwrap();
        let mut out_sorted = out.clone();
        out_sorted.sort();
        let expected: Vec<String> = model.out.iter().map(|(p, _)| permit(*p)).collect();
        assert_eq!(out_sorted, expected, "{context}: the permits out");
        let keys: usize = redis::cmd("DBSIZE").query(conn).unwrap();
        let modelled = 1 + usize::from(!model.out.is_empty()) + model.acquire_latches.len();
        assert_eq!(keys, modelled, "{context}: the number of keys");
        for (req, _) in &model.out {
            let score: f64 = conn.zscore(TIMEOUTS, permit(*req)).unwrap();
            assert!(
                score > 1.0 && score < NO_EXPIRY as f64,
                "{context}: a permit out without its lease ({score})"
            );
        }
        for client in 0..2 {
            for seq in 1..=ACQUIRES {
                let req = ReqId { client, seq };
                let expected = model.latch(req).map(|latch| match latch {
                    Latch::Granted => "1".to_owned(),
                    Latch::Cancelled => "x".to_owned(),
                });
                let key = acquire_latch(req);
                let latch: Option<String> = conn.get(&key).unwrap();
                assert_eq!(latch, expected, "{context}: {key}");
            }
        }
    }

    /// Runs the sequences of `seed` through the model and the script (with
    /// `mutant`, if any); panics at the first disagreement.
    fn agree_step_by_step(
        redis: &RedisServer,
        seed: u64,
        mutant: Option<Mutant>,
    ) -> std::collections::BTreeMap<String, usize> {
        let mut rng = Rng::new(seed);
        let mut conn = redis::Client::open(redis.url())
            .unwrap()
            .get_connection()
            .unwrap();
        let script = |file: &str| load(file, mutant);
        let (script, settle) = (script("expirable.lua"), script("acquire_cancel.lua"));
        let bounds = Bounds::leases();
        let mut replies = std::collections::BTreeMap::<String, usize>::new();
        for sequence in 0..SEQUENCES {
            let _: () = redis::cmd("FLUSHALL").query(&mut conn).unwrap();
            let _: () = conn.set(NAME, TOTAL).unwrap();
            let mut model = Server::with(TOTAL);
            let mut steps = Vec::new();
            for _ in 0..STEPS {
                let step = draw(&mut rng);
                steps.push(step);
                let context = format!("seed {seed}, sequence {sequence}, steps {steps:?}");
                let real = run(&mut conn, &script, &settle, step);
                let modelled = model_run(&mut model, step, &bounds);
                assert_eq!(real, modelled, "{context}: the reply");
                compare(&mut conn, &model, &context);
                match real {
                    Some(Got::Reply(reply)) => {
                        *replies.entry(format!("{reply:?}")).or_default() += 1
                    }
                    Some(Got::Count(n)) if n > 0 => {
                        *replies.entry(format!("{step:?}")).or_default() += 1
                    }
                    _ => {}
                }
            }
        }
        println!(
            "expirable model conformance (seed {seed}, mutant: {mutant:?}): {SEQUENCES} sequences \
             of {STEPS} steps agree; replies seen: {replies:?}"
        );
        replies
    }

    #[test]
    fn the_expirable_model_and_the_script_agree_step_by_step() {
        let seed = announced_seed("expirable model conformance");
        let redis = RedisServer::start();
        let replies = agree_step_by_step(&redis, seed, None);
        for reply in [
            "Taken(true)",
            "Taken(false)",
            "Released(true)",
            "Released(false)",
            "Settled(true)",
            "Settled(false)",
            "Read(\"available\")",
            "Read(\"out\")",
            "Read(\"total\")",
            "Drain",
        ] {
            assert!(
                replies.contains_key(reply),
                "no step replied {reply}: {replies:?}"
            );
        }
    }

    /// One-line bugs in the permit-expirable semaphore's script.
    const MUTANTS: &[(Mutant, usize)] = &[
        (
            Mutant {
                file: "expirable.lua",
                from: "redis.call('zadd', KEYS[2], at, id)",
                nth: 1,
                to: "redis.call('zadd', KEYS[2], forever, id)",
                what: "a taken permit never runs out",
            },
            1,
        ),
        (
            Mutant {
                file: "expirable.lua",
                from: "local expired = redis.call('zremrangebyscore', KEYS[2], '-inf', now)",
                nth: 1,
                to: "local expired = 0",
                what: "a permit whose lease ended is never taken back",
            },
            1,
        ),
        (
            Mutant {
                file: "expirable.lua",
                from: "if latch == '1' then",
                nth: 1,
                to: "if false then",
                what: "a resent take takes again",
            },
            1,
        ),
        (
            Mutant {
                file: "expirable.lua",
                from: "redis.call('set', KEYS[4], 1, 'px', ARGV[6])",
                nth: 1,
                to: "",
                what: "a take writes no latch",
            },
            1,
        ),
        (
            Mutant {
                file: "expirable.lua",
                from: "redis.call('zrem', KEYS[2], id)",
                nth: 1,
                to: "",
                what: "a released permit stays out",
            },
            1,
        ),
        (
            Mutant {
                file: "expirable.lua",
                from: "if redis.call('zscore', KEYS[2], id) == false then",
                nth: 2,
                to: "if false then",
                what: "a release of a permit not out gives one back",
            },
            2,
        ),
        (
            Mutant {
                file: "expirable.lua",
                from: "return available() + redis.call('zcard', KEYS[2])",
                nth: 1,
                to: "return available()",
                what: "the total leaves out the permits taken",
            },
            1,
        ),
        (
            Mutant {
                file: "expirable.lua",
                from: "redis.call('decrby', KEYS[1], n)",
                nth: 1,
                to: "",
                what: "a drain takes nothing",
            },
            1,
        ),
    ];

    #[test]
    fn every_mutant_of_the_expirable_script_is_caught() {
        let redis = RedisServer::start();
        every_mutant_is_caught(
            "expirable model conformance, mutants",
            MUTANTS,
            &redis,
            |seed, mutant| {
                agree_step_by_step(&redis, seed, mutant);
            },
        );
    }
}

/// The fair lock's scripts and its queue's model ([`fair::Server`] with a
/// [`fair::Clock`]), with the wake-up messages each step publishes, while
/// time passes: ticks move every TTL closer and every waiter's score
/// lower, and the scores are compared with the model's.
mod fair_scripts {
    use std::collections::BTreeMap;
    use std::time::Duration;

    use ferrisson_model::fair::{Clock, Mutation, Reply, Server};
    use ferrisson_model::{ClientId, Latch, ReqId};
    use redis::{Commands, Script, Value};

    use super::rng::{announced_seed, Rng};
    use super::server::RedisServer;
    use super::{
        every_mutant_is_caught, field, id, load, ticks_ms as ms, time_agrees as agrees,
        values_and_pttls, LockInfo, Mutant, SEQUENCES, STEPS, TICK_MS, TTL_SLACK_MS,
    };

    const NAME: &str = "model-fair";
    const QUEUE: &str = "redisson_lock_queue:{model-fair}";
    const TIMEOUTS: &str = "redisson_lock_timeout:{model-fair}";
    const CHANNEL: &str = "redisson_lock__channel:{model-fair}";
    /// The lease, the waiter timeout and the latches' TTL, in ticks: a
    /// waiter counts as dead one tick after the one ahead of it would.
    const LEASE: i32 = 2;
    const WAITER: i32 = 1;
    const LATCH_TTL: i32 = 4;
    const CLIENTS: u8 = 3;
    const ACQUIRES: u8 = 3;
    const RELEASES: u8 = 2;

    fn acquire_latch(req: ReqId) -> String {
        format!("ferrisson_acquire_latch:{{{NAME}}}:{}", id(req))
    }

    fn unlock_latch(req: ReqId) -> String {
        format!("redisson_unlock_latch:{{{NAME}}}:{}", id(req))
    }

    #[derive(Clone, Copy, Debug)]
    enum Step {
        /// An acquire; `false`: one attempt that does not join the line.
        Acquire(ReqId, bool),
        Release(ReqId),
        Leave(ClientId),
        /// `fair_force_unlock.lua`: the lock opened whoever holds it.
        ForceUnlock,
        /// A tick passes: TTLs a tick shorter, scores a tick lower.
        Tick,
    }

    fn draw(rng: &mut Rng) -> Step {
        let client = rng.below(CLIENTS as u64) as ClientId;
        match rng.below(13) {
            0..=4 => Step::Acquire(
                ReqId {
                    client,
                    seq: 1 + rng.below(ACQUIRES as u64) as u8,
                },
                rng.below(5) > 0,
            ),
            5..=7 => Step::Release(ReqId {
                client,
                seq: 100 + rng.below(RELEASES as u64) as u8,
            }),
            8 | 9 => Step::Leave(client),
            10 => Step::ForceUnlock,
            _ => Step::Tick,
        }
    }

    struct Scripts {
        acquire: Script,
        release: Script,
        leave: Script,
        force_unlock: Script,
        lock_info: Script,
    }

    impl Scripts {
        fn load(mutant: Option<Mutant>) -> Scripts {
            let script = |file: &str| load(file, mutant);
            Scripts {
                acquire: script("fair_acquire.lua"),
                release: script("fair_release.lua"),
                leave: script("fair_leave.lua"),
                force_unlock: script("fair_force_unlock.lua"),
                lock_info: script("lock_info.lua"),
            }
        }

        /// Runs `step`; a refusal's wait in ms with it.
        fn run(&self, conn: &mut redis::Connection, step: Step) -> Option<(Reply, Option<i64>)> {
            let reply = match step {
                Step::Acquire(req, join) => {
                    let reply: Value = self
                        .acquire
                        .key(NAME)
                        .key(QUEUE)
                        .key(TIMEOUTS)
                        .key(acquire_latch(req))
                        .arg(ms(LEASE))
                        .arg(field(req.client))
                        .arg(ms(WAITER))
                        .arg(u8::from(join))
                        .arg(ms(LATCH_TTL))
                        .arg(1)
                        .invoke(conn)
                        .unwrap();
                    match reply {
                        Value::Nil => (Reply::Granted, None),
                        Value::Int(-2) => (Reply::Spent, None),
                        Value::Int(wait) => (Reply::Refused, Some(wait)),
                        other => panic!("{step:?}: a reply the model has no word for: {other:?}"),
                    }
                }
                Step::Release(req) => {
                    let reply: Option<i64> = self
                        .release
                        .key(NAME)
                        .key(QUEUE)
                        .key(TIMEOUTS)
                        .key(CHANNEL)
                        .key(unlock_latch(req))
                        .arg(0)
                        .arg(ms(LEASE))
                        .arg(field(req.client))
                        .arg("publish")
                        .arg(ms(LATCH_TTL))
                        .invoke(conn)
                        .unwrap();
                    (
                        reply.map_or(Reply::NotHeld, |n| Reply::Released(n as u8)),
                        None,
                    )
                }
                Step::Leave(client) => {
                    let left: i64 = self
                        .leave
                        .key(QUEUE)
                        .key(TIMEOUTS)
                        .key(NAME)
                        .key(CHANNEL)
                        .arg(field(client))
                        .arg(ms(WAITER))
                        .arg(0)
                        .arg("publish")
                        .invoke(conn)
                        .unwrap();
                    (Reply::Left(left == 1), None)
                }
                Step::ForceUnlock => {
                    let opened: i64 = self
                        .force_unlock
                        .key(NAME)
                        .key(QUEUE)
                        .key(TIMEOUTS)
                        .key(CHANNEL)
                        .arg(0)
                        .arg("publish")
                        .invoke(conn)
                        .unwrap();
                    (Reply::Released(opened as u8), None)
                }
                Step::Tick => {
                    tick(conn);
                    return None;
                }
            };
            Some(reply)
        }
    }

    /// A tick passes on Redis: every key with a TTL ends a tick sooner
    /// (or is gone), and every waiter's score is a tick lower, which to a
    /// script comparing scores with the server's clock is the same as the
    /// clock moving on.
    fn tick(conn: &mut redis::Connection) {
        super::tick(conn);
        let waiters: Vec<String> = conn.zrange(TIMEOUTS, 0, -1).unwrap();
        for waiter in waiters {
            let _: f64 = conn.zincr(TIMEOUTS, &waiter, -(TICK_MS as i64)).unwrap();
        }
    }

    fn model_run(
        server: &mut Server,
        step: Step,
    ) -> (Option<(Reply, Option<i32>)>, Option<ClientId>) {
        match step {
            Step::Acquire(req, join) => (
                Some(server.acquire_waiting(req, join, Mutation::None)),
                None,
            ),
            Step::Release(req) => {
                let (reply, woken) = server.release(req);
                (Some((reply, None)), woken)
            }
            Step::Leave(client) => {
                let (reply, woken) = server.leave(client, Mutation::None);
                (Some((reply, None)), woken)
            }
            Step::ForceUnlock => {
                let (reply, woken) = server.force_unlock();
                (Some((reply, None)), woken)
            }
            Step::Tick => {
                server.tick();
                (None, None)
            }
        }
    }

    /// `lock_info.lua` (`fair`) reads what the keys hold, as read one by
    /// one: the hash, its PTTL (within the time between the reads), the
    /// queue, the timeout set with its scores, the server's time.
    fn lock_info_agrees(conn: &mut redis::Connection, lock_info: &Script, context: &str) {
        type Read = (
            Vec<(String, String)>,
            i64,
            Vec<String>,
            Vec<(String, i64)>,
            (i64, i64),
        );
        let (hash, pttl, queue, scores, now, token): LockInfo = lock_info
            .key(NAME)
            .key(QUEUE)
            .key(TIMEOUTS)
            .arg("fair")
            .invoke(conn)
            .unwrap();
        let (read_hash, read_pttl, read_queue, read_scores, (seconds, micros)): Read =
            redis::pipe()
                .hgetall(NAME)
                .pttl(NAME)
                .lrange(QUEUE, 0, -1)
                .zrange_withscores(TIMEOUTS, 0, -1)
                .cmd("TIME")
                .query(conn)
                .unwrap();
        let read_now = seconds * 1000 + micros / 1000;
        assert_eq!(
            (hash, queue, scores, token),
            (read_hash, read_queue, read_scores, -1),
            "{context}: lock_info's hash, queue, scores, token"
        );
        assert!(
            match (pttl, read_pttl) {
                (a, b) if a < 0 || b < 0 => a == b,
                (a, b) => a >= b && a - b <= TTL_SLACK_MS,
            },
            "{context}: lock_info's PTTL {pttl}, read after it {read_pttl}"
        );
        assert!(
            now <= read_now && read_now - now <= TTL_SLACK_MS,
            "{context}: lock_info's time {now}, read after it {read_now}"
        );
    }

    fn compare(conn: &mut redis::Connection, model: &Server, context: &str) {
        let clock = model.clock.as_ref().unwrap();
        let now = clock.now;
        let hash: Vec<(String, String)> = conn.hgetall(NAME).unwrap();
        let expected: Vec<(String, String)> = model
            .hold
            .iter()
            .map(|(owner, count)| (field(*owner), count.to_string()))
            .collect();
        assert_eq!(hash, expected, "{context}: the lock hash");
        if model.hold.is_some() {
            let pttl: i64 = conn.pttl(NAME).unwrap();
            assert!(
                agrees(pttl, clock.hold_ends - now),
                "{context}: the hold's TTL is {pttl} ms, the model's ends in {} ticks",
                clock.hold_ends - now
            );
        }
        let queue: Vec<String> = conn.lrange(QUEUE, 0, -1).unwrap();
        let expected: Vec<String> = model.queue.iter().map(|c| field(*c)).collect();
        assert_eq!(queue, expected, "{context}: the queue");
        // Each waiter's score, as time left by the server's clock.
        let (scores, (seconds, micros)): (Vec<(String, i64)>, (i64, i64)) = redis::pipe()
            .zrange_withscores(TIMEOUTS, 0, -1)
            .cmd("TIME")
            .query(conn)
            .unwrap();
        let server_now = seconds * 1000 + micros / 1000;
        let mut members: Vec<&String> = scores.iter().map(|(m, _)| m).collect();
        members.sort();
        let mut expected_members: Vec<&String> = expected.iter().collect();
        expected_members.sort();
        assert_eq!(
            members, expected_members,
            "{context}: the timeout set's members"
        );
        for (member, score) in &scores {
            let at = expected.iter().position(|w| w == member).unwrap();
            let modelled = clock.scores[at] - now;
            assert!(
                agrees(score - server_now, modelled),
                "{context}: {member}'s score is {} ms from now, the model's {modelled} ticks",
                score - server_now
            );
        }
        let keys: usize = redis::cmd("DBSIZE").query(conn).unwrap();
        let modelled = usize::from(model.hold.is_some())
            + 2 * usize::from(!model.queue.is_empty())
            + model.acquire_latches.len()
            + model.unlock_latches.len();
        assert_eq!(keys, modelled, "{context}: the number of keys");
        let mut latches = Vec::new();
        for client in 0..CLIENTS {
            for seq in 1..=ACQUIRES {
                let req = ReqId { client, seq };
                let expected = model.latch(req).map(|latch| match latch {
                    Latch::Granted => "1".to_owned(),
                    Latch::Cancelled => "x".to_owned(),
                });
                let ends = clock.acquire_ends.iter().find(|(r, _)| *r == req);
                latches.push((acquire_latch(req), expected, ends.map(|(_, end)| *end)));
            }
            for seq in 100..100 + RELEASES {
                let req = ReqId { client, seq };
                let expected = model.unlock_latches.iter().find(|(r, _)| *r == req);
                let ends = clock.unlock_ends.iter().find(|(r, _)| *r == req);
                latches.push((
                    unlock_latch(req),
                    expected.map(|(_, first)| first.to_string()),
                    ends.map(|(_, end)| *end),
                ));
            }
        }
        let keys: Vec<String> = latches.iter().map(|(key, _, _)| key.clone()).collect();
        let read = values_and_pttls(conn, &keys);
        for ((key, expected, ends), (value, pttl)) in latches.into_iter().zip(read) {
            assert_eq!(value, expected, "{context}: {key}");
            if let (Some(_), Some(end)) = (expected, ends) {
                assert!(
                    agrees(pttl, end - now),
                    "{context}: {key}'s TTL is {pttl} ms, the model's ends in {} ticks",
                    end - now
                );
            }
        }
    }

    /// The owners woken by the step just run: every message on an owner's
    /// channel before the marker published after the step.
    fn woken(conn: &mut redis::Connection, pubsub: &mut redis::PubSub<'_>) -> Vec<ClientId> {
        let marker = format!("{CHANNEL}:marker");
        let _: i64 = conn.publish(&marker, "end").unwrap();
        let mut woken = Vec::new();
        loop {
            let message = pubsub.get_message().unwrap();
            let channel = message.get_channel_name().to_owned();
            if channel == marker {
                return woken;
            }
            let owner = (0..CLIENTS)
                .find(|c| channel == format!("{CHANNEL}:{}", field(*c)))
                .unwrap_or_else(|| panic!("a message on {channel}"));
            woken.push(owner);
        }
    }

    /// Runs the sequences of `seed` through the model and through the
    /// scripts (with `mutant`, if any) on `redis`, and panics at the first
    /// disagreement. Returns what the steps met.
    fn agree_step_by_step(
        redis: &RedisServer,
        seed: u64,
        mutant: Option<Mutant>,
    ) -> BTreeMap<String, usize> {
        let mut rng = Rng::new(seed);
        let client = redis::Client::open(redis.url()).unwrap();
        let mut conn = client.get_connection().unwrap();
        let mut subscriber = client.get_connection().unwrap();
        subscriber
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        // One subscription for the run (a dropped `PubSub` unsubscribes).
        let mut pubsub = subscriber.as_pubsub();
        pubsub.psubscribe(format!("{CHANNEL}:*")).unwrap();
        let scripts = Scripts::load(mutant);
        let mut seen = BTreeMap::<String, usize>::new();
        // The first sequences open with the rarest cases: the first in
        // line leaves while the lock is free, and wakes the next; a lock
        // forced open while the first in line is dead (A holds, B and C
        // wait; A's lease ends, B takes the lock, which moves C's score a
        // tick sooner; a tick later C is dead and the lock still held).
        let req = |client, seq| ReqId { client, seq };
        let openings: [&[Step]; 2] = [
            &[
                Step::Acquire(req(0, 1), true),
                Step::Acquire(req(1, 1), true),
                Step::Acquire(req(2, 1), true),
                Step::Release(req(0, 100)),
                Step::Leave(1),
            ],
            &[
                Step::Acquire(req(0, 1), true),
                Step::Acquire(req(1, 1), true),
                Step::Acquire(req(2, 1), true),
                Step::Tick,
                Step::Tick,
                Step::Acquire(req(1, 2), true),
                Step::Tick,
                Step::ForceUnlock,
            ],
        ];
        for sequence in 0..SEQUENCES {
            let _: () = redis::cmd("FLUSHALL").query(&mut conn).unwrap();
            let mut model = Server {
                clock: Some(Clock::new(LEASE, WAITER, LATCH_TTL)),
                ..Server::default()
            };
            let mut steps = Vec::new();
            for i in 0..STEPS {
                let opening = openings.get(sequence).and_then(|steps| steps.get(i));
                let step = opening.copied().unwrap_or_else(|| draw(&mut rng));
                steps.push(step);
                let context = format!("seed {seed}, sequence {sequence}, steps {steps:?}");
                let before = model.clone();
                let real = scripts.run(&mut conn, step);
                let real_woken = woken(&mut conn, &mut pubsub);
                let (modelled, modelled_woken) = model_run(&mut model, step);
                assert_eq!(
                    real.map(|(reply, _)| reply),
                    modelled.map(|(reply, _)| reply),
                    "{context}: the reply"
                );
                if let (Some((_, Some(real))), Some((_, Some(ticks)))) = (real, modelled) {
                    assert!(
                        agrees(real, ticks),
                        "{context}: the wait is {real} ms, the model's {ticks} ticks"
                    );
                }
                assert_eq!(
                    real_woken,
                    Vec::from_iter(modelled_woken),
                    "{context}: the owners woken"
                );
                compare(&mut conn, &model, &context);
                lock_info_agrees(&mut conn, &scripts.lock_info, &context);
                let Some((real, _)) = real else {
                    if !before.queue.is_empty() {
                        *seen.entry("tick with waiters".to_owned()).or_default() += 1;
                    }
                    continue;
                };
                let forced = if matches!(step, Step::ForceUnlock) {
                    "forced "
                } else {
                    ""
                };
                let kind = match (real, real_woken.is_empty()) {
                    (Reply::Released(_) | Reply::NotHeld | Reply::Left(_), false) => {
                        format!("{forced}{real:?} waking")
                    }
                    _ => format!("{forced}{real:?}"),
                };
                *seen.entry(kind).or_default() += 1;
                // Waiters that were dead at the head of the line, gone.
                let actor = match step {
                    Step::Acquire(req, _) | Step::Release(req) => Some(req.client),
                    _ => None,
                };
                if before
                    .queue
                    .iter()
                    .any(|w| Some(*w) != actor && !model.queue.contains(w))
                {
                    *seen.entry("purged".to_owned()).or_default() += 1;
                }
                if real == Reply::Granted && before.hold.is_none() && !model.queue.is_empty() {
                    *seen
                        .entry("granted, the line moving up".to_owned())
                        .or_default() += 1;
                }
            }
        }
        println!(
            "fair model conformance (seed {seed}, mutant: {mutant:?}): {SEQUENCES} sequences of \
             {STEPS} steps agree; met: {seen:?}"
        );
        seen
    }

    #[test]
    fn the_fair_model_and_the_scripts_agree_step_by_step() {
        let seed = announced_seed("fair model conformance");
        let redis = RedisServer::start();
        let seen = agree_step_by_step(&redis, seed, None);
        for what in [
            "Granted",
            "Refused",
            "Spent",
            "Released(0)",
            "Released(1)",
            "Released(1) waking",
            "NotHeld",
            "NotHeld waking",
            "Left(true)",
            "Left(true) waking",
            "Left(false)",
            "purged",
            "forced Released(1) waking",
            "forced Released(0)",
            "granted, the line moving up",
            "tick with waiters",
        ] {
            assert!(seen.contains_key(what), "no step met {what}: {seen:?}");
        }
    }

    /// One-line bugs in the fair lock's scripts, each a plausible one.
    const MUTANTS: &[(Mutant, usize)] = &[
        (
            Mutant {
                file: "fair_acquire.lua",
                from: "redis.call('zincrby', KEYS[3], -wait, waiter)",
                nth: 1,
                to: "",
                what: "a fair grant does not move the other waiters' scores",
            },
            1,
        ),
        (
            Mutant {
                file: "fair_acquire.lua",
                from: "if score ~= nil and score > now then",
                nth: 1,
                to: "if true then",
                what: "a fair acquire never purges dead waiters",
            },
            1,
        ),
        (
            Mutant {
                file: "fair_release.lua",
                from: "if score ~= nil and score > now then",
                nth: 1,
                to: "if true then",
                what: "a fair release never purges dead waiters",
            },
            1,
        ),
        (
            Mutant {
                file: "fair_acquire.lua",
                from: "ahead = math.max(0, tonumber(last_score) - now)",
                nth: 1,
                to: "ahead = math.max(0, tonumber(last_score))",
                what: "a new waiter's score counts the one ahead's from the epoch",
            },
            1,
        ),
        (
            Mutant {
                file: "fair_acquire.lua",
                from: "    mine = ahead + wait + now",
                nth: 1,
                to: "    mine = wait + now",
                what: "a new waiter's score ignores the waiters ahead",
            },
            1,
        ),
        (
            Mutant {
                file: "fair_acquire.lua",
                from: "    redis.call('pexpire', KEYS[1], ARGV[1])",
                nth: 2,
                to: "",
                what: "a fair re-entry keeps the old TTL",
            },
            2,
        ),
        (
            Mutant {
                file: "fair_acquire.lua",
                from: "    return pttl",
                nth: 1,
                to: "    return 1",
                what: "a refusal while held names no wait",
            },
            1,
        ),
        (
            Mutant {
                file: "fair_release.lua",
                from: "    redis.call('pexpire', KEYS[1], ARGV[2])",
                nth: 1,
                to: "",
                what: "a fair release that leaves holds keeps the old TTL",
            },
            1,
        ),
        (
            Mutant {
                file: "fair_release.lua",
                from: "        redis.call(ARGV[4], KEYS[4] .. ':' .. head, ARGV[1])",
                nth: 1,
                to: "",
                what: "a release of a lock already gone wakes nobody",
            },
            1,
        ),
        (
            Mutant {
                file: "fair_leave.lua",
                from: "redis.call('zincrby', KEYS[2], -tonumber(ARGV[2]), queue[i])",
                nth: 1,
                to: "",
                what: "a leave does not move the waiters behind",
            },
            1,
        ),
        (
            Mutant {
                file: "fair_leave.lua",
                from: "if at == 1 and redis.call('exists', KEYS[3]) == 0 and queue[2] ~= nil then",
                nth: 1,
                to: "if false then",
                what: "a first in line that leaves a free lock wakes nobody",
            },
            1,
        ),
        (
            Mutant {
                file: "fair_force_unlock.lua",
                from: "if score ~= nil and score > now then",
                nth: 1,
                to: "if true then",
                what: "a fair lock forced open wakes a dead waiter",
            },
            1,
        ),
        (
            Mutant {
                file: "fair_force_unlock.lua",
                from: "redis.call(ARGV[2], KEYS[4] .. ':' .. next, ARGV[1])",
                nth: 1,
                to: "",
                what: "a fair lock forced open wakes nobody",
            },
            1,
        ),
        (
            Mutant {
                file: "lock_info.lua",
                from: "scores = redis.call('zrange', KEYS[3], 0, -1, 'withscores')",
                nth: 1,
                to: "scores = redis.call('zrange', KEYS[3], 0, -1)",
                what: "the inspector reads a fair lock's waiters without their scores",
            },
            1,
        ),
    ];

    /// Each mutant is caught: the comparison that passes on `lua/` as it
    /// is fails on it, with the same seed.
    #[test]
    fn every_mutant_of_the_fair_locks_scripts_is_caught() {
        let redis = RedisServer::start();
        every_mutant_is_caught(
            "fair model conformance, mutants",
            MUTANTS,
            &redis,
            |seed, mutant| {
                agree_step_by_step(&redis, seed, mutant);
            },
        );
    }
}

/// The read-write lock's scripts and its model ([`rwlock::Server`] with a
/// [`rwlock::Clock`]): read and write acquires (some past their
/// deadline), releases, settles, batched read renewals of mixed owners,
/// and ticks, with each read hold's timeout key, the hash's TTL that the
/// releases set from them, and the messages compared.
mod rwlock_scripts {
    use std::collections::BTreeMap;
    use std::time::Duration;

    use ferrisson_model::rwlock::{Clock, Mutation, Reply, Server, Side};
    use ferrisson_model::{ClientId, Latch, ReqId};
    use redis::{Commands, Script, Value};

    use super::rng::{announced_seed, Rng};
    use super::server::RedisServer;
    use super::{
        every_mutant_is_caught, field, id, load, published, ticks_ms as ms, time_agrees as agrees,
        values_and_pttls, Mutant, SEQUENCES, STEPS,
    };

    const NAME: &str = "model-rw";
    const PREFIX: &str = "{model-rw}";
    const CHANNEL: &str = "redisson_rwlock:{model-rw}";
    const MARKER: &str = "redisson_rwlock:{model-rw}:marker";
    /// Each step's lease is drawn from 1 to `LEASES` ticks (guards may
    /// have leases of their own), the latches' TTL is above them all.
    const LEASES: i32 = 3;
    const LATCH_TTL: i32 = 4;
    const CLIENTS: u8 = 3;
    /// Request ids: reads 1-3, writes 11-13, read releases 100-101, write
    /// releases 110-111 (a request id is one call's).
    const IDS: u8 = 3;
    const RELEASE_IDS: u8 = 2;

    fn write_field(client: ClientId) -> String {
        format!("{}:write", field(client))
    }

    fn timeout_prefix(client: ClientId) -> String {
        format!("{PREFIX}:{}:rwlock_timeout", field(client))
    }

    fn acquire_latch(req: ReqId) -> String {
        format!("ferrisson_acquire_latch:{PREFIX}:{}", id(req))
    }

    fn unlock_latch(req: ReqId) -> String {
        format!("redisson_unlock_latch:{PREFIX}:{}", id(req))
    }

    #[derive(Clone, Copy, Debug)]
    enum Step {
        /// An acquire; `true`: its deadline long past.
        Acquire(Side, ReqId, bool),
        Release(Side, ReqId),
        Settle(ReqId),
        /// A batched read renewal: one owner, and another in the same call.
        Renew(ClientId, Option<ClientId>),
        Tick,
    }

    fn draw(rng: &mut Rng) -> Step {
        let client = rng.below(CLIENTS as u64) as ClientId;
        let side = if rng.below(2) == 0 {
            Side::Read
        } else {
            Side::Write
        };
        let base = if side == Side::Read { 0 } else { 10 };
        let acquire = ReqId {
            client,
            seq: base + 1 + rng.below(IDS as u64) as u8,
        };
        match rng.below(14) {
            0..=4 => Step::Acquire(side, acquire, rng.below(12) == 0),
            5..=8 => Step::Release(
                side,
                ReqId {
                    client,
                    seq: 100 + base + rng.below(RELEASE_IDS as u64) as u8,
                },
            ),
            9 => Step::Settle(acquire),
            10 | 11 => {
                let other = rng.below(CLIENTS as u64) as ClientId;
                Step::Renew(client, (rng.below(2) == 0).then_some(other))
            }
            _ => Step::Tick,
        }
    }

    /// A step's outcome: the reply, and a time it names (a refusal's wait,
    /// the longest read hold a release left, in ms; the positions a
    /// renewal named gone).
    #[derive(Clone, Debug, PartialEq)]
    struct Outcome {
        reply: Reply,
        time: Option<i64>,
        gone: Vec<u8>,
    }

    struct Scripts {
        read_acquire: Script,
        write_acquire: Script,
        read_release: Script,
        write_release: Script,
        renew_read: Script,
        settle: Script,
    }

    impl Scripts {
        fn load(mutant: Option<Mutant>) -> Scripts {
            let script = |file: &str| load(file, mutant);
            Scripts {
                read_acquire: script("read_acquire.lua"),
                write_acquire: script("write_acquire.lua"),
                read_release: script("read_release.lua"),
                write_release: script("write_release.lua"),
                renew_read: script("renew_read.lua"),
                settle: script("acquire_cancel.lua"),
            }
        }

        fn run(&self, conn: &mut redis::Connection, step: Step, lease: i32) -> Option<Outcome> {
            let outcome = |reply, time| Outcome {
                reply,
                time,
                gone: Vec::new(),
            };
            let reply = match step {
                Step::Acquire(side, req, late) => {
                    let (mine, other) = match side {
                        Side::Read => (field(req.client), write_field(req.client)),
                        Side::Write => (write_field(req.client), field(req.client)),
                    };
                    let mut call = match side {
                        Side::Read => self.read_acquire.key(NAME),
                        Side::Write => self.write_acquire.key(NAME),
                    };
                    if side == Side::Read {
                        call.key(timeout_prefix(req.client));
                    }
                    let reply: Value = call
                        .key(acquire_latch(req))
                        .arg(ms(lease))
                        .arg(mine)
                        .arg(other)
                        .arg(ms(LATCH_TTL))
                        .arg(u8::from(late))
                        .invoke(conn)
                        .unwrap();
                    match reply {
                        Value::Nil => outcome(Reply::Granted, None),
                        Value::Int(-2) => outcome(Reply::Spent, None),
                        Value::Int(-3) => outcome(Reply::NoUpgrade, None),
                        Value::Int(-5) => outcome(Reply::TooLate, None),
                        Value::Int(wait) if wait >= 0 => outcome(Reply::Refused, Some(wait)),
                        other => panic!("{step:?}: a reply the model has no word for: {other:?}"),
                    }
                }
                Step::Release(Side::Read, req) => {
                    let reply: Option<i64> = self
                        .read_release
                        .key(NAME)
                        .key(CHANNEL)
                        .key(timeout_prefix(req.client))
                        .key(PREFIX)
                        .key(unlock_latch(req))
                        .arg(0)
                        .arg(field(req.client))
                        .arg("publish")
                        .arg(ms(LATCH_TTL))
                        .invoke(conn)
                        .unwrap();
                    match reply {
                        None => outcome(Reply::NotHeld, None),
                        Some(left) if left < 0 => outcome(Reply::Released(0), Some(-left)),
                        Some(n) => outcome(Reply::Released(n as u8), None),
                    }
                }
                Step::Release(Side::Write, req) => {
                    let reply: Option<i64> = self
                        .write_release
                        .key(NAME)
                        .key(CHANNEL)
                        .key(unlock_latch(req))
                        .key(PREFIX)
                        .arg(1)
                        .arg(ms(lease))
                        .arg(write_field(req.client))
                        .arg("publish")
                        .arg(ms(LATCH_TTL))
                        .invoke(conn)
                        .unwrap();
                    outcome(
                        reply.map_or(Reply::NotHeld, |n| Reply::Released(n as u8)),
                        None,
                    )
                }
                Step::Settle(req) => {
                    let (left, _granted): (i64, i64) = self
                        .settle
                        .key(acquire_latch(req))
                        .arg(ms(LATCH_TTL))
                        .invoke(conn)
                        .unwrap();
                    outcome(Reply::Settled(left >= 0), None)
                }
                Step::Renew(first, second) => {
                    let owners: Vec<ClientId> =
                        [Some(first), second].into_iter().flatten().collect();
                    let mut call = self.renew_read.prepare_invoke();
                    for owner in &owners {
                        call.key(NAME).key(timeout_prefix(*owner));
                    }
                    call.arg(ms(lease));
                    for owner in &owners {
                        call.arg(field(*owner));
                    }
                    let gone: Vec<u8> = call.invoke(conn).unwrap();
                    return Some(Outcome {
                        reply: Reply::Settled(gone.is_empty()),
                        time: None,
                        gone,
                    });
                }
                Step::Tick => {
                    super::tick(conn);
                    return None;
                }
            };
            Some(reply)
        }
    }

    fn model_run(
        server: &mut Server,
        step: Step,
    ) -> (Option<(Outcome, Option<i32>)>, Option<&'static str>) {
        let m = Mutation::None;
        let plain = |reply| Outcome {
            reply,
            time: None,
            gone: Vec::new(),
        };
        match step {
            Step::Acquire(side, req, late) => {
                let reply = server.acquire_with(side, req, m, late);
                let wait = match reply {
                    Reply::Refused => server.time_left(),
                    _ => None,
                };
                (Some((plain(reply), wait)), None)
            }
            Step::Release(side, req) => {
                let (reply, published) = server.release(side, req, m);
                let longest = match reply {
                    Reply::Released(0) => server.longest_replied(req),
                    _ => None,
                };
                let message = match (published, side) {
                    (false, _) => None,
                    (true, Side::Read) => Some("0"),
                    (true, Side::Write) => Some("1"),
                };
                (Some((plain(reply), longest)), message)
            }
            Step::Settle(req) => (Some((plain(server.settle(req)), None)), None),
            Step::Renew(first, second) => {
                let mut gone = Vec::new();
                for (at, owner) in [Some(first), second].into_iter().flatten().enumerate() {
                    if !server.renew_read(owner) {
                        gone.push(at as u8 + 1);
                    }
                }
                let reply = Reply::Settled(gone.is_empty());
                (
                    Some((
                        Outcome {
                            reply,
                            time: None,
                            gone,
                        },
                        None,
                    )),
                    None,
                )
            }
            Step::Tick => {
                server.tick();
                (None, None)
            }
        }
    }

    fn compare(conn: &mut redis::Connection, model: &Server, context: &str) {
        let clock = model.clock.as_ref().unwrap();
        let now = clock.now;
        let mut hash: Vec<(String, String)> = conn.hgetall(NAME).unwrap();
        hash.sort();
        let mut expected: Vec<(String, String)> = Vec::new();
        if let Some(mode) = model.mode {
            let mode = if mode == Side::Read { "read" } else { "write" };
            expected.push(("mode".to_owned(), mode.to_owned()));
        }
        for (owner, n) in &model.readers {
            expected.push((field(*owner), n.to_string()));
        }
        if let Some((owner, n)) = model.writer {
            expected.push((write_field(owner), n.to_string()));
        }
        expected.sort();
        assert_eq!(hash, expected, "{context}: the lock hash");
        if model.mode.is_some() {
            let pttl: i64 = conn.pttl(NAME).unwrap();
            assert!(
                agrees(pttl, clock.hash_ends - now),
                "{context}: the hash's TTL is {pttl} ms, the model's ends in {} ticks",
                clock.hash_ends - now
            );
        }
        // The read holds' timeout keys.
        let mut keys: Vec<String> = conn.keys(format!("{PREFIX}:*:rwlock_timeout:*")).unwrap();
        keys.sort();
        let mut holds: Vec<(String, i32)> = clock
            .holds
            .iter()
            .map(|(owner, n, end)| (format!("{}:{n}", timeout_prefix(*owner)), end - now))
            .collect();
        holds.sort();
        assert_eq!(
            keys,
            holds.iter().map(|(k, _)| k.clone()).collect::<Vec<_>>(),
            "{context}: the read holds' timeout keys"
        );
        for (key, left) in &holds {
            let pttl: i64 = conn.pttl(key).unwrap();
            assert!(
                agrees(pttl, *left),
                "{context}: {key}'s TTL is {pttl} ms, the model's ends in {left} ticks"
            );
        }
        let count: usize = redis::cmd("DBSIZE").query(conn).unwrap();
        let modelled = usize::from(model.mode.is_some())
            + clock.holds.len()
            + model.acquire_latches.len()
            + model.unlock_latches.len();
        assert_eq!(count, modelled, "{context}: the number of keys");
        let mut latches = Vec::new();
        for client in 0..CLIENTS {
            for base in [0, 10] {
                for seq in base + 1..=base + IDS {
                    let req = ReqId { client, seq };
                    let expected = model.latch(req).map(|latch| match latch {
                        Latch::Granted => "1".to_owned(),
                        Latch::Cancelled => "x".to_owned(),
                    });
                    let ends = clock.acquire_ends.iter().find(|(r, _)| *r == req);
                    latches.push((acquire_latch(req), expected, ends.map(|(_, e)| *e), None));
                }
                for seq in 100 + base..100 + base + RELEASE_IDS {
                    let req = ReqId { client, seq };
                    let expected = model.unlock_latches.iter().find(|(r, _)| *r == req);
                    let ends = clock.unlock_ends.iter().find(|(r, _)| *r == req);
                    latches.push((
                        unlock_latch(req),
                        expected.map(|(_, first)| first.to_string()),
                        ends.map(|(_, e)| *e),
                        model.longest_replied(req),
                    ));
                }
            }
        }
        let keys: Vec<String> = latches.iter().map(|(key, _, _, _)| key.clone()).collect();
        let read = values_and_pttls(conn, &keys);
        for ((key, expected, ends, longest), (value, pttl)) in latches.into_iter().zip(read) {
            match (longest, &value) {
                // A release that left read holds keeps what it replied:
                // the longest of them, negated, in ms.
                (Some(ticks), Some(kept)) => {
                    let kept: i64 = kept.parse().unwrap();
                    assert!(
                        agrees(-kept, ticks),
                        "{context}: {key} keeps {kept}, the model's longest read hold {ticks} ticks"
                    );
                }
                _ => assert_eq!(value, expected, "{context}: {key}"),
            }
            if let (Some(_), Some(end)) = (&value, ends) {
                assert!(
                    agrees(pttl, end - now),
                    "{context}: {key}'s TTL is {pttl} ms, the model's ends in {} ticks",
                    end - now
                );
            }
        }
    }

    fn agree_step_by_step(
        redis: &RedisServer,
        seed: u64,
        mutant: Option<Mutant>,
    ) -> BTreeMap<String, usize> {
        let mut rng = Rng::new(seed);
        let client = redis::Client::open(redis.url()).unwrap();
        let mut conn = client.get_connection().unwrap();
        let mut subscriber = client.get_connection().unwrap();
        subscriber
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        let mut pubsub = subscriber.as_pubsub();
        pubsub.subscribe(CHANNEL).unwrap();
        pubsub.subscribe(MARKER).unwrap();
        let scripts = Scripts::load(mutant);
        let mut seen = BTreeMap::<String, usize>::new();
        for sequence in 0..SEQUENCES {
            let _: () = redis::cmd("FLUSHALL").query(&mut conn).unwrap();
            let mut model = Server {
                clock: Some(Clock::new(1, LATCH_TTL)),
                ..Server::default()
            };
            let mut steps = Vec::new();
            for _ in 0..STEPS {
                let step = draw(&mut rng);
                let lease = 1 + rng.below(LEASES as u64) as i32;
                steps.push((step, lease));
                let context =
                    format!("seed {seed}, sequence {sequence}, steps (and leases) {steps:?}");
                let before = model.clone();
                model.clock.as_mut().unwrap().lease = lease;
                let real = scripts.run(&mut conn, step, lease);
                let real_published = published::<String>(&mut conn, &mut pubsub, MARKER);
                let (modelled, message) = model_run(&mut model, step);
                assert_eq!(
                    real.as_ref()
                        .map(|o| (o.reply, o.gone.clone(), o.time.is_some())),
                    modelled
                        .as_ref()
                        .map(|(o, time)| (o.reply, o.gone.clone(), time.is_some())),
                    "{context}: the reply"
                );
                if let (
                    Some(Outcome {
                        time: Some(real), ..
                    }),
                    Some((_, Some(ticks))),
                ) = (&real, &modelled)
                {
                    assert!(
                        agrees(*real, *ticks),
                        "{context}: the reply names {real} ms, the model {ticks} ticks"
                    );
                }
                assert_eq!(
                    real_published,
                    Vec::from_iter(message.map(str::to_owned)),
                    "{context}: the messages"
                );
                compare(&mut conn, &model, &context);
                let Some(real) = real else {
                    if before.mode.is_some() {
                        *seen.entry("tick under a hold".to_owned()).or_default() += 1;
                    }
                    continue;
                };
                let side = match step {
                    Step::Acquire(Side::Read, ..) | Step::Release(Side::Read, _) => "read ",
                    Step::Acquire(Side::Write, ..) | Step::Release(Side::Write, _) => "write ",
                    _ => "",
                };
                let mut kind = format!("{side}{:?}", real.reply);
                if real.time.is_some() && matches!(real.reply, Reply::Released(_)) {
                    kind.push_str(" leaving reads");
                }
                if !real_published.is_empty() {
                    kind.push_str(" publishing");
                }
                *seen.entry(kind).or_default() += 1;
                if let Step::Renew(a, Some(b)) = step {
                    if a != b && real.gone.len() == 1 {
                        *seen.entry("mixed batch".to_owned()).or_default() += 1;
                    }
                }
                // A write release that leaves the writer's own read holds.
                if matches!(step, Step::Release(Side::Write, _))
                    && real.reply == Reply::Released(1)
                    && model.mode == Some(Side::Read)
                {
                    *seen.entry("write released to read".to_owned()).or_default() += 1;
                }
            }
        }
        println!(
            "read-write lock conformance (seed {seed}, mutant: {mutant:?}): {SEQUENCES} sequences \
             of {STEPS} steps agree; met: {seen:?}"
        );
        seen
    }

    #[test]
    fn the_read_write_model_and_the_scripts_agree_step_by_step() {
        let seed = announced_seed("read-write lock conformance");
        let redis = RedisServer::start();
        let seen = agree_step_by_step(&redis, seed, None);
        for what in [
            "read Granted",
            "read Refused",
            "read Spent",
            "read TooLate",
            "write Granted",
            "write Refused",
            "write Spent",
            "write NoUpgrade",
            "write TooLate",
            "read Released(0)",
            "read Released(0) leaving reads",
            "read Released(1) publishing",
            "read NotHeld",
            "write Released(0)",
            "write Released(1) publishing",
            "write NotHeld",
            "write released to read",
            "Settled(true)",
            "Settled(false)",
            "mixed batch",
            "tick under a hold",
        ] {
            assert!(seen.contains_key(what), "no step met {what}: {seen:?}");
        }
    }

    /// One-line bugs in the read-write lock's scripts, each a plausible one.
    const MUTANTS: &[(Mutant, usize)] = &[
        (
            Mutant {
                file: "read_acquire.lua",
                from: "redis.call('pexpire', KEYS[1], math.max(ttl, tonumber(ARGV[1])))",
                nth: 1,
                to: "redis.call('pexpire', KEYS[1], ARGV[1])",
                what: "a further read hold shortens the hash's TTL to its lease",
            },
            1,
        ),
        (
            Mutant {
                file: "read_acquire.lua",
                from: "redis.call('set', KEYS[2] .. ':' .. n, 1, 'px', ARGV[1])",
                nth: 1,
                to: "",
                what: "a further read hold writes no timeout key",
            },
            1,
        ),
        (
            Mutant {
                file: "read_acquire.lua",
                from: "if too_late(ARGV[5]) then",
                nth: 1,
                to: "if false then",
                what: "a read acquire past its deadline takes the lock",
            },
            1,
        ),
        (
            Mutant {
                file: "write_acquire.lua",
                from: "redis.call('pexpire', KEYS[1], math.max(ttl, tonumber(ARGV[1])))",
                nth: 1,
                to: "redis.call('pexpire', KEYS[1], ARGV[1])",
                what: "a write re-entry shortens the hash's TTL to its lease",
            },
            1,
        ),
        (
            Mutant {
                file: "write_acquire.lua",
                from: "if mode == 'read' and redis.call('hexists', KEYS[1], ARGV[3]) == 1 then",
                nth: 1,
                to: "if false then",
                what: "an owner that reads and asks to write is told to wait for itself",
            },
            1,
        ),
        (
            Mutant {
                file: "write_acquire.lua",
                from: "if too_late(ARGV[5]) then",
                nth: 1,
                to: "if false then",
                what: "a write acquire past its deadline takes the lock",
            },
            1,
        ),
        (
            Mutant {
                file: "read_release.lua",
                from: "redis.call('del', KEYS[3] .. ':' .. (left + 1))",
                nth: 1,
                to: "",
                what: "a read release leaves its hold's timeout key",
            },
            1,
        ),
        (
            Mutant {
                file: "read_release.lua",
                from: "redis.call('pexpire', KEYS[1], longest)",
                nth: 1,
                to: "",
                what: "a read release that leaves read holds keeps the hash's old TTL",
            },
            1,
        ),
        (
            Mutant {
                file: "read_release.lua",
                from: "    if mode == 'write' then",
                nth: 1,
                to: "    if false then",
                what: "a writer's last read release deletes the hash it writes",
            },
            1,
        ),
        (
            Mutant {
                file: "read_release.lua",
                from: "for n = count, 1, -1 do",
                nth: 1,
                to: "for n = count, count, -1 do",
                what: "the longest read hold is looked for in each owner's last hold only",
            },
            1,
        ),
        (
            Mutant {
                file: "read_release.lua",
                from: "redis.call(ARGV[3], KEYS[2], ARGV[1])",
                nth: 1,
                to: "",
                what: "a last read release publishes nothing",
            },
            1,
        ),
        (
            Mutant {
                file: "write_release.lua",
                from: "redis.call('hset', KEYS[1], 'mode', 'read')",
                nth: 1,
                to: "",
                what: "a last write release that leaves reads stays in write mode",
            },
            1,
        ),
        (
            Mutant {
                file: "write_release.lua",
                from: "    redis.call('pexpire', KEYS[1], ARGV[2])",
                nth: 1,
                to: "",
                what: "a write release that leaves write holds keeps the old TTL",
            },
            1,
        ),
        (
            Mutant {
                file: "write_release.lua",
                from: "redis.call(ARGV[4], KEYS[2], ARGV[1])",
                nth: 1,
                to: "",
                what: "a last write release publishes nothing",
            },
            1,
        ),
        (
            Mutant {
                file: "renew_read.lua",
                from: "for n = 1, count do",
                nth: 1,
                to: "for n = 1, 1 do",
                what: "a read renewal renews the first hold's key only",
            },
            1,
        ),
        (
            Mutant {
                file: "renew_read.lua",
                from: "redis.call('pexpire', hash, math.max(ttl, tonumber(ARGV[1])))",
                nth: 1,
                to: "",
                what: "a read renewal leaves the hash's TTL",
            },
            1,
        ),
        (
            Mutant {
                file: "renew_read.lua",
                from: "ARGV[i + 1]",
                nth: 1,
                to: "ARGV[2]",
                what: "a batched read renewal checks every pair against the first owner",
            },
            1,
        ),
    ];

    /// Each mutant is caught: the comparison that passes on `lua/` as it
    /// is fails on it, with the same seed.
    #[test]
    fn every_mutant_of_the_read_write_locks_scripts_is_caught() {
        let redis = RedisServer::start();
        every_mutant_is_caught(
            "read-write lock conformance, mutants",
            MUTANTS,
            &redis,
            |seed, mutant| {
                agree_step_by_step(&redis, seed, mutant);
            },
        );
    }
}

/// A count in one string key, as the semaphore and the count-down latch
/// keep it (Redisson's `RSemaphore` and `RCountDownLatch`), through every
/// script that sets, counts down, drains, deletes or reads one (and a
/// job's last occurrence done, read as a count), and the election's
/// `publish.lua`: each step against a small model of the key, with data
/// ferrisson did not write put there now and then (each script must then
/// fail and change nothing), and ticks.
mod counter_scripts {
    use std::collections::BTreeMap;
    use std::time::Duration;

    use redis::{Commands, Script};

    use super::rng::Rng;
    use super::server::RedisServer;
    use super::{
        announced_seed, every_mutant_is_caught, load, published, Mutant, SEQUENCES, STEPS, TICK_MS,
        TTL_SLACK_MS,
    };

    const KEY: &str = "model-counter";
    const CHANNEL: &str = "redisson_countdownlatch__channel__{model-counter}";
    const MARKER: &str = "redisson_countdownlatch__channel__{model-counter}:marker";
    /// What another program keeps under the name.
    const FOREIGN: &str = "not-a-count";

    /// What the key holds.
    #[derive(Clone, Copy, Debug, PartialEq)]
    enum Value {
        Missing,
        Count(i64),
        Foreign,
    }

    /// The key and its end, in ticks.
    #[derive(Clone, Copy, Debug)]
    struct Counter {
        value: Value,
        ends: Option<i32>,
        now: i32,
    }

    #[derive(Clone, Copy, Debug)]
    enum Step {
        /// `set_if_missing.lua`: a count, the message, a TTL in ticks (0:
        /// none).
        SetIfMissing(i64, i64, i32),
        CountDown,
        LatchDelete,
        ReadCount,
        JobLastDone,
        SemaphoreDelete,
        Drain,
        /// `publish.lua`, a message on the channel.
        Publish(i64),
        /// Another program writes the key.
        Foreign,
        /// The key is deleted (by its owner).
        Clear,
        Tick,
    }

    fn draw(rng: &mut Rng) -> Step {
        match rng.below(24) {
            0..=3 => Step::SetIfMissing(
                rng.below(5) as i64 - 1,
                rng.below(3) as i64,
                rng.below(3) as i32,
            ),
            4..=7 => Step::CountDown,
            8 | 9 => Step::LatchDelete,
            10 | 11 => Step::ReadCount,
            12 => Step::JobLastDone,
            13 | 14 => Step::SemaphoreDelete,
            15 | 16 => Step::Drain,
            17 => Step::Publish(rng.below(3) as i64),
            18 => Step::Foreign,
            19 => Step::Clear,
            _ => Step::Tick,
        }
    }

    /// A step's reply: a number, or the script's refusal of data that is
    /// no count.
    #[derive(Clone, Copy, Debug, PartialEq)]
    enum Outcome {
        Int(i64),
        WrongType,
    }

    impl Counter {
        /// Runs `step`: the reply, and the message published.
        fn run(&mut self, step: Step) -> (Option<Outcome>, Option<i64>) {
            use Outcome::{Int, WrongType};
            let count = match self.value {
                Value::Foreign => {
                    return match step {
                        Step::Publish(message) => (Some(Int(1)), Some(message)),
                        Step::Foreign | Step::Clear | Step::Tick => {
                            self.apply(step);
                            (None, None)
                        }
                        _ => (Some(WrongType), None),
                    };
                }
                Value::Missing => None,
                Value::Count(n) => Some(n),
            };
            let reply = match (step, count) {
                (Step::SetIfMissing(value, message, ttl), None) => {
                    self.value = Value::Count(value);
                    self.ends = (ttl > 0).then_some(self.now + ttl);
                    return (Some(Int(1)), Some(message));
                }
                (Step::SetIfMissing(..), Some(_)) => Int(0),
                (Step::CountDown, None) => Int(0),
                (Step::CountDown, Some(n)) => {
                    let left = n - 1;
                    if left <= 0 {
                        self.value = Value::Missing;
                        self.ends = None;
                    } else {
                        self.value = Value::Count(left);
                    }
                    if left == 0 {
                        return (Some(Int(0)), Some(0));
                    }
                    Int(left.max(0))
                }
                (Step::LatchDelete, None) => Int(0),
                (Step::LatchDelete, Some(_)) => {
                    self.value = Value::Missing;
                    self.ends = None;
                    return (Some(Int(1)), Some(0));
                }
                (Step::ReadCount, n) => Int(n.unwrap_or(0)),
                (Step::JobLastDone, n) => Int(n.unwrap_or(-1)),
                (Step::SemaphoreDelete, n) => {
                    self.value = Value::Missing;
                    self.ends = None;
                    Int(i64::from(n.is_some()))
                }
                (Step::Drain, Some(n)) if n > 0 => {
                    // DECRBY keeps the TTL.
                    self.value = Value::Count(0);
                    Int(n)
                }
                (Step::Drain, _) => Int(0),
                (Step::Publish(message), _) => return (Some(Int(1)), Some(message)),
                (Step::Foreign | Step::Clear | Step::Tick, _) => {
                    self.apply(step);
                    return (None, None);
                }
            };
            (Some(reply), None)
        }

        fn apply(&mut self, step: Step) {
            match step {
                Step::Foreign => {
                    self.value = Value::Foreign;
                    self.ends = None;
                }
                Step::Clear => {
                    self.value = Value::Missing;
                    self.ends = None;
                }
                Step::Tick => {
                    self.now += 1;
                    if self.ends.is_some_and(|end| end <= self.now) {
                        self.value = Value::Missing;
                        self.ends = None;
                    }
                }
                _ => unreachable!(),
            }
        }
    }

    struct Scripts {
        set_if_missing: Script,
        count_down: Script,
        latch_delete: Script,
        read_count: Script,
        job_last_done: Script,
        semaphore_delete: Script,
        drain: Script,
        publish: Script,
    }

    impl Scripts {
        fn load(mutant: Option<Mutant>) -> Scripts {
            let script = |file: &str| load(file, mutant);
            Scripts {
                set_if_missing: script("set_if_missing.lua"),
                count_down: script("latch_count_down.lua"),
                latch_delete: script("latch_delete.lua"),
                read_count: script("read_count.lua"),
                job_last_done: script("job_last_done.lua"),
                semaphore_delete: script("semaphore_delete.lua"),
                drain: script("semaphore_drain.lua"),
                publish: script("publish.lua"),
            }
        }

        fn run(&self, conn: &mut redis::Connection, step: Step) -> Option<Outcome> {
            let reply: redis::RedisResult<i64> = match step {
                Step::SetIfMissing(value, message, ttl) => self
                    .set_if_missing
                    .key(KEY)
                    .key(CHANNEL)
                    .arg(value)
                    .arg(message)
                    .arg("publish")
                    .arg(i64::from(ttl) * TICK_MS as i64)
                    .invoke(conn),
                Step::CountDown => self
                    .count_down
                    .key(KEY)
                    .key(CHANNEL)
                    .arg(0)
                    .arg("publish")
                    .invoke(conn),
                Step::LatchDelete => self
                    .latch_delete
                    .key(KEY)
                    .key(CHANNEL)
                    .arg(0)
                    .arg("publish")
                    .invoke(conn),
                Step::ReadCount => self.read_count.key(KEY).invoke(conn),
                Step::JobLastDone => self.job_last_done.key(KEY).invoke(conn),
                Step::SemaphoreDelete => self.semaphore_delete.key(KEY).invoke(conn),
                Step::Drain => self.drain.key(KEY).invoke(conn),
                Step::Publish(message) => self
                    .publish
                    .key(CHANNEL)
                    .arg(message)
                    .arg("publish")
                    .invoke(conn),
                Step::Foreign => {
                    let _: () = conn.set(KEY, FOREIGN).unwrap();
                    return None;
                }
                Step::Clear => {
                    let _: i64 = conn.del(KEY).unwrap();
                    return None;
                }
                Step::Tick => {
                    super::tick(conn);
                    return None;
                }
            };
            Some(match reply {
                Ok(n) => Outcome::Int(n),
                Err(e)
                    if e.code() == Some("WRONGTYPE")
                        && e.detail() == Some(&format!("holds a string: {KEY}")) =>
                {
                    Outcome::WrongType
                }
                Err(e) => panic!("{step:?}: {e}"),
            })
        }
    }

    fn compare(conn: &mut redis::Connection, model: &Counter, context: &str) {
        let held: Option<String> = conn.get(KEY).unwrap();
        let expected = match model.value {
            Value::Missing => None,
            Value::Count(n) => Some(n.to_string()),
            Value::Foreign => Some(FOREIGN.to_owned()),
        };
        assert_eq!(held, expected, "{context}: the key");
        let pttl: i64 = conn.pttl(KEY).unwrap();
        match (model.value, model.ends) {
            (Value::Missing, _) => assert_eq!(pttl, -2, "{context}: the key's PTTL"),
            (_, None) => assert_eq!(pttl, -1, "{context}: the key's PTTL"),
            (_, Some(end)) => {
                let expected = i64::from(end - model.now) * TICK_MS as i64;
                assert!(
                    pttl <= expected && pttl > expected - TTL_SLACK_MS,
                    "{context}: the key's TTL is {pttl} ms, the model's ends in {} ticks",
                    end - model.now
                );
            }
        }
    }

    fn agree_step_by_step(
        redis: &RedisServer,
        seed: u64,
        mutant: Option<Mutant>,
    ) -> BTreeMap<String, usize> {
        let mut rng = Rng::new(seed);
        let client = redis::Client::open(redis.url()).unwrap();
        let mut conn = client.get_connection().unwrap();
        let mut subscriber = client.get_connection().unwrap();
        subscriber
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        let mut pubsub = subscriber.as_pubsub();
        pubsub.subscribe(CHANNEL).unwrap();
        pubsub.subscribe(MARKER).unwrap();
        let scripts = Scripts::load(mutant);
        let mut seen = BTreeMap::<String, usize>::new();
        for sequence in 0..SEQUENCES {
            let _: () = redis::cmd("FLUSHALL").query(&mut conn).unwrap();
            let mut model = Counter {
                value: Value::Missing,
                ends: None,
                now: 0,
            };
            let mut steps = Vec::new();
            for _ in 0..STEPS {
                let step = draw(&mut rng);
                steps.push(step);
                let context = format!("seed {seed}, sequence {sequence}, steps {steps:?}");
                let before = model.value;
                let real = scripts.run(&mut conn, step);
                let real_published = published::<i64>(&mut conn, &mut pubsub, MARKER);
                let (modelled, message) = model.run(step);
                assert_eq!(real, modelled, "{context}: the reply");
                assert_eq!(
                    real_published,
                    Vec::from_iter(message),
                    "{context}: the messages"
                );
                compare(&mut conn, &model, &context);
                if let Some(real) = real {
                    let name = format!("{step:?}");
                    let name = name.split('(').next().unwrap();
                    let on = match before {
                        Value::Missing => "missing",
                        Value::Count(n) if n > 0 => "counting",
                        Value::Count(_) => "at or below 0",
                        Value::Foreign => "foreign",
                    };
                    let what = match real {
                        Outcome::WrongType => "refused".to_owned(),
                        Outcome::Int(n) => format!("{}", n.signum()),
                    };
                    *seen.entry(format!("{name} on {on}: {what}")).or_default() += 1;
                }
            }
        }
        println!(
            "counter conformance (seed {seed}, mutant: {mutant:?}): {SEQUENCES} sequences of \
             {STEPS} steps agree; met: {seen:?}"
        );
        seen
    }

    #[test]
    fn the_counter_model_and_the_scripts_agree_step_by_step() {
        let seed = announced_seed("counter conformance");
        let redis = RedisServer::start();
        let seen = agree_step_by_step(&redis, seed, None);
        for what in [
            "SetIfMissing on missing: 1",
            "SetIfMissing on counting: 0",
            "SetIfMissing on foreign: refused",
            "CountDown on counting: 0",
            "CountDown on counting: 1",
            "CountDown on at or below 0: 0",
            "CountDown on missing: 0",
            "LatchDelete on counting: 1",
            "LatchDelete on missing: 0",
            "ReadCount on counting: 1",
            "ReadCount on missing: 0",
            "JobLastDone on missing: -1",
            "JobLastDone on counting: 1",
            "SemaphoreDelete on counting: 1",
            "SemaphoreDelete on foreign: refused",
            "Drain on counting: 1",
            "Drain on at or below 0: 0",
            "Publish on missing: 1",
        ] {
            assert!(seen.contains_key(what), "no step met {what}: {seen:?}");
        }
    }

    const MUTANTS: &[(Mutant, usize)] = &[
        (
            Mutant {
                file: "set_if_missing.lua",
                from: "if count ~= false then",
                nth: 1,
                to: "if false then",
                what: "setting a count overwrites the one there",
            },
            1,
        ),
        (
            Mutant {
                file: "set_if_missing.lua",
                from: "redis.call('set', KEYS[1], ARGV[1], 'px', ttl)",
                nth: 1,
                to: "redis.call('set', KEYS[1], ARGV[1])",
                what: "setting a count ignores its TTL",
            },
            1,
        ),
        (
            Mutant {
                file: "set_if_missing.lua",
                from: "redis.call(ARGV[3], KEYS[2], ARGV[2])",
                nth: 1,
                to: "",
                what: "setting a count tells no waiter",
            },
            1,
        ),
        (
            Mutant {
                file: "latch_count_down.lua",
                from: "if left == 0 then",
                nth: 1,
                to: "if left <= 0 then",
                what: "a count-down past zero opens the latch again",
            },
            1,
        ),
        (
            Mutant {
                file: "latch_count_down.lua",
                from: "    redis.call('del', KEYS[1])",
                nth: 1,
                to: "",
                what: "a latch counted down to zero keeps its key",
            },
            1,
        ),
        (
            Mutant {
                file: "latch_delete.lua",
                from: "redis.call(ARGV[2], KEYS[2], ARGV[1])",
                nth: 1,
                to: "",
                what: "a deleted latch wakes nobody",
            },
            1,
        ),
        (
            Mutant {
                file: "read_count.lua",
                from: "if string.find(value, '^%-?%d+$') then",
                nth: 1,
                to: "if true then",
                what: "a string that is no count is read as one",
            },
            1,
        ),
        (
            Mutant {
                file: "job_last_done.lua",
                from: "return done or -1",
                nth: 1,
                to: "return done or 0",
                what: "a job with no occurrence done reads occurrence 0 as done",
            },
            1,
        ),
        (
            Mutant {
                file: "semaphore_delete.lua",
                from: "return redis.call('del', KEYS[1])",
                nth: 1,
                to: "redis.call('del', KEYS[1]) return 1",
                what: "deleting a missing semaphore says it existed",
            },
            1,
        ),
        (
            Mutant {
                file: "semaphore_delete.lua",
                from: "if type(available) == 'table' then",
                nth: 1,
                to: "if false then",
                what: "deleting a semaphore deletes another program's data",
            },
            1,
        ),
        (
            Mutant {
                file: "semaphore_drain.lua",
                from: "redis.call('decrby', KEYS[1], available)",
                nth: 1,
                to: "redis.call('set', KEYS[1], 0)",
                what: "a drain drops the semaphore's TTL",
            },
            1,
        ),
        (
            Mutant {
                file: "publish.lua",
                from: "return redis.call(ARGV[2], KEYS[1], ARGV[1])",
                nth: 1,
                to: "return 1",
                what: "an announcement is not sent",
            },
            1,
        ),
    ];

    #[test]
    fn every_mutant_of_the_counters_scripts_is_caught() {
        let redis = RedisServer::start();
        every_mutant_is_caught(
            "counter conformance, mutants",
            MUTANTS,
            &redis,
            |seed, mutant| {
                agree_step_by_step(&redis, seed, mutant);
            },
        );
    }
}

/// The fenced hash (`fenced_set.lua`, `fenced_get.lua`): a data hash
/// written only by a token at least as high as every token before, and
/// its fence, against a small model, with another program's data under
/// the data key or the fence now and then (the scripts must fail and
/// change nothing).
mod fenced_hash_scripts {
    use std::collections::BTreeMap;

    use redis::{Commands, Script, Value};

    use super::rng::Rng;
    use super::server::RedisServer;
    use super::{announced_seed, every_mutant_is_caught, load, Mutant, SEQUENCES, STEPS};

    const DATA: &str = "model-data";
    const FENCE: &str = "ferrisson_fence:{model-data}";
    /// A fence no double holds exactly (2^53): refused as no token.
    const TOO_HIGH: &str = "9007199254740993";

    #[derive(Clone, Debug, Default, PartialEq)]
    struct Fenced {
        /// The data hash's fields (sorted); `None`: another program keeps
        /// a string there.
        data: Option<BTreeMap<u8, u8>>,
        /// The fence: 0 none; `None`: something that is no token.
        fence: Option<i64>,
    }

    #[derive(Clone, Copy, Debug)]
    enum Step {
        /// A token, a field, a value.
        Set(i64, u8, u8),
        Get(u8),
        /// Another program's string under the data key.
        ForeignData,
        /// A fence above what a double holds exactly.
        ForeignFence,
        /// Both keys deleted.
        Clear,
    }

    fn draw(rng: &mut Rng) -> Step {
        match rng.below(20) {
            0..=9 => Step::Set(
                1 + rng.below(4) as i64,
                rng.below(2) as u8,
                rng.below(3) as u8,
            ),
            10..=15 => Step::Get(rng.below(2) as u8),
            16 => Step::ForeignData,
            17 => Step::ForeignFence,
            _ => Step::Clear,
        }
    }

    /// A reply: {1 or 0, token or fence} for a set, {value or nil, fence
    /// or -1} for a get; or a refusal of data that is no fenced hash.
    #[derive(Clone, Copy, Debug, PartialEq)]
    enum Outcome {
        Set(bool, i64),
        Got(Option<u8>, i64),
        WrongType,
    }

    impl Fenced {
        fn run(&mut self, step: Step) -> Option<Outcome> {
            match step {
                Step::ForeignData => {
                    self.data = None;
                    return None;
                }
                Step::ForeignFence => {
                    self.fence = None;
                    return None;
                }
                Step::Clear => {
                    *self = Fenced {
                        data: Some(BTreeMap::new()),
                        fence: Some(0),
                    };
                    return None;
                }
                _ => {}
            }
            let (Some(data), Some(fence)) = (self.data.as_mut(), self.fence) else {
                return Some(Outcome::WrongType);
            };
            Some(match step {
                Step::Set(token, _, _) if fence > token => Outcome::Set(false, fence),
                Step::Set(token, field, value) => {
                    data.insert(field, value);
                    self.fence = Some(token);
                    Outcome::Set(true, token)
                }
                Step::Get(field) => Outcome::Got(
                    data.get(&field).copied(),
                    if fence > 0 { fence } else { -1 },
                ),
                _ => unreachable!(),
            })
        }
    }

    fn field(f: u8) -> String {
        format!("field-{f}")
    }

    fn run(
        set: &Script,
        get: &Script,
        conn: &mut redis::Connection,
        step: Step,
    ) -> Option<Outcome> {
        let reply: redis::RedisResult<Value> = match step {
            Step::Set(token, f, value) => set
                .key(DATA)
                .key(FENCE)
                .arg(token)
                .arg(field(f))
                .arg(value)
                .invoke(conn),
            Step::Get(f) => get.key(DATA).key(FENCE).arg(field(f)).invoke(conn),
            Step::ForeignData => {
                let _: () = conn.set(DATA, "someone else's").unwrap();
                return None;
            }
            Step::ForeignFence => {
                let _: () = conn.set(FENCE, TOO_HIGH).unwrap();
                return None;
            }
            Step::Clear => {
                let _: i64 = conn.del(&[DATA, FENCE]).unwrap();
                return None;
            }
        };
        let reply = match reply {
            Err(e) if e.code() == Some("WRONGTYPE") => return Some(Outcome::WrongType),
            Err(e) => panic!("{step:?}: {e}"),
            Ok(reply) => reply,
        };
        let (first, second): (Value, i64) = redis::from_redis_value(reply).unwrap();
        Some(match (step, first) {
            (Step::Set(..), Value::Int(done)) => Outcome::Set(done == 1, second),
            (Step::Get(_), Value::Nil) => Outcome::Got(None, second),
            (Step::Get(_), value) => {
                let value: String = redis::from_redis_value(value).unwrap();
                Outcome::Got(Some(value.parse().unwrap()), second)
            }
            (step, value) => panic!("{step:?}: a reply the model has no word for: {value:?}"),
        })
    }

    fn compare(conn: &mut redis::Connection, model: &Fenced, context: &str) {
        match &model.data {
            Some(data) => {
                let held: BTreeMap<String, String> = conn.hgetall(DATA).unwrap();
                let expected: BTreeMap<String, String> = data
                    .iter()
                    .map(|(f, v)| (field(*f), v.to_string()))
                    .collect();
                assert_eq!(held, expected, "{context}: the data hash");
            }
            None => {
                let held: String = conn.get(DATA).unwrap();
                assert_eq!(held, "someone else's", "{context}: another program's data");
            }
        }
        let fence: Option<String> = conn.get(FENCE).unwrap();
        let expected = match model.fence {
            Some(0) => None,
            Some(token) => Some(token.to_string()),
            None => Some(TOO_HIGH.to_owned()),
        };
        assert_eq!(fence, expected, "{context}: the fence");
        let pttl: i64 = conn.pttl(FENCE).unwrap();
        assert!(
            fence.is_none() || pttl == -1,
            "{context}: the fence has a TTL"
        );
    }

    fn agree_step_by_step(
        redis: &RedisServer,
        seed: u64,
        mutant: Option<Mutant>,
    ) -> BTreeMap<String, usize> {
        let mut rng = Rng::new(seed);
        let mut conn = redis::Client::open(redis.url())
            .unwrap()
            .get_connection()
            .unwrap();
        let script = |file: &str| load(file, mutant);
        let (set, get) = (script("fenced_set.lua"), script("fenced_get.lua"));
        let mut seen = BTreeMap::<String, usize>::new();
        for sequence in 0..SEQUENCES {
            let _: () = redis::cmd("FLUSHALL").query(&mut conn).unwrap();
            let mut model = Fenced {
                data: Some(BTreeMap::new()),
                fence: Some(0),
            };
            let mut steps = Vec::new();
            for _ in 0..STEPS {
                let step = draw(&mut rng);
                steps.push(step);
                let context = format!("seed {seed}, sequence {sequence}, steps {steps:?}");
                let real = run(&set, &get, &mut conn, step);
                let modelled = model.run(step);
                assert_eq!(real, modelled, "{context}: the reply");
                compare(&mut conn, &model, &context);
                let what = match real {
                    Some(Outcome::Set(done, _)) => format!("set {done}"),
                    Some(Outcome::Got(value, fence)) => {
                        format!("got {}, fence {}", value.is_some(), fence > 0)
                    }
                    Some(Outcome::WrongType) => "refused".to_owned(),
                    None => continue,
                };
                *seen.entry(what).or_default() += 1;
            }
        }
        println!(
            "fenced hash conformance (seed {seed}, mutant: {mutant:?}): {SEQUENCES} sequences of \
             {STEPS} steps agree; met: {seen:?}"
        );
        seen
    }

    #[test]
    fn the_fenced_hash_model_and_the_scripts_agree_step_by_step() {
        let seed = announced_seed("fenced hash conformance");
        let redis = RedisServer::start();
        let seen = agree_step_by_step(&redis, seed, None);
        for what in [
            "set true",
            "set false",
            "got true, fence true",
            "got false, fence true",
            "got false, fence false",
            "refused",
        ] {
            assert!(seen.contains_key(what), "no step met {what}: {seen:?}");
        }
    }

    const MUTANTS: &[(Mutant, usize)] = &[
        (
            Mutant {
                file: "fenced_set.lua",
                from: "if fence and fence > token then",
                nth: 1,
                to: "if fence and fence >= token then",
                what: "a writer's second write with its token is refused",
            },
            1,
        ),
        (
            Mutant {
                file: "fenced_set.lua",
                from: "redis.call('set', KEYS[2], ARGV[1])",
                nth: 1,
                to: "",
                what: "a write does not raise the fence",
            },
            1,
        ),
        (
            Mutant {
                file: "fenced_set.lua",
                from: "if type(highest) == 'number' and highest >= 9007199254740992 then",
                nth: 1,
                to: "if false then",
                what: "a fence above what a double holds is taken for a token",
            },
            1,
        ),
        (
            Mutant {
                file: "fenced_set.lua",
                from: "if kind ~= 'none' and kind ~= 'hash' then",
                nth: 1,
                to: "if false then",
                what: "a write goes at another program's data",
            },
            1,
        ),
        (
            Mutant {
                file: "fenced_get.lua",
                from: "ARGV[1]), fence or -1}",
                nth: 1,
                to: "ARGV[1]), fence or 0}",
                what: "a hash never written reads a fence of 0",
            },
            1,
        ),
    ];

    #[test]
    fn every_mutant_of_the_fenced_hashs_scripts_is_caught() {
        let redis = RedisServer::start();
        every_mutant_is_caught(
            "fenced hash conformance, mutants",
            MUTANTS,
            &redis,
            |seed, mutant| {
                agree_step_by_step(&redis, seed, mutant);
            },
        );
    }
}
