//! The models cannot drift from the code: random sequences of script calls
//! go through each model's server and, in the same order, through the
//! real `lua/` scripts on a spawned server; after each step the replies,
//! the keys, their TTLs and the messages published must agree. Every
//! script in `lua/` is run by one of the comparisons here (one module a
//! family of scripts), and each family keeps a list of one-line mutants
//! of its scripts that its comparison must catch.

use ferrisson_model::{ClientId, ReqId};
use ferrisson_test_support::{rng, server};
use redis::{Commands, Script};
use rng::announced_seed;
use server::RedisServer;

mod counter_scripts;
mod expirable_script;
mod fair_scripts;
mod fenced_hash_scripts;
mod lock_scripts;
mod rwlock_scripts;
mod semaphore_scripts;

/// One tick of the model's clock on Redis. A `Tick` step moves every key's
/// end one tick closer (PEXPIRE to what is left less a tick, or DEL when
/// nothing would be left), as the passing of a tick would: TTLs are then
/// compared with the model's, in ticks, with no wait.
const TICK_MS: u64 = 30_000;
/// How far below the model's a TTL may be when it is read: the wall time a
/// sequence takes, generously (a sequence takes milliseconds; a tick is
/// 30 s).
const TTL_SLACK_MS: i64 = 10_000;
/// Steps per sequence, and sequences per run.
const STEPS: usize = 60;
const SEQUENCES: usize = 50;

fn field(client: ClientId) -> String {
    format!("model-client-{client}:owner")
}

fn id(req: ReqId) -> String {
    format!("c{}-{}", req.client, req.seq)
}

/// The scripts of `lua/`, each run by one of the comparisons here.
const SCRIPTS: &[(&str, &str)] = &[
    ("acquire.lua", include_str!("../../../lua/acquire.lua")),
    (
        "fenced_acquire.lua",
        include_str!("../../../lua/fenced_acquire.lua"),
    ),
    ("release.lua", include_str!("../../../lua/release.lua")),
    ("renew.lua", include_str!("../../../lua/renew.lua")),
    (
        "acquire_cancel.lua",
        include_str!("../../../lua/acquire_cancel.lua"),
    ),
    (
        "fair_acquire.lua",
        include_str!("../../../lua/fair_acquire.lua"),
    ),
    (
        "fair_release.lua",
        include_str!("../../../lua/fair_release.lua"),
    ),
    (
        "fair_leave.lua",
        include_str!("../../../lua/fair_leave.lua"),
    ),
    (
        "read_acquire.lua",
        include_str!("../../../lua/read_acquire.lua"),
    ),
    (
        "write_acquire.lua",
        include_str!("../../../lua/write_acquire.lua"),
    ),
    (
        "read_release.lua",
        include_str!("../../../lua/read_release.lua"),
    ),
    (
        "write_release.lua",
        include_str!("../../../lua/write_release.lua"),
    ),
    (
        "renew_read.lua",
        include_str!("../../../lua/renew_read.lua"),
    ),
    (
        "set_if_missing.lua",
        include_str!("../../../lua/set_if_missing.lua"),
    ),
    (
        "latch_count_down.lua",
        include_str!("../../../lua/latch_count_down.lua"),
    ),
    (
        "latch_delete.lua",
        include_str!("../../../lua/latch_delete.lua"),
    ),
    (
        "read_count.lua",
        include_str!("../../../lua/read_count.lua"),
    ),
    (
        "semaphore_delete.lua",
        include_str!("../../../lua/semaphore_delete.lua"),
    ),
    (
        "semaphore_drain.lua",
        include_str!("../../../lua/semaphore_drain.lua"),
    ),
    (
        "job_last_done.lua",
        include_str!("../../../lua/job_last_done.lua"),
    ),
    ("publish.lua", include_str!("../../../lua/publish.lua")),
    (
        "lean_acquire.lua",
        include_str!("../../../lua/lean_acquire.lua"),
    ),
    (
        "lean_release.lua",
        include_str!("../../../lua/lean_release.lua"),
    ),
    (
        "lean_settle.lua",
        include_str!("../../../lua/lean_settle.lua"),
    ),
    (
        "fenced_get.lua",
        include_str!("../../../lua/fenced_get.lua"),
    ),
    (
        "fenced_set.lua",
        include_str!("../../../lua/fenced_set.lua"),
    ),
    (
        "force_unlock.lua",
        include_str!("../../../lua/force_unlock.lua"),
    ),
    (
        "fair_force_unlock.lua",
        include_str!("../../../lua/fair_force_unlock.lua"),
    ),
    (
        "acquire_granted.lua",
        include_str!("../../../lua/acquire_granted.lua"),
    ),
    ("lock_info.lua", include_str!("../../../lua/lock_info.lua")),
    (
        "semaphore_acquire.lua",
        include_str!("../../../lua/semaphore_acquire.lua"),
    ),
    (
        "semaphore_release.lua",
        include_str!("../../../lua/semaphore_release.lua"),
    ),
    (
        "semaphore_give_back.lua",
        include_str!("../../../lua/semaphore_give_back.lua"),
    ),
    ("expirable.lua", include_str!("../../../lua/expirable.lua")),
    (
        "renew_permits.lua",
        include_str!("../../../lua/renew_permits.lua"),
    ),
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

/// A connection for the scripts, and one to subscribe on (a read that
/// waits 30 s at most for a message).
fn connections(redis: &RedisServer) -> (redis::Connection, redis::Connection) {
    let client = redis::Client::open(redis.url()).unwrap();
    let conn = client.get_connection().unwrap();
    let subscriber = client.get_connection().unwrap();
    subscriber
        .set_read_timeout(Some(std::time::Duration::from_secs(30)))
        .unwrap();
    (conn, subscriber)
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
