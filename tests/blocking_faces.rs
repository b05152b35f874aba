//! The blocking faces of the job, the leader election and the fenced hash,
//! against a real `redis-server`, one private server per test. Plain
//! `#[test]`s on plain threads: no runtime around them. Every wait for
//! another thread or a change is bounded, so a deadlock fails instead of
//! hanging.

use ferrisson_test_support as common;

use std::sync::mpsc::{self, Receiver};
use std::thread;
use std::time::{Duration, Instant};

use common::{exists, RedisServer};
use ferrisson::{blocking, Error, FencedWrite, JobRun, LeaderChange};

/// Long enough that only a release, never an expiry, can have freed a key
/// within a test's bounds.
const WATCHDOG: Duration = Duration::from_secs(30);

/// The bound on any one event a test waits for.
const BOUND: Duration = Duration::from_secs(20);

fn client(server: &RedisServer) -> blocking::Client {
    blocking::Client::from_builder(
        ferrisson::Client::builder(server.url()).watchdog_timeout(WATCHDOG),
    )
    .expect("connect")
}

/// The next message on `rx`, within [`BOUND`].
fn recv<T>(rx: &Receiver<T>) -> T {
    rx.recv_timeout(BOUND).expect("an event within the bound")
}

/// Waits until `cond` holds, checking every 10 ms, for at most [`BOUND`];
/// for state that changes in the background with no event to wait on.
fn eventually(mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + BOUND;
    while !cond() {
        assert!(
            Instant::now() < deadline,
            "condition not met within {BOUND:?}"
        );
        thread::sleep(Duration::from_millis(10));
    }
}

/// The next change an observer reports, within [`BOUND`].
fn change(observer: &mut blocking::LeaderObserver) -> LeaderChange {
    observer
        .next_timeout(BOUND)
        .expect("observe")
        .expect("a change within the bound")
}

/// The label of the leader a change reports; `None` for no leader.
fn label_of(change: &LeaderChange) -> Option<String> {
    match change {
        LeaderChange::Leader(leader) => leader.label.clone(),
        LeaderChange::NoLeader => None,
    }
}

/// The faces cross threads: a leadership is `Sync`, so another thread
/// can wait in its `lost()` while this one works.
#[test]
fn the_faces_are_send_and_sync() {
    fn send_sync<T: Send + Sync + 'static>() {}
    fn send<T: Send + 'static>() {}
    send_sync::<blocking::Job>();
    send_sync::<blocking::Lease>();
    send_sync::<blocking::LeaderElection>();
    send_sync::<blocking::Leadership>();
    send_sync::<blocking::FencedHash>();
    send::<blocking::LeaderObserver>();
}

/// One occurrence of a job, started on two clients in two threads, runs
/// once: the second start finds the first running (and who runs it), and
/// once it ended, finds the occurrence done. The work runs on the calling
/// thread, outside the client's runtime: it makes blocking calls of its
/// own. The lock is gone when `run` returns.
#[test]
fn a_job_runs_once_across_two_clients() {
    let server = RedisServer::start();
    let (a, b) = (client(&server), client(&server));
    let name = "faces:job";
    let job_a = a.job(name).occurrence(7).label("host-a");
    let job_b = b.job(name).occurrence(7).label("host-b");
    assert_eq!(job_a.name(), name);
    assert_eq!(job_a.current_occurrence().unwrap(), Some(7));

    let (started_tx, started) = mpsc::channel();
    let (go, go_rx) = mpsc::channel::<()>();
    let runner = thread::spawn(move || {
        let caller = thread::current().id();
        job_a
            .run(|lease| {
                assert_eq!(thread::current().id(), caller, "on the calling thread");
                assert!(!lease.is_lost());
                assert!(lease.is_renewed());
                assert!(lease.remaining() > Duration::ZERO);
                // A blocking call of the same client, from inside the work.
                let other = a.lock("faces:job:inner").try_lock().unwrap();
                assert!(other.is_some());
                drop(other);
                started_tx.send(()).unwrap();
                recv(&go_rx);
                "done"
            })
            .unwrap()
    });
    recv(&started);
    match job_b.run(|_| unreachable!("the occurrence runs elsewhere")) {
        Ok(JobRun::Skipped { holder }) => {
            let holder = holder.expect("the holder, read after the refusal");
            assert_eq!(holder.label.as_deref(), Some("host-a"));
        }
        other => panic!("expected a skip, got {other:?}"),
    }
    go.send(()).unwrap();
    assert_eq!(runner.join().unwrap(), JobRun::Ran("done"));
    assert!(!exists(&server, name), "released when run returned");

    match job_b.run(|_| unreachable!("the occurrence is done")) {
        Ok(JobRun::AlreadyDone {
            occurrence,
            last_done,
        }) => assert_eq!((occurrence, last_done), (7, 7)),
        other => panic!("expected the occurrence done, got {other:?}"),
    }
    // The next occurrence runs, here on the other client.
    let next = job_b.clone().occurrence(8).run(|_| 8).unwrap();
    assert_eq!(next, JobRun::Ran(8));
    assert!(!exists(&server, name));

    // Bad settings are refused before anything is sent.
    let err = b
        .job(name)
        .label("")
        .run(|_| unreachable!("refused"))
        .unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(_)), "{err:?}");
}

