//! Requests that finish even when their caller stops waiting.
//!
//! Once a command is written to Redis it runs whether or not anyone reads
//! the reply. A [`Finish`] wraps such a request: if the future awaiting it is
//! dropped after the request started, the rest of the request is moved to a
//! task on the runtime, and its reply handed to an `orphan` handler (for an
//! acquire: give back the hold it took). A request that was never polled was
//! never sent, and is simply dropped.
//!
//! Work that nobody awaits (the release of a dropped guard, a give-back,
//! leaving a fair queue) goes through [`spawn_to_end`]: if the runtime
//! shuts down before the work ended (the end of `#[tokio::main]`, a
//! dropped `Runtime`, the end of a `#[tokio::test]`), the runtime's
//! shutdown drops the task, and the drop runs the work again, from its
//! start, on a thread of its own, waiting for it up to a bound. The
//! runtime's drop waits for that, so a program that returns normally
//! leaves nothing behind. The work must be safe to run twice: each is
//! idempotent (a release under its request id, a leave of a queue).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::runtime::Handle;

use crate::client::conn::{Conn, Reconnect};

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;
type Orphan<T> = Box<dyn FnOnce(T) -> BoxFuture<()> + Send + 'static>;

/// The runtime of the caller, which a [`Finish`] moves unfinished work to.
pub(crate) fn runtime() -> crate::Result<Handle> {
    Handle::try_current().map_err(|_| crate::Error::NoRuntime)
}

pub(crate) struct Finish<T: Send + 'static> {
    request: Option<BoxFuture<T>>,
    started: bool,
    orphan: Option<Orphan<T>>,
    runtime: Handle,
    /// Runs instead of the rest when the task that finishes the request
    /// is dropped before it ended (see [`Finish::rescued_by`]).
    rescue: Option<Rescue>,
}

impl<T: Send + 'static> Finish<T> {
    pub(crate) fn new<F, O, OF>(runtime: Handle, request: F, orphan: O) -> Self
    where
        F: Future<Output = T> + Send + 'static,
        O: FnOnce(T) -> OF + Send + 'static,
        OF: Future<Output = ()> + Send + 'static,
    {
        Finish {
            request: Some(Box::pin(request)),
            started: false,
            orphan: Some(Box::new(move |reply| Box::pin(orphan(reply)))),
            runtime,
            rescue: None,
        }
    }

    /// With `rescue`, run from its start, on a thread and a connection of
    /// its own, when the request was sent and the task that finishes it
    /// (with its orphan handler) is dropped before it ended: its runtime
    /// shut down. Without one, what the request took then stays until it
    /// expires (a lock's hold), or for good (a semaphore's permits).
    /// `rescue` must be safe to run after any part of the request and its
    /// orphan handler ran, and twice.
    pub(crate) fn rescued_by(mut self, rescue: Rescue) -> Self {
        self.rescue = Some(rescue);
        self
    }

    /// A request with nothing to undo: it only has to run to its end.
    pub(crate) fn detached<F>(runtime: Handle, request: F) -> Self
    where
        F: Future<Output = T> + Send + 'static,
    {
        Finish::new(runtime, request, |_| async {})
    }
}

impl<T: Send + 'static> Future for Finish<T> {
    type Output = T;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<T> {
        let this = &mut *self;
        let Some(request) = this.request.as_mut() else {
            // Polled after completion: a caller bug, but no reason to panic.
            return Poll::Pending;
        };
        this.started = true;
        match request.as_mut().poll(cx) {
            Poll::Ready(reply) => {
                this.request = None;
                if let Some(mut rescue) = this.rescue.take() {
                    rescue.disarm();
                }
                Poll::Ready(reply)
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<T: Send + 'static> Drop for Finish<T> {
    fn drop(&mut self) {
        let mut rescue = self.rescue.take();
        let (Some(request), Some(orphan), true) =
            (self.request.take(), self.orphan.take(), self.started)
        else {
            // Nothing was sent, or the reply was read: nothing to rescue.
            if let Some(rescue) = rescue.as_mut() {
                rescue.disarm();
            }
            return;
        };
        // Dropped unfinished (at a runtime's shutdown, even before its
        // first poll), the task drops `rescue` armed, which runs it.
        self.runtime.spawn(async move {
            orphan(request.await).await;
            if let Some(rescue) = rescue.as_mut() {
                rescue.disarm();
            }
        });
    }
}

impl<T: Send + 'static> std::fmt::Debug for Finish<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Finish")
            .field("pending", &self.request.is_some())
            .field("started", &self.started)
            .finish()
    }
}

/// Work that can be started again from its beginning, on a connection.
pub(crate) type Restartable = Arc<dyn Fn(Conn) -> BoxFuture<()> + Send + Sync + 'static>;

