//! The scheduling queue (upstream's `internal/queue`): pods waiting to be
//! scheduled, in three places —
//!
//! - **active**: ready now, popped highest priority first, then oldest
//!   (the PrioritySort plugin's order);
//! - **backoff**: failed recently, waiting 1 s doubling per attempt up to
//!   10 s before they may be tried again;
//! - **unschedulable**: no node fit; they wait for a cluster event that
//!   could change that (a node added or changed, a pod deleted, …), or at
//!   most 5 minutes.
//!
//! Pods a PreEnqueue plugin holds back (scheduling gates) wait apart until
//! they are updated. A pod that failed while such an event happened during
//! its cycle goes to backoff rather than unschedulable, so the event is
//! not missed.

use std::cmp::Ordering;
use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;

/// The first backoff (`podInitialBackoffDuration`).
pub const INITIAL_BACKOFF: Duration = Duration::from_secs(1);
/// The longest (`podMaxBackoffDuration`).
pub const MAX_BACKOFF: Duration = Duration::from_secs(10);
/// The longest a pod stays unschedulable without an event
/// (`podMaxInUnschedulablePodsDuration`).
pub const MAX_UNSCHEDULABLE: Duration = Duration::from_secs(300);

/// A pod in the queue, with its scheduling history.
#[derive(Debug, Clone)]
pub struct QueuedPod {
    pub pod: Arc<Pod>,
    pub key: String,
    /// When it was first queued (its place among equal priorities).
    pub initial: Instant,
    /// When it was last queued.
    pub added: Instant,
    pub attempts: u32,
    /// The cycle it was last popped in.
    pub cycle: u64,
}

impl QueuedPod {
    fn priority(&self) -> i32 {
        self.pod.spec.as_ref().and_then(|s| s.priority).unwrap_or(0)
    }

    /// When its backoff ends with upstream's default durations: 1 s
    /// doubling per attempt, at most 10 s.
    pub fn backoff_until(&self) -> Instant {
        Backoff::default().until(self)
    }
}

/// How long failed pods wait (`podInitialBackoffSeconds`, doubling per
/// attempt up to `podMaxBackoffSeconds`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    pub initial: Duration,
    pub max: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            initial: INITIAL_BACKOFF,
            max: MAX_BACKOFF,
        }
    }
}

impl Backoff {
    /// When `pod`'s backoff ends.
    pub fn until(&self, pod: &QueuedPod) -> Instant {
        let mut delay = self.initial.min(self.max);
        for _ in 1..pod.attempts {
            delay = (delay * 2).min(self.max);
        }
        pod.added + delay
    }
}

/// Where a known pod waits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Place {
    Active,
    Backoff,
    Unschedulable,
    Gated,
    /// Popped, being scheduled.
    InFlight,
}

/// The active queue's order: higher priority, then earlier.
#[derive(Debug, Clone, PartialEq, Eq)]
struct ActiveKey {
    priority: i32,
    initial: Instant,
    key: String,
}

impl Ord for ActiveKey {
    fn cmp(&self, other: &Self) -> Ordering {
        other
            .priority
            .cmp(&self.priority)
            .then(self.initial.cmp(&other.initial))
            .then(self.key.cmp(&other.key))
    }
}

impl PartialOrd for ActiveKey {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

#[derive(Debug, Default)]
pub struct Queue {
    pods: HashMap<String, (QueuedPod, Place)>,
    active: BTreeSet<ActiveKey>,
    backoff: BTreeSet<(Instant, String)>,
    cycle: u64,
    /// The cycle of the last event that moved unschedulable pods.
    moved_at: u64,
    backoff_durations: Backoff,
    /// When the unschedulable pool was last swept for pods waiting too
    /// long (once a second: the sweep walks every queued pod).
    swept_at: Option<Instant>,
}

impl Queue {
    pub fn new() -> Self {
        Queue::default()
    }

    /// A queue backing pods off for `backoff`.
    pub fn with_backoff(backoff: Backoff) -> Self {
        Queue {
            backoff_durations: backoff,
            ..Queue::default()
        }
    }

    /// The number of cycles begun.
    pub fn cycle(&self) -> u64 {
        self.cycle
    }

    fn place_active(&mut self, mut pod: QueuedPod) {
        self.active.insert(ActiveKey {
            priority: pod.priority(),
            initial: pod.initial,
            key: pod.key.clone(),
        });
        pod.added = pod.added.max(pod.initial);
        self.pods.insert(pod.key.clone(), (pod, Place::Active));
    }

    fn unplace(&mut self, key: &str) -> Option<QueuedPod> {
        let (pod, place) = self.pods.remove(key)?;
        match place {
            Place::Active => {
                self.active.remove(&ActiveKey {
                    priority: pod.priority(),
                    initial: pod.initial,
                    key: pod.key.clone(),
                });
            }
            Place::Backoff => {
                self.backoff
                    .remove(&(self.backoff_durations.until(&pod), pod.key.clone()));
            }
            _ => {}
        }
        Some(pod)
    }

