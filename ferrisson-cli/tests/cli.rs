//! The `ferrisson` inspector, run as a program against a private
//! `redis-server` per test: `inspect` of every kind (text, and JSON parsed
//! back), `list`, `watch`, `force-unlock`, and its errors.

// The workspace's test support, shared: one way to start servers.
use ferrisson_test_support as common;

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use common::{client, eventually, soon, subscribers, RedisServer};
use serde_json::Value;

const WATCHDOG: Duration = Duration::from_secs(30);

/// Runs the binary on `url` with `args`, with `stdin` as its input.
async fn run_with(url: &str, args: &[&str], stdin: &str) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_ferrisson"));
    command
        .env_remove("REDIS_URL")
        .arg("--url")
        .arg(url)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let stdin = stdin.to_owned();
    let output = tokio::task::spawn_blocking(move || {
        let mut child = command.spawn().expect("start ferrisson");
        // A run that hangs is killed, so that the test fails instead.
        let pid = child.id().to_string();
        let (done, finished) = std::sync::mpsc::channel::<()>();
        let killer = std::thread::spawn(move || {
            if finished.recv_timeout(Duration::from_secs(15)).is_err() {
                let _ = Command::new("kill").args(["-9", &pid]).status();
            }
        });
        let mut input = child.stdin.take().unwrap();
        // A closed pipe is the program having stopped reading: fine.
        let _ = input.write_all(stdin.as_bytes());
        drop(input);
        let output = child.wait_with_output().expect("ferrisson output");
        let _ = done.send(());
        let _ = killer.join();
        output
    });
    soon(output).await.expect("ferrisson thread")
}

/// Runs the binary and returns its stdout; it must succeed.
async fn ok(server: &RedisServer, args: &[&str]) -> String {
    let output = run_with(&server.url(), args, "").await;
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "{args:?} failed: {stdout}\n{stderr}"
    );
    println!("$ ferrisson {}\n{stdout}", args.join(" "));
    stdout
}

/// `inspect --json NAME`, parsed.
async fn json(server: &RedisServer, args: &[&str]) -> Value {
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    let text = ok(server, &all).await;
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"))
}

/// The one holder of `state`, as `(client_id, owner_id, holds, write)`.
fn holders(state: &Value) -> Vec<(String, String, u64, bool)> {
    state["holders"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| {
            (
                h["client_id"].as_str().unwrap().to_owned(),
                h["owner_id"].as_str().unwrap().to_owned(),
                h["holds"].as_u64().unwrap(),
                h["write"].as_bool().unwrap(),
            )
        })
        .collect()
}

/// A lock, a fenced lock and a read-write lock, taken by ferrisson, and a
/// hold written as a Java Redisson client leaves it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_shows_each_lock_kind() {
    let server = RedisServer::start();
    let client = client(&server, WATCHDOG).await;
    let id = client.id().to_string();

    let lock = client.lock("orders:42").with_owner("worker-1");
    let _first = soon(lock.lock()).await.unwrap();
    let _second = soon(lock.lock()).await.unwrap();
    let text = ok(&server, &["inspect", "orders:42"]).await;
    assert!(text.contains("kind:        lock\n"), "{text}");
    assert!(text.contains(&format!("{id}:worker-1  2 holds")), "{text}");
    assert!(text.contains("ttl:         "), "{text}");
    let state = json(&server, &["inspect", "orders:42"]).await;
    assert_eq!(state["kind"], "lock");
    assert_eq!(holders(&state), [(id.clone(), "worker-1".into(), 2, false)]);
    let ttl = state["ttl_ms"].as_u64().unwrap();
    assert!(ttl > 0 && ttl <= 30_000, "{ttl}");

    let fenced = client.fenced_lock("ledger").with_owner("w");
    let guard = soon(fenced.lock()).await.unwrap();
    let text = ok(&server, &["inspect", "ledger"]).await;
    assert!(text.contains("kind:        fenced lock"), "{text}");
    assert!(
        text.contains(&format!("token:       {}", guard.token())),
        "{text}"
    );
    let state = json(&server, &["inspect", "ledger"]).await;
    assert_eq!(state["kind"], "fenced-lock");
    assert_eq!(state["fencing_token"].as_u64(), Some(guard.token()));

    let rw = client.read_write_lock("catalog");
    let _a = soon(rw.read().with_owner("reader-a").lock()).await.unwrap();
    let _b = soon(rw.read().with_owner("reader-b").lock()).await.unwrap();
    let text = ok(&server, &["inspect", "catalog"]).await;
    assert!(text.contains("kind:        read-write lock"), "{text}");
    assert!(text.contains("mode:        read"), "{text}");
    assert!(
        text.contains(":reader-a  1 hold (read, expiring in"),
        "{text}"
    );
    let state = json(&server, &["inspect", "catalog"]).await;
    assert_eq!(state["kind"], "read-write-lock");
    assert_eq!(state["mode"], "read");
    let mut owners: Vec<_> = holders(&state).into_iter().map(|h| h.1).collect();
    owners.sort();
    assert_eq!(owners, ["reader-a", "reader-b"]);
    let ttls = state["holders"][0]["read_hold_ttls_ms"].as_array().unwrap();
    assert_eq!(ttls.len(), 1);
    assert!(ttls[0].as_u64().unwrap() > 0);

    let w = client.read_write_lock("schema");
    let _w = soon(w.write().with_owner("migrator").lock()).await.unwrap();
    let state = json(&server, &["inspect", "schema"]).await;
    assert_eq!(state["mode"], "write");
    assert_eq!(holders(&state), [(id.clone(), "migrator".into(), 1, true)]);

    // As Redisson leaves it: a Java client's UUID and thread id.
    let java = "1b4e28ba-2fa1-11d2-883f-0016d3cca427";
    server.cmd(&["HSET", "billing", &format!("{java}:57"), "1"]);
    server.cmd(&["PEXPIRE", "billing", "25000"]);
    let text = ok(&server, &["inspect", "billing"]).await;
    assert!(text.contains(&format!("{java}:57  1 hold")), "{text}");
    let state = json(&server, &["inspect", "billing"]).await;
    assert_eq!(holders(&state), [(java.into(), "57".into(), 1, false)]);

    // No key: a free lock, said as such, not an error.
    let text = ok(&server, &["inspect", "nobody"]).await;
    assert!(text.contains("does not exist"), "{text}");
    assert_eq!(
        json(&server, &["inspect", "nobody"]).await["kind"],
        Value::Null
    );
}

