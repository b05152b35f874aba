//! Jobs: one replica runs each occurrence of a scheduled task, under a
//! lock held at most for one time, and each occurrence, once named, run
//! to its end at most once.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::time::Instant;

use crate::config::{DEFAULT_REMEMBER, MAX_DURATION, MAX_JOB_LABEL_LEN, MAX_OCCURRENCE};
use crate::engine::keys::{self, CAMPAIGN_MARK};
use crate::engine::scripts::JOB_LAST_DONE;
use crate::lock::DoneMark;
use crate::{Client, Error, Holder, Lease, Lock, LockGuard, Result};

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
/// # One run per occurrence: name it
///
/// A lock alone makes runs exclusive, not unique: a replica whose clock
/// or scheduler fires 20 ms after another's finds a 5 ms run over and the
/// lock free, and runs the occurrence again. So a scheduled job names the
/// occurrence each run serves, and that is the way to use one:
///
/// - [`every(period)`](Job::every): the scheduled instant nearest to the
///   run's start by this host's wall clock, a multiple of `period` since
///   the Unix epoch (in ms), for a schedule that fires on the wall
///   clock's grid (cron, `tokio-cron-scheduler`, a timer that sleeps to
///   the next whole period);
/// - [`occurrence(id)`](Job::occurrence): an id the scheduler gives (the
///   tick's instant in ms since the epoch, a counter, `20250601` for a
///   daily run): each id names one occurrence, and ids only grow.
///
/// The release that ends a run of an occurrence also records it as the
/// job's last occurrence done, in the same script call. A run that gets
/// the lock reads that record first: when its occurrence is at or below
/// it, the closure does not run, the lock is let go at once, and the
/// result is [`AlreadyDone`](JobRun::AlreadyDone). So a replica that fires
/// late finds the occurrence done, however long after (within
/// [`remember_for`](Job::remember_for), a day by default) and however
/// short the run was.
///
/// **The bound that remains.** With [`Job::every`], a run must start
/// within half a period of the instant it serves, by its own host's
/// clock: 500 ms for a schedule of every second, 30 s for every minute.
/// A scheduler that fires by that same clock (cron) meets it whatever the
/// clocks of the hosts differ by, as long as it fires less than half a
/// period late; one that fires by another clock (a timer started at boot,
/// a message) needs that clock's error plus its lateness below half a
/// period. With [`Job::occurrence`], the clocks do not matter at all. In
/// both, a replica that fires for an occurrence more than
/// [`remember_for`](Job::remember_for) after the last run that completed
/// runs it again, and an occurrence whose run never completed (it failed,
/// was dropped, or overran its lease) may run again.
///
/// - **At most for** ([`at_most_for`](Job::at_most_for)): the lock's lease,
///   not renewed. A runner that crashes frees the job at most that long
///   after it started; a run that takes longer loses the lock at that
///   time (its [`Lease`] says so), and another replica may start.
///   Without it, the lock is kept by the watchdog while the run lives, and
///   a crashed runner frees it at most the client's watchdog timeout
///   later ([`ClientBuilder::watchdog_timeout`](crate::ClientBuilder::watchdog_timeout),
///   30 s by default), or the job's own
///   [`watchdog_lease`](Job::watchdog_lease): a run as long as it needs,
///   and a crashed runner's job free again soon.
/// - **At least for** ([`at_least_for`](Job::at_least_for)): a run that
///   ends sooner leaves the lock held until that long after it started
///   (the release sets the key's TTL to the time left, in one script), so
///   that a replica whose clock or scheduler fires a little late skips
///   the occurrence instead of running it again. This is ShedLock's
///   `lockAtLeastFor`, for a job whose occurrences have no name: it holds
///   only while it is longer than the replicas' clocks and schedulers
///   ever differ (and shorter than the time between two occurrences). A
///   named occurrence needs none; both may be used together.
///
/// The lock is a Redisson `RLock` named as the job: a Java service that
/// locks the same name excludes the runs here, and they it. Every run is
/// an owner of its own, `<label>~<run-id>` (the layout the leader election
/// uses, see `lua/README.md`), so two runs in one process exclude each
/// other as two processes' do, and the inspector shows the label of the
/// replica that runs the job. A job writes no key besides the lock, the
/// short-lived latches that make its requests safe to send again, and,
/// for named occurrences, its last occurrence done: a string at
/// `ferrisson_job_done:{name}` ([`layout::job_done`](crate::layout::job_done)),
/// in the lock's Cluster slot, holding the id, whose TTL is
/// [`remember_for`](Job::remember_for).
///
/// ```rust,no_run
/// # async fn run(client: ferrisson::Client) -> ferrisson::Result<()> {
/// use std::time::Duration;
/// use ferrisson::JobRun;
///
/// // Fired every hour on the hour by each replica's scheduler.
/// let job = client
///     .job("reports:hourly")
///     .every(Duration::from_secs(3600))
///     .at_most_for(Duration::from_secs(600))
///     .label("pod-a");
/// match job.run(|lease| async move {
///     // The work; it may check `lease.is_lost()` between steps and stop.
///     let _ = lease.remaining();
///     42
/// }).await? {
///     JobRun::Ran(n) => println!("ran: {n}"),
///     JobRun::Skipped { holder } => println!("another replica runs it: {holder:?}"),
///     JobRun::AlreadyDone { occurrence, .. } => println!("{occurrence} ran elsewhere"),
///     JobRun::Overran(_) => eprintln!("the lease ran out before the run ended"),
///     JobRun::Unreleased { error, .. } => eprintln!("ran, but the release failed: {error}"),
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct Job {
    lock: Lock,
    at_most: Option<Duration>,
    /// The renewed lease ([`Job::watchdog_lease`]); `None`: the client's
    /// watchdog timeout.
    watchdog_lease: Option<Duration>,
    at_least: Duration,
    wait: Duration,
    label: String,
    occurrence: Occurrence,
    remember: Option<Duration>,
}

