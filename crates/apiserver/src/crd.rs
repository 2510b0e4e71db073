//! The API server's CustomResourceDefinition controller: it watches the
//! definitions and keeps what is served in step with them.
//!
//! - A definition whose names are free gets `NamesAccepted` and
//!   `Established` (with its accepted names, stored versions and the
//!   cleanup finalizer), and its served versions join the registry at once:
//!   discovery, routing and OpenAPI follow.
//! - A definition being deleted is `Terminating`: its objects are deleted,
//!   then its finalizer is removed and it goes; its resources leave the
//!   registry when it starts terminating.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use rudder_api::crd::{self, CLEANUP_FINALIZER};
use rudder_api::json::str_at;
use rudder_api::{Registry, ResourceDef};
use rudder_store::{ListOptions, WatchRequest};
use serde_json::{Value, json};

use crate::rest::objects::{decode, encode, now};
use crate::state::State;

fn crd_def(registry: &Registry) -> Option<Arc<ResourceDef>> {
    registry
        .get("apiextensions.k8s.io", "v1", "customresourcedefinitions")
        .cloned()
}

/// Serves the definitions stored now, then follows their changes until the
/// server shuts down.
pub async fn start(state: Arc<State>, base: Arc<Registry>) -> anyhow::Result<()> {
    let Some(def) = crd_def(&base) else {
        return Ok(());
    };
    let revision = reconcile(&state, &base, &def).await?;
    tokio::spawn(follow(state, base, def, revision));
    Ok(())
}

async fn follow(state: Arc<State>, base: Arc<Registry>, def: Arc<ResourceDef>, first: u64) {
    let prefix = def.key_prefix();
    let mut known = Some(first);
    loop {
        let reconciled = match known.take() {
            Some(revision) => Ok(revision),
            None => reconcile(&state, &base, &def).await,
        };
        // Then wait for the next change to any definition, and look again.
        let watched = match reconciled {
            Ok(revision) => state
                .store
                .watch(WatchRequest::prefix(
                    prefix.clone().into_bytes(),
                    revision + 1,
                ))
                .await
                .map_err(anyhow::Error::from),
            Err(e) => Err(e),
        };
        let mut stream = match watched {
            Ok(stream) => stream,
            Err(e) => {
                tracing::warn!(error = %e, "following CustomResourceDefinitions");
                if pause(&state, Duration::from_millis(500)).await {
                    return;
                }
                continue;
            }
        };
        tokio::select! {
            _ = state.shutdown.cancelled() => return,
            _ = stream.next() => {}
        }
    }
}

/// Sleeps; true when the server shuts down meanwhile.
async fn pause(state: &State, duration: Duration) -> bool {
    tokio::select! {
        _ = state.shutdown.cancelled() => true,
        _ = tokio::time::sleep(duration) => false,
    }
}

/// Brings every definition's status and the registry up to date; returns
/// the revision the definitions were read at.
async fn reconcile(state: &State, base: &Registry, def: &ResourceDef) -> anyhow::Result<u64> {
    let page = state
        .store
        .list(def.key_prefix().as_bytes(), ListOptions::default())
        .await?;
    let mut registry = base.clone();
    let mut taken: BTreeSet<(String, String)> = BTreeSet::new();
    // Names already accepted stay with their definition: those claim first,
    // then newcomers in the order they were created.
    let mut definitions = Vec::with_capacity(page.kvs.len());
    for kv in &page.kvs {
        let object = decode(kv).map_err(|s| anyhow::anyhow!(s.message))?;
        let accepted = object
            .pointer("/status/conditions")
            .and_then(Value::as_array)
            .is_some_and(|c| {
                c.iter()
                    .any(|c| c["type"] == "NamesAccepted" && c["status"] == "True")
            });
        definitions.push((!accepted, kv.create_revision, kv, object));
    }
    definitions.sort_by_key(|(newcomer, created, _, _)| (*newcomer, *created));
    for (_, _, kv, object) in definitions {
        let name = object
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        if object
            .pointer("/metadata/deletionTimestamp")
            .is_some_and(|v| !v.is_null())
        {
            finish_deletion(state, &object, kv.key.as_ref(), kv.mod_revision).await?;
            continue;
        }
        let group = str_at(&object, "/spec/group").to_string();
        let names = names_of(&object);
        let conflict = names
            .iter()
            .find(|n| taken.contains(&(group.clone(), (*n).clone())));
        let builtin_conflict = base.groups().iter().any(|g| g.name == group);
        let wanted = desired_status(&object, conflict.cloned(), builtin_conflict);
        let accepted = wanted
            .pointer("/conditions/0/status")
            .and_then(Value::as_str)
            == Some("True");
        if accepted {
            for n in &names {
                taken.insert((group.clone(), n.clone()));
            }
            for served in crd::definitions(&object) {
                registry.add(served);
            }
        }
        if let Some(updated) = with_status(&object, wanted) {
            state
                .store
                .update(kv.key.as_ref(), encode(&updated), kv.mod_revision)
                .await?;
            tracing::info!(crd = %name, established = accepted, "CustomResourceDefinition status");
        }
    }
    state.set_registry(Arc::new(registry));
    // Follow from the revision read: our own writes come back as events (a
    // pass that changes nothing), and nobody else's change can slip between.
    Ok(page.revision)
}

