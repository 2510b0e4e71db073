//! The LimitRanger admission's decisions (upstream's
//! `plugin/pkg/admission/limitranger`): the defaults a namespace's
//! LimitRanges give a new pod's containers, and the minimums, maximums and
//! limit-to-request ratios a pod (per container, and summed per pod) or a
//! claim must keep. The API server loads the ranges and applies these.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::quantity::Quantity;
use crate::quota::{ResourceList, list};

/// The annotation that says what the defaults filled in.
pub const ANNOTATION: &str = "kubernetes.io/limit-ranger";

/// Fills each container's missing limits and requests from the ranges'
/// Container defaults (later ranges win, as upstream's map merge), and
/// records what was set in [`ANNOTATION`].
pub fn default_pod(ranges: &[Value], pod: &mut Value) {
    let (mut requests, mut limits) = (Map::new(), Map::new());
    for range in ranges {
        for item in items(range).filter(|i| kind(i) == "Container") {
            requests.extend(raw(item, "defaultRequest"));
            limits.extend(raw(item, "default"));
        }
    }
    if requests.is_empty() && limits.is_empty() {
        return;
    }
    let mut notes = Vec::new();
    for (key, what) in [
        ("containers", "container"),
        ("initContainers", "init container"),
    ] {
        let Some(containers) = pod
            .pointer_mut(&format!("/spec/{key}"))
            .and_then(Value::as_array_mut)
        else {
            continue;
        };
        for container in containers {
            let name = container
                .get("name")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string();
            let set_limits = fill(container, "limits", &limits);
            let set_requests = fill(container, "requests", &requests);
            if !set_requests.is_empty() {
                notes.push(format!(
                    "{} request for {what} {name}",
                    set_requests.join(", ")
                ));
            }
            if !set_limits.is_empty() {
                notes.push(format!("{} limit for {what} {name}", set_limits.join(", ")));
            }
        }
    }
    if !notes.is_empty() {
        let annotations = &mut pod["metadata"]["annotations"];
        if !annotations.is_object() {
            *annotations = json!({});
        }
        annotations[ANNOTATION] = json!(format!("LimitRanger plugin set: {}", notes.join("; ")));
    }
}

type Map = BTreeMap<String, Value>;

fn items(range: &Value) -> impl Iterator<Item = &Value> {
    range
        .pointer("/spec/limits")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
}

fn kind(item: &Value) -> &str {
    item.get("type").and_then(Value::as_str).unwrap_or_default()
}

