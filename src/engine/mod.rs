//! What every synchronizer shares, and nothing kind-specific: the handle's
//! door to the client ([`object`]), every retry-safe request and the one
//! loop that resends them ([`request`]: the acquire, its latch and settle,
//! the give-back), the wait loop ([`waiting`]), the watchdog
//! ([`watchdog`]), the work that outlives its caller ([`finish`],
//! [`sweeper`]), retry schedules ([`backoff`]), the scripts,
//! the key names and the figures.
//!
//! The faces (`lock/`, `semaphore/`, the latch, `group/`, `blocking/`) sit
//! over it; nothing here names them.
//!
//! # How it works
//!
//! - Each client has two RESP3 connections (`redis::aio::ConnectionManager`):
//!   one for commands, one for subscriptions. Both reconnect by themselves.
//!   Subscriptions are renewed on reconnect, and waiters are woken to try again.
//! - Scripts are compiled in (`include_str!`) and run with EVALSHA. On
//!   NOSCRIPT (after `SCRIPT FLUSH`, a restart, a failover) a script is
//!   loaded again and that call goes whole, with EVAL.
//! - The watchdog registry is keyed by (lock, owner), and emptied by the last
//!   local release of each key (`Client::held_locks`). Each key is renewed a
//!   third of the timeout after its last confirmed renewal. One scheduler task
//!   per client renews together every key due within a short window (the
//!   timeout / 30, at most 1 s: early, never late), up to 200 keys per script
//!   call (Redisson sends 100; a read hold sends two). Keys taken together
//!   stay together, so 100 000 held locks cost about 500 calls a period, not
//!   100 000. A held lock costs the client about 400 bytes, guard included,
//!   and a million of them renew at the default timeout with about 6% of one
//!   core (figures in `docs/benchmarks.md`).
//! - Waiters on one lock name share one subscription per client
//!   (the `ferrisson_subscriptions` gauge). An unlock message `0` wakes one of them, so
//!   one release costs about one acquire attempt.
//! - Each release's unlock latch is deleted afterwards, as Redisson does, but in
//!   batches: one DEL of up to 512 latches every 5 ms at most, rather than a
//!   third command for every lock and unlock. Acquire latches go in the same
//!   batches, so the retry-safe acquire adds no round trip.
//!
//! What all this costs, against the limit of one round trip to acquire and one
//! to release, is measured by `cargo run --release --example bench`. The
//! figures are in `docs/benchmarks.md` in the repository.

pub(crate) mod backoff;
pub(crate) mod finish;
pub(crate) mod keys;
pub(crate) mod object;
pub(crate) mod request;
pub(crate) mod scripts;
pub(crate) mod sweeper;
pub(crate) mod takeover;
pub(crate) mod telemetry;
pub(crate) mod waiting;
pub(crate) mod watchdog;
