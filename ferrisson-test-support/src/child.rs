//! Child processes for the fault and torture tests: the test binary runs
//! itself again, selecting one `#[test]` with `--exact`, and an environment
//! variable tells that test which role to play. The child talks back with
//! lines on stdout that start with [`TAG`]; everything else it prints (the
//! test harness's own lines) is ignored. It reads commands, one a line, on
//! stdin.
//!
//! A [`ChildProcess`] is killed (SIGKILL) when dropped, so a failing test
//! leaves no process behind.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The variable that names a child's role; unset in the parent.
pub const ROLE_ENV: &str = "FERRISSON_CHILD_ROLE";

/// The prefix of every line a child means for its parent.
pub const TAG: &str = "@child ";

/// The role this process was started with, when it is a child.
pub fn role() -> Option<String> {
    std::env::var(ROLE_ENV).ok()
}

/// In a child started for `role`, runs `main` on a fresh two-thread
/// runtime; in any other process (the parent, another role), nothing.
pub fn run_as<F: std::future::Future<Output = ()>>(role: &str, main: impl FnOnce() -> F) {
    if self::role().as_deref() != Some(role) {
        return;
    }
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
        .block_on(main());
}

/// A setting the parent passed to this child.
pub fn setting(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("child setting {name} missing"))
}

/// In a child: one line for the parent.
pub fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{TAG}{line}").expect("stdout");
    out.flush().expect("stdout");
}

/// In a child: the next command line from the parent (blocking).
pub fn hear() -> String {
    let mut line = String::new();
    std::io::stdin().read_line(&mut line).expect("stdin");
    line.trim_end().to_owned()
}

/// Nanoseconds since the Unix epoch: the one clock every process on this
/// machine shares.
pub fn now_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_nanos()
}

/// A child process running one test of this binary in a role.
#[derive(Debug)]
pub struct ChildProcess {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<String>,
    role: String,
}

impl ChildProcess {
    /// Starts this test binary again, running only the test `test` (which
    /// must call [`role`] first), as `role`, with `env` set.
    pub fn spawn(test: &str, role: &str, env: &[(&str, String)]) -> ChildProcess {
        let exe = std::env::current_exe().expect("current test binary");
        let mut command = Command::new(exe);
        command
            .args([test, "--exact", "--nocapture", "--test-threads=1"])
            .env(ROLE_ENV, role)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        for (name, value) in env {
            command.env(name, value);
        }
        let mut child = command.spawn().expect("spawn child process");
        let stdout = child.stdout.take().expect("child stdout");
        let stdin = child.stdin.take();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                // The harness may have begun the line (`test name ... `).
                if let Some(at) = line.find(TAG) {
                    if tx.send(line[at + TAG.len()..].to_owned()).is_err() {
                        break;
                    }
                }
            }
        });
        ChildProcess {
            child,
            stdin,
            lines,
            role: role.to_owned(),
        }
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The next line the child said, within `limit`; panics otherwise.
    pub fn next_line(&self, limit: Duration) -> String {
        match self.lines.recv_timeout(limit) {
            Ok(line) => line,
            Err(err) => panic!("child `{}` said nothing within {limit:?}: {err}", self.role),
        }
    }

    /// The next line the child said, within `limit`; `None` when it said
    /// nothing more by then (or has exited).
    pub fn try_line(&self, limit: Duration) -> Option<String> {
        self.lines.recv_timeout(limit).ok()
    }

    /// Waits for the next line starting with `prefix` (skipping others)
    /// and returns the rest of it.
    pub fn expect(&self, prefix: &str, limit: Duration) -> String {
        let deadline = Instant::now() + limit;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = self.next_line(left);
            if let Some(rest) = line.strip_prefix(prefix) {
                return rest.trim_start().to_owned();
            }
        }
    }

    /// Every line the child says until it exits (or `limit` runs out, a
    /// panic), and its exit status.
    pub fn finish(mut self, limit: Duration) -> (Vec<String>, ExitStatus) {
        let deadline = Instant::now() + limit;
        let mut said = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left.max(Duration::from_millis(1))) {
                Ok(line) => said.push(line),
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    panic!("child `{}` did not finish within {limit:?}", self.role)
                }
            }
        }
        let status = self.child.wait().expect("wait for child");
        (said, status)
    }

    /// Sends one command line to the child.
    pub fn send(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("child stdin");
        writeln!(stdin, "{line}").expect("write to child");
        stdin.flush().expect("write to child");
    }

    /// Sends `signal` (`STOP`, `CONT`, `KILL`, ...) with `kill(1)`.
    pub fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(self.pid().to_string())
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -{signal} {} failed", self.pid());
    }

    /// SIGKILL, and waits for the process to be gone.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for ChildProcess {
    fn drop(&mut self) {
        // SIGKILL ends a stopped process too.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
