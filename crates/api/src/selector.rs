//! Label and field selectors, parsed and matched as upstream does
//! (`apimachinery/pkg/labels`, `apimachinery/pkg/fields`).

use std::collections::BTreeSet;

use serde_json::Value;

use crate::{ResourceDef, Status};

/// One requirement of a label selector.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Requirement {
    Equals(String, String),
    NotEquals(String, String),
    In(String, BTreeSet<String>),
    NotIn(String, BTreeSet<String>),
    Exists(String),
    DoesNotExist(String),
    GreaterThan(String, i64),
    LessThan(String, i64),
}

/// A parsed label selector: every requirement must hold. Empty selects all.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LabelSelector {
    pub requirements: Vec<Requirement>,
}

fn label(labels: &Value, key: &str) -> Option<String> {
    labels.get(key).and_then(Value::as_str).map(str::to_string)
}

impl Requirement {
    fn matches(&self, labels: &Value) -> bool {
        match self {
            Requirement::Equals(k, v) => label(labels, k).as_deref() == Some(v),
            Requirement::NotEquals(k, v) => label(labels, k).as_deref() != Some(v),
            Requirement::In(k, set) => label(labels, k).is_some_and(|v| set.contains(&v)),
            Requirement::NotIn(k, set) => label(labels, k).is_none_or(|v| !set.contains(&v)),
            Requirement::Exists(k) => labels.get(k).is_some(),
            Requirement::DoesNotExist(k) => labels.get(k).is_none(),
            Requirement::GreaterThan(k, n) => label(labels, k)
                .and_then(|v| v.parse::<i64>().ok())
                .is_some_and(|v| v > *n),
            Requirement::LessThan(k, n) => label(labels, k)
                .and_then(|v| v.parse::<i64>().ok())
                .is_some_and(|v| v < *n),
        }
    }
}

impl LabelSelector {
    /// Parses `a=b,c!=d,e in (f,g),!h,i` as `labelSelector` takes it.
    pub fn parse(text: &str) -> Result<Self, Status> {
        let mut requirements = Vec::new();
        for part in split_top_level(text) {
            let part = part.trim();
            if part.is_empty() {
                continue;
            }
            requirements.push(parse_requirement(part)?);
        }
        Ok(LabelSelector { requirements })
    }

    /// Whether an object's `metadata.labels` satisfy every requirement.
    pub fn matches(&self, labels: Option<&Value>) -> bool {
        let empty = Value::Object(Default::default());
        let labels = labels.unwrap_or(&empty);
        self.requirements.iter().all(|r| r.matches(labels))
    }

    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }
}

/// Splits on commas outside parentheses.
fn split_top_level(text: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0i32, 0);
    for (i, c) in text.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&text[start..]);
    parts
}

fn bad_selector(text: &str, why: &str) -> Status {
    Status::bad_request(format!("unable to parse requirement: {why}: {text:?}"))
}

fn parse_requirement(part: &str) -> Result<Requirement, Status> {
    if let Some(key) = part.strip_prefix('!') {
        let key = key.trim();
        check_key(key, part)?;
        return Ok(Requirement::DoesNotExist(key.into()));
    }
    for (op, build) in [
        (
            "!=",
            Requirement::NotEquals as fn(String, String) -> Requirement,
        ),
        ("==", Requirement::Equals),
        ("=", Requirement::Equals),
    ] {
        if let Some((key, value)) = part.split_once(op) {
            let (key, value) = (key.trim(), value.trim());
            check_key(key, part)?;
            check_value(value, part)?;
            return Ok(build(key.into(), value.into()));
        }
    }
    for (op, greater) in [(">", true), ("<", false)] {
        if let Some((key, value)) = part.split_once(op) {
            let key = key.trim();
            check_key(key, part)?;
            let n: i64 = value.trim().parse().map_err(|_| {
                bad_selector(
                    part,
                    "for 'gt', 'lt' operators, the value must be an integer",
                )
            })?;
            return Ok(if greater {
                Requirement::GreaterThan(key.into(), n)
            } else {
                Requirement::LessThan(key.into(), n)
            });
        }
    }
    let words: Vec<&str> = part.splitn(2, char::is_whitespace).collect();
    if let [key, rest] = words.as_slice() {
        let rest = rest.trim();
        let (notin, values) = if let Some(v) = rest.strip_prefix("notin") {
            (true, v)
        } else if let Some(v) = rest.strip_prefix("in") {
            (false, v)
        } else {
            return Err(bad_selector(
                part,
                "found unexpected operator, expected one of '=', '==', '!=', 'in', 'notin'",
            ));
        };
        check_key(key, part)?;
        let values = values.trim();
        let inner = values
            .strip_prefix('(')
            .and_then(|v| v.strip_suffix(')'))
            .ok_or_else(|| bad_selector(part, "found '', expected: '('"))?;
        let mut set = BTreeSet::new();
        for value in inner.split(',') {
            let value = value.trim();
            check_value(value, part)?;
            set.insert(value.to_string());
        }
        return Ok(if notin {
            Requirement::NotIn((*key).into(), set)
        } else {
            Requirement::In((*key).into(), set)
        });
    }
    check_key(part, part)?;
    Ok(Requirement::Exists(part.into()))
}

