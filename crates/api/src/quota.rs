//! ResourceQuota accounting: what an object uses of a namespace's quotas,
//! which quotas it falls under, and what a pod must declare — upstream's
//! quota evaluators (`pkg/quota/v1/evaluator/core`, and the object-count
//! evaluator of `apiserver/pkg/quota/v1/generic`). The API server's quota
//! admission and the ResourceQuota controller both measure with these
//! functions, so the usage admission charges is the usage the controller
//! recomputes.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, SystemTime};

use serde_json::{Map, Value, json};

use crate::quantity::Quantity;

/// Resource names to quantities (upstream's `ResourceList`), sorted as
/// upstream prints them.
pub type ResourceList = BTreeMap<String, Quantity>;

/// The kinds with an evaluator of their own; every other resource is
/// counted by object (`count/<resource>.<group>`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Evaluator {
    Pods,
    Services,
    Claims,
    /// An object count: the resource's `count/…` name and, for the four
    /// kinds quota counted before `count/` existed, its legacy name.
    Count,
}

/// The group and resource an evaluator measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Target<'a> {
    pub group: &'a str,
    pub resource: &'a str,
}

impl<'a> Target<'a> {
    pub fn new(group: &'a str, resource: &'a str) -> Self {
        Target { group, resource }
    }

    pub fn evaluator(&self) -> Evaluator {
        match (self.group, self.resource) {
            ("", "pods") => Evaluator::Pods,
            ("", "services") => Evaluator::Services,
            ("", "persistentvolumeclaims") => Evaluator::Claims,
            _ => Evaluator::Count,
        }
    }

    /// `count/pods`, `count/deployments.apps`.
    pub fn count_name(&self) -> String {
        if self.group.is_empty() {
            format!("count/{}", self.resource)
        } else {
            format!("count/{}.{}", self.resource, self.group)
        }
    }

