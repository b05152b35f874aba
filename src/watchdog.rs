//! The registry of watchdog-mode holds and the watchdog that renews them.
//!
//! One entry per (lock name, owner) this client holds in watchdog mode; the
//! entry counts local holds and keeps the key's renewal schedule: every
//! third of the watchdog timeout after the last renewal Redis confirmed.
//! One scheduler task per client renews what falls due; keys due within a
//! short window of each other go out together, up to
//! [`RENEW_BATCH`] keys per script call, so that many held locks cost few
//! calls. A key renewed with its batch is renewed a little early, never
//! late. The lease is declared lost when Redis says the owner no longer
//! holds the key, or when renewals could not get through before the lease
//! would have run out.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use crate::client::conn::Conn;
use dashmap::mapref::entry::Entry;
use dashmap::DashMap;
use tokio::sync::{watch, Notify};
use tokio::time::Instant;

use crate::keys;
use crate::scripts::{RENEW, RENEW_READ};

/// (lock name, owner field)
pub(crate) type HoldKey = (Arc<str>, Arc<str>);

/// What a guard knows of its lease.
///
/// Besides the flag the watchdog sets, every lease has a deadline by this
/// process's clock: for a leased hold, the lease counted from when the
/// acquire was sent; for a watchdog hold, the watchdog timeout (less the
/// drift margin) counted from the request of the last renewal Redis
/// confirmed, moved on by each confirmed renewal. So a holder that checks
/// its guard right after a pause (a stopped process, a starved runtime)
/// learns the lease is gone before the watchdog's own task has run.
#[derive(Debug)]
pub(crate) struct LeaseState {
    lost: watch::Sender<bool>,
    /// The origin of `deadline`.
    base: Instant,
    /// Nanoseconds after `base` at which the lease runs out by this
    /// process's clock.
    deadline: AtomicU64,
    /// A watchdog hold: [`LeaseState::wait_lost`] waits for the watchdog's
    /// verdict (given at the same deadline), which forgets the hold before
    /// telling its guards.
    watched: bool,
}

impl LeaseState {
    pub(crate) fn leased(deadline: Instant) -> Arc<Self> {
        LeaseState::new(deadline, false)
    }

    /// A watchdog hold's lease, good until `deadline` unless renewed.
    fn watched(deadline: Instant) -> Arc<Self> {
        LeaseState::new(deadline, true)
    }

    fn new(deadline: Instant, watched: bool) -> Arc<Self> {
        let base = Instant::now();
        Arc::new(LeaseState {
            lost: watch::Sender::new(false),
            base,
            deadline: AtomicU64::new(nanos_after(base, deadline)),
            watched,
        })
    }

    /// Moves the deadline on to `deadline`, never back.
    fn extend(&self, deadline: Instant) {
        self.deadline
            .fetch_max(nanos_after(self.base, deadline), Ordering::Relaxed);
    }

    fn deadline(&self) -> Instant {
        self.base + Duration::from_nanos(self.deadline.load(Ordering::Relaxed))
    }

    pub(crate) fn is_lost(&self) -> bool {
        *self.lost.borrow() || Instant::now() >= self.deadline()
    }

    pub(crate) fn mark_lost(&self) {
        self.lost.send_replace(true);
    }

    pub(crate) async fn wait_lost(&self) {
        let mut rx = self.lost.subscribe();
        let lost = async move {
            if rx.wait_for(|lost| *lost).await.is_err() {
                // The sender lives as long as `self`: not reached.
                std::future::pending::<()>().await;
            }
        };
        if self.watched {
            return lost.await;
        }
        tokio::pin!(lost);
        loop {
            let deadline = self.deadline();
            tokio::select! {
                _ = &mut lost => return,
                _ = tokio::time::sleep_until(deadline) => {
                    // A renewal may have moved the deadline meanwhile.
                    if Instant::now() >= self.deadline() {
                        return;
                    }
                }
            }
        }
    }
}

fn nanos_after(base: Instant, at: Instant) -> u64 {
    u64::try_from(at.saturating_duration_since(base).as_nanos()).unwrap_or(u64::MAX)
}

/// Most keys renewed by one script call, as in Redisson.
pub(crate) const RENEW_BATCH: usize = 100;

