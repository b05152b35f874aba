//! `ferrisson`: looks at the locks, semaphores and latches in a Redis (taken
//! by ferrisson or by Java Redisson clients: the layout is the same) and
//! says who holds what, who waits, and for how long.
//!
//! Installed from a clone of the repository with `cargo install --locked
//! --path ferrisson-cli` (not published yet: docs/cli.md); `ferrisson
//! --help` lists the subcommands.

mod conn;
mod layout;
#[cfg(unix)]
mod run;
mod state;

use std::io::{BufRead, Write};
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use serde::Serialize;

use conn::Target;
use state::{Found, Kind, State};

/// Inspect the locks, leader elections, semaphores and latches of ferrisson
/// and Redisson in Redis; `run` a command under a lock across hosts.
#[derive(Debug, Parser)]
#[command(name = "ferrisson", version)]
struct Cli {
    /// The Redis to look at (`redis://`, `rediss://` for TLS, with
    /// `user:password@` for ACL users). Give it several times, or comma
    /// separated, for the nodes of a Redis Cluster. Without it, the
    /// environment's REDIS_URL (comma separated too), else
    /// redis://127.0.0.1/.
    // REDIS_URL is read by `urls`, not with clap's `env`: clap's usage
    // lines show an option taken from the environment as if typed
    // (`Usage: ferrisson inspect --url <URL> <NAME>`), which reads as
    // though --url were required.
    #[arg(long, global = true, value_name = "URL", value_delimiter = ',')]
    url: Vec<String>,

    /// The URL is one node of a Redis Cluster (implied by several URLs,
    /// unless --sentinel is given).
    #[arg(long, global = true, conflicts_with = "sentinel")]
    cluster: bool,

    /// The URLs are Redis Sentinels, and MASTER the name of the master they
    /// watch: it is looked at where they say it is now (reached with the
    /// scheme, user and password of the first URL). A failover during
    /// `watch` is not followed.
    #[arg(long, global = true, value_name = "MASTER")]
    sentinel: Option<String>,

    /// Print JSON instead of text, for scripts. An error is printed as one
    /// line of JSON on stdout, `{"error": "..."}`, with the same non-zero
    /// exit status as without --json.
    #[arg(long, global = true)]
    json: bool,

    /// A PEM file with the CA that signed the server's certificate, when it
    /// is not in the system's trust store.
    #[cfg(feature = "tls")]
    #[arg(long, global = true, value_name = "FILE")]
    tls_ca: Option<std::path::PathBuf>,

    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// What a key is, and who holds it, since when, and who waits (a
    /// leader election: who leads, its label and term).
    Inspect {
        /// The object's name (its key).
        #[arg(value_parser = non_empty_name)]
        name: String,
        /// Read it as this kind where the data cannot tell (a semaphore
        /// and a latch are both a number); a kind the data rules out is
        /// refused.
        #[arg(long, value_enum)]
        kind: Option<Kind>,
    },
    /// One line per synchronizer found by SCAN: kind, name, holders, TTL
    /// (a leader election while it has a leader: a free one leaves no key
    /// of its own).
    List {
        /// A Redis glob pattern for the names.
        #[arg(default_value = "*", value_parser = non_empty_pattern)]
        pattern: String,
    },
    /// Follows one object live (its channel and its state), printing each
    /// hand-over, until interrupted.
    Watch {
        /// The object's name.
        #[arg(value_parser = non_empty_name)]
        name: String,
        /// Read it as this kind where the data cannot tell; a kind the data
        /// rules out is refused.
        #[arg(long, value_enum)]
        kind: Option<Kind>,
        /// How often the state is read besides on each message, in ms.
        #[arg(long, default_value_t = 100)]
        interval_ms: u64,
    },
    /// Deletes a lock whoever holds it and wakes its waiters (a latch:
    /// opens it; a leader election: deposes its leader). Asks first,
    /// unless `--yes`.
    ForceUnlock {
        /// The object's name.
        #[arg(value_parser = non_empty_name)]
        name: String,
        /// Do it without asking.
        #[arg(long, short)]
        yes: bool,
        /// Read it as this kind where the data cannot tell; a kind the data
        /// rules out is refused.
        #[arg(long, value_enum)]
        kind: Option<Kind>,
    },
    /// Runs a command while holding a lock across hosts (or one of N
    /// permits), as `consul lock` or `flock`: exits with the command's
    /// status, 75 when the lock was busy (or the occurrence named with
    /// --every or --occurrence was run already), 76 when its lease was
    /// lost.
    #[cfg(unix)]
    Run(run::RunArgs),
    /// `run`'s guard: started by `run` itself, it kills the command's
    /// process group when the runner dies (src/run.rs).
    #[cfg(unix)]
    #[command(name = run::GUARD_COMMAND, hide = true)]
    RunGuard,
}

