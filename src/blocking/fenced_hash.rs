//! The blocking fenced hash.

use super::{blocking_calls, blocking_object};
use crate::{FencedValue, FencedWrite};

blocking_object!(
    /// A hash whose writes are fenced, from
    /// [`blocking::Client::fenced_hash`](super::Client::fenced_hash): the
    /// blocking face of [`crate::FencedHash`]. Each write carries the
    /// writer's fencing token (a [`Leadership::term`](super::Leadership::term),
    /// a [`FencedGuard::token`](super::FencedGuard::token)), and is refused,
    /// in the same script, when a higher token has written the hash.
    ///
    /// A write is one script call, made whole or not at all. After a
    /// connection error it may or may not have been made; writing again
    /// with the same token is safe.
    FencedHash
);

impl FencedHash {
    blocking_calls! { FencedHash;
        /// Sets `field` to `value` if `token` is at least the highest token
        /// that has written the hash, and raises that to `token`; else
        /// changes nothing and says which token has written.
        fn set(&self, field: &str, value: &str, token: u64) -> FencedWrite;
        /// [`FencedHash::set`] for a value of any bytes, stored as given.
        fn set_bytes(&self, field: &str, value: &[u8], token: u64) -> FencedWrite;
        /// The value of `field` as text, and the highest token that has
        /// written the hash, read together.
        fn get(&self, field: &str) -> FencedValue;
        /// [`FencedHash::get`] for a value of any bytes, as stored.
        fn get_bytes(&self, field: &str) -> FencedValue<Vec<u8>>;
    }
}
