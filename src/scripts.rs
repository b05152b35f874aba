//! The Lua scripts, one per file under `lua/`, loaded once and run with
//! EVALSHA (falling back to loading the script on NOSCRIPT).

use std::sync::LazyLock;

use redis::Script;

/// `lua/acquire.lua`: acquire or re-enter.
pub(crate) static ACQUIRE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../lua/acquire.lua")));

/// `lua/fenced_acquire.lua`: acquire or re-enter, and draw a fencing token.
pub(crate) static FENCED_ACQUIRE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../lua/fenced_acquire.lua")));

/// `lua/lock_info.lua`: what a lock holds, read in one call.
pub(crate) static LOCK_INFO: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../lua/lock_info.lua")));

/// `lua/acquire_cancel.lua`: settle an acquire whose replies were lost.
pub(crate) static ACQUIRE_CANCEL: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../lua/acquire_cancel.lua")));

/// `lua/read_acquire.lua`: take or re-enter a read hold.
pub(crate) static READ_ACQUIRE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../lua/read_acquire.lua")));

/// `lua/read_release.lua`: drop one read hold, idempotent per request id.
pub(crate) static READ_RELEASE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../lua/read_release.lua")));

/// `lua/write_acquire.lua`: take or re-enter a write hold; refuse an upgrade.
pub(crate) static WRITE_ACQUIRE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../lua/write_acquire.lua")));

/// `lua/write_release.lua`: drop one write hold, idempotent per request id.
pub(crate) static WRITE_RELEASE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../lua/write_release.lua")));

/// `lua/renew_read.lua`: reset the TTLs of read holds still held.
pub(crate) static RENEW_READ: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../lua/renew_read.lua")));

/// `lua/fair_acquire.lua`: take, re-enter or queue for a fair lock.
pub(crate) static FAIR_ACQUIRE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../lua/fair_acquire.lua")));

/// `lua/fair_release.lua`: drop one hold, wake the first waiter in line.
pub(crate) static FAIR_RELEASE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../lua/fair_release.lua")));

/// `lua/fair_leave.lua`: a waiter gives up and leaves the line.
pub(crate) static FAIR_LEAVE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../lua/fair_leave.lua")));

/// `lua/fair_force_unlock.lua`: delete whoever holds it, wake the first in line.
pub(crate) static FAIR_FORCE_UNLOCK: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../lua/fair_force_unlock.lua")));

/// `lua/release.lua`: drop one hold, idempotent per request id.
pub(crate) static RELEASE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../lua/release.lua")));

/// `lua/renew.lua`: reset the TTL of keys still held by their owners.
pub(crate) static RENEW: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../lua/renew.lua")));

/// `lua/force_unlock.lua`: delete whoever holds it, wake waiters.
pub(crate) static FORCE_UNLOCK: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../lua/force_unlock.lua")));

/// `lua/semaphore_acquire.lua`: take permits when enough are available.
pub(crate) static SEMAPHORE_ACQUIRE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../lua/semaphore_acquire.lua")));

/// `lua/semaphore_release.lua`: add permits, publish the new count.
pub(crate) static SEMAPHORE_RELEASE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../lua/semaphore_release.lua")));

/// `lua/semaphore_give_back.lua`: give back permits nobody got,
/// idempotent per request id.
pub(crate) static SEMAPHORE_GIVE_BACK: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../lua/semaphore_give_back.lua")));

/// `lua/semaphore_drain.lua`: take every available permit.
pub(crate) static SEMAPHORE_DRAIN: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../lua/semaphore_drain.lua")));

/// `lua/semaphore_delete.lua`: delete a semaphore.
pub(crate) static SEMAPHORE_DELETE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../lua/semaphore_delete.lua")));

/// `lua/read_count.lua`: a semaphore's permits or a latch's count, read.
pub(crate) static READ_COUNT: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../lua/read_count.lua")));

/// `lua/set_if_missing.lua`: a semaphore's permits or a latch's count, once.
pub(crate) static SET_IF_MISSING: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../lua/set_if_missing.lua")));

/// `lua/expirable.lua`: every operation of a permit-expirable semaphore.
pub(crate) static EXPIRABLE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../lua/expirable.lua")));

/// `lua/latch_count_down.lua`: one count down; zero opens the latch.
pub(crate) static LATCH_COUNT_DOWN: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../lua/latch_count_down.lua")));

/// `lua/latch_delete.lua`: delete a latch, opening it.
pub(crate) static LATCH_DELETE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../lua/latch_delete.lua")));

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
