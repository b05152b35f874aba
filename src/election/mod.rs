//! Leader election on a fenced lock: one leader per name, a term that
//! fences, a label the others read, and a stream of changes.

mod leadership;
mod observe;

pub use leadership::Leadership;
pub use observe::LeaderObserver;

use std::time::Duration;

use crate::config::MAX_LEADER_LABEL_LEN;
use crate::engine::keys::{self, CAMPAIGN_MARK};
use crate::engine::object::Object;
use crate::engine::scripts::PUBLISH;
use crate::engine::waiting::{Channel, Watcher};
use crate::{Client, Error, FencedGuard, FencedLock, Holder, Result};

/// What a resignation announces on the election's channel (a new leader
/// announces its term).
const RESIGNED: &str = "0";

/// A leader election, from [`Client::leader_election`]: at most one leader
/// per name at a time, each with a **term** higher than every earlier
/// term on that name, and a **label** (a host name, a pod name, an
/// address) the others can read.
///
/// It is a [`FencedLock`] underneath, Redisson's `RFencedLock`: leading is
/// holding the lock, in watchdog mode, and the term is the fencing token
/// the campaign's acquire drew. A Java service that takes an `RFencedLock`
/// of the same name excludes the candidates here and is excluded by them,
/// and its tokens and these terms are drawn from the same counter, so
/// they interleave and rise together. Redisson clients see a plain fenced
/// lock: the label rides in the holder's owner id (`<label>~<campaign-id>`,
/// see `lua/README.md`). Besides the fenced lock's own keys (its hash, its
/// counter, and the short-lived latches that make every request safe to
/// send again), an election only publishes announcements on the channel
/// `ferrisson_election__channel:{name}`.
///
/// - [`campaign`](LeaderElection::campaign) waits to lead;
///   [`try_campaign`](LeaderElection::try_campaign) and
///   [`campaign_for`](LeaderElection::campaign_for) do not, or not long.
///   Every campaign is a candidate of its own: two campaigns of one
///   process exclude each other as two processes' do.
/// - The [`Leadership`] they return carries the term; send it with every
///   write the leader makes, and have the resource refuse a term lower
///   than the highest it has seen (as a fencing token): a leader paused
///   past its lease is then refused when it wakes. Its
///   [`lost`](Leadership::lost) resolves when the leadership ended
///   without a resignation; dropping it resigns.
/// - [`leader`](LeaderElection::leader) reads who leads now, without
///   campaigning; [`observe`](LeaderElection::observe) follows every
///   change.
///
/// The lease is the client's watchdog timeout
/// ([`ClientBuilder::watchdog_timeout`](crate::ClientBuilder::watchdog_timeout),
/// 30 s by default), or the election's own
/// ([`lease`](LeaderElection::lease)): a leader that dies without
/// resigning, or is cut off from Redis, is replaced at most that long
/// after its last renewal, and its watchdog keeps a live leader's lease.
/// A lease of its own sets the failover time without touching the
/// client's other locks: measured with a 1.5 s lease, a waiting rival
/// led 1.0 s after the leader was cut off (see
/// [`lease`](LeaderElection::lease)).
///
/// Terms never go back, even when Redis loses the counter
/// `redisson_lock_token:{name}` (a restart without persistence, a failover
/// that lost writes): a term is the counter plus one or the server's clock
/// in microseconds (`TIME`), whichever is higher, written back into the
/// counter, as a [`FencedLock`]'s tokens are. So a rival elected on a Redis
/// that came back empty gets a term above the old leader's, and a resource
/// fenced at the old term takes the rival's writes and refuses the old
/// leader's. This holds as long as the server's clock does not step back
/// by more than the time since the last term (a failover onto a server
/// whose clock is behind can break it) and fewer than a million terms are
/// drawn a second. Terms are large numbers (about 1.8 × 10^15 in 2026),
/// below 2^53 until the year 2255.
///
/// When Redis comes back empty, the old leader's lock is gone and a rival
/// can be granted as soon as Redis answers. The old leader hears of it
/// from its own client as soon as that reconnects: a lost connection makes
/// the watchdog renew every hold at once, and again 20 ms after each try
/// that finds no connection, so [`lost`](Leadership::lost) resolves at
/// most about 20 ms and a few round trips after Redis answers again
/// (measured: 24-41 ms after, where a rival campaigning at once was
/// granted after about 100 ms; before, the old leader heard 1.5-1.6 s
/// after the rival's grant).
/// It is not an ordering: a rival that reconnects first may be granted a
/// few milliseconds before the old leader is told, and a leader cut off
/// from Redis hears only when its lease runs out (as
/// [`lost`](Leadership::lost) says). Making every grant on a missing
/// counter wait out a lease would order them, at the cost of a lease's
/// wait on every name's first campaign; the rising term is what fences
/// the old leader's writes in that window.
///
/// Next to etcd and Curator: `campaign`, `leader`, `observe` and `resign`
/// are etcd's `concurrency.Election` calls (`Campaign`, `Leader`,
/// `Observe`, `Resign`), the term plays the part of etcd's revision as a
/// fencing token, and the label that of etcd's campaign value or
/// Curator's participant id; `lost()` is what Curator's `LeaderLatch`
/// listener and `LeaderSelector`'s state change report. Unlike etcd, Redis
/// replicates asynchronously: a failover without replica sync may lose the
/// leader's lock and its term with it, and elect a second leader, with the
/// same term, while the first still works. Replica sync (on by default
/// behind Sentinel and on a Cluster) narrows that window and does not
/// close it (see the crate docs' guarantees): a campaign returns once a
/// replica has acknowledged the grant and its term, so after a failover to
/// that replica the next term is higher; the leadership itself may still
/// be lost in the failover (renewals are not waited on), which the
/// leader's watchdog then reports through [`lost`](Leadership::lost).
///
/// ```rust,no_run
/// # async fn run(client: ferrisson::Client) -> ferrisson::Result<()> {
/// let election = client.leader_election("billing:leader");
/// let leadership = election.campaign("pod-a").await?;
/// let term = leadership.term();
/// let lost = tokio::select! {
///     _ = leadership.lost() => true, // stop leading: another may lead now
///     _ = async { /* lead: every write carries `term` */ } => false,
/// };
/// if !lost {
///     leadership.resign().await?;
/// }
/// # let _ = term;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct LeaderElection {
    lock: FencedLock,
    /// The leadership's own lease ([`LeaderElection::lease`]); `None`:
    /// the client's watchdog timeout.
    lease: Option<Duration>,
}

