//! Jobs across OS processes: schedulers in several processes fire each
//! occurrence with skew, and exactly one runs it, also when a runner is
//! killed in the middle of a run.

use ferrisson_test_support as common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::child::{self, ChildProcess};
use common::RedisServer;

const JOB: &str = "fleet:report";

/// A scheduler in a child process: it connects, says `ready`, reads the
/// schedule's start (ns since the epoch) from its parent, then fires
/// `COUNT` occurrences `PERIOD_MS` apart, `SKEW_MS` late, each a
/// [`ferrisson::Job::run`]; with `EVERY` 1, the job names its occurrences
/// by the wall clock ([`ferrisson::Job::every`] of the period).
///
/// Lines: `try <k> <ns>` before each run, `start <k> <ns>` and `end <k>
/// <ns>` inside the work, then `ran <k>`, `skip <k>`, `already <k>` or
/// `overran <k>`; `done` at the end. The work of occurrence `HANG_AT`
/// never ends.
#[test]
fn scheduler_child() {
    child::run_as("scheduler", scheduler);
}

fn ms(name: &str) -> u64 {
    child::setting(name).parse().expect("a number of ms")
}

async fn scheduler() {
    let url = child::setting("REDIS_URL");
    let client = ferrisson::Client::connect(url.as_str()).await.unwrap();
    let (period, skew, work) = (ms("PERIOD_MS"), ms("SKEW_MS"), ms("WORK_MS"));
    let (at_most, at_least) = (ms("AT_MOST_MS"), ms("AT_LEAST_MS"));
    let count: u64 = child::setting("COUNT").parse().unwrap();
    let hang_at: i64 = child::setting("HANG_AT").parse().unwrap();
    let mut job = client
        .job(JOB)
        .at_least_for(Duration::from_millis(at_least))
        .label(child::setting("LABEL"));
    if at_most > 0 {
        job = job.at_most_for(Duration::from_millis(at_most));
    }
    if child::setting("EVERY") == "1" {
        job = job.every(Duration::from_millis(period));
    }
    child::say("ready");
    let start: u128 = tokio::task::spawn_blocking(child::hear)
        .await
        .unwrap()
        .parse()
        .expect("the schedule's start");
    for k in 0..count {
        let at = start + u128::from(k * period + skew) * 1_000_000;
        let wait = at.saturating_sub(child::now_ns());
        tokio::time::sleep(Duration::from_nanos(wait as u64)).await;
        child::say(&format!("try {k} {}", child::now_ns()));
        let ran = job
            .run(|_lease| async move {
                child::say(&format!("start {k} {}", child::now_ns()));
                if k as i64 == hang_at {
                    std::future::pending::<()>().await;
                }
                tokio::time::sleep(Duration::from_millis(work)).await;
                child::say(&format!("end {k} {}", child::now_ns()));
            })
            .await;
        match ran {
            Ok(ferrisson::JobRun::Ran(())) => child::say(&format!("ran {k}")),
            Ok(ferrisson::JobRun::Overran(())) => child::say(&format!("overran {k}")),
            Ok(ferrisson::JobRun::Skipped { .. }) => child::say(&format!("skip {k}")),
            Ok(ferrisson::JobRun::AlreadyDone { .. }) => child::say(&format!("already {k}")),
            Ok(ferrisson::JobRun::Unreleased { error, .. }) => {
                child::say(&format!("unreleased {k} {error}"))
            }
            Err(err) => child::say(&format!("error {k} {err}")),
        }
    }
    child::say("done");
}

/// The settings of one scheduler.
struct Schedule {
    period_ms: u64,
    count: u64,
    work_ms: u64,
    at_most_ms: u64,
    at_least_ms: u64,
    hang_at: i64,
    /// Occurrences named by the wall clock ([`ferrisson::Job::every`]);
    /// the schedule then starts on a whole period.
    every: bool,
}

/// What every scheduler said, by child.
type Said = Vec<Vec<String>>;

