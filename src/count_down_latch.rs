//! The count-down latch: waiters wait until a count reaches zero.

use std::time::Duration;

use crate::engine::keys;
use crate::engine::object::Object;
use crate::engine::scripts::{LATCH_COUNT_DOWN, LATCH_DELETE, UNLOCK_MESSAGE};
use crate::engine::waiting::{Channel, Tried};
use crate::{Client, Error, Result};

/// The message `try_set_count` publishes (Redisson's new-count message).
const NEW_COUNT_MESSAGE: &str = "1";

/// A distributed count-down latch, from [`Client::count_down_latch`]:
/// Redisson's `RCountDownLatch`, on the same key and channel.
///
/// The latch is a count at the plain key `name`, set once with
/// [`try_set_count`](CountDownLatch::try_set_count). Each
/// [`count_down`](CountDownLatch::count_down) lowers it; at zero the key is
/// deleted and every waiter, in every process, is woken by one message on
/// `redisson_countdownlatch__channel__{name}` (the name wrapped in braces
/// whatever it holds, as Redisson builds it).
///
/// A latch that is not set is open: [`wait`](CountDownLatch::wait) returns
/// at once. So set the count before anyone waits on it (a barrier's
/// coordinator sets it, then starts the workers), or have waiters wait for
/// it to be set by other means.
///
/// ```no_run
/// # async fn run(client: ferrisson::Client) -> ferrisson::Result<()> {
/// let ready = client.count_down_latch("deploy:42:ready");
/// ready.try_set_count(3).await?;
/// // ... each of three services, when warmed up:
/// ready.count_down().await?;
/// // ... and the traffic switch:
/// ready.wait().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct CountDownLatch {
    obj: Object,
}

impl std::fmt::Debug for CountDownLatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CountDownLatch")
            .field("name", self.obj.shared_name())
            .finish_non_exhaustive()
    }
}

impl CountDownLatch {
    /// The latch's channel: Redisson's name, except on a cluster where
    /// that would leave the name's slot (see `keys::cluster_latch_channel`).
    fn channel_name(&self) -> String {
        if self.obj.is_cluster() {
            keys::cluster_latch_channel(self.obj.shared_name())
        } else {
            keys::latch_channel(self.obj.shared_name())
        }
    }

    pub(crate) fn new(client: Client, name: String) -> CountDownLatch {
        CountDownLatch {
            obj: Object::new(client, name, "latch"),
        }
    }

    /// The latch's name, which is also its key.
    pub fn name(&self) -> &str {
        self.obj.shared_name()
    }

    /// Sets the count, if the latch is not set (or has opened); whether
    /// this call set it.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a bad name or a count of zero (a
    /// latch at zero is open: there is nothing to set),
    /// [`Error::WrongType`] when the key holds other data, [`Error::Redis`].
    ///
    /// # Cancel safety
    /// Cancel safe: once sent, the call completes in the background.
    pub async fn try_set_count(&self, count: u64) -> Result<bool> {
        self.obj.checked()?;
        if count == 0 {
            return Err(Error::invalid(
                "a latch count must be at least 1, got 0 (a latch at zero is open)",
            ));
        }
        if count > i64::MAX as u64 {
            return Err(Error::invalid(format!(
                "a latch count must be at most {}, got {count}",
                i64::MAX
            )));
        }
        let message = NEW_COUNT_MESSAGE.to_owned();
        self.obj
            .set_if_missing(self.channel_name(), count, message, None)
            .await
    }

    /// Lowers the count by one; at zero, opens the latch for every waiter.
    /// On an open latch it does nothing. Returns the count left.
    ///
    /// A count-down is not repeated when its reply is lost (it is not
    /// idempotent): the error then says the connection failed
    /// ([`Error::is_connection_error`]), and the count may or may not have
    /// moved.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`], [`Error::WrongType`] (also when the key
    /// holds a string that is not a number; it is left alone),
    /// [`Error::Redis`].
    ///
    /// # Cancel safety
    /// Cancel safe: once sent, the count-down completes in the background.
    pub async fn count_down(&self) -> Result<u64> {
        self.obj.checked()?;
        let mut call = LATCH_COUNT_DOWN.prepare_invoke();
        call.key(self.obj.name())
            .key(self.channel_name())
            .arg(UNLOCK_MESSAGE)
            .arg(self.obj.publish());
        self.obj.run(call).await
    }

    /// The count now; 0 when the latch is open (or was never set).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`], [`Error::WrongType`], [`Error::Redis`].
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads.
    pub async fn count(&self) -> Result<u64> {
        self.obj.checked()?;
        Ok(self.obj.read_count().await?.max(0) as u64)
    }

    /// Waits until the latch is open (its count reached zero, or it was
    /// deleted), as long as it takes. Woken by the latch's message; it
    /// also looks again every third of the client's watchdog timeout, in
    /// case a message was lost.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`], [`Error::WrongType`], [`Error::Redis`]
    /// for an error Redis replies (connection failures are waited out).
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads; a dropped wait leaves its subscription.
    pub async fn wait(&self) -> Result<()> {
        match self.wait_until(None).await? {
            true => Ok(()),
            false => Err(Error::no_deadline("latch")),
        }
    }

    /// Waits at most `timeout` for the latch to open; whether it did. It
    /// returns by the end of the timeout plus a small margin, whatever the
    /// server does, as [`Lock::try_lock_for`](crate::Lock::try_lock_for).
    ///
    /// # Errors
    /// As [`CountDownLatch::wait`], and [`Error::InvalidArgument`] for a
    /// timeout over a year; a connection failure on the first look is
    /// returned (later ones are waited out within the timeout), and so is
    /// a timeout when no look had its reply by the end of the margin.
    ///
    /// # Cancel safety
    /// As [`CountDownLatch::wait`].
    pub async fn wait_for(&self, timeout: Duration) -> Result<bool> {
        self.wait_until(Some(timeout)).await
    }

    async fn wait_until(&self, wait: Option<Duration>) -> Result<bool> {
        self.obj.checked()?;
        let limits = self.obj.wait_limits(wait)?;
        let attempt = || async {
            Ok(match self.count().await? {
                0 => Tried::Done(()),
                _ => Tried::Again(None),
            })
        };
        let channel = || Channel {
            name: self.channel_name(),
            broadcast: true,
        };
        Ok(self.obj.wait_on(channel, limits, attempt).await?.is_some())
    }

    /// Deletes the latch whatever its count, opening it for every waiter;
    /// whether there was a latch.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`], [`Error::WrongType`] when the key holds
    /// other data (which is not deleted), [`Error::Redis`].
    ///
    /// # Cancel safety
    /// Cancel safe: once sent, the delete completes in the background.
    pub async fn delete(&self) -> Result<bool> {
        self.obj.checked()?;
        let mut call = LATCH_DELETE.prepare_invoke();
        call.key(self.obj.name())
            .key(self.channel_name())
            .arg(UNLOCK_MESSAGE)
            .arg(self.obj.publish());
        Ok(self.obj.run::<i64>(call).await? == 1)
    }
}

// `Client::count_down_latch`, beside the handle (the client never names
// it).
impl Client {
    /// A handle to the count-down latch `name`, Redisson's
    /// `RCountDownLatch` (see [`CountDownLatch`]).
    pub fn count_down_latch(&self, name: impl Into<String>) -> CountDownLatch {
        CountDownLatch::new(self.clone(), name.into())
    }
}
