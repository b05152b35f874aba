//! The read-write lock's scripts and its model ([`rwlock::Server`] with a
//! [`rwlock::Clock`]): read and write acquires (some past their
//! deadline), releases, settles, batched read renewals of mixed owners,
//! and ticks, with each read hold's timeout key, the hash's TTL that the
//! releases set from them, and the messages compared.

use std::collections::BTreeMap;

use ferrisson_model::rwlock::{Clock, Mutation, Reply, Server, Side};
use ferrisson_model::{ClientId, Latch, ReqId};
use redis::{Commands, Script, Value};

use super::rng::{announced_seed, Rng};
use super::server::RedisServer;
use super::{
    connections, every_mutant_is_caught, field, id, load, published, ticks_ms as ms,
    time_agrees as agrees, values_and_pttls, Mutant, SEQUENCES, STEPS,
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
    /// A release; with a grant (an acquire's request): the give-back of
    /// the hold it took, which releases only while its latch shows it.
    Release(Side, ReqId, Option<ReqId>),
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
            (rng.below(3) == 0).then_some(acquire),
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
            Step::Release(Side::Read, req, grant) => {
                let mut call = self.read_release.key(NAME);
                call.key(CHANNEL)
                    .key(timeout_prefix(req.client))
                    .key(PREFIX)
                    .key(unlock_latch(req));
                if let Some(grant) = grant {
                    call.key(acquire_latch(grant));
                }
                let reply: Option<i64> = call
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
            Step::Release(Side::Write, req, grant) => {
                let mut call = self.write_release.key(NAME);
                call.key(CHANNEL).key(unlock_latch(req)).key(PREFIX);
                if let Some(grant) = grant {
                    call.key(acquire_latch(grant));
                }
                let reply: Option<i64> = call
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
                let owners: Vec<ClientId> = [Some(first), second].into_iter().flatten().collect();
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
        Step::Release(side, req, grant) => {
            let (reply, published) = match grant {
                Some(grant) => server.give_back(side, req, grant, m),
                None => server.release(side, req, m),
            };
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
    let (mut conn, mut subscriber) = connections(redis);
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
            let context = format!("seed {seed}, sequence {sequence}, steps (and leases) {steps:?}");
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
                Step::Acquire(Side::Read, ..) | Step::Release(Side::Read, ..) => "read ",
                Step::Acquire(Side::Write, ..) | Step::Release(Side::Write, ..) => "write ",
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
            if let Step::Release(side, req, Some(_)) = step {
                let what = match real.reply {
                    Reply::Released(_) => Some("given back"),
                    Reply::NotHeld if before.count_of(req.client, side) > 0 => {
                        Some("give-back refused beside a hold")
                    }
                    _ => None,
                };
                if let Some(what) = what {
                    *seen.entry(what.to_owned()).or_default() += 1;
                }
            }
            if matches!(step, Step::Release(Side::Write, ..))
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
        "given back",
        "give-back refused beside a hold",
    ] {
        assert!(seen.contains_key(what), "no step met {what}: {seen:?}");
    }
}

/// One-line bugs in the read-write lock's scripts, each a plausible one.
const MUTANTS: &[(Mutant, usize)] = &[
    (
        Mutant {
            file: "read_release.lua",
            from: "redis.call('set', grant, 'x', 'keepttl')",
            nth: 1,
            to: "redis.call('get', grant)",
            what: "a read give-back leaves its grant's latch showing the grant",
        },
        1,
    ),
    (
        Mutant {
            file: "write_release.lua",
            from: "redis.call('set', grant, 'x', 'keepttl')",
            nth: 1,
            to: "redis.call('get', grant)",
            what: "a write give-back leaves its grant's latch showing the grant",
        },
        1,
    ),
    (
        Mutant {
            file: "read_release.lua",
            from: "if not grant_shown(grant) then",
            nth: 1,
            to: "if false then",
            what: "a read give-back takes the owner's hold whatever its grant's latch shows",
        },
        1,
    ),
    (
        Mutant {
            file: "write_release.lua",
            from: "if not grant_shown(grant) then",
            nth: 1,
            to: "if false then",
            what: "a write give-back takes the owner's hold whatever its grant's latch shows",
        },
        1,
    ),
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
            from: "if redis.call('pttl', KEYS[1]) < tonumber(ARGV[2]) then",
            nth: 1,
            to: "if true then",
            what: "a write release that leaves write holds cuts a longer TTL short",
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
            from: "if redis.call('pttl', hold) < lease then",
            nth: 1,
            to: "if true then",
            what: "a read renewal cuts a longer hold's TTL short",
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
