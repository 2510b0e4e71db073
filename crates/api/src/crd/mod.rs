//! CustomResourceDefinitions (apiextensions.k8s.io/v1): the resources a
//! definition serves, checks of the definition itself, and what a custom
//! resource's handlers need from it — its schema for pruning, defaulting
//! and validation ([`schema`]), its structure for server-side apply, its
//! printer columns and its scale subresource.

use std::borrow::Cow;
use std::sync::Arc;

use serde_json::{Value, json};

use crate::json::str_at;
use crate::registry::{ResourceDef, STANDARD_VERBS, Subresource};
use crate::status::Cause;
use crate::structure::{Shape, Types};

pub mod cel;
pub mod schema;

/// The finalizer that makes deleting a definition delete its objects first.
pub const CLEANUP_FINALIZER: &str = "customresourcecleanup.apiextensions.k8s.io";

const GET_PATCH_UPDATE: &[&str] = &["get", "patch", "update"];

/// One additional printer column.
#[derive(Debug, Clone)]
pub struct PrinterColumn {
    pub name: String,
    pub type_: String,
    pub format: String,
    pub description: String,
    pub priority: i64,
    pub json_path: String,
}

/// Where a custom resource keeps what its scale subresource shows.
#[derive(Debug, Clone)]
pub struct ScalePaths {
    pub spec_replicas: String,
    pub status_replicas: String,
    pub label_selector: Option<String>,
}

/// What one served version of a custom resource carries beyond a
/// [`ResourceDef`].
#[derive(Debug)]
pub struct Custom {
    /// The definition's name: `widgets.example.com`.
    pub crd: String,
    /// `apiVersion` of the stored form: `example.com/v1`.
    pub storage_api_version: String,
    /// The version's `openAPIV3Schema` (`{}` when it has none).
    pub schema: Value,
    /// Its structure, for server-side apply.
    pub types: Types,
    pub root: Shape,
    pub printer_columns: Vec<PrinterColumn>,
    pub scale: Option<ScalePaths>,
    /// The definition is being deleted: its objects are still served (so
    /// their finalizers can be removed) but no new one may be created.
    pub terminating: bool,
}

