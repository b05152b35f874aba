//! Unlock notifications: one subscription per channel per client, shared by
//! every local waiter on it, and dropped when the last one leaves.
//!
//! The subscriptions live on their own RESP3 connection (a
//! [`ConnectionManager`] that resubscribes by itself after a reconnect); its
//! push messages are dispatched here to a [`Notify`] per channel: message `0`
//! wakes one waiter, any other message wakes them all, and a lost connection
//! wakes them all too, so that each retries and re-arms; so does a channel's
//! subscription made again after a reconnect (a release published while the
//! connection was down reached nobody here).

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};

use dashmap::mapref::entry::Entry;
use dashmap::DashMap;
use redis::aio::ConnectionManager;
use redis::{PushInfo, PushKind, Value};
use tokio::sync::futures::Notified;
use tokio::sync::{Mutex, Notify};
use tokio::time::Instant;

use crate::engine::backoff::{Failures, RESEND};
use crate::engine::telemetry;
use crate::error::is_connection_failure;
use crate::Result;

/// The subscription state of one channel.
#[derive(Debug)]
struct ChannelState {
    notify: Notify,
    /// Every message, and a lost connection, wakes every task here:
    /// holders that listen for their hold's end (see
    /// [`crate::engine::takeover`]), which take no waiter's wake-up.
    changed: Notify,
    /// Every message wakes every waiter (semaphores and latches); else
    /// message `0` wakes one (a lock's unlock).
    broadcast: bool,
    /// Where SUBSCRIBE stands; the lock orders subscribe and unsubscribe of
    /// this channel.
    subscribed: Mutex<Subscribed>,
    /// SUBSCRIBEs of ours whose confirmation has not come through yet: a
    /// confirmation beyond them is the connection's own, after a reconnect.
    asked: AtomicUsize,
}

/// A SUBSCRIBE of ours in flight (see [`ChannelState::asking`]).
struct Asking<'a>(Option<&'a ChannelState>);

impl Asking<'_> {
    fn answered(mut self) {
        self.0 = None;
    }
}

impl Drop for Asking<'_> {
    fn drop(&mut self) {
        if let Some(state) = self.0 {
            state.asked_for();
        }
    }
}

impl ChannelState {
    fn new(broadcast: bool, subscribed: Subscribed) -> ChannelState {
        ChannelState {
            notify: Notify::new(),
            changed: Notify::new(),
            broadcast,
            subscribed: Mutex::new(subscribed),
            asked: AtomicUsize::new(0),
        }
    }

    /// A SUBSCRIBE of ours goes out: counted until the guard is told it
    /// was answered. One that failed or was dropped may never be
    /// confirmed, and is taken back (a confirmation of it that comes after
    /// all wakes the waiters once, for nothing).
    fn asking(&self) -> Asking<'_> {
        self.asked.fetch_add(1, Ordering::AcqRel);
        Asking(Some(self))
    }

    /// A confirmation came: whether it answered a SUBSCRIBE of ours.
    fn asked_for(&self) -> bool {
        self.asked
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1))
            .is_ok()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Subscribed {
    No,
    /// Sent, not confirmed: the caller left, or the connection failed.
    Maybe,
    Yes,
}

#[derive(Debug)]
struct Slot {
    waiters: usize,
    state: Arc<ChannelState>,
}

type Channels = DashMap<String, Slot>;

/// The subscription connection.
#[derive(Clone)]
enum SubConn {
    Single(ConnectionManager),
    /// A cluster connection: SSUBSCRIBE when `sharded`, else SUBSCRIBE.
    #[cfg(feature = "cluster")]
    Cluster {
        conn: redis::cluster_async::ClusterConnection,
        sharded: bool,
    },
}

impl SubConn {
    async fn subscribe(&self, channel: &str) -> redis::RedisResult<()> {
        match self.clone() {
            SubConn::Single(mut conn) => conn.subscribe(channel).await,
            #[cfg(feature = "cluster")]
            SubConn::Cluster { mut conn, sharded } => {
                if sharded {
                    conn.ssubscribe(channel).await
                } else {
                    conn.subscribe(channel).await
                }
            }
        }
    }

