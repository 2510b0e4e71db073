//! The resource registry: every resource the API server serves, described
//! once — group, version, kind, plural and singular names, scope, short
//! names, categories, verbs, subresources, the kind's strategy — with the
//! typed functions the generic handlers need (a typed round trip for field
//! validation, the OpenAPI schema). Discovery, routing, OpenAPI and Table
//! output all read from here; no handler is written per kind.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::{ClusterResourceScope, NamespaceResourceScope, Resource};
use schemars::{JsonSchema, Schema, SchemaGenerator};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::strategy::{GENERIC, Strategy};

/// The verbs of a plain resource.
pub const STANDARD_VERBS: &[&str] = &[
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];

/// Round-trips an object through its typed form.
pub type RoundTrip = fn(&Value) -> Result<Value, String>;

/// A subresource, as discovery lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subresource {
    pub name: Cow<'static, str>,
    /// The kind the subresource takes and returns: `(group, version, kind)`.
    pub group: Cow<'static, str>,
    pub version: Cow<'static, str>,
    pub kind: Cow<'static, str>,
    pub verbs: &'static [&'static str],
}

/// One served resource at one group/version.
#[derive(Clone)]
pub struct ResourceDef {
    pub group: String,
    pub version: String,
    pub kind: String,
    pub list_kind: String,
    /// The plural, as in URLs: `deployments`.
    pub plural: String,
    pub singular: String,
    pub namespaced: bool,
    pub short_names: Vec<String>,
    pub categories: Vec<String>,
    pub verbs: Vec<String>,
    pub subresources: Vec<Subresource>,
    /// Round-trips an object through its typed form: what comes back is what
    /// the type knows, so fields that differ were unknown or malformed.
    pub typed_round_trip: Option<RoundTrip>,
    /// The OpenAPI schema of the kind.
    pub schema: Option<fn(&mut SchemaGenerator) -> Schema>,
    /// The OpenAPI definition name: `io.k8s.api.apps.v1.Deployment`.
    pub schema_name: String,
    /// For a version stored as another: how to convert.
    pub conversion: Option<crate::conversion::Conversion>,
    /// Where objects are stored, when not under this group's own prefix.
    pub storage_prefix: Option<String>,
    /// For a custom resource: what its definition says.
    pub custom: Option<Arc<crate::crd::Custom>>,
    /// The warning every request to a deprecated resource gets, as
    /// upstream's `Warning: 299` header.
    pub deprecation: Option<&'static str>,
    /// Everything particular to the kind: defaults, validation, update
    /// rules, Table printer, field selectors, deletion.
    pub strategy: &'static Strategy,
}

impl std::fmt::Debug for ResourceDef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ResourceDef({})", self.gvr())
    }
}

impl ResourceDef {
    /// `apps/v1` or `v1`.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// `deployments.v1.apps`, for messages and logs.
    pub fn gvr(&self) -> String {
        format!("{}.{}.{}", self.plural, self.version, self.group)
    }

    /// What errors about this resource name: `deployments.apps`.
    pub fn target(&self) -> crate::status::Target<'_> {
        crate::status::Target {
            group: &self.group,
            resource: &self.plural,
            kind: &self.kind,
        }
    }

    /// Whether objects are stored in another version than this one, so
    /// reads convert them (and cannot be served from the watch cache as is).
    pub fn converts(&self) -> bool {
        self.conversion.is_some()
            || self
                .custom
                .as_ref()
                .is_some_and(|c| c.storage_api_version != self.api_version())
    }

    pub fn subresource(&self, name: &str) -> Option<&Subresource> {
        self.subresources.iter().find(|s| s.name == name)
    }

    pub fn has_verb(&self, verb: &str) -> bool {
        self.verbs.iter().any(|v| v == verb)
    }

    /// The store key prefix of this resource: `/registry/apps/deployments/`.
    /// Every version of a resource shares it.
    pub fn key_prefix(&self) -> String {
        if let Some(prefix) = &self.storage_prefix {
            return prefix.clone();
        }
        let group = if self.group.is_empty() {
            "core"
        } else {
            &self.group
        };
        format!("/registry/{group}/{}/", self.plural)
    }

    /// The store key of one object.
    pub fn key(&self, namespace: Option<&str>, name: &str) -> String {
        match namespace {
            Some(ns) if self.namespaced => format!("{}{ns}/{name}", self.key_prefix()),
            _ => format!("{}{name}", self.key_prefix()),
        }
    }
}

/// Whether a k8s-openapi scope type is namespaced.
pub trait Scope {
    const NAMESPACED: bool;
}
impl Scope for NamespaceResourceScope {
    const NAMESPACED: bool = true;
}
impl Scope for ClusterResourceScope {
    const NAMESPACED: bool = false;
}

/// What the k8s-openapi type does not say about a resource.
#[derive(Debug, Clone, Copy)]
pub struct Extra<'a> {
    pub short_names: &'a [&'static str],
    pub categories: &'a [&'static str],
    pub subresources: &'a [Subresource],
    pub verbs: &'a [&'static str],
    pub conversion: Option<crate::conversion::Conversion>,
    pub storage_prefix: Option<&'a str>,
    pub deprecation: Option<&'static str>,
    pub strategy: &'static Strategy,
}

impl Extra<'static> {
    pub const DEFAULT: Extra<'static> = Extra {
        short_names: &[],
        categories: &[],
        subresources: &[],
        verbs: STANDARD_VERBS,
        conversion: None,
        storage_prefix: None,
        deprecation: None,
        strategy: &GENERIC,
    };
}

