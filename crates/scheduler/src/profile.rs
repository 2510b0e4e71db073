//! A scheduling profile (upstream's `KubeSchedulerProfile` and the
//! framework built from it): the plugins of each extension point, in
//! order, and the Score weights — built by name from the registry
//! ([`Profile::add`]), from upstream's defaults or a
//! [configuration](crate::config). Pods name their profile by
//! `spec.schedulerName`.
//!
//! Building from a configuration is upstream's `NewFramework`: each plugin
//! named anywhere is instantiated once; each extension point gets the
//! plugins its own set enables, then `multiPoint`'s plugins that serve it
//! (upstream's `expandMultiPointPlugins` order: points' overrides of
//! multi-point plugins, multi-point plugins, the other point plugins);
//! Score weights come from `score.enabled`, else `multiPoint`, 0 meaning 1.

use std::collections::BTreeMap;
use std::sync::Arc;

use kube::Client;

use crate::config::args::{
    BalancedAllocationArgs, DefaultPreemptionArgs, FitArgs, InterPodAffinityArgs, NodeAffinityArgs,
    PodTopologySpreadArgs, VolumeBindingArgs,
};
use crate::config::{ConfigError, Configuration, PluginArgs, Point, ProfileConfig};
use crate::framework::{
    Bind, Filter, PostFilter, PreBind, PreEnqueue, PreFilter, PreScore, Reserve, Score,
};
use crate::plugins::default_preemption;
use crate::plugins::{
    PRIORITY_SORT, default_binder, image_locality, inter_pod_affinity, node_affinity, node_name,
    node_ports, node_resources_balanced_allocation, node_resources_fit, node_unschedulable,
    node_volume_limits, pod_topology_spread, scheduling_gates, taint_toleration, volume_binding,
    volume_restrictions, volume_zone,
};

/// Upstream's default scheduler name.
pub const DEFAULT_SCHEDULER_NAME: &str = "default-scheduler";

#[derive(Clone, Default)]
pub struct Profile {
    pub scheduler_name: String,
    pub pre_enqueue: Vec<Arc<dyn PreEnqueue>>,
    pub pre_filter: Vec<Arc<dyn PreFilter>>,
    pub filter: Vec<Arc<dyn Filter>>,
    pub post_filter: Vec<Arc<dyn PostFilter>>,
    pub pre_score: Vec<Arc<dyn PreScore>>,
    pub score: Vec<(Arc<dyn Score>, i64)>,
    pub reserve: Vec<Arc<dyn Reserve>>,
    pub pre_bind: Vec<Arc<dyn PreBind>>,
    pub bind: Vec<Arc<dyn Bind>>,
    /// `percentageOfNodesToScore`; `None`: adaptive.
    pub percentage_of_nodes_to_score: Option<u32>,
}

impl std::fmt::Debug for Profile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names = |v: Vec<&'static str>| v.join(",");
        f.debug_struct("Profile")
            .field("scheduler_name", &self.scheduler_name)
            .field(
                "filter",
                &names(self.filter.iter().map(|p| p.name()).collect()),
            )
            .field(
                "score",
                &names(self.score.iter().map(|(p, _)| p.name()).collect()),
            )
            .finish_non_exhaustive()
    }
}

/// A plugin to build: its name, Score weight and arguments.
#[derive(Debug, Clone, Default)]
pub struct Enabled {
    pub name: String,
    pub weight: i64,
    /// Its `pluginConfig` args; `None`: upstream's defaults.
    pub args: Option<PluginArgs>,
}

/// `Enabled::x_args()`: the plugin's configured arguments, else defaults.
macro_rules! args_accessors {
    ($($method:ident => $variant:ident($t:ty)),* $(,)?) => {
        impl Enabled {
            $(pub fn $method(&self) -> $t {
                match &self.args {
                    Some(PluginArgs::$variant(args)) => args.clone(),
                    _ => <$t>::default(),
                }
            })*
        }
    };
}
args_accessors!(
    fit_args => NodeResourcesFit(FitArgs),
    balanced_allocation_args => NodeResourcesBalancedAllocation(BalancedAllocationArgs),
    node_affinity_args => NodeAffinity(NodeAffinityArgs),
    pod_topology_spread_args => PodTopologySpread(PodTopologySpreadArgs),
    inter_pod_affinity_args => InterPodAffinity(InterPodAffinityArgs),
    default_preemption_args => DefaultPreemption(DefaultPreemptionArgs),
    volume_binding_args => VolumeBinding(VolumeBindingArgs),
);

impl Enabled {
    pub fn new(name: &str, weight: i64) -> Self {
        Enabled {
            name: name.into(),
            weight,
            args: None,
        }
    }
}

