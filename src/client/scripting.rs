//! What the command connection does for scripts, the same on every server
//! ferrisson runs on:
//!
//! - An EVALSHA of one of ferrisson's scripts that the server answers with
//!   NOSCRIPT (a restart, `SCRIPT FLUSH`, a new node) loads the script for
//!   the calls to come, where the connection sends `SCRIPT LOAD` (every
//!   node a cluster client knows), and sends this call whole, with EVAL.
//!   The EVAL goes where the EVALSHA went, by its keys: on a cluster whose
//!   slot has just moved to a node the client has no connection to yet,
//!   or past a Sentinel failover between the load and the call, a second
//!   EVALSHA could meet NOSCRIPT again, and the EVAL cannot. A refused
//!   `SCRIPT LOAD` (out of memory, an ACL user without it) changes
//!   nothing. NOSCRIPT means the script did not run, so the EVAL runs it
//!   once.
//! - An error raised inside a script reaches the caller with its own code.
//!   Redis 7 and later keep it (`-WRONGTYPE ... script: ...`); Redis 6
//!   wraps it as `-ERR Error running script (call to f_<sha>):
//!   @user_script:<line>: WRONGTYPE ...`, where nothing downstream would
//!   see the WRONGTYPE, the READONLY of a demoted master or an OOM.

use redis::{Arg, Cmd, RedisFuture, RedisResult, Value};

use crate::engine::scripts;

/// A connection's own send, below this layer: the command connection
/// implements it, and its `ConnectionLike` goes through [`run`].
pub(crate) trait RawSend {
    fn send<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value>;
}

/// Runs `cmd` on `conn`; see the module docs.
pub(crate) async fn run(conn: &mut impl RawSend, cmd: &Cmd) -> RedisResult<Value> {
    let reply = unwrapped(conn.send(cmd).await);
    // Only a NOSCRIPT reply asks which script it was: looking it up costs
    // a hash of its SHA1 on every call otherwise.
    if !is_noscript(&reply) {
        return reply;
    }
    let Some(body) = our_script(cmd) else {
        return reply;
    };
    let mut load = redis::cmd("SCRIPT");
    load.arg("LOAD").arg(body);
    if let Err(err) = unwrapped(conn.send(&load).await).and_then(Value::extract_error) {
        // The EVAL below meets the same broken connection, if it is one,
        // and says so.
        tracing::debug!(error = %err, "SCRIPT LOAD failed; the script goes whole");
    }
    unwrapped(conn.send(&whole(cmd, body)).await)
}

/// Checks that the server behind `conn` runs scripts, as every call
/// needs: an `EVAL` of `return 1`, sent once when a client is built.
pub(crate) async fn check(conn: &mut impl RawSend, addr: &str) -> crate::Result<()> {
    let mut probe = redis::cmd("EVAL");
    probe.arg("return 1").arg(0);
    let reply = run(conn, &probe).await.and_then(Value::extract_error);
    let unavailable = |reason: String| crate::Error::ScriptingUnavailable {
        addr: addr.to_owned(),
        reason,
    };
    match reply {
        Ok(Value::Int(1)) => Ok(()),
        Ok(other) => Err(unavailable(format!(
            "`EVAL \"return 1\" 0` replied {other:?}"
        ))),
        Err(err) if refuses_scripting(&err) => Err(unavailable(err.to_string())),
        // A server loading its data, busy with a script or without its
        // master may run scripts a moment later: not a refusal.
        Err(err) => Err(err.into()),
    }
}

/// Whether the probe's error says that scripts will not run here at all:
/// the ACL user may not (`NOPERM`), or the server does not know `EVAL`
/// (renamed away, or no scripting engine).
fn refuses_scripting(err: &redis::RedisError) -> bool {
    match err.code() {
        Some("NOPERM") => true,
        Some("ERR") => {
            let detail = err.detail().unwrap_or_default().to_ascii_lowercase();
            ["unknown command", "lua", "script", "engine"]
                .iter()
                .any(|word| detail.contains(word))
        }
        _ => false,
    }
}

