//! ACL users and passwords: every connection a client opens authenticates,
//! a wrong password is a clear error, and secrets stay out of `Debug`.

use ferrisson_test_support as common;

use std::time::Duration;

use common::{eventually, soon, within, RedisServer};
use tokio::time::Instant;

fn acl_server() -> RedisServer {
    let server = RedisServer::start();
    // Keys, channels (for the unlock messages) and commands: all of them.
    server.cmd(&[
        "ACL",
        "SETUSER",
        "locker",
        "on",
        ">s3cret-pw",
        "~*",
        "&*",
        "+@all",
    ]);
    // The default user is shut out, so nothing works by accident.
    server.cmd(&["ACL", "SETUSER", "default", "off"]);
    server
}

fn url(server: &RedisServer, password: &str) -> String {
    format!("redis://locker:{password}@127.0.0.1:{}/", server.port())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acl_user_locks_waits_and_releases() {
    let server = acl_server();
    let a = soon(ferrisson::Client::connect(url(&server, "s3cret-pw")))
        .await
        .unwrap();
    let b = soon(ferrisson::Client::connect(url(&server, "s3cret-pw")))
        .await
        .unwrap();
    let guard = soon(a.lock("acl").lock()).await.unwrap();
    // The waiter is woken through the subscription connection, which
    // authenticated too.
    let lock = b.lock("acl");
    let waiting = tokio::spawn(async move { lock.lock().await.unwrap() });
    tokio::time::sleep(Duration::from_millis(100)).await;
    let released = Instant::now();
    soon(guard.unlock()).await.unwrap();
    let next = within(Duration::from_secs(10), waiting).await.unwrap();
    assert!(released.elapsed() < Duration::from_secs(10));
    soon(next.unlock()).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_password_is_a_clear_error_that_hides_it() {
    let server = acl_server();
    let err = soon(ferrisson::Client::connect(url(&server, "not-the-pw")))
        .await
        .unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("WRONGPASS") || text.to_lowercase().contains("auth"),
        "{text}"
    );
    assert!(!text.contains("not-the-pw"), "{text}");
    assert!(
        text.contains(&format!("127.0.0.1:{}", server.port())),
        "{text}"
    );
    assert!(text.contains("check the user and password"), "{text}");
    assert!(!err.is_connection_error(), "retrying will not help: {text}");
}

/// A URL without the password a server asks for: the error names the
/// address and says where the password goes, in place of the server's
/// `NOAUTH ... HELLO ... AUTH` text.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_password_says_where_it_goes() {
    let server = RedisServer::start_with_args(&["--requirepass", "admin-pw"]);
    let addr = format!("127.0.0.1:{}", server.port());
    let err = soon(ferrisson::Client::connect(format!("redis://{addr}/")))
        .await
        .unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, ferrisson::Error::Connect { .. }), "{err:?}");
    assert!(text.contains(&addr), "{text}");
    assert!(
        text.contains("asks for a password and none was given"),
        "{text}"
    );
    assert!(text.contains("redis://:PASSWORD@HOST:PORT/"), "{text}");
    assert!(!text.contains("HELLO"), "{text}");
    assert!(!text.contains("admin-pw"), "{text}");
    assert!(!err.is_connection_error(), "retrying will not help: {text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_never_appear_in_debug_output() {
    let server = acl_server();
    let builder = ferrisson::Client::builder(url(&server, "s3cret-pw"));
    assert!(!format!("{builder:?}").contains("s3cret"));
    let client = soon(builder.build()).await.unwrap();
    let guard = soon(client.lock("debugged").lock()).await.unwrap();
    for text in [
        format!("{client:?}"),
        format!("{:?}", client.lock("debugged")),
        format!("{guard:?}"),
        format!("{:?}", client.config()),
    ] {
        assert!(!text.contains("s3cret"), "{text}");
        assert!(!text.contains("locker"), "{text}");
    }
    soon(guard.unlock()).await.unwrap();
}

/// A server whose default user has a password (the test's own commands
/// authenticate with it) and a user `locker` with `rules` on every key
/// and channel.
fn server_with_user(extra: &[&str], rules: &str) -> RedisServer {
    let mut args = vec!["--requirepass", "admin-pw"];
    args.extend_from_slice(extra);
    let server = RedisServer::start_with_args(&args);
    let mut setuser = vec!["ACL", "SETUSER", "locker", "on", ">s3cret-pw", "~*", "&*"];
    setuser.extend(rules.split_whitespace());
    assert_eq!(
        server.cmd(&setuser).as_string().as_deref(),
        Some("OK"),
        "ACL SETUSER {rules}"
    );
    server
}

async fn locker(server: &RedisServer) -> ferrisson::Client {
    soon(
        ferrisson::Client::builder(url(server, "s3cret-pw"))
            .watchdog_timeout(Duration::from_secs(3))
            .build(),
    )
    .await
    .unwrap()
}