/// Upstream's default plugins and Score weights (1.33's
/// `getDefaultPlugins`), those rudder has.
pub fn default_plugins() -> Vec<Enabled> {
    crate::config::DEFAULT_PLUGINS
        .iter()
        .filter(|(name, _)| is_known(name) && *name != PRIORITY_SORT)
        .map(|(name, weight)| Enabled::new(name, i64::from(*weight)))
        .collect()
}

/// Whether the registry has a plugin of this name.
pub fn is_known(name: &str) -> bool {
    name == PRIORITY_SORT || Profile::default().add(&Enabled::new(name, 0), None)
}

impl Profile {
    /// A profile of `plugins`, binding through `client` (none: no binder,
    /// for tests of the cycle alone).
    pub fn new(scheduler_name: &str, plugins: &[Enabled], client: Option<Client>) -> Self {
        let mut p = Profile {
            scheduler_name: scheduler_name.to_string(),
            ..Profile::default()
        };
        for enabled in plugins {
            p.add(enabled, client.clone());
        }
        p
    }

    /// Upstream's default profile.
    pub fn default_profile(client: Option<Client>) -> Self {
        Profile::new(DEFAULT_SCHEDULER_NAME, &default_plugins(), client)
    }

    /// The profiles of a configuration.
    pub fn all_from_config(
        config: &Configuration,
        client: Option<Client>,
    ) -> Result<Vec<Profile>, ConfigError> {
        config
            .profiles
            .iter()
            .map(|p| Profile::from_config(p, config.percentage_of_nodes_to_score, client.clone()))
            .collect()
    }

    /// The registry: adds the plugin `enabled` names at each extension
    /// point it serves; false if there is no such plugin.
    pub fn add(&mut self, enabled: &Enabled, client: Option<Client>) -> bool {
        let weight = enabled.weight;
        match enabled.name.as_str() {
            scheduling_gates::NAME => {
                self.pre_enqueue
                    .push(Arc::new(scheduling_gates::SchedulingGates));
            }
            node_unschedulable::NAME => {
                self.filter
                    .push(Arc::new(node_unschedulable::NodeUnschedulable));
            }
            node_name::NAME => self.filter.push(Arc::new(node_name::NodeName)),
            taint_toleration::NAME => {
                let p = Arc::new(taint_toleration::TaintToleration);
                self.filter.push(p.clone());
                self.pre_score.push(p.clone());
                self.score.push((p, weight));
            }
            node_affinity::NAME => {
                let p = Arc::new(node_affinity::NodeAffinity::new(
                    enabled.node_affinity_args().added_affinity,
                ));
                self.pre_filter.push(p.clone());
                self.filter.push(p.clone());
                self.pre_score.push(p.clone());
                self.score.push((p, weight));
            }
            node_ports::NAME => self.filter.push(Arc::new(node_ports::NodePorts)),
            node_resources_fit::NAME => {
                let p = Arc::new(node_resources_fit::Fit::from_args(&enabled.fit_args()));
                self.filter.push(p.clone());
                self.score.push((p, weight));
            }
            volume_restrictions::NAME => {
                let p = Arc::new(volume_restrictions::VolumeRestrictions);
                self.pre_filter.push(p.clone());
                self.filter.push(p);
            }
            node_volume_limits::NAME => {
                let p = Arc::new(node_volume_limits::NodeVolumeLimits);
                self.pre_filter.push(p.clone());
                self.filter.push(p);
            }
            volume_binding::NAME => {
                let p = Arc::new(volume_binding::VolumeBinding::new(
                    client,
                    &enabled.volume_binding_args(),
                ));
                self.pre_filter.push(p.clone());
                self.filter.push(p.clone());
                self.reserve.push(p.clone());
                self.pre_bind.push(p);
            }
            volume_zone::NAME => {
                let p = Arc::new(volume_zone::VolumeZone);
                self.pre_filter.push(p.clone());
                self.filter.push(p);
            }
            pod_topology_spread::NAME => {
                let args = enabled.pod_topology_spread_args();
                let p = Arc::new(pod_topology_spread::PodTopologySpread::new(
                    args.constraints(),
                    args.defaulting_type != "List",
                ));
                self.pre_filter.push(p.clone());
                self.filter.push(p.clone());
                self.pre_score.push(p.clone());
                self.score.push((p, weight));
            }
            inter_pod_affinity::NAME => {
                let args = enabled.inter_pod_affinity_args();
                let p = Arc::new(inter_pod_affinity::InterPodAffinity::new(
                    args.hard_pod_affinity_weight,
                    args.ignore_preferred_terms_of_existing_pods,
                ));
                self.pre_filter.push(p.clone());
                self.filter.push(p.clone());
                self.pre_score.push(p.clone());
                self.score.push((p, weight));
            }
            node_resources_balanced_allocation::NAME => {
                let p = Arc::new(node_resources_balanced_allocation::BalancedAllocation {
                    resources: node_resources_fit::weighted(
                        &enabled.balanced_allocation_args().resources(),
                    ),
                });
                self.pre_score.push(p.clone());
                self.score.push((p, weight));
            }
            image_locality::NAME => {
                self.score
                    .push((Arc::new(image_locality::ImageLocality), weight));
            }
            default_preemption::NAME => {
                let args = enabled.default_preemption_args();
                let count = |n: i32| usize::try_from(n).unwrap_or(0);
                self.post_filter
                    .push(Arc::new(default_preemption::DefaultPreemption {
                        min_candidate_nodes_percentage: count(args.min_candidate_nodes_percentage),
                        min_candidate_nodes_absolute: count(args.min_candidate_nodes_absolute),
                    }));
            }
            default_binder::NAME => {
                if let Some(client) = client {
                    self.bind
                        .push(Arc::new(default_binder::DefaultBinder::new(client)));
                }
            }
            _ => return false,
        }
        true
    }