/// Starts one scheduler per skew, starts the schedule once all are
/// ready, and gathers their lines until each has said `done`. A child
/// that says `start <hang_at>` is killed at once (`killed` gets its
/// index).
fn run_fleet(server: &RedisServer, skews: &[u64], s: &Schedule) -> (Said, Option<usize>) {
    let mut fleet: Vec<Option<ChildProcess>> = skews
        .iter()
        .enumerate()
        .map(|(i, skew)| {
            Some(ChildProcess::spawn(
                "scheduler_child",
                "scheduler",
                &[
                    ("REDIS_URL", server.url()),
                    ("PERIOD_MS", s.period_ms.to_string()),
                    ("SKEW_MS", skew.to_string()),
                    ("WORK_MS", s.work_ms.to_string()),
                    ("AT_MOST_MS", s.at_most_ms.to_string()),
                    ("AT_LEAST_MS", s.at_least_ms.to_string()),
                    ("COUNT", s.count.to_string()),
                    ("HANG_AT", s.hang_at.to_string()),
                    ("LABEL", format!("host-{i}")),
                    ("EVERY", u8::from(s.every).to_string()),
                ],
            ))
        })
        .collect();
    for child in fleet.iter().flatten() {
        child.expect("ready", Duration::from_secs(60));
    }
    // Every child has connected: the first occurrence fires a moment
    // from now, the same instant for all (one clock on this machine); on
    // the wall clock's grid of the period when the job names occurrences
    // by it, as cron would fire.
    let mut start = child::now_ns() + 500_000_000;
    if s.every {
        let period = u128::from(s.period_ms) * 1_000_000;
        start = start.div_ceil(period) * period;
    }
    for child in fleet.iter_mut().flatten() {
        child.send(&start.to_string());
    }
    let mut said: Said = vec![Vec::new(); skews.len()];
    let mut killed = None;
    let hang = format!("start {} ", s.hang_at);
    // Generous: the schedule's length many times over.
    let deadline = Instant::now() + Duration::from_millis(s.period_ms * s.count) * 10;
    let mut done = 0;
    while done < skews.len() - usize::from(killed.is_some()) {
        assert!(
            Instant::now() < deadline,
            "the schedulers did not finish: {said:?}"
        );
        for (i, slot) in fleet.iter_mut().enumerate() {
            let Some(child) = slot else { continue };
            while let Some(line) = child.try_line(Duration::from_millis(5)) {
                if line.starts_with(&hang) {
                    child.kill();
                    killed = Some(i);
                }
                if line == "done" {
                    done += 1;
                }
                said[i].push(line);
                if killed == Some(i) {
                    *slot = None;
                    break;
                }
            }
        }
    }
    (said, killed)
}

/// The run of each occurrence: who started it, when it started and when
/// it ended (ns), and when its runner asked for it.
#[derive(Debug)]
struct Run {
    child: usize,
    asked: u128,
    start: u128,
    end: Option<u128>,
}

fn runs(said: &Said) -> BTreeMap<u64, Vec<Run>> {
    let mut runs: BTreeMap<u64, Vec<Run>> = BTreeMap::new();
    for (child, lines) in said.iter().enumerate() {
        let mut asked = BTreeMap::new();
        for line in lines {
            let words: Vec<&str> = line.split(' ').collect();
            match words.as_slice() {
                ["try", k, ns] => {
                    asked.insert(k.parse::<u64>().unwrap(), ns.parse::<u128>().unwrap());
                }
                ["start", k, ns] => {
                    let k = k.parse().unwrap();
                    runs.entry(k).or_default().push(Run {
                        child,
                        asked: asked[&k],
                        start: ns.parse().unwrap(),
                        end: None,
                    });
                }
                ["end", k, ns] => {
                    let k: u64 = k.parse().unwrap();
                    let run = runs
                        .get_mut(&k)
                        .and_then(|runs| runs.iter_mut().find(|r| r.child == child))
                        .expect("an end after its start");
                    run.end = Some(ns.parse().unwrap());
                }
                ["error", ..] | ["overran", ..] => panic!("child {child}: {line}"),
                _ => {}
            }
        }
    }
    runs
}

