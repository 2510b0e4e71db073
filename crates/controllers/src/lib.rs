//! The controller manager: upstream's kube-controller-manager, one module
//! per controller, every one of the same shape — what it watches (shared
//! informers from [`rudder_runtime`]), a reconcile function, its tests.
//!
//! [`ControllerManager::run`] competes for the
//! `kube-system/kube-controller-manager` Lease and, while it leads, runs
//! every controller of [`CONTROLLERS`] on one [`Context`]. It talks to the
//! API server only through its `kube::Client` (in-process in
//! `rudder server`, HTTPS elsewhere), as `system:kube-controller-manager`.
//!
//! To add a controller: copy the module of one that watches what yours
//! watches — `ttl.rs` (one resource), `job/` (an owner and its pods, with
//! expectations), `garbagecollector/` (every resource) — give it a
//! `run(Arc<Context>, CancellationToken)` ending in `serve`, and list it
//! in [`CONTROLLERS`]. `docs/controllers.md` lists them all.

pub mod certificates;
mod controller_ref;
pub mod cronjob;
pub mod daemonset;
pub mod deployment;
pub mod discovery;
pub mod disruption;
pub mod dnsendpoints;
pub mod endpoints;
pub mod garbagecollector;
pub mod job;
pub mod namespace;
pub mod nodeipam;
pub mod nodelifecycle;
pub mod podgc;
pub mod replicaset;
pub mod resourcequota;
pub mod serviceaccount;
pub mod servicelb;
pub mod statefulset;
pub mod ttl;
pub mod volume;

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use kube::Client;
use rudder_runtime::clock::{self, Timer};
use rudder_runtime::{Informers, LeaderElector, LeaseConfig};
use tokio_util::sync::CancellationToken;

/// What every controller shares while the manager leads.
pub struct Context {
    pub client: Client,
    pub informers: Informers,
    pub clock: Arc<dyn Timer>,
    pub options: Options,
    /// This manager's identity (`<hostname>_<uuid>`), for events.
    pub identity: String,
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("identity", &self.identity)
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

/// How the controllers run.
#[derive(Debug, Clone)]
pub struct Options {
    /// Workers deleting dependents, and as many orphaning them
    /// (upstream's `--concurrent-gc-syncs`).
    pub gc_workers: usize,
    /// Namespaces deleted at once (`--concurrent-namespace-syncs`).
    pub namespace_workers: usize,
    /// ReplicaSets (and ReplicationControllers) synced at once
    /// (`--concurrent-replicaset-syncs`, `--concurrent-rc-syncs`).
    pub replicaset_workers: usize,
    /// Deployments synced at once (`--concurrent-deployment-syncs`).
    pub deployment_workers: usize,
    /// How often node health is looked at (`--node-monitor-period`).
    pub node_monitor_period: Duration,
    /// How long a node may go unheard before it is NotReady/Unknown
    /// (`--node-monitor-grace-period`).
    pub node_monitor_grace_period: Duration,
    /// The same for a node that never reported
    /// (`--node-startup-grace-period`).
    pub node_startup_grace_period: Duration,
    /// The CIDR node pod ranges are cut from (`--cluster-cidr`).
    pub cluster_cidr: String,
    /// The size of each Node's range (`--node-cidr-mask-size`).
    pub node_cidr_mask: u8,
    /// PodDisruptionBudgets synced at once.
    pub disruption_workers: usize,
    /// DaemonSets synced at once (`--concurrent-daemonset-syncs`).
    pub daemonset_workers: usize,
    /// StatefulSets synced at once (`--concurrent-statefulset-syncs`).
    pub statefulset_workers: usize,
    /// ResourceQuotas counted at once (`--concurrent-resource-quota-syncs`).
    pub resource_quota_workers: usize,
    /// Jobs synced at once (`--concurrent-job-syncs`).
    pub job_workers: usize,
    /// Finished Jobs looked at once for their TTL
    /// (`--concurrent-ttl-after-finished-syncs`).
    pub ttl_workers: usize,
    /// Finished pods kept before the oldest are deleted
    /// (`--terminated-pod-gc-threshold`).
    pub terminated_pod_gc_threshold: usize,
    /// CronJobs synced at once (`--concurrent-cron-job-syncs`).
    pub cronjob_workers: usize,
    /// Services whose endpoints are synced at once
    /// (`--concurrent-endpoint-syncs`).
    pub endpoint_workers: usize,
    /// How often the garbage collector looks for new resources (CRDs).
    pub discovery_every: Duration,
    /// The cluster's CA bundle (PEM), published in every namespace as the
    /// `kube-root-ca.crt` ConfigMap; `None` publishes nothing.
    pub root_ca: Option<String>,
    /// The CA that signs approved CertificateSigningRequests
    /// (`--cluster-signing-cert-file`, `--cluster-signing-key-file`);
    /// `None` signs nothing.
    pub signing_ca: Option<certificates::SigningCa>,
    /// The longest certificate the signer issues
    /// (`--cluster-signing-duration`).
    pub cluster_signing_duration: Duration,
    /// Leader election; `None` runs the controllers at once, unelected.
    pub lease: Option<LeaseConfig>,
    /// Controllers not started, by their name in [`CONTROLLERS`]
    /// (`--disable-servicelb` puts `service-lb-controller` here).
    pub disabled: std::collections::BTreeSet<String>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            gc_workers: 20,
            namespace_workers: 10,
            replicaset_workers: 5,
            deployment_workers: 5,
            job_workers: 5,
            resource_quota_workers: 5,
            statefulset_workers: 5,
            daemonset_workers: 2,
            disruption_workers: 2,
            node_monitor_period: nodelifecycle::MONITOR_PERIOD,
            node_monitor_grace_period: nodelifecycle::GRACE_PERIOD,
            node_startup_grace_period: nodelifecycle::STARTUP_GRACE_PERIOD,
            cluster_cidr: rudder_api::network::CLUSTER_CIDR.into(),
            node_cidr_mask: 24,
            endpoint_workers: 5,
            cronjob_workers: 5,
            ttl_workers: 5,
            terminated_pod_gc_threshold: 12_500,
            root_ca: None,
            signing_ca: None,
            cluster_signing_duration: certificates::signer::DEFAULT_DURATION,
            discovery_every: Duration::from_secs(30),
            lease: Some(LeaseConfig::new("kube-controller-manager", &identity())),
            disabled: std::collections::BTreeSet::new(),
        }
    }
}

