//! The plugins' arguments (`pluginConfig[].args`, upstream's
//! `types_pluginargs.go`): one typed struct per plugin that takes any,
//! upstream's v1 defaults, and its validation with upstream's words.
//!
//! A plugin reads its arguments from the [`Enabled`](crate::profile::Enabled)
//! it is built from; a plugin absent from `pluginConfig` gets the defaults.

use k8s_openapi::api::core::v1::{NodeAffinity, TopologySpreadConstraint};
use serde::Deserialize;

use super::FieldError;
use crate::plugins::node_resources_fit::{ResourceWeight, ShapePoint};

/// The largest score of a `shape` point (`MaxCustomPriorityScore`).
pub const MAX_CUSTOM_PRIORITY_SCORE: i64 = 10;

/// One plugin's arguments.
#[derive(Debug, Clone, PartialEq)]
pub enum PluginArgs {
    NodeResourcesFit(FitArgs),
    NodeResourcesBalancedAllocation(BalancedAllocationArgs),
    NodeAffinity(NodeAffinityArgs),
    PodTopologySpread(PodTopologySpreadArgs),
    InterPodAffinity(InterPodAffinityArgs),
    DefaultPreemption(DefaultPreemptionArgs),
    VolumeBinding(VolumeBindingArgs),
}

/// `NodeResourcesFitArgs`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FitArgs {
    #[serde(default)]
    pub ignored_resources: Vec<String>,
    #[serde(default)]
    pub ignored_resource_groups: Vec<String>,
    #[serde(default)]
    pub scoring_strategy: Option<ScoringStrategy>,
    #[serde(default, rename = "kind")]
    _kind: Option<String>,
    #[serde(default, rename = "apiVersion")]
    _api_version: Option<String>,
}

/// How NodeResourcesFit scores.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ScoringStrategy {
    #[serde(default, rename = "type")]
    pub type_: String,
    #[serde(default)]
    pub resources: Vec<ResourceWeight>,
    #[serde(default)]
    pub requested_to_capacity_ratio: Option<RequestedToCapacityRatio>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RequestedToCapacityRatio {
    #[serde(default)]
    pub shape: Vec<ShapePoint>,
}

/// `NodeResourcesBalancedAllocationArgs`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BalancedAllocationArgs {
    #[serde(default)]
    pub resources: Vec<ResourceWeight>,
    #[serde(default, rename = "kind")]
    _kind: Option<String>,
    #[serde(default, rename = "apiVersion")]
    _api_version: Option<String>,
}

/// `NodeAffinityArgs`: an affinity every pod of the profile gets on top
/// of its own.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NodeAffinityArgs {
    #[serde(default)]
    pub added_affinity: Option<NodeAffinity>,
    #[serde(default, rename = "kind")]
    _kind: Option<String>,
    #[serde(default, rename = "apiVersion")]
    _api_version: Option<String>,
}

/// `PodTopologySpreadArgs`: the constraints of pods that set none.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PodTopologySpreadArgs {
    #[serde(default)]
    pub default_constraints: Vec<TopologySpreadConstraint>,
    /// `System` (upstream's built-in constraints, [`Self::constraints`])
    /// or `List` (`default_constraints`).
    #[serde(default = "system")]
    pub defaulting_type: String,
    #[serde(default, rename = "kind")]
    _kind: Option<String>,
    #[serde(default, rename = "apiVersion")]
    _api_version: Option<String>,
}

fn system() -> String {
    "System".into()
}

/// `InterPodAffinityArgs`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct InterPodAffinityArgs {
    /// The score a node gets per existing pod whose *required* affinity
    /// the incoming pod matches.
    #[serde(default = "one")]
    pub hard_pod_affinity_weight: i32,
    #[serde(default)]
    pub ignore_preferred_terms_of_existing_pods: bool,
    #[serde(default, rename = "kind")]
    _kind: Option<String>,
    #[serde(default, rename = "apiVersion")]
    _api_version: Option<String>,
}

fn one() -> i32 {
    1
}