    /// Whether this (one-plugin) profile serves `point`.
    fn serves(&self, point: Point, name: &str) -> bool {
        match point {
            Point::PreEnqueue => !self.pre_enqueue.is_empty(),
            Point::QueueSort => name == PRIORITY_SORT,
            Point::PreFilter => !self.pre_filter.is_empty(),
            Point::Filter => !self.filter.is_empty(),
            Point::PostFilter => !self.post_filter.is_empty(),
            Point::PreScore => !self.pre_score.is_empty(),
            Point::Score => !self.score.is_empty(),
            Point::Reserve => !self.reserve.is_empty(),
            Point::PreBind => !self.pre_bind.is_empty(),
            Point::Bind => !self.bind.is_empty(),
            Point::Permit | Point::PostBind => false,
        }
    }

    /// Whether the plugin was built into nothing here (a binder without a
    /// client, the queue's sort): it is accepted wherever it is named.
    fn is_hollow(&self) -> bool {
        self.pre_enqueue.is_empty()
            && self.pre_filter.is_empty()
            && self.filter.is_empty()
            && self.post_filter.is_empty()
            && self.pre_score.is_empty()
            && self.score.is_empty()
            && self.reserve.is_empty()
            && self.pre_bind.is_empty()
            && self.bind.is_empty()
    }

    /// Adds `one`'s plugin at `point` (with `weight` if it scores).
    fn take(&mut self, one: &Profile, point: Point, weight: i64) {
        match point {
            Point::PreEnqueue => self.pre_enqueue.extend(one.pre_enqueue.iter().cloned()),
            Point::PreFilter => self.pre_filter.extend(one.pre_filter.iter().cloned()),
            Point::Filter => self.filter.extend(one.filter.iter().cloned()),
            Point::PostFilter => self.post_filter.extend(one.post_filter.iter().cloned()),
            Point::PreScore => self.pre_score.extend(one.pre_score.iter().cloned()),
            Point::Score => self
                .score
                .extend(one.score.iter().map(|(p, _)| (p.clone(), weight))),
            Point::Reserve => self.reserve.extend(one.reserve.iter().cloned()),
            Point::PreBind => self.pre_bind.extend(one.pre_bind.iter().cloned()),
            Point::Bind => self.bind.extend(one.bind.iter().cloned()),
            Point::QueueSort | Point::Permit | Point::PostBind => {}
        }
    }

