//! An event recorder writing `events.k8s.io/v1` Events as client-go's
//! `tools/events` does:
//!
//! - each Event is named `<regarding name>.<hex nanoseconds>`, in the
//!   regarding object's namespace (`default` for cluster-scoped ones), with
//!   `eventTime` in microseconds, `reportingController` and
//!   `reportingInstance`;
//! - isomorphic events (same type, action, reason, reporter, regarding and
//!   related object — the note does not count) within six minutes form a
//!   series: the second occurrence PATCHes `series {count, lastObservedTime}`
//!   onto the first Event, later ones only count in memory, and the series
//!   is written once more when it ends (six minutes without a repeat) or
//!   every 30 minutes while it goes on.
//!
//! - per regarding object and type, at most 25 events at once and then one
//!   per 5 minutes are written (client-go's `EventSourceObjectSpamFilter`,
//!   which keeps a controller creating 10,000 pods from writing 10,000
//!   events); the rest are dropped.
//!
//! Publishing never blocks a reconcile: [`Recorder::event`] hands the work
//! to a task; [`Recorder::publish`] is the same, awaited (for tests).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::{Client, Resource, ResourceExt};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::clock::Timer;

/// Events of one object and type written at once (the spam filter's burst).
pub const SPAM_BURST: f64 = 25.0;
/// Then one per this long (the spam filter's refill).
pub const SPAM_REFILL: Duration = Duration::from_secs(300);

/// A series ends after this long without a repeat.
pub const FINISH_AFTER: Duration = Duration::from_secs(6 * 60);
/// A running series is written again this often.
pub const REFRESH_EVERY: Duration = Duration::from_secs(30 * 60);

/// `Normal` or `Warning`, as the API allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventType {
    Normal,
    Warning,
}

impl EventType {
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Normal => "Normal",
            EventType::Warning => "Warning",
        }
    }
}

/// What makes two events the same event happening again.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Isomorphic {
    type_: EventType,
    action: String,
    reason: String,
    regarding: String,
    related: Option<String>,
}

/// What an occurrence of an event is.
enum Seen {
    New,
    Second(Series),
    Counted,
}

#[derive(Debug, Clone)]
struct Series {
    namespace: String,
    name: String,
    count: i32,
    last_observed: SystemTime,
    written: SystemTime,
}

/// A reference to `object` for an event's `regarding`.
pub fn reference_to<K>(object: &K) -> ObjectReference
where
    K: Resource<DynamicType = ()>,
{
    ObjectReference {
        api_version: Some(K::api_version(&()).into_owned()),
        kind: Some(K::kind(&()).into_owned()),
        namespace: object.namespace(),
        name: object.meta().name.clone(),
        uid: object.meta().uid.clone(),
        resource_version: object.meta().resource_version.clone(),
        field_path: None,
    }
}

fn describe(reference: &ObjectReference) -> String {
    format!(
        "{}/{}/{}/{}/{}",
        reference.api_version.as_deref().unwrap_or_default(),
        reference.kind.as_deref().unwrap_or_default(),
        reference.namespace.as_deref().unwrap_or_default(),
        reference.name.as_deref().unwrap_or_default(),
        reference.uid.as_deref().unwrap_or_default(),
    )
}

/// Records events for one controller.
#[derive(Clone)]
pub struct Recorder {
    client: Client,
    controller: String,
    instance: String,
    clock: Arc<dyn Timer>,
    series: Arc<Mutex<HashMap<Isomorphic, Series>>>,
    spam: Arc<Mutex<SpamFilter>>,
}

/// A token bucket per (regarding object, type): [`SPAM_BURST`] at once,
/// then one per [`SPAM_REFILL`].
#[derive(Debug, Default)]
struct SpamFilter {
    buckets: HashMap<(String, EventType), (f64, SystemTime)>,
}

impl SpamFilter {
    fn admit(&mut self, key: (String, EventType), now: SystemTime) -> bool {
        // Forget buckets that have filled up again.
        if self.buckets.len() > 4096 {
            self.buckets.retain(|_, (_, at)| {
                now.duration_since(*at).unwrap_or_default() < SPAM_REFILL.mul_f64(SPAM_BURST)
            });
        }
        let (tokens, at) = self.buckets.entry(key).or_insert((SPAM_BURST, now));
        let refilled =
            now.duration_since(*at).unwrap_or_default().as_secs_f64() / SPAM_REFILL.as_secs_f64();
        *tokens = (*tokens + refilled).min(SPAM_BURST);
        *at = now;
        if *tokens >= 1.0 {
            *tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

impl std::fmt::Debug for Recorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Recorder")
            .field("controller", &self.controller)
            .field("instance", &self.instance)
            .finish()
    }
}

/// The time as `metav1.MicroTime` serializes it.
fn micro_time(time: SystemTime) -> String {
    rudder_api::time::format_rfc3339_micros(time)
}

impl Recorder {
    /// A recorder reporting as `controller` from `instance` (upstream:
    /// `<controller>-<hostname>`).
    pub fn new(client: Client, controller: &str, instance: &str, clock: Arc<dyn Timer>) -> Self {
        Recorder {
            client,
            controller: controller.to_string(),
            instance: instance.to_string(),
            clock,
            series: Arc::new(Mutex::new(HashMap::new())),
            spam: Arc::default(),
        }
    }