/// The script text when `cmd` is an EVALSHA of one of ferrisson's scripts.
fn our_script(cmd: &Cmd) -> Option<&'static str> {
    let mut args = cmd.args_iter();
    match (args.next(), args.next()) {
        (Some(Arg::Simple(name)), Some(Arg::Simple(sha)))
            if name.eq_ignore_ascii_case(b"EVALSHA") =>
        {
            scripts::body_of(sha)
        }
        _ => None,
    }
}

/// `cmd`, an EVALSHA, as the EVAL of `body` with the same keys and
/// arguments.
fn whole(cmd: &Cmd, body: &str) -> Cmd {
    let mut eval = redis::cmd("EVAL");
    eval.arg(body);
    for arg in cmd.args_iter().skip(2) {
        if let Arg::Simple(bytes) = arg {
            eval.arg(bytes);
        }
    }
    eval
}

fn is_noscript(reply: &RedisResult<Value>) -> bool {
    match reply {
        Err(err) => err.code() == Some("NOSCRIPT"),
        Ok(Value::ServerError(err)) => err.code() == "NOSCRIPT",
        Ok(_) => false,
    }
}

/// `reply` with an error raised inside a script given its own code (see
/// the module docs); anything else as it came.
pub(crate) fn unwrapped(reply: RedisResult<Value>) -> RedisResult<Value> {
    match reply {
        Ok(Value::ServerError(err)) => match inner_error(err.code(), err.details()) {
            Some(inner) => Ok(inner),
            None => Ok(Value::ServerError(err)),
        },
        Err(err) => match inner_error(err.code().unwrap_or(""), err.detail()) {
            Some(inner) => Err(inner.extract_error().expect_err("an error value")),
            None => Err(err),
        },
        reply => reply,
    }
}