/// How a job names the occurrence its runs serve.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Occurrence {
    /// Not named: runs are only exclusive.
    Unnamed,
    /// The multiple of this period nearest to the run's start.
    Every(Duration),
    /// Given.
    Id(u64),
}

impl Client {
    /// The job `name`, which is also the key of its lock. Nothing is sent
    /// until [`Job::run`].
    ///
    /// For a scheduled job, name the occurrences ([`Job::every`] or
    /// [`Job::occurrence`]): a job without them only keeps two runs from
    /// overlapping, and a replica that fires after a short run ended runs
    /// the same occurrence again (unless [`Job::at_least_for`] outlasts
    /// the replicas' differences).
    pub fn job(&self, name: impl Into<String>) -> Job {
        Job {
            lock: self.lock(name).called("job", JOB_DATA),
            at_most: None,
            watchdog_lease: None,
            at_least: Duration::ZERO,
            wait: Duration::ZERO,
            label: DEFAULT_LABEL.to_owned(),
            occurrence: Occurrence::Unnamed,
            remember: None,
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
        holder: Option<Holder>,
    },
    /// The occurrence this run serves ([`Job::every`], [`Job::occurrence`])
    /// was run to its end already, by this replica or another: the
    /// closure did not run, and the lock was let go at once.
    AlreadyDone {
        /// The occurrence this run serves.
        occurrence: u64,
        /// The job's last occurrence done: this one, or a later one.
        last_done: u64,
    },
    /// The closure ran with the lock held to its end, but the release
    /// after it (or the keep of [`Job::at_least_for`]) failed: the lock
    /// ends with its lease instead, the watchdog timeout (or the
    /// [`Job::watchdog_lease`], or the [`Job::at_most_for`] lease) after the run's last renewal, which may
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
                JobRun::AlreadyDone {
                    occurrence: a,
                    last_done: c,
                },
                JobRun::AlreadyDone {
                    occurrence: b,
                    last_done: d,
                },
            ) => a == b && c == d,
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
            JobRun::Skipped { .. } | JobRun::AlreadyDone { .. } => None,
        }
    }

    /// Whether the closure ran (in time or not).
    pub fn ran(&self) -> bool {
        !matches!(self, JobRun::Skipped { .. } | JobRun::AlreadyDone { .. })
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

    /// Keeps each run's lock with a renewed lease of `lease` instead of the
    /// client's watchdog timeout: the lock is taken with a TTL of `lease`
    /// and the client's watchdog renews it every third of it while the run
    /// lives (the client's other locks keep the client's timeout).
    ///
    /// Unlike [`Job::at_most_for`], whose lease is not renewed and so
    /// bounds the run, this one bounds only the time a crashed or cut-off
    /// runner keeps the job: another replica may run it about `lease`
    /// after the runner's last renewal, between two thirds of `lease` and
    /// `lease` after the runner died or was cut off (measured in
    /// tests/job.rs, 5 runs, with a 1.5 s lease on a client whose
    /// watchdog timeout is 30 s: a waiting replica ran it 1.01-1.05 s
    /// after the runner was cut off from Redis), while a live run keeps
    /// it as long as it takes. The price of a short lease: a runner whose renewals are held
    /// up for more than two thirds of it loses the lock
    /// ([`JobRun::Overran`]), and one renewal every third of it per run.
    ///
    /// Checked by [`Job::run`]: at least
    /// [`MIN_WATCHDOG_TIMEOUT`](crate::config::MIN_WATCHDOG_TIMEOUT), at
    /// most [`MAX_DURATION`](crate::config::MAX_DURATION), and not with
    /// [`Job::at_most_for`].
    pub fn watchdog_lease(mut self, lease: Duration) -> Job {
        self.watchdog_lease = Some(lease);
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
    /// kept lock's TTL back to the watchdog timeout (or the
    /// [`Job::watchdog_lease`]): the job then stays taken that long, never
    /// less than asked.
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

    /// Names the occurrence each run serves by the wall clock: the multiple
    /// of `period` since the Unix epoch nearest to the run's start, as ms
    /// since the epoch (for a period of a minute, the start of the nearest
    /// minute). Use it when every replica's scheduler fires on that grid:
    /// cron and `tokio-cron-scheduler` fire by the wall clock; a
    /// `tokio::time::interval` does not, unless started on a whole period.
    /// A run of an occurrence done already skips it
    /// ([`JobRun::AlreadyDone`]); see [`Job`] for what holds and the bound
    /// that remains: a run must start within half a period of its
    /// scheduled instant by its host's clock (500 ms for a period of a
    /// second). Replaces [`Job::occurrence`].
    ///
    /// Checked by [`Job::run`]: at least 1 ms, a whole number of ms, at most
    /// [`MAX_DURATION`](crate::config::MAX_DURATION). Every replica of a
    /// job must give the same period, or name its occurrences the same way.
    pub fn every(mut self, period: Duration) -> Job {
        self.occurrence = Occurrence::Every(period);
        self
    }

    /// Names the occurrence the runs of this handle serve: `id`, which the
    /// scheduler gives (the tick's instant in ms since the epoch, a
    /// counter, `20250601` for a daily run). Ids only grow: a run of `id`
    /// skips when `id` or a later occurrence is done
    /// ([`JobRun::AlreadyDone`]), whatever the replicas' clocks. The
    /// handle is cheap to clone: `job.clone().occurrence(tick).run(...)`.
    /// Replaces [`Job::every`].
    ///
    /// Checked by [`Job::run`]: at most [`MAX_OCCURRENCE`].
    pub fn occurrence(mut self, id: u64) -> Job {
        self.occurrence = Occurrence::Id(id);
        self
    }

    /// How long the job remembers its last occurrence done after the run
    /// that completed it: a replica that fires for that occurrence (or an
    /// earlier one) later than that runs it again. [`DEFAULT_REMEMBER`] by
    /// default (a day; with [`Job::every`], ten periods when longer, at
    /// most a year). Each completed run sets it anew, so a job that runs
    /// more often than this always has its record.
    ///
    /// Checked by [`Job::run`]: at least 1 ms, at most
    /// [`MAX_DURATION`](crate::config::MAX_DURATION).
    pub fn remember_for(mut self, remember: Duration) -> Job {
        self.remember = Some(remember);
        self
    }

    /// The occurrence a run started now would serve: `None` when the job
    /// names none ([`Job::every`], [`Job::occurrence`]).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] as [`Job::run`] for a bad period or id.
    pub fn current_occurrence(&self) -> Result<Option<u64>> {
        match self.occurrence {
            Occurrence::Unnamed => Ok(None),
            Occurrence::Id(id) => Ok(Some(id)),
            Occurrence::Every(period) => {
                let period = every_ms(period)?;
                let now = SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .map_err(|_| Error::invalid("this host's clock is before 1970"))?
                    .as_millis() as u64;
                // Rounded half up: the nearest multiple of the period.
                let instant = (now + period / 2) / period * period;
                Ok(Some(instant.min(MAX_OCCURRENCE)))
            }
        }
    }

    /// How long the record of the last occurrence done lives, in ms.
    fn remember_ms(&self) -> Result<u64> {
        let remember = match (self.remember, self.occurrence) {
            (Some(remember), _) => remember,
            (None, Occurrence::Every(period)) => {
                DEFAULT_REMEMBER.max(period.saturating_mul(10).min(MAX_DURATION))
            }
            (None, _) => DEFAULT_REMEMBER,
        };
        crate::args::duration("remember-for", remember, MAX_DURATION)
    }

    /// Waits at most `wait` for a job another replica runs before skipping
    /// it (zero, the default: skips at once).
    pub fn wait(mut self, wait: Duration) -> Job {
        self.wait = wait;
        self
    }

    /// The label runs from this handle show to others (in
    /// [`Holder::label`] and the inspector): a host or pod name, say.
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
        if let Some(lease) = self.watchdog_lease {
            if self.at_most.is_some() {
                return Err(Error::invalid(
                    "a job takes a watchdog lease (renewed) or an at-most-for (not renewed), not both",
                ));
            }
            crate::lock::check_watchdog_lease("job watchdog lease", lease)?;
        }
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
        if let Occurrence::Id(id) = self.occurrence {
            if id > MAX_OCCURRENCE {
                return Err(Error::invalid(format!(
                    "an occurrence must be at most {MAX_OCCURRENCE}, got {id}"
                )));
            }
        }
        if let Occurrence::Every(period) = self.occurrence {
            every_ms(period)?;
        }
        self.remember_ms()?;
        Ok(())
    }

    /// Runs `work` if this runner gets the job's lock (waiting at most
    /// [`Job::wait`] for it) and, for a named occurrence ([`Job::every`],
    /// [`Job::occurrence`]), that occurrence is not done yet; then releases
    /// the lock, recording the occurrence as done in the same script call,
    /// or with [`Job::at_least_for`] leaves it held until that long after
    /// the start. `work` gets a [`Lease`], to stop in time when the
    /// lease is lost. The occurrence is named when `run` is called, before
    /// any wait.
    ///
    /// An occurrence is recorded as done only by the release of a run
    /// whose `work` returned while its lease held ([`JobRun::Ran`], and
    /// [`JobRun::Unreleased`] when that release may have got through): not
    /// by a run that overran its lease, was dropped, or whose `work`
    /// panicked.
    ///
    /// A release that fails on the connection (after the client's
    /// [`release_attempts`](crate::ClientBuilder::release_attempts)) is
    /// logged, and the run still reported as run: the lock then expires
    /// with its lease.
    ///
    /// # Errors
    /// Before anything is sent: [`Error::InvalidArgument`] for an empty
    /// or too long name, a bad label, a zero or too long duration, a
    /// watchdog lease under
    /// [`MIN_WATCHDOG_TIMEOUT`](crate::config::MIN_WATCHDOG_TIMEOUT) or
    /// with an "at most for", an
    /// "at least for" longer than the "at most for", a period that is no
    /// whole number of ms, an occurrence over [`MAX_OCCURRENCE`]. Then as
    /// [`Lock::try_lock_for`] ([`Error::WrongType`] when the name, or the
    /// record of its last occurrence done, holds other data;
    /// [`Error::Redis`]); an error reading that record lets the lock go
    /// in the background, and `work` does not run.
    ///
    /// # Cancel safety
    /// Cancel safe, as [`Lock::lock`]: dropped while it waits for the
    /// lock, it leaves no hold and nothing else behind. Dropped while it
    /// reads the last occurrence done, or while `work` runs (or when
    /// `work` panics), `work` is dropped too and the lock is let go in the
    /// background as by a dropped [`LockGuard`], kept until the "at least
    /// for" as after a run, and the occurrence is not recorded as done.
    /// Dropped while the release after `work` is on its way, the release
    /// (with the record) goes on in the background.
    pub async fn run<F, Fut, T>(&self, work: F) -> Result<JobRun<T>>
    where
        F: FnOnce(Lease) -> Fut,
        Fut: Future<Output = T>,
    {
        self.check()?;
        let occurrence = self.current_occurrence()?;
        let run = self.lock.object().request_id();
        let mut lock = self
            .lock
            .with_owner(format!("{}{CAMPAIGN_MARK}{run}", self.label));
        if let Some(lease) = self.watchdog_lease {
            lock = lock.with_watchdog_lease(lease);
        }
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
        let lease = guard.lease_handle();
        // "At least for" counts from the start of the run: with a lease,
        // from the send of the granted acquire, as the lease does (its
        // deadline less the lease); else from now.
        let now = Instant::now();
        let start = match self.at_most {
            Some(at_most) => lease
                .deadline()
                .checked_sub(at_most)
                .unwrap_or(now)
                .min(now),
            None => now,
        };
        let mut done = None;
        if let Some(occurrence) = occurrence {
            // Read under the lock: a run of this occurrence that completed
            // recorded it in the release that let the lock go, before this
            // grant. (An error drops the guard: released in the background.)
            let last_done = self.last_done().await?;
            if last_done.is_some_and(|last| last >= occurrence) {
                if let Err(err) = guard.unlock().await {
                    tracing::debug!(job = %self.name(), error = %err,
                        "release after a skipped occurrence failed; the lock expires with its lease");
                }
                return Ok(JobRun::AlreadyDone {
                    occurrence,
                    last_done: last_done.unwrap_or(occurrence),
                });
            }
            done = Some(DoneMark {
                key: keys::job_done(self.name()),
                occurrence,
                ttl_ms: self.remember_ms()?,
            });
        }
        if !self.at_least.is_zero() {
            // Checked with the job's settings: the lock's kind keeps, and
            // "at least for" is at most MAX_DURATION.
            guard.keep_until(start + self.at_least)?;
        }
        let value = work(lease.clone()).await;
        Ok(self.finish(guard, &lease, value, done).await)
    }

    /// The job's last occurrence done, read from Redis.
    async fn last_done(&self) -> Result<Option<u64>> {
        let done: i64 = (self.lock.object())
            .run(JOB_LAST_DONE.key(keys::job_done(self.name())))
            .await?;
        Ok(u64::try_from(done).ok())
    }

    /// Releases a run's hold, with `done` recording its occurrence, and
    /// says how the run went.
    async fn finish<T>(
        &self,
        mut guard: LockGuard,
        lease: &Lease,
        value: T,
        done: Option<DoneMark>,
    ) -> JobRun<T> {
        if lease.is_lost() {
            // Not sent: the lock may be someone else's by now.
            drop(guard);
            return JobRun::Overran(value);
        }
        // Only now: a run dropped before this point records nothing.
        if let Some(done) = done {
            guard.mark_done(done);
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
    async fn holder(&self) -> Result<Option<Holder>> {
        Ok(self.lock.info().await?.holders.into_iter().next())
    }
}

/// A period of [`Job::every`] in ms, checked.
/// What a job keeps at its name, as [`Error::WrongType`] says it.
const JOB_DATA: &str = "job (a lock)";

fn every_ms(period: Duration) -> Result<u64> {
    let ms = crate::args::duration("every", period, MAX_DURATION)?;
    if Duration::from_millis(ms) != period {
        return Err(Error::invalid(format!(
            "every must be a whole number of milliseconds, got {period:?}"
        )));
    }
    Ok(ms)
}
