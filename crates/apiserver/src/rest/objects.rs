//! Objects in and out of the store: keys, JSON encoding, `resourceVersion`
//! (the store's `mod_revision`, never stored inside the object), and the
//! namespace checks every namespaced write makes.

use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use rudder_api::{ResourceDef, Status};
use rudder_store::KeyValue;
use serde_json::{Value, json};

use super::Context;
use crate::response::store_error;
use crate::state::State;

/// The current time, RFC 3339.
pub fn now() -> String {
    rudder_api::time::format_rfc3339(now_seconds())
}

pub fn now_seconds() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
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
/// version when that differs (autoscaling/v1, events.k8s.io/v1).
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

/// The bytes to store for an object of `def`'s version.
pub fn stored(def: &ResourceDef, object: &Value) -> Bytes {
    if let Some(custom) = &def.custom
        && custom.storage_api_version != def.api_version()
    {
        let mut object = object.clone();
        object["apiVersion"] = json!(custom.storage_api_version);
        return encode(&object);
    }
    match def.conversion {
        Some(conversion) => encode(&(conversion.to_storage)(object.clone())),
        None => encode(object),
    }
}

/// The bytes to store for `object` (without its `resourceVersion`).
pub fn encode(object: &Value) -> Bytes {
    let mut object = object.clone();
    if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.remove("resourceVersion");
    }
    Bytes::from(serde_json::to_vec(&object).unwrap_or_default())
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

impl Context {
    pub fn def(&self) -> &ResourceDef {
        &self.resource.def
    }

    pub fn name(&self) -> &str {
        self.resource.name.as_deref().unwrap_or_default()
    }

    pub fn namespace(&self) -> Option<&str> {
        self.resource.namespace.as_deref()
    }

    /// The store key of the named object.
    pub fn key(&self) -> String {
        self.def().key(self.namespace(), self.name())
    }

    /// The store key prefix of the collection addressed.
    pub fn prefix(&self) -> String {
        match self.namespace() {
            Some(ns) => format!("{}{ns}/", self.def().key_prefix()),
            None => self.def().key_prefix(),
        }
    }

    /// The named object and its revision.
    pub async fn current(&self) -> Result<(Value, u64), Status> {
        let kv = self
            .state
            .store
            .get(self.key().as_bytes(), None)
            .await
            .map_err(|e| store_error(e, self.def(), self.name()))?;
        Ok((served(self.def(), decode(&kv)?), kv.mod_revision))
    }

    /// Refuses writes into a namespace that does not exist or is being
    /// deleted (upstream's NamespaceLifecycle admission).
    pub async fn check_namespace(&self, creating: bool) -> Result<(), Status> {
        let Some(ns) = self.namespace() else {
            return Ok(());
        };
        let namespaces = self.state.registry().get("", "v1", "namespaces").cloned();
        let Some(def) = namespaces else { return Ok(()) };
        match self
            .state
            .store
            .get(def.key(None, ns).as_bytes(), None)
            .await
        {
            Ok(kv) => {
                let object = decode(&kv)?;
                if creating
                    && object
                        .pointer("/metadata/deletionTimestamp")
                        .is_some_and(|v| !v.is_null())
                {
                    return Err(Status::forbidden(format!(
                        "unable to create new content in namespace {ns} because it is being terminated"
                    )));
                }
                Ok(())
            }
            Err(rudder_store::Error::NotFound) => Err(Status::not_found(def.target(), ns)),
            Err(e) => Err(store_error(e, &def, ns)),
        }
    }
}

/// The namespaces that exist from the first start.
pub const SYSTEM_NAMESPACES: &[&str] =
    &["default", "kube-system", "kube-public", "kube-node-lease"];

/// Creates the system namespaces if absent.
pub async fn bootstrap_namespaces(state: &State) -> anyhow::Result<()> {
    for name in SYSTEM_NAMESPACES {
        let object = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}});
        ensure(
            state,
            ("", "v1", "namespaces"),
            None,
            object,
            Keep::Existing,
        )
        .await?;
    }
    Ok(())
}

/// What [`ensure`] does with an object that is already there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Keep {
    /// Leave it as it is (users may have changed it).
    Existing,
    /// Make its content (all but metadata) the server's again.
    Content,
}

/// Writes an object the server maintains (a system namespace, the
/// `kubernetes` Service and its endpoints) through the same create and
/// update preparation as a client's request: created if absent, its content
/// put back if `keep` says so.
pub async fn ensure(
    state: &State,
    (group, version, resource): (&str, &str, &str),
    namespace: Option<&str>,
    mut object: Value,
    keep: Keep,
) -> anyhow::Result<Value> {
    let def = state
        .registry()
        .get(group, version, resource)
        .cloned()
        .ok_or_else(|| anyhow::anyhow!("no {resource} resource"))?;
    let name = object
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let key = def.key(namespace, &name);
    let failed =
        |what: &str, e: &dyn std::fmt::Display| anyhow::anyhow!("{what} {resource} {name}: {e}");
    match state.store.get(key.as_bytes(), None).await {
        Ok(kv) => {
            let old = decode(&kv).map_err(|e| failed("read", &e))?;
            let mut new = old.clone();
            if keep == Keep::Content {
                for (field, value) in object.as_object().into_iter().flatten() {
                    if field != "metadata" {
                        new[field.as_str()] = value.clone();
                    }
                }
            }
            if new == old {
                return Ok(old);
            }
            rudder_api::object::prepare_update(
                &def,
                &mut new,
                &old,
                rudder_api::object::Part::Main,
            )
            .map_err(|e| failed("update", &e))?;
            state
                .store
                .update(key.as_bytes(), encode(&new), kv.mod_revision)
                .await
                .map_err(|e| failed("update", &e))?;
            Ok(new)
        }
        Err(rudder_store::Error::NotFound) => {
            let stamp = rudder_api::object::Stamp {
                now: &now(),
                uid: &uid(),
                suffix: "",
            };
            rudder_api::object::prepare_create(&def, &mut object, namespace, &stamp)
                .map_err(|e| failed("create", &e))?;
            match state.store.create(key.as_bytes(), encode(&object)).await {
                Ok(_) | Err(rudder_store::Error::AlreadyExists) => Ok(object),
                Err(e) => Err(failed("create", &e)),
            }
        }
        Err(e) => Err(failed("read", &e)),
    }
}