fn check_key(key: &str, part: &str) -> Result<(), Status> {
    crate::validation::qualified_name(key)
        .map_err(|why| bad_selector(part, &format!("invalid label key {key:?}: {why}")))
}

fn check_value(value: &str, part: &str) -> Result<(), Status> {
    crate::validation::label_value(value)
        .map_err(|why| bad_selector(part, &format!("invalid label value: {value:?}: {why}")))
}

/// The text form of a `metav1.LabelSelector` object (`app=web,tier in (a,b)`),
/// as `metav1.FormatLabelSelector` writes it.
pub fn format_label_selector(selector: &Value) -> String {
    let mut parts = Vec::new();
    if let Some(labels) = selector.get("matchLabels").and_then(Value::as_object) {
        parts.extend(
            labels
                .iter()
                .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default())),
        );
    }
    if let Some(expressions) = selector.get("matchExpressions").and_then(Value::as_array) {
        for e in expressions {
            let key = e.get("key").and_then(Value::as_str).unwrap_or_default();
            let values: Vec<&str> = e
                .get("values")
                .and_then(Value::as_array)
                .map(|v| v.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            match e
                .get("operator")
                .and_then(Value::as_str)
                .unwrap_or_default()
            {
                "In" => parts.push(format!("{key} in ({})", values.join(","))),
                "NotIn" => parts.push(format!("{key} notin ({})", values.join(","))),
                "Exists" => parts.push(key.to_string()),
                "DoesNotExist" => parts.push(format!("!{key}")),
                _ => {}
            }
        }
    }
    parts.join(",")
}

/// The text form of a plain label map selector (ReplicationController).
pub fn format_map_selector(selector: &Value) -> String {
    selector
        .as_object()
        .map(|m| {
            m.iter()
                .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default()))
                .collect::<Vec<_>>()
                .join(",")
        })
        .unwrap_or_default()
}

/// Whether a `metav1.LabelSelector` object selects `labels`.
pub fn label_selector_matches(selector: &Value, labels: Option<&Value>) -> bool {
    LabelSelector::from_object(selector).is_some_and(|s| s.matches(labels))
}

impl LabelSelector {
    /// The selector a `metav1.LabelSelector` object describes (`None` when
    /// malformed).
    pub fn from_object(selector: &Value) -> Option<LabelSelector> {
        let mut requirements = Vec::new();
        if let Some(labels) = selector.get("matchLabels").and_then(Value::as_object) {
            for (k, v) in labels {
                requirements.push(Requirement::Equals(k.clone(), v.as_str()?.to_string()));
            }
        }
        if let Some(expressions) = selector.get("matchExpressions").and_then(Value::as_array) {
            for e in expressions {
                let key = e.get("key")?.as_str()?.to_string();
                let values: BTreeSet<String> = e
                    .get("values")
                    .and_then(Value::as_array)
                    .map(|vs| {
                        vs.iter()
                            .filter_map(|v| v.as_str().map(str::to_string))
                            .collect()
                    })
                    .unwrap_or_default();
                requirements.push(match e.get("operator")?.as_str()? {
                    "In" => Requirement::In(key, values),
                    "NotIn" => Requirement::NotIn(key, values),
                    "Exists" => Requirement::Exists(key),
                    "DoesNotExist" => Requirement::DoesNotExist(key),
                    _ => return None,
                });
            }
        }
        Some(LabelSelector { requirements })
    }
}

/// One term of a field selector.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldRequirement {
    pub field: String,
    pub value: String,
    pub equal: bool,
}

/// A parsed field selector: `metadata.name=web,status.phase!=Running`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FieldSelector {
    pub requirements: Vec<FieldRequirement>,
}

impl FieldSelector {
    /// Parses a selector of `def`'s objects, refusing fields its kind
    /// cannot be selected by.
    pub fn parse_for(text: &str, def: &ResourceDef) -> Result<Self, Status> {
        Self::parse_among(text, fields_of(def))
    }

