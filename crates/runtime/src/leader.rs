//! Leader election on a `coordination.k8s.io/v1` Lease, as client-go's
//! `tools/leaderelection` with its `LeaseLock`: so two servers on one etcd
//! never run the same controllers at once.
//!
//! A candidate tries to take the lease every `retry_period` (jittered by up
//! to 1.2×). It takes a lease that is absent, its own, or expired — not
//! renewed for `lease_duration` by the candidate's own clock since it last
//! saw the record change (renew times from other machines' clocks are never
//! compared with ours). The leader renews every `retry_period`; if it cannot
//! renew within `renew_deadline` it stops leading: its work is cancelled and
//! it competes again. On shutdown the leader releases the lease so another
//! can take over at once. Writes are compare-and-swap on the Lease's
//! `resourceVersion`.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::Client;
use kube::api::{Api, PostParams};
use rand::Rng;
use tokio_util::sync::CancellationToken;

use crate::clock::Timer;

/// Where the lease is and how it is held.
#[derive(Debug, Clone)]
pub struct LeaseConfig {
    pub namespace: String,
    pub name: String,
    /// This candidate: upstream's `<hostname>_<uuid>`.
    pub identity: String,
    pub lease_duration: Duration,
    pub renew_deadline: Duration,
    pub retry_period: Duration,
}

impl LeaseConfig {
    /// Upstream's rules: the lease outlasts the renew deadline, which
    /// outlasts 1.2 retry periods.
    pub fn validate(&self) -> Result<(), String> {
        if self.lease_duration <= self.renew_deadline {
            return Err("leaseDuration must be greater than renewDeadline".into());
        }
        if self.renew_deadline.as_secs_f64() <= 1.2 * self.retry_period.as_secs_f64() {
            return Err("renewDeadline must be greater than retryPeriod*JitterFactor".into());
        }
        if self.retry_period.is_zero() {
            return Err("retryPeriod must be greater than zero".into());
        }
        Ok(())
    }

    /// Upstream's defaults (15 s lease, 10 s renew deadline, 2 s retry) for
    /// the lease `kube-system/<name>`.
    pub fn new(name: &str, identity: &str) -> Self {
        LeaseConfig {
            namespace: "kube-system".into(),
            name: name.into(),
            identity: identity.into(),
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }
}

/// Errors of leader election.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("reading or writing the lease {lease}: {source}")]
    Lease {
        lease: String,
        #[source]
        source: kube::Error,
    },
    #[error("the lease {0} is held by another candidate")]
    Held(String),
}

/// What this candidate last saw of the lease, by its own clock.
#[derive(Debug, Clone, PartialEq)]
struct Observed {
    holder: Option<String>,
    renew: Option<MicroTime>,
    duration: Option<i32>,
    at: SystemTime,
}

/// One candidate for one lease.
pub struct LeaderElector {
    api: Api<Lease>,
    config: LeaseConfig,
    clock: Arc<dyn Timer>,
    observed: std::sync::Mutex<Option<Observed>>,
}

impl std::fmt::Debug for LeaderElector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaderElector")
            .field("config", &self.config)
            .finish()
    }
}

fn micro(time: SystemTime) -> MicroTime {
    let nanos = time
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_nanos() as i128)
        .unwrap_or(0);
    // Microseconds, as MicroTime serializes.
    let micros = nanos / 1000;
    MicroTime(
        k8s_openapi::jiff::Timestamp::from_microsecond(micros as i64)
            .unwrap_or(k8s_openapi::jiff::Timestamp::UNIX_EPOCH),
    )
}

impl LeaderElector {
    pub fn new(client: Client, config: LeaseConfig, clock: Arc<dyn Timer>) -> Self {
        LeaderElector {
            api: Api::namespaced(client, &config.namespace),
            config,
            clock,
            observed: std::sync::Mutex::new(None),
        }
    }

    fn lease_name(&self) -> String {
        format!("{}/{}", self.config.namespace, self.config.name)
    }