/// `DefaultPreemptionArgs`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DefaultPreemptionArgs {
    #[serde(default = "ten")]
    pub min_candidate_nodes_percentage: i32,
    #[serde(default = "hundred")]
    pub min_candidate_nodes_absolute: i32,
    #[serde(default, rename = "kind")]
    _kind: Option<String>,
    #[serde(default, rename = "apiVersion")]
    _api_version: Option<String>,
}

fn ten() -> i32 {
    10
}

fn hundred() -> i32 {
    100
}

/// `VolumeBindingArgs`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct VolumeBindingArgs {
    /// How long PreBind waits for the claims to be bound.
    #[serde(default = "six_hundred")]
    pub bind_timeout_seconds: i64,
    #[serde(default)]
    pub shape: Option<Vec<ShapePoint>>,
    #[serde(default, rename = "kind")]
    _kind: Option<String>,
    #[serde(default, rename = "apiVersion")]
    _api_version: Option<String>,
}

fn six_hundred() -> i64 {
    600
}

/// Each struct's defaults are what an empty `args: {}` decodes to.
macro_rules! default_from_empty {
    ($($t:ty),*) => {$(
        impl Default for $t {
            fn default() -> Self {
                serde_json::from_value(serde_json::json!({})).unwrap_or_else(|_| unreachable!())
            }
        }
    )*};
}
default_from_empty!(
    FitArgs,
    BalancedAllocationArgs,
    PodTopologySpreadArgs,
    InterPodAffinityArgs,
    DefaultPreemptionArgs,
    VolumeBindingArgs
);

impl FitArgs {
    /// The strategy with upstream's defaults filled in: `LeastAllocated`
    /// over cpu and memory, weight 1 where unset.
    pub fn strategy(&self) -> ScoringStrategy {
        let mut s = self.scoring_strategy.clone().unwrap_or(ScoringStrategy {
            type_: String::new(),
            resources: Vec::new(),
            requested_to_capacity_ratio: None,
        });
        if s.type_.is_empty() {
            s.type_ = "LeastAllocated".into();
        }
        if s.resources.is_empty() {
            s.resources = crate::plugins::node_resources_fit::default_resources();
        }
        for r in &mut s.resources {
            if r.weight == 0 {
                r.weight = 1;
            }
        }
        s
    }
}

impl BalancedAllocationArgs {
    /// cpu and memory unless configured.
    pub fn resources(&self) -> Vec<ResourceWeight> {
        if self.resources.is_empty() {
            crate::plugins::node_resources_fit::default_resources()
        } else {
            self.resources.clone()
        }
    }
}

impl PodTopologySpreadArgs {
    /// The constraints pods without their own get: upstream's system
    /// defaults (hostname skew 3, zone skew 5, both ScheduleAnyway) or the
    /// configured list.
    pub fn constraints(&self) -> Vec<TopologySpreadConstraint> {
        if self.defaulting_type == "List" {
            return self.default_constraints.clone();
        }
        [
            ("kubernetes.io/hostname", 3),
            ("topology.kubernetes.io/zone", 5),
        ]
        .into_iter()
        .map(|(key, skew)| TopologySpreadConstraint {
            topology_key: key.into(),
            max_skew: skew,
            when_unsatisfiable: "ScheduleAnyway".into(),
            ..Default::default()
        })
        .collect()
    }
}

impl PluginArgs {
    /// Decodes `args` for the plugin `name`; `None` for a plugin that
    /// takes none (its args are ignored, as upstream's framework does).
    pub fn decode(name: &str, args: serde_json::Value) -> Option<Result<Self, String>> {
        fn typed<T: serde::de::DeserializeOwned>(
            args: serde_json::Value,
            wrap: fn(T) -> PluginArgs,
        ) -> Result<PluginArgs, String> {
            let args = if args.is_null() {
                serde_json::json!({})
            } else {
                args
            };
            serde_json::from_value(args)
                .map(wrap)
                .map_err(|e| e.to_string())
        }
        Some(match name {
            "NodeResourcesFit" => typed(args, PluginArgs::NodeResourcesFit),
            "NodeResourcesBalancedAllocation" => {
                typed(args, PluginArgs::NodeResourcesBalancedAllocation)
            }
            "NodeAffinity" => typed(args, PluginArgs::NodeAffinity),
            "PodTopologySpread" => typed(args, PluginArgs::PodTopologySpread),
            "InterPodAffinity" => typed(args, PluginArgs::InterPodAffinity),
            "DefaultPreemption" => typed(args, PluginArgs::DefaultPreemption),
            "VolumeBinding" => typed(args, PluginArgs::VolumeBinding),
            _ => return None,
        })
    }