/// A fair lock: its holder and its queue in order, each waiter with its
/// timeout, and the waiters' subscriptions.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_shows_a_fair_queue_in_order() {
    let server = RedisServer::start();
    let client = client(&server, WATCHDOG).await;
    let id = client.id().to_string();
    let fair = client.fair_lock("turns");
    let guard = soon(fair.with_owner("first").lock()).await.unwrap();
    let mut waiters = Vec::new();
    for (n, owner) in ["second", "third"].into_iter().enumerate() {
        let lock = fair.with_owner(owner);
        waiters.push(tokio::spawn(async move { lock.lock().await.unwrap() }));
        // In line before the next one comes.
        eventually(Duration::from_secs(10), || async {
            server
                .cmd(&["LLEN", "redisson_lock_queue:{turns}"])
                .as_int()
                == Some(n as i64 + 1)
        })
        .await;
    }
    // Each waiter subscribes to its own channel after its first attempt.
    eventually(Duration::from_secs(10), || async {
        server
            .cmd(&["PUBSUB", "CHANNELS", "redisson_lock__channel:{turns}:*"])
            .as_array()
            .map(|channels| channels.len())
            == Some(2)
    })
    .await;
    let text = ok(&server, &["inspect", "turns"]).await;
    assert!(text.contains("kind:        fair lock"), "{text}");
    assert!(text.contains(&format!("{id}:first  1 hold")), "{text}");
    assert!(text.contains("queue:       2 waiting"), "{text}");
    let second = text
        .find(&format!("1. {id}:second  timeout "))
        .expect(&text);
    let third = text.find(&format!("2. {id}:third  timeout ")).expect(&text);
    assert!(second < third, "{text}");
    let state = json(&server, &["inspect", "turns"]).await;
    assert_eq!(state["kind"], "fair-lock");
    let queue = state["queue"].as_array().unwrap();
    let owners: Vec<_> = queue
        .iter()
        .map(|w| w["owner_id"].as_str().unwrap())
        .collect();
    assert_eq!(owners, ["second", "third"]);
    for waiter in queue {
        let timeout = waiter["timeout_ms"].as_u64().unwrap();
        assert!(timeout > 0 && timeout <= 2 * 300_000 + 30_000, "{timeout}");
    }
    // Each waiter listens on a channel of its own.
    assert_eq!(state["subscribers"], 2, "{state}");

    // Force-unlocked, the lock goes to the first in line, who is woken.
    let text = ok(&server, &["force-unlock", "--yes", "turns"]).await;
    assert!(text.contains("removed the fair lock `turns`"), "{text}");
    assert!(
        text.contains("2 waiters stay in line; the first was woken"),
        "{text}"
    );
    let mut waiters = waiters.into_iter();
    let second = soon(waiters.next().unwrap()).await.unwrap();
    let state = json(&server, &["inspect", "turns"]).await;
    assert_eq!(holders(&state), [(id.clone(), "second".into(), 1, false)]);
    soon(second.unlock()).await.unwrap();
    soon(soon(waiters.next().unwrap()).await.unwrap().unlock())
        .await
        .unwrap();
    guard.leak();
}

/// Semaphores and a latch: permits available and out (with expiries), the
/// count, and the kind told apart by the listeners or by `--kind`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_shows_semaphores_and_latches() {
    let server = RedisServer::start();
    let client = client(&server, WATCHDOG).await;

    let semaphore = client.semaphore("slots");
    assert!(soon(semaphore.try_set_permits(5)).await.unwrap());
    assert!(soon(semaphore.try_acquire_many(2)).await.unwrap());
    let text = ok(&server, &["inspect", "slots"]).await;
    assert!(text.contains("kind:        semaphore"), "{text}");
    assert!(text.contains("available:   3"), "{text}");
    let state = json(&server, &["inspect", "slots"]).await;
    assert_eq!(state["kind"], "semaphore");
    assert_eq!(state["permits_available"], 3);
    assert_eq!(state["could_also_be"], "count-down-latch");

    let expirable = client.permit_expirable_semaphore("leases");
    assert!(soon(expirable.try_set_permits(3)).await.unwrap());
    let permit = soon(expirable.acquire_with_lease(Duration::from_secs(60)))
        .await
        .unwrap();
    let text = ok(&server, &["inspect", "leases"]).await;
    assert!(
        text.contains("kind:        permit-expirable semaphore"),
        "{text}"
    );
    assert!(text.contains("available:   2"), "{text}");
    assert!(
        text.contains(&format!("  {}  expires in ", permit.id())),
        "{text}"
    );
    let state = json(&server, &["inspect", "leases"]).await;
    assert_eq!(state["kind"], "permit-expirable-semaphore");
    assert_eq!(state["permits_available"], 2);
    let out = state["permits_out"].as_array().unwrap();
    assert_eq!(out.len(), 1);
    assert_eq!(out[0]["id"], permit.id().to_string());
    let expires = out[0]["expires_in_ms"].as_u64().unwrap();
    assert!(expires > 0 && expires <= 60_000, "{expires}");

    let latch = client.count_down_latch("boot");
    assert!(soon(latch.try_set_count(4)).await.unwrap());
    let state = json(&server, &["inspect", "boot", "--kind", "count-down-latch"]).await;
    assert_eq!(state["kind"], "count-down-latch");
    assert_eq!(state["count"], 4);
    // With a waiter on its channel, the latch is found as one.
    let waiter = client.count_down_latch("boot");
    let waiting = tokio::spawn(async move { waiter.wait().await.unwrap() });
    eventually(Duration::from_secs(10), || async {
        subscribers(&server, "redisson_countdownlatch__channel__{boot}") > 0
    })
    .await;
    let text = ok(&server, &["inspect", "boot"]).await;
    assert!(text.contains("kind:        count-down latch"), "{text}");
    assert!(text.contains("count:       4"), "{text}");
    assert!(text.contains("subscribers: 1"), "{text}");
    let state = json(&server, &["inspect", "boot"]).await;
    assert_eq!(state["kind"], "count-down-latch");
    assert_eq!(state["subscribers"], 1);
    for _ in 0..4 {
        soon(latch.count_down()).await.unwrap();
    }
    soon(waiting).await.unwrap();
}

