use serde_json::{Value, json};

use super::*;
use crate::Registry;
use crate::time::parse_rfc3339;

fn now() -> i64 {
    parse_rfc3339("2026-11-30T09:05:00Z").expect("time")
}

/// The (column name, cell) pairs of one object's row.
fn row(group: &str, version: &str, resource: &str, object: Value) -> Vec<(&'static str, Value)> {
    let registry = Registry::builtin();
    let def = registry.get(group, version, resource).expect("def");
    let names: Vec<&'static str> = columns(def).iter().map(|c| c.name).collect();
    names.into_iter().zip(cells(def, &object, now())).collect()
}

fn cell(row: &[(&str, Value)], column: &str) -> Value {
    row.iter()
        .find(|(c, _)| *c == column)
        .unwrap_or_else(|| panic!("no column {column} in {row:?}"))
        .1
        .clone()
}

#[test]
fn every_kind_has_a_cell_per_column_and_a_name() {
    let registry = Registry::builtin();
    let bare = json!({"metadata": {"name": "x", "creationTimestamp": "2026-11-30T09:00:00Z"}});
    for def in registry.all() {
        let columns = columns(def);
        assert_eq!(
            columns.len(),
            cells(def, &bare, now()).len(),
            "{}",
            def.gvr()
        );
        assert_eq!(
            columns.len(),
            cells(def, &Value::Null, now()).len(),
            "{}",
            def.gvr()
        );
        assert!(columns.iter().any(|c| c.format == "name"), "{}", def.gvr());
    }
}

#[test]
fn kinds_without_a_printer_get_the_default_table() {
    for resource in ["roles", "clusterroles"] {
        let r = row(
            "rbac.authorization.k8s.io",
            "v1",
            resource,
            json!({"metadata": {"name": "reader", "creationTimestamp": "2026-11-30T09:00:00Z"}}),
        );
        assert_eq!(
            r,
            vec![
                ("Name", json!("reader")),
                ("Created At", json!("2026-11-30T09:00:00Z"))
            ]
        );
    }
}

#[test]
fn deployment_rows_read_as_kubectl_prints_them() {
    let r = row(
        "apps",
        "v1",
        "deployments",
        json!({
            "metadata": {"name": "web", "creationTimestamp": "2026-11-30T09:00:00Z"},
            "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web"}},
                     "template": {"spec": {"containers": [{"name": "main", "image": "r/web:2"}]}}},
            "status": {"readyReplicas": 2, "updatedReplicas": 3, "availableReplicas": 2}
        }),
    );
    let names: Vec<&str> = r.iter().map(|(c, _)| *c).collect();
    assert_eq!(
        names,
        [
            "Name",
            "Ready",
            "Up-to-date",
            "Available",
            "Age",
            "Containers",
            "Images",
            "Selector"
        ]
    );
    let values: Vec<Value> = r.into_iter().map(|(_, v)| v).collect();
    assert_eq!(
        values,
        [
            json!("web"),
            json!("2/3"),
            json!(3),
            json!(2),
            json!("5m"),
            json!("main"),
            json!("r/web:2"),
            json!("app=web")
        ]
    );
}

