//! `/openapi/v2` and `/openapi/v3[/<group-version>]`, generated on first
//! request and cached (the registry does not change while serving).

use std::sync::Arc;

use axum::extract::{Path, Query, State as AxumState};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use rudder_api::{Registry, Status, openapi};
use serde_json::{Map, Value, json};

use crate::negotiate::parse_accept;
use crate::response::{ApiError, ApiResult, json_response};
use crate::state::{Document, OpenApiDocs, State, content_hash};

fn document(body: &Value) -> Document {
    let body = Bytes::from(serde_json::to_vec(body).unwrap_or_default());
    Document {
        hash: content_hash(&body),
        body,
    }
}

fn serve(doc: &Document, immutable: bool) -> Response {
    let mut response = (StatusCode::OK, doc.body.clone()).into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    if let Ok(etag) = HeaderValue::from_str(&format!("\"{}\"", doc.hash)) {
        headers.insert(header::ETAG, etag);
    }
    let cache = if immutable {
        "public, immutable"
    } else {
        "no-cache, private"
    };
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static(cache));
    response
}

/// The media type of the protobuf OpenAPI v2 document, as responses carry
/// it (clients ask for it as `…spec.v2@v1.0+protobuf` too, but `@` is not a
/// valid MIME token and Go's parser rejects it in a response).
pub const PROTOBUF_V2: &str = "application/com.github.proto-openapi.spec.v2.v1.0+protobuf";

fn serve_as(doc: &Document, content_type: &'static str) -> Response {
    let mut response = serve(doc, false);
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}

/// The documents of the registry served now (made again after a change).
fn with_docs<T>(state: &State, f: impl FnOnce(&Registry, &mut OpenApiDocs) -> T) -> T {
    let (generation, registry) = state.registry_generation();
    let mut docs = state.openapi.lock().unwrap_or_else(|e| e.into_inner());
    if docs.generation != generation {
        *docs = OpenApiDocs {
            generation,
            ..OpenApiDocs::default()
        };
    }
    f(&registry, &mut docs)
}

fn v2_json(state: &State) -> Document {
    with_docs(state, |registry, docs| {
        docs.v2
            .get_or_insert_with(|| document(&openapi::v2(registry)))
            .clone()
    })
}

fn v2_protobuf(state: &State) -> Document {
    let json = v2_json(state);
    with_docs(state, |_, docs| {
        docs.v2_protobuf
            .get_or_insert_with(|| {
                let json: Value = serde_json::from_slice(&json.body).unwrap_or(Value::Null);
                let body = Bytes::from(rudder_api::openapi_pb::encode(&json));
                Document {
                    hash: content_hash(&body),
                    body,
                }
            })
            .clone()
    })
}

/// `/openapi/v2`: JSON, or gnostic protobuf when the client prefers it
/// (kubectl 1.27 and 1.28 ask for nothing else).
pub async fn v2(AxumState(state): AxumState<Arc<State>>, headers: HeaderMap) -> ApiResult {
    let accept = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let ranges = parse_accept(&accept);
    let choice = if accept.trim().is_empty() {
        Some(false)
    } else {
        ranges.iter().find_map(|r| match r.media.as_str() {
            "application/json" | "*/*" | "application/*" => Some(false),
            m if m.starts_with("application/com.github.proto-openapi.spec.v2") => Some(true),
            _ => None,
        })
    };
    let protobuf = choice.ok_or_else(|| {
        ApiError(Status::not_acceptable(format!(
            "the OpenAPI v2 document is served as application/json or {PROTOBUF_V2} (got {accept:?})"
        )))
    })?;
    let doc = tokio::task::spawn_blocking(move || {
        if protobuf {
            v2_protobuf(&state)
        } else {
            v2_json(&state)
        }
    })
    .await
    .map_err(|e| ApiError(Status::internal(e.to_string())))?;
    Ok(if protobuf {
        serve_as(&doc, PROTOBUF_V2)
    } else {
        serve(&doc, false)
    })
}

/// `/swagger-2.0.0.pb-v1`: the protobuf document at its legacy path.
pub async fn v2_legacy_protobuf(AxumState(state): AxumState<Arc<State>>) -> ApiResult {
    let doc = tokio::task::spawn_blocking(move || v2_protobuf(&state))
        .await
        .map_err(|e| ApiError(Status::internal(e.to_string())))?;
    Ok(serve_as(&doc, PROTOBUF_V2))
}

fn group_versions(registry: &Registry) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for group in registry.groups() {
        for version in &group.versions {
            out.push((group.name.clone(), version.clone()));
        }
    }
    out
}

fn v3_document(state: &State, path: &str) -> Option<Document> {
    with_docs(state, |registry, docs| {
        if let Some(doc) = docs.v3.get(path) {
            return Some(doc.clone());
        }
        let (group, version) = group_versions(registry)
            .into_iter()
            .find(|(g, v)| openapi::group_version_path(g, v) == path)?;
        let doc = document(&openapi::v3_group_version(registry, &group, &version)?);
        docs.v3.insert(path.to_string(), doc.clone());
        Some(doc)
    })
}

pub async fn v3_index(AxumState(state): AxumState<Arc<State>>) -> ApiResult {
    let state2 = state.clone();
    let paths = tokio::task::spawn_blocking(move || {
        let mut paths = Map::new();
        for (group, version) in group_versions(&state2.registry()) {
            let path = openapi::group_version_path(&group, &version);
            if let Some(doc) = v3_document(&state2, &path) {
                paths.insert(
                    path.clone(),
                    json!({"serverRelativeURL": format!("/openapi/v3/{path}?hash={}", doc.hash)}),
                );
            }
        }
        paths
    })
    .await
    .map_err(|e| ApiError(Status::internal(e.to_string())))?;
    Ok(json_response(StatusCode::OK, &json!({"paths": paths})))
}

pub async fn v3(
    AxumState(state): AxumState<Arc<State>>,
    Path(path): Path<String>,
    Query(query): Query<std::collections::HashMap<String, String>>,
) -> ApiResult {
    let lookup = path.clone();
    let doc = tokio::task::spawn_blocking(move || v3_document(&state, &lookup))
        .await
        .map_err(|e| ApiError(Status::internal(e.to_string())))?
        .ok_or_else(|| ApiError(Status::not_found_path(&format!("/openapi/v3/{path}"))))?;
    let immutable = query.get("hash").is_some_and(|h| *h == doc.hash);
    Ok(serve(&doc, immutable))
}
