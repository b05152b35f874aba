//! Every retry schedule of the crate, named: how a spin-lock waiter spaces
//! its attempts ([`Backoff`], the one users set), and the fixed schedules
//! of the work that resends by itself.

use std::cell::Cell;
use std::time::Duration;

/// A fixed retry schedule: the pause before each resend, from `first`,
/// growing by `growth` up to `max`, spaced so as not to crowd a Redis that
/// is coming back. A `jittered` one pauses between half of that and all of
/// it, at random: the background retries of one client that a single
/// connection cut failed all at once (every request on the connection
/// fails with it) would otherwise go on in lockstep, and meet each other's
/// next failure, every time.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Schedule {
    first: Duration,
    growth: Growth,
    max: Duration,
    jittered: bool,
}

#[derive(Debug, Clone, Copy)]
enum Growth {
    /// Each pause doubles the one before.
    Doubling,
    /// Each pause is `first` longer than the one before.
    Linear,
}

impl Schedule {
    /// The pause before retry `n` (from 0).
    pub(crate) fn pause(&self, n: u32) -> Duration {
        let grown = match self.growth {
            Growth::Doubling => self
                .first
                .saturating_mul(1u32.checked_shl(n.min(31)).unwrap_or(u32::MAX)),
            Growth::Linear => self.first.saturating_mul(n.saturating_add(1)),
        };
        let ceiling = grown.min(self.max);
        if !self.jittered {
            return ceiling;
        }
        let half = ceiling / 2;
        let spread = (ceiling - half).as_nanos() as u64;
        half + Duration::from_nanos(random() % spread.saturating_add(1))
    }
}

/// A run of failures in a row on `schedule`: each one pauses the next step
/// of it, and a success starts it over. For a loop that tries again by
/// itself (a lock's listening for its hold's end, an unsubscribe resent).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Failures {
    schedule: Schedule,
    in_a_row: u32,
}

impl Failures {
    /// None yet, on `schedule`.
    pub(crate) fn on(schedule: Schedule) -> Failures {
        Failures {
            schedule,
            in_a_row: 0,
        }
    }

    /// One more failure: the pause before trying again.
    pub(crate) fn pause(&mut self) -> Duration {
        let pause = self.schedule.pause(self.in_a_row);
        self.in_a_row = self.in_a_row.saturating_add(1);
        pause
    }

    /// A success: the next failure pauses as the first did.
    pub(crate) fn reset(&mut self) {
        self.in_a_row = 0;
    }
}

/// The resends of an acquire, a release and a give-back after a failed
/// connection: 100 ms more each time, up to 1 s (so the first ones come
/// soon, as a release that only met a reconnect wants), jittered. Two
/// requests that one cut failed together would otherwise pause alike and
/// go out together again, every time: beside a request whose every reply
/// is lost (each loss cutting the connection), the other's reply went with
/// it, until its sends ran out.
pub(crate) const RESEND: Schedule = Schedule {
    first: Duration::from_millis(100),
    growth: Growth::Linear,
    max: Duration::from_secs(1),
    jittered: true,
};

/// The checks of an acquire whose reply was lost, until its latch says
/// whether it ran: from 100 ms, doubling up to 1 s, jittered (the settles
/// of the requests one cut lost start together, on one connection).
pub(crate) const SETTLE_LOST: Schedule = Schedule {
    first: Duration::from_millis(100),
    growth: Growth::Doubling,
    max: Duration::from_secs(1),
    jittered: true,
};

/// A fair waiter's leave of the queue, resent in the background after a
/// failed connection: from 50 ms, doubling up to 1 s.
pub(crate) const LEAVE_QUEUE: Schedule = Schedule {
    first: Duration::from_millis(50),
    growth: Growth::Doubling,
    max: Duration::from_secs(1),
    jittered: true,
};

/// How long a waiter pauses before a try that should go at once (a grant
/// whose confirmation came back empty, a key expiring as it was read).
pub(crate) const SOON: Duration = Duration::from_millis(1);

/// How long a waiter pauses after a try that found no connection.
pub(crate) const NO_CONNECTION: Duration = Duration::from_millis(100);

/// A spin lock's default backoff: 1 ms doubling up to 128 ms, as
/// Redisson's.
const SPIN_FIRST: Duration = Duration::from_millis(1);
const SPIN_MAX: Duration = Duration::from_millis(128);

/// Exponential backoff with jitter, for waiters that poll instead of
/// subscribing ([`Client::spin_lock`](crate::Client::spin_lock)).
///
/// The n-th pause is drawn uniformly from the upper half of
/// `min(initial * 2^n, max)`, so that waiters started together drift
/// apart; it is also cut short by the lock's remaining TTL and the caller's
/// wait. The default is 1 ms doubling up to 128 ms, as Redisson's spin lock.
///
/// ```
/// use std::time::Duration;
/// let backoff = ferrisson::Backoff::new(Duration::from_millis(5), Duration::from_millis(500))?;
/// assert_eq!(backoff.max(), Duration::from_millis(500));
/// # Ok::<(), ferrisson::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    initial: Duration,
    max: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            initial: SPIN_FIRST,
            max: SPIN_MAX,
        }
    }
}

