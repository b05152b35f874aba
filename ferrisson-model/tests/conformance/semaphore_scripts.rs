//! The semaphore's scripts and its model ([`semaphore::Server`]).

use ferrisson_model::semaphore::{Bounds, Mutation, Reply, Server};
use ferrisson_model::{ClientId, Latch, ReqId};
use redis::{Commands, Script};

use super::rng::{announced_seed, Rng};
use super::server::RedisServer;
use super::{connections, every_mutant_is_caught, id, load, Mutant, SEQUENCES, STEPS};

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
    /// A give-back, and its grant (`None`: a give-back naming none).
    GiveBack(ReqId, Option<ReqId>),
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
        8..=9 => Step::GiveBack(
            ReqId {
                client,
                seq: 100 + rng.below(GIVE_BACKS as u64) as u8,
            },
            (rng.below(4) > 0).then_some(acquire),
        ),
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
            Step::GiveBack(req, grant) => {
                let mut call = self.give_back.key(NAME);
                call.key(CHANNEL).key(give_back_latch(req));
                if let Some(grant) = grant {
                    call.key(acquire_latch(grant));
                }
                let count: Option<i64> = call
                    .arg(1)
                    .arg("publish")
                    .arg(LATCH_TTL_MS)
                    .invoke(conn)
                    .unwrap();
                match count {
                    Some(count) => Reply::Count(count as i16),
                    None => Reply::Closed,
                }
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
        Step::GiveBack(req, grant) => {
            // A give-back naming no grant: one whose grant has no latch.
            let grant = grant.unwrap_or(ReqId { client: 9, seq: 0 });
            let (reply, published) = server.give_back(req, grant, 1, Mutation::None);
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
    let (mut conn, mut subscriber) = connections(redis);
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
        "Closed",
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
            file: "semaphore_give_back.lua",
            from: "redis.call('set', grant, 'x', 'xx', 'keepttl')",
            nth: 1,
            to: "redis.call('get', grant)",
            what: "a give-back leaves its grant's latch showing the grant",
        },
        1,
    ),
    (
        Mutant {
            file: "semaphore_give_back.lua",
            from: "if grant ~= nil and redis.call('get', grant) == 'x' then",
            nth: 1,
            to: "if false then",
            what: "a give-back of a closed grant gives again",
        },
        1,
    ),
    (
        Mutant {
            file: "semaphore_give_back.lua",
            from: "redis.call('set', grant, 'x', 'xx', 'keepttl')",
            nth: 1,
            to: "redis.call('set', grant, 'x', 'keepttl')",
            what: "a give-back whose grant's latch ran out writes one that never runs out",
        },
        1,
    ),
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
