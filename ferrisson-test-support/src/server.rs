//! Throwaway private `redis-server` processes and a tiny RESP2 client.
//!
//! The module needs the Rust standard library only: with the crate's `client`
//! feature off it is what the protocol model's conformance test starts its
//! servers with, and the examples find or start Redis through it too.
//!
//! Every [`RedisServer`] runs in its own temporary directory on its own port, without
//! persistence, and is killed (and its directory removed) when the value is dropped,
//! including while a failing test unwinds.

use std::ffi::OsString;
use std::fs;
use std::io::{self, BufRead, BufReader, Write};
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

pub use super::resp::RespValue;
use super::resp::{connect, encode_command, push_kind, read_value};

/// Environment variable that overrides the `redis-server` binary to run.
const BINARY_ENV: &str = "FERRISSON_REDIS_SERVER";
/// Binary looked up on `PATH` when [`BINARY_ENV`] is not set.
const DEFAULT_BINARY: &str = "redis-server";
/// How long a single launch may take before it counts as failed.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(10);
/// Delay between two readiness probes.
const POLL_INTERVAL: Duration = Duration::from_millis(10);
/// Pause before respawning on the same port in `restart`.
const RESPAWN_PAUSE: Duration = Duration::from_millis(50);
/// How many fresh ports `start` tries when the process dies right away.
const START_ATTEMPTS: usize = 5;
/// Connect/read/write timeout used by a readiness probe.
const PROBE_TIMEOUT: Duration = Duration::from_millis(500);
/// Connect/read/write timeout used by `cmd` and the subscriber.
const IO_TIMEOUT: Duration = Duration::from_secs(10);
/// Line that redis writes to its log once it serves clients.
const READY_LOG_LINE: &str = "Ready to accept connections";
/// How many trailing log lines go into a panic message.
const LOG_TAIL_LINES: usize = 40;

/// Distinguishes temp dirs created by the same process.
static DIR_COUNTER: AtomicU64 = AtomicU64::new(0);

/// A private `redis-server` child process listening on `127.0.0.1`.
///
/// Dropping the value kills the process and removes its temporary directory.
#[derive(Debug)]
pub struct RedisServer {
    /// TCP port the server listens on.
    port: u16,
    /// The running process, `None` while stopped.
    child: Option<Child>,
    /// Private working directory (`--dir`), also holding `redis.log`.
    dir: PathBuf,
    /// The `redis-server` executable.
    binary: OsString,
    /// Extra command-line arguments given to `start_with_args`.
    extra_args: Vec<String>,
    /// Environment variables the process gets beside the test's.
    env: Vec<(String, OsString)>,
}

/// Result of one attempt to bring a server process up.
enum Launch {
    /// The process answers on its port.
    Ready,
    /// The process exited before becoming ready (for example the port was taken).
    Exited(ExitStatus),
    /// The process neither became ready nor exited in time; it has been killed.
    TimedOut,
}

impl RedisServer {
    /// Starts a private `redis-server` on a free `127.0.0.1` port in a fresh temp dir.
    ///
    /// The binary is taken from the `FERRISSON_REDIS_SERVER` environment variable if set,
    /// otherwise `redis-server` is looked up on `PATH`. Persistence is disabled, so data
    /// does not survive [`RedisServer::restart`].
    ///
    /// # Panics
    ///
    /// Panics (including the tail of the server log) if the server does not come up.
    pub fn start() -> RedisServer {
        RedisServer::start_with_args(&[])
    }

    /// Like [`RedisServer::start`], with `extra` appended to the command line,
    /// e.g. `&["--requirepass", "secret"]`.
    ///
    /// When `--requirepass` is among the extra arguments, [`RedisServer::cmd`], the
    /// readiness probe and [`RawSubscriber::new`] authenticate with that password.
    ///
    /// If the process exits right away (typically because another test grabbed the port
    /// in the meantime), a new free port is picked, up to 5 attempts.
    ///
    /// # Panics
    ///
    /// Panics (including the tail of the server log) if the server does not come up.
    pub fn start_with_args(extra: &[&str]) -> RedisServer {
        RedisServer::start_binary(redis_binary(), extra)
    }

    /// Like [`RedisServer::start_with_args`], with the server binary
    /// `binary` rather than the suite's.
    pub fn start_binary(binary: OsString, extra: &[&str]) -> RedisServer {
        RedisServer::start_with_env(binary, extra, Vec::new())
    }

