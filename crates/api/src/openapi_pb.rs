//! The OpenAPI v2 document in gnostic's protobuf form
//! (`application/com.github.proto-openapi.spec.v2@v1.0+protobuf`), which
//! kubectl 1.27 and 1.28 insist on before `apply`, `create -f` or `replace`.
//! Encoded from the JSON document of [`crate::openapi::v2`]; message and
//! field numbers follow gnostic's `openapiv2/OpenAPIv2.proto`. Keywords the
//! Swagger 2.0 schema object has no field for (`nullable`, `oneOf`, ...)
//! are left out, as gnostic would.

use serde_json::{Map, Value};

/// A protobuf message being written.
#[derive(Debug, Default)]
struct Msg(Vec<u8>);

impl Msg {
    fn varint(&mut self, mut v: u64) {
        loop {
            let byte = (v & 0x7f) as u8;
            v >>= 7;
            if v == 0 {
                self.0.push(byte);
                return;
            }
            self.0.push(byte | 0x80);
        }
    }
    fn key(&mut self, tag: u32, wire: u8) {
        self.varint(u64::from(tag) << 3 | u64::from(wire));
    }
    fn bytes(&mut self, tag: u32, b: &[u8]) {
        self.key(tag, 2);
        self.varint(b.len() as u64);
        self.0.extend_from_slice(b);
    }
    fn string(&mut self, tag: u32, s: &str) {
        if !s.is_empty() {
            self.bytes(tag, s.as_bytes());
        }
    }
    fn message(&mut self, tag: u32, m: Msg) {
        self.bytes(tag, &m.0);
    }
    fn boolean(&mut self, tag: u32, b: bool) {
        if b {
            self.key(tag, 0);
            self.varint(1);
        }
    }
    fn int64(&mut self, tag: u32, v: i64) {
        self.key(tag, 0);
        self.varint(v as u64);
    }
    fn double(&mut self, tag: u32, v: f64) {
        self.key(tag, 1);
        self.0.extend_from_slice(&v.to_bits().to_le_bytes());
    }
}

fn str_of<'a>(v: &'a Value, key: &str) -> &'a str {
    v.get(key).and_then(Value::as_str).unwrap_or_default()
}

/// `Any { yaml }`: JSON is YAML, which is what gnostic's readers parse.
fn any(value: &Value) -> Msg {
    let mut m = Msg::default();
    m.string(2, &value.to_string());
    m
}

/// `NamedAny` vendor extensions (`x-…` keys) of a JSON object.
fn extensions(object: &Map<String, Value>, tag: u32, out: &mut Msg) {
    for (key, value) in object.iter().filter(|(k, _)| k.starts_with("x-")) {
        let mut named = Msg::default();
        named.string(1, key);
        named.message(2, any(value));
        out.message(tag, named);
    }
}

fn schema(s: &Value) -> Msg {
    let mut m = Msg::default();
    let Some(o) = s.as_object() else { return m };
    m.string(1, str_of(s, "$ref"));
    m.string(2, str_of(s, "format"));
    m.string(3, str_of(s, "title"));
    m.string(4, str_of(s, "description"));
    if let Some(default) = o.get("default") {
        m.message(5, any(default));
    }
    for (tag, key) in [(6, "multipleOf"), (7, "maximum"), (9, "minimum")] {
        if let Some(v) = o.get(key).and_then(Value::as_f64) {
            m.double(tag, v);
        }
    }
    m.boolean(
        8,
        o.get("exclusiveMaximum")
            .and_then(Value::as_bool)
            .unwrap_or(false),
    );
    m.boolean(
        10,
        o.get("exclusiveMinimum")
            .and_then(Value::as_bool)
            .unwrap_or(false),
    );
    for (tag, key) in [
        (11, "maxLength"),
        (12, "minLength"),
        (14, "maxItems"),
        (15, "minItems"),
        (17, "maxProperties"),
        (18, "minProperties"),
    ] {
        if let Some(v) = o.get(key).and_then(Value::as_i64) {
            m.int64(tag, v);
        }
    }
    m.string(13, str_of(s, "pattern"));
    m.boolean(
        16,
        o.get("uniqueItems")
            .and_then(Value::as_bool)
            .unwrap_or(false),
    );
    for required in o
        .get("required")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        m.string(19, required.as_str().unwrap_or_default());
    }
    for value in o
        .get("enum")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        m.message(20, any(value));
    }
    match o.get("additionalProperties") {
        Some(Value::Bool(b)) => {
            let mut item = Msg::default();
            item.key(2, 0);
            item.varint(u64::from(*b));
            m.message(21, item);
        }
        Some(additional @ Value::Object(_)) => {
            let mut item = Msg::default();
            item.message(1, schema(additional));
            m.message(21, item);
        }
        _ => {}
    }
    let types: Vec<&str> = match o.get("type") {
        Some(Value::String(t)) => vec![t.as_str()],
        Some(Value::Array(ts)) => ts
            .iter()
            .filter_map(Value::as_str)
            .filter(|t| *t != "null")
            .collect(),
        _ => vec![],
    };
    if !types.is_empty() {
        let mut item = Msg::default();
        for t in types {
            item.string(1, t);
        }
        m.message(22, item);
    }
    if let Some(items) = o.get("items") {
        let mut item = Msg::default();
        match items {
            Value::Array(list) => list.iter().for_each(|s| item.message(1, schema(s))),
            other => item.message(1, schema(other)),
        }
        m.message(23, item);
    }
    for part in o
        .get("allOf")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        m.message(24, schema(part));
    }
    if let Some(properties) = o.get("properties").and_then(Value::as_object) {
        let mut props = Msg::default();
        for (name, value) in properties {
            let mut named = Msg::default();
            named.string(1, name);
            named.message(2, schema(value));
            props.message(1, named);
        }
        m.message(25, props);
    }
    m.boolean(
        27,
        o.get("readOnly").and_then(Value::as_bool).unwrap_or(false),
    );
    extensions(o, 31, &mut m);
    m
}

