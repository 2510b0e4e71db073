//! A pod and its containers as CRI configs (upstream's
//! `kuberuntime_sandbox.go` and `kuberuntime_container.go`): metadata,
//! the labels and annotations that tie runtime objects back to the pod,
//! log paths, namespaces (an ephemeral container's its target's process
//! namespace), command, args, env and resources (pure).

use std::collections::HashMap;
use std::path::Path;

use k8s_openapi::api::core::v1::{Container, EphemeralContainer, Pod};
use kube::ResourceExt;

use crate::cri::v1 as cri;
use crate::cri::{CONTAINER_NAME_LABEL, POD_NAME_LABEL, POD_NAMESPACE_LABEL, POD_UID_LABEL};

/// The annotation carrying a container's restart count.
pub const RESTART_COUNT_ANNOTATION: &str = "io.kubernetes.container.restartCount";
/// The annotation marking an init container (its kind).
pub const CONTAINER_KIND_ANNOTATION: &str = "io.kubernetes.container.kind";

/// The pod's log directory: `<root>/<namespace>_<name>_<uid>`.
pub fn log_directory(root: &Path, pod: &Pod) -> String {
    root.join(format!(
        "{}_{}_{}",
        pod.namespace().unwrap_or_default(),
        pod.name_any(),
        pod.uid().unwrap_or_default()
    ))
    .display()
    .to_string()
}

