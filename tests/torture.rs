//! Torture: several OS processes, each with several tasks, fight over a few
//! locks of every kind for a fixed number of acquisitions. Each holder
//! records its critical section (enter and leave times from the machine's
//! one wall clock) and updates a shared counter with GET, a pause, then SET.
//! The checker proves that no two sections of one lock overlap (a read
//! section may overlap other reads), that fencing tokens rise in the order
//! the sections ran, and that no update was lost.
//!
//! Beside the locks, the synchronizers that exclude: a semaphore and a
//! permit-expirable semaphore of one permit each, a multi-lock over two
//! locks (taken in opposite orders by alternate tasks) and a RedLock over
//! three locks (on the one server here: this checks its rounds, not the
//! independence of servers, which `tests/redlock.rs` covers).
//!
//! `FERRISSON_TORTURE=long` runs ten times as many acquisitions.

use ferrisson_test_support as common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::child::{self, ChildProcess};
use common::rng::Rng;
use common::RedisServer;

/// The lock names and kinds: one of each kind. The read-write lock's
/// sections are reads or writes.
const LOCKS: [(&str, &str); 9] = [
    ("torture:reentrant", "reentrant"),
    ("torture:spin", "spin"),
    ("torture:fenced", "fenced"),
    ("torture:fair", "fair"),
    ("torture:rw", "rw"),
    ("torture:semaphore", "semaphore"),
    ("torture:expirable", "expirable"),
    ("torture:multi", "multi"),
    ("torture:redlock", "redlock"),
];

/// Every kind; a fight with a kill leaves out the semaphore, whose permits
/// a dead holder keeps for ever (as documented).
const ALL_KINDS: &str = "0,1,2,3,4,5,6,7,8";
const KINDS_WITHOUT_SEMAPHORE: &str = "0,1,2,3,4,6,7,8";

/// What one section holds, of any kind.
enum Held {
    Lock(ferrisson::LockGuard),
    Fenced(ferrisson::FencedGuard),
    Multi(ferrisson::MultiLockGuard),
    Red(ferrisson::RedLockGuard),
    Permits(ferrisson::Semaphore),
    Permit(ferrisson::Permit),
}

impl Held {
    fn token(&self) -> u64 {
        match self {
            Held::Fenced(guard) => guard.token(),
            _ => 0,
        }
    }

    fn is_lost(&self) -> bool {
        match self {
            Held::Lock(guard) => guard.is_lease_lost(),
            Held::Fenced(guard) => guard.is_lease_lost(),
            Held::Multi(guard) => guard.is_lease_lost(),
            Held::Red(guard) => guard.is_lease_lost(),
            Held::Permits(_) => false,
            Held::Permit(permit) => permit.is_expired(),
        }
    }

    async fn unlock(self) -> ferrisson::Result<()> {
        match self {
            Held::Lock(guard) => guard.unlock().await,
            Held::Fenced(guard) => guard.unlock().await,
            Held::Multi(guard) => guard.unlock().await,
            Held::Red(guard) => guard.unlock().await,
            Held::Permits(semaphore) => semaphore.release().await,
            Held::Permit(permit) => permit.release().await,
        }
    }
}

/// How an acquisition goes in.
#[derive(Clone, Copy)]
enum Way {
    /// Waits as long as it takes, watchdog mode.
    Watchdog,
    /// Waits as long as it takes, with the lease.
    Lease,
    /// Waits at most this long; may give up.
    Within(Duration),
}

