//! The node: registration (capacity, allocatable, addresses, node info,
//! labels), its status — conditions with upstream's reasons, written when
//! something changed or every 5 minutes, looked at every 10 s — and its
//! Lease in `kube-node-lease`, renewed every 10 s.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::{
    DaemonEndpoint, Node, NodeAddress, NodeCondition, NodeDaemonEndpoints, NodeStatus,
    NodeSystemInfo,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, OwnerReference};
use kube::Client;
use kube::api::{Api, Patch, PatchParams, PostParams};
use rudder_runtime::Timer;
use serde_json::json;

/// How often the agent looks at its node's status (upstream's
/// `nodeStatusUpdateFrequency`) and renews its lease.
pub const STATUS_UPDATE_FREQUENCY: Duration = Duration::from_secs(10);
/// How often an unchanged status is written anyway
/// (`nodeStatusReportFrequency`).
pub const STATUS_REPORT_FREQUENCY: Duration = Duration::from_secs(300);
/// The lease's duration (`nodeLeaseDurationSeconds`).
pub const LEASE_DURATION_SECONDS: i32 = 40;

/// The field manager of the agent's writes, as upstream's kubelet.
pub const FIELD_MANAGER: &str = "kubelet";

/// What the node is made of, read once at start.
#[derive(Debug, Clone, PartialEq)]
pub struct Machine {
    pub cpus: u32,
    pub memory_bytes: u64,
    pub ephemeral_storage_bytes: u64,
    pub kernel_version: String,
    pub os_image: String,
    pub machine_id: String,
    pub boot_id: String,
}

