//! Fenced writes for data kept in Redis: a hash whose writes carry a
//! fencing token, refused when a higher one has written.

use crate::config::MAX_FENCE_TOKEN;
use crate::engine::keys;
use crate::engine::object::Object;
use crate::engine::scripts::{FENCED_GET, FENCED_SET};
use crate::{Client, Error, Result};

/// A hash whose writes are fenced, from [`Client::fenced_hash`]: each
/// write carries the writer's fencing token (a [`Leadership::term`], a
/// [`FencedGuard::token`]), and the server, in one script, refuses it when
/// a higher token has written the hash before. A leader or lock holder
/// paused past its lease, which wakes and writes with its old token, is
/// refused as soon as its successor has written.
///
/// The hash is at the given key, the caller's data; the highest token that
/// wrote it is kept beside it at `ferrisson_fence:{key}` (no TTL), in the
/// same Cluster slot: for a key that has a hash tag, `ferrisson_fence:key`
/// (the same tag); for a key with a `}` but no tag (`cfg{}v2`), a key of
/// its slot, `ferrisson_fence_slot:{<n>}key`. Values are text
/// ([`set`](FencedHash::set), [`get`](FencedHash::get)) or any bytes
/// ([`set_bytes`](FencedHash::set_bytes),
/// [`get_bytes`](FencedHash::get_bytes)), stored as given. Only the sets write: data written
/// to the hash by other means is neither checked nor refused. The fence
/// is the hash's, not a field's: give each election or lock whose holders
/// write it a hash of its own. It outlives a `DEL` of the hash (a new
/// writer's token must still be at least the last); delete both keys to
/// start again. Do so too when the tokens themselves started again (a
/// Redis that lost the lock's counter): the fence would refuse every new
/// writer until the tokens climbed past it.
///
/// With replica sync on, a write waits for the replicas' acknowledgement
/// as a release does (when too few acknowledge in time it stands on the
/// master, and a warning says so). A failover that loses the latest
/// write loses its raise of the fence with it, so a late writer may then
/// be accepted once: the same limit as the lock's.
///
/// ```rust,no_run
/// # async fn run(client: ferrisson::Client) -> ferrisson::Result<()> {
/// let leadership = client.leader_election("billing:leader").campaign("pod-a").await?;
/// let state = client.fenced_hash("billing:state");
/// match state.set("offset", "4711", leadership.term()).await? {
///     ferrisson::FencedWrite::Written => {}
///     ferrisson::FencedWrite::Refused { highest } => {
///         // A later leader (term `highest`) has written: stop leading.
///         # let _ = highest;
///     }
/// }
/// # Ok(()) }
/// ```
///
/// The same pattern works for data kept elsewhere; in SQL, keep the token
/// in the row and let the database refuse a lower one:
/// `UPDATE jobs SET state = $1, fence = $2 WHERE id = $3 AND fence <= $2`
/// (zero rows updated: refused).
///
/// [`Leadership::term`]: crate::Leadership::term
/// [`FencedGuard::token`]: crate::FencedGuard::token
#[derive(Clone)]
pub struct FencedHash {
    obj: Object,
}

impl std::fmt::Debug for FencedHash {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FencedHash")
            .field("name", self.obj.shared_name())
            .finish_non_exhaustive()
    }
}

/// What [`FencedHash::get`] read (text), or [`FencedHash::get_bytes`]
/// (`FencedValue<Vec<u8>>`).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct FencedValue<T = String> {
    /// The field's value; `None` when the hash or the field is missing.
    pub value: Option<T>,
    /// The highest token that has written the hash; `None` when none has.
    pub fence: Option<u64>,
}

/// What a [`FencedHash::set`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use = "a refused write changed nothing"]
pub enum FencedWrite {
    /// Written: the token was at least every token that wrote before.
    Written,
    /// Refused, nothing changed: a higher token, `highest`, has written.
    Refused {
        /// The highest token that has written the hash.
        highest: u64,
    },
}

impl Client {
    /// The hash at `key`, written with fencing tokens: see [`FencedHash`].
    /// Nothing is sent until a call.
    pub fn fenced_hash(&self, key: impl Into<String>) -> FencedHash {
        FencedHash {
            obj: Object::new(self.clone(), key.into(), "fenced hash"),
        }
    }
}

