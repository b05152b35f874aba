//! A Redis Sentinel process of its own, for the sentinel tests.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::RedisServer;

/// A `redis-server --sentinel` process monitoring `master` as `mymaster`;
/// killed and its directory removed on drop.
#[derive(Debug)]
pub struct Sentinel {
    port: u16,
    child: Child,
    dir: std::path::PathBuf,
}

/// How long a sentinel may take to act (to carry out a failover, then to
/// turn the old master into a replica), by its own clocks: it reads each
/// instance's role every 10 s and waits 8 s before correcting a wrong one,
/// and it acts on nothing for 30 s in TILT mode, which it enters when its
/// timer runs more than 2 s late (a process stalled on a loaded machine).
/// Measured with Redis 6.2: the old master demoted 11.5 s after `SENTINEL
/// FAILOVER`; 40.5 s after it when the sentinel had been stopped 3 s
/// before (TILT).
pub const SENTINEL_ACTS: Duration = Duration::from_secs(75);

impl Drop for Sentinel {
    fn drop(&mut self) {
        if std::thread::panicking() {
            // What the sentinel did (a TILT, a failover's steps), to read
            // beside the failure.
            let log = std::fs::read_to_string(self.dir.join("sentinel.log")).unwrap_or_default();
            let tail: Vec<_> = log.lines().rev().take(60).collect();
            eprintln!("sentinel {} log, last lines:", self.port);
            for line in tail.into_iter().rev() {
                eprintln!("  {line}");
            }
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Sentinel {
    pub fn start(master: &RedisServer) -> Sentinel {
        Sentinel::start_with(master, "")
    }

    /// With `extra` lines in its configuration (e.g. the master's password).
    pub fn start_with(master: &RedisServer, extra: &str) -> Sentinel {
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

    pub fn cli(&self, args: &[&str]) -> String {
        let out = Command::new("redis-cli")
            .args(["-p", &self.port.to_string()])
            .args(args)
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// The port of the master the sentinel names now.
    pub fn master_port(&self) -> Option<u16> {
        self.cli(&["SENTINEL", "GET-MASTER-ADDR-BY-NAME", "mymaster"])
            .lines()
            .nth(1)
            .and_then(|port| port.trim().parse().ok())
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }
}
