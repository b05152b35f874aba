//! The blocking job and the lease its work sees.

use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinHandle;

use super::Runtime;
use crate::{Error, JobRun, Result};

/// A job, from [`blocking::Client::job`](super::Client::job): the blocking
/// face of [`crate::Job`], with the same settings and the same guarantees
/// (read [`crate::Job`] for them: name the occurrences of a scheduled job
/// with [`Job::every`] or [`Job::occurrence`]).
///
/// [`Job::run`] runs a plain closure on the calling thread while the job's
/// lock is held; the client's runtime keeps the lock meanwhile (the
/// watchdog renews it, or the [`Job::at_most_for`] lease runs).
///
/// ```rust,no_run
/// # fn run() -> ferrisson::Result<()> {
/// use std::time::Duration;
/// use ferrisson::JobRun;
///
/// let client = ferrisson::blocking::Client::connect("redis://127.0.0.1/")?;
/// // Started every hour on the hour by cron, on each replica.
/// let job = client
///     .job("reports:hourly")
///     .every(Duration::from_secs(3600))
///     .at_most_for(Duration::from_secs(600))
///     .label("host-a");
/// match job.run(|lease| {
///     // The work; it may check `lease.is_lost()` between steps and stop.
///     lease.remaining()
/// })? {
///     JobRun::Ran(_) => println!("ran"),
///     JobRun::Skipped { holder } => println!("another replica runs it: {holder:?}"),
///     JobRun::AlreadyDone { occurrence, .. } => println!("{occurrence} ran elsewhere"),
///     JobRun::Overran(_) => eprintln!("the lease ran out before the run ended"),
///     JobRun::Unreleased { error, .. } => eprintln!("ran, but the release failed: {error}"),
/// }
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Job {
    inner: crate::Job,
    rt: Arc<Runtime>,
}

impl std::fmt::Debug for Job {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("blocking::Job")
            .field("inner", &self.inner)
            .finish()
    }
}

impl Job {
    pub(super) fn new(inner: crate::Job, rt: &Arc<Runtime>) -> Job {
        Job {
            inner,
            rt: Arc::clone(rt),
        }
    }

    /// The same job with other settings.
    fn map(self, change: impl FnOnce(crate::Job) -> crate::Job) -> Job {
        Job {
            inner: change(self.inner),
            rt: self.rt,
        }
    }

    /// The job's name: the key of its lock.
    pub fn name(&self) -> &str {
        self.inner.name()
    }

    /// Holds the lock for at most `lease` from the start of each run, not
    /// renewed, as [`crate::Job::at_most_for`].
    pub fn at_most_for(self, lease: Duration) -> Job {
        self.map(|job| job.at_most_for(lease))
    }

    /// Each run's own watchdog lease, renewed every third of it, as
    /// [`crate::Job::watchdog_lease`]: a runner cut off is succeeded within
    /// about that long.
    pub fn watchdog_lease(self, lease: Duration) -> Job {
        self.map(|job| job.watchdog_lease(lease))
    }

    /// Keeps the lock held until `hold` after the start of each run, also
    /// when the run ends sooner, as [`crate::Job::at_least_for`].
    pub fn at_least_for(self, hold: Duration) -> Job {
        self.map(|job| job.at_least_for(hold))
    }

    /// Names the occurrence each run serves by the wall clock: the multiple
    /// of `period` since the Unix epoch nearest to the run's start, as
    /// [`crate::Job::every`]. Replaces [`Job::occurrence`].
    pub fn every(self, period: Duration) -> Job {
        self.map(|job| job.every(period))
    }

    /// Names the occurrence the runs of this handle serve, as
    /// [`crate::Job::occurrence`]: ids only grow. The handle is cheap to
    /// clone: `job.clone().occurrence(tick).run(...)`. Replaces
    /// [`Job::every`].
    pub fn occurrence(self, id: u64) -> Job {
        self.map(|job| job.occurrence(id))
    }

    /// How long the job remembers its last occurrence done, as
    /// [`crate::Job::remember_for`].
    pub fn remember_for(self, remember: Duration) -> Job {
        self.map(|job| job.remember_for(remember))
    }

