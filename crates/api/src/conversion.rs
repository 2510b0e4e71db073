//! Versions served from another version's storage, as upstream serves them:
//! autoscaling/v1 HorizontalPodAutoscalers (stored as autoscaling/v2) and
//! events.k8s.io/v1 Events (stored as core/v1 Events). Pure functions from
//! one JSON form to the other.

use serde_json::{Map, Value, json};

/// How a served version maps to and from its stored form.
#[derive(Debug, Clone, Copy)]
pub struct Conversion {
    /// `apiVersion` of the stored form.
    pub storage_api_version: &'static str,
    /// The stored form's definition (its fields are stored in its Go order).
    pub storage_schema: &'static str,
    pub to_storage: fn(Value) -> Value,
    pub from_storage: fn(Value) -> Value,
}

fn take(object: &mut Value, field: &str) -> Option<Value> {
    object.as_object_mut().and_then(|m| m.remove(field))
}

/// Where autoscaling/v1 keeps what only autoscaling/v2 can say (upstream's
/// annotations, `pkg/apis/autoscaling`), so that a v1 client reading and
/// writing back an HPA loses nothing.
const METRICS_ANNOTATION: &str = "autoscaling.alpha.kubernetes.io/metrics";
const CURRENT_METRICS_ANNOTATION: &str = "autoscaling.alpha.kubernetes.io/current-metrics";
const CONDITIONS_ANNOTATION: &str = "autoscaling.alpha.kubernetes.io/conditions";
const BEHAVIOR_ANNOTATION: &str = "autoscaling.alpha.kubernetes.io/behavior";

/// A CPU metric with a utilization target: what v1's own field carries.
fn is_cpu_utilization(metric: &Value) -> bool {
    metric.get("type").and_then(Value::as_str) == Some("Resource")
        && metric.pointer("/resource/name").and_then(Value::as_str) == Some("cpu")
        && (metric
            .pointer("/resource/target/averageUtilization")
            .is_some()
            || metric
                .pointer("/resource/current/averageUtilization")
                .is_some())
}

/// The source key of a metric type: `Resource` → `resource`.
fn source_key(kind: &str) -> Option<&'static str> {
    Some(match kind {
        "Resource" => "resource",
        "ContainerResource" => "containerResource",
        "Pods" => "pods",
        "Object" => "object",
        "External" => "external",
        _ => return None,
    })
}

/// The fields of a metric source that name what is measured, v1 name and
/// v2 pointer.
fn identity_fields(kind: &str) -> &'static [(&'static str, &'static str)] {
    match kind {
        "Resource" => &[("name", "/name")],
        "ContainerResource" => &[("name", "/name"), ("container", "/container")],
        "Pods" => &[
            ("metricName", "/metric/name"),
            ("selector", "/metric/selector"),
        ],
        "Object" => &[
            ("target", "/describedObject"),
            ("metricName", "/metric/name"),
            ("selector", "/metric/selector"),
        ],
        "External" => &[
            ("metricName", "/metric/name"),
            ("metricSelector", "/metric/selector"),
        ],
        _ => &[],
    }
}