fn read_trimmed(path: &str) -> String {
    std::fs::read_to_string(path)
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

impl Machine {
    /// This machine, read from /proc and /etc.
    pub fn detect(root_dir: &std::path::Path) -> Machine {
        let cpus = std::thread::available_parallelism()
            .map(|n| n.get() as u32)
            .unwrap_or(1);
        let memory_bytes = read_trimmed("/proc/meminfo")
            .lines()
            .find_map(|l| l.strip_prefix("MemTotal:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .map(|kb| kb * 1024)
            .unwrap_or(0);
        let ephemeral_storage_bytes = rustix::fs::statvfs(root_dir)
            .map(|s| s.f_blocks * s.f_frsize)
            .unwrap_or(0);
        let os_image = read_trimmed("/etc/os-release")
            .lines()
            .find_map(|l| l.strip_prefix("PRETTY_NAME="))
            .map(|v| v.trim_matches('"').to_string())
            .unwrap_or_else(|| "Linux".into());
        Machine {
            cpus,
            memory_bytes,
            ephemeral_storage_bytes,
            kernel_version: read_trimmed("/proc/sys/kernel/osrelease"),
            os_image,
            machine_id: read_trimmed("/etc/machine-id"),
            boot_id: read_trimmed("/proc/sys/kernel/random/boot_id"),
        }
    }
}

/// The node agent's view of its node, from which the Node object and its
/// status are made (pure).
#[derive(Debug, Clone, PartialEq)]
pub struct NodeConfig {
    pub name: String,
    pub node_ip: std::net::IpAddr,
    pub hostname: String,
    pub control_plane: bool,
    pub max_pods: u32,
    /// Upstream's `--kube-reserved` + `--system-reserved`, in millicores
    /// and bytes.
    pub reserved_cpu_millis: u64,
    pub reserved_memory_bytes: u64,
    /// Upstream's default hard eviction threshold for memory (100Mi).
    pub eviction_memory_bytes: u64,
    /// The hard eviction threshold of the node file system, in percent
    /// available (upstream: 10).
    pub eviction_nodefs_percent: u64,
    pub kubelet_port: i32,
    pub kubelet_version: String,
}

fn quantity(text: String) -> Quantity {
    Quantity(text)
}

/// Bytes as the API writes quantities (`Ki` when they divide evenly).
fn bytes(b: u64) -> Quantity {
    if b.is_multiple_of(1024) {
        quantity(format!("{}Ki", b / 1024))
    } else {
        quantity(b.to_string())
    }
}

impl NodeConfig {
    pub fn labels(&self) -> BTreeMap<String, String> {
        let arch = crate::images::go_arch().to_string();
        let mut labels: BTreeMap<String, String> = [
            ("kubernetes.io/hostname", self.hostname.clone()),
            ("kubernetes.io/os", "linux".into()),
            ("kubernetes.io/arch", arch.clone()),
            ("beta.kubernetes.io/os", "linux".into()),
            ("beta.kubernetes.io/arch", arch),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        if self.control_plane {
            labels.insert(
                "node-role.kubernetes.io/control-plane".into(),
                String::new(),
            );
        }
        labels
    }

    /// The Node the agent registers.
    pub fn node(
        &self,
        machine: &Machine,
        runtime_version: &str,
        ready: Readiness,
        now: SystemTime,
    ) -> Node {
        Node {
            metadata: ObjectMeta {
                name: Some(self.name.clone()),
                labels: Some(self.labels()),
                annotations: Some(
                    [(
                        "volumes.kubernetes.io/controller-managed-attach-detach".to_string(),
                        "true".to_string(),
                    )]
                    .into(),
                ),
                ..Default::default()
            },
            spec: None,
            status: Some(self.status(
                machine,
                runtime_version,
                ready,
                Pressure::default(),
                None,
                now,
            )),
        }
    }

    /// The node's status now; conditions keep their transition times from
    /// `previous` while they hold.
    pub fn status(
        &self,
        machine: &Machine,
        runtime_version: &str,
        ready: Readiness,
        pressure: Pressure,
        previous: Option<&NodeStatus>,
        now: SystemTime,
    ) -> NodeStatus {
        let capacity: BTreeMap<String, Quantity> = [
            ("cpu".to_string(), quantity(machine.cpus.to_string())),
            ("memory".to_string(), bytes(machine.memory_bytes)),
            (
                "ephemeral-storage".to_string(),
                bytes(machine.ephemeral_storage_bytes),
            ),
            ("pods".to_string(), quantity(self.max_pods.to_string())),
            ("hugepages-1Gi".to_string(), quantity("0".into())),
            ("hugepages-2Mi".to_string(), quantity("0".into())),
        ]
        .into();
        let mut allocatable = capacity.clone();
        let cpu_millis = (u64::from(machine.cpus) * 1000).saturating_sub(self.reserved_cpu_millis);
        allocatable.insert(
            "cpu".into(),
            quantity(if cpu_millis.is_multiple_of(1000) {
                (cpu_millis / 1000).to_string()
            } else {
                format!("{cpu_millis}m")
            }),
        );
        allocatable.insert(
            "memory".into(),
            bytes(
                machine
                    .memory_bytes
                    .saturating_sub(self.reserved_memory_bytes + self.eviction_memory_bytes),
            ),
        );
        // Upstream's default eviction threshold for nodefs: 10% available.
        allocatable.insert(
            "ephemeral-storage".into(),
            quantity(
                (machine.ephemeral_storage_bytes / 100
                    * (100 - self.eviction_nodefs_percent.min(100)))
                .to_string(),
            ),
        );
        let time = crate::api_time(now);
        let old = |kind: &str| {
            previous
                .and_then(|s| s.conditions.as_ref())
                .and_then(|c| c.iter().find(|c| c.type_ == kind))
        };
        let condition = |kind: &str, status: bool, reason: &str, message: &str| {
            let status = if status { "True" } else { "False" };
            let transition = match old(kind) {
                Some(c) if c.status == status => c.last_transition_time.clone(),
                _ => Some(time.clone()),
            };
            NodeCondition {
                type_: kind.into(),
                status: status.into(),
                reason: Some(reason.into()),
                message: Some(message.into()),
                last_heartbeat_time: Some(time.clone()),
                last_transition_time: transition,
            }
        };
        let ready_condition = match &ready {
            Readiness::Ready => condition(
                "Ready",
                true,
                "KubeletReady",
                "kubelet is posting ready status",
            ),
            Readiness::NotReady(message) => condition("Ready", false, "KubeletNotReady", message),
        };
        NodeStatus {
            capacity: Some(capacity),
            allocatable: Some(allocatable),
            conditions: Some(vec![
                if pressure.memory {
                    condition(
                        "MemoryPressure",
                        true,
                        "KubeletHasInsufficientMemory",
                        "kubelet has insufficient memory available",
                    )
                } else {
                    condition(
                        "MemoryPressure",
                        false,
                        "KubeletHasSufficientMemory",
                        "kubelet has sufficient memory available",
                    )
                },
                if pressure.disk {
                    condition(
                        "DiskPressure",
                        true,
                        "KubeletHasDiskPressure",
                        "kubelet has disk pressure",
                    )
                } else {
                    condition(
                        "DiskPressure",
                        false,
                        "KubeletHasNoDiskPressure",
                        "kubelet has no disk pressure",
                    )
                },
                condition(
                    "PIDPressure",
                    false,
                    "KubeletHasSufficientPID",
                    "kubelet has sufficient PID available",
                ),
                ready_condition,
            ]),
            addresses: Some(vec![
                NodeAddress {
                    type_: "InternalIP".into(),
                    address: self.node_ip.to_string(),
                },
                NodeAddress {
                    type_: "Hostname".into(),
                    address: self.hostname.clone(),
                },
            ]),
            daemon_endpoints: Some(NodeDaemonEndpoints {
                kubelet_endpoint: Some(DaemonEndpoint {
                    port: self.kubelet_port,
                }),
            }),
            node_info: Some(NodeSystemInfo {
                architecture: crate::images::go_arch().into(),
                boot_id: machine.boot_id.clone(),
                container_runtime_version: runtime_version.into(),
                kernel_version: machine.kernel_version.clone(),
                kube_proxy_version: String::new(),
                kubelet_version: self.kubelet_version.clone(),
                machine_id: machine.machine_id.clone(),
                operating_system: "linux".into(),
                os_image: machine.os_image.clone(),
                system_uuid: machine.machine_id.clone(),
                ..Default::default()
            }),
            images: previous.and_then(|s| s.images.clone()),
            ..previous.cloned().unwrap_or_default()
        }
    }

    pub fn lease(&self, node_uid: Option<&str>, now: SystemTime) -> Lease {
        Lease {
            metadata: ObjectMeta {
                name: Some(self.name.clone()),
                namespace: Some("kube-node-lease".into()),
                owner_references: node_uid.map(|uid| {
                    vec![OwnerReference {
                        api_version: "v1".into(),
                        kind: "Node".into(),
                        name: self.name.clone(),
                        uid: uid.into(),
                        ..Default::default()
                    }]
                }),
                ..Default::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(self.name.clone()),
                lease_duration_seconds: Some(LEASE_DURATION_SECONDS),
                renew_time: Some(MicroTime(crate::timestamp(now))),
                ..Default::default()
            }),
        }
    }
}

/// The hard eviction signals, measured against the node's thresholds
/// (upstream's defaults: memory.available below 100Mi, nodefs.available
/// below 10%). (PIDs have no default
/// threshold upstream: PIDPressure stays False.)
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Pressure {
    pub memory: bool,
    pub disk: bool,
}

impl Pressure {
    /// This machine now, with `root_dir` the file system the agent's
    /// data lives on, against the node's thresholds.
    pub fn measure(root_dir: &std::path::Path, config: &NodeConfig) -> Pressure {
        let available_kb = read_trimmed("/proc/meminfo")
            .lines()
            .find_map(|l| l.strip_prefix("MemAvailable:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok());
        let memory = available_kb.is_some_and(|kb| kb * 1024 < config.eviction_memory_bytes);
        let disk = rustix::fs::statvfs(root_dir)
            .map(|s| {
                s.f_blocks > 0 && s.f_bavail * 100 < s.f_blocks * config.eviction_nodefs_percent
            })
            .unwrap_or(false);
        Pressure { memory, disk }
    }
}

/// Whether the node can run pods, and if not why (the Ready condition's
/// message).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Readiness {
    Ready,
    NotReady(String),
}

/// The node's images as upstream reports them: the 50 largest, each with
/// its names (digests and tags) and size.
pub fn images(
    mut images: Vec<crate::cri::Image>,
) -> Vec<k8s_openapi::api::core::v1::ContainerImage> {
    images.sort_by(|a, b| b.size.cmp(&a.size).then(a.id.cmp(&b.id)));
    images
        .into_iter()
        .take(50)
        .map(|i| k8s_openapi::api::core::v1::ContainerImage {
            names: Some(i.names),
            size_bytes: Some(i.size as i64),
        })
        .collect()
}

/// Whether two statuses differ in more than their heartbeat times.
pub fn changed(old: &NodeStatus, new: &NodeStatus) -> bool {
    let strip = |s: &NodeStatus| {
        let mut s = s.clone();
        for c in s.conditions.iter_mut().flatten() {
            c.last_heartbeat_time = None;
        }
        s
    };
    strip(old) != strip(new)
}

/// Registers the node, or adopts it when it exists (a restarted agent).
pub async fn register(client: &Client, node: &Node) -> Result<Node, kube::Error> {
    let api: Api<Node> = Api::all(client.clone());
    let name = node.metadata.name.clone().unwrap_or_default();
    match api.create(&PostParams::default(), node).await {
        Ok(created) => {
            tracing::info!(node = %name, "node registered");
            Ok(created)
        }
        Err(kube::Error::Api(status)) if status.code == 409 => {
            // Labels it is missing are added; the rest is the status's.
            let labels = node.metadata.labels.clone().unwrap_or_default();
            let patched = api
                .patch(
                    &name,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"metadata": {"labels": labels}})),
                )
                .await?;
            tracing::info!(node = %name, "node already registered; adopted");
            Ok(patched)
        }
        Err(error) => Err(error),
    }
}

/// Writes the node's status (a strategic merge patch of `nodes/<name>/status`).
pub async fn patch_status(
    client: &Client,
    name: &str,
    status: &NodeStatus,
) -> Result<Node, kube::Error> {
    let api: Api<Node> = Api::all(client.clone());
    let params = PatchParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..Default::default()
    };
    api.patch_status(name, &params, &Patch::Strategic(json!({"status": status})))
        .await
}

