//! A lock's release: its kind's script, and what the reply says. The
//! request itself (its latch, its resends, its sweep) is the engine's
//! ([`request::release()`]).

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tracing::Instrument;

use std::sync::atomic::{AtomicU64, Ordering};

use super::gate::{Claim, Gates};
use super::holds::Guards;
use super::lean::{self, Let};
use super::parking::{Parked, Parking};
use super::slot::{After, Slot, Standing};
use crate::engine::request::{GrantedIn, Latch};
use crate::engine::watchdog::{drift_margin, HoldKey, Registry};

use crate::engine::object::Object;
use crate::engine::request::release::{self as request, Resend, Stands};
use crate::engine::watchdog::LeaseState;
use crate::lock::kind::{DoneMark, ReleaseArgs};
use crate::lock::Kind;
use crate::{Error, Result};

/// A release's answer from Redis.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Answer {
    /// What the script replied: 0 when holds of the owner remain (the TTL
    /// raised to the release's lease, a longer one kept), 1 when it was the
    /// last, 2 when the last is kept.
    pub(crate) reply: i64,
    /// With holds remaining, the TTL (ms) the key got when the script says
    /// (a read release: the longest remaining read hold's).
    pub(crate) kept_ms: Option<u64>,
    /// When the first send of the release went: the send that ran went no
    /// earlier.
    pub(crate) first_sent: Instant,
}

/// Sends one release of `owner`'s hold on `lock` with `kind`'s script,
/// resending it with the same request id when the connection fails, as
/// `resend` says. `lease_ms`: the least TTL the key keeps when holds
/// remain, and the longest the hold lasts.
pub(crate) async fn release_hold(
    lock: &Object,
    kind: Kind,
    owner: &str,
    lease_ms: u64,
    stands: Option<&LeaseState>,
    resend: Resend,
) -> Result<()> {
    let request_id = lock.request_id();
    let release = ReleaseCall {
        kind,
        release: request::Release {
            owner,
            lease_ms,
            request_id: &request_id,
            stands: stands.map(|lease| lease as &dyn Stands),
            resend,
        },
        keep_until: None,
        done: None,
        grant: None,
    };
    release_hold_as(lock, &release).await.map(|_| ())
}

/// One release request of a lock's hold: what [`release_hold_as`] sends.
#[derive(Clone, Copy)]
pub(crate) struct ReleaseCall<'a> {
    pub(crate) kind: Kind,
    /// The request: whose hold, under which id, standing by what, resent
    /// how.
    pub(crate) release: request::Release<'a>,
    /// Until when the owner keeps its last hold instead of releasing it
    /// ([`LockGuard::keep_until`](super::LockGuard::keep_until)): each send asks for the time left then,
    /// rounded up; a send at or after it releases.
    pub(crate) keep_until: Option<Instant>,
    /// The occurrence a job's run marks done with its last hold's release.
    pub(crate) done: Option<&'a DoneMark>,
    /// For a give-back (the release of a hold whose caller never got it),
    /// the acquire latch of the request that took it: released only while
    /// the latch shows that grant, so that a give-back reaching a master
    /// that lost the grant in a failover takes none of the owner's other
    /// holds there (it replies as "not held"). `None` for a guard's release.
    pub(crate) grant: Option<&'a str>,
}

/// [`release_hold`] of the hold on `lock` (sent on the connection `lock`
/// is bound to), for a request the caller made.
pub(crate) async fn release_hold_as(lock: &Object, call: &ReleaseCall<'_>) -> Result<Answer> {
    let ReleaseCall {
        kind,
        release,
        keep_until,
        done,
        grant,
    } = *call;
    let publish = lock.publish();
    // A send whose reply was lost keeps the owner's calls of the lock
    // latched while it may run.
    let lost = |until| {
        if lean::gated(lock.client(), kind) {
            let owner = Arc::from(release.owner);
            Gates::get().quiet(&HoldKey::new(Arc::clone(lock.shared_name()), owner), until);
        }
    };
    let released = request::release(lock, &release, &lost, |sending| {
        kind.release(&ReleaseArgs {
            name: lock.shared_name(),
            field: release.owner,
            latch: sending.latch,
            lease_ms: release.lease_ms,
            publish,
            latch_ttl: sending.latch_ttl,
            keep_ms: keep_until
                .map(|until| ceil_ms(until.saturating_duration_since(Instant::now())))
                .filter(|&ms| ms > 0),
            done,
            grant,
        })
    })
    .await?;
    let first_sent = released.first_sent;
    match released.reply {
        Some(reply @ 0..=2) => Ok(Answer {
            reply,
            kept_ms: None,
            first_sent,
        }),
        // Holds remain, the key kept for that many ms (a read release).
        Some(reply) if reply < 0 => Ok(Answer {
            reply: 0,
            kept_ms: Some(reply.unsigned_abs()),
            first_sent,
        }),
        None => Err(Error::NotHeld {
            name: lock.name().to_string(),
            owner: release.owner.to_owned(),
        }),
        Some(other) => Err(Error::UnexpectedReply {
            script: "release",
            reply: other.to_string(),
        }),
    }
}

