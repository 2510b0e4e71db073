//! NodeResourcesFit: the node must have room for the pod's requests
//! (cpu, memory, ephemeral storage, extended resources, and one more pod),
//! and nodes are scored by how much would be left (`LeastAllocated`, the
//! default), used (`MostAllocated`) or by a utilization curve
//! (`RequestedToCapacityRatio`), over weighted resources.

use serde::Deserialize;

use crate::framework::types::{Resource, ResourceName};
use crate::framework::{
    CycleState, Filter, MAX_NODE_SCORE, NodeInfo, Plugin, PodInfo, Reasons, Score, Status,
};

pub const NAME: &str = "NodeResourcesFit";
/// Upstream's `ErrReasonTooManyPods`.
pub const TOO_MANY_PODS: &str = "Too many pods";

/// A resource and its weight in the score.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct ResourceWeight {
    pub name: String,
    #[serde(default = "one")]
    pub weight: i64,
}

fn one() -> i64 {
    1
}

/// A point of the `RequestedToCapacityRatio` curve: utilization (0..=100)
/// to score (0..=10).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub struct ShapePoint {
    pub utilization: i64,
    pub score: i64,
}

/// How nodes are scored (the plugin's `scoringStrategy`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Strategy {
    LeastAllocated,
    MostAllocated,
    RequestedToCapacityRatio(Vec<ShapePoint>),
}

#[derive(Debug, Clone)]
pub struct Fit {
    pub strategy: Strategy,
    pub resources: Vec<Weighted>,
}

/// A resource scored, its name resolved once, and its weight.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Weighted {
    pub name: ResourceName,
    pub weight: i64,
}

/// The resources of a plugin's arguments, resolved.
pub fn weighted(resources: &[ResourceWeight]) -> Vec<Weighted> {
    resources
        .iter()
        .map(|r| Weighted {
            name: ResourceName::from(r.name.as_str()),
            weight: r.weight,
        })
        .collect()
}

impl Default for Fit {
    fn default() -> Self {
        Fit {
            strategy: Strategy::LeastAllocated,
            resources: weighted(&default_resources()),
        }
    }
}

impl Fit {
    /// The plugin as its arguments configure it (defaults filled in).
    pub fn from_args(args: &crate::config::args::FitArgs) -> Self {
        let s = args.strategy();
        let strategy = match s.type_.as_str() {
            "MostAllocated" => Strategy::MostAllocated,
            "RequestedToCapacityRatio" => Strategy::RequestedToCapacityRatio(
                s.requested_to_capacity_ratio
                    .map(|r| r.shape)
                    .unwrap_or_default(),
            ),
            _ => Strategy::LeastAllocated,
        };
        Fit {
            strategy,
            resources: weighted(&s.resources),
        }
    }
}

/// cpu and memory, weight 1 each.
pub fn default_resources() -> Vec<ResourceWeight> {
    ["cpu", "memory"]
        .iter()
        .map(|n| ResourceWeight {
            name: n.to_string(),
            weight: 1,
        })
        .collect()
}

impl Plugin for Fit {
    fn name(&self) -> &'static str {
        NAME
    }
}

/// What does not fit: upstream's reasons, in its order.
pub fn insufficient(pod: &Resource, node: &NodeInfo) -> Reasons {
    let mut reasons = Reasons::new();
    if node.pods.len() as i64 + 1 > node.allocatable.allowed_pods {
        reasons.push(TOO_MANY_PODS);
    }
    let (a, r) = (&node.allocatable, &node.requested);
    for (reason, wanted, free) in [
        ("Insufficient cpu", pod.milli_cpu, a.milli_cpu - r.milli_cpu),
        ("Insufficient memory", pod.memory, a.memory - r.memory),
        (
            "Insufficient ephemeral-storage",
            pod.ephemeral_storage,
            a.ephemeral_storage - r.ephemeral_storage,
        ),
    ] {
        if wanted > 0 && wanted > free {
            reasons.push(reason);
        }
    }
    let free = |name: &str| node.allocatable.get(name) - node.requested.get(name);
    for (name, wanted) in &pod.scalar {
        if *wanted > 0 && *wanted > free(name) {
            reasons.push(format!("Insufficient {name}"));
        }
    }
    reasons
}

impl Filter for Fit {
    fn filter(&self, _: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        let reasons = insufficient(&pod.requests, node);
        if reasons.is_empty() {
            Status::success()
        } else {
            Status {
                code: crate::framework::Code::Unschedulable,
                reasons,
                plugin: NAME,
            }
        }
    }
}

/// What the node would have requested and can allocate of `resource`,
/// with the pod on it: cpu and memory count requests left unset at
/// upstream's defaults.
pub fn requested_and_allocatable(
    pod: &PodInfo,
    node: &NodeInfo,
    resource: &ResourceName,
    non_zero: bool,
) -> (i64, i64) {
    let allocatable = node.allocatable.amount(resource);
    let requested = if non_zero && matches!(resource, ResourceName::Cpu | ResourceName::Memory) {
        node.non_zero_requested.amount(resource) + pod.non_zero_requests.amount(resource)
    } else {
        node.requested.amount(resource) + pod.requests.amount(resource)
    };
    (requested, allocatable)
}