/// Work that panics: the panic goes on from `run`, the lock is let go
/// (a waiting run gets it by the unlock message, long before the 30 s
/// watchdog lease), and the occurrence is not recorded as done.
#[test]
fn a_panicking_job_lets_go_and_records_nothing() {
    let server = RedisServer::start();
    let client = client(&server);
    let job = client.job("faces:panic").occurrence(3);

    let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        job.run(|_| -> u32 { panic!("the work failed") })
    }));
    assert!(panicked.is_err(), "the panic went on from run");

    let started = Instant::now();
    let again = job.clone().wait(BOUND).run(|_| 3).unwrap();
    assert_eq!(again, JobRun::Ran(3), "the occurrence was not done");
    assert!(started.elapsed() < WATCHDOG / 2, "freed by its release");
}

/// A run whose lock is deleted under it: its lease's `lost_timeout`
/// returns true within a round trip of the deletion (not at a renewal),
/// and the run reports that it overran.
#[test]
fn a_job_lease_tells_the_work_it_was_lost() {
    let server = RedisServer::start();
    let (client, operator) = (client(&server), self::client(&server));
    let name = "faces:lost";
    let job = client.job(name);
    let run = job
        .run(|lease| {
            assert!(!lease.lost_timeout(Duration::from_millis(50)).unwrap());
            assert!(operator.lock(name).force_unlock().unwrap());
            let told = lease.lost_timeout(BOUND).unwrap();
            assert!(lease.is_lost());
            assert_eq!(lease.remaining(), Duration::ZERO);
            lease.lost().unwrap(); // returns at once once lost
            told
        })
        .unwrap();
    assert_eq!(run, JobRun::Overran(true));
}

