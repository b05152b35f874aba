//! A count in one string key, as the semaphore and the count-down latch
//! keep it (Redisson's `RSemaphore` and `RCountDownLatch`), through every
//! script that sets, counts down, drains, deletes or reads one (and a
//! job's last occurrence done, read as a count), and the election's
//! `publish.lua`: each step against a small model of the key, with data
//! ferrisson did not write put there now and then (each script must then
//! fail and change nothing), and ticks.

use std::collections::BTreeMap;

use redis::{Commands, Script};

use super::rng::Rng;
use super::server::RedisServer;
use super::{
    announced_seed, connections, every_mutant_is_caught, load, published, Mutant, SEQUENCES, STEPS,
    TICK_MS, TTL_SLACK_MS,
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
    let (mut conn, mut subscriber) = connections(redis);
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
