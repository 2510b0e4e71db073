//! The namespace controller (upstream's `pkg/controller/namespace`): a
//! namespace being deleted has everything in it deleted — every namespaced
//! resource discovery lists, built-in or custom, each object's own
//! finalizers honoured — while its conditions say how far that got; then
//! the `kubernetes` finalizer is removed from its `spec.finalizers`
//! (`PUT namespaces/<name>/finalize`) and the API server removes it.
//!
//! Unlike upstream it does not wait 5 s before starting: upstream gives its
//! API servers' admission caches time to see the deletion, but rudder's
//! NamespaceLifecycle check reads the namespace from the store itself.

pub mod conditions;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Namespace;
use kube::ResourceExt;
use kube::api::{
    Api, DeleteParams, DynamicObject, ListParams, PartialObjectMeta, PostParams, PropagationPolicy,
};
use kube::discovery::verbs;
use rudder_runtime::controller::{Action, run_workers};
use rudder_runtime::queue::RateLimiter;
use rudder_runtime::{Change, WorkQueue};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use self::conditions::Found;
use crate::Context;
use crate::discovery::{Resource, Resources};

/// The finalizer this controller owns.
pub const FINALIZER: &str = "kubernetes";
/// Resources of a namespace emptied at once.
pub const CONCURRENT_RESOURCES: usize = 8;
/// How long to wait for objects held by finalizers (upstream's
/// `finalizerEstimateSeconds`).
const FINALIZER_ESTIMATE: u64 = 15;

/// An error of one namespace deletion pass.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{what}: {source}")]
    Api {
        what: String,
        #[source]
        source: kube::Error,
    },
    #[error("{0}")]
    Content(String),
}

fn api_error(what: impl Into<String>) -> impl FnOnce(kube::Error) -> Error {
    let what = what.into();
    move |source| Error::Api { what, source }
}

/// Runs the namespace controller until `stop` fires.
pub async fn run(ctx: Arc<Context>, stop: CancellationToken) {
    // Upstream retries a namespace at least every minute.
    let limiter = RateLimiter::new(
        rudder_runtime::queue::BASE_DELAY,
        Duration::from_secs(60),
        rudder_runtime::queue::RETRY_QPS,
        rudder_runtime::queue::RETRY_BURST,
    );
    let queue: WorkQueue<String> = WorkQueue::with_limiter(ctx.clock.clone(), limiter);
    let informer = ctx.informers.typed::<Namespace>();
    let mut changes = informer.subscribe();
    let store = informer.store();
    let enqueue = {
        let queue = queue.clone();
        move |namespace: &Namespace| {
            if namespace.metadata.deletion_timestamp.is_some() {
                queue.add(namespace.name_any());
            }
        }
    };
    for namespace in store.list() {
        enqueue(&namespace);
    }
    let watch = {
        let (stop, store) = (stop.clone(), store.clone());
        async move {
            loop {
                match changes.next_until(&stop).await {
                    None => return,
                    // Its own status writes (the conditions) bring nothing
                    // new: only a change of what deletion depends on does.
                    Some(Change::Applied {
                        old: Some(old),
                        new,
                    }) if old.metadata.deletion_timestamp == new.metadata.deletion_timestamp
                        && old.metadata.finalizers == new.metadata.finalizers
                        && old.spec == new.spec => {}
                    Some(Change::Applied { new, .. }) => enqueue(&new),
                    Some(Change::Deleted(_)) => {}
                    Some(Change::Resync) => store.list().iter().for_each(|n| enqueue(n)),
                }
            }
        }
    };
    let workers = ctx.options.namespace_workers;
    let reconcile = {
        let ctx = ctx.clone();
        move |name: String| {
            let ctx = ctx.clone();
            async move { sync(&ctx, &name).await }
        }
    };
    tokio::join!(
        watch,
        run_workers("namespace", queue, workers, stop, reconcile)
    );
}

