//! One scheduling cycle, pure (upstream's `schedulePod` in
//! `schedule_one.go`): PreFilter, Filter over enough nodes
//! (`percentageOfNodesToScore`, adaptive by default), PreScore, Score
//! (normalized, weighted), and the choice of a node — or, when none fits,
//! the diagnosis that becomes upstream's `FailedScheduling` message.
//! The scheduler ([`crate::scheduler`]) does what follows: Reserve, the
//! binding, status and events.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use rand::Rng;

use crate::framework::{
    Code, CycleState, Handle, NodeInfo, PodInfo, PostFilterResult, Snapshot, Status,
};
use crate::profile::Profile;

/// Below this many nodes, all are looked at (`minFeasibleNodesToFind`).
pub const MIN_FEASIBLE_NODES: usize = 100;
/// The adaptive percentage never goes below this
/// (`minFeasibleNodesPercentageToFind`).
pub const MIN_FEASIBLE_PERCENTAGE: usize = 5;

/// How many feasible nodes to find before scoring
/// (`numFeasibleNodesToFind`): all below 100 nodes, else the configured
/// percentage, or 50 % less 1 % per 125 nodes (at least 5 %), at least 100.
pub fn feasible_nodes_to_find(percentage: Option<u32>, all: usize) -> usize {
    if all < MIN_FEASIBLE_NODES {
        return all;
    }
    let percentage = match percentage.filter(|p| *p > 0) {
        Some(p) => p as usize,
        None => 50usize
            .saturating_sub(all / 125)
            .max(MIN_FEASIBLE_PERCENTAGE),
    };
    (all * percentage.min(100) / 100).max(MIN_FEASIBLE_NODES)
}

/// Why no node fit (upstream's `FitError` and its `Diagnosis`).
#[derive(Debug, Clone, Default)]
pub struct FitError {
    pub all_nodes: usize,
    /// The status of each node that was rejected.
    pub statuses: HashMap<String, Status>,
    /// A PreFilter's rejection, which stands for every node.
    pub pre_filter: Option<Status>,
    /// The nodes a PreFilter left out, and why.
    pub absent: Option<(usize, Status)>,
    /// What PostFilter (preemption) said.
    pub post_filter: Option<String>,
    /// The plugins that rejected the pod.
    pub plugins: Vec<&'static str>,
}

impl FitError {
    /// Whether preemption could help: some node was rejected for a reason
    /// other than an unresolvable one.
    pub fn preemption_may_help(&self) -> bool {
        self.pre_filter.is_none()
            && self
                .statuses
                .values()
                .any(|s| s.code == Code::Unschedulable)
    }

    /// Upstream's message: `0/3 nodes are available: 1 Insufficient cpu,
    /// 2 node(s) had untolerated taint {k: v}. preemption: …`.
    pub fn message(&self) -> String {
        let mut message = format!("0/{} nodes are available:", self.all_nodes);
        if let Some(pre) = &self.pre_filter {
            message.push_str(&format!(" {}.", pre.message()));
        } else {
            let mut reasons: BTreeMap<&str, usize> = BTreeMap::new();
            for status in self.statuses.values() {
                for reason in &status.reasons {
                    *reasons.entry(reason).or_default() += 1;
                }
            }
            if let Some((count, status)) = &self.absent {
                for reason in &status.reasons {
                    *reasons.entry(reason).or_default() += count;
                }
            }
            let mut histogram: Vec<String> = reasons
                .iter()
                .map(|(reason, count)| format!("{count} {reason}"))
                .collect();
            histogram.sort();
            if !histogram.is_empty() {
                message.push_str(&format!(" {}.", histogram.join(", ")));
            }
        }
        if let Some(post) = &self.post_filter {
            message.push_str(&format!(" {post}"));
        }
        message
    }
}

/// What a successful cycle chose.
#[derive(Debug, Clone)]
pub struct Chosen {
    pub node: String,
    /// Nodes filtered, and found feasible.
    pub evaluated: usize,
    pub feasible: usize,
}

