//! The storage layer: upstream's generic registry store
//! (`apiserver/pkg/registry/generic/registry/store.go`), the one way objects
//! get into and out of the [`Store`](rudder_store::Store).
//!
//! Every write — a client's request through the REST handlers, and every
//! writer inside the API server (the CRD controller, Service address
//! allocation, eviction, the objects the server maintains) — goes through
//! [`Storage`]: [`create`](Storage::create), the compare-and-swap
//! [`update`](Storage::update) loop, [`delete`](Storage::delete) with
//! graceful deletion, finalizers and propagation policy, and
//! [`delete_collection`](Storage::delete_collection). Each prepares the
//! object as upstream does — defaults, validation, update rules, managed
//! fields, conversion to the stored version, status and spec kept apart,
//! generation — and none needs an HTTP request. The handlers in
//! [`crate::rest`] are a thin layer that decodes requests into these calls.
//!
//! Nothing outside this module writes the store (`scripts/check-deps`
//! keeps it so).

mod admission;
mod create;
mod delete;
mod ensure;
mod list;
pub mod services;
mod update;

use std::time::SystemTime;

use bytes::Bytes;
use rudder_api::managed::{self, Ignore, Scope};
use rudder_api::object::{self, Part};
use rudder_api::structure::Types;
use rudder_api::{ResourceDef, Status};
use rudder_store::KeyValue;
use serde_json::{Value, json};

pub use admission::QuotaLocks;
pub use delete::{
    DeleteOptions, Deleted, FOREGROUND_FINALIZER, KUBERNETES_FINALIZER, ORPHAN_FINALIZER,
};
pub use ensure::{Keep, SYSTEM_NAMESPACES};
pub use list::{Continue, ListRequest, Listed, Selectors};

use crate::response::store_error;
use crate::state::State;

/// How many times a write retries a conflict it may resolve itself.
pub const MAX_RETRIES: usize = 8;

/// How a write is made: who it is recorded under, and whether it is real.
#[derive(Debug, Clone, Default)]
pub struct WriteOptions {
    /// The field manager the write's fields are recorded under in
    /// `managedFields`; `None` when the change records them itself (a
    /// server-side apply) or leaves them (a binding).
    pub manager: Option<String>,
    /// `dryRun=All`: everything but the write itself.
    pub dry_run: bool,
    /// A client's request, which admission sees (LimitRanger,
    /// ResourceQuota); the API server's own writes skip it.
    pub admit: bool,
}

impl WriteOptions {
    /// A write the API server makes itself, recorded as upstream's own
    /// (`kube-apiserver`).
    pub fn server() -> Self {
        WriteOptions {
            manager: Some("kube-apiserver".into()),
            dry_run: false,
            admit: false,
        }
    }
}

/// An object as stored, in the version asked for, with its revision.
#[derive(Debug, Clone)]
pub struct Stored {
    /// With `metadata.resourceVersion`.
    pub object: Value,
    pub revision: u64,
}

/// The storage layer of one API server.
#[derive(Debug, Clone, Copy)]
pub struct Storage<'a> {
    state: &'a State,
}

impl State {
    /// The storage layer over this server's store.
    pub fn storage(&self) -> Storage<'_> {
        Storage { state: self }
    }
}

/// The namespaces no one may delete (upstream's NamespaceLifecycle).
pub const IMMORTAL_NAMESPACES: &[&str] = &["default", "kube-system", "kube-public"];

impl<'a> Storage<'a> {
    fn now(&self) -> SystemTime {
        self.state.clock.now()
    }

    fn now_rfc3339(&self) -> String {
        self.state.clock.now_rfc3339()
    }

