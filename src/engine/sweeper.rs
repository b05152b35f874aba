//! Deletes the latches of finished requests, many keys per command.
//!
//! Every release writes a latch key, `redisson_unlock_latch:{name}:<id>`,
//! and every granted acquire one, `ferrisson_acquire_latch:{name}:<id>`,
//! that only matter to resends of that request (see the scripts). Once the
//! reply is in, the client deletes it, as Redisson does for its unlock
//! latch; a latch would also expire by itself after its TTL. Deleting each
//! latch with its own DEL adds a command to every lock and unlock pair, so
//! latches are collected here for a few milliseconds and deleted together.
//!
//! When the runtime shuts down with latches still to delete (a program
//! that returns right after its last release), the sweeping task's drop
//! deletes them on a thread and a connection of its own, as work left to
//! [`spawn_to_end`](crate::engine::finish::spawn_to_end) is finished: a
//! program that returns normally leaves no latch behind.

use std::time::Duration;

use std::sync::Arc;

use crate::client::conn::{Conn, Reconnect};
use crate::engine::finish::run_elsewhere;
use tokio::sync::mpsc;

/// How long the first latch of a batch waits for others.
const WINDOW: Duration = Duration::from_millis(5);
/// Most keys in one DEL.
const MAX_KEYS: usize = 512;

/// The sending half: dropping the last one ends the sweeping task after it
/// deleted what it had.
#[derive(Debug)]
pub(crate) struct Sweeper {
    latches: mpsc::UnboundedSender<String>,
}

impl Sweeper {
    /// Starts the sweeping task on the current runtime; `reconnect`
    /// deletes what is left at the runtime's shutdown.
    pub(crate) fn new(conn: Conn, reconnect: Reconnect) -> Sweeper {
        let (latches, rx) = mpsc::unbounded_channel();
        let pending = Pending {
            latches: rx,
            keys: Vec::with_capacity(MAX_KEYS),
            reconnect,
        };
        tokio::spawn(sweep(pending, conn));
        Sweeper { latches }
    }

    /// Deletes `latch` soon.
    pub(crate) fn discard(&self, latch: String) {
        // The task ends only when this sender is gone.
        let _ = self.latches.send(latch);
    }
}

/// The sweeping task's state: the latches sent, and those taken for the
/// next DEL. Dropped with any left (the runtime shut down), it deletes
/// them elsewhere.
struct Pending {
    latches: mpsc::UnboundedReceiver<String>,
    keys: Vec<String>,
    reconnect: Reconnect,
}

impl Drop for Pending {
    fn drop(&mut self) {
        while let Ok(key) = self.latches.try_recv() {
            self.keys.push(key);
        }
        if self.keys.is_empty() {
            return;
        }
        let keys: Arc<[String]> = std::mem::take(&mut self.keys).into();
        run_elsewhere(
            self.reconnect.clone(),
            Arc::new(move |mut conn| {
                let keys = Arc::clone(&keys);
                Box::pin(async move {
                    // Deleting twice is harmless: a DEL that was on its way
                    // when the runtime stopped may have run already.
                    for chunk in keys.chunks(MAX_KEYS) {
                        let deleted: redis::RedisResult<()> =
                            redis::cmd("DEL").arg(chunk).query_async(&mut conn).await;
                        if let Err(err) = deleted {
                            tracing::debug!(keys = chunk.len(), error = %err,
                                "could not delete latches; they expire by themselves");
                        }
                    }
                })
            }),
        );
    }
}

async fn sweep(mut pending: Pending, mut conn: Conn) {
    let Pending { latches, keys, .. } = &mut pending;
    loop {
        if latches.recv_many(keys, MAX_KEYS).await == 0 {
            return;
        }
        if keys.len() < MAX_KEYS {
            tokio::time::sleep(WINDOW).await;
            while keys.len() < MAX_KEYS {
                match latches.try_recv() {
                    Ok(key) => keys.push(key),
                    Err(_) => break,
                }
            }
        }
        let deleted: redis::RedisResult<()> =
            redis::cmd("DEL").arg(&*keys).query_async(&mut conn).await;
        if let Err(err) = deleted {
            tracing::debug!(keys = keys.len(), error = %err,
                "could not delete latches; they expire by themselves");
        }
        keys.clear();
    }
}
