//! `rudder explain pod NAME`: why a pod is Pending, or would go where it
//! went — every node with each scheduler plugin's verdict and score,
//! computed here with the scheduler's own plugins and default profile from
//! what the API shows (nodes and the pods bound to them), through the
//! user's kubeconfig: no scheduler logs needed.

use std::sync::Arc;

use anyhow::Context;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, ListParams};
use rudder_scheduler::cache::Cache;
use rudder_scheduler::framework::{Listers, PodInfo, VolumeListers};

#[derive(Debug, clap::Args)]
pub struct ExplainArgs {
    /// What to explain: `pod`.
    pub kind: String,
    /// The pod's name.
    pub name: String,
    /// Its namespace.
    #[arg(short, long, default_value = "default")]
    pub namespace: String,
    /// The kubeconfig to reach the cluster with (default: $KUBECONFIG, then
    /// ~/.kube/config).
    #[arg(long)]
    pub kubeconfig: Option<std::path::PathBuf>,
    /// The scheduler's `KubeSchedulerConfiguration`, when the server runs
    /// with one (`--scheduler-config`): the pod's profile is taken from it.
    #[arg(long)]
    pub scheduler_config: Option<std::path::PathBuf>,
}

pub async fn run(args: ExplainArgs) -> anyhow::Result<()> {
    anyhow::ensure!(
        matches!(args.kind.as_str(), "pod" | "pods" | "po"),
        "only pods can be explained (got {:?})",
        args.kind
    );
    let config = match &args.kubeconfig {
        Some(path) => {
            let kubeconfig = kube::config::Kubeconfig::read_from(path)
                .with_context(|| format!("read {}", path.display()))?;
            kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await?
        }
        None => kube::Config::infer().await?,
    };
    let client = kube::Client::try_from(config)?;
    let pod = Api::<Pod>::namespaced(client.clone(), &args.namespace)
        .get(&args.name)
        .await
        .with_context(|| format!("get pod {}/{}", args.namespace, args.name))?;
    let mut cache = Cache::new();
    for node in Api::<Node>::all(client.clone())
        .list(&ListParams::default())
        .await
        .context("list nodes")?
    {
        cache.set_node(Arc::new(node));
    }
    let key = format!("{}/{}", args.namespace, args.name);
    for p in Api::<Pod>::all(client.clone())
        .list(&ListParams::default())
        .await
        .context("list pods")?
    {
        let finished = matches!(
            p.status.as_ref().and_then(|s| s.phase.as_deref()),
            Some("Succeeded" | "Failed")
        );
        let this = p.metadata.namespace.as_deref() == Some(args.namespace.as_str())
            && p.metadata.name.as_deref() == Some(args.name.as_str());
        if !finished && !this {
            cache.set_pod(Arc::new(p));
        }
    }
    // What some plugins read beside nodes and pods: namespaces' labels,
    // the Services and controllers selecting a pod, volumes and claims.
    let stop = tokio_util::sync::CancellationToken::new();
    let informers = rudder_runtime::Informers::new(client.clone(), stop.clone());
    cache.set_listers(Arc::new(Listers::start(&informers).await));
    let volumes = Arc::new(VolumeListers::start(&informers).await);
    let snapshot = cache.snapshot().with_volumes(volumes);
    stop.cancel();
    let bound = pod.spec.as_ref().and_then(|s| s.node_name.clone());
    let wanted = pod
        .spec
        .as_ref()
        .and_then(|s| s.scheduler_name.clone())
        .unwrap_or_else(|| rudder_scheduler::profile::DEFAULT_SCHEDULER_NAME.into());
    let profile = match &args.scheduler_config {
        None => rudder_scheduler::Profile::default_profile(None),
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("read {}", path.display()))?;
            let config = rudder_scheduler::config::Configuration::parse(&text)?;
            rudder_scheduler::Profile::all_from_config(&config, None)?
                .into_iter()
                .find(|p| p.scheduler_name == wanted)
                .with_context(|| {
                    format!(
                        "{} has no profile for scheduler {wanted:?}, which the pod names",
                        path.display()
                    )
                })?
        }
    };
    let explanation =
        rudder_scheduler::explain::explain(&profile, &PodInfo::new(Arc::new(pod)), &snapshot);
    if let Some(node) = bound {
        println!("{key} is bound to {node}; as the cluster stands now:");
    }
    print!("{explanation}");
    Ok(())
}
