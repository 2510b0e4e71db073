//! Kubernetes protobuf request bodies (`application/vnd.kubernetes.protobuf`),
//! decoded to the JSON the rest of the server works with. kubectl 1.32 and
//! later send them for every object its typed clients create or update.
//!
//! The wire schema — message, field number, type — is a table derived from
//! the k8s-pb crate (`scripts/gen-protobuf-schema`); field names in JSON are
//! resolved against the OpenAPI schemas, so names like `podIP` come out as
//! upstream spells them. Kubernetes' own wrapper types (Time, MicroTime,
//! Duration, Quantity, IntOrString, RawExtension, FieldsV1, JSON) are mapped
//! to their JSON forms here.

use std::collections::HashMap;
use std::sync::OnceLock;

use serde_json::{Map, Value, json};

use crate::Registry;
use crate::structure::normalize;

pub mod go_json;

const SCHEMA: &str = include_str!("schema.txt");
/// Go value fields tagged `omitempty` (`scripts/gen-go-zero-fields`): Go's
/// protobuf writes their zero, its JSON and defaulting read it as unset.
const OMITEMPTY: &str = include_str!("omitempty.txt");
/// The four bytes every Kubernetes protobuf body starts with.
pub const MAGIC: &[u8] = b"k8s\0";

#[derive(Debug, Clone, PartialEq, Eq)]
enum Kind {
    String,
    Bool,
    Int32,
    Int64,
    Double,
    Bytes,
    Message(String),
    Map(Box<Kind>, Box<Kind>),
}

#[derive(Debug, Clone)]
struct Field {
    json: String,
    kind: Kind,
    repeated: bool,
    /// A Go struct embedded with `json:",inline"` (a Volume's VolumeSource,
    /// an IngressRule's IngressRuleValue, a Probe's handler): a message on
    /// the wire, its fields the parent's own in JSON.
    inline: bool,
    /// A Go value field tagged `omitempty`: its zero is no value.
    omit_zero: bool,
    /// Its place among its message's fields: the Go struct's declaration
    /// order, which the schema's lines keep (Go's JSON writes fields so).
    position: usize,
}

/// The protobuf schema of the served types, with JSON field names.
#[derive(Debug, Default)]
pub struct Schema {
    messages: HashMap<String, HashMap<u32, Field>>,
}

fn scalar(kind: &str, rest: &mut std::str::Split<'_, char>) -> Option<Kind> {
    Some(match kind {
        "s" => Kind::String,
        "b" => Kind::Bool,
        "i32" => Kind::Int32,
        "i64" => Kind::Int64,
        "f64" => Kind::Double,
        "y" => Kind::Bytes,
        "m" => Kind::Message(rest.next()?.to_string()),
        _ => return None,
    })
}

fn camel(name: &str) -> String {
    let mut out = String::new();
    let mut upper = false;
    for c in name.chars() {
        if c == '_' {
            upper = true;
        } else if upper {
            out.extend(c.to_uppercase());
            upper = false;
        } else {
            out.push(c);
        }
    }
    out
}

