//! A custom resource's structural schema at work: pruning of unknown
//! fields, defaulting, and validation, with upstream's messages
//! (`spec.size in body should be less than or equal to 10`).
//!
//! The schema is a CRD version's `openAPIV3Schema`. At the root and in
//! `x-kubernetes-embedded-resource` objects, `apiVersion`, `kind` and
//! `metadata` are always kept; the root's metadata is the object's own and
//! is validated as every object's is.

use serde_json::Value;

use crate::status::Cause;

fn types(schema: &Value) -> Option<&str> {
    schema.get("type").and_then(Value::as_str)
}

fn flag(schema: &Value, name: &str) -> bool {
    schema.get(name).and_then(Value::as_bool) == Some(true)
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

/// The schema of `key` within an object schema: a property, or the
/// `additionalProperties` schema.
fn property<'a>(schema: &'a Value, key: &str) -> Option<&'a Value> {
    schema
        .get("properties")
        .and_then(|p| p.get(key))
        .or_else(|| schema.get("additionalProperties").filter(|a| a.is_object()))
}

/// Whether an object schema keeps keys it does not list.
fn keeps_unknown(schema: &Value) -> bool {
    flag(schema, "x-kubernetes-preserve-unknown-fields")
        || schema
            .get("additionalProperties")
            .is_some_and(|a| a.is_object() || a == true)
}

/// Removes fields the schema does not know; returns their paths
/// (`spec.bogus`) for `fieldValidation`.
pub fn prune(value: &mut Value, schema: &Value) -> Vec<String> {
    let mut pruned = Vec::new();
    prune_at(value, schema, "", true, &mut pruned);
    pruned
}

fn prune_at(value: &mut Value, schema: &Value, path: &str, root: bool, out: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            let embedded = root || flag(schema, "x-kubernetes-embedded-resource");
            let keep_all = keeps_unknown(schema);
            let mut unknown = Vec::new();
            for (key, child) in map.iter_mut() {
                if embedded && matches!(key.as_str(), "apiVersion" | "kind" | "metadata") {
                    if key == "metadata" && !root {
                        prune_embedded_metadata(child, &join(path, key), out);
                    }
                    continue;
                }
                match property(schema, key) {
                    Some(child_schema) => {
                        prune_at(child, child_schema, &join(path, key), false, out)
                    }
                    None if keep_all => {}
                    None => unknown.push(key.clone()),
                }
            }
            for key in unknown {
                map.remove(&key);
                out.push(join(path, &key));
            }
        }
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items") {
                for (i, item) in items.iter_mut().enumerate() {
                    prune_at(item, item_schema, &format!("{path}[{i}]"), false, out);
                }
            }
        }
        _ => {}
    }
}

/// An embedded resource's metadata keeps what ObjectMeta has that matters
/// there: name, namespace, labels, annotations, generateName, finalizers.
fn prune_embedded_metadata(meta: &mut Value, path: &str, out: &mut Vec<String>) {
    if let Value::Object(map) = meta {
        let unknown: Vec<String> = map
            .keys()
            .filter(|k| {
                !matches!(
                    k.as_str(),
                    "name" | "namespace" | "labels" | "annotations" | "generateName" | "finalizers"
                )
            })
            .cloned()
            .collect();
        for key in unknown {
            map.remove(&key);
            out.push(join(path, &key));
        }
    }
}

/// Fills in the schema's `default`s where fields are missing (recursively,
/// into objects that exist or are defaulted), and `null`s in fields that
/// are not nullable but have a default.
pub fn default(value: &mut Value, schema: &Value) {
    match value {
        Value::Object(map) => {
            if let Some(properties) = schema.get("properties").and_then(Value::as_object) {
                for (key, property) in properties {
                    let missing = match map.get(key) {
                        None => true,
                        Some(Value::Null) => !flag(property, "nullable"),
                        Some(_) => false,
                    };
                    if missing && let Some(d) = property.get("default") {
                        map.insert(key.clone(), d.clone());
                    }
                }
                for (key, child) in map.iter_mut() {
                    if let Some(property) = properties.get(key) {
                        default(child, property);
                    }
                }
            } else if let Some(values) =
                schema.get("additionalProperties").filter(|a| a.is_object())
            {
                for child in map.values_mut() {
                    default(child, values);
                }
            }
        }
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items") {
                for item in items.iter_mut() {
                    default(item, item_schema);
                }
            }
        }
        _ => {}
    }
}

