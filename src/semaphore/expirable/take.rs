//! Taking permits: one acquire's request, its tries and its wait.

use super::*;

impl PermitExpirableSemaphore {
    pub(super) async fn take(
        &self,
        wait: Option<Duration>,
        lease: Option<Duration>,
    ) -> Result<Option<Permit>> {
        Ok(self
            .take_many(1, wait, lease)
            .await?
            .and_then(|mut permits| permits.pop()))
    }

    /// Takes `n` permits at once, all or none.
    pub(super) async fn take_many(
        &self,
        n: u32,
        wait: Option<Duration>,
        lease: Option<Duration>,
    ) -> Result<Option<Vec<Permit>>> {
        let subject = self.obj.subject(EXPIRABLE_KIND);
        let take = || self.take_many_in(n, wait, lease);
        telemetry::acquire(subject, self.obj.shared_name(), take, Option::is_some).await
    }

    /// [`PermitExpirableSemaphore::take_many`], inside its span.
    pub(super) async fn take_many_in(
        &self,
        n: u32,
        wait: Option<Duration>,
        lease: Option<Duration>,
    ) -> Result<Option<Vec<Permit>>> {
        self.obj.checked()?;
        let n = args::permits(n)?;
        if n > MAX_PERMITS_AT_ONCE {
            return Err(Error::invalid(format!(
                "at most {MAX_PERMITS_AT_ONCE} permits are taken at once, got {n}"
            )));
        }
        let lease_ms = lease
            .map(|lease| args::duration("lease", lease, MAX_DURATION))
            .transpose()?;
        let limits = self.obj.wait_limits(wait)?;
        let runtime = runtime()?;
        // One request (and its permit ids) for the whole wait, renewed when
        // it grows old: a resend after a lost reply takes the permits once.
        let slot = RequestSlot::default();
        let attempt = || self.try_take(n, lease_ms, &slot, limits.resend_until, runtime.clone());
        let channel = || Channel {
            name: keys::semaphore_channel(self.obj.shared_name()),
            broadcast: true,
        };
        self.obj.wait_on(channel, limits, attempt).await
    }

    /// One attempt of the wait's request to take `n` permits under the
    /// request's ids (resent on a lost reply, more while the wait lasts):
    /// the permits, or wait (until the first permit out expires, when one
    /// will).
    async fn try_take(
        &self,
        n: u32,
        lease_ms: Option<u64>,
        slot: &RequestSlot<PermitsOut>,
        resend_until: Option<Instant>,
        runtime: Handle,
    ) -> Result<Tried<Vec<Permit>>> {
        // What the sends take lasts the lease, or until released.
        let lasts = lease_ms.map_or(Lasts::UntilReleased, Lasts::Ms);
        let new = || {
            let out = PermitsOut::new((0..n).map(|_| PermitId::random()).collect(), lease_ms);
            Request::new(&self.obj, out, lasts, runtime.clone())
        };
        let request = slot.get(lasts, new).await.map_err(|e| self.obj.error(e))?;
        let ids = request.taken().ids.clone();
        let (sent, this) = (Instant::now(), Arc::clone(&request));
        let (semaphore, build_ids) = (self.obj.clone(), ids.clone());
        let build = move |latch: &str, latch_ttl: u64, deadline: u64| {
            let lease = lease_ms.unwrap_or(0);
            let mut call = call(&semaphore, "acquire", &build_ids, lease);
            call.key(latch).arg(latch_ttl).arg(deadline);
            call
        };
        // The script replies nil for permits taken, else how long to wait.
        let answer = |reply: &Option<i64>| Answer::granted_if(reply.is_none());
        let lasts = lease_ms.map_or(Lasts::UntilReleased, Lasts::Ms);
        let how = Sending {
            build,
            // Ran after its deadline: took nothing, as a timed-out reply.
            decode: |reply| match redis::from_redis_value::<Option<i64>>(reply)? {
                Some(request::LATE) => Err(request::late()),
                reply => Ok(reply),
            },
            resend_until,
            lasts,
        };
        let reply = request::send(request, runtime.clone(), how, answer, |_| async {})
            .await
            .map_err(|e| self.obj.error(e))?;
        if reply.is_none() {
            // Given back should this attempt be dropped before it returns.
            let out = PermitsOut::new(ids.clone(), lease_ms);
            let taken = Unclaimed::new(&self.obj, out, runtime.clone());
            let give_back = |taken: Unclaimed<PermitsOut>| taken.give_back(GiveBack::Unsynced);
            let latch = slot.latch();
            match self
                .obj
                .keep_if_synced(latch.as_deref(), taken, give_back)
                .await?
            {
                // Claimed by the permits made below, with no await between.
                Tried::Done(taken) => taken.claim(),
                Tried::Again(after) => return Ok(Tried::Again(after)),
            }
        }
        // The lease counts from this send, or from an earlier one of the
        // request whose reply was lost (it may have taken the permits).
        let start = this.lease_start(sent);
        Ok(match reply {
            None => Tried::Done(
                ids.iter()
                    .map(|&id| {
                        let hold = PermitHold::new(self.obj.clone(), runtime.clone(), id);
                        Permit::new(hold, id, lease_ms, start)
                    })
                    .collect(),
            ),
            // Until the first lease ends, but no longer than a look-again:
            // that lease may be anyone's and long, and a wait whose message
            // was lost settles its old request at its next try, which must
            // come while the request's latch lives (see `Request`).
            Some(ms) if ms > 0 => Tried::Again(Some(
                Duration::from_millis(ms as u64).min(self.obj.config().renewal_interval()),
            )),
            Some(_) => Tried::Again(None),
        })
    }
}

/// The most permits one acquire takes: their ids travel in one argument.
const MAX_PERMITS_AT_ONCE: u32 = 100_000;
