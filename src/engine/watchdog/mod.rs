//! The registry of watchdog-mode holds and the watchdog that renews them.
//!
//! One entry per (lock name, owner) this client holds in watchdog mode
//! counts the local holds; their shared [`LeaseState`] is what the
//! watchdog renews: every third of its TTL after the last renewal Redis
//! confirmed. The TTL is the client's watchdog timeout, or the hold's own
//! watchdog lease (an election's, a job's); the leases of one batch share
//! their TTL. One scheduler task per client renews what
//! falls due. The schedule holds *batches* of leases, not keys: the keys of
//! one renewal call fall due together again, and a new hold joins the
//! batch of holds taken shortly before it, so that keys due within a short
//! window of each other go out together, up to [`RENEW_BATCH`](renew::RENEW_BATCH) keys per
//! script call. A key renewed with its batch is renewed a little early,
//! never late. A renewal touches no map: a released hold is retired in its
//! lease and dropped from its batch when the batch next falls due (or when
//! a batch still taking holds grows). The lease is declared lost when
//! Redis says the owner no longer holds the key, or when renewals could
//! not get through before the lease would have run out.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use dashmap::mapref::entry::Entry;
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::client::conn::Conn;
use crate::client::pubsub::Recheck;
use crate::engine::keys;
use crate::engine::scripts::{RENEW, RENEW_PERMITS, RENEW_READ};
use crate::engine::telemetry;
#[cfg(feature = "metrics")]
use crate::engine::telemetry::Subject;

mod lease;
mod renew;

pub(crate) use lease::{HoldKey, HoldMap, LeaseState};
use renew::renew_chunk;
pub(crate) use renew::{Renew, RenewCall, Renewal};

/// The registry's record of one (lock, owner).
#[derive(Debug)]
struct Held {
    /// Local holds, each with its guard.
    holds: usize,
    /// Their lease, which the schedule renews.
    lease: Arc<LeaseState>,
}

/// Which renewal script call a lease can share: its renewal, on a
/// cluster the key's hash slot (0 elsewhere), and its TTL.
type Group = (Renewal, u16, Duration);

/// Batches of leases by the time they fall due. The leases of one batch
/// are of one [`Group`], so that a batch is renewed as it stands, in calls
/// of up to [`RENEW_BATCH`](renew::RENEW_BATCH) keys, touching each lease once while it is in
/// the cache.
#[derive(Debug, Default)]
struct Schedule {
    /// Keyed by when the batch is due, and a sequence number.
    queue: BTreeMap<(Instant, u64), Vec<Arc<LeaseState>>>,
    /// Per group, the batch new holds join while it is due no later than
    /// they are, and less than the coalescing window earlier.
    open: std::collections::HashMap<Group, (Instant, u64), foldhash::fast::RandomState>,
    next: u64,
    /// When the scheduler wakes up by itself next; `None` while it waits
    /// for work. A batch due later needs no wake-up.
    armed: Option<Instant>,
}

impl Schedule {
    /// Puts `batch` on the schedule at `due`; whether the scheduler must be
    /// woken to see it in time.
    fn insert(&mut self, due: Instant, batch: Vec<Arc<LeaseState>>) -> (u64, bool) {
        let seq = self.next;
        self.next += 1;
        self.queue.insert((due, seq), batch);
        let wake = self.armed.is_none_or(|armed| due < armed);
        if wake {
            self.armed = Some(due);
        }
        (seq, wake)
    }
}

#[derive(Debug)]
struct Shared {
    map: HoldMap<Held>,
    /// Locked after a map entry, never before one.
    schedule: Mutex<Schedule>,
    wake: Arc<Notify>,
    conn: Conn,
    /// The client's watchdog timeout: the horizon of a recheck is counted
    /// from the longest of it and the holds' own TTLs.
    timeout: Duration,
    /// The longest TTL of a hold registered so far.
    longest: Mutex<Duration>,
    /// Set when the scheduler's task ends without the registry being
    /// dropped: its runtime shut down.
    runtime_gone: AtomicBool,
    /// Renew everything now (see [`Recheck`]).
    recheck: Arc<Recheck>,
    /// Whether metrics name the lock (`Config::metric_lock_names`).
    #[cfg_attr(not(feature = "metrics"), allow(dead_code))]
    names: bool,
}

/// The per-client registry of watchdog-mode holds.
#[derive(Debug)]
pub(crate) struct Registry {
    shared: Arc<Shared>,
}

impl Drop for Registry {
    fn drop(&mut self) {
        // The scheduler holds the registry weakly: wake it to let it end.
        self.shared.wake.notify_one();
    }
}

