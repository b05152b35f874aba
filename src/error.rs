//! The one error type of the crate.

/// The result type of every fallible ferrisson call.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What can go wrong when talking to a lock.
///
/// Not getting a lock within a wait is an outcome (`Ok(None)` from the
/// `try_lock*` methods), not an error.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Redis refused a command, or could not be reached.
    #[error("redis error: {0}")]
    Redis(#[from] redis::RedisError),

    /// Building a client for one server failed to connect to it: nothing
    /// listens at the address, it did not answer in time, it asked for a
    /// password none was given for, or refused the one given. The message
    /// names the address and what to check.
    #[error("cannot connect to the server at {addr}: {reason}")]
    Connect {
        /// The server's address, `host:port` (never the user or password).
        addr: String,
        /// What failed, and what to do about it.
        reason: String,
        /// The redis crate's error.
        #[source]
        source: redis::RedisError,
    },

    /// A release by an owner that holds nothing on this lock: it never held
    /// it, already released every hold, or its hold was deleted behind its
    /// back (force unlock, restart). [`Lock::unlock`](crate::Lock::unlock),
    /// which has no guard to keep time, also says so when the lease
    /// expired; a guard's unlock then says [`Error::LeaseLost`].
    #[error("lock `{name}` is not held by owner `{owner}`")]
    NotHeld {
        /// The lock name.
        name: String,
        /// The owner field that tried to release it, `<client-uuid>:<owner-id>`.
        owner: String,
    },

    /// The lease behind a guard ran out, or the watchdog found the lock
    /// deleted behind the holder's back (force unlock, Redis restart): the
    /// guard no longer protects anything. Known before a call, nothing was
    /// sent; a release that Redis answered "not held" after the guard's
    /// lease ran out by its clock says so too (it ran out on the way).
    #[error("the lease on lock `{name}` was lost")]
    LeaseLost {
        /// The lock name.
        name: String,
    },

    /// The tokio runtime this client was built on has shut down, and with
    /// it the client's background work (the watchdog, the pub/sub
    /// listener): nothing would renew a lease taken now. Every hold the
    /// watchdog kept was reported lost at that moment. Build the client on
    /// a runtime that outlives its use (see "Runtimes" in the crate docs).
    #[error("the tokio runtime this client was built on has shut down; build the client on a runtime that lives as long as its use")]
    RuntimeGone,

    /// An async call made outside a tokio runtime (another executor, or
    /// no executor at all): a client, its watchdog, its pub/sub listener
    /// and the releases of dropped guards run as tasks on the caller's
    /// tokio runtime. Nothing was sent. Call from inside one
    /// (`#[tokio::main]`, `Runtime::block_on`); a program without one uses
    /// `ferrisson::blocking` (feature `blocking`).
    #[error("called outside a tokio runtime: ferrisson's async calls run on the caller's tokio runtime (a program without one can use ferrisson::blocking)")]
    NoRuntime,

    /// An argument no lock operation can honour.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),

    /// The key holds data ferrisson did not write: another part of the
    /// application (or another fleet, a Go service's `SET NX` lock say)
    /// uses the same name for something else. Every call of every
    /// synchronizer refuses such a key, reads and deletes included, and
    /// leaves it as it is: nothing is written for the call.
    ///
    /// What counts as the synchronizer's own data: for a lock, a hash whose
    /// fields are `mode` or owner fields (`<client>:<owner>`) holding a
    /// count, Redisson's layout; for a semaphore or a latch, a string
    /// holding an integer. So a hash of other fields (`HSET user:1 name
    /// bob`) is refused by a lock, and a string that is no integer by a
    /// semaphore.
    #[error("key `{name}` holds a {key_type}, not a {expected}")]
    WrongType {
        /// The key: the synchronizer's name, or one of its helper keys (a
        /// fenced lock's token counter, a fair lock's queue...).
        name: String,
        /// The key's Redis type, as `TYPE` names it: `string`, `list`,
        /// `set`, `zset`, `hash`, `stream`... (`hash` for a lock: a hash
        /// whose fields are no lock holds; `string` for a semaphore or a
        /// latch: a string that is no integer).
        key_type: String,
        /// What ferrisson keeps at that key, named as the caller called
        /// it: `lock`, `semaphore`, `latch`, `fenced hash`, `leader
        /// election (a fenced lock)`, `job (a lock)`, or a helper key's
        /// name: `fencing token counter`, `fair lock queue`, `fair lock
        /// waiter deadlines`, `set of permits out`, `fence of a fenced
        /// hash`, `job's last occurrence done`.
        expected: &'static str,
    },

    /// The owner asked for the write lock of a read-write lock it holds
    /// read holds on: waiting would wait for itself. There is no upgrade;
    /// release the read holds first (a writer may take read holds: that
    /// downgrade is allowed).
    #[error("owner `{owner}` holds read holds on `{name}`; a write lock would wait for itself (no upgrade)")]
    UpgradeRefused {
        /// The lock name.
        name: String,
        /// The owner field.
        owner: String,
    },

    /// The owner asked again for a non-reentrant lock it holds: re-entering
    /// would let two critical sections of one owner (two branches of one
    /// `join!`, say) run at once, so it is refused, as Redisson's
    /// `RNonReentrantLock` refuses it. Nothing was taken; the first hold
    /// stands.
    #[error(
        "owner `{owner}` already holds the non-reentrant lock `{name}`; it cannot take it again"
    )]
    NonReentrantReacquire {
        /// The lock name.
        name: String,
        /// The owner field, `<client-uuid>:<owner-id>`.
        owner: String,
    },

    /// Replica sync is on and too few replicas acknowledged an acquire in
    /// time: the hold was given back.
    #[error("lock `{name}`: {acked} of {wanted} replicas acknowledged the acquire in time; it was given back")]
    NotReplicated {
        /// The lock name.
        name: String,
        /// Replicas that acknowledged.
        acked: u32,
        /// Replicas required.
        wanted: u32,
    },

    /// A permit of a permit-expirable semaphore is not out: its lease ran
    /// out and it went back to the semaphore, or it was released already.
    #[error(
        "permit {permit} of semaphore `{name}` is not out (its lease ran out, or it was released)"
    )]
    PermitNotOut {
        /// The semaphore name.
        name: String,
        /// The permit id, 32 hex digits.
        permit: String,
    },

    /// The server does not run ferrisson's Lua scripts, which every
    /// synchronizer is made of: it runs without a scripting engine (Valkey
    /// can be built or started without Lua), its configuration hides
    /// `EVAL` (`rename-command`), or the ACL user may not run scripts (see
    /// [`ACL_RULES`](crate::config::ACL_RULES)). Found when the client is built,
    /// before any call.
    #[error("the server at {addr} does not run Lua scripts, which ferrisson needs: {reason}")]
    ScriptingUnavailable {
        /// The server's address, as the client was given it; for a
        /// cluster, the first node given (the probe went to one of its
        /// masters).
        addr: String,
        /// The server's own words for it.
        reason: String,
    },

    /// A value read as text is not UTF-8: another program wrote bytes
    /// there. Nothing is lost; read it with the bytes call named.
    #[error("field `{field}` of {what} `{name}` is not UTF-8 text; read it with `{bytes_call}`")]
    NotUtf8 {
        /// What was read: `fenced hash`.
        what: &'static str,
        /// Its name (the key).
        name: String,
        /// The field read.
        field: String,
        /// The call that reads the value as bytes: `FencedHash::get_bytes`.
        bytes_call: &'static str,
    },

    /// A call of the [blocking API](crate::blocking) that could not be run:
    /// the blocking client's runtime, or the helper thread a call made
    /// inside an async runtime's context needs, could not start.
    #[error("blocking call refused: {0}")]
    Blocking(String),

    /// A script replied something its contract does not allow.
    #[error("unexpected reply from the {script} script: {reply}")]
    UnexpectedReply {
        /// Which script.
        script: &'static str,
        /// The reply, as debug text.
        reply: String,
    },
}

