//! A Redis Cluster of private servers, for the cluster tests: starting,
//! joining and reading the nodes only. A test's cluster client is its own
//! (`Client::cluster_builder` is there only with the library's `cluster`
//! feature, which a test crate turns on for itself).

use std::process::Command;
use std::time::Duration;

use super::{eventually, RedisServer, RespValue};

/// The watchdog timeout of the cluster tests' clients.
pub const WATCHDOG: Duration = Duration::from_millis(1200);

/// Three masters, all slots covered; a dead master leaves the others
/// serving their slots.
pub async fn cluster() -> Vec<RedisServer> {
    make_cluster(0, None).await
}

/// Three masters with a password on every node.
pub async fn cluster_with_password(password: &str) -> Vec<RedisServer> {
    make_cluster(0, Some(password)).await
}

/// How every node of a test cluster starts.
const NODE_ARGS: [&str; 10] = [
    "--cluster-enabled",
    "yes",
    "--cluster-config-file",
    "nodes.conf",
    "--cluster-node-timeout",
    "1000",
    "--cluster-require-full-coverage",
    "no",
    "--repl-diskless-sync-delay",
    "0",
];

/// A new master without slots, met by the cluster of `nodes` (no
/// password), once every node knows it and it sees the cluster ok.
pub async fn join_empty_master(nodes: &[RedisServer]) -> RedisServer {
    let newcomer = RedisServer::start_with_args(&NODE_ARGS);
    let port = newcomer.port().to_string();
    nodes[0].cmd(&["CLUSTER", "MEET", "127.0.0.1", &port]);
    let known = format!(":{port}@");
    eventually(Duration::from_secs(30), || async {
        let knows = |node: &RedisServer| {
            node.try_cmd(&["CLUSTER", "NODES"])
                .ok()
                .and_then(|v| v.as_string())
                .is_some_and(|table| table.contains(&known))
        };
        let ok = newcomer
            .try_cmd(&["CLUSTER", "INFO"])
            .ok()
            .and_then(|v| v.as_string())
            .is_some_and(|info| info.contains("cluster_state:ok"));
        ok && nodes.iter().all(knows)
    })
    .await;
    newcomer
}

/// The node (index into `nodes`) that serves `slot` as master, as the
/// first node sees it.
pub fn owner(nodes: &[RedisServer], slot: i64) -> usize {
    let table = nodes[0].cmd(&["CLUSTER", "NODES"]).as_string().unwrap();
    (0..nodes.len())
        .find(|&i| {
            table.lines().any(|line| {
                line.contains(&format!(":{}@", nodes[i].port()))
                    && line.contains("master")
                    && serves(line, slot)
            })
        })
        .unwrap()
}

/// Three masters, each with `replicas` replicas in sync; with `password`,
/// every node requires it. A dead master leaves the others serving their
/// slots.
pub async fn make_cluster(replicas: usize, password: Option<&str>) -> Vec<RedisServer> {
    let mut args = NODE_ARGS.to_vec();
    if let Some(password) = password {
        args.extend(["--requirepass", password, "--masterauth", password]);
    }
    let nodes: Vec<RedisServer> = (0..3 * (1 + replicas))
        .map(|_| RedisServer::start_with_args(&args))
        .collect();
    let addrs: Vec<String> = nodes
        .iter()
        .map(|n| format!("127.0.0.1:{}", n.port()))
        .collect();
    let mut create = Command::new("redis-cli");
    if let Some(password) = password {
        create.args(["-a", password, "--no-auth-warning"]);
    }
    let out = create
        .args(["--cluster", "create"])
        .args(&addrs)
        .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
        .output()
        .expect("redis-cli on PATH");
    assert!(out.status.success(), "{out:?}");
    for node in &nodes {
        eventually(Duration::from_secs(30), || async {
            let look = |args: &[&str]| {
                node.try_cmd(args)
                    .ok()
                    .and_then(|v| v.as_string())
                    .unwrap_or_default()
            };
            let info = look(&["CLUSTER", "INFO"]);
            let replication = look(&["INFO", "replication"]);
            // A master counts a replica in WAIT once it acknowledges,
            // not as soon as its link is up.
            let master = replication.contains("role:master")
                && (replicas == 0 || super::replicas_acknowledge(node, replicas));
            info.contains("cluster_state:ok")
                && (master || replication.contains("master_link_status:up"))
        })
        .await;
    }
    // The tests count commands from here on (the WAITs above excluded).
    for node in &nodes {
        node.cmd(&["CONFIG", "RESETSTAT"]);
    }
    nodes
}

/// Whether the servers under test have sharded pub/sub (Redis 7 and
/// later, Valkey), which a cluster client then uses by default.
pub fn sharded_pubsub() -> bool {
    super::server::server_version() >= (7, 0)
}