impl FencedHash {
    /// The hash's key.
    pub fn name(&self) -> &str {
        self.obj.shared_name()
    }

    /// The client this handle belongs to.
    pub fn client(&self) -> &Client {
        self.obj.client()
    }

    /// Sets `field` to `value` if `token` is at least the highest token
    /// that has written the hash, and raises that to `token`; else
    /// changes nothing and says which token has written.
    ///
    /// The same token may write again (a leader writes many times in its
    /// term).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a bad key, or a token of 0 or over
    /// [`MAX_FENCE_TOKEN`] (nothing is sent), [`Error::WrongType`] when
    /// the key holds something that is no hash or its fence no integer up
    /// to [`MAX_FENCE_TOKEN`] (nothing is written), [`Error::Redis`]. After a connection error the
    /// write may or may not have been made; writing again with the same
    /// token is safe, and refused only if a higher one wrote meanwhile.
    ///
    /// # Cancel safety
    /// The write is one script call, made whole or not at all; once sent,
    /// a dropped future does not stop it.
    pub async fn set(&self, field: &str, value: &str, token: u64) -> Result<FencedWrite> {
        self.set_bytes(field, value.as_bytes(), token).await
    }

    /// [`FencedHash::set`] for a value of any bytes (serialized data,
    /// text in another encoding), stored as given.
    ///
    /// # Errors
    /// As [`FencedHash::set`].
    ///
    /// # Cancel safety
    /// As [`FencedHash::set`].
    pub async fn set_bytes(&self, field: &str, value: &[u8], token: u64) -> Result<FencedWrite> {
        self.obj.checked()?;
        if token == 0 || token > MAX_FENCE_TOKEN {
            return Err(Error::invalid(format!(
                "fencing token must be from 1 to {MAX_FENCE_TOKEN}, got {token}"
            )));
        }
        let name = self.obj.name();
        let mut call = FENCED_SET.key(name);
        call.key(keys::fence(name)).arg(token).arg(field).arg(value);
        let reply: Vec<i64> = self.obj.run(call).await?;
        match reply.as_slice() {
            [1, _] => {
                self.obj.release_synced().await;
                Ok(FencedWrite::Written)
            }
            [0, highest] if *highest > 0 => Ok(FencedWrite::Refused {
                highest: *highest as u64,
            }),
            other => Err(Error::UnexpectedReply {
                script: "fenced_set",
                reply: format!("{other:?}"),
            }),
        }
    }

    /// The value of `field`, and the highest token that has written the
    /// hash, read together.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a bad key, [`Error::WrongType`] as
    /// for [`FencedHash::set`], [`Error::NotUtf8`] when the value is not
    /// UTF-8 text (another program wrote bytes: read them with
    /// [`FencedHash::get_bytes`]), [`Error::Redis`].
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads.
    pub async fn get(&self, field: &str) -> Result<FencedValue> {
        let FencedValue { value, fence } = self.get_bytes(field).await?;
        let value = value
            .map(String::from_utf8)
            .transpose()
            .map_err(|_| Error::NotUtf8 {
                what: "fenced hash",
                name: self.obj.name().to_string(),
                field: field.to_owned(),
                bytes_call: "FencedHash::get_bytes",
            })?;
        Ok(FencedValue { value, fence })
    }

    /// [`FencedHash::get`] for a value of any bytes, as stored.
    ///
    /// # Errors
    /// As [`FencedHash::get`], but any value is read.
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads.
    pub async fn get_bytes(&self, field: &str) -> Result<FencedValue<Vec<u8>>> {
        self.obj.checked()?;
        let name = self.obj.name();
        let mut call = FENCED_GET.key(name);
        call.key(keys::fence(name)).arg(field);
        let mut conn = self.obj.conn();
        let (value, fence): (Option<Vec<u8>>, i64) = call
            .invoke_async(&mut conn)
            .await
            .map_err(|e| self.obj.error(e))?;
        Ok(FencedValue {
            value,
            fence: u64::try_from(fence).ok().filter(|&f| f > 0),
        })
    }
}
