//! What every namespace gets (upstream's `serviceaccount-controller` and
//! `root-ca-cert-publisher`): the `default` ServiceAccount, and the
//! `kube-root-ca.crt` ConfigMap holding the cluster's CA bundle so pods can
//! verify the API server. Both are put back if deleted, the ConfigMap also
//! if changed; a namespace being deleted gets neither.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace, ServiceAccount};
use kube::ResourceExt;
use kube::api::{Api, PostParams};
use rudder_runtime::controller::{Action, run_workers};
use rudder_runtime::informer::Store;
use rudder_runtime::{Change, WorkQueue};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::Context;
use crate::is_status;

/// The ServiceAccount every namespace has.
pub const DEFAULT_ACCOUNT: &str = "default";
/// The ConfigMap with the cluster's CA bundle.
pub const ROOT_CA_CONFIG_MAP: &str = "kube-root-ca.crt";
/// Upstream's description of it.
const DESCRIPTION: &str = "Contains a CA bundle that can be used to verify the kube-apiserver when using internal endpoints such as the internal service IP or kubernetes.default.svc. No other usage is guaranteed across distributions of Kubernetes clusters.";

fn active(namespace: &Namespace) -> bool {
    namespace.metadata.deletion_timestamp.is_none()
        && namespace.status.as_ref().and_then(|s| s.phase.as_deref()) != Some("Terminating")
}

/// Runs a per-namespace controller: `sync(namespace)` for every active
/// namespace, again whenever `watched` changes an object in it.
async fn per_namespace<K, F, Fut>(
    ctx: Arc<Context>,
    stop: CancellationToken,
    name: &'static str,
    sync: F,
) where
    K: rudder_runtime::informer::Object + kube::Resource<DynamicType = ()>,
    F: Fn(Arc<Context>, Store<K>, String) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = Result<Action, kube::Error>> + Send,
{
    let namespaces = ctx.informers.typed::<Namespace>();
    let watched = ctx.informers.typed::<K>();
    let mut namespace_changes = namespaces.subscribe();
    let mut changes = watched.subscribe();
    let queue: WorkQueue<String> = WorkQueue::new(ctx.clock.clone());
    namespaces.wait_synced().await;
    watched.wait_synced().await;
    let (namespace_store, store) = (namespaces.store(), watched.store());
    let enqueue_all = {
        let (queue, namespace_store) = (queue.clone(), namespace_store.clone());
        move || {
            for ns in namespace_store.list() {
                if active(&ns) {
                    queue.add(ns.name_any());
                }
            }
        }
    };
    enqueue_all();
    let watch = {
        let (queue, stop) = (queue.clone(), stop.clone());
        async move {
            loop {
                tokio::select! {
                    change = namespace_changes.next_until(&stop) => match change {
                        None => return,
                        Some(Change::Applied { new, .. }) if active(&new) => queue.add(new.name_any()),
                        Some(Change::Resync) => enqueue_all(),
                        Some(_) => {}
                    },
                    change = changes.next_until(&stop) => match change {
                        None => return,
                        Some(Change::Applied { new: object, .. } | Change::Deleted(object)) => {
                            if let Some(ns) = object.namespace() {
                                queue.add(ns);
                            }
                        }
                        Some(Change::Resync) => enqueue_all(),
                    },
                }
            }
        }
    };
    let reconcile = {
        let (ctx, namespace_store) = (ctx.clone(), namespace_store.clone());
        move |namespace: String| {
            let (ctx, store) = (ctx.clone(), store.clone());
            let live = namespace_store
                .get(&namespace)
                .is_some_and(|ns| active(&ns));
            let run = sync(ctx, store, namespace);
            async move { if live { run.await } else { Ok(Action::Done) } }
        }
    };
    tokio::join!(watch, run_workers(name, queue, 1, stop, reconcile));
}

/// Runs the ServiceAccount controller until `stop` fires.
pub async fn run(ctx: Arc<Context>, stop: CancellationToken) {
    per_namespace::<ServiceAccount, _, _>(
        ctx,
        stop,
        "serviceaccount",
        |ctx, store, namespace| async move {
            if store.get_in(Some(&namespace), DEFAULT_ACCOUNT).is_some() {
                return Ok(Action::Done);
            }
            let account: ServiceAccount =
                serde_json::from_value(json!({"metadata": {"name": DEFAULT_ACCOUNT}}))
                    .map_err(kube::Error::SerdeError)?;
            match Api::<ServiceAccount>::namespaced(ctx.client.clone(), &namespace)
                .create(&PostParams::default(), &account)
                .await
            {
                Ok(_) => Ok(Action::Done),
                // There already, or the namespace started terminating.
                Err(e) if is_status(&e, 409) || is_status(&e, 403) || is_status(&e, 404) => {
                    Ok(Action::Done)
                }
                Err(e) => Err(e),
            }
        },
    )
    .await
}

/// Runs the root CA publisher until `stop` fires (nothing without a CA).
pub async fn run_root_ca_publisher(ctx: Arc<Context>, stop: CancellationToken) {
    let Some(ca) = ctx.options.root_ca.clone() else {
        return;
    };
    let ca = Arc::new(ca);
    per_namespace::<ConfigMap, _, _>(ctx, stop, "root-ca-cert-publisher", move |ctx, store, namespace| {
        let ca = ca.clone();
        async move {
            let wanted = |existing: Option<&ConfigMap>| -> Result<ConfigMap, kube::Error> {
                let mut config_map: ConfigMap = serde_json::from_value(json!({
                    "metadata": {"name": ROOT_CA_CONFIG_MAP, "annotations": {"kubernetes.io/description": DESCRIPTION}},
                    "data": {"ca.crt": *ca},
                }))
                .map_err(kube::Error::SerdeError)?;
                if let Some(existing) = existing {
                    // Keep what others added; set what we own.
                    let mut annotations = existing.metadata.annotations.clone().unwrap_or_default();
                    annotations.insert("kubernetes.io/description".into(), DESCRIPTION.into());
                    config_map.metadata = existing.metadata.clone();
                    config_map.metadata.annotations = Some(annotations);
                }
                Ok(config_map)
            };
            let api = Api::<ConfigMap>::namespaced(ctx.client.clone(), &namespace);
            let outcome = match store.get_in(Some(&namespace), ROOT_CA_CONFIG_MAP) {
                None => api.create(&PostParams::default(), &wanted(None)?).await.map(|_| ()),
                Some(existing) => {
                    let data = existing.data.as_ref();
                    let current = data.and_then(|d| d.get("ca.crt")) == Some(&*ca)
                        && data.is_some_and(|d| d.len() == 1)
                        && existing.binary_data.is_none()
                        && existing.annotations().get("kubernetes.io/description").map(String::as_str) == Some(DESCRIPTION);
                    if current {
                        return Ok(Action::Done);
                    }
                    api.replace(ROOT_CA_CONFIG_MAP, &PostParams::default(), &wanted(Some(&existing))?)
                        .await
                        .map(|_| ())
                }
            };
            match outcome {
                Ok(()) => Ok(Action::Done),
                Err(e) if is_status(&e, 409) || is_status(&e, 403) || is_status(&e, 404) => Ok(Action::Done),
                Err(e) => Err(e),
            }
        }
    })
    .await
}
