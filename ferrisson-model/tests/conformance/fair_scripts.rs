//! The fair lock's scripts and its queue's model ([`fair::Server`] with a
//! [`fair::Clock`]), with the wake-up messages each step publishes, while
//! time passes: ticks move every TTL closer and every waiter's score
//! lower, and the scores are compared with the model's.

use std::collections::BTreeMap;

use ferrisson_model::fair::{Clock, Mutation, Reply, Server};
use ferrisson_model::{ClientId, Latch, ReqId};
use redis::{Commands, Script, Value};

use super::rng::{announced_seed, Rng};
use super::server::RedisServer;
use super::{
    connections, every_mutant_is_caught, field, id, load, ticks_ms as ms, time_agrees as agrees,
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
    /// A give-back (`fair_release.lua` under its own request) of the hold
    /// the acquire (the second) took.
    GiveBack(ReqId, ReqId),
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
        5..=7 => {
            let req = ReqId {
                client,
                seq: 100 + rng.below(RELEASES as u64) as u8,
            };
            match rng.below(3) {
                0 => Step::GiveBack(
                    req,
                    ReqId {
                        client,
                        seq: 1 + rng.below(ACQUIRES as u64) as u8,
                    },
                ),
                _ => Step::Release(req),
            }
        }
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
            Step::Release(req) | Step::GiveBack(req, _) => {
                let mut call = self.release.key(NAME);
                call.key(QUEUE)
                    .key(TIMEOUTS)
                    .key(CHANNEL)
                    .key(unlock_latch(req));
                if let Step::GiveBack(_, grant) = step {
                    call.key(acquire_latch(grant));
                }
                let reply: Option<i64> = call
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

fn model_run(server: &mut Server, step: Step) -> (Option<(Reply, Option<i32>)>, Option<ClientId>) {
    match step {
        Step::Acquire(req, join) => (
            Some(server.acquire_waiting(req, join, Mutation::None)),
            None,
        ),
        Step::Release(req) => {
            let (reply, woken) = server.release(req);
            (Some((reply, None)), woken)
        }
        Step::GiveBack(req, grant) => {
            let (reply, woken) = server.give_back(req, grant);
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
    let (read_hash, read_pttl, read_queue, read_scores, (seconds, micros)): Read = redis::pipe()
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
            (a, b) => (a - b).abs() <= TTL_SLACK_MS,
        },
        "{context}: lock_info's PTTL {pttl}, read after it {read_pttl}"
    );
    assert!(
        (read_now - now).abs() <= TTL_SLACK_MS,
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
    let (mut conn, mut subscriber) = connections(redis);
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
            if let Step::GiveBack(req, _) = step {
                let owner_held = before.hold.is_some_and(|(owner, _)| owner == req.client);
                let what = match real {
                    Reply::Released(_) => Some("given back"),
                    Reply::NotHeld if owner_held => Some("give-back refused beside a hold"),
                    _ => None,
                };
                if let Some(what) = what {
                    *seen.entry(what.to_owned()).or_default() += 1;
                }
            }
            let kind = match (real, real_woken.is_empty()) {
                (Reply::Released(_) | Reply::NotHeld | Reply::Left(_), false) => {
                    format!("{forced}{real:?} waking")
                }
                _ => format!("{forced}{real:?}"),
            };
            *seen.entry(kind).or_default() += 1;
            // Waiters that were dead at the head of the line, gone.
            let actor = match step {
                Step::Acquire(req, _) | Step::Release(req) | Step::GiveBack(req, _) => {
                    Some(req.client)
                }
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
        "given back",
        "give-back refused beside a hold",
    ] {
        assert!(seen.contains_key(what), "no step met {what}: {seen:?}");
    }
}

/// One-line bugs in the fair lock's scripts, each a plausible one.
const MUTANTS: &[(Mutant, usize)] = &[
    (
        Mutant {
            file: "fair_release.lua",
            from: "redis.call('set', grant, 'x', 'keepttl')",
            nth: 1,
            to: "redis.call('get', grant)",
            what: "a fair give-back leaves its grant's latch showing the grant",
        },
        1,
    ),
    (
        Mutant {
            file: "fair_release.lua",
            from: "if not grant_shown(grant) then",
            nth: 1,
            to: "if false then",
            what: "a fair give-back takes the owner's hold whatever its grant's latch shows",
        },
        1,
    ),
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