/// `list`: one line per synchronizer, companions and other keys left out,
/// a pattern narrowing it; and as JSON.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_shows_one_line_per_synchronizer() {
    let server = RedisServer::start();
    let client = client(&server, WATCHDOG).await;
    let id = client.id().to_string();
    let _a = soon(client.lock("job:a").with_owner("o").lock())
        .await
        .unwrap();
    let b = soon(client.fenced_lock("job:b").with_owner("o").lock())
        .await
        .unwrap();
    let _c = soon(client.fair_lock("other:c").with_owner("o").lock())
        .await
        .unwrap();
    assert!(soon(client.semaphore("job:slots").try_set_permits(2))
        .await
        .unwrap());
    server.cmd(&["SET", "job:text", "not a number"]);
    server.cmd(&["RPUSH", "job:list", "x"]);

    let text = ok(&server, &["list"]).await;
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 4, "{text}");
    let line = |name: &str| {
        *lines
            .iter()
            .find(|l| l.split_whitespace().any(|w| w == name))
            .unwrap_or_else(|| panic!("{name} in {text}"))
    };
    assert!(line("job:a").starts_with("lock "), "{text}");
    assert!(
        line("job:a").contains(&format!("held by {id}:o x1, ttl ")),
        "{text}"
    );
    assert!(line("job:b").starts_with("fenced lock "), "{text}");
    assert!(
        line("job:b").contains(&format!("token {}", b.token())),
        "{text}"
    );
    // A fair lock with nobody in line has the keys of a plain lock.
    assert!(line("other:c").starts_with("lock "), "{text}");
    assert!(line("job:slots").starts_with("semaphore "), "{text}");
    assert!(line("job:slots").contains("2 permits available"), "{text}");

    let text = ok(&server, &["list", "job:*"]).await;
    assert_eq!(text.lines().count(), 3, "{text}");
    let states = json(&server, &["list", "job:*"]).await;
    let mut names: Vec<_> = states
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s["name"].as_str().unwrap(), s["kind"].as_str().unwrap()))
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            ("job:a", "lock"),
            ("job:b", "fenced-lock"),
            ("job:slots", "semaphore")
        ]
    );
}

/// A reader that stops reading (`ferrisson list | head -1`) ends the
/// program quietly with success, not with a panic.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_stdout_ends_quietly() {
    let server = RedisServer::start();
    server.cmd(&["HSET", "job:a", "c:o", "1"]);
    let url = server.url();
    let output = tokio::task::spawn_blocking(move || {
        let mut child = Command::new(env!("CARGO_BIN_EXE_ferrisson"))
            .env_remove("REDIS_URL")
            .args(["--url", &url, "list"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start ferrisson");
        // The reader is gone before the program writes its first line.
        drop(child.stdout.take());
        child.wait_with_output().expect("ferrisson output")
    });
    let output = soon(output).await.unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{:?}: {stderr}", output.status);
    assert!(!stderr.contains("panicked"), "{stderr}");
}

/// `force-unlock --yes` removes the holder, says whom, and wakes a waiter;
/// without `--yes`, a "no" leaves the lock alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn force_unlock_asks_removes_and_wakes() {
    let server = RedisServer::start();
    let holder = client(&server, WATCHDOG).await;
    let waiter = client(&server, WATCHDOG).await;
    let held = soon(holder.lock("stuck").with_owner("crashed").lock())
        .await
        .unwrap();
    let lock = waiter.lock("stuck").with_owner("next");
    let waiting = tokio::spawn(async move { lock.lock().await.unwrap() });
    eventually(Duration::from_secs(10), || async {
        subscribers(&server, "redisson_lock__channel:{stuck}") > 0
    })
    .await;

    let output = run_with(&server.url(), &["force-unlock", "stuck"], "n\n").await;
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("[y/N]"), "{stderr}");
    assert!(stderr.contains("nothing removed"), "{stderr}");
    assert!(soon(holder.lock("stuck").is_locked()).await.unwrap());
    assert!(!waiting.is_finished());

    let text = ok(&server, &["force-unlock", "--yes", "stuck"]).await;
    assert!(text.contains("removed the lock `stuck`"), "{text}");
    assert!(
        text.contains(&format!("{}:crashed  1 hold\n", holder.id())),
        "{text}"
    );
    // The waiter was woken by the unlock message, not by a lease running
    // out (30 s).
    let next = soon(waiting).await.unwrap();
    let state = json(&server, &["inspect", "stuck"]).await;
    assert_eq!(
        holders(&state),
        [(waiter.id().to_string(), "next".into(), 1, false)]
    );
    soon(next.unlock()).await.unwrap();
    held.leak();

    // A confirmed "y" acts too, and a semaphore is refused.
    let _again = soon(holder.lock("stuck2").lock()).await.unwrap();
    let output = run_with(&server.url(), &["force-unlock", "stuck2"], "y\n").await;
    assert!(output.status.success());
    assert!(!soon(holder.lock("stuck2").is_locked()).await.unwrap());
    assert!(soon(holder.semaphore("pool").try_set_permits(1))
        .await
        .unwrap());
    let output = run_with(&server.url(), &["force-unlock", "--yes", "pool"], "").await;
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("is a semaphore"), "{stderr}");
}

/// The lines a running `watch` prints, as they come.
/// `watch` follows what the object turns out to be: a number first read
/// as a semaphore goes on being watched once its first expirable permit
/// shows it to be a permit-expirable semaphore.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_follows_a_kind_that_shows_itself() {
    let server = RedisServer::start();
    let client = client(&server, WATCHDOG).await;
    let slots = client.permit_expirable_semaphore("slots");
    assert!(soon(slots.try_set_permits(2)).await.unwrap());
    let watch = Watch::start(&server.url(), "slots");
    tokio::task::block_in_place(|| watch.expect("semaphore"));
    let permit = soon(slots.acquire()).await.unwrap();
    tokio::task::block_in_place(|| watch.expect("permit-expirable semaphore: "));
    soon(permit.release()).await.unwrap();
    tokio::task::block_in_place(|| watch.expect("2 permits available"));
}

