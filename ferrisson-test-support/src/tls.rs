//! A private CA and a `redis-server` with a TLS port, for the TLS tests
//! (feature `tls` or `native-tls`).

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use super::RedisServer;

/// A CA and a server certificate for 127.0.0.1, in a fresh directory,
/// made here (rcgen) so that the tests need no `openssl` command.
#[derive(Debug)]
pub struct Certificates {
    dir: PathBuf,
}

impl Drop for Certificates {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Certificates {
    // No `Default`: each call makes a new CA and writes it to disk.
    #[allow(clippy::new_without_default)]
    pub fn new() -> Certificates {
        use rcgen::{BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa};
        let dir = super::server::unique_dir();
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

    pub fn path(&self, file: &str) -> String {
        self.dir.join(file).to_str().unwrap().to_owned()
    }

    pub fn ca(&self) -> Vec<u8> {
        std::fs::read(Path::new(&self.path("ca.crt"))).unwrap()
    }
}

/// Where the TLS tests take their server from when the suite's has no
/// TLS (the servers in PyPI wheels are built without it).
const TLS_BINARY_ENV: &str = "FERRISSON_TLS_REDIS_SERVER";

/// The server binary the TLS tests run: `$FERRISSON_TLS_REDIS_SERVER`, or
/// the suite's own. Named on stderr, so that a run on a server without TLS
/// shows where its TLS tests ran instead; a binary without TLS fails to
/// start, with its log, never a silent pass.
fn tls_binary() -> OsString {
    let binary = std::env::var_os(TLS_BINARY_ENV)
        .filter(|value| !value.is_empty())
        .unwrap_or_else(super::server::redis_binary);
    eprintln!(
        "TLS tests on {} (version {:?}; {TLS_BINARY_ENV} names another)",
        Path::new(&binary).display(),
        super::server::version_of(&binary)
    );
    binary
}

/// A server with its plain port (for the harness) and a TLS port.
pub fn tls_server(certs: &Certificates) -> (RedisServer, u16) {
    let tls_port = super::server::free_port();
    let server = RedisServer::start_binary(
        tls_binary(),
        &[
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
        ],
    );
    (server, tls_port)
}