    fn failed(&self, source: kube::Error) -> Error {
        Error::Lease {
            lease: self.lease_name(),
            source,
        }
    }

    /// Takes or renews the lease once: `Ok(())` when this candidate holds
    /// it afterwards.
    pub async fn try_acquire_or_renew(&self) -> Result<(), Error> {
        let now = self.clock.now();
        let current = self
            .api
            .get_opt(&self.config.name)
            .await
            .map_err(|e| self.failed(e))?;
        let Some(mut lease) = current else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.config.name.clone()),
                    namespace: Some(self.config.namespace.clone()),
                    ..Default::default()
                },
                spec: Some(self.record(now, None)),
            };
            self.api
                .create(&PostParams::default(), &lease)
                .await
                .map_err(|e| self.failed(e))?;
            self.observe(&lease, now);
            return Ok(());
        };
        let spec = lease.spec.clone().unwrap_or_default();
        let ours = spec.holder_identity.as_deref() == Some(self.config.identity.as_str());
        let held = spec
            .holder_identity
            .as_deref()
            .is_some_and(|h| !h.is_empty());
        if held && !ours && !self.expired(&lease, now) {
            return Err(Error::Held(self.lease_name()));
        }
        lease.spec = Some(self.record(now, Some(&spec)));
        let written = self
            .api
            .replace(&self.config.name, &PostParams::default(), &lease)
            .await
            .map_err(|e| self.failed(e))?;
        self.observe(&written, now);
        Ok(())
    }

    /// Whether the lease's holder has not renewed it within its duration,
    /// by this candidate's clock since the record last changed.
    fn expired(&self, lease: &Lease, now: SystemTime) -> bool {
        let spec = lease.spec.clone().unwrap_or_default();
        let record = Observed {
            holder: spec.holder_identity.clone(),
            renew: spec.renew_time.clone(),
            duration: spec.lease_duration_seconds,
            at: now,
        };
        let mut observed = self.observed.lock().unwrap_or_else(|e| e.into_inner());
        let since = match observed.as_ref() {
            Some(seen)
                if (&seen.holder, &seen.renew, seen.duration)
                    == (&record.holder, &record.renew, record.duration) =>
            {
                seen.at
            }
            _ => {
                *observed = Some(record);
                now
            }
        };
        let duration = Duration::from_secs(spec.lease_duration_seconds.unwrap_or(0).max(0) as u64);
        now.duration_since(since).unwrap_or_default() >= duration
    }

    fn observe(&self, lease: &Lease, now: SystemTime) {
        let spec = lease.spec.clone().unwrap_or_default();
        *self.observed.lock().unwrap_or_else(|e| e.into_inner()) = Some(Observed {
            holder: spec.holder_identity,
            renew: spec.renew_time,
            duration: spec.lease_duration_seconds,
            at: now,
        });
    }

    /// This candidate's record over `previous` (none: a new lease): a
    /// renewal keeps the acquire time and transitions, a take-over counts
    /// one more transition.
    fn record(&self, now: SystemTime, previous: Option<&LeaseSpec>) -> LeaseSpec {
        let ours =
            |p: &LeaseSpec| p.holder_identity.as_deref() == Some(self.config.identity.as_str());
        let (acquired, transitions) = match previous {
            None => (micro(now), 0),
            Some(p) if ours(p) => (
                p.acquire_time.clone().unwrap_or_else(|| micro(now)),
                p.lease_transitions.unwrap_or(0),
            ),
            Some(p) => (micro(now), p.lease_transitions.unwrap_or(0) + 1),
        };
        LeaseSpec {
            holder_identity: Some(self.config.identity.clone()),
            lease_duration_seconds: Some(self.config.lease_duration.as_secs() as i32),
            acquire_time: Some(acquired),
            renew_time: Some(micro(now)),
            lease_transitions: Some(transitions),
            ..Default::default()
        }
    }

    /// Runs `lead` whenever this candidate holds the lease, until `cancel`
    /// fires: `lead` gets a token cancelled when leadership ends.
    pub async fn run<F, Fut>(&self, cancel: CancellationToken, lead: F)
    where
        F: Fn(CancellationToken) -> Fut,
        Fut: std::future::Future<Output = ()> + Send + 'static,
    {
        if let Err(error) = self.config.validate() {
            tracing::error!(%error, lease = %self.lease_name(), "leader election: invalid configuration; not competing");
            return;
        }
        loop {
            // Acquire.
            loop {
                if cancel.is_cancelled() {
                    return;
                }
                match self.try_acquire_or_renew().await {
                    Ok(()) => break,
                    Err(Error::Held(_)) => {}
                    Err(error) => {
                        tracing::info!(%error, "leader election: could not take the lease")
                    }
                }
                let jitter = self
                    .config
                    .retry_period
                    .mul_f64(rand::rng().random_range(0.0..1.2));
                tokio::select! {
                    _ = cancel.cancelled() => return,
                    () = self.clock.sleep(self.config.retry_period + jitter) => {}
                }
            }
            tracing::info!(lease = %self.lease_name(), identity = %self.config.identity, "became leader");
            let leading = cancel.child_token();
            let work = tokio::spawn(lead(leading.clone()));
            // Renew until we cannot or are told to stop.
            let mut renewed = self.clock.now();
            loop {
                tokio::select! {
                    _ = cancel.cancelled() => break,
                    () = self.clock.sleep(self.config.retry_period) => {}
                }
                // A renewal that does not finish within the deadline counts
                // as failed: the leader must stop before its lease can pass
                // to another.
                let left = self
                    .config
                    .renew_deadline
                    .saturating_sub(self.clock.now().duration_since(renewed).unwrap_or_default());
                // The lease counts from when the renewal was sent.
                let sent = self.clock.now();
                let attempt = tokio::time::timeout(left, self.try_acquire_or_renew()).await;
                match attempt {
                    Ok(Ok(())) => renewed = sent,
                    Ok(Err(error)) => {
                        let since = self.clock.now().duration_since(renewed).unwrap_or_default();
                        tracing::warn!(%error, "leader election: could not renew the lease");
                        if since >= self.config.renew_deadline || matches!(error, Error::Held(_)) {
                            break;
                        }
                    }
                    Err(_) => {
                        tracing::warn!("leader election: renewing the lease timed out");
                        break;
                    }
                }
            }
            // Stop leading at once: the work gets a moment to wind down,
            // then is aborted.
            leading.cancel();
            let abort = work.abort_handle();
            if tokio::time::timeout(Duration::from_secs(2), work)
                .await
                .is_err()
            {
                abort.abort();
            }
            tracing::info!(lease = %self.lease_name(), identity = %self.config.identity, "stopped leading");
            if cancel.is_cancelled() {
                self.release().await;
                return;
            }
        }
    }

    /// Gives the lease up so another candidate can take it at once.
    pub async fn release(&self) {
        let Ok(Some(mut lease)) = self.api.get_opt(&self.config.name).await else {
            return;
        };
        let Some(spec) = lease.spec.as_mut() else {
            return;
        };
        if spec.holder_identity.as_deref() != Some(self.config.identity.as_str()) {
            return;
        }
        let now = micro(self.clock.now());
        spec.holder_identity = None;
        spec.lease_duration_seconds = Some(1);
        spec.acquire_time = Some(now.clone());
        spec.renew_time = Some(now);
        if let Err(error) = self
            .api
            .replace(&self.config.name, &PostParams::default(), &lease)
            .await
        {
            tracing::debug!(%error, "leader election: could not release the lease");
        }
    }
}

/// Upstream's leader identity: `<hostname>_<uuid>` (a random version-4
/// UUID).
pub fn identity() -> String {
    use rand::Rng;
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "rudder".into());
    let mut b: [u8; 16] = rand::rng().random();
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "{host}_{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}
