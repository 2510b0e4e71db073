//! InterPodAffinity: a pod's required pod affinity must find a matching
//! pod in the node's topology domain, its required anti-affinity must
//! find none there, and existing pods' required anti-affinity must not
//! match it; preferred terms (its own and existing pods') score the
//! domains by weight. Upstream's `plugins/interpodaffinity`.
//!
//! PreFilter counts matching pods per topology pair (key and value of a
//! node label) once, so Filter is a few lookups per node; a pod without
//! affinity terms in a cluster whose pods have no anti-affinity skips the
//! plugin at once, touching no node.

mod filtering;
mod scoring;
#[cfg(test)]
pub(crate) mod testing;

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::framework::affinity::AffinityTerm;
use crate::framework::changes::Memo;
use crate::framework::{Plugin, Snapshot};

pub const NAME: &str = "InterPodAffinity";
/// Upstream's `ErrReasonExistingAntiAffinityRulesNotMatch`.
pub const REASON_EXISTING_ANTI_AFFINITY: &str =
    "node(s) didn't satisfy existing pods anti-affinity rules";
/// Upstream's `ErrReasonAffinityRulesNotMatch`.
pub const REASON_AFFINITY: &str = "node(s) didn't match pod affinity rules";
/// Upstream's `ErrReasonAntiAffinityRulesNotMatch`.
pub const REASON_ANTI_AFFINITY: &str = "node(s) didn't match pod anti-affinity rules";

/// The plugin and its arguments (`InterPodAffinityArgs`).
#[derive(Debug, Clone)]
pub struct InterPodAffinity {
    /// The score an existing pod's required affinity term gives the
    /// domains of its node when the pod matches it (`hardPodAffinityWeight`).
    pub hard_pod_affinity_weight: i32,
    /// Score by the pod's own preferred terms only
    /// (`ignorePreferredTermsOfExistingPods`).
    pub ignore_preferred_terms_of_existing_pods: bool,
    /// PreFilter's counts, carried from cycle to cycle: of existing pods'
    /// anti-affinity terms the pod matches, and of the pods its own
    /// required terms select.
    existing_counted: Arc<Memo<filtering::ExistingQuestion, filtering::Counts>>,
    counted: Arc<Memo<filtering::TermsQuestion, (filtering::Counts, filtering::Counts)>>,
}

impl InterPodAffinity {
    pub fn new(
        hard_pod_affinity_weight: i32,
        ignore_preferred_terms_of_existing_pods: bool,
    ) -> Self {
        InterPodAffinity {
            hard_pod_affinity_weight,
            ignore_preferred_terms_of_existing_pods,
            existing_counted: Arc::default(),
            counted: Arc::default(),
        }
    }
}

impl Default for InterPodAffinity {
    /// `hardPodAffinityWeight: 1`, existing pods' preferred terms counted.
    fn default() -> Self {
        InterPodAffinity::new(1, false)
    }
}

impl Plugin for InterPodAffinity {
    fn name(&self) -> &'static str {
        NAME
    }
}

/// The pod's terms with their namespace selectors resolved against the
/// namespaces that exist now.
fn resolved<'t>(
    snapshot: &Snapshot,
    terms: impl Iterator<Item = &'t AffinityTerm>,
) -> Vec<AffinityTerm> {
    let mut namespaces: Option<Vec<_>> = None;
    terms
        .map(|term| {
            let mut term = term.clone();
            if term.namespace_selector.is_some() {
                let all = namespaces.get_or_insert_with(|| snapshot.listers.namespaces.list());
                term.resolve_namespaces(all.iter().map(|n| {
                    (
                        n.metadata.name.as_deref().unwrap_or_default(),
                        n.metadata.labels.as_ref().unwrap_or(&EMPTY_LABELS),
                    )
                }));
            }
            term
        })
        .collect()
}

static EMPTY_LABELS: BTreeMap<String, String> = BTreeMap::new();
