//! Time as a seam. Everything time-driven in a controller — work queue
//! backoffs, lease renewals, requeues after a delay, grace periods, TTLs —
//! reads the time from a [`Timer`] and sleeps on it, so tests run it on a
//! [`FakeClock`] they advance instead of waiting.

use std::fmt;
use std::sync::Arc;
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
/// [`advance`](FakeClock::advance) reaches their deadline.
pub struct FakeClock {
    time: tokio::sync::watch::Sender<SystemTime>,
}

impl fmt::Debug for FakeClock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FakeClock")
            .field("now", &*self.time.borrow())
            .finish()
    }
}

impl FakeClock {
    /// A clock reading `start`.
    pub fn new(start: SystemTime) -> Arc<Self> {
        Arc::new(FakeClock {
            time: tokio::sync::watch::Sender::new(start),
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
}

impl Clock for FakeClock {
    fn now(&self) -> SystemTime {
        *self.time.borrow()
    }
}

impl Timer for FakeClock {
    fn sleep_until(&self, deadline: SystemTime) -> BoxFuture<'static, ()> {
        let mut time = self.time.subscribe();
        Box::pin(async move {
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
        // A deadline already passed completes at once.
        tokio::time::timeout(Duration::from_secs(5), clock.sleep_until(start))
            .await
            .expect("immediate");
    }
}
