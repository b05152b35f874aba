//! Argument checks, and the deadline of a wait: each refuses bad input with
//! [`Error::InvalidArgument`] before anything is sent.

use std::time::Duration;

use tokio::time::Instant;

use crate::config::{MAX_DURATION, MAX_NAME_LEN};
use crate::{Error, Result};

/// Checks the name of a `what` (a lock, a semaphore...): not empty, at most
/// [`MAX_NAME_LEN`] bytes.
pub(crate) fn name(what: &str, name: &str) -> Result<()> {
    if name.is_empty() {
        return Err(Error::invalid(format!("{what} name must not be empty")));
    }
    if name.len() > MAX_NAME_LEN {
        return Err(Error::invalid(format!(
            "{what} name is {} bytes long; at most {MAX_NAME_LEN} are allowed",
            name.len()
        )));
    }
    Ok(())
}

/// Checks the label of a `what` (a leader, a job's runner): not empty, at
/// most `max` bytes, no control characters.
pub(crate) fn label(what: &str, label: &str, max: usize) -> Result<()> {
    if label.is_empty() {
        return Err(Error::invalid(format!("{what} label must not be empty")));
    }
    if label.len() > max {
        return Err(Error::invalid(format!(
            "{what} label is {} bytes long, over the limit of {max}",
            label.len()
        )));
    }
    if label.chars().any(char::is_control) {
        return Err(Error::invalid(format!(
            "{what} label {label:?} must not hold control characters"
        )));
    }
    Ok(())
}

/// Checks a count of permits: at least 1.
pub(crate) fn permits(permits: u32) -> Result<u32> {
    if permits == 0 {
        return Err(Error::invalid("permits must be at least 1, got 0"));
    }
    Ok(permits)
}

/// Checks a duration argument: at least one millisecond, at most `max`.
pub(crate) fn duration(what: &str, value: Duration, max: Duration) -> Result<u64> {
    let ms = value.as_millis();
    if ms == 0 {
        return Err(Error::invalid(format!(
            "{what} must be at least 1 ms, got {value:?}"
        )));
    }
    if value > max {
        return Err(Error::invalid(format!(
            "{what} must be at most {max:?}, got {value:?}"
        )));
    }
    // `max` keeps this far below u64::MAX.
    Ok(ms as u64)
}

/// The deadline of a wait, checked.
pub(crate) fn deadline(wait: Option<Duration>) -> Result<Option<Instant>> {
    match wait {
        Some(wait) if wait > MAX_DURATION => Err(Error::invalid(format!(
            "wait must be at most {MAX_DURATION:?}, got {wait:?}"
        ))),
        Some(wait) => Ok(Some(Instant::now() + wait)),
        None => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_are_checked() {
        let max = Duration::from_secs(10);
        assert_eq!(duration("lease", Duration::from_millis(5), max).unwrap(), 5);
        assert!(duration("lease", Duration::ZERO, max).is_err());
        assert!(duration("lease", Duration::from_micros(999), max).is_err());
        let err = duration("lease", Duration::from_secs(11), max).unwrap_err();
        assert!(err.to_string().contains("at most"), "{err}");
    }
}
