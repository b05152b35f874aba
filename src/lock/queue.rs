//! The fair lock's queue: leaving it when a wait ends without the lock,
//! and the waits of each owner in progress.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::LockCore;
use crate::engine::finish::{runtime, Finish};
use crate::engine::keys;
use crate::engine::object::Object;
use crate::engine::request::{self, Resend};
use crate::engine::scripts::{FAIR_LEAVE, UNLOCK_MESSAGE};
use crate::engine::watchdog::HoldKey;
use crate::error::is_connection_failure;

/// Whether an acquire's attempts join a fair lock's queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Queue {
    /// Not a fair lock, or one attempt alone: it does not queue.
    No,
    /// It queues; its entry lasts `waiter_ms` past each attempt (the fair
    /// lock's waiter timeout).
    Joins { waiter_ms: u64 },
}

impl Queue {
    /// The waiter timeout as the fair acquire script takes it (0 when the
    /// attempt does not queue, which the script is told too).
    pub(super) fn waiter_ms(self) -> u64 {
        match self {
            Queue::No => 0,
            Queue::Joins { waiter_ms } => waiter_ms,
        }
    }
}

/// Takes a fair lock's waiter out of the queue when its wait ends without
/// the lock: at once with [`QueueExit::leave`], or in the background when
/// dropped armed (an error, or the caller's future dropped).
pub(super) struct QueueExit<'a> {
    pub(super) lock: &'a LockCore,
    pub(super) field: Arc<str>,
    pub(super) waiter_ms: u64,
    pub(super) armed: bool,
    /// The wait in progress, ended before the leave (which another wait of
    /// the same owner in progress would skip).
    pub(super) wait: Option<OwnerUse>,
}

impl QueueExit<'_> {
    pub(super) async fn leave(&mut self) {
        self.wait = None;
        if std::mem::take(&mut self.armed) {
            let key = HoldKey::new(
                Arc::clone(self.lock.obj.shared_name()),
                Arc::clone(&self.field),
            );
            let leave = FairOwners::use_of(&self.lock.obj, &key);
            let send = leave_queue(leave, self.waiter_ms);
            // Runs to its end even if the caller is dropped meanwhile.
            match runtime() {
                Ok(runtime) => Finish::detached(runtime, send).await,
                Err(_) => send.await,
            }
        }
    }
}

impl Drop for QueueExit<'_> {
    fn drop(&mut self) {
        self.wait = None;
        if !self.armed {
            return;
        }
        let Ok(runtime) = runtime() else {
            // No runtime: the entry counts as dead after the waiter timeout.
            return;
        };
        let key = HoldKey::new(
            Arc::clone(self.lock.obj.shared_name()),
            Arc::clone(&self.field),
        );
        let leave = Arc::new(FairOwners::use_of(&self.lock.obj, &key));
        let waiter_ms = self.waiter_ms;
        // Finished even when the runtime shuts down first (see
        // `spawn_to_end`): a program that returns normally leaves no queue
        // entry. Leaving twice is harmless.
        leave.lock().spawn_to_end(&runtime, move |lock| {
            leave_queue_on(Arc::clone(&leave), lock, waiter_ms)
        });
    }
}

/// The fair-lock waits of each owner in progress, by lock name and owner
/// field. An owner has one queue entry, shared by its waits: a leave (at
/// the end of a wait, resent after a failed connection, or sent by an
/// abandoned attempt once its reply is in) is sent only while none of that
/// owner's waits is in progress, so a late leave cannot take out the entry
/// of a newer wait. An entry lives while it is used ([`OwnerUse`]).
/// Process-wide: an owner's field names its client's id.
#[derive(Default)]
pub(crate) struct FairOwners(crate::engine::watchdog::HoldMap<Arc<FairOwner>>);

static FAIR_OWNERS: std::sync::LazyLock<FairOwners> = std::sync::LazyLock::new(FairOwners::default);

pub(crate) struct FairOwner {
    /// The owner's waits in progress.
    waits: std::sync::atomic::AtomicUsize,
    /// Held across each leave's send: a wait that begins waits for the
    /// send in flight, and the sends after it see the wait.
    sending: tokio::sync::Mutex<()>,
}

/// One use of an owner's entry: a wait in progress (`wait`), or a leave
/// still to be sent. The last use removes the entry.
pub(super) struct OwnerUse {
    /// The lock of the queue.
    lock: Object,
    key: HoldKey,
    owner: Arc<FairOwner>,
    wait: bool,
}

impl FairOwners {
    pub(super) fn use_of(lock: &Object, key: &HoldKey) -> OwnerUse {
        let owner = FAIR_OWNERS
            .0
            .entry(key.clone())
            .or_insert_with(|| {
                Arc::new(FairOwner {
                    waits: std::sync::atomic::AtomicUsize::new(0),
                    sending: tokio::sync::Mutex::new(()),
                })
            })
            .clone();
        OwnerUse {
            lock: lock.clone(),
            key: key.clone(),
            owner,
            wait: false,
        }
    }

