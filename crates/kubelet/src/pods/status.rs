//! A pod's status from what the runtime holds (upstream's
//! `generateAPIPodStatus` and `getPhase`, pure): phase, conditions,
//! container, init container and ephemeral container statuses, pod and
//! host IPs, start time.

use std::collections::HashMap;
use std::time::SystemTime;

use k8s_openapi::api::core::v1::{
    Container, ContainerState, ContainerStateRunning, ContainerStateTerminated,
    ContainerStateWaiting, ContainerStatus, HostIP, Pod, PodCondition, PodIP, PodStatus,
};

use super::config::as_container;
use super::observed::{Instance, Observed};
use super::plan::{ephemeral_containers, is_done, is_sidecar, restart_policy, should_restart};
use crate::api_time;

/// What the agent knows beyond the runtime: why a container waits.
#[derive(Debug, Clone, Default)]
pub struct Extra {
    /// Container name → (reason, message).
    pub waiting: HashMap<String, (String, String)>,
    pub host_ip: String,
    /// The runtime's name, prefixed to container ids (`containerd://…`).
    pub runtime_name: String,
    pub start_time: Option<SystemTime>,
    /// Running containers' (started, ready) by name, from their probes;
    /// a container missing here is both once it runs.
    pub probed: HashMap<String, (bool, bool)>,
    /// The agent failed the pod (reason, message): `DeadlineExceeded`.
    pub failed: Option<(String, String)>,
}

fn terminated(i: &Instance, runtime: &str) -> ContainerStateTerminated {
    let reason = if !i.reason.is_empty() {
        i.reason.clone()
    } else if i.exit_code == 0 {
        "Completed".into()
    } else {
        "Error".into()
    };
    ContainerStateTerminated {
        exit_code: i.exit_code,
        reason: Some(reason),
        message: (!i.message.is_empty()).then(|| i.message.clone()),
        started_at: i.started_at.map(api_time),
        finished_at: i.finished_at.map(api_time),
        container_id: Some(format!("{runtime}://{}", i.id)),
        signal: None,
    }
}

fn container_status(
    container: &Container,
    observed: &Observed,
    current_sandbox: Option<&str>,
    extra: &Extra,
) -> ContainerStatus {
    let runtime = extra.runtime_name.as_str();
    let mut instances = observed.of(&container.name);
    let latest = instances.next();
    let previous = instances.next();
    let waiting = |reason: &str, message: Option<String>| ContainerState {
        waiting: Some(ContainerStateWaiting {
            reason: Some(reason.into()),
            message,
        }),
        ..Default::default()
    };
    let in_current = latest
        .filter(|i| Some(i.sandbox_id.as_str()) == current_sandbox || current_sandbox.is_none());
    let (state, last_state) = match (in_current, extra.waiting.get(&container.name)) {
        (Some(i), None) if i.running() => (
            ContainerState {
                running: Some(ContainerStateRunning {
                    started_at: i.started_at.map(api_time),
                }),
                ..Default::default()
            },
            previous.map(|p| ContainerState {
                terminated: Some(terminated(p, runtime)),
                ..Default::default()
            }),
        ),
        (Some(i), None) if i.exited() => (
            ContainerState {
                terminated: Some(terminated(i, runtime)),
                ..Default::default()
            },
            previous.map(|p| ContainerState {
                terminated: Some(terminated(p, runtime)),
                ..Default::default()
            }),
        ),
        (latest_now, Some((reason, message))) => (
            waiting(reason, (!message.is_empty()).then(|| message.clone())),
            latest_now
                .filter(|i| i.exited())
                .or(latest.filter(|i| i.exited()))
                .map(|p| ContainerState {
                    terminated: Some(terminated(p, runtime)),
                    ..Default::default()
                }),
        ),
        _ => (
            waiting("ContainerCreating", None),
            latest.filter(|i| i.exited()).map(|p| ContainerState {
                terminated: Some(terminated(p, runtime)),
                ..Default::default()
            }),
        ),
    };
    let running = state.running.is_some();
    let (started, ready) = extra
        .probed
        .get(&container.name)
        .copied()
        .unwrap_or((true, true));
    ContainerStatus {
        name: container.name.clone(),
        image: container.image.clone().unwrap_or_default(),
        image_id: latest.map(|i| i.image_ref.clone()).unwrap_or_default(),
        container_id: latest.map(|i| format!("{runtime}://{}", i.id)),
        ready: running && ready,
        started: Some(running && started),
        restart_count: latest.map_or(0, |i| i.attempt as i32),
        state: Some(state),
        last_state: Some(last_state.unwrap_or_default()),
        ..Default::default()
    }
}