    /// Like [`RedisServer::start_binary`], the process (and its restarts)
    /// given the environment variables `env` too.
    pub(crate) fn start_with_env(
        binary: OsString,
        extra: &[&str],
        env: Vec<(String, OsString)>,
    ) -> RedisServer {
        let mut server = RedisServer {
            port: 0,
            child: None,
            dir: create_unique_dir(),
            binary,
            extra_args: extra.iter().map(|arg| (*arg).to_owned()).collect(),
            env,
        };
        let mut failures = Vec::new();
        for _ in 0..START_ATTEMPTS {
            server.port = free_port();
            match server.launch(Instant::now() + STARTUP_TIMEOUT) {
                Launch::Ready => return server,
                Launch::Exited(status) => {
                    failures.push(format!("port {}: exited early ({status})", server.port));
                }
                Launch::TimedOut => server.fail(&format!(
                    "did not answer PING on port {} within {:?}",
                    server.port, STARTUP_TIMEOUT
                )),
            }
        }
        server.fail(&format!(
            "exited early on every attempt: {}",
            failures.join("; ")
        ))
    }

    /// The TCP port the server listens on (kept across [`RedisServer::restart`]).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Connection URL of the server: `redis://127.0.0.1:<port>/`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// Kills the server process (SIGKILL) and waits for it to exit.
    ///
    /// Calling it on a stopped server does nothing.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Freezes the server process (SIGSTOP): it reads, answers and
    /// replicates nothing until [`RedisServer::thaw`]. Frozen when this
    /// returns.
    pub fn freeze(&self) {
        self.signal("STOP");
    }

    /// Lets a frozen server run again (SIGCONT).
    pub fn thaw(&self) {
        self.signal("CONT");
    }

    fn signal(&self, signal: &str) {
        let pid = self.child.as_ref().expect("a running server").id();
        let status = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(pid.to_string())
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -{signal} {pid} failed");
    }

    /// Stops the server, then starts it again on the same port, in the same directory
    /// and with the same arguments, and waits until it answers.
    ///
    /// If the port cannot be bound yet, the process exits and is respawned until
    /// 10 seconds have passed. No data survives since persistence is off.
    ///
    /// # Panics
    ///
    /// Panics (including the tail of the server log) if the server does not come back.
    pub fn restart(&mut self) {
        self.stop();
        let deadline = Instant::now() + STARTUP_TIMEOUT;
        loop {
            match self.launch(deadline) {
                Launch::Ready => return,
                Launch::Exited(_) if Instant::now() < deadline => thread::sleep(RESPAWN_PAUSE),
                Launch::Exited(status) => self.fail(&format!(
                    "could not restart on port {} within {:?}; last exit: {status}",
                    self.port, STARTUP_TIMEOUT
                )),
                Launch::TimedOut => self.fail(&format!(
                    "did not answer PING on port {} within {:?} after restart",
                    self.port, STARTUP_TIMEOUT
                )),
            }
        }
    }

    /// Sends one command over a new short-lived connection and returns the parsed reply.
    ///
    /// The arguments are sent as a RESP array of bulk strings, e.g.
    /// `server.cmd(&["SET", "key", "value"])`. Redis errors come back as
    /// [`RespValue::Error`]; they do not panic.
    ///
    /// # Panics
    ///
    /// Panics on any I/O or protocol error (for example when the server is stopped).
    pub fn cmd(&self, args: &[&str]) -> RespValue {
        match self.try_cmd(args) {
            Ok(value) => value,
            Err(err) => panic!(
                "command {args:?} to redis on port {} failed: {err}",
                self.port
            ),
        }
    }

    /// How many EVALSHA calls the server ran since it started (or its
    /// statistics were reset), by `INFO commandstats`.
    pub fn evalsha_calls(&self) -> u64 {
        let info = self.cmd(&["INFO", "commandstats"]).as_string().unwrap();
        info.lines()
            .find_map(|line| line.strip_prefix("cmdstat_evalsha:calls="))
            .and_then(|rest| rest.split(',').next())
            .map_or(0, |calls| calls.parse().unwrap())
    }

    /// [`RedisServer::cmd`], with a failed connection returned instead of a
    /// panic: for looks inside an `eventually` wait while the server may be
    /// switching roles, restarting or cut off, where Redis dropping the
    /// connection means "not yet", not a failure.
    pub fn try_cmd(&self, args: &[&str]) -> io::Result<RespValue> {
        connect(self.port, IO_TIMEOUT).and_then(|stream| {
            let mut reader = BufReader::new(stream);
            self.authenticate(&mut reader)?;
            reader.get_mut().write_all(&encode_command(args))?;
            read_value(&mut reader)
        })
    }

