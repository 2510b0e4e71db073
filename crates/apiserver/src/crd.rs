//! The API server's CustomResourceDefinition controller: it watches the
//! definitions and keeps what is served in step with them.
//!
//! - A definition whose names are free gets `NamesAccepted` and
//!   `Established` (with its accepted names, stored versions and the
//!   cleanup finalizer), and its served versions join the registry at once:
//!   discovery, routing and OpenAPI follow.
//! - A definition being deleted is `Terminating`: its objects are deleted
//!   through the storage layer, so their own finalizers hold them; once none
//!   is left its finalizer is removed and it goes (upstream's CRD finalizer
//!   controller, with its `Terminating` condition). Its resources leave the
//!   registry when it starts terminating.
//!
//! Every write goes through the storage layer.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use rudder_api::crd::{self, CLEANUP_FINALIZER};
use rudder_api::json::str_at;
use rudder_api::object::Part;
use rudder_api::{Registry, ResourceDef, Status};
use rudder_store::{ListOptions, WatchRequest};
use serde_json::{Value, json};

use crate::state::State;
use crate::storage::{DeleteOptions, ListRequest, Selectors, WriteOptions, decode};

/// How often a definition whose objects are still going looks again.
const RECHECK: Duration = Duration::from_secs(5);

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
    let deleting = Deleting::default();
    let revision = reconcile(&state, &deleting, &base, &def).await?;
    tokio::spawn(follow(state, deleting, base, def, revision));
    Ok(())
}