/// The value fields of a spec (`target`) or status (`current`): v1 name,
/// v2 name, and the v2 target type it means.
fn value_fields(kind: &str, status: bool) -> [(&'static str, &'static str, &'static str); 3] {
    let average = match (kind, status) {
        ("Object", _) => "averageValue",
        (_, false) => "targetAverageValue",
        (_, true) => "currentAverageValue",
    };
    if status {
        [
            (
                "currentAverageUtilization",
                "averageUtilization",
                "Utilization",
            ),
            (average, "averageValue", "AverageValue"),
            ("currentValue", "value", "Value"),
        ]
    } else {
        [
            (
                "targetAverageUtilization",
                "averageUtilization",
                "Utilization",
            ),
            (average, "averageValue", "AverageValue"),
            ("targetValue", "value", "Value"),
        ]
    }
}

/// Sets `value` at a JSON pointer, making objects on the way.
fn set_pointer(target: &mut Value, pointer: &str, value: Value) {
    let parts: Vec<&str> = pointer.trim_start_matches('/').split('/').collect();
    crate::json::set_at(target, &parts, value);
}

/// An autoscaling/v2 metric spec (or status, with `status`) in
/// autoscaling/v1's shape, as upstream keeps it in the annotations.
fn metric_to_v1(metric: &Value, status: bool) -> Value {
    let kind = metric.get("type").and_then(Value::as_str).unwrap_or("");
    let Some(key) = source_key(kind) else {
        return metric.clone();
    };
    let source = metric.get(key).cloned().unwrap_or(Value::Null);
    let mut out = Map::new();
    for (v1, v2) in identity_fields(kind) {
        if let Some(v) = source.pointer(v2) {
            out.insert((*v1).to_string(), v.clone());
        }
    }
    let values = if status { "current" } else { "target" };
    for (v1, v2, _) in value_fields(kind, status) {
        if let Some(v) = source.get(values).and_then(|t| t.get(v2)) {
            out.insert(v1.to_string(), v.clone());
        }
    }
    json!({"type": kind, key: out})
}

/// The reverse of [`metric_to_v1`].
fn metric_to_v2(metric: &Value, status: bool) -> Value {
    let kind = metric.get("type").and_then(Value::as_str).unwrap_or("");
    let Some(key) = source_key(kind) else {
        return metric.clone();
    };
    let source = metric.get(key).cloned().unwrap_or(Value::Null);
    let mut out = json!({});
    for (v1, v2) in identity_fields(kind) {
        if let Some(v) = source.get(*v1) {
            set_pointer(&mut out, v2, v.clone());
        }
    }
    let values = if status { "/current" } else { "/target" };
    for (v1, v2, target_type) in value_fields(kind, status) {
        if let Some(v) = source.get(v1) {
            set_pointer(&mut out, &format!("{values}/{v2}"), v.clone());
            if !status && out.pointer("/target/type").is_none() {
                set_pointer(&mut out, "/target/type", json!(target_type));
            }
        }
    }
    json!({"type": kind, key: out})
}

fn annotations(hpa: &mut Value) -> Option<&mut Map<String, Value>> {
    let meta = hpa.get_mut("metadata")?.as_object_mut()?;
    meta.entry("annotations")
        .or_insert_with(|| json!({}))
        .as_object_mut()
}

/// Takes an annotation holding JSON off the object.
fn take_annotation(hpa: &mut Value, name: &str) -> Option<Value> {
    let meta = hpa.get_mut("metadata")?.as_object_mut()?;
    let annotations = meta.get_mut("annotations")?.as_object_mut()?;
    let text = annotations.remove(name)?;
    if annotations.is_empty() {
        meta.remove("annotations");
    }
    serde_json::from_str(text.as_str()?).ok()
}

/// autoscaling/v1 → autoscaling/v2: the CPU target becomes a Resource
/// metric; what only v2 can say comes back from the annotations.
pub fn hpa_v1_to_v2(mut hpa: Value) -> Value {
    hpa["apiVersion"] = json!("autoscaling/v2");
    let other = take_annotation(&mut hpa, METRICS_ANNOTATION);
    let current = take_annotation(&mut hpa, CURRENT_METRICS_ANNOTATION);
    let conditions = take_annotation(&mut hpa, CONDITIONS_ANNOTATION);
    let behavior = take_annotation(&mut hpa, BEHAVIOR_ANNOTATION);
    if let Some(spec) = hpa.get_mut("spec").filter(|s| s.is_object()) {
        let mut metrics = Vec::new();
        if let Some(target) = take(spec, "targetCPUUtilizationPercentage").filter(|t| !t.is_null())
        {
            metrics.push(json!({"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": target}}}));
        }
        if let Some(Value::Array(other)) = other {
            metrics.extend(other.iter().map(|m| metric_to_v2(m, false)));
        }
        if !metrics.is_empty() {
            spec["metrics"] = Value::Array(metrics);
        }
        if let Some(behavior) = behavior {
            spec["behavior"] = behavior;
        }
    }
    if let Some(status) = hpa.get_mut("status").filter(|s| s.is_object()) {
        let cpu = take(status, "currentCPUUtilizationPercentage").filter(|c| !c.is_null());
        match current {
            // The annotation has every current metric, CPU included.
            Some(Value::Array(all)) => {
                status["currentMetrics"] =
                    Value::Array(all.iter().map(|m| metric_to_v2(m, true)).collect());
            }
            _ => {
                if let Some(cpu) = cpu {
                    status["currentMetrics"] = json!([{"type": "Resource", "resource": {"name": "cpu", "current": {"averageUtilization": cpu}}}]);
                }
            }
        }
        if let Some(conditions) = conditions {
            status["conditions"] = conditions;
        }
    }
    hpa
}