    /// The first element of `ROLE` (`master`, `slave`, `sentinel`), or
    /// `None` while the server cannot be asked (see
    /// [`RedisServer::try_cmd`]).
    pub fn role(&self) -> Option<String> {
        self.try_cmd(&["ROLE"])
            .ok()?
            .as_array()
            .and_then(|r| r.first().and_then(|v| v.as_string()))
    }

    /// The keys that match `pattern` (`KEYS`), sorted.
    ///
    /// # Panics
    ///
    /// Panics when the reply is not an array of names (or as [`RedisServer::cmd`]).
    pub fn keys(&self, pattern: &str) -> Vec<String> {
        let reply = self.cmd(&["KEYS", pattern]);
        let mut keys: Vec<String> = reply
            .as_array()
            .unwrap_or_else(|| panic!("KEYS {pattern:?}: {reply:?}"))
            .iter()
            .map(|key| key.as_string().expect("KEYS replies with names"))
            .collect();
        keys.sort();
        keys
    }

    /// The time to live of `key` in ms (`PTTL`): -1 for a key without
    /// one, -2 for a key that is not there.
    ///
    /// # Panics
    ///
    /// Panics when the reply is not an integer (or as [`RedisServer::cmd`]).
    pub fn pttl(&self, key: &str) -> i64 {
        let reply = self.cmd(&["PTTL", key]);
        reply
            .as_int()
            .unwrap_or_else(|| panic!("PTTL {key:?}: {reply:?}"))
    }

    /// The password given with `--requirepass`, if any.
    fn password(&self) -> Option<&str> {
        self.extra_args
            .iter()
            .position(|arg| arg == "--requirepass")
            .and_then(|index| self.extra_args.get(index + 1))
            .map(String::as_str)
    }

    /// Sends `AUTH` on a fresh connection when a password is configured.
    fn authenticate(&self, reader: &mut BufReader<TcpStream>) -> io::Result<()> {
        let Some(password) = self.password() else {
            return Ok(());
        };
        reader
            .get_mut()
            .write_all(&encode_command(&["AUTH", password]))?;
        match read_value(reader)? {
            RespValue::Error(message) => Err(io::Error::other(format!("AUTH failed: {message}"))),
            _ => Ok(()),
        }
    }

    /// Path of the server log file.
    fn log_path(&self) -> PathBuf {
        self.dir.join("redis.log")
    }

    /// Path of the file that receives the server's stderr.
    fn stderr_path(&self) -> PathBuf {
        self.dir.join("redis.stderr")
    }