    /// The profile a configuration describes (upstream's `NewFramework`).
    pub fn from_config(
        config: &ProfileConfig,
        global_percentage: Option<u32>,
        client: Option<Client>,
    ) -> Result<Profile, ConfigError> {
        let fail = |message: String| ConfigError::Profile {
            profile: config.scheduler_name.clone(),
            message,
        };
        let plugins = &config.plugins;
        // Each plugin named anywhere, built once.
        let mut built: BTreeMap<&str, Profile> = BTreeMap::new();
        let named = plugins
            .multi_point
            .enabled
            .iter()
            .chain(plugins.points.values().flat_map(|s| s.enabled.iter()));
        for plugin in named {
            let name = plugin.name.as_str();
            if built.contains_key(name) {
                continue;
            }
            let enabled = Enabled {
                name: name.to_string(),
                weight: 0,
                args: config.args(name),
            };
            let mut one = Profile::default();
            if name == PRIORITY_SORT || one.add(&enabled, client.clone()) {
                built.insert(name, one);
            }
        }
        let mut profile = Profile {
            scheduler_name: config.scheduler_name.clone(),
            percentage_of_nodes_to_score: config.percentage(global_percentage),
            ..Profile::default()
        };
        // Score weights: the score set's, else multiPoint's; 0 means 1.
        let mut weights: BTreeMap<&str, i64> = BTreeMap::new();
        let scored = plugins
            .point(Point::Score)
            .enabled
            .iter()
            .chain(&plugins.multi_point.enabled);
        for plugin in scored {
            weights
                .entry(plugin.name.as_str())
                .or_insert(i64::from(plugin.weight.max(1)));
        }
        for point in Point::ALL {
            let set = plugins.point(point);
            let interface = point.interface();
            let mut explicit: Vec<&str> = Vec::new();
            for plugin in &set.enabled {
                let name = plugin.name.as_str();
                let Some(one) = built.get(name) else {
                    return Err(fail(format!("{interface} {name:?} does not exist")));
                };
                if !one.serves(point, name) && !one.is_hollow() {
                    return Err(fail(format!(
                        "plugin {name:?} does not extend {interface} plugin"
                    )));
                }
                if explicit.contains(&name) {
                    return Err(fail(format!(
                        "plugin {name:?} already registered as {interface:?}"
                    )));
                }
                explicit.push(name);
            }
            let (mut overridden, mut multi): (Vec<&str>, Vec<&str>) = (Vec::new(), Vec::new());
            if !set.disables_all() {
                for plugin in &plugins.multi_point.enabled {
                    let name = plugin.name.as_str();
                    let Some(one) = built.get(name) else {
                        return Err(fail(format!("{interface} {name:?} does not exist")));
                    };
                    if !one.serves(point, name) || set.disables(name) {
                        continue;
                    }
                    if explicit.contains(&name) {
                        overridden.push(name);
                    } else if multi.contains(&name) {
                        return Err(fail(format!(
                            "plugin {name:?} already registered as {interface:?}"
                        )));
                    } else {
                        multi.push(name);
                    }
                }
            }
            let order = explicit
                .iter()
                .filter(|n| overridden.contains(n))
                .chain(&multi)
                .chain(explicit.iter().filter(|n| !overridden.contains(n)));
            for name in order {
                let weight = weights.get(name).copied().unwrap_or(1);
                profile.take(&built[name], point, weight);
            }
        }
        Ok(profile)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(p: &Profile) -> (Vec<&'static str>, Vec<(&'static str, i64)>) {
        (
            p.filter.iter().map(|f| f.name()).collect(),
            p.score.iter().map(|(s, w)| (s.name(), *w)).collect(),
        )
    }

    #[test]
    fn the_default_profile_has_upstreams_plugins_in_order() {
        let p = Profile::default_profile(None);
        let (filters, weights) = names(&p);
        // Upstream's order, of the plugins the registry has.
        let upstream_filters = [
            "NodeUnschedulable",
            "NodeName",
            "TaintToleration",
            "NodeAffinity",
            "NodePorts",
            "NodeResourcesFit",
            "VolumeRestrictions",
            "NodeVolumeLimits",
            "VolumeBinding",
            "VolumeZone",
            "PodTopologySpread",
            "InterPodAffinity",
        ];
        let expected: Vec<&str> = upstream_filters
            .into_iter()
            .filter(|n| is_known(n))
            .collect();
        assert_eq!(filters, expected);
        assert!(filters.contains(&"VolumeBinding"));
        let upstream_weights = [
            ("TaintToleration", 3),
            ("NodeAffinity", 2),
            ("NodeResourcesFit", 1),
            ("PodTopologySpread", 2),
            ("InterPodAffinity", 2),
            ("NodeResourcesBalancedAllocation", 1),
            ("ImageLocality", 1),
        ];
        let expected: Vec<(&str, i64)> = upstream_weights
            .into_iter()
            .filter(|(n, _)| is_known(n))
            .collect();
        assert_eq!(weights, expected);
        let reserve: Vec<&str> = p.reserve.iter().map(|r| r.name()).collect();
        assert_eq!(reserve, ["VolumeBinding"]);
        let pre_bind: Vec<&str> = p.pre_bind.iter().map(|r| r.name()).collect();
        assert_eq!(pre_bind, ["VolumeBinding"]);
    }

    #[test]
    fn a_default_configuration_builds_the_default_profile() {
        let config = Configuration::default();
        let built = Profile::all_from_config(&config, None).expect("profiles");
        assert_eq!(built.len(), 1);
        assert_eq!(built[0].scheduler_name, DEFAULT_SCHEDULER_NAME);
        assert_eq!(names(&built[0]), names(&Profile::default_profile(None)));
        assert_eq!(built[0].percentage_of_nodes_to_score, None);
    }
}
