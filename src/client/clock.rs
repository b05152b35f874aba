//! The server's clock, as this client knows it: the deadline an acquire
//! script checks is written in it.
//!
//! An acquire whose reply times out may still wait in a socket of a server
//! that does not answer (frozen, overloaded, cut off). Its caller has given
//! up, and its program may have exited; whatever the server grants it when
//! it runs is owned by nobody. So each send of an acquire carries the
//! instant its caller gives up on the reply, by the server's clock: a
//! script that runs later takes nothing (see `lua/README.md`).
//!
//! The server's clock is read with `TIME` (on a cluster, from the master
//! of the call's slot), and the reading is kept for [`RESAMPLE`]. Its
//! error is at most half the round trip of that `TIME`; a deadline is made
//! that much earlier, so that it never falls after the caller gave up.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::conn::Conn;
use super::Client;

/// How long one reading of the server's clock is used: a server whose
/// clock is stepped back, or a failover to a master whose clock is behind,
/// is seen within this (a clock ahead of the reading is seen at once: the
/// scripts then reply late, and the reading is dropped).
pub(crate) const RESAMPLE: Duration = Duration::from_secs(60);

/// One reading of a server's clock.
#[derive(Clone, Copy, Debug)]
struct Reading {
    /// The server's epoch ms at `at`.
    server_ms: u64,
    /// The middle of the `TIME` round trip, by this client's clock.
    at: Instant,
    /// At most how far off `server_ms` is at `at`: half the round trip,
    /// rounded up.
    error_ms: u64,
}

/// The readings of the servers this client sends acquires to: one per
/// cluster slot (of the masters that serve them), one for a single server.
#[derive(Debug, Default)]
pub(super) struct ServerClocks(Mutex<HashMap<u16, Reading, foldhash::fast::RandomState>>);

impl Client {
    /// The deadline of an acquire sent now on a key of `key`'s slot, in
    /// epoch ms by that server's clock: the instant, less the reading's
    /// error, at which this client gives up on the reply (one response
    /// timeout from now). Reads the server's clock first when no fresh
    /// reading is kept: a server that does not answer fails it as a
    /// command would, and then nothing is sent.
    pub(crate) async fn send_deadline(&self, key: &str) -> redis::RedisResult<u64> {
        self.send_deadline_on(&self.inner.conn, key).await
    }

    /// [`Client::send_deadline`], a clock read on `conn` (an object's: work
    /// run again at a runtime's shutdown has a connection of its own).
    pub(crate) async fn send_deadline_on(&self, conn: &Conn, key: &str) -> redis::RedisResult<u64> {
        let slot = self.clock_slot(key);
        let kept = {
            let clocks = self
                .inner
                .clocks
                .0
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            clocks
                .get(&slot)
                .copied()
                .filter(|reading| reading.at.elapsed() < RESAMPLE)
        };
        let reading = match kept {
            Some(reading) => reading,
            None => {
                let reading = read_clock(conn, key).await?;
                let mut clocks = self
                    .inner
                    .clocks
                    .0
                    .lock()
                    .unwrap_or_else(|p| p.into_inner());
                clocks.insert(slot, reading);
                reading
            }
        };
        let since = ms(Instant::now().saturating_duration_since(reading.at));
        Ok(reading
            .server_ms
            .saturating_add(since)
            .saturating_add(ms(self.inner.config.response_timeout))
            .saturating_sub(reading.error_ms))
    }

    /// The clock of the server that serves `key`, read now on `conn`
    /// (never a kept reading): epoch ms, as the scripts read it, so that a
    /// send's deadline is past once this is above it.
    pub(crate) async fn server_ms_on(&self, conn: &Conn, key: &str) -> redis::RedisResult<u64> {
        Ok(read_clock(conn, key).await?.server_ms)
    }

    /// Drops the reading of the clock of the server that serves `key`, so
    /// that the next deadline reads it anew: an acquire ran after its
    /// send's deadline, and the reading may be what was wrong (that
    /// server's clock was stepped forward, or a failover put a master
    /// whose clock is ahead in its place). Kept, it would make every send
    /// late until [`RESAMPLE`] had passed; read again, it costs one round
    /// trip.
    pub(crate) fn forget_clock(&self, key: &str) {
        let slot = self.clock_slot(key);
        self.inner
            .clocks
            .0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&slot);
    }

    /// The slot whose reading serves `key`: its cluster slot, 0 elsewhere.
    fn clock_slot(&self, key: &str) -> u16 {
        if self.inner.conn.is_cluster() {
            crate::engine::keys::slot(key.as_bytes())
        } else {
            0
        }
    }
}

/// Reads, on `conn`, the clock of the server that serves `key`.
async fn read_clock(conn: &Conn, key: &str) -> redis::RedisResult<Reading> {
    let before = Instant::now();
    let time = conn.on_master_of(key, redis::cmd("TIME")).await?;
    let after = Instant::now();
    let (secs, micros): (u64, u64) = redis::from_redis_value(time)?;
    let trip = after.saturating_duration_since(before);
    Ok(Reading {
        server_ms: secs.saturating_mul(1000).saturating_add(micros / 1000),
        at: before + trip / 2,
        // Rounded up, and one more for the server's ms being truncated.
        error_ms: ms(trip / 2).saturating_add(2),
    })
}

/// `d` in whole ms, saturated.
fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
