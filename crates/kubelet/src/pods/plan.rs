//! What one sync of a pod must do, decided from the pod and what the
//! runtime holds (upstream's `computePodActions`, pure): kill the pod,
//! (re)create its sandbox, start the ephemeral containers not started yet,
//! the next init container or the containers that are not running, or wait
//! out a container's CrashLoopBackOff.

use std::time::SystemTime;

use k8s_openapi::api::core::v1::{Container, EphemeralContainer, Pod};
use kube::ResourceExt;

use super::backoff::Backoff;
use super::observed::{Instance, Observed};

/// Which of the pod's lists a container is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Init,
    Regular,
    Ephemeral,
}

/// A container to start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Start {
    pub name: String,
    pub kind: Kind,
    /// Its index in `initContainers`, `containers` or
    /// `ephemeralContainers`.
    pub index: usize,
    pub attempt: u32,
}

/// A container kept waiting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Waiting {
    pub name: String,
    pub reason: String,
    pub message: String,
    pub until: Option<SystemTime>,
}

/// The actions of one sync.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    /// Stop every container and sandbox of the pod.
    pub kill_pod: bool,
    /// Create a sandbox with this attempt number (after the kill).
    pub create_sandbox: Option<u32>,
    pub start: Vec<Start>,
    pub waiting: Vec<Waiting>,
    /// Exited instances no status needs any more.
    pub remove: Vec<String>,
    /// Running containers that failed their liveness probe: stopped, then
    /// restarted as their restart policy says.
    pub kill_containers: Vec<String>,
}

pub fn restart_policy(pod: &Pod) -> &str {
    pod.spec
        .as_ref()
        .and_then(|s| s.restart_policy.as_deref())
        .unwrap_or("Always")
}

/// Whether a container that exited with `code` is started again.
pub fn should_restart(policy: &str, code: i32) -> bool {
    match policy {
        "Never" => false,
        "OnFailure" => code != 0,
        _ => true,
    }
}

fn containers(pod: &Pod) -> (&[Container], &[Container]) {
    match pod.spec.as_ref() {
        Some(spec) => (
            spec.init_containers.as_deref().unwrap_or_default(),
            &spec.containers,
        ),
        None => (&[], &[]),
    }
}

/// The pod's ephemeral containers.
pub fn ephemeral_containers(pod: &Pod) -> &[EphemeralContainer] {
    pod.spec
        .as_ref()
        .and_then(|s| s.ephemeral_containers.as_deref())
        .unwrap_or_default()
}

/// The runtime id of the container whose process namespace an ephemeral
/// container joins (upstream's `getTargetID`): none without a
/// `targetContainerName`, the newest instance of the container it names,
/// or upstream's error when that one has none yet.
pub fn target_id(
    container: &EphemeralContainer,
    observed: &Observed,
) -> Result<Option<String>, String> {
    let Some(target) = container
        .target_container_name
        .as_deref()
        .filter(|t| !t.is_empty())
    else {
        return Ok(None);
    };
    match observed.latest(target) {
        Some(instance) => Ok(Some(instance.id.clone())),
        None => Err(format!("unable to find target container {target}")),
    }
}

/// Whether the pod is being deleted or has reached a terminal phase.
pub fn is_terminating(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_some()
        || matches!(
            pod.status.as_ref().and_then(|s| s.phase.as_deref()),
            Some("Succeeded" | "Failed")
        )
}

/// Whether every container has run and none will again: the pod is done.
pub fn is_done(pod: &Pod, observed: &Observed) -> bool {
    let policy = restart_policy(pod);
    if policy == "Always" {
        return false;
    }
    let (init, regular) = containers(pod);
    let failed_init = init.iter().filter(|c| !is_sidecar(c)).any(|c| {
        observed
            .latest(&c.name)
            .is_some_and(|i| i.exited() && i.exit_code != 0 && !should_restart(policy, i.exit_code))
    });
    if failed_init {
        return true;
    }
    !regular.is_empty()
        && regular.iter().all(|c| {
            observed
                .latest(&c.name)
                .is_some_and(|i| i.exited() && !should_restart(policy, i.exit_code))
        })
}

/// A restartable init container (a sidecar): started in the init
/// sequence, then kept running — restarted whatever the pod's policy —
/// beside the containers.
pub fn is_sidecar(container: &Container) -> bool {
    container.restart_policy.as_deref() == Some("Always")
}