/// `left` in whole milliseconds, rounded up: a hold kept for it lasts at
/// least that long.
fn ceil_ms(left: Duration) -> u64 {
    let ms = left.as_millis() as u64;
    match left > Duration::from_millis(ms) {
        true => ms + 1,
        false => ms,
    }
}

/// One hold's release, ready to send: the local accounting is done, the
/// TTL the owner's other holds need is chosen, and the request id is fixed,
/// so that sending it again (after its runtime shut down) releases nothing
/// more.
pub(crate) struct Release {
    lock: Object,
    kind: Kind,
    pub(super) key: HoldKey,
    lease_ms: u64,
    /// Its unlock latch's request id, made by its first latched send and
    /// the same for every send after (a lean release needs none).
    request_id: std::sync::OnceLock<String>,
    /// The hold's lease, and whether only it decides the hold's end (no
    /// watchdog hold of the owner keeps the key): then a release Redis
    /// answers with "not held" after the lease ran out is a lost lease.
    lease: Arc<LeaseState>,
    own_lease: bool,
    /// The hold's slot among its owner's guards, where it stays until the
    /// release is answered.
    slot: Arc<Slot>,
    /// What the hold stands by: its own lease (or the watchdog's of the
    /// owner's other holds, which keeps the key), and every other hold of
    /// its owner that shares the key with it (see [`Standing`] and
    /// [`ReleaseCall::stands`]).
    standing: Arc<Standing>,
    /// See [`ReleaseCall::keep_until`].
    keep_until: Option<Instant>,
    /// See [`ReleaseCall::done`].
    done: Option<DoneMark>,
    /// A give-back's grant (see [`ReleaseCall::grant`]), kept standing
    /// until the release is answered.
    pub(super) grant: Option<Arc<Latch>>,
    /// The deadline of its lean send whose reply was lost (0: none): the
    /// release, run again from its start, settles it instead of sending.
    lean_lost: AtomicU64,
}

impl Drop for Release {
    /// The release is over, sent (and resent) or never to be: its standing
    /// serves nothing more (see [`Standing::clear`]).
    fn drop(&mut self) {
        self.standing.clear();
    }
}

/// Clears a give-back's standing when its try ends, however it ends (see
/// [`Standing::clear`]).
struct Cleared<'a>(&'a Standing);

impl Drop for Cleared<'_> {
    fn drop(&mut self) {
        self.0.clear();
    }
}

