//! CrashLoopBackOff: how long a failed container waits before its next
//! start — 10 s doubling to 5 min, forgotten after 10 min without a crash
//! (upstream's `flowcontrol.Backoff` as the kubelet configures it).

use std::collections::HashMap;
use std::time::{Duration, SystemTime};

pub const INITIAL: Duration = Duration::from_secs(10);
pub const MAX: Duration = Duration::from_secs(300);

#[derive(Debug, Default)]
pub struct Backoff {
    entries: HashMap<String, (Duration, SystemTime)>,
}

impl Backoff {
    /// Whether a container that finished at `finished` must still wait at
    /// `now`, and until when.
    pub fn waiting(
        &mut self,
        key: &str,
        finished: SystemTime,
        now: SystemTime,
    ) -> Option<(Duration, SystemTime)> {
        self.forget_stale(now);
        let (delay, _) = *self.entries.get(key)?;
        let until = finished + delay;
        (now < until).then_some((delay, until))
    }

    /// When the back-off of `key`'s last failure (its last
    /// [`next`](Self::next)) ends, if it has not yet.
    pub fn waiting_since_last(&mut self, key: &str, now: SystemTime) -> Option<SystemTime> {
        self.forget_stale(now);
        let (delay, at) = *self.entries.get(key)?;
        let until = at + delay;
        (now < until).then_some(until)
    }

    /// Records a restart: the next wait is longer.
    pub fn next(&mut self, key: &str, now: SystemTime) {
        let delay = match self.entries.get(key) {
            None => INITIAL,
            Some((delay, _)) => (*delay * 2).min(MAX),
        };
        self.entries.insert(key.to_string(), (delay, now));
    }

    /// Forgets a pod's entries (it is gone).
    pub fn forget_prefix(&mut self, prefix: &str) {
        self.entries.retain(|k, _| !k.starts_with(prefix));
    }

    fn forget_stale(&mut self, now: SystemTime) {
        self.entries
            .retain(|_, (_, at)| now.duration_since(*at).unwrap_or_default() < 2 * MAX);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wait_doubles_to_five_minutes_and_is_forgotten_after_ten() {
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let mut b = Backoff::default();
        assert_eq!(
            b.waiting("p/c", t0, t0),
            None,
            "the first restart is at once"
        );
        b.next("p/c", t0);
        assert_eq!(
            b.waiting("p/c", t0, t0 + Duration::from_secs(5))
                .map(|w| w.0),
            Some(INITIAL)
        );
        assert_eq!(b.waiting("p/c", t0, t0 + Duration::from_secs(10)), None);
        let mut t = t0;
        let mut seen = Vec::new();
        for _ in 0..7 {
            t += Duration::from_secs(1);
            b.next("p/c", t);
            seen.push(b.waiting("p/c", t, t).map(|w| w.0.as_secs()).unwrap_or(0));
        }
        assert_eq!(seen, [20, 40, 80, 160, 300, 300, 300]);
        assert_eq!(b.waiting_since_last("p/c", t), Some(t + MAX));
        assert_eq!(b.waiting_since_last("p/c", t + MAX), None);
        let later = t + Duration::from_secs(601);
        assert_eq!(
            b.waiting("p/c", later, later),
            None,
            "reset after 10 minutes"
        );
    }
}
