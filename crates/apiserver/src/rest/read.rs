//! get and list: label and field selectors, `limit`/`continue` chunking,
//! `resourceVersion`/`resourceVersionMatch`, and Table output.

use std::sync::Arc;

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::IntoResponse;
use base64::Engine;
use bytes::Bytes;
use rudder_api::selector::{FieldSelector, LabelSelector};
use rudder_api::{ResourceDef, Status, table};
use rudder_store::ListOptions;
use serde_json::{Value, json};

use super::objects::{decode, now_seconds, served};
use super::{Context, Params};
use crate::cache::Cached;
use crate::negotiate::{self, Output};
use crate::response::{ApiResult, json_response, store_error};

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

/// A Table of `objects`; `list_meta` is the list's metadata.
pub fn table(
    def: &ResourceDef,
    objects: &[Value],
    list_meta: Value,
    include: Include,
    with_columns: bool,
) -> Value {
    let now = now_seconds();
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
    let kv = ctx
        .state
        .store
        .get(ctx.key().as_bytes(), None)
        .await
        .map_err(|e| store_error(e, ctx.def(), ctx.name()))?;
    if let Some(rv) = revision
        && kv.mod_revision < rv
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
    let object = served(ctx.def(), decode(&kv)?);
    Ok(match output {
        Output::Json => json_response(StatusCode::OK, &object),
        Output::Table => {
            let meta = json!({"resourceVersion": kv.mod_revision.to_string()});
            table_response(&table(
                ctx.def(),
                &[object],
                meta,
                Include::parse(&ctx.params)?,
                true,
            ))
        }
    })
}

/// A continue token: the revision of the first page and the last key returned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Continue {
    pub revision: u64,
    pub after: Vec<u8>,
}

impl Continue {
    pub fn encode(&self) -> String {
        let body = json!({"v": "meta.k8s.io/v1", "rv": self.revision, "start": base64::engine::general_purpose::STANDARD.encode(&self.after)});
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(body.to_string())
    }

    pub fn decode(token: &str) -> Result<Continue, Status> {
        let bad =
            || Status::bad_request("continue key is not valid: the continue token is malformed");
        let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(token.trim_end_matches('='))
            .map_err(|_| bad())?;
        let body: Value = serde_json::from_slice(&raw).map_err(|_| bad())?;
        let revision = body.get("rv").and_then(Value::as_u64).ok_or_else(bad)?;
        let after = body.get("start").and_then(Value::as_str).ok_or_else(bad)?;
        let after = base64::engine::general_purpose::STANDARD
            .decode(after)
            .map_err(|_| bad())?;
        Ok(Continue { revision, after })
    }
}

/// The selectors of a list or watch.
#[derive(Debug, Clone)]
pub struct Selectors {
    pub labels: LabelSelector,
    pub fields: FieldSelector,
}

impl Selectors {
    pub fn parse(ctx: &Context) -> Result<Selectors, Status> {
        Ok(Selectors {
            labels: LabelSelector::parse(ctx.params.get("labelSelector").unwrap_or(""))?,
            fields: FieldSelector::parse(
                ctx.params.get("fieldSelector").unwrap_or(""),
                &ctx.def().group,
                &ctx.def().kind,
            )?,
        })
    }

    pub fn matches(&self, object: &Value) -> bool {
        self.labels.matches(object.pointer("/metadata/labels")) && self.fields.matches(object)
    }

    pub fn is_empty(&self) -> bool {
        self.labels.is_empty() && self.fields.is_empty()
    }
}

/// One consistent page of a list.
#[derive(Debug)]
pub struct Listed {
    pub items: Vec<Value>,
    pub revision: u64,
    pub next: Option<Continue>,
    pub remaining: Option<u64>,
}