fn key(pod: &Pod, name: &str) -> String {
    format!("{}/{name}", pod.uid().unwrap_or_default())
}

/// The start of a container whose last instance is `latest`, or a wait
/// when it is in back-off.
fn restart_or_wait(
    pod: &Pod,
    name: &str,
    latest: &Instance,
    backoff: &mut Backoff,
    now: SystemTime,
) -> Result<u32, Waiting> {
    let finished = latest.finished_at.unwrap_or(now);
    if let Some((delay, until)) = backoff.waiting(&key(pod, name), finished, now) {
        return Err(Waiting {
            name: name.to_string(),
            reason: "CrashLoopBackOff".into(),
            message: format!(
                "back-off {} restarting failed container={name} pod={}_{}({})",
                go_duration(delay),
                pod.name_any(),
                pod.namespace().unwrap_or_default(),
                pod.uid().unwrap_or_default()
            ),
            until: Some(until),
        });
    }
    backoff.next(&key(pod, name), now);
    Ok(latest.attempt + 1)
}

/// A duration as Go prints it (`10s`, `1m20s`, `5m0s`).
pub fn go_duration(d: std::time::Duration) -> String {
    let s = d.as_secs();
    if s >= 60 {
        format!("{}m{}s", s / 60, s % 60)
    } else {
        format!("{s}s")
    }
}

