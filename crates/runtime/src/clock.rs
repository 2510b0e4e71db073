//! Time as a seam. Everything time-driven in a controller — work queue
//! backoffs, lease renewals, requeues after a delay, grace periods, TTLs —
//! reads the time from a [`Timer`] and sleeps on it, so tests run it on a
//! [`FakeClock`] they advance instead of waiting.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use futures::future::BoxFuture;
pub use rudder_api::time::{Clock, SystemClock};

/// A clock that can also be slept on.
pub trait Timer: Clock {
    /// Completes once the clock reads `deadline` or later.
    fn sleep_until(&self, deadline: SystemTime) -> BoxFuture<'static, ()>;

    fn sleep(&self, duration: Duration) -> BoxFuture<'static, ()> {
        self.sleep_until(self.now() + duration)
    }
}

impl Timer for SystemClock {
    fn sleep_until(&self, deadline: SystemTime) -> BoxFuture<'static, ()> {
        let wait = deadline
            .duration_since(SystemTime::now())
            .unwrap_or_default();
        Box::pin(tokio::time::sleep(wait))
    }
}

/// The system clock, shared.
pub fn system() -> Arc<dyn Timer> {
    Arc::new(SystemClock)
}

/// A clock that moves only when told to. Sleepers wake when an
/// [`advance`](FakeClock::advance) reaches their deadline. Who sleeps until
/// when can be read ([`sleepers_since`](FakeClock::sleepers_since)), so a
/// test knows when a loop an advance woke has finished its pass.
pub struct FakeClock {
    time: tokio::sync::watch::Sender<SystemTime>,
    sleeps: Arc<Mutex<Sleeps>>,
}

/// The sleeps asked of a fake clock: how many so far, and the deadline of
/// each still pending, by the number it was asked as.
#[derive(Debug, Default)]
struct Sleeps {
    asked: u64,
    pending: BTreeMap<u64, SystemTime>,
}

/// One pending sleep, listed in its clock's `sleeps` until it completes
/// or is dropped.
struct Sleeper {
    number: u64,
    sleeps: Arc<Mutex<Sleeps>>,
}

impl Drop for Sleeper {
    fn drop(&mut self) {
        self.sleeps
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .pending
            .remove(&self.number);
    }
}

impl fmt::Debug for FakeClock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FakeClock")
            .field("now", &*self.time.borrow())
            .field("sleeps", &*self.lock())
            .finish()
    }
}

impl FakeClock {
    /// A clock reading `start`.
    pub fn new(start: SystemTime) -> Arc<Self> {
        Arc::new(FakeClock {
            time: tokio::sync::watch::Sender::new(start),
            sleeps: Arc::default(),
        })
    }

    /// A clock reading the system time when it is made.
    pub fn starting_now() -> Arc<Self> {
        // Whole seconds, as the API's timestamps are.
        let now =
            rudder_api::time::from_unix_seconds(rudder_api::time::unix_seconds(SystemTime::now()));
        FakeClock::new(now)
    }

    /// Moves the clock forward, waking every sleeper whose deadline passed.
    pub fn advance(&self, by: Duration) {
        self.time.send_modify(|now| *now += by);
    }

    /// How many sleeps were asked for so far: a mark for
    /// [`sleepers_since`](FakeClock::sleepers_since).
    pub fn mark(&self) -> u64 {
        self.lock().asked
    }

    /// The deadlines of the sleeps still pending that were asked for after
    /// `mark`, soonest first, once per sleeper. A loop that sleeps between
    /// passes asks for its next deadline once the pass an advance woke it
    /// for is over: the sync point of a test that advances the clock and
    /// then checks what the pass did (or did not do). Sleeps asked before
    /// the mark (another loop's, due at the same time) do not count.
    pub fn sleepers_since(&self, mark: u64) -> Vec<SystemTime> {
        let mut deadlines: Vec<SystemTime> = self
            .lock()
            .pending
            .range(mark..)
            .map(|(_, deadline)| *deadline)
            .collect();
        deadlines.sort();
        deadlines
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Sleeps> {
        self.sleeps.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Clock for FakeClock {
    fn now(&self) -> SystemTime {
        *self.time.borrow()
    }
}

impl Timer for FakeClock {
    fn sleep_until(&self, deadline: SystemTime) -> BoxFuture<'static, ()> {
        let mut time = self.time.subscribe();
        // Listed from the call, not the first poll: a loop that has asked
        // to sleep is done with its pass.
        let number = {
            let mut sleeps = self.lock();
            let number = sleeps.asked;
            sleeps.asked += 1;
            sleeps.pending.insert(number, deadline);
            number
        };
        let sleeper = Sleeper {
            number,
            sleeps: self.sleeps.clone(),
        };
        Box::pin(async move {
            let _sleeper = sleeper;
            // The clock lives as long as anyone sleeps on it only if its
            // owner keeps it: a dropped clock never wakes its sleepers.
            if time.wait_for(|now| *now >= deadline).await.is_err() {
                futures::future::pending::<()>().await;
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_fake_clock_wakes_sleepers_when_advanced_past_their_deadline() {
        let clock = FakeClock::starting_now();
        let start = clock.now();
        let sleeper = tokio::spawn(clock.sleep(Duration::from_secs(10)));
        clock.advance(Duration::from_secs(9));
        tokio::task::yield_now().await;
        assert!(!sleeper.is_finished(), "woke before its deadline");
        clock.advance(Duration::from_secs(1));
        tokio::time::timeout(Duration::from_secs(5), sleeper)
            .await
            .expect("woke")
            .expect("joined");
        assert_eq!(clock.now(), start + Duration::from_secs(10));
        assert!(
            clock.sleepers_since(0).is_empty(),
            "a woken sleeper is no longer listed"
        );
        // A deadline already passed completes at once.
        tokio::time::timeout(Duration::from_secs(5), clock.sleep_until(start))
            .await
            .expect("immediate");
    }

    #[test]
    fn pending_sleeps_are_listed_until_they_complete_or_are_dropped() {
        let clock = FakeClock::starting_now();
        let start = clock.now();
        let (a, b) = (
            start + Duration::from_secs(5),
            start + Duration::from_secs(2),
        );
        let first = clock.sleep_until(a);
        let mark = clock.mark();
        let second = clock.sleep_until(a);
        let third = clock.sleep(Duration::from_secs(2));
        assert_eq!(
            clock.sleepers_since(0),
            [b, a, a],
            "soonest first, once each"
        );
        assert_eq!(
            clock.sleepers_since(mark),
            [b, a],
            "asked for after the mark"
        );
        drop(first);
        drop(third);
        assert_eq!(clock.sleepers_since(0), [a]);
        drop(second);
        assert!(clock.sleepers_since(0).is_empty());
        assert_eq!(clock.mark(), 3);
    }
}
