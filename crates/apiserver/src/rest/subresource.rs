//! Subresources: `status` (the status alone; a CertificateSigningRequest's
//! `approval` too, its strategy keeping all but the conditions), `scale` (an
//! `autoscaling/v1 Scale` view of `spec.replicas`), `pods/binding`,
//! `namespaces/finalize`, `pods/ephemeralcontainers` (the Pod, of which a
//! write changes `spec.ephemeralContainers` alone) and `pods/log` (from the
//! node agent: `podlog.rs`).
//! The streams (exec, attach, port-forward) are `connect.rs`, the proxies
//! `proxy.rs`: they take the request before its body is read.

use axum::http::StatusCode;
use bytes::Bytes;
use rudder_api::object::Part;
use rudder_api::{Status, crd};
use serde_json::{Value, json};

use super::write::{
    apply_patch, check_fields, object_body, parse_json, patch_part, update_object, update_with,
};
use super::{Context, Verb, apply};
use crate::response::{ApiResult, json_response};
use crate::storage::{ListRequest, Selectors, WriteOptions};

pub async fn serve(ctx: &Context, subresource: &str, verb: Verb, body: Bytes) -> ApiResult {
    match (subresource, verb) {
        // A CertificateSigningRequest's approval is a view of its status
        // whose strategy writes the Approved and Denied conditions alone.
        ("status" | "approval", Verb::Get) => super::read::get(ctx).await,
        ("status" | "approval", Verb::Update) => {
            let object = object_body(ctx, &body)?;
            let warnings = check_fields(ctx, &object)?;
            update_with(ctx, Part::Status, warnings, |_| Ok(object.clone())).await
        }
        ("status" | "approval", Verb::Patch) => patch_part(ctx, body, Part::Status).await,
        ("scale", Verb::Get) => {
            let (object, _) = ctx.current().await?;
            Ok(json_response(StatusCode::OK, &scale_of(ctx.def(), &object)))
        }
        ("scale", Verb::Update) => {
            let scale = object_body(ctx, &body)?;
            update_scale(ctx, |_| Ok(scale.clone())).await
        }
        ("scale", Verb::Patch) if apply::is_apply(ctx) => apply_scale(ctx, &body).await,
        ("scale", Verb::Patch) => {
            let patch = parse_json(&body)?;
            update_scale(ctx, |current| {
                apply_patch(ctx, "io.k8s.api.autoscaling.v1.Scale", current, &patch)
            })
            .await
        }
        ("binding", Verb::Create) => bind(ctx, object_body(ctx, &body)?).await,
        ("eviction", Verb::Create) => evict(ctx, object_body(ctx, &body)?).await,
        ("token", Verb::Create) => super::token::create(ctx, body).await,
        ("finalize", Verb::Update) => {
            let object = object_body(ctx, &body)?;
            let finalizers = object.pointer("/spec/finalizers").cloned();
            update_with(ctx, Part::Finalize, Vec::new(), |old| {
                let mut new = old.clone();
                match &finalizers {
                    Some(f) => new["spec"]["finalizers"] = f.clone(),
                    None => {
                        if let Some(spec) = new.get_mut("spec").and_then(Value::as_object_mut) {
                            spec.remove("finalizers");
                        }
                    }
                }
                Ok(new)
            })
            .await
        }
        ("log", Verb::Get) => super::podlog::get(ctx).await,
        // A Pod whose ephemeral containers alone a write may add to.
        ("ephemeralcontainers", Verb::Get) => super::read::get(ctx).await,
        ("ephemeralcontainers", Verb::Update) => {
            let object = object_body(ctx, &body)?;
            let warnings = check_fields(ctx, &object)?;
            update_with(ctx, Part::EphemeralContainers, warnings, |_| {
                Ok(object.clone())
            })
            .await
        }
        ("ephemeralcontainers", Verb::Patch) => {
            patch_part(ctx, body, Part::EphemeralContainers).await
        }
        (other, _) => Err(Status::method_not_allowed(format!(
            "the {other} subresource is not served yet"
        ))
        .into()),
    }
}

