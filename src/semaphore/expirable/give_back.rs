//! Giving permits back: by id, all or none, resent when nobody awaits it;
//! and the grant an acquire took, given back when its caller never got it.

use super::*;
use crate::engine::request::KeepsLatched;

/// One call of the script, with the arguments of `op`: `ids` (their raw
/// bytes, concatenated) and `number` (a lease in ms, or the total).
pub(super) fn call(
    semaphore: &Object,
    op: &str,
    ids: &[PermitId],
    number: u64,
) -> redis::ScriptInvocation<'static> {
    let name = semaphore.name();
    let mut invocation = EXPIRABLE.prepare_invoke();
    invocation
        .key(name)
        .key(keys::permit_timeouts(name))
        .key(keys::semaphore_channel(name))
        .arg(op)
        .arg(semaphore.publish())
        .arg(ids.iter().flat_map(|id| id.0).collect::<Vec<u8>>())
        .arg(number)
        .arg(NO_EXPIRY);
    invocation
}

/// Gives back the permits `ids`, all or none: `Ok(None)` when they were
/// all out, else the first that was not (and none was given back). With
/// `until`, a send that fails on the connection is resent until then (a
/// release by id is idempotent: a second finds the permit not out).
///
/// Sent on the connection `semaphore` is bound to. Safe to send twice: a
/// permit given back is no longer out, and the second send finds it
/// missing.
pub(super) async fn give_back(
    semaphore: &Object,
    ids: &[PermitId],
    until: Option<Instant>,
) -> Result<Option<PermitId>> {
    let name = semaphore.name();
    let send = |_| {
        let mut conn = semaphore.conn();
        let release = call(semaphore, "release", ids, 0);
        async move { release.invoke_async::<i64>(&mut conn).await }
    };
    let released = match until {
        Some(until) => resend_until(semaphore.config(), name, until, send).await,
        None => send(0).await,
    };
    let released = released.map_err(|e| semaphore.error(e))?;
    match released {
        1 => Ok(None),
        missing if missing < 0 => Ok(ids.get((-missing - 1) as usize).copied()),
        other => Err(Error::UnexpectedReply {
            script: "expirable release",
            reply: other.to_string(),
        }),
    }
}

/// A permit-expirable semaphore's grant: the permits of these ids, each
/// given back by its own release (one that expired meanwhile does not keep
/// the others out), resent until it gets through or the permit's lease has
/// surely ended ([`NEVER_EXPIRES`] without a lease).
pub(super) struct PermitsOut {
    pub(super) ids: Vec<PermitId>,
    /// Their lease; `None`: none.
    pub(super) lease_ms: Option<u64>,
}

impl PermitsOut {
    pub(super) fn new(ids: Vec<PermitId>, lease_ms: Option<u64>) -> PermitsOut {
        PermitsOut { ids, lease_ms }
    }
}

impl Taken for PermitsOut {
    // A semaphore's key is no lock hash.
    fn keep_latched(&self, _: &Object) -> Option<KeepsLatched> {
        None
    }

    async fn give_back(
        &self,
        semaphore: &Object,
        _lasts: Lasts,
        _granted: GrantedIn,
        // Permits are no holds of an owner: a give-back takes back only
        // the ones its request took, whatever the master.
        _grant: Option<&Arc<Latch>>,
        why: GiveBack,
    ) -> bool {
        // The grant came before this: its lease ends by then.
        let now = Instant::now();
        let until = match self.lease_ms {
            Some(ms) => surely_ended(semaphore.config(), now, Duration::from_millis(ms)),
            None => now + NEVER_EXPIRES,
        };
        let name = semaphore.name();
        for &id in &self.ids {
            if let Err(err) = give_back(semaphore, &[id], Some(until)).await {
                tracing::warn!(semaphore = %name, permit = %id, error = %err, why = why.why(),
                    "could not give back a permit an acquire took");
            }
        }
        // Its script names no grant.
        false
    }
}
