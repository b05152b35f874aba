#![doc = include_str!("../README.md")]

mod acquire_latch;
mod args;
mod backoff;
mod client;
pub mod config;
mod distributed;
mod error;
mod expirable;
mod finish;
mod keys;
mod latch;
mod lock;
mod multilock;
mod redlock;
mod scripts;
mod semaphore;
mod sweeper;
mod waiting;
mod watchdog;

pub use backoff::Backoff;
pub use client::{Client, ClientBuilder};
pub use config::Config;
pub use config::MAX_NAME_LEN;
pub use distributed::DistributedLock;
pub use error::{Error, Result};
pub use expirable::{Permit, PermitExpirableSemaphore, PermitId};
pub use latch::CountDownLatch;
pub use lock::{
    FairLock, FencedGuard, FencedLock, Lock, LockGuard, ReadLock, ReadWriteLock, SpinLock,
    WriteLock, DEFAULT_FAIR_WAITER_TIMEOUT,
};
pub use multilock::{MultiLock, MultiLockGuard};
pub use redlock::{RedLock, RedLockGuard};
pub use semaphore::Semaphore;