    /// Upstream's `ValidateXArgs`, each error under `path`
    /// (`profiles[0].pluginConfig[1].args`).
    pub fn validate(&self, path: &str) -> Vec<FieldError> {
        let mut errs = Vec::new();
        match self {
            PluginArgs::NodeResourcesFit(a) => {
                for (i, group) in a.ignored_resource_groups.iter().enumerate() {
                    if group.contains('/') {
                        errs.push(FieldError::invalid(
                            format!("{path}.ignoredResourceGroups[{i}]"),
                            group,
                            "resource group name can't contain '/'",
                        ));
                    }
                }
                if let Some(s) = &a.scoring_strategy {
                    const TYPES: [&str; 3] = [
                        "LeastAllocated",
                        "MostAllocated",
                        "RequestedToCapacityRatio",
                    ];
                    if !s.type_.is_empty() && !TYPES.contains(&s.type_.as_str()) {
                        errs.push(FieldError::not_supported(
                            format!("{path}.scoringStrategy.type"),
                            &s.type_,
                            &TYPES,
                        ));
                    }
                    validate_resources(&s.resources, &format!("{path}.resources"), &mut errs);
                    match &s.requested_to_capacity_ratio {
                        Some(r) => validate_shape(&r.shape, &format!("{path}.shape"), &mut errs),
                        None if s.type_ == "RequestedToCapacityRatio" => {
                            errs.push(FieldError::required(
                                format!("{path}.scoringStrategy.requestedToCapacityRatio"),
                                "",
                            ));
                        }
                        None => {}
                    }
                }
            }
            PluginArgs::NodeResourcesBalancedAllocation(a) => {
                let mut seen = std::collections::HashSet::new();
                for (i, r) in a.resources.iter().enumerate() {
                    let at = format!("{path}.resources[{i}]");
                    if !seen.insert(&r.name) {
                        errs.push(FieldError::duplicate(format!("{at}.name"), &r.name));
                    }
                    if r.weight != 1 {
                        errs.push(FieldError::invalid(
                            format!("{at}.weight"),
                            r.weight,
                            "must be 1",
                        ));
                    }
                }
            }
            PluginArgs::NodeAffinity(_) => {}
            PluginArgs::PodTopologySpread(a) => validate_spread(a, path, &mut errs),
            PluginArgs::InterPodAffinity(a) => {
                if !(0..=100).contains(&a.hard_pod_affinity_weight) {
                    errs.push(FieldError::invalid(
                        format!("{path}.hardPodAffinityWeight"),
                        a.hard_pod_affinity_weight,
                        "not in valid range [0, 100]",
                    ));
                }
            }
            PluginArgs::DefaultPreemption(a) => {
                let (pct, abs) = (
                    format!("{path}.minCandidateNodesPercentage"),
                    format!("{path}.minCandidateNodesAbsolute"),
                );
                if !(0..=100).contains(&a.min_candidate_nodes_percentage) {
                    errs.push(FieldError::invalid(
                        pct.clone(),
                        a.min_candidate_nodes_percentage,
                        "not in valid range [0, 100]",
                    ));
                }
                if a.min_candidate_nodes_absolute < 0 {
                    errs.push(FieldError::invalid(
                        abs.clone(),
                        a.min_candidate_nodes_absolute,
                        "not in valid range [0, inf)",
                    ));
                }
                if a.min_candidate_nodes_percentage == 0 && a.min_candidate_nodes_absolute == 0 {
                    errs.push(FieldError::invalid(
                        pct,
                        0,
                        "cannot be zero at the same time as minCandidateNodesAbsolute",
                    ));
                    errs.push(FieldError::invalid(
                        abs,
                        0,
                        "cannot be zero at the same time as minCandidateNodesPercentage",
                    ));
                }
            }
            PluginArgs::VolumeBinding(a) => {
                if a.bind_timeout_seconds < 0 {
                    errs.push(FieldError::invalid(
                        format!("{path}.bindTimeoutSeconds"),
                        a.bind_timeout_seconds,
                        "invalid BindTimeoutSeconds, should not be a negative value",
                    ));
                }
                if a.shape.is_some() {
                    errs.push(FieldError::invalid(
                        format!("{path}.shape"),
                        "shape",
                        "unexpected field `shape`, remove it or turn on the feature gate StorageCapacityScoring",
                    ));
                }
            }
        }
        errs
    }
}