/// The statuses of the pod's ephemeral containers (upstream converts them
/// as containers): an instance counts in whatever sandbox it ran, since
/// none is started again; no probe makes one ready or started.
fn ephemeral_statuses(pod: &Pod, observed: &Observed, extra: &Extra) -> Vec<ContainerStatus> {
    ephemeral_containers(pod)
        .iter()
        .map(|e| ContainerStatus {
            ready: false,
            started: None,
            ..container_status(&as_container(e), observed, None, extra)
        })
        .collect()
}

/// Upstream's `getPhase`.
pub fn phase(
    pod: &Pod,
    statuses: &[ContainerStatus],
    init_statuses: &[ContainerStatus],
    observed: &Observed,
) -> &'static str {
    let policy = restart_policy(pod);
    let spec_has_init = !init_statuses.is_empty();
    let sidecars: Vec<String> = pod
        .spec
        .iter()
        .flat_map(|s| s.init_containers.iter().flatten())
        .filter(|c| is_sidecar(c))
        .map(|c| c.name.clone())
        .collect();
    let init_statuses: Vec<&ContainerStatus> = init_statuses
        .iter()
        .filter(|s| !sidecars.contains(&s.name))
        .collect();
    let init_failed = init_statuses.iter().any(|s| {
        s.state
            .as_ref()
            .and_then(|st| st.terminated.as_ref())
            .is_some_and(|t| t.exit_code != 0 && !should_restart(policy, t.exit_code))
    });
    if init_failed {
        return "Failed";
    }
    let init_done = init_statuses.iter().all(|s| {
        s.state
            .as_ref()
            .and_then(|st| st.terminated.as_ref())
            .is_some_and(|t| t.exit_code == 0)
    });
    if spec_has_init && !init_done {
        return "Pending";
    }
    let (mut running, mut waiting, mut stopped, mut succeeded) = (0, 0, 0, 0);
    for s in statuses {
        let state = s.state.clone().unwrap_or_default();
        if state.running.is_some() {
            running += 1;
        } else if let Some(t) = state.terminated {
            stopped += 1;
            if t.exit_code == 0 {
                succeeded += 1;
            }
        } else if s
            .last_state
            .as_ref()
            .and_then(|l| l.terminated.as_ref())
            .is_some()
        {
            stopped += 1;
        } else {
            waiting += 1;
        }
    }
    if waiting > 0 {
        return "Pending";
    }
    if running > 0 {
        return "Running";
    }
    if stopped > 0 {
        if policy == "Always" {
            return "Running";
        }
        if stopped == succeeded {
            return "Succeeded";
        }
        if policy == "OnFailure" && !is_done(pod, observed) {
            return "Running";
        }
        return "Failed";
    }
    "Pending"
}

fn condition(
    kind: &str,
    ok: bool,
    reason: Option<&str>,
    previous: Option<&PodStatus>,
    now: SystemTime,
) -> PodCondition {
    let status = if ok { "True" } else { "False" };
    let old = previous
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == kind));
    let transition = match old {
        Some(c) if c.status == status => c.last_transition_time.clone(),
        _ => Some(api_time(now)),
    };
    PodCondition {
        type_: kind.into(),
        status: status.into(),
        reason: reason.map(str::to_string),
        last_transition_time: transition,
        ..Default::default()
    }
}