pub use rudder_runtime::identity;

/// A controller: started with the shared context, running until its token
/// is cancelled.
pub type Start = fn(Arc<Context>, CancellationToken) -> BoxFuture<'static, ()>;

/// Every controller the manager runs, by upstream's name.
pub const CONTROLLERS: &[(&str, Start)] = &[
    ("garbage-collector-controller", |ctx, stop| {
        Box::pin(garbagecollector::run(ctx, stop))
    }),
    ("namespace-controller", |ctx, stop| {
        Box::pin(namespace::run(ctx, stop))
    }),
    ("replicaset-controller", |ctx, stop| {
        Box::pin(replicaset::run(ctx, stop))
    }),
    ("replicationcontroller-controller", |ctx, stop| {
        Box::pin(replicaset::run_replication_controllers(ctx, stop))
    }),
    ("deployment-controller", |ctx, stop| {
        Box::pin(deployment::run(ctx, stop))
    }),
    ("daemonset-controller", |ctx, stop| {
        Box::pin(daemonset::run(ctx, stop))
    }),
    ("statefulset-controller", |ctx, stop| {
        Box::pin(statefulset::run(ctx, stop))
    }),
    ("job-controller", |ctx, stop| Box::pin(job::run(ctx, stop))),
    ("cronjob-controller", |ctx, stop| {
        Box::pin(cronjob::run(ctx, stop))
    }),
    ("disruption-controller", |ctx, stop| {
        Box::pin(disruption::run(ctx, stop))
    }),
    ("node-lifecycle-controller", |ctx, stop| {
        Box::pin(nodelifecycle::run(ctx, stop))
    }),
    ("node-ipam-controller", |ctx, stop| {
        Box::pin(nodeipam::run(ctx, stop))
    }),
    ("ttl-after-finished-controller", |ctx, stop| {
        Box::pin(ttl::run(ctx, stop))
    }),
    ("pod-garbage-collector-controller", |ctx, stop| {
        Box::pin(podgc::run(ctx, stop))
    }),
    // One controller here for upstream's endpoints-controller,
    // endpointslice-controller and endpointslice-mirroring-controller.
    ("endpoints-controller", |ctx, stop| {
        Box::pin(endpoints::run(ctx, stop))
    }),
    ("resourcequota-controller", |ctx, stop| {
        Box::pin(resourcequota::run(ctx, stop))
    }),
    ("serviceaccount-controller", |ctx, stop| {
        Box::pin(serviceaccount::run(ctx, stop))
    }),
    ("root-ca-certificate-publisher-controller", |ctx, stop| {
        Box::pin(serviceaccount::run_root_ca_publisher(ctx, stop))
    }),
    ("persistentvolume-binder-controller", |ctx, stop| {
        Box::pin(volume::run(ctx, stop))
    }),
    (
        "certificatesigningrequest-signing-controller",
        |ctx, stop| Box::pin(certificates::run_signer(ctx, stop)),
    ),
    (
        "certificatesigningrequest-approving-controller",
        |ctx, stop| Box::pin(certificates::run_approver(ctx, stop)),
    ),
    // The cluster DNS Service's endpoints: the nodes whose DNS serves.
    ("dns-endpoints-controller", |ctx, stop| {
        Box::pin(dnsendpoints::run(ctx, stop))
    }),
    // k3s's ServiceLB, without its pods.
    ("service-lb-controller", |ctx, stop| {
        Box::pin(servicelb::run(ctx, stop))
    }),
];