/// The names a definition claims in its group: plural, singular, kind,
/// short names.
fn names_of(crd: &Value) -> Vec<String> {
    let mut names = vec![
        str_at(crd, "/spec/names/plural").to_string(),
        str_at(crd, "/spec/names/kind").to_string(),
    ];
    if let Some(s) = crd.pointer("/spec/names/singular").and_then(Value::as_str) {
        names.push(s.to_string());
    }
    if let Some(short) = crd
        .pointer("/spec/names/shortNames")
        .and_then(Value::as_array)
    {
        names.extend(short.iter().filter_map(Value::as_str).map(str::to_string));
    }
    names.retain(|n| !n.is_empty());
    names
}

fn condition(kind: &str, ok: bool, reason: &str, message: &str, old: &Value) -> Value {
    let status = if ok { "True" } else { "False" };
    // The transition time stays while the status does.
    let previous = old
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .and_then(|c| c.iter().find(|c| c["type"] == kind));
    let time = match previous {
        Some(p) if p["status"] == status => p["lastTransitionTime"].clone(),
        _ => json!(now()),
    };
    json!({"type": kind, "status": status, "reason": reason, "message": message, "lastTransitionTime": time})
}

/// The status a definition should have.
fn desired_status(crd: &Value, conflict: Option<String>, builtin_group: bool) -> Value {
    let (accepted, reason, message) = match (&conflict, builtin_group) {
        (_, true) => (
            false,
            "ConflictWithBuiltin",
            format!(
                "{:?} is a group of built-in resources",
                str_at(crd, "/spec/group")
            ),
        ),
        (Some(name), _) => (false, "NameConflict", format!("{name:?} is already in use")),
        (None, false) => (true, "NoConflicts", "no conflicts found".to_string()),
    };
    let mut conditions = vec![condition("NamesAccepted", accepted, reason, &message, crd)];
    conditions.push(if accepted {
        condition(
            "Established",
            true,
            "InitialNamesAccepted",
            "the initial names have been accepted",
            crd,
        )
    } else {
        condition(
            "Established",
            false,
            "NotAccepted",
            "not all names are accepted",
            crd,
        )
    });
    let mut stored: Vec<Value> = crd
        .pointer("/status/storedVersions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if let Some(storage) = crd
        .pointer("/spec/versions")
        .and_then(Value::as_array)
        .and_then(|v| v.iter().find(|v| v["storage"] == true))
        .and_then(|v| v.get("name"))
        && !stored.contains(storage)
    {
        stored.push(storage.clone());
    }
    let names = crd.pointer("/spec/names").cloned().unwrap_or(json!({}));
    let mut accepted_names = names.clone();
    if accepted_names.get("listKind").is_none() {
        accepted_names["listKind"] = json!(format!("{}List", str_at(crd, "/spec/names/kind")));
    }
    if accepted_names.get("singular").is_none() {
        accepted_names["singular"] = json!(str_at(crd, "/spec/names/kind").to_lowercase());
    }
    json!({
        "conditions": conditions,
        "acceptedNames": if accepted { accepted_names } else { json!({"plural": "", "kind": ""}) },
        "storedVersions": stored,
    })
}

/// The definition with `status` and the cleanup finalizer, if that differs
/// from what it has.
fn with_status(crd: &Value, status: Value) -> Option<Value> {
    let mut updated = crd.clone();
    updated["status"] = status;
    let finalizers = updated
        .pointer_mut("/metadata")
        .and_then(Value::as_object_mut)
        .map(|m| m.entry("finalizers").or_insert_with(|| json!([])));
    if let Some(Value::Array(list)) = finalizers
        && !list.iter().any(|f| f == CLEANUP_FINALIZER)
    {
        list.push(json!(CLEANUP_FINALIZER));
    }
    if let Some(meta) = updated.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.remove("resourceVersion");
    }
    let mut current = crd.clone();
    if let Some(meta) = current.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.remove("resourceVersion");
    }
    (updated != current).then_some(updated)
}

/// A definition being deleted: its objects go, then it does.
async fn finish_deletion(
    state: &State,
    crd: &Value,
    key: &[u8],
    revision: u64,
) -> anyhow::Result<()> {
    let group = str_at(crd, "/spec/group");
    let plural = str_at(crd, "/spec/names/plural");
    if !group.is_empty() && !plural.is_empty() {
        let prefix = format!("/registry/{group}/{plural}/");
        loop {
            let page = state
                .store
                .list(
                    prefix.as_bytes(),
                    ListOptions {
                        limit: 500,
                        ..ListOptions::default()
                    },
                )
                .await?;
            if page.kvs.is_empty() {
                break;
            }
            for kv in &page.kvs {
                match state.store.delete(kv.key.as_ref(), None).await {
                    Ok(_) | Err(rudder_store::Error::NotFound) => {}
                    Err(e) => return Err(e.into()),
                }
            }
        }
    }
    let mut object = crd.clone();
    if let Some(list) = object
        .pointer_mut("/metadata/finalizers")
        .and_then(Value::as_array_mut)
    {
        list.retain(|f| f != CLEANUP_FINALIZER);
    }
    let remaining = object
        .pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .is_some_and(|l| !l.is_empty());
    if remaining {
        state.store.update(key, encode(&object), revision).await?;
    } else {
        match state.store.delete(key, Some(revision)).await {
            Ok(_) | Err(rudder_store::Error::NotFound) => {}
            Err(e) => return Err(e.into()),
        }
    }
    tracing::info!(crd = %str_at(crd, "/metadata/name"), "CustomResourceDefinition deleted with its objects");
    Ok(())
}