#[test]
fn pod_status_follows_upstreams_rules() {
    let pod = |status: Value| {
        row(
            "",
            "v1",
            "pods",
            json!({
                "metadata": {"name": "p", "creationTimestamp": "2026-11-30T09:00:00Z"},
                "spec": {"initContainers": [{"name": "init"}], "containers": [{"name": "a"}, {"name": "b"}]},
                "status": status
            }),
        )
    };
    // Waiting on the second of one init container.
    let r = pod(json!({"phase": "Pending", "initContainerStatuses": [
        {"name": "init", "restartCount": 0, "state": {"running": {}}}
    ]}));
    assert_eq!(cell(&r, "Status"), json!("Init:0/1"));
    let r = pod(json!({"phase": "Pending", "initContainerStatuses": [
        {"name": "init", "state": {"terminated": {"exitCode": 2}}}
    ]}));
    assert_eq!(cell(&r, "Status"), json!("Init:ExitCode:2"));
    // Running, one container restarted 3 times, last finished 2 minutes ago.
    let r = pod(json!({"phase": "Running", "podIPs": [{"ip": "10.42.0.5"}],
    "conditions": [{"type": "Initialized", "status": "True"}, {"type": "Ready", "status": "False"}],
    "initContainerStatuses": [{"name": "init", "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}],
    "containerStatuses": [
        {"name": "a", "ready": true, "restartCount": 3, "state": {"running": {}},
         "lastState": {"terminated": {"exitCode": 1, "finishedAt": "2026-11-30T09:03:00Z"}}},
        {"name": "b", "ready": false, "state": {"waiting": {"reason": "CrashLoopBackOff"}}}
    ]}));
    assert_eq!(cell(&r, "Ready"), json!("1/2"));
    assert_eq!(cell(&r, "Status"), json!("CrashLoopBackOff"));
    assert_eq!(cell(&r, "Restarts"), json!("3 (2m ago)"));
    assert_eq!(cell(&r, "IP"), json!("10.42.0.5"));
    assert_eq!(cell(&r, "Node"), json!("<none>"));
}

#[test]
fn job_completions_without_a_count() {
    let job = |spec: Value| {
        let r = row(
            "batch",
            "v1",
            "jobs",
            json!({"metadata": {"name": "j"}, "spec": spec, "status": {"succeeded": 1}}),
        );
        cell(&r, "Completions")
    };
    assert_eq!(job(json!({"completions": 3})), json!("1/3"));
    assert_eq!(job(json!({})), json!("1/1"));
    assert_eq!(job(json!({"parallelism": 4})), json!("1/1 of 4"));
}

#[test]
fn event_rows_put_the_wide_cells_where_upstream_does() {
    let r = row(
        "",
        "v1",
        "events",
        json!({
            "metadata": {"name": "p.1"},
            "involvedObject": {"kind": "Pod", "name": "p", "fieldPath": "spec.containers{a}"},
            "reason": "Pulled", "type": "Normal", "message": " pulled \n",
            "source": {"component": "kubelet", "host": "n1"},
            "firstTimestamp": "2026-11-30T09:00:00Z", "lastTimestamp": "2026-11-30T09:04:00Z", "count": 2
        }),
    );
    let names: Vec<&str> = r.iter().map(|(c, _)| *c).collect();
    assert_eq!(
        names,
        [
            "Last Seen",
            "Type",
            "Reason",
            "Object",
            "Subobject",
            "Source",
            "Message",
            "First Seen",
            "Count",
            "Name"
        ]
    );
    let values: Vec<Value> = r.into_iter().map(|(_, v)| v).collect();
    assert_eq!(
        values,
        [
            json!("60s"),
            json!("Normal"),
            json!("Pulled"),
            json!("pod/p"),
            json!("spec.containers{a}"),
            json!("kubelet, n1"),
            json!("pulled"),
            json!("5m"),
            json!(2),
            json!("p.1")
        ]
    );
    // events.k8s.io/v1 names the same fields differently.
    let r = row(
        "events.k8s.io",
        "v1",
        "events",
        json!({"metadata": {"name": "p.2"}, "regarding": {"kind": "Node", "name": "n1"},
               "note": "rebooted", "reportingController": "kubelet", "eventTime": "2026-11-30T09:04:30.000000Z"}),
    );
    assert_eq!(cell(&r, "Object"), json!("node/n1"));
    assert_eq!(cell(&r, "Message"), json!("rebooted"));
    assert_eq!(cell(&r, "Source"), json!("kubelet"));
    assert_eq!(cell(&r, "Count"), json!(1));
}

#[test]
fn storage_rows() {
    let r = row(
        "storage.k8s.io",
        "v1",
        "storageclasses",
        json!({"metadata": {"name": "local", "annotations": {"storageclass.kubernetes.io/is-default-class": "true"}},
               "provisioner": "rudder.io/local"}),
    );
    assert_eq!(cell(&r, "Name"), json!("local (default)"));
    assert_eq!(cell(&r, "ReclaimPolicy"), json!("Delete"));
    assert_eq!(cell(&r, "VolumeBindingMode"), json!("Immediate"));
    let r = row(
        "",
        "v1",
        "persistentvolumes",
        json!({"metadata": {"name": "pv1"},
               "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteMany", "ReadWriteOnce"],
                        "persistentVolumeReclaimPolicy": "Retain", "storageClassName": "local",
                        "claimRef": {"namespace": "default", "name": "data"}},
               "status": {"phase": "Bound"}}),
    );
    assert_eq!(cell(&r, "Capacity"), json!("1Gi"));
    assert_eq!(cell(&r, "Access Modes"), json!("RWO,RWX"));
    assert_eq!(cell(&r, "Claim"), json!("default/data"));
    assert_eq!(cell(&r, "VolumeMode"), json!("<unset>"));
    let r = row(
        "",
        "v1",
        "resourcequotas",
        json!({"metadata": {"name": "q"},
               "status": {"hard": {"limits.cpu": "2", "pods": "10", "requests.cpu": "1"},
                          "used": {"limits.cpu": "500m", "pods": "3"}}}),
    );
    assert_eq!(cell(&r, "Request"), json!("pods: 3/10, requests.cpu: 0/1"));
    assert_eq!(cell(&r, "Limit"), json!("limits.cpu: 500m/2"));
}