    /// A `PING` on it, which makes a connection that gave up reconnecting
    /// try again.
    async fn ping(&self) -> redis::RedisResult<()> {
        match self.clone() {
            SubConn::Single(mut conn) => redis::cmd("PING").query_async(&mut conn).await,
            #[cfg(feature = "cluster")]
            SubConn::Cluster { mut conn, .. } => redis::cmd("PING").query_async(&mut conn).await,
        }
    }

    async fn unsubscribe(&self, channel: &str) -> redis::RedisResult<()> {
        match self.clone() {
            SubConn::Single(mut conn) => conn.unsubscribe(channel).await,
            #[cfg(feature = "cluster")]
            SubConn::Cluster { mut conn, sharded } => {
                if sharded {
                    conn.sunsubscribe(channel).await
                } else {
                    conn.unsubscribe(channel).await
                }
            }
        }
    }
}

/// How long an unsubscribe that lost connections fail is sent again.
const UNSUBSCRIBE_FOR: std::time::Duration = std::time::Duration::from_secs(60);

/// The client's pub/sub side.
pub(crate) struct PubSub {
    /// Replaced when a sentinel names a new master (`PubSub::follow`).
    conn: std::sync::RwLock<SubConn>,
    channels: Arc<Channels>,
    subscribes_sent: AtomicU64,
    /// Told of every lost connection and every new master, so that the
    /// watchdog checks the held leases at once.
    pub(crate) reconnected: Arc<Recheck>,
    /// Told of every lost subscription connection (and of the client's
    /// end), for [`PubSub::revive`].
    lost: Arc<Notify>,
}

impl std::fmt::Debug for PubSub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PubSub")
            .field("channels", &self.channels.len())
            .finish_non_exhaustive()
    }
}

/// A subscription connection to one server whose push messages go to
/// `channels`, resubscribing by itself after a reconnect.
async fn subscriber(
    client: &redis::Client,
    config: redis::aio::ConnectionManagerConfig,
    channels: &Arc<Channels>,
    (reconnected, lost): (&Arc<Recheck>, &Arc<Notify>),
) -> Result<SubConn> {
    let sink = Arc::clone(channels);
    let (reconnected, lost) = (Arc::clone(reconnected), Arc::clone(lost));
    let config = config
        .set_automatic_resubscription()
        .set_push_sender(move |info: PushInfo| {
            if info.kind == PushKind::Disconnection {
                reconnected.ask();
                lost.notify_one();
            }
            dispatch(&sink, info);
            Ok::<(), std::convert::Infallible>(())
        });
    Ok(SubConn::Single(
        client.get_connection_manager_with_config(config).await?,
    ))
}

impl PubSub {
    /// Opens the subscription connection; `client` must speak RESP3.
    pub(crate) async fn connect(
        client: redis::Client,
        config: redis::aio::ConnectionManagerConfig,
    ) -> Result<PubSub> {
        let channels: Arc<Channels> = Arc::new(DashMap::new());
        let (reconnected, lost) = (Arc::default(), Arc::default());
        let conn = subscriber(&client, config, &channels, (&reconnected, &lost)).await?;
        Ok(PubSub {
            conn: std::sync::RwLock::new(conn),
            channels,
            subscribes_sent: AtomicU64::new(0),
            reconnected,
            lost,
        })
    }

