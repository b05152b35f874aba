//! `ferrisson run NAME -- COMMAND [ARGS]`: runs a command while holding a
//! lock (or one permit of a semaphore) across a fleet of hosts, as
//! `consul lock` and `flock` do.
//!
//! The command runs in a process group of its own (as under
//! `timeout(1)`): the runner forwards SIGINT, SIGTERM and SIGHUP to that
//! group, and on a lost lease stops the whole group, grandchildren
//! included. The lock is let go only once that group is empty: what the
//! command leaves running in it when it ends gets SIGTERM, and SIGKILL
//! after the grace. On Linux the runner is the child subreaper of what
//! the command starts, so that orphans of the group are its to reap.
//!
//! A runner killed with `kill -9` cannot stop anything itself: a guard
//! process of its own (`ferrisson run-guard`, in a process group of its
//! own, deaf to SIGINT, SIGTERM, SIGHUP and SIGQUIT) holds the read end
//! of a pipe that only the runner writes, and sends SIGKILL to the
//! command's group when that pipe closes without the runner's word that
//! the group is gone. The command is told its group's id before it
//! execs, so no window is left between its start and the guard's
//! knowing it. On Linux the command itself also gets SIGKILL when the
//! runner dies (its parent-death signal).

use std::cell::Cell;
use std::ffi::OsString;
use std::future::Future;
use std::os::unix::process::ExitStatusExt;
use std::process::{ExitCode, ExitStatus};
use std::time::Duration;

use nix::sys::signal::Signal;
use tokio::signal::unix::SignalKind;
use tokio::sync::broadcast;
use tokio::time::Instant;

mod supervise;

pub(crate) use supervise::guard;
use supervise::supervise;

use crate::conn::Target;
use crate::Fail;

/// The exit status when the lock (or every permit) was held elsewhere and
/// the wait ended, or when the occurrence (`--every`, `--occurrence`) was
/// run already: the command did not run. `EX_TEMPFAIL` of sysexits.h.
pub(crate) const BUSY: u8 = 75;

/// The exit status when the lease was lost while the command ran: it was
/// stopped (or had just ended), and another host may have run it at the
/// same time.
pub(crate) const LOST: u8 = 76;

/// The lease the runner renews (no `--at-most-for`) unless `--lease`
/// says otherwise: the library's default watchdog timeout, renewed every
/// third of it.
const RENEWED_LEASE: Duration = Duration::from_secs(30);

/// The hidden subcommand that runs the guard (see [`guard`]).
pub(crate) const GUARD_COMMAND: &str = "run-guard";

/// `ferrisson run`'s arguments.
#[derive(Debug, clap::Args)]
pub(crate) struct RunArgs {
    /// The job's name: the key of its lock (with --permits, of its
    /// semaphore).
    #[arg(value_parser = crate::non_empty_name)]
    name: String,

    /// Wait at most this long for the lock (`30s`, `5m`, `1h 30m`), then
    /// exit with 75 without running the command. Without it and without
    /// --no-wait, wait as long as it takes.
    #[arg(long, value_parser = duration, value_name = "DURATION")]
    wait: Option<Duration>,

    /// Do not wait: exit with 75 at once when the lock is held.
    #[arg(long, conflicts_with = "wait")]
    no_wait: bool,

    /// Hold the lock at most this long from the start, not renewed: the
    /// command is stopped before it runs out (SIGTERM --grace before its
    /// end, at most half of it; SIGKILL just before the end). Without it,
    /// the lock is renewed while the command runs (see --lease).
    #[arg(long, value_parser = duration, value_name = "DURATION")]
    at_most_for: Option<Duration>,

    /// The lease renewed while the command runs (every third of it): how
    /// long the lock outlives a runner that died or lost Redis, and how
    /// soon a lost lease stops the command. 30s by default.
    #[arg(long, value_parser = duration, value_name = "DURATION", conflicts_with = "at_most_for")]
    lease: Option<Duration>,

    /// Keep the lock until this long after the start, also when the
    /// command ends sooner, so that a host whose schedule fires a little
    /// later skips the run.
    #[arg(long, value_parser = duration, value_name = "DURATION", default_value = "0s")]
    at_least_for: Duration,

