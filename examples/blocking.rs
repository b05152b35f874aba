//! The blocking API: a plain `fn main` with threads, no async runtime.
//! A lock re-entered by its thread and waited for by another, a guard
//! released by its drop, two locks taken as one (all or nothing), a
//! semaphore capping worker threads, and a latch they all count down.
//!
//! `cargo run --example blocking` (uses `REDIS_URL`, or starts a throwaway
//! `redis-server`).

mod support;

use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use ferrisson::blocking::{Client, DistributedLock, MultiLock};

fn main() -> ferrisson::Result<()> {
    let (url, _server) = support::redis_url();
    let client = Client::connect(url.as_str())?;
    println!("client id: {}", client.id());

    // The calling thread owns its holds: it re-enters, another thread waits.
    let lock = client.lock("blocking:report");
    let guard = lock.lock()?;
    let nested = lock.lock()?;
    println!("main thread holds it {} times", lock.hold_count()?);

    let (started, waiting) = mpsc::channel();
    let other = lock.clone();
    let waiter = thread::spawn(move || -> ferrisson::Result<()> {
        let busy = other.try_lock()?.is_none();
        started.send(busy).expect("main is listening");
        let guard = other.lock()?; // blocks until main lets go
        println!("the other thread got the lock once main let go");
        guard.unlock()
    });
    let busy = waiting.recv().expect("the waiter reports");
    println!(
        "the other thread's try_lock: {}",
        if busy { "busy" } else { "got it" }
    );

    nested.unlock()?;
    drop(guard); // the last hold: released before `drop` returns
    waiter.join().expect("the waiter ran")?;

    // Two locks as one: both or neither (they could live on two servers,
    // from two clients).
    let both = MultiLock::new(vec![
        Box::new(client.lock("blocking:account")) as Box<dyn DistributedLock>,
        Box::new(client.fair_lock("blocking:ledger")),
    ]);
    let guard = both.lock()?;
    println!("holding {:?} as one", guard.names());
    guard.unlock()?;

    // At most two of five workers in the section at once; each counts down
    // the latch when done, and main waits for all of them.
    let seats = client.semaphore("blocking:seats");
    seats.try_set_permits(2)?;
    let done = client.count_down_latch("blocking:done");
    done.try_set_count(5)?;
    let workers: Vec<_> = (0..5)
        .map(|n| {
            let (seats, done) = (seats.clone(), done.clone());
            thread::spawn(move || -> ferrisson::Result<()> {
                seats.acquire()?;
                println!("worker {n} in ({} seats left)", seats.available_permits()?);
                thread::sleep(Duration::from_millis(50)); // the work
                seats.release()?;
                done.count_down()?;
                Ok(())
            })
        })
        .collect();
    let all_done = done.wait_for(Duration::from_secs(30))?;
    println!("all five workers done: {all_done}");
    for worker in workers {
        worker.join().expect("the worker ran")?;
    }
    seats.delete()?;
    Ok(())
}