/// One pass over a namespace being deleted (upstream's
/// `NamespacedResourcesDeleter.Delete`).
async fn sync(ctx: &Context, name: &str) -> Result<Action, Error> {
    let api: Api<Namespace> = Api::all(ctx.client.clone());
    let Some(namespace) = api
        .get_opt(name)
        .await
        .map_err(api_error(format!("get namespace {name}")))?
    else {
        return Ok(Action::Done);
    };
    let Some(deleted_at) = namespace.metadata.deletion_timestamp.clone() else {
        return Ok(Action::Done);
    };
    let spec_finalizers = namespace
        .spec
        .as_ref()
        .and_then(|s| s.finalizers.clone())
        .unwrap_or_default();
    if !spec_finalizers.iter().any(|f| f == FINALIZER) {
        return Ok(Action::Done);
    }
    let (found, estimate) = delete_content(ctx, name, &deleted_at).await;
    update_conditions(ctx, &namespace, &found).await?;
    if !found.content_failures.is_empty() {
        return Err(Error::Content(found.content_failures.join(", ")));
    }
    if let Some(estimate) = estimate {
        // Upstream looks again after half the estimate.
        return Ok(Action::RequeueAfter(Duration::from_secs(estimate / 2 + 1)));
    }
    finalize(ctx, &namespace).await?;
    Ok(Action::Done)
}

/// Deletes everything in the namespace; returns what is left and, if it
/// must wait for it, roughly how many seconds.
async fn delete_content(
    ctx: &Context,
    namespace: &str,
    deleted_at: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Time,
) -> (Found, Option<u64>) {
    let mut found = Found::default();
    let resources = match Resources::discover(&ctx.client).await {
        Ok(resources) => resources,
        Err(error) => {
            found.discovery_failure = Some(error.to_string());
            found
                .content_failures
                .push(format!("discovery failed: {error}"));
            return (found, None);
        }
    };
    let deletable: Vec<Resource> = resources
        .preferred()
        .iter()
        .filter(|r| r.namespaced && r.supports(verbs::DELETE))
        .cloned()
        .collect();
    let elapsed = ctx
        .clock
        .now()
        .duration_since(std::time::SystemTime::from(deleted_at.0))
        .unwrap_or_default()
        .as_secs();
    let mut estimate: Option<u64> = None;
    let passes = deletable.into_iter().map(|resource| async move {
        let outcome = delete_resource(ctx, namespace, &resource, elapsed).await;
        (resource, outcome)
    });
    let outcomes: Vec<_> = futures::stream::iter(passes)
        .buffered(CONCURRENT_RESOURCES)
        .collect()
        .await;
    for (resource, outcome) in outcomes {
        match outcome {
            Ok(left) => {
                if left.count > 0 {
                    found.remaining.insert(resource.qualified(), left.count);
                    for (finalizer, count) in left.finalizers {
                        *found.finalizers.entry(finalizer).or_insert(0) += count;
                    }
                }
                if let Some(seconds) = left.estimate {
                    estimate = Some(estimate.unwrap_or(0).max(seconds));
                }
            }
            Err(error) => found.content_failures.push(error.to_string()),
        }
    }
    (found, estimate)
}

/// What is left of one resource after its delete.
#[derive(Debug, Default)]
struct Left {
    count: usize,
    finalizers: BTreeMap<String, usize>,
    estimate: Option<u64>,
}

