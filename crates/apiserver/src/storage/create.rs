//! Creating an object: upstream's `Store.Create` — namespace lifecycle
//! admission, `BeforeCreate` (server-set metadata, defaults, LimitRanger's
//! defaults, validation), LimitRanger's bounds and quota admission,
//! managed fields, what the kind's storage allocates (a Service's
//! addresses), and the write, created-if-absent.

use rudder_api::object::{self, Part, Stamp};
use rudder_api::{ResourceDef, Status};
use serde_json::Value;

use super::{
    Storage, WriteOptions, name_of, name_suffix, services, set_resource_version, stored, uid,
};
use crate::response::store_error;

impl Storage<'_> {
    /// Creates `object` as `def`'s kind in `namespace`; returns it as
    /// stored (or as it would be, for a dry run).
    pub async fn create(
        &self,
        def: &ResourceDef,
        namespace: Option<&str>,
        mut object: Value,
        options: &WriteOptions,
    ) -> Result<Value, Status> {
        if def.custom.as_ref().is_some_and(|c| c.terminating) {
            return Err(Status::method_not_allowed(
                "create not allowed while custom resource definition is terminating",
            ));
        }
        self.check_namespace(def, namespace, Some(&object)).await?;
        let mutations = self.mutations(def, namespace, &object, options).await?;
        let (now, uid, suffix) = (self.now_rfc3339(), uid(), name_suffix());
        object::prepare_create_admitted(
            def,
            &mut object,
            namespace,
            &Stamp {
                now: &now,
                uid: &uid,
                suffix: &suffix,
            },
            |object| mutations.apply(def, object),
        )?;
        self.check_limits(def, &mutations.ranges, &object)?;
        self.admit_quota(def, namespace, &object, None, options)
            .await?;
        self.record_managed(def, Part::Main, None, &mut object, options);
        if options.dry_run {
            return Ok(object);
        }
        let name = name_of(&object);
        let allocation = if services::allocates(def) {
            Some(services::allocate(self, def, &mut object).await?)
        } else {
            None
        };
        let key = def.key(namespace, &name);
        match self
            .state
            .store
            .create(key.as_bytes(), stored(def, &object))
            .await
        {
            Ok(kv) => {
                set_resource_version(&mut object, kv.mod_revision);
                Ok(object)
            }
            Err(e) => {
                if let Some(allocation) = &allocation {
                    services::release(self, allocation).await;
                }
                Err(store_error(e, def, &name))
            }
        }
    }
}
