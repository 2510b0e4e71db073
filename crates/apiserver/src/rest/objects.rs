//! What a request addresses and asks, read off its path and query for the
//! storage layer: the resource, namespace and name, the write options
//! (field manager, `dryRun`), the selectors and list options.

use rudder_api::{ResourceDef, Status};
use serde_json::Value;

use super::Context;
use crate::storage::{ListRequest, Selectors, WriteOptions};

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

    /// The store key prefix of the collection addressed (for the watch
    /// cache, which holds every object of the resource).
    pub fn prefix(&self) -> String {
        match self.namespace() {
            Some(ns) => format!("{}{ns}/", self.def().key_prefix()),
            None => self.def().key_prefix(),
        }
    }

    /// The named object, as stored, and its revision.
    pub async fn current(&self) -> Result<(Value, u64), Status> {
        let stored = self
            .state
            .storage()
            .get(self.def(), self.namespace(), self.name())
            .await?;
        Ok((stored.object, stored.revision))
    }

    /// An object of the core (`v1`) resource `plural`, as stored: what a
    /// subresource reads besides its own object (a pod's node, a
    /// Service's endpoints).
    pub async fn core_object(
        &self,
        plural: &str,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Value, Status> {
        let def = self
            .state
            .registry()
            .get("", "v1", plural)
            .cloned()
            .ok_or_else(|| Status::internal(format!("no {plural} resource")))?;
        Ok(self
            .state
            .storage()
            .get(&def, namespace, name)
            .await?
            .object)
    }

    /// Where the agent of node `name` listens: its host and port.
    pub async fn agent_of(&self, name: &str) -> Result<(String, u16), Status> {
        let node = self.core_object("nodes", None, name).await?;
        crate::kubelet::location(&node).map_err(Status::internal)
    }

    /// How this request writes: `dryRun`, and — when the write records
    /// managed fields itself (`record`) — the request's field manager.
    pub fn write_options(&self, record: bool) -> Result<WriteOptions, Status> {
        Ok(WriteOptions {
            manager: if record {
                Some(super::apply::field_manager(self, "UpdateOptions")?)
            } else {
                None
            },
            dry_run: self.params.dry_run()?,
            admit: true,
        })
    }

    /// The request's `labelSelector` and `fieldSelector`.
    pub fn selectors(&self) -> Result<Selectors, Status> {
        Selectors::parse(
            self.def(),
            self.params.get("labelSelector").unwrap_or(""),
            self.params.get("fieldSelector").unwrap_or(""),
        )
    }

    /// The request's list options.
    pub fn list_request(&self) -> Result<ListRequest, Status> {
        Ok(ListRequest {
            limit: self
                .params
                .number("limit")?
                .filter(|l| *l > 0)
                .map(|l| l as usize),
            continue_token: self.params.get("continue").map(str::to_string),
            resource_version: self.params.get("resourceVersion").map(str::to_string),
            resource_version_match: self.params.get("resourceVersionMatch").map(str::to_string),
        })
    }
}
