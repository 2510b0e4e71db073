//! What the scheduler knows of pods and nodes (upstream's
//! `framework/types.go`): a pod's resource requests computed once
//! ([`PodInfo`]), and per node its allocatable resources, the pods on it
//! (bound or assumed), their summed requests and the host ports they hold
//! ([`NodeInfo`]).

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Container, Node, Pod};
use rudder_api::quantity::Quantity;

use super::affinity::PodAffinityTerms;

/// What upstream counts a container without a cpu request as, when
/// scoring (`DefaultMilliCPURequest`).
pub const DEFAULT_MILLI_CPU_REQUEST: i64 = 100;
/// The same for memory (`DefaultMemoryRequest`, 200 MiB).
pub const DEFAULT_MEMORY_REQUEST: i64 = 200 * 1024 * 1024;

/// Where the cycle state keeps the snapshot's image spread.
pub const SPREAD_KEY: &str = "ImageLocality/spread";

/// An amount of each resource: cpu in thousandths, the rest in units
/// (upstream's `framework.Resource`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Resource {
    pub milli_cpu: i64,
    pub memory: i64,
    pub ephemeral_storage: i64,
    /// Pods a node allows (`allocatable.pods`); unused for a pod.
    pub allowed_pods: i64,
    /// Extended resources and hugepages by name.
    pub scalar: BTreeMap<String, i64>,
}

impl Resource {
    /// From a ResourceList (requests, limits, allocatable).
    pub fn from_list(
        list: Option<&BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>>,
    ) -> Self {
        let mut r = Resource::default();
        for (name, q) in list.into_iter().flatten() {
            let Ok(q) = Quantity::parse(&q.0) else {
                continue;
            };
            match name.as_str() {
                "cpu" => r.milli_cpu = q.milli_value() as i64,
                "memory" => r.memory = q.value() as i64,
                "ephemeral-storage" => r.ephemeral_storage = q.value() as i64,
                "pods" => r.allowed_pods = q.value() as i64,
                other if is_scalar(other) => {
                    r.scalar.insert(other.to_string(), q.value() as i64);
                }
                _ => {}
            }
        }
        r
    }

    pub fn add(&mut self, other: &Resource) {
        self.milli_cpu += other.milli_cpu;
        self.memory += other.memory;
        self.ephemeral_storage += other.ephemeral_storage;
        for (name, v) in &other.scalar {
            *self.scalar.entry(name.clone()).or_default() += v;
        }
    }

    pub fn sub(&mut self, other: &Resource) {
        self.milli_cpu -= other.milli_cpu;
        self.memory -= other.memory;
        self.ephemeral_storage -= other.ephemeral_storage;
        for (name, v) in &other.scalar {
            *self.scalar.entry(name.clone()).or_default() -= v;
        }
    }

    /// Each resource at the larger of the two.
    fn max_with(&mut self, other: &Resource) {
        self.milli_cpu = self.milli_cpu.max(other.milli_cpu);
        self.memory = self.memory.max(other.memory);
        self.ephemeral_storage = self.ephemeral_storage.max(other.ephemeral_storage);
        for (name, v) in &other.scalar {
            let have = self.scalar.entry(name.clone()).or_default();
            *have = (*have).max(*v);
        }
    }

    /// The amount of a named resource (`cpu` in thousandths).
    pub fn get(&self, name: &str) -> i64 {
        match ResourceName::builtin(name) {
            Some(builtin) => self.amount(&builtin),
            // No name allocated per call: Fit asks per node and resource.
            None => self.scalar.get(name).copied().unwrap_or(0),
        }
    }

    /// The same, by a name resolved once (what scoring uses per node).
    pub fn amount(&self, name: &ResourceName) -> i64 {
        match name {
            ResourceName::Cpu => self.milli_cpu,
            ResourceName::Memory => self.memory,
            ResourceName::EphemeralStorage => self.ephemeral_storage,
            ResourceName::Pods => self.allowed_pods,
            ResourceName::Scalar(other) => self.scalar.get(other).copied().unwrap_or(0),
        }
    }
}

/// A resource's name, resolved to the field that counts it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResourceName {
    Cpu,
    Memory,
    EphemeralStorage,
    Pods,
    /// Extended resources, hugepages and anything else, by name.
    Scalar(String),
}

