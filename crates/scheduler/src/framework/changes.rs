//! The pods added to and removed from the cache's nodes, in order, so a
//! plugin can carry what its PreFilter counted over every node from one
//! cycle to the next instead of counting again: the next pod of the same
//! workload asks the same question of nearly the same cluster, changed by
//! the pod just assumed and a few bindings confirmed.
//!
//! A [`Snapshot`](super::Snapshot) records how far the log went when it was
//! taken and the *node epoch*: a number that changes whenever the nodes
//! themselves do in a way counts depend on (a node added or removed, its
//! labels or taints changed), which no pod change can be replayed across.
//! Upstream's PreFilters count anew each cycle, in parallel over 16
//! goroutines; on 2 cores walking 5,000 nodes' pods per cycle was most of
//! a spreading workload's time.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use super::PodInfo;

/// How many changes the log keeps: a count more changes behind than this
/// is made anew. Each holds its pod's info (a few KiB, the pod itself
/// shared), kept alive until the change leaves the log: at most a few MiB.
/// A workload's next pod is typically a handful of changes behind.
const KEEP: usize = 1_024;

/// A fresh node epoch, never handed out before in this process.
pub fn next_epoch() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// One pod counted in (`delta` 1) or out (-1) on the node at `node` (its
/// position in the snapshot's node list, stable within a node epoch).
#[derive(Debug, Clone)]
pub struct PodChange {
    pub node: usize,
    pub pod: Arc<PodInfo>,
    pub delta: i64,
}

#[derive(Debug, Default)]
struct Inner {
    /// The sequence number of `entries[0]`.
    first: u64,
    entries: VecDeque<PodChange>,
}

/// The log the cache appends to and snapshots read.
#[derive(Debug, Default)]
pub struct PodLog {
    inner: RwLock<Inner>,
}

impl PodLog {
    pub fn push(&self, change: PodChange) {
        let mut inner = self.inner.write().unwrap_or_else(|e| e.into_inner());
        inner.entries.push_back(change);
        if inner.entries.len() > KEEP {
            inner.entries.pop_front();
            inner.first += 1;
        }
    }

    /// The sequence number the next change will have.
    pub fn end(&self) -> u64 {
        let inner = self.inner.read().unwrap_or_else(|e| e.into_inner());
        inner.first + inner.entries.len() as u64
    }

    /// Calls `each` with the changes numbered `from` up to `to`; false,
    /// calling nothing, if some of them are no longer kept.
    pub fn replay(&self, from: u64, to: u64, mut each: impl FnMut(&PodChange)) -> bool {
        let inner = self.inner.read().unwrap_or_else(|e| e.into_inner());
        let end = inner.first + inner.entries.len() as u64;
        if from < inner.first || to > end || from > to {
            return false;
        }
        let skip = (from - inner.first) as usize;
        inner
            .entries
            .iter()
            .skip(skip)
            .take((to - from) as usize)
            .for_each(&mut each);
        true
    }
}

/// Where a count made at one snapshot stands: the log it can be brought
/// forward with, and how far it has been.
#[derive(Debug, Clone)]
pub struct Position {
    log: Arc<PodLog>,
    epoch: u64,
    at: u64,
}

impl Position {
    /// Brings a count made at this position forward to `snapshot`'s,
    /// calling `each` with every change between; false (calling nothing)
    /// when it cannot be — another log, another node epoch, changes no
    /// longer kept — and the count must be made anew.
    pub fn advance(&mut self, snapshot: &super::Snapshot, each: impl FnMut(&PodChange)) -> bool {
        if !Arc::ptr_eq(&self.log, &snapshot.changes)
            || self.epoch != snapshot.node_epoch
            || !self.log.replay(self.at, snapshot.changes_end, each)
        {
            return false;
        }
        self.at = snapshot.changes_end;
        true
    }
}

impl super::Snapshot {
    /// The position of a count made over this snapshot.
    pub fn position(&self) -> Position {
        Position {
            log: self.changes.clone(),
            epoch: self.node_epoch,
            at: self.changes_end,
        }
    }
}

/// How many questions a [`Memo`] remembers the counts of.
const QUESTIONS: usize = 4;