impl Release {
    /// The release of a hold whose slot the caller claimed: from its
    /// guard, or from `Lock::unlock` for the newest guard of its owner.
    ///
    /// The owner's holds share the key's TTL. While any of its holds is in
    /// watchdog mode, the watchdog keeps the key, and the leased holds with
    /// it. A release that leaves only leased holds raises the TTL to the
    /// longest lease they still have; it never lowers it (the script keeps
    /// a longer TTL: a later hold of the owner may have set it after this
    /// release was made). So a key whose remaining holds' leases all ran
    /// out under a watchdog hold lives on, after that hold's release, for
    /// what is left of the watchdog's last renewal.
    ///
    /// # Errors
    /// [`Error::LeaseLost`] when the lease is known lost and no watchdog
    /// hold of the owner keeps the key.
    pub(crate) fn prepare(
        lock: Object,
        kind: Kind,
        key: HoldKey,
        slot: Arc<Slot>,
    ) -> Result<Release> {
        let lease = slot.lease();
        let watchdog = lease.lease_ms.is_none();
        let registry = lock.registry();
        if watchdog {
            registry.release(&key, &lease.state);
        }
        // Whether the watchdog still keeps the key alive for this owner
        // (other watchdog holds remain). A leased hold inside it has not
        // expired, whatever its own lease said, and the holds that remain
        // keep the watchdog's TTL.
        let renewed = registry.ttl_of(&key);
        let watched = renewed.is_some();
        let own_lease = watchdog || !watched;
        if own_lease && !lease.state.stands_at(Instant::now()) {
            // Not sent: Redis may keep the hold a moment longer than this
            // clock (see `Guards::lingering`).
            Guards::get().lingers(&key, &slot);
            let supersedes = !kind.ttl_only_rises();
            Guards::get().finish(&key, &slot, (After::Gone, false, supersedes), registry);
            return Err(Error::LeaseLost {
                name: key.name.to_string(),
            });
        }
        // The TTL the watchdog renews to: of the lease that keeps the key
        // (the owner's other watchdog holds), else of this hold's own.
        let watchdog_ms = |ttl: Option<Duration>| {
            ttl.unwrap_or(lock.config().watchdog_timeout).as_millis() as u64
        };
        let lease_ms = if watched {
            watchdog_ms(renewed)
        } else if let Some(left) = Guards::get().lease_left(&key) {
            // At least 1 ms: `PEXPIRE 0` would delete the key.
            (left.as_millis() as u64).max(1)
        } else {
            lease
                .lease_ms
                .unwrap_or_else(|| watchdog_ms(lease.state.watchdog_ttl()))
        };
        let standing = Guards::get().standing(&key, &slot, registry, kind == Kind::Read);
        Ok(Release {
            lock,
            kind,
            key,
            lease_ms,
            request_id: std::sync::OnceLock::new(),
            lease: lease.state,
            own_lease,
            slot,
            standing,
            keep_until: None,
            done: None,
            grant: None,
            lean_lost: AtomicU64::new(0),
        })
    }

    /// This release, keeping the owner's last hold until `until` instead
    /// (see [`ReleaseCall::keep_until`]).
    pub(super) fn keeping_until(mut self, until: Option<Instant>) -> Release {
        self.keep_until = until;
        self
    }

    /// This release, marking a job's occurrence done with the owner's last
    /// hold (see [`ReleaseCall::done`]).
    pub(super) fn marking(mut self, done: Option<DoneMark>) -> Release {
        self.done = done;
        self
    }

    /// Sends the release (again, when it was sent before: the unlock latch
    /// makes that harmless), resending as `resend` says.
    pub(crate) async fn send(&self, resend: Resend) -> Result<()> {
        self.send_on(&self.lock(), resend).await
    }

    /// The lock the hold is on, its calls on the client's connection.
    pub(super) fn lock(&self) -> Object {
        self.lock.clone()
    }

    /// [`Release::send`] on `lock` (bound to the connection to send on).
    pub(super) async fn send_on(&self, lock: &Object, resend: Resend) -> Result<()> {
        // The owner's gate, when the client was asked for the lean
        // protocol: its ticket is kept until the release is answered.
        let claim = self.pass_gate().await;
        let lean = match &claim {
            Some(Claim::Lean(_)) => self.send_lean(lock, resend).await,
            _ if self.lean_lost.load(Ordering::Acquire) != 0 => self.send_lean(lock, resend).await,
            _ => None,
        };
        let answer = match lean {
            Some(answer) => answer,
            // Boxed: the release's future, which every unlock allocates
            // and moves, need not be as large as the latched path's.
            None => Box::pin(self.send_latched(lock, resend)).await,
        };
        drop(claim);
        linger(&self.key, &self.slot, self.lease_ms, &answer);
        // How the key stands now, for the releases that stand by this hold.
        let settled = settled(
            self.kind,
            (self.lease_ms, self.slot.lease().state.stands_until()),
            self.keep_until,
            &answer,
        );
        Guards::get().finish(&self.key, &self.slot, settled, self.lock.registry());
        match answer.map(|_| ()) {
            // Redis let the hold go while the release was on its way: by
            // this guard's clock (never ahead of the server's), the lease
            // had run out by the reply.
            Err(Error::NotHeld { .. }) if self.own_lease && self.lease.is_lost() => {
                Err(Error::LeaseLost {
                    name: self.key.name.to_string(),
                })
            }
            released => released,
        }
    }
}