/// Runs `work(conn)` as a task on `runtime`, and makes sure it ends: when
/// the task is dropped before it ended (its runtime shut down, or had
/// already), `work` runs again on a thread of its own, with a runtime and a
/// new connection of its own (one of `client`'s), for at most the client's
/// connection and response timeouts, and the drop waits for it. `work`
/// must be safe to run twice.
pub(crate) fn spawn_to_end<W, F>(conn: Conn, client: crate::Client, runtime: &Handle, work: W)
where
    W: Fn(Conn) -> F + Send + Sync + 'static,
    F: Future<Output = ()> + Send + 'static,
{
    let work: Restartable = Arc::new(move |conn| Box::pin(work(conn)));
    let mut rescue = Rescue::new(client, Arc::clone(&work));
    runtime.spawn(async move {
        work(conn).await;
        rescue.disarm();
    });
}

/// The rescues' shared window (see [`rescue_window`]).
static WINDOW: Mutex<Option<std::time::Instant>> = Mutex::new(None);

/// How long one more rescue may take: the rescues of one shutdown share
/// one window of `bound` from the first (until a second after the window's
/// end; a rescue after that opens a new one), so that a shutdown with many
/// releases left, against a Redis that does not answer, waits `bound`
/// once, not once per release. A rescue that ended in time, Redis
/// answering a `PING` after it, closes the window (see
/// [`rescue_answered`]): Redis answers, and
/// the next rescue has a window of its own (a settle may have to wait out
/// its lost send's deadline, and a runtime that ends soon after another
/// must not find the first one's window used up).
fn rescue_window(bound: Duration) -> Duration {
    let now = std::time::Instant::now();
    let mut window = WINDOW.lock().unwrap_or_else(|p| p.into_inner());
    let ends = match *window {
        Some(ends) if now < ends + Duration::from_secs(1) => ends,
        _ => now + bound,
    };
    *window = Some(ends);
    ends.saturating_duration_since(now).min(bound)
}

/// A rescue ended in time, and Redis answers: the next opens a window of
/// its own (see [`rescue_window`]).
fn rescue_answered() {
    *WINDOW.lock().unwrap_or_else(|p| p.into_inner()) = None;
}

/// Runs its work elsewhere (see [`run_elsewhere`]) when dropped armed.
pub(crate) struct Rescue {
    work: Option<Restartable>,
    /// Whose connection it runs on, opened only when it runs: a call that
    /// ends normally (nearly all) pays an `Arc`'s clone for it.
    client: crate::Client,
}

impl Rescue {
    /// Armed: dropped, it runs `work` elsewhere, on a new connection of
    /// `client`'s.
    pub(crate) fn new(client: crate::Client, work: Restartable) -> Rescue {
        Rescue {
            work: Some(work),
            client,
        }
    }

    /// The work ended: nothing to run on drop.
    fn disarm(&mut self) {
        self.work = None;
    }
}

impl Drop for Rescue {
    fn drop(&mut self) {
        let Some(work) = self.work.take() else {
            return;
        };
        // Dropped by a panic in its task, on a runtime that lives on: run
        // there, not by blocking one of its threads.
        if std::thread::panicking() {
            if let Ok(runtime) = Handle::try_current() {
                let reconnect = self.client.reconnect();
                runtime.spawn(async move {
                    if let Ok(conn) = reconnect.open().await {
                        work(conn).await;
                    }
                });
                return;
            }
        }
        run_elsewhere(self.client.reconnect(), work);
    }
}

/// Runs `work` on a thread of its own, with a runtime and a connection
/// (from `reconnect`) of its own, for at most the rescue window (see
/// [`rescue_window`]), and waits for it: for work left at a runtime's
/// shutdown, whose drop may run inside that runtime's context, where a
/// runtime cannot be entered.
pub(crate) fn run_elsewhere(reconnect: Reconnect, work: Restartable) {
    let config = reconnect.config();
    let bound = rescue_window(config.connection_timeout + config.response_timeout);
    if bound.is_zero() {
        tracing::warn!(
            "work left at a runtime's shutdown was not run: the shutdown's time for it ran out"
        );
        return;
    }
    let spawned = std::thread::Builder::new()
        .name("ferrisson-rescue".into())
        .spawn(move || {
            let runtime = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(runtime) => runtime,
                Err(err) => {
                    tracing::warn!(error = %err, "no runtime to finish work left at a shutdown on");
                    return;
                }
            };
            let run = async {
                // The client's connection may be driven by the runtime
                // that is shutting down: a new one.
                match reconnect.open().await {
                    Ok(conn) => {
                        work(conn.clone()).await;
                        // Whether Redis answers still: the work's own
                        // outcome does not say (it may have given up).
                        let mut conn = conn;
                        redis::cmd("PING")
                            .query_async::<()>(&mut conn)
                            .await
                            .is_ok()
                    }
                    Err(err) => {
                        tracing::warn!(error = %err,
                            "no connection to finish work left at a shutdown on; what it held expires with its lease");
                        false
                    }
                }
            };
            match runtime.block_on(async { tokio::time::timeout(bound, run).await }) {
                Ok(true) => rescue_answered(),
                Ok(false) => {}
                Err(_) => tracing::warn!(
                    "work left at a runtime's shutdown did not end in time; what it held expires with its lease"
                ),
            }
        });
    match spawned {
        Ok(thread) => {
            let _ = thread.join();
        }
        Err(err) => {
            tracing::warn!(error = %err, "no thread to finish work left at a shutdown on");
        }
    }
}
