//! Jobs: one replica runs each occurrence of a scheduled task, under a
//! lock held at most for one time and at least for another.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::config::MAX_DURATION;
use crate::engine::keys::{campaign_label, CAMPAIGN_MARK};
use crate::engine::takeover::Takeover;
use crate::engine::watchdog::LeaseState;
use crate::{Client, Error, Lock, LockGuard, Result};

/// The longest label a runner may give, in bytes.
pub const MAX_JOB_LABEL_LEN: usize = 256;

/// The label of a runner that gave none.
const DEFAULT_LABEL: &str = "job";

/// A job, from [`Client::job`]: a task that several replicas schedule
/// and exactly one of them runs each time, as ShedLock's
/// `@SchedulerLock` does for Java services.
///
/// [`run`](Job::run) takes the job's lock without waiting (or waiting at
/// most [`wait`](Job::wait)), runs the closure while it holds it, and
/// releases it; when another replica holds it, the closure is not run and
/// the result says [`Skipped`](JobRun::Skipped), with who holds it.
///
/// - **At most for** ([`at_most_for`](Job::at_most_for)): the lock's lease,
///   not renewed. A runner that crashes frees the job at most that long
///   after it started; a run that takes longer loses the lock at that
///   time (its [`JobLease`] says so), and another replica may start.
///   Without it, the lock is kept by the watchdog while the run lives, and
///   a crashed runner frees it at most the client's watchdog timeout
///   later ([`ClientBuilder::watchdog_timeout`](crate::ClientBuilder::watchdog_timeout),
///   30 s by default).
/// - **At least for** ([`at_least_for`](Job::at_least_for)): a run that
///   ends sooner leaves the lock held until that long after it started
///   (the release sets the key's TTL to the time left, in one script), so
///   that a replica whose clock or scheduler fires a little late skips
///   the occurrence instead of running it again. Choose it longer than
///   the replicas' clocks and schedulers ever differ, and shorter than the
///   time between two occurrences.
///
/// The lock is a Redisson `RLock` named as the job: a Java service that
/// locks the same name excludes the runs here, and they it. Every run is
/// an owner of its own, `<label>~<run-id>` (the layout the leader election
/// uses, see `lua/README.md`), so two runs in one process exclude each
/// other as two processes' do, and the inspector shows the label of the
/// replica that runs the job. A job writes no key besides the lock and
/// the short-lived latches that make its requests safe to send again.
///
/// ```rust,no_run
/// # async fn run(client: ferrisson::Client) -> ferrisson::Result<()> {
/// use std::time::Duration;
/// use ferrisson::JobRun;
///
/// let job = client
///     .job("reports:nightly")
///     .at_most_for(Duration::from_secs(600))
///     .at_least_for(Duration::from_secs(30))
///     .label("pod-a");
/// match job.run(|lease| async move {
///     // The work; it may check `lease.is_lost()` between steps and stop.
///     let _ = lease.remaining();
///     42
/// }).await? {
///     JobRun::Ran(n) => println!("ran: {n}"),
///     JobRun::Skipped { holder } => println!("another replica runs it: {holder:?}"),
///     JobRun::Overran(_) => eprintln!("the lease ran out before the run ended"),
///     JobRun::Unreleased { error, .. } => eprintln!("ran, but not released: {error}"),
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct Job {
    lock: Lock,
    at_most: Option<Duration>,
    at_least: Duration,
    wait: Duration,
    label: String,
}

impl Client {
    /// The job `name`, which is also the key of its lock. Nothing is sent
    /// until [`Job::run`].
    pub fn job(&self, name: impl Into<String>) -> Job {
        Job {
            lock: self.lock(name),
            at_most: None,
            at_least: Duration::ZERO,
            wait: Duration::ZERO,
            label: DEFAULT_LABEL.to_owned(),
        }
    }
}