struct Watch {
    child: std::process::Child,
    lines: mpsc::Receiver<String>,
    errors: mpsc::Receiver<String>,
}

/// The lines of `from` as they come, read by a thread of their own.
fn lines_of(from: impl std::io::Read + Send + 'static) -> mpsc::Receiver<String> {
    let (send, lines) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(from).lines() {
            let Ok(line) = line else { break };
            if send.send(line).is_err() {
                break;
            }
        }
    });
    lines
}

impl Watch {
    fn start(url: &str, name: &str) -> Watch {
        Watch::start_with(url, &["watch", name])
    }

    fn start_with(url: &str, args: &[&str]) -> Watch {
        let mut command = Command::new(env!("CARGO_BIN_EXE_ferrisson"));
        command
            .env_remove("REDIS_URL")
            .args(["--url", url])
            .args(args);
        Watch::spawn(command)
    }

    /// Starts `command` (a `ferrisson watch`), reading its stdout and
    /// stderr.
    fn spawn(mut command: Command) -> Watch {
        let mut child = command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start ferrisson watch");
        let lines = lines_of(child.stdout.take().unwrap());
        let errors = lines_of(child.stderr.take().unwrap());
        Watch {
            child,
            lines,
            errors,
        }
    }

    /// Waits (10 s at most) for a line containing `text`; returns it.
    fn expect(&self, text: &str) -> String {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) if line.contains(text) => return line,
                Ok(line) => println!("watch: {line}"),
                Err(e) => panic!("no line with {text:?}: {e}"),
            }
        }
    }

    /// The next line on stderr (waited for 10 s at most).
    fn next_error(&self) -> String {
        self.errors
            .recv_timeout(Duration::from_secs(10))
            .expect("a line on stderr")
    }

    /// Sends SIGINT, as Ctrl-C at the terminal does, and waits (10 s at
    /// most) for stdout to close and the program to exit; its status, and
    /// what it printed on stderr meanwhile.
    #[cfg(unix)]
    fn interrupt(&mut self) -> (std::process::ExitStatus, Vec<String>) {
        let pid = self.child.id().to_string();
        assert!(Command::new("kill")
            .args(["-INT", &pid])
            .status()
            .unwrap()
            .success());
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => println!("watch: {line}"),
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
                Err(e) => panic!("still running after SIGINT: {e}"),
            }
        }
        let status = self.child.wait().expect("wait for ferrisson watch");
        let mut errors = Vec::new();
        while let Ok(line) = self.errors.recv_timeout(Duration::from_secs(10)) {
            errors.push(line);
        }
        (status, errors)
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// As docs/cli.md shows it: `ferrisson watch orders:42`, the URL from
/// REDIS_URL, says on stderr what it listens on, prints the state and
/// each change on stdout, and Ctrl-C (SIGINT) ends it with status 0,
/// quietly.
#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_as_documented_ends_at_ctrl_c() {
    let server = RedisServer::start();
    let client = client(&server, WATCHDOG).await;
    let id = client.id().to_string();
    let held = soon(client.lock("orders:42").with_owner("57").lock())
        .await
        .unwrap();
    let mut command = Command::new(env!("CARGO_BIN_EXE_ferrisson"));
    command
        .env("REDIS_URL", server.url())
        .args(["watch", "orders:42"]);
    let mut watch = Watch::spawn(command);
    tokio::task::block_in_place(|| {
        assert_eq!(
            watch.next_error(),
            "watching `orders:42` on redisson_lock__channel:{orders:42}; Ctrl-C to stop"
        );
        let line = watch.expect(&format!("  lock: held by {id}:57 x1, ttl "));
        // Led by the time of day in UTC, to the millisecond.
        let (at, _) = line.split_once("  ").expect(&line);
        let digits: Vec<bool> = at.chars().map(|c| c.is_ascii_digit()).collect();
        assert_eq!(at.len(), "11:04:56.997".len(), "{line}");
        assert_eq!(&at[2..3], ":", "{line}");
        assert_eq!(&at[5..6], ":", "{line}");
        assert_eq!(&at[8..9], ".", "{line}");
        assert_eq!(digits.iter().filter(|d| **d).count(), 9, "{line}");
    });
    soon(held.unlock()).await.unwrap();
    tokio::task::block_in_place(|| {
        watch.expect("  message \"0\" on redisson_lock__channel:{orders:42}");
        watch.expect("  lock: free");
    });
    let (status, errors) = tokio::task::block_in_place(|| watch.interrupt());
    assert_eq!(status.code(), Some(0), "{status:?}, stderr {errors:?}");
    assert!(errors.is_empty(), "{errors:?}");

    // Ctrl-C as soon as its first line shows: the same.
    let mut command = Command::new(env!("CARGO_BIN_EXE_ferrisson"));
    command
        .env("REDIS_URL", server.url())
        .args(["watch", "orders:42"]);
    let mut watch = Watch::spawn(command);
    let (status, errors) = tokio::task::block_in_place(|| {
        assert!(watch.next_error().starts_with("watching `orders:42`"));
        watch.interrupt()
    });
    assert_eq!(status.code(), Some(0), "{status:?}, stderr {errors:?}");
    assert!(errors.is_empty(), "{errors:?}");
}

/// `watch` prints the state, the unlock message and each hand-over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_prints_each_hand_over() {
    let server = RedisServer::start();
    let client = client(&server, WATCHDOG).await;
    let id = client.id().to_string();
    let watch = Watch::start(&server.url(), "baton");
    tokio::task::block_in_place(|| watch.expect("no key"));
    let alice = soon(client.lock("baton").with_owner("alice").lock())
        .await
        .unwrap();
    tokio::task::block_in_place(|| watch.expect(&format!("lock: held by {id}:alice x1")));
    let bob = client.lock("baton").with_owner("bob");
    let waiting = tokio::spawn(async move { bob.lock().await.unwrap() });
    eventually(Duration::from_secs(10), || async {
        subscribers(&server, "redisson_lock__channel:{baton}") > 1
    })
    .await;
    soon(alice.unlock()).await.unwrap();
    tokio::task::block_in_place(|| {
        watch.expect("message \"0\" on redisson_lock__channel:{baton}");
        watch.expect(&format!("lock: held by {id}:bob x1"));
    });
    soon(soon(waiting).await.unwrap().unlock()).await.unwrap();
}

