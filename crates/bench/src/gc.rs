//! The `gc` scenario: the garbage collector and the namespace controller
//! of `rudder server` at scale (its control plane in the bench's process,
//! [`crate::plane`]), each beside a floor that does the same work by plain
//! API requests on the same server, in the same run: the requests the
//! controller makes, from an in-process client as the controller manager
//! (the path the controllers' own client takes), as many in flight as the
//! controller has, after a few hundred untimed ones.
//!
//! - `api_delete_10k_s`: 10,000 dependents deleted as the collector
//!   deletes them (uid and resourceVersion preconditions, background), 20
//!   at once (its delete workers).
//! - `gc_background_10k_s`: an owner with 10,000 dependent ConfigMaps
//!   deleted with `propagationPolicy=Background`, until the last dependent
//!   is gone.
//! - `gc_foreground_10k_s`: the same with `Foreground` (dependents block
//!   their owner's deletion), until the owner is gone.
//! - `api_orphan_10k_s`: 10,000 dependents' owner references removed as
//!   the collector removes them (a strategic merge patch each), 64 at once
//!   (as it orphans one owner's dependents).
//! - `gc_orphan_10k_s`: the owner deleted with `Orphan`, until it is gone
//!   (after every dependent lost its reference).
//! - `api_delete_collection_10k_s`: a namespace's 10,000 objects of five
//!   kinds deleted as the namespace controller deletes them (a DELETE of
//!   each collection, background), the five at once.
//! - `ns_delete_10k_s`: a namespace holding the same 10,000 objects, until
//!   it is gone.
//!
//! `--quick` runs the same shapes with 1,000 objects.

use std::time::{Duration, Instant};

use anyhow::Context;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{
    Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams, Preconditions,
    PropagationPolicy,
};
use kube::core::{ApiResource, GroupVersionKind};
use rudder_apiserver::Identity;
use serde_json::json;

use crate::Options;
use crate::plane::{Plane, Scheduler};
use crate::report::{Metric, Report};

/// Creates in flight while a scenario is set up.
const CREATORS: usize = 64;
/// Requests of each floor made untimed first, so that the timed ones go
/// by a warm path (the controllers' client has been busy since start).
const WARM_UP: usize = 200;

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

