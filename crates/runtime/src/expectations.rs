//! Expectations (upstream's `ControllerExpectations` and
//! `UIDTrackingControllerExpectations`): what a controller has asked the
//! API server to create and delete and not yet seen in its informer's
//! cache. While a key's expectations are pending its controller does not
//! act on the cache — the pods it just created are not in it yet, and
//! acting would create them twice.
//!
//! Unlike upstream's counters, each expectation names the object it waits
//! for and is checked against the cache itself, so a subscriber that fell
//! behind (and got a resync instead of the events) cannot leave a
//! controller waiting. Expectations lapse after five minutes, as upstream's.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use crate::clock::Timer;

/// How long expectations hold before the controller acts anyway
/// (upstream's `ExpectationsTimeout`).
pub const TIMEOUT: Duration = Duration::from_secs(5 * 60);

/// What the cache holds of an object a controller waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Seen {
    Absent,
    Present,
    /// Present with a `deletionTimestamp`: its deletion counts as seen.
    Deleting,
}

#[derive(Debug, Default)]
struct Expected {
    /// Creations asked for whose answer has not come back.
    in_flight: i64,
    /// Keys of created objects not yet seen in the cache.
    created: HashSet<String>,
    /// Keys of objects whose deletion is not yet seen.
    deleted: HashSet<String>,
    set_at: Option<SystemTime>,
}

/// Pending creations and deletions per controller key.
#[derive(Clone)]
pub struct Expectations {
    clock: Arc<dyn Timer>,
    inner: Arc<Mutex<HashMap<String, Expected>>>,
}

impl std::fmt::Debug for Expectations {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Expectations")
            .field("keys", &self.lock().len())
            .finish()
    }
}

impl Expectations {
    pub fn new(clock: Arc<dyn Timer>) -> Self {
        Expectations {
            clock,
            inner: Arc::default(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Expected>> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether `key` may act on its cache: everything it created is in it,
    /// everything it deleted is gone (or going) from it — `seen` says what
    /// the cache holds of an object — or what was pending has lapsed.
    pub fn satisfied(&self, key: &str, seen: impl Fn(&str) -> Seen) -> bool {
        let now = self.clock.now();
        let mut inner = self.lock();
        let Some(e) = inner.get_mut(key) else {
            return true;
        };
        e.created.retain(|k| seen(k) == Seen::Absent);
        e.deleted.retain(|k| seen(k) == Seen::Present);
        let lapsed = e
            .set_at
            .is_some_and(|at| now.duration_since(at).unwrap_or_default() > TIMEOUT);
        if lapsed || (e.in_flight <= 0 && e.created.is_empty() && e.deleted.is_empty()) {
            // Lapsed ones are dropped too: what they waited for will not
            // hold the next expectations back.
            inner.remove(key);
            return true;
        }
        false
    }

    /// An informer event for `object` (its key) of `key`'s: created and
    /// seen, or gone — either way nothing waits for it any more (a pod
    /// created and deleted before the check looked is not waited for).
    pub fn observed(&self, key: &str, object: &str, gone: bool) {
        if let Some(e) = self.lock().get_mut(key) {
            e.created.remove(object);
            if gone {
                e.deleted.remove(object);
            }
        }
    }

    /// `key` is about to create `count` objects.
    pub fn expect_creations(&self, key: &str, count: usize) {
        let now = self.clock.now();
        let mut inner = self.lock();
        let e = inner.entry(key.to_string()).or_default();
        e.in_flight += count as i64;
        e.set_at = Some(now);
    }

    /// One of `key`'s creations was answered: `created` is the new
    /// object's key, `None` if it failed.
    pub fn created(&self, key: &str, created: Option<String>) {
        if let Some(e) = self.lock().get_mut(key) {
            e.in_flight -= 1;
            e.created.extend(created);
        }
    }

    /// `key` is about to delete the objects `deleted` (their keys).
    pub fn expect_deletions(&self, key: &str, deleted: impl IntoIterator<Item = String>) {
        let now = self.clock.now();
        let mut inner = self.lock();
        let e = inner.entry(key.to_string()).or_default();
        e.deleted.extend(deleted);
        e.set_at = Some(now);
    }

    /// A deletion of `key`'s failed: it will never be seen.
    pub fn deletion_failed(&self, key: &str, object: &str) {
        if let Some(e) = self.lock().get_mut(key) {
            e.deleted.remove(object);
        }
    }

    /// Forgets `key` (its controller object is gone).
    pub fn forget(&self, key: &str) {
        self.lock().remove(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::FakeClock;

    #[test]
    fn pending_until_seen_in_the_cache_or_lapsed() {
        let clock = FakeClock::starting_now();
        let expectations = Expectations::new(clock.clone());
        let cache: Mutex<HashMap<String, Seen>> = Mutex::default();
        let seen = |k: &str| {
            cache
                .lock()
                .expect("lock")
                .get(k)
                .copied()
                .unwrap_or(Seen::Absent)
        };
        assert!(expectations.satisfied("ns/rs", seen), "nothing asked yet");
        expectations.expect_creations("ns/rs", 2);
        expectations.created("ns/rs", Some("ns/a".into()));
        assert!(!expectations.satisfied("ns/rs", seen), "one in flight");
        expectations.created("ns/rs", None);
        assert!(!expectations.satisfied("ns/rs", seen), "a not cached yet");
        cache
            .lock()
            .expect("lock")
            .insert("ns/a".into(), Seen::Present);
        assert!(expectations.satisfied("ns/rs", seen));

        cache
            .lock()
            .expect("lock")
            .insert("ns/b".into(), Seen::Present);
        expectations.expect_deletions("ns/rs", ["ns/a".to_string(), "ns/b".to_string()]);
        cache
            .lock()
            .expect("lock")
            .insert("ns/a".into(), Seen::Deleting);
        assert!(!expectations.satisfied("ns/rs", seen), "b is still there");
        expectations.deletion_failed("ns/rs", "ns/b");
        assert!(expectations.satisfied("ns/rs", seen));

        expectations.expect_creations("ns/rs", 1);
        assert!(!expectations.satisfied("ns/rs", seen));
        clock.advance(TIMEOUT + Duration::from_secs(1));
        assert!(expectations.satisfied("ns/rs", seen), "lapsed");
        expectations.forget("ns/rs");
        assert!(expectations.satisfied("ns/rs", seen));

        // A pod created and deleted before anyone looked.
        expectations.expect_creations("ns/rs", 1);
        expectations.created("ns/rs", Some("ns/gone".into()));
        expectations.observed("ns/rs", "ns/gone", true);
        assert!(expectations.satisfied("ns/rs", seen));
    }
}