/// Server-side apply of a `Scale`: an apply of the parent's replicas field
/// by the manager, recorded with subresource `scale` (conflicts with whoever
/// owns the parent's replicas, as upstream).
async fn apply_scale(ctx: &Context, body: &Bytes) -> ApiResult {
    let apply::ApplyRequest {
        manager,
        force,
        config,
    } = apply::ApplyRequest::read(ctx, body)?;
    let (api, kind) = (
        config.get("apiVersion").and_then(Value::as_str),
        config.get("kind").and_then(Value::as_str),
    );
    if (api, kind) != (Some("autoscaling/v1"), Some("Scale")) {
        return Err(Status::bad_request(
            "an apply to the scale subresource takes an autoscaling/v1 Scale",
        )
        .into());
    }
    let def = ctx.def();
    let api_version = def.api_version();
    let mut parent =
        json!({"apiVersion": api_version, "kind": def.kind, "metadata": {"name": ctx.name()}});
    if let Some(replicas) = config.pointer("/spec/replicas") {
        crd::set_path(&mut parent, replicas_path(def), replicas.clone());
    }
    let now = ctx.state.clock.now_rfc3339();
    let mut scope = apply::scope(ctx, Part::Main, &api_version, &now);
    scope.subresource = "scale";
    let object = update_object(ctx, Part::Main, |old| {
        apply::apply_to(&scope, Some(old), &parent, &manager, force)
    })
    .await?;
    Ok(json_response(StatusCode::OK, &scale_of(def, &object)))
}

/// Where a resource keeps its replicas: `.spec.replicas` for workloads,
/// the definition's paths for a custom resource.
fn replicas_path(def: &rudder_api::ResourceDef) -> &str {
    def.custom
        .as_ref()
        .and_then(|c| c.scale.as_ref())
        .map_or(".spec.replicas", |s| s.spec_replicas.as_str())
}

/// The `autoscaling/v1 Scale` of a workload or custom resource.
fn scale_of(def: &rudder_api::ResourceDef, object: &Value) -> Value {
    let meta = object.get("metadata").cloned().unwrap_or(Value::Null);
    let custom = def.custom.as_ref().and_then(|c| c.scale.as_ref());
    let (spec_replicas, status_replicas, selector) = match custom {
        Some(paths) => (
            crd::json_path(object, &paths.spec_replicas).cloned(),
            crd::json_path(object, &paths.status_replicas).cloned(),
            paths
                .label_selector
                .as_ref()
                .and_then(|p| crd::json_path(object, p))
                .and_then(Value::as_str)
                .map(str::to_string),
        ),
        None => (
            object.pointer("/spec/replicas").cloned(),
            object.pointer("/status/replicas").cloned(),
            object.pointer("/spec/selector").map(|s| {
                match s.get("matchLabels").or(s.get("matchExpressions")) {
                    Some(_) => rudder_api::selector::format_label_selector(s),
                    None => rudder_api::selector::format_map_selector(s),
                }
            }),
        ),
    };
    json!({
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": {
            "name": meta.get("name"),
            "namespace": meta.get("namespace"),
            "uid": meta.get("uid"),
            "resourceVersion": meta.get("resourceVersion"),
            "creationTimestamp": meta.get("creationTimestamp"),
        },
        "spec": {"replicas": spec_replicas.unwrap_or(json!(0))},
        "status": {
            "replicas": status_replicas.unwrap_or(json!(0)),
            "selector": selector.unwrap_or_default(),
        },
    })
}

