//! How the fields of each type merge: strategic merge patch's patch
//! strategies and merge keys, server-side apply's list, map and struct types.
//!
//! One table serves every built-in kind. Its source is upstream's own type
//! markers (`+patchStrategy`, `+patchMergeKey`, `+listType`, `+listMapKey`,
//! `+mapType`, `+structType`), which `scripts/gen-protobuf-schema` extracts
//! from the k8s-pb crate's doc comments into `markers.txt`. [`annotate`]
//! writes them into the OpenAPI schemas as upstream's apiserver publishes
//! them (`x-kubernetes-patch-strategy`, `x-kubernetes-list-type`, …), so
//! kubectl computes its patches with the same metadata the server merges
//! with; [`Types`] then reads a tree of [`Shape`]s back from those schemas —
//! the same reader works for a CustomResourceDefinition's schema.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use serde_json::{Map, Value, json};

const MARKERS: &str = include_str!("markers.txt");

/// Lower-cased with underscores removed: how a Rust field name of k8s-pb and
/// a JSON property name of the OpenAPI schema are matched.
pub(crate) fn normalize(name: &str) -> String {
    name.chars()
        .filter(|c| *c != '_')
        .flat_map(char::to_lowercase)
        .collect()
}

/// Adds upstream's merge extensions to the OpenAPI `definitions` (keyed by
/// definition name, as `io.k8s.api.core.v1.PodSpec`).
pub fn annotate(definitions: &mut Map<String, Value>) {
    let names: HashMap<String, String> = definitions
        .keys()
        .map(|k| (k.to_lowercase(), k.clone()))
        .collect();
    for line in MARKERS
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let Some((name, fields)) = line.split_once('|') else {
            continue;
        };
        let Some(definition) = names
            .get(name)
            .and_then(|n| definitions.get_mut(n))
            .and_then(Value::as_object_mut)
        else {
            continue;
        };
        for entry in fields.split(';') {
            let Some((field, markers)) = entry.split_once(':') else {
                continue;
            };
            let target = if field.is_empty() {
                Some(&mut *definition)
            } else {
                let wanted = normalize(field);
                definition
                    .get_mut("properties")
                    .and_then(Value::as_object_mut)
                    .and_then(|p| p.iter_mut().find(|(k, _)| normalize(k) == wanted))
                    .and_then(|(_, v)| v.as_object_mut())
            };
            if let Some(target) = target {
                for (key, value) in parse_markers(markers) {
                    match key {
                        "patchStrategy" => {
                            target.insert("x-kubernetes-patch-strategy".into(), json!(value))
                        }
                        "patchMergeKey" => {
                            target.insert("x-kubernetes-patch-merge-key".into(), json!(value))
                        }
                        "listType" => target.insert("x-kubernetes-list-type".into(), json!(value)),
                        "listMapKey" => {
                            let keys = target
                                .entry("x-kubernetes-list-map-keys")
                                .or_insert_with(|| json!([]));
                            if let Some(keys) = keys.as_array_mut() {
                                keys.push(json!(value));
                            }
                            None
                        }
                        "mapType" | "structType" => {
                            target.insert("x-kubernetes-map-type".into(), json!(value))
                        }
                        "default" => match serde_json::from_str::<Value>(&value) {
                            Ok(v) => target.insert("default".into(), v),
                            Err(_) => None,
                        },
                        _ => None,
                    };
                }
            }
        }
    }
}

/// `a=1,b=x,y` → `[(a, "1"), (b, "x,y")]`: a value may itself hold commas
/// (`patchStrategy=merge,retainKeys`).
fn parse_markers(text: &str) -> Vec<(&str, String)> {
    let mut out: Vec<(&str, String)> = Vec::new();
    for part in text.split(',') {
        match part.split_once('=') {
            Some((k, v)) => out.push((k, v.to_string())),
            None => {
                if let Some(last) = out.last_mut() {
                    last.1.push(',');
                    last.1.push_str(part);
                }
            }
        }
    }
    out
}

/// How a list's items are identified (`x-kubernetes-list-type`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListType {
    /// The list is one value: replaced whole.
    Atomic,
    /// Scalars, each an item of its own.
    Set,
    /// Objects identified by the values of these keys.
    Map(Vec<String>),
}

