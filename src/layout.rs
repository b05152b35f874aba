//! Redisson's key and channel names, for the `ferrisson` inspector (the
//! `ferrisson-cli` crate), which reads them and must not spell them a
//! second time. Not part of the API: the layout is described in
//! `lua/README.md`, and this module may change with any release.

pub use crate::engine::keys::{
    campaign_label, election_channel, fair_queue, fair_timeouts, fence, fencing_token, is_count,
    is_lock_hold, job_done, latch_channel, lock_channel, permit_timeouts, rwlock_channel,
    rwlock_timeout_prefix, semaphore_channel, PERMIT_NO_EXPIRY,
};