impl Release {
    /// The latched release (`lua/release.lua` and its kin, with the unlock
    /// latch of this release's one request id), resent as `resend` says.
    async fn send_latched(&self, lock: &Object, resend: Resend) -> Result<Answer> {
        let span = tracing::info_span!("ferrisson.release", lock = %self.key.name, kind = self.kind.label());
        let request_id = self.request_id.get_or_init(|| self.lock.request_id());
        let call = ReleaseCall {
            kind: self.kind,
            release: request::Release {
                owner: &self.key.field,
                lease_ms: self.lease_ms,
                request_id,
                stands: Some(&StandingOf {
                    standing: &self.standing,
                    registry: self.lock.registry(),
                }),
                resend,
            },
            keep_until: self.keep_until,
            done: self.done.as_ref(),
            grant: self.grant.as_ref().map(|latch| latch.key.as_str()),
        };
        release_hold_as(lock, &call).instrument(span).await
    }

    /// Passes the owner's gate (see `lock::gate`) when the client was
    /// asked for the lean protocol and this kind may go lean; lean when
    /// the hold was taken lean, is its owner's only one here, and the
    /// release is plain (no keep, no job's mark, no grant). A release
    /// whose lean send was lost passes no gate: it settles.
    async fn pass_gate(&self) -> Option<Claim> {
        let client = self.lock.client();
        if !lean::gated(client, self.kind) {
            return None;
        }
        if self.lean_lost.load(Ordering::Acquire) != 0 {
            return None;
        }
        let plain = self.keep_until.is_none() && self.done.is_none() && self.grant.is_none();
        let go_lean = plain && lean::capable(self.kind) && self.slot.is_lean();
        let (key, slot) = (&self.key, &self.slot);
        let only = || Guards::get().holds_only(key, slot);
        Some(Gates::get().claim(key, go_lean, only).await)
    }

    /// The lean release (or, after its send was lost, the settle of it): `None` when the latched release is to go
    /// instead.
    ///
    /// A lost reply is settled in the background; an awaited release
    /// (`Resend::Bounded`) waits for the settle as long as its latched
    /// resends could take, one response timeout per send and one more.
    async fn send_lean(&self, lock: &Object, resend: Resend) -> Option<Result<Answer>> {
        let first_sent = Instant::now();
        let lasts = Duration::from_millis(self.lease_ms);
        let config = lock.config();
        let wait = match resend {
            Resend::Bounded => Some(
                config
                    .response_timeout
                    .saturating_mul(config.release_attempts.saturating_add(1)),
            ),
            Resend::UntilExpired => None,
        };
        let lost_at = self.lean_lost.load(Ordering::Acquire);
        let let_go = match lost_at {
            0 => lean::release(lock, &self.key, lasts, &self.lean_lost, wait).await,
            _ => Ok(Let::Settled(
                Box::pin(lean::settle_until_answered(lock, &self.key, lost_at, lasts)).await,
            )),
        };
        let released = Answer {
            reply: 1,
            kept_ms: None,
            first_sent,
        };
        let not_held = || Error::NotHeld {
            name: self.key.name.to_string(),
            owner: self.key.field.to_string(),
        };
        Some(match let_go.map_err(|e| lock.error(e)) {
            Ok(Let::Released) => Ok(released),
            // Released by the settle, or by the lost send itself (which
            // ran before its deadline, the lease standing when it went):
            // the hold is gone, by this release's doing as far as anyone
            // can tell.
            Ok(Let::Settled(true)) => Ok(released),
            // Never answered: what Redis holds is unknown (it ends with
            // the lease), as after a latched release that never got
            // through.
            Ok(Let::Settled(false)) => Err(lock.error(unanswered())),
            Ok(Let::NotHeld) => Err(not_held()),
            Ok(Let::Latched) => return None,
            Ok(Let::Unexpected(reply)) => Err(Error::UnexpectedReply {
                script: "lean_release",
                reply: reply.to_string(),
            }),
            Err(err) => Err(err),
        })
    }
}

/// The error of a lean release whose settle was never answered.
fn unanswered() -> redis::RedisError {
    std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        "timed out: the lean release's reply was lost, and no settle of it was answered in \
         time (it goes on in the background)",
    )
    .into()
}