/// The pod's status as the agent reports it.
pub fn generate(pod: &Pod, observed: &Observed, extra: &Extra, now: SystemTime) -> PodStatus {
    let previous = pod.status.as_ref();
    let spec = pod.spec.clone().unwrap_or_default();
    let sandbox = observed.ready_sandbox();
    let current = sandbox.map(|s| s.id.as_str());
    let init_statuses: Vec<ContainerStatus> = spec
        .init_containers
        .iter()
        .flatten()
        .map(|c| container_status(c, observed, current, extra))
        .collect();
    let mut statuses: Vec<ContainerStatus> = spec
        .containers
        .iter()
        .map(|c| container_status(c, observed, current, extra))
        .collect();
    let phase = match &extra.failed {
        Some(_) => "Failed",
        None => phase(pod, &statuses, &init_statuses, observed),
    };
    if matches!(phase, "Succeeded" | "Failed") {
        for s in &mut statuses {
            s.ready = false;
        }
    }
    let sidecar = |name: &str| {
        spec.init_containers
            .iter()
            .flatten()
            .any(|c| c.name == name && is_sidecar(c))
    };
    let initialized = init_statuses.iter().all(|s| {
        let state = s.state.as_ref();
        if sidecar(&s.name) {
            return s.started == Some(true) || state.is_some_and(|st| st.terminated.is_some());
        }
        state
            .and_then(|st| st.terminated.as_ref())
            .is_some_and(|t| t.exit_code == 0)
    });
    let containers_ready = statuses.iter().all(|s| s.ready);
    let not_ready = |ok: bool| (!ok).then_some("ContainersNotReady");
    let terminal_reason = |ok: bool| {
        if ok {
            None
        } else if matches!(phase, "Succeeded" | "Failed") {
            Some("PodCompleted")
        } else {
            not_ready(ok)
        }
    };
    let mut conditions = vec![
        condition(
            "PodReadyToStartContainers",
            sandbox.is_some(),
            None,
            previous,
            now,
        ),
        condition(
            "Initialized",
            initialized,
            (!initialized).then_some("ContainersNotInitialized"),
            previous,
            now,
        ),
        condition(
            "Ready",
            containers_ready,
            terminal_reason(containers_ready),
            previous,
            now,
        ),
        condition(
            "ContainersReady",
            containers_ready,
            terminal_reason(containers_ready),
            previous,
            now,
        ),
    ];
    // Conditions others own (PodScheduled, DisruptionTarget, readiness
    // gates) are kept as they are.
    for c in previous
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
    {
        if !conditions.iter().any(|mine| mine.type_ == c.type_) {
            conditions.push(c.clone());
        }
    }
    let pod_ip = sandbox.and_then(|s| s.ip.clone()).or_else(|| {
        // A pod keeps its IP in its status after its sandbox stopped.
        previous.and_then(|s| s.pod_ip.clone())
    });
    let host_network = spec.host_network.unwrap_or(false);
    let pod_ip = if host_network {
        Some(extra.host_ip.clone())
    } else {
        pod_ip
    };
    PodStatus {
        phase: Some(phase.into()),
        conditions: Some(conditions),
        host_ip: Some(extra.host_ip.clone()),
        host_ips: Some(vec![HostIP {
            ip: extra.host_ip.clone(),
        }]),
        pod_ip: pod_ip.clone(),
        pod_ips: pod_ip.map(|ip| vec![PodIP { ip }]),
        start_time: previous
            .and_then(|s| s.start_time.clone())
            .or_else(|| extra.start_time.map(api_time)),
        container_statuses: Some(statuses),
        init_container_statuses: (!init_statuses.is_empty()).then_some(init_statuses),
        ephemeral_container_statuses: Some(ephemeral_statuses(pod, observed, extra))
            .filter(|s| !s.is_empty()),
        qos_class: previous.and_then(|s| s.qos_class.clone()),
        reason: extra
            .failed
            .as_ref()
            .map(|(r, _)| r.clone())
            .or_else(|| previous.and_then(|s| s.reason.clone())),
        message: extra
            .failed
            .as_ref()
            .map(|(_, m)| m.clone())
            .or_else(|| previous.and_then(|s| s.message.clone())),
        ..previous.cloned().unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cri::ContainerState as Cs;
    use crate::pods::observed::SandboxInfo;
    use std::time::Duration;

    fn pod(policy: &str) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "default", "uid": "u"},
            "spec": {"restartPolicy": policy, "containers": [{"name": "app", "image": "img"}]},
            "status": {"phase": "Pending", "qosClass": "BestEffort",
                       "conditions": [{"type": "PodScheduled", "status": "True"}]}
        }))
        .expect("pod")
    }

    fn running() -> Observed {
        Observed {
            sandboxes: vec![SandboxInfo {
                id: "s1".into(),
                attempt: 0,
                ready: true,
                ip: Some("10.42.0.7".into()),
                created_at: 1,
            }],
            instances: vec![Instance {
                id: "c1".into(),
                sandbox_id: "s1".into(),
                name: "app".into(),
                attempt: 0,
                init: false,
                state: Cs::ContainerRunning,
                exit_code: 0,
                reason: String::new(),
                message: String::new(),
                created_at: None,
                started_at: Some(SystemTime::UNIX_EPOCH + Duration::from_secs(5)),
                finished_at: None,
                image: "img".into(),
                image_ref: "sha256:abc".into(),
            }],
        }
    }

    fn extra() -> Extra {
        Extra {
            host_ip: "192.0.2.1".into(),
            runtime_name: "containerd".into(),
            start_time: Some(SystemTime::UNIX_EPOCH + Duration::from_secs(1)),
            ..Extra::default()
        }
    }

    #[test]
    fn a_running_pod_is_running_ready_with_its_ip() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(10);
        let status = generate(&pod("Always"), &running(), &extra(), now);
        assert_eq!(status.phase.as_deref(), Some("Running"));
        assert_eq!(status.pod_ip.as_deref(), Some("10.42.0.7"));
        assert_eq!(status.host_ip.as_deref(), Some("192.0.2.1"));
        assert_eq!(status.qos_class.as_deref(), Some("BestEffort"));
        let c = &status.container_statuses.as_ref().expect("statuses")[0];
        assert!(c.ready);
        assert_eq!(c.container_id.as_deref(), Some("containerd://c1"));
        assert_eq!(c.image_id, "sha256:abc");
        let types: Vec<(&str, &str)> = status
            .conditions
            .as_ref()
            .expect("conditions")
            .iter()
            .map(|c| (c.type_.as_str(), c.status.as_str()))
            .collect();
        assert_eq!(
            types,
            [
                ("PodReadyToStartContainers", "True"),
                ("Initialized", "True"),
                ("Ready", "True"),
                ("ContainersReady", "True"),
                ("PodScheduled", "True"),
            ]
        );
    }

    #[test]
    fn exits_become_phases_by_restart_policy() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(10);
        let exited = |code| {
            let mut o = running();
            o.instances[0].state = Cs::ContainerExited;
            o.instances[0].exit_code = code;
            o
        };
        let phase_of = |policy, code| generate(&pod(policy), &exited(code), &extra(), now).phase;
        assert_eq!(phase_of("Never", 0).as_deref(), Some("Succeeded"));
        assert_eq!(phase_of("Never", 1).as_deref(), Some("Failed"));
        assert_eq!(phase_of("OnFailure", 1).as_deref(), Some("Running"));
        assert_eq!(phase_of("Always", 0).as_deref(), Some("Running"));
        let failed = generate(&pod("Never"), &exited(2), &extra(), now);
        let t = failed.container_statuses.expect("s")[0]
            .state
            .clone()
            .expect("state")
            .terminated
            .expect("terminated");
        assert_eq!((t.exit_code, t.reason.as_deref()), (2, Some("Error")));
    }

    #[test]
    fn ephemeral_containers_report_their_own_statuses() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(10);
        let mut p = pod("Always");
        if let Some(spec) = p.spec.as_mut() {
            spec.ephemeral_containers = serde_json::from_value(serde_json::json!([
                {"name": "debug", "image": "busybox", "targetContainerName": "app"},
                {"name": "later", "image": "busybox"}
            ]))
            .ok();
        }
        let mut observed = running();
        let mut debug = observed.instances[0].clone();
        (debug.id, debug.name) = ("d1".into(), "debug".into());
        observed.instances.push(debug);
        let status = generate(&p, &observed, &extra(), now);
        let ephemeral = status.ephemeral_container_statuses.expect("statuses");
        let debug = &ephemeral[0];
        assert_eq!(debug.name, "debug");
        assert!(debug.state.as_ref().expect("state").running.is_some());
        assert_eq!(debug.container_id.as_deref(), Some("containerd://d1"));
        assert_eq!((debug.ready, debug.started), (false, None));
        let later = ephemeral[1].state.clone().expect("state");
        assert_eq!(
            later.waiting.expect("waiting").reason.as_deref(),
            Some("ContainerCreating")
        );
        // They have no say in the phase or readiness.
        assert_eq!(status.phase.as_deref(), Some("Running"));
        assert_eq!(status.container_statuses.expect("statuses").len(), 1);

        // An exited one in a sandbox since replaced stays terminated.
        observed.sandboxes[0].id = "s2".into();
        observed.instances[1].state = Cs::ContainerExited;
        let status = generate(&p, &observed, &extra(), now);
        let debug = &status.ephemeral_container_statuses.expect("statuses")[0];
        assert!(debug.state.as_ref().expect("state").terminated.is_some());
        assert!(
            generate(&pod("Always"), &running(), &extra(), now)
                .ephemeral_container_statuses
                .is_none()
        );
    }

    #[test]
    fn a_waiting_container_shows_its_reason_and_last_state() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(10);
        let mut observed = running();
        observed.instances[0].state = Cs::ContainerExited;
        observed.instances[0].exit_code = 1;
        let mut extra = extra();
        extra.waiting.insert(
            "app".into(),
            ("CrashLoopBackOff".into(), "back-off 10s".into()),
        );
        let status = generate(&pod("Always"), &observed, &extra, now);
        let c = &status.container_statuses.expect("s")[0];
        let state = c.state.clone().expect("state");
        assert_eq!(
            state.waiting.expect("waiting").reason.as_deref(),
            Some("CrashLoopBackOff")
        );
        assert_eq!(
            c.last_state
                .clone()
                .expect("last")
                .terminated
                .expect("t")
                .exit_code,
            1
        );
        assert_eq!(status.phase.as_deref(), Some("Running"));
    }
}
