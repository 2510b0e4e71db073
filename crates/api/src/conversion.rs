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
    pub to_storage: fn(Value) -> Value,
    pub from_storage: fn(Value) -> Value,
}

fn take(object: &mut Value, field: &str) -> Option<Value> {
    object.as_object_mut().and_then(|m| m.remove(field))
}

fn is_cpu_utilization(metric: &Value) -> bool {
    metric.get("type").and_then(Value::as_str) == Some("Resource")
        && metric.pointer("/resource/name").and_then(Value::as_str) == Some("cpu")
}

/// autoscaling/v1 → autoscaling/v2: the CPU target becomes a Resource metric.
pub fn hpa_v1_to_v2(mut hpa: Value) -> Value {
    hpa["apiVersion"] = json!("autoscaling/v2");
    if let Some(spec) = hpa.get_mut("spec").filter(|s| s.is_object())
        && let Some(target) = take(spec, "targetCPUUtilizationPercentage").filter(|t| !t.is_null())
    {
        spec["metrics"] = json!([{"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": target}}}]);
    }
    if let Some(status) = hpa.get_mut("status").filter(|s| s.is_object())
        && let Some(current) =
            take(status, "currentCPUUtilizationPercentage").filter(|c| !c.is_null())
    {
        status["currentMetrics"] = json!([{"type": "Resource", "resource": {"name": "cpu", "current": {"averageUtilization": current}}}]);
    }
    hpa
}

/// autoscaling/v2 → autoscaling/v1: the CPU utilization metric becomes
/// `targetCPUUtilizationPercentage`; v1 has no place for other metrics.
pub fn hpa_v2_to_v1(mut hpa: Value) -> Value {
    hpa["apiVersion"] = json!("autoscaling/v1");
    if let Some(spec) = hpa.get_mut("spec").filter(|s| s.is_object()) {
        let metrics = take(spec, "metrics")
            .and_then(|m| m.as_array().cloned())
            .unwrap_or_default();
        take(spec, "behavior");
        if let Some(target) = metrics
            .iter()
            .find(|m| is_cpu_utilization(m))
            .and_then(|m| m.pointer("/resource/target/averageUtilization"))
        {
            spec["targetCPUUtilizationPercentage"] = target.clone();
        }
    }
    if let Some(status) = hpa.get_mut("status").filter(|s| s.is_object()) {
        let metrics = take(status, "currentMetrics")
            .and_then(|m| m.as_array().cloned())
            .unwrap_or_default();
        take(status, "conditions");
        if let Some(current) = metrics
            .iter()
            .find(|m| is_cpu_utilization(m))
            .and_then(|m| m.pointer("/resource/current/averageUtilization"))
        {
            status["currentCPUUtilizationPercentage"] = current.clone();
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
    to_storage: hpa_v1_to_v2,
    from_storage: hpa_v2_to_v1,
};
pub const EVENTS_V1: Conversion = Conversion {
    storage_api_version: "v1",
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
        assert_eq!(hpa_v2_to_v1(v2), v1);
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
