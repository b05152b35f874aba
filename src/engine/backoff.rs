//! How a spin-lock waiter spaces its attempts.

use std::cell::Cell;
use std::time::Duration;

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
            initial: Duration::from_millis(1),
            max: Duration::from_millis(128),
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
    fn impossible_settings_are_refused() {
        let ms = Duration::from_millis;
        assert!(Backoff::new(Duration::ZERO, ms(5)).is_err());
        assert!(Backoff::new(ms(10), ms(5)).is_err());
        assert!(Backoff::new(ms(1), Duration::from_secs(61)).is_err());
        assert!(Backoff::new(ms(5), ms(5)).is_ok());
    }
}
