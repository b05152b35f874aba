//! Helpers for the cancellation tests: every way to acquire a lock as a
//! future to drop, and polling a future a few times before dropping it.

use std::future::Future;
use std::pin::Pin;
use std::task::Poll;
use std::time::Duration;

use ferrisson::{DistributedLock, LockGuard};

/// An acquire of any kind, boxed so that it can be polled and dropped at
/// any point.
pub type Acquire = Pin<Box<dyn Future<Output = ferrisson::Result<Option<LockGuard>>> + Send>>;

/// Acquire call number `op` (0..5: `lock`, `lock_with_lease`, `try_lock`,
/// `try_lock_for`, `try_lock_with_lease`) of `lock`, with a 30 s lease and
/// a wait of `wait_us` microseconds where the call takes them.
pub fn acquire(lock: Box<dyn DistributedLock>, op: u64, wait_us: u64) -> Acquire {
    let lease = Duration::from_secs(30);
    let wait = Duration::from_micros(wait_us);
    match op {
        0 => Box::pin(async move { lock.lock().await.map(Some) }),
        1 => Box::pin(async move { lock.lock_with_lease(lease).await.map(Some) }),
        2 => Box::pin(async move { lock.try_lock().await }),
        3 => Box::pin(async move { lock.try_lock_for(wait).await }),
        _ => Box::pin(async move { lock.try_lock_with_lease(wait, lease).await }),
    }
}

/// Polls `fut` at most `polls` times, yielding between polls: its output if
/// it finished, else `None` (and the caller drops it mid-flight).
pub async fn poll_at_most<F: Future + Unpin>(fut: &mut F, polls: u64) -> Option<F::Output> {
    for _ in 0..polls {
        let step = std::future::poll_fn(|cx| Poll::Ready(Pin::new(&mut *fut).poll(cx))).await;
        if let Poll::Ready(out) = step {
            return Some(out);
        }
        tokio::task::yield_now().await;
    }
    None
}