/// The outcome of one cycle.
#[derive(Debug)]
pub enum Decision {
    Fit(Chosen),
    NoFit(Box<FitError>),
    /// A plugin failed (not a rejection): retried after backoff.
    Error(String),
}

/// Runs PreFilter, Filter, PreScore and Score for `pod` over `snapshot`,
/// starting the node walk at `*start` (moved on past the nodes looked at,
/// so successive pods spread their search).
pub fn schedule(
    profile: &Profile,
    state: &mut CycleState,
    pod: &PodInfo,
    snapshot: &Snapshot,
    start: &mut usize,
) -> Decision {
    let all = snapshot.len();
    if all == 0 {
        return Decision::NoFit(Box::new(FitError {
            all_nodes: 0,
            pre_filter: Some(Status::unresolvable("no nodes available to schedule pods")),
            ..Default::default()
        }));
    }
    // PreFilter: checks, state for Filter, and maybe fewer nodes.
    let mut allowed: Option<Vec<String>> = None;
    let mut narrowed_by: Vec<&'static str> = Vec::new();
    for plugin in &profile.pre_filter {
        let (result, status) = plugin.pre_filter(state, pod, snapshot);
        match status.code {
            Code::Success => {}
            Code::Skip => {
                state.skip_filter(plugin.name());
                continue;
            }
            Code::Error => return Decision::Error(status.message()),
            _ => {
                return Decision::NoFit(Box::new(FitError {
                    all_nodes: all,
                    plugins: vec![plugin.name()],
                    pre_filter: Some(status.by(plugin.name())),
                    ..Default::default()
                }));
            }
        }
        if let Some(names) = result.node_names {
            narrowed_by.push(plugin.name());
            allowed = Some(match allowed {
                None => names,
                Some(have) => have.into_iter().filter(|n| names.contains(n)).collect(),
            });
        }
    }
    // The nodes to walk: all, or those PreFilter allowed.
    let candidates: Vec<&Arc<NodeInfo>> = match &allowed {
        Some(names) => names.iter().filter_map(|n| snapshot.get(n)).collect(),
        None => Vec::new(),
    };
    let absent = allowed.as_ref().map(|_| {
        (
            all - candidates.len(),
            Status::unresolvable(format!(
                "node(s) didn't satisfy plugin(s) [{}]",
                narrowed_by.join(" ")
            )),
        )
    });
    let walk = |i: usize| -> &Arc<NodeInfo> {
        if allowed.is_some() {
            candidates[i]
        } else {
            &snapshot.nodes[i]
        }
    };
    let count = if allowed.is_some() {
        candidates.len()
    } else {
        all
    };
    // A nominated node (after preemption) is tried first.
    let nominated = pod
        .pod
        .status
        .as_ref()
        .and_then(|s| s.nominated_node_name.as_deref())
        .and_then(|n| snapshot.get(n));
    if let Some(node) = nominated
        && profile
            .filter_with_nominated(state, pod, node, snapshot.nominated_to(&node.name))
            .is_success()
    {
        return Decision::Fit(Chosen {
            node: node.name.clone(),
            evaluated: 1,
            feasible: 1,
        });
    }
    // Filter until enough feasible nodes are found. The plugins PreFilter
    // did not skip are listed once, not looked up per node; rejections are
    // kept by position and named only if no node fits.
    let filters: Vec<&Arc<dyn crate::framework::Filter>> = profile
        .filter
        .iter()
        .filter(|p| !state.skips_filter(p.name()))
        .collect();
    let no_nominations = snapshot.nominated.is_empty();
    let wanted = feasible_nodes_to_find(profile.percentage_of_nodes_to_score, count);
    let mut feasible: Vec<Arc<NodeInfo>> = Vec::with_capacity(wanted.min(count));
    let mut rejected: Vec<(&Arc<NodeInfo>, Status)> = Vec::new();
    let begin = if count == 0 { 0 } else { *start % count };
    let mut looked = 0;
    while looked < count && feasible.len() < wanted {
        let node = walk((begin + looked) % count);
        looked += 1;
        let status = if no_nominations {
            filters
                .iter()
                .map(|p| (p, p.filter(state, pod, node)))
                .find(|(_, s)| !s.is_success())
                .map_or_else(Status::success, |(p, s)| s.by(p.name()))
        } else {
            profile.filter_with_nominated(state, pod, node, snapshot.nominated_to(&node.name))
        };
        match status.code {
            Code::Success => feasible.push(node.clone()),
            Code::Error => return Decision::Error(status.message()),
            _ => rejected.push((node, status)),
        }
    }
    if count > 0 {
        *start = (begin + looked) % count;
    }
    if feasible.is_empty() {
        let statuses: HashMap<String, Status> = rejected
            .into_iter()
            .map(|(node, status)| (node.name.clone(), status))
            .collect();
        let mut plugins: Vec<&'static str> = statuses.values().map(|s| s.plugin).collect();
        plugins.sort();
        plugins.dedup();
        return Decision::NoFit(Box::new(FitError {
            all_nodes: all,
            statuses,
            absent,
            plugins,
            ..Default::default()
        }));
    }
    if feasible.len() == 1 {
        return Decision::Fit(Chosen {
            node: feasible[0].name.clone(),
            evaluated: looked,
            feasible: 1,
        });
    }
    match score(profile, state, pod, &feasible, snapshot) {
        Ok(totals) => {
            let node = select_host(&feasible, &totals);
            Decision::Fit(Chosen {
                node,
                evaluated: looked,
                feasible: feasible.len(),
            })
        }
        Err(message) => Decision::Error(message),
    }
}