/// Lets the controllers see every object just made before the clock
/// starts (the collector's graph takes in each one), for every figure and
/// floor alike.
async fn settle() {
    tokio::time::sleep(Duration::from_secs(2)).await;
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
    settle().await;
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

/// Name, uid and resourceVersion of every dependent of `owner`, in name
/// order (as the collector's graph knows them).
async fn dependents(
    api: &Api<ConfigMap>,
    owner: &str,
) -> anyhow::Result<Vec<(String, String, String)>> {
    let listed = api
        .list_metadata(&ListParams::default().labels(&format!("owner={owner}")))
        .await?;
    let mut found: Vec<(String, String, String)> = listed
        .items
        .into_iter()
        .map(|o| {
            let m = o.metadata;
            (
                m.name.unwrap_or_default(),
                m.uid.unwrap_or_default(),
                m.resource_version.unwrap_or_default(),
            )
        })
        .collect();
    found.sort();
    Ok(found)
}

/// Runs `request` for every item, `in_flight` at once: the first
/// [`WARM_UP`] untimed, then the rest timed (seconds).
async fn timed<T, F, Fut>(
    items: Vec<T>,
    in_flight: usize,
    what: &str,
    request: F,
) -> anyhow::Result<f64>
where
    F: Fn(T) -> Fut,
    Fut: std::future::Future<Output = kube::Result<()>>,
{
    let mut items = items.into_iter();
    let warm: Vec<T> = items.by_ref().take(WARM_UP).collect();
    let run = |batch: Vec<T>| {
        futures::stream::iter(batch.into_iter().map(&request))
            .buffer_unordered(in_flight)
            .collect::<Vec<kube::Result<()>>>()
    };
    for result in run(warm).await {
        result.with_context(|| format!("{what} (warm-up)"))?;
    }
    let began = Instant::now();
    for result in run(items.collect()).await {
        result.with_context(|| what.to_string())?;
    }
    Ok(began.elapsed().as_secs_f64())
}

/// The collector's own DELETE of a dependent (`operations::delete_if_unchanged`).
fn delete_as_collector(uid: String, resource_version: String) -> DeleteParams {
    DeleteParams {
        propagation_policy: Some(PropagationPolicy::Background),
        preconditions: Some(Preconditions {
            uid: Some(uid),
            resource_version: Some(resource_version),
        }),
        ..DeleteParams::default()
    }
}

/// The delete floor: `count` dependents of an owner that stays, deleted
/// as the collector deletes them, `in_flight` at once.
async fn plain_deletes(
    admin: &kube::Client,
    controllers: &kube::Client,
    count: usize,
    in_flight: usize,
) -> anyhow::Result<f64> {
    let namespace = "floor-delete";
    owner_with_dependents(admin, namespace, "owner", WARM_UP + count).await?;
    settle().await;
    let listed = dependents(&Api::namespaced(admin.clone(), namespace), "owner").await?;
    let api: Api<DynamicObject> =
        Api::namespaced_with(controllers.clone(), namespace, &config_maps());
    let elapsed = timed(listed, in_flight, "delete", |(name, uid, rv)| {
        let api = api.clone();
        async move {
            api.delete(&name, &delete_as_collector(uid, rv))
                .await
                .map(drop)
        }
    })
    .await?;
    eprintln!("delete floor: {elapsed:.2} s");
    Ok(elapsed)
}

/// The orphan floor: `count` dependents' references to their owner
/// removed as the collector removes them, `in_flight` at once.
async fn plain_orphans(
    admin: &kube::Client,
    controllers: &kube::Client,
    count: usize,
    in_flight: usize,
) -> anyhow::Result<f64> {
    let namespace = "floor-orphan";
    owner_with_dependents(admin, namespace, "owner", WARM_UP + count).await?;
    settle().await;
    let configmaps: Api<ConfigMap> = Api::namespaced(admin.clone(), namespace);
    let owner = configmaps
        .get("owner")
        .await?
        .metadata
        .uid
        .context("owner uid")?;
    let listed = dependents(&configmaps, "owner").await?;
    let api: Api<DynamicObject> =
        Api::namespaced_with(controllers.clone(), namespace, &config_maps());
    let elapsed = timed(
        listed,
        in_flight,
        "remove an owner reference",
        |(name, uid, _)| {
            let api = api.clone();
            // `operations::patch_owners`: keyed by uid, the dependent's
            // uid as a precondition.
            let patch = json!({"metadata": {"uid": uid, "ownerReferences": [{"$patch": "delete", "uid": owner}]}});
            async move {
                api.patch(&name, &PatchParams::default(), &Patch::Strategic(&patch))
                    .await
                    .map(drop)
            }
        },
    )
    .await?;
    eprintln!("orphan floor: {elapsed:.2} s");
    Ok(elapsed)
}

/// The five kinds a doomed namespace holds.
fn namespace_kinds() -> [ApiResource; 5] {
    [
        ("", "v1", "ConfigMap", "configmaps"),
        ("", "v1", "Secret", "secrets"),
        ("", "v1", "ServiceAccount", "serviceaccounts"),
        ("", "v1", "PodTemplate", "podtemplates"),
        ("coordination.k8s.io", "v1", "Lease", "leases"),
    ]
    .map(|(group, version, kind, plural)| {
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural)
    })
}

