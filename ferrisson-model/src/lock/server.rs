//! What Redis holds for the reentrant lock, and its scripts as atomic steps.

use super::*;

/// The lock hash: one owner field and its count, and the key's TTL as the
/// time it runs out.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Hold {
    pub owner: ClientId,
    pub count: u8,
    pub expires: Time,
}

/// What Redis holds.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Server {
    pub hold: Option<Hold>,
    /// Acquire latches: request, value, when it runs out. Sorted.
    pub acquire_latches: Vec<(ReqId, Latch, Time)>,
    /// Unlock latches: request, the first reply (1 last hold, 0 holds
    /// remain), when it runs out. Sorted.
    pub unlock_latches: Vec<(ReqId, u8, Time)>,
    /// A fenced lock (`lua/fenced_acquire.lua`): every grant raises the
    /// token counter, which never expires, and the latch keeps the token.
    pub fenced: bool,
    /// The token counter (`redisson_lock_token:{name}`).
    pub token: u8,
    /// The token each granted request got, as its latch keeps it. Sorted.
    pub tokens: Vec<(ReqId, u8)>,
    /// The replication offset: the writes so far (kept with a replica
    /// only). A replica's copy has the offset it reached.
    pub offset: u8,
}

/// A script's reply, as the client reads it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Reply {
    /// Acquire: held now (nil).
    Granted,
    /// Acquire: held by another (its PTTL).
    Refused,
    /// Acquire: the request is spent (-2): granted before and its hold
    /// gone since, or given up.
    Spent,
    /// Acquire of a non-reentrant lock by its holder (-4): nothing changes.
    NotReentrant,
    /// Acquire run after its call's deadline (-5): nothing changes.
    TooLate,
    /// Release: 1 the last hold, 0 holds remain, 2 the last hold kept
    /// (a job's "at least for").
    Released(u8),
    /// Release: the owner holds nothing (nil).
    NotHeld,
    /// Renewal: whether the owner still held it.
    Renewed(bool),
    /// A lean settle sent before its acquire's deadline by the server's
    /// clock (-6): nothing is read.
    NotYet,
    /// Settle: whether the request had been granted.
    Settled(bool),
    /// Replica sync: whether enough replicas acknowledged the grant (false
    /// also when its latch is gone from the master, or `WAIT` failed).
    Synced(bool),
}

impl Server {
    pub fn latch(&self, req: ReqId) -> Option<Latch> {
        self.acquire_latches
            .iter()
            .find(|(r, _, _)| *r == req)
            .map(|(_, latch, _)| *latch)
    }

    pub(super) fn set_latch(&mut self, req: ReqId, latch: Latch, expires: Time) {
        self.acquire_latches.retain(|(r, _, _)| *r != req);
        self.acquire_latches.push((req, latch, expires));
        self.acquire_latches.sort();
    }

    /// A free lock taken by `owner`: one hold, until `expires`.
    fn take(&mut self, owner: ClientId, expires: Time) {
        self.hold = Some(Hold {
            owner,
            count: 1,
            expires,
        });
    }

    pub(super) fn held_by(&self, owner: ClientId) -> bool {
        self.hold.is_some_and(|h| h.owner == owner)
    }

    /// The owner's count (0: not its hold).
    pub fn count_of(&self, owner: ClientId) -> u8 {
        self.hold
            .filter(|h| h.owner == owner)
            .map_or(0, |h| h.count)
    }

    /// `lua/acquire.lua`, for a reentrant lock.
    pub fn acquire(&mut self, now: Time, req: ReqId, b: &Bounds, mutation: Mutation) -> Reply {
        self.acquire_with(now, req, b.lease, b, mutation, true, false)
    }