fn round_trip<T: DeserializeOwned + Serialize>(value: &Value) -> Result<Value, String> {
    let typed: T = serde_json::from_value(value.clone()).map_err(|e| e.to_string())?;
    serde_json::to_value(typed).map_err(|e| e.to_string())
}

fn schema_of<T: JsonSchema>(generator: &mut SchemaGenerator) -> Schema {
    generator.subschema_for::<T>()
}

/// The definition of a built-in resource of type `T`.
pub fn builtin<T>(extra: Extra<'_>) -> ResourceDef
where
    T: Resource + DeserializeOwned + Serialize + JsonSchema,
    T::Scope: Scope,
{
    ResourceDef {
        group: T::GROUP.into(),
        version: T::VERSION.into(),
        kind: T::KIND.into(),
        list_kind: format!("{}List", T::KIND),
        plural: T::URL_PATH_SEGMENT.into(),
        singular: T::KIND.to_lowercase(),
        namespaced: <T::Scope as Scope>::NAMESPACED,
        short_names: extra.short_names.iter().map(|s| s.to_string()).collect(),
        categories: extra.categories.iter().map(|s| s.to_string()).collect(),
        verbs: extra.verbs.iter().map(|s| s.to_string()).collect(),
        subresources: extra.subresources.to_vec(),
        typed_round_trip: Some(round_trip::<T>),
        schema: Some(schema_of::<T>),
        schema_name: T::schema_name().into_owned(),
        conversion: extra.conversion,
        storage_prefix: extra.storage_prefix.map(str::to_string),
        custom: None,
        deprecation: extra.deprecation,
        strategy: extra.strategy,
    }
}

/// A group and the versions it serves, preferred first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Group {
    pub name: String,
    pub versions: Vec<String>,
}

/// Every served resource, looked up by group/version/plural.
#[derive(Debug, Clone, Default)]
pub struct Registry {
    resources: Vec<Arc<ResourceDef>>,
    by_path: BTreeMap<(String, String, String), Arc<ResourceDef>>,
    groups: Vec<Group>,
}

impl Registry {
    /// Every built-in resource rudder serves.
    pub fn builtin() -> Self {
        let mut registry = Registry::default();
        for def in crate::builtin::resources() {
            registry.add(def);
        }
        registry
    }

    pub fn add(&mut self, def: ResourceDef) {
        let def = Arc::new(def);
        let key = (def.group.clone(), def.version.clone(), def.plural.clone());
        match self.groups.iter_mut().find(|g| g.name == def.group) {
            Some(group) if !group.versions.contains(&def.version) => {
                group.versions.push(def.version.clone())
            }
            Some(_) => {}
            None => self.groups.push(Group {
                name: def.group.clone(),
                versions: vec![def.version.clone()],
            }),
        }
        self.by_path.insert(key, def.clone());
        self.resources.push(def);
    }

    pub fn get(&self, group: &str, version: &str, plural: &str) -> Option<&Arc<ResourceDef>> {
        self.by_path
            .get(&(group.to_string(), version.to_string(), plural.to_string()))
    }

    /// The served groups in discovery order: the core group first, then as added.
    pub fn groups(&self) -> &[Group] {
        &self.groups
    }

    pub fn group(&self, name: &str) -> Option<&Group> {
        self.groups.iter().find(|g| g.name == name)
    }

    /// The resources of one group/version, in the order they were added.
    pub fn resources_in<'a>(
        &'a self,
        group: &'a str,
        version: &'a str,
    ) -> impl Iterator<Item = &'a Arc<ResourceDef>> + 'a {
        self.resources
            .iter()
            .filter(move |r| r.group == group && r.version == version)
    }

    pub fn all(&self) -> &[Arc<ResourceDef>] {
        &self.resources
    }

    /// The resource of a kind at a group/version (for OpenAPI and Table).
    pub fn by_kind(&self, group: &str, version: &str, kind: &str) -> Option<&Arc<ResourceDef>> {
        self.resources
            .iter()
            .find(|r| r.group == group && r.version == version && r.kind == kind)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_resources_carry_what_kubectl_needs() {
        let registry = Registry::builtin();
        let deploy = registry
            .get("apps", "v1", "deployments")
            .expect("deployments");
        assert_eq!(deploy.kind, "Deployment");
        assert_eq!(deploy.list_kind, "DeploymentList");
        assert!(deploy.namespaced);
        assert_eq!(deploy.short_names, vec!["deploy"]);
        assert_eq!(deploy.categories, vec!["all"]);
        let scale = deploy.subresource("scale").expect("scale");
        assert_eq!(
            (
                scale.group.as_ref(),
                scale.version.as_ref(),
                scale.kind.as_ref()
            ),
            ("autoscaling", "v1", "Scale")
        );
        assert_eq!(
            deploy.key(Some("default"), "web"),
            "/registry/apps/deployments/default/web"
        );

        let ns = registry.get("", "v1", "namespaces").expect("namespaces");
        assert!(!ns.namespaced);
        assert_eq!(
            ns.key(None, "kube-system"),
            "/registry/core/namespaces/kube-system"
        );
        assert_eq!(registry.groups()[0].name, "");
        assert_eq!(
            registry.get("", "v1", "pods").expect("pods").short_names,
            vec!["po"]
        );
    }

    #[test]
    fn every_resource_is_unique_and_has_a_schema() {
        let registry = Registry::builtin();
        let mut seen = std::collections::HashSet::new();
        for def in registry.all() {
            assert!(seen.insert(def.gvr()), "{} registered twice", def.gvr());
            assert!(
                def.schema.is_some() && def.typed_round_trip.is_some(),
                "{}",
                def.gvr()
            );
            assert!(!def.schema_name.is_empty());
        }
        assert!(registry.all().len() > 40);
    }
}