/// The three errors an operator meets first, each said plainly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_are_clear() {
    let server = RedisServer::start();
    server.cmd(&["RPUSH", "queue", "job"]);
    server.cmd(&["SET", "greeting", "hello"]);
    let output = run_with(&server.url(), &["inspect", "queue"], "").await;
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("`queue` is not a synchronizer: the key holds a list"),
        "{stderr}"
    );
    server.cmd(&["SET", "redisson_lock_token:{turns}", "7"]);
    server.cmd(&["RPUSH", "redisson_lock_queue:{turns}", "x"]);
    for helper in ["redisson_lock_token:{turns}", "redisson_lock_queue:{turns}"] {
        let output = run_with(&server.url(), &["inspect", helper], "").await;
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            stderr.contains("a helper key beside a synchronizer"),
            "{helper}: {stderr}"
        );
    }
    let output = run_with(&server.url(), &["inspect", "greeting"], "").await;
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("is not a synchronizer"), "{stderr}");

    // --kind chooses between look-alikes only: a lock hash is no
    // semaphore and no read-write lock, a number no lock; a plain lock
    // hash may be read as a fair lock (its queue is empty).
    server.cmd(&["HSET", "held", "c:o", "1"]);
    server.cmd(&["SET", "seats", "3"]);
    for (args, said) in [
        (
            ["inspect", "--kind", "semaphore", "held"],
            "`held` is a lock, not a semaphore",
        ),
        (
            ["inspect", "--kind", "read-write-lock", "held"],
            "`held` is a lock, not a read-write lock",
        ),
        (
            ["inspect", "--kind", "lock", "seats"],
            "`seats` is a semaphore, not a lock",
        ),
    ] {
        let output = run_with(&server.url(), &args, "").await;
        assert!(!output.status.success(), "{args:?}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains(said), "{args:?}: {stderr}");
    }
    let fair = ok(&server, &["inspect", "--kind", "fair-lock", "held"]).await;
    assert!(fair.contains("fair lock"), "{fair}");
    let latch = ok(&server, &["inspect", "--kind", "count-down-latch", "seats"]).await;
    assert!(latch.contains("count-down latch"), "{latch}");

    // Port 1: privileged, so nothing a test starts can listen there.
    let url = "redis://127.0.0.1:1/".to_owned();
    let output = run_with(&url, &["list"], "").await;
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(&format!("cannot connect to {url}")),
        "{stderr}"
    );

    server.cmd(&["CONFIG", "SET", "requirepass", "s3cret-pw"]);
    let wrong = format!("redis://:wrong-pw@127.0.0.1:{}/", server.port());
    let output = run_with(&wrong, &["list"], "").await;
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("authentication failed"), "{stderr}");
    assert!(!stderr.contains("wrong-pw"), "the password shows: {stderr}");
    let none = format!("redis://127.0.0.1:{}/", server.port());
    let output = run_with(&none, &["list"], "").await;
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("authentication failed"), "{stderr}");
}

/// Counts take the noun's singular for one: "1 permit", "1 waiter".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_of_a_thing_is_singular() {
    let server = RedisServer::start();
    let client = client(&server, WATCHDOG).await;
    assert!(soon(client.semaphore("one").try_set_permits(1))
        .await
        .unwrap());
    assert!(soon(client.semaphore("two").try_set_permits(2))
        .await
        .unwrap());
    let text = ok(&server, &["list"]).await;
    assert!(text.contains("1 permit available"), "{text}");
    assert!(text.contains("2 permits available"), "{text}");
    assert!(!text.contains("1 permits"), "{text}");

    // A fair lock with one waiter in line, force-unlocked.
    let fair = client.fair_lock("turn");
    let guard = soon(fair.with_owner("first").lock()).await.unwrap();
    let lock = fair.with_owner("second");
    let waiting = tokio::spawn(async move { lock.lock().await.unwrap() });
    eventually(Duration::from_secs(10), || async {
        server.cmd(&["LLEN", "redisson_lock_queue:{turn}"]).as_int() == Some(1)
    })
    .await;
    let text = ok(&server, &["force-unlock", "--yes", "turn"]).await;
    assert!(text.contains("  1 hold\n"), "{text}");
    assert!(text.contains("1 waiter stays in line"), "{text}");
    soon(soon(waiting).await.unwrap().unlock()).await.unwrap();
    guard.leak();
}

/// An empty name (or `list` pattern) is refused before anything is asked
/// of Redis: the URL here reaches nothing, and the error is the name's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_name_is_refused() {
    let url = "redis://127.0.0.1:1/";
    for args in [
        &["inspect", ""][..],
        &["watch", ""],
        &["force-unlock", "--yes", ""],
        &["inspect", "--kind", "lock", ""],
    ] {
        let output = run_with(url, args, "").await;
        assert!(!output.status.success(), "{args:?}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains("the name is empty"), "{args:?}: {stderr}");
        assert!(!stderr.contains("cannot connect"), "{args:?}: {stderr}");
    }
    let output = run_with(url, &["list", ""], "").await;
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("the pattern is empty"), "{stderr}");
}