    /// Waits at most `wait` for a job another replica runs before skipping
    /// it (zero, the default: skips at once).
    pub fn wait(self, wait: Duration) -> Job {
        self.map(|job| job.wait(wait))
    }

    /// The label runs from this handle show to others, as
    /// [`crate::Job::label`].
    pub fn label(self, label: impl Into<String>) -> Job {
        self.map(|job| job.label(label))
    }

    /// The occurrence a run started now would serve: `None` when the job
    /// names none.
    ///
    /// # Errors
    /// As [`crate::Job::current_occurrence`].
    pub fn current_occurrence(&self) -> Result<Option<u64>> {
        self.inner.current_occurrence()
    }

    /// Runs `work` on the calling thread if this runner gets the job's lock
    /// (waiting at most [`Job::wait`] for it) and its occurrence is not done
    /// yet, then releases the lock (recording the occurrence as done in the
    /// same script call), as [`crate::Job::run`]; blocks until then.
    ///
    /// `work` gets a [`Lease`], to stop in time when the lease is lost.
    /// It runs on the calling thread, outside the client's runtime, so it
    /// may make blocking calls of its own (of this client too) and run a
    /// runtime of its own. When `work` panics, the panic goes on from this
    /// call, the lock is let go in the background (kept until the "at least
    /// for", as after a run), and the occurrence is not recorded as done.
    ///
    /// # Errors
    /// As [`crate::Job::run`] (bad settings are refused before anything is
    /// sent), and [`Error::Blocking`] when the call cannot be run, or
    /// [`Error::RuntimeGone`] when the client's runtime shut down under
    /// it: before `work` ran, the lock is then let go; after it, the
    /// release goes on in the background and what `work` returned is
    /// lost.
    pub fn run<T>(&self, work: impl FnOnce(&Lease) -> T) -> Result<JobRun<T>> {
        let handle = self.rt.handle().ok_or(Error::RuntimeGone)?;
        // The async run goes on the runtime, as a task; its work only hands
        // the lease to this thread and waits for `work`'s end here.
        let (lease_tx, mut lease_rx) = tokio::sync::oneshot::channel();
        let (done_tx, done_rx) = tokio::sync::oneshot::channel::<()>();
        let job = self.inner.clone();
        let task = handle.spawn(async move {
            job.run(move |lease| async move {
                // No caller to run `work`, or `work` panicked: never end as
                // a completed run (the task is aborted).
                if lease_tx.send(lease).is_err() || done_rx.await.is_err() {
                    std::future::pending::<()>().await;
                }
            })
            .await
        });
        let mut task = Aborting(Some(task));
        let started = self.rt.run(async {
            let Some(running) = task.0.as_mut() else {
                return Err(Error::Blocking("the job's run is gone".into()));
            };
            tokio::select! {
                Ok(lease) = &mut lease_rx => Ok(Err(lease)),
                ended = running => Ok(Ok(ended)),
            }
        })?;
        let lease = match started {
            Ok(ended) => return without_value(ended),
            Err(lease) => Lease::new(lease, Arc::clone(&self.rt)),
        };
        // A panic in `work` drops `task` (aborted: the lock let go, the
        // occurrence not recorded) and `done_tx`.
        let value = work(&lease);
        let Some(running) = task.0.take() else {
            return Err(Error::Blocking("the job's run is gone".into()));
        };
        // Past here the run's release is not aborted: it goes on (with the
        // record of the occurrence) even if this thread cannot wait for it.
        let _ = done_tx.send(());
        let ended = self.rt.run(async { Ok(running.await) })?;
        with_value(ended, value)
    }
}

/// Aborts the task of a run still in it when dropped.
struct Aborting<T>(Option<JoinHandle<T>>);

impl<T> Drop for Aborting<T> {
    fn drop(&mut self) {
        if let Some(task) = self.0.take() {
            task.abort();
        }
    }
}