/// Three schedulers whose occurrences fire up to a quarter of a second
/// apart: each occurrence is run exactly once, the runs never overlap,
/// and every other scheduler skips it ("at least for" outlasts the skew).
#[test]
fn every_occurrence_runs_once_across_skewed_schedulers() {
    if child::role().is_some() {
        return;
    }
    let server = RedisServer::start();
    let schedule = Schedule {
        period_ms: 2000,
        count: 5,
        work_ms: 100,
        at_most_ms: 0,
        at_least_ms: 1500,
        hang_at: -1,
        every: false,
    };
    let (said, _) = run_fleet(&server, &[0, 120, 250], &schedule);
    let runs = runs(&said);
    for k in 0..schedule.count {
        let of_k = runs.get(&k).map_or(0, Vec::len);
        assert_eq!(of_k, 1, "occurrence {k} ran {of_k} times: {said:?}");
        let skips = said
            .iter()
            .filter(|lines| lines.contains(&format!("skip {k}")))
            .count();
        assert_eq!(skips, 2, "occurrence {k}: {said:?}");
    }
    let mut intervals: Vec<(u128, u128)> = runs
        .values()
        .flatten()
        .map(|r| (r.start, r.end.expect("every run ended")))
        .collect();
    intervals.sort();
    for pair in intervals.windows(2) {
        assert!(pair[0].1 <= pair[1].0, "two runs at once: {intervals:?}");
    }
}

/// The fleet: five schedulers firing every second, 20 ms apart,
/// a 5 ms job with the defaults (no "at least for") and its occurrences
/// named by the wall clock: each occurrence runs exactly once, and the
/// four others find it done (or, rarely, still held). A lock alone let
/// every scheduler run every occurrence.
#[test]
fn named_occurrences_run_once_without_at_least_for() {
    if child::role().is_some() {
        return;
    }
    let server = RedisServer::start();
    let schedule = Schedule {
        period_ms: 1000,
        count: 6,
        work_ms: 5,
        at_most_ms: 0,
        at_least_ms: 0,
        hang_at: -1,
        every: true,
    };
    let (said, _) = run_fleet(&server, &[0, 20, 40, 60, 80], &schedule);
    let runs = runs(&said);
    for k in 0..schedule.count {
        let of_k = runs.get(&k).map_or(0, Vec::len);
        assert_eq!(of_k, 1, "occurrence {k} ran {of_k} times: {said:?}");
        let others = said
            .iter()
            .filter(|lines| {
                lines.contains(&format!("already {k}")) || lines.contains(&format!("skip {k}"))
            })
            .count();
        assert_eq!(others, 4, "occurrence {k}: {said:?}");
    }
}

/// A runner killed in the middle of a run (`kill -9`) holds the job
/// until its "at most for" runs out: the occurrences that fire before
/// then are skipped by every scheduler, the first after it runs, once,
/// and no run starts before the dead one's lease ended.
#[test]
fn a_killed_runner_frees_the_job_after_at_most_for() {
    if child::role().is_some() {
        return;
    }
    let server = RedisServer::start();
    let schedule = Schedule {
        period_ms: 3000,
        count: 5,
        work_ms: 100,
        at_most_ms: 4500,
        at_least_ms: 1000,
        hang_at: 1,
        every: false,
    };
    let (said, killed) = run_fleet(&server, &[0, 100, 200], &schedule);
    let killed = killed.expect("a runner of occurrence 1 was killed");
    let runs = runs(&said);
    let count = |k: u64| runs.get(&k).map_or(0, Vec::len);
    // Occurrence 1 fired 3 s after 0 and hung: its lease ends 4.5 s
    // later (7.5 s), after occurrence 2 fired (6 s) and before 3 (9 s).
    assert_eq!(
        (count(0), count(1), count(2), count(3), count(4)),
        (1, 1, 0, 1, 1),
        "{said:?}"
    );
    let dead = &runs[&1][0];
    assert_eq!(dead.child, killed);
    let lease_end = dead.asked + u128::from(schedule.at_most_ms) * 1_000_000;
    let next = &runs[&3][0];
    assert!(
        next.start >= lease_end,
        "occurrence 3 started {} ms before the dead runner's lease ended",
        (lease_end - next.start) / 1_000_000
    );
    for (i, lines) in said.iter().enumerate() {
        if i != killed {
            assert!(lines.contains(&"skip 2".to_owned()), "child {i}: {lines:?}");
        }
    }
}
