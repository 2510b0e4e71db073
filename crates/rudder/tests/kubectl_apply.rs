//! `kubectl apply` in all its forms, with every installed kubectl 1.27–1.33
//! against `rudder server`: client-side apply (created / unchanged /
//! configured) of every common built-in kind, the three-way patch that
//! removes what left the file, `apply --prune`, `diff`, `edit` with a
//! scripted editor, `replace`, `rollout restart`, and server-side apply with
//! conflicts, forcing, and the move from client-side apply.

mod common;

use common::each_version;

/// One object of many kinds; `{v}` is the version tag that keeps
/// cluster-scoped names apart, `{tier}` the label a later apply changes.
const KINDS: &str = r#"
apiVersion: v1
kind: ConfigMap
metadata: {name: cm, labels: {tier: "{tier}"}}
data: {a: "1"}
---
apiVersion: v1
kind: Secret
metadata: {name: secret, labels: {tier: "{tier}"}}
stringData: {p: q}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: sa, labels: {tier: "{tier}"}}
---
apiVersion: v1
kind: Service
metadata: {name: svc, labels: {tier: "{tier}"}}
spec:
  selector: {app: web}
  ports: [{name: http, port: 80, targetPort: 8080}]
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: deploy, labels: {tier: "{tier}"}}
spec:
  selector: {matchLabels: {app: d}}
  template:
    metadata: {labels: {app: d}}
    spec: {containers: [{name: c, image: registry.local/d:1}]}
---
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: sts, labels: {tier: "{tier}"}}
spec:
  serviceName: svc
  selector: {matchLabels: {app: s}}
  template:
    metadata: {labels: {app: s}}
    spec: {containers: [{name: c, image: registry.local/s:1}]}
---
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: ds, labels: {tier: "{tier}"}}
spec:
  selector: {matchLabels: {app: ds}}
  template:
    metadata: {labels: {app: ds}}
    spec: {containers: [{name: c, image: registry.local/ds:1}]}
---
apiVersion: batch/v1
kind: Job
metadata: {name: job, labels: {tier: "{tier}"}}
spec:
  template:
    spec:
      restartPolicy: Never
      containers: [{name: c, image: registry.local/j:1}]
---
apiVersion: batch/v1
kind: CronJob
metadata: {name: cron, labels: {tier: "{tier}"}}
spec:
  schedule: "*/5 * * * *"
  jobTemplate:
    spec:
      template:
        spec:
          restartPolicy: OnFailure
          containers: [{name: c, image: registry.local/cj:1}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: role, labels: {tier: "{tier}"}}
rules: [{apiGroups: [""], resources: [pods], verbs: [get, list]}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: rb, labels: {tier: "{tier}"}}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: role}
subjects: [{kind: ServiceAccount, name: sa}]
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: pvc, labels: {tier: "{tier}"}}
spec:
  accessModes: [ReadWriteOnce]
  resources: {requests: {storage: 1Gi}}
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {name: ing, labels: {tier: "{tier}"}}
spec:
  rules:
  - host: web.local
    http:
      paths:
      - {path: /, pathType: Prefix, backend: {service: {name: svc, port: {number: 80}}}}
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: np, labels: {tier: "{tier}"}}
spec:
  podSelector: {matchLabels: {app: d}}
  policyTypes: [Ingress]
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: pdb, labels: {tier: "{tier}"}}
spec:
  minAvailable: 1
  selector: {matchLabels: {app: d}}
---
apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata: {name: hpa, labels: {tier: "{tier}"}}
spec:
  scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: deploy}
  minReplicas: 1
  maxReplicas: 3
  metrics: [{type: Resource, resource: {name: cpu, target: {type: Utilization, averageUtilization: 80}}}]