/// Lists the collection at one revision, filtered, at most `limit` items.
pub async fn list_objects(ctx: &Context, selectors: &Selectors) -> Result<Listed, Status> {
    let params = &ctx.params;
    let limit = params
        .number("limit")?
        .filter(|l| *l > 0)
        .map(|l| l as usize);
    let prefix = ctx.prefix();
    let store = &ctx.state.store;
    let err = |e| store_error(e, ctx.def(), "");
    let (mut revision, mut after) = match params.get("continue").filter(|c| !c.is_empty()) {
        Some(token) => {
            if params
                .get("resourceVersion")
                .is_some_and(|rv| !rv.is_empty() && rv != "0")
            {
                return Err(Status::bad_request(
                    "specifying resource version is not allowed when using continue",
                ));
            }
            let token = Continue::decode(token)?;
            (Some(token.revision), Some(Bytes::from(token.after)))
        }
        None => {
            let rv = params
                .get("resourceVersion")
                .filter(|rv| !rv.is_empty() && *rv != "0");
            let rv = rv
                .map(|rv| {
                    rv.parse::<u64>()
                        .map_err(|_| Status::bad_request(format!("invalid resourceVersion {rv:?}")))
                })
                .transpose()?;
            match (rv, params.get("resourceVersionMatch")) {
                (Some(rv), Some("Exact")) => (Some(rv), None),
                (None, Some(m)) if !m.is_empty() => {
                    return Err(Status::bad_request(
                        "resourceVersionMatch is forbidden unless resourceVersion is provided",
                    ));
                }
                (Some(rv), _) => {
                    let current = store.current_revision().await.map_err(err)?;
                    if rv > current {
                        return Err(Status::timeout(format!(
                            "Too large resource version: {rv}, current: {current}"
                        )));
                    }
                    (None, None)
                }
                (None, _) => (None, None),
            }
        }
    };
    let mut items = Vec::new();
    let fetch = limit.map_or(0, |l| l.max(64) * 2);
    loop {
        let page = store
            .list(prefix.as_bytes(), ListOptions { revision, limit: fetch, continue_after: after.clone() })
            .await
            .map_err(|e| match e {
                rudder_store::Error::Compacted { .. } if params.get("continue").is_some() => Status::gone(
                    "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results. Continuing with the provided token results in an inconsistent list - objects that were created, modified, or deleted between the time the first chunk was returned and now may show up in the list.",
                ),
                other => err(other),
            })?;
        revision = Some(page.revision);
        for (i, kv) in page.kvs.iter().enumerate() {
            let object = served(ctx.def(), decode(kv)?);
            if !selectors.matches(&object) {
                continue;
            }
            items.push(object);
            if limit.is_some_and(|l| items.len() >= l) {
                let more = page.more || i + 1 < page.kvs.len();
                let next = more.then(|| Continue {
                    revision: page.revision,
                    after: kv.key.to_vec(),
                });
                let remaining = (more && selectors.is_empty()).then(|| page.count - (i as u64 + 1));
                return Ok(Listed {
                    items,
                    revision: page.revision,
                    next,
                    remaining,
                });
            }
        }
        if !page.more {
            return Ok(Listed {
                items,
                revision: page.revision,
                next: None,
                remaining: None,
            });
        }
        after = page.kvs.last().map(|kv| kv.key.clone());
    }
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
    let mut snapshot = cache.snapshot(&ctx.prefix(), None);
    if def.converts() {
        // The cache holds the stored version: each object converted.
        let fields = rudder_api::selector::supported_fields(&def.group, &def.kind);
        for object in &mut snapshot.objects {
            *object = object.converted(|v| served(def, v), fields);
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
    let selectors = Selectors::parse(ctx)?;
    if let Some(cached) = cached_list(ctx, &selectors).await? {
        let meta = list_meta(cached.revision, cached.next.as_ref(), cached.remaining);
        return Ok(match output {
            Output::Json => {
                let body = cached_list_json(ctx.def(), &meta, &cached.items);
                let mut response = (StatusCode::OK, body).into_response();
                response.headers_mut().insert(
                    header::CONTENT_TYPE,
                    HeaderValue::from_static("application/json"),
                );
                response
            }
            Output::Table => {
                let values: Vec<Value> = cached.items.iter().map(|c| c.value()).collect();
                table_response(&table(
                    ctx.def(),
                    &values,
                    meta,
                    Include::parse(&ctx.params)?,
                    true,
                ))
            }
        });
    }
    let listed = list_objects(ctx, &selectors).await?;
    let meta = list_meta(listed.revision, listed.next.as_ref(), listed.remaining);
    let def = ctx.def();
    Ok(match output {
        Output::Json => json_response(
            StatusCode::OK,
            &json!({"kind": def.list_kind, "apiVersion": def.api_version(), "metadata": meta, "items": listed.items}),
        ),
        Output::Table => table_response(&table(
            def,
            &listed.items,
            meta,
            Include::parse(&ctx.params)?,
            true,
        )),
    })
}

/// A Table response, with the media type upstream answers Tables with.
pub fn table_response(table: &Value) -> axum::response::Response {
    crate::response::typed_response(StatusCode::OK, table, TABLE_MEDIA_TYPE)
}

pub const TABLE_MEDIA_TYPE: &str = "application/json;as=Table;v=v1;g=meta.k8s.io";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn continue_tokens_round_trip_and_reject_garbage() {
        let token = Continue {
            revision: 42,
            after: b"/registry/core/configmaps/ns/a\x00".to_vec(),
        };
        assert_eq!(Continue::decode(&token.encode()).expect("valid"), token);
        assert_eq!(Continue::decode("not a token").expect_err("bad").code, 400);
    }
}
