//! Name, label and annotation rules with upstream's messages
//! (`apimachinery/pkg/util/validation`), and the validation of object
//! metadata every kind shares (`apimachinery/pkg/api/validation`); what
//! each kind requires beyond it is in the submodules, named by the kinds'
//! strategies.

mod job;
pub mod kinds;
pub mod net;
pub mod pod;
pub mod policy;
pub mod service;
pub mod workloads;

use serde_json::Value;

use crate::Cause;

const DNS1123_LABEL_FMT: &str = "[a-z0-9]([-a-z0-9]*[a-z0-9])?";
const DNS1123_SUBDOMAIN_FMT: &str =
    "[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*";
const DNS1035_LABEL_FMT: &str = "[a-z]([-a-z0-9]*[a-z0-9])?";
const QUALIFIED_NAME_FMT: &str = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]";

fn is_alnum_lower(c: char) -> bool {
    c.is_ascii_lowercase() || c.is_ascii_digit()
}

fn is_dns1123_label(s: &str) -> bool {
    !s.is_empty()
        && s.chars().all(|c| is_alnum_lower(c) || c == '-')
        && s.starts_with(is_alnum_lower)
        && s.ends_with(is_alnum_lower)
}

/// An RFC 1123 label: namespaces, most names that become DNS labels.
/// A field that, when set, must hold one of `allowed` (upstream's
/// `NotSupported`, which lists them in this order).
pub fn one_of(
    value: Option<&Value>,
    field: impl Into<String>,
    allowed: &[&str],
    causes: &mut Vec<Cause>,
) {
    if let Some(value) = value.filter(|v| !v.is_null())
        && !allowed.iter().any(|a| value.as_str() == Some(a))
    {
        causes.push(Cause::not_supported(field, value, allowed));
    }
}

pub fn dns1123_label(s: &str) -> Result<(), String> {
    if s.len() > 63 {
        return Err("must be no more than 63 characters".into());
    }
    if !is_dns1123_label(s) {
        return Err(dns1123_label_format_error());
    }
    Ok(())
}

fn dns1123_label_format_error() -> String {
    format!(
        "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '{DNS1123_LABEL_FMT}')"
    )
}

/// Every message upstream's `IsDNS1123Label` gives `s` (a label that would
/// be a subdomain has dots), for fields that report them all: a Service
/// port's name.
pub fn dns1123_label_errors(s: &str) -> Vec<String> {
    let mut errors = Vec::new();
    if s.len() > 63 {
        errors.push("must be no more than 63 characters".to_string());
    }
    if !is_dns1123_label(s) {
        if s.split('.').all(is_dns1123_label) {
            errors.push("must not contain dots".to_string());
        } else {
            errors.push(dns1123_label_format_error());
        }
    }
    errors
}

/// Upstream's `IsValidPortName` (an IANA service name: a container port's
/// name, a Service's `targetPort`), its messages in upstream's order.
pub fn port_name_errors(name: &str) -> Vec<&'static str> {
    let mut problems = Vec::new();
    if name.len() > 15 {
        problems.push("must be no more than 15 characters");
    }
    if name.is_empty()
        || !name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
    {
        problems.push("must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)");
    }
    if !name.chars().any(|c| c.is_ascii_lowercase()) {
        problems.push("must contain at least one letter (a-z)");
    }
    if name.contains("--") {
        problems.push("must not contain consecutive hyphens");
    }
    if name.starts_with('-') || name.ends_with('-') {
        problems.push("must not begin or end with a hyphen");
    }
    problems
}

/// An RFC 1123 subdomain: the name rule of most kinds.
pub fn dns1123_subdomain(s: &str) -> Result<(), String> {
    if s.len() > 253 {
        return Err("must be no more than 253 characters".into());
    }
    if !s.split('.').all(is_dns1123_label) {
        return Err(format!(
            "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '{DNS1123_SUBDOMAIN_FMT}')"
        ));
    }
    Ok(())
}

/// An RFC 1035 label: Service names.
pub fn dns1035_label(s: &str) -> Result<(), String> {
    if s.len() > 63 {
        return Err("must be no more than 63 characters".into());
    }
    if !(is_dns1123_label(s) && s.starts_with(|c: char| c.is_ascii_lowercase())) {
        return Err(format!(
            "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '{DNS1035_LABEL_FMT}')"
        ));
    }
    Ok(())
}