fn shown(value: &Value) -> String {
    match value {
        Value::String(s) => format!("{s:?}"),
        Value::Object(_) => "\"object\"".into(),
        Value::Array(_) => "\"array\"".into(),
        other => other.to_string(),
    }
}

fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn invalid(path: &str, value: &Value, detail: String) -> Cause {
    Cause::new(
        "FieldValueInvalid",
        path,
        format!("Invalid value: {}: {detail}", shown(value)),
    )
}

/// Validates `value` against the schema; the causes name field paths as
/// upstream does.
pub fn validate(value: &Value, schema: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    validate_at(value, schema, "", true, &mut causes);
    causes
}

fn number(value: &Value) -> Option<f64> {
    value.as_f64()
}

/// Where a value is, as upstream's messages say it: `spec.size in body`.
fn body(path: &str) -> String {
    if path.is_empty() {
        "body".to_string()
    } else {
        format!("{path} in body")
    }
}

fn validate_at(value: &Value, schema: &Value, path: &str, root: bool, out: &mut Vec<Cause>) {
    if value.is_null() {
        if !flag(schema, "nullable") && types(schema).is_some() {
            out.push(invalid(
                path,
                value,
                format!(
                    "{} must be of type {}",
                    body(path),
                    types(schema).unwrap_or("object")
                ),
            ));
        }
        return;
    }
    let int_or_string = flag(schema, "x-kubernetes-int-or-string");
    if int_or_string {
        if !matches!(type_name(value), "integer" | "string") {
            out.push(invalid(
                path,
                value,
                format!("{} must be of type integer or string", body(path)),
            ));
            return;
        }
    } else if let Some(want) = types(schema) {
        let got = type_name(value);
        let ok = got == want || (want == "number" && got == "integer");
        if !ok {
            out.push(Cause::new(
                "FieldValueTypeInvalid",
                path,
                format!(
                    "Invalid value: {}: {} must be of type {want}",
                    shown(value),
                    body(path)
                ),
            ));
            return;
        }
    }
    if let Some(allowed) = schema.get("enum").and_then(Value::as_array)
        && !allowed.contains(value)
    {
        let list: Vec<String> = allowed.iter().map(shown).collect();
        out.push(Cause::new(
            "FieldValueNotSupported",
            path,
            format!(
                "Unsupported value: {}: supported values: {}",
                shown(value),
                list.join(", ")
            ),
        ));
    }
    match value {
        Value::Number(_) => {
            let n = number(value).unwrap_or_default();
            for (key, exclusive_key, beyond, relation) in [
                ("maximum", "exclusiveMaximum", 1.0, "less than"),
                ("minimum", "exclusiveMinimum", -1.0, "greater than"),
            ] {
                let Some(bound) = schema.get(key).and_then(number) else {
                    continue;
                };
                let exclusive = flag(schema, exclusive_key);
                if (n - bound) * beyond > 0.0 || (exclusive && n == bound) {
                    let relation = if exclusive {
                        relation.to_string()
                    } else {
                        format!("{relation} or equal to")
                    };
                    out.push(invalid(
                        path,
                        value,
                        format!("{} should be {relation} {}", body(path), schema[key]),
                    ));
                }
            }
            if let Some(m) = schema.get("multipleOf").and_then(number)
                && m != 0.0
                && (n / m).fract() != 0.0
            {
                out.push(invalid(
                    path,
                    value,
                    format!(
                        "{} should be a multiple of {}",
                        body(path),
                        schema["multipleOf"]
                    ),
                ));
            }
            if let Some(format) = schema.get("format").and_then(Value::as_str) {
                let fits = match format {
                    "int32" => value.as_i64().is_some_and(|i| i32::try_from(i).is_ok()),
                    "int64" => value.as_i64().is_some(),
                    _ => true,
                };
                if !fits {
                    out.push(invalid(
                        path,
                        value,
                        format!("{} must be of type {format}", body(path)),
                    ));
                }
            }
        }
        Value::String(s) => {
            let length = s.chars().count() as u64;
            if let Some(max) = schema.get("maxLength").and_then(Value::as_u64)
                && length > max
            {
                out.push(Cause::new(
                    "FieldValueTooLong",
                    path,
                    format!("Too long: may not be more than {max} bytes"),
                ));
            }
            if let Some(min) = schema.get("minLength").and_then(Value::as_u64)
                && length < min
            {
                out.push(invalid(
                    path,
                    value,
                    format!("{} should be at least {min} chars long", body(path)),
                ));
            }
            if let Some(pattern) = schema.get("pattern").and_then(Value::as_str) {
                match regex::Regex::new(pattern) {
                    Ok(re) if !re.is_match(s) => out.push(invalid(
                        path,
                        value,
                        format!("{} should match '{pattern}'", body(path)),
                    )),
                    _ => {}
                }
            }
            if let Some(format) = schema.get("format").and_then(Value::as_str)
                && !string_format(format, s)
            {
                out.push(invalid(
                    path,
                    value,
                    format!("{} must be of type {format}", body(path)),
                ));
            }
        }
        Value::Array(items) => {
            count_bounds(
                schema,
                ("maxItems", "minItems", "items"),
                items.len(),
                path,
                value,
                out,
            );
            let unique = flag(schema, "uniqueItems")
                || schema.get("x-kubernetes-list-type").and_then(Value::as_str) == Some("set");
            if unique {
                for (i, item) in items.iter().enumerate() {
                    if items[..i].contains(item) {
                        out.push(Cause::new(
                            "FieldValueDuplicate",
                            format!("{path}[{i}]"),
                            format!("Duplicate value: {}", shown(item)),
                        ));
                    }
                }
            }
            if let Some(item_schema) = schema.get("items") {
                for (i, item) in items.iter().enumerate() {
                    validate_at(item, item_schema, &format!("{path}[{i}]"), false, out);
                }
            }
        }
        Value::Object(map) => {
            for key in schema
                .get("required")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
            {
                if !map.contains_key(key) {
                    out.push(Cause::new(
                        "FieldValueRequired",
                        join(path, key),
                        "Required value",
                    ));
                }
            }
            count_bounds(
                schema,
                ("maxProperties", "minProperties", "properties"),
                map.len(),
                path,
                value,
                out,
            );
            let embedded = root || flag(schema, "x-kubernetes-embedded-resource");
            for (key, child) in map {
                if embedded && matches!(key.as_str(), "apiVersion" | "kind" | "metadata") {
                    continue;
                }
                if let Some(child_schema) = property(schema, key) {
                    validate_at(child, child_schema, &join(path, key), false, out);
                }
            }
        }
        Value::Bool(_) | Value::Null => {}
    }
    for combinator in ["allOf", "anyOf", "oneOf"] {
        let Some(branches) = schema.get(combinator).and_then(Value::as_array) else {
            continue;
        };
        let results: Vec<Vec<Cause>> = branches
            .iter()
            .map(|b| {
                let mut c = Vec::new();
                validate_at(value, b, path, false, &mut c);
                c
            })
            .collect();
        let passing = results.iter().filter(|c| c.is_empty()).count();
        match combinator {
            "allOf" => out.extend(results.into_iter().flatten()),
            "anyOf" if passing == 0 => out.push(invalid(
                path,
                value,
                format!("{} must validate at least one schema (anyOf)", body(path)),
            )),
            "oneOf" if passing != 1 => out.push(invalid(
                path,
                value,
                format!(
                    "{} must validate one and only one schema (oneOf)",
                    body(path)
                ),
            )),
            _ => {}
        }
    }
    if let Some(not) = schema.get("not") {
        let mut c = Vec::new();
        validate_at(value, not, path, false, &mut c);
        if c.is_empty() {
            out.push(invalid(
                path,
                value,
                format!("{} must not validate the schema (not)", body(path)),
            ));
        }
    }
}