/// Gives back one hold of `owner` on `name` that no guard owned (an
/// acquire's grant its caller never got), `granted` with a TTL of
/// `ttl_ms`, resending as `resend` says. It stands by its own lease from
/// `granted.from`, and by the owner's holds of the lock that share the key
/// with it (see [`Standing`]): granted before that lease ended, they shared
/// the key with it, whichever grant ran first; and a hold given back too
/// whose grant ran inside this one's lease, or this one inside its, by the
/// server's clock.
///
/// One whose lease ran out before it could be sent, none of those holds
/// known to stand, is parked (see [`Parking`]): another grant of the owner
/// whose reply was lost too may have shared its key and be settled later.
/// When a later give-back on the lock is answered "holds of the owner
/// remain", the parked ones are tried again, the latest lease first: one
/// that shared the key with that hold now stands by it.
///
/// `grant`, the latch of the request that took the hold, is named by every
/// send (see [`ReleaseCall::grant`]): a master that lost the grant in a
/// failover gives nothing back, where it would take another hold of the
/// owner. A parked give-back keeps it standing as long as it is parked.
pub(crate) async fn give_back_hold(
    lock: &Object,
    kind: Kind,
    key: &HoldKey,
    ttl_ms: u64,
    granted: GrantedIn,
    resend: Resend,
    grant: Option<Arc<Latch>>,
) -> Result<()> {
    // Parked as long as a request of this lease keeps its latch (and so
    // may be settled), and a watchdog lease more.
    let config = lock.config();
    let window = config.unlock_latch_ttl_ms();
    let keep =
        Duration::from_millis(ttl_ms.max(window).saturating_add(window)) + config.watchdog_timeout;
    let hold = Parked {
        kind,
        key: key.clone(),
        ttl_ms,
        granted,
        resend,
        until: Instant::now() + keep,
        grant,
    };
    let answer = give_back_once(lock, &hold).await;
    match &answer {
        // Never sent: the lease ran out first.
        Err(Error::LeaseLost { .. }) => park(hold).await,
        Ok(Answer { reply: 0, .. }) => loop {
            // A hold given back again that leaves holds may be the one an
            // earlier grant of the chain shared its key with: another pass.
            let mut kept = false;
            let owners = format!("{}:", lock.client().id());
            for parked in Parking::get().take(key, kind == Kind::Read, &owners) {
                match give_back_once(lock, &parked).await {
                    Ok(answer) => {
                        kept |= answer.reply == 0;
                        tracing::debug!(lock = %parked.key.name, owner = %parked.key.field,
                            "a hold that ran out before it could be given back shared its key \
                             with one that stands: given back");
                    }
                    Err(Error::LeaseLost { .. }) => park(parked).await,
                    Err(err) => tracing::warn!(lock = %parked.key.name,
                        owner = %parked.key.field, error = %err,
                        "could not give back a hold whose grant could not be confirmed; \
                         it expires with its lease"),
                }
            }
            if !kept {
                break;
            }
        },
        _ => {}
    }
    answer.map(|_| ())
}

/// Parks `hold` (see [`Parking`]), its grant's latch kept standing until
/// the parking ends.
async fn park(hold: Parked) {
    // Parked before the stretch's round trip: a give-back of the owner
    // answered "holds remain" meanwhile must find it.
    let (grant, until) = (hold.grant.clone(), hold.until);
    Parking::get().park(hold);
    // Forgotten at its end even when nothing parks or takes again (its
    // latch is retired then, and the client it names let go).
    tokio::spawn(async move {
        tokio::time::sleep_until(until).await;
        Parking::get().forget_ended();
    });
    if let Some(grant) = grant {
        grant.stretch(until).await;
    }
}

/// One try of [`give_back_hold`], of `hold` (a hold on `lock`).
async fn give_back_once(lock: &Object, hold: &Parked) -> Result<Answer> {
    let Parked {
        kind,
        ref key,
        ttl_ms,
        granted,
        resend,
        ref grant,
        ..
    } = *hold;
    // The owner's gate, when the client was asked for the lean protocol:
    // a give-back goes latched, no lean call of the owner beside it.
    let client = lock.client();
    let _claim = match lean::gated(client, kind) {
        true => Some(Gates::get().claim(key, false, || false).await),
        false => None,
    };
    let slot = Slot::given_back(ttl_ms, granted);
    let registry = lock.registry();
    let standing = Guards::get().standing(key, &slot, registry, kind == Kind::Read);
    let _cleared = Cleared(&standing);
    let request_id = lock.request_id();
    let call = ReleaseCall {
        kind,
        release: request::Release {
            owner: &key.field,
            lease_ms: ttl_ms,
            request_id: &request_id,
            stands: Some(&StandingOf {
                standing: &standing,
                registry,
            }),
            resend,
        },
        keep_until: None,
        done: None,
        grant: grant.as_ref().map(|latch| latch.key.as_str()),
    };
    let answer = release_hold_as(lock, &call).await;
    linger(key, &slot, ttl_ms, &answer);
    let own = slot.lease().state.stands_until();
    let settled = settled(kind, (ttl_ms, own), None, &answer);
    Guards::get().finish(key, &slot, settled, registry);
    answer
}