    /// Name the occurrence this run serves by the wall clock: the multiple
    /// of PERIOD since the Unix epoch nearest to now (`1h` on a cron entry
    /// of `0 * * * *`). A run of an occurrence that a run completed already
    /// (here or on another host) runs nothing and exits with 75. The host's
    /// run must start within half a period of the scheduled instant by its
    /// own clock.
    #[arg(long, value_parser = duration, value_name = "PERIOD", conflicts_with = "permits")]
    every: Option<Duration>,

    /// Name the occurrence this run serves: an integer that only grows from
    /// one occurrence to the next (`$(date +%Y%m%d)` for a daily run). A run
    /// of an occurrence at or below the last one completed runs nothing and
    /// exits with 75, whatever the hosts' clocks.
    #[arg(long, value_name = "ID", conflicts_with_all = ["every", "permits"])]
    occurrence: Option<u64>,

    /// How long the last occurrence done is remembered (with --every or
    /// --occurrence): a day by default, or ten periods of --every when
    /// longer.
    #[arg(long, value_parser = duration, value_name = "DURATION", conflicts_with = "permits")]
    remember_for: Option<Duration>,

    /// Take one permit of a semaphore of N permits instead of the lock:
    /// at most N runs at once across hosts. Every runner of the name
    /// must give the same N.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    permits: Option<u32>,

    /// After a lost lease, how long the command has between SIGTERM and
    /// SIGKILL; another host may run it meanwhile, so keep it short. Also
    /// what the command leaves running in its process group when it ends
    /// has that long after SIGTERM.
    #[arg(long, value_parser = duration, value_name = "DURATION", default_value = "10s")]
    grace: Duration,

    /// The label `ferrisson inspect` shows for the holder: the host name
    /// by default. At most 256 bytes, no control characters. Not with
    /// --permits: a permit is a bare id in Redisson's layout, with no
    /// room for a label.
    #[arg(long, conflicts_with = "permits", value_parser = label)]
    label: Option<String>,

    /// The command and its arguments, after `--`.
    #[arg(required = true, last = true, value_name = "COMMAND")]
    command: Vec<OsString>,
}

/// Parses a duration as `30s`, `500ms`, `5m`, `1h 30m`.
fn duration(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text)
        .map_err(|e| format!("`{text}` is no duration ({e}): write it as 500ms, 30s, 5m or 1h"))
}

/// Checks `--label` as the library's `Job` will, so that a bad one is a
/// mistake in the command line (exit 2) found before anything is sent.
fn label(text: &str) -> Result<String, String> {
    if text.is_empty() {
        return Err("the label is empty: leave --label out for the host name".to_owned());
    }
    let max = ferrisson::config::MAX_JOB_LABEL_LEN;
    if text.len() > max {
        return Err(format!(
            "the label is {} bytes long, over the limit of {max}",
            text.len()
        ));
    }
    if text.chars().any(char::is_control) {
        return Err(format!("the label {text:?} holds a control character"));
    }
    Ok(text.to_owned())
}

impl RunArgs {
    /// Refuses what contradicts itself, before anything is sent.
    pub(crate) fn check(&self) -> Result<(), String> {
        if let Some(at_most) = self.at_most_for {
            if at_most.is_zero() {
                return Err("--at-most-for must be longer than zero".to_owned());
            }
            if self.at_least_for > at_most {
                return Err(format!(
                    "--at-least-for ({}) is longer than --at-most-for ({}): the lock cannot be kept past its lease",
                    humantime::format_duration(self.at_least_for),
                    humantime::format_duration(at_most)
                ));
            }
        }
        if self
            .lease
            .is_some_and(|lease| lease < Duration::from_millis(100))
        {
            return Err(
                "--lease must be at least 100ms: it is renewed every third of it".to_owned(),
            );
        }
        if self
            .occurrence
            .is_some_and(|id| id > ferrisson::config::MAX_OCCURRENCE)
        {
            return Err(format!(
                "--occurrence must be at most {}",
                ferrisson::config::MAX_OCCURRENCE
            ));
        }
        if let Some(every) = self.every {
            if every.as_millis() == 0 || every.subsec_nanos() % 1_000_000 != 0 {
                return Err(
                    "--every must be a whole number of milliseconds, at least 1ms".to_owned(),
                );
            }
        }
        if self.remember_for.is_some_and(|d| d.as_millis() == 0) {
            return Err("--remember-for must be at least 1ms".to_owned());
        }
        let year = ferrisson::config::MAX_DURATION;
        let durations = [
            Some(self.at_least_for),
            self.wait,
            self.at_most_for,
            self.lease,
            self.every,
            self.remember_for,
        ];
        if durations.into_iter().flatten().any(|d| d > year) {
            return Err("a duration is longer than a year, the longest ferrisson takes".to_owned());
        }
        if self
            .command
            .first()
            .is_none_or(|program| program.is_empty())
        {
            return Err("no command given: write it after `--`".to_owned());
        }
        Ok(())
    }