fn strings(value: &Value, pointer: &str) -> Vec<String> {
    value
        .pointer(pointer)
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

/// Kubernetes version order: GA before beta before alpha, higher first
/// (`v2`, `v1`, `v1beta2`, `v1beta1`, `v1alpha1`, then other names).
pub fn version_priority(version: &str) -> (u8, u32, u32, String) {
    let parse = |v: &str| -> Option<(u8, u32, u32)> {
        let rest = v.strip_prefix('v')?;
        let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
        let major: u32 = digits.parse().ok()?;
        let tail = &rest[digits.len()..];
        if tail.is_empty() {
            return Some((0, u32::MAX - major, 0));
        }
        for (kind, rank) in [("beta", 1u8), ("alpha", 2u8)] {
            if let Some(n) = tail.strip_prefix(kind) {
                let minor: u32 = n.parse().ok()?;
                return Some((rank, u32::MAX - major, u32::MAX - minor));
            }
        }
        None
    };
    match parse(version) {
        Some((rank, major, minor)) => (rank, major, minor, String::new()),
        None => (3, 0, 0, version.to_string()),
    }
}

/// Checks a definition as upstream's validation does, for what rudder
/// relies on.
pub fn validate_definition(crd: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    let group = str_at(crd, "/spec/group");
    let plural = str_at(crd, "/spec/names/plural");
    let name = str_at(crd, "/metadata/name");
    if group.is_empty() {
        causes.push(Cause::required("spec.group"));
    } else if !group.contains('.') {
        causes.push(Cause::invalid(
            "spec.group",
            &json!(group),
            "should be a domain with at least one dot",
        ));
    }
    if plural.is_empty() {
        causes.push(Cause::required("spec.names.plural"));
    }
    if str_at(crd, "/spec/names/kind").is_empty() {
        causes.push(Cause::required("spec.names.kind"));
    }
    if !plural.is_empty() && !group.is_empty() && name != format!("{plural}.{group}") {
        causes.push(Cause::invalid(
            "metadata.name",
            &json!(name),
            "must be spec.names.plural+\".\"+spec.group",
        ));
    }
    for (field, value) in [
        ("spec.names.plural", plural),
        ("spec.names.singular", str_at(crd, "/spec/names/singular")),
    ] {
        if !value.is_empty()
            && !value
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        {
            causes.push(Cause::invalid(
                field,
                &json!(value),
                "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-'",
            ));
        }
    }
    match str_at(crd, "/spec/scope") {
        "Namespaced" | "Cluster" => {}
        other => causes.push(Cause::not_supported(
            "spec.scope",
            &json!(other),
            &["Cluster", "Namespaced"],
        )),
    }
    let versions = crd
        .pointer("/spec/versions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if versions.is_empty() {
        causes.push(Cause::required("spec.versions"));
    }
    let storage = versions
        .iter()
        .filter(|v| v.get("storage").and_then(Value::as_bool) == Some(true))
        .count();
    if !versions.is_empty() && storage != 1 {
        causes.push(Cause::invalid(
            "spec.versions",
            &json!(
                versions
                    .iter()
                    .map(|v| str_at(v, "/name"))
                    .collect::<Vec<_>>()
            ),
            "must have exactly one version marked as storage version",
        ));
    }
    for (i, version) in versions.iter().enumerate() {
        if str_at(version, "/name").is_empty() {
            causes.push(Cause::required(format!("spec.versions[{i}].name")));
        }
        if let Some(schema) = version.pointer("/schema/openAPIV3Schema") {
            cel::compile_errors(
                schema,
                &format!("spec.versions[{i}].schema.openAPIV3Schema"),
                &mut causes,
            );
        }
        if let Some(schema) = version.pointer("/schema/openAPIV3Schema")
            && schema.get("type").and_then(Value::as_str) != Some("object")
        {
            causes.push(Cause::invalid(
                format!("spec.versions[{i}].schema.openAPIV3Schema.type"),
                &json!(str_at(schema, "/type")),
                "must be object at the root",
            ));
        }
    }
    match str_at(crd, "/spec/conversion/strategy") {
        "" | "None" => {}
        "Webhook" => causes.push(Cause::new(
            "FieldValueNotSupported",
            "spec.conversion.strategy",
            "Unsupported value: \"Webhook\": rudder serves conversion \"None\" only",
        )),
        other => causes.push(Cause::not_supported(
            "spec.conversion.strategy",
            &json!(other),
            &["None", "Webhook"],
        )),
    }
    causes
}

/// The resources a definition serves, one per served version, preferred
/// version first.
pub fn definitions(crd: &Value) -> Vec<ResourceDef> {
    let group = str_at(crd, "/spec/group").to_string();
    let kind = str_at(crd, "/spec/names/kind").to_string();
    let plural = str_at(crd, "/spec/names/plural").to_string();
    let singular = match str_at(crd, "/spec/names/singular") {
        "" => kind.to_lowercase(),
        s => s.to_string(),
    };
    let list_kind = match str_at(crd, "/spec/names/listKind") {
        "" => format!("{kind}List"),
        s => s.to_string(),
    };
    let namespaced = str_at(crd, "/spec/scope") == "Namespaced";
    let mut versions = crd
        .pointer("/spec/versions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    versions.sort_by_key(|v| version_priority(str_at(v, "/name")));
    let storage = versions
        .iter()
        .find(|v| v.get("storage").and_then(Value::as_bool) == Some(true))
        .map(|v| str_at(v, "/name").to_string())
        .unwrap_or_default();
    let reversed_group: Vec<&str> = group.split('.').rev().collect();
    let mut out = Vec::new();
    for version in versions
        .iter()
        .filter(|v| v.get("served").and_then(Value::as_bool) == Some(true))
    {
        let name = str_at(version, "/name").to_string();
        let schema = version
            .pointer("/schema/openAPIV3Schema")
            .cloned()
            .unwrap_or_else(
                || json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true}),
            );
        let (types, root) = structure_of(&schema);
        let mut subresources = Vec::new();
        if version.pointer("/subresources/status").is_some() {
            subresources.push(Subresource {
                name: Cow::Borrowed("status"),
                group: Cow::Owned(group.clone()),
                version: Cow::Owned(name.clone()),
                kind: Cow::Owned(kind.clone()),
                verbs: GET_PATCH_UPDATE,
            });
        }
        let scale = version.pointer("/subresources/scale").map(|s| ScalePaths {
            spec_replicas: str_at(s, "/specReplicasPath").to_string(),
            status_replicas: str_at(s, "/statusReplicasPath").to_string(),
            label_selector: s
                .get("labelSelectorPath")
                .and_then(Value::as_str)
                .map(str::to_string),
        });
        if scale.is_some() {
            subresources.push(Subresource {
                name: Cow::Borrowed("scale"),
                group: Cow::Borrowed("autoscaling"),
                version: Cow::Borrowed("v1"),
                kind: Cow::Borrowed("Scale"),
                verbs: GET_PATCH_UPDATE,
            });
        }
        let printer_columns = version
            .get("additionalPrinterColumns")
            .and_then(Value::as_array)
            .map(|columns| {
                columns
                    .iter()
                    .map(|c| PrinterColumn {
                        name: str_at(c, "/name").to_string(),
                        type_: str_at(c, "/type").to_string(),
                        format: str_at(c, "/format").to_string(),
                        description: str_at(c, "/description").to_string(),
                        priority: c.get("priority").and_then(Value::as_i64).unwrap_or(0),
                        json_path: str_at(c, "/jsonPath").to_string(),
                    })
                    .collect()
            })
            .unwrap_or_else(|| {
                vec![PrinterColumn {
                    name: "Age".into(),
                    type_: "date".into(),
                    format: String::new(),
                    description: String::new(),
                    priority: 0,
                    json_path: ".metadata.creationTimestamp".into(),
                }]
            });
        let schema_name = format!("{}.{name}.{kind}", reversed_group.join("."));
        out.push(ResourceDef {
            group: group.clone(),
            version: name.clone(),
            kind: kind.clone(),
            list_kind: list_kind.clone(),
            plural: plural.clone(),
            singular: singular.clone(),
            namespaced,
            short_names: strings(crd, "/spec/names/shortNames"),
            categories: strings(crd, "/spec/names/categories"),
            verbs: STANDARD_VERBS.iter().map(|v| v.to_string()).collect(),
            subresources,
            typed_round_trip: None,
            schema: None,
            schema_name,
            conversion: None,
            storage_prefix: None,
            custom: Some(Arc::new(Custom {
                crd: str_at(crd, "/metadata/name").to_string(),
                storage_api_version: format!("{group}/{storage}"),
                schema,
                types,
                root,
                printer_columns,
                scale,
                terminating: crd
                    .pointer("/metadata/deletionTimestamp")
                    .is_some_and(|t| !t.is_null()),
            })),
            deprecation: None,
            // Its schema, printer columns and scale do what a strategy does.
            strategy: &crate::strategy::GENERIC,
        });
    }
    out
}