/// With `--json`, an error is one JSON object `{"error": ...}` on stdout,
/// and the exit status is still a failure's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_under_json_are_json() {
    let server = RedisServer::start();
    server.cmd(&["RPUSH", "queue", "job"]);
    server.cmd(&["HSET", "held", "c:o", "1"]);
    let error = |output: &Output, code: i32| -> String {
        let stdout = String::from_utf8_lossy(&output.stdout);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(code), "{stdout}\n{stderr}");
        assert!(stderr.is_empty(), "{stderr}");
        let value: Value =
            serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout}"));
        value["error"]
            .as_str()
            .unwrap_or_else(|| panic!("no error field: {value}"))
            .to_owned()
    };
    let output = run_with(&server.url(), &["--json", "inspect", "queue"], "").await;
    let said = error(&output, 1);
    assert!(said.contains("`queue` is not a synchronizer"), "{said}");

    let output = run_with("redis://127.0.0.1:1/", &["list", "--json"], "").await;
    let said = error(&output, 1);
    assert!(said.contains("cannot connect"), "{said}");

    // A "no" to force-unlock's question: the question is on stderr, the
    // answer's outcome is the JSON error.
    let output = run_with(&server.url(), &["--json", "force-unlock", "held"], "n\n").await;
    assert_eq!(output.status.code(), Some(1));
    let stdout = String::from_utf8_lossy(&output.stdout);
    let value: Value = serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout}"));
    assert!(
        value["error"].as_str().unwrap().contains("nothing removed"),
        "{value}"
    );
    assert_eq!(server.cmd(&["EXISTS", "held"]).as_int(), Some(1));

    // Mistakes in the command line: exit status 2, as without --json.
    let output = run_with(&server.url(), &["--json", "inspect", ""], "").await;
    let said = error(&output, 2);
    assert!(said.contains("the name is empty"), "{said}");
    let output = run_with(&server.url(), &["--json", "inspect", "x", "--bogus"], "").await;
    let said = error(&output, 2);
    assert!(said.contains("--bogus"), "{said}");
    let output = run_with(&server.url(), &["--json"], "").await;
    let said = error(&output, 2);
    assert!(said.contains("no subcommand"), "{said}");
}

/// `--help` names every subcommand's kind of object, leader elections and
/// `run` included. A URL from REDIS_URL is neither shown (it may hold a
/// password) nor written into a usage line as though --url had been
/// typed: a usage mistake prints the subcommand's own usage, exit 2.
#[test]
fn help_and_usage_with_redis_url_set() {
    let url = "redis://ops:secret-pw@127.0.0.1:1/";
    let ferrisson = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_ferrisson"))
            .env("REDIS_URL", url)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("run ferrisson")
    };
    let help = ferrisson(&["--help"]);
    assert!(help.status.success());
    let text = String::from_utf8_lossy(&help.stdout);
    assert!(text.contains("leader elections"), "{text}");
    assert!(text.contains("`run`"), "{text}");
    assert!(text.contains("REDIS_URL"), "{text}");
    assert!(!text.contains("secret-pw"), "{text}");

    let mistake = ferrisson(&["inspect"]);
    assert_eq!(mistake.status.code(), Some(2));
    let said = String::from_utf8_lossy(&mistake.stderr);
    assert!(said.contains("Usage: ferrisson inspect <NAME>"), "{said}");
    assert!(!said.contains("--url"), "{said}");
    assert!(!said.contains("secret-pw"), "{said}");
}

/// A permit taken without a lease (Redisson's no-expiry score) shows as
/// having no lease, not as expiring in billions of minutes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permit_without_a_lease_shows_no_lease() {
    let server = RedisServer::start();
    let client = client(&server, WATCHDOG).await;
    let seats = client.permit_expirable_semaphore("seats");
    assert!(soon(seats.try_set_permits(2)).await.unwrap());
    let forever = soon(seats.acquire()).await.unwrap();
    let leased = soon(seats.acquire_with_lease(Duration::from_secs(60)))
        .await
        .unwrap();
    let text = ok(&server, &["inspect", "seats"]).await;
    assert!(
        text.contains(&format!("  {}  no lease\n", forever.id())),
        "{text}"
    );
    assert!(
        text.contains(&format!("  {}  expires in ", leased.id())),
        "{text}"
    );
    let state = json(&server, &["inspect", "seats"]).await;
    let out = state["permits_out"].as_array().unwrap();
    let of = |id: String| {
        out.iter()
            .find(|p| p["id"] == id)
            .unwrap_or_else(|| panic!("{id} in {state}"))["expires_in_ms"]
            .clone()
    };
    assert_eq!(of(forever.id().to_string()), Value::Null, "{state}");
    let ms = of(leased.id().to_string()).as_u64().unwrap();
    assert!(ms > 0 && ms <= 60_000, "{ms}");
    soon(forever.release()).await.unwrap();
    soon(leased.release()).await.unwrap();
}

