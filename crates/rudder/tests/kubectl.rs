//! Real kubectl, every installed version 1.27–1.33, against `rudder server`:
//! the everyday commands, each in the way that version sends it (protobuf
//! OpenAPI v2 for 1.27/1.28, protobuf bodies from 1.32's typed clients,
//! aggregated discovery, Tables, chunked lists, watches).

mod common;

use common::each_version;

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
    each_version(
        |tag| format!("v{tag}"),
        |k, tag, f| {
            let ns = k.namespace.clone();
            k.expect(
                f,
                "version",
                &["version", "-o", "json"],
                None,
                "serverVersion",
            );
            k.expect(f, "api-resources", &["api-resources"], None, "deploy");
            k.expect(
                f,
                "create namespace (protobuf body on 1.32+)",
                &["create", "namespace", &ns],
                None,
                "created",
            );
            k.expect(
                f,
                "create -f (protobuf OpenAPI v2 on 1.27/1.28)",
                &["create", "-f", "-"],
                Some(DEPLOYMENT),
                "deployment.apps/web created",
            );
            k.expect(f, "Table columns", &["get", "deploy"], None, "UP-TO-DATE");
            k.expect(
                f,
                "-o wide",
                &["get", "deploy", "-o", "wide"],
                None,
                "registry.local/web:1",
            );
            k.expect(
                f,
                "create configmap",
                &["create", "configmap", "c1", "--from-literal=k=v"],
                None,
                "configmap/c1 created",
            );
            k.expect(
                f,
                "create secret",
                &["create", "secret", "generic", "s1", "--from-literal=p=q"],
                None,
                "secret/s1 created",
            );
            k.expect(
                f,
                "secret data",
                &["get", "secret", "s1", "-o", "jsonpath={.data.p}"],
                None,
                "cQ==",
            );
            // Immutable fields, refused with upstream's field paths.
            let moved = DEPLOYMENT
                .replace(
                    "{matchLabels: {app: web}}",
                    "{matchLabels: {app: web, v: '2'}}",
                )
                .replace(
                    "metadata: {labels: {app: web}}",
                    "metadata: {labels: {app: web, v: '2'}}",
                );
            k.refuse_with(
                f,
                "a Deployment's selector is immutable",
                &["replace", "-f", "-"],
                Some(&moved),
                &["spec.selector: Invalid value", "field is immutable"],
            );
            k.expect(
                f,
                "an immutable ConfigMap",
                &["apply", "-f", "-"],
                Some("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: sealed}\nimmutable: true\ndata: {k: v}\n"),
                "configmap/sealed created",
            );
            k.refuse(
                f,
                "its data may not change",
                &[
                    "patch",
                    "configmap",
                    "sealed",
                    "-p",
                    r#"{"data":{"k":"w"}}"#,
                ],
                "data: Forbidden: field is immutable when `immutable` is set",
            );
            k.expect(
                f,
                "v1 Endpoints warn of their deprecation, as 1.33 does",
                &["get", "endpoints", "kubernetes", "-n", "default"],
                None,
                "Warning: v1 Endpoints is deprecated in v1.33+; use discovery.k8s.io/v1 EndpointSlice",
            );
            // Upstream lists the scheduler and the controller manager
            // beside the store; here they are healthy once they hold their
            // Leases, which they take at start.
            k.eventually(
                f,
                "componentstatuses lists the scheduler, controller manager and store, healthy",
                &["get", "componentstatuses"],
                |out| {
                    ["scheduler", "controller-manager", "storage"]
                        .iter()
                        .all(|name| {
                            out.lines().any(|l| {
                                l.split_whitespace().collect::<Vec<_>>() == [name, "Healthy", "ok"]
                            })
                        })
                        && out.contains("NAME")
                        && out.contains("v1 ComponentStatus is deprecated in v1.19+")
                },
            );
            let node = format!("selectable-{tag}");
            let manifest = format!("apiVersion: v1\nkind: Node\nmetadata:\n  name: {node}\n");
            k.expect(
                f,
                "a node",
                &["create", "-f", "-"],
                Some(&manifest),
                "created",
            );
            for selector in ["spec.unschedulable==false", "spec.unschedulable=false"] {
                k.expect(
                    f,
                    "a node whose spec.unschedulable is unset selects as false",
                    &["get", "nodes", "--field-selector", selector, "-o", "name"],
                    None,
                    &format!("node/{node}"),
                );
            }
            let (ok, out) = k.run(
                &[
                    "get",
                    "nodes",
                    "--field-selector",
                    "spec.unschedulable=true",
                    "-o",
                    "name",
                ],
                None,
            );
            if !ok || out.contains(&node) {
                f.push(format!(
                    "spec.unschedulable=true selected an unset node: ({ok}) {out}"
                ));
            }
            k.run(&["delete", "node", &node], None);
            // kubectl's typed creates: Kubernetes protobuf bodies on 1.32+,
            // whose Go zero values are no values, and inline structs.
            for (args, wanted) in [
                (
                    "create deployment typed --image=registry.local/t:1 --port=80 --replicas=0",
                    "deployment.apps/typed created",
                ),
                (
                    "expose deployment typed --port=80 --type=NodePort",
                    "service/typed exposed",
                ),
                (
                    "create job tj --image=registry.local/t:1 -- echo hi",
                    "job.batch/tj created",
                ),
                (
                    "create cronjob tc --image=registry.local/t:1 --schedule=*/5_*_*_*_* -- echo hi",
                    "cronjob.batch/tc created",
                ),
                (
                    "create ingress ti --rule=foo.com/bar=svc1:8080",
                    "ingress.networking.k8s.io/ti created",
                ),
                ("create serviceaccount tsa", "serviceaccount/tsa created"),
                (
                    "create role tr --verb=get --resource=pods",
                    "role.rbac.authorization.k8s.io/tr created",
                ),
                (
                    "create rolebinding trb --role=tr --serviceaccount=default:tsa",
                    "rolebinding.rbac.authorization.k8s.io/trb created",
                ),
                // Before the quota: a pod naming no cpu request is refused
                // under a quota counting cpu, as upstream.
                (
                    "run tpod --image=registry.local/t:1 --restart=Never",
                    "pod/tpod created",
                ),
                (
                    "create quota tq --hard=pods=10,cpu=4",
                    "resourcequota/tq created",
                ),
                (
                    "create pdb tp --selector=app=t --min-available=1",
                    "poddisruptionbudget.policy/tp created",
                ),
                (
                    "autoscale deployment typed --min=1 --max=3 --cpu-percent=80",
                    "horizontalpodautoscaler.autoscaling/typed autoscaled",
                ),
            ] {
                let argv: Vec<String> = args.split(' ').map(|a| a.replace('_', " ")).collect();
                let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
                k.expect(f, &format!("kubectl {args}"), &argv, None, wanted);
            }
            k.expect(
                f,
                "a typed create keeps replicas 0 and gets upstream's defaults, no Go zeros",
                &["get", "deploy", "typed", "-o", "jsonpath={.spec.replicas}|{.spec.template.spec.dnsPolicy}|{.spec.template.spec.containers[0].ports}"],
                None,
                r#"0|ClusterFirst|[{"containerPort":80,"protocol":"TCP"}]"#,
            );
            k.expect(
                f,
                "an Ingress rule's inline value",
                &[
                    "get",
                    "ingress",
                    "ti",
                    "-o",
                    "jsonpath={.spec.rules[0].http.paths[0].backend.service.name}",
                ],
                None,
                "svc1",
            );
            // Quantities: written back canonically, refused when malformed.
            let pod = |cpu: &str| {
                format!(
                    "apiVersion: v1\nkind: Pod\nmetadata: {{name: q}}\nspec:\n  restartPolicy: Never\n  containers:\n  - {{name: c, image: registry.local/q:1, resources: {{requests: {{cpu: \"{cpu}\", memory: 1024Mi}}}}}}\n"
                )
            };
            k.refuse_with(
                f,
                "a malformed quantity is a BadRequest",
                &["create", "-f", "-"],
                Some(&pod("lots")),
                &["BadRequest", "quantities must match the regular expression"],
            );
            k.expect(
                f,
                "a pod with quantities",
                &["create", "-f", "-"],
                Some(&pod("1500m")),
                "pod/q created",
            );
            k.expect(
                f,
                "quantities in canonical form",
                &[
                    "get",
                    "pod",
                    "q",
                    "-o",
                    "jsonpath={.spec.containers[0].resources.requests}",
                ],
                None,
                r#"{"cpu":"1500m","memory":"1Gi"}"#,
            );
            k.refuse(
                f,
                "AlreadyExists",
                &["create", "configmap", "c1", "--from-literal=k=v"],
                "already exists",
            );
            k.refuse(
                f,
                "Invalid name",
                &["create", "configmap", "Bad_Name", "--from-literal=k=v"],
                "Invalid",
            );
            k.expect(
                f,
                "scale",
                &["scale", "deploy", "web", "--replicas=5"],
                None,
                "scaled",
            );
            k.expect(
                f,
                "scale stored",
                &["get", "deploy", "web", "-o", "jsonpath={.spec.replicas}"],
                None,
                "5",
            );
            k.expect(
                f,
                "label",
                &["label", "deploy", "web", "tier=front"],
                None,
                "labeled",
            );
            k.expect(
                f,
                "label selector",
                &["get", "deploy", "-l", "tier=front", "-o", "name"],
                None,
                "deployment.apps/web",
            );
            k.expect(
                f,
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
                f,
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
                f,
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
                f,
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
                f,
                "explain",
                &["explain", "deployment.spec.replicas"],
                None,
                "replicas",
            );
            k.expect(
                f,
                "get all",
                &["get", "all", "-o", "name"],
                None,
                "deployment.apps/web",
            );
            k.expect(f, "delete", &["delete", "deploy", "web"], None, "deleted");
            k.refuse(f, "deleted", &["get", "deploy", "web"], "NotFound");
            k.expect(
                f,
                "delete by label",
                &["delete", "configmap", "-l", "nothing!=x"],
                None,
                "deleted",
            );
        },
    );
}