/// The shape of a value in an object.
#[derive(Debug, Clone, Default)]
pub enum Shape {
    /// Nothing is known (preserved unknown fields, raw extensions): objects
    /// merge key by key, lists are atomic.
    #[default]
    Untyped,
    Scalar,
    /// A struct, by its index in [`Types`].
    Struct(usize),
    List(Box<List>),
    Map(Box<MapShape>),
}

#[derive(Debug, Clone)]
pub struct List {
    pub items: Shape,
    pub list_type: ListType,
}

#[derive(Debug, Clone)]
pub struct MapShape {
    pub values: Shape,
    /// `x-kubernetes-map-type: atomic`: the map is one value.
    pub atomic: bool,
}

/// A field of a struct: its shape and how strategic merge patch treats it.
#[derive(Debug, Clone, Default)]
pub struct Field {
    pub shape: Shape,
    /// `x-kubernetes-patch-strategy` contains `merge`.
    pub patch_merge: bool,
    /// … contains `retainKeys`.
    pub retain_keys: bool,
    /// … is `replace`.
    pub patch_replace: bool,
    /// `x-kubernetes-patch-merge-key`.
    pub merge_key: Option<String>,
    /// The field's `default`, which stands in for a missing key field of
    /// an associative list item.
    pub default: Option<Value>,
}

/// A member of an object as [`Types::member`] finds it.
#[derive(Debug, Clone, Copy)]
pub struct Member<'a> {
    pub shape: &'a Shape,
    pub patch_merge: bool,
    pub retain_keys: bool,
    pub patch_replace: bool,
    pub merge_key: Option<&'a str>,
}

impl Default for Member<'_> {
    fn default() -> Self {
        Member {
            shape: &Shape::Untyped,
            patch_merge: false,
            retain_keys: false,
            patch_replace: false,
            merge_key: None,
        }
    }
}

#[derive(Debug, Clone, Default)]
pub struct Struct {
    pub fields: HashMap<String, Field>,
    /// `x-kubernetes-map-type: atomic` (`+structType=atomic`).
    pub atomic: bool,
    /// Fields not listed are kept (`x-kubernetes-preserve-unknown-fields`).
    pub open: bool,
}

/// The structure of a set of types.
#[derive(Debug, Default)]
pub struct Types {
    structs: Vec<Struct>,
    by_name: HashMap<String, usize>,
}

static UNTYPED: Field = Field {
    shape: Shape::Untyped,
    patch_merge: false,
    retain_keys: false,
    patch_replace: false,
    merge_key: None,
    default: None,
};