impl ResourceName {
    /// The resources counted in fields of their own.
    fn builtin(name: &str) -> Option<ResourceName> {
        match name {
            "cpu" => Some(ResourceName::Cpu),
            "memory" => Some(ResourceName::Memory),
            "ephemeral-storage" => Some(ResourceName::EphemeralStorage),
            "pods" => Some(ResourceName::Pods),
            _ => None,
        }
    }
}

impl From<&str> for ResourceName {
    fn from(name: &str) -> Self {
        ResourceName::builtin(name).unwrap_or_else(|| ResourceName::Scalar(name.to_string()))
    }
}

/// Extended resources (`example.com/gpu`) and hugepages: counted by name.
fn is_scalar(name: &str) -> bool {
    name.starts_with("hugepages-")
        || (name.contains('/') && !name.starts_with("kubernetes.io/"))
        || name.starts_with("attachable-volumes-")
}

/// A container's requests, and the same with upstream's non-zero defaults
/// for cpu and memory (what scoring counts).
fn container_requests(c: &Container) -> (Resource, Resource) {
    let requests = Resource::from_list(c.resources.as_ref().and_then(|r| r.requests.as_ref()));
    let mut non_zero = requests.clone();
    let named = |n: &str| {
        c.resources
            .as_ref()
            .and_then(|r| r.requests.as_ref())
            .is_some_and(|r| r.contains_key(n))
    };
    if !named("cpu") {
        non_zero.milli_cpu = DEFAULT_MILLI_CPU_REQUEST;
    }
    if !named("memory") {
        non_zero.memory = DEFAULT_MEMORY_REQUEST;
    }
    (requests, non_zero)
}

/// A pod's requests as the scheduler counts them (upstream's
/// `resourcehelper.PodRequests`): the containers' sum; each init
/// container in turn beside the sidecars started before it, where larger;
/// the sidecars added to the sum; the pod's overhead on top. The second is
/// the same with non-zero defaults.
pub fn pod_requests(pod: &Pod) -> (Resource, Resource) {
    let Some(spec) = pod.spec.as_ref() else {
        return Default::default();
    };
    let (mut sum, mut sum_non_zero) = (Resource::default(), Resource::default());
    for c in &spec.containers {
        let (r, n) = container_requests(c);
        sum.add(&r);
        sum_non_zero.add(&n);
    }
    let (mut sidecars, mut sidecars_non_zero) = (Resource::default(), Resource::default());
    let (mut peak, mut peak_non_zero) = (Resource::default(), Resource::default());
    for c in spec.init_containers.iter().flatten() {
        let (r, n) = container_requests(c);
        if c.restart_policy.as_deref() == Some("Always") {
            sidecars.add(&r);
            sidecars_non_zero.add(&n);
            peak.max_with(&sidecars);
            peak_non_zero.max_with(&sidecars_non_zero);
        } else {
            let (mut with, mut with_non_zero) = (sidecars.clone(), sidecars_non_zero.clone());
            with.add(&r);
            with_non_zero.add(&n);
            peak.max_with(&with);
            peak_non_zero.max_with(&with_non_zero);
        }
    }
    sum.add(&sidecars);
    sum_non_zero.add(&sidecars_non_zero);
    sum.max_with(&peak);
    sum_non_zero.max_with(&peak_non_zero);
    let overhead = Resource::from_list(spec.overhead.as_ref());
    sum.add(&overhead);
    sum_non_zero.add(&overhead);
    (sum, sum_non_zero)
}

/// A host port a pod holds: protocol, host IP (`0.0.0.0` for any) and port.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct HostPort {
    pub protocol: String,
    pub ip: String,
    pub port: i32,
}

/// The host ports a pod asks for.
pub fn host_ports(pod: &Pod) -> Vec<HostPort> {
    let Some(spec) = pod.spec.as_ref() else {
        return Vec::new();
    };
    spec.containers
        .iter()
        .chain(
            spec.init_containers
                .iter()
                .flatten()
                .filter(|c| c.restart_policy.as_deref() == Some("Always")),
        )
        .flat_map(|c| c.ports.iter().flatten())
        .filter_map(|p| {
            let port = p.host_port.filter(|p| *p > 0)?;
            Some(HostPort {
                protocol: p.protocol.clone().unwrap_or_else(|| "TCP".into()),
                ip: p
                    .host_ip
                    .clone()
                    .filter(|ip| !ip.is_empty())
                    .unwrap_or_else(|| "0.0.0.0".into()),
                port,
            })
        })
        .collect()
}

