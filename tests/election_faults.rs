//! The leader election across OS processes: candidates in child processes
//! campaign on one spawned server, and the leader is killed (SIGKILL),
//! frozen past its lease (SIGSTOP), or sees Redis restart. Each candidate
//! writes, while it leads, to a fenced hash with its term: the resource
//! that tells a late leader apart.

use ferrisson_test_support as common;

use std::time::{Duration, Instant};

use common::child::{self, ChildProcess};
use common::RedisServer;
#[cfg(feature = "sentinel")]
use common::{
    eventually,
    sentinel::{Sentinel, SENTINEL_ACTS},
};

/// The lease (watchdog timeout) of every candidate: renewals every 1.3 s,
/// so that a leader does not lose its lease to a busy machine's stalls.
const LEASE: Duration = Duration::from_millis(4000);

/// How long a handover may take: one lease for the old lock to run out,
/// and two more, generously, for a loaded machine.
const HANDOVER: Duration = Duration::from_millis(3 * 4000);

/// The field every candidate writes, `<label>:<term>`.
const FIELD: &str = "progress";

/// The child side: campaigns, and while it leads writes its term to the
/// fenced hash every 50 ms, saying each outcome; when the leadership is
/// lost it says so, tries one late write with its old term, says how it
/// went, and campaigns again.
///
/// Lines: `leads <term>`, `try <term>` before each write, `wrote <term>
/// ok`, `wrote <term> refused <highest>`, `wrote <term> error`, `lost
/// <term>`, `late <term> ok`, `late <term> refused <highest>`. The value
/// written is `<label>:<term>`.
#[test]
fn candidate_child() {
    child::run_as("candidate", candidate);
}

async fn candidate() {
    let url = child::setting("REDIS_URL");
    let label = child::setting("LABEL");
    let client = builder(&url).watchdog_timeout(LEASE).build().await.unwrap();
    let election = client.leader_election("fleet:leader");
    let state = client.fenced_hash("fleet:state");
    let outcome = |write: ferrisson::Result<ferrisson::FencedWrite>| match write {
        Ok(ferrisson::FencedWrite::Written) => "ok".to_owned(),
        Ok(ferrisson::FencedWrite::Refused { highest }) => format!("refused {highest}"),
        Err(_) => "error".to_owned(),
    };
    loop {
        let leadership = match election.campaign(&label).await {
            Ok(leadership) => leadership,
            // Redis restarting: campaign again.
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let term = leadership.term();
        child::say(&format!("leads {term}"));
        loop {
            tokio::select! {
                () = leadership.lost() => break,
                () = tokio::time::sleep(Duration::from_millis(50)) => {
                    child::say(&format!("try {term}"));
                    let write = state.set(FIELD, &format!("{label}:{term}"), term).await;
                    child::say(&format!("wrote {term} {}", outcome(write)));
                }
            }
        }
        child::say(&format!("lost {term}"));
        let late = state.set(FIELD, &format!("{label}:{term}"), term).await;
        child::say(&format!("late {term} {}", outcome(late)));
    }
}

/// A client builder for `url`, a sentinel's when the parent said
/// `SENTINEL=1`.
fn builder(url: &str) -> ferrisson::ClientBuilder {
    #[cfg(feature = "sentinel")]
    if std::env::var("SENTINEL").as_deref() == Ok("1") {
        return ferrisson::Client::sentinel_builder([url], "mymaster");
    }
    ferrisson::Client::builder(url)
}

/// Three candidates, and every line each has said, in the order this
/// process read them.
struct Fleet {
    children: Vec<ChildProcess>,
    said: Vec<(usize, String)>,
}

impl Fleet {
    fn start(server: &RedisServer) -> Fleet {
        Fleet::start_at(&server.url(), false)
    }

    /// Three candidates on `url`, a sentinel's when `sentinel`.
    fn start_at(url: &str, sentinel: bool) -> Fleet {
        let children = (0..3)
            .map(|n| {
                ChildProcess::spawn(
                    "candidate_child",
                    "candidate",
                    &[
                        ("REDIS_URL", url.to_owned()),
                        ("LABEL", format!("candidate-{n}")),
                        ("SENTINEL", if sentinel { "1" } else { "0" }.to_owned()),
                    ],
                )
            })
            .collect();
        Fleet {
            children,
            said: Vec::new(),
        }
    }

    /// Looks at the lines said from the `from`th on, those read already
    /// and then new ones, until `found` picks one (child, line), within
    /// `limit`; panics with all that was said otherwise.
    fn find_from<T>(
        &mut self,
        from: usize,
        limit: Duration,
        mut found: impl FnMut(usize, &str) -> Option<T>,
    ) -> T {
        for (n, line) in &self.said[from.min(self.said.len())..] {
            if let Some(hit) = found(*n, line) {
                return hit;
            }
        }
        self.wait_for(limit, found)
    }

    /// Reads every child's new lines until `found` picks one (child,
    /// line), within `limit`; panics with all that was said otherwise.
    fn wait_for<T>(
        &mut self,
        limit: Duration,
        mut found: impl FnMut(usize, &str) -> Option<T>,
    ) -> T {
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            for n in 0..self.children.len() {
                while let Some(line) = self.children[n].try_line(Duration::from_millis(1)) {
                    self.said.push((n, line.clone()));
                    if let Some(hit) = found(n, &line) {
                        return hit;
                    }
                }
            }
        }
        panic!("not seen within {limit:?}; said: {:#?}", self.said);
    }

    /// The next `leads <term>` from a child other than `not`.
    fn next_leader(&mut self, not: Option<usize>, limit: Duration) -> (usize, u64) {
        self.wait_for(limit, |n, line| {
            let term = line.strip_prefix("leads ")?.parse().ok()?;
            (Some(n) != not).then_some((n, term))
        })
    }

    /// Waits until child `n` says `line` (a new line).
    fn hear(&mut self, n: usize, line: &str, limit: Duration) {
        self.wait_for(limit, |from, said| {
            (from == n && said == line).then_some(())
        });
    }

    /// Takes in what child `n` said and this process has not read yet.
    fn drain(&mut self, n: usize) {
        while let Some(line) = self.children[n].try_line(Duration::from_millis(100)) {
            self.said.push((n, line));
        }
    }

    /// Whether child `n` has said `line`.
    fn has_said(&self, n: usize, line: &str) -> bool {
        self.said
            .iter()
            .any(|(from, said)| *from == n && said == line)
    }
}