/// One acquisition of lock `which` by `task`; `None` when a bounded wait
/// gave up.
async fn take(
    client: &ferrisson::Client,
    which: usize,
    read: bool,
    task: u64,
    way: Way,
    lease: Duration,
    waiter: Duration,
) -> Option<Held> {
    let (name, kind) = LOCKS[which];
    let locks = |names: &[String]| -> Vec<Box<dyn ferrisson::DistributedLock>> {
        names
            .iter()
            .map(|n| Box::new(client.lock(n.as_str())) as Box<dyn ferrisson::DistributedLock>)
            .collect()
    };
    match kind {
        "semaphore" => {
            let semaphore = client.semaphore(name);
            let got = match way {
                Way::Within(wait) => semaphore.try_acquire_for(wait).await.unwrap(),
                _ => semaphore.acquire().await.map(|()| true).unwrap(),
            };
            got.then_some(Held::Permits(semaphore))
        }
        "expirable" => {
            let semaphore = client.permit_expirable_semaphore(name);
            match way {
                Way::Within(wait) => semaphore
                    .try_acquire_with_lease(wait, lease)
                    .await
                    .unwrap()
                    .map(Held::Permit),
                _ => Some(Held::Permit(
                    semaphore.acquire_with_lease(lease).await.unwrap(),
                )),
            }
        }
        "multi" => {
            let mut names = vec![format!("{name}:a"), format!("{name}:b")];
            if task % 2 == 1 {
                names.reverse();
            }
            let multi = ferrisson::MultiLock::new(locks(&names));
            match way {
                Way::Watchdog => Some(multi.lock().await.unwrap()),
                Way::Lease => Some(multi.lock_with_lease(lease).await.unwrap()),
                Way::Within(wait) => multi.try_lock_for(wait).await.unwrap(),
            }
            .map(Held::Multi)
        }
        "redlock" => {
            let names: Vec<String> = (0..3).map(|i| format!("{name}:{i}")).collect();
            let red = ferrisson::RedLock::new(locks(&names));
            match way {
                Way::Watchdog => Some(red.lock().await.unwrap()),
                Way::Lease => Some(red.lock_with_lease(lease).await.unwrap()),
                Way::Within(wait) => red.try_lock_for(wait).await.unwrap(),
            }
            .map(Held::Red)
        }
        "fenced" => {
            let lock = client.fenced_lock(name);
            match way {
                Way::Watchdog => Some(lock.lock().await.unwrap()),
                Way::Lease => Some(lock.lock_with_lease(lease).await.unwrap()),
                Way::Within(wait) => lock.try_lock_for(wait).await.unwrap(),
            }
            .map(Held::Fenced)
        }
        _ => {
            let lock: Box<dyn ferrisson::DistributedLock> = match kind {
                "spin" => Box::new(client.spin_lock(name)),
                "fair" => Box::new(client.fair_lock(name).with_waiter_timeout(waiter)),
                "rw" if read => Box::new(client.read_write_lock(name).read()),
                "rw" => Box::new(client.read_write_lock(name).write()),
                _ => Box::new(client.lock(name)),
            };
            match way {
                Way::Watchdog => Some(lock.lock().await.unwrap()),
                Way::Lease => Some(lock.lock_with_lease(lease).await.unwrap()),
                Way::Within(wait) => lock.try_lock_for(wait).await.unwrap(),
            }
            .map(Held::Lock)
        }
    }
}

fn long() -> bool {
    std::env::var("FERRISSON_TORTURE").is_ok_and(|v| v == "long")
}

/// A tiny deterministic generator: xorshift64*.
/// The child side: `TASKS` tasks, each making `ROUNDS` acquisitions.
#[test]
fn torture_child() {
    child::run_as("torture-worker", worker);
}

