//! A small TCP proxy between a client and a `redis-server`, for network
//! faults: it can delay every chunk in both directions, black-hole all
//! traffic (connections stay open, nothing gets through), drop every open
//! connection, refuse new ones, lose the reply to one command or to every
//! command that matches (forward the command, then swallow what the server
//! answers and cut the connection), hold the reply to one command until
//! told, refuse new ones right after delivering the reply to one command,
//! cut one connection right after delivering the reply to one command,
//! cut one connection instead of forwarding a command, or send new
//! connections to another server.
//!
//! An act on "the reply to" a command waits for that command's reply, not
//! for the next bytes back, which may answer an earlier command still in
//! flight: both directions are framed and counted (the `frames` module),
//! and a connection answers its commands in order.
//!
//! Threads and blocking sockets only; each connection has a reader and a
//! writer thread per direction, so a delay keeps the order of the bytes.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use crate::frames::{Counting, Framer, Span};

#[derive(Debug, Default)]
struct State {
    /// Delay added to every chunk, each way, in microseconds.
    latency_us: AtomicU64,
    black_hole: AtomicBool,
    /// New connections are closed at once (the server is unreachable).
    refusing: AtomicBool,
    /// A pattern of the command whose reply is to be lost.
    lose_reply_to: Mutex<Option<Vec<u8>>>,
    /// The pattern stays armed after a loss: every such reply is lost.
    lose_every: AtomicBool,
    lost_replies: AtomicUsize,
    /// Refuse (and cut everything) at the moment that reply is lost.
    refuse_after_loss: AtomicBool,
    /// Black-hole at the moment that reply is lost.
    black_hole_after_loss: AtomicBool,
    /// A pattern of the command after whose reply the server becomes
    /// unreachable (the reply is delivered first).
    refuse_after_reply_to: Mutex<Option<Vec<u8>>>,
    /// A pattern of the command after whose reply its connection is cut
    /// (the reply is delivered first; new connections are accepted).
    cut_after_reply_to: Mutex<Option<Vec<u8>>>,
    /// A pattern of the command whose reply is cut before its last byte,
    /// and its connection with it.
    cut_inside_reply_to: Mutex<Option<Vec<u8>>>,
    /// A pattern of the command that is not forwarded: its connection is
    /// cut instead.
    cut_before: Mutex<Option<Vec<u8>>>,
    /// Refuse (and cut everything) at the moment that command is cut.
    refuse_after_cut: AtomicBool,
    refuse_new_after_cut: AtomicBool,
    cut_commands: AtomicUsize,
    /// A pattern of the command whose reply is held until released.
    hold_reply_to: Mutex<Option<Vec<u8>>>,
    /// A pattern of the command that is held, not forwarded, until
    /// released.
    hold_command: Mutex<Option<Vec<u8>>>,
    held_commands: AtomicUsize,
    /// Held replies (and commands) go on.
    released: AtomicBool,
    held_replies: AtomicUsize,
    /// Both sockets of every connection, to cut them.
    open: Mutex<Vec<(TcpStream, TcpStream)>>,
    accepted: AtomicUsize,
    closed: AtomicBool,
    /// The port new connections go to.
    target: std::sync::atomic::AtomicU16,
}

/// A proxy listening on a free port of 127.0.0.1, forwarding to a server.
#[derive(Debug)]
pub struct Proxy {
    port: u16,
    state: Arc<State>,
}

