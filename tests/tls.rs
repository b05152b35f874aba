//! `rediss://`: a server with a certificate from a private CA, made in the
//! test. README's test command (`--all-features`) runs them on rustls
//! without the system's trust store; `.ci/run` runs them again with
//! `-p ferrisson --features tls` alone and with `-p ferrisson --features
//! native-tls` alone (`-p`: the inspector's crate would turn rustls on).
#![cfg(any(feature = "tls", feature = "native-tls"))]

use ferrisson_test_support as common;

use std::time::Duration;

use common::tls::{tls_server, Certificates};
use common::{soon, within};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locks_wait_and_release_over_tls_with_an_acl_user() {
    let certs = Certificates::new();
    let (server, port) = tls_server(&certs);
    server.cmd(&[
        "ACL", "SETUSER", "locker", "on", ">tls-pw", "~*", "&*", "+@all",
    ]);
    let url = format!("rediss://locker:tls-pw@127.0.0.1:{port}/");
    let connect = || {
        ferrisson::Client::builder(url.as_str())
            .tls_root_certificate(certs.ca())
            .build()
    };
    let a = soon(connect()).await.unwrap();
    let b = soon(connect()).await.unwrap();
    let guard = soon(a.lock("over-tls").lock()).await.unwrap();
    let lock = b.lock("over-tls");
    let waiting = tokio::spawn(async move { lock.lock().await.unwrap() });
    tokio::time::sleep(Duration::from_millis(100)).await;
    soon(guard.unlock()).await.unwrap();
    let next = within(Duration::from_secs(10), waiting).await.unwrap();
    soon(next.unlock()).await.unwrap();
    assert!(!format!("{a:?}").contains("tls-pw"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_untrusted_certificate_is_refused_clearly() {
    let certs = Certificates::new();
    let (_server, port) = tls_server(&certs);
    // The system's trust store does not know the test CA.
    let err = soon(ferrisson::Client::connect(format!(
        "rediss://127.0.0.1:{port}/"
    )))
    .await
    .unwrap_err();
    let text = err.to_string().to_lowercase();
    assert!(
        text.contains("certificate") || text.contains("tls") || text.contains("ssl"),
        "{text}"
    );
}

#[cfg(feature = "cluster")]
#[tokio::test]
async fn a_private_root_certificate_is_refused_for_a_cluster() {
    // Refused before anything is dialled: the address is never reached.
    let err = ferrisson::Client::cluster_builder(["rediss://127.0.0.1:1/"])
        .tls_root_certificate(b"not read".to_vec())
        .build()
        .await
        .unwrap_err();
    assert!(
        matches!(err, ferrisson::Error::InvalidArgument(_)),
        "{err:?}"
    );
    assert!(err.to_string().contains("cluster"), "{err}");
}
