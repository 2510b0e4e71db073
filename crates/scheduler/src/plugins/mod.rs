//! The plugins, one module each with upstream's name and reasons, and the
//! registry that builds a profile's plugins by name.

pub mod default_binder;
pub mod default_preemption;
pub mod helpers;
pub mod image_locality;
pub mod inter_pod_affinity;
pub mod node_affinity;
pub mod node_name;
pub mod node_ports;
pub mod node_resources_balanced_allocation;
pub mod node_resources_fit;
pub mod node_unschedulable;
pub mod node_volume_limits;
pub mod pod_topology_spread;
pub mod scheduling_gates;
pub mod taint_toleration;
pub mod volume_binding;
pub mod volume_restrictions;
pub mod volume_zone;

/// The queue's order: upstream's only QueueSort plugin (priority, then
/// age), built into the queue.
pub const PRIORITY_SORT: &str = "PrioritySort";
