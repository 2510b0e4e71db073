//! get and list: label and field selectors, `limit`/`continue` chunking,
//! `resourceVersion`/`resourceVersionMatch`, and Table output.

use std::sync::Arc;

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::IntoResponse;
use rudder_api::{ResourceDef, Status, table};
use serde_json::{Value, json};

use super::{Context, Params};
use crate::cache::Cached;
use crate::negotiate::{self, Output};
use crate::response::{ApiResult, json_response, object_response, store_error};
use crate::storage::{Continue, Selectors, served};

/// What Table rows carry besides their cells (`includeObject`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Include {
    None,
    Metadata,
    Object,
}

impl Include {
    pub fn parse(params: &Params) -> Result<Include, Status> {
        match params.get("includeObject") {
            None | Some("") | Some("Metadata") => Ok(Include::Metadata),
            Some("Object") => Ok(Include::Object),
            Some("None") => Ok(Include::None),
            Some(other) => Err(Status::bad_request(format!(
                "includeObject: unsupported value {other:?}"
            ))),
        }
    }
}

/// One Table row for an object.
pub fn table_row(def: &ResourceDef, object: &Value, include: Include, now: i64) -> Value {
    let mut row = json!({"cells": table::cells(def, object, now)});
    match include {
        Include::None => {}
        Include::Object => row["object"] = object.clone(),
        Include::Metadata => {
            row["object"] = json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": object.get("metadata").cloned().unwrap_or(Value::Null)});
        }
    }
    row
}

/// A Table of `objects` at `now` (Unix seconds, for ages); `list_meta` is
/// the list's metadata.
pub fn table(
    def: &ResourceDef,
    objects: &[Value],
    list_meta: Value,
    include: Include,
    with_columns: bool,
    now: i64,
) -> Value {
    let mut t = json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": list_meta,
        "rows": objects.iter().map(|o| table_row(def, o, include, now)).collect::<Vec<_>>(),
    });
    if with_columns {
        t["columnDefinitions"] = table::column_definitions(def);
    }
    t
}

pub async fn get(ctx: &Context) -> ApiResult {
    let output = negotiate::output(&ctx.headers)?;
    let revision = match ctx.params.get("resourceVersion") {
        None | Some("") | Some("0") => None,
        Some(rv) => Some(
            rv.parse::<u64>()
                .map_err(|_| Status::bad_request(format!("invalid resourceVersion {rv:?}")))?,
        ),
    };
    let (object, stored_at) = ctx.current().await?;
    if let Some(rv) = revision
        && stored_at < rv
        && ctx
            .state
            .store
            .current_revision()
            .await
            .map_err(|e| store_error(e, ctx.def(), ctx.name()))?
            < rv
    {
        return Err(Status::timeout(format!("Too large resource version: {rv}")).into());
    }
    Ok(match output {
        Output::Json => object_response(StatusCode::OK, ctx.def(), &object),
        Output::Metadata => json_response(StatusCode::OK, &partial_metadata(&object)),
        Output::Table => {
            let meta = json!({"resourceVersion": stored_at.to_string()});
            table_response(&table(
                ctx.def(),
                &[object],
                meta,
                Include::parse(&ctx.params)?,
                true,
                ctx.state.clock.now_seconds(),
            ))
        }
    })
}

/// An object as `PartialObjectMetadata`: its metadata alone.
pub fn partial_metadata(object: &Value) -> Value {
    json!({
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": object.get("metadata").cloned().unwrap_or_else(|| json!({})),
    })
}

/// A list served from the watch cache.
struct CachedList {
    items: Vec<Arc<Cached>>,
    revision: u64,
    next: Option<Continue>,
    remaining: Option<u64>,
}

/// Serves a list from the watch cache when its semantics allow: not a
/// continued list (those read the store at the first page's revision) and
/// not an exact old revision. A list without a resourceVersion is a
/// consistent read: the cache first catches up with the store.
async fn cached_list(ctx: &Context, selectors: &Selectors) -> Result<Option<CachedList>, Status> {
    let params = &ctx.params;
    if params.get("continue").is_some_and(|c| !c.is_empty())
        || params.get("resourceVersionMatch") == Some("Exact")
    {
        return Ok(None);
    }
    let def = ctx.def();
    let target = match params.get("resourceVersion") {
        None | Some("") => ctx
            .state
            .store
            .current_revision()
            .await
            .map_err(|e| store_error(e, def, ""))?,
        Some("0") => 0,
        Some(rv) => rv
            .parse()
            .map_err(|_| Status::bad_request(format!("invalid resourceVersion {rv:?}")))?,
    };
    if params
        .get("resourceVersionMatch")
        .is_some_and(|m| !m.is_empty() && m != "NotOlderThan")
    {
        return Err(Status::bad_request(
            "resourceVersionMatch: Unsupported value: supported values: \"Exact\", \"NotOlderThan\"",
        ));
    }
    let cache = ctx.state.cache(def);
    cache.wait_for(target).await?;
    cache.check_decodable(&ctx.prefix())?;
    let mut snapshot = cache.snapshot(&ctx.prefix(), None);
    if def.converts() {
        // The cache holds the stored version: each object converted.
        let fields = rudder_api::selector::fields_of(def);
        for object in &mut snapshot.objects {
            *object = object.converted(|v| served(def, v), fields, &def.schema_name);
        }
    }
    let limit = params
        .number("limit")?
        .filter(|l| *l > 0)
        .map(|l| l as usize);
    let mut items = Vec::new();
    for (i, object) in snapshot.objects.iter().enumerate() {
        if !selectors.matches(&object.selectable) {
            continue;
        }
        items.push(object.clone());
        if limit.is_some_and(|l| items.len() >= l) && i + 1 < snapshot.objects.len() {
            let namespace = object
                .selectable
                .pointer("/metadata/namespace")
                .and_then(Value::as_str);
            let name = object
                .selectable
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or_default();
            let after = def.key(namespace, name).into_bytes();
            let remaining = selectors
                .is_empty()
                .then(|| (snapshot.objects.len() - i - 1) as u64);
            return Ok(Some(CachedList {
                items,
                revision: snapshot.revision,
                next: Some(Continue {
                    revision: snapshot.revision,
                    after,
                }),
                remaining,
            }));
        }
    }
    Ok(Some(CachedList {
        items,
        revision: snapshot.revision,
        next: None,
        remaining: None,
    }))
}