#[derive(Debug)]
struct Held {
    /// Tells this entry from an earlier one of the same key.
    id: u64,
    holds: usize,
    lease: Arc<LeaseState>,
    /// The request time of the last renewal (or the acquire) that Redis
    /// confirmed: the server's TTL runs from no earlier than that.
    confirmed: Instant,
    /// When the key is due in the schedule; `None` while its renewal is in
    /// flight.
    due: Option<Instant>,
    /// Read holds of a read-write lock, renewed with their timeout keys.
    read: bool,
}

/// Keys by the time they fall due.
#[derive(Debug, Default)]
struct Schedule {
    queue: BTreeMap<(Instant, u64), HoldKey>,
    /// When the scheduler wakes up by itself next; `None` while it waits
    /// for work. A key due later needs no wake-up.
    armed: Option<Instant>,
}

#[derive(Debug)]
struct Shared {
    map: DashMap<HoldKey, Held>,
    /// Locked after a map entry, never before one.
    schedule: Mutex<Schedule>,
    wake: Arc<Notify>,
    next_id: AtomicU64,
    conn: Conn,
    timeout: Duration,
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
    pub(crate) fn new(conn: Conn, timeout: Duration) -> Registry {
        let wake = Arc::new(Notify::new());
        let shared = Arc::new(Shared {
            map: DashMap::new(),
            schedule: Mutex::new(Schedule::default()),
            wake: Arc::clone(&wake),
            next_id: AtomicU64::new(0),
            conn,
            timeout,
        });
        tokio::spawn(schedule(Arc::downgrade(&shared), wake));
        Registry { shared }
    }

    /// Records one more local hold of `key`, acquired by a request sent at
    /// `sent`; puts the key on the renewal schedule when it is the first.
    /// `read`: the holds are read holds of a read-write lock.
    pub(crate) fn hold(&self, key: HoldKey, sent: Instant, read: bool) -> Arc<LeaseState> {
        let shared = &self.shared;
        match shared.map.entry(key) {
            Entry::Occupied(mut held) if held.get().lease.is_lost() => {
                // Lost by the clock, not yet forgotten by the watchdog: a
                // new hold starts a new entry (the old one's schedule
                // entries no longer match its id), and the old guards stay
                // lost.
                let old = held.get();
                old.lease.mark_lost();
                if let Some(due) = old.due {
                    shared.lock_schedule().queue.remove(&(due, old.id));
                }
                let (lease, entry) = shared.new_entry(held.key().clone(), sent, read);
                held.insert(entry);
                lease
            }
            Entry::Occupied(mut held) => {
                // The re-entry reset the key's TTL too.
                let held = held.get_mut();
                held.holds += 1;
                if sent > held.confirmed {
                    held.confirmed = sent;
                    held.lease
                        .extend(sent + shared.timeout - drift_margin(shared.timeout));
                }
                Arc::clone(&held.lease)
            }
            Entry::Vacant(vacant) => {
                let (lease, entry) = shared.new_entry(vacant.key().clone(), sent, read);
                vacant.insert(entry);
                lease
            }
        }
    }