/// An election through the blocking faces: a campaign leads, the observer
/// iterator sees it, a rival is kept out; a deposition from another client
/// ends the leadership (`lost()` returns on another thread), the observer
/// sees nobody lead, and the rival then leads with a higher term.
#[test]
fn an_election_campaign_observe_and_depose() {
    let server = RedisServer::start();
    let (a, b) = (client(&server), client(&server));
    let name = "faces:election";
    let election = a.leader_election(name);
    let rival = b.leader_election(name);
    assert_eq!(election.name(), name);

    let mut observer = rival.observe();
    assert_eq!(observer.next().unwrap().unwrap(), LeaderChange::NoLeader);
    assert!(election.leader().unwrap().is_none());

    let leadership = election.campaign("pod-a").unwrap();
    assert_eq!(leadership.label(), "pod-a");
    assert_eq!(leadership.name(), name);
    assert!(!leadership.is_lost());
    let seen = observer.next().unwrap().unwrap();
    assert_eq!(label_of(&seen).as_deref(), Some("pod-a"));
    match &seen {
        LeaderChange::Leader(leader) => assert_eq!(leader.term, Some(leadership.term())),
        LeaderChange::NoLeader => unreachable!(),
    }
    let leader = rival.leader().unwrap().expect("a leader");
    assert_eq!(leader.label.as_deref(), Some("pod-a"));
    assert_eq!(leader.client_id, a.id().to_string());
    assert!(rival.try_campaign("pod-b").unwrap().is_none());
    assert!(rival
        .campaign_for("pod-b", Duration::from_millis(100))
        .unwrap()
        .is_none());
    assert!(!leadership.lost_timeout(Duration::from_millis(50)).unwrap());

    thread::scope(|scope| {
        let (lost_tx, lost) = mpsc::channel();
        let leadership = &leadership;
        scope.spawn(move || {
            leadership.lost().unwrap();
            lost_tx.send(()).unwrap();
        });
        assert!(rival.depose().unwrap());
        recv(&lost);
    });
    assert!(leadership.is_lost());
    assert_eq!(change(&mut observer), LeaderChange::NoLeader);

    let next = rival
        .campaign_for("pod-b", BOUND)
        .unwrap()
        .expect("the rival leads");
    assert!(next.term() > leadership.term());
    assert_eq!(label_of(&change(&mut observer)).as_deref(), Some("pod-b"));
    // The old leadership had ended: its resignation sends nothing, and
    // leaves the new leader alone.
    let err = leadership.resign().unwrap_err();
    assert!(matches!(err, Error::LeaseLost { .. }), "{err:?}");
    assert_eq!(
        election.leader().unwrap().and_then(|l| l.label).as_deref(),
        Some("pod-b")
    );
    next.resign().unwrap();
    assert!(election.leader().unwrap().is_none());
    assert_eq!(change(&mut observer), LeaderChange::NoLeader);
    assert!(!rival.depose().unwrap());

    // A bad label is refused before anything is sent.
    let err = election.campaign("").unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(_)), "{err:?}");
}

/// Dropping a leadership resigns before the drop returns: nobody leads, the
/// lock's key is gone, and the observers are told.
#[test]
fn dropping_a_leadership_resigns() {
    let server = RedisServer::start();
    let (a, b) = (client(&server), client(&server));
    let name = "faces:dropped";
    let election = a.leader_election(name);
    let mut observer = b.leader_election(name).observe();
    assert_eq!(change(&mut observer), LeaderChange::NoLeader);

    let leadership = election.campaign("pod-a").unwrap();
    assert_eq!(label_of(&change(&mut observer)).as_deref(), Some("pod-a"));
    drop(leadership);
    assert!(!exists(&server, name), "released before the drop returned");
    assert!(election.leader().unwrap().is_none());
    assert_eq!(change(&mut observer), LeaderChange::NoLeader);

    // Another candidate leads at once.
    let next = b
        .leader_election(name)
        .try_campaign("pod-b")
        .unwrap()
        .expect("free");
    drop(next);
    assert!(!exists(&server, name));
}

/// A program that ends with a leadership still held (dropped last, after
/// its client and every other handle) leaves nothing: the drop resigns
/// before the runtime stops, and no latch of the requests stays. Dropped
/// on a thread with an async runtime's context, the drop does not block
/// there, and the resignation still runs to its end.
#[test]
fn a_program_that_ends_leading_leaves_nothing() {
    let server = RedisServer::start();
    {
        let client = client(&server);
        let election = client.leader_election("faces:exit");
        let mut observer = election.observe();
        let leadership = election.campaign("pod-a").unwrap();
        assert_eq!(label_of(&change(&mut observer)).as_deref(), Some("pod-a"));
        let run = client.job("faces:exit:job").occurrence(1).run(|_| ());
        assert_eq!(run.unwrap(), JobRun::Ran(()));
        let state = client.fenced_hash("faces:exit:state");
        assert_eq!(
            state.set("k", "v", leadership.term()).unwrap(),
            FencedWrite::Written
        );
        drop(observer);
        drop(state);
        drop(election);
        drop(client);
        // The end of `main`: the leadership is the runtime's last holder.
        drop(leadership);
    }
    assert!(!exists(&server, "faces:exit"), "the leadership outlived it");
    assert!(!exists(&server, "faces:exit:job"));
    let keys = server.keys("*latch*");
    assert!(keys.is_empty(), "left behind: {keys:?}");

    let client = client(&server);
    let leadership = client
        .leader_election("faces:exit:async")
        .campaign("pod-a")
        .unwrap();
    drop(client);
    let started = Instant::now();
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(async move { drop(leadership) });
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "the drop did not wait: {:?}",
        started.elapsed()
    );
    eventually(|| !exists(&server, "faces:exit:async"));
}