fn least_allocated(requested: i64, capacity: i64) -> i64 {
    if capacity == 0 || requested > capacity {
        return 0;
    }
    (capacity - requested) * MAX_NODE_SCORE / capacity
}

fn most_allocated(requested: i64, capacity: i64) -> i64 {
    if capacity == 0 {
        return 0;
    }
    requested.min(capacity) * MAX_NODE_SCORE / capacity
}

/// The curve's score at `utilization`, linear between its points, scaled
/// from 0..=10 to 0..=100 (upstream's `buildBrokenLinearFunction`).
fn shaped(shape: &[ShapePoint], utilization: i64) -> i64 {
    let scale = MAX_NODE_SCORE / 10;
    let Some(first) = shape.first() else {
        return 0;
    };
    if utilization <= first.utilization {
        return first.score * scale;
    }
    for pair in shape.windows(2) {
        let (a, b) = (pair[0], pair[1]);
        if utilization <= b.utilization {
            let (sa, sb) = (a.score * scale, b.score * scale);
            return sa
                + (sb - sa) * (utilization - a.utilization)
                    / (b.utilization - a.utilization).max(1);
        }
    }
    shape.last().map_or(0, |p| p.score * scale)
}

impl Score for Fit {
    fn score(&self, _: &CycleState, pod: &PodInfo, node: &NodeInfo) -> i64 {
        let (mut total, mut weights) = (0i64, 0i64);
        for r in &self.resources {
            let (requested, allocatable) = requested_and_allocatable(pod, node, &r.name, true);
            if allocatable == 0 {
                continue;
            }
            let score = match &self.strategy {
                Strategy::LeastAllocated => least_allocated(requested, allocatable),
                Strategy::MostAllocated => most_allocated(requested, allocatable),
                Strategy::RequestedToCapacityRatio(shape) => {
                    let utilization =
                        (requested * MAX_NODE_SCORE / allocatable).min(MAX_NODE_SCORE);
                    shaped(shape, utilization)
                }
            };
            total += score * r.weight;
            weights += r.weight;
        }
        if weights == 0 { 0 } else { total / weights }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    fn node(cpu: &str, memory: &str, pods: &str) -> NodeInfo {
        let n: k8s_openapi::api::core::v1::Node = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "n"},
            "status": {"allocatable": {"cpu": cpu, "memory": memory, "pods": pods, "example.com/gpu": "1"}},
        }))
        .expect("node");
        NodeInfo::new(Arc::new(n))
    }

    fn pod(requests: serde_json::Value) -> PodInfo {
        let p: k8s_openapi::api::core::v1::Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "n"},
            "spec": {"containers": [{"name": "c", "resources": {"requests": requests}}]},
        }))
        .expect("pod");
        PodInfo::new(Arc::new(p))
    }

    #[test]
    fn what_does_not_fit_is_named() {
        let mut n = node("2", "4Gi", "1");
        let fits = Fit::default();
        let state = CycleState::default();
        assert!(
            fits.filter(&state, &pod(serde_json::json!({"cpu": "1"})), &n)
                .is_success()
        );
        let status = fits.filter(
            &state,
            &pod(serde_json::json!({"cpu": "3", "memory": "8Gi", "example.com/gpu": "2"})),
            &n,
        );
        assert_eq!(
            status.reasons,
            [
                "Insufficient cpu",
                "Insufficient memory",
                "Insufficient example.com/gpu"
            ]
        );
        n.add_pod(Arc::new(pod(serde_json::json!({}))));
        let status = fits.filter(&state, &pod(serde_json::json!({})), &n);
        assert_eq!(status.reasons, [TOO_MANY_PODS]);
    }

    #[test]
    fn least_and_most_allocated() {
        let n = node("4", "8Gi", "110");
        let p = pod(serde_json::json!({"cpu": "1", "memory": "2Gi"}));
        let state = CycleState::default();
        // cpu: (4000-1000)*100/4000 = 75; memory: 75 → 75.
        assert_eq!(Fit::default().score(&state, &p, &n), 75);
        let most = Fit {
            strategy: Strategy::MostAllocated,
            ..Fit::default()
        };
        assert_eq!(most.score(&state, &p, &n), 25);
        let ratio = Fit {
            strategy: Strategy::RequestedToCapacityRatio(vec![
                ShapePoint {
                    utilization: 0,
                    score: 0,
                },
                ShapePoint {
                    utilization: 100,
                    score: 10,
                },
            ]),
            ..Fit::default()
        };
        assert_eq!(ratio.score(&state, &p, &n), 25);
    }

    #[test]
    fn pods_without_requests_count_upstreams_defaults_when_scoring() {
        let n = node("1", "1Gi", "110");
        let p = pod(serde_json::json!({}));
        // cpu: (1000-100)*100/1000 = 90; memory: (1024-200)*100/1024 = 80 → 85.
        assert_eq!(Fit::default().score(&CycleState::default(), &p, &n), 85);
    }
}
