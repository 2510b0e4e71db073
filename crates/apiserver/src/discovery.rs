//! Discovery: legacy (`/api`, `/apis`, each group and group-version) and
//! aggregated (`apidiscovery.k8s.io` v2 and v2beta1, answering exactly the
//! version asked for), plus `/version`.

use std::sync::Arc;

use axum::extract::{Path, State as AxumState};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use rudder_api::registry::ResourceDef;
use rudder_api::{Registry, Status};
use serde_json::{Value, json};

use crate::negotiate::{self, Discovery};
use crate::response::{ApiError, ApiResult, json_response, typed_response};
use crate::state::State;

fn group_version(group: &str, version: &str) -> String {
    if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    }
}

fn legacy_resources(registry: &Registry, group: &str, version: &str) -> Value {
    let mut resources = Vec::new();
    for def in registry.resources_in(group, version) {
        let mut entry = json!({
            "name": def.plural,
            "singularName": def.singular,
            "namespaced": def.namespaced,
            "kind": def.kind,
            "verbs": def.verbs,
        });
        if !def.short_names.is_empty() {
            entry["shortNames"] = json!(def.short_names);
        }
        if !def.categories.is_empty() {
            entry["categories"] = json!(def.categories);
        }
        resources.push(entry);
        for sub in &def.subresources {
            let mut entry = json!({
                "name": format!("{}/{}", def.plural, sub.name),
                "singularName": "",
                "namespaced": def.namespaced,
                "kind": sub.kind,
                "verbs": sub.verbs,
            });
            if (sub.group.as_ref(), sub.version.as_ref())
                != (def.group.as_str(), def.version.as_str())
            {
                entry["group"] = json!(sub.group);
                entry["version"] = json!(sub.version);
            }
            resources.push(entry);
        }
    }
    json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version(group, version), "resources": resources})
}

fn aggregated_resource(def: &ResourceDef) -> Value {
    let mut entry = json!({
        "resource": def.plural,
        "responseKind": {"group": def.group, "version": def.version, "kind": def.kind},
        "scope": if def.namespaced { "Namespaced" } else { "Cluster" },
        "singularResource": def.singular,
        "verbs": def.verbs,
    });
    if !def.short_names.is_empty() {
        entry["shortNames"] = json!(def.short_names);
    }
    if !def.categories.is_empty() {
        entry["categories"] = json!(def.categories);
    }
    if !def.subresources.is_empty() {
        entry["subresources"] = json!(def
            .subresources
            .iter()
            .map(|s| json!({"subresource": s.name, "responseKind": {"group": s.group, "version": s.version, "kind": s.kind}, "verbs": s.verbs}))
            .collect::<Vec<_>>());
    }
    entry
}

fn aggregated(registry: &Registry, core: bool, version: &str) -> Response {
    let items: Vec<Value> = registry
        .groups()
        .iter()
        .filter(|g| g.name.is_empty() == core)
        .map(|g| {
            let versions: Vec<Value> = g
                .versions
                .iter()
                .map(|v| json!({"version": v, "resources": registry.resources_in(&g.name, v).map(|d| aggregated_resource(d)).collect::<Vec<_>>(), "freshness": "Current"}))
                .collect();
            let metadata = if g.name.is_empty() { json!({"creationTimestamp": null}) } else { json!({"name": g.name, "creationTimestamp": null}) };
            json!({"metadata": metadata, "versions": versions})
        })
        .collect();
    let body = json!({"kind": "APIGroupDiscoveryList", "apiVersion": format!("apidiscovery.k8s.io/{version}"), "metadata": {}, "items": items});
    typed_response(
        StatusCode::OK,
        &body,
        &format!("application/json;g=apidiscovery.k8s.io;v={version};as=APIGroupDiscoveryList"),
    )
}

fn api_group(registry: &Registry, name: &str) -> Option<Value> {
    let group = registry.group(name)?;
    let versions: Vec<Value> = group
        .versions
        .iter()
        .map(|v| json!({"groupVersion": group_version(name, v), "version": v}))
        .collect();
    Some(
        json!({"kind": "APIGroup", "apiVersion": "v1", "name": name, "versions": versions, "preferredVersion": versions[0]}),
    )
}

pub async fn api(AxumState(state): AxumState<Arc<State>>, headers: HeaderMap) -> Response {
    match negotiate::discovery(&headers) {
        Discovery::Aggregated(version) => aggregated(&state.registry(), true, version),
        Discovery::Legacy => json_response(
            StatusCode::OK,
            &json!({"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": ""}]}),
        ),
    }
}

pub async fn apis(AxumState(state): AxumState<Arc<State>>, headers: HeaderMap) -> Response {
    match negotiate::discovery(&headers) {
        Discovery::Aggregated(version) => aggregated(&state.registry(), false, version),
        Discovery::Legacy => {
            let groups: Vec<Value> = state
                .registry()
                .groups()
                .iter()
                .filter(|g| !g.name.is_empty())
                .filter_map(|g| api_group(&state.registry(), &g.name))
                .collect();
            json_response(
                StatusCode::OK,
                &json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}),
            )
        }
    }
}

pub async fn core_version(
    AxumState(state): AxumState<Arc<State>>,
    Path(version): Path<String>,
) -> ApiResult {
    if state.registry().resources_in("", &version).next().is_none() {
        return Err(ApiError(Status::not_found_path(&format!("/api/{version}"))));
    }
    Ok(json_response(
        StatusCode::OK,
        &legacy_resources(&state.registry(), "", &version),
    ))
}

pub async fn group(
    AxumState(state): AxumState<Arc<State>>,
    Path(group): Path<String>,
) -> ApiResult {
    let body = api_group(&state.registry(), &group)
        .filter(|_| !group.is_empty())
        .ok_or_else(|| ApiError(Status::not_found_path(&format!("/apis/{group}"))))?;
    Ok(json_response(StatusCode::OK, &body))
}

pub async fn group_version_resources(
    AxumState(state): AxumState<Arc<State>>,
    Path((group, version)): Path<(String, String)>,
) -> ApiResult {
    if group.is_empty()
        || state
            .registry()
            .resources_in(&group, &version)
            .next()
            .is_none()
    {
        return Err(ApiError(Status::not_found_path(&format!(
            "/apis/{group}/{version}"
        ))));
    }
    Ok(json_response(
        StatusCode::OK,
        &legacy_resources(&state.registry(), &group, &version),
    ))
}

pub async fn version() -> Response {
    json_response(
        StatusCode::OK,
        &json!({
            "major": "1",
            "minor": "33",
            "gitVersion": format!("v1.33.0+rudder.{}", env!("CARGO_PKG_VERSION")),
            "gitCommit": "",
            "gitTreeState": "clean",
            "buildDate": "1970-01-01T00:00:00Z",
            "goVersion": "rust",
            "compiler": "rustc",
            "platform": format!("{}/{}", std::env::consts::OS, if cfg!(target_arch = "x86_64") { "amd64" } else if cfg!(target_arch = "aarch64") { "arm64" } else { std::env::consts::ARCH }),
        }),
    )
}