/// Deletes one resource's objects in the namespace (deletecollection
/// where served, else one by one, in the background), then counts what is
/// left (upstream's `deleteAllContentForGroupVersionResource`).
async fn delete_resource(
    ctx: &Context,
    namespace: &str,
    resource: &Resource,
    elapsed: u64,
) -> Result<Left, Error> {
    let qualified = resource.qualified();
    let api: Api<PartialObjectMeta<DynamicObject>> =
        Api::namespaced_with(ctx.client.clone(), namespace, &resource.api);
    let objects: Api<DynamicObject> =
        Api::namespaced_with(ctx.client.clone(), namespace, &resource.api);
    // Pods still running get their grace period before counting as stuck.
    let mut grace_estimate = 0u64;
    if resource.api.group.is_empty() && resource.api.plural == "pods" {
        let pods: Api<k8s_openapi::api::core::v1::Pod> =
            Api::namespaced(ctx.client.clone(), namespace);
        let listed = pods
            .list(&ListParams::default())
            .await
            .map_err(api_error(format!("list {qualified}")))?;
        for pod in listed.items {
            let phase = pod
                .status
                .as_ref()
                .and_then(|s| s.phase.clone())
                .unwrap_or_default();
            if phase == "Succeeded" || phase == "Failed" {
                continue;
            }
            let grace = pod
                .spec
                .as_ref()
                .and_then(|s| s.termination_grace_period_seconds)
                .unwrap_or(0);
            grace_estimate = grace_estimate.max(grace.max(0) as u64);
        }
        if elapsed >= grace_estimate {
            grace_estimate = 0;
        }
    }
    let background = DeleteParams {
        propagation_policy: Some(PropagationPolicy::Background),
        ..DeleteParams::default()
    };
    if resource.supports(verbs::DELETE_COLLECTION) {
        match objects
            .delete_collection(&background, &ListParams::default())
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if matches!(status.code, 404 | 405) => {}
            Err(e) => return Err(api_error(format!("delete collection {qualified}"))(e)),
        }
    } else {
        let listed = api
            .list(&ListParams::default())
            .await
            .map_err(api_error(format!("list {qualified}")))?;
        for object in listed.items {
            match objects.delete(&object.name_any(), &background).await {
                Ok(_) => {}
                Err(kube::Error::Api(status)) if matches!(status.code, 404 | 405) => {}
                Err(e) => return Err(api_error(format!("delete {qualified}"))(e)),
            }
        }
    }
    let listed = api
        .list(&ListParams::default())
        .await
        .map_err(api_error(format!("list {qualified}")))?;
    let mut left = Left {
        count: listed.items.len(),
        ..Left::default()
    };
    if left.count == 0 {
        return Ok(left);
    }
    for object in &listed.items {
        for finalizer in object.finalizers() {
            *left.finalizers.entry(finalizer.clone()).or_insert(0) += 1;
        }
    }
    left.estimate = if grace_estimate > 0 {
        Some(grace_estimate)
    } else if !left.finalizers.is_empty() {
        Some(FINALIZER_ESTIMATE)
    } else {
        return Err(Error::Content(format!(
            "unexpected items still remain in namespace: {namespace} for gvr: {}/{}, Resource={}",
            resource.api.group, resource.api.version, resource.api.plural
        )));
    };
    Ok(left)
}

/// Writes the conditions if they changed (a failure is only logged, as
/// upstream).
async fn update_conditions(
    ctx: &Context,
    namespace: &Namespace,
    found: &Found,
) -> Result<(), Error> {
    let name = namespace.name_any();
    let now = ctx.clock.now_rfc3339();
    let mut list: Vec<Value> = namespace
        .status
        .as_ref()
        .and_then(|s| s.conditions.clone())
        .map(|c| {
            c.iter()
                .filter_map(|c| serde_json::to_value(c).ok())
                .collect()
        })
        .unwrap_or_default();
    let mut changed = false;
    for wanted in conditions::conditions(found) {
        changed |= rudder_runtime::meta::set_condition(&mut list, &wanted, &now);
    }
    if !changed {
        return Ok(());
    }
    let api: Api<Namespace> = Api::all(ctx.client.clone());
    let patch = json!({"status": {"conditions": list}});
    if let Err(error) = api
        .patch_status(
            &name,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&patch),
        )
        .await
    {
        tracing::info!(namespace = %name, %error, "couldn't update status condition for namespace");
    }
    Ok(())
}

/// Removes `kubernetes` from the namespace's `spec.finalizers`; the API
/// server removes the namespace when none is left.
async fn finalize(ctx: &Context, namespace: &Namespace) -> Result<(), Error> {
    let name = namespace.name_any();
    let api: Api<Namespace> = Api::all(ctx.client.clone());
    let mut current = namespace.clone();
    for _ in 0..5 {
        let mut finalizers: Vec<String> = current
            .spec
            .as_ref()
            .and_then(|s| s.finalizers.clone())
            .unwrap_or_default()
            .into_iter()
            .filter(|f| f != FINALIZER)
            .collect();
        finalizers.sort();
        finalizers.dedup();
        current.spec.get_or_insert_with(Default::default).finalizers = Some(finalizers);
        match api
            .replace_subresource("finalize", &name, &PostParams::default(), &current)
            .await
        {
            Ok(_) => return Ok(()),
            Err(kube::Error::Api(status)) if status.code == 404 => return Ok(()),
            Err(kube::Error::Api(status)) if status.code == 409 => {
                match api
                    .get_opt(&name)
                    .await
                    .map_err(api_error(format!("get namespace {name}")))?
                {
                    Some(fresh) => current = fresh,
                    None => return Ok(()),
                }
            }
            Err(e) => return Err(api_error(format!("finalize namespace {name}"))(e)),
        }
    }
    Err(Error::Content(format!(
        "finalize namespace {name}: conflicts kept coming"
    )))
}
