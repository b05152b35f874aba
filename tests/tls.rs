//! `rediss://`: a server with a certificate from a private CA, made in the
//! test. Runs with `--features tls` (rustls; README's test command
//! uses `--all-features`, which takes rustls too) and with `--features
//! native-tls` alone, which `.ci/run` runs apart.
#![cfg(any(feature = "tls", feature = "native-tls"))]

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::{soon, within, RedisServer};

/// A CA and a server certificate for 127.0.0.1, in a fresh directory,
/// made here (rcgen) so that the tests need no `openssl` command.
struct Certificates {
    dir: PathBuf,
}

impl Drop for Certificates {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Certificates {
    fn new() -> Certificates {
        use rcgen::{BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa};
        let dir = common::server::unique_dir();
        let ca_key = rcgen::KeyPair::generate().unwrap();
        let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.distinguished_name
            .push(DnType::CommonName, "ferrisson test CA");
        let ca = ca.self_signed(&ca_key).unwrap();
        let server_key = rcgen::KeyPair::generate().unwrap();
        let mut server =
            CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()]).unwrap();
        server
            .distinguished_name
            .push(DnType::CommonName, "127.0.0.1");
        server.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let server = server.signed_by(&server_key, &ca, &ca_key).unwrap();
        let write = |file: &str, pem: String| std::fs::write(dir.join(file), pem).unwrap();
        write("ca.crt", ca.pem());
        write("server.crt", server.pem());
        write("server.key", server_key.serialize_pem());
        Certificates { dir }
    }

    fn path(&self, file: &str) -> String {
        self.dir.join(file).to_str().unwrap().to_owned()
    }

    fn ca(&self) -> Vec<u8> {
        std::fs::read(Path::new(&self.path("ca.crt"))).unwrap()
    }
}

/// A server with its plain port (for the harness) and a TLS port.
fn tls_server(certs: &Certificates) -> (RedisServer, u16) {
    let tls_port = common::server::free_port();
    let server = RedisServer::start_with_args(&[
        "--tls-port",
        &tls_port.to_string(),
        "--tls-cert-file",
        &certs.path("server.crt"),
        "--tls-key-file",
        &certs.path("server.key"),
        "--tls-ca-cert-file",
        &certs.path("ca.crt"),
        "--tls-auth-clients",
        "no",
    ]);
    (server, tls_port)
}

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
