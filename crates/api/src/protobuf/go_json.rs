//! JSON as Go writes it for the built-in kinds, from the same knowledge of
//! upstream's Go types the protobuf decoder uses (the wire schema and the
//! generated `value-fields.txt`):
//!
//! - [`fill`]: Go's encoder writes a plain (non-pointer) struct field
//!   always — `omitempty` never omits a struct — and a plain scalar field
//!   without `omitempty` always, zero or not. So a Service reads back with
//!   `status: {loadBalancer: {}}`, a ReplicaSet with `status: {replicas: 0}`,
//!   a container status with `lastState: {}`. The wrapper types that encode
//!   themselves (Time, Quantity, IntOrString, …) are left as they are.
//! - [`canonical_bytes`]: a `[]byte` field (Secret `data`, ConfigMap
//!   `binaryData`, a CSR's `request`, a `caBundle`) is base64, which Go's
//!   decoder reads skipping `\r` and `\n`; the stored form is unwrapped.

use std::collections::HashMap;
use std::sync::OnceLock;

use serde_json::{Map, Value, json};

use super::{Kind, Schema};

const VALUE_FIELDS: &str = include_str!("value-fields.txt");

/// Wrapper messages that encode themselves in JSON (a string, a number, a
/// null): never filled.
const SELF_ENCODED: &[&str] = &[
    "io.k8s.apimachinery.pkg.apis.meta.v1.time",
    "io.k8s.apimachinery.pkg.apis.meta.v1.microtime",
    "io.k8s.apimachinery.pkg.apis.meta.v1.duration",
    "io.k8s.apimachinery.pkg.api.resource.quantity",
    "io.k8s.apimachinery.pkg.util.intstr.intorstring",
    "io.k8s.apimachinery.pkg.runtime.rawextension",
    "io.k8s.apimachinery.pkg.apis.meta.v1.fieldsv1",
];

/// Plain value fields by `definition.field` (lower-cased): whether the
/// field is tagged `omitempty`.
fn value_fields() -> &'static HashMap<String, bool> {
    static FIELDS: OnceLock<HashMap<String, bool>> = OnceLock::new();
    FIELDS.get_or_init(|| {
        VALUE_FIELDS
            .lines()
            .filter(|l| !l.starts_with('#') && !l.is_empty())
            .map(|l| match l.strip_suffix('!') {
                Some(field) => (field.to_string(), false),
                None => (l.to_string(), true),
            })
            .collect()
    })
}

/// Fills in what Go's encoder would write for an object of the built-in
/// definition `definition` (`io.k8s.api.core.v1.Service`) and is missing.
pub fn fill(definition: &str, object: &mut Value) {
    let plan = Plan::get();
    if let Some(&message) = plan.index.get(&definition.to_lowercase()) {
        plan.fill(message, object);
    }
}

/// Runs `f` on the object `map` as a [`Value`] (an inlined message's fields
/// are its parent's own), then puts it back.
fn as_value(map: &mut Map<String, Value>, f: impl FnOnce(&mut Value)) {
    let mut value = Value::Object(std::mem::take(map));
    f(&mut value);
    if let Value::Object(back) = value {
        *map = back;
    }
}

/// Where a JSON key goes among its object's keys.
#[derive(Debug, Clone, Copy)]
struct Key {
    rank: u32,
    message: Option<usize>,
}

/// An object serialized as Go's encoder writes it: for a built-in kind,
/// `kind` and `apiVersion` first, then each struct's fields in declaration
/// order (an inlined struct's in its place), then any key the type does
/// not declare, sorted; maps with their keys sorted, as Go sorts them.
/// Custom resources are unstructured in upstream too, written with sorted
/// keys, and so are they here.
#[derive(Debug, Clone, Copy)]
pub struct Ordered<'a> {
    value: &'a Value,
    message: Option<usize>,
    top: bool,
    /// Leave `metadata.resourceVersion` out (the stored form).
    without_version: bool,
}

impl<'a> Ordered<'a> {
    /// `object`, an object of the built-in definition `definition`
    /// (`io.k8s.api.core.v1.Pod`; anything else is written sorted).
    pub fn new(definition: &str, object: &'a Value) -> Ordered<'a> {
        let message = Plan::get().index.get(&definition.to_lowercase()).copied();
        Ordered {
            value: object,
            message,
            top: true,
            without_version: false,
        }
    }

    /// Another object of the same definition (its lookup done once).
    pub fn with<'b>(&self, object: &'b Value) -> Ordered<'b> {
        Ordered {
            value: object,
            message: self.message,
            top: true,
            without_version: self.without_version,
        }
    }

    /// The same, without `metadata.resourceVersion`: the stored form.
    pub fn without_version(mut self) -> Ordered<'a> {
        self.without_version = true;
        self
    }
}

