//! What every synchronizer shares, and nothing kind-specific: the handle's
//! door to the client ([`object`]), the retry-safe acquire
//! ([`acquire_latch`]), the wait loop ([`waiting`]), the watchdog
//! ([`watchdog`]), the work that outlives its caller ([`finish`],
//! [`give_back`], [`sweeper`]), retry schedules ([`backoff`]), the scripts,
//! the key names and the figures.
//!
//! The faces (`lock/`, `semaphore/`, the latch, `group/`, `blocking/`) sit
//! over it; nothing here names them.

pub(crate) mod acquire_latch;
pub(crate) mod backoff;
pub(crate) mod finish;
pub(crate) mod give_back;
pub(crate) mod keys;
pub(crate) mod object;
pub(crate) mod scripts;
pub(crate) mod sweeper;
pub(crate) mod telemetry;
pub(crate) mod waiting;
pub(crate) mod watchdog;
