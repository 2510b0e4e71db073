//! The scheduler: upstream's kube-scheduler, built as its scheduling
//! framework is — a [queue](queue) of pending pods, a [cache](cache) of
//! nodes and the pods bound or assumed to them, and [plugins](plugins) at
//! each extension point of the [framework], run by a [cycle](cycle) per
//! pod — in front of one shell ([`scheduler`]) that talks to the API
//! server only through its `kube::Client`: it watches pods and nodes and
//! binds with `POST pods/<name>/binding`.
//!
//! [`Scheduler::run`] competes for the `kube-system/kube-scheduler` Lease
//! and schedules while it leads, so two servers never both bind a pod.

pub mod cache;
pub mod config;
pub mod cycle;
pub mod explain;
pub mod framework;
pub mod nominator;
pub mod plugins;
pub mod preemption;
pub mod profile;
pub mod queue;
mod scheduler;

use std::sync::Arc;

use kube::Client;
use rudder_runtime::clock::{self, Timer};
use rudder_runtime::{LeaderElector, LeaseConfig, identity};
use tokio_util::sync::CancellationToken;

pub use profile::Profile;

/// How the scheduler runs.
#[derive(Debug, Clone)]
pub struct Options {
    /// Leader election; `None` schedules at once, unelected.
    pub lease: Option<LeaseConfig>,
    /// This scheduler's identity (`<hostname>_<uuid>`), for the Lease and
    /// events.
    pub identity: String,
}

impl Default for Options {
    fn default() -> Self {
        let identity = identity();
        Options {
            lease: Some(LeaseConfig::new("kube-scheduler", &identity)),
            identity,
        }
    }
}

/// The scheduler.
pub struct Scheduler {
    client: Client,
    options: Options,
    profiles: Vec<Profile>,
    backoff: queue::Backoff,
    clock: Arc<dyn Timer>,
}

impl std::fmt::Debug for Scheduler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scheduler")
            .field("options", &self.options)
            .field("profiles", &self.profiles)
            .finish_non_exhaustive()
    }
}

impl Scheduler {
    /// A scheduler with upstream's default profile.
    pub fn new(client: Client, options: Options) -> Self {
        let profiles = vec![Profile::default_profile(Some(client.clone()))];
        Scheduler {
            client,
            options,
            profiles,
            backoff: queue::Backoff::default(),
            clock: clock::system(),
        }
    }

    /// The same as a configuration file says: its profiles, percentages
    /// of nodes to score and backoff. Fails on a plugin that does not
    /// exist or does not serve the extension point it is enabled at.
    pub fn with_config(
        mut self,
        config: &config::Configuration,
    ) -> Result<Self, config::ConfigError> {
        self.profiles = Profile::all_from_config(config, Some(self.client.clone()))?;
        self.backoff = queue::Backoff {
            initial: config.pod_initial_backoff,
            max: config.pod_max_backoff,
        };
        Ok(self)
    }

    /// The same with other profiles.
    pub fn with_profiles(mut self, profiles: Vec<Profile>) -> Self {
        self.profiles = profiles;
        self
    }

    /// Schedules while this scheduler leads, until `stop` fires.
    pub async fn run(self, stop: CancellationToken) {
        let Scheduler {
            client,
            options,
            profiles,
            backoff,
            clock,
        } = self;
        let lead = {
            let (client, profiles, identity) =
                (client.clone(), profiles.clone(), options.identity.clone());
            move |leading: CancellationToken| {
                let (client, profiles, identity) =
                    (client.clone(), profiles.clone(), identity.clone());
                async move { scheduler::run(client, profiles, &identity, backoff, leading).await }
            }
        };
        match options.lease {
            Some(lease) => {
                LeaderElector::new(client, lease, clock)
                    .run(stop, lead)
                    .await
            }
            None => lead(stop).await,
        }
    }
}
