//! Calls still on their way when a program returns (its runtime shuts
//! down): the runtime's drop finishes them on a connection of its own, and
//! nothing they took is left behind. A binary of its own: the work left
//! at a shutdown shares one time window per process while Redis does not
//! answer, and the other suites' shutdowns stay out of these tests' way.

use ferrisson_test_support as common;

use std::time::Duration;

use common::proxy::Proxy;
use common::{exists, runtime, soon, RedisServer};

const WATCHDOG: Duration = Duration::from_secs(30);

/// The SHA1 of a script of `lua/`, which its EVALSHA carries.
fn sha(lua: &str) -> String {
    redis::Script::new(lua).get_hash().to_owned()
}

/// What a case leaves in flight.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Call {
    /// A semaphore's acquire, its reply held.
    Permit,
    /// A lock's acquire, its reply held (lean, or latched).
    Lock { lean: bool },
    /// An unlock, its command held before it reached Redis.
    Unlock,
    /// A lock's latched acquire refused (another owner holds the lock),
    /// its reply held.
    Refused,
    /// A lock's latched acquire held before it reached Redis, let go after
    /// the runtime's end.
    Late,
}

/// An acquire whose reply is on its way when the program returns leaves
/// nothing taken: the runtime's drop settles it by its request id, on a
/// connection of its own, and gives back what it took, a semaphore's
/// permits (which would be lost for good) and a lock's hold (which would
/// stand until its TTL) alike, for the lean and the latched protocol.
/// Each reply is held in a proxy, after the script ran, until the runtime
/// is gone. And an unlock whose command has not reached Redis then is sent
/// again, and releases. An acquire refused in Redis, its reply held,
/// leaves no key at all: its latch is neither written by the refusal nor
/// by its settle (no send of it can run once the settle reads the latch).
/// Each is checked before the proxy lets the held command or reply go on.
/// And an acquire held before it reached Redis leaves no key either, nor
/// takes the lock when it reaches Redis after the program's end: its
/// settle waited until it was past its deadline.
#[test]
fn a_call_in_flight_when_the_program_returns_leaves_nothing_taken() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    let semaphore_acquire = sha(include_str!("../lua/semaphore_acquire.lua"));
    let lean_acquire = sha(include_str!("../lua/lean_acquire.lua"));
    let latched_acquire = sha(include_str!("../lua/acquire.lua"));
    let lean_release = sha(include_str!("../lua/lean_release.lua"));
    for multi_thread in [false, true] {
        let calls = [
            (Call::Permit, &semaphore_acquire),
            (Call::Lock { lean: true }, &lean_acquire),
            (Call::Lock { lean: false }, &latched_acquire),
            (Call::Unlock, &lean_release),
            (Call::Refused, &latched_acquire),
            (Call::Late, &latched_acquire),
        ];
        for (call, hash) in calls {
            let at = format!("{call:?}, multi_thread: {multi_thread}");
            let name = format!("shutdown:in-flight:{multi_thread}:{call:?}");
            let rt = runtime(multi_thread);
            rt.block_on(async {
                let lean = !matches!(
                    call,
                    Call::Lock { lean: false } | Call::Refused | Call::Late
                );
                let builder = ferrisson::Client::builder(proxy.url())
                    .watchdog_timeout(WATCHDOG)
                    .lean(lean);
                let client = common::connect(builder).await;
                let semaphore = client.semaphore(&name);
                let lock = client.lock(&name);
                // The scripts loaded, so that what is held is the call's.
                if call == Call::Permit {
                    assert!(soon(semaphore.try_set_permits(1)).await.unwrap());
                    soon(semaphore.acquire()).await.unwrap();
                    soon(semaphore.release()).await.unwrap();
                } else {
                    soon(soon(lock.lock()).await.unwrap().unlock())
                        .await
                        .unwrap();
                }
                let held = proxy.held_replies() + proxy.held_commands();
                match call {
                    Call::Unlock => {
                        let guard = soon(lock.lock()).await.unwrap();
                        proxy.hold_next_command(hash);
                        tokio::spawn(guard.unlock());
                    }
                    Call::Permit => {
                        proxy.hold_next_reply_to(hash);
                        tokio::spawn(async move { drop(semaphore.acquire().await) });
                    }
                    Call::Lock { .. } => {
                        proxy.hold_next_reply_to(hash);
                        tokio::spawn(async move { drop(lock.lock().await) });
                    }
                    Call::Refused => {
                        // Held by an owner of another client.
                        server.cmd(&["HSET", &name, "other-client:1", "1"]);
                        server.cmd(&["PEXPIRE", &name, "600000"]);
                        proxy.hold_next_reply_to(hash);
                        tokio::spawn(async move { drop(lock.try_lock_for(WATCHDOG).await) });
                    }
                    Call::Late => {
                        proxy.hold_next_command(hash);
                        tokio::spawn(async move { drop(lock.try_lock_for(WATCHDOG).await) });
                    }
                }
                common::eventually(Duration::from_secs(20), || {
                    let seen = proxy.held_replies() + proxy.held_commands() > held;
                    async move { seen }
                })
                .await;
            });
            // Granted in Redis, its reply held; or held, its release not
            // sent: the program returns.
            match call {
                Call::Permit => assert_eq!(
                    server.cmd(&["GET", &name]).as_string().as_deref(),
                    Some("0"),
                    "{at}: the acquire took the permit"
                ),
                Call::Late => assert!(!exists(&server, &name), "{at}: nothing is held yet"),
                _ => assert!(exists(&server, &name), "{at}: the lock is held"),
            }
            drop(rt);
            match call {
                Call::Permit => assert_eq!(
                    server.cmd(&["GET", &name]).as_string().as_deref(),
                    Some("1"),
                    "{at}: the permit came back"
                ),
                Call::Refused => {
                    assert_eq!(
                        server.cmd(&["HGETALL", &name]).as_array().map(|a| a.len()),
                        Some(2),
                        "{at}: the other owner's hold stands alone"
                    );
                    assert_eq!(
                        server.keys(&format!("*{name}*")),
                        vec![name.clone()],
                        "{at}: no latch is left"
                    );
                    server.cmd(&["DEL", &name]);
                }
                _ => assert!(!exists(&server, &name), "{at}: nothing is held"),
            }
            let calls = server.evalsha_calls();
            proxy.release_held();
            if call == Call::Late {
                // The acquire reaches Redis, past its deadline.
                let deadline = std::time::Instant::now() + Duration::from_secs(30);
                while server.evalsha_calls() == calls {
                    assert!(
                        std::time::Instant::now() < deadline,
                        "{at}: the acquire ran"
                    );
                    std::thread::sleep(Duration::from_millis(10));
                }
                assert_eq!(
                    server.keys(&format!("*{name}*")),
                    Vec::<String>::new(),
                    "{at}: no latch is left, and the late acquire took nothing"
                );
            }
        }
    }
}