async fn update_scale<F>(ctx: &Context, scale: F) -> ApiResult
where
    F: Fn(&Value) -> Result<Value, Status>,
{
    let object = update_object(ctx, Part::Main, |old| {
        let new_scale = scale(&scale_of(ctx.def(), old))?;
        let replicas = match new_scale.pointer("/spec/replicas") {
            Some(Value::Number(n)) if n.as_i64().is_some_and(|r| r >= 0) => n.clone(),
            Some(other) => {
                return Err(Status::invalid(
                    ctx.def().target(),
                    ctx.name(),
                    vec![rudder_api::Cause::invalid(
                        "spec.replicas",
                        other,
                        "must be greater than or equal to 0",
                    )],
                ));
            }
            None => serde_json::Number::from(0),
        };
        let mut new = old.clone();
        crd::set_path(&mut new, replicas_path(ctx.def()), Value::Number(replicas));
        if let Some(rv) = new_scale
            .pointer("/metadata/resourceVersion")
            .filter(|v| v.as_str().is_some_and(|s| !s.is_empty()))
        {
            new["metadata"]["resourceVersion"] = rv.clone();
        } else if let Some(meta) = new.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.remove("resourceVersion");
        }
        Ok(new)
    })
    .await?;
    Ok(json_response(StatusCode::OK, &scale_of(ctx.def(), &object)))
}

/// `pods/binding`: assigns an unscheduled pod to a node.
async fn bind(ctx: &Context, binding: Value) -> ApiResult {
    bind_pod(ctx, ctx.name(), &binding).await
}

/// The legacy `POST namespaces/<ns>/bindings`: binds the pod the Binding
/// names, exactly as `pods/<name>/binding`.
pub async fn bind_legacy(ctx: &Context, body: Bytes) -> ApiResult {
    let binding = object_body(ctx, &body)?;
    let name = binding
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    if name.is_empty() {
        return Err(Status::invalid(
            ctx.def().target(),
            "",
            vec![rudder_api::Cause::required("metadata.name")],
        )
        .into());
    }
    bind_pod(ctx, &name, &binding).await
}

async fn bind_pod(ctx: &Context, pod: &str, binding: &Value) -> ApiResult {
    let pods = ctx
        .state
        .registry()
        .get("", "v1", "pods")
        .cloned()
        .ok_or_else(|| Status::internal("no pods resource"))?;
    let node = binding
        .pointer("/target/name")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    if node.is_empty() {
        return Err(Status::invalid(
            pods.target(),
            pod,
            vec![rudder_api::Cause::required("target.name")],
        )
        .into());
    }
    let write = ctx.write_options(false)?;
    let now = ctx.state.clock.now_rfc3339();
    ctx.state
        .storage()
        .update(&pods, ctx.namespace(), pod, Part::Binding, &write, |old| {
            let current = old
                .pointer("/spec/nodeName")
                .and_then(Value::as_str)
                .unwrap_or_default();
            if !current.is_empty() {
                return Err(Status::conflict(
                    pods.target(),
                    pod,
                    &format!("pod {pod} is already assigned to node {current:?}"),
                ));
            }
            if old
                .pointer("/metadata/deletionTimestamp")
                .is_some_and(|v| !v.is_null())
            {
                return Err(Status::conflict(
                    pods.target(),
                    pod,
                    "pod is being deleted, cannot be assigned to a host",
                ));
            }
            let mut new = old.clone();
            new["spec"]["nodeName"] = json!(node);
            if let Some(meta) = new.get_mut("metadata").and_then(Value::as_object_mut) {
                meta.remove("resourceVersion");
            }
            // PodScheduled=True, its transition time kept if it was True.
            let previous = old
                .pointer("/status/conditions")
                .and_then(Value::as_array)
                .and_then(|c| c.iter().find(|c| c["type"] == "PodScheduled"));
            let transition = match previous {
                Some(c) if c["status"] == "True" => c["lastTransitionTime"].clone(),
                _ => json!(now),
            };
            // Only PodScheduled changes; other conditions (readiness gates,
            // a disruption target) stay, as upstream's UpdatePodCondition.
            let scheduled = json!({
                "type": "PodScheduled",
                "status": "True",
                "lastProbeTime": null,
                "lastTransitionTime": transition,
            });
            let mut conditions: Vec<Value> = old
                .pointer("/status/conditions")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter(|c| c["type"] != "PodScheduled")
                .cloned()
                .collect();
            conditions.insert(0, scheduled);
            if !new.get("status").is_some_and(Value::is_object) {
                new["status"] = json!({});
            }
            new["status"]["conditions"] = Value::Array(conditions);
            Ok(new)
        })
        .await?;
    Ok(json_response(
        StatusCode::CREATED,
        &json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}),
    ))
}