    /// A new pending pod: active, or gated when `gated` says so.
    pub fn add(&mut self, pod: Arc<Pod>, key: String, now: Instant, gated: bool) {
        if self.pods.contains_key(&key) {
            self.update(pod, &key, now, gated);
            return;
        }
        let queued = QueuedPod {
            pod,
            key: key.clone(),
            initial: now,
            added: now,
            attempts: 0,
            cycle: 0,
        };
        if gated {
            self.pods.insert(key, (queued, Place::Gated));
        } else {
            self.place_active(queued);
        }
    }

    /// A queued pod changed: the new version replaces it; one gated or
    /// unschedulable gets another chance.
    pub fn update(&mut self, pod: Arc<Pod>, key: &str, now: Instant, gated: bool) {
        let Some((_, place)) = self.pods.get(key).map(|(p, pl)| (p.clone(), *pl)) else {
            self.add(pod, key.to_string(), now, gated);
            return;
        };
        if place == Place::InFlight {
            if let Some((queued, _)) = self.pods.get_mut(key) {
                queued.pod = pod;
            }
            return;
        }
        let Some(mut queued) = self.unplace(key) else {
            return;
        };
        queued.pod = pod;
        if gated {
            self.pods.insert(key.to_string(), (queued, Place::Gated));
        } else if place == Place::Backoff && self.backoff_durations.until(&queued) > now {
            self.backoff
                .insert((self.backoff_durations.until(&queued), key.to_string()));
            self.pods.insert(key.to_string(), (queued, Place::Backoff));
        } else {
            self.place_active(queued);
        }
    }

    /// A pod deleted or scheduled elsewhere: forgotten.
    pub fn remove(&mut self, key: &str) {
        self.unplace(key);
    }

    /// The next pod to schedule, if one is active.
    pub fn pop(&mut self) -> Option<QueuedPod> {
        let first = self.active.pop_first()?;
        let (mut queued, _) = self.pods.remove(&first.key)?;
        self.cycle += 1;
        queued.attempts += 1;
        queued.cycle = self.cycle;
        self.pods
            .insert(first.key.clone(), (queued.clone(), Place::InFlight));
        Some(queued)
    }

    /// The attempt ended with the pod bound (or given up on).
    pub fn done(&mut self, key: &str) {
        if self
            .pods
            .get(key)
            .is_some_and(|(_, p)| *p == Place::InFlight)
        {
            self.pods.remove(key);
        }
    }

    /// No node fit: the pod waits for an event, or backs off if one
    /// happened while it was being scheduled.
    pub fn unschedulable(&mut self, key: &str, now: Instant) {
        let Some((mut queued, Place::InFlight)) = self.pods.remove(key) else {
            return;
        };
        queued.added = now;
        if self.moved_at >= queued.cycle {
            self.backoff
                .insert((self.backoff_durations.until(&queued), key.to_string()));
            self.pods.insert(key.to_string(), (queued, Place::Backoff));
        } else {
            self.pods
                .insert(key.to_string(), (queued, Place::Unschedulable));
        }
    }

    /// The attempt failed for another reason (an error, a failed
    /// binding): the pod backs off.
    pub fn backoff(&mut self, key: &str, now: Instant) {
        let Some((mut queued, Place::InFlight)) = self.pods.remove(key) else {
            return;
        };
        queued.added = now;
        self.backoff
            .insert((self.backoff_durations.until(&queued), key.to_string()));
        self.pods.insert(key.to_string(), (queued, Place::Backoff));
    }

    /// A cluster event that may make pods fit: every unschedulable pod
    /// moves to active, or to backoff while its backoff lasts.
    pub fn move_all(&mut self, now: Instant) {
        self.moved_at = self.cycle;
        let waiting: Vec<String> = self
            .pods
            .iter()
            .filter(|(_, (_, place))| *place == Place::Unschedulable)
            .map(|(k, _)| k.clone())
            .collect();
        for key in waiting {
            self.requeue(&key, now);
        }
    }

    fn requeue(&mut self, key: &str, now: Instant) {
        let Some(queued) = self.unplace(key) else {
            return;
        };
        if self.backoff_durations.until(&queued) > now {
            self.backoff
                .insert((self.backoff_durations.until(&queued), key.to_string()));
            self.pods.insert(key.to_string(), (queued, Place::Backoff));
        } else {
            self.place_active(queued);
        }
    }

    /// Moves pods whose backoff ended to active, and pods unschedulable
    /// for too long back to trying; returns when the next backoff ends.
    pub fn flush(&mut self, now: Instant) -> Option<Instant> {
        while let Some((until, key)) = self.backoff.first().cloned() {
            if until > now {
                break;
            }
            self.backoff.pop_first();
            if let Some((queued, _)) = self.pods.remove(&key) {
                self.place_active(queued);
            }
        }
        if self
            .swept_at
            .is_some_and(|t| now.saturating_duration_since(t) < Duration::from_secs(1))
        {
            return self.backoff.first().map(|(until, _)| *until);
        }
        self.swept_at = Some(now);
        let stale: Vec<String> = self
            .pods
            .iter()
            .filter(|(_, (q, place))| {
                *place == Place::Unschedulable && now.duration_since(q.added) >= MAX_UNSCHEDULABLE
            })
            .map(|(k, _)| k.clone())
            .collect();
        for key in stale {
            self.requeue(&key, now);
        }
        self.backoff.first().map(|(until, _)| *until)
    }