async fn worker() {
    let url = child::setting("REDIS_URL");
    let tasks: u64 = child::setting("TASKS").parse().unwrap();
    let rounds: u64 = child::setting("ROUNDS").parse().unwrap();
    let seed: u64 = child::setting("SEED").parse().unwrap();
    let watchdog = Duration::from_millis(child::setting("WATCHDOG_MS").parse().unwrap());
    let lease = Duration::from_millis(child::setting("LEASE_MS").parse().unwrap());
    let waiter = Duration::from_millis(child::setting("WAITER_MS").parse().unwrap());
    let kinds: Vec<usize> = child::setting("KINDS")
        .split(',')
        .map(|k| k.parse().unwrap())
        .collect();
    let client = ferrisson::Client::builder(url.as_str())
        .watchdog_timeout(watchdog)
        .build()
        .await
        .unwrap();
    let mut handles = Vec::new();
    for task in 0..tasks {
        let client = client.clone();
        let url = url.clone();
        let kinds = kinds.clone();
        handles.push(tokio::spawn(async move {
            let mut rng = Rng::new(seed.wrapping_mul(1000).wrapping_add(task));
            let raw = redis::Client::open(url.as_str()).unwrap();
            let mut raw = raw.get_multiplexed_async_connection().await.unwrap();
            for _ in 0..rounds {
                let which = kinds[rng.below(kinds.len() as u64) as usize];
                let (name, kind) = LOCKS[which];
                let read = kind == "rw" && rng.below(3) == 0;
                // Every way in: watchdog, lease, bounded waits.
                let guard = loop {
                    let way = match rng.below(3) {
                        0 => Way::Watchdog,
                        1 => Way::Lease,
                        _ => Way::Within(Duration::from_millis(rng.below(200))),
                    };
                    let got = take(&client, which, read, task, way, lease, waiter).await;
                    if let Some(guard) = got {
                        break guard;
                    }
                };
                let enter = child::now_ns();
                let counter = format!("counter:{name}");
                let n: i64 = redis::cmd("GET")
                    .arg(&counter)
                    .query_async::<Option<i64>>(&mut raw)
                    .await
                    .unwrap()
                    .unwrap_or(0);
                if rng.below(4) == 0 {
                    tokio::time::sleep(Duration::from_micros(rng.below(2000))).await;
                } else {
                    tokio::task::yield_now().await;
                }
                // Re-entry under contention, for the locks that have it.
                if which < 4 && rng.below(5) == 0 {
                    let again =
                        match take(&client, which, false, task, Way::Watchdog, lease, waiter).await
                        {
                            Some(held) => held,
                            None => unreachable!("a lock() without a deadline gave up"),
                        };
                    again.unlock().await.unwrap();
                }
                if !read {
                    let _: () = redis::cmd("SET")
                        .arg(&counter)
                        .arg(n + 1)
                        .query_async(&mut raw)
                        .await
                        .unwrap();
                }
                let leave = child::now_ns();
                let token = guard.token();
                let lost = guard.is_lost();
                guard.unlock().await.unwrap();
                // At once: a worker killed later has told what it did.
                child::say(&format!(
                    "rec {which} {} {enter} {leave} {token} {lost}",
                    if read { "r" } else { "w" }
                ));
            }
        }));
    }
    for handle in handles {
        handle.await.unwrap();
    }
    child::say("done");
}

/// One critical section, as a child recorded it.
#[derive(Debug, Clone, Copy)]
struct Section {
    process: usize,
    read: bool,
    enter: u128,
    leave: u128,
    token: u64,
}

fn spawn_workers(
    server: &RedisServer,
    processes: usize,
    tasks: usize,
    rounds: usize,
    timings: [u64; 3],
    kinds: &str,
) -> Vec<ChildProcess> {
    // The semaphores start with one permit each (a plain count, as
    // `try_set_permits` writes it).
    server.cmd(&["SET", "torture:semaphore", "1"]);
    server.cmd(&["SET", "torture:expirable", "1"]);
    let [watchdog, lease, waiter] = timings;
    (0..processes)
        .map(|p| {
            ChildProcess::spawn(
                "torture_child",
                "torture-worker",
                &[
                    ("REDIS_URL", server.url()),
                    ("TASKS", tasks.to_string()),
                    ("ROUNDS", rounds.to_string()),
                    ("SEED", (p as u64 + 1).to_string()),
                    ("WATCHDOG_MS", watchdog.to_string()),
                    ("LEASE_MS", lease.to_string()),
                    ("WAITER_MS", waiter.to_string()),
                    ("KINDS", kinds.to_owned()),
                ],
            )
        })
        .collect()
}

/// Parses one worker's `rec` lines into `sections`; a line cut short by a
/// kill is skipped when `killed`.
fn collect(
    sections: &mut BTreeMap<usize, Vec<Section>>,
    process: usize,
    said: &[String],
    killed: bool,
) {
    for line in said {
        let f: Vec<&str> = line.split(' ').collect();
        if f[0] == "done" {
            continue;
        }
        let parsed = (f.len() == 7 && f[0] == "rec")
            .then(|| {
                Some(Section {
                    process,
                    read: f[2] == "r",
                    enter: f[3].parse().ok()?,
                    leave: f[4].parse().ok()?,
                    token: f[5].parse().ok()?,
                })
                .filter(|_| f[6] == "false" || f[6] == "true")
                .map(|s| (f[1].parse::<usize>(), s, f[6] == "true"))
            })
            .flatten();
        match parsed {
            Some((Ok(which), section, lost)) => {
                assert!(!lost, "a holder's lease was lost: {line}");
                sections.entry(which).or_default().push(section);
            }
            _ if killed => {}
            _ => panic!("bad line from worker {process}: {line}"),
        }
    }
}

