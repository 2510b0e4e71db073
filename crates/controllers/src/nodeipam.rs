//! Node IPAM (upstream's `pkg/controller/nodeipam`, the range allocator):
//! every Node gets a `spec.podCIDR` — the next free /24 of the cluster CIDR
//! (10.42.0.0/16 unless `--cluster-cidr` says otherwise) — from which its
//! node agent gives pods their addresses; a deleted Node's range is free
//! again. An exhausted CIDR is reported with upstream's `CIDRNotAvailable`
//! event on the Node.

use std::collections::BTreeSet;
use std::net::Ipv4Addr;
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::Node;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use rudder_runtime::controller::Action;
use rudder_runtime::events::reference_to;
use rudder_runtime::informer::{Store, key_of};
use rudder_runtime::{Change, EventType, Recorder, WorkQueue};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::Context;
use crate::is_status;

/// An IPv4 CIDR cut into node ranges of `mask` bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ranges {
    base: u32,
    prefix: u8,
    mask: u8,
}

impl Ranges {
    /// `cidr` (`10.42.0.0/16`) in ranges of `/mask`.
    pub fn parse(cidr: &str, mask: u8) -> Result<Ranges, String> {
        let parsed: rudder_api::network::Cidr = cidr.parse().map_err(|e| format!("{e}"))?;
        let prefix = parsed.prefix;
        if mask < prefix || mask > 32 {
            return Err(format!(
                "node CIDR mask /{mask} must be longer than the cluster CIDR's /{prefix}"
            ));
        }
        Ok(Ranges {
            base: u32::from(parsed.base),
            prefix,
            mask,
        })
    }

    /// How many node ranges there are.
    pub fn count(&self) -> u32 {
        1u32.checked_shl(u32::from(self.mask - self.prefix))
            .unwrap_or(u32::MAX)
    }

    /// The `index`th range, as text.
    pub fn range(&self, index: u32) -> String {
        let step = 1u64 << (32 - self.mask);
        let start = u64::from(self.base) + u64::from(index) * step;
        format!("{}/{}", Ipv4Addr::from(start as u32), self.mask)
    }

    /// The index of `cidr` if it is one of the ranges.
    pub fn index_of(&self, cidr: &str) -> Option<u32> {
        let (address, mask) = cidr.split_once('/')?;
        if mask.parse::<u8>().ok()? != self.mask {
            return None;
        }
        let address = u32::from(address.parse::<Ipv4Addr>().ok()?);
        let offset = address.checked_sub(self.base)?;
        let index = offset >> (32 - self.mask);
        (index < self.count() && offset.trailing_zeros() >= u32::from(32 - self.mask))
            .then_some(index)
    }
}

struct Controller {
    ctx: Arc<Context>,
    nodes: Store<Node>,
    queue: WorkQueue<String>,
    recorder: Recorder,
    ranges: Ranges,
    used: Mutex<BTreeSet<u32>>,
}

/// Runs node IPAM until `stop` fires.
pub async fn run(ctx: Arc<Context>, stop: CancellationToken) {
    let ranges = match Ranges::parse(&ctx.options.cluster_cidr, ctx.options.node_cidr_mask) {
        Ok(ranges) => ranges,
        Err(error) => {
            tracing::error!(%error, "node IPAM cannot start");
            return;
        }
    };
    let nodes = ctx.informers.typed::<Node>();
    let mut changes = nodes.subscribe();
    let c = Arc::new(Controller {
        nodes: nodes.store(),
        queue: WorkQueue::new(ctx.clock.clone()),
        recorder: Recorder::new(
            ctx.client.clone(),
            "node-ipam-controller",
            &ctx.identity,
            ctx.clock.clone(),
        ),
        ranges,
        used: Mutex::default(),
        ctx: ctx.clone(),
    });
    nodes.wait_synced().await;
    // What the Nodes hold is taken before anything is handed out.
    for node in c.nodes.list() {
        c.occupy(&node);
    }
    c.nodes.keys().into_iter().for_each(|k| c.queue.add(k));
    let watch = {
        let (c, stop) = (c.clone(), stop.clone());
        async move {
            while let Some(change) = changes.next_until(&stop).await {
                match change {
                    Change::Applied { new, .. } => {
                        c.occupy(&new);
                        c.queue.add(key_of(&*new));
                    }
                    Change::Deleted(old) => c.release(&old),
                    Change::Resync => c.nodes.keys().into_iter().for_each(|k| c.queue.add(k)),
                }
            }
        }
    };
    crate::serve(
        "node-ipam",
        c.clone(),
        c.queue.clone(),
        1,
        Some(c.recorder.clone()),
        watch,
        stop,
        |c, key| async move { c.sync(&key).await },
    )
    .await;
}

fn pod_cidr(node: &Node) -> Option<&str> {
    node.spec
        .as_ref()?
        .pod_cidr
        .as_deref()
        .filter(|c| !c.is_empty())
}

impl Controller {
    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeSet<u32>> {
        self.used.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn occupy(&self, node: &Node) {
        if let Some(index) = pod_cidr(node).and_then(|c| self.ranges.index_of(c)) {
            self.lock().insert(index);
        }
    }

    fn release(&self, node: &Node) {
        if let Some(index) = pod_cidr(node).and_then(|c| self.ranges.index_of(c)) {
            self.lock().remove(&index);
        }
    }

    async fn sync(&self, key: &str) -> Result<Action, kube::Error> {
        let Some(node) = self.nodes.get(key) else {
            return Ok(Action::Done);
        };
        if pod_cidr(&node).is_some() || node.metadata.deletion_timestamp.is_some() {
            return Ok(Action::Done);
        }
        let index = {
            let mut used = self.lock();
            let free = (0..self.ranges.count()).find(|i| !used.contains(i));
            if let Some(i) = free {
                used.insert(i);
            }
            free
        };
        let Some(index) = index else {
            self.recorder.event(
                &reference_to(&*node),
                EventType::Normal,
                "CIDRNotAvailable",
                "CIDRAssignment",
                &format!("Node {} status is now: CIDRNotAvailable", node.name_any()),
            );
            return Ok(Action::Retry);
        };
        let cidr = self.ranges.range(index);
        let patch = json!({"spec": {"podCIDR": cidr, "podCIDRs": [cidr]}});
        match Api::<Node>::all(self.ctx.client.clone())
            .patch(
                &node.name_any(),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await
        {
            Ok(_) => Ok(Action::Done),
            Err(e) => {
                self.lock().remove(&index);
                if is_status(&e, 404) {
                    Ok(Action::Done)
                } else {
                    Err(e)
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cluster_cidr_is_cut_into_node_ranges() {
        let r = Ranges::parse("10.42.0.0/16", 24).expect("valid");
        assert_eq!(r.count(), 256);
        assert_eq!(r.range(0), "10.42.0.0/24");
        assert_eq!(r.range(255), "10.42.255.0/24");
        assert_eq!(r.index_of("10.42.7.0/24"), Some(7));
        assert_eq!(r.index_of("10.43.0.0/24"), None, "outside");
        assert_eq!(r.index_of("10.42.7.1/24"), None, "not a range start");
        assert_eq!(r.index_of("10.42.7.0/25"), None, "another size");
        assert!(Ranges::parse("10.42.0.0/16", 8).is_err());
        assert!(Ranges::parse("nonsense", 24).is_err());
    }
}