    pub fn has_active(&self) -> bool {
        !self.active.is_empty()
    }

    /// Pods by place, for metrics and tests: (active, backoff,
    /// unschedulable, gated).
    pub fn counts(&self) -> (usize, usize, usize, usize) {
        let count = |p: Place| self.pods.values().filter(|(_, pl)| *pl == p).count();
        (
            count(Place::Active),
            count(Place::Backoff),
            count(Place::Unschedulable),
            count(Place::Gated),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str, priority: i32) -> Arc<Pod> {
        Arc::new(
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": name, "namespace": "default"},
                "spec": {"priority": priority, "containers": []},
            }))
            .expect("pod"),
        )
    }

    #[test]
    fn higher_priority_first_then_older() {
        let mut q = Queue::new();
        let t = Instant::now();
        q.add(pod("low", 0), "low".into(), t, false);
        q.add(
            pod("high", 100),
            "high".into(),
            t + Duration::from_millis(1),
            false,
        );
        q.add(
            pod("low2", 0),
            "low2".into(),
            t + Duration::from_millis(2),
            false,
        );
        let order: Vec<String> = std::iter::from_fn(|| q.pop().map(|p| p.key)).collect();
        assert_eq!(order, ["high", "low", "low2"]);
    }

    #[test]
    fn unschedulable_pods_wait_for_an_event_then_their_backoff() {
        let mut q = Queue::new();
        let t = Instant::now();
        q.add(pod("a", 0), "a".into(), t, false);
        q.pop().expect("a");
        q.unschedulable("a", t);
        assert_eq!(q.counts(), (0, 0, 1, 0));
        assert!(q.pop().is_none());
        // An event: a first attempt backs off 1 s.
        q.move_all(t + Duration::from_millis(100));
        assert_eq!(q.counts(), (0, 1, 0, 0));
        q.flush(t + Duration::from_millis(500));
        assert!(!q.has_active());
        q.flush(t + Duration::from_secs(1));
        assert_eq!(q.pop().map(|p| p.attempts), Some(2));
    }

    #[test]
    fn an_event_during_the_cycle_is_not_missed() {
        let mut q = Queue::new();
        let t = Instant::now();
        q.add(pod("a", 0), "a".into(), t, false);
        q.pop().expect("a");
        q.move_all(t);
        q.unschedulable("a", t);
        assert_eq!(q.counts(), (0, 1, 0, 0), "backoff, not unschedulable");
    }

    #[test]
    fn backoff_doubles_to_ten_seconds() {
        let t = Instant::now();
        let mut queued = QueuedPod {
            pod: pod("a", 0),
            key: "a".into(),
            initial: t,
            added: t,
            attempts: 1,
            cycle: 0,
        };
        assert_eq!(queued.backoff_until() - t, Duration::from_secs(1));
        queued.attempts = 3;
        assert_eq!(queued.backoff_until() - t, Duration::from_secs(4));
        queued.attempts = 10;
        assert_eq!(queued.backoff_until() - t, MAX_BACKOFF);
    }

    #[test]
    fn configured_backoff_durations() {
        let backoff = Backoff {
            initial: Duration::from_secs(3),
            max: Duration::from_secs(20),
        };
        let mut q = Queue::with_backoff(backoff);
        let t = Instant::now();
        q.add(pod("a", 0), "a".into(), t, false);
        q.pop().expect("a");
        q.backoff("a", t);
        q.flush(t + Duration::from_secs(2));
        assert!(!q.has_active(), "still backing off after 2 s");
        q.flush(t + Duration::from_secs(3));
        let mut queued = q.pop().expect("after 3 s");
        queued.attempts = 4;
        // 3, 6, 12, then 20 rather than 24.
        assert_eq!(
            backoff.until(&queued) - queued.added,
            Duration::from_secs(20)
        );
    }

    #[test]
    fn gated_pods_wait_until_updated_ungated() {
        let mut q = Queue::new();
        let t = Instant::now();
        q.add(pod("a", 0), "a".into(), t, true);
        assert!(q.pop().is_none());
        q.update(pod("a", 0), "a", t, false);
        assert_eq!(q.pop().map(|p| p.key), Some("a".into()));
    }

    #[test]
    fn unschedulable_pods_are_retried_after_five_minutes() {
        let mut q = Queue::new();
        let t = Instant::now();
        q.add(pod("a", 0), "a".into(), t, false);
        q.pop().expect("a");
        q.unschedulable("a", t);
        q.flush(t + MAX_UNSCHEDULABLE);
        assert!(q.has_active());
    }
}
