//! The work queue every controller pulls from, with client-go's contract
//! (`util/workqueue`):
//!
//! - a key added while it waits is queued once (`dirty`);
//! - a key being processed is never handed to a second worker; added
//!   meanwhile, it is queued again when the first worker calls
//!   [`done`](WorkQueue::done) (`processing`);
//! - [`add_after`](WorkQueue::add_after) queues a key once a delay passes
//!   on the queue's clock (the earliest deadline wins);
//! - [`add_rate_limited`](WorkQueue::add_rate_limited) delays a key by its
//!   failures so far — upstream's default controller rate limiter: 5 ms
//!   doubling per failure up to 1000 s for the key, and no more than 10
//!   retries a second (bursts of 100) overall, whichever is longer —
//!   until [`forget`](WorkQueue::forget) clears its history.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, HashSet, VecDeque};
use std::fmt;
use std::hash::Hash;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use tokio::sync::{Notify, mpsc};

use crate::clock::Timer;

/// Upstream's per-key backoff: 5 ms, doubling per failure.
pub const BASE_DELAY: Duration = Duration::from_millis(5);
/// … up to 1000 s.
pub const MAX_DELAY: Duration = Duration::from_secs(1000);
/// Upstream's overall retry rate: 10 a second, bursts of 100.
pub const RETRY_QPS: f64 = 10.0;
pub const RETRY_BURST: f64 = 100.0;

/// What a queue key must be.
pub trait Key: Clone + Eq + Hash + Send + Sync + fmt::Debug + 'static {}
impl<T: Clone + Eq + Hash + Send + Sync + fmt::Debug + 'static> Key for T {}

/// How long a key waits before its next retry: the longer of its own
/// exponential backoff and the overall token bucket's.
#[derive(Debug)]
pub struct RateLimiter<T> {
    failures: HashMap<T, u32>,
    base: Duration,
    max: Duration,
    qps: f64,
    burst: f64,
    tokens: f64,
    refilled: Option<SystemTime>,
}

impl<T: Key> Default for RateLimiter<T> {
    fn default() -> Self {
        RateLimiter::new(BASE_DELAY, MAX_DELAY, RETRY_QPS, RETRY_BURST)
    }
}

impl<T: Key> RateLimiter<T> {
    pub fn new(base: Duration, max: Duration, qps: f64, burst: f64) -> Self {
        RateLimiter {
            failures: HashMap::new(),
            base,
            max,
            qps,
            burst,
            tokens: burst,
            refilled: None,
        }
    }

    /// The delay before `item`'s next retry, counting this failure.
    pub fn when(&mut self, item: &T, now: SystemTime) -> Duration {
        let failures = self.failures.entry(item.clone()).or_insert(0);
        let exponent = (*failures).min(40);
        *failures = failures.saturating_add(1);
        let backoff = self
            .base
            .checked_mul(1u32 << exponent.min(31))
            .filter(|d| exponent < 31 && *d <= self.max)
            .unwrap_or(self.max);
        backoff.max(self.reserve(now))
    }

    /// Takes a token from the overall bucket; the wait until it is there.
    fn reserve(&mut self, now: SystemTime) -> Duration {
        if let Some(last) = self.refilled {
            let elapsed = now.duration_since(last).unwrap_or_default().as_secs_f64();
            self.tokens = (self.tokens + elapsed * self.qps).min(self.burst);
        }
        self.refilled = Some(now);
        self.tokens -= 1.0;
        if self.tokens >= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(-self.tokens / self.qps)
        }
    }

    /// How often `item` has failed since it was last forgotten.
    pub fn retries(&self, item: &T) -> u32 {
        self.failures.get(item).copied().unwrap_or(0)
    }

    pub fn forget(&mut self, item: &T) {
        self.failures.remove(item);
    }
}

#[derive(Debug)]
struct State<T> {
    queue: VecDeque<T>,
    dirty: HashSet<T>,
    processing: HashSet<T>,
    shutting_down: bool,
}

struct Shared<T> {
    state: Mutex<State<T>>,
    ready: Notify,
    limiter: Mutex<RateLimiter<T>>,
    clock: Arc<dyn Timer>,
    delayed: mpsc::UnboundedSender<(SystemTime, T)>,
}

/// A de-duplicating, rate-limited work queue of keys.
pub struct WorkQueue<T> {
    shared: Arc<Shared<T>>,
}

impl<T> Clone for WorkQueue<T> {
    fn clone(&self) -> Self {
        WorkQueue {
            shared: self.shared.clone(),
        }
    }
}

impl<T: Key> fmt::Debug for WorkQueue<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.state();
        f.debug_struct("WorkQueue")
            .field("queued", &state.queue.len())
            .field("processing", &state.processing.len())
            .finish()
    }
}

