//! A tiny RESP2 client: the replies ([`RespValue`]) and their encoding and
//! parsing, over a plain `TcpStream`. Standard library only, as the
//! servers that use it (see [`super::server`]).

use std::io::{self, BufRead};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::time::Duration;

/// A parsed RESP2 reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RespValue {
    /// Simple string (`+OK`).
    Simple(String),
    /// Error reply (`-ERR ...`), without the leading `-`.
    Error(String),
    /// Integer reply (`:1`).
    Int(i64),
    /// Bulk string; `None` is the nil bulk string (`$-1`).
    Bulk(Option<Vec<u8>>),
    /// Array; `None` is the nil array (`*-1`).
    Array(Option<Vec<RespValue>>),
}

impl RespValue {
    /// The value of an integer reply.
    pub fn as_int(&self) -> Option<i64> {
        match self {
            RespValue::Int(value) => Some(*value),
            _ => None,
        }
    }

    /// The text of a simple string or non-nil bulk string (bulk bytes decoded as lossy UTF-8).
    pub fn as_string(&self) -> Option<String> {
        match self {
            RespValue::Simple(text) => Some(text.clone()),
            RespValue::Bulk(Some(bytes)) => Some(String::from_utf8_lossy(bytes).into_owned()),
            _ => None,
        }
    }

    /// True for the nil bulk string and the nil array.
    pub fn is_nil(&self) -> bool {
        matches!(self, RespValue::Bulk(None) | RespValue::Array(None))
    }

    /// The elements of a non-nil array.
    pub fn as_array(&self) -> Option<&[RespValue]> {
        match self {
            RespValue::Array(Some(items)) => Some(items),
            _ => None,
        }
    }
}

/// Opens a TCP connection to the local port with `timeout` for connect, read and write.
pub(crate) fn connect(port: u16, timeout: Duration) -> io::Result<TcpStream> {
    let address = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let stream = TcpStream::connect_timeout(&address, timeout)?;
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))?;
    stream.set_nodelay(true)?;
    Ok(stream)
}

/// Encodes a command as a RESP array of bulk strings.
pub(crate) fn encode_command(args: &[&str]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for arg in args {
        out.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
        out.extend_from_slice(arg.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out
}

/// Reads one complete RESP2 value; the buffered reader copes with replies split
/// across several TCP segments.
pub(crate) fn read_value<R: BufRead>(reader: &mut R) -> io::Result<RespValue> {
    let line = read_line(reader)?;
    let Some((&kind, rest)) = line.split_first() else {
        return Err(invalid_data("empty RESP line"));
    };
    match kind {
        b'+' => Ok(RespValue::Simple(
            String::from_utf8_lossy(rest).into_owned(),
        )),
        b'-' => Ok(RespValue::Error(String::from_utf8_lossy(rest).into_owned())),
        b':' => parse_int(rest).map(RespValue::Int),
        b'$' => {
            let Ok(len) = usize::try_from(parse_int(rest)?) else {
                return Ok(RespValue::Bulk(None));
            };
            let mut data = vec![0; len + 2];
            reader.read_exact(&mut data)?;
            if !data.ends_with(b"\r\n") {
                return Err(invalid_data("bulk string not terminated by CRLF"));
            }
            data.truncate(len);
            Ok(RespValue::Bulk(Some(data)))
        }
        b'*' => {
            let Ok(count) = usize::try_from(parse_int(rest)?) else {
                return Ok(RespValue::Array(None));
            };
            let mut items = Vec::with_capacity(count.min(1024));
            for _ in 0..count {
                items.push(read_value(reader)?);
            }
            Ok(RespValue::Array(Some(items)))
        }
        other => Err(invalid_data(&format!(
            "unexpected RESP type byte {:?}",
            char::from(other)
        ))),
    }
}

/// Reads one CRLF-terminated line and returns it without the CRLF.
fn read_line<R: BufRead>(reader: &mut R) -> io::Result<Vec<u8>> {
    let mut line = Vec::new();
    if reader.read_until(b'\n', &mut line)? == 0 {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "connection closed by redis",
        ));
    }
    if !line.ends_with(b"\r\n") {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "connection closed in the middle of a RESP line",
        ));
    }
    line.truncate(line.len() - 2);
    Ok(line)
}

/// Parses the decimal integer of a `:`, `$` or `*` line.
fn parse_int(digits: &[u8]) -> io::Result<i64> {
    std::str::from_utf8(digits)
        .ok()
        .and_then(|text| text.parse().ok())
        .ok_or_else(|| invalid_data("malformed RESP integer"))
}

/// An `InvalidData` I/O error.
fn invalid_data(message: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, message.to_owned())
}

/// The lowercased first element of a pub/sub push (`message`, `subscribe`, ...).
pub(crate) fn push_kind(value: &RespValue) -> Option<String> {
    value
        .as_array()?
        .first()?
        .as_string()
        .map(|kind| kind.to_ascii_lowercase())
}
