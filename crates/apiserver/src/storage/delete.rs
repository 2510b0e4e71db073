//! Deleting objects, as upstream's `Store.Delete` and `rest.BeforeDelete`:
//!
//! - preconditions (uid, resourceVersion) are checked against the stored
//!   object;
//! - a kind with graceful deletion (a Pod on a node) is marked with
//!   `deletionTimestamp` = now + grace and stays until its grace ends
//!   (whoever runs it deletes it again with grace 0); a second delete may
//!   only shorten the grace;
//! - the propagation policy becomes the garbage collector's finalizers:
//!   `orphan` for Orphan (or the kind's default, for batch/v1 Jobs and
//!   v1 ReplicationControllers), `foregroundDeletion` for Foreground, none
//!   for Background — a later delete may swap them;
//! - an object with finalizers is marked deleted (`deletionTimestamp` now,
//!   `deletionGracePeriodSeconds` 0) and stays until the last finalizer is
//!   removed (see `update.rs`); one without is removed at once;
//! - a Namespace is marked `Terminating` and stays until the namespace
//!   controller has emptied it and cleared its `spec.finalizers`.
//!
//! What comes back says which happened ([`Deleted`]).

use rudder_api::strategy::{Propagation, Rest};
use rudder_api::{Cause, ResourceDef, Status};
use serde_json::{Value, json};

use super::{
    IMMORTAL_NAMESPACES, MAX_RETRIES, Selectors, Storage, WriteOptions, finalizers, is_terminating,
    name_of, services, set_resource_version, stored, uid_of,
};
use crate::response::store_error;

/// The finalizer that makes the garbage collector orphan an object's
/// dependents before it goes.
pub const ORPHAN_FINALIZER: &str = "orphan";
/// The finalizer that holds an object until the garbage collector has
/// deleted its dependents that block it.
pub const FOREGROUND_FINALIZER: &str = "foregroundDeletion";
/// The namespace finalizer the namespace controller clears.
pub const KUBERNETES_FINALIZER: &str = "kubernetes";

/// `DeleteOptions`, decoded.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeleteOptions {
    pub grace_period: Option<i64>,
    pub propagation: Option<Propagation>,
    /// The deprecated `orphanDependents`.
    pub orphan_dependents: Option<bool>,
    pub uid: Option<String>,
    pub resource_version: Option<u64>,
}

impl DeleteOptions {
    /// Reads `DeleteOptions` from a request body (already parsed) and the
    /// query's `gracePeriodSeconds` and `propagationPolicy`.
    pub fn parse(
        body: Option<&Value>,
        grace_period: Option<i64>,
        propagation: Option<&str>,
    ) -> Result<DeleteOptions, Status> {
        let mut options = DeleteOptions::default();
        let invalid = |cause: Cause| {
            let message = format!(
                "DeleteOptions.meta.k8s.io \"\" is invalid: {}: {}",
                cause.field, cause.message
            );
            let mut status = Status::new(422, "Invalid", message);
            status.details = Some(Box::new(rudder_api::status::Details {
                group: "meta.k8s.io".into(),
                kind: "DeleteOptions".into(),
                name: String::new(),
                uid: String::new(),
            }));
            status.causes = vec![cause];
            status
        };
        let mut policy = propagation.map(str::to_string);
        if let Some(body) = body {
            options.grace_period = body.get("gracePeriodSeconds").and_then(Value::as_i64);
            options.orphan_dependents = body.get("orphanDependents").and_then(Value::as_bool);
            options.uid = body
                .pointer("/preconditions/uid")
                .and_then(Value::as_str)
                .map(str::to_string);
            options.resource_version = match body
                .pointer("/preconditions/resourceVersion")
                .and_then(Value::as_str)
            {
                Some(rv) => Some(rv.parse().map_err(|_| {
                    Status::bad_request(format!("invalid resourceVersion precondition {rv:?}"))
                })?),
                None => None,
            };
            if let Some(p) = body.get("propagationPolicy").and_then(Value::as_str) {
                policy = Some(p.to_string());
            }
        }
        if let Some(grace) = grace_period {
            options.grace_period = Some(grace);
        }
        if let Some(policy) = policy.filter(|p| !p.is_empty()) {
            options.propagation = Some(Propagation::parse(&policy).ok_or_else(|| {
                invalid(Cause::not_supported(
                    "propagationPolicy",
                    &json!(policy),
                    &["Foreground", "Background", "Orphan", "nil"],
                ))
            })?);
        }
        if options.propagation.is_some() && options.orphan_dependents.is_some() {
            return Err(invalid(Cause::invalid(
                "propagationPolicy",
                &json!(options.propagation.map(Propagation::as_str)),
                "orphanDependents and deletionPropagation cannot be both set",
            )));
        }
        Ok(options)
    }
}