    /// The name quota counted the resource by before `count/` (core
    /// ConfigMaps, Secrets, ResourceQuotas, ReplicationControllers, and
    /// the three kinds with their own evaluators).
    fn legacy_name(&self) -> Option<&'static str> {
        if !self.group.is_empty() {
            return None;
        }
        [
            "configmaps",
            "secrets",
            "resourcequotas",
            "replicationcontrollers",
            "pods",
            "services",
            "persistentvolumeclaims",
        ]
        .into_iter()
        .find(|legacy| *legacy == self.resource)
    }

    /// Whether an update can change what an object uses (creates always
    /// can): a Service's type and ports, a claim's size.
    pub fn measures_updates(&self) -> bool {
        matches!(self.evaluator(), Evaluator::Services | Evaluator::Claims)
    }

    /// The names of `hard` this resource's objects use (upstream's
    /// `MatchingResources`).
    pub fn matching_resources<'n>(
        &self,
        hard: impl IntoIterator<Item = &'n String>,
    ) -> Vec<String> {
        let count = self.count_name();
        let legacy = self.legacy_name();
        hard.into_iter()
            .filter(|name| {
                **name == count
                    || Some(name.as_str()) == legacy
                    || match self.evaluator() {
                        Evaluator::Pods => is_pod_resource(name),
                        Evaluator::Services => {
                            matches!(
                                name.as_str(),
                                "services.loadbalancers" | "services.nodeports"
                            )
                        }
                        Evaluator::Claims => {
                            *name == "requests.storage" || class_resource(name).is_some()
                        }
                        Evaluator::Count => false,
                    }
            })
            .cloned()
            .collect()
    }

    /// What `object` uses (upstream's `Usage`). `now` decides whether a pod
    /// being deleted is past its grace period.
    pub fn usage(&self, object: &Value, now: SystemTime) -> ResourceList {
        let mut usage = ResourceList::new();
        usage.insert(self.count_name(), Quantity::from_int(1));
        match self.evaluator() {
            Evaluator::Pods => {
                if counts_compute(object, now) {
                    usage.extend(pod_compute_usage(
                        &pod_requests(object),
                        &pod_limits(object),
                    ));
                }
            }
            Evaluator::Services => usage.extend(service_usage(object)),
            Evaluator::Claims => usage.extend(claim_usage(object)),
            Evaluator::Count => {
                if let Some(legacy) = self.legacy_name() {
                    usage.insert(legacy.into(), Quantity::from_int(1));
                }
            }
        }
        usage
    }

    /// Whether `object` falls under `quota`: the quota limits something the
    /// object uses, and every scope the quota names matches (only pods
    /// match scopes, as upstream).
    pub fn matches(&self, quota: &Value, object: &Value) -> bool {
        let hard = list(quota.pointer("/status/hard"));
        !self.matching_resources(hard.keys()).is_empty() && self.in_scopes(quota, object)
    }

    /// Whether `object` is in every scope `quota` names (only pods are in
    /// any).
    pub fn in_scopes(&self, quota: &Value, object: &Value) -> bool {
        scope_selectors(quota).iter().all(|selector| {
            self.evaluator() == Evaluator::Pods && pod_matches_scope(selector, object)
        })
    }

    /// What a pod must declare under a quota limiting `required`: every
    /// container names cpu and memory requests or limits the quota counts
    /// (upstream's `Constraints`, kept for backward compatibility).
    pub fn constraints(&self, required: &[String], object: &Value) -> Result<(), String> {
        if self.evaluator() != Evaluator::Pods {
            return Ok(());
        }
        const VALIDATED: &[&str] = &[
            "cpu",
            "memory",
            "requests.cpu",
            "requests.memory",
            "limits.cpu",
            "limits.memory",
        ];
        let required: BTreeSet<&str> = required
            .iter()
            .map(String::as_str)
            .filter(|r| VALIDATED.contains(r))
            .collect();
        let mut missing: BTreeMap<&str, BTreeSet<String>> = BTreeMap::new();
        for container in
            containers(object, "containers").chain(containers(object, "initContainers"))
        {
            let resources = container.get("resources");
            let declared = pod_compute_usage(
                &list(resources.and_then(|r| r.get("requests"))),
                &list(resources.and_then(|r| r.get("limits"))),
            );
            for name in &required {
                if !declared.contains_key(*name) {
                    let container = container.get("name").and_then(Value::as_str);
                    missing
                        .entry(name)
                        .or_default()
                        .insert(container.unwrap_or_default().to_string());
                }
            }
        }
        if missing.is_empty() {
            return Ok(());
        }
        let parts: Vec<String> = missing
            .iter()
            .map(|(name, containers)| {
                let containers: Vec<&str> = containers.iter().map(String::as_str).collect();
                format!("{name} for: {}", containers.join(","))
            })
            .collect();
        Err(format!("must specify {}", parts.join("; ")))
    }
}

/// A ResourceList from its JSON form; malformed quantities are skipped
/// (the API server canonicalized every stored one).
pub fn list(value: Option<&Value>) -> ResourceList {
    value
        .and_then(Value::as_object)
        .map(|map| {
            map.iter()
                .filter_map(|(name, q)| {
                    let q = Quantity::parse(q.as_str()?).ok()?;
                    Some((name.clone(), q))
                })
                .collect()
        })
        .unwrap_or_default()
}

/// A ResourceList's JSON form.
pub fn to_json(list: &ResourceList) -> Value {
    Value::Object(
        list.iter()
            .map(|(name, q)| (name.clone(), json!(q.canonical())))
            .collect::<Map<_, _>>(),
    )
}

/// The sum of two lists: each name in either, added where in both.
pub fn add(a: &ResourceList, b: &ResourceList) -> ResourceList {
    let mut sum = a.clone();
    for (name, q) in b {
        sum.entry(name.clone())
            .and_modify(|have| *have = have.add(q))
            .or_insert(*q);
    }
    sum
}

/// `a - b` where each result is floored at zero (upstream's
/// `SubtractWithNonNegativeResult`), over `a`'s names and `b`'s.
pub fn subtract_non_negative(a: &ResourceList, b: &ResourceList) -> ResourceList {
    let names: BTreeSet<&String> = a.keys().chain(b.keys()).collect();
    names
        .into_iter()
        .map(|name| {
            let have = a.get(name).copied().unwrap_or_else(Quantity::zero);
            let less = b.get(name).copied().unwrap_or_else(Quantity::zero);
            let diff = have.sub(&less);
            let diff = if diff.is_negative() {
                Quantity::zero()
            } else {
                diff
            };
            (name.clone(), diff)
        })
        .collect()
}