fn raw(item: &Value, part: &str) -> Map {
    item.get(part)
        .and_then(Value::as_object)
        .map(|m| m.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
        .unwrap_or_default()
}

/// Sets in `container.resources.<part>` each default it lacks; returns the
/// names set, sorted.
fn fill(container: &mut Value, part: &str, defaults: &Map) -> Vec<String> {
    if defaults.is_empty() {
        return Vec::new();
    }
    let resources = &mut container["resources"];
    if !resources.is_object() {
        *resources = json!({});
    }
    let target = &mut resources[part];
    if !target.is_object() {
        *target = json!({});
    }
    let target = target.as_object_mut().expect("object");
    let mut set = Vec::new();
    for (name, value) in defaults {
        if !target.contains_key(name) {
            target.insert(name.clone(), value.clone());
            set.push(name.clone());
        }
    }
    set
}

/// What the first range a pod breaks says: each broken bound, as
/// upstream's aggregate error prints them (one alone, or `[a, b]`).
pub fn validate_pod(ranges: &[Value], pod: &Value) -> Result<(), String> {
    for range in ranges {
        let mut errors = Vec::new();
        for item in items(range) {
            match kind(item) {
                "Container" => {
                    for key in ["containers", "initContainers"] {
                        for c in pod
                            .pointer(&format!("/spec/{key}"))
                            .and_then(Value::as_array)
                            .into_iter()
                            .flatten()
                        {
                            let requests = list(c.pointer("/resources/requests"));
                            let limits = list(c.pointer("/resources/limits"));
                            check(item, "Container", &requests, &limits, &mut errors);
                        }
                    }
                }
                "Pod" => {
                    let (requests, limits) = pod_totals(pod);
                    check(item, "Pod", &requests, &limits, &mut errors);
                }
                _ => {}
            }
        }
        aggregate(errors)?;
    }
    Ok(())
}

/// The PersistentVolumeClaim bounds on a claim's requested storage.
pub fn validate_claim(ranges: &[Value], claim: &Value) -> Result<(), String> {
    for range in ranges {
        let mut errors = Vec::new();
        let requests = list(claim.pointer("/spec/resources/requests"));
        for item in items(range).filter(|i| kind(i) == "PersistentVolumeClaim") {
            for (name, min) in list(item.get("min")) {
                min_bound(
                    "PersistentVolumeClaim",
                    &name,
                    &min,
                    &requests,
                    &ResourceList::new(),
                    &mut errors,
                );
            }
            for (name, max) in list(item.get("max")) {
                let what = format!("maximum {name} usage per PersistentVolumeClaim is {max}");
                match requests.get(&name) {
                    None => errors.push(format!("{what}.  No request is specified")),
                    Some(r) if r.milli_value() > max.milli_value() => {
                        errors.push(format!("{what}, but request is {r}"));
                    }
                    Some(_) => {}
                }
            }
        }
        aggregate(errors)?;
    }
    Ok(())
}

fn aggregate(mut errors: Vec<String>) -> Result<(), String> {
    let mut seen = std::collections::BTreeSet::new();
    errors.retain(|e| seen.insert(e.clone()));
    match errors.len() {
        0 => Ok(()),
        1 => Err(errors.remove(0)),
        _ => Err(format!("[{}]", errors.join(", "))),
    }
}

/// A pod's requests and limits as the Pod limit type counts them: the
/// containers' sum (a resource only when every container names it), and
/// each init container where larger.
fn pod_totals(pod: &Value) -> (ResourceList, ResourceList) {
    let containers = |key: &str| -> Vec<&Value> {
        pod.pointer(&format!("/spec/{key}"))
            .and_then(Value::as_array)
            .map(|a| a.iter().collect())
            .unwrap_or_default()
    };
    let part = |c: &Value, part: &str| list(c.pointer(&format!("/resources/{part}")));
    let sum_all = |part_name: &str| -> ResourceList {
        let lists: Vec<ResourceList> = containers("containers")
            .into_iter()
            .map(|c| part(c, part_name))
            .collect();
        let mut names: Vec<&String> = lists.iter().flat_map(|l| l.keys()).collect();
        names.sort();
        names.dedup();
        names
            .into_iter()
            .filter(|n| lists.iter().all(|l| l.contains_key(*n)))
            .map(|n| {
                let total = lists.iter().fold(Quantity::zero(), |sum, l| sum.add(&l[n]));
                (n.clone(), total)
            })
            .collect()
    };
    let (mut requests, mut limits) = (sum_all("requests"), sum_all("limits"));
    for c in containers("initContainers") {
        for (into, name) in [(&mut requests, "requests"), (&mut limits, "limits")] {
            for (resource, q) in part(c, name) {
                into.entry(resource)
                    .and_modify(|have| *have = have.max(q))
                    .or_insert(q);
            }
        }
    }
    (requests, limits)
}

/// One limit item's min, max and ratio bounds over one set of requests
/// and limits, upstream's messages word for word.
fn check(
    item: &Value,
    kind: &str,
    requests: &ResourceList,
    limits: &ResourceList,
    errors: &mut Vec<String>,
) {
    for (name, min) in list(item.get("min")) {
        min_bound(kind, &name, &min, requests, limits, errors);
    }
    for (name, max) in list(item.get("max")) {
        let what = format!("maximum {name} usage per {kind} is {max}");
        match (limits.get(&name), requests.get(&name)) {
            (None, _) => errors.push(format!("{what}.  No limit is specified")),
            (Some(l), _) if l.milli_value() > max.milli_value() => {
                errors.push(format!("{what}, but limit is {l}"));
            }
            (_, Some(r)) if r.milli_value() > max.milli_value() => {
                errors.push(format!("{what}, but request is {r}"));
            }
            _ => {}
        }
    }
    for (name, ratio) in list(item.get("maxLimitRequestRatio")) {
        let what = format!("{name} max limit to request ratio per {kind} is {ratio}");
        let request = requests.get(&name).map(Quantity::milli_value);
        let limit = limits.get(&name).map(Quantity::milli_value);
        match (request, limit) {
            (None | Some(0), _) => errors.push(format!(
                "{what}, but no request is specified or request is 0"
            )),
            (_, None | Some(0)) => {
                errors.push(format!("{what}, but no limit is specified or limit is 0"))
            }
            (Some(r), Some(l)) => {
                let observed = l as f64 / r as f64;
                if observed * 1000.0 > ratio.milli_value() as f64 {
                    errors.push(format!("{what}, but provided ratio is {observed:.6}"));
                }
            }
        }
    }
}

fn min_bound(
    kind: &str,
    name: &str,
    min: &Quantity,
    requests: &ResourceList,
    limits: &ResourceList,
    errors: &mut Vec<String>,
) {
    let what = format!("minimum {name} usage per {kind} is {min}");
    match (requests.get(name), limits.get(name)) {
        (None, _) => errors.push(format!("{what}.  No request is specified")),
        (Some(r), _) if r.milli_value() < min.milli_value() => {
            errors.push(format!("{what}, but request is {r}"));
        }
        (_, Some(l)) if l.milli_value() < min.milli_value() => {
            errors.push(format!("{what}, but limit is {l}"));
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn range(limits: Value) -> Value {
        json!({"metadata": {"name": "lr"}, "spec": {"limits": limits}})
    }

    #[test]
    fn defaults_fill_what_each_container_lacks_and_are_annotated() {
        let ranges = [range(json!([{
            "type": "Container",
            "default": {"cpu": "500m", "memory": "256Mi"},
            "defaultRequest": {"cpu": "100m", "memory": "128Mi"},
        }]))];
        let mut pod = json!({"metadata": {"name": "p"}, "spec": {"containers": [
            {"name": "a", "resources": {"limits": {"cpu": "1"}}},
            {"name": "b"},
        ]}});
        default_pod(&ranges, &mut pod);
        assert_eq!(
            pod["spec"]["containers"][0]["resources"],
            json!({"limits": {"cpu": "1", "memory": "256Mi"}, "requests": {"cpu": "100m", "memory": "128Mi"}})
        );
        assert_eq!(
            pod["spec"]["containers"][1]["resources"]["limits"],
            json!({"cpu": "500m", "memory": "256Mi"})
        );
        assert_eq!(
            pod["metadata"]["annotations"][ANNOTATION],
            "LimitRanger plugin set: cpu, memory request for container a; memory limit for container a; cpu, memory request for container b; cpu, memory limit for container b"
        );
    }

    #[test]
    fn bounds_per_container_and_per_pod() {
        let ranges = [range(json!([
            {"type": "Container", "min": {"cpu": "100m"}, "max": {"cpu": "1"}},
            {"type": "Pod", "max": {"memory": "1Gi"}},
        ]))];
        let pod = |cpu_req: &str, cpu_lim: &str, mem: &str| {
            json!({"spec": {"containers": [
                {"name": "a", "resources": {"requests": {"cpu": cpu_req}, "limits": {"cpu": cpu_lim, "memory": mem}}},
                {"name": "b", "resources": {"requests": {"cpu": cpu_req}, "limits": {"cpu": cpu_lim, "memory": mem}}},
            ]}})
        };
        assert_eq!(validate_pod(&ranges, &pod("200m", "500m", "256Mi")), Ok(()));
        assert_eq!(
            validate_pod(&ranges, &pod("50m", "500m", "256Mi")),
            Err("minimum cpu usage per Container is 100m, but request is 50m".into())
        );
        assert_eq!(
            validate_pod(&ranges, &pod("200m", "2", "600Mi")),
            Err("[maximum cpu usage per Container is 1, but limit is 2, maximum memory usage per Pod is 1Gi, but limit is 1200Mi]".into())
        );
        let bare = json!({"spec": {"containers": [{"name": "a"}]}});
        assert_eq!(
            validate_pod(&ranges, &bare),
            Err("[minimum cpu usage per Container is 100m.  No request is specified, maximum cpu usage per Container is 1.  No limit is specified, maximum memory usage per Pod is 1Gi.  No limit is specified]".into())
        );
    }

    #[test]
    fn ratios_and_claims() {
        let ranges = [range(json!([
            {"type": "Container", "maxLimitRequestRatio": {"cpu": "2"}},
            {"type": "PersistentVolumeClaim", "min": {"storage": "1Gi"}, "max": {"storage": "10Gi"}},
        ]))];
        let pod = json!({"spec": {"containers": [
            {"name": "a", "resources": {"requests": {"cpu": "100m"}, "limits": {"cpu": "500m"}}},
        ]}});
        assert_eq!(
            validate_pod(&ranges, &pod),
            Err(
                "cpu max limit to request ratio per Container is 2, but provided ratio is 5.000000"
                    .into()
            )
        );
        let claim = |size: &str| json!({"spec": {"resources": {"requests": {"storage": size}}}});
        assert_eq!(validate_claim(&ranges, &claim("5Gi")), Ok(()));
        assert_eq!(
            validate_claim(&ranges, &claim("20Gi")),
            Err(
                "maximum storage usage per PersistentVolumeClaim is 10Gi, but request is 20Gi"
                    .into()
            )
        );
    }
}