    fn conn(&self) -> SubConn {
        self.conn.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Moves the subscriptions to a new server (a master a sentinel named
    /// after a failover): a new connection, every channel with waiters
    /// subscribed again, and the waiters woken to try the lock again.
    #[cfg(feature = "sentinel")]
    pub(crate) async fn follow(
        &self,
        client: redis::Client,
        config: redis::aio::ConnectionManagerConfig,
    ) -> Result<()> {
        let conn = subscriber(
            &client,
            config,
            &self.channels,
            (&self.reconnected, &self.lost),
        )
        .await?;
        // A new master: the holds may not have reached it.
        self.reconnected.ask();
        *self.conn.write().unwrap_or_else(|e| e.into_inner()) = conn.clone();
        // Every channel: one whose last waiter is leaving is marked
        // unsubscribed, so that a waiter joining it subscribes on the new
        // connection.
        let channels: Vec<String> = self
            .channels
            .iter()
            .map(|slot| slot.key().clone())
            .collect();
        for channel in channels {
            resubscribe(&conn, &self.channels, channel).await;
        }
        Ok(())
    }

    /// Opens the subscription connection to a cluster from `builder`
    /// (RESP3, its nodes and timeouts set); `sharded` picks SSUBSCRIBE.
    #[cfg(feature = "cluster")]
    pub(crate) async fn connect_cluster(
        builder: redis::cluster::ClusterClientBuilder,
        sharded: bool,
    ) -> Result<PubSub> {
        let channels: Arc<Channels> = Arc::new(DashMap::new());
        let sink = Arc::clone(&channels);
        let reconnected: Arc<Recheck> = Arc::default();
        let recheck = Arc::clone(&reconnected);
        // Shard channels the server dropped (their slot moved: a failover,
        // a resharding), to subscribe again on the slot's new owner.
        let (moved, mut moved_rx) = tokio::sync::mpsc::unbounded_channel::<String>();
        let client = builder
            .push_sender(move |info: PushInfo| {
                if info.kind == PushKind::Disconnection {
                    recheck.ask();
                }
                if info.kind == PushKind::SUnsubscribe {
                    if let Some(channel) = info.data.first().and_then(text) {
                        if let Ok(channel) = std::str::from_utf8(channel) {
                            let _ = moved.send(channel.to_owned());
                        }
                    }
                }
                dispatch(&sink, info);
                Ok::<(), std::convert::Infallible>(())
            })
            .build()?;
        let conn = SubConn::Cluster {
            conn: client.get_async_connection().await?,
            sharded,
        };
        let (resubscriber, watched) = (conn.clone(), Arc::clone(&channels));
        tokio::spawn(async move {
            while let Some(channel) = moved_rx.recv().await {
                resubscribe(&resubscriber, &watched, channel).await;
            }
        });
        Ok(PubSub {
            conn: std::sync::RwLock::new(conn),
            channels,
            subscribes_sent: AtomicU64::new(0),
            reconnected,
            lost: Arc::default(),
        })
    }

    /// Brings the subscription connection back after it was lost, while
    /// waiters count on it: the connection reconnects by itself for a
    /// while (six tries, the pauses doubling from 100 ms with jitter: 6 to
    /// 13 s), then only when a command is sent on it, and the waiters on
    /// channels already subscribed send none. So this pings it, with
    /// pauses, until it answers (having subscribed its channels again,
    /// which wakes their waiters) or no waiter is left. Ends when the
    /// client is gone. A cluster's subscriptions come back with the cluster
    /// connection's own reconnects, and are not told here.
    pub(crate) async fn revive(this: Weak<PubSub>) {
        let Some(lost) = this.upgrade().map(|pubsub| Arc::clone(&pubsub.lost)) else {
            return;
        };
        loop {
            lost.notified().await;
            let mut failures = Failures::on(RESEND);
            loop {
                let Some(pubsub) = this.upgrade() else {
                    return;
                };
                if !pubsub.channels.iter().any(|slot| slot.waiters > 0) {
                    break;
                }
                let conn = pubsub.conn();
                drop(pubsub);
                // The client's end (or another lost connection) stops the
                // ping: the next round looks again.
                let pinged = tokio::select! {
                    pinged = conn.ping() => pinged,
                    () = lost.notified() => continue,
                };
                match pinged {
                    Ok(()) => break,
                    Err(err) => {
                        tracing::debug!(error = %err, "the subscription connection is still down");
                        tokio::time::sleep(failures.pause()).await;
                    }
                }
            }
        }
    }

    /// Joins the waiters of `channel`, subscribing when it is the first.
    /// Returns once the subscription is confirmed by Redis.
    ///
    /// # Cancel safety
    /// Cancel safe: a dropped call leaves the waiter count as it was, and a
    /// subscription nobody waits on is dropped again.
    pub(crate) async fn subscribe(self: &Arc<Self>, channel: String) -> Result<Subscription> {
        self.join(channel, false).await
    }

    /// [`PubSub::subscribe`] for a channel whose every message wakes every
    /// waiter: a semaphore's new count, a latch's zero.
    ///
    /// # Cancel safety
    /// As [`PubSub::subscribe`].
    pub(crate) async fn subscribe_broadcast(
        self: &Arc<Self>,
        channel: String,
    ) -> Result<Subscription> {
        self.join(channel, true).await
    }

    async fn join(self: &Arc<Self>, channel: String, broadcast: bool) -> Result<Subscription> {
        let state = {
            let mut opened = false;
            let mut slot = self.channels.entry(channel.clone()).or_insert_with(|| {
                opened = true;
                Slot {
                    waiters: 0,
                    state: Arc::new(ChannelState::new(broadcast, Subscribed::No)),
                }
            });
            if opened {
                telemetry::subscriptions_changed(1.0);
            }
            slot.waiters += 1;
            Arc::clone(&slot.state)
        };
        // From here on the count is undone by Subscription's Drop.
        let sub = Subscription {
            pubsub: Arc::clone(self),
            channel,
            state,
        };
        let mut subscribed = sub.state.subscribed.lock().await;
        if *subscribed != Subscribed::Yes {
            self.subscribes_sent.fetch_add(1, Ordering::Relaxed);
            *subscribed = Subscribed::Maybe;
            let asking = sub.state.asking();
            self.conn().subscribe(&sub.channel).await?;
            asking.answered();
            *subscribed = Subscribed::Yes;
        }
        drop(subscribed);
        Ok(sub)
    }

    /// Channels with at least one local waiter, or still being unsubscribed.
    #[cfg(feature = "test-counters")]
    pub(crate) fn len(&self) -> usize {
        self.channels.len()
    }

    /// SUBSCRIBE commands sent since the client started.
    #[cfg(feature = "test-counters")]
    pub(crate) fn subscribes_sent(&self) -> u64 {
        self.subscribes_sent.load(Ordering::Relaxed)
    }

    fn leave(self: &Arc<Self>, channel: &str, state: &Arc<ChannelState>) {
        let last = match self.channels.entry(channel.to_owned()) {
            Entry::Occupied(mut slot) if Arc::ptr_eq(&slot.get().state, state) => {
                slot.get_mut().waiters -= 1;
                slot.get().waiters == 0
            }
            _ => false,
        };
        if !last {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            // No runtime to unsubscribe with: forget the channel (unless a
            // waiter joined meanwhile, and found it subscribed); a later
            // waiter subscribes again, and stray messages find no slot.
            self.forget(channel, |slot| {
                Arc::ptr_eq(&slot.state, state) && slot.waiters == 0
            });
            return;
        };
        // Not kept alive by this: a client dropped meanwhile takes its
        // connection, and the channel with it.
        let this = Arc::downgrade(self);
        let channel = channel.to_owned();
        let state = Arc::clone(state);
        runtime.spawn(async move { unsubscribe_if_unused(this, channel, state).await });
    }

    /// One try of [`unsubscribe_if_unused`]: `false` when it is to be sent
    /// again (after a pause, without the channel's lock, so that a waiter
    /// may join meanwhile).
    async fn unsubscribe_once(
        &self,
        channel: &str,
        state: &Arc<ChannelState>,
        until: Instant,
    ) -> bool {
        let unused = |slot: &Slot| Arc::ptr_eq(&slot.state, state) && slot.waiters == 0;
        let mut subscribed = state.subscribed.lock().await;
        if !self.channels.get(channel).is_some_and(|slot| unused(&slot)) {
            // Someone joined meanwhile: the subscription is theirs now.
            return true;
        }
        if *subscribed != Subscribed::No {
            match self.conn().unsubscribe(channel).await {
                Err(err) if is_connection_failure(&err) && Instant::now() < until => {
                    tracing::debug!(%channel, error = %err, "unsubscribe failed; sending it again");
                    // It may still run (a reply that timed out): a waiter
                    // that joins meanwhile subscribes again (after it, on
                    // the same connection).
                    *subscribed = Subscribed::Maybe;
                    return false;
                }
                Err(err) => tracing::debug!(%channel, error = %err, "unsubscribe failed"),
                Ok(()) => {}
            }
            *subscribed = Subscribed::No;
        }
        // A waiter that joins after this point finds `Subscribed::No`
        // (it waits on the lock above) or a fresh slot, and subscribes.
        self.forget(channel, unused);
        true
    }

    /// Removes `channel`'s slot if `drop_it` says so. The subscriptions
    /// gauge goes down while the entry is still held, so that no one who
    /// sees the slot gone reads the gauge before it does.
    fn forget(&self, channel: &str, drop_it: impl FnOnce(&Slot) -> bool) {
        if let Entry::Occupied(slot) = self.channels.entry(channel.to_owned()) {
            if drop_it(slot.get()) {
                telemetry::subscriptions_changed(-1.0);
                slot.remove();
            }
        }
    }
}

impl Drop for PubSub {
    fn drop(&mut self) {
        // `revive` ends.
        self.lost.notify_one();
        // Slots whose removal was left to a task that never ran (the
        // runtime shut down first) leave the gauge with the client.
        telemetry::subscriptions_changed(-(self.channels.len() as f64));
    }
}

/// Unsubscribes from `channel` once its last waiter left, unless one joined
/// meanwhile. The connection keeps a channel until the server confirms
/// its unsubscribe, and subscribes it again after a reconnect: an
/// unsubscribe that a lost connection fails is sent again (for a while,
/// and while nobody joins), or the channel would stay subscribed, with
/// nobody to hear it, for the client's life. Ends when the client is gone.
async fn unsubscribe_if_unused(pubsub: Weak<PubSub>, channel: String, state: Arc<ChannelState>) {
    let until = Instant::now() + UNSUBSCRIBE_FOR;
    let mut failures = Failures::on(RESEND);
    loop {
        let Some(this) = pubsub.upgrade() else {
            return;
        };
        if this.unsubscribe_once(&channel, &state, until).await {
            return;
        }
        drop(this);
        tokio::time::sleep(failures.pause()).await;
    }
}

/// Subscribes to `channel` on `conn` again (the server dropped it, or the
/// subscriptions moved to a new master) when local waiters still count on
/// it, and wakes the waiters to try the lock again. Without waiters (our
/// own SUNSUBSCRIBE, sent when the last waiter left, ends here too) the
/// channel is marked unsubscribed: a waiter that joins it before it is
/// forgotten subscribes anew.
#[cfg(any(feature = "cluster", feature = "sentinel"))]
async fn resubscribe(conn: &SubConn, channels: &Channels, channel: String) {
    let Some(state) = channels.get(&channel).map(|slot| Arc::clone(&slot.state)) else {
        return;
    };
    let mut subscribed = state.subscribed.lock().await;
    // Counted under the channel's lock: a waiter joins (counts itself)
    // before it takes the lock, and then finds what is set here.
    let waiters = channels
        .get(&channel)
        .filter(|slot| Arc::ptr_eq(&slot.state, &state))
        .map_or(0, |slot| slot.waiters);
    if waiters == 0 {
        // Its last waiter is leaving: not subscribed on the new server,
        // and a waiter that joins before the channel is forgotten must
        // subscribe there, not trust a subscription of the old one.
        if *subscribed == Subscribed::Yes {
            *subscribed = Subscribed::No;
        }
        return;
    }
    if *subscribed != Subscribed::Yes {
        return;
    }
    tracing::debug!(%channel, "subscribing again on the channel's new server");
    let asking = state.asking();
    match conn.subscribe(&channel).await {
        Ok(()) => asking.answered(),
        Err(err) => tracing::warn!(%channel, error = %err,
            "could not subscribe again on the channel's new server; waiters fall back to the lock's TTL"),
    }
    drop(subscribed);
    state.notify.notify_waiters();
}

/// One waiter's membership in a channel's subscription.
#[derive(Debug)]
pub(crate) struct Subscription {
    pubsub: Arc<PubSub>,
    channel: String,
    state: Arc<ChannelState>,
}

impl Subscription {
    /// A future that completes on the next wake-up for this channel. Call
    /// `enable()` on it before the acquire attempt it guards, so that a
    /// message in between is not missed.
    pub(crate) fn notified(&self) -> Notified<'_> {
        self.state.notify.notified()
    }

    /// A future that completes on the next message of any kind on this
    /// channel, or a lost connection; it takes no waiter's wake-up.
    pub(crate) fn changed(&self) -> Notified<'_> {
        self.state.changed.notified()
    }
}