async fn follow(
    state: Arc<State>,
    deleting: Deleting,
    base: Arc<Registry>,
    def: Arc<ResourceDef>,
    first: u64,
) {
    let prefix = def.key_prefix();
    let mut known = Some(first);
    loop {
        let reconciled = match known.take() {
            Some(done) => Ok(done),
            None => reconcile(&state, &deleting, &base, &def).await,
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
async fn reconcile(
    state: &Arc<State>,
    deleting: &Deleting,
    base: &Registry,
    def: &ResourceDef,
) -> anyhow::Result<u64> {
    let page = state
        .store
        .list(def.key_prefix().as_bytes(), ListOptions::default())
        .await?;
    let mut registry = base.clone();
    let mut terminating = Vec::new();
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
    for (_, _, _, object) in definitions {
        let name = object
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        let group = str_at(&object, "/spec/group").to_string();
        let names = names_of(&object);
        let conflict = names
            .iter()
            .find(|n| taken.contains(&(group.clone(), (*n).clone())));
        let builtin_conflict = base.groups().iter().any(|g| g.name == group);
        if object
            .pointer("/metadata/deletionTimestamp")
            .is_some_and(|v| !v.is_null())
        {
            // Still served (creates refused) while its objects go, by a task
            // of its own so no other definition waits behind it.
            let served = object
                .pointer("/status/conditions")
                .and_then(Value::as_array)
                .is_some_and(|c| {
                    c.iter()
                        .any(|c| c["type"] == "Established" && c["status"] == "True")
                });
            if served && conflict.is_none() && !builtin_conflict {
                for n in &names {
                    taken.insert((group.clone(), n.clone()));
                }
                for served in crd::definitions(&object) {
                    registry.add(served);
                }
            }
            let uid = str_at(&object, "/metadata/uid").to_string();
            terminating.push((name.clone(), uid));
            continue;
        }
        let now = state.clock.now_rfc3339();
        let wanted = desired_status(&object, conflict.cloned(), builtin_conflict, &now);
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
        match write_status(state, def, &name, &object, wanted).await {
            Ok(true) => {
                tracing::info!(crd = %name, established = accepted, "CustomResourceDefinition status")
            }
            Ok(false) => {}
            // One definition's trouble holds no other back.
            Err(error) => {
                tracing::warn!(crd = %name, %error, "could not write a CustomResourceDefinition's status")
            }
        }
    }
    state.set_registry(Arc::new(registry));
    // Only now, with creates refused, do their objects start to go.
    for (name, uid) in terminating {
        start_deletion(state, deleting, def, &name, &uid);
    }
    // Follow from the revision read: our own writes come back as events (a
    // pass that changes nothing), and nobody else's change can slip between.
    Ok(page.revision)
}

/// The definitions whose objects a task is deleting now.
type Deleting = Arc<std::sync::Mutex<BTreeSet<String>>>;

/// Starts the task that deletes a terminating definition's objects and
/// then the definition, unless one runs already.
fn start_deletion(
    state: &Arc<State>,
    deleting: &Deleting,
    def: &ResourceDef,
    name: &str,
    uid: &str,
) {
    let key = uid.to_string();
    if !deleting
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(key.clone())
    {
        return;
    }
    let deleting = deleting.clone();
    let (state, def, name, uid) = (
        state.clone(),
        def.clone(),
        name.to_string(),
        uid.to_string(),
    );
    tokio::spawn(async move {
        loop {
            match finish_deletion(&state, &def, &name, &uid).await {
                Ok(true) => break,
                Ok(false) => {}
                Err(error) => {
                    tracing::warn!(crd = %name, %error, "deleting a CustomResourceDefinition's objects")
                }
            }
            if pause(&state, RECHECK).await {
                break;
            }
        }
        deleting
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&key);
    });
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

fn condition(kind: &str, ok: bool, reason: &str, message: &str, old: &Value, now: &str) -> Value {
    let status = if ok { "True" } else { "False" };
    // The transition time stays while the status does.
    let previous = old
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .and_then(|c| c.iter().find(|c| c["type"] == kind));
    let time = match previous {
        Some(p) if p["status"] == status => p["lastTransitionTime"].clone(),
        _ => json!(now),
    };
    json!({"type": kind, "status": status, "reason": reason, "message": message, "lastTransitionTime": time})
}

/// The status a definition should have.
fn desired_status(crd: &Value, conflict: Option<String>, builtin_group: bool, now: &str) -> Value {
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
    let mut conditions = vec![condition(
        "NamesAccepted",
        accepted,
        reason,
        &message,
        crd,
        now,
    )];
    conditions.push(if accepted {
        condition(
            "Established",
            true,
            "InitialNamesAccepted",
            "the initial names have been accepted",
            crd,
            now,
        )
    } else {
        condition(
            "Established",
            false,
            "NotAccepted",
            "not all names are accepted",
            crd,
            now,
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

/// Gives a definition the cleanup finalizer and `status`, each written only
/// if it differs; returns whether anything was written.
async fn write_status(
    state: &State,
    def: &ResourceDef,
    name: &str,
    crd: &Value,
    status: Value,
) -> anyhow::Result<bool> {
    let storage = state.storage();
    let options = WriteOptions::server();
    let mut wrote = false;
    if !crate::storage::finalizers(crd)
        .iter()
        .any(|f| f == CLEANUP_FINALIZER)
    {
        storage
            .update(def, None, name, Part::Main, &options, |old| {
                let mut new = old.clone();
                let list = new["metadata"]
                    .as_object_mut()
                    .map(|m| m.entry("finalizers").or_insert_with(|| json!([])));
                if let Some(Value::Array(list)) = list
                    && !list.iter().any(|f| f == CLEANUP_FINALIZER)
                {
                    list.push(json!(CLEANUP_FINALIZER));
                }
                strip_version(&mut new);
                Ok(new)
            })
            .await
            .map_err(anyhow_status)?;
        wrote = true;
    }
    if crd.get("status") != Some(&status) {
        storage
            .update(def, None, name, Part::Status, &options, |old| {
                let mut new = old.clone();
                new["status"] = status.clone();
                strip_version(&mut new);
                Ok(new)
            })
            .await
            .map_err(anyhow_status)?;
        wrote = true;
    }
    Ok(wrote)
}

fn strip_version(object: &mut Value) {
    if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.remove("resourceVersion");
    }
}

fn anyhow_status(status: Status) -> anyhow::Error {
    anyhow::anyhow!("{}", status.message)
}

/// A definition being deleted: its objects are deleted (their finalizers
/// holding them as long as they say); once none is left, its finalizer
/// goes and so does it. Returns whether it is done.
async fn finish_deletion(
    state: &State,
    def: &ResourceDef,
    name: &str,
    uid: &str,
) -> anyhow::Result<bool> {
    let storage = state.storage();
    let options = WriteOptions::server();
    let crd = match storage.get(def, None, name).await {
        Ok(stored) => stored.object,
        Err(status) if status.code == 404 => return Ok(true),
        Err(status) => return Err(anyhow_status(status)),
    };
    // Another definition of the same name (this one was force-removed and
    // made again): not this task's to delete.
    let deleting = crd
        .pointer("/metadata/deletionTimestamp")
        .is_some_and(|t| !t.is_null());
    if str_at(&crd, "/metadata/uid") != uid || !deleting {
        return Ok(true);
    }
    // Any served version addresses every object (they share one prefix).
    let custom = crd::definitions(&crd).into_iter().next();
    let remaining = match &custom {
        Some(custom) => {
            storage
                .delete_collection(
                    custom,
                    None,
                    &Selectors::default(),
                    &DeleteOptions::default(),
                    &options,
                )
                .await
                .map_err(anyhow_status)?;
            storage
                .list(custom, None, &Selectors::default(), &ListRequest::default())
                .await
                .map_err(anyhow_status)?
                .items
                .len()
        }
        None => 0,
    };
    let now = state.clock.now_rfc3339();
    let (status, reason, message) = if remaining > 0 {
        (
            "True",
            "InstanceDeletionInProgress",
            "CustomResource deletion is in progress".to_string(),
        )
    } else {
        (
            "False",
            "InstanceDeletionCompleted",
            "removed all instances".to_string(),
        )
    };
    let terminating = json!({"type": "Terminating", "status": status, "reason": reason, "message": message, "lastTransitionTime": now});
    let current = crd
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .and_then(|c| c.iter().find(|c| c["type"] == "Terminating"));
    let changed = current.is_none_or(|c| {
        (&c["status"], &c["reason"], &c["message"])
            != (
                &terminating["status"],
                &terminating["reason"],
                &terminating["message"],
            )
    });
    if changed {
        storage
            .update(def, None, name, Part::Status, &options, |old| {
                let mut new = old.clone();
                let conditions = new["status"]["conditions"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default();
                let mut conditions: Vec<Value> = conditions
                    .into_iter()
                    .filter(|c| c["type"] != "Terminating")
                    .collect();
                conditions.push(terminating.clone());
                new["status"]["conditions"] = json!(conditions);
                strip_version(&mut new);
                Ok(new)
            })
            .await
            .map_err(anyhow_status)?;
    }
    if remaining > 0 {
        return Ok(false);
    }
    // The last finalizer removed deletes the definition.
    match storage
        .update(def, None, name, Part::Main, &options, |old| {
            let mut new = old.clone();
            // The uid pins the update to this definition.
            new["metadata"]["uid"] = json!(uid);
            if let Some(list) = new
                .pointer_mut("/metadata/finalizers")
                .and_then(Value::as_array_mut)
            {
                list.retain(|f| f != CLEANUP_FINALIZER);
            }
            strip_version(&mut new);
            Ok(new)
        })
        .await
    {
        Ok(_) => {}
        Err(status) if status.code == 404 => {}
        Err(status) => return Err(anyhow_status(status)),
    }
    tracing::info!(crd = %name, "CustomResourceDefinition deleted with its objects");
    Ok(true)
}