/// A list as upstream writes it: `kind`, `apiVersion`, `metadata`, then
/// the items, each in Go's field order.
struct OrderedList<'a> {
    def: &'a ResourceDef,
    meta: &'a Value,
    items: &'a [Value],
}

impl serde::Serialize for OrderedList<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use rudder_api::protobuf::go_json::Ordered;
        use serde::ser::SerializeMap;
        let kind = Ordered::new(&self.def.schema_name, &Value::Null);
        let items: Vec<Ordered<'_>> = self.items.iter().map(|item| kind.with(item)).collect();
        let mut map = serializer.serialize_map(Some(4))?;
        map.serialize_entry("kind", &self.def.list_kind)?;
        map.serialize_entry("apiVersion", &self.def.api_version())?;
        map.serialize_entry("metadata", self.meta)?;
        map.serialize_entry("items", &items)?;
        map.end()
    }
}

/// A list's JSON, assembled from the objects' cached serializations.
fn cached_list_json(def: &ResourceDef, meta: &Value, items: &[Arc<Cached>]) -> Vec<u8> {
    let mut out = Vec::with_capacity(items.iter().map(|i| i.json.len() + 1).sum::<usize>() + 256);
    out.extend_from_slice(b"{\"kind\":");
    out.extend_from_slice(json!(def.list_kind).to_string().as_bytes());
    out.extend_from_slice(b",\"apiVersion\":");
    out.extend_from_slice(json!(def.api_version()).to_string().as_bytes());
    out.extend_from_slice(b",\"metadata\":");
    out.extend_from_slice(meta.to_string().as_bytes());
    out.extend_from_slice(b",\"items\":[");
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(&item.json);
    }
    out.extend_from_slice(b"]}");
    out
}

fn list_meta(revision: u64, next: Option<&Continue>, remaining: Option<u64>) -> Value {
    let mut meta = json!({"resourceVersion": revision.to_string()});
    if let Some(next) = next {
        meta["continue"] = json!(next.encode());
    }
    if let Some(remaining) = remaining {
        meta["remainingItemCount"] = json!(remaining);
    }
    meta
}

pub async fn list(ctx: &Context) -> ApiResult {
    let output = negotiate::output(&ctx.headers)?;
    let selectors = ctx.selectors()?;
    let def = ctx.def();
    let now = ctx.state.clock.now_seconds();
    if let Some(cached) = cached_list(ctx, &selectors).await? {
        let meta = list_meta(cached.revision, cached.next.as_ref(), cached.remaining);
        return Ok(match output {
            Output::Json => {
                let body = cached_list_json(def, &meta, &cached.items);
                let mut response = (StatusCode::OK, body).into_response();
                response.headers_mut().insert(
                    header::CONTENT_TYPE,
                    HeaderValue::from_static("application/json"),
                );
                response
            }
            Output::Metadata => {
                let values: Vec<Value> = cached.items.iter().map(|c| c.value()).collect();
                json_response(StatusCode::OK, &metadata_list(&meta, &values))
            }
            Output::Table => {
                let values: Vec<Value> = cached.items.iter().map(|c| c.value()).collect();
                table_response(&table(
                    def,
                    &values,
                    meta,
                    Include::parse(&ctx.params)?,
                    true,
                    now,
                ))
            }
        });
    }
    let listed = ctx
        .state
        .storage()
        .list(def, ctx.namespace(), &selectors, &ctx.list_request()?)
        .await?;
    let meta = list_meta(listed.revision, listed.next.as_ref(), listed.remaining);
    Ok(match output {
        Output::Json => json_response(
            StatusCode::OK,
            &OrderedList {
                def,
                meta: &meta,
                items: &listed.items,
            },
        ),
        Output::Metadata => json_response(StatusCode::OK, &metadata_list(&meta, &listed.items)),
        Output::Table => table_response(&table(
            def,
            &listed.items,
            meta,
            Include::parse(&ctx.params)?,
            true,
            now,
        )),
    })
}

/// A `PartialObjectMetadataList` of `items`.
fn metadata_list(meta: &Value, items: &[Value]) -> Value {
    json!({
        "kind": "PartialObjectMetadataList",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": meta,
        "items": items.iter().map(partial_metadata).collect::<Vec<_>>(),
    })
}

/// A Table response, with the media type upstream answers Tables with.
pub fn table_response(table: &Value) -> axum::response::Response {
    crate::response::typed_response(StatusCode::OK, table, TABLE_MEDIA_TYPE)
}

pub const TABLE_MEDIA_TYPE: &str = "application/json;as=Table;v=v1;g=meta.k8s.io";