    /// `lua/acquire.lua` with its other arguments: the TTL it sets
    /// (`ttl`), a non-reentrant lock (`reentrant` false) refuses its
    /// holder; a call that runs after its deadline (`too_late`) changes
    /// nothing.
    #[allow(clippy::too_many_arguments)]
    pub fn acquire_with(
        &mut self,
        now: Time,
        req: ReqId,
        ttl: Time,
        b: &Bounds,
        mutation: Mutation,
        reentrant: bool,
        too_late: bool,
    ) -> Reply {
        if too_late {
            return Reply::TooLate;
        }
        let owner = req.client;
        let latch = match mutation {
            Mutation::NoAcquireLatch => None,
            _ => self.latch(req),
        };
        match latch {
            Some(Latch::Cancelled) => return Reply::Spent,
            Some(Latch::Granted) if self.held_by(owner) => return Reply::Granted,
            Some(Latch::Granted) if mutation != Mutation::GrantedLatchTakesAgain => {
                return Reply::Spent
            }
            _ => {}
        }
        match &mut self.hold {
            None => self.take(owner, now + ttl),
            Some(h) if h.owner == owner && !reentrant => return Reply::NotReentrant,
            Some(h) if h.owner == owner => {
                h.count += 1;
                h.expires = match mutation {
                    Mutation::ReentryShortensTtl => now + ttl,
                    _ => h.expires.max(now + ttl),
                };
            }
            Some(_) => return Reply::Refused,
        }
        if mutation != Mutation::NoAcquireLatch {
            self.set_latch(req, Latch::Granted, now + b.latch_ttl);
        }
        if self.fenced {
            self.token += 1;
            self.tokens.push((req, self.token));
            self.tokens.sort();
        }
        Reply::Granted
    }

    /// The token a granted request got (0: none, or not fenced).
    pub fn token_of(&self, req: ReqId) -> u8 {
        self.tokens
            .iter()
            .find(|(r, _)| *r == req)
            .map_or(0, |(_, t)| *t)
    }

    /// `lua/release.lua`, with the lease `b.lease`.
    pub fn release(&mut self, now: Time, req: ReqId, b: &Bounds, mutation: Mutation) -> Reply {
        self.release_keeping(now, req, b.lease, b, mutation, 0)
    }

    /// Whether the release `req` left its unlock latch (a resend is
    /// answered from it).
    pub fn unlock_latched(&self, req: ReqId) -> bool {
        self.unlock_latches.iter().any(|(r, _, _)| *r == req)
    }

    /// `lua/release.lua` with its lease (`ttl`: the TTL a release that
    /// leaves holds sets, unless the key's is longer) and a keep (a job's
    /// "at least for", in ticks; 0 none): the last hold is kept, its TTL
    /// set to the keep.
    pub fn release_keeping(
        &mut self,
        now: Time,
        req: ReqId,
        ttl: Time,
        b: &Bounds,
        mutation: Mutation,
        keep: Time,
    ) -> Reply {
        let latched = self.unlock_latches.iter().find(|(r, _, _)| *r == req);
        if let (Some((_, first, _)), false) = (latched, mutation == Mutation::NoUnlockLatch) {
            return Reply::Released(*first);
        }
        let owner = req.client;
        let ignores_owner = mutation == Mutation::ReleaseIgnoresOwner;
        let Some(h) = self
            .hold
            .as_mut()
            .filter(|h| ignores_owner || h.owner == owner)
        else {
            return Reply::NotHeld;
        };
        let first = if h.count > 1 {
            h.count -= 1;
            h.expires = match mutation {
                Mutation::ReleaseShortensTtl => now + ttl,
                _ => h.expires.max(now + ttl),
            };
            0
        } else if keep > 0 {
            h.expires = now + keep;
            2
        } else {
            self.hold = None;
            1
        };
        if mutation != Mutation::NoUnlockLatch {
            self.unlock_latches.push((req, first, now + b.latch_ttl));
            self.unlock_latches.sort();
        }
        Reply::Released(first)
    }

    /// `lua/renew.lua`, for one key, with the lease `ttl`: the TTL it sets
    /// unless the key's is longer.
    pub fn renew(&mut self, now: Time, owner: ClientId, ttl: Time, mutation: Mutation) -> Reply {
        match &mut self.hold {
            Some(h) if h.owner == owner || mutation == Mutation::RenewIgnoresOwner => {
                h.expires = match mutation {
                    Mutation::RenewShortensTtl => now + ttl,
                    _ => h.expires.max(now + ttl),
                };
                Reply::Renewed(true)
            }
            None if mutation == Mutation::RenewRecreates => {
                self.hold = Some(Hold {
                    owner,
                    count: 1,
                    expires: now + ttl,
                });
                Reply::Renewed(true)
            }
            _ => Reply::Renewed(false),
        }
    }