impl<T: Key> WorkQueue<T> {
    /// A queue on `clock` with upstream's default rate limits. Must be
    /// made inside a tokio runtime (its delayed keys wait on a task).
    pub fn new(clock: Arc<dyn Timer>) -> Self {
        WorkQueue::with_limiter(clock, RateLimiter::default())
    }

    pub fn with_limiter(clock: Arc<dyn Timer>, limiter: RateLimiter<T>) -> Self {
        let (delayed, receiver) = mpsc::unbounded_channel();
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                queue: VecDeque::new(),
                dirty: HashSet::new(),
                processing: HashSet::new(),
                shutting_down: false,
            }),
            ready: Notify::new(),
            limiter: Mutex::new(limiter),
            clock: clock.clone(),
            delayed,
        });
        tokio::spawn(wait_out_delays(Arc::downgrade(&shared), clock, receiver));
        WorkQueue { shared }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State<T>> {
        self.shared.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Queues `item` unless it is queued already.
    pub fn add(&self, item: T) {
        add(&self.shared, item);
    }

    /// Queues `item` once `delay` has passed on the queue's clock.
    pub fn add_after(&self, item: T, delay: Duration) {
        if delay.is_zero() {
            return self.add(item);
        }
        self.add_at(item, self.shared.clock.now() + delay);
    }

    /// Queues `item` at `deadline` on the queue's clock (at once when it
    /// has passed).
    pub fn add_at(&self, item: T, deadline: SystemTime) {
        if deadline <= self.shared.clock.now() {
            return self.add(item);
        }
        if self.state().shutting_down {
            return;
        }
        let _ = self.shared.delayed.send((deadline, item));
    }

    /// The time on the queue's clock.
    pub fn now(&self) -> SystemTime {
        self.shared.clock.now()
    }

    /// Queues `item` after its rate-limited delay, counting a failure.
    pub fn add_rate_limited(&self, item: T) {
        let delay = self
            .shared
            .limiter
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .when(&item, self.shared.clock.now());
        self.add_after(item, delay);
    }

    /// Clears `item`'s failures: its next retry starts at the base delay.
    pub fn forget(&self, item: &T) {
        self.shared
            .limiter
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .forget(item);
    }

    /// How often `item` has been retried since it was last forgotten.
    pub fn retries(&self, item: &T) -> u32 {
        self.shared
            .limiter
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retries(item)
    }

    /// The next key to process, waiting for one; `None` once the queue is
    /// shut down. Every key taken must be given back with [`done`].
    ///
    /// [`done`]: WorkQueue::done
    pub async fn get(&self) -> Option<T> {
        loop {
            let ready = self.shared.ready.notified();
            tokio::pin!(ready);
            ready.as_mut().enable();
            {
                let mut state = self.state();
                if let Some(item) = state.queue.pop_front() {
                    state.dirty.remove(&item);
                    state.processing.insert(item.clone());
                    if !state.queue.is_empty() {
                        // Wake the next idle worker too.
                        self.shared.ready.notify_one();
                    }
                    return Some(item);
                }
                if state.shutting_down {
                    return None;
                }
            }
            ready.await;
        }
    }

    /// Marks `item` processed; queued again if it was added meanwhile.
    pub fn done(&self, item: &T) {
        let mut state = self.state();
        state.processing.remove(item);
        if state.dirty.contains(item) {
            state.queue.push_back(item.clone());
            drop(state);
            self.shared.ready.notify_one();
        }
    }

    /// Keys waiting (not counting those being processed or delayed).
    pub fn len(&self) -> usize {
        self.state().queue.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Stops handing out keys: every `get` returns `None` from now on.
    pub fn shut_down(&self) {
        self.state().shutting_down = true;
        self.shared.ready.notify_waiters();
    }
}

fn add<T: Key>(shared: &Shared<T>, item: T) {
    let mut state = shared.state.lock().unwrap_or_else(|e| e.into_inner());
    if state.shutting_down || !state.dirty.insert(item.clone()) {
        return;
    }
    if !state.processing.contains(&item) {
        state.queue.push_back(item);
        drop(state);
        shared.ready.notify_one();
    }
}

/// Holds delayed keys until their deadlines, then queues them: one heap,
/// the earliest deadline per key winning, as upstream's delaying queue.
async fn wait_out_delays<T: Key>(
    shared: std::sync::Weak<Shared<T>>,
    clock: Arc<dyn Timer>,
    mut incoming: mpsc::UnboundedReceiver<(SystemTime, T)>,
) {
    let mut heap: BinaryHeap<Reverse<(SystemTime, u64)>> = BinaryHeap::new();
    let mut waiting: HashMap<T, (SystemTime, u64)> = HashMap::new();
    let mut by_ticket: HashMap<u64, T> = HashMap::new();
    let mut next_ticket = 0u64;
    loop {
        // Queue whatever is due.
        let now = clock.now();
        while let Some(Reverse((deadline, ticket))) = heap.peek().copied() {
            if deadline > now {
                break;
            }
            heap.pop();
            if let Some(item) = by_ticket.remove(&ticket) {
                waiting.remove(&item);
                let Some(shared) = shared.upgrade() else {
                    return;
                };
                add(&shared, item);
            }
        }
        let next = heap.peek().map(|Reverse((deadline, _))| *deadline);
        let sleep = match next {
            Some(deadline) => clock.sleep_until(deadline),
            None => Box::pin(futures::future::pending()),
        };
        tokio::select! {
            received = incoming.recv() => {
                let Some((deadline, item)) = received else { return };
                match waiting.get(&item) {
                    Some((existing, _)) if *existing <= deadline => {}
                    Some(&(_, old_ticket)) => {
                        by_ticket.remove(&old_ticket);
                        next_ticket += 1;
                        heap.push(Reverse((deadline, next_ticket)));
                        by_ticket.insert(next_ticket, item.clone());
                        waiting.insert(item, (deadline, next_ticket));
                    }
                    None => {
                        next_ticket += 1;
                        heap.push(Reverse((deadline, next_ticket)));
                        by_ticket.insert(next_ticket, item.clone());
                        waiting.insert(item, (deadline, next_ticket));
                    }
                }
            }
            () = sleep => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::{Clock, FakeClock};

    async fn next(queue: &WorkQueue<&'static str>) -> &'static str {
        tokio::time::timeout(Duration::from_secs(5), queue.get())
            .await
            .expect("a key in time")
            .expect("not shut down")
    }

    #[tokio::test]
    async fn a_key_added_twice_is_queued_once_and_never_processed_twice_at_once() {
        let queue = WorkQueue::new(FakeClock::starting_now());
        queue.add("a");
        queue.add("a");
        queue.add("b");
        assert_eq!(queue.len(), 2);
        assert_eq!(next(&queue).await, "a");
        // Added while processing: held back until done.
        queue.add("a");
        assert_eq!(next(&queue).await, "b");
        assert!(queue.is_empty());
        queue.done(&"a");
        assert_eq!(next(&queue).await, "a");
        queue.done(&"a");
        queue.done(&"b");
        queue.shut_down();
        assert_eq!(queue.get().await, None);
    }

    #[tokio::test]
    async fn delayed_keys_wait_for_the_clock_and_the_earliest_deadline_wins() {
        let clock = FakeClock::starting_now();
        let queue = WorkQueue::new(clock.clone());
        queue.add_after("late", Duration::from_secs(60));
        queue.add_after("late", Duration::from_secs(10));
        queue.add_after("later", Duration::from_secs(30));
        tokio::task::yield_now().await;
        assert!(queue.is_empty());
        clock.advance(Duration::from_secs(10));
        assert_eq!(next(&queue).await, "late");
        queue.done(&"late");
        clock.advance(Duration::from_secs(20));
        assert_eq!(next(&queue).await, "later");
        queue.done(&"later");
        clock.advance(Duration::from_secs(60));
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(queue.is_empty(), "the superseded deadline queued nothing");
    }

    #[test]
    fn retries_back_off_exponentially_and_overall_as_upstream() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let mut limiter = RateLimiter::default();
        let delays: Vec<Duration> = (0..4).map(|_| limiter.when(&"k", now)).collect();
        assert_eq!(
            delays,
            [5, 10, 20, 40].map(Duration::from_millis).to_vec(),
            "5 ms doubling"
        );
        assert_eq!(limiter.retries(&"k"), 4);
        for _ in 0..40 {
            limiter.when(&"k", now);
        }
        assert_eq!(limiter.when(&"k", now), MAX_DELAY);
        limiter.forget(&"k");
        assert_eq!(limiter.retries(&"k"), 0);

        // The overall bucket: 100 at once, then 10 a second.
        let mut limiter = RateLimiter::default();
        let mut last = Duration::ZERO;
        for i in 0..110u32 {
            last = limiter.when(&i, now);
        }
        assert_eq!(last, Duration::from_secs(1), "the 110th waits a second");
        let later = now + Duration::from_secs(10);
        assert_eq!(limiter.when(&1000, later), Duration::from_millis(5));
    }

    #[tokio::test]
    async fn a_rate_limited_key_comes_back_after_its_backoff() {
        let clock = FakeClock::starting_now();
        let queue = WorkQueue::new(clock.clone());
        queue.add_rate_limited("k");
        queue.add_rate_limited("k");
        assert_eq!(queue.retries(&"k"), 2);
        tokio::task::yield_now().await;
        assert!(queue.is_empty());
        clock.advance(Duration::from_millis(5));
        assert_eq!(next(&queue).await, "k");
        queue.forget(&"k");
        assert_eq!(queue.retries(&"k"), 0);
        let _ = clock.now();
    }
}
