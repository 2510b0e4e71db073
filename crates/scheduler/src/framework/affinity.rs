//! A pod's inter-pod affinity terms, parsed once when its [`PodInfo`]
//! is built (upstream's `AffinityTerm` and `WeightedAffinityTerm` in
//! `framework/types.go`), so the plugins that match every pod of a node
//! against them do not re-read the spec each cycle.
//!
//! [`PodInfo`]: super::PodInfo

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{Pod, PodAffinityTerm, WeightedPodAffinityTerm};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};
use rudder_runtime::meta::selector_matches;

/// One term: which pods (by namespace and labels) it is about, and the
/// node label whose values are the topology domains.
#[derive(Debug, Clone, PartialEq)]
pub struct AffinityTerm {
    /// The namespaces named; the pod's own when neither namespaces nor a
    /// namespace selector are given.
    pub namespaces: BTreeSet<String>,
    /// `namespaceSelector`: `None` selects no namespace, an empty one all.
    pub namespace_selector: Option<LabelSelector>,
    /// `labelSelector`, with `matchLabelKeys` and `mismatchLabelKeys`
    /// merged in; `None` matches no pod.
    pub selector: Option<LabelSelector>,
    pub topology_key: String,
}

impl AffinityTerm {
    /// The term of `pod` (whose labels resolve the label keys).
    pub fn new(pod: &Pod, term: &PodAffinityTerm) -> Self {
        let named = term.namespaces.as_deref().unwrap_or_default();
        let namespaces = if named.is_empty() && term.namespace_selector.is_none() {
            pod.metadata.namespace.iter().cloned().collect()
        } else {
            named.iter().cloned().collect()
        };
        AffinityTerm {
            namespaces,
            namespace_selector: term.namespace_selector.clone(),
            selector: merged_selector(pod, term),
            topology_key: term.topology_key.clone(),
        }
    }

    /// Whether `pod` is one the term is about: in one of its namespaces
    /// (or one whose labels, `namespace_labels`, its namespace selector
    /// selects) and with matching labels (upstream's
    /// `AffinityTerm.Matches`).
    pub fn matches(&self, pod: &Pod, namespace_labels: &BTreeMap<String, String>) -> bool {
        let namespace = pod.metadata.namespace.as_deref().unwrap_or_default();
        let in_namespace = self.namespaces.contains(namespace)
            || self
                .namespace_selector
                .as_ref()
                .is_some_and(|s| selector_matches(s, namespace_labels));
        in_namespace
            && self.selector.as_ref().is_some_and(|s| {
                selector_matches(s, pod.metadata.labels.as_ref().unwrap_or(&BTreeMap::new()))
            })
    }

    /// The same with the namespace selector resolved to the namespaces it
    /// selects now (upstream's `mergeAffinityTermNamespacesIfNotEmpty`,
    /// done for the pod being scheduled); an empty selector, which selects
    /// every namespace, is kept.
    pub fn resolve_namespaces<'a>(
        &mut self,
        namespaces: impl Iterator<Item = (&'a str, &'a BTreeMap<String, String>)>,
    ) {
        let Some(selector) = &self.namespace_selector else {
            return;
        };
        if rudder_runtime::meta::selector_is_empty(selector) {
            return;
        }
        for (name, labels) in namespaces {
            if selector_matches(selector, labels) {
                self.namespaces.insert(name.to_string());
            }
        }
        self.namespace_selector = None;
    }
}

/// The label selector with the pod's values of `matchLabelKeys` required
/// (`In`) and of `mismatchLabelKeys` refused (`NotIn`). Upstream's API
/// server merges these when the pod is created; rudder's does not, so the
/// scheduler does (merging twice changes nothing). A missing selector
/// stays missing: it matches no pod either way.
fn merged_selector(pod: &Pod, term: &PodAffinityTerm) -> Option<LabelSelector> {
    let mut selector = term.label_selector.clone()?;
    let labels = pod.metadata.labels.as_ref();
    let keys = |keys: &Option<Vec<String>>, operator: &'static str| {
        keys.iter()
            .flatten()
            .filter_map(move |k| {
                let value = labels?.get(k)?;
                Some(LabelSelectorRequirement {
                    key: k.clone(),
                    operator: operator.to_string(),
                    values: Some(vec![value.clone()]),
                })
            })
            .collect::<Vec<_>>()
    };
    let extra: Vec<LabelSelectorRequirement> = keys(&term.match_label_keys, "In")
        .into_iter()
        .chain(keys(&term.mismatch_label_keys, "NotIn"))
        .collect();
    if !extra.is_empty() {
        selector
            .match_expressions
            .get_or_insert_with(Vec::new)
            .extend(extra);
    }
    Some(selector)
}

