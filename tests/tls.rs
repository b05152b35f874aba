//! `rediss://`: a server with a certificate from a private CA, made here
//! with `openssl`. Runs with `--features tls` (README's test command uses
//! `--all-features`).
#![cfg(feature = "tls")]

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::{soon, within, RedisServer};

/// A CA and a server certificate for 127.0.0.1, in a fresh directory.
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
        let dir = common::server::unique_dir();
        let run = |args: &[&str]| {
            let out = Command::new("openssl")
                .args(args)
                .current_dir(&dir)
                .output()
                .expect("openssl on PATH");
            assert!(out.status.success(), "openssl {args:?}: {out:?}");
        };
        run(&[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=ferrisson test CA",
            "-keyout",
            "ca.key",
            "-out",
            "ca.crt",
        ]);
        run(&[
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-subj",
            "/CN=127.0.0.1",
            "-keyout",
            "server.key",
            "-out",
            "server.csr",
        ]);
        std::fs::write(
            dir.join("san.cnf"),
            "subjectAltName=IP:127.0.0.1,DNS:localhost\n",
        )
        .unwrap();
        run(&[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "1",
            "-extfile",
            "san.cnf",
            "-out",
            "server.crt",
        ]);
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
