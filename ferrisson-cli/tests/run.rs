//! `ferrisson run NAME -- COMMAND`, run as real processes against a
//! private `redis-server` per test: exclusion (one at a time, or N with
//! `--permits`), exit statuses, signals passed on, a lost lease stopping
//! the command (with the lock and with a permit), `--at-least-for`,
//! what the command leaves in its process group, `kill -9` of the runner
//! (its command and their children), named occurrences, and bad input.
#![cfg(unix)]

// The workspace's test support, shared: one way to start servers.
use ferrisson_test_support as common;

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::RedisServer;

/// The bound for anything that should happen at once: far above what a
/// busy machine takes.
const SOON: Duration = Duration::from_secs(30);

/// Starts `ferrisson --url <server> run <args>`; stderr is inherited
/// (the test's output shows it on failure).
fn runner(server: &RedisServer, args: &[&str]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_ferrisson"))
        .env_remove("REDIS_URL")
        .arg("--url")
        .arg(server.url())
        .arg("run")
        .args(args)
        .stdin(Stdio::null())
        .spawn()
        .expect("start ferrisson run")
}

/// Waits for `child` to exit, within `limit`; kills it and panics
/// otherwise.
fn wait(child: &mut Child, limit: Duration) -> ExitStatus {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().expect("wait") {
            return status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("the runner did not exit within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Runs `ferrisson run <args>` to its end; its exit code.
fn run(server: &RedisServer, args: &[&str]) -> i32 {
    let mut child = runner(server, args);
    wait(&mut child, SOON).code().expect("an exit code")
}

/// Runs `ferrisson run <args>` to its end in `dir`, as a user would after
/// `export REDIS_URL=...`; its exit code and what it said on stderr.
fn run_in(server: &RedisServer, dir: &Path, args: &[&str]) -> (i32, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_ferrisson"))
        .env("REDIS_URL", server.url())
        .current_dir(dir)
        .arg("run")
        .args(args)
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start ferrisson run");
    let mut stderr = child.stderr.take().unwrap();
    let (send, said) = mpsc::channel();
    std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stderr.read_to_string(&mut text);
        let _ = send.send(text);
    });
    let code = wait(&mut child, SOON).code().expect("an exit code");
    let stderr = said.recv_timeout(SOON).expect("stderr closed");
    (code, stderr)
}

/// The occurrence `--every` names now: the multiple of `period_ms` since
/// the Unix epoch nearest to now, in ms.
fn nearest_occurrence(period_ms: u64) -> u64 {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    (now + period_ms / 2) / period_ms * period_ms
}

/// Waits until `cond` holds, checking every 10 ms, for at most `limit`.
fn until(limit: Duration, what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !cond() {
        assert!(Instant::now() < deadline, "not within {limit:?}: {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Whether the process `pid` runs: false once it is gone, or a zombie
/// (dead, waiting to be reaped by whoever adopted it).
fn alive(pid: &str) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rsplit(')')
            .next()
            .is_some_and(|s| !s.trim_start().starts_with('Z'))
    })
}

/// Reads the pid a command wrote to `file`, once it is whole; with a
/// guard that kills that process when the test ends (also on failure).
fn pid_in(file: &Path) -> Killed {
    until(SOON, "the pid is written", || {
        std::fs::read_to_string(file).is_ok_and(|p| p.ends_with('\n'))
    });
    Killed(std::fs::read_to_string(file).unwrap().trim().to_owned())
}

/// A process killed (SIGKILL) when the guard is dropped.
struct Killed(String);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-KILL", &self.0])
            .stderr(Stdio::null())
            .status();
    }
}

/// A scratch directory for the commands' marks.
fn scratch() -> PathBuf {
    let dir = common::server::unique_dir();
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// How many files in `dir` start with `prefix`.
fn count(dir: &Path, prefix: &str) -> usize {
    std::fs::read_dir(dir)
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .starts_with(prefix)
        })
        .count()
}