impl Error {
    /// Whether this is a release of a lock the caller does not hold.
    pub fn is_not_held(&self) -> bool {
        matches!(self, Error::NotHeld { .. })
    }

    /// Whether a permit of a permit-expirable semaphore was not out (it
    /// expired, or was released already).
    pub fn is_permit_not_out(&self) -> bool {
        matches!(self, Error::PermitNotOut { .. })
    }

    /// Whether the caller's lease was lost.
    pub fn is_lease_lost(&self) -> bool {
        matches!(self, Error::LeaseLost { .. })
    }

    /// Whether Redis could not be reached or the connection dropped: the
    /// same call may succeed once the connection is back.
    pub fn is_connection_error(&self) -> bool {
        match self {
            Error::Redis(e) | Error::Connect { source: e, .. } => is_connection_failure(e),
            _ => false,
        }
    }

    /// [`Error::Connect`] for `err`, met connecting to `addr`: says what
    /// failed in words and what to check.
    pub(crate) fn connect(addr: &str, err: redis::RedisError) -> Self {
        let text = err.to_string();
        let reason = if err.code() == Some("NOAUTH") || text.contains("NOAUTH") {
            "the server asks for a password and none was given; put it in the URL: \
             redis://:PASSWORD@HOST:PORT/ (or redis://USER:PASSWORD@HOST:PORT/ for an ACL user)"
                .to_owned()
        } else if err.kind() == redis::ErrorKind::AuthenticationFailed
            || err.code() == Some("WRONGPASS")
            || text.contains("WRONGPASS")
        {
            format!("{text}; check the user and password in the URL")
        } else if err.is_connection_refusal() {
            format!("{text}; is redis-server running there, and listening on that port?")
        } else if err.is_timeout() {
            format!("{text}; is the host reachable and the port right? (see `connection_timeout`)")
        } else if err.is_io_error() {
            format!("{text}; check the host and port, and that the server is up")
        } else {
            text
        };
        Error::Connect {
            addr: addr.to_owned(),
            reason,
            source: err,
        }
    }