/// autoscaling/v2 → autoscaling/v1: the CPU utilization metric becomes
/// `targetCPUUtilizationPercentage`; other metrics, the current metrics,
/// conditions and behavior go into upstream's annotations.
pub fn hpa_v2_to_v1(mut hpa: Value) -> Value {
    hpa["apiVersion"] = json!("autoscaling/v1");
    let mut kept: Vec<(&str, Value)> = Vec::new();
    if let Some(spec) = hpa.get_mut("spec").filter(|s| s.is_object()) {
        let metrics = take(spec, "metrics")
            .and_then(|m| m.as_array().cloned())
            .unwrap_or_default();
        if let Some(behavior) = take(spec, "behavior").filter(|b| !b.is_null()) {
            kept.push((BEHAVIOR_ANNOTATION, behavior));
        }
        let (cpu, other): (Vec<&Value>, Vec<&Value>) =
            metrics.iter().partition(|m| is_cpu_utilization(m));
        if let Some(target) = cpu
            .first()
            .and_then(|m| m.pointer("/resource/target/averageUtilization"))
        {
            spec["targetCPUUtilizationPercentage"] = target.clone();
        }
        if !other.is_empty() {
            kept.push((
                METRICS_ANNOTATION,
                Value::Array(other.iter().map(|m| metric_to_v1(m, false)).collect()),
            ));
        }
    }
    if let Some(status) = hpa.get_mut("status").filter(|s| s.is_object()) {
        let metrics = take(status, "currentMetrics")
            .and_then(|m| m.as_array().cloned())
            .unwrap_or_default();
        if let Some(conditions) = take(status, "conditions").filter(|c| !c.is_null()) {
            kept.push((CONDITIONS_ANNOTATION, conditions));
        }
        if let Some(current) = metrics
            .iter()
            .find(|m| is_cpu_utilization(m))
            .and_then(|m| m.pointer("/resource/current/averageUtilization"))
        {
            status["currentCPUUtilizationPercentage"] = current.clone();
        }
        if !metrics.is_empty() {
            kept.push((
                CURRENT_METRICS_ANNOTATION,
                Value::Array(metrics.iter().map(|m| metric_to_v1(m, true)).collect()),
            ));
        }
    }
    if !kept.is_empty()
        && let Some(annotations) = annotations(&mut hpa)
    {
        for (name, value) in kept {
            annotations.insert(name.to_string(), json!(value.to_string()));
        }
    }
    hpa
}

/// Field pairs of events.k8s.io/v1 and core/v1 Events.
const EVENT_FIELDS: &[(&str, &str)] = &[
    ("regarding", "involvedObject"),
    ("note", "message"),
    ("deprecatedSource", "source"),
    ("deprecatedFirstTimestamp", "firstTimestamp"),
    ("deprecatedLastTimestamp", "lastTimestamp"),
    ("deprecatedCount", "count"),
    ("reportingController", "reportingComponent"),
];

fn rename(event: Value, api_version: &str, forward: bool) -> Value {
    let Value::Object(mut map) = event else {
        return event;
    };
    let mut out = Map::new();
    for (from, to) in EVENT_FIELDS {
        let (from, to) = if forward { (*from, *to) } else { (*to, *from) };
        if let Some(value) = map.remove(from) {
            out.insert(to.to_string(), value);
        }
    }
    out.extend(map);
    out.insert("apiVersion".into(), json!(api_version));
    Value::Object(out)
}

/// events.k8s.io/v1 → core/v1.
pub fn event_to_core(event: Value) -> Value {
    rename(event, "v1", true)
}

/// core/v1 → events.k8s.io/v1.
pub fn event_from_core(event: Value) -> Value {
    rename(event, "events.k8s.io/v1", false)
}