/// The Redis reached when neither --url nor REDIS_URL names one.
const DEFAULT_URL: &str = "redis://127.0.0.1/";

/// The URLs to reach: those of --url, else those of REDIS_URL (comma
/// separated; unset or empty: none), else [`DEFAULT_URL`].
fn urls(given: &[String]) -> Result<Vec<String>, String> {
    if !given.is_empty() {
        return Ok(given.to_vec());
    }
    match std::env::var("REDIS_URL") {
        Ok(value) if !value.is_empty() => Ok(value.split(',').map(str::to_owned).collect()),
        Ok(_) | Err(std::env::VarError::NotPresent) => Ok(vec![DEFAULT_URL.to_owned()]),
        Err(std::env::VarError::NotUnicode(_)) => {
            Err("REDIS_URL is not valid UTF-8: give the URL with --url".to_owned())
        }
    }
}

/// Refuses an empty object name: no synchronizer can be named so (the
/// library refuses it), and a query on it would only find nothing.
fn non_empty_name(name: &str) -> Result<String, String> {
    if name.is_empty() {
        Err("the name is empty: give the name of a lock, semaphore or latch".to_owned())
    } else {
        Ok(name.to_owned())
    }
}

/// Refuses an empty `list` pattern, which could match no object's name.
fn non_empty_pattern(pattern: &str) -> Result<String, String> {
    if pattern.is_empty() {
        Err("the pattern is empty and would match no name: `*` matches every one".to_owned())
    } else {
        Ok(pattern.to_owned())
    }
}

/// A failure, said in one line for the person at the terminal.
#[derive(Debug)]
pub(crate) struct Fail(pub(crate) String);

impl From<redis::RedisError> for Fail {
    fn from(err: redis::RedisError) -> Fail {
        Fail(format!("redis error: {err}"))
    }
}

impl Fail {
    /// A library error on the object `name`.
    pub(crate) fn from_lib(err: ferrisson::Error, name: &str) -> Fail {
        match err {
            err @ ferrisson::Error::WrongType { .. } => Fail(format!(
                "`{name}` is not a synchronizer of the kind asked: {err}"
            )),
            other => Fail(format!("`{name}`: {other}")),
        }
    }
}

/// Writes to stdout, as `print!`; see [`emit`].
macro_rules! out {
    ($($arg:tt)*) => {
        emit(format_args!($($arg)*))
    };
}

/// Writes a line to stdout, as `println!`; see [`emit`].
macro_rules! outln {
    ($($arg:tt)*) => {
        emit(format_args!("{}\n", format_args!($($arg)*)))
    };
}

// After the macros, which it uses.
mod watch;

/// Writes `text` to stdout at once. A reader that has gone away
/// (`ferrisson list | head -1`) ends the program quietly with success, as
/// the tools it is piped into expect, where `print!` would panic; any other
/// failure to write ends it with an error.
fn emit(text: std::fmt::Arguments<'_>) {
    let mut stdout = std::io::stdout().lock();
    match stdout.write_fmt(text).and_then(|()| stdout.flush()) {
        Ok(()) => {}
        Err(err) if err.kind() == std::io::ErrorKind::BrokenPipe => std::process::exit(0),
        Err(err) => {
            eprintln!("ferrisson: cannot write to stdout: {err}");
            std::process::exit(1);
        }
    }
}

/// Says `message` and returns `code`: on stderr as `ferrisson: message`,
/// or, with `--json`, on stdout as one line `{"error": "message"}`, so that
/// a script reading the JSON always gets JSON.
fn fail(json: bool, message: &str, code: u8) -> ExitCode {
    if json {
        let line = serde_json::json!({ "error": message });
        outln!("{line}");
    } else {
        eprintln!("ferrisson: {message}");
    }
    ExitCode::from(code)
}

/// Whether the command line asks for JSON, read from the words themselves
/// for when clap could not parse them (`--json` is a flag: any word before
/// a `--` that is exactly it).
fn json_asked() -> bool {
    std::env::args_os()
        .skip(1)
        .take_while(|arg| arg != "--")
        .any(|arg| arg == "--json")
}

