//! Compile-time promises of the public types: every handle is `Send +
//! Sync + Clone + 'static` (share it, or clone it into a task), every
//! guard and permit `Send + 'static` (it moves into a spawned task), and
//! the futures of the calls that wait are `Send` (they run on a
//! multi-threaded runtime). A change that breaks one fails the build here,
//! not in a user's program.

#![allow(dead_code)]

use std::future::Future;

use crate::*;

fn handle<T: Send + Sync + Clone + 'static>() {}
fn held<T: Send + 'static>() {}
fn sends<F: Future + Send>(_: F) {}

fn handles() {
    handle::<Client>();
    handle::<Lock>();
    handle::<FairLock>();
    handle::<FencedLock>();
    handle::<NonReentrantLock>();
    handle::<NonReentrantFairLock>();
    handle::<SpinLock>();
    handle::<ReadWriteLock>();
    handle::<ReadLock>();
    handle::<WriteLock>();
    handle::<Semaphore>();
    handle::<PermitExpirableSemaphore>();
    handle::<CountDownLatch>();
    handle::<MultiLock>();
    handle::<RedLock>();
    handle::<LeaderElection>();
    handle::<FencedHash>();
    handle::<Job>();
    handle::<Lease>();
    held::<Box<dyn DistributedLock>>();
    held::<Error>();
}

fn guards() {
    held::<LockGuard>();
    held::<FencedGuard>();
    held::<MultiLockGuard>();
    held::<RedLockGuard>();
    held::<Permit>();
    held::<Leadership>();
    held::<LeaderObserver>();
}

fn futures(client: &Client, guard: LockGuard) {
    let wait = std::time::Duration::from_secs(1);
    let lock = client.lock("");
    sends(lock.lock());
    sends(lock.try_lock());
    sends(lock.try_lock_for(wait));
    sends(client.fair_lock("").lock());
    sends(client.fenced_lock("").lock());
    sends(client.spin_lock("").lock());
    sends(client.non_reentrant_lock("").lock());
    sends(client.read_write_lock("").read().lock());
    sends(client.read_write_lock("").write().lock());
    sends(client.semaphore("").acquire());
    sends(client.permit_expirable_semaphore("").acquire());
    sends(client.count_down_latch("").wait());
    sends(MultiLock::new(Vec::new()).lock());
    sends(RedLock::new(Vec::new()).lock());
    sends(guard.unlock());
    let election = client.leader_election("");
    sends(election.campaign(""));
    sends(election.try_campaign(""));
    sends(election.campaign_for("", wait));
    sends(election.leader());
    sends(client.fenced_hash("").set("", "", 1));
    sends(client.fenced_hash("").get(""));
    sends(client.fenced_hash("").set_bytes("", b"", 1));
    sends(client.fenced_hash("").get_bytes(""));
    sends(
        client
            .job("")
            .run(|lease| async move { lease.lost().await }),
    );
}

async fn leadership_futures(leadership: Leadership, mut observer: LeaderObserver) {
    sends(leadership.lost());
    sends(observer.next());
    sends(leadership.resign());
}