/// Records what a release of `slot`'s hold of `key`, with `lease_ms` as
/// the least TTL it keeps, may have left standing in Redis that no live
/// guard owns (see `Guards::lingering`): its own hold when it did not get
/// through ("not held" says that hold is gone), or the counts left when
/// holds remain (a hold of the owner whose release was never sent may be
/// among them, kept by the TTL this release set); nothing once the key is
/// gone.
pub(crate) fn linger(key: &HoldKey, slot: &Slot, lease_ms: u64, answer: &Result<Answer>) {
    let guards = Guards::get();
    match answer {
        Ok(Answer { reply: 0, .. }) => {
            guards.lingers_until(key, Instant::now() + Duration::from_millis(lease_ms));
        }
        Ok(Answer { reply: 1, .. }) => guards.forget_lingering(key),
        Ok(_) | Err(Error::NotHeld { .. }) => {}
        Err(_) => guards.lingers(key, slot),
    }
}

/// How a release's answer leaves the key, for the releases that stand by
/// its hold: whether it deleted the key (the owner's last hold, released
/// and not kept), and whether the TTL it left is the one in force (see
/// `Guards::finish`). `lease_ms` is the least TTL the release keeps;
/// `own`, until when the hold's own lease kept the key by this clock.
fn settled(
    kind: Kind,
    (lease_ms, own): (u64, Option<Instant>),
    keep_until: Option<Instant>,
    answer: &Result<Answer>,
) -> (After, bool, bool) {
    let rises = kind.ttl_only_rises();
    match answer {
        // The last hold kept until `keep_until`: the script set the key's
        // TTL to the time then left, from a send no earlier than the first.
        Ok(Answer {
            reply: 2,
            first_sent,
            ..
        }) => match keep_until {
            Some(until) if until > *first_sent => (
                After::Kept(until - drift_margin(until - *first_sent)),
                false,
                true,
            ),
            _ => (After::Gone, false, true),
        },
        // Holds of the owner remain, the key's TTL at least `lease_ms` from
        // a send that went no earlier than the first (a read hold's hash
        // lives as its longest read hold instead); where TTLs only rise, at
        // least as long as the hold's own lease kept it too.
        Ok(Answer {
            reply: 0,
            first_sent,
            ..
        }) if kind.holds_share_ttl() => {
            let lease = Duration::from_millis(lease_ms);
            let until = *first_sent + lease - drift_margin(lease);
            match own {
                Some(own) if rises => (After::Kept(until.max(own)), false, false),
                _ => (After::Kept(until), false, !rises),
            }
        }
        // A read hold's: the hash lives as long as the script said, counted
        // from the first send, as above.
        Ok(Answer {
            reply: 0,
            kept_ms: Some(ms),
            first_sent,
        }) => {
            let kept = Duration::from_millis(*ms);
            (
                After::Kept(*first_sent + kept - drift_margin(kept)),
                false,
                true,
            )
        }
        Ok(Answer { reply: 0, .. }) => (After::Gone, false, true),
        Ok(_) => (After::Gone, true, true),
        // Never sent: the key is as it was.
        Err(Error::LeaseLost { .. }) => (After::Gone, false, !rises),
        Err(_) => (After::Gone, false, true),
    }
}

/// A [`Standing`] as a release stands by it.
struct StandingOf<'a> {
    standing: &'a Standing,
    registry: &'a Registry,
}

impl Stands for StandingOf<'_> {
    fn stands_at(&self, at: Instant) -> bool {
        self.standing.stands_at(self.registry, at)
    }

    fn deadline(&self) -> Option<Instant> {
        self.standing.deadline(self.registry)
    }
}