/// The error that a Redis 6 script error (`ERR Error running script ...`)
/// wraps, as a server error value of its own code; `None` for any other
/// error, or one whose inner text has no code.
fn inner_error(code: &str, detail: Option<&str>) -> Option<Value> {
    if code != "ERR" {
        return None;
    }
    let rest = detail?.strip_prefix("Error running script (call to ")?;
    let (function, mut inner) = rest.split_once("): ")?;
    // `@user_script:32: ` once, `@user_script: 1: ` again when the
    // error came from redis.call.
    let mut line = None;
    while let Some(after) = inner
        .strip_prefix("@user_script:")
        .or_else(|| inner.strip_prefix("user_script:"))
    {
        let after = after.trim_start();
        let digits = after.bytes().take_while(u8::is_ascii_digit).count();
        line = line.or(Some(&after[..digits]));
        inner = after[digits..].strip_prefix(':')?.trim_start();
    }
    let inner = inner.strip_prefix('-').unwrap_or(inner);
    let (inner_code, _) = inner.split_once(' ').unwrap_or((inner, ""));
    if inner_code.len() < 2 || !inner_code.bytes().all(|b| b.is_ascii_uppercase()) {
        return None;
    }
    // Which script and line, as Redis 7 tells them.
    let script = function.strip_prefix("f_").unwrap_or(function);
    let reply = format!(
        "-{}. script: {script}, on @user_script:{}.\r\n",
        inner.trim_end_matches('.').replace(['\r', '\n'], " "),
        line.unwrap_or("?")
    );
    match redis::parse_redis_value(reply.as_bytes()) {
        Ok(value @ Value::ServerError(_)) => Some(value),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The error a RESP error line makes.
    fn server_error(line: &str) -> redis::RedisError {
        redis::parse_redis_value(format!("-{line}\r\n").as_bytes())
            .unwrap()
            .extract_error()
            .unwrap_err()
    }

    /// What Redis 6.2.14 replied, read off a server of that version.
    const WRONGTYPE_6: &str = "ERR Error running script (call to f_5f2af38aef0d643491266f94e18ef7a4e2ec66fe): @user_script:1: WRONGTYPE Operation against a key holding the wrong kind of value";
    const READONLY_6: &str = "ERR Error running script (call to f_5f2af38aef0d643491266f94e18ef7a4e2ec66fe): @user_script:1: @user_script: 1: -READONLY You can't write against a read only replica.";
    const OOM_6: &str = "ERR Error running script (call to f_6e9a874df5f707f40bdf4916a9d34d0ca865dc2b): @user_script:1: @user_script: 1: -OOM command not allowed when used memory > 'maxmemory'.";
    const UNKNOWN_6: &str = "ERR Error running script (call to f_206396248e12c6e742fd7296250433c8d7343b74): @user_script:1: @user_script: 1: Unknown Redis command called from Lua script";
    const RAISED_6: &str = "ERR Error running script (call to f_82903a0434f1503e152f89c03c9acd881a0e8150): @user_script:1: user_script:1: boom";

    fn code_after(line: &str) -> (String, String) {
        let err = unwrapped(Err(server_error(line))).unwrap_err();
        (
            err.code().unwrap_or_default().to_owned(),
            err.detail().unwrap_or_default().to_owned(),
        )
    }

    #[test]
    fn redis_6_script_errors_keep_their_own_code() {
        assert_eq!(
            code_after(WRONGTYPE_6),
            (
                "WRONGTYPE".to_owned(),
                "Operation against a key holding the wrong kind of value. \
                 script: 5f2af38aef0d643491266f94e18ef7a4e2ec66fe, on @user_script:1."
                    .to_owned()
            )
        );
        assert_eq!(code_after(READONLY_6).0, "READONLY");
        assert_eq!(
            unwrapped(Err(server_error(READONLY_6))).unwrap_err().kind(),
            redis::ErrorKind::Server(redis::ServerErrorKind::ReadOnly)
        );
        assert_eq!(code_after(OOM_6).0, "OOM");
    }

    #[test]
    fn errors_without_an_inner_code_are_left_as_they_came() {
        for line in [
            UNKNOWN_6,
            RAISED_6,
            "ERR plain",
            "WRONGTYPE holds a hash: k",
        ] {
            let before = server_error(line);
            let after = unwrapped(Err(server_error(line))).unwrap_err();
            assert_eq!(after.code(), before.code(), "{line}");
            assert_eq!(after.detail(), before.detail(), "{line}");
        }
    }

    #[test]
    fn error_values_are_unwrapped_too() {
        let value = Value::ServerError(server_error(WRONGTYPE_6).try_into().unwrap());
        match unwrapped(Ok(value)) {
            Ok(Value::ServerError(err)) => assert_eq!(err.code(), "WRONGTYPE"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn only_a_refusal_of_scripts_is_scripting_unavailable() {
        for line in [
            "NOPERM this user has no permissions to run the 'eval' command",
            "ERR unknown command 'EVAL', with args beginning with: 'return 1' '0' ",
        ] {
            assert!(refuses_scripting(&server_error(line)), "{line}");
        }
        for line in [
            "LOADING Redis is loading the dataset in memory",
            "BUSY Redis is busy running a script.",
            "MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'.",
            "ERR max number of clients reached",
        ] {
            assert!(!refuses_scripting(&server_error(line)), "{line}");
        }
    }

    #[test]
    fn only_our_evalsha_is_sent_whole() {
        let sha = scripts::RELEASE.get_hash();
        let mut ours = redis::cmd("EVALSHA");
        ours.arg(sha).arg(1).arg("k").arg("a");
        assert!(our_script(&ours).is_some());
        let eval = whole(&ours, our_script(&ours).unwrap());
        let args: Vec<Vec<u8>> = eval
            .args_iter()
            .map(|arg| match arg {
                Arg::Simple(bytes) => bytes.to_vec(),
                _ => panic!("only plain arguments"),
            })
            .collect();
        assert_eq!(args[0], b"EVAL");
        assert!(args[1].starts_with(b"--"));
        assert_eq!(&args[2..], &[b"1".to_vec(), b"k".to_vec(), b"a".to_vec()]);
        let mut other = redis::cmd("EVALSHA");
        other.arg("0".repeat(40)).arg(0);
        assert!(our_script(&other).is_none());
        assert!(our_script(&redis::cmd("PING")).is_none());
    }
}