fn pod_labels(pod: &Pod) -> HashMap<String, String> {
    [
        (POD_NAME_LABEL, pod.name_any()),
        (POD_NAMESPACE_LABEL, pod.namespace().unwrap_or_default()),
        (POD_UID_LABEL, pod.uid().unwrap_or_default()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

fn host_network(pod: &Pod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.host_network)
        .unwrap_or(false)
}

/// The pod's namespaces: the node's network for `hostNetwork` pods, one
/// PID namespace for the pod with `shareProcessNamespace`, IPC per pod.
fn namespace_options(pod: &Pod) -> cri::NamespaceOption {
    let shared_pids = pod
        .spec
        .as_ref()
        .and_then(|s| s.share_process_namespace)
        .unwrap_or(false);
    let mode = |pod_wide: bool, node: bool| {
        if node {
            cri::NamespaceMode::Node
        } else if pod_wide {
            cri::NamespaceMode::Pod
        } else {
            cri::NamespaceMode::Container
        }
    };
    cri::NamespaceOption {
        network: mode(true, host_network(pod)) as i32,
        pid: mode(shared_pids, false) as i32,
        ipc: cri::NamespaceMode::Pod as i32,
        ..Default::default()
    }
}

/// The pod's sandbox config for its `attempt`-th sandbox: its names, its
/// namespaces, and the DNS config the runtime writes its resolv.conf
/// from.
pub fn sandbox_config(
    pod: &Pod,
    attempt: u32,
    log_root: &Path,
    dns: &super::dns::Settings,
) -> cri::PodSandboxConfig {
    let mut labels: HashMap<String, String> = pod
        .labels()
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    labels.extend(pod_labels(pod));
    labels.insert("io.kubernetes.container.type".into(), "podsandbox".into());
    let hostname = if host_network(pod) {
        String::new()
    } else {
        super::dns::kernel_hostname(pod, &dns.cluster_domain)
    };
    cri::PodSandboxConfig {
        metadata: Some(cri::PodSandboxMetadata {
            name: pod.name_any(),
            uid: pod.uid().unwrap_or_default(),
            namespace: pod.namespace().unwrap_or_default(),
            attempt,
        }),
        hostname,
        dns_config: Some(super::dns::dns_config(pod, dns).0),
        log_directory: log_directory(log_root, pod),
        labels,
        annotations: pod
            .annotations()
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
        linux: Some(cri::LinuxPodSandboxConfig {
            security_context: Some(cri::LinuxSandboxSecurityContext {
                namespace_options: Some(namespace_options(pod)),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// Upstream's `$(VAR)` expansion of command and args: `$(NAME)` is the
/// value of NAME when defined, `$$` is `$`, anything else stays as it is.
pub fn expand(text: &str, env: &[cri::KeyValue]) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        if let Some(stripped) = after.strip_prefix('$') {
            out.push('$');
            rest = stripped;
        } else if let Some(inner) = after.strip_prefix('(')
            && let Some(end) = inner.find(')')
        {
            let name = &inner[..end];
            match env.iter().rev().find(|kv| kv.key == name) {
                Some(kv) => out.push_str(&kv.value),
                None => {
                    out.push_str("$(");
                    out.push_str(name);
                    out.push(')');
                }
            }
            rest = &inner[end + 1..];
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

fn resources(container: &Container) -> cri::LinuxContainerResources {
    use rudder_api::quantity::Quantity;
    let read = |map: Option<
        &std::collections::BTreeMap<
            String,
            k8s_openapi::apimachinery::pkg::api::resource::Quantity,
        >,
    >,
                key: &str| {
        map.and_then(|m| m.get(key))
            .and_then(|q| Quantity::parse(&q.0).ok())
    };
    let requests = container
        .resources
        .as_ref()
        .and_then(|r| r.requests.as_ref());
    let limits = container.resources.as_ref().and_then(|r| r.limits.as_ref());
    let cpu_request = read(requests, "cpu").or_else(|| read(limits, "cpu"));
    let cpu_limit = read(limits, "cpu");
    let memory_limit = read(limits, "memory");
    // Upstream's MilliCPUToShares: at least 2, 1024 per CPU.
    let shares = cpu_request
        .map(|q| (q.milli_value() * 1024 / 1000).max(2) as i64)
        .unwrap_or(2);
    let period = 100_000;
    let quota = cpu_limit
        .map(|q| (q.milli_value() * period as i128 / 1000).max(1000) as i64)
        .unwrap_or(0);
    cri::LinuxContainerResources {
        cpu_shares: shares,
        cpu_period: if quota > 0 { period } else { 0 },
        cpu_quota: quota,
        memory_limit_in_bytes: memory_limit.map(|q| q.value() as i64).unwrap_or(0),
        ..Default::default()
    }
}

/// The container's security context: its own settings over the pod's
/// (`runAsUser`, `runAsGroup`), the pod's supplemental groups and
/// `fsGroup`, capabilities, `privileged`, `readOnlyRootFilesystem`,
/// `allowPrivilegeEscalation: false` as no_new_privs.
pub fn security_context(pod: &Pod, container: &Container) -> cri::LinuxContainerSecurityContext {
    let pod_context = pod
        .spec
        .as_ref()
        .and_then(|s| s.security_context.clone())
        .unwrap_or_default();
    let own = container.security_context.clone().unwrap_or_default();
    let user = own.run_as_user.or(pod_context.run_as_user);
    let group = own.run_as_group.or(pod_context.run_as_group);
    let mut groups: Vec<i64> = pod_context.supplemental_groups.clone().unwrap_or_default();
    groups.extend(pod_context.fs_group);
    let capabilities = own.capabilities.map(|c| cri::Capability {
        add_capabilities: c.add.unwrap_or_default(),
        drop_capabilities: c.drop.unwrap_or_default(),
        ..Default::default()
    });
    cri::LinuxContainerSecurityContext {
        capabilities,
        privileged: own.privileged.unwrap_or(false),
        run_as_user: user.map(|value| cri::Int64Value { value }),
        run_as_group: group.map(|value| cri::Int64Value { value }),
        readonly_rootfs: own.read_only_root_filesystem.unwrap_or(false),
        supplemental_groups: groups,
        no_new_privs: own.allow_privilege_escalation == Some(false),
        ..Default::default()
    }
}

/// The config of `container`'s `attempt`-th instance in the pod.
pub fn container_config(
    pod: &Pod,
    container: &Container,
    attempt: u32,
    init: bool,
    env: Vec<cri::KeyValue>,
    mounts: Vec<cri::Mount>,
) -> cri::ContainerConfig {
    let mut labels = pod_labels(pod);
    labels.insert(CONTAINER_NAME_LABEL.into(), container.name.clone());
    let mut annotations: HashMap<String, String> = HashMap::new();
    annotations.insert(RESTART_COUNT_ANNOTATION.into(), attempt.to_string());
    annotations.insert(
        "io.kubernetes.container.terminationMessagePath".into(),
        container
            .termination_message_path
            .clone()
            .unwrap_or_else(|| "/dev/termination-log".into()),
    );
    if init {
        annotations.insert(CONTAINER_KIND_ANNOTATION.into(), "init".into());
    }
    let grace = pod
        .spec
        .as_ref()
        .and_then(|s| s.termination_grace_period_seconds)
        .unwrap_or(30);
    annotations.insert(
        "io.kubernetes.pod.terminationGracePeriod".into(),
        grace.to_string(),
    );
    cri::ContainerConfig {
        metadata: Some(cri::ContainerMetadata {
            name: container.name.clone(),
            attempt,
        }),
        image: Some(cri::ImageSpec {
            image: container.image.clone().unwrap_or_default(),
            ..Default::default()
        }),
        command: container
            .command
            .iter()
            .flatten()
            .map(|c| expand(c, &env))
            .collect(),
        args: container
            .args
            .iter()
            .flatten()
            .map(|a| expand(a, &env))
            .collect(),
        working_dir: container.working_dir.clone().unwrap_or_default(),
        envs: env,
        mounts,
        labels,
        annotations,
        log_path: format!("{}/{attempt}.log", container.name),
        stdin: container.stdin.unwrap_or(false),
        stdin_once: container.stdin_once.unwrap_or(false),
        tty: container.tty.unwrap_or(false),
        linux: Some(cri::LinuxContainerConfig {
            resources: Some(resources(container)),
            security_context: Some(cri::LinuxContainerSecurityContext {
                namespace_options: Some(namespace_options(pod)),
                ..security_context(pod, container)
            }),
        }),
        ..Default::default()
    }
}

/// An ephemeral container as the container it is started as (upstream's
/// `v1.Container(ec.EphemeralContainerCommon)`): everything but its target.
pub fn as_container(ephemeral: &EphemeralContainer) -> Container {
    let e = ephemeral.clone();
    Container {
        args: e.args,
        command: e.command,
        env: e.env,
        env_from: e.env_from,
        image: e.image,
        image_pull_policy: e.image_pull_policy,
        lifecycle: e.lifecycle,
        liveness_probe: e.liveness_probe,
        name: e.name,
        ports: e.ports,
        readiness_probe: e.readiness_probe,
        resize_policy: e.resize_policy,
        resources: e.resources,
        restart_policy: e.restart_policy,
        security_context: e.security_context,
        startup_probe: e.startup_probe,
        stdin: e.stdin,
        stdin_once: e.stdin_once,
        termination_message_path: e.termination_message_path,
        termination_message_policy: e.termination_message_policy,
        tty: e.tty,
        volume_devices: e.volume_devices,
        volume_mounts: e.volume_mounts,
        working_dir: e.working_dir,
    }
}

/// Puts an ephemeral container in the process namespace of the container
/// `target_id` (upstream's `NamespaceMode_TARGET`), unless the pod shares
/// one process namespace among all its containers already.
pub fn join_target_pid_namespace(config: &mut cri::ContainerConfig, target_id: &str) {
    let options = config
        .linux
        .as_mut()
        .and_then(|l| l.security_context.as_mut())
        .and_then(|s| s.namespace_options.as_mut());
    if let Some(options) = options
        && options.pid == cri::NamespaceMode::Container as i32
    {
        options.pid = cri::NamespaceMode::Target as i32;
        options.target_id = target_id.to_string();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kv(k: &str, v: &str) -> cri::KeyValue {
        cri::KeyValue {
            key: k.into(),
            value: v.into(),
        }
    }

    #[test]
    fn security_contexts_merge_the_containers_over_the_pods() {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "default", "uid": "u"},
            "spec": {
                "securityContext": {"runAsUser": 1000, "runAsGroup": 3000, "fsGroup": 2000, "supplementalGroups": [4000]},
                "containers": [{"name": "c", "image": "i", "securityContext": {
                    "runAsUser": 1001, "readOnlyRootFilesystem": true, "allowPrivilegeEscalation": false,
                    "capabilities": {"add": ["NET_ADMIN"], "drop": ["ALL"]}}}]
            }
        }))
        .expect("pod");
        let context = security_context(&pod, &pod.spec.as_ref().expect("spec").containers[0]);
        assert_eq!(context.run_as_user.map(|u| u.value), Some(1001));
        assert_eq!(context.run_as_group.map(|g| g.value), Some(3000));
        assert_eq!(context.supplemental_groups, [4000, 2000]);
        assert!(context.readonly_rootfs && context.no_new_privs && !context.privileged);
        let caps = context.capabilities.expect("capabilities");
        assert_eq!(
            (caps.add_capabilities, caps.drop_capabilities),
            (vec!["NET_ADMIN".to_string()], vec!["ALL".to_string()])
        );
    }

    #[test]
    fn an_ephemeral_container_joins_its_targets_process_namespace() {
        let pod = |share: bool| -> Pod {
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": "p", "namespace": "default", "uid": "u"},
                "spec": {"shareProcessNamespace": share,
                         "containers": [{"name": "app", "image": "i"}],
                         "ephemeralContainers": [{"name": "debug", "image": "busybox",
                             "targetContainerName": "app", "stdin": true, "tty": true,
                             "volumeMounts": [{"name": "data", "mountPath": "/data"}]}]}
            }))
            .expect("pod")
        };
        let own = pod(false);
        let spec = own.spec.as_ref().expect("spec");
        let debug = as_container(&spec.ephemeral_containers.as_ref().expect("ephemeral")[0]);
        assert_eq!(debug.name, "debug");
        assert_eq!((debug.stdin, debug.tty), (Some(true), Some(true)));
        assert_eq!(debug.volume_mounts.as_ref().map(Vec::len), Some(1));
        let mut config = container_config(&own, &debug, 0, false, Vec::new(), Vec::new());
        assert!(config.stdin && config.tty, "kubectl attach needs both");
        join_target_pid_namespace(&mut config, "c-app");
        let namespaces = |config: &cri::ContainerConfig| {
            config
                .linux
                .clone()
                .and_then(|l| l.security_context)
                .and_then(|s| s.namespace_options)
                .expect("namespace options")
        };
        let options = namespaces(&config);
        assert_eq!(options.pid, cri::NamespaceMode::Target as i32);
        assert_eq!(options.target_id, "c-app");
        // A pod sharing one process namespace keeps it.
        let shared = pod(true);
        let mut config = container_config(&shared, &debug, 0, false, Vec::new(), Vec::new());
        join_target_pid_namespace(&mut config, "c-app");
        let options = namespaces(&config);
        assert_eq!(options.pid, cri::NamespaceMode::Pod as i32);
        assert_eq!(options.target_id, "");
    }

    #[test]
    fn variables_expand_as_upstream() {
        let env = [kv("A", "1"), kv("B", "two")];
        assert_eq!(expand("x$(A)y$(B)", &env), "x1ytwo");
        assert_eq!(expand("$(C)", &env), "$(C)", "undefined stays");
        assert_eq!(expand("$$(A)", &env), "$(A)", "escaped");
        assert_eq!(expand("$A $", &env), "$A $");
        assert_eq!(expand("$(A", &env), "$(A");
    }

    #[test]
    fn a_container_config_ties_back_to_its_pod() {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "web", "namespace": "default", "uid": "u1"},
            "spec": {"containers": [{
                "name": "c", "image": "rudder.local/busybox:1",
                "command": ["httpd"], "args": ["-p", "$(PORT)"],
                "env": [{"name": "PORT", "value": "8080"}],
                "resources": {"limits": {"cpu": "500m", "memory": "64Mi"}, "requests": {"cpu": "250m"}}
            }]}
        }))
        .expect("pod");
        let container = &pod.spec.as_ref().expect("spec").containers[0];
        let env = vec![kv("PORT", "8080")];
        let config = container_config(&pod, container, 2, false, env, Vec::new());
        assert_eq!(config.command, ["httpd"]);
        assert_eq!(config.args, ["-p", "8080"]);
        assert_eq!(config.labels[POD_UID_LABEL], "u1");
        assert_eq!(config.labels[CONTAINER_NAME_LABEL], "c");
        assert_eq!(config.annotations[RESTART_COUNT_ANNOTATION], "2");
        assert_eq!(config.log_path, "c/2.log");
        let resources = config.linux.expect("linux").resources.expect("resources");
        assert_eq!(resources.cpu_shares, 256);
        assert_eq!(
            (resources.cpu_quota, resources.cpu_period),
            (50_000, 100_000)
        );
        assert_eq!(resources.memory_limit_in_bytes, 64 << 20);
        let dns = super::super::dns::Settings {
            cluster_dns: vec![[10, 43, 0, 10].into()],
            cluster_domain: "cluster.local".into(),
            host: Default::default(),
        };
        let sandbox = sandbox_config(&pod, 0, Path::new("/var/log/pods"), &dns);
        assert_eq!(sandbox.log_directory, "/var/log/pods/default_web_u1");
        assert_eq!(sandbox.hostname, "web");
    }
}
