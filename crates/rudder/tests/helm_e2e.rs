//! Helm 4 — which applies server-side by default — against a one-node
//! cluster with its agent running real containers: a chart made like
//! public ones (a CRD and a custom resource, RBAC, a webhook
//! configuration, a Deployment whose env uses `fieldRef` and
//! `resourceFieldRef`, a Service, a ConfigMap, and a hook Job that must
//! run to completion) is installed, upgraded unchanged (which writes no
//! object: no new generation, no new resourceVersion), upgraded with a
//! changed value, rolled back, listed in its history and uninstalled.
//! Needs root: fails otherwise, unless `RUDDER_SKIP_ROOT_TESTS=1` skips it
//! knowingly.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::Kubectl;
use common::node::{Cluster, wait_for};

const BRIDGE: &str = "rudhelm0";
const CLUSTER_CIDR: &str = "10.42.208.0/20";
const NAMESPACE: &str = "helm-e2e";

fn chart() -> PathBuf {
    Path::new(&std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"))
        .join("tests/charts/demo")
}

struct Helm {
    binary: PathBuf,
    kubeconfig: PathBuf,
    home: tempfile::TempDir,
}

impl Helm {
    /// Runs helm in the test's namespace; its output, or a panic naming
    /// the command and the server's log.
    fn run(&self, cluster: &Cluster, args: &[&str]) -> String {
        let output = Command::new(&self.binary)
            .args(args)
            .args(["--namespace", NAMESPACE])
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .env("HELM_CACHE_HOME", self.home.path().join("cache"))
            .env("HELM_CONFIG_HOME", self.home.path().join("config"))
            .env("HELM_DATA_HOME", self.home.path().join("data"))
            .output()
            .expect("run helm");
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        assert!(
            output.status.success(),
            "helm {args:?} failed:\n{text}\nthe server's log ends:\n{}",
            cluster.log()
        );
        text
    }
}

/// `generation resourceVersion` of each object the chart owns (the
/// Deployment's status changes with its pods, so only its generation).
fn versions(k: &Kubectl<'_>) -> Vec<String> {
    let mut found = Vec::new();
    for (kind, field) in [
        ("deployment/demo-demo", "{.metadata.generation}"),
        (
            "configmap/demo-demo",
            "{.metadata.generation} {.metadata.resourceVersion}",
        ),
        (
            "service/demo-demo",
            "{.metadata.generation} {.metadata.resourceVersion}",
        ),
        ("serviceaccount/demo-demo", "{.metadata.resourceVersion}"),
        ("role/demo-demo", "{.metadata.resourceVersion}"),
        ("rolebinding/demo-demo", "{.metadata.resourceVersion}"),
        (
            "clusterrole/demo-demo-helm-e2e",
            "{.metadata.resourceVersion}",
        ),
        (
            "validatingwebhookconfiguration/demo-demo-helm-e2e",
            "{.metadata.generation} {.metadata.resourceVersion}",
        ),
        (
            "widget/demo-demo",
            "{.metadata.generation} {.metadata.resourceVersion}",
        ),
    ] {
        let (ok, out) = k.run(&["get", kind, "-o", &format!("jsonpath={field}")], None);
        assert!(ok, "{kind}: {out}");
        found.push(format!("{kind} {}", out.trim()));
    }
    found
}

fn deployment_ready(k: &Kubectl<'_>, generation: &str) -> Option<()> {
    let (ok, out) = k.run(
        &[
            "get",
            "deployment/demo-demo",
            "-o",
            "jsonpath={.metadata.generation} {.status.observedGeneration} {.status.updatedReplicas} {.status.readyReplicas}",
        ],
        None,
    );
    (ok && out.trim() == format!("{generation} {generation} 2 2")).then_some(())
}

#[test]
fn helm_installs_upgrades_rolls_back_and_uninstalls_a_chart() {
    if !common::require_root("helm_e2e") {
        return;
    }
    let cluster = Cluster::start(BRIDGE, CLUSTER_CIDR);
    let kubectl = common::versions().pop().expect("a kubectl").1;
    let k = cluster.kubectl(&kubectl, NAMESPACE);
    cluster.wait_node_ready(&k);
    let helm = Helm {
        binary: common::helm(),
        kubeconfig: k.kubeconfig.clone(),
        home: tempfile::tempdir().expect("helm home"),
    };
    let chart = chart();
    let chart = chart.to_str().expect("a UTF-8 path");

    // Install: the CRD from crds/, everything else, the hook Job run to
    // completion (and deleted, hook-succeeded), the Deployment ready.
    let out = helm.run(
        &cluster,
        &[
            "install",
            "demo",
            chart,
            "--create-namespace",
            "--wait",
            "--timeout",
            "3m",
        ],
    );
    assert!(out.contains("STATUS: deployed"), "{out}");
    let (ok, out) = k.run(&["get", "crd", "widgets.demo.rudder.dev"], None);
    assert!(ok, "{out}");
    let (ok, out) = k.run(&["get", "widgets"], None);
    assert!(
        ok && out.contains("demo-demo") && out.contains("hello"),
        "{out}"
    );
    wait_for(
        "the Deployment ready",
        Duration::from_secs(120),
        &cluster,
        || deployment_ready(&k, "1"),
    );
    let (ok, out) = k.run(&["get", "jobs", "-o", "name"], None);
    assert!(
        ok && out.trim().is_empty(),
        "the succeeded hook Job is deleted: {out}"
    );

    // An unchanged upgrade writes nothing (it runs the hook again).
    let before = versions(&k);
    let out = helm.run(
        &cluster,
        &["upgrade", "demo", chart, "--wait", "--timeout", "3m"],
    );
    assert!(out.contains("REVISION: 2"), "{out}");
    assert_eq!(
        versions(&k),
        before,
        "an unchanged helm upgrade wrote objects it owns"
    );

    // A changed value rolls the Deployment out (its config checksum and
    // env change) and reaches the custom resource.
    let out = helm.run(
        &cluster,
        &[
            "upgrade",
            "demo",
            chart,
            "--set",
            "message=bonjour",
            "--wait",
            "--timeout",
            "3m",
        ],
    );
    assert!(out.contains("REVISION: 3"), "{out}");
    wait_for(
        "the Deployment rolled out to generation 2",
        Duration::from_secs(120),
        &cluster,
        || deployment_ready(&k, "2"),
    );
    let (ok, out) = k.run(
        &[
            "get",
            "widget/demo-demo",
            "-o",
            "jsonpath={.spec.message} {.spec.size}",
        ],
        None,
    );
    assert!(ok && out.trim() == "bonjour 3", "{out}");

    // Rollback to the first revision.
    let out = helm.run(
        &cluster,
        &["rollback", "demo", "1", "--wait", "--timeout", "3m"],
    );
    assert!(out.contains("Rollback was a success"), "{out}");
    let (ok, out) = k.run(
        &[
            "get",
            "configmap/demo-demo",
            "-o",
            "jsonpath={.data.message}",
        ],
        None,
    );
    assert!(ok && out.trim() == "hello", "{out}");
    wait_for(
        "the Deployment rolled back (generation 3)",
        Duration::from_secs(120),
        &cluster,
        || deployment_ready(&k, "3"),
    );

    let history = helm.run(&cluster, &["history", "demo", "-o", "json"]);
    let history: serde_json::Value = serde_json::from_str(&history).expect("helm history JSON");
    let summary: Vec<(i64, String, String)> = history
        .as_array()
        .expect("revisions")
        .iter()
        .map(|r| {
            (
                r["revision"].as_i64().unwrap_or_default(),
                r["status"].as_str().unwrap_or_default().to_string(),
                r["description"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    let expected = [
        (1, "superseded", "Install complete"),
        (2, "superseded", "Upgrade complete"),
        (3, "superseded", "Upgrade complete"),
        (4, "deployed", "Rollback to 1"),
    ]
    .map(|(r, s, d)| (r, s.to_string(), d.to_string()));
    assert_eq!(summary, expected, "{history}");
    let list = helm.run(&cluster, &["list"]);
    assert!(
        list.lines()
            .any(|l| l.starts_with("demo") && l.contains("deployed") && l.contains("demo-0.1.0")),
        "{list}"
    );

    // Uninstall: every object goes but the CRD (Helm keeps crds/).
    let out = helm.run(
        &cluster,
        &["uninstall", "demo", "--wait", "--timeout", "3m"],
    );
    assert!(out.contains("release \"demo\" uninstalled"), "{out}");
    for kind in [
        "deployment/demo-demo",
        "configmap/demo-demo",
        "service/demo-demo",
        "role/demo-demo",
        "widget/demo-demo",
        "clusterrole/demo-demo-helm-e2e",
        "validatingwebhookconfiguration/demo-demo-helm-e2e",
    ] {
        let (ok, out) = k.run(&["get", kind, "--ignore-not-found", "-o", "name"], None);
        assert!(ok && out.trim().is_empty(), "{kind} left: {out}");
    }
    let (ok, out) = k.run(
        &["get", "crd", "widgets.demo.rudder.dev", "-o", "name"],
        None,
    );
    assert!(ok, "Helm keeps the CRD: {out}");
    let list = helm.run(&cluster, &["list"]);
    assert!(!list.contains("demo"), "{list}");
}