    /// The renewed lease `--lease` asked for: the client's watchdog
    /// timeout.
    pub(crate) fn renewed_lease(&self) -> Option<Duration> {
        self.lease
    }

    /// How long to wait for the lock: `None` for as long as it takes.
    fn wait(&self) -> Option<Duration> {
        match (self.no_wait, self.wait) {
            (true, _) => Some(Duration::ZERO),
            (false, wait) => wait,
        }
    }
}

/// How the command ended.
enum Ended {
    /// It exited (or was killed by a signal) while the lease held.
    Exited(ExitStatus),
    /// The lease was lost: it was stopped.
    Stopped,
    /// It could not be started.
    NotStarted(String, std::io::Error),
}

/// `ferrisson run`.
pub(crate) async fn run(target: &Target, args: RunArgs) -> Result<ExitCode, Fail> {
    let signals = Signals::listen()?;
    match args.permits {
        None => run_locked(target, &args, &signals).await,
        Some(permits) => run_with_permit(target, &args, permits, &signals).await,
    }
}

/// With the lock: a [`ferrisson::Job`].
async fn run_locked(target: &Target, args: &RunArgs, signals: &Signals) -> Result<ExitCode, Fail> {
    let name = &args.name;
    let label = args.label.clone().unwrap_or_else(host_name);
    let mut job = target
        .client
        .job(name)
        .label(label)
        .at_least_for(args.at_least_for)
        .wait(args.wait().unwrap_or(ferrisson::config::MAX_DURATION));
    if let Some(at_most) = args.at_most_for {
        job = job.at_most_for(at_most);
    }
    if let Some(every) = args.every {
        job = job.every(every);
    }
    if let Some(id) = args.occurrence {
        job = job.occurrence(id);
    }
    if let Some(remember) = args.remember_for {
        job = job.remember_for(remember);
    }
    let started = Cell::new(false);
    let forwarded = signals.subscribe();
    let ran = job.run(|lease| {
        started.set(true);
        // With --at-most-for, the command is stopped before the lease
        // ends, a margin before the server lets the lock go (a leased
        // lock's lease counts from its acquire's send, with no margin of
        // its own).
        let stop_by = (!lease.is_renewed()).then(|| {
            let left = lease.remaining();
            Instant::now() + left - margin(args.at_most_for.unwrap_or(left))
        });
        async move {
            let lost = async move { lease.lost().await };
            supervise(args, lost, stop_by, forwarded).await
        }
    });
    let ran = match signals.unless_started(ran, &started).await? {
        Ok(ran) => ran,
        Err(code) => return Ok(code),
    };
    match ran.map_err(|e| Fail::from_lib(e, name))? {
        ferrisson::JobRun::Skipped { holder } => {
            let who = holder.map_or_else(String::new, |h| {
                let label = h.label.as_deref().unwrap_or(&h.owner_id);
                format!(" by {label} (client {})", h.client_id)
            });
            eprintln!("ferrisson: `{name}` is held{who}: the command did not run");
            Ok(ExitCode::from(BUSY))
        }
        ferrisson::JobRun::AlreadyDone {
            occurrence,
            last_done,
        } => {
            let last = match last_done == occurrence {
                true => String::new(),
                false => format!(" (the last done is {last_done})"),
            };
            eprintln!(
                "ferrisson: occurrence {occurrence} of `{name}` was run already{last}: the command did not run"
            );
            Ok(ExitCode::from(BUSY))
        }
        ferrisson::JobRun::Ran(ended) => ended.map(|ended| exit(name, ended)),
        // The command ran to its end under the lock: its status stands,
        // and the user is told that the lock ends with its lease.
        ferrisson::JobRun::Unreleased {
            value: ended,
            error,
        } => {
            eprintln!(
                "ferrisson: the release of `{name}` after the command failed ({error}): the lock ends with its lease"
            );
            ended.map(|ended| exit(name, ended))
        }
        ferrisson::JobRun::Overran(ended) => {
            ended?;
            Ok(exit(name, Ended::Stopped))
        }
    }
}