/// What [`Job::run`] did.
#[derive(Debug, Clone)]
#[must_use = "a skipped job did not run"]
pub enum JobRun<T> {
    /// The closure ran, with the lock held to its end; what it returned.
    Ran(T),
    /// The closure ran, but its lease was lost before it ended (it ran
    /// out, or the lock was deleted or lost in Redis): another replica may
    /// have started the job meanwhile. What it returned.
    Overran(T),
    /// Another runner holds the job: the closure did not run.
    Skipped {
        /// Who holds it, as read right after the refusal; `None` when it
        /// was let go meanwhile.
        holder: Option<JobHolder>,
    },
    /// The closure ran with the lock held to its end, but the release
    /// after it (or the keep of [`Job::at_least_for`]) failed: the lock
    /// ends with its lease instead, the watchdog timeout (or the
    /// [`Job::at_most_for`] lease) after the run's last renewal, which may
    /// be sooner than "at least for" asked or later than the run's end.
    Unreleased {
        /// What the closure returned.
        value: T,
        /// Why the release failed.
        error: Arc<Error>,
    },
}

impl<T: PartialEq> PartialEq for JobRun<T> {
    /// Outcomes are equal when their kind, value and holder are; two
    /// [`JobRun::Unreleased`] when their errors also say the same.
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (JobRun::Ran(a), JobRun::Ran(b)) | (JobRun::Overran(a), JobRun::Overran(b)) => a == b,
            (JobRun::Skipped { holder: a }, JobRun::Skipped { holder: b }) => a == b,
            (
                JobRun::Unreleased { value: a, error: e },
                JobRun::Unreleased { value: b, error: f },
            ) => a == b && e.to_string() == f.to_string(),
            _ => false,
        }
    }
}

impl<T: Eq> Eq for JobRun<T> {}

impl<T> JobRun<T> {
    /// What the closure returned, when it ran (in time or not).
    pub fn value(self) -> Option<T> {
        match self {
            JobRun::Ran(value) | JobRun::Overran(value) | JobRun::Unreleased { value, .. } => {
                Some(value)
            }
            JobRun::Skipped { .. } => None,
        }
    }

    /// Whether the closure ran (in time or not).
    pub fn ran(&self) -> bool {
        !matches!(self, JobRun::Skipped { .. })
    }
}

/// Who holds a job, in [`JobRun::Skipped`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct JobHolder {
    /// The label the holder runs it with ([`Job::label`]); `None` for a
    /// holder that is no job runner (a Redisson `RLock`, a plain
    /// [`Lock`]).
    pub label: Option<String>,
    /// The holding client's id ([`Client::id`], or a Redisson client's
    /// UUID).
    pub client_id: String,
    /// The owner within that client: `<label>~<run-id>` for a run.
    pub owner_id: String,
    /// How long the lock lives unless renewed (a run's lease, or the time
    /// left of its "at least for"); `None` without a TTL.
    pub ttl: Option<Duration>,
}

/// A run's view of its lease, given to the closure of [`Job::run`]: so it
/// can stop in time.
#[derive(Debug, Clone)]
pub struct JobLease {
    state: Arc<LeaseState>,
    renewed: bool,
    /// The listening for the run's hold ended by another.
    takeover: Option<Arc<Takeover>>,
}

impl JobLease {
    /// Whether the lease is known lost, or has run out by this process's
    /// clock (as [`LockGuard::is_lease_lost`]): another replica may run
    /// the job now.
    pub fn is_lost(&self) -> bool {
        self.state.is_lost()
    }

    /// Resolves when the lease is lost (as [`LockGuard::lease_lost`]:
    /// also within a round trip when the run's lock is force-unlocked);
    /// never while it is safely held.
    ///
    /// # Cancel safety
    /// Cancel safe: it only waits.
    pub async fn lost(&self) {
        if let Some(takeover) = &self.takeover {
            takeover.start();
        }
        self.state.wait_lost().await;
    }

