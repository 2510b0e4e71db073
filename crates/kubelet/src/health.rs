//! The container runtime's health as the Node's `Ready` condition reports
//! it: upstream's kubelet `runtimeState`, fed by `updateRuntimeUp`. The
//! agent asks the runtime for its CRI `Status` on every node status pass;
//! the node is Ready only while the runtime says `RuntimeReady` and
//! `NetworkReady` and last said so within 30 s (upstream's
//! `maxWaitForContainerRuntime`). A runtime that stops answering (hung,
//! or gone) turns the node NotReady with upstream's messages, so the
//! node lifecycle controller taints it and the scheduler sends it no pods.

use std::time::{Duration, SystemTime};

use crate::cri::v1::RuntimeCondition;
use crate::node::Readiness;

/// How long after the runtime last said it was ready it is called down
/// (upstream's `maxWaitForContainerRuntime`).
pub const RUNTIME_DOWN_AFTER: Duration = Duration::from_secs(30);

/// How long one CRI `Status` call may take before it counts as no answer.
pub const STATUS_TIMEOUT: Duration = Duration::from_secs(5);

/// What the runtime last said of itself.
#[derive(Debug, Default, Clone)]
pub struct RuntimeHealth {
    /// When the runtime last answered `RuntimeReady=true`.
    last_ready: Option<SystemTime>,
    runtime_error: Option<String>,
    network_error: Option<String>,
}

/// Upstream's `RuntimeCondition.String()`, or Go's `<nil>` for a
/// condition the runtime did not report.
fn describe(condition: Option<&RuntimeCondition>) -> String {
    match condition {
        Some(c) => format!(
            "{}={} reason:{} message:{}",
            c.r#type, c.status, c.reason, c.message
        ),
        None => "<nil>".into(),
    }
}

impl RuntimeHealth {
    /// Takes one answer to CRI `Status` at `now`: its conditions, or `None`
    /// when the runtime did not answer (upstream logs "Container runtime
    /// sanity check failed" and changes nothing, so the last ready answer
    /// ages until the runtime is called down).
    pub fn observe(&mut self, answer: Option<&[RuntimeCondition]>, now: SystemTime) {
        let Some(conditions) = answer else {
            return;
        };
        let find = |kind: &str| conditions.iter().find(|c| c.r#type == kind);
        self.network_error = match find("NetworkReady") {
            Some(c) if c.status => None,
            other => Some(format!(
                "container runtime network not ready: {}",
                describe(other)
            )),
        };
        match find("RuntimeReady") {
            Some(c) if c.status => {
                self.runtime_error = None;
                self.last_ready = Some(now);
            }
            other => {
                self.runtime_error =
                    Some(format!("container runtime not ready: {}", describe(other)));
            }
        }
    }

    /// The node's readiness at `now`. `pod_network` is the agent's own
    /// pod network's error (its bridge not yet set up), said when the
    /// runtime itself reports no network error.
    pub fn readiness(&self, now: SystemTime, pod_network: Option<&str>) -> Readiness {
        let mut errors: Vec<String> = Vec::new();
        match self.last_ready {
            None => errors.push("container runtime status check may not have completed yet".into()),
            Some(at) if now.duration_since(at).unwrap_or_default() >= RUNTIME_DOWN_AFTER => {
                errors.push("container runtime is down".into())
            }
            Some(_) => {}
        }
        errors.extend(self.runtime_error.clone());
        match (&self.network_error, pod_network) {
            (Some(error), _) => errors.push(error.clone()),
            (None, Some(error)) => errors.push(error.into()),
            (None, None) => {}
        }
        // Go's error aggregate: one error as itself, several bracketed.
        match errors.len() {
            0 => Readiness::Ready,
            1 => Readiness::NotReady(errors.remove(0)),
            _ => Readiness::NotReady(format!("[{}]", errors.join(", "))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn condition(kind: &str, status: bool, reason: &str, message: &str) -> RuntimeCondition {
        RuntimeCondition {
            r#type: kind.into(),
            status,
            reason: reason.into(),
            message: message.into(),
        }
    }

    fn ready() -> Vec<RuntimeCondition> {
        vec![
            condition("RuntimeReady", true, "", ""),
            condition("NetworkReady", true, "", ""),
        ]
    }

    fn at(seconds: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000 + seconds)
    }

    #[test]
    fn a_node_is_ready_only_while_its_runtime_says_so() {
        let mut health = RuntimeHealth::default();
        assert_eq!(
            health.readiness(at(0), None),
            Readiness::NotReady("container runtime status check may not have completed yet".into())
        );
        health.observe(Some(&ready()), at(0));
        assert_eq!(health.readiness(at(0), None), Readiness::Ready);
        // The agent's own pod network not set up yet.
        let cni = "container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady message:Network plugin returns error: cni plugin not initialized";
        assert_eq!(
            health.readiness(at(1), Some(cni)),
            Readiness::NotReady(cni.into())
        );
        // The runtime stops answering: ready until 30 s after its last
        // ready answer, then down.
        health.observe(None, at(10));
        assert_eq!(health.readiness(at(29), None), Readiness::Ready);
        assert_eq!(
            health.readiness(at(30), None),
            Readiness::NotReady("container runtime is down".into())
        );
        // It answers again.
        health.observe(Some(&ready()), at(31));
        assert_eq!(health.readiness(at(31), None), Readiness::Ready);
    }

    #[test]
    fn the_runtimes_own_conditions_are_said_as_upstream_says_them() {
        let mut health = RuntimeHealth::default();
        health.observe(
            Some(&[
                condition("RuntimeReady", true, "", ""),
                condition(
                    "NetworkReady",
                    false,
                    "NetworkPluginNotReady",
                    "Network plugin returns error: cni plugin not initialized",
                ),
            ]),
            at(0),
        );
        assert_eq!(
            health.readiness(at(0), None),
            Readiness::NotReady("container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady message:Network plugin returns error: cni plugin not initialized".into())
        );
        let mut health = RuntimeHealth::default();
        health.observe(
            Some(&[condition("RuntimeReady", false, "Broken", "no shim")]),
            at(0),
        );
        assert_eq!(
            health.readiness(at(0), None),
            Readiness::NotReady(
                "[container runtime status check may not have completed yet, container runtime not ready: RuntimeReady=false reason:Broken message:no shim, container runtime network not ready: <nil>]"
                    .into()
            )
        );
    }
}