impl serde::Serialize for Ordered<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::{SerializeMap, SerializeSeq};
        match self.value {
            Value::Object(map) => {
                let order = self.message.map(|m| &Plan::get().messages[m].order);
                let mut keys: Vec<(u32, &String, &Value, Option<usize>)> =
                    Vec::with_capacity(map.len());
                for (key, value) in map {
                    if self.without_version && !self.top && key == "resourceVersion" {
                        continue;
                    }
                    let (rank, message) = match (self.top && order.is_some(), key.as_str()) {
                        (true, "kind") => (0, None),
                        (true, "apiVersion") => (1, None),
                        _ => match order.and_then(|o| o.get(key.as_str())) {
                            Some(found) => (found.rank.saturating_add(2), found.message),
                            None => (u32::MAX, None),
                        },
                    };
                    keys.push((rank, key, value, message));
                }
                // Stable: keys of one rank (undeclared ones) stay sorted.
                keys.sort_by_key(|k| k.0);
                let mut out = serializer.serialize_map(Some(keys.len()))?;
                for (_, key, value, message) in keys {
                    let child = Ordered {
                        value,
                        message,
                        top: false,
                        without_version: self.top && self.without_version && key == "metadata",
                    };
                    out.serialize_entry(key, &child)?;
                }
                out.end()
            }
            Value::Array(items) if self.message.is_some() => {
                let mut out = serializer.serialize_seq(Some(items.len()))?;
                for value in items {
                    out.serialize_element(&Ordered {
                        value,
                        message: self.message,
                        top: false,
                        without_version: false,
                    })?;
                }
                out.end()
            }
            other => other.serialize(serializer),
        }
    }
}

/// What [`fill`] and [`canonical_bytes`] do, worked out once per message:
/// each field's zero, the messages its fields hold, and which messages
/// could need either at all (transitively), so a walk skips the rest.
#[derive(Debug, Default)]
struct Plan {
    index: HashMap<String, usize>,
    messages: Vec<MessagePlan>,
}

#[derive(Debug, Default)]
struct MessagePlan {
    fields: Vec<FieldPlan>,
    /// Each JSON key's rank in Go's order and the message its value (or
    /// each item of it) is: the fields as declared, an inlined struct's
    /// fields in its place.
    order: HashMap<String, Key>,
    /// An object of this message may lack a field Go would write.
    fills: bool,
    /// An object of this message may hold a `[]byte` field.
    has_bytes: bool,
}

#[derive(Debug)]
struct FieldPlan {
    json: String,
    repeated: bool,
    /// Inlined: the message whose fields are the parent's own.
    inline: Option<usize>,
    /// The message a present value is (not a self-encoding wrapper).
    message: Option<usize>,
    /// A `[]byte`, or a map of them.
    bytes: bool,
    /// A map (whose values `canonical_bytes` looks at).
    map: bool,
    /// What an absent field becomes (Go writes it).
    zero: Option<Value>,
    /// Its place in the Go struct's declaration order.
    position: usize,
}

