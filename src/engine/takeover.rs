//! Telling a holder at once that someone else ended its hold.
//!
//! The watchdog finds a force-unlocked or deposed hold at its next renewal,
//! up to a third of its timeout later; a leased hold is not checked at
//! all. But whoever ends a hold from outside publishes on the lock's
//! channel (`force_unlock.lua`, a deposition, every release), so while a
//! holder awaits the loss of its hold, the hold's lock channel is listened
//! to, and every message there (or a lost pub/sub connection) makes the
//! holder look whether its owner field is still in the lock's hash. When it
//! is not, the lease is lost, and the holder is told within a round trip
//! of the message. A subscribe or a look that a lost connection (or a
//! failover) fails is tried again after a pause (a look at once when a
//! message comes).
//!
//! Nothing is listened to until a holder awaits the loss (a guard's
//! `lease_lost`, a [`Lease`](crate::Lease)'s or a leadership's `lost`), so a lock taken and
//! released costs nothing more; the listening ends with the hold.

use std::sync::{Arc, Mutex};

use tokio::task::AbortHandle;

use crate::engine::backoff::{Failures, RESEND};
use crate::engine::watchdog::{HoldKey, LeaseState};
use crate::error::may_get_through;
use crate::Client;

/// A hold's lease as it stands now: `extend` and `keep_alive` replace a
/// guard's lease, and a release ends the hold.
pub(crate) trait HeldLease: Send + Sync + std::fmt::Debug {
    /// The hold's lease now.
    fn state(&self) -> Arc<LeaseState>;
    /// Whether the hold ended (released): nobody listens any more.
    fn ended(&self) -> bool;
}

/// The listening for one hold's end by another: started once, by the first
/// caller that awaits the hold's loss, and stopped when the hold ends.
#[derive(Debug)]
pub(crate) struct Takeover {
    state: Mutex<State>,
}

#[derive(Debug)]
enum State {
    /// Not started: what starting needs.
    Idle(Watch),
    Listening(AbortHandle),
    Stopped,
}

#[derive(Debug)]
struct Watch {
    client: Client,
    channel: String,
    key: HoldKey,
    lease: Arc<dyn HeldLease>,
}

impl Takeover {
    /// The listening for the end of the hold `key`, whose lease is `lease`,
    /// by a message on `channel`. Nothing is sent until [`Takeover::start`].
    pub(crate) fn new(
        client: Client,
        channel: String,
        key: HoldKey,
        lease: Arc<dyn HeldLease>,
    ) -> Takeover {
        Takeover {
            state: Mutex::new(State::Idle(Watch {
                client,
                channel,
                key,
                lease,
            })),
        }
    }

    /// Starts listening on the current runtime, the first time only; never
    /// after [`Takeover::stop`].
    pub(crate) fn start(&self) {
        let mut state = self.lock();
        if !matches!(*state, State::Idle(_)) {
            return;
        }
        let State::Idle(watch) = std::mem::replace(&mut *state, State::Stopped) else {
            return;
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        *state = State::Listening(runtime.spawn(listen(watch)).abort_handle());
    }

    /// Stops listening (the hold ended): the subscription is left.
    pub(crate) fn stop(&self) {
        if let State::Listening(task) = std::mem::replace(&mut *self.lock(), State::Stopped) {
            task.abort();
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // Nothing panics while it is held; a poisoned one is still sound.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Drop for Takeover {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Listens on the hold's channel until the hold is found gone (then its
/// lease is lost) or the task is aborted.
async fn listen(watch: Watch) {
    let Watch {
        client,
        channel,
        key,
        lease,
    } = watch;
    // A subscribe or a look that a lost connection (or a failover) fails
    // is not left to the watchdog (a leased hold has none): each is tried
    // again after a pause.
    let mut failures = Failures::on(RESEND);
    let subscription = loop {
        if lease.ended() || lease.state().is_lost() {
            return;
        }
        match client.pubsub().subscribe(channel.clone()).await {
            Ok(subscription) => break subscription,
            Err(ref err @ crate::Error::Redis(ref cause)) if may_get_through(cause) => {
                tracing::debug!(lock = %key.name, error = %err,
                    "cannot listen for the hold's end yet; trying again");
                tokio::time::sleep(failures.pause()).await;
            }
            Err(err) => {
                tracing::debug!(lock = %key.name, error = %err,
                    "cannot listen for the hold's end; the watchdog's renewals tell it");
                return;
            }
        }
    };
    failures.reset();
    loop {
        let changed = subscription.changed();
        tokio::pin!(changed);
        // Registered before the look: a message in between is not missed.
        changed.as_mut().enable();
        if lease.ended() || lease.state().is_lost() {
            return;
        }
        let mut conn = client.conn();
        let held: redis::RedisResult<bool> = redis::cmd("HEXISTS")
            .arg(&*key.name)
            .arg(&*key.field)
            .query_async(&mut conn)
            .await;
        match held {
            Ok(false) => {
                // The lease now: an `extend` may have replaced the one
                // looked at (its renewal then found the hold gone too).
                client.registry().lose_taken(&lease.state());
                return;
            }
            Ok(true) => failures.reset(),
            // A lost connection (or a failover): the hold may have ended
            // meanwhile, with its message sent while the subscription was
            // reconnecting; looked at again after a pause, or at the next
            // message.
            Err(err) if may_get_through(&err) => {
                tracing::debug!(lock = %key.name, error = %err, "could not look at the hold");
                tokio::select! {
                    () = &mut changed => {}
                    () = tokio::time::sleep(failures.pause()) => {}
                }
                continue;
            }
            // A key of another type: the watchdog's renewals decide; the
            // next message looks again.
            Err(err) => {
                tracing::debug!(lock = %key.name, error = %err, "could not look at the hold")
            }
        }
        changed.await;
    }
}
