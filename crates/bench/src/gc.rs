//! The `gc` scenario: the garbage collector and the namespace controller
//! of `rudder server` (release binary, its own process) at scale, each
//! beside the floor they cannot beat — the same number of plain API
//! DELETEs, made in the same run over the same HTTPS connection by as many
//! concurrent clients as the collector has workers.
//!
//! - `api_delete_10k_s`: 10,000 ConfigMaps deleted by 20 concurrent clients.
//! - `gc_background_10k_s`: an owner with 10,000 dependent ConfigMaps
//!   deleted with `propagationPolicy=Background`, until the last dependent
//!   is gone.
//! - `gc_foreground_10k_s`: the same with `Foreground` (dependents block
//!   their owner's deletion), until the owner is gone.
//! - `gc_orphan_10k_s`: the same with `Orphan`, until the owner is gone
//!   (after every dependent lost its reference).
//! - `ns_delete_10k_s`: a namespace holding 10,000 objects of five kinds,
//!   until it is gone.
//!
//! `--quick` runs the same shapes with 1,000 objects.

use std::time::{Duration, Instant};

use anyhow::Context;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, PostParams, PropagationPolicy};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::json;

use crate::Options;
use crate::api::{Server, free_port, rudder_binary};
use crate::report::{Metric, Report};

/// Concurrent clients of the floor: as many as the collector's workers.
const CLIENTS: usize = 20;
/// Creates in flight while a scenario is set up.
const CREATORS: usize = 64;

async fn create_namespace(client: &kube::Client, name: &str) -> anyhow::Result<()> {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": name}}))?;
    namespaces.create(&PostParams::default(), &ns).await?;
    Ok(())
}

/// Creates `count` objects of `resource` in `namespace` from `make(i)`.
async fn create_all(
    client: &kube::Client,
    namespace: &str,
    resource: &ApiResource,
    count: usize,
    make: impl Fn(usize) -> serde_json::Value,
) -> anyhow::Result<()> {
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, resource);
    let objects: Vec<DynamicObject> = (0..count)
        .map(|i| serde_json::from_value(make(i)))
        .collect::<Result<_, _>>()?;
    let results: Vec<kube::Result<DynamicObject>> =
        futures::stream::iter(objects.iter().map(|o| {
            let api = api.clone();
            async move { api.create(&PostParams::default(), o).await }
        }))
        .buffer_unordered(CREATORS)
        .collect()
        .await;
    for result in results {
        result.context("create")?;
    }
    Ok(())
}

fn config_maps() -> ApiResource {
    ApiResource::erase::<ConfigMap>(&())
}

/// An owner and `count` dependent ConfigMaps (labelled `owner=<name>`).
async fn owner_with_dependents(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    count: usize,
) -> anyhow::Result<()> {
    create_namespace(client, namespace).await?;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    let owner: ConfigMap = serde_json::from_value(json!({"metadata": {"name": name}}))?;
    let owner = api.create(&PostParams::default(), &owner).await?;
    let uid = owner.metadata.uid.context("owner uid")?;
    create_all(client, namespace, &config_maps(), count, |i| {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": format!("{name}-{i}"), "labels": {"owner": name},
                            "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": name, "uid": uid, "blockOwnerDeletion": true}]},
               "data": {"index": i.to_string()}})
    })
    .await
}

