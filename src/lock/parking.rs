//! Give-backs parked until another grant of their owner settles.

use std::sync::{Arc, LazyLock, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use super::{Kind, Resend};
use crate::engine::request::{GrantedIn, Latch};
use crate::engine::watchdog::HoldKey;

/// A give-back of a hold no guard owned, parked in [`Parking`] when it was
/// never sent: its lease ran out first, and no hold of its owner known to
/// stand shared its key with it. Another grant of the owner whose replies
/// were lost too, made while it stood, may have (then its count is in the
/// key still); such a grant's give-back, once settled, is answered "holds
/// of the owner remain", and the parked ones are tried again then (see
/// [`give_back_hold`](super::release::give_back_hold)).
#[derive(Debug)]
pub(crate) struct Parked {
    pub(crate) kind: Kind,
    pub(crate) key: HoldKey,
    pub(crate) ttl_ms: u64,
    pub(crate) granted: GrantedIn,
    pub(crate) resend: Resend,
    /// Forgotten then: the settles of the owner's other grants that could
    /// share its key come within their latches' TTL, which this outlasts
    /// for grants with a lease up to its own (a longer one's may come later,
    /// and finds it gone: its count then stays until the TTL that
    /// give-back sets).
    pub(crate) until: Instant,
    /// The latch of the request that took the hold, which the give-back
    /// names (see `ReleaseCall::grant`): kept standing while parked.
    pub(crate) grant: Option<Arc<Latch>>,
}

impl Parked {
    /// Until when its own lease surely kept the key.
    fn lease_end(&self) -> Instant {
        self.granted.from + Duration::from_millis(self.ttl_ms)
    }
}

/// The process's parked give-backs (see [`Parked`]); few and short-lived.
#[derive(Debug, Default)]
pub(crate) struct Parking(Mutex<Vec<Parked>>);

static PARKING: LazyLock<Parking> = LazyLock::new(Parking::default);

impl Parking {
    pub(crate) fn get() -> &'static Parking {
        &PARKING
    }

    fn parked(&self) -> std::sync::MutexGuard<'_, Vec<Parked>> {
        let mut parked = self
            .0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let now = Instant::now();
        parked.retain(|p| now < p.until);
        parked
    }

    pub(crate) fn park(&self, parked: Parked) {
        self.parked().push(parked);
    }

    /// Drops the parked give-backs whose time is over.
    pub(crate) fn forget_ended(&self) {
        let ended: Vec<Parked> = {
            let mut parked = self.0.lock().unwrap_or_else(|p| p.into_inner());
            let now = Instant::now();
            let (ended, kept) = parked.drain(..).partition(|p| now >= p.until);
            *parked = kept;
            ended
        };
        // Their latches are retired here, outside the lock.
        drop(ended);
    }

    /// Takes the parked give-backs of `key`'s owner on its lock, and when
    /// `shared` (a read hold: the hash lives as long as any owner's read
    /// hold) those of the other read owners whose field begins with
    /// `owners` (a client's id and `:`); the latest lease end first: in a
    /// chain of grants each made while the one before stood, the latest
    /// goes first and the earlier stand by it.
    pub(crate) fn take(&self, key: &HoldKey, shared: bool, owners: &str) -> Vec<Parked> {
        let mut parked = self.parked();
        let wanted = |p: &Parked| match shared {
            false => p.key == *key,
            true => {
                p.key.name == key.name && p.kind == Kind::Read && p.key.field.starts_with(owners)
            }
        };
        let (mut taken, kept): (Vec<_>, Vec<_>) = parked.drain(..).partition(wanted);
        *parked = kept;
        taken.sort_by_key(|p| std::cmp::Reverse(p.lease_end()));
        taken
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn parked_give_backs_are_taken_per_lock_and_client_latest_lease_first() {
        let parking = Parking::default();
        let now = Instant::now();
        let park = |name: &str, field: &str, ttl_ms: u64, until: Instant| Parked {
            kind: match name {
                "r" => Kind::Read,
                _ => Kind::REENTRANT,
            },
            key: HoldKey::new(Arc::from(name), Arc::from(field)),
            ttl_ms,
            granted: GrantedIn::at(now),
            resend: Resend::UntilExpired,
            until,
            grant: None,
        };
        let later = now + Duration::from_secs(60);
        parking.park(park("a", "client-1:job", 1_000, later));
        parking.park(park("a", "client-1:job", 5_000, later));
        parking.park(park("a", "client-2:job", 1_000, later));
        parking.park(park("b", "client-1:job", 1_000, later));
        parking.park(park("a", "client-1:old", 1_000, now));
        parking.park(park("a", "client-10:job", 1_000, later));
        parking.park(park("r", "client-1:job", 1_000, later));
        parking.park(park("r", "client-1:other", 1_000, later));
        parking.park(park("r", "client-2:job", 1_000, later));
        let key = |name: &str, field: &str| HoldKey::new(Arc::from(name), Arc::from(field));
        let taken = parking.take(&key("a", "client-1:job"), false, "client-1:");
        let ttls: Vec<_> = taken.iter().map(|p| p.ttl_ms).collect();
        assert_eq!(ttls, [5_000, 1_000]);
        assert!(parking
            .take(&key("a", "client-1:job"), false, "client-1:")
            .is_empty());
        // Another owner's, and one forgotten at its time.
        assert!(parking
            .take(&key("a", "client-1:old"), false, "client-1:")
            .is_empty());
        assert_eq!(
            parking
                .take(&key("a", "client-2:job"), false, "client-2:")
                .len(),
            1
        );
        assert_eq!(
            parking
                .take(&key("a", "client-10:job"), false, "client-10:")
                .len(),
            1
        );
        assert_eq!(
            parking
                .take(&key("b", "client-1:job"), false, "client-1:")
                .len(),
            1
        );
        // A read hold's: every read owner of the client.
        let reads = parking.take(&key("r", "client-1:job"), true, "client-1:");
        assert_eq!(reads.len(), 2);
        assert_eq!(
            parking
                .take(&key("r", "client-2:job"), true, "client-2:")
                .len(),
            1
        );
    }
}