impl std::fmt::Debug for LeaderElection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaderElection")
            .field("name", &self.lock.name())
            .field("lease", &self.lease)
            .finish_non_exhaustive()
    }
}

impl Client {
    /// A leader election on `name`, which is also the key of its fenced
    /// lock. Nothing is sent until a call.
    pub fn leader_election(&self, name: impl Into<String>) -> LeaderElection {
        LeaderElection {
            lock: self.fenced_lock(name).called("election", ELECTION_DATA),
            lease: None,
        }
    }
}

/// A change seen by [`LeaderElection::observe`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeaderChange {
    /// This one leads now: its [`term`](Holder::term) is the fencing
    /// token its campaign drew (for a holder that did not campaign, see
    /// [`Holder::term`]), its [`label`](Holder::label) the one it
    /// campaigned with.
    Leader(Holder),
    /// Nobody leads.
    NoLeader,
}

impl LeaderElection {
    /// The election's name: the key of its fenced lock.
    pub fn name(&self) -> &str {
        self.lock.name()
    }

    /// The client this handle belongs to.
    pub fn client(&self) -> &Client {
        self.lock.client()
    }

    /// Gives the leadership of this handle's campaigns a lease of its
    /// own, instead of the client's watchdog timeout: the leader's lock
    /// is taken with a TTL of `lease` and renewed by the client's
    /// watchdog every third of it, beside the client's other holds (the
    /// other locks keep the client's timeout). A leader that dies or is
    /// cut off is then replaced about `lease` after its last renewal, as
    /// an etcd session's TTL or a Curator latch's session timeout sets
    /// theirs.
    ///
    /// The price of a short lease: a leader whose renewals are held up
    /// (a stopped process, a starved runtime, a slow network) for more
    /// than two thirds of it loses the leadership, and a renewal every
    /// third of it per leader.
    ///
    /// The failover it gives: a leader cut off from Redis (or stopped, or
    /// dead) renewed last at most a third of `lease` before, so a rival
    /// waiting in [`campaign`](LeaderElection::campaign) leads between two
    /// thirds of `lease` and `lease` after the cut, plus a round trip.
    /// Measured (tests/election.rs, `an_election_lease_sets_the_failover_time`,
    /// 5 runs on a 2-core machine, debug build): with a 1.5 s lease on a
    /// client whose watchdog timeout is 30 s, the rival led 1.00-1.01 s
    /// after the cut, where the client's timeout would have taken 20-30 s;
    /// the leader, renewed every 0.5 s, kept its office over four leases.
    ///
    /// Observers from this handle ([`observe`](LeaderElection::observe))
    /// look again every third of `lease` (or of the watchdog timeout,
    /// whichever is shorter).
    ///
    /// Checked by each campaign: at least
    /// [`MIN_WATCHDOG_TIMEOUT`](crate::config::MIN_WATCHDOG_TIMEOUT), at
    /// most [`MAX_DURATION`](crate::config::MAX_DURATION); else
    /// [`Error::InvalidArgument`] and nothing is sent. Candidates of one
    /// election may take different leases: each leader is kept by its own.
    pub fn lease(mut self, lease: Duration) -> LeaderElection {
        self.lease = Some(lease);
        self
    }