/// The structure of a custom resource: its schema, with `metadata` typed
/// as every object's `ObjectMeta` (labels a map, finalizers a set,
/// ownerReferences keyed by uid), for server-side apply.
fn structure_of(schema: &Value) -> (Types, Shape) {
    const ROOT: &str = "custom.resource.Root";
    const META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta";
    let builtin = crate::openapi::builtin_definitions();
    let mut definitions = serde_json::Map::new();
    let mut pending = vec![META.to_string()];
    while let Some(name) = pending.pop() {
        if definitions.contains_key(&name) {
            continue;
        }
        let Some(definition) = builtin.get(&name) else {
            continue;
        };
        let text = definition.to_string();
        for part in text.split("\"$ref\":\"").skip(1) {
            if let Some(end) = part.find('"') {
                pending.push(
                    part[..end]
                        .rsplit('/')
                        .next()
                        .unwrap_or_default()
                        .to_string(),
                );
            }
        }
        definitions.insert(name, definition.clone());
    }
    // The schema as published, whose `metadata` refers to ObjectMeta.
    let root = crate::openapi::custom_schema(schema, crate::openapi::Flavor::V2);
    definitions.insert(ROOT.into(), root);
    let types = Types::from_definitions(&definitions);
    let root = types.root(ROOT);
    (types, root)
}

/// The value at a simple JSONPath (`.spec.replicas`, `.status.conditions[0].type`,
/// `.metadata.labels['app']`), as printer columns and scale paths use them.
pub fn json_path<'a>(object: &'a Value, path: &str) -> Option<&'a Value> {
    let path = path.trim().trim_start_matches('{').trim_end_matches('}');
    let mut current = object;
    let mut rest = path.trim_start_matches('$');
    while !rest.is_empty() {
        if let Some(after) = rest.strip_prefix('.') {
            let end = after.find(['.', '[']).unwrap_or(after.len());
            current = current.get(&after[..end])?;
            rest = &after[end..];
        } else if let Some(after) = rest.strip_prefix('[') {
            let end = after.find(']')?;
            let inner = after[..end].trim_matches(|c| c == '\'' || c == '"');
            current = match inner.parse::<usize>() {
                Ok(i) if current.is_array() => current.get(i)?,
                _ => current.get(inner)?,
            };
            rest = &after[end + 1..];
        } else {
            return None;
        }
    }
    Some(current)
}