/// Decides one sync of `pod` given what the runtime holds.
pub fn plan(
    pod: &Pod,
    observed: &Observed,
    unhealthy: &dyn Fn(&str) -> bool,
    backoff: &mut Backoff,
    now: SystemTime,
) -> Plan {
    let mut plan = Plan::default();
    if is_terminating(pod) || is_done(pod, observed) {
        plan.kill_pod = observed.any_running() || observed.sandboxes.iter().any(|s| s.ready);
        return plan;
    }
    let policy = restart_policy(pod);
    let (init, regular) = containers(pod);
    let sandbox_ok = observed.ready_sandbox().is_some();
    // Containers of an older sandbox count for restart numbering only.
    let current = |name: &str| -> Option<&Instance> {
        let sandbox = observed.ready_sandbox()?;
        observed.of(name).find(|i| i.sandbox_id == sandbox.id)
    };
    if !sandbox_ok {
        // A pod that never restarts does not get a second sandbox once its
        // containers ran (upstream: the pod is done).
        let ran = regular.iter().any(|c| observed.latest(&c.name).is_some());
        if policy == "Never" && ran {
            plan.kill_pod = observed.any_running();
            return plan;
        }
        plan.kill_pod = !observed.is_empty();
        plan.create_sandbox = Some(observed.sandboxes.first().map_or(0, |s| s.attempt + 1));
    }
    let next_attempt = |name: &str| observed.latest(name).map_or(0, |i| i.attempt + 1);
    // Starts the exited `latest` again, or keeps it waiting out its back-off.
    let restart = |plan: &mut Plan,
                   container: &Container,
                   kind: Kind,
                   index: usize,
                   latest: &Instance,
                   backoff: &mut Backoff| {
        match restart_or_wait(pod, &container.name, latest, backoff, now) {
            Ok(attempt) => plan.start.push(Start {
                name: container.name.clone(),
                kind,
                index,
                attempt,
            }),
            Err(waiting) => plan.waiting.push(waiting),
        }
    };

    // Ephemeral containers, once the sandbox runs, whatever the init
    // sequence is at: each started once and never again, an exited one
    // staying exited (upstream: any status of the name, in any sandbox).
    if sandbox_ok {
        for (index, container) in ephemeral_containers(pod).iter().enumerate() {
            if observed.latest(&container.name).is_none() {
                plan.start.push(Start {
                    name: container.name.clone(),
                    kind: Kind::Ephemeral,
                    index,
                    attempt: 0,
                });
            }
        }
    }

    // Init containers, one at a time, in order.
    for (index, container) in init.iter().enumerate() {
        let instance = if sandbox_ok {
            current(&container.name)
        } else {
            None
        };
        match instance {
            None => {
                plan.start.push(Start {
                    name: container.name.clone(),
                    kind: Kind::Init,
                    index,
                    attempt: next_attempt(&container.name),
                });
                return plan;
            }
            // A sidecar that runs lets the sequence go on.
            Some(i) if is_sidecar(container) && i.running() => continue,
            Some(i) if is_sidecar(container) && i.exited() => {
                restart(&mut plan, container, Kind::Init, index, i, backoff);
                // Once the containers have started, a sidecar's restart
                // holds nothing up.
                let containers_started = regular.iter().any(|c| current(&c.name).is_some());
                if !containers_started {
                    return plan;
                }
            }
            Some(i) if i.exited() && i.exit_code == 0 => continue,
            Some(i) if i.exited() => {
                if !should_restart(policy, i.exit_code) {
                    plan.kill_pod = true;
                    return plan;
                }
                restart(&mut plan, container, Kind::Init, index, i, backoff);
                return plan;
            }
            // Running or created: wait for it.
            Some(_) => return plan,
        }
    }

    for (index, container) in regular.iter().enumerate() {
        let instance = if sandbox_ok {
            current(&container.name)
        } else {
            None
        };
        match instance {
            None => plan.start.push(Start {
                name: container.name.clone(),
                kind: Kind::Regular,
                index,
                attempt: next_attempt(&container.name),
            }),
            Some(i) if i.exited() => {
                if should_restart(policy, i.exit_code) {
                    restart(&mut plan, container, Kind::Regular, index, i, backoff);
                }
            }
            Some(i) if i.running() && unhealthy(&i.id) => plan.kill_containers.push(i.id.clone()),
            Some(_) => {}
        }
    }
    // Keep the newest exited instance of each container (its lastState and
    // `logs --previous`); remove older ones. An ephemeral container has
    // only the one.
    for container in init.iter().chain(regular) {
        plan.remove.extend(
            observed
                .of(&container.name)
                .filter(|i| i.exited())
                .skip(1)
                .map(|i| i.id.clone()),
        );
    }
    plan
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cri::ContainerState;
    use crate::pods::observed::SandboxInfo;
    use std::time::Duration;

    fn pod(policy: &str, init: &[&str], containers: &[&str]) -> Pod {
        let list = |names: &[&str]| {
            names
                .iter()
                .map(|n| serde_json::json!({"name": n, "image": "img"}))
                .collect::<Vec<_>>()
        };
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "default", "uid": "u"},
            "spec": {"restartPolicy": policy, "initContainers": list(init), "containers": list(containers)}
        }))
        .expect("pod")
    }

    fn sandbox(id: &str, ready: bool) -> SandboxInfo {
        SandboxInfo {
            id: id.into(),
            attempt: 0,
            ready,
            ip: Some("10.42.0.5".into()),
            created_at: 1,
        }
    }

    fn instance(
        name: &str,
        attempt: u32,
        state: ContainerState,
        code: i32,
        finished: SystemTime,
    ) -> Instance {
        Instance {
            id: format!("{name}-{attempt}"),
            sandbox_id: "s1".into(),
            name: name.into(),
            attempt,
            init: false,
            state,
            exit_code: code,
            reason: String::new(),
            message: String::new(),
            created_at: None,
            started_at: None,
            finished_at: Some(finished),
            image: "img".into(),
            image_ref: "sha256:1".into(),
        }
    }

    /// A ready sandbox `s1` with these instances.
    fn in_sandbox(instances: Vec<Instance>) -> Observed {
        Observed {
            sandboxes: vec![sandbox("s1", true)],
            instances,
        }
    }

    fn healthy(_: &str) -> bool {
        false
    }

    fn t0() -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000)
    }

    #[test]
    fn a_new_pod_gets_a_sandbox_then_its_first_init_container() {
        let p = pod("Always", &["setup"], &["app"]);
        let plan = plan(
            &p,
            &Observed::default(),
            &healthy,
            &mut Backoff::default(),
            t0(),
        );
        assert_eq!(plan.create_sandbox, Some(0));
        assert!(!plan.kill_pod);
        assert_eq!(plan.start.len(), 1);
        assert_eq!(
            (plan.start[0].name.as_str(), plan.start[0].kind),
            ("setup", Kind::Init)
        );
    }

    #[test]
    fn containers_start_once_init_containers_succeeded() {
        let p = pod("Always", &["setup"], &["a", "b"]);
        let mut observed = in_sandbox(vec![instance(
            "setup",
            0,
            ContainerState::ContainerRunning,
            0,
            t0(),
        )]);
        let waiting = plan(&p, &observed, &healthy, &mut Backoff::default(), t0());
        assert!(waiting.start.is_empty(), "the init container still runs");
        observed.instances[0].state = ContainerState::ContainerExited;
        let next = plan(&p, &observed, &healthy, &mut Backoff::default(), t0());
        let names: Vec<_> = next.start.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["a", "b"]);
        assert_eq!(next.create_sandbox, None);
    }

    #[test]
    fn a_crashing_container_restarts_with_growing_back_off() {
        let p = pod("Always", &[], &["app"]);
        let mut backoff = Backoff::default();
        let observed = in_sandbox(vec![instance(
            "app",
            0,
            ContainerState::ContainerExited,
            1,
            t0(),
        )]);
        let first = plan(&p, &observed, &healthy, &mut backoff, t0());
        assert_eq!(first.start[0].attempt, 1, "the first restart is at once");
        let observed = in_sandbox(vec![
            instance(
                "app",
                1,
                ContainerState::ContainerExited,
                1,
                t0() + Duration::from_secs(1),
            ),
            instance("app", 0, ContainerState::ContainerExited, 1, t0()),
        ]);
        let second = plan(
            &p,
            &observed,
            &healthy,
            &mut backoff,
            t0() + Duration::from_secs(2),
        );
        assert!(second.start.is_empty());
        assert_eq!(second.waiting[0].reason, "CrashLoopBackOff");
        assert!(
            second.waiting[0]
                .message
                .starts_with("back-off 10s restarting failed container=app pod=p_default(u)"),
            "{}",
            second.waiting[0].message
        );
        assert_eq!(
            second.remove,
            ["app-0"],
            "only the newest exited instance is kept"
        );
        let third = plan(
            &p,
            &observed,
            &healthy,
            &mut backoff,
            t0() + Duration::from_secs(12),
        );
        assert_eq!(third.start[0].attempt, 2);
    }

    #[test]
    fn restart_policies_decide_what_an_exit_means() {
        let exited = |code| {
            in_sandbox(vec![instance(
                "app",
                0,
                ContainerState::ContainerExited,
                code,
                t0(),
            )])
        };
        let never = pod("Never", &[], &["app"]);
        assert!(is_done(&never, &exited(0)));
        assert!(is_done(&never, &exited(1)));
        let on_failure = pod("OnFailure", &[], &["app"]);
        assert!(is_done(&on_failure, &exited(0)));
        assert!(!is_done(&on_failure, &exited(1)));
        let plan = plan(&never, &exited(1), &healthy, &mut Backoff::default(), t0());
        assert!(plan.start.is_empty() && plan.create_sandbox.is_none());
        assert!(plan.kill_pod, "the done pod's sandbox is stopped");
    }

    #[test]
    fn a_dead_sandbox_is_replaced_and_its_containers_restarted() {
        let p = pod("Always", &[], &["app"]);
        let observed = Observed {
            sandboxes: vec![sandbox("s1", false)],
            instances: vec![instance(
                "app",
                3,
                ContainerState::ContainerExited,
                137,
                t0(),
            )],
        };
        let plan = plan(&p, &observed, &healthy, &mut Backoff::default(), t0());
        assert!(plan.kill_pod);
        assert_eq!(plan.create_sandbox, Some(1));
        assert_eq!(plan.start[0].attempt, 4);
    }

    #[test]
    fn a_sidecar_starts_in_the_init_sequence_and_is_kept_running() {
        let mut p = pod("Never", &["sidecar", "setup"], &["app"]);
        if let Some(init) = p.spec.as_mut().and_then(|s| s.init_containers.as_mut()) {
            init[0].restart_policy = Some("Always".into());
        }
        let running = |name| instance(name, 0, ContainerState::ContainerRunning, 0, t0());
        let observed = in_sandbox(vec![running("sidecar")]);
        let next = plan(&p, &observed, &healthy, &mut Backoff::default(), t0());
        assert_eq!(
            next.start[0].name, "setup",
            "the sequence goes on past a running sidecar"
        );
        let mut setup = instance("setup", 0, ContainerState::ContainerExited, 0, t0());
        setup.init = true;
        let mut sidecar = instance("sidecar", 0, ContainerState::ContainerExited, 1, t0());
        sidecar.init = true;
        let observed = in_sandbox(vec![sidecar, setup, running("app")]);
        let next = plan(&p, &observed, &healthy, &mut Backoff::default(), t0());
        let names: Vec<_> = next.start.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(
            names,
            ["sidecar"],
            "restarted though the pod never restarts"
        );
        assert!(!is_done(&p, &observed), "the app still runs");
    }

    #[test]
    fn a_container_failing_its_liveness_probe_is_stopped() {
        let p = pod("Always", &[], &["app"]);
        let observed = in_sandbox(vec![instance(
            "app",
            0,
            ContainerState::ContainerRunning,
            0,
            t0(),
        )]);
        let failing = |id: &str| id == "app-0";
        let plan = plan(&p, &observed, &failing, &mut Backoff::default(), t0());
        assert_eq!(plan.kill_containers, ["app-0"]);
        assert!(plan.start.is_empty() && !plan.kill_pod);
    }

    /// `p` with ephemeral containers `names`, the first targeting `app`.
    fn with_ephemeral(mut p: Pod, names: &[&str]) -> Pod {
        let list = names
            .iter()
            .enumerate()
            .map(|(i, n)| {
                let target = (i == 0).then_some("app");
                serde_json::json!({"name": n, "image": "busybox", "targetContainerName": target})
            })
            .collect::<Vec<_>>();
        if let Some(spec) = p.spec.as_mut() {
            spec.ephemeral_containers = serde_json::from_value(serde_json::json!(list)).ok();
        }
        p
    }

    #[test]
    fn an_ephemeral_container_starts_once_and_never_again() {
        let p = with_ephemeral(pod("Always", &[], &["app"]), &["debug"]);
        let app = || instance("app", 0, ContainerState::ContainerRunning, 0, t0());
        let next = plan(
            &p,
            &in_sandbox(vec![app()]),
            &healthy,
            &mut Backoff::default(),
            t0(),
        );
        assert_eq!(
            next.start,
            [Start {
                name: "debug".into(),
                kind: Kind::Ephemeral,
                index: 0,
                attempt: 0
            }]
        );
        // Running, or exited whatever its code: nothing to do, and its one
        // instance stays.
        for (state, code) in [
            (ContainerState::ContainerRunning, 0),
            (ContainerState::ContainerExited, 1),
        ] {
            let debug = instance("debug", 0, state, code, t0());
            let next = plan(
                &p,
                &in_sandbox(vec![app(), debug]),
                &healthy,
                &mut Backoff::default(),
                t0(),
            );
            assert_eq!(next, Plan::default(), "{state:?}");
        }
        // A new sandbox first: they wait for the next sync.
        let fresh = plan(
            &p,
            &Observed::default(),
            &healthy,
            &mut Backoff::default(),
            t0(),
        );
        assert_eq!(fresh.create_sandbox, Some(0));
        assert!(fresh.start.iter().all(|s| s.kind != Kind::Ephemeral));
    }

    #[test]
    fn an_ephemeral_container_does_not_wait_for_the_init_sequence() {
        let p = with_ephemeral(pod("Always", &["setup"], &["app"]), &["debug"]);
        let mut setup = instance("setup", 0, ContainerState::ContainerRunning, 0, t0());
        setup.init = true;
        let next = plan(
            &p,
            &in_sandbox(vec![setup]),
            &healthy,
            &mut Backoff::default(),
            t0(),
        );
        let started: Vec<_> = next
            .start
            .iter()
            .map(|s| (s.name.as_str(), s.kind))
            .collect();
        assert_eq!(started, [("debug", Kind::Ephemeral)]);
    }

    #[test]
    fn an_ephemeral_container_joins_its_targets_newest_instance() {
        let p = with_ephemeral(pod("Always", &[], &["app"]), &["debug", "plain"]);
        let list = ephemeral_containers(&p);
        let observed = in_sandbox(vec![
            instance("app", 1, ContainerState::ContainerRunning, 0, t0()),
            instance("app", 0, ContainerState::ContainerExited, 1, t0()),
        ]);
        assert_eq!(target_id(&list[0], &observed), Ok(Some("app-1".into())));
        assert_eq!(target_id(&list[1], &observed), Ok(None), "no target");
        assert_eq!(
            target_id(&list[0], &Observed::default()),
            Err("unable to find target container app".into())
        );
    }

    #[test]
    fn a_terminating_pod_is_only_killed() {
        let mut p = pod("Always", &[], &["app"]);
        p.metadata.deletion_timestamp = Some(crate::api_time(t0()));
        let observed = in_sandbox(vec![instance(
            "app",
            0,
            ContainerState::ContainerRunning,
            0,
            t0(),
        )]);
        let plan = plan(&p, &observed, &healthy, &mut Backoff::default(), t0());
        assert_eq!(
            plan,
            Plan {
                kill_pod: true,
                ..Plan::default()
            }
        );
    }
}
