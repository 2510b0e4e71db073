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
    let schema = Schema::get();
    fill_message(schema, &definition.to_lowercase(), object);
}

fn fill_message(schema: &Schema, message: &str, object: &mut Value) {
    let (Some(fields), Value::Object(map)) = (schema.messages.get(message), object) else {
        return;
    };
    let values = value_fields();
    for field in fields.values() {
        if field.inline {
            if let Kind::Message(inner) = &field.kind {
                let mut inlined = Value::Object(std::mem::take(map));
                fill_message(schema, inner, &mut inlined);
                if let Value::Object(back) = inlined {
                    *map = back;
                }
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
    bytes_message(Schema::get(), &definition.to_lowercase(), object);
}

fn unwrap_base64(value: &mut Value) {
    if let Value::String(text) = value
        && text.contains(['\r', '\n'])
    {
        text.retain(|c| c != '\r' && c != '\n');
    }
}

fn bytes_message(schema: &Schema, message: &str, object: &mut Value) {
    let (Some(fields), Value::Object(map)) = (schema.messages.get(message), object) else {
        return;
    };
    for field in fields.values() {
        if let (true, Kind::Message(inner)) = (field.inline, &field.kind) {
            let mut inlined = Value::Object(std::mem::take(map));
            bytes_message(schema, inner, &mut inlined);
            if let Value::Object(back) = inlined {
                *map = back;
            }
            continue;
        }
        let Some(value) = map.get_mut(&field.json) else {
            continue;
        };
        let items: Vec<&mut Value> = match value {
            Value::Array(items) if field.repeated => items.iter_mut().collect(),
            Value::Object(entries) if matches!(field.kind, Kind::Map(..)) => {
                entries.values_mut().collect()
            }
            single => vec![single],
        };
        for item in items {
            match &field.kind {
                Kind::Bytes => unwrap_base64(item),
                Kind::Map(_, inner) if **inner == Kind::Bytes => unwrap_base64(item),
                Kind::Message(inner) if !SELF_ENCODED.contains(&inner.as_str()) => {
                    bytes_message(schema, inner, item)
                }
                _ => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