/// Every Filter plugin in order, stopping at the first that rejects.
pub fn run_filters(
    profile: &Profile,
    state: &CycleState,
    pod: &PodInfo,
    node: &NodeInfo,
) -> Status {
    for plugin in &profile.filter {
        if state.skips_filter(plugin.name()) {
            continue;
        }
        let status = plugin.filter(state, pod, node);
        if !status.is_success() {
            return status.by(plugin.name());
        }
    }
    Status::success()
}

impl Handle for Profile {
    fn add_pod(&self, state: &mut CycleState, pod: &PodInfo, added: &PodInfo, node: &NodeInfo) {
        for plugin in &self.pre_filter {
            if !state.skips_filter(plugin.name()) {
                plugin.add_pod(state, pod, added, node);
            }
        }
    }

    fn remove_pod(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        removed: &PodInfo,
        node: &NodeInfo,
    ) {
        for plugin in &self.pre_filter {
            if !state.skips_filter(plugin.name()) {
                plugin.remove_pod(state, pod, removed, node);
            }
        }
    }

    /// Twice when pods of the same or higher priority are nominated to the
    /// node: once with them counted as if there (the pod must not take the
    /// room freed for them), then without (they may land elsewhere, and
    /// some filters, pod affinity, pass only without them). No copy is
    /// made when none is nominated.
    fn filter_with_nominated(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        node: &NodeInfo,
        nominated: &[Arc<PodInfo>],
    ) -> Status {
        let mut ahead = nominated
            .iter()
            .filter(|n| n.key != pod.key && n.priority() >= pod.priority())
            .peekable();
        if ahead.peek().is_none() {
            return run_filters(self, state, pod, node);
        }
        let (mut with_state, mut with_node) = (state.clone_state(), node.clone());
        for added in ahead {
            with_node.add_pod(added.clone());
            self.add_pod(&mut with_state, pod, added, &with_node);
        }
        let status = run_filters(self, &with_state, pod, &with_node);
        if !status.is_success() {
            return status;
        }
        run_filters(self, state, pod, node)
    }
}

/// Each PostFilter plugin until one succeeds or gives up for good
/// (upstream's `RunPostFilterPlugins`): the reasons of those that could
/// not help are joined, and the last nomination one made is kept.
pub fn run_post_filter(
    profile: &Profile,
    state: &CycleState,
    pod: &PodInfo,
    snapshot: &Snapshot,
    statuses: &HashMap<String, Status>,
) -> (PostFilterResult, Status) {
    let mut kept = PostFilterResult::default();
    let mut reasons = crate::framework::Reasons::new();
    let mut rejector = "";
    for plugin in &profile.post_filter {
        let (result, status) = plugin.post_filter(profile, state, pod, snapshot, statuses);
        match status.code {
            Code::Unschedulable => {
                if result.nominated_node.is_some() {
                    kept = result;
                }
                reasons.extend(status.reasons);
                if rejector.is_empty() {
                    rejector = plugin.name();
                }
            }
            _ => return (result, status.by(plugin.name())),
        }
    }
    let status = Status {
        code: Code::Unschedulable,
        reasons,
        plugin: rejector,
    };
    (kept, status)
}