    /// Parses a selector that may name `supported` and the metadata fields.
    fn parse_among(text: &str, supported: &[&str]) -> Result<Self, Status> {
        let mut requirements = Vec::new();
        for term in split_unescaped(text, ',') {
            if term.trim().is_empty() {
                continue;
            }
            let (field, value, equal) = if let Some((f, v)) = split_op(&term, "!=") {
                (f, v, false)
            } else if let Some((f, v)) = split_op(&term, "==") {
                (f, v, true)
            } else if let Some((f, v)) = split_op(&term, "=") {
                (f, v, true)
            } else {
                return Err(Status::bad_request(format!(
                    "invalid selector: '{text}'; can't understand '{term}'"
                )));
            };
            let field = field.trim().to_string();
            if !supported.contains(&field.as_str())
                && field != "metadata.name"
                && field != "metadata.namespace"
            {
                return Err(Status::bad_request(format!(
                    "field label not supported: {field}"
                )));
            }
            requirements.push(FieldRequirement {
                field,
                value: unescape(&value),
                equal,
            });
        }
        Ok(FieldSelector { requirements })
    }

    pub fn matches(&self, object: &Value) -> bool {
        self.requirements
            .iter()
            .all(|r| (field_value(object, &r.field) == r.value) == r.equal)
    }

    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }

    /// The name this selector pins, if it is `metadata.name=<n>` (as
    /// kubectl's single-object watches send).
    pub fn pinned_name(&self) -> Option<&str> {
        self.requirements
            .iter()
            .find(|r| r.equal && r.field == "metadata.name")
            .map(|r| r.value.as_str())
    }
}

fn split_op(term: &str, op: &str) -> Option<(String, String)> {
    term.split_once(op)
        .map(|(a, b)| (a.to_string(), b.to_string()))
}

fn split_unescaped(text: &str, separator: char) -> Vec<String> {
    let mut parts = vec![String::new()];
    let mut escaped = false;
    for c in text.chars() {
        if escaped {
            if let Some(p) = parts.last_mut() {
                p.push('\\');
                p.push(c);
            }
            escaped = false;
        } else if c == '\\' {
            escaped = true;
        } else if c == separator {
            parts.push(String::new());
        } else if let Some(p) = parts.last_mut() {
            p.push(c);
        }
    }
    parts
}

fn unescape(value: &str) -> String {
    let mut out = String::new();
    let mut chars = value.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            if let Some(next) = chars.next() {
                out.push(next);
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// The value of a selectable field of an object as upstream's field sets
/// (each kind's `ToSelectableFields`) write it: a bool or a number the
/// object leaves unset is its Go zero (`strconv.FormatBool(false)`,
/// `strconv.Itoa(0)`), a string is "", and an Event's `source` is its
/// `source.component`, else its `reportingComponent`.
pub fn field_value(object: &Value, field: &str) -> String {
    stored_paths(field)
        .filter_map(|path| value_at(object, path))
        .find(|v| !v.is_empty())
        .unwrap_or_else(|| unset_value(field).to_string())
}

fn value_at(object: &Value, path: &str) -> Option<String> {
    let mut at = object;
    for part in path.split('.') {
        at = at.get(part)?;
    }
    match at {
        Value::String(s) => Some(s.clone()),
        Value::Bool(b) => Some(b.to_string()),
        Value::Number(n) => Some(n.to_string()),
        Value::Null => None,
        other => Some(other.to_string()),
    }
}

/// Where a selectable field's value is read from, in order: its name's
/// path, except where upstream's field set names a field otherwise (a
/// Job's `status.successful` is `status.succeeded`; an Event's `source`
/// is `source.component`, falling back to `reportingComponent`).
pub fn stored_paths(field: &str) -> impl Iterator<Item = &str> {
    let renamed: Option<&'static [&'static str]> = match field {
        "status.successful" => Some(&["status.succeeded"]),
        "source" => Some(&["source.component", "reportingComponent"]),
        _ => None,
    };
    let own = renamed.is_none().then_some(field);
    renamed.into_iter().flatten().copied().chain(own)
}

/// What upstream's field set holds for a field the object leaves unset.
fn unset_value(field: &str) -> &'static str {
    match field {
        "spec.unschedulable" | "spec.hostNetwork" => "false",
        "status.replicas" | "status.successful" => "0",
        _ => "",
    }
}