---
apiVersion: v1
kind: ResourceQuota
metadata: {name: quota, labels: {tier: "{tier}"}}
spec: {hard: {pods: "10"}}
---
apiVersion: v1
kind: LimitRange
metadata: {name: limits, labels: {tier: "{tier}"}}
spec: {limits: [{type: Container, default: {cpu: 500m}}]}
---
apiVersion: coordination.k8s.io/v1
kind: Lease
metadata: {name: lease, labels: {tier: "{tier}"}}
spec: {holderIdentity: me}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: "cr-{v}", labels: {tier: "{tier}"}}
rules: [{apiGroups: [""], resources: [nodes], verbs: [get]}]
---
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: "pc-{v}", labels: {tier: "{tier}"}}
value: 1000
---
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {name: "sc-{v}", labels: {tier: "{tier}"}}
provisioner: example.com/none
---
apiVersion: networking.k8s.io/v1
kind: IngressClass
metadata: {name: "ic-{v}", labels: {tier: "{tier}"}}
spec: {controller: example.com/ingress}
---
apiVersion: apps/v1
kind: ReplicaSet
metadata: {name: rs, labels: {tier: "{tier}"}}
spec:
  selector: {matchLabels: {app: rs}}
  template:
    metadata: {labels: {app: rs}}
    spec: {containers: [{name: c, image: registry.local/rs:1}]}
---
apiVersion: v1
kind: ReplicationController
metadata: {name: rc, labels: {tier: "{tier}"}}
spec:
  selector: {app: rc}
  template:
    metadata: {labels: {app: rc}}
    spec: {containers: [{name: c, image: registry.local/rc:1}]}
---
apiVersion: v1
kind: Pod
metadata: {name: pod, labels: {tier: "{tier}"}}
spec: {containers: [{name: c, image: registry.local/pod:1, ports: [{containerPort: 80}]}]}
---
apiVersion: v1
kind: PodTemplate
metadata: {name: pt, labels: {tier: "{tier}"}}
template:
  spec: {containers: [{name: c, image: registry.local/pt:1}]}
---
apiVersion: v1
kind: Endpoints
metadata: {name: ep, labels: {tier: "{tier}"}}
subsets: [{addresses: [{ip: 10.42.0.5}], ports: [{name: http, port: 8080}]}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: eps, labels: {tier: "{tier}"}}
addressType: IPv4
endpoints: [{addresses: [10.42.0.6]}]
ports: [{name: http, port: 8080}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: "crb-{v}", labels: {tier: "{tier}"}}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "cr-{v}"}
subjects: [{kind: ServiceAccount, name: sa, namespace: default}]
---
apiVersion: node.k8s.io/v1
kind: RuntimeClass
metadata: {name: "rt-{v}", labels: {tier: "{tier}"}}
handler: runc
---
apiVersion: v1
kind: PersistentVolume
metadata: {name: "pv-{v}", labels: {tier: "{tier}"}}
spec:
  capacity: {storage: 1Gi}
  accessModes: [ReadWriteOnce]
  hostPath: {path: /tmp/pv}
---
apiVersion: v1
kind: Namespace
metadata: {name: "extra-{v}", labels: {tier: "{tier}"}}
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata: {name: "vwc-{v}", labels: {tier: "{tier}"}}
webhooks: []
---
apiVersion: storage.k8s.io/v1
kind: CSIDriver
metadata: {name: "csi-{v}.example.com", labels: {tier: "{tier}"}}
spec: {attachRequired: false}
"#;