impl Registry {
    /// A registry renewing with `conn` to `timeout`; its scheduler runs on
    /// the current runtime until the registry is dropped.
    pub(crate) fn new(
        conn: Conn,
        timeout: Duration,
        names: bool,
        recheck: Arc<Recheck>,
    ) -> Registry {
        let wake = Arc::new(Notify::new());
        let shared = Arc::new(Shared {
            map: HoldMap::default(),
            schedule: Mutex::new(Schedule::default()),
            wake: Arc::clone(&wake),
            conn,
            timeout,
            longest: Mutex::new(timeout),
            runtime_gone: AtomicBool::new(false),
            recheck,
            names,
        });
        let alive = SchedulerAlive(Arc::downgrade(&shared));
        tokio::spawn(schedule(alive, Arc::downgrade(&shared), wake));
        Registry { shared }
    }

    /// Records one more local hold of `key`, acquired by a request sent at
    /// `sent` that set the key's TTL to `how.ttl`; puts the key on the
    /// renewal schedule when it is the first. `how`: how the lease is
    /// renewed, and to what TTL; `label`: the lock kind's, for a lost
    /// lease in metrics.
    ///
    /// A hold that joins a lease of the owner keeps that lease's TTL: its
    /// acquire is sent with the longer of the two (see
    /// [`Registry::ttl_of`]), so the key stands at least as long as the
    /// lease counts; re-entries, renewals, and releases that leave holds
    /// only ever raise the key's TTL (their scripts keep a longer one), so
    /// one that reaches Redis late cuts no later hold short.
    pub(crate) fn hold(
        &self,
        key: HoldKey,
        sent: Instant,
        how: Renew,
        label: &'static str,
    ) -> Arc<LeaseState> {
        let shared = &self.shared;
        match shared.map.entry(key) {
            Entry::Occupied(mut held) if held.get().lease.is_lost() => {
                // Lost by the clock, not yet forgotten by the watchdog: a
                // new hold starts a new lease (the old one is retired, so
                // the schedule drops it), and the old guards stay lost.
                let old = &held.get().lease;
                old.retire();
                old.mark_lost();
                #[cfg(feature = "metrics")]
                telemetry::lease_lost(Subject {
                    kind: label,
                    name: shared.names.then_some(&*held.key().name),
                });
                let lease = shared.new_lease(held.key().clone(), sent, how, label);
                held.insert(Held {
                    holds: 1,
                    lease: Arc::clone(&lease),
                });
                lease
            }
            Entry::Occupied(mut held) => {
                // The re-entry reset the key's TTL too, to the longer of
                // its own and the lease's (only a re-entry that raced the
                // lease's first hold may have set less: it counts by that).
                let held = held.get_mut();
                held.holds += 1;
                let ttl = held.lease.watchdog_ttl().unwrap_or(how.ttl).min(how.ttl);
                held.lease.extend(sent + ttl - drift_margin(ttl));
                Arc::clone(&held.lease)
            }
            Entry::Vacant(vacant) => {
                let lease = shared.new_lease(vacant.key().clone(), sent, how, label);
                vacant.insert(Held {
                    holds: 1,
                    lease: Arc::clone(&lease),
                });
                lease
            }
        }
    }

    /// Forgets one local hold of `key`; retires the lease with the last,
    /// which takes the key off the schedule. A hold whose lease was already
    /// lost is no longer counted.
    pub(crate) fn release(&self, key: &HoldKey, lease: &Arc<LeaseState>) {
        if let Entry::Occupied(mut held) = self.shared.map.entry(key.clone()) {
            if Arc::ptr_eq(&held.get().lease, lease) {
                held.get_mut().holds -= 1;
                if held.get().holds == 0 {
                    held.remove().lease.retire();
                }
            }
        }
    }

    /// Forgets one local hold of `key`, whichever lease it was counted under
    /// (for a release without a guard); returns that lease.
    pub(crate) fn release_any(&self, key: &HoldKey) -> Option<Arc<LeaseState>> {
        let lease = Arc::clone(&self.shared.map.get(key)?.lease);
        self.release(key, &lease);
        Some(lease)
    }

    /// The TTL the watchdog renews `key` to, if it keeps it alive.
    pub(crate) fn ttl_of(&self, key: &HoldKey) -> Option<Duration> {
        self.shared
            .map
            .get(key)
            .and_then(|held| held.lease.watchdog_ttl())
    }

