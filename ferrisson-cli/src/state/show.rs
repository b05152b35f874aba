//! A [`State`] as text: the summary of `list` and `watch`, and the
//! report of `show`.

use std::fmt::Write as _;

use super::*;

/// `n` and the noun that goes with it: `1 permit`, `2 permits`, `0 permits`.
pub(super) fn count(n: impl Into<i64>, one: &str, many: &str) -> String {
    let n = n.into();
    format!("{n} {}", if n == 1 { one } else { many })
}

/// A duration in ms as text: `850ms`, `29.8s`, `5m 2s`.
pub(super) fn millis(ms: u64) -> String {
    if ms < 1000 {
        format!("{ms}ms")
    } else if ms < 60_000 {
        format!("{:.1}s", ms as f64 / 1000.0)
    } else {
        format!("{}m {}s", ms / 60_000, ms % 60_000 / 1000)
    }
}

impl LeaderView {
    /// `pod-a (term 7, <client>:<owner>)`; a holder that did not campaign
    /// shows its owner alone.
    fn text(&self) -> String {
        let term = self
            .term
            .map_or_else(|| "no term".to_owned(), |t| format!("term {t}"));
        let who = format!("{}:{}", self.client_id, self.owner_id);
        match &self.label {
            Some(label) => format!("{label} ({term}, {who})"),
            None => format!("{who} ({term}, no label: it did not campaign)"),
        }
    }
}

impl Holder {
    /// `1 hold`, `2 write holds`.
    pub(crate) fn holds_text(&self) -> String {
        if self.write {
            count(self.holds, "write hold", "write holds")
        } else {
            count(self.holds, "hold", "holds")
        }
    }

    fn line(&self) -> String {
        let mut line = format!(
            "{}:{}  {}",
            self.client_id,
            self.owner_id,
            self.holds_text()
        );
        if let Some(label) = &self.label {
            let _ = write!(line, ", label {label}");
        }
        if let Some(ttls) = &self.read_hold_ttls_ms {
            let ttls: Vec<String> = ttls
                .iter()
                .map(|t| t.map_or_else(|| "gone".to_owned(), millis))
                .collect();
            let _ = write!(line, " (read, expiring in {})", ttls.join(", "));
        }
        line
    }
}

impl State {
    /// The state in a few words, for `list` and `watch`.
    pub(crate) fn summary(&self) -> String {
        let mut out = self.shape();
        if let Some(ttl) = self.ttl_ms {
            let _ = write!(out, ", ttl {}", millis(ttl));
        }
        out
    }

    /// [`State::summary`] without what changes by itself (TTLs): two reads
    /// differ in shape when something happened in between.
    pub(crate) fn shape(&self) -> String {
        let mut out = String::new();
        match self.kind {
            None => out.push_str("no key (free, or nothing)"),
            Some(Kind::LeaderElection) => match &self.leader {
                Some(leader) => {
                    let _ = write!(out, "led by {}", leader.text());
                }
                None => out.push_str("no leader"),
            },
            Some(kind) if kind.is_lock() => {
                if self.holders.is_empty() {
                    out.push_str("free");
                } else {
                    let holders: Vec<String> = self
                        .holders
                        .iter()
                        .map(|h| {
                            format!(
                                "{}:{} x{}{}",
                                h.client_id,
                                h.owner_id,
                                h.holds,
                                if h.write { " (write)" } else { "" }
                            )
                        })
                        .collect();
                    let _ = write!(out, "held by {}", holders.join(", "));
                }
                if let Some(mode) = self.mode {
                    let _ = write!(out, ", mode {mode}");
                }
                if !self.queue.is_empty() {
                    let _ = write!(out, ", {} waiting", self.queue.len());
                }
                if let Some(token) = self.fencing_token {
                    let _ = write!(out, ", token {token}");
                }
            }
            Some(_) => {
                if let Some(n) = self.permits_available {
                    let _ = write!(out, "{} available", count(n, "permit", "permits"));
                }
                if let Some(out_) = &self.permits_out {
                    let _ = write!(out, ", {} out", out_.len());
                }
                if let Some(n) = self.count {
                    let _ = write!(out, "count {n}");
                }
            }
        }
        out
    }

    /// The state in full, for `inspect`.
    pub(crate) fn text(&self) -> String {
        let mut out = String::new();
        let Some(kind) = self.kind else {
            let _ = writeln!(
                out,
                "`{}` does not exist: a free lock leaves no key (or nothing has this name)",
                self.name
            );
            return out;
        };
        let _ = writeln!(out, "name:        {}", self.name);
        let _ = write!(out, "kind:        {}", kind.label());
        if let Some(also) = self.could_also_be {
            let _ = write!(
                out,
                " (or a {}: both are a number; --kind tells which)",
                also.label()
            );
        }
        out.push('\n');
        let ttl = self.ttl_ms.map_or_else(|| "none".to_owned(), millis);
        let _ = writeln!(out, "ttl:         {ttl}");
        if kind.is_lock() {
            if let Some(mode) = self.mode {
                let _ = writeln!(out, "mode:        {mode}");
            }
            if self.holders.is_empty() {
                let _ = writeln!(out, "holders:     none (free)");
            } else {
                let _ = writeln!(out, "holders:     {}", self.holders.len());
                for holder in &self.holders {
                    let _ = writeln!(out, "  {}", holder.line());
                }
            }
            if kind == Kind::FairLock {
                let _ = writeln!(out, "queue:       {} waiting", self.queue.len());
                for waiter in &self.queue {
                    let timeout = waiter.timeout_ms.map_or_else(|| "none".to_owned(), millis);
                    let _ = writeln!(
                        out,
                        "  {}. {}:{}  timeout {timeout}",
                        waiter.position + 1,
                        waiter.client_id,
                        waiter.owner_id
                    );
                }
            }
            if kind == Kind::LeaderElection {
                let leader = self
                    .leader
                    .as_ref()
                    .map_or_else(|| "none".to_owned(), LeaderView::text);
                let _ = writeln!(out, "leader:      {leader}");
            }
            if matches!(kind, Kind::FencedLock | Kind::LeaderElection) {
                let token = self
                    .fencing_token
                    .map_or_else(|| "none drawn".to_owned(), |t| t.to_string());
                let _ = writeln!(out, "token:       {token}");
            }
        }
        if let Some(n) = self.permits_available {
            let _ = writeln!(out, "available:   {n}");
        }
        if let Some(permits) = &self.permits_out {
            let _ = writeln!(out, "out:         {}", permits.len());
            for permit in permits {
                match permit.expires_in_ms {
                    Some(ms) => {
                        let _ = writeln!(out, "  {}  expires in {}", permit.id, millis(ms));
                    }
                    None => {
                        let _ = writeln!(out, "  {}  no lease", permit.id);
                    }
                }
            }
        }
        if let Some(n) = self.count {
            let _ = writeln!(out, "count:       {n}");
        }
        let _ = writeln!(out, "subscribers: {}", self.subscribers);
        out
    }
}
