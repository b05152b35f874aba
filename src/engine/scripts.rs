//! The Lua scripts, one per file under `lua/`, run with EVALSHA. On
//! NOSCRIPT the command connection loads the script and sends that call
//! whole, with EVAL (see [`Conn`](crate::client::conn::Conn)).

use std::collections::HashMap;
use std::sync::LazyLock;

use redis::Script;

/// Declares each script as a `LazyLock<Script>` of its file's text, and
/// [`body_of`] to find the text again by the SHA1 that EVALSHA sends.
macro_rules! scripts {
    ($($(#[$doc:meta])* $name:ident = $file:literal;)*) => {
        $(
            $(#[$doc])*
            pub(crate) static $name: LazyLock<Script> =
                LazyLock::new(|| Script::new(include_str!(concat!("../../lua/", $file))));
        )*

        /// Every script's text by its SHA1 (lowercase hex).
        static BODIES: LazyLock<HashMap<&'static str, &'static str>> = LazyLock::new(|| {
            HashMap::from([$(($name.get_hash(), include_str!(concat!("../../lua/", $file)))),*])
        });
    };
}

scripts! {
    /// `lua/acquire.lua`: acquire or re-enter.
    ACQUIRE = "acquire.lua";
    /// `lua/fenced_acquire.lua`: acquire or re-enter, and draw a fencing token.
    FENCED_ACQUIRE = "fenced_acquire.lua";
    /// `lua/lock_info.lua`: what a lock holds, read in one call.
    LOCK_INFO = "lock_info.lua";
    /// `lua/acquire_cancel.lua`: settle an acquire whose replies were lost.
    ACQUIRE_CANCEL = "acquire_cancel.lua";
    /// `lua/acquire_granted.lua`: when a granted acquire ran, by its latch.
    ACQUIRE_GRANTED = "acquire_granted.lua";
    /// `lua/read_acquire.lua`: take or re-enter a read hold.
    READ_ACQUIRE = "read_acquire.lua";
    /// `lua/read_release.lua`: drop one read hold, idempotent per request id.
    READ_RELEASE = "read_release.lua";
    /// `lua/write_acquire.lua`: take or re-enter a write hold; refuse an upgrade.
    WRITE_ACQUIRE = "write_acquire.lua";
    /// `lua/write_release.lua`: drop one write hold, idempotent per request id.
    WRITE_RELEASE = "write_release.lua";
    /// `lua/renew_read.lua`: reset the TTLs of read holds still held.
    RENEW_READ = "renew_read.lua";
    /// `lua/fair_acquire.lua`: take, re-enter or queue for a fair lock.
    FAIR_ACQUIRE = "fair_acquire.lua";
    /// `lua/fair_release.lua`: drop one hold, wake the first waiter in line.
    FAIR_RELEASE = "fair_release.lua";
    /// `lua/fair_leave.lua`: a waiter gives up and leaves the line.
    FAIR_LEAVE = "fair_leave.lua";
    /// `lua/fair_force_unlock.lua`: delete whoever holds it, wake the first in line.
    FAIR_FORCE_UNLOCK = "fair_force_unlock.lua";
    /// `lua/release.lua`: drop one hold, idempotent per request id (and
    /// mark a job's occurrence done).
    RELEASE = "release.lua";
    /// `lua/job_last_done.lua`: a job's last occurrence done, read.
    JOB_LAST_DONE = "job_last_done.lua";
    /// `lua/renew.lua`: reset the TTL of keys still held by their owners.
    RENEW = "renew.lua";
    /// `lua/fenced_set.lua`: write a hash field for a token at least its fence.
    FENCED_SET = "fenced_set.lua";
    /// `lua/fenced_get.lua`: read a fenced hash's field and its fence.
    FENCED_GET = "fenced_get.lua";
    /// `lua/publish.lua`: publish one message, on a channel in KEYS.
    PUBLISH = "publish.lua";
    /// `lua/force_unlock.lua`: delete whoever holds it, wake waiters.
    FORCE_UNLOCK = "force_unlock.lua";
    /// `lua/semaphore_acquire.lua`: take permits when enough are available.
    SEMAPHORE_ACQUIRE = "semaphore_acquire.lua";
    /// `lua/semaphore_release.lua`: add permits, publish the new count.
    SEMAPHORE_RELEASE = "semaphore_release.lua";
    /// `lua/semaphore_give_back.lua`: give back permits nobody got,
    /// idempotent per request id.
    SEMAPHORE_GIVE_BACK = "semaphore_give_back.lua";
    /// `lua/semaphore_drain.lua`: take every available permit.
    SEMAPHORE_DRAIN = "semaphore_drain.lua";
    /// `lua/semaphore_delete.lua`: delete a semaphore.
    SEMAPHORE_DELETE = "semaphore_delete.lua";
    /// `lua/read_count.lua`: a semaphore's permits or a latch's count, read.
    READ_COUNT = "read_count.lua";
    /// `lua/set_if_missing.lua`: a semaphore's permits or a latch's count, once.
    SET_IF_MISSING = "set_if_missing.lua";
    /// `lua/expirable.lua`: every operation of a permit-expirable semaphore.
    EXPIRABLE = "expirable.lua";
    /// `lua/renew_permits.lua`: lengthen the leases of permits still out.
    RENEW_PERMITS = "renew_permits.lua";
    /// `lua/latch_count_down.lua`: one count down; zero opens the latch.
    LATCH_COUNT_DOWN = "latch_count_down.lua";
    /// `lua/latch_delete.lua`: delete a latch, opening it.
    LATCH_DELETE = "latch_delete.lua";
    /// `lua/lean_acquire.lua`: take a free lock without a latch, bounded
    /// by the send's deadline.
    LEAN_ACQUIRE = "lean_acquire.lua";
    /// `lua/lean_release.lua`: release the owner's one hold without a
    /// latch, bounded by the send's deadline.
    LEAN_RELEASE = "lean_release.lua";
    /// `lua/lean_settle.lua`: settle lean sends whose replies were lost.
    LEAN_SETTLE = "lean_settle.lua";
}

/// The text of the script whose SHA1 is `sha`, when it is one of ours.
pub(crate) fn body_of(sha: &[u8]) -> Option<&'static str> {
    let sha = std::str::from_utf8(sha).ok()?;
    BODIES.get(sha).copied()
}

/// An EVALSHA of `script` on `keys`, written straight into one command,
/// for the caller to add the arguments to: the calls every lock pair
/// makes (the lean acquire and release) go this way. A
/// `ScriptInvocation` allocates each key and argument on its own and
/// copies them into a command of its own when sent; this writes them
/// once. A NOSCRIPT reply is the connection's to answer, as for every
/// script (see [`Conn`](crate::client::conn::Conn)).
pub(crate) fn evalsha(script: &Script, keys: &[&str]) -> redis::Cmd {
    // EVALSHA, its SHA1, the key count, the keys and up to six arguments
    // of a few dozen bytes each, without growing.
    let size = 64 + keys.iter().map(|key| key.len() + 16).sum::<usize>() + 6 * 40;
    let mut cmd = redis::Cmd::with_capacity(3 + keys.len() + 6, size);
    cmd.arg("EVALSHA").arg(script.get_hash()).arg(keys.len());
    for key in keys {
        cmd.arg(*key);
    }
    cmd
}

/// The message a final release publishes: wakes one waiter.
pub(crate) const UNLOCK_MESSAGE: &str = "0";

/// The message a write-lock release publishes: wakes every waiter.
pub(crate) const WAKE_ALL_MESSAGE: &str = "1";

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    /// Every `-- shared: NAME` ... `-- end shared` block under `lua/`, by name:
    /// (file, block text) for each copy.
    fn shared_blocks() -> BTreeMap<String, Vec<(String, String)>> {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/lua");
        let mut blocks: BTreeMap<String, Vec<(String, String)>> = BTreeMap::new();
        let mut files: Vec<_> = std::fs::read_dir(dir)
            .unwrap()
            .map(|entry| entry.unwrap().path())
            .filter(|path| path.extension().is_some_and(|ext| ext == "lua"))
            .collect();
        files.sort();
        for path in files {
            let file = path.file_name().unwrap().to_string_lossy().into_owned();
            let text = std::fs::read_to_string(&path).unwrap();
            let mut open: Option<(String, String)> = None;
            for line in text.lines() {
                if let Some(name) = line.strip_prefix("-- shared: ") {
                    assert!(
                        open.is_none(),
                        "{file}: a shared block opens inside another"
                    );
                    // The name ends where its comment's parenthesis opens.
                    let name = name.split(" (").next().unwrap().trim().to_owned();
                    open = Some((name, String::new()));
                } else if line == "-- end shared" {
                    let (name, body) = open.take().unwrap_or_else(|| {
                        panic!("{file}: `-- end shared` without an opening line")
                    });
                    blocks.entry(name).or_default().push((file.clone(), body));
                } else if let Some((_, body)) = open.as_mut() {
                    body.push_str(line);
                    body.push('\n');
                }
            }
            assert!(open.is_none(), "{file}: a shared block is never closed");
        }
        blocks
    }

    #[test]
    fn shared_lua_blocks_are_identical_in_every_script() {
        let blocks = shared_blocks();
        for name in [
            "purge dead waiters",
            "replay a finished release",
            "drop one hold",
        ] {
            assert!(
                blocks.contains_key(name),
                "no script has the shared block {name:?}"
            );
        }
        for (name, copies) in &blocks {
            assert!(
                copies.len() >= 2,
                "the shared block {name:?} has one copy only, in {}",
                copies[0].0
            );
            let (first_file, first) = &copies[0];
            for (file, body) in &copies[1..] {
                assert_eq!(
                    body, first,
                    "the shared block {name:?} differs between {first_file} and {file}"
                );
            }
        }
    }
}
