//! The blocking semaphore.

use std::time::Duration;

use super::{blocking_calls, blocking_object};

blocking_object!(
    /// A semaphore, from [`blocking::Client::semaphore`](super::Client::semaphore):
    /// the blocking face of [`crate::Semaphore`]. Its permits belong to
    /// nobody: any thread, or any process, may release them.
    Semaphore
);

impl Semaphore {
    blocking_calls! { Semaphore;
        /// Sets the number of permits if it was never set; whether this
        /// call set it.
        fn try_set_permits(&self, permits: u32) -> bool;
        /// Sets the number of permits if it was never set, with a TTL on
        /// the key; whether this call set it.
        fn try_set_permits_with_ttl(&self, permits: u32, ttl: Duration) -> bool;
        /// Adds `permits` (removes them when negative) and wakes waiters.
        fn add_permits(&self, permits: i64) -> ();
        /// Gives one permit back and wakes a waiter.
        fn release(&self) -> ();
        /// Gives `permits` back and wakes waiters.
        fn release_many(&self, permits: u32) -> ();
        /// Gives `permits` back if the semaphore exists; whether it did.
        fn release_if_exists(&self, permits: u32) -> bool;
        /// Deletes the semaphore; whether it existed.
        fn delete(&self) -> bool;
        /// Waits until one permit is taken.
        fn acquire(&self) -> ();
        /// Waits until `permits` permits are taken at once.
        fn acquire_many(&self, permits: u32) -> ();
        /// One attempt to take a permit; whether it was taken.
        fn try_acquire(&self) -> bool;
        /// One attempt to take `permits` permits; whether they were taken.
        fn try_acquire_many(&self, permits: u32) -> bool;
        /// Waits at most `wait` for a permit; whether it was taken.
        fn try_acquire_for(&self, wait: Duration) -> bool;
        /// Waits at most `wait` for `permits` permits; whether they were
        /// taken.
        fn try_acquire_many_for(&self, permits: u32, wait: Duration) -> bool;
        /// The permits available now.
        fn available_permits(&self) -> i64;
        /// Takes every available permit; how many it took.
        fn drain_permits(&self) -> i64;
    }
}