/// What a delete did.
#[derive(Debug, Clone)]
pub enum Deleted {
    /// Removed: the object's last state.
    Gone(Value),
    /// Marked deleted and kept until its grace period ends or its
    /// finalizers are removed: the object as now stored.
    Pending(Value),
}

impl Deleted {
    pub fn object(&self) -> &Value {
        match self {
            Deleted::Gone(o) | Deleted::Pending(o) => o,
        }
    }
}

/// The finalizers a Namespace's own spec holds it with.
pub fn spec_finalizers(def: &ResourceDef, object: &Value) -> Vec<String> {
    if !is_namespace(def) {
        return Vec::new();
    }
    rudder_api::meta::strings_at(object, "/spec/finalizers")
}

fn is_namespace(def: &ResourceDef) -> bool {
    def.strategy.rest == Rest::Namespace
}

/// The garbage collector's finalizers the delete leaves on `object`
/// (upstream's `deletionFinalizersForGarbageCollection`), or `None` when
/// they do not change.
fn gc_finalizers(
    def: &ResourceDef,
    object: &Value,
    options: &DeleteOptions,
) -> Option<Vec<String>> {
    let default = def.strategy.default_propagation?;
    let existing = finalizers(object);
    let has = |f: &str| existing.iter().any(|e| e == f);
    let orphan = match (options.orphan_dependents, options.propagation) {
        (Some(orphan), _) => orphan,
        (None, Some(policy)) => policy == Propagation::Orphan,
        (None, None) if has(ORPHAN_FINALIZER) => true,
        (None, None) if has(FOREGROUND_FINALIZER) => false,
        (None, None) => default == Propagation::Orphan,
    };
    let foreground = match (options.orphan_dependents, options.propagation) {
        (Some(_), _) => false,
        (None, Some(policy)) => policy == Propagation::Foreground,
        (None, None) => has(FOREGROUND_FINALIZER),
    };
    let mut wanted: Vec<String> = existing
        .iter()
        .filter(|f| *f != ORPHAN_FINALIZER && *f != FOREGROUND_FINALIZER)
        .cloned()
        .collect();
    if orphan {
        wanted.push(ORPHAN_FINALIZER.into());
    }
    if foreground {
        wanted.push(FOREGROUND_FINALIZER.into());
    }
    (wanted != existing).then_some(wanted)
}

fn set_finalizers(object: &mut Value, list: &[String]) {
    if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        if list.is_empty() {
            meta.remove("finalizers");
        } else {
            meta.insert("finalizers".into(), json!(list));
        }
    }
}

/// Marks `object` deleted now (upstream's `markAsDeleting`): the earlier
/// of its deletion time and now, no grace period, and its generation
/// counted once.
fn mark_deleting(object: &mut Value, now: i64) {
    let existing = object
        .pointer("/metadata/deletionTimestamp")
        .and_then(Value::as_str)
        .and_then(rudder_api::time::parse_rfc3339);
    let first = existing.is_none();
    if existing.is_none_or(|at| at > now) {
        object["metadata"]["deletionTimestamp"] = json!(rudder_api::time::format_rfc3339(now));
    }
    object["metadata"]["deletionGracePeriodSeconds"] = json!(0);
    if first {
        bump_generation(object);
    }
}