/// A name that is one URL path segment: RBAC objects.
pub fn path_segment_name(s: &str) -> Result<(), String> {
    if s == "." || s == ".." {
        return Err(format!("may not be '{s}'"));
    }
    if s.contains('/') || s.contains('%') {
        return Err("may not contain '/' or '%'".into());
    }
    Ok(())
}

fn is_qualified_part(s: &str) -> bool {
    !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && s.starts_with(|c: char| c.is_ascii_alphanumeric())
        && s.ends_with(|c: char| c.is_ascii_alphanumeric())
}

/// A qualified name: label and annotation keys, finalizers.
pub fn qualified_name(s: &str) -> Result<(), String> {
    let (prefix, name) = match s.split_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, s),
    };
    if let Some(prefix) = prefix {
        if prefix.is_empty() {
            return Err("prefix part must be non-empty".into());
        }
        dns1123_subdomain(prefix).map_err(|e| format!("prefix part {e}"))?;
    }
    if name.is_empty() {
        return Err("name part must be non-empty".into());
    }
    if name.len() > 63 {
        return Err("name part must be no more than 63 characters".into());
    }
    if !is_qualified_part(name) {
        return Err(format!(
            "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '{QUALIFIED_NAME_FMT}')"
        ));
    }
    Ok(())
}

/// A label value: empty, or a qualified-name-like word of at most 63.
pub fn label_value(s: &str) -> Result<(), String> {
    if s.len() > 63 {
        return Err("must be no more than 63 characters".into());
    }
    if !s.is_empty() && !is_qualified_part(s) {
        return Err(format!(
            "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '({QUALIFIED_NAME_FMT})?')"
        ));
    }
    Ok(())
}

/// Which name rule a kind's objects follow (its strategy says which).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NameRule {
    Subdomain,
    Label,
    Dns1035,
    PathSegment,
}

impl NameRule {
    pub fn check(self, name: &str) -> Result<(), String> {
        match self {
            NameRule::Subdomain => dns1123_subdomain(name),
            NameRule::Label => dns1123_label(name),
            NameRule::Dns1035 => dns1035_label(name),
            NameRule::PathSegment => path_segment_name(name),
        }
    }
}

/// The largest total size of an object's annotations.
pub const MAX_ANNOTATIONS_BYTES: usize = 256 * 1024;