    /// How long the lease runs from now unless renewed: with
    /// [`Job::at_most_for`], what is left of it; else, until the
    /// watchdog's next renewal would be too late. Zero once lost.
    pub fn remaining(&self) -> Duration {
        match self.state.is_lost() {
            true => Duration::ZERO,
            false => self
                .state
                .deadline()
                .saturating_duration_since(Instant::now()),
        }
    }

    /// Whether the watchdog renews the lease (the job has no
    /// [`Job::at_most_for`]).
    pub fn is_renewed(&self) -> bool {
        self.renewed
    }
}

impl Job {
    /// The job's name: the key of its lock.
    pub fn name(&self) -> &str {
        self.lock.name()
    }

    /// The client this handle belongs to.
    pub fn client(&self) -> &Client {
        self.lock.client()
    }

    /// Holds the lock for at most `lease` from the start of each run, not
    /// renewed. Checked by [`Job::run`]: at least 1 ms, at most
    /// [`MAX_DURATION`](crate::config::MAX_DURATION), and not shorter than
    /// [`Job::at_least_for`].
    pub fn at_most_for(mut self, lease: Duration) -> Job {
        self.at_most = Some(lease);
        self
    }

    /// Keeps the lock held until `hold` after the start of each run, also
    /// when the run ends sooner (zero, the default: released when the run
    /// ends). Checked by [`Job::run`]: at most
    /// [`MAX_DURATION`](crate::config::MAX_DURATION), and with
    /// [`Job::at_most_for`], not longer than it.
    ///
    /// Without [`Job::at_most_for`], a watchdog renewal already on its way
    /// when the run ends may reach Redis after the release and set the
    /// kept lock's TTL back to the watchdog timeout: the job then stays
    /// taken that long, never less than asked.
    ///
    /// The keep only sets the lock's TTL (its first write grows no
    /// memory), so a Redis out of memory (`maxmemory` reached,
    /// `noeviction`) still keeps it. A keep or release that fails all the
    /// same (the connection lost) is [`JobRun::Unreleased`], never a plain
    /// [`JobRun::Ran`].
    pub fn at_least_for(mut self, hold: Duration) -> Job {
        self.at_least = hold;
        self
    }

    /// Waits at most `wait` for a job another replica runs before skipping
    /// it (zero, the default: skips at once).
    pub fn wait(mut self, wait: Duration) -> Job {
        self.wait = wait;
        self
    }

    /// The label runs from this handle show to others (in
    /// [`JobHolder::label`] and the inspector): a host or pod name, say.
    /// Checked by [`Job::run`]: not empty, at most [`MAX_JOB_LABEL_LEN`]
    /// bytes, no control characters. `job` by default.
    pub fn label(mut self, label: impl Into<String>) -> Job {
        self.label = label.into();
        self
    }

    /// Refuses settings that contradict each other or the limits.
    fn check(&self) -> Result<()> {
        crate::args::name("job", self.name())?;
        crate::args::label("job", &self.label, MAX_JOB_LABEL_LEN)?;
        if let Some(at_most) = self.at_most {
            crate::args::duration("at-most-for", at_most, MAX_DURATION)?;
            if self.at_least > at_most {
                return Err(Error::invalid(format!(
                    "at-least-for ({:?}) must not be longer than at-most-for ({at_most:?})",
                    self.at_least
                )));
            }
        }
        if self.at_least > MAX_DURATION {
            return Err(Error::invalid(format!(
                "at-least-for must be at most {MAX_DURATION:?}, got {:?}",
                self.at_least
            )));
        }
        if self.wait > MAX_DURATION {
            return Err(Error::invalid(format!(
                "wait must be at most {MAX_DURATION:?}, got {:?}",
                self.wait
            )));
        }
        Ok(())
    }

