//! The service proxy: what makes a Service's address reach its pods. From
//! Services and EndpointSlices (the shared informers) it keeps one
//! nftables table, `ip rudder-proxy`, in step — ClusterIPs, NodePorts,
//! externalIPs and LoadBalancer addresses DNAT'ed to ready endpoints —
//! with upstream kube-proxy's nftables mode as the model (see
//! docs/proxy.md for where and why the layout differs).
//!
//! - [`model`]: Services and EndpointSlices as the proxy sees them;
//! - [`topology`]: which endpoints serve which traffic (upstream's
//!   `CategorizeEndpoints`);
//! - [`rules`]: a Service's share of the ruleset, a pure function;
//! - [`table`]: the programmed state in memory and the transaction that
//!   takes the kernel from one state to the next, only what changed;
//! - [`proxier`]: the loop that watches, computes and applies;
//! - [`health`]: the `healthCheckNodePort` servers.

pub mod conntrack;
pub mod health;
pub mod model;
pub mod proxier;
pub mod rules;
pub mod table;
#[cfg(test)]
mod testing;
pub mod topology;

pub use proxier::{Options, cleanup, run};
