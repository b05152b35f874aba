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
//! Threads and blocking sockets only; each connection has a reader and a
//! writer thread per direction, so a delay keeps the order of the bytes.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

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
    /// `pattern` but for its last byte (of the first read of it), then cuts
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
    // Set by the client-to-server pump when it forwarded the command whose
    // reply is to be lost.
    let swallow = Arc::new(AtomicBool::new(false));
    // Set by it when it forwarded the command after whose reply the proxy
    // refuses.
    let refuse_after = Arc::new(AtomicBool::new(false));
    // Set by it when it forwarded the command whose reply is held.
    let hold = Arc::new(AtomicBool::new(false));
    // Set by it when it forwarded the command after whose reply the
    // connection is cut.
    let cut_after = Arc::new(AtomicBool::new(false));
    // Set by it when it forwarded the command whose reply is cut inside.
    let cut_inside = Arc::new(AtomicBool::new(false));
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
        Flags {
            swallow: Arc::clone(&swallow),
            refuse_after: Arc::clone(&refuse_after),
            hold: Arc::clone(&hold),
            cut_after: Arc::clone(&cut_after),
            cut_inside: Arc::clone(&cut_inside),
        },
        Arc::clone(&cut),
    );
    let flags = Flags {
        swallow,
        refuse_after,
        hold,
        cut_after,
        cut_inside,
    };
    pump(state, server, client, Direction::ToClient, flags, cut);
}

/// What the client-to-server pump tells the other about the command it
/// forwarded.
struct Flags {
    /// Lose its reply.
    swallow: Arc<AtomicBool>,
    /// Refuse once its reply is delivered.
    refuse_after: Arc<AtomicBool>,
    /// Hold its reply until released.
    hold: Arc<AtomicBool>,
    /// Cut the connection once its reply is delivered.
    cut_after: Arc<AtomicBool>,
    /// Deliver only the first part of its reply, then cut the connection.
    cut_inside: Arc<AtomicBool>,
}

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
    let both = [seen, chunk].concat();
    both.windows(pattern.len())
        .enumerate()
        .any(|(at, w)| w == pattern && at + pattern.len() > seen.len())
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
    flags: Flags,
    cut: Arc<dyn Fn() + Send + Sync>,
) {
    let Flags {
        swallow,
        refuse_after,
        hold,
        cut_after,
        cut_inside,
    } = flags;
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
        loop {
            let n = match from.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            if state.black_hole.load(Ordering::Relaxed) {
                continue;
            }
            let mut chunk = buf[..n].to_vec();
            let mut cut_here = false;
            match direction {
                Direction::ToServer => {
                    let seen = std::mem::take(&mut tail);
                    let found = |p: &[u8]| ends_in(&seen, &chunk, p);
                    let mut armed = state.cut_before.lock().unwrap();
                    if armed.as_ref().is_some_and(|p| found(p)) {
                        *armed = None;
                        if state.refuse_after_cut.swap(false, Ordering::Relaxed) {
                            refuse_now(&state);
                        }
                        state.cut_commands.fetch_add(1, Ordering::Relaxed);
                        break;
                    }
                    drop(armed);
                    let mut armed = state.hold_command.lock().unwrap();
                    if armed.as_ref().is_some_and(|p| found(p)) {
                        *armed = None;
                        drop(armed);
                        state.held_commands.fetch_add(1, Ordering::Relaxed);
                        while !state.released.load(Ordering::Relaxed)
                            && !state.closed.load(Ordering::Relaxed)
                        {
                            std::thread::sleep(Duration::from_millis(1));
                        }
                    } else {
                        drop(armed);
                    }
                    let mut armed = state.lose_reply_to.lock().unwrap();
                    if armed.as_ref().is_some_and(|p| found(p)) {
                        if !state.lose_every.load(Ordering::Relaxed) {
                            *armed = None;
                        }
                        swallow.store(true, Ordering::Relaxed);
                    }
                    let mut armed = state.refuse_after_reply_to.lock().unwrap();
                    if armed.as_ref().is_some_and(|p| found(p)) {
                        *armed = None;
                        refuse_after.store(true, Ordering::Relaxed);
                    }
                    let mut armed = state.hold_reply_to.lock().unwrap();
                    if armed.as_ref().is_some_and(|p| found(p)) {
                        *armed = None;
                        hold.store(true, Ordering::Relaxed);
                    }
                    drop(armed);
                    let mut armed = state.cut_after_reply_to.lock().unwrap();
                    if armed.as_ref().is_some_and(|p| found(p)) {
                        *armed = None;
                        cut_after.store(true, Ordering::Relaxed);
                    }
                    drop(armed);
                    let mut armed = state.cut_inside_reply_to.lock().unwrap();
                    if armed.as_ref().is_some_and(|p| found(p)) {
                        *armed = None;
                        cut_inside.store(true, Ordering::Relaxed);
                    }
                    drop(armed);
                    let mut both = seen;
                    both.extend_from_slice(&chunk);
                    tail = both.split_off(both.len().saturating_sub(TAIL));
                }
                Direction::ToClient => {
                    if swallow.swap(false, Ordering::Relaxed) {
                        if state.black_hole_after_loss.swap(false, Ordering::Relaxed) {
                            state.black_hole.store(true, Ordering::Relaxed);
                        }
                        if state.refuse_after_loss.swap(false, Ordering::Relaxed) {
                            refuse_now(&state);
                        }
                        state.lost_replies.fetch_add(1, Ordering::Relaxed);
                        reader_cut();
                        break;
                    }
                    if cut_inside.swap(false, Ordering::Relaxed) {
                        // All but its last byte (every reply ends with
                        // `\r\n`): what came is parsed as far as it goes.
                        chunk.truncate(n.saturating_sub(1).max(1));
                        cut_here = true;
                    }
                    if hold.swap(false, Ordering::Relaxed) {
                        // Read, not forwarded: the reply (and all behind
                        // it on this connection) waits for the release.
                        state.held_replies.fetch_add(1, Ordering::Relaxed);
                        while !state.released.load(Ordering::Relaxed)
                            && !state.closed.load(Ordering::Relaxed)
                        {
                            std::thread::sleep(Duration::from_millis(1));
                        }
                    }
                }
            }
            let to_client = direction == Direction::ToClient;
            let then = if cut_here {
                Then::Cut
            } else if to_client && refuse_after.swap(false, Ordering::Relaxed) {
                Then::Refuse
            } else if to_client && cut_after.swap(false, Ordering::Relaxed) {
                Then::Cut
            } else {
                Then::Go
            };
            let at =
                Instant::now() + Duration::from_micros(state.latency_us.load(Ordering::Relaxed));
            if tx.send((at, chunk, then)).is_err() {
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