    /// Runs `work` if this runner gets the job's lock (waiting at most
    /// [`Job::wait`] for it), then releases the lock, or with
    /// [`Job::at_least_for`] leaves it held until that long after the
    /// start. `work` gets a [`JobLease`], to stop in time when the lease is
    /// lost.
    ///
    /// A release that fails on the connection (after the client's
    /// [`release_attempts`](crate::ClientBuilder::release_attempts)) is
    /// logged, and the run still reported as run: the lock then expires
    /// with its lease.
    ///
    /// # Errors
    /// Before anything is sent: [`Error::InvalidArgument`] for an empty
    /// or too long name, a bad label, a zero or too long duration, or an
    /// "at least for" longer than the "at most for". Then as
    /// [`Lock::try_lock_for`] ([`Error::WrongType`] when the name holds
    /// other data, [`Error::Redis`]).
    ///
    /// # Cancel safety
    /// Cancel safe, as [`Lock::lock`]: dropped while it waits for the
    /// lock, it leaves no hold and nothing else behind. Dropped while
    /// `work` runs (or when `work` panics), `work` is dropped too and the
    /// lock is let go in the background as by a dropped [`LockGuard`],
    /// kept until the "at least for" as after a run.
    pub async fn run<F, Fut, T>(&self, work: F) -> Result<JobRun<T>>
    where
        F: FnOnce(JobLease) -> Fut,
        Fut: Future<Output = T>,
    {
        self.check()?;
        let run = self.client().request_id();
        let lock = self
            .lock
            .with_owner(format!("{}{CAMPAIGN_MARK}{run}", self.label));
        let granted = match self.at_most {
            Some(lease) => lock.try_lock_with_lease(self.wait, lease).await?,
            None if self.wait.is_zero() => lock.try_lock().await?,
            None => lock.try_lock_for(self.wait).await?,
        };
        let Some(mut guard) = granted else {
            // Who holds it is only a courtesy: a failed read is no reason
            // to call the skip an error.
            let holder = self.holder().await.unwrap_or_else(|err| {
                tracing::debug!(job = %self.name(), error = %err, "could not read the job's holder");
                None
            });
            return Ok(JobRun::Skipped { holder });
        };
        let state = guard.lease_state().expect("a new guard holds");
        // "At least for" counts from the start of the run: with a lease,
        // from the send of the granted acquire, as the lease does (its
        // deadline less the lease); else from now.
        let now = Instant::now();
        let start = match self.at_most {
            Some(at_most) => state
                .deadline()
                .checked_sub(at_most)
                .unwrap_or(now)
                .min(now),
            None => now,
        };
        if !self.at_least.is_zero() {
            guard.keep_until(start + self.at_least);
        }
        let lease = JobLease {
            takeover: guard.takeover(),
            state,
            renewed: self.at_most.is_none(),
        };
        let value = work(lease.clone()).await;
        Ok(self.finish(guard, &lease, value).await)
    }

    /// Releases a run's hold and says how the run went.
    async fn finish<T>(&self, guard: LockGuard, lease: &JobLease, value: T) -> JobRun<T> {
        if lease.is_lost() {
            // Not sent: the lock may be someone else's by now.
            drop(guard);
            return JobRun::Overran(value);
        }
        match guard.unlock().await {
            Ok(()) => JobRun::Ran(value),
            Err(Error::LeaseLost { .. } | Error::NotHeld { .. }) => JobRun::Overran(value),
            Err(err) => {
                tracing::warn!(job = %self.name(), error = %err,
                    "release of a finished run failed; the lock expires with its lease");
                JobRun::Unreleased {
                    value,
                    error: Arc::new(err),
                }
            }
        }
    }

    /// Who holds the job now.
    async fn holder(&self) -> Result<Option<JobHolder>> {
        let info = self.lock.info().await?;
        Ok(info.holders.first().map(|holder| JobHolder {
            label: campaign_label(&holder.owner_id).map(str::to_owned),
            client_id: holder.client_id.clone(),
            owner_id: holder.owner_id.clone(),
            ttl: info.ttl,
        }))
    }
}
