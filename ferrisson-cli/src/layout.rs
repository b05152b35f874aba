//! The key and channel names of Redisson's layout that the inspector reads:
//! the library's own (its doc-hidden `layout` module, the one source of
//! them), and what only the inspector needs.

pub(crate) use ferrisson::layout::{
    campaign_label, election_channel, fair_queue, fair_timeouts, fencing_token, is_count,
    is_lock_hold, latch_channel, lock_channel, permit_timeouts, rwlock_channel, semaphore_channel,
    PERMIT_NO_EXPIRY,
};

/// One read hold's timeout key: `{name}:<field>:rwlock_timeout:<n>`.
pub(crate) fn read_hold_key(name: &str, field: &str, n: u32) -> String {
    format!(
        "{}:{n}",
        ferrisson::layout::rwlock_timeout_prefix(name, field)
    )
}

/// Whether `key` is one of the helper keys an object keeps beside its own
/// (queues, timeouts, tokens, request latches, read-hold timeouts), which
/// `list` does not show as objects of their own.
pub(crate) fn is_companion(key: &str) -> bool {
    key.starts_with("redisson_")
        || key.starts_with("ferrisson_")
        || key.contains(":rwlock_timeout:")
        || key.ends_with("}:timeout")
}

/// `text` with the glob characters of a Redis pattern escaped.
pub(crate) fn glob_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_the_brace_rule() {
        assert_eq!(lock_channel("a"), "redisson_lock__channel:{a}");
        assert_eq!(fair_queue("{u}:1"), "redisson_lock_queue:{u}:1");
        assert_eq!(read_hold_key("a", "c:1", 2), "{a}:c:1:rwlock_timeout:2");
        assert_eq!(permit_timeouts("s"), "{s}:timeout");
        assert_eq!(
            latch_channel("{b}"),
            "redisson_countdownlatch__channel__{{b}}"
        );
        assert!(is_companion("{s}:timeout"));
        assert!(!is_companion("orders:42"));
        assert_eq!(glob_escape("a*b[c]"), "a\\*b\\[c\\]");
    }
}