/// The outcome of a run's task, or its panic (resumed here).
fn outcome(
    ended: std::result::Result<Result<JobRun<()>>, tokio::task::JoinError>,
) -> Result<JobRun<()>> {
    match ended {
        Ok(run) => run,
        Err(err) if err.is_panic() => std::panic::resume_unwind(err.into_panic()),
        // Cancelled: the client's runtime shut down under the run.
        Err(_) => Err(Error::RuntimeGone),
    }
}

/// The outcome of a run whose work never started.
fn without_value<T>(
    ended: std::result::Result<Result<JobRun<()>>, tokio::task::JoinError>,
) -> Result<JobRun<T>> {
    match outcome(ended)? {
        JobRun::Skipped { holder } => Ok(JobRun::Skipped { holder }),
        JobRun::AlreadyDone {
            occurrence,
            last_done,
        } => Ok(JobRun::AlreadyDone {
            occurrence,
            last_done,
        }),
        JobRun::Ran(()) | JobRun::Overran(()) | JobRun::Unreleased { .. } => Err(Error::Blocking(
            "the job's run ended without running its work".into(),
        )),
    }
}

/// The outcome of a run whose work returned `value`.
fn with_value<T>(
    ended: std::result::Result<Result<JobRun<()>>, tokio::task::JoinError>,
    value: T,
) -> Result<JobRun<T>> {
    Ok(match outcome(ended)? {
        JobRun::Ran(()) => JobRun::Ran(value),
        JobRun::Overran(()) => JobRun::Overran(value),
        JobRun::Unreleased { error, .. } => JobRun::Unreleased { value, error },
        JobRun::Skipped { holder } => JobRun::Skipped { holder },
        JobRun::AlreadyDone {
            occurrence,
            last_done,
        } => JobRun::AlreadyDone {
            occurrence,
            last_done,
        },
    })
}

/// A handle on one hold's lease: the blocking face of [`crate::Lease`],
/// from [`LockGuard::lease_handle`](super::LockGuard::lease_handle) and
/// given to the closure of [`Job::run`]. Only a view: nothing is released
/// when it is dropped.
#[derive(Clone)]
pub struct Lease {
    inner: crate::Lease,
    rt: Arc<Runtime>,
}

impl std::fmt::Debug for Lease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("blocking::Lease")
            .field("inner", &self.inner)
            .finish()
    }
}

impl Lease {
    pub(crate) fn new(inner: crate::Lease, rt: Arc<Runtime>) -> Lease {
        Lease { inner, rt }
    }

    /// Whether the lease is known lost, has run out by this process's
    /// clock, or the hold was released, as [`crate::Lease::is_lost`]
    /// (for a job's run: another replica may run the job now). It does
    /// not block: check it between steps of the work.
    pub fn is_lost(&self) -> bool {
        self.inner.is_lost()
    }

    /// How long the lease runs from now unless renewed, as
    /// [`crate::Lease::remaining`]. Zero once lost.
    pub fn remaining(&self) -> Duration {
        self.inner.remaining()
    }

    /// Whether the watchdog renews the lease, as
    /// [`crate::Lease::is_renewed`] (for a job's run: the job has no
    /// [`Job::at_most_for`]).
    pub fn is_renewed(&self) -> bool {
        self.inner.is_renewed()
    }

    /// Blocks until the lease is lost, as [`crate::Lease::lost`] (also
    /// within a round trip when the lock is force-unlocked); never
    /// returns while it is safely held. From a thread of its own beside the
    /// work, or use [`Lease::lost_timeout`].
    ///
    /// # Errors
    /// [`Error::Blocking`] when the call cannot be run.
    pub fn lost(&self) -> Result<()> {
        self.rt.run(async {
            self.inner.lost().await;
            Ok(())
        })
    }

    /// Blocks at most `timeout` for the lease to be lost, as
    /// [`Lease::lost`]: whether it was.
    ///
    /// # Errors
    /// [`Error::Blocking`] when the call cannot be run.
    pub fn lost_timeout(&self, timeout: Duration) -> Result<bool> {
        self.rt.run(async {
            Ok(tokio::time::timeout(timeout, self.inner.lost())
                .await
                .is_ok())
        })
    }
}