impl Plan {
    fn get() -> &'static Plan {
        static PLAN: OnceLock<Plan> = OnceLock::new();
        PLAN.get_or_init(|| Plan::of(Schema::get()))
    }

    fn of(schema: &Schema) -> Plan {
        let mut names: Vec<&String> = schema.messages.keys().collect();
        names.sort();
        let index: HashMap<String, usize> = names
            .iter()
            .enumerate()
            .map(|(i, name)| ((*name).clone(), i))
            .collect();
        let values = value_fields();
        let messages: Vec<MessagePlan> = names
            .iter()
            .map(|name| {
                let fields: Vec<FieldPlan> = schema.messages[*name]
                    .values()
                    .map(|field| {
                        let inner = match &field.kind {
                            Kind::Message(inner) if !SELF_ENCODED.contains(&inner.as_str()) => {
                                index.get(inner).copied()
                            }
                            _ => None,
                        };
                        let zero = (!field.repeated && !field.inline)
                            .then(|| zero_of(schema, values, name, &field.json, &field.kind))
                            .flatten();
                        FieldPlan {
                            json: field.json.clone(),
                            repeated: field.repeated,
                            inline: inner.filter(|_| field.inline),
                            message: inner.filter(|_| !field.inline),
                            bytes: match &field.kind {
                                Kind::Bytes => true,
                                Kind::Map(_, value) => **value == Kind::Bytes,
                                _ => false,
                            },
                            map: matches!(field.kind, Kind::Map(..)),
                            zero,
                            position: field.position,
                        }
                    })
                    .collect();
                MessagePlan {
                    order: HashMap::new(),
                    fills: fields.iter().any(|f| f.zero.is_some()),
                    has_bytes: fields.iter().any(|f| f.bytes),
                    fields,
                }
            })
            .collect();
        let mut plan = Plan { index, messages };
        plan.close_over_fields();
        for message in 0..plan.messages.len() {
            let mut keys = Vec::new();
            plan.declared_keys(message, &mut keys);
            plan.messages[message].order = keys
                .into_iter()
                .enumerate()
                .map(|(rank, (json, message))| {
                    let rank = u32::try_from(rank).unwrap_or(u32::MAX);
                    (json, Key { rank, message })
                })
                .collect();
        }
        plan
    }

    /// The JSON keys of `message` in declaration order, each with the
    /// message its value is; an inlined struct's keys in its place.
    fn declared_keys(&self, message: usize, keys: &mut Vec<(String, Option<usize>)>) {
        let mut fields: Vec<&FieldPlan> = self.messages[message].fields.iter().collect();
        fields.sort_by_key(|f| f.position);
        for field in fields {
            match field.inline {
                Some(inner) => self.declared_keys(inner, keys),
                None => keys.push((field.json.clone(), field.message.filter(|_| !field.map))),
            }
        }
    }

    /// A message fills (or has bytes) if any message it holds does.
    fn close_over_fields(&mut self) {
        loop {
            let mut changed = false;
            for i in 0..self.messages.len() {
                let held = |f: &FieldPlan| f.inline.or(f.message);
                let fills = self.messages[i]
                    .fields
                    .iter()
                    .filter_map(held)
                    .any(|m| self.messages[m].fills);
                let has_bytes = self.messages[i]
                    .fields
                    .iter()
                    .filter(|f| !f.map)
                    .filter_map(held)
                    .any(|m| self.messages[m].has_bytes);
                let message = &mut self.messages[i];
                if (fills && !message.fills) || (has_bytes && !message.has_bytes) {
                    message.fills |= fills;
                    message.has_bytes |= has_bytes;
                    changed = true;
                }
            }
            if !changed {
                return;
            }
        }
    }

    fn fill(&self, message: usize, object: &mut Value) {
        let plan = &self.messages[message];
        let (true, Value::Object(map)) = (plan.fills, &mut *object) else {
            return;
        };
        for field in &plan.fields {
            if let Some(inner) = field.inline {
                if self.messages[inner].fills {
                    as_value(map, |inlined| self.fill(inner, inlined));
                }
                continue;
            }
            match map.get_mut(&field.json) {
                Some(value) => match field.message {
                    Some(inner) if field.repeated => {
                        for item in value.as_array_mut().into_iter().flatten() {
                            self.fill(inner, item);
                        }
                    }
                    Some(inner) => self.fill(inner, value),
                    None => {}
                },
                None => {
                    if let Some(zero) = &field.zero {
                        map.insert(field.json.clone(), zero.clone());
                    }
                }
            }
        }
    }

    fn canonical_bytes(&self, message: usize, object: &mut Value) {
        let plan = &self.messages[message];
        let (true, Value::Object(map)) = (plan.has_bytes, &mut *object) else {
            return;
        };
        for field in &plan.fields {
            if let Some(inner) = field.inline {
                as_value(map, |inlined| self.canonical_bytes(inner, inlined));
                continue;
            }
            let Some(value) = map.get_mut(&field.json) else {
                continue;
            };
            let items: Vec<&mut Value> = match value {
                Value::Array(items) if field.repeated => items.iter_mut().collect(),
                Value::Object(entries) if field.map => entries.values_mut().collect(),
                single => vec![single],
            };
            for item in items {
                match (field.bytes, field.message) {
                    (true, _) => unwrap_base64(item),
                    (false, Some(inner)) if !field.map => self.canonical_bytes(inner, item),
                    _ => {}
                }
            }
        }
    }
}