/// The controller manager.
pub struct ControllerManager {
    client: Client,
    options: Options,
    clock: Arc<dyn Timer>,
}

impl std::fmt::Debug for ControllerManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ControllerManager")
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl ControllerManager {
    pub fn new(client: Client, options: Options) -> Self {
        ControllerManager {
            client,
            options,
            clock: clock::system(),
        }
    }

    /// The same, on `clock` (a fake one in tests).
    pub fn with_clock(mut self, clock: Arc<dyn Timer>) -> Self {
        self.clock = clock;
        self
    }

    /// Runs the controllers while this manager leads, until `stop` fires.
    pub async fn run(self, stop: CancellationToken) {
        let ControllerManager {
            client,
            options,
            clock,
        } = self;
        let identity = options
            .lease
            .as_ref()
            .map(|l| l.identity.clone())
            .unwrap_or_else(self::identity);
        let lead = {
            let (client, options, clock, identity) = (
                client.clone(),
                options.clone(),
                clock.clone(),
                identity.clone(),
            );
            move |leading: CancellationToken| {
                let context = Arc::new(Context {
                    informers: Informers::new(client.clone(), leading.clone()),
                    client: client.clone(),
                    clock: clock.clone(),
                    options: options.clone(),
                    identity: identity.clone(),
                });
                run_controllers(context, leading)
            }
        };
        match options.lease.clone() {
            Some(lease) => {
                LeaderElector::new(client, lease, clock)
                    .run(stop, lead)
                    .await
            }
            None => lead(stop).await,
        }
    }
}

/// The end of every controller's `run`: `workers` workers reconciling
/// `queue` with `sync`, beside its `watch` loop (informer changes to queue
/// keys) and its event recorder's series tending, until `stop` fires.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn serve<C, F, Fut, E>(
    name: &'static str,
    controller: Arc<C>,
    queue: rudder_runtime::WorkQueue<String>,
    workers: usize,
    recorder: Option<rudder_runtime::Recorder>,
    watch: impl std::future::Future<Output = ()>,
    stop: CancellationToken,
    sync: F,
) where
    C: Send + Sync + 'static,
    F: Fn(Arc<C>, String) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = Result<rudder_runtime::Action, E>> + Send,
    E: std::fmt::Display + Send,
{
    let events = {
        let stop = stop.clone();
        async move {
            if let Some(recorder) = recorder {
                recorder.run(stop).await;
            }
        }
    };
    let reconcile = move |key: String| sync(controller.clone(), key);
    tokio::join!(
        watch,
        events,
        rudder_runtime::run_workers(name, queue, workers, stop, reconcile)
    );
}

/// An error of one reconcile pass of a controller that works on an API
/// object and what it owns.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{what}: {source}")]
    Api {
        what: String,
        #[source]
        source: kube::Error,
    },
    #[error("{0}")]
    Failed(String),
}

/// Turns an API error into [`Error::Api`], saying what was being done.
pub(crate) fn api_error(what: impl Into<String>) -> impl FnOnce(kube::Error) -> Error {
    let what = what.into();
    move |source| Error::Api { what, source }
}

/// Whether `error` is an API error with `code`.
pub(crate) fn is_status(error: &kube::Error, code: u16) -> bool {
    matches!(error, kube::Error::Api(status) if status.code == code)
}

/// The message of an API error as events and conditions show it.
pub(crate) fn failure_message(error: &kube::Error) -> String {
    match error {
        kube::Error::Api(status) => status.message.clone(),
        other => other.to_string(),
    }
}

/// Starts every controller and waits until they stop.
async fn run_controllers(context: Arc<Context>, stop: CancellationToken) {
    let mut tasks = tokio::task::JoinSet::new();
    for (name, start) in CONTROLLERS {
        if context.options.disabled.contains(*name) {
            tracing::info!(controller = name, "disabled");
            continue;
        }
        tracing::info!(controller = name, "starting");
        tasks.spawn(start(context.clone(), stop.clone()));
    }
    while tasks.join_next().await.is_some() {}
}