impl Types {
    /// The structure of every built-in type, built on first use.
    pub fn builtin() -> &'static Arc<Types> {
        static TYPES: OnceLock<Arc<Types>> = OnceLock::new();
        TYPES.get_or_init(|| {
            Arc::new(Types::from_definitions(
                crate::openapi::builtin_definitions(),
            ))
        })
    }

    /// Reads OpenAPI definitions (v2 `definitions` or v3 `components.schemas`).
    pub fn from_definitions(definitions: &Map<String, Value>) -> Types {
        let mut types = Types::default();
        for (name, schema) in definitions {
            if schema.get("properties").is_some() {
                let index = types.structs.len();
                types.structs.push(Struct::default());
                types.by_name.insert(name.clone(), index);
            }
        }
        for (name, schema) in definitions {
            if let Some(&index) = types.by_name.get(name) {
                let s = types.read_struct(schema, definitions);
                types.structs[index] = s;
            }
        }
        types
    }

    /// Reads one schema (a CustomResourceDefinition's `openAPIV3Schema`);
    /// the shape of its root.
    pub fn from_schema(schema: &Value) -> (Types, Shape) {
        let mut types = Types::default();
        let root = types.read(schema, &Map::new());
        (types, root)
    }

    /// The shape of the definition named `name` (`io.k8s.api.apps.v1.Deployment`).
    pub fn root(&self, name: &str) -> Shape {
        self.by_name
            .get(name)
            .map_or(Shape::Untyped, |&i| Shape::Struct(i))
    }

    pub fn get(&self, index: usize) -> &Struct {
        &self.structs[index]
    }

    /// A field of a struct shape; [`Shape::Untyped`] for anything unknown.
    pub fn field<'a>(&'a self, shape: &Shape, name: &str) -> &'a Field {
        match shape {
            Shape::Struct(i) => self.structs[*i].fields.get(name).unwrap_or(&UNTYPED),
            _ => &UNTYPED,
        }
    }

    /// What the member `name` of a value of shape `shape` is: a struct's
    /// field, a map's value.
    pub fn member<'a>(&'a self, shape: &'a Shape, name: &str) -> Member<'a> {
        match shape {
            Shape::Map(map) => Member {
                shape: &map.values,
                ..Member::default()
            },
            _ => {
                let field = self.field(shape, name);
                Member {
                    shape: &field.shape,
                    patch_merge: field.patch_merge,
                    retain_keys: field.retain_keys,
                    patch_replace: field.patch_replace,
                    merge_key: field.merge_key.as_deref(),
                }
            }
        }
    }

    fn read_struct(&mut self, schema: &Value, definitions: &Map<String, Value>) -> Struct {
        let mut out = Struct {
            atomic: schema.get("x-kubernetes-map-type").and_then(Value::as_str) == Some("atomic"),
            open: schema
                .get("x-kubernetes-preserve-unknown-fields")
                .and_then(Value::as_bool)
                == Some(true),
            ..Struct::default()
        };
        if let Some(properties) = schema.get("properties").and_then(Value::as_object) {
            for (name, property) in properties {
                let strategy = property
                    .get("x-kubernetes-patch-strategy")
                    .and_then(Value::as_str)
                    .unwrap_or("");
                let field = Field {
                    shape: self.read(property, definitions),
                    patch_merge: strategy.split(',').any(|s| s == "merge"),
                    retain_keys: strategy.split(',').any(|s| s == "retainKeys"),
                    patch_replace: strategy == "replace",
                    merge_key: property
                        .get("x-kubernetes-patch-merge-key")
                        .and_then(Value::as_str)
                        .map(str::to_string),
                    default: property.get("default").cloned(),
                };
                out.fields.insert(name.clone(), field);
            }
        }
        out
    }

    /// The shape a property schema describes.
    fn read(&mut self, schema: &Value, definitions: &Map<String, Value>) -> Shape {
        let reference = schema.get("$ref").and_then(Value::as_str).or_else(|| {
            schema
                .get("allOf")
                .and_then(Value::as_array)
                .and_then(|a| a.first())
                .and_then(|s| s.get("$ref"))
                .and_then(Value::as_str)
        });
        if let Some(reference) = reference {
            let name = reference.rsplit('/').next().unwrap_or(reference);
            if let Some(&index) = self.by_name.get(name) {
                return Shape::Struct(index);
            }
            return match definitions.get(name) {
                // A named type without properties (Quantity, Time,
                // IntOrString, RawExtension): read it where it is used.
                Some(target) if target.get("$ref").is_none() => self.read(target, definitions),
                _ => Shape::Untyped,
            };
        }
        if schema
            .get("x-kubernetes-int-or-string")
            .and_then(Value::as_bool)
            == Some(true)
        {
            return Shape::Scalar;
        }
        match schema.get("type").and_then(Value::as_str) {
            Some("array") => {
                let items = schema
                    .get("items")
                    .map_or(Shape::Untyped, |i| self.read(i, definitions));
                Shape::List(Box::new(List {
                    list_type: list_type(schema, &items),
                    items,
                }))
            }
            Some("object") => {
                if schema.get("properties").is_some() {
                    let s = self.read_struct(schema, definitions);
                    self.structs.push(s);
                    Shape::Struct(self.structs.len() - 1)
                } else if let Some(values) =
                    schema.get("additionalProperties").filter(|v| v.is_object())
                {
                    let values = self.read(values, definitions);
                    Shape::Map(Box::new(MapShape {
                        values,
                        atomic: schema.get("x-kubernetes-map-type").and_then(Value::as_str)
                            == Some("atomic"),
                    }))
                } else {
                    Shape::Untyped
                }
            }
            Some(_) => Shape::Scalar,
            None => Shape::Untyped,
        }
    }
}