/// What Go writes for the absent non-repeated field `json` of `message`,
/// if anything.
fn zero_of(
    schema: &Schema,
    values: &HashMap<String, bool>,
    message: &str,
    json: &str,
    kind: &Kind,
) -> Option<Value> {
    let key = format!("{message}.{}", json.to_lowercase());
    let &omitempty = values.get(&key)?;
    Some(match kind {
        Kind::Message(inner) if SELF_ENCODED.contains(&inner.as_str()) => return None,
        Kind::Message(inner) => {
            let mut empty = Value::Object(Map::new());
            fill_message(schema, inner, &mut empty);
            empty
        }
        _ if omitempty => return None,
        Kind::String => json!(""),
        Kind::Bool => json!(false),
        Kind::Int32 | Kind::Int64 => json!(0),
        Kind::Double => json!(0.0),
        Kind::Bytes | Kind::Map(..) => return None,
    })
}

/// [`fill`] the long way, field by field with every lookup: how the plan
/// works out a message field's zero, and what tests hold the plan to.
fn fill_message(schema: &Schema, message: &str, object: &mut Value) {
    let (Some(fields), Value::Object(map)) = (schema.messages.get(message), object) else {
        return;
    };
    let values = value_fields();
    for field in fields.values() {
        if field.inline {
            if let Kind::Message(inner) = &field.kind {
                as_value(map, |inlined| fill_message(schema, inner, inlined));
            }
            continue;
        }
        match (map.get_mut(&field.json), &field.kind) {
            (Some(value), Kind::Message(inner)) if field.repeated => {
                for item in value.as_array_mut().into_iter().flatten() {
                    fill_message(schema, inner, item);
                }
            }
            (Some(value), Kind::Message(inner)) => fill_message(schema, inner, value),
            (Some(_), _) => {}
            (None, kind) => {
                if field.repeated {
                    continue;
                }
                let key = format!("{message}.{}", field.json.to_lowercase());
                let Some(&omitempty) = values.get(&key) else {
                    continue;
                };
                let zero = match kind {
                    Kind::Message(inner) if SELF_ENCODED.contains(&inner.as_str()) => continue,
                    Kind::Message(inner) => {
                        let mut empty = Value::Object(Map::new());
                        fill_message(schema, inner, &mut empty);
                        empty
                    }
                    _ if omitempty => continue,
                    Kind::String => json!(""),
                    Kind::Bool => json!(false),
                    Kind::Int32 | Kind::Int64 => json!(0),
                    Kind::Double => json!(0.0),
                    Kind::Bytes | Kind::Map(..) => continue,
                };
                map.insert(field.json.clone(), zero);
            }
        }
    }
}

/// Removes the line breaks Go's base64 decoder skips from every `[]byte`
/// field of an object of `definition`, so it is stored canonical; what
/// else is wrong with the base64 is left for decoding to report.
pub fn canonical_bytes(definition: &str, object: &mut Value) {
    let plan = Plan::get();
    if let Some(&message) = plan.index.get(&definition.to_lowercase()) {
        plan.canonical_bytes(message, object);
    }
}