fn main() -> ExitCode {
    let mut cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(err) => {
            use clap::error::ErrorKind;
            if matches!(
                err.kind(),
                ErrorKind::DisplayHelp | ErrorKind::DisplayVersion
            ) || !json_asked()
            {
                err.exit();
            }
            let message = match err.kind() {
                ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
                | ErrorKind::MissingSubcommand => {
                    "no subcommand given: see `ferrisson --help`".to_owned()
                }
                // The first line of clap's text, without its `error: `.
                _ => {
                    let text = err.render().to_string();
                    let first = text.lines().next().unwrap_or_default();
                    first.strip_prefix("error: ").unwrap_or(first).to_owned()
                }
            };
            return fail(true, &message, u8::try_from(err.exit_code()).unwrap_or(2));
        }
    };
    let json = cli.json;
    #[cfg(unix)]
    if let Command::RunGuard = &cli.command {
        return run::guard();
    }
    #[cfg(unix)]
    if let Command::Run(args) = &cli.command {
        if let Err(message) = args.check() {
            return fail(json, &message, 2);
        }
    }
    cli.url = match urls(&cli.url) {
        Ok(urls) => urls,
        Err(message) => return fail(json, &message, 2),
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => return fail(json, &format!("cannot start: {err}"), 1),
    };
    match runtime.block_on(run(cli)) {
        Ok(code) => code,
        Err(Fail(message)) => fail(json, &message, 1),
    }
}