/// `kubectl get` arguments and the header line upstream prints for them
/// (blanks squeezed).
const TABLES: &[(&str, &str)] = &[
    (
        "pvc",
        "NAME STATUS VOLUME CAPACITY ACCESS MODES STORAGECLASS VOLUMEATTRIBUTESCLASS AGE",
    ),
    (
        "pvc -o wide",
        "NAME STATUS VOLUME CAPACITY ACCESS MODES STORAGECLASS VOLUMEATTRIBUTESCLASS AGE VOLUMEMODE",
    ),
    (
        "pv",
        "NAME CAPACITY ACCESS MODES RECLAIM POLICY STATUS CLAIM STORAGECLASS VOLUMEATTRIBUTESCLASS REASON AGE",
    ),
    ("ingress", "NAME CLASS HOSTS ADDRESS PORTS AGE"),
    ("ingressclass", "NAME CONTROLLER PARAMETERS AGE"),
    ("netpol", "NAME POD-SELECTOR AGE"),
    (
        "pdb",
        "NAME MIN AVAILABLE MAX UNAVAILABLE ALLOWED DISRUPTIONS AGE",
    ),
    ("hpa", "NAME REFERENCE TARGETS MINPODS MAXPODS REPLICAS AGE"),
    ("quota", "NAME REQUEST LIMIT AGE"),
    ("limits", "NAME CREATED AT"),
    ("role", "NAME CREATED AT"),
    (
        "rolebinding -o wide",
        "NAME ROLE AGE USERS GROUPS SERVICEACCOUNTS",
    ),
    (
        "priorityclass",
        "NAME VALUE GLOBAL-DEFAULT AGE PREEMPTIONPOLICY",
    ),
    (
        "storageclass",
        "NAME PROVISIONER RECLAIMPOLICY VOLUMEBINDINGMODE ALLOWVOLUMEEXPANSION AGE",
    ),
    ("podtemplate", "NAME CONTAINERS IMAGES POD LABELS"),
    ("endpointslice", "NAME ADDRESSTYPE PORTS ENDPOINTS AGE"),
    ("runtimeclass", "NAME HANDLER AGE"),
    ("validatingwebhookconfiguration", "NAME WEBHOOKS AGE"),
    (
        "csidriver",
        "NAME ATTACHREQUIRED PODINFOONMOUNT STORAGECAPACITY TOKENREQUESTS REQUIRESREPUBLISH MODES AGE",
    ),
    ("ipaddress", "NAME PARENTREF"),
    (
        "job -o wide",
        "NAME STATUS COMPLETIONS DURATION AGE CONTAINERS IMAGES SELECTOR",
    ),
    (
        "pod -o wide",
        "NAME READY STATUS RESTARTS AGE IP NODE NOMINATED NODE READINESS GATES",
    ),
];

fn kinds(version_tag: &str, tier: &str) -> String {
    KINDS.replace("{v}", version_tag).replace("{tier}", tier)
}

fn web(image: &str, side: bool, extra_env: bool) -> String {
    let env = if extra_env {
        "[{name: MODE, value: one}, {name: EXTRA, value: x}]"
    } else {
        "[{name: MODE, value: one}]"
    };
    let side = if side {
        "\n      - {name: side, image: registry.local/side:1}"
    } else {
        ""
    };
    format!(
        "apiVersion: apps/v1
kind: Deployment
metadata: {{name: web, labels: {{app: web}}}}
spec:
  replicas: 2
  selector: {{matchLabels: {{app: web}}}}
  template:
    metadata: {{labels: {{app: web}}}}
    spec:
      containers:
      - {{name: main, image: {image}, env: {env}}}{side}
"
    )
}

/// `kubectl get` of the web Deployment's first image.
const IMAGE_OF_WEB: [&str; 5] = [
    "get",
    "deploy",
    "web",
    "-o",
    "jsonpath={.spec.template.spec.containers[0].image}",
];

const PRUNABLE: &str = "apiVersion: v1
kind: ConfigMap
metadata: {name: p1, labels: {prune: set1}}
data: {a: b}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: p2, labels: {prune: set1}}
data: {a: b}
";

fn ssa_deployment(name: &str, replicas: u32) -> String {
    format!(
        "apiVersion: apps/v1
kind: Deployment
metadata: {{name: {name}}}
spec:
  replicas: {replicas}
  selector: {{matchLabels: {{app: {name}}}}}
  template:
    metadata: {{labels: {{app: {name}}}}}
    spec:
      containers:
      - {{name: main, image: registry.local/{name}:1}}
"
    )
}