    /// The lease the watchdog keeps `key` alive by, if it does.
    pub(crate) fn lease_of(&self, key: &HoldKey) -> Option<Arc<LeaseState>> {
        self.shared.map.get(key).map(|held| Arc::clone(&held.lease))
    }

    /// Marks `lease` lost because its hold was found gone (another ended
    /// it): a watchdog hold is forgotten first, as a renewal that found it
    /// gone does.
    pub(crate) fn lose_taken(&self, lease: &Arc<LeaseState>) {
        let reason = "the lock was released, deleted or taken by another (seen on its channel)";
        if lease.watched.is_some() {
            self.shared.lose(lease, reason, Lost::Gone);
        } else if !lease.is_lost() {
            tracing::warn!(%reason, "lease lost");
            lease.mark_lost();
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.shared.map.len()
    }

    /// Whether the runtime the scheduler ran on has shut down: nothing
    /// renews leases any more.
    pub(crate) fn runtime_gone(&self) -> bool {
        self.shared.runtime_gone.load(Ordering::Acquire)
    }
}

/// Lives in the scheduler's task. Dropped with the task (its runtime shut
/// down) while the registry lives, it marks the registry's runtime gone and
/// tells every holder its lease is lost: nothing renews it any more. The
/// keys still stand until their deadlines, so a guard dropped after this
/// (a task of the same runtime, dropped later in its shutdown) still
/// releases its hold.
struct SchedulerAlive(Weak<Shared>);

impl Drop for SchedulerAlive {
    fn drop(&mut self) {
        let Some(shared) = self.0.upgrade() else {
            return;
        };
        shared.runtime_gone.store(true, Ordering::Release);
        let leases: Vec<_> = shared
            .map
            .iter()
            .map(|held| Arc::clone(&held.lease))
            .collect();
        for lease in leases {
            shared.lose(
                &lease,
                "the runtime the client was built on shut down; nothing renews the lease",
                Lost::Unrenewed,
            );
        }
    }
}

impl Shared {
    /// A new lease of `key`, first acquired by a request sent at `sent`,
    /// put on the schedule (the caller holds the map entry).
    fn new_lease(
        &self,
        key: HoldKey,
        sent: Instant,
        how: Renew,
        label: &'static str,
    ) -> Arc<LeaseState> {
        // Counted in whole ms, as Redis gets it.
        let ttl = Duration::from_millis(how.ttl.as_millis() as u64);
        let deadline = sent + ttl - drift_margin(ttl);
        let lease = LeaseState::watched(deadline, key, how, label);
        let due = sent + ttl / 3;
        let group = self.group(&lease);
        {
            let mut longest = self.longest.lock().unwrap_or_else(|e| e.into_inner());
            *longest = (*longest).max(ttl);
        }
        let mut schedule = self.lock_schedule();
        // Join the open batch when it falls due no later than this hold,
        // and not much earlier.
        let window = coalescing_window(ttl);
        if let Some(&open @ (batch_due, _)) = schedule.open.get(&group) {
            if batch_due <= due && due <= batch_due + window {
                if let Some(batch) = schedule.queue.get_mut(&open) {
                    if batch.len() == batch.capacity() {
                        // Before it grows, drop what was released since:
                        // holds taken and released in a burst cost no
                        // memory until the batch falls due.
                        batch.retain(|lease| !lease.is_retired());
                    }
                    batch.push(Arc::clone(&lease));
                    return lease;
                }
            }
        }
        let (seq, wake) = schedule.insert(due, vec![Arc::clone(&lease)]);
        schedule.open.insert(group, (due, seq));
        drop(schedule);
        if wake {
            self.wake.notify_one();
        }
        lease
    }

    fn lock_schedule(&self) -> std::sync::MutexGuard<'_, Schedule> {
        // Nothing panics while holding it; a poisoned one is still sound.
        self.schedule.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The renewal calls `lease` can share.
    fn group(&self, lease: &LeaseState) -> Group {
        let Some(watched) = lease.watched.as_ref() else {
            return (Renewal::Hash, 0, self.timeout);
        };
        let slot = if self.conn.is_cluster() {
            keys::slot(watched.key.name.as_bytes())
        } else {
            0
        };
        (watched.renewal, slot, Duration::from_millis(watched.ttl_ms))
    }