/// A preferred term and its weight.
#[derive(Debug, Clone, PartialEq)]
pub struct WeightedAffinityTerm {
    pub term: AffinityTerm,
    pub weight: i32,
}

/// A pod's affinity and anti-affinity terms, required and preferred.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PodAffinityTerms {
    pub required_affinity: Vec<AffinityTerm>,
    pub required_anti_affinity: Vec<AffinityTerm>,
    pub preferred_affinity: Vec<WeightedAffinityTerm>,
    pub preferred_anti_affinity: Vec<WeightedAffinityTerm>,
}

impl PodAffinityTerms {
    pub fn new(pod: &Pod) -> Self {
        let Some(affinity) = pod.spec.as_ref().and_then(|s| s.affinity.as_ref()) else {
            return PodAffinityTerms::default();
        };
        let required = |terms: Option<&Vec<PodAffinityTerm>>| -> Vec<AffinityTerm> {
            terms
                .into_iter()
                .flatten()
                .map(|t| AffinityTerm::new(pod, t))
                .collect()
        };
        let preferred = |terms: Option<&Vec<WeightedPodAffinityTerm>>| {
            terms
                .into_iter()
                .flatten()
                .map(|t| WeightedAffinityTerm {
                    term: AffinityTerm::new(pod, &t.pod_affinity_term),
                    weight: t.weight,
                })
                .collect()
        };
        let (affinity, anti) = (
            affinity.pod_affinity.as_ref(),
            affinity.pod_anti_affinity.as_ref(),
        );
        PodAffinityTerms {
            required_affinity: required(affinity.and_then(|a| {
                a.required_during_scheduling_ignored_during_execution
                    .as_ref()
            })),
            required_anti_affinity: required(anti.and_then(|a| {
                a.required_during_scheduling_ignored_during_execution
                    .as_ref()
            })),
            preferred_affinity: preferred(affinity.and_then(|a| {
                a.preferred_during_scheduling_ignored_during_execution
                    .as_ref()
            })),
            preferred_anti_affinity: preferred(anti.and_then(|a| {
                a.preferred_during_scheduling_ignored_during_execution
                    .as_ref()
            })),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.required_affinity.is_empty()
            && self.required_anti_affinity.is_empty()
            && self.preferred_affinity.is_empty()
            && self.preferred_anti_affinity.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(ns: &str, labels: serde_json::Value, affinity: serde_json::Value) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": ns, "labels": labels},
            "spec": {"containers": [], "affinity": affinity},
        }))
        .expect("pod")
    }

    #[test]
    fn terms_default_to_the_pods_namespace_and_merge_label_keys() {
        let owner = pod(
            "team",
            serde_json::json!({"app": "web", "version": "v2"}),
            serde_json::json!({"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"app": "web"}}, "matchLabelKeys": ["version"],
                 "topologyKey": "kubernetes.io/hostname"}
            ]}}),
        );
        let terms = PodAffinityTerms::new(&owner);
        let term = &terms.required_anti_affinity[0];
        assert_eq!(term.namespaces, BTreeSet::from(["team".to_string()]));
        let none = BTreeMap::new();
        let same = pod(
            "team",
            serde_json::json!({"app": "web", "version": "v2"}),
            serde_json::json!(null),
        );
        let older = pod(
            "team",
            serde_json::json!({"app": "web", "version": "v1"}),
            serde_json::json!(null),
        );
        let elsewhere = pod(
            "other",
            serde_json::json!({"app": "web", "version": "v2"}),
            serde_json::json!(null),
        );
        assert!(term.matches(&same, &none));
        assert!(!term.matches(&older, &none), "matchLabelKeys keep to v2");
        assert!(!term.matches(&elsewhere, &none));
    }

    #[test]
    fn namespace_selectors_select_by_labels_or_resolve_to_names() {
        let owner = pod(
            "a",
            serde_json::json!({}),
            serde_json::json!({"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {}, "namespaceSelector": {"matchLabels": {"env": "prod"}}, "topologyKey": "zone"}
            ]}}),
        );
        let mut term = PodAffinityTerms::new(&owner).required_affinity[0].clone();
        assert!(term.namespaces.is_empty());
        let prod: BTreeMap<String, String> = [("env".into(), "prod".into())].into();
        let other = pod("b", serde_json::json!({}), serde_json::json!(null));
        assert!(term.matches(&other, &prod));
        assert!(!term.matches(&other, &BTreeMap::new()));
        let dev: BTreeMap<String, String> = [("env".into(), "dev".into())].into();
        term.resolve_namespaces([("b", &prod), ("c", &dev)].into_iter());
        assert_eq!(term.namespaces, BTreeSet::from(["b".to_string()]));
        assert!(term.matches(&other, &BTreeMap::new()));
    }
}