    /// Whether the spam filter lets one more event about `regarding` of
    /// `type_` through now.
    fn admit(&self, regarding: &ObjectReference, type_: EventType) -> bool {
        let key = (describe(regarding), type_);
        self.spam
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .admit(key, self.clock.now())
    }

    /// Records an event without waiting for it to be written.
    pub fn event(
        &self,
        regarding: &ObjectReference,
        type_: EventType,
        reason: &str,
        action: &str,
        note: &str,
    ) {
        if !self.admit(regarding, type_) {
            tracing::debug!(reason, note, "event dropped by the spam filter");
            return;
        }
        let (recorder, regarding) = (self.clone(), regarding.clone());
        let (reason, action, note) = (reason.to_string(), action.to_string(), note.to_string());
        tokio::spawn(async move {
            if let Err(error) = recorder
                .publish(&regarding, type_, &reason, &action, &note)
                .await
            {
                tracing::warn!(%error, reason, "could not record an event");
            }
        });
    }

    /// Records an event and waits until it is written.
    pub async fn publish(
        &self,
        regarding: &ObjectReference,
        type_: EventType,
        reason: &str,
        action: &str,
        note: &str,
    ) -> Result<(), kube::Error> {
        let now = self.clock.now();
        let key = Isomorphic {
            type_,
            action: action.to_string(),
            reason: reason.to_string(),
            regarding: describe(regarding),
            related: None,
        };
        let seen = {
            let mut all = self.series.lock().unwrap_or_else(|e| e.into_inner());
            match all.get_mut(&key) {
                Some(series)
                    if now.duration_since(series.last_observed).unwrap_or_default()
                        < FINISH_AFTER =>
                {
                    series.count += 1;
                    series.last_observed = now;
                    if series.count == 2 {
                        series.written = now;
                        Seen::Second(series.clone())
                    } else {
                        Seen::Counted
                    }
                }
                _ => Seen::New,
            }
        };
        match seen {
            // The second occurrence is written at once, later ones when the
            // series ends or is refreshed.
            Seen::Second(series) => self.write_series(&series).await,
            Seen::Counted => Ok(()),
            Seen::New => {
                let namespace = regarding
                    .namespace
                    .clone()
                    .filter(|n| !n.is_empty())
                    .unwrap_or_else(|| "default".into());
                let nanos = now
                    .duration_since(UNIX_EPOCH)
                    .map(|d| d.as_nanos())
                    .unwrap_or(0);
                let name = format!(
                    "{}.{nanos:x}",
                    regarding.name.as_deref().unwrap_or("unknown")
                );
                let event: Event = serde_json::from_value(json!({
                    "apiVersion": "events.k8s.io/v1",
                    "kind": "Event",
                    "metadata": {"name": name, "namespace": namespace},
                    "eventTime": micro_time(now),
                    "reportingController": self.controller,
                    "reportingInstance": self.instance,
                    "action": action,
                    "reason": reason,
                    "regarding": regarding,
                    "note": note,
                    "type": type_.as_str(),
                }))
                .map_err(kube::Error::SerdeError)?;
                Api::<Event>::namespaced(self.client.clone(), &namespace)
                    .create(&PostParams::default(), &event)
                    .await?;
                self.series
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(
                        key,
                        Series {
                            namespace,
                            name,
                            count: 1,
                            last_observed: now,
                            written: now,
                        },
                    );
                Ok(())
            }
        }
    }

    async fn write_series(&self, series: &Series) -> Result<(), kube::Error> {
        let patch = json!({"series": {"count": series.count, "lastObservedTime": micro_time(series.last_observed)}});
        Api::<Event>::namespaced(self.client.clone(), &series.namespace)
            .patch(&series.name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map(|_| ())
    }

    /// Ends and refreshes series as time passes, until `cancel` fires.
    pub async fn run(&self, cancel: CancellationToken) {
        loop {
            tokio::select! {
                _ = cancel.cancelled() => return,
                () = self.clock.sleep(FINISH_AFTER) => {}
            }
            self.tend().await;
        }
    }

    /// Writes the series that ended (and forgets them and lone events past
    /// the window) and those due for a refresh.
    pub async fn tend(&self) {
        let now = self.clock.now();
        let due: Vec<Series> = {
            let mut all = self.series.lock().unwrap_or_else(|e| e.into_inner());
            let mut due = Vec::new();
            all.retain(|_, series| {
                let quiet = now.duration_since(series.last_observed).unwrap_or_default();
                if quiet >= FINISH_AFTER {
                    if series.count > 1 {
                        due.push(series.clone());
                    }
                    return false;
                }
                if series.count > 1
                    && now.duration_since(series.written).unwrap_or_default() >= REFRESH_EVERY
                {
                    series.written = now;
                    due.push(series.clone());
                }
                true
            });
            due
        };
        for series in due {
            if let Err(error) = self.write_series(&series).await {
                tracing::debug!(%error, event = %series.name, "could not write an event series");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_spam_filter_lets_a_burst_through_then_one_per_five_minutes() {
        let mut filter = SpamFilter::default();
        let t0 = SystemTime::UNIX_EPOCH;
        let key = || ("rs".to_string(), EventType::Normal);
        assert_eq!((0..30).filter(|_| filter.admit(key(), t0)).count(), 25);
        assert!(!filter.admit(key(), t0 + Duration::from_secs(100)));
        assert!(filter.admit(key(), t0 + Duration::from_secs(301)));
        assert!(
            filter.admit(("other".to_string(), EventType::Normal), t0),
            "per object"
        );
    }
}
