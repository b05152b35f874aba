//! Requests that finish even when their caller stops waiting.
//!
//! Once a command is written to Redis it runs whether or not anyone reads
//! the reply. A [`Finish`] wraps such a request: if the future awaiting it is
//! dropped after the request started, the rest of the request is moved to a
//! task on the runtime, and its reply handed to an `orphan` handler (for an
//! acquire: give back the hold it took). A request that was never polled was
//! never sent, and is simply dropped.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::runtime::Handle;

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;
type Orphan<T> = Box<dyn FnOnce(T) -> BoxFuture<()> + Send + 'static>;

/// The runtime of the caller, which a [`Finish`] moves unfinished work to.
pub(crate) fn runtime() -> crate::Result<Handle> {
    Handle::try_current()
        .map_err(|_| crate::Error::invalid("ferrisson must be called from inside a tokio runtime"))
}

pub(crate) struct Finish<T: Send + 'static> {
    request: Option<BoxFuture<T>>,
    started: bool,
    orphan: Option<Orphan<T>>,
    runtime: Handle,
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
        }
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
                Poll::Ready(reply)
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<T: Send + 'static> Drop for Finish<T> {
    fn drop(&mut self) {
        let (Some(request), Some(orphan)) = (self.request.take(), self.orphan.take()) else {
            return;
        };
        if !self.started {
            return;
        }
        self.runtime
            .spawn(async move { orphan(request.await).await });
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
