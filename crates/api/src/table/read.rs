//! Reading an object for its cells, as upstream's printers do: the helpers
//! every printer shares.

use serde_json::{Value, json};

use super::{Cell, Column, NAME, col, wide};
use crate::json::str_at;
use crate::time::{human_duration, parse_rfc3339};

pub(super) const AGE: Column = col(
    "Age",
    "string",
    "CreationTimestamp is a timestamp representing the server time when this object was created.",
);
const CONTAINERS: Column = wide("Containers", "Names of each container in the template.");
const IMAGES: Column = wide(
    "Images",
    "Images referenced by each container in the template.",
);
pub(super) const SELECTOR: Column = wide("Selector", "Label selector over pods.");

pub(super) fn arr<'a>(v: &'a Value, pointer: &str) -> &'a [Value] {
    v.pointer(pointer)
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

pub(super) fn int_at(v: &Value, pointer: &str) -> i64 {
    v.pointer(pointer).and_then(Value::as_i64).unwrap_or(0)
}

pub(super) fn bool_at(v: &Value, pointer: &str, default: bool) -> bool {
    v.pointer(pointer)
        .and_then(Value::as_bool)
        .unwrap_or(default)
}

pub(super) fn present(v: &Value, pointer: &str) -> bool {
    v.pointer(pointer).is_some_and(|x| !x.is_null())
}

/// `<first>/<second>` of the object at `pointer` (a reference's
/// `namespace/name`, a kind's `apiVersion/kind`), if it is set.
pub(super) fn pair_at(v: &Value, pointer: &str, first: &str, second: &str) -> Option<String> {
    let object = v.pointer(pointer).filter(|x| !x.is_null())?;
    let (a, b) = (
        str_at(object, &format!("/{first}")),
        str_at(object, &format!("/{second}")),
    );
    Some(format!("{a}/{b}"))
}

pub(super) fn or(s: &str, fallback: &str) -> String {
    if s.is_empty() { fallback } else { s }.to_string()
}

/// A quantity or int-or-string as text.
pub(super) fn text_at(v: &Value, pointer: &str) -> Option<String> {
    match v.pointer(pointer)? {
        Value::String(s) => Some(s.clone()),
        Value::Null => None,
        other => Some(other.to_string()),
    }
}

/// `Xm` since an RFC 3339 time, if there is one.
pub(super) fn since(v: &Value, pointer: &str, now: i64) -> Option<String> {
    parse_rfc3339(str_at(v, pointer)).map(|t| human_duration(now - t))
}

pub(super) fn name(o: &Value) -> Cell {
    (NAME, json!(str_at(o, "/metadata/name")))
}

pub(super) fn age(o: &Value, now: i64) -> Cell {
    let age = since(o, "/metadata/creationTimestamp", now);
    (AGE, json!(age.unwrap_or_else(|| "<unknown>".into())))
}

pub(super) fn deleting(o: &Value) -> bool {
    present(o, "/metadata/deletionTimestamp")
}

/// `k=v,…` sorted, or `<none>` (upstream's `labels.FormatLabels`).
pub(super) fn labels(map: Option<&Value>) -> String {
    let text = map.map(crate::selector::format_map_selector);
    or(&text.unwrap_or_default(), "<none>")
}

/// A `LabelSelector` as text (upstream's `metav1.FormatLabelSelector`).
pub(super) fn label_selector(selector: Option<&Value>) -> String {
    let text = selector.map(crate::selector::format_label_selector);
    or(&text.unwrap_or_default(), "<none>")
}

/// The wide Containers and Images cells of a pod template.
pub(super) fn containers(o: &Value, pointer: &str) -> [Cell; 2] {
    let list = arr(o, pointer);
    let names: Vec<&str> = list.iter().map(|c| str_at(c, "/name")).collect();
    let images: Vec<&str> = list.iter().map(|c| str_at(c, "/image")).collect();
    [
        (CONTAINERS, json!(names.join(","))),
        (IMAGES, json!(images.join(","))),
    ]
}

/// Up to `max` items joined by `,`, then `+ N more...` (upstream's
/// `listWithMoreString`), `<unset>` when empty.
pub(super) fn list_with_more(items: &[String], max: usize) -> String {
    let shown = items[..items.len().min(max)].join(",");
    if items.len() > max {
        format!("{shown} + {} more...", items.len() - max)
    } else {
        or(&shown, "<unset>")
    }
}

pub(super) fn condition<'a>(o: &'a Value, pointer: &str, kind: &str) -> Option<&'a Value> {
    arr(o, pointer).iter().find(|c| str_at(c, "/type") == kind)
}

pub(super) fn condition_true(o: &Value, pointer: &str, kind: &str) -> bool {
    condition(o, pointer, kind).is_some_and(|c| str_at(c, "/status") == "True")
}

/// Load-balancer ingress points, sorted and unique.
pub(super) fn load_balancer(o: &Value, pointer: &str) -> Vec<String> {
    let mut points: Vec<String> = arr(o, pointer)
        .iter()
        .map(|i| match str_at(i, "/ip") {
            "" => str_at(i, "/hostname"),
            ip => ip,
        })
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect();
    points.sort_unstable();
    points.dedup();
    points
}

/// The number of entries of a map field.
pub(super) fn map_len(o: &Value, field: &str) -> usize {
    o.get(field)
        .and_then(Value::as_object)
        .map_or(0, |m| m.len())
}

/// Upstream's `printBoolPtr`.
pub(super) fn bool_text(v: Option<bool>) -> &'static str {
    match v {
        Some(true) => "True",
        Some(false) => "False",
        None => "<unset>",
    }
}