async fn run(cli: Cli) -> Result<ExitCode, Fail> {
    #[cfg(feature = "tls")]
    let tls_ca = match &cli.tls_ca {
        Some(path) => Some(
            std::fs::read(path)
                .map_err(|e| Fail(format!("cannot read {}: {e}", path.display())))?,
        ),
        None => None,
    };
    #[cfg(not(feature = "tls"))]
    let tls_ca = None;
    let urls = match &cli.sentinel {
        Some(master) => vec![conn::sentinel_master(&cli.url, master, tls_ca.as_deref()).await?],
        None => cli.url.clone(),
    };
    let settings = conn::Settings {
        cluster: cli.cluster || urls.len() > 1,
        sentinel: cli.sentinel.is_some(),
        urls,
        tls_ca,
        #[cfg(unix)]
        watchdog_timeout: match &cli.command {
            Command::Run(args) => args.renewed_lease(),
            _ => None,
        },
        #[cfg(not(unix))]
        watchdog_timeout: None,
    };
    let target = conn::connect(&settings).await?;
    match cli.command {
        Command::Inspect { name, kind } => {
            let state = state::inspect(&target, &name, kind).await?;
            if cli.json {
                print_json(&state);
            } else {
                out!("{}", state.text());
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::List { pattern } => list(&target, &pattern, cli.json).await,
        Command::Watch {
            name,
            kind,
            interval_ms,
        } => watch::watch(&target, &name, kind, interval_ms, cli.json).await,
        Command::ForceUnlock { name, yes, kind } => {
            force_unlock(&target, &name, kind, yes, cli.json).await
        }
        #[cfg(unix)]
        Command::Run(args) => run::run(&target, args).await,
        // Run by `main` before any connection.
        #[cfg(unix)]
        Command::RunGuard => Ok(run::guard()),
    }
}

fn print_json(value: &impl Serialize) {
    match serde_json::to_string_pretty(value) {
        Ok(text) => outln!("{text}"),
        Err(err) => eprintln!("ferrisson: cannot write JSON: {err}"),
    }
}

/// How many objects `list` reads at once.
const LIST_READS: usize = 64;

/// `list`: SCAN each node given (the masters, on a cluster), then one line
/// per synchronizer.
async fn list(target: &Target, pattern: &str, json: bool) -> Result<ExitCode, Fail> {
    let mut names = std::collections::BTreeSet::new();
    for (node, url) in conn::scanned(target).await? {
        let mut conn = node
            .get_multiplexed_async_connection()
            .await
            .map_err(|e| conn::connect_error(&url, &e))?;
        let mut cursor = 0u64;
        loop {
            let (next, keys): (u64, Vec<Vec<u8>>) = redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(pattern)
                .arg("COUNT")
                .arg(1000)
                .query_async(&mut conn)
                .await?;
            names.extend(
                keys.into_iter()
                    .filter_map(|key| String::from_utf8(key).ok())
                    .filter(|key| !layout::is_companion(key)),
            );
            if next == 0 {
                break;
            }
            cursor = next;
        }
    }
    // Up to LIST_READS names are read at once, their commands pipelined on
    // the connections, in name order. A key that changed between SCAN and
    // now, or of another use, is left out.
    use futures_util::StreamExt;
    let states: Vec<State> = futures_util::stream::iter(names)
        .map(|name| async move {
            match state::detect(target, &name).await {
                Ok(Found::Object { kind, also }) => {
                    let mut state = state::read(target, &name, kind).await.ok()?;
                    state.could_also_be = also;
                    Some(state)
                }
                _ => None,
            }
        })
        .buffered(LIST_READS)
        .filter_map(std::future::ready)
        .collect()
        .await;
    if json {
        print_json(&states);
    } else {
        if states.is_empty() {
            eprintln!("no synchronizer matches `{pattern}`");
        }
        let width = states.iter().map(|s| s.name.chars().count()).max();
        for state in &states {
            let kind = state.kind.map_or("", Kind::label);
            let name = &state.name;
            let width = width.unwrap_or(0);
            outln!("{kind:<26}  {name:<width$}  {}", state.summary());
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// What `force-unlock` did, for `--json`.
#[derive(Serialize)]
struct Removed<'a> {
    removed: bool,
    before: &'a State,
}

/// `force-unlock`: shows what it will remove, asks, removes it with the
/// library's call (which publishes the wake-up), says what went.
async fn force_unlock(
    target: &Target,
    name: &str,
    kind: Option<Kind>,
    yes: bool,
    json: bool,
) -> Result<ExitCode, Fail> {
    let asked = kind;
    let before = state::inspect(target, name, asked).await?;
    let Some(kind) = before.kind else {
        if json {
            print_json(&Removed {
                removed: false,
                before: &before,
            });
        } else {
            outln!("`{name}` does not exist: nothing to unlock");
        }
        return Ok(ExitCode::SUCCESS);
    };
    if matches!(kind, Kind::Semaphore | Kind::PermitExpirableSemaphore) {
        return Err(Fail(format!(
            "`{name}` is a {}: its permits have no holder to remove, so force-unlock \
             leaves it alone (a latch is opened, a lock is freed; if it is a latch, \
             say `--kind count-down-latch`)",
            kind.label()
        )));
    }
    if !yes {
        eprint!("{}", before.text());
        eprint!(
            "Force-unlock the {} `{name}`, waking its waiters? [y/N] ",
            kind.label()
        );
        let _ = std::io::stderr().flush();
        let mut answer = String::new();
        // Blocking read of one line: nothing else runs meanwhile.
        let read = tokio::task::spawn_blocking(move || {
            std::io::stdin()
                .lock()
                .read_line(&mut answer)
                .map(|_| answer)
        })
        .await
        .map_err(|e| Fail(format!("cannot read the answer: {e}")))?;
        let answer = read.map_err(|e| Fail(format!("cannot read the answer: {e}")))?;
        if !matches!(answer.trim(), "y" | "Y" | "yes" | "YES" | "Yes") {
            return Err(Fail("not confirmed: nothing removed".to_owned()));
        }
        // What was confirmed is what was shown: a lock that changed hands
        // (or a latch that moved) while the question was open is left be.
        // Read as at first (found again, or as --kind asked), so that
        // a change of kind shows as a change, below.
        let now = state::inspect_remembering(target, name, asked, Some(kind)).await?;
        let who = |s: &state::State| -> Vec<(String, String, u32, bool)> {
            s.holders
                .iter()
                .map(|h| (h.client_id.clone(), h.owner_id.clone(), h.holds, h.write))
                .collect()
        };
        if now.kind != before.kind || who(&now) != who(&before) || now.count != before.count {
            return Err(Fail(format!(
                "`{name}` changed while the question was open: nothing removed; \
                 run force-unlock again to see it as it is now"
            )));
        }
    }
    let client = &target.client;
    let done = match kind {
        Kind::FairLock => client.fair_lock(name).force_unlock().await,
        Kind::FencedLock => client.fenced_lock(name).force_unlock().await,
        // Deleted, and the vacancy announced to the election's observers.
        Kind::LeaderElection => client.leader_election(name).depose().await,
        Kind::ReadWriteLock => client.read_write_lock(name).write().force_unlock().await,
        Kind::CountDownLatch => client.count_down_latch(name).delete().await,
        _ => client.lock(name).force_unlock().await,
    }
    .map_err(|e| Fail::from_lib(e, name))?;
    if json {
        print_json(&Removed {
            removed: done,
            before: &before,
        });
    } else if !done {
        outln!("`{name}` was already gone: nothing removed");
    } else if kind == Kind::CountDownLatch {
        outln!(
            "opened the count-down latch `{name}` (count was {}); its waiters were woken",
            before.count.unwrap_or(0)
        );
    } else {
        outln!("removed the {} `{name}`:", kind.label());
        if before.holders.is_empty() {
            outln!("  no holder (free when read)");
        }
        for holder in &before.holders {
            outln!(
                "  {}:{}  {}",
                holder.client_id,
                holder.owner_id,
                holder.holds_text()
            );
        }
        match before.queue.len() {
            0 => outln!("published the unlock message: its waiters wake now"),
            1 => outln!("1 waiter stays in line, and was woken"),
            n => outln!("{n} waiters stay in line; the first was woken"),
        }
    }
    Ok(ExitCode::SUCCESS)
}
