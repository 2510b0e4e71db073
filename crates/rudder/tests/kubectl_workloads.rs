//! Deployments as every installed kubectl drives them, against `rudder
//! server` with its controllers (the harness's stand-in kubelet makes pods
//! Ready until there is a node agent): create, `rollout status`, a new
//! image, `rollout history`, `undo` (and `--to-revision`), `scale`,
//! `pause`/`resume`, `restart`, and a deleted pod replaced.

mod common;

use std::time::{Duration, Instant};

use common::{Kubectl, each_version_with_nodes};

fn rolled_out(k: &Kubectl<'_>, failures: &mut Vec<String>, what: &str) {
    k.expect(
        failures,
        &format!("rollout status after {what}"),
        &["rollout", "status", "deployment/web", "--timeout=60s"],
        None,
        "deployment \"web\" successfully rolled out",
    );
}

fn image(k: &Kubectl<'_>) -> String {
    k.run(
        &[
            "get",
            "deployment",
            "web",
            "-o",
            "jsonpath={.spec.template.spec.containers[0].image}",
        ],
        None,
    )
    .1
}

/// Waits until `check` holds (at most 30 s); records `what` if it never does.
fn eventually(failures: &mut Vec<String>, what: &str, mut check: impl FnMut() -> Option<String>) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match check() {
            None => return,
            Some(last) if Instant::now() > deadline => {
                failures.push(format!("{what}: last saw {last}"));
                return;
            }
            Some(_) => std::thread::sleep(Duration::from_millis(100)),
        }
    }
}

#[test]
fn deployments_roll_out_back_and_scale() {
    each_version_with_nodes(
        |tag| format!("wl-{tag}"),
        |k, tag, failures| {
            let ns = format!("wl-{tag}");
            k.expect(
                failures,
                "create the namespace",
                &["create", "namespace", &ns],
                None,
                "created",
            );
            k.expect(
                failures,
                "create deployment",
                &[
                    "create",
                    "deployment",
                    "web",
                    "--image=busybox:1",
                    "--replicas=3",
                ],
                None,
                "created",
            );
            rolled_out(k, failures, "create");

            k.expect(
                failures,
                "set image",
                &["set", "image", "deployment/web", "busybox=busybox:2"],
                None,
                "image updated",
            );
            rolled_out(k, failures, "set image");
            let (_, history) = k.run(&["rollout", "history", "deployment/web"], None);
            if !(history.contains("REVISION")
                && history.contains("\n1 ")
                && history.contains("\n2 "))
            {
                failures.push(format!(
                    "rollout history lists revisions 1 and 2: {history}"
                ));
            }
            let (_, rs) = k.run(&["get", "rs", "-o", "name"], None);
            if rs.lines().count() != 2 {
                failures.push(format!("two ReplicaSets after one change: {rs}"));
            }

            k.expect(
                failures,
                "rollout undo",
                &["rollout", "undo", "deployment/web"],
                None,
                "rolled back",
            );
            rolled_out(k, failures, "undo");
            if image(k) != "busybox:1" {
                failures.push(format!("undo brings back busybox:1, got {}", image(k)));
            }
            k.expect(
                failures,
                "rollout undo --to-revision=2",
                &["rollout", "undo", "deployment/web", "--to-revision=2"],
                None,
                "rolled back",
            );
            rolled_out(k, failures, "undo --to-revision");
            if image(k) != "busybox:2" {
                failures.push(format!(
                    "undo --to-revision=2 brings back busybox:2, got {}",
                    image(k)
                ));
            }

            k.expect(
                failures,
                "scale",
                &["scale", "deployment/web", "--replicas=5"],
                None,
                "scaled",
            );
            rolled_out(k, failures, "scale");
            let ready = || {
                k.run(
                    &[
                        "get",
                        "deployment",
                        "web",
                        "-o",
                        "jsonpath={.status.readyReplicas}",
                    ],
                    None,
                )
                .1
            };
            if ready() != "5" {
                failures.push(format!("five ready after scaling, got {}", ready()));
            }

            k.expect(
                failures,
                "pause",
                &["rollout", "pause", "deployment/web"],
                None,
                "paused",
            );
            k.expect(
                failures,
                "set image while paused",
                &["set", "image", "deployment/web", "busybox=busybox:3"],
                None,
                "image updated",
            );
            std::thread::sleep(Duration::from_millis(500));
            let (_, rs) = k.run(&["get", "rs", "-o", "name"], None);
            if rs.lines().count() != 2 {
                failures.push(format!("nothing rolls out while paused: {rs}"));
            }
            k.expect(
                failures,
                "resume",
                &["rollout", "resume", "deployment/web"],
                None,
                "resumed",
            );
            rolled_out(k, failures, "resume");
            k.expect(
                failures,
                "restart",
                &["rollout", "restart", "deployment/web"],
                None,
                "restarted",
            );
            rolled_out(k, failures, "restart");

            // A deleted pod is replaced.
            let (_, pods) = k.run(&["get", "pods", "-l", "app=web", "-o", "name"], None);
            match pods.lines().next() {
                Some(victim) => {
                    let victim = victim.to_string();
                    k.expect(
                        failures,
                        "delete a pod",
                        &["delete", &victim],
                        None,
                        "deleted",
                    );
                    eventually(failures, "the deleted pod is replaced", || {
                        let (_, now) = k.run(
                            &["get", "pods", "-l", "app=web", "-o", "jsonpath={range .items[*]}{.metadata.name} {.status.phase}{\"\\n\"}{end}"],
                            None,
                        );
                        let running = now.lines().filter(|l| l.ends_with(" Running")).count();
                        (running == 5 && !now.contains(victim.trim_start_matches("pod/")))
                            .then_some(())
                            .map_or(Some(now), |_| None)
                    });
                }
                None => failures.push(format!("pods of the deployment: {pods}")),
            }
            k.expect(
                failures,
                "delete the namespace",
                &["delete", "namespace", &ns],
                None,
                "deleted",
            );
        },
    );
}