    /// Forgets one local hold of `key`; takes the key off the schedule with
    /// the last. A hold whose lease was already lost is no longer counted.
    pub(crate) fn release(&self, key: &HoldKey, lease: &Arc<LeaseState>) {
        if let Entry::Occupied(mut held) = self.shared.map.entry(key.clone()) {
            if Arc::ptr_eq(&held.get().lease, lease) {
                held.get_mut().holds -= 1;
                if held.get().holds == 0 {
                    let held = held.remove();
                    if let Some(due) = held.due {
                        self.shared.lock_schedule().queue.remove(&(due, held.id));
                    }
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

    /// Whether the watchdog keeps `key` alive.
    pub(crate) fn contains(&self, key: &HoldKey) -> bool {
        self.shared.map.contains_key(key)
    }

    pub(crate) fn len(&self) -> usize {
        self.shared.map.len()
    }
}

impl Shared {
    /// A new entry for `key`, first acquired by a request sent at `sent`,
    /// put on the schedule (the caller holds the map entry).
    fn new_entry(&self, key: HoldKey, sent: Instant, read: bool) -> (Arc<LeaseState>, Held) {
        let lease = LeaseState::watched(sent + self.timeout - drift_margin(self.timeout));
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let due = sent + self.timeout / 3;
        self.enqueue(due, id, key);
        let held = Held {
            id,
            holds: 1,
            lease: Arc::clone(&lease),
            confirmed: sent,
            due: Some(due),
            read,
        };
        (lease, held)
    }

    fn lock_schedule(&self) -> std::sync::MutexGuard<'_, Schedule> {
        // Nothing panics while holding it; a poisoned one is still sound.
        self.schedule.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Puts `key` on the schedule at `due`, waking the scheduler when it
    /// would otherwise sleep past that.
    fn enqueue(&self, due: Instant, id: u64, key: HoldKey) {
        let mut schedule = self.lock_schedule();
        schedule.queue.insert((due, id), key);
        if schedule.armed.is_none_or(|armed| due < armed) {
            schedule.armed = Some(due);
            drop(schedule);
            self.wake.notify_one();
        }
    }

    /// Takes the keys due by `horizon` off the schedule and into renewal
    /// batches; declares lost those whose lease ran out meanwhile.
    fn take_due(&self, now: Instant, horizon: Instant) -> Vec<Vec<Due>> {
        let mut keys = Vec::new();
        {
            let mut schedule = self.lock_schedule();
            while let Some(entry) = schedule.queue.first_entry() {
                if entry.key().0 > horizon {
                    break;
                }
                let id = entry.key().1;
                keys.push((id, entry.remove()));
            }
        }
        let margin = drift_margin(self.timeout);
        let mut batch = Vec::with_capacity(keys.len());
        for (id, key) in keys {
            let Some(mut held) = self.map.get_mut(&key) else {
                continue;
            };
            if held.id != id {
                continue;
            }
            held.due = None;
            let (deadline, read) = (held.confirmed + self.timeout - margin, held.read);
            drop(held);
            if now >= deadline {
                self.lose(
                    &key,
                    id,
                    "renewals did not get through before the lease ran out",
                );
            } else {
                batch.push(Due {
                    key,
                    id,
                    deadline,
                    read,
                });
            }
        }
        // One script per kind of hold (plain hashes, read holds), and on a
        // cluster per hash slot: a script's keys must share one.
        let cluster = self.conn.is_cluster();
        let mut groups: std::collections::HashMap<(bool, u16), Vec<Due>> =
            std::collections::HashMap::new();
        for due in batch {
            let slot = if cluster {
                keys::slot(due.key.0.as_bytes())
            } else {
                0
            };
            groups.entry((due.read, slot)).or_default().push(due);
        }
        let mut batches = Vec::new();
        for group in groups.into_values() {
            let mut keys = group.into_iter().peekable();
            while keys.peek().is_some() {
                batches.push(keys.by_ref().take(RENEW_BATCH).collect());
            }
        }
        batches
    }

    /// Puts the keys of a renewal that came back on the schedule again,
    /// each at its `next` time, with one lock of the schedule; a key that
    /// was released (or released and taken again) meanwhile is left out.
    fn reschedule<'a>(&self, keys: impl Iterator<Item = (&'a Due, Option<Instant>, Instant)>) {
        let mut entries = Vec::new();
        for (due, confirmed, next) in keys {
            let Some(mut held) = self.map.get_mut(&due.key) else {
                continue;
            };
            if held.id != due.id {
                continue;
            }
            if let Some(confirmed) = confirmed {
                held.confirmed = confirmed;
                held.lease
                    .extend(confirmed + self.timeout - drift_margin(self.timeout));
            }
            held.due = Some(next);
            entries.push(((next, due.id), due.key.clone()));
        }
        // A release between the map and the schedule leaves an entry that
        // `take_due` skips: its id no longer matches.
        let Some(earliest) = entries.iter().map(|((next, _), _)| *next).min() else {
            return;
        };
        let mut schedule = self.lock_schedule();
        schedule.queue.extend(entries);
        if schedule.armed.is_none_or(|armed| earliest < armed) {
            schedule.armed = Some(earliest);
            drop(schedule);
            self.wake.notify_one();
        }
    }

    /// Forgets `key` and tells its holders that the lease is lost.
    fn lose(&self, key: &HoldKey, id: u64, reason: &str) {
        // Forget the key before telling the holders, so that what they do
        // next (a new acquire, a look at the registry) sees it gone.
        if let Some((_, held)) = self.map.remove_if(key, |_, held| held.id == id) {
            tracing::warn!(lock = %key.0, owner = %key.1, %reason, "lease lost");
            held.lease.mark_lost();
        }
    }
}

/// A key whose renewal is due.
#[derive(Debug)]
struct Due {
    key: HoldKey,
    id: u64,
    /// When the client gives the lease up unless a renewal gets through.
    deadline: Instant,
    /// Read holds: renewed with `renew_read.lua`.
    read: bool,
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

/// How far ahead of its time a key may be renewed with an earlier one.
fn coalescing_window(timeout: Duration) -> Duration {
    (timeout / 30).min(Duration::from_secs(1))
}

/// The client's scheduler: sleeps until the first key falls due, then
/// sends the renewals of every key due within the coalescing window.
async fn schedule(shared: Weak<Shared>, wake: Arc<Notify>) {
    loop {
        let Some(this) = shared.upgrade() else {
            return;
        };
        let now = Instant::now();
        let first = {
            let mut schedule = this.lock_schedule();
            let first = schedule.queue.first_key_value().map(|(due, _)| due.0);
            schedule.armed = first;
            first
        };
        match first {
            Some(due) if due <= now => {
                let horizon = now + coalescing_window(this.timeout);
                for batch in this.take_due(now, horizon) {
                    tokio::spawn(renew(Arc::clone(&this), batch, now));
                }
            }
            Some(due) => {
                drop(this);
                tokio::select! {
                    _ = tokio::time::sleep_until(due) => {}
                    _ = wake.notified() => {}
                }
            }
            None => {
                drop(this);
                wake.notified().await;
            }
        }
    }
}

/// Renews one batch of keys in one script call sent at `sent`.
/// One renewal script call for `holds` (all read holds, or none): each
/// key's TTL reset to `timeout` if its owner still holds it; replies 1 or 0
/// per hold, in order.
pub(crate) fn renew_call<'a>(
    read: bool,
    timeout: Duration,
    holds: impl Iterator<Item = &'a HoldKey>,
) -> redis::ScriptInvocation<'static> {
    let mut call = if read {
        RENEW_READ.prepare_invoke()
    } else {
        RENEW.prepare_invoke()
    };
    call.arg(timeout.as_millis() as u64);
    for (name, owner) in holds {
        call.key(&**name).arg(&**owner);
        if read {
            call.key(keys::rwlock_timeout_prefix(name, owner));
        }
    }
    call
}

async fn renew(shared: Arc<Shared>, batch: Vec<Due>, sent: Instant) {
    let timeout = shared.timeout;
    let deadline = batch
        .iter()
        .map(|due| due.deadline)
        .min()
        .unwrap_or(sent + timeout);
    // A batch holds one kind only (`take_due`).
    let read = batch[0].read;
    let call = renew_call(read, timeout, batch.iter().map(|due| &due.key));
    let mut conn = shared.conn.clone();
    let reply =
        match tokio::time::timeout_at(deadline, call.invoke_async::<Vec<i64>>(&mut conn)).await {
            Ok(Ok(reply)) if reply.len() == batch.len() => Ok(reply),
            Ok(Ok(reply)) => Err(format!(
                "unexpected renew reply of {} items for {} keys",
                reply.len(),
                batch.len()
            )),
            Ok(Err(err)) => Err(err.to_string()),
            Err(_) => Err("no reply before the first lease ran out".into()),
        };
    match reply {
        Ok(renewed) => {
            let next = sent + timeout / 3;
            for (due, _) in batch.iter().zip(&renewed).filter(|(_, r)| **r != 1) {
                shared.lose(
                    &due.key,
                    due.id,
                    "the lock is no longer held by its owner (expired, deleted or taken)",
                );
            }
            let kept = batch.iter().zip(&renewed).filter(|(_, r)| **r == 1);
            shared.reschedule(kept.map(|(due, _)| (due, Some(sent), next)));
        }
        Err(error) => {
            tracing::warn!(keys = batch.len(), first = %batch[0].key.0, %error,
                "lease renewal failed; retrying");
            let retry = Instant::now() + retry_interval(timeout);
            shared.reschedule(batch.iter().map(|due| (due, None, retry.min(due.deadline))));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