impl Subscription {
    /// The wake-up this waiter just took, owed to another waiter of the
    /// channel until its next try is answered (see [`TakenWake`]).
    pub(crate) fn took_wake(&self) -> TakenWake {
        TakenWake(Some(Arc::clone(&self.state)))
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        self.pubsub.leave(&self.channel, &self.state);
    }
}

/// A lock's unlock message wakes one waiter of a client: one that takes
/// the wake-up and leaves before its next try is answered (dropped, its
/// time up, an error) would leave the others asleep on a free lock until
/// their timers. Dropped while it is owed, it passes the wake-up on to
/// another waiter (or the next to wait); a channel that wakes every
/// waiter owes nothing.
#[derive(Debug, Default)]
pub(crate) struct TakenWake(Option<Arc<ChannelState>>);

impl TakenWake {
    /// Its waiter's try was answered: the wake-up served.
    pub(crate) fn served(&mut self) {
        self.0 = None;
    }
}

impl Drop for TakenWake {
    fn drop(&mut self) {
        if let Some(state) = self.0.take() {
            if !state.broadcast {
                state.notify.notify_one();
            }
        }
    }
}

fn text(value: &Value) -> Option<&[u8]> {
    match value {
        Value::BulkString(bytes) => Some(bytes),
        Value::SimpleString(s) => Some(s.as_bytes()),
        _ => None,
    }
}