/// The `calls` of `command` in the server's INFO commandstats.
fn calls(server: &RedisServer, command: &str) -> u64 {
    let info = server.cmd(&["INFO", "commandstats"]).as_string().unwrap();
    info.lines()
        .find_map(|line| line.strip_prefix(&format!("cmdstat_{command}:calls=")))
        .and_then(|rest| rest.split(',').next())
        .map_or(0, |n| n.parse().unwrap())
}

/// Every kind of synchronizer, as a user with exactly the documented ACL
/// rules: a command a script runs that the rules left out would fail its
/// call with NOPERM. Waiters are woken through the subscriptions, and
/// holds renewed by the watchdog.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_with_exactly_the_documented_acl_rules_runs_every_kind() {
    let server = server_with_user(&[], ferrisson::config::ACL_RULES);
    let a = locker(&server).await;
    let b = locker(&server).await;

    // A lock, its waiter woken by the release, renewals meanwhile.
    let guard = soon(a.lock("acl:lock").lock()).await.unwrap();
    let waiting = {
        let lock = b.lock("acl:lock");
        tokio::spawn(async move { lock.lock().await.unwrap() })
    };
    eventually(Duration::from_secs(10), || async { b.subscriptions() == 1 }).await;
    // A renewal: the TTL rises between two readings (it only falls
    // without). Not above the first reading alone: taken in the
    // millisecond of the acquire it is the full timeout, which no later
    // reading exceeds.
    let mut last = server.cmd(&["PTTL", "acl:lock"]).as_int().unwrap();
    eventually(Duration::from_secs(10), || {
        let now = server.cmd(&["PTTL", "acl:lock"]).as_int().unwrap();
        let rose = now > last;
        last = now;
        async move { rose }
    })
    .await;
    assert!(!guard.is_lease_lost());
    assert_eq!(
        soon(a.lock("acl:lock").info()).await.unwrap().holders.len(),
        1
    );
    soon(guard.unlock()).await.unwrap();
    let next = within(Duration::from_secs(10), waiting).await.unwrap();
    soon(next.unlock()).await.unwrap();
    let guard = soon(a.lock("acl:lock").lock()).await.unwrap();
    assert!(soon(b.lock("acl:lock").force_unlock()).await.unwrap());
    drop(guard);

    // A fair lock and its queue (the server's clock: TIME).
    let guard = soon(a.fair_lock("acl:fair").lock()).await.unwrap();
    let waiting = {
        let lock = b.fair_lock("acl:fair");
        tokio::spawn(async move { lock.lock().await.unwrap() })
    };
    eventually(Duration::from_secs(10), || async {
        server
            .cmd(&["LLEN", "redisson_lock_queue:{acl:fair}"])
            .as_int()
            == Some(1)
    })
    .await;
    soon(guard.unlock()).await.unwrap();
    let next = within(Duration::from_secs(10), waiting).await.unwrap();
    soon(next.unlock()).await.unwrap();

    // Read and write holds, fenced, spin and non-reentrant locks, and a
    // multi-lock.
    let rw = a.read_write_lock("acl:rw");
    let read = soon(rw.read().lock()).await.unwrap();
    soon(read.unlock()).await.unwrap();
    let write = soon(rw.write().lock()).await.unwrap();
    soon(write.unlock()).await.unwrap();
    let fenced = soon(a.fenced_lock("acl:fenced").lock()).await.unwrap();
    soon(fenced.unlock()).await.unwrap();
    let spin = soon(a.spin_lock("acl:spin").lock()).await.unwrap();
    soon(spin.unlock()).await.unwrap();
    let single = soon(a.non_reentrant_lock("acl:single").lock())
        .await
        .unwrap();
    soon(single.unlock()).await.unwrap();
    let multi = ferrisson::MultiLock::new(vec![
        Box::new(a.lock("acl:m1")) as Box<dyn ferrisson::DistributedLock>,
        Box::new(a.lock("acl:m2")),
    ]);
    let both = soon(multi.lock()).await.unwrap();
    soon(both.unlock()).await.unwrap();

    // A semaphore whose waiter a release wakes, an expirable permit, a
    // latch.
    let sem = a.semaphore("acl:sem");
    assert!(soon(sem.try_set_permits(0)).await.unwrap());
    let waiting = {
        let sem = b.semaphore("acl:sem");
        tokio::spawn(async move { sem.acquire().await.unwrap() })
    };
    eventually(Duration::from_secs(10), || async { b.subscriptions() == 1 }).await;
    soon(sem.release()).await.unwrap();
    within(Duration::from_secs(10), waiting).await.unwrap();
    let seats = a.permit_expirable_semaphore("acl:seats");
    assert!(soon(seats.try_set_permits(1)).await.unwrap());
    let permit = soon(seats.acquire()).await.unwrap();
    soon(permit.release()).await.unwrap();
    let latch = a.count_down_latch("acl:latch");
    assert!(soon(latch.try_set_count(1)).await.unwrap());
    assert_eq!(soon(latch.count_down()).await.unwrap(), 0);
    soon(b.count_down_latch("acl:latch").wait()).await.unwrap();

    // A leader election followed by an observer, and a fenced hash.
    let mut observer = b.leader_election("acl:leader").observe();
    assert_eq!(
        soon(observer.next()).await.unwrap().unwrap(),
        ferrisson::LeaderChange::NoLeader
    );
    let leadership = soon(a.leader_election("acl:leader").campaign("a"))
        .await
        .unwrap();
    assert!(matches!(
        within(Duration::from_secs(20), observer.next())
            .await
            .unwrap()
            .unwrap(),
        ferrisson::LeaderChange::Leader(_)
    ));
    let state = a.fenced_hash("acl:state");
    assert_eq!(
        soon(state.set("f", "v", leadership.term())).await.unwrap(),
        ferrisson::FencedWrite::Written
    );
    soon(leadership.resign()).await.unwrap();

    // A key of another type is read (TYPE) and refused.
    server.cmd(&["SET", "acl:string", "v"]);
    let err = soon(a.lock("acl:string").try_lock()).await.unwrap_err();
    assert!(matches!(err, ferrisson::Error::WrongType { .. }), "{err}");
}