impl Schema {
    /// Parses the table, naming fields as the `definitions` spell them.
    fn load(definitions: &Map<String, Value>) -> Schema {
        let by_lower: HashMap<String, &Value> = definitions
            .iter()
            .map(|(k, v)| (k.to_lowercase(), v))
            .collect();
        let mut messages = HashMap::new();
        let mut json_names: HashMap<String, Vec<String>> = HashMap::new();
        let omitempty: std::collections::HashSet<&str> =
            OMITEMPTY.lines().filter(|l| !l.starts_with('#')).collect();
        for line in SCHEMA
            .lines()
            .filter(|l| !l.starts_with('#') && !l.is_empty())
        {
            let Some((name, fields)) = line.split_once('|') else {
                continue;
            };
            let properties: HashMap<String, String> = by_lower
                .get(name)
                .and_then(|d| d.get("properties"))
                .and_then(Value::as_object)
                .map(|p| p.keys().map(|k| (normalize(k), k.clone())).collect())
                .unwrap_or_default();
            let mut table = HashMap::new();
            for (position, entry) in fields.split(';').filter(|e| !e.is_empty()).enumerate() {
                let (entry, repeated) = match entry.strip_suffix('*') {
                    Some(e) => (e, true),
                    None => (entry, false),
                };
                let mut parts = entry.split(':');
                let (Some(tag), Some(rust), Some(kind)) =
                    (parts.next(), parts.next(), parts.next())
                else {
                    continue;
                };
                let Ok(tag) = tag.parse::<u32>() else {
                    continue;
                };
                let kind = if kind == "map" {
                    let (Some(k), Some(v)) = (parts.next(), parts.next()) else {
                        continue;
                    };
                    let (Some(key), Some(value)) =
                        (scalar(k, &mut parts.clone()), scalar(v, &mut parts))
                    else {
                        continue;
                    };
                    Kind::Map(Box::new(key), Box::new(value))
                } else {
                    let Some(kind) = scalar(kind, &mut parts) else {
                        continue;
                    };
                    kind
                };
                let known = properties.get(&normalize(rust)).cloned();
                // Checked below: the embedded message's fields must be the
                // parent's in JSON (a field newer than the OpenAPI schemas,
                // whose fields the parent does not have, is not embedded).
                let inline = known.is_none()
                    && !properties.is_empty()
                    && !repeated
                    && matches!(kind, Kind::Message(_));
                let json = known.unwrap_or_else(|| camel(rust));
                let omit_zero =
                    omitempty.contains(format!("{name}.{}", json.to_lowercase()).as_str());
                table.insert(
                    tag,
                    Field {
                        json,
                        kind,
                        repeated,
                        inline,
                        omit_zero,
                        position,
                    },
                );
            }
            json_names.insert(name.to_string(), properties.into_values().collect());
            messages.insert(name.to_string(), table);
        }
        let field_names = |message: &str| -> Vec<String> {
            messages
                .get(message)
                .map(|t: &HashMap<u32, Field>| t.values().map(|f| f.json.clone()).collect())
                .unwrap_or_default()
        };
        let mut embedded = Vec::new();
        for (name, table) in &messages {
            for (tag, field) in table {
                if let (true, Kind::Message(inner)) = (field.inline, &field.kind) {
                    let parent = json_names.get(name).cloned().unwrap_or_default();
                    let fits = field_names(inner).iter().any(|f| parent.contains(f));
                    embedded.push((name.clone(), *tag, fits));
                }
            }
        }
        for (name, tag, fits) in embedded {
            if let Some(field) = messages.get_mut(&name).and_then(|t| t.get_mut(&tag)) {
                field.inline = fits;
            }
        }
        Schema { messages }
    }

    /// The schema of every served type, built on first use.
    pub fn get() -> &'static Schema {
        static SCHEMA: OnceLock<Schema> = OnceLock::new();
        SCHEMA.get_or_init(|| Schema::load(crate::openapi::builtin_definitions()))
    }

    pub fn knows(&self, message: &str) -> bool {
        self.messages.contains_key(&message.to_lowercase())
    }
}

/// A cursor over protobuf wire bytes.
struct Wire<'a> {
    bytes: &'a [u8],
}

#[derive(Debug, Clone, Copy)]
enum WireValue<'a> {
    Varint(u64),
    Fixed64(u64),
    Bytes(&'a [u8]),
    /// A 32-bit field (no served type has one; skipped).
    Fixed32,
}