/// A namespace with `count` objects, a fifth of each of five kinds.
async fn fill_namespace(
    client: &kube::Client,
    namespace: &str,
    count: usize,
) -> anyhow::Result<()> {
    create_namespace(client, namespace).await?;
    for resource in namespace_kinds() {
        let (api_version, kind) = (resource.api_version.clone(), resource.kind.clone());
        create_all(client, namespace, &resource, count / 5, |i| {
            let mut object = json!({"apiVersion": api_version, "kind": kind, "metadata": {"name": format!("o-{i}")}});
            match kind.as_str() {
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
    Ok(())
}

/// Deletes every collection of the five kinds in `namespace` as the
/// namespace controller does (background), `in_flight` kinds at once.
async fn delete_collections(
    controllers: &kube::Client,
    namespace: &str,
    in_flight: usize,
) -> anyhow::Result<()> {
    let background = DeleteParams {
        propagation_policy: Some(PropagationPolicy::Background),
        ..DeleteParams::default()
    };
    let results: Vec<kube::Result<_>> =
        futures::stream::iter(namespace_kinds().into_iter().map(|resource| {
            let api: Api<DynamicObject> =
                Api::namespaced_with(controllers.clone(), namespace, &resource);
            let background = &background;
            async move {
                api.delete_collection(background, &ListParams::default())
                    .await
            }
        }))
        .buffer_unordered(in_flight)
        .collect()
        .await;
    for result in results {
        result.context("delete a collection")?;
    }
    Ok(())
}

/// The namespace floor: a namespace's `count` objects deleted by the
/// namespace controller's DELETEs of their collections (after the same
/// for a namespace of [`WARM_UP`] objects, untimed).
async fn plain_delete_collections(
    admin: &kube::Client,
    controllers: &kube::Client,
    count: usize,
    in_flight: usize,
) -> anyhow::Result<f64> {
    fill_namespace(admin, "floor-warm", WARM_UP).await?;
    settle().await;
    delete_collections(controllers, "floor-warm", in_flight).await?;
    let namespace = "floor-collections";
    fill_namespace(admin, namespace, count).await?;
    settle().await;
    let began = Instant::now();
    delete_collections(controllers, namespace, in_flight).await?;
    let elapsed = began.elapsed().as_secs_f64();
    eprintln!("delete-collection floor: {elapsed:.2} s");
    Ok(elapsed)
}

/// A namespace with `count` objects of five kinds, deleted.
async fn namespace_delete(client: &kube::Client, count: usize) -> anyhow::Result<f64> {
    let namespace = "ns-doomed";
    fill_namespace(client, namespace, count).await?;
    settle().await;
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

/// Deletes `names` and waits until they are gone.
async fn delete_namespaces(client: &kube::Client, names: &[&str]) -> anyhow::Result<()> {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    for ns in names {
        namespaces.delete(ns, &DeleteParams::default()).await?;
    }
    for ns in names {
        until("the earlier namespaces to go", || async {
            Ok(namespaces.get_opt(ns).await?.is_none())
        })
        .await?;
    }
    Ok(())
}

pub async fn run(options: &Options) -> anyhow::Result<Report> {
    std::fs::create_dir_all(&options.work_dir)?;
    let count = if options.quick { 1_000 } else { 10_000 };
    let dir = tempfile::tempdir_in(&options.work_dir)?;
    let plane = Plane::start(dir.path(), Scheduler::Enabled).await?;
    let admin = plane.admin();
    let controllers = plane.client(&Identity::controller_manager());
    let delete_workers = rudder_controllers::Options::default().gc_workers;
    let orphan_in_flight = rudder_controllers::garbagecollector::ORPHAN_CONCURRENCY;
    let kinds_in_flight = rudder_controllers::namespace::CONCURRENT_RESOURCES.min(5);

    let delete_floor = plain_deletes(&admin, &controllers, count, delete_workers).await?;
    let background = cascade(&admin, count, PropagationPolicy::Background, "background").await?;
    let foreground = cascade(&admin, count, PropagationPolicy::Foreground, "foreground").await?;
    let orphan_floor = plain_orphans(&admin, &controllers, count, orphan_in_flight).await?;
    // Its orphans go first: the cascade starts from the cluster the
    // other two did.
    delete_namespaces(&admin, &["floor-orphan"]).await?;
    let orphan = cascade(&admin, count, PropagationPolicy::Orphan, "orphan").await?;
    // The namespace figures start from a cluster holding nothing but what
    // they delete.
    delete_namespaces(
        &admin,
        &[
            "floor-delete",
            "gc-background",
            "gc-foreground",
            "gc-orphan",
        ],
    )
    .await?;
    let collection_floor =
        plain_delete_collections(&admin, &controllers, count, kinds_in_flight).await?;
    delete_namespaces(&admin, &["floor-warm", "floor-collections"]).await?;
    let namespace = namespace_delete(&admin, count).await?;
    plane.stop().await;

    let against = |name: &str, value: f64, floor: (&str, f64)| {
        Metric::new(name, "s", value)
            .peer(&format!("the same requests, plain ({})", floor.0), floor.1)
            .target("≤ 2× the floor")
    };
    let deletes = ("api_delete_10k_s", delete_floor);
    Ok(Report {
        scenario: "gc".into(),
        quick: options.quick,
        partial: None,
        metrics: vec![
            Metric::new(deletes.0, "s", delete_floor),
            against("gc_background_10k_s", background, deletes),
            against("gc_foreground_10k_s", foreground, deletes),
            Metric::new("api_orphan_10k_s", "s", orphan_floor),
            against("gc_orphan_10k_s", orphan, ("api_orphan_10k_s", orphan_floor)),
            Metric::new("api_delete_collection_10k_s", "s", collection_floor),
            against(
                "ns_delete_10k_s",
                namespace,
                ("api_delete_collection_10k_s", collection_floor),
            ),
        ],
        conditions: vec![
            format!("what `rudder server --disable-agent` runs (release build): the API server (embedded store on {}, its compactor, HTTPS on loopback), the controller manager and the scheduler on in-process clients, here in the bench's own process, on the same 2 cores as the bench; the bench's own requests in-process too", options.work_dir.display()),
            format!("each figure: {count} objects; each floor makes the requests the controller makes for them, from an in-process client as `system:kube-controller-manager` — the path the controllers' own client takes — as many in flight as the controller has, after {WARM_UP} untimed ones, timed from the first request to the last answer"),
            format!("`api_delete_10k_s`: {count} dependent ConfigMaps (of an owner that stays) deleted as the collector deletes them — uid and resourceVersion preconditions, background propagation — {delete_workers} at once (its delete workers), the floor of `gc_background_10k_s` and `gc_foreground_10k_s`"),
            format!("`api_orphan_10k_s`: {count} dependents' references to their owner removed as the collector removes them — a strategic merge patch deleting the reference by uid, the dependent's uid as precondition — {orphan_in_flight} at once (as the collector orphans one owner's dependents), the floor of `gc_orphan_10k_s`"),
            format!("`api_delete_collection_10k_s`: a namespace's {count} objects (a fifth each of ConfigMaps, Secrets, ServiceAccounts, PodTemplates and Leases) deleted as the namespace controller deletes them — a background DELETE of each kind's collection — the five at once (it empties {} kinds at a time), the floor of `ns_delete_10k_s`", rudder_controllers::namespace::CONCURRENT_RESOURCES),
            "every figure and floor starts 2 s after its objects were made, so that the controllers have seen them; cascades: an owner ConfigMap with dependent ConfigMaps (`blockOwnerDeletion: true`), timed from the owner's DELETE until the last dependent (Background: a list of at most one by label) or the owner (Foreground, Orphan: a GET) is gone, polled every 20 ms".into(),
            format!("namespace: {count} objects as for its floor, timed from the namespace's DELETE until it is gone (the controller also lists every other namespaced resource, deletes their empty collections, and finalizes the namespace)"),
        ],
    })
}
