//! The reentrant lock's scripts (`acquire.lua`, `fenced_acquire.lua`,
//! `release.lua`, `renew.lua`, `acquire_cancel.lua`, `acquire_granted.lua`,
//! `force_unlock.lua`, `lock_info.lua`, and the lean protocol's
//! `lean_acquire.lua`, `lean_release.lua`, `lean_settle.lua`) and the
//! lock's model ([`Server`]):
//! acquires (resends and late copies of them, non-reentrant ones, some
//! with a deadline), releases (some with a job's keep), batched renewals
//! of mixed owners and locks, settles, grant reads, ticks, the hold run
//! out or forced open. The same for the fenced lock, whose grants carry
//! tokens.

use std::collections::BTreeMap;

use super::rng::{announced_seed, Rng};
use super::server::RedisServer;
use super::{
    connections, every_mutant_is_caught, field, id, load, published, tick, values_and_pttls,
    LockInfo, Mutant, SEQUENCES, STEPS, TICK_MS, TTL_SLACK_MS,
};
use ferrisson_model::{Bounds, ClientId, Intent, Latch, Mutation, Reply, ReqId, Server, Time};
use redis::{Commands, Script, Value};

const NAME: &str = "model";
/// A second lock, held by owner 1 from each sequence's start until its
/// lease runs out, which a batched renewal may name beside the first.
const OTHER: &str = "model-other";
const CHANNEL: &str = "redisson_lock__channel:{model}";
/// Published after each step: every message before it is the step's.
const MARKER: &str = "redisson_lock__channel:{model}:marker";
/// A job's keep (`at_least_for`), in ticks.
const KEEP: Time = 1;
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
    /// A negative number (`-1`): no deadline, as none sent (a release's).
    Negative,
}

/// A step of a sequence.
#[derive(Clone, Copy, Debug)]
enum Step {
    Acquire {
        req: ReqId,
        /// The TTL it sets, in ticks (a re-entry: at least).
        lease: Time,
        /// `false`: a non-reentrant lock's acquire (not for the fenced
        /// lock, which is reentrant).
        reentrant: bool,
        deadline: Deadline,
    },
    Release {
        req: ReqId,
        /// The lease it carries, in ticks: the least TTL it leaves when
        /// holds remain.
        lease: Time,
        /// With a job's keep.
        keep: bool,
        /// Its deadline (the end of its hold's lease).
        deadline: Deadline,
    },
    /// A give-back (`release.lua` under its own request) of the hold that
    /// the acquire `grant` took: it releases only while that grant's latch
    /// shows it.
    GiveBack {
        req: ReqId,
        grant: ReqId,
        /// Its deadline (the end of the grant's lease).
        deadline: Deadline,
    },
    /// A batched renewal: the lock for one owner, and in the same call
    /// for another, of this lock or (`true`) of the other lock, `OTHER`
    /// (a batch carries many owners and locks); and its lease, in ticks.
    Renew(ClientId, Option<(ClientId, bool)>, Time),
    Settle(ReqId),
    /// `acquire_granted.lua`: whether the request's latch shows a grant.
    Granted(ReqId),
    /// A tick passes: what runs out is gone.
    Tick,
    /// The hold's key is deleted (as by an operator).
    RunOut,
    /// `force_unlock.lua`: the lock opened whoever holds it.
    ForceUnlock,
    /// `lean_acquire.lua`: an owner's lean acquire, the TTL it sets (in
    /// ticks), its deadline, and its not-before (`Ahead`: not yet).
    LeanAcquire(ClientId, Time, Deadline, Deadline),
    /// `lean_release.lua`: an owner's lean release, its deadline and its
    /// not-before.
    LeanRelease(ClientId, Deadline, Deadline),
    /// `lean_settle.lua`: an owner's settle of its lost lean sends, whose
    /// latest deadline this is (settled once it has passed), to take or to
    /// release, with its own deadline.
    LeanSettle(ClientId, Deadline, Intent, Deadline),
}

