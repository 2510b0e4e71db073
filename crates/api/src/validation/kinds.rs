//! What upstream's `validation.go` files require of the kinds beyond pods,
//! workloads and Services (`workloads.rs`, `service.rs`): RBAC roles and
//! bindings, autoscalers, disruption budgets, volumes and claims, storage
//! classes, ConfigMaps and typed Secrets, Ingresses, network policies,
//! priority classes, endpoint slices and leases — one function per kind,
//! which its strategy names, each cause with upstream's field path and
//! words.

use serde_json::{Value, json};

use crate::Cause;

const RBAC_GROUP: &str = "rbac.authorization.k8s.io";

/// What a Secret's or ConfigMap's data may total (upstream's
/// `MaxSecretSize`).
const MAX_DATA_BYTES: usize = 1024 * 1024;

fn too_long(field: &str) -> Cause {
    let message = format!("Too long: may not be more than {MAX_DATA_BYTES} bytes");
    Cause::new("FieldValueTooLong", field, message)
}

/// The keys of a ConfigMap's or Secret's data (upstream's
/// `IsConfigMapKey`).
fn config_keys(object: &Value, out: &mut Vec<Cause>) {
    for field in ["data", "binaryData", "stringData"] {
        if let Some(map) = object.get(field).and_then(Value::as_object) {
            for key in map.keys() {
                if !key
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
                    || key.is_empty()
                {
                    out.push(Cause::invalid(format!("{field}[{key}]"), &json!(key), "a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')"));
                }
            }
        }
    }
}

pub(crate) fn config_map(object: &Value, out: &mut Vec<Cause>) {
    config_keys(object, out);
    let c = Check { object, out };
    if c.data_bytes("/data", false) + c.data_bytes("/binaryData", true) > MAX_DATA_BYTES {
        c.out.push(too_long(""));
    }
}

pub(crate) fn secret(object: &Value, out: &mut Vec<Cause>) {
    config_keys(object, out);
    let mut c = Check { object, out };
    c.typed_secret();
    if c.data_bytes("/data", true) > MAX_DATA_BYTES {
        c.out.push(too_long("data"));
    }
}

pub(crate) fn role(object: &Value, out: &mut Vec<Cause>) {
    Check { object, out }.rules(true);
}

pub(crate) fn cluster_role(object: &Value, out: &mut Vec<Cause>) {
    Check { object, out }.rules(false);
}

pub(crate) fn role_binding(object: &Value, out: &mut Vec<Cause>) {
    Check { object, out }.binding(&["Role", "ClusterRole"], false);
}

pub(crate) fn cluster_role_binding(object: &Value, out: &mut Vec<Cause>) {
    Check { object, out }.binding(&["ClusterRole"], true);
}

/// A HorizontalPodAutoscaler, v1 or v2.
pub(crate) fn autoscaler(object: &Value, out: &mut Vec<Cause>) {
    Check { object, out }.autoscaler();
}

pub(crate) fn pod_disruption_budget(object: &Value, out: &mut Vec<Cause>) {
    let mut c = Check { object, out };
    if c.has("/spec/minAvailable") && c.has("/spec/maxUnavailable") {
        let why = "minAvailable and maxUnavailable cannot be both set";
        c.invalid("/spec", "spec", why);
    }
}

pub(crate) fn persistent_volume(object: &Value, out: &mut Vec<Cause>) {
    Check { object, out }.volume();
}

pub(crate) fn persistent_volume_claim(object: &Value, out: &mut Vec<Cause>) {
    let mut c = Check { object, out };
    if c.list("/spec/accessModes").is_empty() {
        c.required_because("spec.accessModes", "at least 1 access mode is required");
    }
    if !c.has("/spec/resources/requests/storage") {
        c.required("spec.resources[storage]");
    }
}

pub(crate) fn storage_class(object: &Value, out: &mut Vec<Cause>) {
    let mut c = Check { object, out };
    c.required_string("/provisioner", "provisioner");
    c.one_of("/reclaimPolicy", "reclaimPolicy", &["Delete", "Retain"]);
    c.one_of(
        "/volumeBindingMode",
        "volumeBindingMode",
        &["Immediate", "WaitForFirstConsumer"],
    );
}

