//! `watch`: an object's state, then each message on its channels and
//! each change, until Ctrl-C.

use std::future::Future;
use std::process::ExitCode;
use std::task::Poll;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::Serialize;

use crate::conn::{self, Target};
use crate::layout;
use crate::state::{self, Kind, State};
use crate::{emit, Fail};

/// The time as `HH:MM:SS.mmm` (UTC) and as epoch ms.
fn now() -> (String, u64) {
    let ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    let day = ms % 86_400_000;
    let text = format!(
        "{:02}:{:02}:{:02}.{:03}",
        day / 3_600_000,
        day / 60_000 % 60,
        day / 1000 % 60,
        day % 1000
    );
    (text, ms)
}

/// One line of `watch --json`.
#[derive(Serialize)]
struct Event<'a> {
    at_ms: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    channel: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    message: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    state: Option<&'a State>,
}

fn print_event(json: bool, event: Event<'_>) {
    if json {
        match serde_json::to_string(&event) {
            Ok(line) => outln!("{line}"),
            Err(err) => eprintln!("ferrisson: cannot write JSON: {err}"),
        }
        return;
    }
    let (at, _) = now();
    if let (Some(channel), Some(message)) = (event.channel, event.message) {
        outln!("{at}  message {message:?} on {channel}");
    }
    if let Some(state) = event.state {
        match state.kind {
            Some(kind) => outln!("{at}  {}: {}", kind.label(), state.summary()),
            None => outln!("{at}  {}", state.summary()),
        }
    }
}

/// Reads `name`'s state as `kind`, or as what it is now.
/// The state of `name` now: found again each time (or as --kind asked),
/// and, once the key is gone, a free object of the kind `remembered`.
async fn current(
    target: &Target,
    name: &str,
    kind: Option<Kind>,
    remembered: Option<Kind>,
) -> Result<State, Fail> {
    state::inspect_remembering(target, name, kind, remembered).await
}

/// `watch`: the state, then each message on the object's channels and
/// each change of holders, until Ctrl-C.
pub(crate) async fn watch(
    target: &Target,
    name: &str,
    kind: Option<Kind>,
    interval_ms: u64,
    json: bool,
) -> Result<ExitCode, Fail> {
    let mut last = current(target, name, kind, None).await?;
    // Once known, the kind stays: a lock that goes free is a free lock, not
    // a name without a key.
    let mut watched = kind.or(last.kind);
    let mut channels = Vec::new();
    if watched == Some(Kind::LeaderElection) {
        // Campaigns and resignations are announced here; the lock's own
        // channel hears a Redisson holder's release. (Not for what may
        // turn out to be an election: listening here would make a free
        // fenced lock look like one. Each tick's read sees a campaign.)
        channels.push(layout::election_channel(name));
    }
    let channel = match watched {
        Some(Kind::ReadWriteLock) => layout::rwlock_channel(name),
        Some(Kind::Semaphore | Kind::PermitExpirableSemaphore) => layout::semaphore_channel(name),
        Some(Kind::CountDownLatch) => layout::latch_channel(name),
        _ => layout::lock_channel(name),
    };
    let mut patterns = Vec::new();
    if matches!(watched, None | Some(Kind::FairLock)) {
        // A fair lock wakes each waiter on a channel of its own.
        patterns.push(format!(
            "{}:*",
            layout::glob_escape(&layout::lock_channel(name))
        ));
    }
    channels.push(channel);
    let mut messages = conn::follow(target, &channels, &patterns).await?;
    // Ctrl-C ends the watch with success (status 0): it is how a watch is
    // meant to end. The handler is installed when the future is first
    // polled, so that is done here, before the first line: a Ctrl-C from
    // then on finds it, and does not kill the program by the default
    // action (which a shell reports as 130).
    let mut interrupted = std::pin::pin!(tokio::signal::ctrl_c());
    match std::future::poll_fn(|cx| Poll::Ready(interrupted.as_mut().poll(cx))).await {
        Poll::Pending => {}
        Poll::Ready(Ok(())) => return Ok(ExitCode::SUCCESS),
        Poll::Ready(Err(err)) => return Err(Fail(format!("cannot listen for Ctrl-C: {err}"))),
    }
    if !json {
        eprintln!(
            "watching `{name}` on {}; Ctrl-C to stop",
            channels.join(", ")
        );
    }
    print_event(
        json,
        Event {
            at_ms: now().1,
            channel: None,
            message: None,
            state: Some(&last),
        },
    );
    let mut tick = tokio::time::interval(Duration::from_millis(interval_ms.max(10)));
    loop {
        tokio::select! {
            _ = &mut interrupted => return Ok(ExitCode::SUCCESS),
            heard = messages.recv() => {
                let Some((channel, payload)) = heard else {
                    return Err(Fail("lost the subscription".to_owned()));
                };
                let state = current(target, name, kind, watched).await?;
                watched = state::refined(watched, state.kind);
                print_event(json, Event {
                    at_ms: now().1,
                    channel: Some(&channel),
                    message: Some(&payload),
                    state: Some(&state),
                });
                last = state;
            }
            _ = tick.tick() => {
                let state = current(target, name, kind, watched).await?;
                watched = state::refined(watched, state.kind);
                if state.shape() != last.shape() {
                    print_event(json, Event {
                        at_ms: now().1,
                        channel: None,
                        message: None,
                        state: Some(&state),
                    });
                    last = state;
                }
            }
        }
    }
}