/// Checks every lock's sections: overlaps (reads may share), fencing
/// tokens in order, and the counter against the writing sections (up to
/// `in_flight` more, for sections of a killed worker that wrote but never
/// said so). Returns (acquisitions, violations, lost updates).
fn check(
    server: &RedisServer,
    sections: &mut BTreeMap<usize, Vec<Section>>,
    in_flight: i64,
) -> (usize, usize, i64) {
    let mut acquisitions = 0;
    let mut violations = 0;
    let mut lost_updates = 0;
    for (which, list) in sections.iter_mut() {
        let (name, kind) = LOCKS[*which];
        list.sort_by_key(|s| s.enter);
        acquisitions += list.len();
        // Overlaps: each section against every later one that started
        // before it ended; read against read is allowed.
        for (i, a) in list.iter().enumerate() {
            for b in list[i + 1..].iter().take_while(|b| b.enter < a.leave) {
                if !(a.read && b.read) {
                    violations += 1;
                    println!("overlap on {name}: {a:?} and {b:?}");
                }
            }
        }
        if kind == "fenced" {
            for pair in list.windows(2) {
                if pair[1].token <= pair[0].token {
                    violations += 1;
                    println!("fencing token did not rise on {name}: {pair:?}");
                }
            }
        }
        let writes = list.iter().filter(|s| !s.read).count() as i64;
        let counter = server
            .cmd(&["GET", &format!("counter:{name}")])
            .as_string()
            .map_or(0, |n| n.parse::<i64>().unwrap());
        lost_updates += (writes - counter).max(0);
        if counter > writes + in_flight {
            violations += 1;
            println!("{name}: counter {counter} over {writes} writes + {in_flight} in flight");
        }
        let processes_seen: std::collections::BTreeSet<usize> =
            list.iter().map(|s| s.process).collect();
        println!(
            "{name} ({kind}): {} sections ({writes} writing) from {} processes, counter {counter}",
            list.len(),
            processes_seen.len()
        );
    }
    (acquisitions, violations, lost_updates)
}