/// A pod and what is computed of it once per scheduling attempt.
#[derive(Debug, Clone)]
pub struct PodInfo {
    pub pod: Arc<Pod>,
    /// `namespace/name`.
    pub key: String,
    pub requests: Resource,
    pub non_zero_requests: Resource,
    pub ports: Vec<HostPort>,
    /// Its pod affinity and anti-affinity terms, parsed.
    pub affinity: PodAffinityTerms,
}

impl PodInfo {
    pub fn new(pod: Arc<Pod>) -> Self {
        let (requests, non_zero_requests) = pod_requests(&pod);
        let ports = host_ports(&pod);
        let affinity = PodAffinityTerms::new(&pod);
        let key = format!(
            "{}/{}",
            pod.metadata.namespace.as_deref().unwrap_or_default(),
            pod.metadata.name.as_deref().unwrap_or_default()
        );
        PodInfo {
            pod,
            key,
            requests,
            non_zero_requests,
            ports,
            affinity,
        }
    }

    pub fn namespace(&self) -> &str {
        self.pod.metadata.namespace.as_deref().unwrap_or_default()
    }

    pub fn spec(&self) -> &k8s_openapi::api::core::v1::PodSpec {
        static EMPTY: std::sync::OnceLock<k8s_openapi::api::core::v1::PodSpec> =
            std::sync::OnceLock::new();
        self.pod
            .spec
            .as_ref()
            .unwrap_or_else(|| EMPTY.get_or_init(Default::default))
    }

    /// `spec.priority`, 0 when unset (upstream's `PodPriority`).
    pub fn priority(&self) -> i32 {
        self.spec().priority.unwrap_or(0)
    }

    /// Whether the pod has pod affinity or anti-affinity terms.
    pub fn has_pod_affinity(&self) -> bool {
        self.spec()
            .affinity
            .as_ref()
            .is_some_and(|a| a.pod_affinity.is_some() || a.pod_anti_affinity.is_some())
    }
}

/// A node and the pods on it (upstream's `NodeInfo`).
#[derive(Debug, Clone)]
pub struct NodeInfo {
    pub node: Arc<Node>,
    pub name: String,
    pub allocatable: Resource,
    /// The pods bound or assumed to the node.
    pub pods: Vec<Arc<PodInfo>>,
    /// The summed requests of `pods`.
    pub requested: Resource,
    /// The same with non-zero cpu and memory defaults (for scoring).
    pub non_zero_requested: Resource,
    pub used_ports: HashSet<HostPort>,
    /// How many of `pods` have pod affinity or anti-affinity terms.
    pub pods_with_affinity: usize,
    /// Images on the node by name, with their sizes (from `status.images`).
    pub images: BTreeMap<String, i64>,
    /// `spec.unschedulable` and `spec.taints`, kept here so the filters
    /// every cycle runs on hundreds of nodes read them without following
    /// the pointer to the Node object.
    pub unschedulable: bool,
    pub taints: Vec<k8s_openapi::api::core::v1::Taint>,
}

impl NodeInfo {
    pub fn new(node: Arc<Node>) -> Self {
        let name = node.metadata.name.clone().unwrap_or_default();
        let status = node.status.as_ref();
        let allocatable = Resource::from_list(
            status
                .and_then(|s| s.allocatable.as_ref())
                .or_else(|| status.and_then(|s| s.capacity.as_ref())),
        );
        let images = status
            .and_then(|s| s.images.as_ref())
            .into_iter()
            .flatten()
            .flat_map(|i| {
                let size = i.size_bytes.unwrap_or(0);
                i.names
                    .iter()
                    .flatten()
                    .map(move |n| (normalize_image(n), size))
            })
            .collect();
        let spec = node.spec.as_ref();
        NodeInfo {
            unschedulable: spec.and_then(|s| s.unschedulable).unwrap_or(false),
            taints: spec.and_then(|s| s.taints.clone()).unwrap_or_default(),
            node,
            name,
            allocatable,
            pods: Vec::new(),
            requested: Resource::default(),
            non_zero_requested: Resource::default(),
            used_ports: HashSet::new(),
            pods_with_affinity: 0,
            images,
        }
    }

