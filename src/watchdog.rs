//! The registry of watchdog-mode holds and the watchdog that renews them.
//!
//! One entry per (lock name, owner) this client holds in watchdog mode; the
//! entry counts local holds and owns the one renewal task of that key. The
//! task renews every third of the watchdog timeout, and declares the lease
//! lost when Redis says the owner no longer holds the key, or when renewals
//! could not get through before the lease would have run out.

use std::sync::Arc;
use std::time::Duration;

use dashmap::mapref::entry::Entry;
use dashmap::DashMap;
use redis::aio::ConnectionManager;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::scripts::RENEW;

/// (lock name, owner field)
pub(crate) type HoldKey = (Arc<str>, Arc<str>);

/// What a guard knows of its lease.
#[derive(Debug)]
pub(crate) struct LeaseState {
    lost: watch::Sender<bool>,
    /// For leased holds: when the lease runs out by the client's clock.
    deadline: Option<Instant>,
}

impl LeaseState {
    pub(crate) fn leased(deadline: Instant) -> Arc<Self> {
        Arc::new(LeaseState {
            lost: watch::Sender::new(false),
            deadline: Some(deadline),
        })
    }

    fn watched() -> Arc<Self> {
        Arc::new(LeaseState {
            lost: watch::Sender::new(false),
            deadline: None,
        })
    }

    pub(crate) fn is_lost(&self) -> bool {
        *self.lost.borrow() || self.deadline.is_some_and(|d| Instant::now() >= d)
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
        match self.deadline {
            Some(deadline) => tokio::select! {
                _ = lost => {}
                _ = tokio::time::sleep_until(deadline) => {}
            },
            None => lost.await,
        }
    }
}

#[derive(Debug)]
struct Held {
    holds: usize,
    lease: Arc<LeaseState>,
    task: tokio::task::AbortHandle,
}

/// The per-client registry of watchdog-mode holds.
#[derive(Debug, Default)]
pub(crate) struct Registry {
    map: Arc<DashMap<HoldKey, Held>>,
}

/// What a watchdog needs to renew one key.
pub(crate) struct Renewal {
    pub(crate) conn: ConnectionManager,
    pub(crate) timeout: Duration,
    pub(crate) runtime: tokio::runtime::Handle,
}

impl Registry {
    /// Records one more local hold of `key`, acquired by a request sent at
    /// `sent`; starts the key's watchdog when it is the first.
    pub(crate) fn hold(&self, key: HoldKey, sent: Instant, renewal: Renewal) -> Arc<LeaseState> {
        match self.map.entry(key) {
            Entry::Occupied(mut held) => {
                held.get_mut().holds += 1;
                Arc::clone(&held.get().lease)
            }
            Entry::Vacant(vacant) => {
                let lease = LeaseState::watched();
                let task = renewal.runtime.spawn(watch_key(
                    Arc::clone(&self.map),
                    vacant.key().clone(),
                    Arc::clone(&lease),
                    renewal.conn,
                    renewal.timeout,
                    sent,
                ));
                vacant.insert(Held {
                    holds: 1,
                    lease: Arc::clone(&lease),
                    task: task.abort_handle(),
                });
                lease
            }
        }
    }

    /// Forgets one local hold of `key`; stops the watchdog with the last.
    /// A hold whose lease was already lost is no longer counted here.
    pub(crate) fn release(&self, key: &HoldKey, lease: &Arc<LeaseState>) {
        if let Entry::Occupied(mut held) = self.map.entry(key.clone()) {
            if Arc::ptr_eq(&held.get().lease, lease) {
                held.get_mut().holds -= 1;
                if held.get().holds == 0 {
                    held.remove().task.abort();
                }
            }
        }
    }

    /// Forgets one local hold of `key`, whichever lease it was counted under
    /// (for a release without a guard); returns that lease.
    pub(crate) fn release_any(&self, key: &HoldKey) -> Option<Arc<LeaseState>> {
        let lease = Arc::clone(&self.map.get(key)?.lease);
        self.release(key, &lease);
        Some(lease)
    }

    /// Whether the watchdog keeps `key` alive.
    pub(crate) fn contains(&self, key: &HoldKey) -> bool {
        self.map.contains_key(key)
    }

    pub(crate) fn len(&self) -> usize {
        self.map.len()
    }
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

enum Outcome {
    Renewed,
    Gone,
    Failed(String),
}

async fn renew_once(
    conn: &mut ConnectionManager,
    key: &HoldKey,
    lease_ms: u64,
    deadline: Instant,
) -> Outcome {
    let mut call = RENEW.prepare_invoke();
    call.key(&*key.0).arg(lease_ms).arg(&*key.1);
    match tokio::time::timeout_at(deadline, call.invoke_async::<Vec<i64>>(conn)).await {
        Ok(Ok(reply)) => match reply.as_slice() {
            [1] => Outcome::Renewed,
            [0] => Outcome::Gone,
            other => Outcome::Failed(format!("unexpected renew reply {other:?}")),
        },
        // The key now holds something else: it is not our lock any more.
        Ok(Err(err)) if err.code() == Some("WRONGTYPE") => Outcome::Gone,
        Ok(Err(err)) => Outcome::Failed(err.to_string()),
        Err(_) => Outcome::Failed("no reply before the lease ran out".into()),
    }
}

async fn watch_key(
    map: Arc<DashMap<HoldKey, Held>>,
    key: HoldKey,
    lease: Arc<LeaseState>,
    mut conn: ConnectionManager,
    timeout: Duration,
    acquired: Instant,
) {
    let period = timeout / 3;
    let lease_ms = timeout.as_millis() as u64;
    let margin = drift_margin(timeout);
    // The request time of the last renewal (or the acquire) that Redis
    // confirmed: the server's TTL runs from no earlier than that.
    let mut confirmed = acquired;
    let mut next = acquired + period;
    let reason = loop {
        tokio::time::sleep_until(next).await;
        let deadline = confirmed + timeout - margin;
        let sent = Instant::now();
        if sent >= deadline {
            break "renewals did not get through before the lease ran out".to_owned();
        }
        match renew_once(&mut conn, &key, lease_ms, deadline).await {
            Outcome::Renewed => {
                confirmed = sent;
                next = sent + period;
            }
            Outcome::Gone => {
                break "the lock is no longer held by its owner (expired, deleted or taken)"
                    .to_owned()
            }
            Outcome::Failed(error) => {
                tracing::warn!(lock = %key.0, owner = %key.1, %error, "lease renewal failed; retrying");
                next = (Instant::now() + retry_interval(timeout)).min(deadline);
            }
        }
    };
    // Forget the key before telling the holders, so that what they do next
    // (a new acquire, a look at the registry) sees it gone.
    map.remove_if(&key, |_, held| Arc::ptr_eq(&held.lease, &lease));
    tracing::warn!(lock = %key.0, owner = %key.1, %reason, "lease lost");
    lease.mark_lost();
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