/// `maxItems`/`minItems` or `maxProperties`/`minProperties`: `keys` names
/// the bounds and the noun of the minimum's message.
fn count_bounds(
    schema: &Value,
    keys: (&str, &str, &str),
    count: usize,
    path: &str,
    value: &Value,
    out: &mut Vec<Cause>,
) {
    let (max_key, min_key, noun) = keys;
    if let Some(max) = schema.get(max_key).and_then(Value::as_u64)
        && count as u64 > max
    {
        out.push(Cause::new(
            "FieldValueTooMany",
            path,
            format!("Too many: {count}: must have at most {max} items"),
        ));
    }
    if let Some(min) = schema.get(min_key).and_then(Value::as_u64)
        && (count as u64) < min
    {
        out.push(invalid(
            path,
            value,
            format!("{} should have at least {min} {noun}", body(path)),
        ));
    }
}

/// The string formats upstream checks.
fn string_format(format: &str, s: &str) -> bool {
    match format {
        "int-or-string" | "byte" | "password" | "" => true,
        "date-time" => crate::time::parse_rfc3339(s).is_some(),
        "date" => {
            let parts: Vec<&str> = s.split('-').collect();
            parts.len() == 3
                && parts[0].len() == 4
                && parts.iter().all(|p| p.chars().all(|c| c.is_ascii_digit()))
        }
        "ipv4" => s.parse::<std::net::Ipv4Addr>().is_ok(),
        "ipv6" => s.parse::<std::net::Ipv6Addr>().is_ok(),
        "cidr" => s.split_once('/').is_some_and(|(ip, bits)| {
            ip.parse::<std::net::IpAddr>().is_ok() && bits.parse::<u8>().is_ok()
        }),
        "hostname" => {
            !s.is_empty()
                && s.len() <= 253
                && s.split('.').all(|l| {
                    !l.is_empty()
                        && l.len() <= 63
                        && l.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
                })
        }
        "uuid" => {
            s.len() == 36
                && s.chars().enumerate().all(|(i, c)| {
                    if [8, 13, 18, 23].contains(&i) {
                        c == '-'
                    } else {
                        c.is_ascii_hexdigit()
                    }
                })
        }
        "email" => s
            .split_once('@')
            .is_some_and(|(a, b)| !a.is_empty() && b.contains('.')),
        _ => true,
    }
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
                    "required": ["size"],
                    "properties": {
                        "size": {"type": "integer", "minimum": 1, "maximum": 10},
                        "mode": {"type": "string", "enum": ["fast", "slow"], "default": "fast"},
                        "name": {"type": "string", "pattern": "^[a-z]+$", "maxLength": 8},
                        "tags": {"type": "array", "items": {"type": "string"}, "x-kubernetes-list-type": "set"},
                        "port": {"x-kubernetes-int-or-string": true},
                        "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                        "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                        "template": {"type": "object", "x-kubernetes-embedded-resource": true,
                                     "properties": {"spec": {"type": "object", "properties": {"x": {"type": "string"}}}}}
                    }
                },
                "status": {"type": "object", "properties": {"ready": {"type": "boolean"}}}
            }
        })
    }

    #[test]
    fn prunes_unknown_fields_and_keeps_preserved_ones() {
        let mut object = json!({
            "apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"},
            "spec": {"size": 2, "bogus": 1, "free": {"any": {"thing": 1}}, "labels": {"a": "b"},
                     "template": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "uid": "x"}, "spec": {"x": "y", "z": 1}}},
            "extra": true
        });
        let pruned = prune(&mut object, &schema());
        assert_eq!(
            pruned,
            vec![
                "spec.template.metadata.uid",
                "spec.template.spec.z",
                "spec.bogus",
                "extra"
            ]
        );
        assert_eq!(object["spec"]["free"], json!({"any": {"thing": 1}}));
        assert_eq!(object["spec"]["labels"], json!({"a": "b"}));
        assert_eq!(object["spec"]["template"]["kind"], "Pod");
        assert!(object.get("extra").is_none());
    }

    #[test]
    fn defaults_missing_fields() {
        let mut object = json!({"spec": {"size": 1}});
        default(&mut object, &schema());
        assert_eq!(object["spec"]["mode"], "fast");
    }

    #[test]
    fn validates_with_upstream_messages() {
        let object = json!({"spec": {"size": 11, "mode": "medium", "name": "Bad", "tags": ["a", "a"], "port": true}});
        let causes = validate(&object, &schema());
        let lines: Vec<String> = causes
            .iter()
            .map(|c| format!("{}: {}", c.field, c.message))
            .collect();
        assert_eq!(
            lines,
            vec![
                "spec.mode: Unsupported value: \"medium\": supported values: \"fast\", \"slow\"",
                "spec.name: Invalid value: \"Bad\": spec.name in body should match '^[a-z]+$'",
                "spec.port: Invalid value: true: spec.port in body must be of type integer or string",
                "spec.size: Invalid value: 11: spec.size in body should be less than or equal to 10",
                "spec.tags[1]: Duplicate value: \"a\"",
            ]
        );
        let missing = validate(&json!({"spec": {"size": "x"}}), &schema());
        assert_eq!(
            missing[0].message,
            "Invalid value: \"x\": spec.size in body must be of type integer"
        );
        let required = validate(&json!({"spec": {}}), &schema());
        assert_eq!(required[0].field, "spec.size");
        assert_eq!(required[0].message, "Required value");
        assert!(validate(&json!({"spec": {"size": 3, "port": "http"}}), &schema()).is_empty());
    }
}
