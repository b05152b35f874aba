//! Locks over other locks: the multi-lock (every lock of a set, on one
//! Redis or several) and RedLock (a majority of independent masters).

pub(crate) mod multilock;
pub(crate) mod redlock;