/// A list's type as upstream's structured-merge-diff reads it from OpenAPI:
/// `x-kubernetes-list-type`, or else the patch strategy (merge with a key is
/// a map, merge of scalars a set), or else atomic.
fn list_type(schema: &Value, items: &Shape) -> ListType {
    let keys = || -> Vec<String> {
        schema
            .get("x-kubernetes-list-map-keys")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default()
    };
    match schema.get("x-kubernetes-list-type").and_then(Value::as_str) {
        Some("map") => return ListType::Map(keys()),
        Some("set") => return ListType::Set,
        Some("atomic") => return ListType::Atomic,
        _ => {}
    }
    let merge = schema
        .get("x-kubernetes-patch-strategy")
        .and_then(Value::as_str)
        .is_some_and(|s| s.split(',').any(|s| s == "merge"));
    match schema
        .get("x-kubernetes-patch-merge-key")
        .and_then(Value::as_str)
    {
        Some(key) if merge => ListType::Map(vec![key.to_string()]),
        None if merge && matches!(items, Shape::Scalar) => ListType::Set,
        _ => ListType::Atomic,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod_spec(types: &Types) -> Shape {
        types.root("io.k8s.api.core.v1.PodSpec")
    }

    #[test]
    fn containers_merge_by_name_and_ports_by_container_port() {
        let types = Types::builtin();
        let spec = pod_spec(types);
        let containers = types.field(&spec, "containers");
        assert!(containers.patch_merge);
        assert_eq!(containers.merge_key.as_deref(), Some("name"));
        let Shape::List(list) = &containers.shape else {
            panic!("containers is a list: {:?}", containers.shape)
        };
        assert_eq!(list.list_type, ListType::Map(vec!["name".into()]));
        let ports = types.field(&list.items, "ports");
        assert_eq!(ports.merge_key.as_deref(), Some("containerPort"));
        let Shape::List(ports) = &ports.shape else {
            panic!("ports is a list")
        };
        assert_eq!(
            ports.list_type,
            ListType::Map(vec!["containerPort".into(), "protocol".into()])
        );
    }

    #[test]
    fn volumes_retain_keys_and_atomic_structs() {
        let types = Types::builtin();
        let volumes = types.field(&pod_spec(types), "volumes");
        assert!(volumes.patch_merge && volumes.retain_keys);
        let strategy = types.field(&types.root("io.k8s.api.apps.v1.DeploymentSpec"), "strategy");
        assert!(strategy.retain_keys && !strategy.patch_merge);
        let selector = types.field(&types.root("io.k8s.api.apps.v1.DeploymentSpec"), "selector");
        let Shape::Struct(i) = selector.shape else {
            panic!("selector is a struct")
        };
        assert!(types.get(i).atomic);
        let finalizers = types.field(
            &types.root("io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"),
            "finalizers",
        );
        let Shape::List(list) = &finalizers.shape else {
            panic!("finalizers is a list")
        };
        assert_eq!(list.list_type, ListType::Set);
        let labels = types.field(
            &types.root("io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"),
            "labels",
        );
        assert!(
            matches!(&labels.shape, Shape::Map(m) if !m.atomic && matches!(m.values, Shape::Scalar))
        );
        let quantity = types.field(
            &types.root("io.k8s.api.core.v1.ResourceRequirements"),
            "limits",
        );
        assert!(matches!(&quantity.shape, Shape::Map(m) if matches!(m.values, Shape::Scalar)));
    }

    #[test]
    fn markers_with_commas_in_values_parse() {
        assert_eq!(
            parse_markers("patchMergeKey=name,patchStrategy=merge,retainKeys,listType=map"),
            vec![
                ("patchMergeKey", "name".to_string()),
                ("patchStrategy", "merge,retainKeys".to_string()),
                ("listType", "map".to_string())
            ]
        );
    }

    #[test]
    fn a_custom_schema_reads_its_list_types() {
        let (types, root) = Types::from_schema(&json!({
            "type": "object",
            "properties": {
                "spec": {"type": "object", "properties": {
                    "items": {"type": "array", "x-kubernetes-list-type": "map",
                              "x-kubernetes-list-map-keys": ["id"],
                              "items": {"type": "object", "properties": {"id": {"type": "string"}}}},
                    "tags": {"type": "array", "items": {"type": "string"}},
                    "count": {"x-kubernetes-int-or-string": true}
                }}
            }
        }));
        let spec = types.field(&root, "spec").shape.clone();
        assert!(
            matches!(&types.field(&spec, "items").shape, Shape::List(l) if l.list_type == ListType::Map(vec!["id".into()]))
        );
        assert!(
            matches!(&types.field(&spec, "tags").shape, Shape::List(l) if l.list_type == ListType::Atomic)
        );
        assert!(matches!(types.field(&spec, "count").shape, Shape::Scalar));
    }
}