fn unwrap_base64(value: &mut Value) {
    if let Value::String(text) = value
        && text.contains(['\r', '\n'])
    {
        text.retain(|c| c != '\r' && c != '\n');
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn objects_are_written_in_gos_field_order() {
        let pod = json!({
            "apiVersion": "v1", "kind": "Pod", "zzz": 1,
            "status": {"phase": "Running", "hostIP": "10.0.0.1"},
            "spec": {
                "restartPolicy": "Always",
                "containers": [{"ports": [{"protocol": "TCP", "containerPort": 80}], "image": "i", "name": "c"}],
                "volumes": [{"emptyDir": {}, "name": "v"}],
            },
            "metadata": {"uid": "u", "resourceVersion": "5", "namespace": "d", "name": "p", "labels": {"b": "1", "a": "2"}},
        });
        let written = serde_json::to_string(&Ordered::new("io.k8s.api.core.v1.Pod", &pod))
            .expect("serialize");
        assert_eq!(
            written,
            r#"{"kind":"Pod","apiVersion":"v1","metadata":{"name":"p","namespace":"d","uid":"u","resourceVersion":"5","labels":{"a":"2","b":"1"}},"spec":{"volumes":[{"name":"v","emptyDir":{}}],"containers":[{"name":"c","image":"i","ports":[{"containerPort":80,"protocol":"TCP"}]}],"restartPolicy":"Always"},"status":{"phase":"Running","hostIP":"10.0.0.1"},"zzz":1}"#
        );
        let stored =
            serde_json::to_string(&Ordered::new("io.k8s.api.core.v1.Pod", &pod).without_version())
                .expect("serialize");
        assert!(
            stored.contains(r#""metadata":{"name":"p","namespace":"d","uid":"u","labels""#),
            "{stored}"
        );
        // Custom resources are unstructured: sorted, as upstream's.
        let custom = json!({"kind": "Widget", "apiVersion": "x/v1", "spec": {"b": 1, "a": 2}, "metadata": {"resourceVersion": "3", "name": "w"}});
        assert_eq!(
            serde_json::to_string(&Ordered::new("", &custom).without_version()).expect("serialize"),
            r#"{"apiVersion":"x/v1","kind":"Widget","metadata":{"name":"w"},"spec":{"a":2,"b":1}}"#
        );
    }

    #[test]
    fn the_plan_fills_as_the_field_by_field_walk_does() {
        let schema = Schema::get();
        let plan = Plan::get();
        for (name, &message) in &plan.index {
            let (mut planned, mut walked) = (json!({}), json!({}));
            plan.fill(message, &mut planned);
            fill_message(schema, name, &mut walked);
            assert_eq!(planned, walked, "{name}");
        }
        let pod = json!({
            "metadata": {"name": "p", "ownerReferences": [{"name": "o"}]},
            "spec": {
                "containers": [{"name": "c", "ports": [{"containerPort": 80}],
                    "livenessProbe": {"httpGet": {"port": 80}}, "resources": {}}],
                "volumes": [{"name": "v", "configMap": {"name": "x"}}],
                "affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution":
                    [{"weight": 1, "podAffinityTerm": {"topologyKey": "k"}}]}},
            },
            "status": {"containerStatuses": [{"name": "c", "state": {}}]},
        });
        let (mut planned, mut walked) = (pod.clone(), pod);
        fill("io.k8s.api.core.v1.Pod", &mut planned);
        fill_message(schema, "io.k8s.api.core.v1.pod", &mut walked);
        assert_eq!(planned, walked);
        assert!(!plan.messages[plan.index["io.k8s.api.core.v1.pod"]].has_bytes);
        assert!(plan.messages[plan.index["io.k8s.api.core.v1.secret"]].has_bytes);
    }

    #[test]
    fn go_writes_plain_structs_and_scalars_without_omitempty() {
        let mut service = json!({"metadata": {"name": "s"}, "spec": {"ports": [{"port": 80}]}});
        fill("io.k8s.api.core.v1.Service", &mut service);
        assert_eq!(service["status"], json!({"loadBalancer": {}}));
        let mut replica_set = json!({"metadata": {"name": "r"}, "spec": {"selector": {}}});
        fill("io.k8s.api.apps.v1.ReplicaSet", &mut replica_set);
        assert_eq!(replica_set["status"], json!({"replicas": 0}));
        assert_eq!(replica_set["spec"]["template"]["metadata"], json!({}));
        let mut pod = json!({"status": {"containerStatuses": [{"name": "c", "state": {}}]}});
        fill("io.k8s.api.core.v1.Pod", &mut pod);
        let status = &pod["status"]["containerStatuses"][0];
        assert_eq!(status["lastState"], json!({}));
        assert_eq!(
            (&status["ready"], &status["restartCount"]),
            (&json!(false), &json!(0))
        );
        // Pointers, lists, maps and self-encoding wrappers stay unset.
        assert!(pod["spec"].get("containers").is_none());
        assert!(pod["metadata"].get("creationTimestamp").is_none());
    }

    #[test]
    fn byte_fields_lose_their_line_breaks() {
        let mut secret = json!({"data": {"a": "aGVsbG8g\r\nd29ybGQ=", "b": "eA=="}});
        canonical_bytes("io.k8s.api.core.v1.Secret", &mut secret);
        assert_eq!(
            secret["data"],
            json!({"a": "aGVsbG8gd29ybGQ=", "b": "eA=="})
        );
        let mut config_map = json!({"binaryData": {"x": "AAEC\nAw=="}, "data": {"t": "a\nb"}});
        canonical_bytes("io.k8s.api.core.v1.ConfigMap", &mut config_map);
        assert_eq!(config_map["binaryData"]["x"], "AAECAw==");
        assert_eq!(config_map["data"]["t"], "a\nb");
        let mut webhook = json!({"webhooks": [{"clientConfig": {"caBundle": "Zm9v\nYmFy"}}]});
        canonical_bytes(
            "io.k8s.api.admissionregistration.v1.ValidatingWebhookConfiguration",
            &mut webhook,
        );
        assert_eq!(
            webhook["webhooks"][0]["clientConfig"]["caBundle"],
            "Zm9vYmFy"
        );
    }
}