    /// The same node with a new Node object, its pods kept.
    pub fn with_node(&self, node: Arc<Node>) -> Self {
        let mut fresh = NodeInfo::new(node);
        for p in &self.pods {
            fresh.add_pod(p.clone());
        }
        fresh
    }

    pub fn add_pod(&mut self, pod: Arc<PodInfo>) {
        self.requested.add(&pod.requests);
        self.non_zero_requested.add(&pod.non_zero_requests);
        self.used_ports.extend(pod.ports.iter().cloned());
        if pod.has_pod_affinity() {
            self.pods_with_affinity += 1;
        }
        self.pods.push(pod);
    }

    /// Removes the pod `key`; it, if it was there.
    pub fn remove_pod(&mut self, key: &str) -> Option<Arc<PodInfo>> {
        let at = self.pods.iter().position(|p| p.key == key)?;
        let pod = self.pods.swap_remove(at);
        self.requested.sub(&pod.requests);
        self.non_zero_requested.sub(&pod.non_zero_requests);
        if pod.has_pod_affinity() {
            self.pods_with_affinity -= 1;
        }
        self.used_ports = self
            .pods
            .iter()
            .flat_map(|p| p.ports.iter().cloned())
            .collect();
        Some(pod)
    }

    pub fn labels(&self) -> &BTreeMap<String, String> {
        static EMPTY: BTreeMap<String, String> = BTreeMap::new();
        self.node.metadata.labels.as_ref().unwrap_or(&EMPTY)
    }
}

/// An image name as nodes report it: with the `docker.io/library/`
/// prefix and `:latest` tag a bare name implies (upstream's
/// `normalizedImageName`, which only adds the tag).
pub fn normalize_image(name: &str) -> String {
    let last = name.rsplit('/').next().unwrap_or(name);
    if name.contains('@') || last.contains(':') {
        name.to_string()
    } else {
        format!("{name}:latest")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(spec: serde_json::Value) -> Pod {
        serde_json::from_value(
            serde_json::json!({"metadata": {"name": "p", "namespace": "n"}, "spec": spec}),
        )
        .expect("pod")
    }

    #[test]
    fn requests_count_init_containers_sidecars_and_overhead() {
        let p = pod(serde_json::json!({
            "containers": [
                {"name": "a", "resources": {"requests": {"cpu": "100m", "memory": "1Gi"}}},
                {"name": "b", "resources": {"requests": {"cpu": "200m"}}},
            ],
            "initContainers": [
                {"name": "side", "restartPolicy": "Always", "resources": {"requests": {"cpu": "50m"}}},
                {"name": "init", "resources": {"requests": {"cpu": "1", "memory": "10Mi"}}},
            ],
            "overhead": {"cpu": "10m"},
        }));
        let (requests, non_zero) = pod_requests(&p);
        // max(100m+200m+50m, 50m+1000m) + 10m
        assert_eq!(requests.milli_cpu, 1060);
        assert_eq!(requests.memory, 1 << 30);
        // b asks for no memory: 200 MiB when scoring.
        assert_eq!(
            non_zero.memory,
            (1 << 30) + DEFAULT_MEMORY_REQUEST + DEFAULT_MEMORY_REQUEST
        );
    }

    #[test]
    fn node_infos_track_their_pods() {
        let node: Node = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "n1"},
            "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"}},
        }))
        .expect("node");
        let mut info = NodeInfo::new(Arc::new(node));
        assert_eq!(info.allocatable.milli_cpu, 4000);
        assert_eq!(info.allocatable.allowed_pods, 110);
        let p = pod(serde_json::json!({"containers": [
            {"name": "a", "resources": {"requests": {"cpu": "1"}}, "ports": [{"containerPort": 80, "hostPort": 8080}]}
        ]}));
        info.add_pod(Arc::new(PodInfo::new(Arc::new(p))));
        assert_eq!(info.requested.milli_cpu, 1000);
        assert_eq!(info.used_ports.len(), 1);
        assert!(info.remove_pod("n/p").is_some());
        assert_eq!(info.requested.milli_cpu, 0);
        assert!(info.used_ports.is_empty());
    }

    #[test]
    fn image_names_get_the_implied_tag() {
        assert_eq!(normalize_image("busybox"), "busybox:latest");
        assert_eq!(
            normalize_image("registry:5000/busybox"),
            "registry:5000/busybox:latest"
        );
        assert_eq!(normalize_image("busybox:1"), "busybox:1");
    }
}