/// Runs the binary with `args`, REDIS_URL set to `redis_url` (or
/// unset); its stdout, printed with success.
async fn stdout_of(redis_url: Option<&str>, args: &[String]) -> String {
    let mut command = Command::new(env!("CARGO_BIN_EXE_ferrisson"));
    command
        .env_remove("REDIS_URL")
        .args(args)
        .stdin(Stdio::null());
    if let Some(url) = redis_url {
        command.env("REDIS_URL", url);
    }
    let output = soon(tokio::task::spawn_blocking(move || command.output()))
        .await
        .unwrap()
        .expect("run ferrisson");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "{args:?}: {stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

/// A client of the cluster `nodes`, with the cluster tests' watchdog
/// timeout. Here, not in the test support: `Client::cluster_builder` needs
/// the library's `cluster` feature, which this crate's turns on.
#[cfg(feature = "cluster")]
async fn cluster_client(nodes: &[RedisServer]) -> ferrisson::Client {
    ferrisson::Client::cluster_builder(nodes.iter().map(RedisServer::url))
        .watchdog_timeout(common::cluster::WATCHDOG)
        .build()
        .await
        .unwrap()
}

/// On a Redis Cluster (every master's URL given: `--url` repeated, one
/// `--url` comma separated, REDIS_URL comma separated; or one node's with
/// `--cluster`): `list` scans each master, `inspect` reads a lock
/// wherever its slot lives.
#[cfg(feature = "cluster")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_is_listed_and_inspected_across_masters() {
    let nodes = common::cluster::cluster().await;
    let client = cluster_client(&nodes).await;
    let id = client.id().to_string();
    let names = ["shard:a", "shard:b", "shard:c", "shard:d", "shard:e"];
    let mut guards = Vec::new();
    for name in names {
        guards.push(
            soon(client.lock(name).with_owner("o").lock())
                .await
                .unwrap(),
        );
    }
    let mut args: Vec<String> = Vec::new();
    for node in &nodes {
        args.extend(["--url".to_owned(), node.url()]);
    }
    let run = |extra: &[&str]| {
        let mut all = args.clone();
        all.extend(extra.iter().map(|arg| arg.to_string()));
        async move { stdout_of(None, &all).await }
    };
    // Each lock on a line of its own, and nothing else.
    let lists_every_lock = |text: &str| {
        for name in names {
            assert!(
                text.lines()
                    .any(|l| l.starts_with("lock ") && l.contains(&format!(" {name} "))),
                "{name}: {text}"
            );
        }
        assert_eq!(text.lines().count(), names.len(), "{text}");
    };
    let text = run(&["list", "shard:*"]).await;
    println!("{text}");
    lists_every_lock(&text);
    // One node given: the others are found from it.
    let one = ["--cluster", "--url", &nodes[1].url(), "list", "shard:*"].map(str::to_owned);
    lists_every_lock(&stdout_of(None, &one).await);
    // The nodes comma separated, in one --url (`--url a,b,c`) and in
    // REDIS_URL.
    let urls: Vec<String> = nodes.iter().map(|node| node.url()).collect();
    let joined = urls.join(",");
    let comma = ["--url", &joined, "list", "shard:*"].map(str::to_owned);
    lists_every_lock(&stdout_of(None, &comma).await);
    let list = ["list", "shard:*"].map(str::to_owned);
    lists_every_lock(&stdout_of(Some(&joined), &list).await);
    let state: Value = serde_json::from_str(&run(&["--json", "inspect", "shard:c"]).await).unwrap();
    assert_eq!(holders(&state), [(id.clone(), "o".into(), 1, false)]);
    // A waiter's (sharded) subscription is counted on the lock's node.
    let other = cluster_client(&nodes).await;
    let lock = other.lock("shard:c");
    let waiting = tokio::spawn(async move { lock.lock().await.unwrap() });
    let mut state = Value::Null;
    for _ in 0..200 {
        state = serde_json::from_str(&run(&["--json", "inspect", "shard:c"]).await).unwrap();
        if state["subscribers"] == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(state["subscribers"], 1, "{state}");

    // `watch` hears the sharded unlock message, and sees the hand-over.
    let mut watch_args: Vec<&str> = Vec::new();
    for arg in &args[2..] {
        watch_args.push(arg);
    }
    watch_args.extend(["watch", "shard:c"]);
    let watch = Watch::start_with(&nodes[0].url(), &watch_args);
    tokio::task::block_in_place(|| watch.expect(&format!("lock: held by {id}:o x1")));
    soon(guards.remove(2).unlock()).await.unwrap();
    tokio::task::block_in_place(|| {
        watch.expect("message \"0\" on redisson_lock__channel:{shard:c}");
        watch.expect(&format!("lock: held by {}:", other.id()));
    });
    for guard in guards {
        soon(guard.unlock()).await.unwrap();
    }
    soon(soon(waiting).await.unwrap().unlock()).await.unwrap();
}

/// `force-unlock` frees a read-write lock's writer (waking its readers) and
/// opens a latch; `watch --json` prints one parsable object a line; the URL
/// comes from `REDIS_URL`, with an ACL user in it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn force_unlock_of_other_kinds_json_watch_and_acl_users() {
    let server = RedisServer::start();
    let client = client(&server, WATCHDOG).await;
    let rw = client.read_write_lock("table");
    let writer = soon(rw.write().with_owner("migrator").lock())
        .await
        .unwrap();
    let reader = rw.read().with_owner("report");
    let reading = tokio::spawn(async move { reader.lock().await.unwrap() });
    eventually(Duration::from_secs(10), || async {
        subscribers(&server, "redisson_rwlock:{table}") > 0
    })
    .await;
    let watch = Watch::start_with(&server.url(), &["--json", "watch", "table"]);
    let first: Value = serde_json::from_str(&tokio::task::block_in_place(|| {
        watch.expect("\"migrator\"")
    }))
    .unwrap();
    assert_eq!(first["state"]["kind"], "read-write-lock");
    assert_eq!(first["state"]["mode"], "write");

    let text = ok(&server, &["force-unlock", "--yes", "table"]).await;
    assert!(
        text.contains("removed the read-write lock `table`"),
        "{text}"
    );
    assert!(text.contains(":migrator  1 write hold\n"), "{text}");
    let read = soon(reading).await.unwrap();
    tokio::task::block_in_place(|| {
        let line = watch.expect("\"channel\":\"redisson_rwlock:{table}\"");
        let message: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(message["message"], "1", "{message}");
        // The state after the message, or a later one, shows the reader.
        let line = if line.contains("\"report\"") {
            line
        } else {
            watch.expect("\"report\"")
        };
        let reader: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(reader["state"]["mode"], "read", "{reader}");
    });
    drop(watch);
    soon(read.unlock()).await.unwrap();
    writer.leak();

    let latch = client.count_down_latch("start");
    assert!(soon(latch.try_set_count(3)).await.unwrap());
    let waiter = client.count_down_latch("start");
    let waiting = tokio::spawn(async move { waiter.wait().await.unwrap() });
    eventually(Duration::from_secs(10), || async {
        subscribers(&server, "redisson_countdownlatch__channel__{start}") > 0
    })
    .await;
    let text = ok(&server, &["force-unlock", "--yes", "start"]).await;
    assert!(
        text.contains("opened the count-down latch `start` (count was 3)"),
        "{text}"
    );
    soon(waiting).await.unwrap();

    // An ACL user, from REDIS_URL.
    server.cmd(&[
        "ACL", "SETUSER", "ops", "on", ">ops-pw", "~*", "&*", "+@all",
    ]);
    server.cmd(&["SET", "gate", "2"]);
    let url = format!("redis://ops:ops-pw@127.0.0.1:{}/", server.port());
    let output = tokio::task::spawn_blocking(move || {
        Command::new(env!("CARGO_BIN_EXE_ferrisson"))
            .env("REDIS_URL", url)
            .args(["inspect", "gate"])
            .output()
            .unwrap()
    });
    let output = soon(output).await.unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}");
    assert!(stdout.contains("available:   2"), "{stdout}");
}

/// `rediss://` with `--tls-ca`: a server whose certificate a private CA
/// signed (made in the test); without the CA, a clear refusal.
#[cfg(feature = "tls")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_with_a_private_ca() {
    let certs = common::tls::Certificates::new();
    let (server, tls_port) = common::tls::tls_server(&certs);
    server.cmd(&[
        "HSET",
        "secure",
        "1b4e28ba-2fa1-11d2-883f-0016d3cca427:9",
        "1",
    ]);
    let url = format!("rediss://127.0.0.1:{tls_port}/");
    let output = run_with(
        &url,
        &["--tls-ca", &certs.path("ca.crt"), "inspect", "secure"],
        "",
    )
    .await;
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        stdout.contains("1b4e28ba-2fa1-11d2-883f-0016d3cca427:9  1 hold"),
        "{stdout}"
    );
    let output = run_with(&url, &["inspect", "secure"], "").await;
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(&format!("cannot connect to {url}")),
        "{stderr}"
    );
    assert!(stderr.contains("--tls-ca"), "{stderr}");
}

