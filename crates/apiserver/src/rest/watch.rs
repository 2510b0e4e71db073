//! watch: a newline-delimited stream of `{"type","object"}` events.
//!
//! Without a `resourceVersion` (or with `0`) the stream starts with an ADDED
//! event per object that exists, then follows changes; with one, it follows
//! changes after it. Selectors apply to both sides of every change, so an
//! object leaving the selection is DELETED and one entering it ADDED.
//! Bookmarks come from the store's progress notifications; a start below
//! the compacted history ends the stream with a 410 `Expired` ERROR event.

use std::time::Duration;

use axum::body::Body;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::IntoResponse;
use bytes::Bytes;
use rand::Rng;
use rudder_api::{ResourceDef, Status};
use rudder_store::{Event, EventKind, ListOptions, WatchRequest, WatchResponse};
use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::Context;
use super::objects::{decode, set_resource_version};
use super::read::{Include, Selectors, table};
use crate::negotiate::{self, Output};
use crate::response::{ApiResult, store_error};

/// How often a quiet watch asks the store how far it has got, for bookmarks.
const PROGRESS_EVERY: Duration = Duration::from_secs(30);

/// How one event line is rendered.
struct Render {
    def: std::sync::Arc<ResourceDef>,
    output: Output,
    include: Include,
    /// Table events carry column definitions only on the first.
    columns_sent: bool,
}

impl Render {
    fn line(&mut self, kind: &str, object: Value) -> Bytes {
        let object = match self.output {
            Output::Json => object,
            Output::Table => {
                let rv = object
                    .pointer("/metadata/resourceVersion")
                    .cloned()
                    .unwrap_or(Value::Null);
                let with_columns = !self.columns_sent;
                self.columns_sent = true;
                table(
                    &self.def,
                    &[object],
                    json!({"resourceVersion": rv}),
                    self.include,
                    with_columns,
                )
            }
        };
        let mut line =
            serde_json::to_vec(&json!({"type": kind, "object": object})).unwrap_or_default();
        line.push(b'\n');
        Bytes::from(line)
    }
}

fn error_line(status: &Status) -> Bytes {
    let mut line = serde_json::to_vec(&json!({"type": "ERROR", "object": status.to_json()}))
        .unwrap_or_default();
    line.push(b'\n');
    Bytes::from(line)
}

/// The events a store event becomes for a watcher with these selectors.
fn translate(
    event: &Event,
    selectors: &Selectors,
    name: Option<&str>,
) -> Result<Option<(&'static str, Value)>, Status> {
    let matches = |o: &Value| {
        selectors.matches(o)
            && name.is_none_or(|n| o.pointer("/metadata/name").and_then(Value::as_str) == Some(n))
    };
    let new = match event.kind {
        EventKind::Deleted => None,
        _ => Some(decode(&event.kv)?),
    };
    let old = event.prev.as_ref().map(decode).transpose()?;
    let was = old.as_ref().is_some_and(matches);
    Ok(match (new, event.kind) {
        (Some(new), EventKind::Created) => matches(&new).then_some(("ADDED", new)),
        (Some(new), _) => match (was, matches(&new)) {
            (true, true) => Some(("MODIFIED", new)),
            (false, true) => Some(("ADDED", new)),
            (true, false) => Some(("DELETED", new)),
            (false, false) => None,
        },
        (None, _) => match old {
            Some(mut old) if was => {
                set_resource_version(&mut old, event.revision());
                Some(("DELETED", old))
            }
            _ => None,
        },
    })
}