fn bump_generation(object: &mut Value) {
    if let Some(generation) = object
        .pointer("/metadata/generation")
        .and_then(Value::as_i64)
        .filter(|g| *g > 0)
    {
        object["metadata"]["generation"] = json!(generation + 1);
    }
}

/// What a graceful kind's delete decides (upstream's `BeforeDelete`).
enum Grace {
    /// Not graceful: delete now or hold for finalizers.
    None,
    /// Marked with this grace period from now.
    Start(i64),
    /// Already in a grace period that the request does not shorten.
    Pending,
}

impl Storage<'_> {
    /// Deletes `name` as `options` say; see the module documentation.
    pub async fn delete(
        &self,
        def: &ResourceDef,
        namespace: Option<&str>,
        name: &str,
        options: &DeleteOptions,
        write: &WriteOptions,
    ) -> Result<Deleted, Status> {
        if is_namespace(def) && IMMORTAL_NAMESPACES.contains(&name) {
            let mut status = Status::forbidden(format!(
                "namespaces {name:?} is forbidden: this namespace may not be deleted"
            ));
            status.details = Some(Box::new(rudder_api::status::Details {
                group: String::new(),
                kind: "namespaces".into(),
                name: name.into(),
                uid: String::new(),
            }));
            return Err(status);
        }
        for _ in 0..MAX_RETRIES {
            match self
                .delete_once(def, namespace, name, options, write)
                .await?
            {
                Some(deleted) => return Ok(deleted),
                None => continue,
            }
        }
        Err(Status::modified(def.target(), name))
    }

    /// One attempt; `None` when a concurrent write means trying again.
    async fn delete_once(
        &self,
        def: &ResourceDef,
        namespace: Option<&str>,
        name: &str,
        options: &DeleteOptions,
        write: &WriteOptions,
    ) -> Result<Option<Deleted>, Status> {
        let current = self.get(def, namespace, name).await?;
        let (mut object, revision) = (current.object, current.revision);
        check_preconditions(def, name, &object, revision, options)?;
        let now = rudder_api::time::unix_seconds(self.now());
        let key = def.key(namespace, name);

        if is_namespace(def) && !spec_finalizers(def, &object).is_empty() {
            if is_terminating(&object) {
                return Ok(Some(Deleted::Pending(object)));
            }
            // The first delete of a namespace: it terminates.
            let original = object.clone();
            object["metadata"]["deletionTimestamp"] = json!(rudder_api::time::format_rfc3339(now));
            object["status"]["phase"] = json!("Terminating");
            let mut list =
                gc_finalizers(def, &object, options).unwrap_or_else(|| finalizers(&object));
            // Upstream's namespace storage: `orphanDependents: false` is a
            // foreground deletion.
            if options.orphan_dependents == Some(false)
                && !list.iter().any(|f| f == FOREGROUND_FINALIZER)
            {
                list.push(FOREGROUND_FINALIZER.into());
            }
            set_finalizers(&mut object, &list);
            return self
                .write_pending(def, &key, name, object, &original, revision, write)
                .await;
        }

        let grace = match def.strategy.graceful_delete {
            None => Grace::None,
            Some(grace_of) => {
                let requested = options.grace_period.map(|g| if g < 0 { 1 } else { g });
                let current = object
                    .pointer("/metadata/deletionGracePeriodSeconds")
                    .and_then(Value::as_i64);
                match (is_terminating(&object), current) {
                    (true, Some(current)) if current > 0 => match requested {
                        Some(g) if g < current => Grace::Start(g),
                        _ => Grace::Pending,
                    },
                    (true, _) => Grace::None,
                    (false, _) => match grace_of(&object, requested) {
                        0 => Grace::None,
                        g => Grace::Start(g),
                    },
                }
            }
        };
        let grace = match grace {
            Grace::Pending => return Ok(Some(Deleted::Pending(object))),
            // A grace period shortened to nothing: deleted now (or, held by
            // finalizers, marked so), as upstream's `lastGraceful == 0`.
            Grace::Start(0) => Grace::None,
            other => other,
        };
        let original = object.clone();
        let gc = gc_finalizers(def, &object, options);
        if let Some(list) = &gc {
            set_finalizers(&mut object, list);
        }
        let held = !finalizers(&object).is_empty();
        match grace {
            Grace::Start(grace) => {
                let deadline = match object
                    .pointer("/metadata/deletionTimestamp")
                    .and_then(Value::as_str)
                    .and_then(rudder_api::time::parse_rfc3339)
                {
                    // A shortened grace period: moved back, not before now.
                    Some(at) => {
                        let old = object
                            .pointer("/metadata/deletionGracePeriodSeconds")
                            .and_then(Value::as_i64)
                            .unwrap_or(0);
                        (at - old + grace).max(now)
                    }
                    None => {
                        bump_generation(&mut object);
                        now + grace
                    }
                };
                object["metadata"]["deletionTimestamp"] =
                    json!(rudder_api::time::format_rfc3339(deadline));
                object["metadata"]["deletionGracePeriodSeconds"] = json!(grace);
                self.write_pending(def, &key, name, object, &original, revision, write)
                    .await
            }
            Grace::None | Grace::Pending if held => {
                mark_deleting(&mut object, now);
                self.write_pending(def, &key, name, object, &original, revision, write)
                    .await
            }
            Grace::None | Grace::Pending => {
                if write.dry_run {
                    return Ok(Some(Deleted::Gone(object)));
                }
                match self
                    .state
                    .store
                    .delete(key.as_bytes(), Some(revision))
                    .await
                {
                    Ok(deleted) => {
                        if services::allocates(def) {
                            services::release(self, &services::held_by(&object)).await;
                        }
                        set_resource_version(&mut object, deleted.revision);
                        Ok(Some(Deleted::Gone(object)))
                    }
                    Err(rudder_store::Error::Conflict { .. }) => Ok(None),
                    Err(e) => Err(store_error(e, def, name)),
                }
            }
        }
    }

    /// Writes an object marked deleted (unless that changes nothing from
    /// `original`, as it was read: a repeated delete writes nothing);
    /// `None` on a concurrent write.
    #[allow(clippy::too_many_arguments)]
    async fn write_pending(
        &self,
        def: &ResourceDef,
        key: &str,
        name: &str,
        mut object: Value,
        original: &Value,
        revision: u64,
        write: &WriteOptions,
    ) -> Result<Option<Deleted>, Status> {
        if write.dry_run || object == *original {
            return Ok(Some(Deleted::Pending(object)));
        }
        match self
            .state
            .store
            .update(key.as_bytes(), stored(def, &object), revision)
            .await
        {
            Ok(kv) => {
                set_resource_version(&mut object, kv.mod_revision);
                Ok(Some(Deleted::Pending(object)))
            }
            Err(rudder_store::Error::Conflict { .. }) => Ok(None),
            Err(e) => Err(store_error(e, def, name)),
        }
    }

    /// Deletes every object of the collection that `selectors` select,
    /// each as [`delete`](Storage::delete) would; returns them as listed.
    pub async fn delete_collection(
        &self,
        def: &ResourceDef,
        namespace: Option<&str>,
        selectors: &Selectors,
        options: &DeleteOptions,
        write: &WriteOptions,
    ) -> Result<Vec<Value>, Status> {
        use futures::StreamExt;
        /// Deletes in flight at once: enough to share the store's fsyncs.
        const WORKERS: usize = 16;
        let listed = self
            .list(def, namespace, selectors, &super::ListRequest::default())
            .await?;
        let results: Vec<Result<Option<Value>, Status>> =
            futures::stream::iter(listed.items.into_iter().map(|object| async move {
                let name = name_of(&object);
                let ns = object
                    .pointer("/metadata/namespace")
                    .and_then(Value::as_str)
                    .map(str::to_string);
                match self.delete(def, ns.as_deref(), &name, options, write).await {
                    Ok(_) => Ok(Some(object)),
                    Err(status) if status.code == 404 => Ok(None),
                    Err(status) => Err(status),
                }
            }))
            .buffered(WORKERS)
            .collect()
            .await;
        let mut deleted = Vec::new();
        for result in results {
            if let Some(object) = result? {
                deleted.push(object);
            }
        }
        Ok(deleted)
    }
}