/// PreScore, then each Score plugin's normalized scores times its weight,
/// summed per node.
pub fn score(
    profile: &Profile,
    state: &mut CycleState,
    pod: &PodInfo,
    nodes: &[Arc<NodeInfo>],
    snapshot: &Snapshot,
) -> Result<Vec<i64>, String> {
    for plugin in &profile.pre_score {
        let status = plugin.pre_score(state, pod, nodes, snapshot);
        match status.code {
            Code::Success => {}
            Code::Skip => state.skip_score(plugin.name()),
            _ => return Err(status.message()),
        }
    }
    state.write(
        crate::framework::types::SPREAD_KEY,
        crate::plugins::image_locality::Spread {
            total: snapshot.len(),
            image_nodes: snapshot.image_nodes.clone(),
        },
    );
    let mut totals = vec![0i64; nodes.len()];
    let mut scores = vec![0i64; nodes.len()];
    for (plugin, weight) in &profile.score {
        if state.skips_score(plugin.name()) {
            continue;
        }
        for (i, node) in nodes.iter().enumerate() {
            scores[i] = plugin.score(state, pod, node);
        }
        plugin.normalize(state, pod, &mut scores);
        for (total, s) in totals.iter_mut().zip(&scores) {
            *total += s * weight;
        }
    }
    Ok(totals)
}

/// The highest-scoring node; among equals, one at random (reservoir
/// sampling, as upstream's `selectHost`).
pub fn select_host(nodes: &[Arc<NodeInfo>], totals: &[i64]) -> String {
    let mut rng = rand::rng();
    let (mut best, mut best_score, mut ties) = (0usize, i64::MIN, 0u32);
    for (i, score) in totals.iter().enumerate() {
        if *score > best_score {
            (best, best_score, ties) = (i, *score, 1);
        } else if *score == best_score {
            ties += 1;
            if rng.random_range(0..ties) == 0 {
                best = i;
            }
        }
    }
    nodes[best].name.clone()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upstreams_adaptive_percentage() {
        assert_eq!(feasible_nodes_to_find(None, 50), 50);
        assert_eq!(feasible_nodes_to_find(None, 100), 100);
        // 50 - 5000/125 = 10 %.
        assert_eq!(feasible_nodes_to_find(None, 5000), 500);
        // Never under 5 %.
        assert_eq!(feasible_nodes_to_find(None, 10_000), 500);
        assert_eq!(feasible_nodes_to_find(Some(100), 5000), 5000);
        assert_eq!(feasible_nodes_to_find(Some(1), 500), 100);
    }

    #[test]
    fn the_message_counts_reasons_per_node() {
        let mut statuses = HashMap::new();
        statuses.insert("a".to_string(), Status::unschedulable("Insufficient cpu"));
        statuses.insert(
            "b".to_string(),
            Status::unresolvable("node(s) had untolerated taint {k: v}"),
        );
        statuses.insert(
            "c".to_string(),
            Status::unresolvable("node(s) had untolerated taint {k: v}"),
        );
        let error = FitError {
            all_nodes: 3,
            statuses,
            post_filter: Some("preemption: 0/3 nodes are available: 1 No preemption victims found for incoming pod, 2 Preemption is not helpful for scheduling.".into()),
            ..Default::default()
        };
        assert_eq!(
            error.message(),
            "0/3 nodes are available: 1 Insufficient cpu, 2 node(s) had untolerated taint {k: v}. preemption: 0/3 nodes are available: 1 No preemption victims found for incoming pod, 2 Preemption is not helpful for scheduling."
        );
        assert!(error.preemption_may_help());
    }
}