fn parameter(p: &Value) -> Msg {
    let mut inner = Msg::default();
    let location = str_of(p, "in");
    let required = p.get("required").and_then(Value::as_bool).unwrap_or(false);
    let mut parameter = Msg::default();
    if location == "body" {
        inner.string(1, str_of(p, "description"));
        inner.string(2, str_of(p, "name"));
        inner.string(3, location);
        inner.boolean(4, required);
        inner.message(5, schema(p.get("schema").unwrap_or(&Value::Null)));
        parameter.message(1, inner);
    } else {
        // Query (3) and path (4) sub-schemas share their first fields;
        // query has allowEmptyValue at 5, so `type` sits at 6, path's at 5.
        let (sub, type_tag) = if location == "path" { (4, 5) } else { (3, 6) };
        inner.boolean(1, required);
        inner.string(2, location);
        inner.string(3, str_of(p, "description"));
        inner.string(4, str_of(p, "name"));
        inner.string(type_tag, str_of(p, "type"));
        let mut non_body = Msg::default();
        non_body.message(sub, inner);
        parameter.message(2, non_body);
    }
    let mut item = Msg::default();
    item.message(1, parameter);
    item
}

fn operation(op: &Value) -> Msg {
    let mut m = Msg::default();
    for tag in op
        .get("tags")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        m.string(1, tag.as_str().unwrap_or_default());
    }
    m.string(3, str_of(op, "description"));
    m.string(5, str_of(op, "operationId"));
    for p in op
        .get("parameters")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        m.message(8, parameter(p));
    }
    if let Some(responses) = op.get("responses").and_then(Value::as_object) {
        let mut rs = Msg::default();
        for (code, response) in responses {
            let mut r = Msg::default();
            r.string(1, str_of(response, "description"));
            if let Some(s) = response.get("schema") {
                let mut item = Msg::default();
                item.message(1, schema(s));
                r.message(2, item);
            }
            let mut value = Msg::default();
            value.message(1, r);
            let mut named = Msg::default();
            named.string(1, code);
            named.message(2, value);
            rs.message(1, named);
        }
        m.message(9, rs);
    }
    if let Some(o) = op.as_object() {
        extensions(o, 13, &mut m);
    }
    m
}

fn path_item(item: &Value) -> Msg {
    let mut m = Msg::default();
    for (tag, method) in [
        (2, "get"),
        (3, "put"),
        (4, "post"),
        (5, "delete"),
        (6, "options"),
        (7, "head"),
        (8, "patch"),
    ] {
        if let Some(op) = item.get(method) {
            m.message(tag, operation(op));
        }
    }
    for p in item
        .get("parameters")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        m.message(9, parameter(p));
    }
    m
}

/// Encodes a Swagger 2.0 JSON document as gnostic's `openapi_v2.Document`.
pub fn encode(document: &Value) -> Vec<u8> {
    let mut doc = Msg::default();
    doc.string(1, str_of(document, "swagger"));
    let mut info = Msg::default();
    if let Some(i) = document.get("info") {
        info.string(1, str_of(i, "title"));
        info.string(2, str_of(i, "version"));
    }
    doc.message(2, info);
    let mut paths = Msg::default();
    for (name, item) in document
        .get("paths")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
    {
        let mut named = Msg::default();
        named.string(1, name);
        named.message(2, path_item(item));
        paths.message(2, named);
    }
    doc.message(8, paths);
    let mut definitions = Msg::default();
    for (name, s) in document
        .get("definitions")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
    {
        let mut named = Msg::default();
        named.string(1, name);
        named.message(2, schema(s));
        definitions.message(1, named);
    }
    doc.message(9, definitions);
    doc.0
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_small_document_encodes_to_the_expected_bytes() {
        let document = json!({
            "swagger": "2.0",
            "info": {"title": "K", "version": "v"},
            "paths": {},
            "definitions": {"a.B": {"type": "object", "x-k": 1}},
        });
        let bytes = encode(&document);
        // swagger, info{title, version}, paths{}, definitions{NamedSchema{name, Schema{type, ext}}}
        let expected: Vec<u8> = [
            &[0x0a, 3][..],
            b"2.0",
            &[0x12, 6, 0x0a, 1],
            b"K",
            &[0x12, 1],
            b"v",
            &[0x42, 0],
            &[0x4a, 33, 0x0a, 31, 0x0a, 3],
            b"a.B",
            &[0x12, 24, 0xb2, 1, 8, 0x0a, 6],
            b"object",
            &[0xfa, 1, 10, 0x0a, 3],
            b"x-k",
            &[0x12, 3, 0x12, 1],
            b"1",
        ]
        .concat();
        assert_eq!(bytes, expected);
    }

    #[test]
    fn the_served_document_encodes() {
        let doc = crate::openapi::v2(&crate::Registry::builtin());
        let bytes = encode(&doc);
        assert!(bytes.len() > 100_000);
        let needle = b"x-kubernetes-group-version-kind";
        assert!(bytes.windows(needle.len()).any(|w| w == needle));
    }
}