/// Counts a PreFilter made over every node, kept per question (`Q`: what
/// the counts depend on besides the cluster, such as a namespace and
/// label selectors) and brought forward cycle to cycle by the changes
/// between.
#[derive(Debug)]
pub struct Memo<Q, V> {
    entries: Mutex<VecDeque<(Q, V, Position)>>,
    /// How many times counts were made anew.
    anew: AtomicU64,
}

impl<Q, V> Default for Memo<Q, V> {
    fn default() -> Self {
        Memo {
            entries: Mutex::new(VecDeque::new()),
            anew: AtomicU64::new(0),
        }
    }
}

impl<Q, V> Memo<Q, V> {
    /// How many times [`Memo::get`] counted anew.
    pub fn counted_anew(&self) -> u64 {
        self.anew.load(Ordering::Relaxed)
    }
}

impl<Q: PartialEq, V: Clone> Memo<Q, V> {
    /// The counts for `question` at `snapshot`: those remembered, brought
    /// forward by `apply` for each change since, or else `count`ed anew.
    pub fn get(
        &self,
        question: Q,
        snapshot: &super::Snapshot,
        mut apply: impl FnMut(&mut V, &PodChange),
        count: impl FnOnce() -> V,
    ) -> V {
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(at) = entries.iter().position(|(q, _, _)| *q == question) {
            let (q, mut value, mut position) = entries.remove(at).expect("found");
            if position.advance(snapshot, |c| apply(&mut value, c)) {
                entries.push_front((q, value.clone(), position));
                return value;
            }
        }
        self.anew.fetch_add(1, Ordering::Relaxed);
        let value = count();
        entries.push_front((question, value.clone(), snapshot.position()));
        entries.truncate(QUESTIONS);
        value
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn change(node: usize, delta: i64) -> PodChange {
        let pod = Arc::new(k8s_openapi::api::core::v1::Pod::default());
        PodChange {
            node,
            pod: Arc::new(PodInfo::new(pod)),
            delta,
        }
    }

    #[test]
    fn replays_the_range_asked_and_refuses_what_is_gone() {
        let log = PodLog::default();
        for i in 0..KEEP + 10 {
            log.push(change(i, 1));
        }
        assert_eq!(log.end(), (KEEP + 10) as u64);
        let mut seen = Vec::new();
        assert!(log.replay(KEEP as u64, KEEP as u64 + 3, |c| seen.push(c.node)));
        assert_eq!(seen, [KEEP, KEEP + 1, KEEP + 2]);
        assert!(!log.replay(5, 20, |_| panic!("trimmed changes replayed")));
        assert!(!log.replay(20, (KEEP + 11) as u64, |_| panic!("beyond the end")));
        assert!(log.replay(log.end(), log.end(), |_| panic!("nothing to replay")));
    }

    #[test]
    fn a_position_advances_only_within_its_log_and_epoch() {
        let snapshot = crate::framework::Snapshot::new(Vec::new());
        let mut position = snapshot.position();
        snapshot.changes.push(change(0, 1));
        let mut later = snapshot.clone();
        later.changes_end = snapshot.changes.end();
        let mut deltas = Vec::new();
        assert!(position.advance(&later, |c| deltas.push(c.delta)));
        assert_eq!(deltas, [1]);
        // Nodes changed: nothing carries over.
        later.node_epoch = next_epoch();
        assert!(!position.advance(&later, |_| panic!("across epochs")));
        // Another snapshot's log, even at the same numbers.
        let other = crate::framework::Snapshot::new(Vec::new());
        assert!(!other.position().advance(&later, |_| panic!("another log")));
    }

    #[test]
    fn a_memo_brings_counts_forward_and_counts_anew_when_it_cannot() {
        let memo: Memo<&str, i64> = Memo::default();
        let snapshot = crate::framework::Snapshot::new(Vec::new());
        let apply = |v: &mut i64, c: &PodChange| *v += c.delta;
        assert_eq!(memo.get("q", &snapshot, apply, || 10), 10);
        snapshot.changes.push(change(0, 1));
        snapshot.changes.push(change(0, 1));
        let mut later = snapshot.clone();
        later.changes_end = snapshot.changes.end();
        assert_eq!(memo.get("q", &later, apply, || panic!("recounted")), 12);
        // Another question is counted on its own.
        assert_eq!(memo.get("r", &later, apply, || 5), 5);
        later.node_epoch = next_epoch();
        assert_eq!(memo.get("q", &later, apply, || 7), 7);
    }
}
