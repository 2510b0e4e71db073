//! What the API server serves, as controllers that handle every resource
//! (the garbage collector, the namespace controller) need to know it:
//! upstream's discovery client and REST mapper, on aggregated discovery.

use std::collections::HashMap;

use kube::Client;
use kube::api::ApiResource;
use kube::discovery::{ApiCapabilities, Discovery, Scope, verbs};

/// A served resource and what it supports.
#[derive(Debug, Clone)]
pub struct Resource {
    pub api: ApiResource,
    pub namespaced: bool,
    pub verbs: Vec<String>,
}

impl Resource {
    pub fn supports(&self, verb: &str) -> bool {
        self.verbs.iter().any(|v| v == verb)
    }

    /// `pods.` or `deployments.apps`, as upstream's messages name a
    /// resource.
    pub fn qualified(&self) -> String {
        format!("{}.{}", self.api.plural, self.api.group)
    }
}

/// One look at discovery: every resource at its group's preferred
/// version, and a mapping from any served kind to its resource.
#[derive(Debug, Clone, Default)]
pub struct Resources {
    preferred: Vec<Resource>,
    /// `(group, version, kind)` → resource, every served version.
    by_kind: HashMap<(String, String, String), Resource>,
}

fn resource(api: ApiResource, caps: &ApiCapabilities) -> Resource {
    Resource {
        namespaced: caps.scope == Scope::Namespaced,
        verbs: caps.operations.clone(),
        api,
    }
}

impl Resources {
    /// Reads discovery (aggregated, one request per root).
    pub async fn discover(client: &Client) -> Result<Resources, kube::Error> {
        let discovery = Discovery::new(client.clone()).run_aggregated().await?;
        let mut resources = Resources::default();
        for group in discovery.groups() {
            for version in group.versions() {
                for (api, caps) in group.versioned_resources(version) {
                    let key = (api.group.clone(), api.version.clone(), api.kind.clone());
                    resources.by_kind.insert(key, resource(api, &caps));
                }
            }
            for (api, caps) in group.recommended_resources() {
                resources.preferred.push(resource(api, &caps));
            }
        }
        Ok(resources)
    }

    /// Every resource at its group's preferred version.
    pub fn preferred(&self) -> &[Resource] {
        &self.preferred
    }

    /// The resource of `kind` at `api_version` (`apps/v1`, `v1`), or —
    /// when that version is not served — at another version of its group.
    pub fn for_kind(&self, api_version: &str, kind: &str) -> Option<&Resource> {
        let (group, version) = match api_version.split_once('/') {
            Some((g, v)) => (g, v),
            None => ("", api_version),
        };
        self.by_kind
            .get(&(group.to_string(), version.to_string(), kind.to_string()))
            .or_else(|| {
                self.preferred
                    .iter()
                    .find(|r| r.api.group == group && r.api.kind == kind)
            })
    }

    /// Resources that can be listed, watched and deleted: what the garbage
    /// collector watches (events excepted, as upstream ignores them).
    pub fn deletable(&self) -> impl Iterator<Item = &Resource> {
        self.preferred.iter().filter(|r| {
            r.supports(verbs::DELETE)
                && r.supports(verbs::LIST)
                && r.supports(verbs::WATCH)
                && !(r.api.plural == "events"
                    && matches!(r.api.group.as_str(), "" | "events.k8s.io"))
        })
    }
}
