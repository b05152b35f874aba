#![doc = include_str!("../README.md")]

mod backoff;
mod client;
#[cfg(feature = "cluster")]
mod cluster;
pub mod config;
mod conn;
mod distributed;
mod error;
mod finish;
mod guard;
mod keys;
mod lock;
mod pubsub;
mod rwlock;
mod scripts;
#[cfg(feature = "sentinel")]
mod sentinel;
mod sweeper;
mod watchdog;

pub use backoff::Backoff;
pub use client::{Client, ClientBuilder};
pub use config::Config;
pub use distributed::DistributedLock;
pub use error::{Error, Result};
pub use guard::LockGuard;
pub use lock::{Lock, DEFAULT_FAIR_WAITER_TIMEOUT, MAX_NAME_LEN};
pub use rwlock::ReadWriteLock;
