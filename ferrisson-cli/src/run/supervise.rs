//! The command under the lock: started in a process group of its own,
//! signals forwarded, stopped when the lease is lost, and its group
//! emptied before the runner lets the lock go.

use std::ffi::OsString;
use std::future::Future;
use std::io::{PipeWriter, Read, Write};
use std::process::{ExitCode, Stdio};
use std::sync::Arc;
use std::time::Duration;

use nix::errno::Errno;
use nix::sys::signal::{killpg, SigSet, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;
use tokio::process::Command;
use tokio::sync::broadcast;
use tokio::time::Instant;

use super::{Ended, RunArgs, GUARD_COMMAND};
use crate::Fail;

/// How often the runner looks whether its command's process group is
/// empty, once the command itself has ended.
const GROUP_POLL: Duration = Duration::from_millis(10);
/// How long the runner waits for the group to empty after SIGKILL before
/// it says so and goes on: only a process stuck in the kernel, or a
/// zombie whose parent left the group and does not reap it, outlasts
/// SIGKILL that long.
const AFTER_KILL: Duration = Duration::from_secs(5);

/// Starts the command, forwards the signals to it, and stops it: SIGTERM
/// to its group when `lost` resolves, SIGKILL the grace later; with
/// `stop_by` (a lease not renewed), SIGTERM the grace before it and
/// SIGKILL at it, so that it ends before its lease does. Returns once
/// the command's whole process group is gone: what the command leaves in
/// it when it ends gets SIGTERM, and SIGKILL the grace later (or at
/// `stop_by`).
pub(super) async fn supervise(
    args: &RunArgs,
    lost: impl Future<Output = ()>,
    stop_by: Option<Instant>,
    mut signals: broadcast::Receiver<Signal>,
) -> Result<Ended, Fail> {
    // Orphans of the command's group are reparented to the runner, which
    // reaps them: a zombie would keep the group from ever being empty.
    #[cfg(target_os = "linux")]
    let _ = nix::sys::prctl::set_child_subreaper(true);
    let guard = Guard::start();
    let mut child = match spawn(&args.command, guard.as_ref().map(|g| g.pipe.clone())) {
        Ok(child) => child,
        Err(err) => {
            Guard::done(guard).await;
            let program = args.command[0].to_string_lossy().into_owned();
            return Ok(Ended::NotStarted(program, err));
        }
    };
    let group = child
        .id()
        .and_then(|pid| i32::try_from(pid).ok())
        .map(Pid::from_raw)
        .ok_or_else(|| Fail("the command ended before it could be watched".to_owned()))?;
    let waited = |e: std::io::Error| Fail(format!("cannot wait for the command: {e}"));
    // The grace, but at most half the lease: the command runs at least
    // half its "at most for" before it is asked to stop.
    let grace = args.grace.min(args.at_most_for.unwrap_or_default() / 2);
    let term_at = stop_by.map(|end| end.checked_sub(grace).unwrap_or(end));
    tokio::pin!(lost);
    // Once the group had SIGTERM to stop it: when it gets SIGKILL.
    let mut kill_at = None;
    let mut killed = false;
    let status = loop {
        tokio::select! {
            status = child.wait() => break status.map_err(waited)?,
            () = &mut lost, if kill_at.is_none() => {
                eprintln!("ferrisson: the lease of `{}` was lost; stopping the command", args.name);
                let _ = killpg(group, Signal::SIGTERM);
                kill_at = Some(Instant::now() + args.grace);
            }
            () = sleep_until_some(term_at), if kill_at.is_none() => {
                eprintln!("ferrisson: the lease of `{}` (--at-most-for) is running out; stopping the command", args.name);
                let _ = killpg(group, Signal::SIGTERM);
                kill_at = Some(stop_by.unwrap_or_else(Instant::now));
            }
            () = sleep_until_some(kill_at), if !killed => {
                killed = true;
                let _ = killpg(group, Signal::SIGKILL);
            }
            Ok(signal) = signals.recv() => {
                let _ = killpg(group, signal);
            }
        }
    };
    let stopped = kill_at.is_some();
    // The command's own process is reaped: what is left of its group is
    // stopped too before the lock goes. (Its pid, the group's id, is not
    // given to another process while the group has a member.)
    if !group_empty(group) {
        let kill_at = kill_at.unwrap_or_else(|| {
            eprintln!(
                "ferrisson: the command of `{}` ended; stopping what it left running in its process group",
                args.name
            );
            let _ = killpg(group, Signal::SIGTERM);
            let at = Instant::now() + args.grace;
            stop_by.map_or(at, |end| at.min(end))
        });
        empty_group(group, kill_at, killed, &mut signals).await;
    }
    Guard::done(guard).await;
    Ok(match stopped {
        true => Ended::Stopped,
        false => Ended::Exited(status),
    })
}

/// Reaps the members of `group` that were reparented to the runner (its
/// subreaper) and have ended, then says whether the group is empty. Only
/// called once the command's own process is reaped: it is never taken
/// from under tokio's wait.
fn group_empty(group: Pid) -> bool {
    let members = Pid::from_raw(-group.as_raw());
    while let Ok(status) = waitpid(members, Some(WaitPidFlag::WNOHANG)) {
        if status == WaitStatus::StillAlive {
            break;
        }
    }
    killpg(group, None) == Err(Errno::ESRCH)
}

/// Waits until `group` is empty, forwarding the runner's signals to it:
/// SIGKILL at `kill_at` (unless `killed` says it was sent), and at most
/// [`AFTER_KILL`] after that, when the runner says what is left.
async fn empty_group(
    group: Pid,
    kill_at: Instant,
    mut killed: bool,
    signals: &mut broadcast::Receiver<Signal>,
) {
    let mut poll = tokio::time::interval(GROUP_POLL);
    poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = poll.tick() => {
                if group_empty(group) {
                    return;
                }
                if Instant::now() >= kill_at + AFTER_KILL {
                    eprintln!(
                        "ferrisson: processes of the command's group {group} are left {} after SIGKILL (stuck in the kernel, or zombies nobody reaps); going on",
                        humantime::format_duration(AFTER_KILL)
                    );
                    return;
                }
            }
            () = tokio::time::sleep_until(kill_at), if !killed => {
                killed = true;
                let _ = killpg(group, Signal::SIGKILL);
            }
            Ok(signal) = signals.recv() => {
                let _ = killpg(group, signal);
            }
        }
    }
}