    /// Where the child's stderr goes: appended to `redis.stderr` in the temp dir, because
    /// redis reports command-line/config errors there before it opens its log file.
    /// Falls back to the null device if the file cannot be opened.
    fn stderr_sink(&self) -> Stdio {
        fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.stderr_path())
            .map_or_else(|_| Stdio::null(), Stdio::from)
    }

    /// Spawns the process on the current port and waits until it is ready, it exits,
    /// or `deadline` passes. Only a ready process is kept in `self.child`.
    fn launch(&mut self, deadline: Instant) -> Launch {
        let log = self.log_path();
        // The log is appended to across restarts; only look at what this process writes.
        let log_offset = fs::metadata(&log).map_or(0, |meta| meta.len());
        let mut child = self.spawn(&log);
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                return Launch::Exited(status);
            }
            if self.probe(child.id(), &log, log_offset) {
                // Make sure the answer did not come from some other server on this port.
                if let Ok(Some(status)) = child.try_wait() {
                    return Launch::Exited(status);
                }
                self.child = Some(child);
                return Launch::Ready;
            }
            if Instant::now() >= deadline {
                let _ = child.kill();
                let _ = child.wait();
                return Launch::TimedOut;
            }
            thread::sleep(POLL_INTERVAL);
        }
    }

    /// Spawns `redis-server` with the standard arguments plus the extra ones.
    fn spawn(&self, log: &Path) -> Child {
        let mut command = Command::new(&self.binary);
        command
            .arg("--port")
            .arg(self.port.to_string())
            .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(&self.dir)
            .arg("--logfile")
            .arg(log)
            .args(["--daemonize", "no", "--protected-mode", "no"])
            .args(&self.extra_args)
            .envs(self.env.iter().map(|(name, value)| (name, value)))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(self.stderr_sink());
        match command.spawn() {
            Ok(child) => child,
            Err(err) => panic!(
                "could not run {}: {err} (install redis-server or set {BINARY_ENV} to its path)",
                Path::new(&self.binary).display()
            ),
        }
    }

    /// Returns true when the server on our port answers and is the process `pid`.
    ///
    /// A `PING` must get `+PONG` (or `NOAUTH` if a password we do not know is set).
    /// Ownership is then confirmed through `INFO server`'s `process_id`, or, when that
    /// is not available, through the "ready" line in this process' part of the log.
    fn probe(&self, pid: u32, log: &Path, log_offset: u64) -> bool {
        let Ok(stream) = connect(self.port, PROBE_TIMEOUT) else {
            return false;
        };
        let mut reader = BufReader::new(stream);
        let answered = self.authenticate(&mut reader).is_ok()
            && reader.get_mut().write_all(b"PING\r\n").is_ok()
            && match read_value(&mut reader) {
                Ok(RespValue::Simple(reply)) => reply == "PONG",
                Ok(RespValue::Error(message)) => message.starts_with("NOAUTH"),
                _ => false,
            };
        if !answered {
            return false;
        }
        let info = reader
            .get_mut()
            .write_all(&encode_command(&["INFO", "server"]))
            .and_then(|()| read_value(&mut reader));
        match info {
            Ok(RespValue::Bulk(Some(text))) => String::from_utf8_lossy(&text)
                .lines()
                .find_map(|line| line.strip_prefix("process_id:"))
                .and_then(|value| value.trim().parse::<u32>().ok())
                .is_some_and(|reported| reported == pid),
            _ => log_says_ready(log, log_offset),
        }
    }

    /// Kills the process and panics with `reason` and the tails of the log and stderr.
    fn fail(&mut self, reason: &str) -> ! {
        self.stop();
        panic!(
            "redis-server ({}) in {}: {reason}\n--- tail of {} ---\n{}\n--- tail of {} ---\n{}",
            Path::new(&self.binary).display(),
            self.dir.display(),
            self.log_path().display(),
            log_tail(&self.log_path()),
            self.stderr_path().display(),
            log_tail(&self.stderr_path())
        );
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.stop();
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// A dedicated connection subscribed to one channel with `SUBSCRIBE`.
#[derive(Debug)]
pub struct RawSubscriber {
    /// Buffered connection; the buffer keeps partially received pushes.
    reader: BufReader<TcpStream>,
}

impl RawSubscriber {
    /// Connects to `server`, subscribes to `channel` and waits for the confirmation,
    /// so messages published after this returns are received.
    ///
    /// # Panics
    ///
    /// Panics on I/O errors or if redis refuses the subscription.
    pub fn new(server: &RedisServer, channel: &str) -> RawSubscriber {
        let result = connect(server.port, IO_TIMEOUT).and_then(|stream| {
            let mut reader = BufReader::new(stream);
            server.authenticate(&mut reader)?;
            reader
                .get_mut()
                .write_all(&encode_command(&["SUBSCRIBE", channel]))?;
            loop {
                let reply = read_value(&mut reader)?;
                if let RespValue::Error(message) = reply {
                    return Err(io::Error::other(format!("SUBSCRIBE refused: {message}")));
                }
                if push_kind(&reply).as_deref() == Some("subscribe") {
                    return Ok(reader);
                }
            }
        });
        match result {
            Ok(reader) => RawSubscriber { reader },
            Err(err) => panic!(
                "subscribing to {channel:?} on redis port {} failed: {err}",
                server.port
            ),
        }
    }

    /// Waits up to `timeout` for the next `message` push and returns `(channel, payload)`.
    ///
    /// Returns `None` on timeout, and also when the connection is closed or broken
    /// (for example after the server was stopped or restarted).
    pub fn next_message(&mut self, timeout: Duration) -> Option<(String, String)> {
        let deadline = Instant::now() + timeout;
        loop {
            let remaining = deadline.saturating_duration_since(Instant::now());
            // Wait for the first byte with the caller's timeout, but only when nothing is
            // buffered yet; a reply that has started to arrive is then read in full, so a
            // timeout never cuts a reply in half.
            if self.reader.buffer().is_empty() {
                if remaining.is_zero() {
                    return None;
                }
                self.reader
                    .get_ref()
                    .set_read_timeout(Some(remaining))
                    .ok()?;
                match self.reader.fill_buf() {
                    Ok([]) => return None,
                    Ok(_) => {}
                    Err(err) if err.kind() == io::ErrorKind::Interrupted => continue,
                    Err(_) => return None,
                }
            }
            self.reader
                .get_ref()
                .set_read_timeout(Some(IO_TIMEOUT))
                .ok()?;
            let reply = read_value(&mut self.reader).ok()?;
            if push_kind(&reply).as_deref() != Some("message") {
                continue;
            }
            if let Some([_, channel, payload]) = reply.as_array() {
                if let (Some(channel), Some(payload)) = (channel.as_string(), payload.as_string()) {
                    return Some((channel, payload));
                }
            }
        }
    }
}

/// Picks a currently free TCP port on `127.0.0.1` by binding port 0 and reading the
/// port the OS assigned (the listener is dropped before returning).
///
/// # Panics
///
/// Panics if no local port can be bound.
pub fn free_port() -> u16 {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .unwrap_or_else(|err| panic!("cannot bind 127.0.0.1:0 to find a free port: {err}"));
    listener
        .local_addr()
        .unwrap_or_else(|err| panic!("cannot read the address of a bound listener: {err}"))
        .port()
}

/// The version of the server the tests run, `(major, minor)`, read from
/// its `--version` (`Redis server v=6.2.14 ...`, `Valkey server v=8.1.8
/// ...`). For what a test asserts that older servers cannot do (sharded
/// pub/sub before Redis 7): each such test says what it checks instead.
pub fn server_version() -> (u32, u32) {
    static VERSION: std::sync::OnceLock<(u32, u32)> = std::sync::OnceLock::new();
    *VERSION.get_or_init(|| version_of(&redis_binary()))
}

/// `(major, minor)` of the server binary `binary`.
pub fn version_of(binary: &std::ffi::OsStr) -> (u32, u32) {
    let out = Command::new(binary)
        .arg("--version")
        .output()
        .unwrap_or_else(|err| panic!("cannot run {binary:?} --version: {err}"));
    let text = String::from_utf8_lossy(&out.stdout);
    let version = text
        .split_whitespace()
        .find_map(|word| word.strip_prefix("v="))
        .unwrap_or_else(|| panic!("no version in {text:?}"));
    let mut parts = version.split('.').map(|part| part.parse::<u32>().ok());
    match (parts.next().flatten(), parts.next().flatten()) {
        (Some(major), Some(minor)) => (major, minor),
        _ => panic!("cannot read the version {version:?}"),
    }
}

/// The `redis-server` binary to run: `$FERRISSON_REDIS_SERVER` or `redis-server`.
pub fn redis_binary() -> OsString {
    std::env::var_os(BINARY_ENV)
        .filter(|value| !value.is_empty())
        .unwrap_or_else(|| OsString::from(DEFAULT_BINARY))
}

/// A new empty directory under the system's temp dir, unique within and
/// across processes (for files a test writes beside its servers).
pub fn unique_dir() -> PathBuf {
    create_unique_dir()
}

/// Creates a new directory under the system temp dir whose name is unique across
/// threads and processes (pid + counter + current nanoseconds).
fn create_unique_dir() -> PathBuf {
    let base = std::env::temp_dir();
    let mut last_error = None;
    for _ in 0..100 {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |elapsed| elapsed.as_nanos());
        let dir = base.join(format!(
            "ferrisson-redis-{}-{}-{nanos}",
            std::process::id(),
            DIR_COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        // `create_dir` (not `create_dir_all`) fails if the name is already taken.
        match fs::create_dir(&dir) {
            Ok(()) => return dir,
            Err(err) => last_error = Some(err),
        }
    }
    panic!(
        "cannot create a temp dir for redis-server under {}: {last_error:?}",
        base.display()
    )
}

/// True when the log, from byte `offset` on, reports that redis accepts connections.
fn log_says_ready(log: &Path, offset: u64) -> bool {
    let Ok(contents) = fs::read(log) else {
        return false;
    };
    let start = usize::try_from(offset)
        .unwrap_or(usize::MAX)
        .min(contents.len());
    String::from_utf8_lossy(&contents[start..]).contains(READY_LOG_LINE)
}

/// The last lines of a log file, or a note saying why it could not be read.
fn log_tail(path: &Path) -> String {
    match fs::read(path) {
        Ok(contents) => {
            let text = String::from_utf8_lossy(&contents);
            let lines: Vec<&str> = text.lines().collect();
            lines[lines.len().saturating_sub(LOG_TAIL_LINES)..].join("\n")
        }
        Err(err) => format!("(log not readable: {err})"),
    }
}
