//! Give-backs nobody waits on: a hold or permits an acquire took for a
//! caller that never got them (it left, its wait ran out, the reply was
//! lost, the replicas did not acknowledge), and the release of a dropped
//! guard or permit. Each is resent, with backoff, until it gets through or
//! until what it gives back has surely ended on the server (a lock's hold:
//! until its lease has run out by this client's clock, after which the
//! owner may hold the lock anew): a network cut longer than a few sends
//! must not leave a hold behind until it expires, nor forever what never
//! expires.

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

use crate::config::Config;
use crate::engine::request::{self, Resend};
use crate::engine::watchdog::drift_margin;

/// How long a give-back of what never expires (a semaphore's permits, a
/// permit taken without a lease) is resent, at most: an hour. Its latch,
/// which makes the resends safe, lives that long too.
pub(crate) const NEVER_EXPIRES: Duration = Duration::from_secs(3600);

/// By when what lasted `lease` from `from` (seen from this client: the
/// moment Redis ran the command that set it is no later) has surely ended
/// on the server: the lease, one response timeout for the reply that told
/// of it, and a drift margin (a tenth of the lease, at most 1 s).
pub(crate) fn surely_ended(config: &Config, from: Instant, lease: Duration) -> Instant {
    from + lease + config.response_timeout + drift_margin(lease)
}

/// Sends a give-back with `send` (given how long its latch must live, in
/// ms, to cover every resend of it) until it gets a reply, fails for a
/// reason a resend cannot mend, or `until` has passed. Resends of one
/// give-back must be safe: a latch, or an idempotent command.
pub(crate) async fn resend_until<T, F, Fut>(
    config: &Config,
    name: &str,
    until: Instant,
    mut send: F,
) -> redis::RedisResult<T>
where
    F: FnMut(u64) -> Fut,
    Fut: Future<Output = redis::RedisResult<T>>,
{
    let go_on = |_: &redis::RedisError| Instant::now() < until;
    request::send(Resend::until_through(), "a give-back", name, go_on, |_| {
        send(latch_ttl_ms(config, until))
    })
    .await
}

/// How long the latch of a give-back resent until `until` must live when
/// it is written now: past `until`, by one release's resend window (a send
/// still in flight then may run later).
pub(crate) fn latch_ttl_ms(config: &Config, until: Instant) -> u64 {
    let window = config.unlock_latch_ttl_ms();
    let left = until.saturating_duration_since(Instant::now()).as_millis();
    u64::try_from(left)
        .unwrap_or(u64::MAX)
        .saturating_add(window)
}