#[test]
fn jobs_complete_and_kubectl_waits_for_them() {
    each_version_with_nodes(
        |tag| format!("jobs-{tag}"),
        |k, tag, failures| {
            let ns = format!("jobs-{tag}");
            k.expect(
                failures,
                "create the namespace",
                &["create", "namespace", &ns],
                None,
                "created",
            );
            k.expect(
                failures,
                "create job",
                &["create", "job", "hello", "--image=busybox"],
                None,
                "created",
            );
            k.expect(
                failures,
                "wait for complete",
                &[
                    "wait",
                    "--for=condition=complete",
                    "job/hello",
                    "--timeout=30s",
                ],
                None,
                "condition met",
            );
            let (_, line) = k.run(&["get", "job", "hello", "--no-headers"], None);
            // The COMPLETIONS column.
            if !line.contains("1/1") {
                failures.push(format!("get job shows 1/1 completions: {line}"));
            }
            k.expect(
                failures,
                "create cronjob",
                &[
                    "create",
                    "cronjob",
                    "nightly",
                    "--image=busybox",
                    "--schedule=0 3 * * *",
                ],
                None,
                "created",
            );
            k.expect(
                failures,
                "create job --from=cronjob",
                &["create", "job", "manual", "--from=cronjob/nightly"],
                None,
                "created",
            );
            k.expect(
                failures,
                "wait for the job from the cronjob",
                &[
                    "wait",
                    "--for=condition=complete",
                    "job/manual",
                    "--timeout=30s",
                ],
                None,
                "condition met",
            );
            let (_, owner) = k.run(
                &[
                    "get",
                    "job",
                    "manual",
                    "-o",
                    "jsonpath={.metadata.ownerReferences[0].kind}",
                ],
                None,
            );
            if owner != "CronJob" {
                failures.push(format!("the job from a cronjob is owned by it: {owner}"));
            }
            k.expect(
                failures,
                "delete the namespace",
                &["delete", "namespace", &ns],
                None,
                "deleted",
            );
        },
    );
}

const STATEFULSET: &str = "apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: db
spec:
  replicas: 2
  serviceName: db
  selector:
    matchLabels: {app: db}
  template:
    metadata:
      labels: {app: db}
    spec:
      containers:
      - {name: db, image: 'busybox:1'}
";