    /// The object `name` (in `namespace`), in `def`'s version.
    pub async fn get(
        &self,
        def: &ResourceDef,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Stored, Status> {
        let kv = self
            .state
            .store
            .get(def.key(namespace, name).as_bytes(), None)
            .await
            .map_err(|e| store_error(e, def, name))?;
        Ok(Stored {
            object: served(def, decode(&kv)?),
            revision: kv.mod_revision,
        })
    }

    /// Refuses writes into a namespace that does not exist, and creates in
    /// one being deleted (upstream's NamespaceLifecycle admission).
    pub async fn check_namespace(
        &self,
        def: &ResourceDef,
        namespace: Option<&str>,
        object: Option<&Value>,
    ) -> Result<(), Status> {
        let Some(ns) = namespace.filter(|_| def.namespaced) else {
            return Ok(());
        };
        let Some(namespaces) = self.state.registry().get("", "v1", "namespaces").cloned() else {
            return Ok(());
        };
        // From the watch cache, as upstream's admission reads its informer;
        // a namespace the cache has not seen yet is read from the store.
        let cache = self.state.cache(&namespaces);
        cache.wait_for(0).await?;
        let found = match cache.object(namespaces.key(None, ns).as_bytes()) {
            // Neither word in it: not terminating, nothing to parse.
            Some(cached)
                if !contains(&cached.json, b"deletionTimestamp")
                    && !contains(&cached.json, b"Terminating") =>
            {
                return Ok(());
            }
            Some(cached) => cached.value(),
            None => self.get(&namespaces, None, ns).await?.object,
        };
        let Some(object) = object else {
            return Ok(());
        };
        let terminating = found.pointer("/status/phase").and_then(Value::as_str)
            == Some("Terminating")
            || is_terminating(&found);
        if terminating {
            let name = ["/metadata/name", "/metadata/generateName"]
                .iter()
                .find_map(|p| object.pointer(p).and_then(Value::as_str))
                .filter(|n| !n.is_empty())
                .unwrap_or("Unknown");
            return Err(terminating_namespace(def, name, ns));
        }
        Ok(())
    }

    /// Records a write of `part` from `old` to `new` in `new`'s managed
    /// fields, under `options`' manager.
    fn record_managed(
        &self,
        def: &ResourceDef,
        part: Part,
        old: Option<&Value>,
        new: &mut Value,
        options: &WriteOptions,
    ) {
        if let Some(manager) = &options.manager {
            let (api_version, now) = (def.api_version(), self.now_rfc3339());
            managed::update(&scope(def, part, &api_version, &now), old, new, manager);
        }
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// The 403 a create in a terminating namespace gets, as upstream words it.
fn terminating_namespace(def: &ResourceDef, name: &str, namespace: &str) -> Status {
    let target = def.target();
    let qualified = if target.group.is_empty() {
        target.resource.to_string()
    } else {
        format!("{}.{}", target.resource, target.group)
    };
    let mut status = Status::forbidden(format!(
        "{qualified} {name:?} is forbidden: unable to create new content in namespace {namespace} because it is being terminated"
    ));
    status.details = Some(Box::new(rudder_api::status::Details {
        group: target.group.to_string(),
        kind: target.resource.to_string(),
        name: name.to_string(),
        uid: String::new(),
    }));
    status.causes = vec![rudder_api::Cause::new(
        "NamespaceTerminating",
        "metadata.namespace",
        format!("namespace {namespace} is being terminated"),
    )];
    status
}

/// What managed fields need for a write of `part` of `def`'s objects.
pub fn scope<'s>(
    def: &'s ResourceDef,
    part: Part,
    api_version: &'s str,
    now: &'s str,
) -> Scope<'s> {
    let (types, root) = match &def.custom {
        Some(custom) => (&custom.types, custom.root.clone()),
        None => {
            let types = Types::builtin().as_ref();
            (types, types.root(&def.schema_name))
        }
    };
    let (subresource, ignore) = match part {
        Part::Main | Part::Binding | Part::Finalize if object::has_status_subresource(def) => {
            ("", Ignore::Status)
        }
        Part::Main | Part::Binding | Part::Finalize => ("", Ignore::Nothing),
        Part::Status => ("status", Ignore::AllButStatus),
        // The rest of the pod is the stored one's: only its ephemeral
        // containers can differ.
        Part::EphemeralContainers => ("ephemeralcontainers", Ignore::Status),
    };
    Scope {
        types,
        root,
        api_version,
        subresource,
        ignore,
        now,
    }
}

/// The object stored in `kv`, with its `resourceVersion`.
pub fn decode(kv: &KeyValue) -> Result<Value, Status> {
    let mut object: Value = serde_json::from_slice(&kv.value).map_err(|e| {
        Status::internal(format!(
            "stored object {:?} is not JSON: {e}",
            String::from_utf8_lossy(&kv.key)
        ))
    })?;
    set_resource_version(&mut object, kv.mod_revision);
    Ok(object)
}

pub fn set_resource_version(object: &mut Value, revision: u64) {
    if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.insert("resourceVersion".into(), json!(revision.to_string()));
    }
}

/// An object as `def`'s version serves it: converted from its stored
/// version when that differs (autoscaling/v1, events.k8s.io/v1, a custom
/// resource's other versions).
pub fn served(def: &ResourceDef, mut object: Value) -> Value {
    if let Some(custom) = &def.custom {
        // Conversion `None`: only the apiVersion differs between versions.
        if custom.storage_api_version != def.api_version() {
            object["apiVersion"] = json!(def.api_version());
        }
        return object;
    }
    match def.conversion {
        Some(conversion) => (conversion.from_storage)(object),
        None => object,
    }
}

/// The bytes to store for an object of `def`'s version: without its
/// `resourceVersion`, in Go's field order (so that every read served from
/// them, the watch cache's included, is written as upstream's).
fn stored(def: &ResourceDef, object: &Value) -> Bytes {
    if let Some(custom) = &def.custom
        && custom.storage_api_version != def.api_version()
    {
        let mut object = object.clone();
        object["apiVersion"] = json!(custom.storage_api_version);
        return encode("", &object);
    }
    match def.conversion {
        Some(conversion) => encode(
            conversion.storage_schema,
            &(conversion.to_storage)(object.clone()),
        ),
        None => encode(&def.schema_name, object),
    }
}

/// The bytes to store for `object` of the built-in definition `schema`
/// ("" for none).
fn encode(schema: &str, object: &Value) -> Bytes {
    let ordered = rudder_api::protobuf::go_json::Ordered::new(schema, object).without_version();
    Bytes::from(serde_json::to_vec(&ordered).unwrap_or_default())
}

/// The `resourceVersion` an object carries, if any.
pub fn resource_version(object: &Value) -> Result<Option<u64>, Status> {
    match object
        .pointer("/metadata/resourceVersion")
        .and_then(Value::as_str)
    {
        None | Some("") => Ok(None),
        Some(rv) => rv
            .parse()
            .map(Some)
            .map_err(|_| Status::bad_request(format!("invalid resourceVersion {rv:?}"))),
    }
}

pub use rudder_api::meta::{finalizers, is_deleting as is_terminating};

fn name_of(object: &Value) -> String {
    object
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

fn uid_of(object: &Value) -> String {
    object
        .pointer("/metadata/uid")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

/// A fresh object UID.
pub fn uid() -> String {
    uuid::Uuid::new_v4().to_string()
}

/// Five characters for `generateName`, from upstream's alphabet.
pub fn name_suffix() -> String {
    use rand::Rng;
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut rng = rand::rng();
    (0..5)
        .map(|_| ALPHABET[rng.random_range(0..ALPHABET.len())] as char)
        .collect()
}