/// Sets the value at a simple dotted path (`.spec.replicas`), creating
/// objects on the way.
pub fn set_path(object: &mut Value, path: &str, value: Value) {
    let parts: Vec<&str> = path.trim_start_matches('.').split('.').collect();
    crate::json::set_at(object, &parts, value);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn crd() -> Value {
        json!({
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "widgets.example.com"},
            "spec": {
                "group": "example.com", "scope": "Namespaced",
                "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "shortNames": ["wd"], "categories": ["all"]},
                "versions": [
                    {"name": "v1beta1", "served": true, "storage": false, "schema": {"openAPIV3Schema": {"type": "object"}}},
                    {"name": "v1", "served": true, "storage": true,
                     "schema": {"openAPIV3Schema": {"type": "object", "properties": {"spec": {"type": "object", "properties": {"replicas": {"type": "integer"}}}}}},
                     "subresources": {"status": {}, "scale": {"specReplicasPath": ".spec.replicas", "statusReplicasPath": ".status.replicas"}},
                     "additionalPrinterColumns": [{"name": "Replicas", "type": "integer", "jsonPath": ".spec.replicas"}]},
                    {"name": "v2alpha1", "served": false, "storage": false}
                ]
            }
        })
    }

    #[test]
    fn a_definition_serves_its_versions_preferred_first() {
        assert!(validate_definition(&crd()).is_empty());
        let defs = definitions(&crd());
        let versions: Vec<&str> = defs.iter().map(|d| d.version.as_str()).collect();
        assert_eq!(versions, vec!["v1", "v1beta1"]);
        let v1 = &defs[0];
        assert_eq!(v1.list_kind, "WidgetList");
        assert_eq!(v1.short_names, vec!["wd"]);
        assert_eq!(v1.schema_name, "com.example.v1.Widget");
        assert_eq!(
            v1.key(Some("ns"), "a"),
            "/registry/example.com/widgets/ns/a"
        );
        let subs: Vec<&str> = v1.subresources.iter().map(|s| s.name.as_ref()).collect();
        assert_eq!(subs, vec!["status", "scale"]);
        let custom = v1.custom.as_ref().expect("custom");
        assert_eq!(custom.storage_api_version, "example.com/v1");
        assert_eq!(custom.printer_columns[0].name, "Replicas");
        assert_eq!(
            defs[1].custom.as_ref().expect("custom").printer_columns[0].name,
            "Age"
        );
    }

    #[test]
    fn bad_definitions_are_named() {
        let mut bad = crd();
        bad["spec"]["group"] = json!("nodots");
        bad["spec"]["versions"][0]["storage"] = json!(true);
        let fields: Vec<String> = validate_definition(&bad)
            .into_iter()
            .map(|c| c.field)
            .collect();
        assert!(fields.contains(&"spec.group".to_string()), "{fields:?}");
        assert!(fields.contains(&"spec.versions".to_string()), "{fields:?}");
        assert!(fields.contains(&"metadata.name".to_string()), "{fields:?}");
    }

    #[test]
    fn versions_sort_as_kubernetes_sorts_them() {
        let mut v = vec!["v1alpha1", "foo", "v2", "v1beta2", "v1", "v1beta1", "v10"];
        v.sort_by_key(|s| version_priority(s));
        assert_eq!(
            v,
            vec!["v10", "v2", "v1", "v1beta2", "v1beta1", "v1alpha1", "foo"]
        );
    }

    #[test]
    fn json_paths() {
        let o = json!({"spec": {"replicas": 3}, "status": {"conditions": [{"type": "Ready"}]}, "metadata": {"labels": {"app.kubernetes.io/name": "x"}}});
        assert_eq!(json_path(&o, ".spec.replicas"), Some(&json!(3)));
        assert_eq!(
            json_path(&o, ".status.conditions[0].type"),
            Some(&json!("Ready"))
        );
        assert_eq!(
            json_path(&o, ".metadata.labels['app.kubernetes.io/name']"),
            Some(&json!("x"))
        );
        assert_eq!(json_path(&o, ".spec.missing"), None);
        let mut m = json!({});
        set_path(&mut m, ".spec.replicas", json!(4));
        assert_eq!(m, json!({"spec": {"replicas": 4}}));
    }
}