/// Validates `metadata` of an object about to be stored: name (already
/// generated), labels, annotations, finalizers, owner references.
pub fn object_meta(meta: &Value, rule: NameRule, namespaced: bool) -> Vec<Cause> {
    let mut causes = Vec::new();
    match meta.get("name").and_then(Value::as_str) {
        None | Some("") => causes.push(Cause::new(
            "FieldValueRequired",
            "metadata.name",
            "Required value: name or generateName is required",
        )),
        Some(name) => {
            if let Err(why) = rule.check(name) {
                causes.push(Cause::invalid(
                    "metadata.name",
                    &Value::String(name.into()),
                    &why,
                ));
            }
        }
    }
    if let Some(generate) = meta
        .get("generateName")
        .and_then(Value::as_str)
        .filter(|g| !g.is_empty())
    {
        // A prefix is valid when a name made from it can be.
        if let Err(why) = rule.check(&format!("{generate}a")) {
            causes.push(Cause::invalid(
                "metadata.generateName",
                &Value::String(generate.into()),
                &why,
            ));
        }
    }
    match (namespaced, meta.get("namespace").and_then(Value::as_str)) {
        (true, None | Some("")) => causes.push(Cause::required("metadata.namespace")),
        (false, Some(ns)) if !ns.is_empty() => {
            causes.push(Cause::forbidden(
                "metadata.namespace",
                "not allowed on this type",
            ));
        }
        _ => {}
    }
    if let Some(labels) = meta.get("labels").and_then(Value::as_object) {
        for (key, value) in labels {
            if let Err(why) = qualified_name(key) {
                causes.push(Cause::invalid(
                    "metadata.labels",
                    &Value::String(key.clone()),
                    &why,
                ));
            }
            match value.as_str() {
                Some(v) => {
                    if let Err(why) = label_value(v) {
                        causes.push(Cause::invalid(
                            format!("metadata.labels[{key}]"),
                            value,
                            &why,
                        ));
                    }
                }
                None => causes.push(Cause::invalid(
                    format!("metadata.labels[{key}]"),
                    value,
                    "must be a string",
                )),
            }
        }
    }
    if let Some(annotations) = meta.get("annotations").and_then(Value::as_object) {
        let mut total = 0;
        for (key, value) in annotations {
            if let Err(why) = qualified_name(&key.to_lowercase()) {
                causes.push(Cause::invalid(
                    "metadata.annotations",
                    &Value::String(key.clone()),
                    &why,
                ));
            }
            total += key.len() + value.as_str().map_or(0, str::len);
        }
        if total > MAX_ANNOTATIONS_BYTES {
            causes.push(Cause::new(
                "FieldValueTooLong",
                "metadata.annotations",
                format!("Too long: may not be more than {MAX_ANNOTATIONS_BYTES} bytes"),
            ));
        }
    }
    if let Some(finalizers) = meta.get("finalizers").and_then(Value::as_array) {
        for (i, f) in finalizers.iter().enumerate() {
            let text = f.as_str().unwrap_or_default();
            if let Err(why) = qualified_name(text) {
                causes.push(Cause::invalid(format!("metadata.finalizers[{i}]"), f, &why));
            }
        }
        let has = |name: &str| finalizers.iter().any(|f| f == name);
        if has("orphan") && has("foregroundDeletion") {
            causes.push(Cause::invalid(
                "metadata.finalizers",
                &Value::Array(finalizers.clone()),
                "finalizer orphan and foregroundDeletion cannot be both set",
            ));
        }
    }
    if let Some(owners) = meta.get("ownerReferences").and_then(Value::as_array) {
        let mut controllers = 0;
        for (i, owner) in owners.iter().enumerate() {
            for field in ["apiVersion", "kind", "name", "uid"] {
                if owner
                    .get(field)
                    .and_then(Value::as_str)
                    .is_none_or(str::is_empty)
                {
                    causes.push(Cause::required(format!(
                        "metadata.ownerReferences[{i}].{field}"
                    )));
                }
            }
            if owner.get("controller").and_then(Value::as_bool) == Some(true) {
                controllers += 1;
            }
        }
        if controllers > 1 {
            causes.push(Cause::invalid(
                "metadata.ownerReferences",
                &Value::Null,
                "Only one reference can have Controller set to true",
            ));
        }
    }
    causes
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn names_follow_the_rfc_rules() {
        assert!(dns1123_subdomain("web.example-1").is_ok());
        assert!(dns1123_subdomain("Bad_Name").is_err());
        assert!(dns1123_subdomain("-a").is_err());
        assert!(dns1123_subdomain(&"a".repeat(254)).is_err());
        assert!(dns1123_label("kube-system").is_ok());
        assert!(dns1123_label("a.b").is_err());
        assert!(dns1035_label("1abc").is_err());
        assert!(dns1035_label("abc-1").is_ok());
        assert!(path_segment_name("system:controller:x").is_ok());
        assert!(path_segment_name("a/b").is_err());
        assert!(qualified_name("app.kubernetes.io/name").is_ok());
        assert!(qualified_name("/name").is_err());
        assert!(qualified_name("bad key").is_err());
        assert!(label_value("").is_ok());
        assert!(label_value("a b").is_err());
    }

    #[test]
    fn object_meta_reports_each_problem_with_its_field() {
        let meta = json!({"name": "Bad_Name", "labels": {"ok": "yes", "bad key": "v", "k": "bad value"}, "ownerReferences": [{"kind": "X"}]});
        let causes = object_meta(&meta, NameRule::Subdomain, true);
        let fields: Vec<&str> = causes.iter().map(|c| c.field.as_str()).collect();
        assert!(fields.contains(&"metadata.name"));
        assert!(fields.contains(&"metadata.namespace"));
        assert!(fields.contains(&"metadata.labels"));
        assert!(fields.contains(&"metadata.labels[k]"));
        assert!(fields.contains(&"metadata.ownerReferences[0].uid"));
        assert!(
            object_meta(
                &json!({"name": "ok", "namespace": "default"}),
                NameRule::Subdomain,
                true
            )
            .is_empty()
        );
        let cluster = object_meta(
            &json!({"name": "n", "namespace": "x"}),
            NameRule::Label,
            false,
        );
        assert_eq!(cluster[0].field, "metadata.namespace");
    }
}