    /// Sends the renewals of `batches`, one task per call.
    fn renew_batches(self: &Arc<Self>, batches: Vec<Vec<Arc<LeaseState>>>) {
        for batch in batches {
            // A batch is of one renewal and one TTL.
            let how = batch
                .first()
                .and_then(|lease| lease.watched.as_ref())
                .map_or(
                    Renew {
                        renewal: Renewal::Hash,
                        ttl: self.timeout,
                    },
                    |w| Renew {
                        renewal: w.renewal,
                        ttl: Duration::from_millis(w.ttl_ms),
                    },
                );
            let renewal = how.renewal;
            let per_call = renewal.holds_per_call();
            let mut rest = batch.into_iter();
            loop {
                let chunk: Vec<_> = rest.by_ref().take(per_call).collect();
                if chunk.is_empty() {
                    break;
                }
                tokio::spawn(renew_chunk(Arc::clone(self), chunk, how));
            }
        }
    }

    /// Takes the batches due by `horizon` off the schedule; with
    /// `coalesce`, also those due within their TTL's coalescing window
    /// after it.
    fn take_due(&self, horizon: Instant, coalesce: bool) -> Vec<Vec<Arc<LeaseState>>> {
        let mut due = Vec::new();
        let mut guard = self.lock_schedule();
        let schedule = &mut *guard;
        // No window is longer than a second.
        let reach = if coalesce {
            horizon + coalescing_window(Duration::MAX)
        } else {
            horizon
        };
        let keys: Vec<(Instant, u64)> = schedule
            .queue
            .range(..=(reach, u64::MAX))
            .filter(|(&(at, _), batch)| {
                let ttl = batch
                    .first()
                    .and_then(|lease| lease.watchdog_ttl())
                    .unwrap_or(self.timeout);
                let window = if coalesce {
                    coalescing_window(ttl)
                } else {
                    Duration::ZERO
                };
                at <= horizon + window
            })
            .map(|(key, _)| *key)
            .collect();
        for key in keys {
            let Some(batch) = schedule.queue.remove(&key) else {
                continue;
            };
            // Closed to new holds now. (A stale entry would do no harm:
            // the next hold finds no batch under it and opens one.)
            if let Some(first) = batch.first() {
                let group = self.group(first);
                if schedule.open.get(&group) == Some(&key) {
                    schedule.open.remove(&group);
                }
            }
            due.push(batch);
        }
        due
    }

    /// The leases of `batch` still to renew (not retired, not run out by
    /// `now`: those are declared lost).
    fn live(&self, batch: Vec<Arc<LeaseState>>, now: Instant) -> Vec<Arc<LeaseState>> {
        let mut live = Vec::with_capacity(batch.len());
        for lease in batch {
            if lease.is_retired() {
                continue;
            }
            if now >= lease.deadline() {
                self.lose(
                    &lease,
                    "renewals did not get through before the lease ran out",
                    Lost::Gone,
                );
                continue;
            }
            live.push(lease);
        }
        live
    }

    /// Puts the leases of a renewal that came back on the schedule again
    /// as one batch, due at `next`; those retired meanwhile are left out.
    fn reschedule(&self, mut batch: Vec<Arc<LeaseState>>, next: Instant) {
        batch.retain(|lease| !lease.is_retired());
        if batch.is_empty() {
            return;
        }
        let (_, wake) = self.lock_schedule().insert(next, batch);
        if wake {
            self.wake.notify_one();
        }
    }