impl Proxy {
    /// Starts forwarding connections on a new port to `127.0.0.1:target`.
    pub fn start(target: u16) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind proxy");
        let port = listener.local_addr().unwrap().port();
        let state = Arc::new(State::default());
        state.target.store(target, Ordering::Relaxed);
        let shared = Arc::clone(&state);
        std::thread::spawn(move || {
            for client in listener.incoming() {
                if shared.closed.load(Ordering::Relaxed) {
                    return;
                }
                let Ok(client) = client else { continue };
                if shared.refusing.load(Ordering::Relaxed) {
                    let _ = client.shutdown(Shutdown::Both);
                    continue;
                }
                let target = shared.target.load(Ordering::Relaxed);
                let Ok(server) = TcpStream::connect(("127.0.0.1", target)) else {
                    let _ = client.shutdown(Shutdown::Both);
                    continue;
                };
                shared.accepted.fetch_add(1, Ordering::Relaxed);
                connect(&shared, client, server);
            }
        });
        Proxy { port, state }
    }

    /// `redis://127.0.0.1:<proxy port>/`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// Delays every chunk by `latency`, each way.
    pub fn set_latency(&self, latency: Duration) {
        self.state
            .latency_us
            .store(latency.as_micros() as u64, Ordering::Relaxed);
    }

    /// While on, every byte read either way is thrown away; connections
    /// stay open (and new ones are accepted), so the client sees silence,
    /// not an error.
    pub fn black_hole(&self, on: bool) {
        self.state.black_hole.store(on, Ordering::Relaxed);
    }

    /// While on, the server is unreachable: every open connection is cut,
    /// and new ones are closed as soon as they are accepted.
    pub fn refuse(&self, on: bool) {
        self.state.refusing.store(on, Ordering::Relaxed);
        if on {
            self.drop_connections();
        }
    }

    /// Cuts every open connection (both sides).
    pub fn drop_connections(&self) {
        for (a, b) in self.state.open.lock().unwrap().drain(..) {
            let _ = a.shutdown(Shutdown::Both);
            let _ = b.shutdown(Shutdown::Both);
        }
    }

    /// Loses the reply to the next command whose bytes contain `pattern`:
    /// the command reaches the server, its reply is swallowed and the
    /// connection cut.
    pub fn lose_next_reply_to(&self, pattern: &str) {
        *self.state.lose_reply_to.lock().unwrap() = Some(pattern.as_bytes().to_vec());
    }

    /// Loses the reply to every command whose bytes contain `pattern`, as
    /// [`Proxy::lose_next_reply_to`] does to one, until
    /// [`Proxy::stop_losing_replies`].
    pub fn lose_every_reply_to(&self, pattern: &str) {
        self.state.lose_every.store(true, Ordering::Relaxed);
        self.lose_next_reply_to(pattern);
    }

    /// Ends [`Proxy::lose_every_reply_to`] (and disarms a pending loss).
    pub fn stop_losing_replies(&self) {
        let mut armed = self.state.lose_reply_to.lock().unwrap();
        self.state.lose_every.store(false, Ordering::Relaxed);
        *armed = None;
    }

    /// As [`Proxy::lose_next_reply_to`], and the server becomes
    /// unreachable at that very moment (as [`Proxy::refuse`]), so that no
    /// other command gets through after the lost one.
    pub fn lose_next_reply_to_then_refuse(&self, pattern: &str) {
        self.state.refuse_after_loss.store(true, Ordering::Relaxed);
        self.lose_next_reply_to(pattern);
    }

    /// As [`Proxy::lose_next_reply_to`], and the proxy black-holes
    /// everything from that very moment (as [`Proxy::black_hole`]), so
    /// that every resend of the command goes unanswered too.
    pub fn lose_next_reply_to_then_black_hole(&self, pattern: &str) {
        self.state
            .black_hole_after_loss
            .store(true, Ordering::Relaxed);
        self.lose_next_reply_to(pattern);
    }

    /// Delivers the reply to the next command whose bytes contain
    /// `pattern`, and makes the server unreachable right after (as
    /// [`Proxy::refuse`]): what the client sends next, in answer to that
    /// reply, finds no way through.
    pub fn refuse_after_reply_to(&self, pattern: &str) {
        *self.state.refuse_after_reply_to.lock().unwrap() = Some(pattern.as_bytes().to_vec());
    }

    /// Delivers the reply to the next command whose bytes contain
    /// `pattern`, and cuts that connection right after; new connections
    /// are accepted as before (a client that reconnects gets through).
    pub fn cut_after_reply_to(&self, pattern: &str) {
        *self.state.cut_after_reply_to.lock().unwrap() = Some(pattern.as_bytes().to_vec());
    }

    /// Delivers the reply to the next command whose bytes contain
    /// `pattern` but for its last byte, then cuts
    /// that connection: the client sees the connection end inside the
    /// reply's frame.
    pub fn cut_inside_reply_to(&self, pattern: &str) {
        *self.state.cut_inside_reply_to.lock().unwrap() = Some(pattern.as_bytes().to_vec());
    }

    /// Cuts the connection that carries the next command whose bytes
    /// contain `pattern`, instead of forwarding it: the command never
    /// reaches the server, and its sender learns it by the cut.
    pub fn cut_before_next(&self, pattern: &str) {
        *self.state.cut_before.lock().unwrap() = Some(pattern.as_bytes().to_vec());
    }

    /// As [`Proxy::cut_before_next`], and the server becomes unreachable
    /// at that very moment (as [`Proxy::refuse`]): no resend of the command
    /// gets through until the test lets it.
    pub fn cut_before_next_then_refuse(&self, pattern: &str) {
        self.state.refuse_after_cut.store(true, Ordering::Relaxed);
        self.cut_before_next(pattern);
    }

    /// As [`Proxy::cut_before_next`], and new connections are refused
    /// from that very moment (as [`Proxy::refuse`] does), while the other
    /// open ones (a subscription's) go on: the command's sender cannot
    /// reconnect until the test lets it.
    pub fn cut_before_next_then_refuse_new(&self, pattern: &str) {
        self.state
            .refuse_new_after_cut
            .store(true, Ordering::Relaxed);
        self.cut_before_next(pattern);
    }

    /// How many commands [`Proxy::cut_before_next`] kept from the server.
    pub fn cut_commands(&self) -> usize {
        self.state.cut_commands.load(Ordering::Relaxed)
    }

    /// Sends new connections to `127.0.0.1:port` from now on (open ones
    /// stay with the server they reached): a failover, as a client behind
    /// one address sees it.
    pub fn retarget(&self, port: u16) {
        self.state.target.store(port, Ordering::Relaxed);
    }

    /// Holds the reply to the next command whose bytes contain `pattern`
    /// (and what follows it on that connection) until
    /// [`Proxy::release_held`]: the command reaches the server, its caller
    /// waits.
    pub fn hold_next_reply_to(&self, pattern: &str) {
        self.state.released.store(false, Ordering::Relaxed);
        *self.state.hold_reply_to.lock().unwrap() = Some(pattern.as_bytes().to_vec());
    }

    /// How many replies [`Proxy::hold_next_reply_to`] held so far (a reply
    /// counts once it is read and held).
    pub fn held_replies(&self) -> usize {
        self.state.held_replies.load(Ordering::Relaxed)
    }

    /// Holds the next command whose bytes contain `pattern` (and what
    /// follows it on that connection) in the proxy, not forwarded, until
    /// [`Proxy::release_held`]; cut the connections first
    /// ([`Proxy::drop_connections`]) and it never reaches the server.
    pub fn hold_next_command(&self, pattern: &str) {
        self.state.released.store(false, Ordering::Relaxed);
        *self.state.hold_command.lock().unwrap() = Some(pattern.as_bytes().to_vec());
    }

    /// How many commands [`Proxy::hold_next_command`] held so far.
    pub fn held_commands(&self) -> usize {
        self.state.held_commands.load(Ordering::Relaxed)
    }

    /// Lets a reply held by [`Proxy::hold_next_reply_to`] (or a command
    /// held by [`Proxy::hold_next_command`]) go on.
    pub fn release_held(&self) {
        self.state.released.store(true, Ordering::Relaxed);
    }

    /// Whether new connections are refused now.
    pub fn refusing(&self) -> bool {
        self.state.refusing.load(Ordering::Relaxed)
    }

    /// How many replies were lost so far.
    pub fn lost_replies(&self) -> usize {
        self.state.lost_replies.load(Ordering::Relaxed)
    }

    /// How many connections were accepted so far.
    pub fn accepted(&self) -> usize {
        self.state.accepted.load(Ordering::Relaxed)
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.state.closed.store(true, Ordering::Relaxed);
        self.drop_connections();
        // Wake the accept loop so that it sees `closed`.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}

fn connect(state: &Arc<State>, client: TcpStream, server: TcpStream) {
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    state
        .open
        .lock()
        .unwrap()
        .push((client.try_clone().unwrap(), server.try_clone().unwrap()));
    // What the client-to-server pump armed for the replies to the commands
    // it forwarded, by their numbers on this connection.
    let acts: Acts = Arc::default();
    let cut = {
        let (client, server) = (client.try_clone().unwrap(), server.try_clone().unwrap());
        move || {
            let _ = client.shutdown(Shutdown::Both);
            let _ = server.shutdown(Shutdown::Both);
        }
    };
    let cut: Arc<dyn Fn() + Send + Sync> = Arc::new(cut);
    pump(
        state,
        client.try_clone().unwrap(),
        server.try_clone().unwrap(),
        Direction::ToServer,
        Arc::clone(&acts),
        Arc::clone(&cut),
    );
    pump(state, server, client, Direction::ToClient, acts, cut);
}

/// What is to happen to the reply to one command.
#[derive(Debug, Default, Clone, Copy)]
struct Act {
    /// Lose it (and cut the connection).
    swallow: bool,
    /// Hold it (and all behind it) until released.
    hold: bool,
    /// Deliver all of it but its last byte, then cut the connection.
    cut_inside: bool,
    /// Deliver it, then make the server unreachable.
    refuse_after: bool,
    /// Deliver it, then cut the connection.
    cut_after: bool,
}

/// The acts armed on one connection, by the number of the command (and
/// so of its reply: a connection answers in order).
type Acts = Arc<Mutex<HashMap<u64, Act>>>;

/// What the writer does once a chunk is written.
#[derive(Clone, Copy, PartialEq)]
enum Then {
    /// Goes on.
    Go,
    /// Makes the server unreachable.
    Refuse,
    /// Cuts this connection.
    Cut,
}

/// Makes the server unreachable: cuts every connection, refuses new ones.
/// Blocks the pump that holds a command or a reply until the test
/// releases what is held, or the proxy closes.
fn wait_for_release(state: &State) {
    while !state.released.load(Ordering::Relaxed) && !state.closed.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn refuse_now(state: &State) {
    state.refusing.store(true, Ordering::Relaxed);
    for (a, b) in state.open.lock().unwrap().drain(..) {
        let _ = a.shutdown(Shutdown::Both);
        let _ = b.shutdown(Shutdown::Both);
    }
}

/// How much of a connection's last bytes a pattern may start in.
const TAIL: usize = 512;

/// Whether `pattern` occurs in `seen` followed by `chunk`, ending within
/// `chunk` (a match wholly in `seen` was looked at before).
fn ends_in(seen: &[u8], chunk: &[u8], pattern: &[u8]) -> bool {
    !match_ends(seen, chunk, pattern).is_empty()
}

/// Where in `chunk` each match of `pattern` in `seen` followed by `chunk`
/// ends (exclusive), for the matches that end within `chunk`.
fn match_ends(seen: &[u8], chunk: &[u8], pattern: &[u8]) -> Vec<usize> {
    let both = [seen, chunk].concat();
    both.windows(pattern.len())
        .enumerate()
        .map(|(at, w)| (at + pattern.len(), w))
        .filter(|&(end, w)| w == pattern && end > seen.len())
        .map(|(end, _)| end - seen.len())
        .collect()
}

#[derive(Clone, Copy, PartialEq)]
enum Direction {
    ToServer,
    ToClient,
}

fn pump(
    state: &Arc<State>,
    mut from: TcpStream,
    mut to: TcpStream,
    direction: Direction,
    acts: Acts,
    cut: Arc<dyn Fn() + Send + Sync>,
) {
    // Each chunk with when to write it, and what to do after it.
    let (tx, rx) = mpsc::channel::<(Instant, Vec<u8>, Then)>();
    let writer_state = Arc::clone(state);
    let reader_state = Arc::clone(state);
    let reader_cut = Arc::clone(&cut);
    std::thread::spawn(move || {
        let state = reader_state;
        let mut buf = vec![0u8; 64 * 1024];
        // The end of what came before, so that a pattern split between two
        // reads (a command written in pieces) is still found.
        let mut tail: Vec<u8> = Vec::new();
        let mut framer = Framer::new(match direction {
            Direction::ToServer => Counting::Commands,
            Direction::ToClient => Counting::Replies,
        });
        let send = |chunk: &[u8], then: Then| {
            let at =
                Instant::now() + Duration::from_micros(state.latency_us.load(Ordering::Relaxed));
            tx.send((at, chunk.to_vec(), then)).is_ok()
        };
        loop {
            let n = match from.read(&mut buf) {
                // Closed by its peer: what it wrote before goes on, as TCP
                // delivers it (a command written just before its client
                // exited still reaches the server); the writer cuts once
                // it forwarded the queue, whose end this return drops.
                Ok(0) => return,
                Err(_) => break,
                Ok(n) => n,
            };
            let chunk = &buf[..n];
            if state.black_hole.load(Ordering::Relaxed) {
                // Framed all the same, so that the numbers of what follows
                // still pair commands with their replies.
                match direction {
                    Direction::ToServer => framer.feed_lost(chunk),
                    Direction::ToClient => framer.feed(chunk),
                };
                continue;
            }
            let spans = framer.feed(chunk);
            let sent = match direction {
                Direction::ToServer => {
                    let seen = std::mem::take(&mut tail);
                    if on_commands(&state, &acts, &seen, chunk, &spans).is_none() {
                        break;
                    }
                    let mut both = seen;
                    both.extend_from_slice(chunk);
                    tail = both.split_off(both.len().saturating_sub(TAIL));
                    send(chunk, Then::Go)
                }
                Direction::ToClient => {
                    if on_replies(&state, &acts, chunk, &spans, &send) == Ended::Yes {
                        // The writer forwards what was queued, then cuts
                        // (at the piece that ends the connection, or when
                        // this end of the queue is gone).
                        return;
                    }
                    true
                }
            };
            if !sent {
                break;
            }
        }
        reader_cut();
    });
    std::thread::spawn(move || {
        for (at, chunk, then) in rx {
            let now = Instant::now();
            if at > now {
                std::thread::sleep(at - now);
            }
            if to.write_all(&chunk).is_err() {
                break;
            }
            match then {
                Then::Go => {}
                Then::Refuse => {
                    let _ = to.flush();
                    refuse_now(&writer_state);
                }
                Then::Cut => {
                    let _ = to.flush();
                    break;
                }
            }
        }
        cut();
    });
}

/// Looks at a chunk of commands before it is forwarded: cuts or holds a
/// command as armed, and arms the acts on the replies to the commands
/// the patterns match. `None` when the connection is cut instead.
fn on_commands(
    state: &State,
    acts: &Acts,
    seen: &[u8],
    chunk: &[u8],
    spans: &[Span],
) -> Option<()> {
    let found = |p: &[u8]| ends_in(seen, chunk, p);
    let mut armed = state.cut_before.lock().unwrap();
    if armed.as_ref().is_some_and(|p| found(p)) {
        *armed = None;
        if state.refuse_after_cut.swap(false, Ordering::Relaxed) {
            refuse_now(state);
        }
        if state.refuse_new_after_cut.swap(false, Ordering::Relaxed) {
            state.refusing.store(true, Ordering::Relaxed);
        }
        state.cut_commands.fetch_add(1, Ordering::Relaxed);
        return None;
    }
    drop(armed);
    let mut armed = state.hold_command.lock().unwrap();
    if armed.as_ref().is_some_and(|p| found(p)) {
        *armed = None;
        drop(armed);
        state.held_commands.fetch_add(1, Ordering::Relaxed);
        wait_for_release(state);
    } else {
        drop(armed);
    }
    // Arms `set` on the reply to each command `slot`'s pattern matches
    // (the first only, unless `every`): the command numbered as the span
    // the match ends in.
    let arm = |slot: &Mutex<Option<Vec<u8>>>, every: bool, set: fn(&mut Act)| {
        let mut armed = slot.lock().unwrap();
        let Some(pattern) = armed.clone() else { return };
        for end in match_ends(seen, chunk, &pattern) {
            let command = spans
                .iter()
                .find(|s| s.holds(end - 1))
                .and_then(|s| s.index);
            if let Some(command) = command {
                set(acts.lock().unwrap().entry(command).or_default());
                if !every {
                    *armed = None;
                    return;
                }
            }
        }
    };
    let every = state.lose_every.load(Ordering::Relaxed);
    arm(&state.lose_reply_to, every, |a| a.swallow = true);
    arm(&state.refuse_after_reply_to, false, |a| {
        a.refuse_after = true
    });
    arm(&state.hold_reply_to, false, |a| a.hold = true);
    arm(&state.cut_after_reply_to, false, |a| a.cut_after = true);
    arm(&state.cut_inside_reply_to, false, |a| a.cut_inside = true);
    Some(())
}

/// Whether a connection ended with a chunk: what comes after is not
/// forwarded.
#[derive(Clone, Copy, PartialEq)]
enum Ended {
    Yes,
    No,
}

/// Forwards a chunk of replies with `send`, doing what is armed for each
/// as it comes.
fn on_replies(
    state: &State,
    acts: &Acts,
    chunk: &[u8],
    spans: &[Span],
    send: &dyn Fn(&[u8], Then) -> bool,
) -> Ended {
    // How much of the chunk went to the writer.
    let mut sent = 0;
    for span in spans {
        let Some(reply) = span.index else { continue };
        let mut armed = acts.lock().unwrap();
        let Some(act) = armed.get_mut(&reply) else {
            continue;
        };
        // At the reply's first byte in this chunk (the first part of it
        // seen, or the rest of it): lose or hold it.
        if std::mem::take(&mut act.swallow) {
            armed.remove(&reply);
            drop(armed);
            if state.black_hole_after_loss.swap(false, Ordering::Relaxed) {
                state.black_hole.store(true, Ordering::Relaxed);
            }
            state.lost_replies.fetch_add(1, Ordering::Relaxed);
            if state.refuse_after_loss.swap(false, Ordering::Relaxed) {
                // At once: nothing more gets through, the replies before
                // it in this chunk neither.
                refuse_now(state);
                return Ended::Yes;
            }
            // The replies before it go through, then the connection ends.
            send(&chunk[sent..span.start], Then::Cut);
            return Ended::Yes;
        }
        if std::mem::take(&mut act.hold) {
            drop(armed);
            // Read, not forwarded: the reply (and all behind it on this
            // connection) waits for the release.
            if !send(&chunk[sent..span.start], Then::Go) {
                return Ended::Yes;
            }
            sent = span.start;
            state.held_replies.fetch_add(1, Ordering::Relaxed);
            wait_for_release(state);
            armed = acts.lock().unwrap();
        }
        // At its end: cut inside it or after it, or refuse after it.
        let Some(end) = span.end else { continue };
        let Some(act) = armed.remove(&reply) else {
            continue;
        };
        drop(armed);
        let (upto, then) = if act.cut_inside {
            // All but its last byte (every reply ends with `\r\n`): what
            // came is parsed as far as it goes.
            ((end - 1).max(sent), Then::Cut)
        } else if act.refuse_after {
            (end, Then::Refuse)
        } else if act.cut_after {
            (end, Then::Cut)
        } else {
            continue;
        };
        // What follows it in the chunk is not forwarded: the connection
        // ends here.
        send(&chunk[sent..upto], then);
        return Ended::Yes;
    }
    if send(&chunk[sent..], Then::Go) {
        Ended::No
    } else {
        Ended::Yes
    }
}
