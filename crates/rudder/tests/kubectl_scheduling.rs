//! The scheduler of `rudder server` as every installed kubectl sees it,
//! on Node objects the test adds (nothing runs the pods): a Deployment's
//! pods spread evenly over the zones of the labelled nodes its selector
//! allows (a zone spread constraint honouring taints), a tainted node kept
//! free, a pod that fits nowhere says why in `describe`, a
//! higher-priority pod preempts a lower one, and `rudder explain pod`
//! names each node's verdict.

mod common;

use std::process::Command;

use common::each_version;

fn node(name: &str, cpu: &str, labels: &str, taints: &str) -> String {
    format!(
        r#"{{"apiVersion": "v1", "kind": "Node", "metadata": {{"name": "{name}", "labels": {labels}}},
  "spec": {{"taints": {taints}}},
  "status": {{"capacity": {{"cpu": "{cpu}", "memory": "8Gi", "pods": "110"}},
    "allocatable": {{"cpu": "{cpu}", "memory": "8Gi", "pods": "110"}},
    "conditions": [{{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "ready"}}]}}}}"#
    )
}

#[test]
fn pods_are_scheduled_spread_kept_off_taints_and_preempted() {
    each_version(
        |tag| format!("sched-{tag}"),
        |k, tag, failures| {
            let ns = format!("sched-{tag}");
            k.expect(
                failures,
                "namespace",
                &["create", "namespace", &ns],
                None,
                "created",
            );
            // Three nodes of this version's zone pair, one of them tainted,
            // and a small one for preemption.
            let zone =
                |z: &str| format!(r#"{{"pool": "{tag}", "topology.kubernetes.io/zone": "{z}"}}"#);
            for (name, cpu, labels, taints) in [
                (format!("a-{tag}"), "4", zone("za"), "[]".to_string()),
                (format!("b-{tag}"), "4", zone("zb"), "[]".to_string()),
                (
                    format!("c-{tag}"),
                    "4",
                    zone("zc"),
                    r#"[{"key": "dedicated", "value": "db", "effect": "NoSchedule"}]"#.to_string(),
                ),
                (
                    format!("tiny-{tag}"),
                    "1",
                    format!(r#"{{"tiny": "{tag}"}}"#),
                    "[]".to_string(),
                ),
            ] {
                k.expect(
                    failures,
                    "a node",
                    &["create", "-f", "-"],
                    Some(&node(&name, cpu, &labels, &taints)),
                    "created",
                );
            }
            let deployment = format!(
                r#"{{"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {{"name": "web"}},
  "spec": {{"replicas": 4, "selector": {{"matchLabels": {{"app": "web"}}}},
    "template": {{"metadata": {{"labels": {{"app": "web"}}}},
      "spec": {{"nodeSelector": {{"pool": "{tag}"}},
        "topologySpreadConstraints": [{{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
          "whenUnsatisfiable": "DoNotSchedule", "nodeTaintsPolicy": "Honor", "labelSelector": {{"matchLabels": {{"app": "web"}}}}}}],
        "containers": [{{"name": "c", "image": "busybox:1", "resources": {{"requests": {{"cpu": "100m"}}}}}}]}}}}}}}}"#
            );
            k.expect(
                failures,
                "deployment",
                &["create", "-f", "-"],
                Some(&deployment),
                "created",
            );
            let nodes = k.eventually(
                failures,
                "the deployment's pods bound",
                &[
                    "get",
                    "pods",
                    "-l",
                    "app=web",
                    "-o",
                    "jsonpath={range .items[*]}{.spec.nodeName}{\"\\n\"}{end}",
                ],
                |out| out.lines().filter(|l| !l.is_empty()).count() == 4,
            );
            let on = |n: &str| nodes.lines().filter(|l| *l == n).count();
            if on(&format!("c-{tag}")) != 0
                || on(&format!("a-{tag}")) != 2
                || on(&format!("b-{tag}")) != 2
            {
                failures.push(format!(
                    "spread over a and b, none on the tainted c: {nodes:?}"
                ));
            }
            // A pod too big for every node says why, as upstream words it.
            let huge = r#"{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "huge"},
  "spec": {"containers": [{"name": "c", "image": "busybox:1", "resources": {"requests": {"cpu": "64"}}}]}}"#;
            k.expect(
                failures,
                "a huge pod",
                &["create", "-f", "-"],
                Some(huge),
                "created",
            );
            k.eventually(
                failures,
                "describe says why",
                &["describe", "pod", "huge"],
                |out| {
                    out.contains("FailedScheduling")
                        && out.contains("Insufficient cpu")
                        && out.contains("nodes are available")
                },
            );
            // `rudder explain pod` names every node's verdict.
            let explain = Command::new(env!("CARGO_BIN_EXE_rudder"))
                .args(["explain", "pod", "huge", "-n", &ns, "--kubeconfig"])
                .arg(&k.kubeconfig)
                .output()
                .expect("run rudder explain");
            let text = String::from_utf8_lossy(&explain.stdout);
            if !explain.status.success()
                || !text.contains(&format!("Pod {ns}/huge (scheduler default-scheduler): 0/"))
                || !text.contains(&format!("  c-{tag}: does not fit"))
                || !text.contains("TaintToleration: node(s) had untolerated taint {dedicated: db}")
                || !text.contains("NodeResourcesFit: Insufficient cpu")
            {
                failures.push(format!(
                    "rudder explain: ({}) {text}{}",
                    explain.status,
                    String::from_utf8_lossy(&explain.stderr)
                ));
            }
            // Preemption: a low-priority pod fills the tiny node; a
            // higher-priority one takes its place.
            for (class, value) in [("low", 10), ("high", 1000)] {
                let class = format!(
                    r#"{{"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {{"name": "{class}-{tag}"}}, "value": {value}}}"#
                );
                k.expect(
                    failures,
                    "a priority class",
                    &["create", "-f", "-"],
                    Some(&class),
                    "created",
                );
            }
            let pod = |name: &str, class: &str| {
                format!(
                    r#"{{"apiVersion": "v1", "kind": "Pod", "metadata": {{"name": "{name}"}},
  "spec": {{"priorityClassName": "{class}-{tag}", "nodeSelector": {{"tiny": "{tag}"}},
    "containers": [{{"name": "c", "image": "busybox:1", "resources": {{"requests": {{"cpu": "800m"}}}}}}]}}}}"#
                )
            };
            k.expect(
                failures,
                "the low pod",
                &["create", "-f", "-"],
                Some(&pod("low", "low")),
                "created",
            );
            k.eventually(
                failures,
                "the low pod bound",
                &["get", "pod", "low", "-o", "jsonpath={.spec.nodeName}"],
                |out| out == format!("tiny-{tag}"),
            );
            k.expect(
                failures,
                "the high pod",
                &["create", "-f", "-"],
                Some(&pod("high", "high")),
                "created",
            );
            k.eventually(
                failures,
                "the high pod nominated",
                &[
                    "get",
                    "pod",
                    "high",
                    "-o",
                    "jsonpath={.status.nominatedNodeName}",
                ],
                |out| out == format!("tiny-{tag}"),
            );
            k.eventually(
                failures,
                "the low pod preempted",
                &[
                    "get",
                    "pod",
                    "low",
                    "-o",
                    "jsonpath={.metadata.deletionTimestamp}",
                ],
                |out| !out.is_empty(),
            );
            // Nothing runs the pods: end the victim's grace period as its
            // kubelet would.
            k.run(
                &["delete", "pod", "low", "--grace-period=0", "--force"],
                None,
            );
            k.eventually(
                failures,
                "the high pod bound",
                &["get", "pod", "high", "-o", "jsonpath={.spec.nodeName}"],
                |out| out == format!("tiny-{tag}"),
            );
            k.expect(
                failures,
                "the Scheduled event",
                &[
                    "get",
                    "events",
                    "--field-selector",
                    "reason=Scheduled",
                    "-o",
                    "jsonpath={.items[*].message}",
                ],
                None,
                &format!("Successfully assigned {ns}/high to tiny-{tag}"),
            );
        },
    );
}