/// With one permit of a permit-expirable semaphore of `permits`.
async fn run_with_permit(
    target: &Target,
    args: &RunArgs,
    permits: u32,
    signals: &Signals,
) -> Result<ExitCode, Fail> {
    let name = &args.name;
    let lib = |e| Fail::from_lib(e, name);
    let semaphore = target.client.permit_expirable_semaphore(name);
    if !semaphore.try_set_permits(permits).await.map_err(lib)? {
        let total = semaphore.permits().await.map_err(lib)?;
        if total != i64::from(permits) {
            return Err(Fail(format!(
                "`{name}` has {total} permits, not the {permits} of --permits: every runner of a name must give the same number"
            )));
        }
    }
    let lease = args
        .at_most_for
        .unwrap_or(args.lease.unwrap_or(RENEWED_LEASE));
    let forwarded = signals.subscribe();
    let take = async {
        match args.wait() {
            None => semaphore.acquire_with_lease(lease).await.map(Some),
            Some(wait) => semaphore.try_acquire_with_lease(wait, lease).await,
        }
    };
    let never = Cell::new(false);
    let permit = match signals.unless_started(take, &never).await? {
        Ok(taken) => taken.map_err(lib)?,
        Err(code) => return Ok(code),
    };
    let Some(permit) = permit else {
        eprintln!("ferrisson: all {permits} permits of `{name}` are out: the command did not run");
        return Ok(ExitCode::from(BUSY));
    };
    let start = Instant::now();
    let mut permit = permit;
    let renewed = args.at_most_for.is_none();
    if renewed {
        // Renewed by the library's watchdog, to --lease (the client's
        // watchdog timeout), as the lock of a run without --permits is.
        let kept = signals
            .unless_started(keep_alive(&mut permit), &never)
            .await?;
        match kept {
            Ok(Ok(())) => {}
            Ok(Err(err)) => {
                eprintln!("ferrisson: the permit of `{name}` could not be kept ({err}): the command did not run");
                return Ok(ExitCode::from(LOST));
            }
            Err(code) => return Ok(code),
        }
    }
    let lease = permit.lease_handle();
    // Counted from the send of the granted acquire, less the library's
    // drift margin.
    let stop_by = (!renewed).then(|| Instant::now() + lease.remaining());
    let lost = async move { lease.lost().await };
    let ended = supervise(args, lost, stop_by, forwarded).await?;
    match ended {
        Ended::Exited(_) | Ended::NotStarted(..) => {
            // Kept until "at least for" after the start, in whole ms
            // rounded up (the least lease a permit takes is 1 ms).
            let keep = (start + args.at_least_for).saturating_duration_since(Instant::now());
            let keep = Duration::from_millis(keep.as_nanos().div_ceil(1_000_000) as u64);
            let given = match keep.is_zero() {
                true => semaphore.release(permit).await,
                false => {
                    let kept = semaphore.update_lease(&mut permit, Some(keep)).await;
                    permit.leak();
                    kept
                }
            };
            match given {
                Ok(()) => Ok(exit(name, ended)),
                Err(ferrisson::Error::PermitNotOut { .. }) => Ok(exit(name, Ended::Stopped)),
                Err(err) => {
                    eprintln!("ferrisson: the permit of `{name}` could not be given back ({err}); it expires with its lease");
                    Ok(exit(name, ended))
                }
            }
        }
        Ended::Stopped => {
            // Its lease ran out, or is about to: it is let go with it.
            permit.leak();
            Ok(exit(name, ended))
        }
    }
}