    /// A wait without a deadline that returned without its result: a bug
    /// of ours, reported rather than panicked on.
    pub(crate) fn no_deadline(what: &'static str) -> Self {
        Error::UnexpectedReply {
            script: what,
            reply: "gave up without a deadline".into(),
        }
    }

    pub(crate) fn invalid(what: impl Into<String>) -> Self {
        Error::InvalidArgument(what.into())
    }

    /// Whether a waiter may wait this failure out and try again: the
    /// connection failed (what a request whose reply was lost took is given
    /// back, see the acquire latch), no node serves the slot yet (a cluster
    /// failover), or the server refused the write as a replica (a master
    /// demoted by a failover).
    pub(crate) fn may_wait_out(&self) -> bool {
        match self {
            Error::Connect { source: e, .. } => is_connection_failure(e),
            Error::Redis(e) => may_get_through(e),
            _ => false,
        }
    }
}

/// Whether `err` says the connection failed (refused, dropped, timed out,
/// or closed in the middle of a reply) rather than that Redis refused the
/// command.
pub(crate) fn is_connection_failure(err: &redis::RedisError) -> bool {
    err.is_io_error()
        || err.is_connection_dropped()
        || err.is_timeout()
        || err.is_connection_refusal()
        || is_cut_reply(err)
}

/// A reply cut off by a closed connection before its last byte: the redis
/// crate's async connections report it as a parse error ("Unexpected end
/// of input"), where its blocking parser reports an unexpected EOF. The
/// command may have run, as for any reply lost with its connection; a
/// reply that arrived whole but did not convert is another error (its
/// text opens with the value or the server's code, never with the
/// parser's position, even when the value holds the same words).
pub(crate) fn is_cut_reply(err: &redis::RedisError) -> bool {
    err.kind() == redis::ErrorKind::Parse
        && err.detail().is_some_and(|detail| {
            detail.starts_with("Parse error at ") && detail.contains("Unexpected end of input")
        })
}

/// Whether a request that failed with `err` may get through later: the
/// connection failed, no node serves the key's slot yet (a cluster
/// failover), or the server is a master that a failover demoted.
pub(crate) fn may_get_through(err: &redis::RedisError) -> bool {
    is_connection_failure(err)
        || err.kind() == redis::ErrorKind::ClusterConnectionNotFound
        || err.code() == Some("READONLY")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reply_cut_mid_frame_is_a_connection_failure_and_a_bad_conversion_is_not() {
        // What the async codec says when the connection closes inside an
        // array reply (seen with a proxy cutting a spin lock's reply).
        let cut = redis::RedisError::from(redis::ParsingError::from(
            "Parse error at 2\nUnexpected end of input\nexpected 4 more elements".to_string(),
        ));
        assert!(is_connection_failure(&cut));
        assert!(Error::Redis(cut).is_connection_error());
        let converted = redis::from_redis_value::<i64>(redis::Value::SimpleString("OK".into()))
            .map_err(redis::RedisError::from)
            .unwrap_err();
        assert_eq!(converted.kind(), redis::ErrorKind::Parse);
        assert!(!is_connection_failure(&converted));
        // A whole reply that says the same words does not pass for a cut.
        let worded = redis::from_redis_value::<i64>(redis::Value::SimpleString(
            "Unexpected end of input".into(),
        ))
        .map_err(redis::RedisError::from)
        .unwrap_err();
        assert_eq!(worded.kind(), redis::ErrorKind::Parse);
        assert!(!is_connection_failure(&worded));
    }
}