#[test]
fn autoscaler_targets_in_both_versions() {
    let v2 = row(
        "autoscaling",
        "v2",
        "horizontalpodautoscalers",
        json!({"metadata": {"name": "h"},
        "spec": {"scaleTargetRef": {"kind": "Deployment", "name": "web"}, "maxReplicas": 5,
                 "metrics": [
                     {"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 50}}},
                     {"type": "Pods", "pods": {"metric": {"name": "qps"}, "target": {"type": "AverageValue", "averageValue": "1k"}}},
                     {"type": "Resource", "resource": {"name": "memory", "target": {"type": "AverageValue", "averageValue": "100Mi"}}}
                 ]},
        "status": {"currentReplicas": 2, "currentMetrics": [
            {"type": "Resource", "resource": {"name": "cpu", "current": {"averageUtilization": 20}}}
        ]}}),
    );
    assert_eq!(cell(&v2, "Reference"), json!("Deployment/web"));
    assert_eq!(
        cell(&v2, "Targets"),
        json!("cpu: 20%/50%, <unknown>/1k + 1 more...")
    );
    assert_eq!(cell(&v2, "MinPods"), json!("<unset>"));
    let v1 = row(
        "autoscaling",
        "v1",
        "horizontalpodautoscalers",
        json!({"metadata": {"name": "h"},
               "spec": {"scaleTargetRef": {"kind": "Deployment", "name": "web"}, "minReplicas": 1, "maxReplicas": 5,
                        "targetCPUUtilizationPercentage": 80}}),
    );
    assert_eq!(cell(&v1, "Targets"), json!("cpu: <unknown>/80%"));
    assert_eq!(cell(&v1, "MinPods"), json!("1"));
}

#[test]
fn rows_of_the_rest() {
    let r = row(
        "certificates.k8s.io",
        "v1",
        "certificatesigningrequests",
        json!({"metadata": {"name": "c"}, "spec": {"signerName": "kubernetes.io/kube-apiserver-client", "username": "alice", "expirationSeconds": 86400},
               "status": {"conditions": [{"type": "Approved", "status": "True"}], "certificate": "LS0t"}}),
    );
    assert_eq!(cell(&r, "Condition"), json!("Approved,Issued"));
    assert_eq!(cell(&r, "RequestedDuration"), json!("24h"));
    let r = row(
        "rbac.authorization.k8s.io",
        "v1",
        "clusterrolebindings",
        json!({"metadata": {"name": "b"}, "roleRef": {"kind": "ClusterRole", "name": "view"},
               "subjects": [{"kind": "User", "name": "alice"}, {"kind": "ServiceAccount", "namespace": "ns", "name": "sa"}, {"kind": "User", "name": "bob"}]}),
    );
    assert_eq!(cell(&r, "Role"), json!("ClusterRole/view"));
    assert_eq!(cell(&r, "Users"), json!("alice, bob"));
    assert_eq!(cell(&r, "ServiceAccounts"), json!("ns/sa"));
    let r = row(
        "discovery.k8s.io",
        "v1",
        "endpointslices",
        json!({"metadata": {"name": "s"}, "addressType": "IPv4", "ports": [{"port": 80}, {"name": "dns"}],
               "endpoints": [{"addresses": ["10.0.0.1"]}, {"addresses": ["10.0.0.2", "10.0.0.3", "10.0.0.4"]}]}),
    );
    assert_eq!(cell(&r, "Ports"), json!("80,dns"));
    assert_eq!(
        cell(&r, "Endpoints"),
        json!("10.0.0.1,10.0.0.2,10.0.0.3 + 1 more...")
    );
    let r = row(
        "",
        "v1",
        "endpoints",
        json!({"metadata": {"name": "e"}, "subsets": [{"addresses": [{"ip": "10.0.0.1"}, {"ip": "fd00::1"}], "ports": [{"port": 80}, {"port": 443}]}]}),
    );
    assert_eq!(
        cell(&r, "Endpoints"),
        json!("10.0.0.1:80,[fd00::1]:80,10.0.0.1:443 + 1 more...")
    );
    let r = row(
        "networking.k8s.io",
        "v1",
        "ipaddresses",
        json!({"metadata": {"name": "10.43.0.10"}, "spec": {"parentRef": {"group": "", "resource": "services", "namespace": "default", "name": "web"}}}),
    );
    assert_eq!(cell(&r, "ParentRef"), json!("services/default/web"));
    let r = row(
        "apps",
        "v1",
        "controllerrevisions",
        json!({"metadata": {"name": "ds-1", "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "ds", "controller": true}]}, "revision": 2}),
    );
    assert_eq!(cell(&r, "Controller"), json!("daemonset.apps/ds"));
    let r = row(
        "",
        "v1",
        "services",
        json!({"metadata": {"name": "lb"}, "spec": {"type": "LoadBalancer", "clusterIPs": ["10.43.0.9"], "ports": [{"port": 80, "nodePort": 30080, "protocol": "TCP"}]}}),
    );
    assert_eq!(cell(&r, "External-IP"), json!("<pending>"));
    assert_eq!(cell(&r, "Port(s)"), json!("80:30080/TCP"));
    let r = row(
        "batch",
        "v1",
        "cronjobs",
        json!({"metadata": {"name": "c"}, "spec": {"schedule": "*/5 * * * *", "suspend": false}}),
    );
    assert_eq!(cell(&r, "Suspend"), json!("False"));
    assert_eq!(cell(&r, "Last Schedule"), json!("<none>"));
}