fn validate_resources(resources: &[ResourceWeight], path: &str, errs: &mut Vec<FieldError>) {
    for (i, r) in resources.iter().enumerate() {
        if r.weight <= 0 || r.weight > 100 {
            errs.push(FieldError::invalid(
                format!("{path}[{i}].weight"),
                r.weight,
                &format!("resource weight of {} not in valid range (0, 100]", r.name),
            ));
        }
    }
}

fn validate_shape(shape: &[ShapePoint], path: &str, errs: &mut Vec<FieldError>) {
    if shape.is_empty() {
        errs.push(FieldError::required(
            path.to_string(),
            "at least one point must be specified",
        ));
        return;
    }
    if let Some(i) = (1..shape.len()).find(|i| shape[i - 1].utilization >= shape[*i].utilization) {
        errs.push(FieldError::invalid(
            format!("{path}[{i}].utilization"),
            shape[i].utilization,
            "utilization values must be sorted in increasing order",
        ));
    }
    for (i, p) in shape.iter().enumerate() {
        if !(0..=100).contains(&p.utilization) {
            errs.push(FieldError::invalid(
                format!("{path}[{i}].utilization"),
                p.utilization,
                "not in valid range [0, 100]",
            ));
        }
        if !(0..=MAX_CUSTOM_PRIORITY_SCORE).contains(&p.score) {
            errs.push(FieldError::invalid(
                format!("{path}[{i}].score"),
                p.score,
                &format!("not in valid range [0, {MAX_CUSTOM_PRIORITY_SCORE}]"),
            ));
        }
    }
}

fn validate_spread(a: &PodTopologySpreadArgs, path: &str, errs: &mut Vec<FieldError>) {
    let typed = format!("{path}.defaultingType");
    match a.defaulting_type.as_str() {
        "System" if !a.default_constraints.is_empty() => errs.push(FieldError::invalid(
            typed,
            "System",
            "when .defaultConstraints are not empty",
        )),
        "System" | "List" => {}
        other => errs.push(FieldError::not_supported(typed, other, &["List", "System"])),
    }
    for (i, c) in a.default_constraints.iter().enumerate() {
        let at = format!("{path}.defaultConstraints[{i}]");
        if c.max_skew <= 0 {
            errs.push(FieldError::invalid(
                format!("{at}.maxSkew"),
                c.max_skew,
                "not in valid range (0, inf)",
            ));
        }
        if c.topology_key.is_empty() {
            errs.push(FieldError::required(
                format!("{at}.topologyKey"),
                "can not be empty",
            ));
        }
        match c.when_unsatisfiable.as_str() {
            "" => errs.push(FieldError::required(
                format!("{at}.whenUnsatisfiable"),
                "can not be empty",
            )),
            "DoNotSchedule" | "ScheduleAnyway" => {}
            other => errs.push(FieldError::not_supported(
                format!("{at}.whenUnsatisfiable"),
                other,
                &["DoNotSchedule", "ScheduleAnyway"],
            )),
        }
        if c.label_selector.is_some() {
            errs.push(FieldError::forbidden(
                format!("{at}.labelSelector"),
                "constraint must not define a selector, as they deduced for each pod",
            ));
        }
        let repeated = a.default_constraints[..i].iter().any(|o| {
            o.topology_key == c.topology_key && o.when_unsatisfiable == c.when_unsatisfiable
        });
        if repeated {
            errs.push(FieldError::duplicate(
                at,
                &format!("{{{}, {}}}", c.topology_key, c.when_unsatisfiable),
            ));
        }
    }
}
