//! Why a pod goes (or would go) where it does — beyond upstream: every
//! node with each Filter plugin's verdict and, where it fits, each Score
//! plugin's score (raw, normalized, weighted). The scheduler's own cycle
//! stops at a node's first rejection and looks at only enough nodes; this
//! runs every plugin on every node, with the same profile and the same
//! plugin code, so its answer is the scheduler's reasoning written out.
//!
//! `rudder explain pod NAME` builds a snapshot from the API (nodes and
//! bound pods) and prints [`Explanation`]'s table.

use std::fmt;
use std::sync::Arc;

use crate::framework::{Code, CycleState, NodeInfo, PodInfo, Snapshot, Status};
use crate::profile::Profile;

/// One plugin's score on one node.
#[derive(Debug, Clone)]
pub struct PluginScore {
    pub plugin: &'static str,
    pub raw: i64,
    pub normalized: i64,
    pub weight: i64,
}

/// One node's verdict.
#[derive(Debug, Clone)]
pub struct NodeVerdict {
    pub node: String,
    /// Each Filter plugin's answer, in order (all of them, not only the
    /// first rejection).
    pub filters: Vec<(&'static str, Status)>,
    /// Each Score plugin's score, when the node fits.
    pub scores: Vec<PluginScore>,
    pub total: i64,
}

impl NodeVerdict {
    pub fn fits(&self) -> bool {
        self.filters.iter().all(|(_, s)| s.is_success())
    }
}

/// The whole answer for one pod.
#[derive(Debug, Clone)]
pub struct Explanation {
    pub pod: String,
    pub scheduler: String,
    /// A PreFilter rejection: it stands for every node.
    pub pre_filter: Option<(&'static str, Status)>,
    pub nodes: Vec<NodeVerdict>,
}

/// Runs every PreFilter, then every Filter on every node, then PreScore
/// and Score over the nodes that fit.
pub fn explain(profile: &Profile, pod: &PodInfo, snapshot: &Snapshot) -> Explanation {
    let mut state = CycleState::default();
    let mut explanation = Explanation {
        pod: pod.key.clone(),
        scheduler: profile.scheduler_name.clone(),
        pre_filter: None,
        nodes: Vec::new(),
    };
    let mut allowed: Option<Vec<String>> = None;
    for plugin in &profile.pre_filter {
        let (result, status) = plugin.pre_filter(&mut state, pod, snapshot);
        match status.code {
            Code::Success => {}
            Code::Skip => state.skip_filter(plugin.name()),
            _ => {
                explanation.pre_filter = Some((plugin.name(), status));
                return explanation;
            }
        }
        if let Some(names) = result.node_names {
            allowed = Some(match allowed {
                None => names,
                Some(have) => have.into_iter().filter(|n| names.contains(n)).collect(),
            });
        }
    }
    let mut feasible: Vec<Arc<NodeInfo>> = Vec::new();
    for node in snapshot.nodes.iter() {
        let mut filters = Vec::new();
        if allowed
            .as_ref()
            .is_some_and(|names| !names.contains(&node.name))
        {
            filters.push((
                "PreFilter",
                Status::unresolvable("node(s) didn't satisfy the pod's PreFilter plugins"),
            ));
        } else {
            for plugin in &profile.filter {
                if state.skips_filter(plugin.name()) {
                    continue;
                }
                filters.push((plugin.name(), plugin.filter(&state, pod, node)));
            }
        }
        let verdict = NodeVerdict {
            node: node.name.clone(),
            filters,
            scores: Vec::new(),
            total: 0,
        };
        if verdict.fits() {
            feasible.push(node.clone());
        }
        explanation.nodes.push(verdict);
    }
    if feasible.is_empty() {
        return explanation;
    }
    for plugin in &profile.pre_score {
        if plugin.pre_score(&mut state, pod, &feasible, snapshot).code == Code::Skip {
            state.skip_score(plugin.name());
        }
    }
    state.write(
        crate::framework::types::SPREAD_KEY,
        crate::plugins::image_locality::Spread {
            total: snapshot.len(),
            image_nodes: snapshot.image_nodes.clone(),
        },
    );
    let mut per_node: Vec<Vec<PluginScore>> = vec![Vec::new(); feasible.len()];
    for (plugin, weight) in &profile.score {
        if state.skips_score(plugin.name()) {
            continue;
        }
        let raw: Vec<i64> = feasible
            .iter()
            .map(|n| plugin.score(&state, pod, n))
            .collect();
        let mut normalized = raw.clone();
        plugin.normalize(&state, pod, &mut normalized);
        for (i, scores) in per_node.iter_mut().enumerate() {
            scores.push(PluginScore {
                plugin: plugin.name(),
                raw: raw[i],
                normalized: normalized[i],
                weight: *weight,
            });
        }
    }
    for (node, scores) in feasible.iter().zip(per_node) {
        if let Some(v) = explanation.nodes.iter_mut().find(|v| v.node == node.name) {
            v.total = scores.iter().map(|s| s.normalized * s.weight).sum();
            v.scores = scores;
        }
    }
    explanation
}

impl fmt::Display for Explanation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let fitting = self.nodes.iter().filter(|n| n.fits()).count();
        writeln!(
            f,
            "Pod {} (scheduler {}): {fitting}/{} nodes fit",
            self.pod,
            self.scheduler,
            self.nodes.len()
        )?;
        if let Some((plugin, status)) = &self.pre_filter {
            return writeln!(f, "  every node: {plugin}: {}", status.message());
        }
        let best = self
            .nodes
            .iter()
            .filter(|n| n.fits())
            .map(|n| n.total)
            .max();
        let mut nodes: Vec<&NodeVerdict> = self.nodes.iter().collect();
        nodes.sort_by_key(|n| (!n.fits(), -n.total, n.node.clone()));
        for n in nodes {
            if n.fits() {
                let mark = if Some(n.total) == best { " (best)" } else { "" };
                writeln!(f, "  {}: fits, score {}{mark}", n.node, n.total)?;
                for s in &n.scores {
                    writeln!(
                        f,
                        "      {:<32} {:>4} → {:>3} × {}",
                        s.plugin, s.raw, s.normalized, s.weight
                    )?;
                }
            } else {
                writeln!(f, "  {}: does not fit", n.node)?;
                for (plugin, status) in n.filters.iter().filter(|(_, s)| !s.is_success()) {
                    writeln!(f, "      {plugin}: {}", status.message())?;
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::Cache;

    fn node(
        name: &str,
        cpu: &str,
        taints: serde_json::Value,
    ) -> Arc<k8s_openapi::api::core::v1::Node> {
        Arc::new(
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": name},
                "spec": {"taints": taints},
                "status": {"allocatable": {"cpu": cpu, "memory": "4Gi", "pods": "10"}},
            }))
            .expect("node"),
        )
    }