/// `list` restricted to `names`.
pub fn mask<'n>(list: &ResourceList, names: impl IntoIterator<Item = &'n String>) -> ResourceList {
    names
        .into_iter()
        .filter_map(|name| Some((name.clone(), *list.get(name)?)))
        .collect()
}

/// The names over their limit in `hard` (absent from `hard`: no limit).
pub fn exceeded(used: &ResourceList, hard: &ResourceList) -> Vec<String> {
    used.iter()
        .filter(|(name, q)| hard.get(*name).is_some_and(|h| q.cmp_value(h).is_gt()))
        .map(|(name, _)| name.clone())
        .collect()
}

/// `cpu=1,pods=2`, sorted, as upstream's quota errors print lists.
pub fn pretty(list: &ResourceList) -> String {
    list.iter()
        .map(|(name, q)| format!("{name}={q}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// A quota's scopes and scope selector as `(scope, operator, values)`.
pub fn scope_selectors(quota: &Value) -> Vec<(String, String, Vec<String>)> {
    let strings = |v: Option<&Value>| -> Vec<String> {
        v.and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|s| s.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    };
    let mut selectors: Vec<(String, String, Vec<String>)> = strings(quota.pointer("/spec/scopes"))
        .into_iter()
        .map(|scope| (scope, "Exists".to_string(), Vec::new()))
        .collect();
    if let Some(expressions) = quota
        .pointer("/spec/scopeSelector/matchExpressions")
        .and_then(Value::as_array)
    {
        for e in expressions {
            let field = |k: &str| {
                e.get(k)
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string()
            };
            selectors.push((
                field("scopeName"),
                field("operator"),
                strings(e.get("values")),
            ));
        }
    }
    selectors
}

fn pod_matches_scope(
    (scope, operator, values): &(String, String, Vec<String>),
    pod: &Value,
) -> bool {
    match scope.as_str() {
        "Terminating" => is_terminating(pod),
        "NotTerminating" => !is_terminating(pod),
        "BestEffort" => is_best_effort(pod),
        "NotBestEffort" => !is_best_effort(pod),
        "CrossNamespacePodAffinity" => uses_cross_namespace_affinity(pod),
        "PriorityClass" => {
            let class = pod
                .pointer("/spec/priorityClassName")
                .and_then(Value::as_str)
                .filter(|c| !c.is_empty());
            match operator.as_str() {
                "In" => class.is_some_and(|c| values.iter().any(|v| v == c)),
                "NotIn" => class.is_none_or(|c| !values.iter().any(|v| v == c)),
                "Exists" => class.is_some(),
                "DoesNotExist" => class.is_none(),
                _ => false,
            }
        }
        _ => false,
    }
}

fn is_terminating(pod: &Value) -> bool {
    pod.pointer("/spec/activeDeadlineSeconds")
        .and_then(Value::as_i64)
        .is_some_and(|d| d >= 0)
}

/// A pod of QoS class BestEffort: no container requests or limits cpu or
/// memory.
pub fn is_best_effort(pod: &Value) -> bool {
    containers(pod, "containers")
        .chain(containers(pod, "initContainers"))
        .all(|c| {
            ["requests", "limits"].iter().all(|part| {
                let declared = list(c.pointer(&format!("/resources/{part}")));
                ["cpu", "memory"]
                    .iter()
                    .all(|r| declared.get(*r).is_none_or(Quantity::is_zero))
            })
        })
}

fn uses_cross_namespace_affinity(pod: &Value) -> bool {
    let cross = |term: &Value| {
        term.get("namespaces")
            .and_then(Value::as_array)
            .is_some_and(|n| !n.is_empty())
            || term.get("namespaceSelector").is_some_and(|s| !s.is_null())
    };
    ["podAffinity", "podAntiAffinity"].iter().any(|kind| {
        let Some(affinity) = pod.pointer(&format!("/spec/affinity/{kind}")) else {
            return false;
        };
        let terms = |key: &str| {
            affinity
                .get(key)
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default()
        };
        terms("requiredDuringSchedulingIgnoredDuringExecution")
            .iter()
            .any(cross)
            || terms("preferredDuringSchedulingIgnoredDuringExecution")
                .iter()
                .any(|w| w.get("podAffinityTerm").is_some_and(cross))
    })
}

/// Whether a pod's compute resources still count: not finished, and not
/// past the grace period of its deletion (upstream's `QuotaV1Pod`).
fn counts_compute(pod: &Value, now: SystemTime) -> bool {
    let phase = pod.pointer("/status/phase").and_then(Value::as_str);
    if matches!(phase, Some("Succeeded" | "Failed")) {
        return false;
    }
    let deleted = pod
        .pointer("/metadata/deletionTimestamp")
        .and_then(Value::as_str)
        .and_then(crate::time::parse_rfc3339)
        .map(crate::time::from_unix_seconds);
    let grace = pod
        .pointer("/metadata/deletionGracePeriodSeconds")
        .and_then(Value::as_u64);
    match (deleted, grace) {
        (Some(at), Some(grace)) => now <= at + Duration::from_secs(grace),
        _ => true,
    }
}

fn containers<'v>(pod: &'v Value, key: &str) -> impl Iterator<Item = &'v Value> {
    pod.pointer(&format!("/spec/{key}"))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
}

/// The resources a pod requests (`part` "requests") or is limited to
/// ("limits"), as the scheduler counts them (upstream's
/// `resourcehelper.PodRequests`/`PodLimits`): the containers' sum; each
/// init container in turn, with the sidecars (restartable init containers)
/// started before it, where that is larger; the sidecars add to the sum;
/// then the pod's overhead.
fn pod_resources(pod: &Value, part: &str) -> ResourceList {
    let of = |c: &Value| list(c.pointer(&format!("/resources/{part}")));
    let mut sum = ResourceList::new();
    for c in containers(pod, "containers") {
        sum = add(&sum, &of(c));
    }
    let (mut sidecars, mut init_peak) = (ResourceList::new(), ResourceList::new());
    for c in containers(pod, "initContainers") {
        if c.get("restartPolicy").and_then(Value::as_str) == Some("Always") {
            sidecars = add(&sidecars, &of(c));
            init_peak = max(&init_peak, &sidecars);
        } else {
            init_peak = max(&init_peak, &add(&sidecars, &of(c)));
        }
    }
    let total = max(&add(&sum, &sidecars), &init_peak);
    add(&total, &list(pod.pointer("/spec/overhead")))
}

fn pod_requests(pod: &Value) -> ResourceList {
    pod_resources(pod, "requests")
}

fn pod_limits(pod: &Value) -> ResourceList {
    pod_resources(pod, "limits")
}

/// Each name in either, at the larger value.
fn max(a: &ResourceList, b: &ResourceList) -> ResourceList {
    let mut out = a.clone();
    for (name, q) in b {
        out.entry(name.clone())
            .and_modify(|have| *have = have.max(*q))
            .or_insert(*q);
    }
    out
}

/// Upstream's `podComputeUsageHelper`: a pod's requests and limits under
/// the names quota counts them by.
fn pod_compute_usage(requests: &ResourceList, limits: &ResourceList) -> ResourceList {
    let mut usage = ResourceList::new();
    usage.insert("pods".into(), Quantity::from_int(1));
    for resource in ["cpu", "memory", "ephemeral-storage"] {
        if let Some(q) = requests.get(resource) {
            usage.insert(resource.into(), *q);
            usage.insert(format!("requests.{resource}"), *q);
        }
        if let Some(q) = limits.get(resource) {
            usage.insert(format!("limits.{resource}"), *q);
        }
    }
    for (name, q) in requests {
        if name.starts_with("hugepages-") {
            usage.insert(name.clone(), *q);
            usage.insert(format!("requests.{name}"), *q);
        } else if is_extended(name) {
            usage.insert(format!("requests.{name}"), *q);
        }
    }
    usage
}

/// An extended resource: outside `kubernetes.io`, qualified by a domain,
/// not `requests.`-prefixed (upstream's `IsExtendedResourceName`).
fn is_extended(name: &str) -> bool {
    name.contains('/')
        && !name.contains("kubernetes.io/")
        && !name.starts_with("requests.")
        && !name.starts_with("limits.")
}

fn is_pod_resource(name: &str) -> bool {
    const NAMES: &[&str] = &[
        "pods",
        "cpu",
        "memory",
        "ephemeral-storage",
        "requests.cpu",
        "requests.memory",
        "requests.ephemeral-storage",
        "limits.cpu",
        "limits.memory",
        "limits.ephemeral-storage",
    ];
    NAMES.contains(&name)
        || name.starts_with("hugepages-")
        || name.starts_with("requests.hugepages-")
        || name
            .strip_prefix("requests.")
            .is_some_and(|rest| is_extended(rest) && !rest.contains("kubernetes.io/"))
}

fn service_usage(service: &Value) -> ResourceList {
    let mut usage = ResourceList::new();
    usage.insert("services".into(), Quantity::from_int(1));
    let ports = service
        .pointer("/spec/ports")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    match service.pointer("/spec/type").and_then(Value::as_str) {
        Some("NodePort") => {
            usage.insert(
                "services.nodeports".into(),
                Quantity::from_int(ports.len() as i64),
            );
        }
        Some("LoadBalancer") => {
            usage.insert("services.loadbalancers".into(), Quantity::from_int(1));
            let allocates = service
                .pointer("/spec/allocateLoadBalancerNodePorts")
                .and_then(Value::as_bool)
                .unwrap_or(true);
            let node_ports = if allocates {
                ports.len()
            } else {
                ports
                    .iter()
                    .filter(|p| p.get("nodePort").and_then(Value::as_i64).unwrap_or(0) != 0)
                    .count()
            };
            usage.insert(
                "services.nodeports".into(),
                Quantity::from_int(node_ports as i64),
            );
        }
        _ => {}
    }
    usage
}

/// `<class>.storageclass.storage.k8s.io/<resource>` → the class.
fn class_resource(name: &str) -> Option<(&str, &str)> {
    let (class, resource) = name.split_once(".storageclass.storage.k8s.io/")?;
    matches!(resource, "requests.storage" | "persistentvolumeclaims").then_some((class, resource))
}

fn claim_usage(claim: &Value) -> ResourceList {
    let mut usage = ResourceList::new();
    let one = Quantity::from_int(1);
    usage.insert("persistentvolumeclaims".into(), one);
    let class = claim
        .pointer("/metadata/annotations/volume.beta.kubernetes.io~1storage-class")
        .or_else(|| claim.pointer("/spec/storageClassName"))
        .and_then(Value::as_str)
        .filter(|c| !c.is_empty());
    if let Some(class) = class {
        usage.insert(
            format!("{class}.storageclass.storage.k8s.io/persistentvolumeclaims"),
            one,
        );
    }
    // The larger of what is asked and what was allocated (a failed
    // expansion being recovered).
    let requested = list(claim.pointer("/spec/resources/requests"))
        .get("storage")
        .copied();
    let allocated = list(claim.pointer("/status/allocatedResources"))
        .get("storage")
        .copied();
    let storage = match (requested, allocated) {
        (Some(r), Some(a)) => Some(r.max(a)),
        (r, a) => r.or(a),
    };
    if let Some(storage) = storage {
        usage.insert("requests.storage".into(), storage);
        if let Some(class) = class {
            usage.insert(
                format!("{class}.storageclass.storage.k8s.io/requests.storage"),
                storage,
            );
        }
    }
    usage
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(s: &str) -> Quantity {
        Quantity::parse(s).expect("quantity")
    }

    fn at(text: &str) -> SystemTime {
        crate::time::from_unix_seconds(crate::time::parse_rfc3339(text).expect("time"))
    }

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    const PODS: Target<'static> = Target {
        group: "",
        resource: "pods",
    };

    fn pod(containers: Value) -> Value {
        json!({"metadata": {"name": "p"}, "spec": {"containers": containers}})
    }

    #[test]
    fn a_pod_uses_its_containers_sum_and_its_largest_init_container() {
        let mut p = pod(json!([
            {"name": "a", "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"cpu": "200m"}}},
            {"name": "b", "resources": {"requests": {"cpu": "300m"}}},
        ]));
        p["spec"]["initContainers"] = json!([
            {"name": "i", "resources": {"requests": {"cpu": "1"}}},
        ]);
        let usage = PODS.usage(&p, SystemTime::now());
        assert_eq!(usage["cpu"].canonical(), "1");
        assert_eq!(usage["requests.cpu"].canonical(), "1");
        assert_eq!(usage["requests.memory"].canonical(), "64Mi");
        assert_eq!(usage["limits.cpu"].canonical(), "200m");
        assert_eq!(usage["pods"].canonical(), "1");
        assert_eq!(usage["count/pods"].canonical(), "1");
        assert!(!usage.contains_key("limits.memory"));
    }

    #[test]
    fn sidecars_add_to_the_sum() {
        let mut p = pod(json!([{"name": "a", "resources": {"requests": {"cpu": "500m"}}}]));
        p["spec"]["initContainers"] = json!([
            {"name": "s", "restartPolicy": "Always", "resources": {"requests": {"cpu": "200m"}}},
            {"name": "i", "resources": {"requests": {"cpu": "600m"}}},
        ]);
        // The init container runs beside the sidecar: 800m; after, 700m.
        assert_eq!(PODS.usage(&p, SystemTime::now())["cpu"].canonical(), "800m");
    }

    #[test]
    fn finished_pods_and_pods_past_their_grace_count_only_as_objects() {
        let mut p = pod(json!([{"name": "a", "resources": {"requests": {"cpu": "1"}}}]));
        p["status"] = json!({"phase": "Succeeded"});
        let usage = PODS.usage(&p, SystemTime::now());
        assert_eq!(usage.keys().collect::<Vec<_>>(), ["count/pods"]);

        let mut p = pod(json!([{"name": "a"}]));
        p["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        p["metadata"]["deletionGracePeriodSeconds"] = json!(30);
        assert!(
            PODS.usage(&p, at("2026-01-01T00:00:10Z"))
                .contains_key("pods")
        );
        assert!(
            !PODS
                .usage(&p, at("2026-01-01T00:01:00Z"))
                .contains_key("pods")
        );
    }

    #[test]
    fn matching_resources_per_evaluator() {
        let hard = names(&[
            "pods",
            "requests.cpu",
            "services",
            "services.nodeports",
            "configmaps",
            "count/deployments.apps",
            "requests.storage",
            "gold.storageclass.storage.k8s.io/requests.storage",
            "requests.nvidia.com/gpu",
        ]);
        assert_eq!(
            PODS.matching_resources(&hard),
            names(&["pods", "requests.cpu", "requests.nvidia.com/gpu"])
        );
        assert_eq!(
            Target::new("", "services").matching_resources(&hard),
            names(&["services", "services.nodeports"])
        );
        assert_eq!(
            Target::new("", "configmaps").matching_resources(&hard),
            names(&["configmaps"])
        );
        assert_eq!(
            Target::new("apps", "deployments").matching_resources(&hard),
            names(&["count/deployments.apps"])
        );
        assert_eq!(
            Target::new("", "persistentvolumeclaims").matching_resources(&hard),
            names(&[
                "requests.storage",
                "gold.storageclass.storage.k8s.io/requests.storage"
            ])
        );
    }

    #[test]
    fn services_count_node_ports_and_load_balancers() {
        let svc = json!({"spec": {"type": "LoadBalancer", "ports": [{"port": 80}, {"port": 443}]}});
        let usage = Target::new("", "services").usage(&svc, SystemTime::now());
        assert_eq!(usage["services.loadbalancers"].canonical(), "1");
        assert_eq!(usage["services.nodeports"].canonical(), "2");
        let svc = json!({"spec": {"type": "ClusterIP", "ports": [{"port": 80}]}});
        let usage = Target::new("", "services").usage(&svc, SystemTime::now());
        assert!(!usage.contains_key("services.nodeports"));
    }

    #[test]
    fn claims_count_storage_per_class() {
        let claim = json!({"spec": {"storageClassName": "gold", "resources": {"requests": {"storage": "5Gi"}}}});
        let usage = Target::new("", "persistentvolumeclaims").usage(&claim, SystemTime::now());
        assert_eq!(usage["requests.storage"].canonical(), "5Gi");
        assert_eq!(
            usage["gold.storageclass.storage.k8s.io/requests.storage"],
            q("5Gi")
        );
        assert_eq!(
            usage["gold.storageclass.storage.k8s.io/persistentvolumeclaims"],
            q("1")
        );
    }

    #[test]
    fn scopes_select_pods() {
        let quota =
            |scopes: Value| json!({"spec": {"scopes": scopes}, "status": {"hard": {"pods": "2"}}});
        let best_effort = pod(json!([{"name": "a"}]));
        let burstable = pod(json!([{"name": "a", "resources": {"requests": {"cpu": "1"}}}]));
        assert!(PODS.matches(&quota(json!(["BestEffort"])), &best_effort));
        assert!(!PODS.matches(&quota(json!(["BestEffort"])), &burstable));
        assert!(PODS.matches(&quota(json!(["NotBestEffort"])), &burstable));
        assert!(PODS.matches(&quota(json!(["NotTerminating"])), &burstable));
        let mut terminating = burstable.clone();
        terminating["spec"]["activeDeadlineSeconds"] = json!(30);
        assert!(PODS.matches(&quota(json!(["Terminating"])), &terminating));
        // Scopes match only pods.
        let cm_quota =
            json!({"spec": {"scopes": ["BestEffort"]}, "status": {"hard": {"configmaps": "2"}}});
        assert!(!Target::new("", "configmaps").matches(&cm_quota, &json!({})));
        // A quota not yet counted by the controller (no status) matches nothing.
        assert!(!PODS.matches(&json!({"spec": {"hard": {"pods": "1"}}}), &burstable));
    }

    #[test]
    fn priority_class_scope_selectors() {
        let quota = json!({
            "spec": {"scopeSelector": {"matchExpressions": [
                {"scopeName": "PriorityClass", "operator": "In", "values": ["high"]}
            ]}},
            "status": {"hard": {"pods": "2"}}
        });
        let mut p = pod(json!([{"name": "a"}]));
        assert!(!PODS.matches(&quota, &p));
        p["spec"]["priorityClassName"] = json!("high");
        assert!(PODS.matches(&quota, &p));
    }

    #[test]
    fn constraints_name_what_each_container_misses() {
        let p = pod(json!([
            {"name": "web", "resources": {"requests": {"cpu": "1"}}},
            {"name": "side"},
        ]));
        let required = names(&["limits.cpu", "requests.cpu", "pods"]);
        assert_eq!(
            PODS.constraints(&required, &p),
            Err("must specify limits.cpu for: side,web; requests.cpu for: side".into())
        );
        assert_eq!(PODS.constraints(&names(&["pods"]), &p), Ok(()));
    }

    #[test]
    fn arithmetic_and_printing() {
        let a: ResourceList = [("cpu".to_string(), q("500m")), ("pods".to_string(), q("1"))].into();
        let b: ResourceList = [("cpu".to_string(), q("700m"))].into();
        let sum = add(&a, &b);
        assert_eq!(pretty(&sum), "cpu=1200m,pods=1");
        let hard: ResourceList = [("cpu".to_string(), q("1")), ("pods".to_string(), q("1"))].into();
        assert_eq!(exceeded(&sum, &hard), names(&["cpu"]));
        let diff = subtract_non_negative(&b, &a);
        assert_eq!(pretty(&diff), "cpu=200m,pods=0");
        assert_eq!(to_json(&sum), json!({"cpu": "1200m", "pods": "1"}));
    }
}