/// Renews (or creates) the node's lease.
pub async fn renew_lease(client: &Client, lease: &Lease) -> Result<(), kube::Error> {
    let api: Api<Lease> = Api::namespaced(client.clone(), "kube-node-lease");
    let name = lease.metadata.name.clone().unwrap_or_default();
    match api.get_opt(&name).await? {
        None => {
            api.create(&PostParams::default(), lease).await?;
        }
        Some(mut existing) => {
            existing.spec = lease.spec.clone();
            if existing.metadata.owner_references.is_none() {
                existing.metadata.owner_references = lease.metadata.owner_references.clone();
            }
            api.replace(&name, &PostParams::default(), &existing)
                .await?;
        }
    }
    Ok(())
}

/// Keeps the lease renewed every [`STATUS_UPDATE_FREQUENCY`] until `stop`.
pub async fn run_lease(
    client: Client,
    config: Arc<NodeConfig>,
    node_uid: Option<String>,
    clock: Arc<dyn Timer>,
    stop: tokio_util::sync::CancellationToken,
) {
    loop {
        let lease = config.lease(node_uid.as_deref(), clock.now());
        if let Err(error) = renew_lease(&client, &lease).await {
            tracing::warn!(%error, "could not renew the node lease");
        }
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = clock.sleep(STATUS_UPDATE_FREQUENCY) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> NodeConfig {
        NodeConfig {
            name: "n1".into(),
            node_ip: "192.0.2.10".parse().expect("ip"),
            hostname: "n1".into(),
            control_plane: true,
            max_pods: 110,
            reserved_cpu_millis: 0,
            reserved_memory_bytes: 0,
            eviction_memory_bytes: 100 << 20,
            eviction_nodefs_percent: 10,
            kubelet_port: 10250,
            kubelet_version: "v1.33.0".into(),
        }
    }

    fn machine() -> Machine {
        Machine {
            cpus: 2,
            memory_bytes: 4 << 30,
            ephemeral_storage_bytes: 100 << 30,
            kernel_version: "6.1.0".into(),
            os_image: "Debian GNU/Linux 12 (bookworm)".into(),
            machine_id: "m".into(),
            boot_id: "b".into(),
        }
    }

    #[test]
    fn registration_carries_labels_capacity_and_allocatable() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1000);
        let node = config().node(&machine(), "containerd://1.6.20", Readiness::Ready, now);
        let labels = node.metadata.labels.expect("labels");
        assert_eq!(labels["kubernetes.io/hostname"], "n1");
        assert_eq!(labels["kubernetes.io/os"], "linux");
        assert_eq!(labels["node-role.kubernetes.io/control-plane"], "");
        let status = node.status.expect("status");
        let capacity = status.capacity.expect("capacity");
        assert_eq!(capacity["cpu"].0, "2");
        assert_eq!(capacity["memory"].0, "4194304Ki");
        assert_eq!(capacity["pods"].0, "110");
        let allocatable = status.allocatable.expect("allocatable");
        assert_eq!(
            allocatable["memory"].0, "4091904Ki",
            "100Mi held back for eviction"
        );
        let conditions = status.conditions.expect("conditions");
        let ready = conditions
            .iter()
            .find(|c| c.type_ == "Ready")
            .expect("Ready");
        assert_eq!(
            (ready.status.as_str(), ready.reason.as_deref()),
            ("True", Some("KubeletReady"))
        );
        assert_eq!(
            status.node_info.expect("info").container_runtime_version,
            "containerd://1.6.20"
        );
    }

    #[test]
    fn transition_times_hold_while_a_condition_does_and_heartbeats_are_no_change() {
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1000);
        let t1 = t0 + Duration::from_secs(10);
        let c = config();
        let first = c.status(
            &machine(),
            "x",
            Readiness::NotReady("network not ready".into()),
            Pressure::default(),
            None,
            t0,
        );
        let same = c.status(
            &machine(),
            "x",
            Readiness::NotReady("network not ready".into()),
            Pressure {
                memory: true,
                disk: false,
            },
            Some(&first),
            t1,
        );
        assert!(changed(&first, &same), "memory pressure is a change");
        let memory = same
            .conditions
            .iter()
            .flatten()
            .find(|c| c.type_ == "MemoryPressure")
            .expect("condition");
        assert_eq!(
            (memory.status.as_str(), memory.reason.as_deref()),
            ("True", Some("KubeletHasInsufficientMemory"))
        );
        let same = c.status(
            &machine(),
            "x",
            Readiness::NotReady("network not ready".into()),
            Pressure::default(),
            Some(&first),
            t1,
        );
        assert!(!changed(&first, &same));
        let ready = c.status(
            &machine(),
            "x",
            Readiness::Ready,
            Pressure::default(),
            Some(&same),
            t1,
        );
        assert!(changed(&same, &ready));
        let find = |s: &NodeStatus, t: &str| {
            s.conditions
                .as_ref()
                .expect("c")
                .iter()
                .find(|c| c.type_ == t)
                .cloned()
                .expect("found")
        };
        assert_eq!(
            find(&ready, "Ready").last_transition_time,
            Some(crate::api_time(t1))
        );
        assert_eq!(
            find(&ready, "MemoryPressure").last_transition_time,
            Some(crate::api_time(t0))
        );
    }
}