pub async fn watch(ctx: Context) -> ApiResult {
    let output = negotiate::output(&ctx.headers)?;
    let selectors = Selectors::parse(&ctx)?;
    let include = Include::parse(&ctx.params)?;
    let name = ctx
        .resource
        .name
        .clone()
        .or_else(|| selectors.fields.pinned_name().map(str::to_string));
    let start = match ctx.params.get("resourceVersion") {
        None | Some("") | Some("0") => None,
        Some(rv) => Some(
            rv.parse::<u64>()
                .map_err(|_| Status::bad_request(format!("invalid resourceVersion {rv:?}")))?,
        ),
    };
    let timeout = match ctx.params.number("timeoutSeconds")? {
        Some(t) if t > 0 => Duration::from_secs(t as u64),
        _ => Duration::from_secs(rand::rng().random_range(1800..3600)),
    };
    let bookmarks = ctx.params.flag("allowWatchBookmarks");
    let prefix = ctx.prefix();
    let store = ctx.state.store.clone();
    let def = ctx.resource.def.clone();

    // The starting point, and the initial state when there is no resourceVersion.
    let mut initial = Vec::new();
    let from = match start {
        Some(rv) => rv + 1,
        None => {
            let mut after = None;
            let revision = loop {
                let page = store
                    .list(
                        prefix.as_bytes(),
                        ListOptions {
                            revision: None,
                            limit: 0,
                            continue_after: after.take(),
                        },
                    )
                    .await
                    .map_err(|e| store_error(e, &def, ""))?;
                for kv in &page.kvs {
                    let object = decode(kv)?;
                    if selectors.matches(&object)
                        && name.as_deref().is_none_or(|n| {
                            object.pointer("/metadata/name").and_then(Value::as_str) == Some(n)
                        })
                    {
                        initial.push(object);
                    }
                }
                if !page.more {
                    break page.revision;
                }
                after = page.kvs.last().map(|kv| kv.key.clone());
            };
            revision + 1
        }
    };
    let mut stream = store
        .watch(WatchRequest::prefix(Bytes::from(prefix.clone()), from))
        .await
        .map_err(|e| store_error(e, &def, ""))?;

    let (tx, rx) = mpsc::channel::<Result<Bytes, std::io::Error>>(64);
    let mut render = Render {
        def: def.clone(),
        output,
        include,
        columns_sent: false,
    };
    let shutdown = ctx.state.shutdown.clone();
    tokio::spawn(async move {
        for object in initial {
            if tx.send(Ok(render.line("ADDED", object))).await.is_err() {
                return;
            }
        }
        let deadline = tokio::time::sleep(timeout);
        tokio::pin!(deadline);
        let mut progress = tokio::time::interval(PROGRESS_EVERY);
        progress.tick().await;
        loop {
            let item = tokio::select! {
                _ = &mut deadline => return,
                _ = shutdown.cancelled() => return,
                _ = tx.closed() => return,
                _ = progress.tick() => {
                    stream.request_progress();
                    continue;
                }
                item = stream.recv() => item,
            };
            let lines: Vec<Bytes> = match item {
                None => return,
                Some(Ok(WatchResponse::Events(events))) => {
                    let mut lines = Vec::new();
                    for event in &events {
                        match translate(event, &selectors, name.as_deref()) {
                            Ok(Some((kind, object))) => lines.push(render.line(kind, object)),
                            Ok(None) => {}
                            Err(status) => lines.push(error_line(&status)),
                        }
                    }
                    lines
                }
                Some(Ok(WatchResponse::Progress { revision })) => {
                    if !bookmarks {
                        continue;
                    }
                    let bookmark = json!({"kind": def.kind, "apiVersion": def.api_version(), "metadata": {"resourceVersion": revision.to_string()}});
                    let mut line =
                        serde_json::to_vec(&json!({"type": "BOOKMARK", "object": bookmark}))
                            .unwrap_or_default();
                    line.push(b'\n');
                    vec![Bytes::from(line)]
                }
                Some(Err(rudder_store::Error::Compacted { compact_revision })) => {
                    let status = Status::gone(format!(
                        "too old resource version: {} ({compact_revision})",
                        from.saturating_sub(1)
                    ));
                    let _ = tx.send(Ok(error_line(&status))).await;
                    return;
                }
                Some(Err(error)) => {
                    let _ = tx.send(Ok(error_line(&store_error(error, &def, "")))).await;
                    return;
                }
            };
            for line in lines {
                if tx.send(Ok(line)).await.is_err() {
                    return;
                }
            }
        }
    });

    let body = Body::from_stream(tokio_stream::wrappers::ReceiverStream::new(rx));
    let mut response = (StatusCode::OK, body).into_response();
    let content_type = match output {
        Output::Json => "application/json",
        Output::Table => "application/json;as=Table;v=v1;g=meta.k8s.io",
    };
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    response.headers_mut().insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("no-cache, private"),
    );
    Ok(response)
}

impl std::fmt::Debug for Render {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Render")
            .field("def", &self.def)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rudder_store::KeyValue;

    fn kv(labels: Value, revision: u64) -> KeyValue {
        let object = json!({"metadata": {"name": "a", "labels": labels}});
        KeyValue {
            key: Bytes::from_static(b"/k"),
            value: Bytes::from(object.to_string()),
            create_revision: 1,
            mod_revision: revision,
            version: 1,
        }
    }

    fn selectors(text: &str) -> Selectors {
        Selectors {
            labels: rudder_api::selector::LabelSelector::parse(text).expect("selector"),
            fields: Default::default(),
        }
    }

    #[test]
    fn selector_transitions_become_added_and_deleted() {
        let s = selectors("app=web");
        let enter = Event {
            kind: EventKind::Updated,
            kv: kv(json!({"app": "web"}), 3),
            prev: Some(kv(json!({}), 2)),
        };
        assert_eq!(
            translate(&enter, &s, None).expect("ok").map(|(k, _)| k),
            Some("ADDED")
        );
        let leave = Event {
            kind: EventKind::Updated,
            kv: kv(json!({}), 4),
            prev: Some(kv(json!({"app": "web"}), 3)),
        };
        assert_eq!(
            translate(&leave, &s, None).expect("ok").map(|(k, _)| k),
            Some("DELETED")
        );
        let stay = Event {
            kind: EventKind::Updated,
            kv: kv(json!({"app": "web"}), 5),
            prev: Some(kv(json!({"app": "web"}), 4)),
        };
        assert_eq!(
            translate(&stay, &s, None).expect("ok").map(|(k, _)| k),
            Some("MODIFIED")
        );
        let mut deleted_kv = kv(json!({}), 6);
        deleted_kv.value = Bytes::new();
        let delete = Event {
            kind: EventKind::Deleted,
            kv: deleted_kv,
            prev: Some(kv(json!({"app": "web"}), 5)),
        };
        let (kind, object) = translate(&delete, &s, None).expect("ok").expect("an event");
        assert_eq!(kind, "DELETED");
        assert_eq!(object["metadata"]["resourceVersion"], "6");
        assert!(translate(&delete, &s, Some("other")).expect("ok").is_none());
    }
}