/// A settle of an acquire whose reply was lost (run when the call let its
/// request go), cut by the runtime's end after its give-back ran in Redis,
/// runs again from its start at the runtime's drop, and gives nothing back
/// twice: the give-back closed the grant's latch, so the settle run again
/// finds nothing to give. A semaphore's permit comes back once; a lock's
/// give-back of a re-entry releases no other hold of the same owner (one
/// taken before, and kept past the runtime). The give-back's reply is held
/// in a proxy until the runtime is gone.
#[test]
fn a_settle_run_again_at_the_programs_end_gives_back_once() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    for lock in [false, true] {
        let name = format!("shutdown:settle-twice:{lock}");
        // The permits left, or the owner's count of holds.
        let count = || match lock {
            true => (server.cmd(&["HVALS", &name]).as_array())
                .and_then(|counts| counts.first().and_then(|count| count.as_string())),
            false => server.cmd(&["GET", &name]).as_string(),
        };
        let rt = runtime(true);
        let guard = rt.block_on(async {
            // Latched, as every acquire of a semaphore goes.
            let builder = ferrisson::Client::builder(proxy.url())
                .watchdog_timeout(WATCHDOG)
                .lean(false);
            let client = common::connect(builder).await;
            let semaphore = client.semaphore(&name);
            let lock_ = client.lock(&name).with_owner("settled-twice");
            // The scripts loaded; the owner holds the lock, past the
            // runtime's end.
            let guard = if lock {
                soon(soon(lock_.lock()).await.unwrap().unlock())
                    .await
                    .unwrap();
                Some(soon(lock_.lock_with_lease(10 * WATCHDOG)).await.unwrap())
            } else {
                assert!(soon(semaphore.try_set_permits(1)).await.unwrap());
                soon(semaphore.acquire()).await.unwrap();
                soon(semaphore.release()).await.unwrap();
                None
            };
            let lost = proxy.lost_replies();
            proxy.lose_next_reply_to_then_refuse(&format!("ferrisson_acquire_latch:{{{name}}}"));
            // One try: its resends find the server unreachable, and it
            // fails.
            let tried = match lock {
                true => soon(lock_.try_lock()).await.map(drop),
                false => soon(semaphore.try_acquire()).await.map(drop),
            };
            assert!(tried.is_err(), "{tried:?}");
            assert_eq!(proxy.lost_replies(), lost + 1);
            let took = if lock { "2" } else { "0" };
            assert_eq!(count().as_deref(), Some(took), "the lost send took it");
            // Its request is settled in the background, and its give-back's
            // reply held (by its latch's key), the script loaded first (a
            // NOSCRIPT reply would be the one held).
            server.cmd(&[
                "SCRIPT",
                "LOAD",
                include_str!("../lua/semaphore_give_back.lua"),
            ]);
            let held = proxy.held_replies();
            proxy.hold_next_reply_to(&format!("redisson_unlock_latch:{{{name}}}"));
            proxy.refuse(false);
            common::eventually(Duration::from_secs(30), || {
                let held = proxy.held_replies() > held;
                async move { held }
            })
            .await;
            assert_eq!(count().as_deref(), Some("1"), "given back");
            guard
        });
        drop(rt);
        assert_eq!(count().as_deref(), Some("1"), "given back once");
        proxy.release_held();
        // Its release would go on a runtime that is gone.
        std::mem::forget(guard);
    }
}