fn dispatch(channels: &Channels, info: PushInfo) {
    match info.kind {
        PushKind::Message | PushKind::SMessage => {
            let (Some(channel), Some(payload)) = (
                info.data.first().and_then(text),
                info.data.get(1).and_then(text),
            ) else {
                return;
            };
            let Ok(channel) = std::str::from_utf8(channel) else {
                return;
            };
            if let Some(slot) = channels.get(channel) {
                if !slot.state.broadcast
                    && payload == crate::engine::scripts::UNLOCK_MESSAGE.as_bytes()
                {
                    slot.state.notify.notify_one();
                } else {
                    slot.state.notify.notify_waiters();
                }
                slot.state.changed.notify_waiters();
            }
        }
        // A subscription the connection made again by itself, after a
        // reconnect (a release published while it was down reached nobody
        // here), or a shard channel the server dropped (its slot moved) or
        // we did: the waiters on it try the lock again. The confirmation of
        // a SUBSCRIBE of ours wakes nobody: its waiter tries next anyway.
        PushKind::Subscribe | PushKind::SSubscribe | PushKind::SUnsubscribe => {
            if let Some(slot) = info
                .data
                .first()
                .and_then(text)
                .and_then(|c| std::str::from_utf8(c).ok())
                .and_then(|c| channels.get(c))
            {
                if info.kind != PushKind::SUnsubscribe && slot.state.asked_for() {
                    return;
                }
                slot.state.notify.notify_waiters();
                slot.state.changed.notify_waiters();
            }
        }
        PushKind::Disconnection => {
            tracing::debug!("pub/sub connection lost; waking every waiter to retry");
            for slot in channels.iter() {
                // No confirmation comes any more from the lost connection.
                slot.state.asked.store(0, Ordering::Release);
                slot.state.notify.notify_waiters();
                slot.state.changed.notify_waiters();
            }
        }
        _ => {}
    }
}

