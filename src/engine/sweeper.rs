//! Deletes the latches of finished requests, many keys per command.
//!
//! Every release writes a latch key, `redisson_unlock_latch:{name}:<id>`,
//! and every granted acquire one, `ferrisson_acquire_latch:{name}:<id>`,
//! that only matter to resends of that request (see the scripts). Once the
//! reply is in, the client deletes it, as Redisson does for its unlock
//! latch; a latch would also expire by itself after its TTL. Deleting each
//! latch with its own DEL adds a command to every lock and unlock pair, so
//! latches are collected here for a few milliseconds and deleted together.

use std::time::Duration;

use crate::client::conn::Conn;
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
    /// Starts the sweeping task on the current runtime.
    pub(crate) fn new(conn: Conn) -> Sweeper {
        let (latches, rx) = mpsc::unbounded_channel();
        tokio::spawn(sweep(rx, conn));
        Sweeper { latches }
    }

    /// Deletes `latch` soon.
    pub(crate) fn discard(&self, latch: String) {
        // The task ends only when this sender is gone.
        let _ = self.latches.send(latch);
    }
}

async fn sweep(mut latches: mpsc::UnboundedReceiver<String>, mut conn: Conn) {
    let mut keys = Vec::with_capacity(MAX_KEYS);
    loop {
        if latches.recv_many(&mut keys, MAX_KEYS).await == 0 {
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
            redis::cmd("DEL").arg(&keys).query_async(&mut conn).await;
        if let Err(err) = deleted {
            tracing::debug!(keys = keys.len(), error = %err,
                "could not delete latches; they expire by themselves");
        }
        keys.clear();
    }
}
