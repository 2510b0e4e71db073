//! NodeResourcesBalancedAllocation: nodes whose cpu and memory would be
//! used in like proportions with the pod score higher (one minus the
//! standard deviation of the fractions used).

use crate::framework::{
    CycleState, MAX_NODE_SCORE, NodeInfo, Plugin, PodInfo, PreScore, Score, Snapshot, Status,
};

use super::node_resources_fit::{Weighted, default_resources, requested_and_allocatable, weighted};

pub const NAME: &str = "NodeResourcesBalancedAllocation";

#[derive(Debug, Clone)]
pub struct BalancedAllocation {
    pub resources: Vec<Weighted>,
}

impl Default for BalancedAllocation {
    fn default() -> Self {
        BalancedAllocation {
            resources: weighted(&default_resources()),
        }
    }
}

impl Plugin for BalancedAllocation {
    fn name(&self) -> &'static str {
        NAME
    }
}

impl PreScore for BalancedAllocation {
    /// A pod requesting nothing changes no balance: skipped, as upstream.
    fn pre_score(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        _: &[std::sync::Arc<NodeInfo>],
        _: &Snapshot,
    ) -> Status {
        if pod.requests.milli_cpu == 0 && pod.requests.memory == 0 && pod.requests.scalar.is_empty()
        {
            state.skip_score(NAME);
        }
        Status::success()
    }
}

/// One minus the standard deviation of the fractions, times 100.
pub fn balanced_score(fractions: &[f64]) -> i64 {
    let std = match fractions.len() {
        0 | 1 => 0.0,
        2 => ((fractions[0] - fractions[1]) / 2.0).abs(),
        n => {
            let mean = fractions.iter().sum::<f64>() / n as f64;
            (fractions
                .iter()
                .map(|f| (f - mean) * (f - mean))
                .sum::<f64>()
                / n as f64)
                .sqrt()
        }
    };
    ((1.0 - std) * MAX_NODE_SCORE as f64) as i64
}

/// Resources scored without a heap allocation per node (cpu and memory,
/// the default, and a few extended ones).
const INLINE_FRACTIONS: usize = 8;

impl Score for BalancedAllocation {
    fn score(&self, _: &CycleState, pod: &PodInfo, node: &NodeInfo) -> i64 {
        let fractions = self.resources.iter().filter_map(|r| {
            let (requested, allocatable) = requested_and_allocatable(pod, node, &r.name, false);
            (allocatable > 0).then(|| (requested as f64 / allocatable as f64).min(1.0))
        });
        if self.resources.len() <= INLINE_FRACTIONS {
            let mut inline = [0f64; INLINE_FRACTIONS];
            let mut n = 0;
            for f in fractions {
                inline[n] = f;
                n += 1;
            }
            balanced_score(&inline[..n])
        } else {
            balanced_score(&fractions.collect::<Vec<f64>>())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn balance_is_one_minus_the_deviation() {
        assert_eq!(balanced_score(&[0.5, 0.5]), 100);
        assert_eq!(balanced_score(&[0.2, 0.6]), 80);
        assert_eq!(balanced_score(&[1.0, 0.0]), 50);
    }
}