    /// The fenced lock of one campaign with `label`: its own owner id,
    /// `<label>~<campaign-id>`, and the election's lease.
    fn candidate(&self, label: &str) -> Result<FencedLock> {
        check_label(label)?;
        let campaign = self.lock.object().request_id();
        let lock = self
            .lock
            .with_owner(format!("{label}{CAMPAIGN_MARK}{campaign}"));
        Ok(match self.lease {
            Some(lease) => {
                crate::lock::check_watchdog_lease("election lease", lease)?;
                lock.with_watchdog_lease(lease)
            }
            None => lock,
        })
    }

    /// How often an observer reads again by itself: every third of the
    /// election's lease, or of the client's watchdog timeout.
    fn look_again(&self) -> Duration {
        let interval = self.client().config().renewal_interval();
        match self.lease {
            Some(lease) => interval.min(lease / 3).max(Duration::from_millis(1)),
            None => interval,
        }
    }

    /// What a granted campaign returns; announces the new leader.
    fn lead(&self, guard: FencedGuard, label: &str) -> Leadership {
        let term = guard.token();
        // Only a hint for observers (they also read again on their own),
        // so it is not awaited: the leader need not wait for it.
        let announce = announcement(self.client(), self.name(), term.to_string());
        tokio::spawn(async move { announce.send().await });
        Leadership::new(guard, label, self.clone())
    }

    /// Waits until this candidate leads, then keeps the leadership alive
    /// with the watchdog until it is resigned or dropped.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a bad name, or a label that is empty,
    /// longer than [`MAX_LEADER_LABEL_LEN`] bytes or holds a control character
    /// (nothing is sent); otherwise as [`Lock::lock`](crate::Lock::lock).
    ///
    /// # Cancel safety
    /// Cancel safe, as [`Lock::lock`](crate::Lock::lock): a dropped
    /// campaign leaves no hold, no subscription and nothing else behind.
    pub async fn campaign(&self, label: &str) -> Result<Leadership> {
        let guard = self.candidate(label)?.lock().await?;
        Ok(self.lead(guard, label))
    }

    /// One attempt: `Some` when this candidate leads now, `None` when
    /// another leads.
    ///
    /// # Errors
    /// As [`LeaderElection::campaign`] and
    /// [`Lock::try_lock`](crate::Lock::try_lock).
    ///
    /// # Cancel safety
    /// Cancel safe, as [`LeaderElection::campaign`].
    pub async fn try_campaign(&self, label: &str) -> Result<Option<Leadership>> {
        let granted = self.candidate(label)?.try_lock().await?;
        Ok(granted.map(|guard| self.lead(guard, label)))
    }

    /// Waits at most `wait` to lead: `None` when another still leads then.
    ///
    /// # Errors
    /// As [`LeaderElection::campaign`] and
    /// [`Lock::try_lock_for`](crate::Lock::try_lock_for).
    ///
    /// # Cancel safety
    /// Cancel safe, as [`LeaderElection::campaign`].
    pub async fn campaign_for(&self, label: &str, wait: Duration) -> Result<Option<Leadership>> {
        let granted = self.candidate(label)?.try_lock_for(wait).await?;
        Ok(granted.map(|guard| self.lead(guard, label)))
    }

    /// Ends whoever leads, from outside (an operator's call, as the
    /// `ferrisson force-unlock` of the inspector): deletes the lock and
    /// announces the vacancy. A deposed leader that awaits
    /// [`lost`](Leadership::lost) hears the unlock message and is told
    /// within a round trip; otherwise its watchdog finds the lock gone at
    /// its next renewal. Until it is told it may still believe it leads,
    /// so the resource's fence check is what stops its writes.
    /// Whether somebody led.
    ///
    /// # Errors
    /// As [`Lock::force_unlock`](crate::Lock::force_unlock).
    ///
    /// # Cancel safety
    /// Cancel safe: once sent, the deletion completes in the background;
    /// the announcement may then be missing (observers read again on
    /// their own).
    pub async fn depose(&self) -> Result<bool> {
        let deposed = self.lock.force_unlock().await?;
        if deposed {
            let announce = announcement(self.client(), self.name(), RESIGNED.into());
            announce.send().await;
        }
        Ok(deposed)
    }

