//! A scheduling profile (upstream's `KubeSchedulerProfile`): the plugins
//! of each extension point, in order, and the Score weights — built by
//! name from the registry, upstream's defaults unless a configuration
//! says otherwise. Pods name their profile by `spec.schedulerName`.

use std::sync::Arc;

use kube::Client;

use crate::framework::{Bind, Filter, PostFilter, PreEnqueue, PreFilter, PreScore, Reserve, Score};
use crate::plugins::{
    balanced, default_binder, fit, image_locality, node_affinity, node_name, node_ports,
    node_unschedulable, scheduling_gates, taint_toleration,
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

/// A plugin enabled at some extension points, with its Score weight.
#[derive(Debug, Clone)]
pub struct Enabled {
    pub name: &'static str,
    pub weight: i64,
}

/// Upstream's default plugins and Score weights (1.33's
/// `getDefaultPlugins`), those rudder has.
pub fn default_plugins() -> Vec<Enabled> {
    [
        (scheduling_gates::NAME, 0),
        (node_unschedulable::NAME, 0),
        (node_name::NAME, 0),
        (taint_toleration::NAME, 3),
        (node_affinity::NAME, 2),
        (node_ports::NAME, 0),
        (fit::NAME, 1),
        (balanced::NAME, 1),
        (image_locality::NAME, 1),
        (default_binder::NAME, 0),
    ]
    .into_iter()
    .map(|(name, weight)| Enabled { name, weight })
    .collect()
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

    fn add(&mut self, enabled: &Enabled, client: Option<Client>) {
        let weight = enabled.weight;
        match enabled.name {
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
                let p = Arc::new(node_affinity::NodeAffinity);
                self.pre_filter.push(p.clone());
                self.filter.push(p.clone());
                self.pre_score.push(p.clone());
                self.score.push((p, weight));
            }
            node_ports::NAME => self.filter.push(Arc::new(node_ports::NodePorts)),
            fit::NAME => {
                let p = Arc::new(fit::Fit::default());
                self.filter.push(p.clone());
                self.score.push((p, weight));
            }
            balanced::NAME => {
                let p = Arc::new(balanced::BalancedAllocation::default());
                self.pre_score.push(p.clone());
                self.score.push((p, weight));
            }
            image_locality::NAME => {
                self.score
                    .push((Arc::new(image_locality::ImageLocality), weight));
            }
            default_binder::NAME => {
                if let Some(client) = client {
                    self.bind
                        .push(Arc::new(default_binder::DefaultBinder::new(client)));
                }
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_profile_has_upstreams_plugins_in_order() {
        let p = Profile::default_profile(None);
        let filters: Vec<&str> = p.filter.iter().map(|f| f.name()).collect();
        assert_eq!(
            filters,
            [
                "NodeUnschedulable",
                "NodeName",
                "TaintToleration",
                "NodeAffinity",
                "NodePorts",
                "NodeResourcesFit"
            ]
        );
        let weights: Vec<(&str, i64)> = p.score.iter().map(|(s, w)| (s.name(), *w)).collect();
        assert_eq!(
            weights,
            [
                ("TaintToleration", 3),
                ("NodeAffinity", 2),
                ("NodeResourcesFit", 1),
                ("NodeResourcesBalancedAllocation", 1),
                ("ImageLocality", 1)
            ]
        );
    }
}