/// A fenced hash through the blocking face: a leader's term writes, a
/// lower token is refused, text and bytes read back with the fence.
#[test]
fn a_fenced_hash_writes_with_the_leaders_term() {
    let server = RedisServer::start();
    let client = client(&server);
    let leadership = client
        .leader_election("faces:fence:leader")
        .campaign("pod-a")
        .unwrap();
    let term = leadership.term();
    let state = client.fenced_hash("faces:fence:state");
    assert_eq!(state.name(), "faces:fence:state");

    let empty = state.get("offset").unwrap();
    assert_eq!((empty.value, empty.fence), (None, None));
    assert_eq!(
        state.set("offset", "4711", term).unwrap(),
        FencedWrite::Written
    );
    let read = state.get("offset").unwrap();
    assert_eq!(read.value.as_deref(), Some("4711"));
    assert_eq!(read.fence, Some(term));
    assert_eq!(
        state.set("offset", "1", term - 1).unwrap(),
        FencedWrite::Refused { highest: term }
    );

    let bytes = [0xff, 0x00, 0xfe];
    assert_eq!(
        state.set_bytes("blob", &bytes, term).unwrap(),
        FencedWrite::Written
    );
    let read = state.get_bytes("blob").unwrap();
    assert_eq!(read.value.as_deref(), Some(&bytes[..]));
    assert_eq!(read.fence, Some(term));
    let err = state.get("blob").unwrap_err();
    assert!(matches!(err, Error::NotUtf8 { .. }), "{err:?}");
    let err = state.set("offset", "x", 0).unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(_)), "{err:?}");
    leadership.resign().unwrap();
}

/// Called with a runtime's context around them (the body of `block_on`),
/// the faces work and do not panic: a job's work still runs on the calling
/// thread, and a campaign leads.
#[test]
fn the_faces_work_inside_block_on() {
    let server = RedisServer::start();
    let client = client(&server);
    let caller = thread::current().id();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let run = client
            .job("faces:inside:job")
            .run(|_| thread::current().id() == caller)
            .unwrap();
        assert_eq!(run, JobRun::Ran(true));
        let leadership = client
            .leader_election("faces:inside")
            .campaign("pod-a")
            .unwrap();
        assert!(!leadership.is_lost());
        leadership.resign().unwrap();
    });
    assert!(!exists(&server, "faces:inside"));
    assert!(!exists(&server, "faces:inside:job"));
}

/// An election's and a job's own lease reach the blocking faces: the
/// leader's key lives by the election's lease, not the client's 30 s
/// watchdog timeout, and is kept alive by it; a bad lease is refused.
#[test]
fn an_elections_and_a_jobs_own_lease_hold_through_the_blocking_faces() {
    let server = RedisServer::start();
    let client = client(&server);
    let lease = Duration::from_millis(1500);
    let election = client.leader_election("blocking:leased").lease(lease);
    let leadership = election.campaign("pod-a").unwrap();
    let ttl = server.cmd(&["PTTL", "blocking:leased"]).as_int().unwrap();
    assert!(ttl > 0 && ttl <= 1500, "the leader's TTL: {ttl} ms");
    // Renewed: still leading after two leases.
    assert!(!leadership.lost_timeout(lease * 2).unwrap());
    leadership.resign().unwrap();
    assert!(!exists(&server, "blocking:leased"));

    let refused = client
        .leader_election("blocking:leased")
        .lease(Duration::ZERO)
        .campaign("pod-a");
    assert!(
        matches!(refused, Err(Error::InvalidArgument { .. })),
        "{refused:?}"
    );
    assert!(!exists(&server, "blocking:leased"));

    let job = client.job("blocking:leased-job").watchdog_lease(lease);
    let run = job
        .run(|_| {
            server
                .cmd(&["PTTL", "blocking:leased-job"])
                .as_int()
                .unwrap()
        })
        .unwrap();
    match run {
        JobRun::Ran(ttl) => assert!(ttl > 0 && ttl <= 1500, "the run's TTL: {ttl} ms"),
        other => panic!("{other:?}"),
    }
}