/// The highest token that has written the candidates' fenced hash, as the
/// server at `server` keeps it.
fn fence(server: &RedisServer) -> u64 {
    server
        .cmd(&["GET", "ferrisson_fence:{fleet:state}"])
        .as_string()
        .expect("a fence")
        .parse()
        .unwrap()
}

/// Writes a marker over the candidates' field on `server` (a raw write,
/// which the fence does not see), waits until a candidate writes over it,
/// and returns the term that write carried.
fn next_write(server: &RedisServer, limit: Duration) -> u64 {
    server.cmd(&["HSET", "fleet:state", FIELD, "marker"]);
    let deadline = Instant::now() + limit;
    loop {
        if let Ok(value) = server.try_cmd(&["HGET", "fleet:state", FIELD]) {
            if let Some(value) = value.as_string().filter(|v| v != "marker") {
                let (_, term) = value.rsplit_once(':').expect("<label>:<term>");
                return term.parse().unwrap();
            }
        }
        assert!(Instant::now() < deadline, "no write within {limit:?}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// SIGKILL of the leader: another candidate leads once the lock's TTL
/// runs out (a lease after the last renewal), with a higher term, and its
/// writes are accepted.
#[test]
fn a_killed_leader_is_replaced_once_its_lease_runs_out() {
    let server = RedisServer::start();
    let mut fleet = Fleet::start(&server);
    let (first, old_term) = fleet.next_leader(None, Duration::from_secs(30));
    fleet.hear(first, &format!("wrote {old_term} ok"), HANDOVER);
    fleet.children[first].kill();
    let killed = Instant::now();
    let (next, term) = fleet.next_leader(Some(first), HANDOVER);
    let took = killed.elapsed();
    assert!(term > old_term);
    fleet.hear(next, &format!("wrote {term} ok"), HANDOVER);
    assert!(next_write(&server, HANDOVER) >= term);
    println!("a new leader {took:?} after the kill (lease {LEASE:?})");
}

/// SIGSTOP of the leader past its lease: another leads with a higher term
/// and writes; the frozen one, woken, reports its leadership lost, and its
/// writes with the old term are refused: the late one, and any its work
/// loop started on waking.
#[test]
fn a_frozen_leaders_late_writes_are_refused() {
    let server = RedisServer::start();
    let mut fleet = Fleet::start(&server);
    let (frozen, old_term) = fleet.next_leader(None, Duration::from_secs(30));
    fleet.hear(frozen, &format!("wrote {old_term} ok"), HANDOVER);
    fleet.children[frozen].signal("STOP");
    let stopped = Instant::now();
    fleet.drain(frozen);
    assert!(
        !fleet.has_said(frozen, &format!("lost {old_term}")),
        "the leader lost its lease before it was frozen; said: {:#?}",
        fleet.said
    );
    let (next, term) = fleet.next_leader(Some(frozen), HANDOVER);
    let took = stopped.elapsed();
    assert!(term > old_term);
    fleet.hear(next, &format!("wrote {term} ok"), HANDOVER);
    // All the frozen child said before it froze is read by now (it has
    // said nothing for a lease): every line after `woken` was said after
    // the next leader wrote.
    fleet.drain(frozen);
    let woken = fleet.said.len();
    fleet.children[frozen].signal("CONT");
    let late = fleet.find_from(woken, HANDOVER, |n, line| {
        (n == frozen)
            .then(|| {
                line.strip_prefix(&format!("late {old_term} "))
                    .map(str::to_owned)
            })
            .flatten()
    });
    assert!(fleet.has_said(frozen, &format!("lost {old_term}")));
    let highest: u64 = late
        .strip_prefix("refused ")
        .unwrap_or_else(|| panic!("the late write was not refused: {late}"))
        .parse()
        .unwrap();
    assert!(highest >= term);
    println!(
        "a new leader {took:?} after the freeze (lease {LEASE:?}); the woken leader's \
         late write with term {old_term} refused, {highest} had written"
    );
    // A write its loop had sent before freezing may be reported on waking;
    // one it started on waking (its `try` after `woken`) must be refused.
    let mut tried = false;
    for (n, line) in &fleet.said[woken..] {
        if *n != frozen {
            continue;
        }
        tried |= line == &format!("try {old_term}");
        assert!(
            !(tried && line == &format!("wrote {old_term} ok")),
            "a write of the frozen leader started after the next leader wrote was accepted"
        );
    }
}

/// Redis restarts (with its data: an append-only file, written at every
/// command): the terms never go back. The first write after the restart
/// carries a term at least the fence the server kept before it.
#[test]
fn terms_keep_rising_through_a_restart() {
    let mut server =
        RedisServer::start_with_args(&["--appendonly", "yes", "--appendfsync", "always"]);
    let mut fleet = Fleet::start(&server);
    let (first, old_term) = fleet.next_leader(None, Duration::from_secs(30));
    fleet.hear(first, &format!("wrote {old_term} ok"), HANDOVER);
    let highest = fence(&server);
    server.restart();
    let back = Instant::now();
    let term = next_write(&server, HANDOVER * 2);
    println!(
        "a write accepted again {:?} after the restart, term {term} (the fence before: {highest})",
        back.elapsed()
    );
    assert!(term >= highest, "term {term} wrote after {highest}");
}

/// A Sentinel failover under a fleet of candidates, with replica sync (on
/// by default there): every campaign returned once the replica had its
/// term, so the first write on the new master carries a term at least the
/// fence the old master kept, whoever leads there.
#[cfg(feature = "sentinel")]
#[test]
fn terms_keep_rising_through_a_sentinel_failover() {
    let master = RedisServer::start();
    let replica =
        RedisServer::start_with_args(&["--replicaof", "127.0.0.1", &master.port().to_string()]);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let sentinel = runtime.block_on(async {
        eventually(Duration::from_secs(10), || async {
            let info = replica.try_cmd(&["INFO", "replication"]).ok();
            info.and_then(|i| i.as_string())
                .is_some_and(|i| i.contains("master_link_status:up"))
        })
        .await;
        let sentinel = Sentinel::start(&master);
        eventually(Duration::from_secs(20), || async {
            let replicas = sentinel.cli(&["SENTINEL", "REPLICAS", "mymaster"]);
            replicas.contains(&replica.port().to_string()) && !replicas.contains("disconnected")
        })
        .await;
        sentinel
    });
    let mut fleet = Fleet::start_at(&sentinel.url(), true);
    let (first, old_term) = fleet.next_leader(None, Duration::from_secs(30));
    fleet.hear(first, &format!("wrote {old_term} ok"), HANDOVER);
    let highest = fence(&master);
    runtime.block_on(async {
        eventually(SENTINEL_ACTS, || async {
            sentinel
                .cli(&["SENTINEL", "FAILOVER", "mymaster"])
                .starts_with("OK")
        })
        .await;
        eventually(SENTINEL_ACTS, || async {
            sentinel.master_port() == Some(replica.port())
        })
        .await;
    });
    let term = next_write(&replica, Duration::from_secs(60));
    println!("the first write on the new master: term {term} (the fence before: {highest})");
    assert!(term >= highest, "term {term} wrote after {highest}");
}
