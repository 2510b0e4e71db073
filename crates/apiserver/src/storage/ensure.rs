//! Objects the API server maintains itself — the system namespaces, the
//! `kubernetes` Service and its endpoints — written through the same
//! create and update as a client's request.

use rudder_api::object::Part;
use serde_json::{Value, json};

use super::{Storage, WriteOptions};

/// What [`Storage::ensure`] does with an object that is already there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Keep {
    /// Leave it as it is (users may have changed it).
    Existing,
    /// Make its content (all but metadata) the server's again.
    Content,
}

/// The namespaces that exist from the first start.
pub const SYSTEM_NAMESPACES: &[&str] =
    &["default", "kube-system", "kube-public", "kube-node-lease"];

impl Storage<'_> {
    /// Creates `object` of `(group, version, resource)` if absent; puts its
    /// content back if `keep` says so.
    pub async fn ensure(
        &self,
        (group, version, resource): (&str, &str, &str),
        namespace: Option<&str>,
        object: Value,
        keep: Keep,
    ) -> anyhow::Result<Value> {
        let def = self
            .state
            .registry()
            .get(group, version, resource)
            .cloned()
            .ok_or_else(|| anyhow::anyhow!("no {resource} resource"))?;
        let name = object
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        let failed = |what: &str, e: &dyn std::fmt::Display| {
            anyhow::anyhow!("{what} {resource} {name}: {e}")
        };
        let options = WriteOptions::server();
        let updated = self
            .update(&def, namespace, &name, Part::Main, &options, |old| {
                let mut new = old.clone();
                if keep == Keep::Content {
                    for (field, value) in object.as_object().into_iter().flatten() {
                        if field != "metadata" {
                            new[field.as_str()] = value.clone();
                        }
                    }
                }
                Ok(new)
            })
            .await;
        match updated {
            Ok(object) => Ok(object),
            Err(status) if status.code == 404 => {
                match self.create(&def, namespace, object.clone(), &options).await {
                    Ok(created) => Ok(created),
                    // Another server made it meanwhile.
                    Err(status) if status.reason == "AlreadyExists" => Ok(object),
                    Err(status) => Err(failed("create", &status)),
                }
            }
            Err(status) => Err(failed("update", &status)),
        }
    }

    /// Creates upstream's two system PriorityClasses if absent (its API
    /// server's bootstrap does the same).
    pub async fn bootstrap_priority_classes(&self) -> anyhow::Result<()> {
        for (name, value, description) in [
            (
                "system-node-critical",
                2_000_001_000,
                "Used for system critical pods that must not be moved from their current node.",
            ),
            (
                "system-cluster-critical",
                2_000_000_000,
                "Used for system critical pods that must run in the cluster, but can be moved to another node if necessary.",
            ),
        ] {
            let object = json!({
                "apiVersion": "scheduling.k8s.io/v1",
                "kind": "PriorityClass",
                "metadata": {"name": name},
                "value": value,
                "description": description,
            });
            self.ensure(
                ("scheduling.k8s.io", "v1", "priorityclasses"),
                None,
                object,
                Keep::Existing,
            )
            .await?;
        }
        Ok(())
    }

    /// Creates the system namespaces if absent.
    pub async fn bootstrap_namespaces(&self) -> anyhow::Result<()> {
        for name in SYSTEM_NAMESPACES {
            let object =
                json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}});
            self.ensure(("", "v1", "namespaces"), None, object, Keep::Existing)
                .await?;
        }
        Ok(())
    }
}
