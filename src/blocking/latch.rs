//! The blocking count-down latch.

use std::time::Duration;

use super::{blocking_calls, blocking_object};

blocking_object!(
    /// A count-down latch, from
    /// [`blocking::Client::count_down_latch`](super::Client::count_down_latch):
    /// the blocking face of [`crate::CountDownLatch`]. A latch that was
    /// never set is open, so set it before anyone waits.
    CountDownLatch
);

impl CountDownLatch {
    blocking_calls! { CountDownLatch;
        /// Sets the count if the latch is not set (or reached zero);
        /// whether this call set it.
        fn try_set_count(&self, count: u64) -> bool;
        /// Takes one off the count; at zero the latch opens for every
        /// waiter in every process. The count left.
        fn count_down(&self) -> u64;
        /// The count now (0 when open).
        fn count(&self) -> u64;
        /// Waits until the latch opens.
        fn wait(&self) -> ();
        /// Waits at most `timeout` for the latch to open; whether it did.
        fn wait_for(&self, timeout: Duration) -> bool;
        /// Deletes the latch, opening it; whether it existed.
        fn delete(&self) -> bool;
    }
}