    /// Who leads now, read in one call without campaigning; `None` when
    /// nobody does.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a bad name, [`Error::WrongType`]
    /// when the name holds something that is no fenced lock held by one
    /// owner (a read-write lock, other data), [`Error::Redis`].
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads.
    pub async fn leader(&self) -> Result<Option<Holder>> {
        Ok(self.read().await?.0)
    }

    /// The leader now, and how long its lock lives unless renewed.
    async fn read(&self) -> Result<(Option<Holder>, Option<Duration>)> {
        let info = self.lock.info().await?;
        let Some(holder) = info.holders.first() else {
            return Ok((None, None));
        };
        if info.holders.len() > 1 || info.mode.is_some() {
            return Err(Error::WrongType {
                name: self.name().to_owned(),
                key_type: "hash".into(),
                expected: ELECTION_DATA,
            });
        }
        Ok((Some(holder.clone()), info.ttl))
    }

    /// Follows the election: the first item is who leads now, then one
    /// item per change, in order, none twice: a new leader (a new holder,
    /// or a new term of the same holder), or nobody.
    ///
    /// Observers are woken by the announcements of campaigns and
    /// resignations here, and read again on their own besides, so that a
    /// missed message, a reconnection, a failover or a leader that never
    /// announces (a Redisson client, a leader that died) is caught too: a
    /// leader that is gone is reported gone at most a third of the
    /// watchdog timeout (or of the election's
    /// [`lease`](LeaderElection::lease), when shorter) after its lock is,
    /// and while nobody leads, a silent new leader is seen within a third
    /// of it. A change that
    /// lasted less than a read (a leader that came and went between two)
    /// may be missed; terms never go back (see [`LeaderElection`] for the
    /// clock they rely on when Redis lost its counter).
    ///
    /// A moment without a connection is waited out (the stream pauses and
    /// reads again); so is a subscription that fails (the stream reads on
    /// its timer alone, and tries to subscribe again one such third
    /// later). Any other error is the stream's last item;
    /// after it the stream ends (`None`, as often as it is polled). The
    /// stream holds one subscription per client and name while it lives
    /// (shared with other observers of that client) and nothing else.
    ///
    /// # Cancel safety
    /// [`LeaderObserver::next`] is cancel safe: a dropped call loses no change
    /// (the next call goes on where it stopped).
    pub fn observe(&self) -> LeaderObserver {
        let channel = Channel {
            name: keys::election_channel(self.name()),
            broadcast: true,
        };
        LeaderObserver::new(self.clone(), Watcher::new(channel, self.look_again()))
    }
}

/// What an election keeps at its name, as [`Error::WrongType`] says it.
const ELECTION_DATA: &str = "leader election (a fenced lock)";

/// Refuses a label a candidate may not campaign with.
fn check_label(label: &str) -> Result<()> {
    crate::args::label("leader", label, MAX_LEADER_LABEL_LEN)
}

/// One message on an election's channel.
struct Announcement {
    election: Object,
    channel: String,
    message: String,
}

/// The announcement `message` of the election `name`.
fn announcement(client: &Client, name: &str, message: String) -> Announcement {
    Announcement {
        election: Object::new(client.clone(), name.to_owned(), "election"),
        channel: keys::election_channel(name),
        message,
    }
}

impl Announcement {
    /// Publishes it; a failure is only logged (observers read again on
    /// their own).
    async fn send(&self) {
        self.send_on(&self.election).await;
    }

    /// [`Announcement::send`] on the connection `on` is bound to.
    async fn send_on(&self, on: &Object) {
        let mut conn = on.conn();
        let mut call = PUBLISH.key(&self.channel);
        call.arg(&self.message).arg(on.publish());
        if let Err(err) = call.invoke_async::<i64>(&mut conn).await {
            tracing::debug!(channel = %self.channel, error = %err,
                "could not announce to the election's observers");
        }
    }
}
#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::keys::campaign_label as label_of;

    #[test]
    fn labels_are_read_back_from_campaign_owner_ids() {
        let id = "0123456789abcdef0123456789abcdef";
        assert_eq!(label_of(&format!("pod-a~{id}")), Some("pod-a"));
        assert_eq!(label_of(&format!("a~b~{id}")), Some("a~b"));
        assert_eq!(label_of(&format!("~{id}")), None);
        assert_eq!(label_of("task-12"), None);
        assert_eq!(label_of("pod~1234"), None);
        assert_eq!(label_of("1"), None);
    }

    #[test]
    fn bad_labels_are_refused() {
        assert!(check_label("").is_err());
        assert!(check_label(&"x".repeat(MAX_LEADER_LABEL_LEN + 1)).is_err());
        assert!(check_label("a\nb").is_err());
        assert!(check_label(&"x".repeat(MAX_LEADER_LABEL_LEN)).is_ok());
        assert!(check_label("10.0.0.7:8080 (pod-a)").is_ok());
    }
}
