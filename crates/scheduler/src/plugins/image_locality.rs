//! ImageLocality: nodes that already have the pod's images score higher,
//! by the images' sizes scaled by how widely they are spread (an image on
//! every node says little about any one of them).

use crate::framework::types::normalize_image;
use crate::framework::{CycleState, MAX_NODE_SCORE, NodeInfo, Plugin, PodInfo, Score};

pub const NAME: &str = "ImageLocality";

const MB: i64 = 1024 * 1024;
/// Below this, images count as absent (`minThreshold`).
const MIN_THRESHOLD: i64 = 23 * MB;
/// Above this per container, images count no more (`maxContainerThreshold`).
const MAX_CONTAINER_THRESHOLD: i64 = 1000 * MB;

/// The plugin; it reads how many nodes have each image from the snapshot,
/// given to it per cycle through the state.
#[derive(Debug, Default)]
pub struct ImageLocality;

/// How many nodes the cycle sees, and how many have each image.
#[derive(Debug)]
pub struct Spread {
    pub total: usize,
    pub image_nodes: std::sync::Arc<std::collections::HashMap<String, usize>>,
}

impl Plugin for ImageLocality {
    fn name(&self) -> &'static str {
        NAME
    }
}

/// The score of an image sum for `containers` containers.
pub fn priority(sum: i64, containers: usize) -> i64 {
    let max = MAX_CONTAINER_THRESHOLD * containers.max(1) as i64;
    let sum = sum.clamp(MIN_THRESHOLD, max);
    MAX_NODE_SCORE * (sum - MIN_THRESHOLD) / (max - MIN_THRESHOLD)
}

impl Score for ImageLocality {
    fn score(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> i64 {
        if node.images.is_empty() {
            return 0;
        }
        let spec = pod.spec();
        let spread = state.read::<Spread>(crate::framework::types::SPREAD_KEY);
        let containers: Vec<&k8s_openapi::api::core::v1::Container> = spec
            .init_containers
            .iter()
            .flatten()
            .chain(spec.containers.iter())
            .collect();
        let sum: i64 = containers
            .iter()
            .filter_map(|c| {
                let image = normalize_image(c.image.as_deref()?);
                let size = *node.images.get(&image)?;
                let (with, total) = spread
                    .map(|s| (s.image_nodes.get(&image).copied().unwrap_or(1), s.total))
                    .unwrap_or((1, 1));
                Some((size as f64 * with as f64 / total.max(1) as f64) as i64)
            })
            .sum();
        priority(sum, containers.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scores_scale_between_the_thresholds() {
        assert_eq!(priority(0, 1), 0);
        assert_eq!(priority(MAX_CONTAINER_THRESHOLD, 1), 100);
        assert_eq!(priority(MAX_CONTAINER_THRESHOLD * 2, 1), 100);
        assert_eq!(
            priority(
                MIN_THRESHOLD + (MAX_CONTAINER_THRESHOLD - MIN_THRESHOLD) / 2,
                1
            ),
            50
        );
    }
}
