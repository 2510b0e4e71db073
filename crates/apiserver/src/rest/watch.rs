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
use super::read::{Include, table};
use crate::cache::{Cached, CachedEvent, Subscription};
use crate::negotiate::{self, Output};
use crate::response::{ApiResult, store_error};
use crate::storage::{Selectors, decode, served, set_resource_version};
use tokio::sync::broadcast;

/// How often a quiet watch asks the store how far it has got, for bookmarks.
const PROGRESS_EVERY: Duration = Duration::from_secs(30);

/// How one event line is rendered.
struct Render {
    def: std::sync::Arc<ResourceDef>,
    output: Output,
    include: Include,
    /// Table events carry column definitions only on the first.
    columns_sent: bool,
    /// For Table rows' ages.
    clock: std::sync::Arc<dyn rudder_api::time::Clock>,
}

impl Render {
    fn line(&mut self, kind: &str, object: Value) -> Bytes {
        let object = match self.output {
            Output::Json => {
                // The object in Go's field order.
                let ordered =
                    rudder_api::protobuf::go_json::Ordered::new(&self.def.schema_name, &object);
                let mut line = Vec::with_capacity(256);
                line.extend_from_slice(b"{\"type\":");
                line.extend_from_slice(json!(kind).to_string().as_bytes());
                line.extend_from_slice(b",\"object\":");
                if serde_json::to_writer(&mut line, &ordered).is_err() {
                    line.extend_from_slice(b"null");
                }
                line.extend_from_slice(b"}\n");
                return Bytes::from(line);
            }
            Output::Metadata => super::read::partial_metadata(&object),
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
                    self.clock.now_seconds(),
                )
            }
        };
        let mut line =
            serde_json::to_vec(&json!({"type": kind, "object": object})).unwrap_or_default();
        line.push(b'\n');
        Bytes::from(line)
    }
}

impl Render {
    /// A line for a cached object: its serialization is reused as is.
    fn cached_line(&mut self, kind: &str, object: &Cached) -> Bytes {
        match self.output {
            Output::Table | Output::Metadata => self.line(kind, object.value()),
            Output::Json => {
                let mut line = Vec::with_capacity(object.json.len() + 32);
                line.extend_from_slice(b"{\"type\":\"");
                line.extend_from_slice(kind.as_bytes());
                line.extend_from_slice(b"\",\"object\":");
                line.extend_from_slice(&object.json);
                line.extend_from_slice(b"}\n");
                Bytes::from(line)
            }
        }
    }

    /// The bookmark that ends a watch list's initial events (upstream's
    /// `k8s.io/initial-events-end` annotation).
    fn initial_events_end(&self, revision: u64) -> Bytes {
        self.bookmark_line(json!({
            "resourceVersion": revision.to_string(),
            "annotations": {INITIAL_EVENTS_END: "true"},
        }))
    }

    fn bookmark(&self, revision: u64) -> Bytes {
        self.bookmark_line(json!({"resourceVersion": revision.to_string()}))
    }

    /// A BOOKMARK event of this resource's kind with `metadata`.
    fn bookmark_line(&self, metadata: Value) -> Bytes {
        let bookmark = json!({"kind": self.def.kind, "apiVersion": self.def.api_version(), "metadata": metadata});
        let mut line = serde_json::to_vec(&json!({"type": "BOOKMARK", "object": bookmark}))
            .unwrap_or_default();
        line.push(b'\n');
        Bytes::from(line)
    }
}

fn error_line(status: &Status) -> Bytes {
    // `type` before `object`, and the Status in its Go field order, as
    // upstream's watch encoder writes the event.
    let mut line = b"{\"type\":\"ERROR\",\"object\":".to_vec();
    line.extend_from_slice(status.encode().trim_ascii_end());
    line.extend_from_slice(b"}\n");
    Bytes::from(line)
}