pub(crate) fn ingress(object: &Value, out: &mut Vec<Cause>) {
    Check { object, out }.ingress();
}

pub(crate) fn network_policy(object: &Value, out: &mut Vec<Cause>) {
    let c = Check { object, out };
    for (i, kind) in c.list("/spec/policyTypes").iter().enumerate() {
        let field = format!("spec.policyTypes[{i}]");
        super::one_of(Some(kind), field, &["Ingress", "Egress"], c.out);
    }
}

pub(crate) fn priority_class(object: &Value, out: &mut Vec<Cause>) {
    let mut c = Check { object, out };
    let name = c.string("/metadata/name");
    let value = object.get("value").and_then(Value::as_i64);
    match value {
        None => c.required("value"),
        Some(v) if v > 1_000_000_000 && !name.starts_with("system-") => {
            c.out.push(Cause::forbidden(
                "value",
                "maximum allowed value of a user defined priority is 1000000000",
            ));
        }
        Some(_) => {}
    }
}

pub(crate) fn endpoint_slice(object: &Value, out: &mut Vec<Cause>) {
    let mut c = Check { object, out };
    c.one_of("/addressType", "addressType", &["IPv4", "IPv6", "FQDN"]);
    if !c.has("/addressType") {
        c.required("addressType");
    }
    for (i, endpoint) in c.list("/endpoints").iter().enumerate() {
        let count = endpoint
            .get("addresses")
            .and_then(Value::as_array)
            .map_or(0, Vec::len);
        if count == 0 {
            let field = format!("endpoints[{i}].addresses");
            c.out.push(Cause::new(
                "FieldValueRequired",
                field,
                "Required value: must contain at least 1 address",
            ));
        }
    }
}

pub(crate) fn lease(object: &Value, out: &mut Vec<Cause>) {
    let mut c = Check { object, out };
    if let Some(seconds) = object
        .pointer("/spec/leaseDurationSeconds")
        .and_then(Value::as_i64)
        && seconds <= 0
    {
        c.invalid(
            "/spec/leaseDurationSeconds",
            "spec.leaseDurationSeconds",
            "must be greater than 0",
        );
    }
}

/// An object under check, and the causes found so far.
struct Check<'a> {
    object: &'a Value,
    out: &'a mut Vec<Cause>,
}