#[test]
fn apply_diff_edit_replace_restart_and_server_side_apply() {
    let work = tempfile::tempdir().expect("work dir");
    each_version(
        |tag| format!("apply-{tag}"),
        |k, tag, f| {
            let file = |name: &str, text: &str| {
                let path = work.path().join(format!("{tag}-{name}.yaml"));
                std::fs::write(&path, text).expect("write manifest");
                path.display().to_string()
            };
            k.run(&["create", "namespace", &k.namespace], None);

            // Client-side apply of every kind: created, unchanged, configured.
            let objects = kinds(tag, "a").matches("\nkind:").count();
            let all_a = file("kinds-a", &kinds(tag, "a"));
            let all_b = file("kinds-b", &kinds(tag, "b"));
            // A PodDisruptionBudget's selector has the `replace` patch strategy,
            // so kubectl's patch for it is never empty; a Secret's `stringData`
            // becomes `data` on the server, so kubectl sends it again each time
            // (kubernetes/kubernetes#87736); a LimitRange's `limits` is an
            // atomic list the server defaults inside (`defaultRequest` from
            // `default`), so the live list never equals the applied one; an
            // EndpointSlice's `endpoints` is atomic too, and each endpoint
            // reads back with the `conditions: {}` Go always writes (a plain
            // struct): upstream says "configured" for all four on every
            // apply, and so do we.
            for (what, path, word, expected) in [
                ("apply creates every kind", &all_a, "created", objects),
                ("apply again: unchanged", &all_a, "unchanged", objects - 4),
                (
                    "apply a label change: every kind configured",
                    &all_b,
                    "configured",
                    objects,
                ),
            ] {
                let (ok, out) = k.run(&["apply", "-f", path], None);
                let count = out.lines().filter(|l| l.ends_with(word)).count();
                if !ok || count != expected {
                    f.push(format!("{what}: {count} of {objects} {word}: {out}"));
                }
                if word == "unchanged"
                    && !(out.contains("poddisruptionbudget.policy/pdb configured")
                        && out.contains("secret/secret configured")
                        && out.contains("limitrange/limits configured")
                        && out.contains("endpointslice.discovery.k8s.io/eps configured"))
                {
                    f.push(format!(
                        "{what}: the budget, the secret, the limit range and the endpoint slice are configured, as upstream: {out}"
                    ));
                }
            }
            k.expect(
                f,
                "a Secret's stringData is stored as data",
                &[
                    "get",
                    "secret",
                    "secret",
                    "-o",
                    "jsonpath={.data.p}|{.stringData}|",
                ],
                None,
                "cQ==||",
            );
            // Every kind's table, as upstream's printers head it.
            for (args, header) in TABLES {
                let mut argv = vec!["get"];
                argv.extend(args.split(' '));
                let (ok, out) = k.run(&argv, None);
                let first = out.lines().next().unwrap_or_default();
                let first = first.split_whitespace().collect::<Vec<_>>().join(" ");
                if !ok || first != *header {
                    f.push(format!(
                        "kubectl get {args}: wanted {header:?}, got ({ok}) {out}"
                    ));
                }
            }
            k.expect(
                f,
                "the change is stored",
                &["get", "cm", "cm", "-o", "jsonpath={.metadata.labels.tier}"],
                None,
                "b",
            );

            // The three-way patch: a container that left the file goes.
            let web1 = file("web1", &web("registry.local/web:1", true, false));
            let web2 = file("web2", &web("registry.local/web:2", false, true));
            k.expect(f, "apply web", &["apply", "-f", &web1], None, "created");
            k.expect(
                f,
                "apply web: container removed, env added",
                &["apply", "-f", &web2],
                None,
                "deployment.apps/web configured",
            );
            k.expect(
        f,
        "only main is left",
        &[
            "get",
            "deploy",
            "web",
            "-o",
            "jsonpath={.spec.template.spec.containers[*].name}={.spec.template.spec.containers[0].image}={.spec.template.spec.containers[0].env[*].name}",
        ],
        None,
        "main=registry.local/web:2=MODE EXTRA",
    );

            // diff: a server-side dry run, nothing stored.
            let web3 = file("web3", &web("registry.local/web:3", false, true));
            let (ok, out) = k.run(&["diff", "-f", &web3], None);
            if ok || !out.contains("+        image: registry.local/web:3") {
                f.push(format!("diff shows the change (exit 1): ({ok}) {out}"));
            }
            k.expect(
                f,
                "diff stored nothing",
                &IMAGE_OF_WEB,
                None,
                "registry.local/web:2",
            );

            // edit with a scripted editor.
            let (ok, out) = k.run_with(
                &["edit", "deploy", "web"],
                None,
                &[(
                    "EDITOR",
                    "sed -i -e s#registry.local/web:2#registry.local/web:edited#",
                )],
            );
            if !ok || !out.contains("deployment.apps/web edited") {
                f.push(format!("edit: ({ok}) {out}"));
            }
            k.expect(
                f,
                "edit stored",
                &IMAGE_OF_WEB,
                None,
                "registry.local/web:edited",
            );

            // replace with the object as read, changed. The edit's rollout
            // still writes the Deployment's status, so a replace carrying
            // the resourceVersion it read may meet a 409, as upstream's
            // would: read again and retry, as a client does.
            let mut last = String::new();
            for _ in 0..5 {
                let (_, current) = k.run(&["get", "deploy", "web", "-o", "yaml"], None);
                let replaced =
                    current.replace("registry.local/web:edited", "registry.local/web:replaced");
                let (ok, out) = k.run(&["replace", "-f", "-"], Some(&replaced));
                last = out;
                if ok || !last.contains("(Conflict)") {
                    break;
                }
            }
            if !last.contains("deployment.apps/web replaced") {
                f.push(format!(
                    "replace: wanted \"deployment.apps/web replaced\", got {last}"
                ));
            }
            k.expect(
                f,
                "rollout restart",
                &["rollout", "restart", "deploy/web"],
                None,
                "deployment.apps/web restarted",
            );
            k.expect(
                f,
                "restart stamped the template",
                &[
                    "get",
                    "deploy",
                    "web",
                    "-o",
                    "jsonpath={.spec.template.metadata.annotations}",
                ],
                None,
                "kubectl.kubernetes.io/restartedAt",
            );

            // apply --prune removes what left the labelled set.
            let both = file("prune-both", PRUNABLE);
            let one = file(
                "prune-one",
                PRUNABLE.split("---").next().unwrap_or_default(),
            );
            k.expect(
                f,
                "apply two",
                &["apply", "-f", &both],
                None,
                "configmap/p2 created",
            );
            k.expect(
                f,
                "apply --prune",
                &["apply", "-f", &one, "--prune", "-l", "prune=set1"],
                None,
                "configmap/p2 pruned",
            );
            k.refuse(f, "pruned object is gone", &["get", "cm", "p2"], "NotFound");

            // Server-side apply: conflicts, forcing, managed fields.
            let ssa2 = file("ssa2", &ssa_deployment("ssa", 2));
            k.expect(
                f,
                "server-side apply creates",
                &["apply", "--server-side", "-f", &ssa2],
                None,
                "deployment.apps/ssa serverside-applied",
            );
            k.expect(
                f,
                "another manager changes replicas",
                &[
                    "patch",
                    "deploy",
                    "ssa",
                    "--type=merge",
                    "-p",
                    r#"{"spec":{"replicas":4}}"#,
                ],
                None,
                "patched",
            );
            k.refuse(
                f,
                "applying replicas again conflicts",
                &["apply", "--server-side", "-f", &ssa2],
                "conflict",
            );
            k.expect(
                f,
                "--force-conflicts takes them",
                &["apply", "--server-side", "--force-conflicts", "-f", &ssa2],
                None,
                "serverside-applied",
            );
            let ssa7 = file("ssa7", &ssa_deployment("ssa", 7));
            k.expect(
                f,
                "server-side apply, dry run",
                &[
                    "apply",
                    "--server-side",
                    "--force-conflicts",
                    "--dry-run=server",
                    "-f",
                    &ssa7,
                ],
                None,
                "serverside-applied (server dry run)",
            );
            k.expect(
                f,
                "forced value stored",
                &["get", "deploy", "ssa", "-o", "jsonpath={.spec.replicas}"],
                None,
                "2",
            );
            k.expect(
                f,
                "managed fields name both managers",
                &[
                    "get",
                    "deploy",
                    "ssa",
                    "--show-managed-fields",
                    "-o",
                    "jsonpath={.metadata.managedFields[*].manager}",
                ],
                None,
                "kubectl",
            );

            // From client-side to server-side apply without conflicts.
            let csa = file("csa", &ssa_deployment("csa", 2));
            k.expect(
                f,
                "client-side apply",
                &["apply", "-f", &csa],
                None,
                "created",
            );
            let csa3 = file("csa3", &ssa_deployment("csa", 3));
            k.expect(
                f,
                "then server-side apply of a change",
                &["apply", "--server-side", "-f", &csa3],
                None,
                "deployment.apps/csa serverside-applied",
            );
            k.expect(
                f,
                "the change is stored",
                &["get", "deploy", "csa", "-o", "jsonpath={.spec.replicas}"],
                None,
                "3",
            );
        },
    );
}