/// Polls until `done` (every 20 ms, at most 10 minutes).
async fn until<F, Fut>(what: &str, mut done: F) -> anyhow::Result<()>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<bool>>,
{
    let deadline = Instant::now() + Duration::from_secs(600);
    while !done().await? {
        anyhow::ensure!(Instant::now() < deadline, "gave up waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}

/// Whether any dependent of `owner` is left: a list of at most one, so
/// that polling costs the server little while the collector works.
async fn any_left(api: &Api<ConfigMap>, owner: &str) -> anyhow::Result<bool> {
    let params = ListParams::default()
        .labels(&format!("owner={owner}"))
        .limit(1);
    Ok(!api.list_metadata(&params).await?.items.is_empty())
}

/// Deletes the owner with `policy` and times it until `finished`.
async fn cascade(
    client: &kube::Client,
    count: usize,
    policy: PropagationPolicy,
    tag: &str,
) -> anyhow::Result<f64> {
    let namespace = format!("gc-{tag}");
    owner_with_dependents(client, &namespace, "owner", count).await?;
    // Let the collector see every dependent first.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &namespace);
    let began = Instant::now();
    let params = DeleteParams {
        propagation_policy: Some(policy.clone()),
        ..DeleteParams::default()
    };
    api.delete("owner", &params).await?;
    match policy {
        PropagationPolicy::Background => {
            until("the dependents to go", || async {
                Ok(!any_left(&api, "owner").await?)
            })
            .await?
        }
        _ => {
            until("the owner to go", || async {
                Ok(api.get_opt("owner").await?.is_none())
            })
            .await?
        }
    }
    let elapsed = began.elapsed().as_secs_f64();
    match policy {
        PropagationPolicy::Foreground => {
            anyhow::ensure!(
                !any_left(&api, "owner").await?,
                "foreground left dependents"
            )
        }
        PropagationPolicy::Orphan => {
            let listed = api
                .list_metadata(&ListParams::default().labels("owner=owner"))
                .await?;
            anyhow::ensure!(listed.items.len() == count, "orphan lost dependents");
            anyhow::ensure!(
                listed
                    .items
                    .iter()
                    .all(|o| o.metadata.owner_references.is_none()),
                "orphan left owner references"
            );
        }
        _ => {}
    }
    eprintln!("{tag}: {elapsed:.2} s");
    Ok(elapsed)
}

/// `count` ConfigMaps deleted by [`CLIENTS`] concurrent clients.
async fn plain_deletes(client: &kube::Client, count: usize) -> anyhow::Result<f64> {
    create_namespace(client, "floor").await?;
    create_all(client, "floor", &config_maps(), count, |i| {
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": format!("cm-{i}")}, "data": {"index": i.to_string()}})
    })
    .await?;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "floor");
    let began = Instant::now();
    let results: Vec<kube::Result<_>> = futures::stream::iter((0..count).map(|i| {
        let api = api.clone();
        async move {
            api.delete(&format!("cm-{i}"), &DeleteParams::default())
                .await
        }
    }))
    .buffer_unordered(CLIENTS)
    .collect()
    .await;
    for result in results {
        result.context("delete")?;
    }
    let elapsed = began.elapsed().as_secs_f64();
    eprintln!("floor: {elapsed:.2} s");
    Ok(elapsed)
}

/// A namespace with `count` objects of five kinds, deleted.
async fn namespace_delete(client: &kube::Client, count: usize) -> anyhow::Result<f64> {
    let namespace = "ns-doomed";
    create_namespace(client, namespace).await?;
    let each = count / 5;
    let kinds: [(&str, &str, &str, &str); 5] = [
        ("", "v1", "ConfigMap", "configmaps"),
        ("", "v1", "Secret", "secrets"),
        ("", "v1", "ServiceAccount", "serviceaccounts"),
        ("", "v1", "PodTemplate", "podtemplates"),
        ("coordination.k8s.io", "v1", "Lease", "leases"),
    ];
    for (group, version, kind, plural) in kinds {
        let resource =
            ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural);
        let api_version = resource.api_version.clone();
        create_all(client, namespace, &resource, each, |i| {
            let mut object = json!({"apiVersion": api_version, "kind": kind, "metadata": {"name": format!("o-{i}")}});
            match kind {
                "ConfigMap" | "Secret" => object["data"] = json!({"k": "dg=="}),
                "PodTemplate" => {
                    object["template"] = json!({"spec": {"containers": [{"name": "c", "image": "registry.local/app:1"}]}})
                }
                "Lease" => object["spec"] = json!({"holderIdentity": "bench"}),
                _ => {}
            }
            object
        })
        .await?;
    }
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let began = Instant::now();
    namespaces
        .delete(namespace, &DeleteParams::default())
        .await?;
    until("the namespace to go", || async {
        Ok(namespaces.get_opt(namespace).await?.is_none())
    })
    .await?;
    let elapsed = began.elapsed().as_secs_f64();
    eprintln!("namespace: {elapsed:.2} s");
    Ok(elapsed)
}

pub async fn run(options: &Options) -> anyhow::Result<Report> {
    let binary = rudder_binary()?;
    std::fs::create_dir_all(&options.work_dir)?;
    let count = if options.quick { 1_000 } else { 10_000 };
    let dir = tempfile::tempdir_in(&options.work_dir)?;
    let server = Server::start(&binary, dir.path(), free_port()?)?;
    let (client, _) = server.ready(Instant::now()).await?;

    let floor = plain_deletes(&client, count).await?;
    let background = cascade(&client, count, PropagationPolicy::Background, "background").await?;
    let foreground = cascade(&client, count, PropagationPolicy::Foreground, "foreground").await?;
    let orphan = cascade(&client, count, PropagationPolicy::Orphan, "orphan").await?;
    // The orphans go before the namespace figure, which starts from a
    // cluster holding nothing but what it deletes.
    let namespaces: Api<Namespace> = Api::all(client.clone());
    for ns in ["floor", "gc-background", "gc-foreground", "gc-orphan"] {
        namespaces.delete(ns, &DeleteParams::default()).await?;
    }
    for ns in ["floor", "gc-background", "gc-foreground", "gc-orphan"] {
        until("the earlier namespaces to go", || async {
            Ok(namespaces.get_opt(ns).await?.is_none())
        })
        .await?;
    }
    let namespace = namespace_delete(&client, count).await?;

    let within = |value: f64| Metric::new("", "s", value);
    let relative = |name: &str, value: f64| {
        let mut metric = within(value).peer("plain API DELETEs (api_delete_10k_s)", floor);
        metric.name = name.into();
        metric.target("≤ 2× the floor")
    };
    Ok(Report {
        scenario: "gc".into(),
        quick: options.quick,
        partial: None,
        metrics: vec![
            Metric::new("api_delete_10k_s", "s", floor),
            relative("gc_background_10k_s", background),
            relative("gc_foreground_10k_s", foreground),
            relative("gc_orphan_10k_s", orphan),
            relative("ns_delete_10k_s", namespace),
        ],
        conditions: vec![
            format!("`rudder server` (release build, embedded store on {}), its controllers in-process; the bench is a kube-rs client over HTTPS on the same 2 cores", options.work_dir.display()),
            format!("each figure: {count} objects; the floor deletes {count} ConfigMaps with {CLIENTS} concurrent requests (the collector runs 20 delete workers)"),
            "cascades: an owner ConfigMap with dependent ConfigMaps (`blockOwnerDeletion: true`), timed from the owner's DELETE until the last dependent (Background: a list of at most one by label) or the owner (Foreground, Orphan: a GET) is gone, polled every 20 ms".into(),
            "namespace: 2,000 each of ConfigMaps, Secrets, ServiceAccounts, PodTemplates and Leases, timed from the namespace's DELETE until it is gone".into(),
        ],
    })
}
