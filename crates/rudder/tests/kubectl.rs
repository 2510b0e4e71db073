//! Real kubectl, every installed version 1.27–1.33, against `rudder server`:
//! the everyday commands, each in the way that version sends it (protobuf
//! OpenAPI v2 for 1.27/1.28, protobuf bodies from 1.32's typed clients,
//! aggregated discovery, Tables, chunked lists, watches).

mod common;

use common::{KUBECTL_DIR, Kubectl, start, versions};

const DEPLOYMENT: &str = "apiVersion: apps/v1
kind: Deployment
metadata: {name: web, labels: {app: web}}
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers:
      - {name: main, image: registry.local/web:1, ports: [{containerPort: 8080}]}
";

#[test]
fn every_installed_kubectl_works() {
    let versions = versions();
    if versions.is_empty() {
        eprintln!("no kubectl under {KUBECTL_DIR}; nothing to check");
        return;
    }
    let server = start();
    let kubeconfig = server.kubeconfig();
    let mut failures = Vec::new();
    for (version, binary) in &versions {
        let cache = tempfile::tempdir().expect("cache dir");
        let k = Kubectl {
            binary,
            kubeconfig: kubeconfig.clone(),
            cache: cache.path().to_path_buf(),
            namespace: format!("v{}", version.replace('.', "-")),
        };
        server.wait_ready(&k);
        let mut f = Vec::new();
        let ns = k.namespace.clone();
        k.expect(
            &mut f,
            "version",
            &["version", "-o", "json"],
            None,
            "serverVersion",
        );
        k.expect(&mut f, "api-resources", &["api-resources"], None, "deploy");
        k.expect(
            &mut f,
            "create namespace (protobuf body on 1.32+)",
            &["create", "namespace", &ns],
            None,
            "created",
        );
        k.expect(
            &mut f,
            "create -f (protobuf OpenAPI v2 on 1.27/1.28)",
            &["create", "-f", "-"],
            Some(DEPLOYMENT),
            "deployment.apps/web created",
        );
        k.expect(
            &mut f,
            "Table columns",
            &["get", "deploy"],
            None,
            "UP-TO-DATE",
        );
        k.expect(
            &mut f,
            "-o wide",
            &["get", "deploy", "-o", "wide"],
            None,
            "registry.local/web:1",
        );
        k.expect(
            &mut f,
            "create configmap",
            &["create", "configmap", "c1", "--from-literal=k=v"],
            None,
            "configmap/c1 created",
        );
        k.expect(
            &mut f,
            "create secret",
            &["create", "secret", "generic", "s1", "--from-literal=p=q"],
            None,
            "secret/s1 created",
        );
        k.expect(
            &mut f,
            "secret data",
            &["get", "secret", "s1", "-o", "jsonpath={.data.p}"],
            None,
            "cQ==",
        );
        k.refuse(
            &mut f,
            "AlreadyExists",
            &["create", "configmap", "c1", "--from-literal=k=v"],
            "already exists",
        );
        k.refuse(
            &mut f,
            "Invalid name",
            &["create", "configmap", "Bad_Name", "--from-literal=k=v"],
            "Invalid",
        );
        k.expect(
            &mut f,
            "scale",
            &["scale", "deploy", "web", "--replicas=5"],
            None,
            "scaled",
        );
        k.expect(
            &mut f,
            "scale stored",
            &["get", "deploy", "web", "-o", "jsonpath={.spec.replicas}"],
            None,
            "5",
        );
        k.expect(
            &mut f,
            "label",
            &["label", "deploy", "web", "tier=front"],
            None,
            "labeled",
        );
        k.expect(
            &mut f,
            "label selector",
            &["get", "deploy", "-l", "tier=front", "-o", "name"],
            None,
            "deployment.apps/web",
        );
        k.expect(
            &mut f,
            "merge patch",
            &[
                "patch",
                "deploy",
                "web",
                "--type=merge",
                "-p",
                r#"{"spec":{"paused":true}}"#,
            ],
            None,
            "patched",
        );
        k.expect(
            &mut f,
            "json patch",
            &[
                "patch",
                "deploy",
                "web",
                "--type=json",
                "-p",
                r#"[{"op":"replace","path":"/spec/replicas","value":3}]"#,
            ],
            None,
            "patched",
        );
        k.expect(
            &mut f,
            "dry run",
            &[
                "create",
                "configmap",
                "dry",
                "--from-literal=a=b",
                "--dry-run=server",
            ],
            None,
            "server dry run",
        );
        k.refuse(
            &mut f,
            "dry run stored nothing",
            &["get", "configmap", "dry"],
            "NotFound",
        );
        for i in 0..7 {
            k.run(
                &[
                    "create",
                    "configmap",
                    &format!("page-{i}"),
                    "--from-literal=i=x",
                ],
                None,
            );
        }
        let (_, pages) = k.run(&["get", "configmap", "--chunk-size=3", "-o", "name"], None);
        if pages.matches("configmap/page-").count() != 7 {
            f.push(format!("chunked list: {pages}"));
        }
        k.expect(
            &mut f,
            "explain",
            &["explain", "deployment.spec.replicas"],
            None,
            "replicas",
        );
        k.expect(
            &mut f,
            "get all",
            &["get", "all", "-o", "name"],
            None,
            "deployment.apps/web",
        );
        k.expect(
            &mut f,
            "delete",
            &["delete", "deploy", "web"],
            None,
            "deleted",
        );
        k.refuse(&mut f, "deleted", &["get", "deploy", "web"], "NotFound");
        k.expect(
            &mut f,
            "delete by label",
            &["delete", "configmap", "-l", "nothing!=x"],
            None,
            "deleted",
        );
        failures.extend(f.into_iter().map(|m| format!("kubectl {version}: {m}")));
    }
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
    eprintln!("{} kubectl versions passed", versions.len());
}