    /// Forgets the hold of `lease` and tells its holders that it is lost;
    /// nothing when the registry no longer counts it.
    fn lose(&self, lease: &Arc<LeaseState>, reason: &str, how: Lost) {
        let Some(watched) = lease.watched.as_ref() else {
            return;
        };
        let key = &watched.key;
        // Forget the key before telling the holders, so that what they do
        // next (a new acquire, a look at the registry) sees it gone.
        if self
            .map
            .remove_if(key, |_, held| Arc::ptr_eq(&held.lease, lease))
            .is_some()
        {
            lease.retire();
            match how {
                Lost::Gone => {
                    tracing::warn!(lock = %key.name, owner = %key.field, %reason, "lease lost");
                    #[cfg(feature = "metrics")]
                    telemetry::lease_lost(Subject {
                        kind: watched.kind,
                        name: self.names.then_some(&*key.name),
                    });
                    lease.mark_lost();
                }
                // Its guard, dropped in the same shutdown, releases it.
                Lost::Unrenewed => {
                    tracing::debug!(lock = %key.name, owner = %key.field, %reason, "lease no longer renewed");
                    lease.mark_unrenewed();
                }
            }
        }
    }
}

/// Why the watchdog gives a lease up.
#[derive(Debug, Clone, Copy)]
enum Lost {
    /// The key is gone, or may be: its holder must stop.
    Gone,
    /// Nothing renews it any more; the key stands until the lease's
    /// deadline.
    Unrenewed,
}

/// How much earlier than the server the client gives a lease up: covers
/// the time a renewal's request spends before Redis runs it, and clock rate
/// differences.
pub(crate) fn drift_margin(timeout: Duration) -> Duration {
    (timeout / 10).min(Duration::from_secs(1))
}

fn retry_interval(timeout: Duration) -> Duration {
    (timeout / 10).clamp(Duration::from_millis(5), Duration::from_secs(1))
}

/// How soon a renewal that found no connection is sent again: at most
/// [`RECONNECT_RETRY`], sooner for a short timeout.
fn reconnect_retry(timeout: Duration) -> Duration {
    retry_interval(timeout).min(RECONNECT_RETRY)
}

/// The pause before a renewal that found the connection lost or refused
/// is sent again (see [`reconnect_retry`]). Documented as the bound of a
/// holder's news of an empty restart: `Leadership::lost`, docs/faults.md.
const RECONNECT_RETRY: Duration = Duration::from_millis(20);

/// Whether a renewal's `err` says the connection is lost or was refused
/// (rather than that Redis is slow to answer, or refused the call).
fn lost_connection(err: &redis::RedisError) -> bool {
    !err.is_timeout()
        && (err.is_io_error()
            || err.is_connection_dropped()
            || err.is_connection_refusal()
            || crate::error::is_cut_reply(err))
}

/// How far ahead of its time a key may be renewed with an earlier one: a
/// new hold joins a batch due up to this much before it, and the
/// scheduler takes batches due up to this much ahead, so a key is renewed
/// at most twice this early (never late).
fn coalescing_window(timeout: Duration) -> Duration {
    (timeout / 30).min(Duration::from_secs(1))
}

/// The client's scheduler: sleeps until the first batch falls due, then
/// sends the renewals of every key due within the coalescing window.
///
/// `_alive` is dropped with the task: as an argument it is in the task's
/// state from its spawn, so a task its runtime never polled reports too.
async fn schedule(_alive: SchedulerAlive, shared: Weak<Shared>, wake: Arc<Notify>) {
    loop {
        let Some(this) = shared.upgrade() else {
            return;
        };
        let now = Instant::now();
        if this.recheck.take() {
            // Every batch, however far off: renewed now, and rescheduled
            // from this renewal on.
            let longest = *this.longest.lock().unwrap_or_else(|e| e.into_inner());
            let horizon = now + 4 * longest;
            this.renew_batches(this.take_due(horizon, false));
        }
        let first = {
            let mut schedule = this.lock_schedule();
            let first = schedule.queue.first_key_value().map(|(due, _)| due.0);
            schedule.armed = first;
            first
        };
        match first {
            Some(due) if due <= now => {
                this.renew_batches(this.take_due(now, true));
            }
            Some(due) => {
                let recheck = Arc::clone(&this.recheck);
                drop(this);
                tokio::select! {
                    _ = tokio::time::sleep_until(due) => {}
                    _ = wake.notified() => {}
                    _ = recheck.notified() => {}
                }
            }
            None => {
                let recheck = Arc::clone(&this.recheck);
                drop(this);
                tokio::select! {
                    _ = wake.notified() => {}
                    _ = recheck.notified() => {}
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::lease::{instant_from_origin, nanos_from_origin, origin};
    use super::*;

    #[test]
    fn deadlines_on_either_side_of_the_origin_are_kept() {
        let origin = origin();
        for offset in [0, 1, 999, 1_000_000_007, 3_600_000_000_000u64] {
            let offset = Duration::from_nanos(offset);
            let after = origin + offset;
            assert_eq!(instant_from_origin(nanos_from_origin(after)), after);
            if let Some(before) = origin.checked_sub(offset) {
                assert_eq!(instant_from_origin(nanos_from_origin(before)), before);
            }
        }
        // A lease whose deadline came before the origin has run out.
        if let Some(past) = origin.checked_sub(Duration::from_secs(1)) {
            assert!(LeaseState::leased(past).is_lost());
        }
        assert!(!LeaseState::leased(Instant::now() + Duration::from_secs(60)).is_lost());
    }

    #[test]
    fn the_margin_is_small_and_bounded() {
        assert_eq!(
            drift_margin(Duration::from_secs(30)),
            Duration::from_secs(1)
        );
        assert_eq!(
            drift_margin(Duration::from_secs(3)),
            Duration::from_millis(300)
        );
        assert_eq!(
            retry_interval(Duration::from_millis(30)),
            Duration::from_millis(5)
        );
    }
}
