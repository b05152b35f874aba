//! The fenced hash (`fenced_set.lua`, `fenced_get.lua`): a data hash
//! written only by a token at least as high as every token before, and
//! its fence, against a small model, with another program's data under
//! the data key or the fence now and then (the scripts must fail and
//! change nothing).

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

fn run(set: &Script, get: &Script, conn: &mut redis::Connection, step: Step) -> Option<Outcome> {
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
