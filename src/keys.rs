//! Key and channel names, by the brace rule of Redisson.

/// `prefix:{name}`, or `prefix:name` when the name already has a `{`: every
/// key of one lock then falls into the lock name's cluster slot.
pub(crate) fn prefix_name(prefix: &str, name: &str) -> String {
    if name.contains('{') {
        format!("{prefix}:{name}")
    } else {
        format!("{prefix}:{{{name}}}")
    }
}

/// The channel a lock's unlock message goes to.
pub(crate) fn lock_channel(name: &str) -> String {
    prefix_name("redisson_lock__channel", name)
}

/// The fenced lock's token counter.
pub(crate) fn fencing_token(name: &str) -> String {
    prefix_name("redisson_lock_token", name)
}

/// The latch key that makes one release request idempotent.
pub(crate) fn unlock_latch(name: &str, request_id: &str) -> String {
    let mut key = prefix_name("redisson_unlock_latch", name);
    key.push(':');
    key.push_str(request_id);
    key
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_names_get_braces() {
        assert_eq!(
            lock_channel("orders:42"),
            "redisson_lock__channel:{orders:42}"
        );
        assert_eq!(
            unlock_latch("orders:42", "ab12"),
            "redisson_unlock_latch:{orders:42}:ab12"
        );
        assert_eq!(
            fencing_token("orders:42"),
            "redisson_lock_token:{orders:42}"
        );
    }

    #[test]
    fn names_with_a_tag_keep_theirs() {
        assert_eq!(lock_channel("{user}:7"), "redisson_lock__channel:{user}:7");
        assert_eq!(
            unlock_latch("a{b}c", "ff"),
            "redisson_unlock_latch:a{b}c:ff"
        );
    }
}