fn check_preconditions(
    def: &ResourceDef,
    name: &str,
    object: &Value,
    revision: u64,
    options: &DeleteOptions,
) -> Result<(), Status> {
    let object_uid = uid_of(object);
    if let Some(uid) = &options.uid
        && *uid != object_uid
    {
        return Err(Status::conflict(
            def.target(),
            name,
            &format!(
                "Precondition failed: UID in precondition: {uid}, UID in object meta: {object_uid}"
            ),
        ));
    }
    if let Some(rv) = options.resource_version
        && rv != revision
    {
        return Err(Status::conflict(
            def.target(),
            name,
            &format!(
                "Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {revision}"
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use rudder_api::Registry;

    fn options(policy: Option<Propagation>) -> DeleteOptions {
        DeleteOptions {
            propagation: policy,
            ..DeleteOptions::default()
        }
    }

    #[test]
    fn propagation_becomes_the_garbage_collectors_finalizers() {
        let registry = Registry::builtin();
        let deploy = registry.get("apps", "v1", "deployments").expect("def");
        let object = json!({"metadata": {"name": "d", "finalizers": ["x"]}});
        assert_eq!(
            gc_finalizers(deploy, &object, &options(None)),
            None,
            "background: nothing"
        );
        assert_eq!(
            gc_finalizers(deploy, &object, &options(Some(Propagation::Orphan))),
            Some(vec!["x".into(), "orphan".into()])
        );
        assert_eq!(
            gc_finalizers(deploy, &object, &options(Some(Propagation::Foreground))),
            Some(vec!["x".into(), "foregroundDeletion".into()])
        );
        // A later delete swaps one for the other.
        let orphaning = json!({"metadata": {"finalizers": ["orphan"]}});
        assert_eq!(
            gc_finalizers(deploy, &orphaning, &options(Some(Propagation::Foreground))),
            Some(vec!["foregroundDeletion".into()])
        );
        assert_eq!(
            gc_finalizers(deploy, &orphaning, &options(None)),
            None,
            "kept"
        );
        // orphanDependents: false is background, not foreground.
        let legacy = DeleteOptions {
            orphan_dependents: Some(false),
            ..DeleteOptions::default()
        };
        assert_eq!(gc_finalizers(deploy, &orphaning, &legacy), Some(vec![]));
        // batch/v1 Jobs orphan by default.
        let jobs = registry.get("batch", "v1", "jobs").expect("def");
        assert_eq!(
            gc_finalizers(jobs, &json!({"metadata": {}}), &options(None)),
            Some(vec!["orphan".into()])
        );
    }

    #[test]
    fn delete_options_are_validated_as_upstream() {
        let both = json!({"propagationPolicy": "Orphan", "orphanDependents": true});
        let error = DeleteOptions::parse(Some(&both), None, None).expect_err("both");
        assert_eq!(error.code, 422);
        assert!(
            error
                .message
                .contains("orphanDependents and deletionPropagation cannot be both set"),
            "{}",
            error.message
        );
        let bad = DeleteOptions::parse(None, None, Some("Sometimes")).expect_err("bad");
        assert_eq!(bad.code, 422);
        assert!(
            bad.message
                .contains("supported values: \"Foreground\", \"Background\", \"Orphan\", \"nil\""),
            "{}",
            bad.message
        );
        let query = DeleteOptions::parse(None, Some(5), Some("Foreground")).expect("valid");
        assert_eq!(
            (query.grace_period, query.propagation),
            (Some(5), Some(Propagation::Foreground))
        );
    }
}
