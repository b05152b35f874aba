//! ACL users and passwords: every connection a client opens authenticates,
//! a wrong password is a clear error, and secrets stay out of `Debug`.

mod common;

use std::time::Duration;

use common::{soon, within, RedisServer};
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