fn too_many(message: String, cause: Option<String>) -> Status {
    let mut status = Status::new(429, "TooManyRequests", message);
    status.retry_after = Some(10);
    if let Some(cause) = cause {
        status
            .causes
            .push(rudder_api::Cause::new("DisruptionBudget", "", cause));
    }
    status
}

/// `pods/eviction` (policy/v1 Eviction): deletes the pod unless that would
/// break the one PodDisruptionBudget covering it, as upstream's eviction
/// REST does; the budget's `disruptionsAllowed` is spent by
/// compare-and-swap before the pod goes.
async fn evict(ctx: &Context, eviction: Value) -> ApiResult {
    let (pod, _) = ctx.current().await?;
    let phase = pod
        .pointer("/status/phase")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let terminal = matches!(phase, "Succeeded" | "Failed");
    let state = &ctx.state;
    let storage = state.storage();
    let pdbs = state
        .registry()
        .get("policy", "v1", "poddisruptionbudgets")
        .cloned()
        .ok_or_else(|| Status::internal("no poddisruptionbudgets"))?;
    let namespace = ctx.namespace().unwrap_or_default().to_string();
    let labels = pod.pointer("/metadata/labels");
    let dry_run = ctx.params.dry_run()?;
    for _ in 0..8 {
        let mut covering = Vec::new();
        if !terminal {
            let listed = storage
                .list(
                    &pdbs,
                    Some(&namespace),
                    &Selectors::default(),
                    &ListRequest::default(),
                )
                .await?;
            for pdb in listed.items {
                let selects = pdb
                    .pointer("/spec/selector")
                    .is_some_and(|s| rudder_api::defaults::label_selector_matches(s, labels));
                if selects {
                    covering.push(pdb);
                }
            }
        }
        if covering.len() > 1 {
            return Err(Status::internal("This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.").into());
        }
        if let Some(mut pdb) = covering.pop() {
            let name = pdb
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string();
            let generation = pdb
                .pointer("/metadata/generation")
                .and_then(Value::as_i64)
                .unwrap_or(0);
            let observed = pdb
                .pointer("/status/observedGeneration")
                .and_then(Value::as_i64)
                .unwrap_or(0);
            if observed < generation {
                return Err(too_many(
                    "Cannot evict pod as it would violate the pod's disruption budget.".into(),
                    Some(format!(
                        "The disruption budget {name} is still being processed by the server."
                    )),
                )
                .into());
            }
            let allowed = pdb
                .pointer("/status/disruptionsAllowed")
                .and_then(Value::as_i64)
                .unwrap_or(0);
            if allowed <= 0 {
                let desired = pdb
                    .pointer("/status/desiredHealthy")
                    .and_then(Value::as_i64)
                    .unwrap_or(0);
                let current = pdb
                    .pointer("/status/currentHealthy")
                    .and_then(Value::as_i64)
                    .unwrap_or(0);
                return Err(too_many(
                    "Cannot evict pod as it would violate the pod's disruption budget.".into(),
                    Some(format!("The disruption budget {name} needs {desired} healthy pods and has {current} currently")),
                )
                .into());
            }
            // Spend one disruption, compare-and-swap on the budget read
            // (its resourceVersion pins the write).
            pdb["status"]["disruptionsAllowed"] = json!(allowed - 1);
            pdb["status"]["disruptedPods"][ctx.name()] = json!(state.clock.now_rfc3339());
            let write = WriteOptions {
                dry_run,
                ..WriteOptions::server()
            };
            match storage
                .update(&pdbs, Some(&namespace), &name, Part::Status, &write, |_| {
                    Ok(pdb.clone())
                })
                .await
            {
                Ok(_) => {}
                Err(status) if status.code == 409 => continue,
                Err(status) => return Err(status.into()),
            }
        }
        let options = eviction.get("deleteOptions").filter(|o| !o.is_null());
        super::write::delete_with(ctx, options).await?;
        return Ok(json_response(
            StatusCode::CREATED,
            &json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}),
        ));
    }
    Err(Status::modified(pdbs.target(), "").into())
}
