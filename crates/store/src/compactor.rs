//! Keeps a window of history and compacts what is older, for any backend.
//!
//! Upstream's API server compacts etcd itself every five minutes; this does
//! the same for both of rudder's backends. The window is the union of a time
//! span and a revision count: history younger than `keep_for` *or* within the
//! last `keep_revisions` revisions is kept.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use crate::{Error, Store};

/// How much history to keep.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CompactionPolicy {
    pub keep_for: Duration,
    pub keep_revisions: u64,
    /// How often to look.
    pub interval: Duration,
}

impl Default for CompactionPolicy {
    fn default() -> Self {
        CompactionPolicy {
            keep_for: Duration::from_secs(300),
            keep_revisions: 10_000,
            interval: Duration::from_secs(60),
        }
    }
}

/// Decides compaction targets from revisions observed over time. Pure: the
/// caller supplies the clock and the revisions.
#[derive(Debug)]
pub struct Compactor {
    policy: CompactionPolicy,
    samples: VecDeque<(Instant, u64)>,
    compacted: u64,
}

impl Compactor {
    pub fn new(policy: CompactionPolicy) -> Self {
        Compactor {
            policy,
            samples: VecDeque::new(),
            compacted: 0,
        }
    }

    /// Records that the store was at `revision` at `now`, and returns the
    /// revision to compact at, if history has grown past the window.
    pub fn observe(&mut self, now: Instant, revision: u64) -> Option<u64> {
        self.samples.push_back((now, revision));
        // The newest revision seen at least `keep_for` ago: everything before
        // it is older than the time window.
        let mut old_enough = None;
        while let Some(&(at, rev)) = self.samples.front() {
            if now.duration_since(at) < self.policy.keep_for {
                break;
            }
            old_enough = Some(rev);
            self.samples.pop_front();
        }
        if let Some(rev) = old_enough {
            // Keep the boundary sample: it still bounds the next decision.
            let at = now.checked_sub(self.policy.keep_for).unwrap_or(now);
            self.samples.push_front((at, rev));
        }
        let by_count = revision.saturating_sub(self.policy.keep_revisions);
        let target = old_enough?.min(by_count);
        (target > self.compacted).then(|| {
            self.compacted = target;
            target
        })
    }

    /// Runs the policy against `store` until `cancel` fires.
    pub async fn run(mut self, store: Arc<dyn Store>, cancel: CancellationToken) {
        self.compacted = store.compacted_revision().await.unwrap_or(0);
        let mut tick = tokio::time::interval(self.policy.interval);
        loop {
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tick.tick() => {}
            }
            let Ok(revision) = store.current_revision().await else {
                continue;
            };
            let Some(target) = self.observe(Instant::now(), revision) else {
                continue;
            };
            match store.compact(target).await {
                Ok(()) => tracing::info!(revision = target, "compacted store history"),
                Err(Error::Compacted { compact_revision }) => self.compacted = compact_revision,
                Err(error) => tracing::warn!(%error, revision = target, "store compaction failed"),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> CompactionPolicy {
        CompactionPolicy {
            keep_for: Duration::from_secs(300),
            keep_revisions: 100,
            interval: Duration::from_secs(60),
        }
    }

    #[test]
    fn keeps_both_the_time_window_and_the_revision_window() {
        let start = Instant::now();
        let mut c = Compactor::new(policy());
        // Within five minutes nothing is compacted, however many revisions.
        assert_eq!(c.observe(start, 50), None);
        assert_eq!(c.observe(start + Duration::from_secs(240), 10_000), None);
        // Five minutes on, history before the revision seen five minutes ago
        // goes, but the last 100 revisions stay.
        assert_eq!(
            c.observe(start + Duration::from_secs(300), 10_050),
            Some(50)
        );
        assert_eq!(
            c.observe(start + Duration::from_secs(540), 10_100),
            Some(10_000)
        );
        // A quiet store: the revision window holds it back.
        assert_eq!(
            c.observe(start + Duration::from_secs(900), 10_120),
            Some(10_020)
        );
        assert_eq!(c.observe(start + Duration::from_secs(1200), 10_120), None);
    }
}