impl Check<'_> {
    fn at(&self, pointer: &str) -> Option<&Value> {
        self.object.pointer(pointer).filter(|v| !v.is_null())
    }

    fn has(&self, pointer: &str) -> bool {
        self.at(pointer).is_some()
    }

    fn string(&self, pointer: &str) -> &str {
        self.at(pointer).and_then(Value::as_str).unwrap_or_default()
    }

    fn list(&self, pointer: &str) -> Vec<Value> {
        self.at(pointer)
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
    }

    /// The bytes a map of strings holds; `base64`: its values encode them.
    fn data_bytes(&self, pointer: &str, base64: bool) -> usize {
        let values = self.at(pointer).and_then(Value::as_object);
        let strings = values.into_iter().flatten().filter_map(|(_, v)| v.as_str());
        strings
            .map(|s| match base64 {
                true => (s.len() / 4 * 3)
                    .saturating_sub(s.bytes().rev().take_while(|b| *b == b'=').count()),
                false => s.len(),
            })
            .sum()
    }

    fn required(&mut self, field: &str) {
        self.out.push(Cause::required(field));
    }

    fn required_because(&mut self, field: &str, why: &str) {
        let message = format!("Required value: {why}");
        self.out
            .push(Cause::new("FieldValueRequired", field, message));
    }

    fn required_string(&mut self, pointer: &str, field: &str) {
        if self.string(pointer).is_empty() {
            self.required(field);
        }
    }

    fn invalid(&mut self, pointer: &str, field: &str, why: &str) {
        let value = self.at(pointer).cloned().unwrap_or(Value::Null);
        self.out.push(Cause::invalid(field, &value, why));
    }

    /// A string field, when set, must be one of `allowed`.
    fn one_of(&mut self, pointer: &str, field: &str, allowed: &[&str]) {
        super::one_of(self.object.pointer(pointer), field, allowed, self.out);
    }

    /// A Role's or ClusterRole's rules.
    fn rules(&mut self, namespaced: bool) {
        for (i, rule) in self.list("/rules").iter().enumerate() {
            let at = format!("rules[{i}]");
            let count = |field: &str| {
                rule.get(field)
                    .and_then(Value::as_array)
                    .map_or(0, Vec::len)
            };
            if count("verbs") == 0 {
                self.required_because(
                    &format!("{at}.verbs"),
                    "verbs must contain at least one value",
                );
            }
            if count("nonResourceURLs") > 0 {
                if namespaced {
                    let value = rule["nonResourceURLs"].clone();
                    self.out.push(Cause::invalid(
                        format!("{at}.nonResourceURLs"),
                        &value,
                        "namespaced rules cannot apply to non-resource URLs",
                    ));
                }
                if count("apiGroups") > 0 || count("resources") > 0 {
                    let value = rule["nonResourceURLs"].clone();
                    self.out.push(Cause::invalid(
                        format!("{at}.nonResourceURLs"),
                        &value,
                        "rules cannot apply to both regular resources and non-resource URLs",
                    ));
                }
                continue;
            }
            if count("apiGroups") == 0 {
                self.required_because(
                    &format!("{at}.apiGroups"),
                    "resource rules must supply at least one api group",
                );
            }
            if count("resources") == 0 {
                self.required_because(
                    &format!("{at}.resources"),
                    "resource rules must supply at least one resource",
                );
            }
        }
    }

    /// A RoleBinding's or ClusterRoleBinding's roleRef and subjects.
    fn binding(&mut self, kinds: &[&str], cluster: bool) {
        let group = self.at("/roleRef/apiGroup").cloned().unwrap_or(json!(""));
        if group != json!(RBAC_GROUP) {
            self.out.push(Cause::not_supported(
                "roleRef.apiGroup",
                &group,
                &[RBAC_GROUP],
            ));
        }
        let kind = self.at("/roleRef/kind").cloned().unwrap_or(json!(""));
        if !kinds.iter().any(|k| kind.as_str() == Some(k)) {
            self.out
                .push(Cause::not_supported("roleRef.kind", &kind, kinds));
        }
        self.required_string("/roleRef/name", "roleRef.name");
        for (i, subject) in self.list("/subjects").iter().enumerate() {
            let at = format!("subjects[{i}]");
            let field = |name: &str| {
                subject
                    .get(name)
                    .and_then(Value::as_str)
                    .unwrap_or_default()
            };
            if field("name").is_empty() {
                self.required(&format!("{at}.name"));
            }
            let group = subject.get("apiGroup").cloned().unwrap_or(json!(""));
            match field("kind") {
                "ServiceAccount" => {
                    if group != json!("") {
                        self.out.push(Cause::not_supported(
                            format!("{at}.apiGroup"),
                            &group,
                            &[""],
                        ));
                    }
                    if cluster && field("namespace").is_empty() {
                        self.required(&format!("{at}.namespace"));
                    }
                }
                "User" | "Group" => {
                    if group != json!(RBAC_GROUP) {
                        self.out.push(Cause::not_supported(
                            format!("{at}.apiGroup"),
                            &group,
                            &[RBAC_GROUP],
                        ));
                    }
                }
                _ => {
                    let kind = subject.get("kind").cloned().unwrap_or(json!(""));
                    self.out.push(Cause::not_supported(
                        format!("{at}.kind"),
                        &kind,
                        &["ServiceAccount", "User", "Group"],
                    ));
                }
            }
        }
    }

    /// An autoscaler's target and bounds (the same fields in v1 and v2).
    fn autoscaler(&mut self) {
        self.required_string("/spec/scaleTargetRef/kind", "spec.scaleTargetRef.kind");
        self.required_string("/spec/scaleTargetRef/name", "spec.scaleTargetRef.name");
        let max = self
            .at("/spec/maxReplicas")
            .and_then(Value::as_i64)
            .unwrap_or(0);
        if max < 1 {
            self.invalid(
                "/spec/maxReplicas",
                "spec.maxReplicas",
                "must be greater than or equal to 1",
            );
        }
        if let Some(min) = self.at("/spec/minReplicas").and_then(Value::as_i64) {
            if min < 1 {
                self.invalid(
                    "/spec/minReplicas",
                    "spec.minReplicas",
                    "must be greater than or equal to 1",
                );
            } else if min > max {
                self.invalid(
                    "/spec/minReplicas",
                    "spec.minReplicas",
                    "must be less than or equal to maxReplicas",
                );
            }
        }
    }

    fn volume(&mut self) {
        if !self.has("/spec/capacity") {
            self.required("spec.capacity");
        }
        if self.list("/spec/accessModes").is_empty() {
            self.required("spec.accessModes");
        }
        let spec = self.at("/spec").and_then(Value::as_object);
        let sources = spec
            .into_iter()
            .flatten()
            .filter(|(k, v)| !v.is_null() && !crate::update::VOLUME_FIELDS.contains(&k.as_str()));
        match sources.count() {
            0 => self.required_because("spec", "must specify a volume type"),
            1 => {}
            _ => self.out.push(Cause::forbidden(
                "spec",
                "may not specify more than 1 volume type",
            )),
        }
    }

    /// The keys a Secret of a built-in type must carry.
    fn typed_secret(&mut self) {
        let data = self.at("/data").cloned().unwrap_or(Value::Null);
        let has = |key: &str| {
            data.get(key)
                .and_then(Value::as_str)
                .is_some_and(|v| !v.is_empty())
        };
        let required: &[&str] = match self.string("/type") {
            "kubernetes.io/tls" => &["tls.crt", "tls.key"],
            "kubernetes.io/dockerconfigjson" => &[".dockerconfigjson"],
            "kubernetes.io/dockercfg" => &[".dockercfg"],
            "kubernetes.io/ssh-auth" => &["ssh-privatekey"],
            "kubernetes.io/basic-auth" if !has("username") && !has("password") => &["username"],
            "kubernetes.io/service-account-token" => {
                let annotation = "/metadata/annotations/kubernetes.io~1service-account.name";
                if self.string(annotation).is_empty() {
                    self.required("metadata.annotations[kubernetes.io/service-account.name]");
                }
                &[]
            }
            _ => &[],
        };
        for key in required.iter().filter(|k| !has(k)) {
            self.required(&format!("data[{key}]"));
        }
    }

    fn ingress(&mut self) {
        let rules = self.list("/spec/rules");
        if rules.is_empty() && !self.has("/spec/defaultBackend") {
            self.invalid(
                "/spec",
                "spec",
                "either `defaultBackend` or `rules` must be specified",
            );
        }
        for (i, rule) in rules.iter().enumerate() {
            let paths = rule
                .pointer("/http/paths")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            for (j, path) in paths.iter().enumerate() {
                let at = format!("spec.rules[{i}].http.paths[{j}]");
                match path.get("pathType") {
                    None | Some(Value::Null) => {
                        self.required_because(
                            &format!("{at}.pathType"),
                            "pathType must be specified",
                        );
                    }
                    Some(kind) => match kind.as_str() {
                        Some("Exact" | "Prefix") => {
                            let p = path.get("path").and_then(Value::as_str).unwrap_or_default();
                            if !p.starts_with('/') {
                                self.out.push(Cause::invalid(
                                    format!("{at}.path"),
                                    &json!(p),
                                    "must be an absolute path",
                                ));
                            }
                        }
                        Some("ImplementationSpecific") => {}
                        _ => self.out.push(Cause::not_supported(
                            format!("{at}.pathType"),
                            kind,
                            &["Exact", "ImplementationSpecific", "Prefix"],
                        )),
                    },
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
