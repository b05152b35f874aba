//! A Redis Sentinel process of its own, for the sentinel tests.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::RedisServer;

/// A `redis-server --sentinel` process monitoring `master` as `mymaster`;
/// killed and its directory removed on drop.
pub(crate) struct Sentinel {
    port: u16,
    child: Child,
    dir: std::path::PathBuf,
}

impl Drop for Sentinel {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Sentinel {
    pub(crate) fn start(master: &RedisServer) -> Sentinel {
        Sentinel::start_with(master, "")
    }

    /// With `extra` lines in its configuration (e.g. the master's password).
    pub(crate) fn start_with(master: &RedisServer, extra: &str) -> Sentinel {
        let port = super::server::free_port();
        let dir = super::server::unique_dir();
        let conf = dir.join("sentinel.conf");
        std::fs::write(
            &conf,
            format!(
                "port {port}\nbind 127.0.0.1\ndir {}\n\
                 sentinel monitor mymaster 127.0.0.1 {} 1\n\
                 sentinel down-after-milliseconds mymaster 1000\n\
                 sentinel failover-timeout mymaster 5000\nlogfile {}/sentinel.log\n{extra}\n",
                dir.display(),
                master.port(),
                dir.display()
            ),
        )
        .unwrap();
        let child = Command::new(super::server::redis_binary())
            .arg(&conf)
            .arg("--sentinel")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("the redis-server binary runs");
        let sentinel = Sentinel { port, child, dir };
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while sentinel.master_port().is_none() {
            assert!(
                std::time::Instant::now() < deadline,
                "the sentinel did not start"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        sentinel
    }

    pub(crate) fn cli(&self, args: &[&str]) -> String {
        let out = Command::new("redis-cli")
            .args(["-p", &self.port.to_string()])
            .args(args)
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// The port of the master the sentinel names now.
    pub(crate) fn master_port(&self) -> Option<u16> {
        self.cli(&["SENTINEL", "GET-MASTER-ADDR-BY-NAME", "mymaster"])
            .lines()
            .nth(1)
            .and_then(|port| port.trim().parse().ok())
    }

    pub(crate) fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }
}