/// A command that marks itself in (`in.<pid>`), fails with 99 when more
/// than `most` are in at once, stays `secs`, and marks itself done.
fn counted(dir: &Path, most: usize, secs: &str) -> String {
    let d = dir.display();
    format!(
        "touch {d}/in.$$; n=$(ls {d} | grep -c '^in\\.'); \
         if [ $n -gt {most} ]; then echo \"$n at once\" >&2; exit 99; fi; \
         sleep {secs}; rm {d}/in.$$; touch {d}/done.$$"
    )
}

/// A command that marks itself in and stays until the file `go` exists.
fn held(dir: &Path) -> String {
    let d = dir.display();
    format!("touch {d}/in.$$; while [ ! -e {d}/go ]; do sleep 0.02; done; touch {d}/done.$$")
}

/// The command's exit status is the runner's; the lock is gone after.
#[test]
fn the_runner_exits_with_the_commands_status() {
    let server = RedisServer::start();
    assert_eq!(run(&server, &["job", "--", "true"]), 0);
    assert_eq!(run(&server, &["job", "--", "sh", "-c", "exit 3"]), 3);
    // Ended by a signal: 128 + its number, as shells say.
    assert_eq!(
        run(&server, &["job", "--", "sh", "-c", "kill -TERM $$"]),
        143
    );
    // A command that cannot start: 127 when it is not found.
    assert_eq!(run(&server, &["job", "--", "/nonexistent/command"]), 127);
    // Nothing left, not even a request's latch: the runner returned
    // normally.
    until(SOON, "nothing left", || server.keys("*").is_empty());
}

/// One at a time: while a run holds the lock, `--no-wait` exits with 75
/// and does not run its command; six runners that wait all run, never two
/// at once.
#[test]
fn one_run_at_a_time_under_contention() {
    let server = RedisServer::start();
    let dir = scratch();
    let mut first = runner(
        &server,
        &["job", "--label", "host-a", "--", "sh", "-c", &held(&dir)],
    );
    until(SOON, "the first command runs", || count(&dir, "in.") == 1);
    let never = format!("touch {}/in.never", dir.display());
    let busy = run(&server, &["job", "--no-wait", "--", "sh", "-c", &never]);
    assert_eq!(busy, 75);
    let bounded = run(&server, &["job", "--wait", "200ms", "--", "true"]);
    assert_eq!(bounded, 75);
    assert_eq!(count(&dir, "in."), 1);
    std::fs::write(dir.join("go"), "").unwrap();
    assert!(wait(&mut first, SOON).success());
    std::fs::remove_dir_all(&dir).unwrap();

    let dir = scratch();
    let mut runners: Vec<Child> = (0..6)
        .map(|_| {
            runner(
                &server,
                &["job", "--", "sh", "-c", &counted(&dir, 1, "0.1")],
            )
        })
        .collect();
    for runner in &mut runners {
        assert_eq!(wait(runner, SOON * 2).code(), Some(0));
    }
    assert_eq!(count(&dir, "done."), 6);
    until(SOON, "nothing left", || server.keys("*").is_empty());
}

