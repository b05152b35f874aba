//! The fault proxy pairs each act with its own command's reply: the reply
//! to an earlier command, still to come when the armed one passes, goes
//! through untouched.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::time::Duration;

use ferrisson_test_support::proxy::Proxy;
use ferrisson_test_support::RedisServer;

/// A raw RESP2 connection through `proxy` that sends two commands, each
/// blocking for a moment (a nil reply after 0.3 s), the second on `key`:
/// the first reply comes back after the second command went through, and
/// the second reply in a read of its own.
fn blocked_twice(proxy: &Proxy, key: &str) -> BufReader<TcpStream> {
    let address = proxy.url();
    let address = address
        .trim_start_matches("redis://")
        .trim_end_matches('/')
        .to_owned();
    let mut stream = TcpStream::connect(address).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    // BLPOP on lists nobody fills.
    let blocked = |key: &str| {
        format!(
            "*3\r\n$5\r\nBLPOP\r\n${}\r\n{key}\r\n$3\r\n0.3\r\n",
            key.len()
        )
    };
    stream
        .write_all(blocked("proxy:absent").as_bytes())
        .unwrap();
    stream.write_all(blocked(key).as_bytes()).unwrap();
    BufReader::new(stream)
}

/// The next line, `None` at the connection's end.
fn line(reader: &mut BufReader<TcpStream>) -> Option<String> {
    let mut line = String::new();
    match reader.read_line(&mut line) {
        Ok(0) | Err(_) => None,
        Ok(_) => Some(line.trim_end().to_owned()),
    }
}

#[test]
fn a_refusal_waits_for_the_reply_of_its_own_command() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    proxy.refuse_after_reply_to("proxy:refused");
    let mut reader = blocked_twice(&proxy, "proxy:refused");
    assert_eq!(
        line(&mut reader).as_deref(),
        Some("*-1"),
        "the earlier reply"
    );
    assert_eq!(line(&mut reader).as_deref(), Some("*-1"), "its own reply");
    assert_eq!(line(&mut reader), None, "the connection goes on");
    assert!(proxy.refusing());
}

#[test]
fn a_loss_waits_for_the_reply_of_its_own_command() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    proxy.lose_next_reply_to("proxy:lost");
    let mut reader = blocked_twice(&proxy, "proxy:lost");
    assert_eq!(
        line(&mut reader).as_deref(),
        Some("*-1"),
        "the earlier reply"
    );
    assert_eq!(line(&mut reader), None, "its own reply got through");
    assert_eq!(proxy.lost_replies(), 1);
}

#[test]
fn a_cut_inside_falls_in_its_own_commands_reply() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    proxy.cut_inside_reply_to("proxy:cut");
    let mut reader = blocked_twice(&proxy, "proxy:cut");
    assert_eq!(
        line(&mut reader).as_deref(),
        Some("*-1"),
        "the earlier reply"
    );
    let mut rest = String::new();
    let _ = std::io::Read::read_to_string(&mut reader, &mut rest);
    assert_eq!(rest, "*-1\r", "its own reply, but for its last byte");
}

#[test]
fn a_hold_keeps_its_own_commands_reply() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    proxy.hold_next_reply_to("proxy:held");
    let mut reader = blocked_twice(&proxy, "proxy:held");
    assert_eq!(
        line(&mut reader).as_deref(),
        Some("*-1"),
        "the earlier reply"
    );
    while proxy.held_replies() == 0 {
        std::thread::sleep(Duration::from_millis(5));
    }
    proxy.release_held();
    assert_eq!(line(&mut reader).as_deref(), Some("*-1"), "its own reply");
}