/// How many clients listen for lock `name`'s releases where a default
/// cluster client subscribes: with sharded pub/sub, on the shard channel
/// of the nodes `at` (the slot's master, or its master and replica while
/// they switch roles); on Redis 6, on the classic channel of any node.
/// `None` while a node cannot be asked.
pub fn listeners(nodes: &[RedisServer], at: &[usize], name: &str) -> Option<i64> {
    let channel = format!("redisson_lock__channel:{{{name}}}");
    if sharded_pubsub() {
        at.iter()
            .map(|&i| {
                nodes[i]
                    .try_cmd(&["PUBSUB", "SHARDNUMSUB", &channel])
                    .ok()
                    .map(shard_count)
            })
            .sum()
    } else {
        nodes
            .iter()
            .map(|node| {
                node.try_cmd(&["PUBSUB", "NUMSUB", &channel])
                    .ok()
                    .map(shard_count)
            })
            .sum()
    }
}

pub fn shard_count(reply: RespValue) -> i64 {
    reply
        .as_array()
        .and_then(|a| a.get(1).and_then(|n| n.as_int()))
        .unwrap_or(0)
}

pub fn keyslot(node: &RedisServer, key: &str) -> i64 {
    node.cmd(&["CLUSTER", "KEYSLOT", key]).as_int().unwrap()
}

/// Whether a `CLUSTER NODES` line's slot ranges include `slot`.
pub fn serves(line: &str, slot: i64) -> bool {
    line.split_whitespace().skip(8).any(|range| {
        let mut bounds = range.split('-').map(|b| b.parse::<i64>());
        match (bounds.next(), bounds.next()) {
            (Some(Ok(lo)), Some(Ok(hi))) => (lo..=hi).contains(&slot),
            (Some(Ok(one)), None) => one == slot,
            _ => false,
        }
    })
}

/// Three masters with a replica each.
pub async fn cluster_with_replicas() -> Vec<RedisServer> {
    make_cluster(1, None).await
}

/// The node (index into `nodes`) that serves `slot` as master, and its
/// replica, once the first node's view of the cluster shows both (a
/// replica's role spreads by gossip, after the cluster already says ok).
pub async fn master_and_replica(nodes: &[RedisServer], slot: i64) -> (usize, usize) {
    let mut found = None;
    eventually(Duration::from_secs(20), || {
        found = find_master_and_replica(nodes, slot);
        let done = found.is_some();
        async move { done }
    })
    .await;
    found.unwrap()
}

pub fn find_master_and_replica(nodes: &[RedisServer], slot: i64) -> Option<(usize, usize)> {
    let table = nodes[0].cmd(&["CLUSTER", "NODES"]).as_string()?;
    let index_of = |port: &str| {
        nodes
            .iter()
            .position(|n| n.port().to_string() == port)
            .unwrap()
    };
    let port_of = |line: &str| {
        let addr = line.split_whitespace().nth(1).unwrap();
        addr.split('@')
            .next()
            .unwrap()
            .rsplit(':')
            .next()
            .unwrap()
            .to_owned()
    };
    let master = table
        .lines()
        .find(|line| line.contains("master") && serves(line, slot))?;
    let master_id = master.split_whitespace().next()?;
    let replica = table
        .lines()
        .find(|line| line.split_whitespace().nth(3) == Some(master_id))?;
    Some((index_of(&port_of(master)), index_of(&port_of(replica))))
}

pub fn wait_calls(node: &RedisServer) -> u64 {
    let info = node.cmd(&["INFO", "commandstats"]).as_string().unwrap();
    info.lines()
        .find_map(|line| line.strip_prefix("cmdstat_wait:calls="))
        .and_then(|rest| rest.split(',').next())
        .map_or(0, |n| n.parse().unwrap())
}

/// How many clients `node` has blocked (in WAIT, here).
pub fn blocked_clients(node: &RedisServer) -> u64 {
    let info = node.cmd(&["INFO", "clients"]).as_string().unwrap();
    info.lines()
        .find_map(|line| line.strip_prefix("blocked_clients:"))
        .map_or(0, |n| n.trim().parse().unwrap())
}

/// The id of the node at `port`, from `CLUSTER NODES`.
pub fn node_id(nodes: &[RedisServer], index: usize) -> String {
    let table = nodes[0].cmd(&["CLUSTER", "NODES"]).as_string().unwrap();
    let port = format!(":{}@", nodes[index].port());
    table
        .lines()
        .find(|line| line.contains(&port))
        .and_then(|line| line.split_whitespace().next())
        .unwrap()
        .to_owned()
}

/// Moves `slot`, with its keys, from the master `from` to the master `to`.
pub fn move_slot(nodes: &[RedisServer], slot: i64, from: usize, to: usize) {
    let (from_id, to_id) = (node_id(nodes, from), node_id(nodes, to));
    let slot = slot.to_string();
    nodes[to].cmd(&["CLUSTER", "SETSLOT", &slot, "IMPORTING", &from_id]);
    nodes[from].cmd(&["CLUSTER", "SETSLOT", &slot, "MIGRATING", &to_id]);
    let keys = nodes[from].cmd(&["CLUSTER", "GETKEYSINSLOT", &slot, "1000"]);
    let port = nodes[to].port().to_string();
    for key in keys.as_array().unwrap() {
        let key = key.as_string().unwrap();
        nodes[from].cmd(&["MIGRATE", "127.0.0.1", &port, &key, "0", "5000"]);
    }
    for node in nodes {
        node.cmd(&["CLUSTER", "SETSLOT", &slot, "NODE", &to_id]);
    }
}