/// Asks the watchdog to renew every held lease at once. The client asks
/// when a connection to Redis was lost (Redis may come back empty after a
/// restart) and when it follows a new master: a hold found gone is then
/// reported lost as soon as Redis answers, not a third of the watchdog
/// timeout later. The client raises it; the watchdog reads it.
#[derive(Debug, Default)]
pub(crate) struct Recheck {
    asked: AtomicBool,
    wake: Notify,
}

impl Recheck {
    pub(crate) fn ask(&self) {
        self.asked.store(true, Ordering::Release);
        self.wake.notify_one();
    }

    /// Whether a recheck was asked since the last call.
    pub(crate) fn take(&self) -> bool {
        self.asked.swap(false, Ordering::AcqRel)
    }

    /// Resolves when a recheck is asked (or was, unseen).
    pub(crate) async fn notified(&self) {
        self.wake.notified().await;
    }
}

#[cfg(test)]
mod tests {
    use std::future::Future;

    use super::*;

    fn slot(broadcast: bool) -> Slot {
        Slot {
            waiters: 2,
            state: Arc::new(ChannelState::new(broadcast, Subscribed::Yes)),
        }
    }

    fn message(channel: &str, payload: &str) -> PushInfo {
        PushInfo {
            kind: PushKind::Message,
            data: vec![
                Value::BulkString(channel.as_bytes().to_vec()),
                Value::BulkString(payload.as_bytes().to_vec()),
            ],
        }
    }

