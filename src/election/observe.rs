//! Following an election: one watch of its channel, reading again on
//! every message and on a timer.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use futures_util::stream::{BoxStream, Fuse, FusedStream, Stream, StreamExt};

use super::{LeaderChange, LeaderElection};
use crate::engine::waiting::{Tried, Watcher};
use crate::Result;

/// The changes of an election, from [`LeaderElection::observe`]: a
/// [`Stream`] of [`LeaderChange`]s, or call [`LeaderObserver::next`].
#[must_use = "an observer reports nothing unless polled"]
pub struct LeaderObserver {
    changes: Fuse<BoxStream<'static, Result<LeaderChange>>>,
}

impl std::fmt::Debug for LeaderObserver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaderObserver").finish_non_exhaustive()
    }
}

impl LeaderObserver {
    /// The next change; `None` after an error was returned (the stream's
    /// end).
    ///
    /// # Errors
    /// As [`LeaderElection::leader`]; a lost connection is waited out, not
    /// returned.
    ///
    /// # Cancel safety
    /// Cancel safe: a dropped call loses no change.
    pub async fn next(&mut self) -> Option<Result<LeaderChange>> {
        self.changes.next().await
    }
}

impl FusedStream for LeaderObserver {
    fn is_terminated(&self) -> bool {
        self.changes.is_terminated()
    }
}

impl Stream for LeaderObserver {
    type Item = Result<LeaderChange>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.changes.poll_next_unpin(cx)
    }
}

impl LeaderObserver {
    /// The observer of `election`, watching with `watcher`.
    pub(super) fn new(election: LeaderElection, watcher: Watcher) -> LeaderObserver {
        let watch = Watch {
            watcher,
            election,
            last: None,
            done: false,
        };
        LeaderObserver {
            changes: futures_util::stream::unfold(watch, |mut watch| async move {
                let change = watch.next().await?;
                Some((change, watch))
            })
            .boxed()
            .fuse(),
        }
    }
}

/// An observer's state between two changes.
struct Watch {
    election: LeaderElection,
    /// The watch of the election's channel, subscribed across changes.
    watcher: Watcher,
    /// What was reported last (holder and term); `None` before the first.
    last: Option<Option<(String, Option<u64>)>>,
    /// After an error: the stream has ended.
    done: bool,
}

impl Watch {
    /// Waits for the next change. Cancel safe: `last` changes only with
    /// the return.
    ///
    /// Each try reads (so that a bad name is refused before anything is
    /// sent); the watcher subscribes after it (see [`Watcher::watch`]) and
    /// reads again before it waits: a change between the read and the
    /// subscription is not missed. A leader's lock is read again when it
    /// would expire unless renewed (a dead leader is reported then), and
    /// every look-again in any case.
    async fn next(&mut self) -> Option<Result<LeaderChange>> {
        if self.done {
            return None;
        }
        let Watch {
            election,
            watcher,
            last,
            ..
        } = self;
        let look_again = election.look_again();
        let read = || async {
            let (leader, ttl) = election.read().await?;
            let now = leader
                .as_ref()
                .map(|l| (format!("{}:{}", l.client_id, l.owner_id), l.term));
            if last.as_ref() == Some(&now) {
                let pause = ttl.map_or(look_again, |ttl| {
                    (ttl + Duration::from_millis(1)).min(look_again)
                });
                return Ok(Tried::Again(Some(pause)));
            }
            let change = match leader {
                Some(leader) => LeaderChange::Leader(leader),
                None => LeaderChange::NoLeader,
            };
            Ok(Tried::Done((now, change)))
        };
        match election.lock.object().watch(watcher, None, read).await {
            Ok(Some((now, change))) => {
                *last = Some(now);
                Some(Ok(change))
            }
            // Without a deadline, a watch ends only with a try.
            Ok(None) => None,
            Err(err) => {
                // The stream ends here, and keeps nothing.
                self.done = true;
                self.watcher.stop();
                Some(Err(err))
            }
        }
    }
}