fn draw(rng: &mut Rng, fenced: bool) -> Step {
    let client = rng.below(2) as ClientId;
    let acquire = ReqId {
        client,
        seq: 1 + rng.below(ACQUIRES as u64) as u8,
    };
    // The lean scripts (plain lock only): one step in five.
    if !fenced && rng.below(5) == 0 {
        let deadline = match rng.below(4) {
            0 => Deadline::Passed,
            _ => Deadline::Ahead,
        };
        let not_before = match rng.below(6) {
            0 => Deadline::Ahead,
            1 => Deadline::Passed,
            _ => Deadline::None,
        };
        return match rng.below(7) {
            0..=2 => Step::LeanAcquire(client, 1 + rng.below(3) as Time, deadline, not_before),
            3 | 4 => Step::LeanRelease(client, deadline, not_before),
            _ => Step::LeanSettle(
                client,
                match rng.below(3) {
                    0 => Deadline::Ahead,
                    _ => Deadline::Passed,
                },
                match rng.below(2) {
                    0 => Intent::Take(1 + rng.below(3) as Time),
                    _ => Intent::Release,
                },
                match rng.below(6) {
                    0 => Deadline::Passed,
                    _ => Deadline::Ahead,
                },
            ),
        };
    }
    match rng.below(21) {
        0..=7 => Step::Acquire {
            req: acquire,
            lease: 1 + rng.below(3) as Time,
            reentrant: fenced || rng.below(5) > 0,
            deadline: match rng.below(10) {
                0..=3 => Deadline::None,
                4..=8 => Deadline::Ahead,
                _ => Deadline::Passed,
            },
        },
        8..=13 => {
            let req = ReqId {
                client,
                seq: 100 + rng.below(RELEASES as u64) as u8,
            };
            match rng.below(3) {
                0 => Step::GiveBack {
                    req,
                    grant: acquire,
                    deadline: match rng.below(8) {
                        0..=2 => Deadline::None,
                        3..=5 => Deadline::Ahead,
                        6 => Deadline::Negative,
                        _ => Deadline::Passed,
                    },
                },
                _ => Step::Release {
                    req,
                    lease: 1 + rng.below(3) as Time,
                    keep: rng.below(4) == 0,
                    deadline: match rng.below(8) {
                        0..=2 => Deadline::None,
                        3..=5 => Deadline::Ahead,
                        6 => Deadline::Negative,
                        _ => Deadline::Passed,
                    },
                },
            }
        }
        14 | 15 => Step::Renew(
            client,
            (rng.below(2) == 0).then(|| (rng.below(2) as ClientId, rng.below(3) == 0)),
            1 + rng.below(3) as Time,
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
    lean_acquire: Script,
    lean_release: Script,
    lean_settle: Script,
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
            lean_acquire: script("lean_acquire.lua"),
            lean_release: script("lean_release.lua"),
            lean_settle: script("lean_settle.lua"),
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
                Deadline::Negative => -1,
            }
        };
        let left = |pttl: i64| Some(pttl.max(0).unsigned_abs().div_ceil(TICK_MS));
        if let (
            true,
            Step::Acquire {
                req,
                lease,
                deadline: d,
                ..
            },
        ) = (fenced, step)
        {
            let mut call = self.fenced_acquire.key(NAME);
            call.key(TOKEN_KEY)
                .key(acquire_latch(req))
                .arg(ms(lease))
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
                lease,
                reentrant,
                deadline: d,
            } => {
                let mut call = self.acquire.key(NAME);
                call.key(acquire_latch(req))
                    .arg(ms(lease))
                    .arg(field(req.client))
                    .arg(ms(bounds().latch_ttl))
                    .arg(u8::from(reentrant));
                if d != Deadline::None {
                    call.arg(deadline(d));
                }
                call.invoke(conn).unwrap()
            }
            Step::Release {
                req,
                lease,
                keep,
                deadline: d,
            } => {
                let mut call = self.release.key(NAME);
                call.key(CHANNEL)
                    .key(unlock_latch(req))
                    .arg(0)
                    .arg(ms(lease))
                    .arg(field(req.client))
                    .arg("publish")
                    .arg(ms(bounds().latch_ttl));
                if keep || d != Deadline::None {
                    call.arg(deadline(d));
                }
                if keep {
                    call.arg(ms(KEEP));
                }
                call.invoke(conn).unwrap()
            }
            Step::GiveBack {
                req,
                grant,
                deadline: d,
            } => {
                let mut call = self.release.key(NAME);
                call.key(CHANNEL)
                    .key(unlock_latch(req))
                    .key(acquire_latch(grant))
                    .arg(0)
                    .arg(ms(bounds().lease))
                    .arg(field(req.client))
                    .arg("publish")
                    .arg(ms(bounds().latch_ttl));
                if d != Deadline::None {
                    call.arg(deadline(d));
                }
                call.invoke(conn).unwrap()
            }
            Step::Renew(first, second, lease) => {
                let mut call = self.renew.key(NAME);
                if let Some((_, other)) = second {
                    call.key(if other { OTHER } else { NAME });
                }
                call.arg(ms(lease)).arg(field(first));
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
            Step::LeanAcquire(client, lease, d, not_before) => {
                let reply: Value = self
                    .lean_acquire
                    .key(NAME)
                    .arg(ms(lease))
                    .arg(field(client))
                    .arg(deadline(d))
                    .arg(deadline(not_before))
                    .invoke(conn)
                    .unwrap();
                return Some(match reply {
                    Value::Nil => Outcome::reply(Reply::Granted),
                    Value::Int(-5) => Outcome::reply(Reply::TooLate),
                    Value::Int(-6) => Outcome::reply(Reply::NotYet),
                    Value::Int(pttl) => Outcome {
                        left: left(pttl),
                        ..Outcome::reply(Reply::Refused)
                    },
                    reply => panic!("{step:?}: a reply the model has no word for: {reply:?}"),
                });
            }
            Step::LeanRelease(client, d, not_before) => {
                let reply: Value = self
                    .lean_release
                    .key(NAME)
                    .key(CHANNEL)
                    .arg(0)
                    .arg(field(client))
                    .arg("publish")
                    .arg(deadline(d))
                    .arg(deadline(not_before))
                    .invoke(conn)
                    .unwrap();
                return Some(Outcome::reply(match reply {
                    Value::Int(1) => Reply::Released(1),
                    Value::Int(-5) => Reply::TooLate,
                    Value::Int(-6) => Reply::NotYet,
                    Value::Nil => Reply::NotHeld,
                    reply => panic!("{step:?}: a reply the model has no word for: {reply:?}"),
                }));
            }
            Step::LeanSettle(client, after, intent, own) => {
                let reply: Value = self
                    .lean_settle
                    .key(NAME)
                    .key(CHANNEL)
                    .arg(field(client))
                    .arg(deadline(after))
                    .arg(match intent {
                        Intent::Take(_) => "take",
                        Intent::Release => "release",
                    })
                    .arg(0)
                    .arg("publish")
                    .arg(deadline(own))
                    .arg(match intent {
                        Intent::Take(lease) => ms(lease),
                        Intent::Release => 0,
                    })
                    .invoke(conn)
                    .unwrap();
                return Some(Outcome::reply(match (intent, reply) {
                    (_, Value::Int(-5)) => Reply::TooLate,
                    (_, Value::Int(-6)) => Reply::NotYet,
                    (Intent::Take(_), Value::Int(held)) => Reply::Settled(held == 1),
                    (Intent::Release, Value::Int(1)) => Reply::Released(1),
                    (Intent::Release, Value::Nil) => Reply::NotHeld,
                    (_, reply) => {
                        panic!("{step:?}: a reply the model has no word for: {reply:?}")
                    }
                }));
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
            (Step::Release { .. } | Step::GiveBack { .. }, Value::Int(-5)) => {
                Outcome::reply(Reply::TooLate)
            }
            (Step::Release { .. } | Step::GiveBack { .. }, Value::Int(n)) => {
                Outcome::reply(Reply::Released(n as u8))
            }
            (Step::Release { .. } | Step::GiveBack { .. }, Value::Nil) => {
                Outcome::reply(Reply::NotHeld)
            }
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
            lease,
            reentrant,
            deadline,
        } => {
            let too_late = deadline == Deadline::Passed;
            let reply = server.acquire_with(t, req, lease, b, m, reentrant, too_late);
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
        // Past its deadline, a first call changes nothing.
        Step::Release {
            req,
            deadline: Deadline::Passed,
            ..
        }
        | Step::GiveBack {
            req,
            deadline: Deadline::Passed,
            ..
        } if !server.unlock_latched(req) => Outcome::reply(Reply::TooLate),
        Step::Release {
            req, lease, keep, ..
        } => {
            let keep = if keep { KEEP } else { 0 };
            Outcome::reply(server.release_keeping(t, req, lease, b, m, keep))
        }
        Step::GiveBack { req, grant, .. } => Outcome::reply(server.give_back(t, req, grant, b, m)),
        Step::Renew(first, second, lease) => {
            let mut gone = Vec::new();
            if server.renew(t, first, lease, m) == Reply::Renewed(false) {
                gone.push(1);
            }
            match second {
                Some((owner, false))
                    if server.renew(t, owner, lease, m) == Reply::Renewed(false) =>
                {
                    gone.push(2)
                }
                Some((1, true)) if other.is_some() => {
                    *other = other.map(|ends| ends.max(t + lease));
                }
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
        Step::LeanAcquire(_, _, Deadline::Passed, _)
        | Step::LeanRelease(_, Deadline::Passed, _) => Outcome::reply(Reply::TooLate),
        Step::LeanAcquire(_, _, _, Deadline::Ahead) | Step::LeanRelease(_, _, Deadline::Ahead) => {
            Outcome::reply(Reply::NotYet)
        }
        Step::LeanAcquire(client, lease, _, _) => {
            let reply = server.lean_acquire(t, client, lease, m);
            Outcome {
                left: match reply {
                    Reply::Refused => server.hold.map(|h| u64::from(h.expires - t)),
                    _ => None,
                },
                ..Outcome::reply(reply)
            }
        }
        Step::LeanRelease(client, _, _) => Outcome::reply(server.lean_release(client)),
        Step::LeanSettle(_, _, _, Deadline::Passed) => Outcome::reply(Reply::TooLate),
        Step::LeanSettle(_, after, _, _) if after != Deadline::Passed => {
            Outcome::reply(Reply::NotYet)
        }
        Step::LeanSettle(client, _, intent, _) => {
            Outcome::reply(server.lean_settle(t, client, intent, m))
        }
    };
    Some(outcome)
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
            (a, b) => (a - b).abs() <= TTL_SLACK_MS,
        },
        "{context}: lock_info's PTTL {pttl}, read after it {read_pttl}"
    );
    assert!(
        (read_now - now).abs() <= TTL_SLACK_MS,
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

/// A lean call sent without its deadline (absent, or 0) is refused with
/// an error and changes nothing: without one, a lost copy of it could run
/// at any time, after the settle that waited for it.
#[test]
fn a_lean_call_without_its_deadline_is_refused_and_changes_nothing() {
    let redis = RedisServer::start();
    let (mut conn, _) = connections(&redis);
    let scripts = Scripts::load(None);
    let owner = field(0);
    for held in [false, true] {
        let _: () = redis::cmd("FLUSHALL").query(&mut conn).unwrap();
        if held {
            let _: () = redis::pipe()
                .hset(NAME, &owner, 1)
                .ignore()
                .pexpire(NAME, 60_000)
                .ignore()
                .query(&mut conn)
                .unwrap();
        }
        // The hash, and its TTL (which may only run down).
        let snapshot = |conn: &mut redis::Connection| -> (Vec<(String, String)>, i64) {
            redis::pipe().hgetall(NAME).pttl(NAME).query(conn).unwrap()
        };
        let before = snapshot(&mut conn);
        for deadline in [None, Some(0)] {
            let mut calls = vec![
                ("lean_acquire.lua", {
                    let mut c = scripts.lean_acquire.prepare_invoke();
                    c.key(NAME).arg(60_000).arg(&owner);
                    c
                }),
                ("lean_release.lua", {
                    let mut c = scripts.lean_release.prepare_invoke();
                    c.key(NAME).key(CHANNEL).arg(0).arg(&owner).arg("publish");
                    c
                }),
            ];
            for intent in ["take", "release"] {
                let mut c = scripts.lean_settle.prepare_invoke();
                c.key(NAME)
                    .key(CHANNEL)
                    .arg(&owner)
                    .arg(1)
                    .arg(intent)
                    .arg(0)
                    .arg("publish");
                calls.push(("lean_settle.lua", c));
            }
            for (file, mut call) in calls {
                if let Some(d) = deadline {
                    call.arg(d);
                }
                let reply: redis::RedisResult<Value> = call.invoke(&mut conn);
                let refused = reply
                    .as_ref()
                    .is_err_and(|e| e.to_string().contains("a lean call needs its deadline"));
                assert!(
                    refused,
                    "{file}, deadline {deadline:?}, held {held}: {reply:?}"
                );
                let after = snapshot(&mut conn);
                assert_eq!(after.0, before.0, "{file} changed the hash");
                assert!(after.1 <= before.1, "{file} raised the TTL: {after:?}");
            }
        }
    }
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
        "given back",
        "give-back refused beside a hold",
        "re-entry kept a longer TTL",
        "release kept a longer TTL",
        "renewal kept a longer TTL",
        "release too late",
        "give-back too late",
    ];
    if !fenced {
        expected.extend([
            "NotReentrant",
            "NotYet",
            "lean grant",
            "lean acquire found its hold",
            "lean acquire found its hold, kept a longer TTL",
            "lean release",
            "lean release too late",
            "lean release not held",
            "lean acquire refused",
            "lean acquire too late",
            "lean acquire not yet",
            "lean release not yet",
            "lean acquire past its not-before",
            "lean release past its not-before",
            "lean settle found a hold",
            "lean settle found none",
            "lean settle released",
            "lean settle found nothing to release",
        ]);
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
    let (mut conn, mut subscriber) = connections(redis);
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
            let ends_before = model.hold.map(|h| h.expires);
            let count_before = model.hold.map_or(0, |h| h.count);
            let owners_count = match step {
                Step::GiveBack { req, .. } => model.count_of(req.client),
                _ => 0,
            };
            let real = scripts.run(&mut conn, step, fenced, &mut drawn);
            let real_published = published::<String>(&mut conn, &mut pubsub, MARKER);
            let modelled = model_run(&mut model, &mut other, &mut now, step);
            assert_eq!(real, modelled, "{context}: the reply");
            // The last hold's release (not a replay, not a keep) tells
            // the waiters, and so does a lock forced open.
            let expected: Vec<String> = match (step, &modelled) {
                (
                    Step::Release { .. }
                    | Step::GiveBack { .. }
                    | Step::ForceUnlock
                    | Step::LeanRelease(..)
                    | Step::LeanSettle(..),
                    Some(o),
                ) if o.reply == Reply::Released(1) && held_before && model.hold.is_none() => {
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
            // A not-before passed lets the lean call act.
            match (step, &real) {
                (Step::LeanAcquire(_, _, _, Deadline::Passed), Some(o))
                    if o.reply == Reply::Granted =>
                {
                    *seen
                        .entry("lean acquire past its not-before".to_owned())
                        .or_default() += 1;
                }
                (Step::LeanRelease(_, _, Deadline::Passed), Some(o))
                    if o.reply == Reply::Released(1) =>
                {
                    *seen
                        .entry("lean release past its not-before".to_owned())
                        .or_default() += 1;
                }
                _ => {}
            }
            match (step, &real) {
                (Step::Renew(a, Some((b, false)), _), Some(o)) if a != b && o.gone.len() == 1 => {
                    *seen.entry("mixed batch".to_owned()).or_default() += 1;
                }
                (Step::Renew(_, Some((1, true)), _), Some(o)) if !o.gone.contains(&2) => {
                    *seen.entry("other lock renewed".to_owned()).or_default() += 1;
                }
                // A release that left holds, or a renewal, with a lease
                // shorter than the TTL left: the TTL stays.
                (Step::Acquire { lease, .. }, Some(o))
                    if o.reply == Reply::Granted
                        && model.hold.is_some_and(|h| h.count > count_before)
                        && count_before > 0
                        && ends_before.is_some_and(|ends| ends > now + lease) =>
                {
                    *seen
                        .entry("re-entry kept a longer TTL".to_owned())
                        .or_default() += 1;
                }
                (Step::Release { lease, .. }, Some(o))
                    if o.reply == Reply::Released(0)
                        && ends_before.is_some_and(|ends| ends > now + lease) =>
                {
                    *seen
                        .entry("release kept a longer TTL".to_owned())
                        .or_default() += 1;
                }
                (Step::Renew(_, _, lease), Some(o))
                    if o.gone.is_empty() && ends_before.is_some_and(|ends| ends > now + lease) =>
                {
                    *seen
                        .entry("renewal kept a longer TTL".to_owned())
                        .or_default() += 1;
                }
                (Step::LeanAcquire(client, lease, ..), Some(o))
                    if o.reply == Reply::Granted && held_before =>
                {
                    let what = match ends_before.is_some_and(|ends| ends > now + lease) {
                        true => "lean acquire found its hold, kept a longer TTL",
                        false => "lean acquire found its hold",
                    };
                    assert_eq!(model.count_of(client), count_before, "{context}");
                    *seen.entry(what.to_owned()).or_default() += 1;
                }
                (Step::LeanAcquire(..), Some(o)) if o.reply == Reply::Granted => {
                    *seen.entry("lean grant".to_owned()).or_default() += 1;
                }
                (Step::LeanRelease(..), Some(o)) if o.reply == Reply::Released(1) => {
                    *seen.entry("lean release".to_owned()).or_default() += 1;
                }
                (Step::LeanRelease(..), Some(o)) if o.reply == Reply::TooLate => {
                    *seen.entry("lean release too late".to_owned()).or_default() += 1;
                }
                (Step::LeanSettle(..), Some(o)) if o.reply == Reply::Settled(true) => {
                    *seen
                        .entry("lean settle found a hold".to_owned())
                        .or_default() += 1;
                }
                (Step::LeanSettle(..), Some(o)) if o.reply == Reply::Settled(false) => {
                    *seen.entry("lean settle found none".to_owned()).or_default() += 1;
                }
                (Step::LeanSettle(..), Some(o)) if o.reply == Reply::Released(1) => {
                    *seen.entry("lean settle released".to_owned()).or_default() += 1;
                }
                (Step::LeanSettle(..), Some(o)) if o.reply == Reply::NotHeld => {
                    *seen
                        .entry("lean settle found nothing to release".to_owned())
                        .or_default() += 1;
                }
                (Step::LeanAcquire(..), Some(o)) if o.reply == Reply::Refused => {
                    *seen.entry("lean acquire refused".to_owned()).or_default() += 1;
                }
                (Step::Release { .. }, Some(o)) if o.reply == Reply::TooLate => {
                    *seen.entry("release too late".to_owned()).or_default() += 1;
                }
                (Step::GiveBack { .. }, Some(o)) if o.reply == Reply::TooLate => {
                    *seen.entry("give-back too late".to_owned()).or_default() += 1;
                }
                (Step::LeanAcquire(..), Some(o)) if o.reply == Reply::TooLate => {
                    *seen.entry("lean acquire too late".to_owned()).or_default() += 1;
                }
                (Step::LeanAcquire(..), Some(o)) if o.reply == Reply::NotYet => {
                    *seen.entry("lean acquire not yet".to_owned()).or_default() += 1;
                }
                (Step::LeanRelease(..), Some(o)) if o.reply == Reply::NotYet => {
                    *seen.entry("lean release not yet".to_owned()).or_default() += 1;
                }
                (Step::LeanRelease(..), Some(o)) if o.reply == Reply::NotHeld => {
                    *seen.entry("lean release not held".to_owned()).or_default() += 1;
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
                (Step::GiveBack { .. }, Some(o)) if matches!(o.reply, Reply::Released(_)) => {
                    *seen.entry("given back".to_owned()).or_default() += 1;
                }
                // The owner holds, but not by this grant: nothing taken.
                (Step::GiveBack { .. }, Some(o))
                    if o.reply == Reply::NotHeld && owners_count > 0 =>
                {
                    *seen
                        .entry("give-back refused beside a hold".to_owned())
                        .or_default() += 1;
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
            from: "local keep = tonumber(ARGV[7] or '0') or 0",
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
            file: "acquire.lua",
            from: "if redis.call('pttl', KEYS[1]) < tonumber(ARGV[1]) then",
            nth: 1,
            to: "if true then",
            what: "a re-entry cuts a longer TTL short",
        },
        1,
    ),
    (
        Mutant {
            file: "fenced_acquire.lua",
            from: "if redis.call('pttl', KEYS[1]) < tonumber(ARGV[1]) then",
            nth: 1,
            to: "if true then",
            what: "a fenced re-entry cuts a longer TTL short",
        },
        1,
    ),
    (
        Mutant {
            file: "release.lua",
            from: "if redis.call('pttl', KEYS[1]) < tonumber(ARGV[2]) then",
            nth: 1,
            to: "if true then",
            what: "a release that leaves holds cuts a longer TTL short",
        },
        1,
    ),
    (
        Mutant {
            file: "renew.lua",
            from: "if redis.call('pttl', key) < lease then",
            nth: 1,
            to: "if true then",
            what: "a renewal cuts a longer TTL short",
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
    (
        Mutant {
            file: "release.lua",
            from: "if not grant_shown(grant) then",
            nth: 1,
            to: "if false then",
            what: "a give-back takes the owner's hold whatever its grant's latch shows",
        },
        1,
    ),
    (
        Mutant {
            file: "release.lua",
            from: "redis.call('set', grant, 'x', 'keepttl')",
            nth: 1,
            to: "redis.call('get', grant)",
            what: "a give-back leaves its grant's latch showing the grant",
        },
        1,
    ),
    (
        Mutant {
            file: "release.lua",
            from: "return latch ~= false and latch ~= 'x'",
            nth: 1,
            to: "return latch ~= false",
            what: "a give-back of a request given up takes the owner's hold",
        },
        1,
    ),
    (
        Mutant {
            file: "release.lua",
            from: "if deadline ~= nil and deadline > 0 then",
            nth: 1,
            to: "if false then",
            what: "a release past its deadline releases",
        },
        1,
    ),
    (
        Mutant {
            file: "release.lua",
            from: "if deadline ~= nil and deadline > 0 then",
            nth: 1,
            to: "if deadline ~= nil then",
            what: "a release with a negative deadline (none) is refused as too late",
        },
        1,
    ),
    (
        Mutant {
            file: "lean_acquire.lua",
            from: "if too_late(ARGV[3]) then",
            nth: 1,
            to: "if false then",
            what: "a lean acquire past its deadline takes the lock",
        },
        1,
    ),
    (
        Mutant {
            file: "lean_acquire.lua",
            from: "if redis.call('pttl', KEYS[1]) < tonumber(ARGV[1]) then",
            nth: 1,
            to: "redis.call('hincrby', KEYS[1], ARGV[2], 1) if true then",
            what: "a lean acquire that finds the owner's hold counts it again",
        },
        1,
    ),
    (
        Mutant {
            file: "lean_acquire.lua",
            from: "if redis.call('pttl', KEYS[1]) < tonumber(ARGV[1]) then",
            nth: 1,
            to: "if true then",
            what: "a lean acquire that finds the owner's hold cuts a longer TTL short",
        },
        1,
    ),
    (
        Mutant {
            file: "lean_release.lua",
            from: "if too_late(ARGV[4]) then",
            nth: 1,
            to: "if false then",
            what: "a lean release past its deadline releases",
        },
        1,
    ),
    (
        Mutant {
            file: "lean_acquire.lua",
            from: "if (tonumber(ARGV[4]) or 0) > 0 and not too_late(ARGV[4]) then",
            nth: 1,
            to: "if false then",
            what: "a lean acquire before its not-before takes the lock",
        },
        1,
    ),
    (
        Mutant {
            file: "lean_release.lua",
            from: "if (tonumber(ARGV[5]) or 0) > 0 and not too_late(ARGV[5]) then",
            nth: 1,
            to: "if false then",
            what: "a lean release before its not-before releases",
        },
        1,
    ),
    (
        Mutant {
            file: "lean_release.lua",
            from: "redis.call(ARGV[3], KEYS[2], ARGV[1])",
            nth: 1,
            to: "",
            what: "a lean release publishes nothing",
        },
        1,
    ),
    (
        Mutant {
            file: "lean_release.lua",
            from: "if redis.pcall('hexists', KEYS[1], ARGV[2]) ~= 1 then",
            nth: 1,
            to: "if redis.call('exists', KEYS[1]) ~= 1 then",
            what: "a lean release deletes another owner's hold",
        },
        1,
    ),
    (
        Mutant {
            file: "lean_settle.lua",
            from: "if not too_late(ARGV[2]) then",
            nth: 1,
            to: "if false then",
            what: "a lean settle acts before its lost sends' deadline",
        },
        1,
    ),
    (
        Mutant {
            file: "lean_settle.lua",
            from: "if too_late(ARGV[6]) then",
            nth: 1,
            to: "if false then",
            what: "a lean settle past its own deadline acts",
        },
        1,
    ),
    (
        Mutant {
            file: "lean_settle.lua",
            from: "if redis.pcall('hexists', KEYS[1], ARGV[1]) ~= 1 then",
            nth: 1,
            to: "if redis.call('exists', KEYS[1]) ~= 1 then",
            what: "a lean settle takes another owner's hold for its own",
        },
        1,
    ),
    (
        Mutant {
            file: "lean_settle.lua",
            from: "if ARGV[3] == 'take' then",
            nth: 2,
            to: "if ARGV[3] ~= 'take' then",
            what: "a lean settle to release only reads, and one to take releases",
        },
        2,
    ),
    (
        Mutant {
            file: "lean_settle.lua",
            from: "if redis.call('pttl', KEYS[1]) < lease then",
            nth: 1,
            to: "if false then",
            what: "a lean settle that finds the owner's hold leaves its TTL as it is",
        },
        1,
    ),
    (
        Mutant {
            file: "lean_settle.lua",
            from: "if redis.call('pttl', KEYS[1]) < lease then",
            nth: 1,
            to: "if true then",
            what: "a lean settle that finds the owner's hold cuts a longer TTL short",
        },
        1,
    ),
    (
        Mutant {
            file: "lean_settle.lua",
            from: "redis.call(ARGV[5], KEYS[2], ARGV[4])",
            nth: 1,
            to: "",
            what: "a lean settle that releases publishes nothing",
        },
        1,
    ),
];

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
