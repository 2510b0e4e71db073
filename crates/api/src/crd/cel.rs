//! `x-kubernetes-validations`: a custom resource schema's CEL rules, each
//! evaluated with `self` bound to the value at its place in the schema and,
//! for transition rules, `oldSelf` to the value the object had there before
//! (a rule that uses `oldSelf` runs on updates only, where an old value
//! exists). A rule that does not hold, or fails to evaluate, is an Invalid
//! cause at its field with the rule's `message` (or `failed rule: <rule>`),
//! as upstream reports it.

use std::collections::HashMap;
use std::sync::Arc;

use cel::objects::{Key, Map};
use cel::{Context, Program};
use serde_json::Value;

use crate::status::Cause;

/// A JSON value as CEL sees it: integers are `int`, objects are maps.
fn to_cel(value: &Value) -> cel::Value {
    match value {
        Value::Null => cel::Value::Null,
        Value::Bool(b) => cel::Value::Bool(*b),
        Value::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => cel::Value::Int(i),
            (None, Some(u)) => cel::Value::UInt(u),
            _ => cel::Value::Float(n.as_f64().unwrap_or_default()),
        },
        Value::String(s) => cel::Value::String(Arc::new(s.clone())),
        Value::Array(items) => cel::Value::List(Arc::new(items.iter().map(to_cel).collect())),
        Value::Object(map) => {
            let entries: HashMap<Key, cel::Value> = map
                .iter()
                .map(|(k, v)| (Key::String(Arc::new(k.clone())), to_cel(v)))
                .collect();
            cel::Value::Map(Map {
                map: Arc::new(entries),
            })
        }
    }
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