impl Backoff {
    /// Pauses from `initial`, doubling after each failed attempt, up to
    /// `max`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) when
    /// `initial` is zero, `max` is under `initial`, or `max` is over a minute
    /// (a waiter that sleeps longer mostly misses the lock's release).
    pub fn new(initial: Duration, max: Duration) -> crate::Result<Backoff> {
        if initial.is_zero() {
            return Err(crate::Error::invalid("backoff must start above zero"));
        }
        if max < initial {
            return Err(crate::Error::invalid(format!(
                "backoff maximum {max:?} is under its start {initial:?}"
            )));
        }
        if max > Duration::from_secs(60) {
            return Err(crate::Error::invalid(format!(
                "backoff maximum {max:?} is over a minute"
            )));
        }
        Ok(Backoff { initial, max })
    }

    /// The first pause.
    pub fn initial(&self) -> Duration {
        self.initial
    }

    /// The longest pause.
    pub fn max(&self) -> Duration {
        self.max
    }

    /// The pause before attempt `n + 1` (n counts from 0), jittered.
    pub(crate) fn pause(&self, n: u32) -> Duration {
        let ceiling = self
            .initial
            .saturating_mul(1u32.checked_shl(n.min(31)).unwrap_or(u32::MAX))
            .min(self.max);
        let half = ceiling / 2;
        let spread = (ceiling - half).as_nanos() as u64;
        half + Duration::from_nanos(if spread == 0 {
            0
        } else {
            random() % (spread + 1)
        })
    }
}

thread_local! {
    /// A xorshift state per thread, seeded from a random UUID: jitter needs
    /// no more than that.
    static STATE: Cell<u64> = Cell::new(uuid::Uuid::new_v4().as_u64_pair().0 | 1);
}

fn random() -> u64 {
    STATE.with(|state| {
        let mut x = state.get();
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        state.set(x);
        x
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pauses_grow_to_the_cap_within_their_upper_half() {
        let backoff = Backoff::default();
        for n in 0..40 {
            let ceiling = (Duration::from_millis(1) * 2u32.pow(n.min(20))).min(backoff.max());
            let pause = backoff.pause(n);
            assert!(pause <= ceiling && pause >= ceiling / 2, "{n}: {pause:?}");
        }
    }

    #[test]
    fn the_fixed_schedules_grow_to_their_cap() {
        let ms = Duration::from_millis;
        // Between half the step and all of it.
        let within = |schedule: &Schedule, steps: &[Duration]| {
            for (n, &ceiling) in steps.iter().enumerate() {
                let pause = schedule.pause(n as u32);
                assert!(pause <= ceiling && pause >= ceiling / 2, "{n}: {pause:?}");
            }
        };
        let resend: Vec<_> = (1..=12).map(|n| ms(100 * n).min(ms(1000))).collect();
        for _ in 0..100 {
            within(&RESEND, &resend);
            within(
                &SETTLE_LOST,
                &[ms(100), ms(200), ms(400), ms(800), ms(1000), ms(1000)],
            );
            within(
                &LEAVE_QUEUE,
                &[ms(50), ms(100), ms(200), ms(400), ms(800), ms(1000)],
            );
        }
        assert!(LEAVE_QUEUE.pause(u32::MAX) <= ms(1000));
        assert!(RESEND.pause(u32::MAX) <= ms(1000));
        // Two settles started together part at once.
        let apart = (0..20)
            .filter(|_| SETTLE_LOST.pause(5) != SETTLE_LOST.pause(5))
            .count();
        assert!(apart >= 19, "{apart} of 20 pairs of pauses differ");
    }

    #[test]
    fn failures_in_a_row_pause_longer_and_a_success_starts_over() {
        let ms = Duration::from_millis;
        let mut failures = Failures::on(SETTLE_LOST);
        for ceiling in [ms(100), ms(200), ms(400)] {
            let pause = failures.pause();
            assert!(pause <= ceiling && pause >= ceiling / 2, "{pause:?}");
        }
        failures.reset();
        assert!(failures.pause() <= ms(100));
    }

    #[test]
    fn impossible_settings_are_refused() {
        let ms = Duration::from_millis;
        assert!(Backoff::new(Duration::ZERO, ms(5)).is_err());
        assert!(Backoff::new(ms(10), ms(5)).is_err());
        assert!(Backoff::new(ms(1), Duration::from_secs(61)).is_err());
        assert!(Backoff::new(ms(5), ms(5)).is_ok());
    }
}
