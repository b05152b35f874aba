//! The key and channel names of Redisson's layout that the inspector reads,
//! by the same brace rule as the library's own (private) helpers.

/// The name as a hash tag: `{name}`, or the name itself when it already
/// has a `{` (the brace rule).
fn tagged(name: &str) -> String {
    if name.contains('{') {
        name.to_owned()
    } else {
        format!("{{{name}}}")
    }
}

/// `prefix:{name}`.
fn prefix_name(prefix: &str, name: &str) -> String {
    format!("{prefix}:{}", tagged(name))
}

/// A lock's (and a fair lock's, with `:<waiter>` after it) channel.
pub(crate) fn lock_channel(name: &str) -> String {
    prefix_name("redisson_lock__channel", name)
}

/// The channel of a read-write lock.
pub(crate) fn rwlock_channel(name: &str) -> String {
    prefix_name("redisson_rwlock", name)
}

/// One read hold's timeout key: `{name}:<field>:rwlock_timeout:<n>`.
pub(crate) fn read_hold_key(name: &str, field: &str, n: u32) -> String {
    format!("{}:{field}:rwlock_timeout:{n}", tagged(name))
}

/// The fair lock's queue of waiters.
pub(crate) fn fair_queue(name: &str) -> String {
    prefix_name("redisson_lock_queue", name)
}

/// The fair lock's waiter timeouts.
pub(crate) fn fair_timeouts(name: &str) -> String {
    prefix_name("redisson_lock_timeout", name)
}

/// The fenced lock's token counter.
pub(crate) fn fencing_token(name: &str) -> String {
    prefix_name("redisson_lock_token", name)
}

/// The channel of both semaphore kinds.
pub(crate) fn semaphore_channel(name: &str) -> String {
    prefix_name("redisson_sc", name)
}

/// The permits a permit-expirable semaphore handed out.
pub(crate) fn permit_timeouts(name: &str) -> String {
    format!("{}:timeout", tagged(name))
}

/// The channel of a count-down latch (always in braces, as Redisson builds
/// it by concatenation).
pub(crate) fn latch_channel(name: &str) -> String {
    format!("redisson_countdownlatch__channel__{{{name}}}")
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