/// Hands `permit` to the watchdog, trying again after a failed call
/// while its lease lasts.
async fn keep_alive(permit: &mut ferrisson::Permit) -> Result<(), ferrisson::Error> {
    loop {
        match permit.keep_alive().await {
            Err(ferrisson::Error::Redis(_)) if !permit.is_expired() => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            kept => return kept,
        }
    }
}

/// How long before the server the runner counts a leased lock's lease
/// as ended: a tenth of it, at most a second, as the library's watchdog
/// does. (A permit's lease already counts so.)
fn margin(lease: Duration) -> Duration {
    (lease / 10).min(Duration::from_secs(1))
}

/// The runner's exit status for `ended`: the command's own (128 + the
/// signal's number when a signal ended it, as shells say), [`LOST`], or
/// as shells say of a command that could not start: 127 when it was not
/// found, 126 when it could not be run.
fn exit(name: &str, ended: Ended) -> ExitCode {
    match ended {
        Ended::Exited(status) => {
            let code = status
                .code()
                .or_else(|| status.signal().map(|signal| 128 + signal))
                .unwrap_or(1);
            ExitCode::from(u8::try_from(code).unwrap_or(1))
        }
        Ended::Stopped => {
            eprintln!("ferrisson: the lease of `{name}` was lost or ran out while the command ran: it was stopped");
            ExitCode::from(LOST)
        }
        Ended::NotStarted(program, err) => {
            eprintln!("ferrisson: cannot run `{program}`: {err}");
            match err.kind() {
                std::io::ErrorKind::NotFound => ExitCode::from(127),
                _ => ExitCode::from(126),
            }
        }
    }
}

/// The host's name, the default label; `ferrisson` when it has none.
fn host_name() -> String {
    nix::unistd::gethostname()
        .ok()
        .and_then(|name| name.into_string().ok())
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| "ferrisson".to_owned())
}

/// The signals the runner passes on to its command: SIGINT, SIGTERM and
/// SIGHUP, handled from the start, so that none ends the runner before
/// its command (and its lock) are dealt with.
struct Signals {
    sender: broadcast::Sender<Signal>,
}

impl Signals {
    fn listen() -> Result<Signals, Fail> {
        let (sender, _) = broadcast::channel(16);
        for (kind, signal) in [
            (SignalKind::interrupt(), Signal::SIGINT),
            (SignalKind::terminate(), Signal::SIGTERM),
            (SignalKind::hangup(), Signal::SIGHUP),
        ] {
            let mut stream = tokio::signal::unix::signal(kind)
                .map_err(|e| Fail(format!("cannot handle {signal}: {e}")))?;
            let sender = sender.clone();
            tokio::spawn(async move {
                while stream.recv().await.is_some() {
                    let _ = sender.send(signal);
                }
            });
        }
        Ok(Signals { sender })
    }

    fn subscribe(&self) -> broadcast::Receiver<Signal> {
        self.sender.subscribe()
    }

    /// Runs `work` until it ends, or until a signal comes before
    /// `started` is set (while the runner still waits for the lock):
    /// then `work` is dropped (the library's waits are cancel safe: it
    /// leaves nothing behind) and the runner's exit status is `Err`, 128
    /// + the signal's number.
    async fn unless_started<T>(
        &self,
        work: impl Future<Output = T>,
        started: &Cell<bool>,
    ) -> Result<Result<T, ExitCode>, Fail> {
        let mut signals = self.subscribe();
        tokio::pin!(work);
        loop {
            tokio::select! {
                done = &mut work => return Ok(Ok(done)),
                Ok(signal) = signals.recv(), if !started.get() => {
                    if !started.get() {
                        eprintln!("ferrisson: {signal} while waiting: the command did not run");
                        return Ok(Err(ExitCode::from(128 + signal as u8)));
                    }
                }
            }
        }
    }
}