/// `--sentinel MASTER`: the URLs are sentinels, and the master they name
/// is the one inspected; a name they do not know is said plainly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_master_found_through_a_sentinel() {
    let master = RedisServer::start();
    let sentinel = common::sentinel::Sentinel::start(&master);
    master.cmd(&["HSET", "nightly", "c:o", "2"]);
    let url = sentinel.url();

    let output = run_with(&url, &["--sentinel", "mymaster", "inspect", "nightly"], "").await;
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stdout}{stderr}");
    assert!(stdout.contains("c:o  2 holds"), "{stdout}");

    // A master with a password behind a sentinel without one: the URL's
    // password is the master's.
    let guarded = RedisServer::start();
    guarded.cmd(&["HSET", "audit", "c:o", "1"]);
    guarded.cmd(&["CONFIG", "SET", "requirepass", "m4ster-pw"]);
    let watcher =
        common::sentinel::Sentinel::start_with(&guarded, "sentinel auth-pass mymaster m4ster-pw");
    let with_pw = watcher.url().replace("redis://", "redis://:m4ster-pw@");
    let output = run_with(
        &with_pw,
        &["--sentinel", "mymaster", "inspect", "audit"],
        "",
    )
    .await;
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stdout}{stderr}");
    assert!(stdout.contains("c:o  1 hold"), "{stdout}");

    let output = run_with(&url, &["--sentinel", "other", "list"], "").await;
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("knows no master named `other`"), "{stderr}");
}

/// A leader election: `inspect` shows its leader, label and term (text and
/// JSON), `list` lists it, `watch` follows its campaigns and resignations,
/// and a free one with an observer is still told from a fenced lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_election_is_inspected_listed_and_watched() {
    let server = RedisServer::start();
    let client = client(&server, WATCHDOG).await;
    let id = client.id().to_string();
    let election = client.leader_election("billing:leader");
    // Watched before anyone campaigned: a name without a key, then an
    // election once a candidate leads.
    let early = Watch::start(&server.url(), "billing:leader");
    tokio::task::block_in_place(|| early.expect("no key"));
    let leadership = soon(election.campaign("pod-a")).await.unwrap();
    let term = leadership.term();
    tokio::task::block_in_place(|| early.expect("leader election: led by pod-a"));
    drop(early);

    let text = ok(&server, &["inspect", "billing:leader"]).await;
    assert!(text.contains("kind:        leader election"), "{text}");
    assert!(
        text.contains(&format!("leader:      pod-a (term {term}, {id}:pod-a~")),
        "{text}"
    );
    assert!(text.contains(&format!("token:       {term}")), "{text}");
    let state = json(&server, &["inspect", "billing:leader"]).await;
    assert_eq!(state["kind"], "leader-election");
    assert_eq!(state["leader"]["label"], "pod-a");
    assert_eq!(state["leader"]["term"].as_u64(), Some(term));
    assert_eq!(state["leader"]["client_id"], id.as_str());

    let text = ok(&server, &["list"]).await;
    assert!(
        text.lines().any(|line| line.starts_with("leader election ")
            && line.contains("billing:leader")
            && line.contains(&format!("led by pod-a (term {term}"))),
        "{text}"
    );

    let watch = Watch::start(&server.url(), "billing:leader");
    tokio::task::block_in_place(|| watch.expect("leader election: led by pod-a"));
    soon(leadership.resign()).await.unwrap();
    tokio::task::block_in_place(|| {
        watch.expect("message \"0\" on ferrisson_election__channel:{billing:leader}");
        watch.expect("leader election: no leader");
    });
    let next = soon(election.campaign("pod-b")).await.unwrap();
    tokio::task::block_in_place(|| watch.expect("leader election: led by pod-b"));
    soon(next.resign()).await.unwrap();
    tokio::task::block_in_place(|| watch.expect("leader election: no leader"));

    // Force-unlocked: deposed, the vacancy announced.
    let deposed = soon(election.campaign("pod-c")).await.unwrap();
    tokio::task::block_in_place(|| watch.expect("leader election: led by pod-c"));
    let removed = ok(&server, &["force-unlock", "--yes", "billing:leader"]).await;
    assert!(removed.contains("pod-c"), "{removed}");
    tokio::task::block_in_place(|| {
        watch.expect("message \"0\" on ferrisson_election__channel:{billing:leader}");
        watch.expect("leader election: no leader");
    });
    // (Its watchdog tells it at the next renewal; the library's tests
    // cover that.)
    drop(deposed);
    drop(watch);
    let channel = "ferrisson_election__channel:{billing:leader}";
    eventually(Duration::from_secs(10), || async {
        subscribers(&server, channel) == 0
    })
    .await;

    // Free, with only its counter left: no `leader` in JSON, and an
    // observer tells it from a fenced lock.
    let text = ok(&server, &["inspect", "billing:leader"]).await;
    assert!(text.contains("kind:        fenced lock"), "{text}");
    let state = json(
        &server,
        &["inspect", "--kind", "leader-election", "billing:leader"],
    )
    .await;
    assert_eq!(state["kind"], "leader-election");
    assert!(state.get("leader").is_none(), "{state}");
    let mut observer = election.observe();
    assert_eq!(
        soon(observer.next()).await.unwrap().unwrap(),
        ferrisson::LeaderChange::NoLeader
    );
    // Waiting for the next change, it listens on the election's channel.
    let observing = tokio::spawn(async move { observer.next().await });
    eventually(Duration::from_secs(10), || async {
        subscribers(&server, channel) > 0
    })
    .await;
    let text = ok(&server, &["inspect", "billing:leader"]).await;
    assert!(text.contains("kind:        leader election"), "{text}");
    assert!(text.contains("leader:      none"), "{text}");
    observing.abort();
}