/// Checks that nothing is held once every worker is done. A killed
/// worker's holds may outlive the fight (a RedLock needs only two of its
/// three keys, so the others can finish without ever taking the third):
/// with `leases_end` set, a key may still be held until then, and must be
/// gone by then.
fn assert_all_free(server: &RedisServer, leases_end: Option<Instant>) {
    let free = |key: &str| {
        let held = || server.cmd(&["EXISTS", key]).as_int() != Some(0);
        if let Some(end) = leases_end {
            // Time is the subject here: the victim's lease must run out.
            while held() && Instant::now() < end {
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        assert!(!held(), "{key} still held after every worker finished");
    };
    for (name, kind) in LOCKS {
        match kind {
            "semaphore" => assert_eq!(
                server.cmd(&["GET", name]).as_string().as_deref(),
                Some("1"),
                "{name}: the permit is not back"
            ),
            // A killed worker's permit may still be out, until its lease
            // ends: available and out add up to the one permit.
            "expirable" => {
                let available: i64 = server
                    .cmd(&["GET", name])
                    .as_string()
                    .unwrap()
                    .parse()
                    .unwrap();
                let out = server
                    .cmd(&["ZCARD", &format!("{{{name}}}:timeout")])
                    .as_int()
                    .unwrap();
                assert_eq!(
                    available + out,
                    1,
                    "{name}: {available} available, {out} out"
                );
            }
            "multi" => ["a", "b"].iter().for_each(|p| free(&format!("{name}:{p}"))),
            "redlock" => (0..3).for_each(|i| free(&format!("{name}:{i}"))),
            _ => free(name),
        }
    }
}

#[test]
fn processes_and_tasks_never_share_a_lock() {
    if child::role().is_some() {
        return;
    }
    let (processes, tasks, rounds) = if long() { (4, 8, 5000) } else { (3, 4, 250) };
    let server = RedisServer::start();
    let started = Instant::now();
    let children = spawn_workers(
        &server,
        processes,
        tasks,
        rounds,
        [3000, 20_000, 300_000],
        ALL_KINDS,
    );
    let limit = Duration::from_secs(if long() { 1800 } else { 120 });
    let mut sections: BTreeMap<usize, Vec<Section>> = BTreeMap::new();
    for (process, child) in children.into_iter().enumerate() {
        let (said, status) = child.finish(limit);
        assert!(status.success(), "worker {process} failed: {status}");
        assert_eq!(said.last().map(String::as_str), Some("done"));
        collect(&mut sections, process, &said, false);
    }
    let elapsed = started.elapsed();
    let (acquisitions, violations, lost_updates) = check(&server, &mut sections, 0);
    println!(
        "torture: {acquisitions} acquisitions by {processes} processes x {tasks} tasks in {elapsed:.1?}; \
         {violations} violations, {lost_updates} lost updates"
    );
    assert_eq!(acquisitions, processes * tasks * rounds);
    assert_eq!(violations, 0);
    assert_eq!(lost_updates, 0);
    assert_all_free(&server, None);
}

/// The same fight, and one worker process is killed (SIGKILL) in the middle
/// of it, holding locks and waiting in queues: the others go on once its
/// leases (2 s) and its fair-queue entries (2 s) run out, and still no two
/// sections overlap and no update is lost.
#[test]
fn a_worker_killed_mid_fight_breaks_nothing() {
    if child::role().is_some() {
        return;
    }
    let (processes, tasks, rounds) = if long() { (4, 8, 2000) } else { (3, 4, 150) };
    let server = RedisServer::start();
    let started = Instant::now();
    let mut children = spawn_workers(
        &server,
        processes,
        tasks,
        rounds,
        [1500, 2000, 2000],
        KINDS_WITHOUT_SEMAPHORE,
    );
    // Let the victim get well into the fight, then kill it.
    let victim_records = rounds * tasks / 3;
    let mut victim_said = Vec::new();
    while victim_said.len() < victim_records {
        victim_said.push(children[0].next_line(Duration::from_secs(60)));
    }
    children[0].kill();
    let killed_at = started.elapsed();
    // The victim's last lease (2 s, or the 1.5 s watchdog lease) ends by
    // then, with a generous margin for a loaded machine.
    let leases_end = Instant::now() + Duration::from_millis(2000 + 3000);
    let limit = Duration::from_secs(if long() { 1800 } else { 120 });
    let mut sections: BTreeMap<usize, Vec<Section>> = BTreeMap::new();
    for (process, child) in children.into_iter().enumerate() {
        let (said, status) = child.finish(limit);
        if process == 0 {
            victim_said.extend(said);
            collect(&mut sections, 0, &victim_said, true);
        } else {
            assert!(status.success(), "worker {process} failed: {status}");
            collect(&mut sections, process, &said, false);
        }
    }
    let elapsed = started.elapsed();
    let (acquisitions, violations, lost_updates) = check(&server, &mut sections, tasks as i64);
    println!(
        "torture with a kill: worker 0 killed after {} sections ({killed_at:.1?} in); \
         {acquisitions} acquisitions in {elapsed:.1?}; {violations} violations, {lost_updates} lost updates",
        victim_said.iter().filter(|l| l.starts_with("rec ")).count()
    );
    assert!(acquisitions >= (processes - 1) * tasks * rounds + victim_records);
    assert_eq!(violations, 0);
    assert_eq!(lost_updates, 0);
    assert_all_free(&server, Some(leases_end));
}

/// The checker itself: two writing sections that overlap, a token that
/// does not rise and a lost update are all counted.
#[test]
fn the_checker_catches_overlaps_and_lost_updates() {
    if child::role().is_some() {
        return;
    }
    let server = RedisServer::start();
    let section = |enter, leave, token| Section {
        process: 0,
        read: false,
        enter,
        leave,
        token,
    };
    let mut sections = BTreeMap::new();
    // Lock 0: [0, 10] and [5, 15] overlap; the counter says 1 of 2 writes.
    sections.insert(0, vec![section(0, 10, 0), section(5, 15, 0)]);
    server.cmd(&["SET", "counter:torture:reentrant", "1"]);
    // Lock 2 (fenced): tokens 7 then 3.
    sections.insert(2, vec![section(0, 1, 7), section(2, 3, 3)]);
    server.cmd(&["SET", "counter:torture:fenced", "2"]);
    let (acquisitions, violations, lost) = check(&server, &mut sections, 0);
    assert_eq!((acquisitions, violations, lost), (4, 2, 1));
}