#[test]
fn statefulsets_roll_out_and_back() {
    // The API server defaults `rollingUpdate.partition` to 0, as upstream
    // does, so kubectl reports a "partitioned" roll out.
    each_version_with_nodes(
        |tag| format!("sts-{tag}"),
        |k, tag, failures| {
            let ns = format!("sts-{tag}");
            k.expect(
                failures,
                "create the namespace",
                &["create", "namespace", &ns],
                None,
                "created",
            );
            k.expect(
                failures,
                "apply",
                &["apply", "-f", "-"],
                Some(STATEFULSET),
                "created",
            );
            let status = |what: &str, failures: &mut Vec<String>| {
                k.expect(
                    failures,
                    &format!("rollout status after {what}"),
                    &["rollout", "status", "statefulset/db", "--timeout=60s"],
                    None,
                    "partitioned roll out complete: 2 new pods have been updated",
                );
            };
            status("create", failures);
            k.expect(
                failures,
                "set image",
                &["set", "image", "statefulset/db", "db=busybox:2"],
                None,
                "image updated",
            );
            status("set image", failures);
            let (_, history) = k.run(&["rollout", "history", "statefulset/db"], None);
            if !(history.contains("REVISION")
                && history.contains("\n1 ")
                && history.contains("\n2 "))
            {
                failures.push(format!(
                    "rollout history lists revisions 1 and 2: {history}"
                ));
            }
            k.expect(
                failures,
                "rollout undo",
                &["rollout", "undo", "statefulset/db"],
                None,
                "rolled back",
            );
            status("undo", failures);
            let (_, image) = k.run(
                &[
                    "get",
                    "pod",
                    "db-1",
                    "-o",
                    "jsonpath={.spec.containers[0].image}",
                ],
                None,
            );
            if image != "busybox:1" {
                failures.push(format!("undo brings back busybox:1 on db-1, got {image}"));
            }
            k.expect(
                failures,
                "scale",
                &["scale", "statefulset/db", "--replicas=3"],
                None,
                "scaled",
            );
            k.expect(
                failures,
                "rollout status after scale",
                &["rollout", "status", "statefulset/db", "--timeout=60s"],
                None,
                "partitioned roll out complete: 3 new pods have been updated",
            );
            k.expect(
                failures,
                "delete the namespace",
                &["delete", "namespace", &ns],
                None,
                "deleted",
            );
        },
    );
}

#[test]
fn daemonsets_roll_out_on_every_node() {
    each_version_with_nodes(
        |tag| format!("ds-{tag}"),
        |k, tag, failures| {
            let ns = format!("ds-{tag}");
            k.expect(
                failures,
                "create the namespace",
                &["create", "namespace", &ns],
                None,
                "created",
            );
            let node = format!("apiVersion: v1\nkind: Node\nmetadata:\n  name: node-{tag}\n");
            k.expect(
                failures,
                "add a node",
                &["apply", "-f", "-"],
                Some(&node),
                "created",
            );
            let set = "apiVersion: apps/v1\nkind: DaemonSet\nmetadata:\n  name: agent\nspec:\n  selector:\n    matchLabels: {app: agent}\n  template:\n    metadata:\n      labels: {app: agent}\n    spec:\n      containers:\n      - {name: agent, image: 'busybox:1'}\n";
            k.expect(
                failures,
                "apply",
                &["apply", "-f", "-"],
                Some(set),
                "created",
            );
            let status = |what: &str, failures: &mut Vec<String>| {
                k.expect(
                    failures,
                    &format!("rollout status after {what}"),
                    &["rollout", "status", "daemonset/agent", "--timeout=60s"],
                    None,
                    "daemon set \"agent\" successfully rolled out",
                );
            };
            status("create", failures);
            k.expect(
                failures,
                "set image",
                &["set", "image", "daemonset/agent", "agent=busybox:2"],
                None,
                "image updated",
            );
            status("set image", failures);
            k.expect(
                failures,
                "rollout undo",
                &["rollout", "undo", "daemonset/agent"],
                None,
                "rolled back",
            );
            status("undo", failures);
            k.expect(
                failures,
                "delete the namespace",
                &["delete", "namespace", &ns],
                None,
                "deleted",
            );
        },
    );
}