/// `--permits N`: N runs at once and no more, across runners.
#[test]
fn n_runs_at_a_time_with_permits() {
    let server = RedisServer::start();
    let dir = scratch();
    let mut holders: Vec<Child> = (0..2)
        .map(|_| {
            runner(
                &server,
                &["pool", "--permits", "2", "--", "sh", "-c", &held(&dir)],
            )
        })
        .collect();
    until(SOON, "two commands run at once", || count(&dir, "in.") == 2);
    let third = run(
        &server,
        &["pool", "--permits", "2", "--no-wait", "--", "true"],
    );
    assert_eq!(third, 75);
    // Every runner of a name gives the same number.
    let other = run(
        &server,
        &["pool", "--permits", "3", "--no-wait", "--", "true"],
    );
    assert_eq!(other, 1);
    // A runner that waits longer than its lease for a permit still gets
    // its whole lease once it has one.
    let mut patient = runner(
        &server,
        &[
            "pool",
            "--permits",
            "2",
            "--lease",
            "1s",
            "--",
            "sh",
            "-c",
            "sleep 1.5",
        ],
    );
    std::thread::sleep(Duration::from_secs(2)); // the wait under test
    std::fs::write(dir.join("go"), "").unwrap();
    assert_eq!(wait(&mut patient, SOON).code(), Some(0));
    for holder in &mut holders {
        assert!(wait(holder, SOON).success());
    }
    std::fs::remove_dir_all(&dir).unwrap();

    let dir = scratch();
    let mut runners: Vec<Child> = (0..6)
        .map(|_| {
            runner(
                &server,
                &[
                    "pool",
                    "--permits",
                    "2",
                    "--",
                    "sh",
                    "-c",
                    &counted(&dir, 2, "0.2"),
                ],
            )
        })
        .collect();
    for runner in &mut runners {
        assert_eq!(wait(runner, SOON * 2).code(), Some(0));
    }
    assert_eq!(count(&dir, "done."), 6);
    // The semaphore's count stays; no permit is left out.
    until(SOON, "every permit back", || {
        server.cmd(&["GET", "pool"]).as_string().as_deref() == Some("2")
            && server
                .cmd(&["ZCARD", &ferrisson::layout::permit_timeouts("pool")])
                .as_int()
                == Some(0)
    });
}

