//! Updating an object: upstream's `Store.Update` — one compare-and-swap
//! loop on the store's `mod_revision` around `BeforeUpdate` (identity and
//! server-set metadata kept, the part not written kept, generation, update
//! rules, validation), managed fields and what the kind's storage
//! allocates. An update that removes the last finalizer of an object being
//! deleted (not in a grace period) deletes it, as upstream's
//! `ShouldDeleteDuringUpdate`.

use rudder_api::object::{self, Part};
use rudder_api::{ResourceDef, Status};
use serde_json::Value;

use super::{
    MAX_RETRIES, Storage, Stored, WriteOptions, finalizers, is_terminating, resource_version,
    services, set_resource_version, stored,
};
use crate::response::store_error;

/// The outcome of one update attempt.
enum Attempt {
    /// The object as written (or as it was, when nothing changed).
    Done(Value),
    Retry,
}

/// Whether an update of `old` to `new` deletes the object: `new` keeps no
/// finalizers (for a namespace, no spec finalizers either) and `old` is
/// being deleted without a grace period pending.
fn deletes(def: &ResourceDef, old: &Value, new: &Value) -> bool {
    let grace = old
        .pointer("/metadata/deletionGracePeriodSeconds")
        .and_then(Value::as_i64)
        .unwrap_or(0);
    let spec_finalizers = super::delete::spec_finalizers(def, new);
    is_terminating(old) && grace == 0 && finalizers(new).is_empty() && spec_finalizers.is_empty()
}

impl Storage<'_> {
    /// Reads the object, computes its new form with `change`, and writes it
    /// if it changed — retrying on a concurrent write unless the change
    /// pinned a `resourceVersion`. `part` says what the write may change.
    /// Returns the object as stored.
    pub async fn update<F>(
        &self,
        def: &ResourceDef,
        namespace: Option<&str>,
        name: &str,
        part: Part,
        options: &WriteOptions,
        change: F,
    ) -> Result<Value, Status>
    where
        F: Fn(&Value) -> Result<Value, Status>,
    {
        // The first attempt starts from the watch cache's copy, as
        // upstream's GuaranteedUpdate does; a copy that may be stale
        // decides nothing: any failure, or finding nothing to change, is
        // retried on the stored object.
        let mut live = false;
        for _ in 0..MAX_RETRIES {
            let current = match live {
                false => self.cached_copy(def, namespace, name),
                true => None,
            };
            let cached = current.is_some();
            let current = match current {
                Some(current) => current,
                None => self.get(def, namespace, name).await?,
            };
            live = true;
            match self
                .update_once(
                    def, namespace, name, part, options, &change, current, cached,
                )
                .await
            {
                Ok(Attempt::Done(object)) => return Ok(object),
                Ok(Attempt::Retry) => continue,
                Err(_) if cached => continue,
                Err(e) => return Err(e),
            }
        }
        Err(Status::modified(def.target(), name))
    }

    /// The watch cache's copy of an object, if the cache has one.
    fn cached_copy(
        &self,
        def: &ResourceDef,
        namespace: Option<&str>,
        name: &str,
    ) -> Option<Stored> {
        let cached = self
            .state
            .running_cache(def)?
            .object(def.key(namespace, name).as_bytes())?;
        Some(Stored {
            object: super::served(def, cached.value()),
            revision: cached.revision,
        })
    }

    /// One attempt on `current`, read from the watch cache if `cached`.
    #[allow(clippy::too_many_arguments)]
    async fn update_once<F>(
        &self,
        def: &ResourceDef,
        namespace: Option<&str>,
        name: &str,
        part: Part,
        options: &WriteOptions,
        change: &F,
        current: Stored,
        cached: bool,
    ) -> Result<Attempt, Status>
    where
        F: Fn(&Value) -> Result<Value, Status>,
    {
        let (old, revision) = (current.object, current.revision);
        let mut new = change(&old)?;
        let pinned = resource_version(&new)?;
        if let Some(pinned) = pinned
            && pinned != revision
        {
            return Err(Status::modified(def.target(), name));
        }
        let allocates = services::allocates(def);
        if allocates {
            services::keep_on_update(def, &mut new, &old)?;
        }
        object::prepare_update(def, &mut new, &old, part)?;
        self.record_managed(def, part, Some(&old), &mut new, options);
        set_resource_version(&mut new, revision);
        // An apply that changes nothing but re-stamps its managedFields
        // entry (the merge compared the object before defaulting, and the
        // second had turned) is no change either: upstream stamps an entry
        // only when its fields or the object change.
        if new == old || only_managed_times_differ(&new, &old) {
            return Ok(match cached {
                true => Attempt::Retry,
                false => Attempt::Done(old),
            });
        }
        if part == Part::Main && !is_terminating(&old) {
            let ranges = self.limit_ranges(def, namespace, false, options).await?;
            self.check_limits(def, &ranges, &new)?;
            self.admit_quota(def, namespace, &new, Some(&old), options)
                .await?;
        }
        if options.dry_run {
            return Ok(Attempt::Done(new));
        }
        let store = &self.state.store;
        let key = def.key(namespace, name);
        let finalized = deletes(def, &old, &new);
        let added = if allocates && !finalized {
            services::allocate_on_update(self, def, &mut new, &old).await?
        } else {
            services::Allocation::default()
        };
        let result = if finalized {
            store
                .delete(key.as_bytes(), Some(revision))
                .await
                .map(|d| d.revision)
        } else {
            store
                .update(key.as_bytes(), stored(def, &new), revision)
                .await
                .map(|kv| kv.mod_revision)
        };
        if result.is_err() {
            services::release(self, &added).await;
        } else if allocates {
            // Free what the old object held and the new one does not.
            let after = if finalized {
                services::Allocation::default()
            } else {
                services::held_by(&new)
            };
            services::release(self, &services::held_by(&old).without(&after)).await;
        }
        match result {
            Ok(written) => {
                set_resource_version(&mut new, written);
                Ok(Attempt::Done(new))
            }
            Err(rudder_store::Error::Conflict { .. }) if pinned.is_none() => Ok(Attempt::Retry),
            // Someone else deleted it first: what was asked is done.
            Err(rudder_store::Error::NotFound) if finalized => Ok(Attempt::Done(new)),
            Err(e) => Err(store_error(e, def, name)),
        }
    }
}

/// Whether `a` and `b` differ at most in their managedFields entries'
/// `time`s.
fn only_managed_times_differ(a: &Value, b: &Value) -> bool {
    let strip = |v: &Value| {
        let mut v = v.clone();
        if let Some(entries) = v
            .pointer_mut("/metadata/managedFields")
            .and_then(Value::as_array_mut)
        {
            for entry in entries {
                if let Some(entry) = entry.as_object_mut() {
                    entry.remove("time");
                }
            }
        }
        v
    };
    strip(a) == strip(b)
}