pub const HPA_V1: Conversion = Conversion {
    storage_api_version: "autoscaling/v2",
    storage_schema: "io.k8s.api.autoscaling.v2.HorizontalPodAutoscaler",
    to_storage: hpa_v1_to_v2,
    from_storage: hpa_v2_to_v1,
};
pub const EVENTS_V1: Conversion = Conversion {
    storage_api_version: "v1",
    storage_schema: "io.k8s.api.core.v1.Event",
    to_storage: event_to_core,
    from_storage: event_from_core,
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hpa_round_trips_its_cpu_target() {
        let v1 = json!({"apiVersion": "autoscaling/v1", "kind": "HorizontalPodAutoscaler", "metadata": {"name": "h"},
            "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}, "minReplicas": 1, "maxReplicas": 5, "targetCPUUtilizationPercentage": 70},
            "status": {"currentReplicas": 2, "desiredReplicas": 3, "currentCPUUtilizationPercentage": 55}});
        let v2 = hpa_v1_to_v2(v1.clone());
        assert_eq!(
            v2["spec"]["metrics"][0]["resource"]["target"]["averageUtilization"],
            70
        );
        assert_eq!(
            v2["status"]["currentMetrics"][0]["resource"]["current"]["averageUtilization"],
            55
        );
        assert!(v2["spec"].get("targetCPUUtilizationPercentage").is_none());
        // Back in v1: the same, plus upstream's copy of the current metrics.
        let mut back = hpa_v2_to_v1(v2.clone());
        let annotation = back["metadata"]["annotations"]
            .as_object_mut()
            .and_then(|a| a.remove(CURRENT_METRICS_ANNOTATION))
            .expect("current metrics kept");
        assert_eq!(
            annotation,
            json!(
                r#"[{"resource":{"currentAverageUtilization":55,"name":"cpu"},"type":"Resource"}]"#
            )
        );
        back["metadata"]
            .as_object_mut()
            .map(|m| m.remove("annotations"));
        assert_eq!(back, v1);
        assert_eq!(hpa_v1_to_v2(hpa_v2_to_v1(v2.clone())), v2);
    }

    #[test]
    fn hpa_v2_only_fields_survive_a_v1_round_trip() {
        let v2 = json!({"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": "h", "annotations": {"team": "web"}},
            "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}, "minReplicas": 1, "maxReplicas": 5,
                "metrics": [
                    {"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 60}}},
                    {"type": "Resource", "resource": {"name": "memory", "target": {"type": "AverageValue", "averageValue": "500Mi"}}},
                    {"type": "Pods", "pods": {"metric": {"name": "qps"}, "target": {"type": "AverageValue", "averageValue": "10"}}},
                    {"type": "Object", "object": {"describedObject": {"kind": "Ingress", "name": "main", "apiVersion": "networking.k8s.io/v1"}, "metric": {"name": "rps"}, "target": {"type": "Value", "value": "2k"}}},
                    {"type": "External", "external": {"metric": {"name": "queue", "selector": {"matchLabels": {"q": "jobs"}}}, "target": {"type": "AverageValue", "averageValue": "30"}}}
                ],
                "behavior": {"scaleDown": {"stabilizationWindowSeconds": 300}}},
            "status": {"currentReplicas": 2, "desiredReplicas": 2,
                "currentMetrics": [{"type": "Resource", "resource": {"name": "cpu", "current": {"averageUtilization": 40}}},
                                   {"type": "Pods", "pods": {"metric": {"name": "qps"}, "current": {"averageValue": "8"}}}],
                "conditions": [{"type": "AbleToScale", "status": "True"}]}});
        let v1 = hpa_v2_to_v1(v2.clone());
        assert_eq!(v1["spec"]["targetCPUUtilizationPercentage"], 60);
        assert_eq!(v1["status"]["currentCPUUtilizationPercentage"], 40);
        let other: Value = serde_json::from_str(
            v1["metadata"]["annotations"][METRICS_ANNOTATION]
                .as_str()
                .expect("metrics annotation"),
        )
        .expect("json");
        assert_eq!(
            other[0],
            json!({"type": "Resource", "resource": {"name": "memory", "targetAverageValue": "500Mi"}})
        );
        assert_eq!(
            other[1],
            json!({"type": "Pods", "pods": {"metricName": "qps", "targetAverageValue": "10"}})
        );
        assert_eq!(v1["metadata"]["annotations"]["team"], "web");
        assert_eq!(hpa_v1_to_v2(v1), v2);
    }

    #[test]
    fn hpa_v2_metrics_other_than_cpu_do_not_appear_in_v1() {
        let v2 = json!({"apiVersion": "autoscaling/v2", "spec": {"maxReplicas": 3, "metrics": [
            {"type": "Resource", "resource": {"name": "memory", "target": {"type": "Utilization", "averageUtilization": 80}}}]}});
        let v1 = hpa_v2_to_v1(v2);
        assert_eq!(
            v1,
            json!({"apiVersion": "autoscaling/v1", "spec": {"maxReplicas": 3}})
        );
    }

    #[test]
    fn events_rename_their_fields_both_ways() {
        let new = json!({"apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": "e"},
            "regarding": {"kind": "Pod", "name": "p"}, "note": "pulled", "reason": "Pulled", "type": "Normal",
            "reportingController": "kubelet", "reportingInstance": "node-1", "deprecatedCount": 2});
        let core = event_to_core(new.clone());
        assert_eq!(core["apiVersion"], "v1");
        assert_eq!(core["involvedObject"]["name"], "p");
        assert_eq!(core["message"], "pulled");
        assert_eq!(core["reportingComponent"], "kubelet");
        assert_eq!(core["count"], 2);
        assert!(core.get("note").is_none());
        assert_eq!(event_from_core(core), new);
    }
}