    /// How many of two enabled waiters a push wakes.
    fn woken_by(info: PushInfo) -> usize {
        woken_on(false, info)
    }

    /// How many of two enabled waiters a push wakes on a channel that
    /// broadcasts or not.
    fn woken_on(broadcast: bool, info: PushInfo) -> usize {
        let channels: Channels = DashMap::new();
        channels.insert("ch".into(), slot(broadcast));
        let state = Arc::clone(&channels.get("ch").unwrap().state);
        let mut first = Box::pin(state.notify.notified());
        let mut second = Box::pin(state.notify.notified());
        first.as_mut().enable();
        second.as_mut().enable();
        dispatch(&channels, info);
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        let woken = [first.as_mut(), second.as_mut()]
            .into_iter()
            .map(|n| n.poll(&mut cx).is_ready())
            .filter(|ready| *ready)
            .count();
        drop((first, second));
        woken
    }

    #[test]
    fn unlock_wakes_one_and_other_messages_wake_all() {
        assert_eq!(woken_by(message("ch", "0")), 1);
        assert_eq!(woken_by(message("ch", "1")), 2);
        assert_eq!(woken_by(message("other", "0")), 0);
        let lost = PushInfo {
            kind: PushKind::Disconnection,
            data: vec![],
        };
        assert_eq!(woken_by(lost), 2);
    }

    #[test]
    fn a_confirmation_wakes_all_unless_it_answers_a_subscribe_of_ours() {
        let confirmed = || PushInfo {
            kind: PushKind::Subscribe,
            data: vec![Value::BulkString(b"ch".to_vec()), Value::Int(1)],
        };
        // The connection's own, after a reconnect.
        assert_eq!(woken_by(confirmed()), 2);
        let channels: Channels = DashMap::new();
        channels.insert("ch".into(), slot(false));
        let state = Arc::clone(&channels.get("ch").unwrap().state);
        state.asking().answered();
        let mut waiter = Box::pin(state.notify.notified());
        waiter.as_mut().enable();
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        dispatch(&channels, confirmed());
        assert!(
            waiter.as_mut().poll(&mut cx).is_pending(),
            "ours woke a waiter"
        );
        dispatch(&channels, confirmed());
        assert!(waiter.as_mut().poll(&mut cx).is_ready(), "the next did not");
    }

    #[test]
    fn broadcast_channels_wake_all_on_every_message() {
        assert_eq!(woken_on(true, message("ch", "0")), 2);
        assert_eq!(woken_on(true, message("ch", "3")), 2);
    }
}
