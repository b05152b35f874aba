//! The leader election across OS processes: candidates in child processes
//! campaign on one spawned server, and the leader is killed (SIGKILL),
//! frozen past its lease (SIGSTOP), or sees Redis restart. Each candidate
//! writes, while it leads, to a fenced hash with its term: the resource
//! that tells a late leader apart.

mod common;

use std::time::{Duration, Instant};

use common::child::{self, ChildProcess};
use common::RedisServer;
#[cfg(feature = "sentinel")]
use common::{eventually, sentinel::Sentinel};

/// The lease (watchdog timeout) of every candidate.
const LEASE: Duration = Duration::from_millis(2000);

/// How long a handover may take: one lease for the old lock to run out,
/// and as much again, generously, for a loaded machine.
const HANDOVER: Duration = Duration::from_millis(3 * 2000);

/// The child side: campaigns, and while it leads writes its term to the
/// fenced hash every 50 ms, saying each outcome; when the leadership is
/// lost it says so, tries one late write with its old term, says how it
/// went, and campaigns again.
///
/// Lines: `leads <term>`, `wrote <term> ok`, `wrote <term> refused
/// <highest>`, `wrote <term> error`, `lost <term>`, `late <term> ok`,
/// `late <term> refused <highest>`.
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
                    let write = state.set("progress", &label, term).await;
                    child::say(&format!("wrote {term} {}", outcome(write)));
                }
            }
        }
        child::say(&format!("lost {term}"));
        let late = state.set("progress", &label, term).await;
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

    /// Reads every child's lines until `found` picks one (child, line),
    /// within `limit`; panics with all that was said otherwise.
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

    /// Waits until child `n` says `line`.
    fn hear(&mut self, n: usize, line: &str, limit: Duration) {
        self.wait_for(limit, |from, said| {
            (from == n && said == line).then_some(())
        });
    }

    /// The writes accepted from the `from`th line on: (child, term).
    fn accepted_since(&self, from: usize) -> Vec<(usize, u64)> {
        self.said[from..]
            .iter()
            .filter_map(|(n, line)| {
                let rest = line.strip_prefix("wrote ")?;
                let (term, outcome) = rest.split_once(' ')?;
                (outcome == "ok").then(|| (*n, term.parse().unwrap()))
            })
            .collect()
    }
}

/// SIGKILL of the leader: another candidate leads within a handover, with
/// a higher term, and its writes are accepted.
#[test]
fn a_killed_leader_is_replaced_within_a_lease() {
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
    println!("a new leader {took:?} after the kill (lease {LEASE:?})");
}

/// SIGSTOP of the leader past its lease: another leads with a higher term
/// and writes; the frozen one, woken, reports its leadership lost, and its
/// writes with the old term are refused, the late one and any its work
/// loop made on waking.
#[test]
fn a_frozen_leaders_late_writes_are_refused() {
    let server = RedisServer::start();
    let mut fleet = Fleet::start(&server);
    let (frozen, old_term) = fleet.next_leader(None, Duration::from_secs(30));
    fleet.hear(frozen, &format!("wrote {old_term} ok"), HANDOVER);
    fleet.children[frozen].signal("STOP");
    let stopped = Instant::now();
    let (next, term) = fleet.next_leader(Some(frozen), HANDOVER);
    let took = stopped.elapsed();
    assert!(term > old_term);
    fleet.hear(next, &format!("wrote {term} ok"), HANDOVER);
    // What the frozen child said before it froze is all read by now (it
    // has said nothing for a lease); take the rest of it, so that every
    // line after `woken` was said after the next leader wrote.
    while let Some(line) = fleet.children[frozen].try_line(Duration::from_millis(100)) {
        fleet.said.push((frozen, line));
    }
    let woken = fleet.said.len();
    fleet.children[frozen].signal("CONT");
    fleet.hear(frozen, &format!("lost {old_term}"), HANDOVER);
    let late = fleet.wait_for(HANDOVER, |n, line| {
        (n == frozen)
            .then(|| {
                line.strip_prefix(&format!("late {old_term} "))
                    .map(str::to_owned)
            })
            .flatten()
    });
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
    for (n, line) in &fleet.said[woken..] {
        if *n == frozen {
            assert!(
                !line.starts_with(&format!("wrote {old_term} ok")),
                "a write of the frozen leader accepted after the next leader wrote"
            );
        }
    }
}

/// Redis restarts (with its data: an append-only file, written at every
/// command): the terms never go back, and the writes accepted after the
/// restart carry terms at least the last one accepted before.
#[test]
fn terms_keep_rising_through_a_restart() {
    let mut server =
        RedisServer::start_with_args(&["--appendonly", "yes", "--appendfsync", "always"]);
    let mut fleet = Fleet::start(&server);
    let (first, old_term) = fleet.next_leader(None, Duration::from_secs(30));
    fleet.hear(first, &format!("wrote {old_term} ok"), HANDOVER);
    let before = fleet.accepted_since(0);
    let highest = before.iter().map(|(_, term)| *term).max().unwrap();
    server.restart();
    let restarted = fleet.said.len();
    let back = Instant::now();
    // Someone writes again: the old leader, whose lock came back with
    // Redis, or a new one.
    fleet.wait_for(HANDOVER * 2, |_, line| line.ends_with(" ok").then_some(()));
    println!(
        "writes accepted again {:?} after the restart, with terms {:?} (the last before: {highest})",
        back.elapsed(),
        fleet.accepted_since(restarted)
    );
    for (n, term) in fleet.accepted_since(restarted) {
        assert!(
            term >= highest,
            "candidate {n} wrote with term {term} after {highest} had written"
        );
    }
}

/// A Sentinel failover under a fleet of candidates, with replica sync (on
/// by default there): every campaign returned once the replica had its
/// term, so the terms accepted after the failover are at least the last
/// one accepted before, whoever leads on the new master.
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
    runtime.block_on(async {
        eventually(Duration::from_secs(20), || async {
            sentinel
                .cli(&["SENTINEL", "FAILOVER", "mymaster"])
                .starts_with("OK")
        })
        .await;
    });
    let highest = fleet
        .accepted_since(0)
        .iter()
        .map(|(_, term)| *term)
        .max()
        .unwrap();
    let promoted = fleet.said.len();
    // Candidates follow the new master; someone writes there, with a term
    // at least the highest before.
    fleet.wait_for(Duration::from_secs(60), |_, line| {
        line.ends_with(" ok").then_some(())
    });
    runtime.block_on(async {
        eventually(Duration::from_secs(30), || async {
            sentinel.master_port() == Some(replica.port())
        })
        .await;
    });
    fleet.wait_for(Duration::from_secs(60), |_, line| {
        line.starts_with("wrote ").then_some(())
    });
    for (n, term) in fleet.accepted_since(promoted) {
        assert!(
            term >= highest,
            "candidate {n} wrote with term {term} after {highest} had written"
        );
    }
}