    /// A give-back of `grant` under request `req`: `lua/release.lua`,
    /// when the grant's latch shows it granted (or `req` ran before: a
    /// replay), else nothing is released (`NotHeld`); under
    /// `GiveBackIgnoresLatch`, the release alone. A give-back that runs
    /// closes the grant's latch (`x`, its TTL kept): a settle of the grant
    /// run again, under a fresh request id, finds nothing to give back
    /// (under `GiveBackLeavesGrant`, the latch is left showing the grant).
    pub fn give_back(
        &mut self,
        now: Time,
        req: ReqId,
        grant: ReqId,
        b: &Bounds,
        mutation: Mutation,
    ) -> Reply {
        let replay = self.unlock_latches.iter().any(|(r, _, _)| *r == req);
        if !replay
            && mutation != Mutation::GiveBackIgnoresLatch
            && self.latch(grant) != Some(Latch::Granted)
        {
            return Reply::NotHeld;
        }
        if !replay && mutation != Mutation::GiveBackLeavesGrant {
            if let Some(i) = self
                .acquire_latches
                .iter()
                .position(|(r, _, _)| *r == grant)
            {
                self.acquire_latches[i].1 = Latch::Cancelled;
            }
        }
        self.release(now, req, b, mutation)
    }

    /// `lua/acquire_cancel.lua`.
    pub fn settle(&mut self, now: Time, req: ReqId, b: &Bounds) -> Reply {
        match self.latch(req) {
            None => {
                self.set_latch(req, Latch::Cancelled, now + b.latch_ttl);
                Reply::Settled(false)
            }
            Some(Latch::Cancelled) => Reply::Settled(false),
            Some(Latch::Granted) => Reply::Settled(true),
        }
    }

    /// The lean acquire (`lua/lean_acquire.lua`): no latch. A free lock is
    /// taken with a count of 1; a hold of the owner's is found, not
    /// counted again (its TTL raised to `ttl`, never lowered), and
    /// answered as granted: the client's gate sends it only while the
    /// owner holds nothing else, so a hold of the owner is this request's
    /// own, taken by another copy of it. Held by another: refused. (Its
    /// deadline and not-before are checked before: `LockModel::lean_refusal`.)
    pub fn lean_acquire(&mut self, now: Time, owner: ClientId, ttl: Time, m: Mutation) -> Reply {
        match &mut self.hold {
            None => {
                self.take(owner, now + ttl);
                Reply::Granted
            }
            Some(h) if h.owner == owner => {
                if m == Mutation::LeanCounts {
                    h.count += 1;
                }
                h.expires = h.expires.max(now + ttl);
                Reply::Granted
            }
            Some(_) => Reply::Refused,
        }
    }

    /// The lean release (`lua/lean_release.lua`): no latch. The owner's
    /// hold is deleted, whatever its count (the gate sends it only for an
    /// owner's one hold), and `Released(1)` replied; no hold of the
    /// owner's: `NotHeld`, nothing changes.
    pub fn lean_release(&mut self, owner: ClientId) -> Reply {
        if self.held_by(owner) {
            self.hold = None;
            Reply::Released(1)
        } else {
            Reply::NotHeld
        }
    }

    /// The lean settle (`lua/lean_settle.lua`), once none of the owner's
    /// lost lean sends can run any more (its clock checks are before:
    /// `LockModel::lean_refusal`): to take, whether the owner holds the
    /// lock (its lost lean acquire's hold, or an older one left standing,
    /// which it adopts), that hold's TTL raised to the lease carried; to
    /// release, the lean release.
    pub fn lean_settle(
        &mut self,
        now: Time,
        owner: ClientId,
        intent: Intent,
        m: Mutation,
    ) -> Reply {
        match intent {
            Intent::Take(ttl) => match &mut self.hold {
                Some(h) if h.owner == owner => {
                    if m != Mutation::LeanSettleKeepsTtl {
                        h.expires = h.expires.max(now + ttl);
                    }
                    Reply::Settled(true)
                }
                _ => Reply::Settled(false),
            },
            Intent::Release => self.lean_release(owner),
        }
    }

    /// Time passes to `now`: what ran out is gone.
    pub fn expire(&mut self, now: Time) {
        if self.hold.is_some_and(|h| h.expires <= now) {
            self.hold = None;
        }
        let latches = &self.acquire_latches;
        self.tokens
            .retain(|(r, _)| latches.iter().any(|(l, _, at)| l == r && *at > now));
        self.acquire_latches.retain(|(_, _, at)| *at > now);
        self.unlock_latches.retain(|(_, _, at)| *at > now);
    }
}