/// What a change is for a watcher that selects `matches`: ADDED, MODIFIED
/// or DELETED — an object entering the selection is ADDED, one leaving it
/// DELETED — or nothing.
fn transition(
    kind: EventKind,
    new: Option<&Value>,
    old: Option<&Value>,
    matches: &dyn Fn(&Value) -> bool,
) -> Option<&'static str> {
    let was = old.is_some_and(matches);
    match (kind, new) {
        (EventKind::Deleted, _) | (_, None) => was.then_some("DELETED"),
        (EventKind::Created, Some(new)) => matches(new).then_some("ADDED"),
        (EventKind::Updated, Some(new)) => match (was, matches(new)) {
            (true, true) => Some("MODIFIED"),
            (false, true) => Some("ADDED"),
            (true, false) => Some("DELETED"),
            (false, false) => None,
        },
    }
}

fn selects<'a>(selectors: &'a Selectors, name: Option<&'a str>) -> impl Fn(&Value) -> bool + 'a {
    move |o: &Value| {
        selectors.matches(o)
            && name.is_none_or(|n| o.pointer("/metadata/name").and_then(Value::as_str) == Some(n))
    }
}

/// The events a store event becomes for a watcher with these selectors.
fn translate(
    def: &ResourceDef,
    event: &Event,
    selectors: &Selectors,
    name: Option<&str>,
) -> Result<Option<(&'static str, Value)>, Status> {
    let matches = selects(selectors, name);
    let new = match event.kind {
        EventKind::Deleted => None,
        _ => Some(served(def, decode(&event.kv)?)),
    };
    let old = event
        .prev
        .as_ref()
        .map(|kv| decode(kv).map(|v| served(def, v)))
        .transpose()?;
    let Some(kind) = transition(event.kind, new.as_ref(), old.as_ref(), &matches) else {
        return Ok(None);
    };
    Ok(Some(match new {
        Some(new) => (kind, new),
        None => {
            let mut old = old.unwrap_or(Value::Null);
            set_resource_version(&mut old, event.revision());
            (kind, old)
        }
    }))
}

/// The annotation of the bookmark that ends a watch list's initial events.
const INITIAL_EVENTS_END: &str = "k8s.io/initial-events-end";

/// How a watch starts, from its `resourceVersion`, `sendInitialEvents`
/// and `resourceVersionMatch` (upstream's watch list, KEP-3157: clients
/// from 1.34 on list by watching this way).
#[derive(Debug, PartialEq, Eq)]
struct Start {
    /// Follow changes after this revision; `None`: from the current state.
    after: Option<u64>,
    /// Send an ADDED event per object of the current state first.
    initial_events: bool,
    /// End the initial events with the `k8s.io/initial-events-end`
    /// bookmark (a watch list).
    initial_events_end: bool,
    /// The state sent must be at least this new (`NotOlderThan`).
    not_older_than: u64,
}

fn forbidden_list_option(field: &str, message: &str) -> Status {
    let mut status = Status::new(
        422,
        "Invalid",
        format!("ListOptions.meta.k8s.io \"\" is invalid: {field}: Forbidden: {message}"),
    );
    status.causes = vec![rudder_api::status::Cause::forbidden(field, message)];
    status
}

impl Start {
    fn parse(params: &super::Params) -> Result<Start, Status> {
        let rv = match params.get("resourceVersion") {
            None | Some("") | Some("0") => None,
            Some(rv) => Some(
                rv.parse::<u64>()
                    .map_err(|_| Status::bad_request(format!("invalid resourceVersion {rv:?}")))?,
            ),
        };
        let send = match params.get("sendInitialEvents") {
            None => None,
            Some("true" | "True" | "1") => Some(true),
            Some("false" | "False" | "0") => Some(false),
            Some(other) => {
                return Err(Status::bad_request(format!(
                    "invalid value for sendInitialEvents: {other:?}"
                )));
            }
        };
        let Some(send) = send else {
            // Without sendInitialEvents: the state first only when no
            // resourceVersion is given (or `0`), as upstream always did.
            return Ok(Start {
                after: rv,
                initial_events: rv.is_none(),
                initial_events_end: false,
                not_older_than: 0,
            });
        };
        if params.get("resourceVersionMatch") != Some("NotOlderThan") {
            return Err(forbidden_list_option(
                "resourceVersionMatch",
                "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
            ));
        }
        if !params.flag("allowWatchBookmarks") {
            return Err(forbidden_list_option(
                "allowWatchBookmarks",
                "sendInitialEvents requires setting allowWatchBookmarks to true",
            ));
        }
        Ok(match send {
            // The state at least as new as the resourceVersion, then its end.
            true => Start {
                after: None,
                initial_events: true,
                initial_events_end: true,
                not_older_than: rv.unwrap_or(0),
            },
            // Changes only, from the resourceVersion or from now.
            false => Start {
                after: rv,
                initial_events: false,
                initial_events_end: false,
                not_older_than: rv.unwrap_or(0),
            },
        })
    }
}