/// The fields beyond `metadata.name` and `metadata.namespace` that `def`'s
/// objects can be selected by (its strategy's, from upstream's per-kind
/// field label conversion functions).
pub fn fields_of(def: &ResourceDef) -> &'static [&'static str] {
    def.strategy.field_selectors
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn sel(text: &str) -> LabelSelector {
        LabelSelector::parse(text).expect("valid selector")
    }

    #[test]
    fn label_selectors_match_as_upstream() {
        let labels = json!({"app": "web", "tier": "front", "n": "5"});
        let l = Some(&labels);
        for (text, expected) in [
            ("", true),
            ("app=web", true),
            ("app==web", true),
            ("app=db", false),
            ("app!=db", true),
            ("missing!=x", true),
            ("app in (web, db)", true),
            ("app notin (web)", false),
            ("missing notin (web)", true),
            ("tier", true),
            ("!tier", false),
            ("!missing", true),
            ("app=web,tier in (front,back),!missing", true),
            ("n>4", true),
            ("n<5", false),
        ] {
            assert_eq!(sel(text).matches(l), expected, "{text}");
        }
        assert!(!sel("app").matches(None));
        assert!(sel("!app").matches(None));
    }

    #[test]
    fn malformed_label_selectors_are_bad_requests() {
        for text in ["app in web", "a b c", "app=bad value", "Bad Key=x", "n>x"] {
            let err = LabelSelector::parse(text).expect_err(text);
            assert_eq!(err.code, 400, "{text}");
        }
    }

    fn kind(group: &str, kind: &str) -> std::sync::Arc<ResourceDef> {
        crate::Registry::builtin()
            .all()
            .iter()
            .find(|d| d.group == group && d.kind == kind)
            .cloned()
            .expect("a built-in kind")
    }

    #[test]
    fn field_selectors_check_supported_fields_and_match() {
        let (pods, config_maps, events) =
            (kind("", "Pod"), kind("", "ConfigMap"), kind("", "Event"));
        let pod = json!({"metadata": {"name": "p", "namespace": "ns"}, "spec": {"nodeName": "n1", "hostNetwork": false}, "status": {"phase": "Running"}});
        let s = FieldSelector::parse_for("spec.nodeName=n1,status.phase!=Pending", &pods)
            .expect("valid");
        assert!(s.matches(&pod));
        assert!(
            FieldSelector::parse_for("spec.hostNetwork=false", &pods)
                .expect("valid")
                .matches(&pod)
        );
        assert!(
            !FieldSelector::parse_for("metadata.name=q", &pods)
                .expect("valid")
                .matches(&pod)
        );
        assert_eq!(
            FieldSelector::parse_for("metadata.name==p", &pods)
                .expect("valid")
                .pinned_name(),
            Some("p")
        );
        let err =
            FieldSelector::parse_for("spec.nodeName=n1", &config_maps).expect_err("unsupported");
        assert_eq!(err.message, "field label not supported: spec.nodeName");
        // Unset bools and numbers select as their Go zero, as upstream's
        // field sets write them.
        let unset = json!({"metadata": {"name": "n"}, "spec": {}});
        for (group, kind_name, text) in [
            ("", "Node", "spec.unschedulable=false"),
            ("", "Node", "spec.unschedulable==false"),
            ("", "Pod", "spec.hostNetwork=false"),
            ("apps", "ReplicaSet", "status.replicas=0"),
            ("batch", "Job", "status.successful=0"),
        ] {
            let s = FieldSelector::parse_for(text, &kind(group, kind_name)).expect("valid");
            assert!(s.matches(&unset), "{kind_name}: {text}");
        }
        let node = kind("", "Node");
        let cordoned = json!({"spec": {"unschedulable": true}});
        assert!(
            !FieldSelector::parse_for("spec.unschedulable=false", &node)
                .expect("valid")
                .matches(&cordoned)
        );
        let job = json!({"status": {"succeeded": 3}});
        assert!(
            FieldSelector::parse_for("status.successful=3", &kind("batch", "Job"))
                .expect("valid")
                .matches(&job)
        );
        let source = FieldSelector::parse_for("source=kubelet", &events).expect("valid");
        assert!(source.matches(&json!({"source": {"component": "kubelet"}})));
        assert!(source.matches(&json!({"reportingComponent": "kubelet"})));
        assert!(!source.matches(
            &json!({"source": {"component": "scheduler"}, "reportingComponent": "kubelet"})
        ));
        let event = json!({"involvedObject": {"name": "a,b", "kind": "Pod"}});
        let s =
            FieldSelector::parse_for("involvedObject.name=a\\,b,involvedObject.kind=Pod", &events)
                .expect("valid");
        assert!(s.matches(&event));
    }
}