/// SIGTERM and SIGINT to the runner reach the command; the runner exits
/// with its status, and the lock is released after it ended.
#[test]
fn signals_to_the_runner_reach_the_command() {
    let server = RedisServer::start();
    for (signal, code) in [("TERM", 7), ("INT", 8)] {
        let dir = scratch();
        let d = dir.display();
        let script = format!(
            "trap 'touch {d}/got; exit {code}' {signal}; touch {d}/in; \
             while :; do sleep 0.02; done"
        );
        let mut runner = runner(&server, &["job", "--", "sh", "-c", &script]);
        until(SOON, "the command runs", || dir.join("in").exists());
        let pid = runner.id().to_string();
        assert!(Command::new("kill")
            .args([&format!("-{signal}"), &pid])
            .status()
            .unwrap()
            .success());
        assert_eq!(wait(&mut runner, SOON).code(), Some(code));
        assert!(dir.join("got").exists());
        assert!(!common::exists(&server, "job"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
    // A signal while the runner waits for the lock ends the wait; the
    // command never runs, and no waiter is left behind.
    let dir = scratch();
    let mut holder = runner(&server, &["job", "--", "sh", "-c", &held(&dir)]);
    until(SOON, "the holder runs", || count(&dir, "in.") == 1);
    let never = format!("touch {}/never", dir.display());
    let mut waiting = runner(&server, &["job", "--", "sh", "-c", &never]);
    let channel = ferrisson::layout::lock_channel("job");
    // Two on the lock's channel: the holder, listening for its lease's
    // loss, and the runner that waits.
    until(SOON, "the runner waits", || {
        common::subscribers(&server, &channel) == 2
    });
    let pid = waiting.id().to_string();
    assert!(Command::new("kill")
        .args(["-INT", &pid])
        .status()
        .unwrap()
        .success());
    assert_eq!(wait(&mut waiting, SOON).code(), Some(130));
    assert!(!dir.join("never").exists());
    std::fs::write(dir.join("go"), "").unwrap();
    assert!(wait(&mut holder, SOON).success());
    let left = || (server.keys("*"), common::subscribers(&server, &channel));
    let deadline = Instant::now() + SOON;
    while left() != (vec![], 0) {
        assert!(
            Instant::now() < deadline,
            "not within {SOON:?}, left (keys, subscribers): {:?}",
            left()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Redis frozen past the lease: the renewals cannot get through, the
/// command gets SIGTERM (and SIGKILL after the grace when it ignores it),
/// and the runner exits with 76.
#[test]
fn a_lost_lease_stops_the_command() {
    let server = RedisServer::start();
    // A command that ends at SIGTERM, and one that ignores it (SIGKILL
    // ends it after the grace).
    for (trap, grace, got) in [("touch $D/got; exit 0", "30s", true), ("", "500ms", false)] {
        let dir = scratch();
        let script = format!(
            "D={}; trap '{trap}' TERM; touch $D/in; while :; do sleep 0.02; done",
            dir.display()
        );
        let mut runner = runner(
            &server,
            &[
                "job", "--lease", "1s", "--grace", grace, "--", "sh", "-c", &script,
            ],
        );
        until(SOON, "the command runs", || dir.join("in").exists());
        server.freeze();
        let status = wait(&mut runner, SOON);
        server.thaw();
        assert_eq!(status.code(), Some(76));
        assert_eq!(dir.join("got").exists(), got);
        std::fs::remove_dir_all(&dir).unwrap();
    }
    // With --at-most-for, the lease runs out by itself.
    let started = Instant::now();
    let code = run(
        &server,
        &["job", "--at-most-for", "1s", "--", "sleep", "60"],
    );
    assert_eq!(code, 76);
    assert!(started.elapsed() < Duration::from_secs(60));
}

/// `ferrisson force-unlock` of a live run stops its command at once (the
/// unlock message), not at the watchdog's next renewal (10 s with this
/// 30 s lease): exit 76, well before that renewal.
#[test]
fn a_force_unlocked_run_stops_its_command_at_once() {
    let server = RedisServer::start();
    let dir = scratch();
    let script = format!("touch {}/in; while :; do sleep 0.02; done", dir.display());
    let mut runner = runner(
        &server,
        &[
            "forced", "--lease", "30s", "--grace", "1s", "--", "sh", "-c", &script,
        ],
    );
    until(SOON, "the command runs", || dir.join("in").exists());
    // The runner listens once its command runs; a force-unlock before it
    // subscribed is told by the renewal (the limit docs/cli.md gives).
    until(SOON, "the runner listens", || {
        server
            .cmd(&["PUBSUB", "NUMSUB", "redisson_lock__channel:{forced}"])
            .as_array()
            .and_then(|reply| reply.get(1).and_then(|n| n.as_int()))
            == Some(1)
    });
    let forced = Instant::now();
    let output = Command::new(env!("CARGO_BIN_EXE_ferrisson"))
        .env_remove("REDIS_URL")
        .args(["--url", &server.url(), "force-unlock", "--yes", "forced"])
        .stdin(Stdio::null())
        .output()
        .expect("force-unlock");
    assert!(output.status.success(), "{output:?}");
    let status = wait(&mut runner, SOON);
    assert_eq!(status.code(), Some(76));
    assert!(
        forced.elapsed() < Duration::from_secs(5),
        "stopped {:?} after the force-unlock",
        forced.elapsed()
    );
    eprintln!(
        "the runner exited 76 {:?} after the force-unlock started",
        forced.elapsed()
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// With `--permits`, a lease is lost and kept as with the lock: Redis
/// frozen past it stops the command (76) and the permit comes back when
/// its lease has run out; `--at-most-for` stops a long command (76);
/// `--at-least-for` keeps the permit out after a short command, with a
/// lease of at most that long.
#[test]
fn a_permit_is_lost_and_kept_as_the_lock_is() {
    let server = RedisServer::start();
    let dir = scratch();
    let script = format!(
        "D={}; trap 'touch $D/got; exit 0' TERM; touch $D/in; while :; do sleep 0.02; done",
        dir.display()
    );
    let mut runner = runner(
        &server,
        &[
            "pool",
            "--permits",
            "1",
            "--lease",
            "1s",
            "--",
            "sh",
            "-c",
            &script,
        ],
    );
    until(SOON, "the command runs", || dir.join("in").exists());
    server.freeze();
    let status = wait(&mut runner, SOON);
    server.thaw();
    assert_eq!(status.code(), Some(76));
    assert!(dir.join("got").exists(), "the command got no SIGTERM");
    std::fs::remove_dir_all(&dir).unwrap();
    // A runner that waits gets it once its lease has run out.
    assert_eq!(
        run(
            &server,
            &["pool", "--permits", "1", "--wait", "20s", "--", "true"]
        ),
        0
    );

    let started = Instant::now();
    let code = run(
        &server,
        &[
            "pool",
            "--permits",
            "1",
            "--at-most-for",
            "1s",
            "--",
            "sleep",
            "60",
        ],
    );
    assert_eq!(code, 76);
    assert!(started.elapsed() < Duration::from_secs(60));
    // A runner that waits gets it once its lease has run out.
    assert_eq!(
        run(
            &server,
            &["pool", "--permits", "1", "--wait", "20s", "--", "true"]
        ),
        0
    );

    let code = run(
        &server,
        &[
            "pool",
            "--permits",
            "1",
            "--at-least-for",
            "20s",
            "--",
            "true",
        ],
    );
    assert_eq!(code, 0);
    assert_eq!(
        run(
            &server,
            &["pool", "--permits", "1", "--no-wait", "--", "true"]
        ),
        75
    );
    let timeouts = server.cmd(&[
        "ZRANGE",
        &ferrisson::layout::permit_timeouts("pool"),
        "0",
        "-1",
        "WITHSCORES",
    ]);
    let timeouts = timeouts.as_array().unwrap();
    assert_eq!(timeouts.len(), 2, "one permit out: {timeouts:?}");
    let ends: i64 = timeouts[1].as_string().unwrap().parse().unwrap();
    let now = server.cmd(&["TIME"]);
    let now = now.as_array().unwrap();
    let now_ms = now[0].as_string().unwrap().parse::<i64>().unwrap() * 1000
        + now[1].as_string().unwrap().parse::<i64>().unwrap() / 1000;
    let left = ends - now_ms;
    assert!(left > 0 && left <= 20_000, "kept for {left} ms more");
}

/// A command whose own process ends first (at SIGTERM) but which left a
/// process in its group that ignores SIGTERM: that process is stopped
/// too, with SIGKILL at the end of the grace, and the lock is let go only
/// after it is gone. With a SIGTERM to the runner (exit 143, the
/// command's status, no sooner than the grace after the signal), and
/// with `--at-most-for` (exit 76).
#[cfg(target_os = "linux")]
#[test]
fn what_the_command_leaves_in_its_group_dies_before_the_lock_is_free() {
    let server = RedisServer::start();
    for at_most_for in [None, Some("6s")] {
        let dir = scratch();
        // The outer shell dies at SIGTERM (in `wait`); the inner one
        // ignores it, as its `sleep`s do (an ignored signal stays ignored
        // across exec).
        let script = format!(
            "sh -c 'trap \"\" TERM; echo $$ > {}/pid; while :; do sleep 0.02; done' & wait",
            dir.display()
        );
        let mut args = vec!["job", "--grace", "1s"];
        if let Some(at_most_for) = at_most_for {
            args.extend(["--at-most-for", at_most_for]);
        }
        args.extend(["--", "sh", "-c", &script]);
        let mut runner = runner(&server, &args);
        let left = pid_in(&dir.join("pid"));
        assert!(alive(&left.0));
        let signalled = Instant::now();
        if at_most_for.is_none() {
            let pid = runner.id().to_string();
            assert!(Command::new("kill")
                .args(["-TERM", &pid])
                .status()
                .unwrap()
                .success());
        }
        until(SOON, "the lock is free", || !common::exists(&server, "job"));
        assert!(
            !alive(&left.0),
            "the lock is free while a process of the command runs ({at_most_for:?})"
        );
        let status = wait(&mut runner, SOON);
        match at_most_for {
            None => {
                assert_eq!(status.code(), Some(143));
                let took = signalled.elapsed();
                assert!(
                    took >= Duration::from_secs(1),
                    "exited {took:?} after SIGTERM"
                );
            }
            Some(_) => assert_eq!(status.code(), Some(76)),
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

/// `kill -9` of the runner while its command (`sh -c`) waits for a
/// child of its own: that grandchild is killed too, long before the lock
/// frees itself at the end of its lease.
#[cfg(target_os = "linux")]
#[test]
fn kill_9_of_the_runner_kills_the_commands_grandchildren() {
    let server = RedisServer::start();
    let dir = scratch();
    // `; true`: the outer shell waits for the inner one instead of
    // becoming it.
    let script = format!(
        "sh -c 'echo $$ > {}/pid; exec sleep 600'; true",
        dir.display()
    );
    let mut runner = runner(
        &server,
        &["job", "--lease", "10s", "--", "sh", "-c", &script],
    );
    let grandchild = pid_in(&dir.join("pid"));
    assert!(common::exists(&server, "job"));
    runner.kill().unwrap();
    runner.wait().unwrap();
    until(
        SOON,
        "the grandchild is killed, or the lock expires",
        || !alive(&grandchild.0) || !common::exists(&server, "job"),
    );
    assert!(
        !alive(&grandchild.0),
        "the lock expired while the grandchild of the killed runner ran"
    );
    until(SOON, "the lock expires with its lease", || {
        !common::exists(&server, "job")
    });
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `kill -9` of the runner: its command gets SIGKILL (its parent-death
/// signal), and the lock frees itself when its lease runs out.
#[cfg(target_os = "linux")]
#[test]
fn kill_9_of_the_runner_kills_the_command() {
    let server = RedisServer::start();
    let dir = scratch();
    let script = format!("echo $$ > {}/pid; exec sleep 600", dir.display());
    let mut runner = runner(
        &server,
        &["job", "--lease", "2s", "--", "sh", "-c", &script],
    );
    let pid_file = dir.join("pid");
    until(SOON, "the command runs", || {
        std::fs::read_to_string(&pid_file).is_ok_and(|p| p.ends_with('\n'))
    });
    let pid = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .to_owned();
    runner.kill().unwrap();
    runner.wait().unwrap();
    // Gone, or a zombie waiting to be reaped by whoever adopted it.
    until(SOON, "the command is killed", || {
        std::fs::read_to_string(format!("/proc/{pid}/stat")).map_or(true, |stat| {
            stat.rsplit(')')
                .next()
                .is_some_and(|s| s.trim_start().starts_with('Z'))
        })
    });
    until(SOON, "the lock expires with its lease", || {
        !common::exists(&server, "job")
    });
    assert_eq!(run(&server, &["job", "--no-wait", "--", "true"]), 0);
}

/// `--at-least-for` keeps the lock after a short command; `--label` is
/// what `inspect` shows of the holder.
#[test]
fn at_least_for_and_the_label() {
    let server = RedisServer::start();
    let code = run(
        &server,
        &[
            "job",
            "--at-least-for",
            "20s",
            "--label",
            "host-a",
            "--",
            "true",
        ],
    );
    assert_eq!(code, 0);
    let pttl = server.cmd(&["PTTL", "job"]).as_int().unwrap();
    assert!(pttl > 0 && pttl <= 20_000, "PTTL {pttl}");
    assert_eq!(run(&server, &["job", "--no-wait", "--", "true"]), 75);
    let output = Command::new(env!("CARGO_BIN_EXE_ferrisson"))
        .env_remove("REDIS_URL")
        .args(["--url", &server.url(), "--json", "inspect", "job"])
        .output()
        .unwrap();
    let state: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(state["holders"][0]["label"], "host-a", "{state}");
    let output = Command::new(env!("CARGO_BIN_EXE_ferrisson"))
        .env_remove("REDIS_URL")
        .args(["--url", &server.url(), "inspect", "job"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(text.contains("label host-a"), "{text}");
}

/// A named occurrence runs once: a second run of the same occurrence (one
/// after the other, as a host whose cron fires late) exits with 75 and
/// does not run its command, and so does a run of an earlier one; with
/// `--every`, the occurrence is the scheduled instant nearest to now.
#[test]
fn a_named_occurrence_runs_once() {
    let server = RedisServer::start();
    let dir = scratch();
    let mark = |n: &str| format!("touch {}/ran.{n}", dir.display());
    let done_key = "ferrisson_job_done:{job}";
    let occurrence = ["job", "--occurrence", "20250601", "--", "sh", "-c"];
    assert_eq!(run(&server, &[&occurrence[..], &[&mark("1")]].concat()), 0);
    assert_eq!(count(&dir, "ran."), 1);
    assert_eq!(
        server.cmd(&["GET", done_key]).as_string().as_deref(),
        Some("20250601")
    );
    assert_eq!(run(&server, &[&occurrence[..], &[&mark("2")]].concat()), 75);
    let earlier = ["job", "--occurrence", "20250531", "--", "sh", "-c"];
    assert_eq!(run(&server, &[&earlier[..], &[&mark("3")]].concat()), 75);
    assert_eq!(count(&dir, "ran."), 1);
    // A skipped occurrence takes the lock a moment and lets it go.
    assert!(!server.keys("*").contains(&"job".to_owned()));

    let every = ["hourly", "--every", "1h", "--", "sh", "-c"];
    assert_eq!(run(&server, &[&every[..], &[&mark("4")]].concat()), 0);
    assert_eq!(run(&server, &[&every[..], &[&mark("5")]].concat()), 75);
    assert_eq!(count(&dir, "ran."), 2);
    let done = server.cmd(&["GET", "ferrisson_job_done:{hourly}"]);
    let done: u64 = done.as_string().unwrap().parse().unwrap();
    assert_eq!(done % 3_600_000, 0, "{done}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// As docs/cli.md shows it: `ferrisson run reports:hourly --no-wait
/// --every 1h -- ./hourly-report.sh`, twice for one occurrence. The first
/// runs the script and exits with its status, saying nothing; the second
/// runs nothing, says which occurrence was run already (the hour nearest
/// to now, in ms since the epoch), and exits with 75.
#[test]
fn the_hourly_report_of_the_docs_runs_once_an_hour() {
    use std::os::unix::fs::PermissionsExt;
    const HOUR: u64 = 3_600_000;
    let server = RedisServer::start();
    let dir = scratch();
    let script = dir.join("hourly-report.sh");
    std::fs::write(&script, "#!/bin/sh\ntouch \"ran.$$\"\n").unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let args = [
        "reports:hourly",
        "--no-wait",
        "--every",
        "1h",
        "--",
        "./hourly-report.sh",
    ];
    let done_key = ferrisson::layout::job_done("reports:hourly");
    // Both runs serve the hour nearest to now, unless the half hour
    // between two falls while they run: then the pair is run again from
    // scratch, and the next such instant is an hour away.
    for attempt in 1.. {
        server.cmd(&["DEL", &done_key]);
        let before = nearest_occurrence(HOUR);
        let first = run_in(&server, &dir, &args);
        let second = run_in(&server, &dir, &args);
        let after = nearest_occurrence(HOUR);
        if before != after {
            assert_eq!(attempt, 1, "the occurrence changed twice");
            for ran in std::fs::read_dir(&dir).unwrap() {
                let ran = ran.unwrap().path();
                if ran != script {
                    std::fs::remove_file(ran).unwrap();
                }
            }
            continue;
        }
        assert_eq!(first, (0, String::new()), "the first run");
        assert_eq!(
            second,
            (
                75,
                format!(
                    "ferrisson: occurrence {before} of `reports:hourly` was run already: \
                     the command did not run\n"
                )
            ),
            "the second run"
        );
        assert_eq!(count(&dir, "ran."), 1);
        assert_eq!(
            server.cmd(&["GET", &done_key]).as_string(),
            Some(before.to_string())
        );
        break;
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The record of the last occurrence done, `ferrisson_job_done:{NAME}`,
/// lives `--remember-for` after the run that completed it: a day by
/// default, ten periods of `--every` when that is longer, and what
/// `--remember-for` says when given (shorter than the default too). Once
/// it is gone, the same occurrence runs again.
#[test]
fn the_occurrence_done_is_remembered_for_remember_for() {
    const HOUR: i64 = 3_600_000;
    const DAY: i64 = 24 * HOUR;
    let server = RedisServer::start();
    let dir = scratch();
    let mark = format!("touch {}/ran.$$", dir.display());
    // Runs `name` with `args` (it runs its command), then reads the
    // record's PTTL: at most `ms`, and less only by the time since.
    let kept = |name: &str, args: &[&str], ms: i64| {
        let all = [&[name][..], args, &["--", "sh", "-c", &mark]].concat();
        assert_eq!(run(&server, &all), 0, "{all:?}");
        let key = ferrisson::layout::job_done(name);
        let left = server.cmd(&["PTTL", &key]).as_int().unwrap();
        let least = (ms - SOON.as_millis() as i64).max(1);
        assert!(
            (least..=ms).contains(&left),
            "{all:?}: {key} lives {left} ms more, not about {ms}"
        );
    };
    kept("daily", &["--occurrence", "20250601"], DAY);
    // Ten hours are less than a day.
    kept("hourly", &["--every", "1h"], DAY);
    kept("three-hourly", &["--every", "3h"], 30 * HOUR);
    kept(
        "weekly",
        &["--occurrence", "7", "--remember-for", "7d"],
        7 * DAY,
    );
    kept("shorter", &["--every", "3h", "--remember-for", "1h"], HOUR);
    assert_eq!(count(&dir, "ran."), 5);

    // Forgotten after --remember-for: the occurrence runs again.
    let again = ["brief", "--occurrence", "7", "--remember-for", "3s"];
    kept(again[0], &again[1..], 3000);
    let key = ferrisson::layout::job_done("brief");
    until(SOON + Duration::from_secs(3), "the record expires", || {
        !common::exists(&server, &key)
    });
    let all = [&again[..], &["--", "sh", "-c", &mark]].concat();
    assert_eq!(run(&server, &all), 0);
    assert_eq!(count(&dir, "ran."), 7);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Bad input is refused with status 2 before anything is written.
#[test]
fn bad_input_is_refused_and_writes_nothing() {
    let server = RedisServer::start();
    let long_label = "x".repeat(ferrisson::config::MAX_JOB_LABEL_LEN + 1);
    for args in [
        &["job"][..],
        &["job", "--"],
        &["", "--", "true"],
        &["job", "--at-most-for", "0s", "--", "true"],
        &[
            "job",
            "--at-most-for",
            "1s",
            "--at-least-for",
            "2s",
            "--",
            "true",
        ],
        &["job", "--permits", "0", "--", "true"],
        &["job", "--permits", "2", "--label", "a", "--", "true"],
        // A label the library would refuse: a usage mistake too.
        &["job", "--label", "", "--", "true"],
        &["job", "--label", &long_label, "--", "true"],
        &["job", "--label", "host\na", "--", "true"],
        &["job", "--wait", "soon", "--", "true"],
        &["job", "--wait", "1s", "--no-wait", "--", "true"],
        &["job", "--lease", "1s", "--at-most-for", "1s", "--", "true"],
        &["job", "--lease", "1ms", "--", "true"],
        &["job", "--wait", "1000y", "--", "true"],
        &["job", "--occurrence", "x", "--", "true"],
        &["job", "--occurrence", "-1", "--", "true"],
        &["job", "--occurrence", "9007199254740992", "--", "true"],
        &["job", "--every", "0s", "--", "true"],
        &["job", "--every", "1500us", "--", "true"],
        &["job", "--every", "2y", "--", "true"],
        &["job", "--every", "1h", "--occurrence", "1", "--", "true"],
        &["job", "--occurrence", "1", "--permits", "2", "--", "true"],
        &[
            "job",
            "--occurrence",
            "1",
            "--remember-for",
            "0s",
            "--",
            "true",
        ],
    ] {
        assert_eq!(run(&server, args), 2, "{args:?}");
    }
    assert!(server.keys("*").is_empty(), "{:?}", server.keys("*"));
    // Data ferrisson did not write is refused and left alone.
    server.cmd(&["SET", "job", "not a lock"]);
    assert_eq!(run(&server, &["job", "--", "true"]), 1);
    assert_eq!(
        server.cmd(&["GET", "job"]).as_string().as_deref(),
        Some("not a lock")
    );
}