    /// Begins a wait of `key`'s owner, once a leave's send in flight is
    /// over. Cancel safe: dropped, the wait is over.
    pub(super) async fn begin_wait(lock: &Object, key: &HoldKey) -> OwnerUse {
        let mut wait = FairOwners::use_of(lock, key);
        wait.owner.waits.fetch_add(1, Ordering::AcqRel);
        wait.wait = true;
        drop(wait.owner.sending.lock().await);
        wait
    }
}

impl Drop for OwnerUse {
    fn drop(&mut self) {
        if self.wait {
            self.owner.waits.fetch_sub(1, Ordering::AcqRel);
        }
        // Every other use clones the entry through the map, under the
        // shard's lock: a count of two (the map's and this one) is final.
        FAIR_OWNERS.0.remove_if(&self.key, |_, owner| {
            Arc::ptr_eq(owner, &self.owner) && Arc::strong_count(owner) == 2
        });
    }
}

impl std::fmt::Debug for FairOwners {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FairOwners")
            .field("owners", &self.0.len())
            .finish()
    }
}

impl OwnerUse {
    /// Sends a leave unless a wait of the owner is in progress: `None`
    /// then (that wait leaves when it ends).
    async fn send_leave(&self, waiter_ms: u64) -> Option<redis::RedisResult<()>> {
        self.send_leave_on(&self.lock(), waiter_ms).await
    }

    /// The lock, its calls on the client's connection.
    fn lock(&self) -> Object {
        self.lock.clone()
    }

    /// [`OwnerUse::send_leave`] on `lock` (bound to the connection to send
    /// on).
    async fn send_leave_on(&self, lock: &Object, waiter_ms: u64) -> Option<redis::RedisResult<()>> {
        let _sending = self.owner.sending.lock().await;
        if self.owner.waits.load(Ordering::Acquire) > 0 {
            return None;
        }
        Some(send_leave(lock, &self.key.field, waiter_ms).await)
    }
}

/// Removes the owner of `leave` from the fair lock's queue, unless one of
/// its waits is in progress. A send that meets a failed connection is
/// resent in the background until it gets through (for up to the waiter
/// timeout); other failures are logged (the entry then counts as dead
/// after the waiter timeout).
pub(super) async fn leave_queue(leave: OwnerUse, waiter_ms: u64) {
    let lock = leave.lock();
    leave_queue_on(Arc::new(leave), lock, waiter_ms).await;
}

/// [`leave_queue`], its first send on the connection `lock` is bound to.
async fn leave_queue_on(leave: Arc<OwnerUse>, lock: Object, waiter_ms: u64) {
    let (name, owner) = (Arc::clone(&leave.key.name), Arc::clone(&leave.key.field));
    let failed = match leave.send_leave_on(&lock, waiter_ms).await {
        None | Some(Ok(())) => return,
        Some(Err(err)) if is_connection_failure(&err) => err,
        Some(Err(err)) => {
            tracing::warn!(lock = %name, %owner, error = %err,
                "could not leave the fair lock's queue; the entry is skipped after the waiter timeout");
            return;
        }
    };
    // Leaving is idempotent (a second leave finds nobody to remove): resend
    // it in the background until it gets through, for as long as the entry
    // would hold the line up (the waiter timeout), so that the waiters
    // behind it do not wait for the timeout.
    tracing::debug!(lock = %name, %owner, error = %failed,
        "leaving the fair lock's queue failed; sending it again in the background");
    let Ok(runtime) = runtime() else {
        return;
    };
    runtime.spawn(async move {
        let give_up = Instant::now() + Duration::from_millis(waiter_ms);
        let go_on = |_: &redis::RedisError| Instant::now() < give_up;
        let leave = &leave;
        let left = request::resend(
            Resend::leave_queue().after_a_pause(),
            "leaving the fair lock's queue",
            &name,
            go_on,
            move |_| async move { leave.send_leave(waiter_ms).await.unwrap_or(Ok(())) },
        )
        .await;
        if let Err(err) = left {
            tracing::warn!(lock = %name, %owner, error = %err,
                "could not leave the fair lock's queue; the entry is skipped after the waiter timeout");
        }
    });
}

/// One send of the fair lock's leave script.
async fn send_leave(lock: &Object, field: &str, waiter_ms: u64) -> redis::RedisResult<()> {
    let name = lock.name();
    let mut conn = lock.conn();
    FAIR_LEAVE
        .key(keys::fair_queue(name))
        .key(keys::fair_timeouts(name))
        .key(name)
        .key(keys::lock_channel(name))
        .arg(field)
        .arg(waiter_ms)
        .arg(UNLOCK_MESSAGE)
        .arg(lock.publish())
        .invoke_async::<i64>(&mut conn)
        .await
        .map(drop)
}