    #[test]
    fn every_plugin_on_every_node() {
        let mut cache = Cache::new();
        cache.set_node(node("a", "1", serde_json::json!([])));
        cache.set_node(node("b", "4", serde_json::json!([])));
        cache.set_node(node(
            "c",
            "4",
            serde_json::json!([{"key": "k", "value": "v", "effect": "NoSchedule"}]),
        ));
        let pod: k8s_openapi::api::core::v1::Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "default"},
            "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "2"}}}]},
        }))
        .expect("pod");
        let info = PodInfo::new(Arc::new(pod));
        let e = explain(&Profile::default_profile(None), &info, &cache.snapshot());
        let text = e.to_string();
        assert!(
            text.starts_with("Pod default/p (scheduler default-scheduler): 1/3 nodes fit"),
            "{text}"
        );
        assert!(text.contains("  b: fits, score"), "{text}");
        assert!(
            text.contains("NodeResourcesFit: Insufficient cpu"),
            "{text}"
        );
        // Node c fails the taint and nothing else: every filter was run.
        let c = e.nodes.iter().find(|n| n.node == "c").expect("c");
        let rejected: Vec<&str> = c
            .filters
            .iter()
            .filter(|(_, s)| !s.is_success())
            .map(|(p, _)| *p)
            .collect();
        assert_eq!(rejected, ["TaintToleration"]);
    }
}