/// A user who may not run scripts is refused when the client is built,
/// with an error that says so, not at the first lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_who_may_not_run_scripts_is_refused_at_connect() {
    let rules = ferrisson::config::ACL_RULES.replace("+@scripting", "");
    let server = server_with_user(&[], &rules);
    let err = soon(ferrisson::Client::connect(url(&server, "s3cret-pw")))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, ferrisson::Error::ScriptingUnavailable { reason, .. }
            if reason.to_lowercase().contains("perm")),
        "{err}"
    );
    assert!(
        err.to_string().contains("does not run Lua scripts"),
        "{err}"
    );
}

/// A server that refuses `SCRIPT LOAD` (for memory, or as here an ACL
/// user without it) still runs every call: a script it does not have is
/// sent whole with EVAL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_script_load_sends_the_script_whole() {
    let rules = format!("{} -script", ferrisson::config::ACL_RULES);
    let server = server_with_user(&[], &rules);
    let a = locker(&server).await;
    let b = locker(&server).await;
    for round in 0..3 {
        let guard = soon(a.lock("whole").lock()).await.unwrap();
        let waiting = {
            let lock = b.lock("whole");
            tokio::spawn(async move { lock.lock().await.unwrap() })
        };
        eventually(Duration::from_secs(10), || async { b.subscriptions() == 1 }).await;
        soon(guard.unlock()).await.unwrap();
        let next = within(Duration::from_secs(10), waiting).await.unwrap();
        soon(next.unlock()).await.unwrap();
        assert_eq!(
            server.cmd(&["EXISTS", "whole"]).as_int(),
            Some(0),
            "{round}"
        );
    }
    // The scripts came whole: the probe, an acquire and a release at
    // least (EVAL caches a script, so later calls find it by EVALSHA).
    assert!(calls(&server, "eval") >= 3);
}

/// Replica sync as a user with exactly the documented rules: the online
/// replicas are counted (ROLE) and waited for (WAIT), not turned off.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_with_exactly_the_documented_acl_rules_syncs_replicas() {
    let master = server_with_user(&[], ferrisson::config::ACL_RULES);
    let replica = RedisServer::start_with_args(&[
        "--replicaof",
        "127.0.0.1",
        &master.port().to_string(),
        "--masterauth",
        "admin-pw",
    ]);
    eventually(Duration::from_secs(10), || async {
        let info = replica.cmd(&["INFO", "replication"]).as_string().unwrap();
        info.contains("master_link_status:up")
    })
    .await;
    eventually(Duration::from_secs(10), || async {
        common::replicas_acknowledge(&master, 1)
    })
    .await;
    let client = soon(
        ferrisson::Client::builder(url(&master, "s3cret-pw"))
            .replica_sync_with(Some(ferrisson::config::ReplicaSync::REDISSON))
            .build(),
    )
    .await
    .unwrap();
    let (roles, waits) = (calls(&master, "role"), calls(&master, "wait"));
    let guard = soon(client.lock("acl:synced").lock()).await.unwrap();
    assert_eq!(replica.cmd(&["EXISTS", "acl:synced"]).as_int(), Some(1));
    soon(guard.unlock()).await.unwrap();
    assert!(calls(&master, "role") > roles);
    assert_eq!(calls(&master, "wait"), waits + 2);
}