/// The rules of a schema node.
fn rules(schema: &Value) -> &[Value] {
    schema
        .get("x-kubernetes-validations")
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

/// Compile errors of every rule in a schema, as causes at `path` (the
/// rule's place in the definition).
pub fn compile_errors(schema: &Value, path: &str, out: &mut Vec<Cause>) {
    for (i, rule) in rules(schema).iter().enumerate() {
        let text = rule.get("rule").and_then(Value::as_str).unwrap_or("");
        let field = format!("{path}.x-kubernetes-validations[{i}].rule");
        if text.trim().is_empty() {
            out.push(Cause::required(field));
        } else if let Err(e) = Program::compile(text) {
            out.push(Cause::invalid(
                field,
                &Value::String(text.to_string()),
                &format!("compilation failed: {e}"),
            ));
        }
    }
    if let Some(properties) = schema.get("properties").and_then(Value::as_object) {
        for (key, child) in properties {
            compile_errors(child, &format!("{path}.properties[{key}]"), out);
        }
    }
    if let Some(items) = schema.get("items") {
        compile_errors(items, &format!("{path}.items"), out);
    }
    if let Some(values) = schema.get("additionalProperties").filter(|v| v.is_object()) {
        compile_errors(values, &format!("{path}.additionalProperties"), out);
    }
}

/// Evaluates every rule of `schema` over `new` (with `old`, the object
/// before an update).
pub fn validate(schema: &Value, new: &Value, old: Option<&Value>) -> Vec<Cause> {
    let mut out = Vec::new();
    walk(schema, new, old, "", &mut out);
    out
}

fn schema_type(schema: &Value, value: &Value) -> String {
    match schema.get("type").and_then(Value::as_str) {
        Some(t) => t.to_string(),
        None => match value {
            Value::Object(_) => "object".into(),
            Value::Array(_) => "array".into(),
            Value::String(_) => "string".into(),
            Value::Number(_) => "number".into(),
            Value::Bool(_) => "boolean".into(),
            Value::Null => "null".into(),
        },
    }
}

fn walk(schema: &Value, new: &Value, old: Option<&Value>, path: &str, out: &mut Vec<Cause>) {
    for rule in rules(schema) {
        check(rule, schema, new, old, path, out);
    }
    match new {
        Value::Object(map) => {
            let properties = schema.get("properties").and_then(Value::as_object);
            let values = schema.get("additionalProperties").filter(|v| v.is_object());
            for (key, child) in map {
                let child_schema = properties.and_then(|p| p.get(key)).or(values);
                if let Some(child_schema) = child_schema {
                    let old_child = old.and_then(|o| o.get(key));
                    walk(child_schema, child, old_child, &join(path, key), out);
                }
            }
        }
        Value::Array(items) => {
            let Some(item_schema) = schema.get("items") else {
                return;
            };
            let keys: Vec<&str> = schema
                .get("x-kubernetes-list-map-keys")
                .and_then(Value::as_array)
                .map(|k| k.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            let is_map =
                schema.get("x-kubernetes-list-type").and_then(Value::as_str) == Some("map");
            for (i, item) in items.iter().enumerate() {
                // Items of a map list are correlated with the old list by key.
                let old_item = if is_map {
                    old.and_then(Value::as_array).and_then(|list| {
                        list.iter()
                            .find(|o| keys.iter().all(|k| o.get(k) == item.get(k)))
                    })
                } else {
                    None
                };
                walk(item_schema, item, old_item, &format!("{path}[{i}]"), out);
            }
        }
        _ => {}
    }
}

fn check(
    rule: &Value,
    schema: &Value,
    new: &Value,
    old: Option<&Value>,
    path: &str,
    out: &mut Vec<Cause>,
) {
    let Some(text) = rule.get("rule").and_then(Value::as_str) else {
        return;
    };
    let transition = text.contains("oldSelf");
    if transition && old.is_none() {
        return;
    }
    let field = match rule.get("fieldPath").and_then(Value::as_str) {
        Some(extra) if !extra.is_empty() => format!("{path}{extra}"),
        _ => path.to_string(),
    };
    let reason = match rule.get("reason").and_then(Value::as_str) {
        Some("FieldValueForbidden") => "FieldValueForbidden",
        Some("FieldValueRequired") => "FieldValueRequired",
        Some("FieldValueDuplicate") => "FieldValueDuplicate",
        _ => "FieldValueInvalid",
    };
    let shown = format!("Invalid value: {:?}", schema_type(schema, new));
    let program = match Program::compile(text) {
        Ok(program) => program,
        Err(e) => {
            out.push(Cause::new(
                reason,
                field,
                format!("{shown}: compilation failed: {e}"),
            ));
            return;
        }
    };
    let mut context = Context::default();
    context.add_variable_from_value("self", to_cel(new));
    if let Some(old) = old {
        context.add_variable_from_value("oldSelf", to_cel(old));
    }
    let message = match program.execute(&context) {
        Ok(cel::Value::Bool(true)) => return,
        Ok(cel::Value::Bool(false)) => rule
            .get("message")
            .and_then(Value::as_str)
            .filter(|m| !m.is_empty())
            .map_or_else(|| format!("failed rule: {text}"), str::to_string),
        Ok(other) => format!("rule did not evaluate to a bool ({other:?}): {text}"),
        Err(e) => format!("{e} evaluating rule: {text}"),
    };
    out.push(Cause::new(reason, field, format!("{shown}: {message}")));
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Value {
        json!({
            "type": "object",
            "properties": {
                "spec": {
                    "type": "object",
                    "x-kubernetes-validations": [
                        {"rule": "self.minReplicas <= self.replicas", "message": "replicas must be at least minReplicas"},
                        {"rule": "self.name == oldSelf.name", "message": "name is immutable", "fieldPath": ".name"},
                        {"rule": "self.replicas < 100"}
                    ],
                    "properties": {
                        "replicas": {"type": "integer"},
                        "minReplicas": {"type": "integer"},
                        "name": {"type": "string", "x-kubernetes-validations": [{"rule": "self.startsWith('w')", "reason": "FieldValueForbidden"}]}
                    }
                }
            }
        })
    }

    #[test]
    fn rules_hold_or_name_their_field() {
        let ok = json!({"spec": {"replicas": 3, "minReplicas": 1, "name": "web"}});
        assert!(validate(&schema(), &ok, None).is_empty());
        let bad = json!({"spec": {"replicas": 300, "minReplicas": 301, "name": "api"}});
        let causes: Vec<String> = validate(&schema(), &bad, None)
            .iter()
            .map(|c| format!("{} {}: {}", c.reason, c.field, c.message))
            .collect();
        assert_eq!(
            causes,
            vec![
                "FieldValueInvalid spec: Invalid value: \"object\": replicas must be at least minReplicas",
                "FieldValueInvalid spec: Invalid value: \"object\": failed rule: self.replicas < 100",
                "FieldValueForbidden spec.name: Invalid value: \"string\": failed rule: self.startsWith('w')",
            ]
        );
    }

    #[test]
    fn transition_rules_need_the_old_object() {
        let old = json!({"spec": {"replicas": 3, "minReplicas": 1, "name": "web"}});
        let renamed = json!({"spec": {"replicas": 3, "minReplicas": 1, "name": "www"}});
        let causes = validate(&schema(), &renamed, Some(&old));
        assert_eq!(causes.len(), 1);
        assert_eq!(causes[0].field, "spec.name");
        assert_eq!(
            causes[0].message,
            "Invalid value: \"object\": name is immutable"
        );
    }

    #[test]
    fn bad_rules_do_not_compile_and_runtime_errors_are_causes() {
        let mut causes = Vec::new();
        compile_errors(
            &json!({"type": "object", "x-kubernetes-validations": [{"rule": "self.x =="}, {"rule": ""}]}),
            "spec.validation.openAPIV3Schema",
            &mut causes,
        );
        assert_eq!(causes.len(), 2);
        assert!(
            causes[0].message.contains("compilation failed"),
            "{}",
            causes[0].message
        );
        let failing =
            json!({"type": "object", "x-kubernetes-validations": [{"rule": "self.missing > 1"}]});
        let causes = validate(&failing, &json!({}), None);
        assert_eq!(causes.len(), 1);
        assert!(
            causes[0].message.contains("evaluating rule"),
            "{}",
            causes[0].message
        );
    }
}