/// Sleeps until `at`; for ever without one.
async fn sleep_until_some(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// The runner's guard: a process that sends SIGKILL to the command's
/// process group when the runner dies before the group is gone (see the
/// module's documentation and [`guard`]).
struct Guard {
    /// The write end of the pipe the guard reads: the command writes its
    /// group's id to it before it execs, the runner `D` once the group is
    /// gone. Closed on exec, so the command keeps no copy of it.
    pipe: Arc<PipeWriter>,
    process: tokio::process::Child,
}

impl Guard {
    /// Starts the guard; without one (it could not start, said on
    /// stderr) the command runs unguarded, as it did before guards.
    fn start() -> Option<Guard> {
        let started = (|| {
            let (reader, writer) = std::io::pipe()?;
            // The runner's own binary, also when it was replaced on disk
            // since it started.
            let exe = match cfg!(target_os = "linux") {
                true => std::path::PathBuf::from("/proc/self/exe"),
                false => std::env::current_exe()?,
            };
            let process = Command::new(exe)
                .arg0("ferrisson")
                .arg(GUARD_COMMAND)
                .stdin(reader)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .current_dir("/")
                // Out of the runner's group: a signal to that group (Ctrl-C,
                // `kill -9 -PGID`) leaves the guard alone.
                .process_group(0)
                .spawn()?;
            Ok::<_, std::io::Error>(Guard {
                pipe: Arc::new(writer),
                process,
            })
        })();
        started
            .inspect_err(|err| {
                eprintln!(
                    "ferrisson: cannot start the guard that stops the command if the runner is killed ({err}); running it without"
                );
            })
            .ok()
    }

    /// The command's group is gone: the guard is told so, and exits
    /// without sending anything.
    async fn done(guard: Option<Guard>) {
        let Some(Guard { pipe, mut process }) = guard else {
            return;
        };
        let _ = (&*pipe).write_all(b"D");
        drop(pipe);
        let _ = process.wait().await;
    }
}

/// `ferrisson run-guard`, started by the runner (see [`Guard`]): reads
/// from stdin `G` and the command's group id (4 bytes, native order),
/// then waits. `D` says the group is gone; the end of the pipe without
/// it says the runner died, and the group gets SIGKILL.
pub(crate) fn guard() -> ExitCode {
    // Blocked, not handled: the guard outlives any of them.
    let mut deaf = SigSet::empty();
    for signal in [
        Signal::SIGINT,
        Signal::SIGTERM,
        Signal::SIGHUP,
        Signal::SIGQUIT,
    ] {
        deaf.add(signal);
    }
    let _ = deaf.thread_block();
    let mut pipe = std::io::stdin().lock();
    let mut told = [0; 5];
    if pipe.read_exact(&mut told).is_err() || told[0] != b'G' {
        // The command never started: there is nothing to guard.
        return ExitCode::SUCCESS;
    }
    let group = i32::from_ne_bytes([told[1], told[2], told[3], told[4]]);
    let mut word = [0; 1];
    let done = loop {
        match pipe.read(&mut word) {
            Ok(0) => break false,
            Ok(_) => break word[0] == b'D',
            Err(err) if err.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => break false,
        }
    };
    // Never 0 or 1: the guard's own group, or init's.
    if !done && group > 1 {
        let _ = killpg(Pid::from_raw(group), Signal::SIGKILL);
    }
    ExitCode::SUCCESS
}

/// Starts the command in a process group of its own. On Linux it is also
/// given SIGKILL as its parent-death signal: the kernel sends it when the
/// thread that started it ends, which is the runtime's main thread here
/// (`block_on` polls `run` on it), alive until the runner exits. With a
/// guard, the command writes its group's id (its pid) to the guard's pipe
/// before it execs.
fn spawn(
    command: &[OsString],
    guard: Option<Arc<PipeWriter>>,
) -> std::io::Result<tokio::process::Child> {
    let mut child = Command::new(&command[0]);
    child
        .args(&command[1..])
        .process_group(0)
        .kill_on_drop(true);
    let runner = nix::unistd::getpid();
    #[allow(unsafe_code)]
    // SAFETY: the hook runs in the forked child before exec; it only
    // makes system calls (prctl, getppid, getpid, write), all
    // async-signal-safe, and allocates nothing (an `Errno` converts to an
    // `io::Error` without allocating).
    unsafe {
        child.pre_exec(move || {
            #[cfg(target_os = "linux")]
            nix::sys::prctl::set_pdeathsig(Signal::SIGKILL)?;
            // The runner died before the signal was set: do not start.
            if nix::unistd::getppid() != runner {
                return Err(Errno::ESRCH.into());
            }
            // A dead runner from here on kills this process (above), or
            // has the guard kill its group: the guard knows it first.
            if let Some(pipe) = &guard {
                let mut told = [b'G', 0, 0, 0, 0];
                told[1..].copy_from_slice(&nix::unistd::getpid().as_raw().to_ne_bytes());
                // One write of 5 bytes to a pipe is atomic; a guard that
                // is gone cannot be told.
                let _ = nix::unistd::write(&**pipe, &told);
            }
            Ok(())
        });
    }
    child.spawn()
}