pub async fn watch(ctx: Context) -> ApiResult {
    let output = negotiate::output(&ctx.headers)?;
    let selectors = ctx.selectors()?;
    let include = Include::parse(&ctx.params)?;
    let name = ctx
        .resource
        .name
        .clone()
        .or_else(|| selectors.fields.pinned_name().map(str::to_string));
    let how = Start::parse(&ctx.params)?;
    let start = how.after;
    let timeout = match ctx.params.number("timeoutSeconds")? {
        Some(t) if t > 0 => Duration::from_secs(t as u64),
        _ => Duration::from_secs(rand::rng().random_range(1800..3600)),
    };
    let bookmarks = ctx.params.flag("allowWatchBookmarks");
    let prefix = ctx.prefix();
    let store = ctx.state.store.clone();
    let def = ctx.resource.def.clone();
    let render = Render {
        def: def.clone(),
        output,
        include,
        columns_sent: false,
        clock: ctx.state.clock.clone(),
    };
    let shutdown = ctx.state.shutdown.clone();

    // From the watch cache when its history reaches back to the start.
    let cache = ctx.state.cache(&def);
    // A watcher that selects one value of the trigger field (a kubelet's
    // `spec.nodeName=<node>`) is sent only those objects' events.
    let trigger = selectors
        .fields
        .requirements
        .iter()
        .find(|r| r.equal && r.field == crate::cache::TRIGGER_FIELD)
        .map(|r| r.value.clone());
    if cache.wait_for(0).await.is_ok() {
        cache.check_decodable(&prefix)?;
    }
    if cache.wait_for(how.not_older_than).await.is_ok()
        && let Some(subscription) = cache.subscribe(start, &prefix, trigger.as_deref())
    {
        let (tx, rx) = mpsc::channel::<Result<Bytes, std::io::Error>>(64);
        let convert = def.converts().then(|| {
            let fields = rudder_api::selector::fields_of(&def);
            (def.clone(), fields)
        });
        let follow = Follow {
            convert,
            namespace: ctx.namespace().map(str::to_string),
            selectors,
            name,
            render,
            bookmarks,
            initial_events: how.initial_events,
            initial_events_end: how.initial_events_end,
            timeout,
            shutdown,
            tx,
            metrics: ctx.state.metrics.clone(),
        };
        tokio::spawn(follow.cached(subscription));
        return Ok(stream_response(rx, output));
    }

    // The starting point, and the initial state when there is no resourceVersion.
    let mut initial = Vec::new();
    let mut initial_events_end = None;
    let from = match start {
        Some(rv) => rv + 1,
        None if !how.initial_events => {
            let page = store
                .list(
                    prefix.as_bytes(),
                    ListOptions {
                        limit: 1,
                        ..ListOptions::default()
                    },
                )
                .await
                .map_err(|e| store_error(e, &def, ""))?;
            page.revision + 1
        }
        None => {
            // `limit: 0` lists everything in one page.
            let page = store
                .list(prefix.as_bytes(), ListOptions::default())
                .await
                .map_err(|e| store_error(e, &def, ""))?;
            let matches = selects(&selectors, name.as_deref());
            for kv in &page.kvs {
                let object = served(&def, decode(kv)?);
                if matches(&object) {
                    initial.push(object);
                }
            }
            if how.initial_events_end {
                initial_events_end = Some(page.revision);
            }
            page.revision + 1
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
        clock: ctx.state.clock.clone(),
    };
    let shutdown = ctx.state.shutdown.clone();
    tokio::spawn(async move {
        for object in initial {
            if tx.send(Ok(render.line("ADDED", object))).await.is_err() {
                return;
            }
        }
        if let Some(revision) = initial_events_end
            && tx
                .send(Ok(render.initial_events_end(revision)))
                .await
                .is_err()
        {
            return;
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
                        match translate(&def, event, &selectors, name.as_deref()) {
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
                    vec![render.bookmark(revision)]
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

    Ok(stream_response(rx, output))
}

/// The streaming response of a watch.
fn stream_response(
    rx: mpsc::Receiver<Result<Bytes, std::io::Error>>,
    output: Output,
) -> axum::response::Response {
    let body = Body::from_stream(tokio_stream::wrappers::ReceiverStream::new(rx));
    let mut response = (StatusCode::OK, body).into_response();
    let content_type = match output {
        Output::Json | Output::Metadata => "application/json",
        Output::Table => "application/json;as=Table;v=v1;g=meta.k8s.io",
    };
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    response.headers_mut().insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("no-cache, private"),
    );
    response
}

/// A watch served from the watch cache.
struct Follow {
    /// For a version stored as another (autoscaling/v1, events.k8s.io/v1):
    /// its definition and selectable fields, each cached object converted
    /// for this watcher.
    convert: Option<(std::sync::Arc<ResourceDef>, &'static [&'static str])>,
    /// The namespace watched, if one: the cache's events are the whole
    /// resource's.
    namespace: Option<String>,
    selectors: Selectors,
    name: Option<String>,
    render: Render,
    bookmarks: bool,
    /// Send the snapshot's objects as ADDED events first.
    initial_events: bool,
    /// Then the bookmark that ends them (a watch list).
    initial_events_end: bool,
    timeout: Duration,
    shutdown: tokio_util::sync::CancellationToken,
    tx: mpsc::Sender<Result<Bytes, std::io::Error>>,
    metrics: std::sync::Arc<crate::metrics::Metrics>,
}

impl Follow {
    /// A cached object as this watch serves it.
    fn view(&self, object: &std::sync::Arc<Cached>) -> std::sync::Arc<Cached> {
        match &self.convert {
            Some((def, fields)) => object.converted(|v| served(def, v), fields, &def.schema_name),
            None => object.clone(),
        }
    }

    /// Whether a cached object is in the namespace watched.
    fn in_namespace(&self, object: &Cached) -> bool {
        self.namespace.as_deref().is_none_or(|ns| {
            object
                .selectable
                .pointer("/metadata/namespace")
                .and_then(Value::as_str)
                == Some(ns)
        })
    }

    fn line(&mut self, event: &CachedEvent) -> Option<Bytes> {
        match event {
            CachedEvent::Change { object, .. } if !self.in_namespace(object) => None,
            CachedEvent::Change {
                kind, object, prev, ..
            } => {
                let (object, prev) = (self.view(object), prev.as_ref().map(|p| self.view(p)));
                let matches = selects(&self.selectors, self.name.as_deref());
                let new = (*kind != EventKind::Deleted).then_some(&object.selectable);
                let what = transition(*kind, new, prev.as_ref().map(|p| &p.selectable), &matches)?;
                Some(self.render.cached_line(what, &object))
            }
            CachedEvent::Progress(revision) => {
                self.bookmarks.then(|| self.render.bookmark(*revision))
            }
            CachedEvent::Broken { error, .. } => Some(error_line(error)),
        }
    }

    async fn send(&self, line: Bytes) -> bool {
        self.tx.send(Ok(line)).await.is_ok()
    }

    async fn cached(mut self, subscription: Subscription) {
        let Subscription {
            replay,
            initial,
            mut live,
            after,
        } = subscription;
        if let Some(snapshot) = initial.filter(|_| self.initial_events) {
            let matches = selects(&self.selectors, self.name.as_deref());
            let objects: Vec<_> = snapshot
                .objects
                .iter()
                .map(|o| self.view(o))
                .filter(|o| matches(&o.selectable))
                .collect();
            for object in objects {
                let line = self.render.cached_line("ADDED", &object);
                if !self.send(line).await {
                    return;
                }
            }
            if self.initial_events_end {
                let line = self.render.initial_events_end(snapshot.revision);
                if !self.send(line).await {
                    return;
                }
            }
        }
        for event in &replay {
            if let Some(line) = self.line(event)
                && !self.send(line).await
            {
                return;
            }
        }
        let deadline = tokio::time::sleep(self.timeout);
        tokio::pin!(deadline);
        loop {
            let event = tokio::select! {
                _ = &mut deadline => return,
                _ = self.shutdown.cancelled() => return,
                _ = self.tx.closed() => return,
                received = live.recv() => match received {
                    Ok(event) => event,
                    // Too slow to keep up: end the watch, as upstream does; the
                    // client watches again from the last version it saw.
                    Err(broadcast::error::RecvError::Lagged(_)) | Err(broadcast::error::RecvError::Closed) => return,
                },
            };
            if event.revision() <= after {
                continue;
            }
            if let Some(line) = self.line(&event) {
                if !self.send(line).await {
                    return;
                }
                match event.as_ref() {
                    CachedEvent::Change { received, .. } => {
                        self.metrics.watch_delivery(received.elapsed())
                    }
                    // The error ends the watch: the client lists again.
                    CachedEvent::Broken { .. } => return,
                    CachedEvent::Progress(_) => {}
                }
            }
        }
    }
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
    #[test]
    fn watch_lists_start_from_the_state_and_end_it_with_a_bookmark() {
        let parse = |query: &str| Start::parse(&super::super::Params::parse(Some(query)));
        let list =
            "sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true";
        assert_eq!(
            parse(list),
            Ok(Start {
                after: None,
                initial_events: true,
                initial_events_end: true,
                not_older_than: 0,
            })
        );
        assert_eq!(
            parse(&format!("{list}&resourceVersion=42")).map(|s| (s.after, s.not_older_than)),
            Ok((None, 42))
        );
        // Without sendInitialEvents, as before: the state only without a
        // resourceVersion, and no closing bookmark.
        assert_eq!(
            parse("resourceVersion=7").map(|s| (s.after, s.initial_events)),
            Ok((Some(7), false))
        );
        assert_eq!(
            parse("").map(|s| (s.initial_events, s.initial_events_end)),
            Ok((true, false))
        );
        let refused =
            parse("sendInitialEvents=true&allowWatchBookmarks=true").expect_err("no match");
        assert_eq!(refused.code, 422);
        assert_eq!(
            refused.message,
            "ListOptions.meta.k8s.io \"\" is invalid: resourceVersionMatch: Forbidden: sendInitialEvents requires setting resourceVersionMatch to NotOlderThan"
        );
        let refused = parse("sendInitialEvents=true&resourceVersionMatch=NotOlderThan")
            .expect_err("no bookmarks");
        assert!(
            refused.message.contains("allowWatchBookmarks"),
            "{}",
            refused.message
        );
    }

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
        let registry = rudder_api::Registry::builtin();
        let def = registry.get("", "v1", "configmaps").expect("def").clone();
        let s = selectors("app=web");
        let enter = Event {
            kind: EventKind::Updated,
            kv: kv(json!({"app": "web"}), 3),
            prev: Some(kv(json!({}), 2)),
        };
        assert_eq!(
            translate(&def, &enter, &s, None)
                .expect("ok")
                .map(|(k, _)| k),
            Some("ADDED")
        );
        let leave = Event {
            kind: EventKind::Updated,
            kv: kv(json!({}), 4),
            prev: Some(kv(json!({"app": "web"}), 3)),
        };
        assert_eq!(
            translate(&def, &leave, &s, None)
                .expect("ok")
                .map(|(k, _)| k),
            Some("DELETED")
        );
        let stay = Event {
            kind: EventKind::Updated,
            kv: kv(json!({"app": "web"}), 5),
            prev: Some(kv(json!({"app": "web"}), 4)),
        };
        assert_eq!(
            translate(&def, &stay, &s, None)
                .expect("ok")
                .map(|(k, _)| k),
            Some("MODIFIED")
        );
        let mut deleted_kv = kv(json!({}), 6);
        deleted_kv.value = Bytes::new();
        let delete = Event {
            kind: EventKind::Deleted,
            kv: deleted_kv,
            prev: Some(kv(json!({"app": "web"}), 5)),
        };
        let (kind, object) = translate(&def, &delete, &s, None)
            .expect("ok")
            .expect("an event");
        assert_eq!(kind, "DELETED");
        assert_eq!(object["metadata"]["resourceVersion"], "6");
        assert!(
            translate(&def, &delete, &s, Some("other"))
                .expect("ok")
                .is_none()
        );
    }
}