impl<'a> Wire<'a> {
    fn varint(&mut self) -> Result<u64, String> {
        let mut value = 0u64;
        for shift in (0..64).step_by(7) {
            let (&byte, rest) = self.bytes.split_first().ok_or("truncated varint")?;
            self.bytes = rest;
            value |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err("varint too long".into())
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        if self.bytes.len() < n {
            return Err("truncated field".into());
        }
        let (head, rest) = self.bytes.split_at(n);
        self.bytes = rest;
        Ok(head)
    }

    fn next(&mut self) -> Result<Option<(u32, WireValue<'a>)>, String> {
        if self.bytes.is_empty() {
            return Ok(None);
        }
        let key = self.varint()?;
        let tag = u32::try_from(key >> 3).map_err(|_| "field number too large")?;
        let value = match key & 7 {
            0 => WireValue::Varint(self.varint()?),
            1 => WireValue::Fixed64(u64::from_le_bytes(
                self.take(8)?.try_into().map_err(|_| "fixed64")?,
            )),
            2 => {
                let len = usize::try_from(self.varint()?).map_err(|_| "length too large")?;
                WireValue::Bytes(self.take(len)?)
            }
            5 => {
                self.take(4)?;
                WireValue::Fixed32
            }
            other => return Err(format!("unsupported wire type {other}")),
        };
        Ok(Some((tag, value)))
    }
}

fn base64(bytes: &[u8]) -> String {
    const TABLE: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(TABLE[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// Go's `time.Duration.String()` of nanoseconds: `1h2m3.5s`, `150ms`, `0s`.
fn go_duration(nanos: i64) -> String {
    if nanos == 0 {
        return "0s".into();
    }
    let sign = if nanos < 0 { "-" } else { "" };
    let n = nanos.unsigned_abs();
    if n < 1_000_000_000 {
        let (value, unit) = if n < 1_000 {
            (n as f64, "ns")
        } else if n < 1_000_000 {
            (n as f64 / 1e3, "µs")
        } else {
            (n as f64 / 1e6, "ms")
        };
        return format!("{sign}{}{unit}", trim_float(value));
    }
    let (h, m) = (n / 3_600_000_000_000, n / 60_000_000_000 % 60);
    let s = (n % 60_000_000_000) as f64 / 1e9;
    let mut out = sign.to_string();
    if h > 0 {
        out.push_str(&format!("{h}h"));
    }
    if h > 0 || m > 0 {
        out.push_str(&format!("{m}m"));
    }
    out.push_str(&format!("{}s", trim_float(s)));
    out
}

fn trim_float(v: f64) -> String {
    let text = format!("{v:.9}");
    let text = text.trim_end_matches('0').trim_end_matches('.');
    text.to_string()
}

fn raw_json(bytes: &[u8]) -> Value {
    serde_json::from_slice(bytes)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(bytes).into_owned()))
}

impl Schema {
    fn scalar_value(&self, kind: &Kind, value: WireValue<'_>) -> Result<Value, String> {
        Ok(match (kind, value) {
            (Kind::String, WireValue::Bytes(b)) => json!(String::from_utf8_lossy(b)),
            (Kind::Bytes, WireValue::Bytes(b)) => json!(base64(b)),
            (Kind::Bool, WireValue::Varint(v)) => json!(v != 0),
            (Kind::Int32, WireValue::Varint(v)) => json!(v as i64 as i32),
            (Kind::Int64, WireValue::Varint(v)) => json!(v as i64),
            (Kind::Double, WireValue::Fixed64(v)) => json!(f64::from_bits(v)),
            (Kind::Message(name), WireValue::Bytes(b)) => self.message(name, b)?,
            (kind, value) => {
                return Err(format!("field of type {kind:?} has wire value {value:?}"));
            }
        })
    }

    /// Decodes one message to its JSON form.
    fn message(&self, name: &str, bytes: &[u8]) -> Result<Value, String> {
        let mut wire = Wire { bytes };
        let simple = |tag: u32| -> Result<Option<WireValue<'_>>, String> {
            let mut w = Wire { bytes };
            while let Some((t, v)) = w.next()? {
                if t == tag {
                    return Ok(Some(v));
                }
            }
            Ok(None)
        };
        match name {
            "io.k8s.apimachinery.pkg.apis.meta.v1.time"
            | "io.k8s.apimachinery.pkg.apis.meta.v1.microtime" => {
                let seconds = match simple(1)? {
                    Some(WireValue::Varint(v)) => v as i64,
                    _ => 0,
                };
                let nanos = match simple(2)? {
                    Some(WireValue::Varint(v)) => v as i64,
                    _ => 0,
                };
                let text = crate::time::format_rfc3339(seconds);
                return Ok(if name.ends_with("microtime") {
                    json!(format!(
                        "{}.{:06}Z",
                        text.trim_end_matches('Z'),
                        nanos / 1000
                    ))
                } else {
                    json!(text)
                });
            }
            "io.k8s.apimachinery.pkg.apis.meta.v1.duration" => {
                let nanos = match simple(1)? {
                    Some(WireValue::Varint(v)) => v as i64,
                    _ => 0,
                };
                return Ok(json!(go_duration(nanos)));
            }
            "io.k8s.apimachinery.pkg.api.resource.quantity" => {
                return Ok(match simple(1)? {
                    Some(WireValue::Bytes(b)) => json!(String::from_utf8_lossy(b)),
                    _ => json!("0"),
                });
            }
            "io.k8s.apimachinery.pkg.util.intstr.intorstring" => {
                let is_string = matches!(simple(1)?, Some(WireValue::Varint(1)));
                return Ok(if is_string {
                    match simple(3)? {
                        Some(WireValue::Bytes(b)) => json!(String::from_utf8_lossy(b)),
                        _ => json!(""),
                    }
                } else {
                    match simple(2)? {
                        Some(WireValue::Varint(v)) => json!(v as i64 as i32),
                        _ => json!(0),
                    }
                });
            }
            "io.k8s.apimachinery.pkg.runtime.rawextension"
            | "io.k8s.apimachinery.pkg.apis.meta.v1.fieldsv1"
            | "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.json" => {
                return Ok(match simple(1)? {
                    Some(WireValue::Bytes(b)) => raw_json(b),
                    _ => Value::Null,
                });
            }
            "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.jsonschemapropsorbool" => {
                return Ok(match simple(2)? {
                    Some(WireValue::Bytes(b)) => self.message(
                        "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.jsonschemaprops",
                        b,
                    )?,
                    _ => json!(matches!(simple(1)?, Some(WireValue::Varint(1)))),
                });
            }
            _ => {}
        }
        let fields = self
            .messages
            .get(name)
            .ok_or_else(|| format!("no protobuf schema for {name}"))?;
        let mut out = Map::new();
        while let Some((tag, value)) = wire.next()? {
            let Some(field) = fields.get(&tag) else {
                continue;
            };
            match &field.kind {
                Kind::Map(key_kind, value_kind) => {
                    let WireValue::Bytes(entry) = value else {
                        return Err(format!("map {} is not an entry", field.json));
                    };
                    let mut entry_wire = Wire { bytes: entry };
                    let (mut key, mut item) = (Value::String(String::new()), None);
                    while let Some((t, v)) = entry_wire.next()? {
                        match t {
                            1 => key = self.scalar_value(key_kind, v)?,
                            2 => item = Some(self.scalar_value(value_kind, v)?),
                            _ => {}
                        }
                    }
                    let key = match key {
                        Value::String(s) => s,
                        other => other.to_string(),
                    };
                    let item = item.unwrap_or_else(|| match value_kind.as_ref() {
                        Kind::String | Kind::Bytes => json!(""),
                        _ => Value::Null,
                    });
                    let map = out.entry(field.json.clone()).or_insert_with(|| json!({}));
                    if let Some(map) = map.as_object_mut() {
                        map.insert(key, item);
                    }
                }
                kind if field.repeated => {
                    let items: Vec<Value> = match (kind, value) {
                        // Packed repeated numbers.
                        (Kind::Int32 | Kind::Int64 | Kind::Bool, WireValue::Bytes(b)) => {
                            let mut packed = Wire { bytes: b };
                            let mut items = Vec::new();
                            while !packed.bytes.is_empty() {
                                items.push(
                                    self.scalar_value(kind, WireValue::Varint(packed.varint()?))?,
                                );
                            }
                            items
                        }
                        _ => vec![self.scalar_value(kind, value)?],
                    };
                    let list = out.entry(field.json.clone()).or_insert_with(|| json!([]));
                    if let Some(list) = list.as_array_mut() {
                        list.extend(items);
                    }
                }
                kind if field.inline => {
                    if let Value::Object(fields) = self.scalar_value(kind, value)? {
                        out.extend(fields);
                    }
                }
                kind => {
                    let value = self.scalar_value(kind, value)?;
                    // Go writes a value field even when it holds its zero;
                    // where Go's JSON omits that zero, it is no value. (A
                    // pointer's zero — `replicas: 0`, `storageClassName: ""`
                    // — is one, and stays.)
                    let zero = matches!(&value, Value::String(s) if s.is_empty())
                        || value == json!(0)
                        || value == json!(false);
                    if field.omit_zero && zero {
                        continue;
                    }
                    out.insert(field.json.clone(), value);
                }
            }
        }
        Ok(Value::Object(out))
    }
}

/// The definition name of the message for `apiVersion` and `kind`.
fn definition(registry: &Registry, api_version: &str, kind: &str) -> String {
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    if let Some(def) = registry.by_kind(group, version, kind) {
        return def.schema_name.to_lowercase();
    }
    let prefix = match group {
        "" => format!("io.k8s.api.core.{version}"),
        "meta.k8s.io" => format!("io.k8s.apimachinery.pkg.apis.meta.{version}"),
        "apiextensions.k8s.io" => {
            format!("io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.{version}")
        }
        "apiregistration.k8s.io" => {
            format!("io.k8s.kube-aggregator.pkg.apis.apiregistration.{version}")
        }
        g => format!("io.k8s.api.{}.{version}", g.split('.').next().unwrap_or(g)),
    };
    let candidate = format!("{prefix}.{kind}").to_lowercase();
    if Schema::get().knows(&candidate) {
        candidate
    } else {
        // Options types (DeleteOptions, ...) sent to any group live in meta/v1.
        format!("io.k8s.apimachinery.pkg.apis.meta.v1.{kind}").to_lowercase()
    }
}

/// Decodes a Kubernetes protobuf body (`k8s\0` + `runtime.Unknown`) to JSON,
/// with its `apiVersion` and `kind`.
pub fn decode(registry: &Registry, body: &[u8]) -> Result<Value, String> {
    let unknown = body
        .strip_prefix(MAGIC)
        .ok_or("the body does not start with the Kubernetes protobuf magic")?;
    let (mut api_version, mut kind, mut raw) = (String::new(), String::new(), None);
    let mut wire = Wire { bytes: unknown };
    while let Some((tag, value)) = wire.next()? {
        match (tag, value) {
            (1, WireValue::Bytes(type_meta)) => {
                let mut tm = Wire { bytes: type_meta };
                while let Some((t, v)) = tm.next()? {
                    if let WireValue::Bytes(b) = v {
                        match t {
                            1 => api_version = String::from_utf8_lossy(b).into_owned(),
                            2 => kind = String::from_utf8_lossy(b).into_owned(),
                            _ => {}
                        }
                    }
                }
            }
            (2, WireValue::Bytes(b)) => raw = Some(b),
            (3, WireValue::Bytes(encoding)) if !encoding.is_empty() => {
                return Err(format!(
                    "content encoding {:?} is not supported",
                    String::from_utf8_lossy(encoding)
                ));
            }
            _ => {}
        }
    }
    if kind.is_empty() {
        return Err("the protobuf body names no kind".into());
    }
    let name = definition(registry, &api_version, &kind);
    let mut object = Schema::get().message(&name, raw.unwrap_or_default())?;
    if let Some(map) = object.as_object_mut() {
        map.insert("apiVersion".into(), json!(api_version));
        map.insert("kind".into(), json!(kind));
    }
    Ok(object)
}

#[cfg(test)]
mod tests;
