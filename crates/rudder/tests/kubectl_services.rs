//! Services as every installed kubectl makes and shows them, against
//! `rudder server`: `expose`, `create service clusterip|nodeport|
//! loadbalancer|externalname`, `get svc` (EXTERNAL-IP, PORT(S), wide's
//! SELECTOR), `describe svc`, endpoints appearing for ready pods, and a
//! malformed Service refused with upstream's words. (That traffic reaches
//! the pods is `services_e2e`'s, on real containers.)

mod common;

use common::each_version_with_nodes;

#[test]
fn services_are_made_and_shown_as_upstream() {
    each_version_with_nodes(
        |tag| format!("svc-{tag}"),
        |k, tag, failures| {
            let ns = format!("svc-{tag}");
            k.expect(
                failures,
                "namespace",
                &["create", "namespace", &ns],
                None,
                "created",
            );
            k.expect(
                failures,
                "deployment",
                &[
                    "create",
                    "deployment",
                    "web",
                    "--image=busybox:1",
                    "--replicas=2",
                    "--port=8080",
                ],
                None,
                "deployment.apps/web created",
            );
            k.expect(
                failures,
                "expose",
                &[
                    "expose",
                    "deployment",
                    "web",
                    "--port=80",
                    "--target-port=8080",
                ],
                None,
                "service/web exposed",
            );
            k.expect(
                failures,
                "create service clusterip",
                &["create", "service", "clusterip", "c1", "--tcp=81:8080"],
                None,
                "service/c1 created",
            );
            k.expect(
                failures,
                "create service nodeport",
                &["create", "service", "nodeport", "n1", "--tcp=82:8080"],
                None,
                "service/n1 created",
            );
            k.expect(
                failures,
                "create service loadbalancer",
                &["create", "service", "loadbalancer", "lb1", "--tcp=83:8080"],
                None,
                "service/lb1 created",
            );
            k.expect(
                failures,
                "create service externalname",
                &[
                    "create",
                    "service",
                    "externalname",
                    "ext",
                    "--external-name=db.example.org",
                ],
                None,
                "service/ext created",
            );
            let table = k.eventually(failures, "get svc", &["get", "svc"], |out| {
                out.contains("NAME") && out.contains("lb1") && out.contains("ext")
            });
            let row = |name: &str| {
                table
                    .lines()
                    .find(|l| l.split_whitespace().next() == Some(name))
                    .unwrap_or_default()
                    .to_string()
            };
            for (name, wanted) in [
                ("web", vec!["ClusterIP", "<none>", "80/TCP"]),
                ("n1", vec!["NodePort", "82:3"]),
                ("ext", vec!["ExternalName", "db.example.org"]),
            ] {
                let line = row(name);
                if !wanted.iter().all(|w| line.contains(w)) {
                    failures.push(format!("get svc {name}: wanted {wanted:?} in {line:?}"));
                }
            }
            // The stand-in nodes have no addresses a load balancer could
            // use: pending, as upstream shows a load balancer not yet given
            // one.
            let line = row("lb1");
            if !(line.contains("LoadBalancer") && line.contains("83:3")) {
                failures.push(format!("get svc lb1: {line:?}"));
            }
            k.expect(
                failures,
                "get svc -o wide",
                &["get", "svc", "web", "-o", "wide"],
                None,
                "app=web",
            );
            // Ready pods become its endpoints.
            k.eventually(
                failures,
                "endpoints of web",
                &[
                    "get",
                    "endpointslices",
                    "-l",
                    "kubernetes.io/service-name=web",
                ],
                |out| out.contains("8080") && out.matches('.').count() >= 6,
            );
            let described = k.eventually(
                failures,
                "describe svc",
                &["describe", "svc", "web"],
                |out| out.contains("Endpoints:") && out.contains(":8080"),
            );
            for wanted in [
                "Name:",
                "web",
                "Selector:",
                "app=web",
                "Type:",
                "ClusterIP",
                "IP:",
                "80/TCP",
                "TargetPort:",
                "8080/TCP",
                "Session Affinity:",
                "None",
            ] {
                if !described.contains(wanted) {
                    failures.push(format!("describe svc: wanted {wanted:?} in {described}"));
                }
            }
            let bad = format!(
                r#"{{"apiVersion": "v1", "kind": "Service", "metadata": {{"name": "bad", "namespace": "{ns}"}},
                  "spec": {{"ports": [{{"port": 70000}}]}}}}"#
            );
            k.refuse_with(
                failures,
                "a port out of range",
                &["apply", "-f", "-"],
                Some(&bad),
                &[
                    "spec.ports[0].port",
                    "must be between 1 and 65535, inclusive",
                ],
            );
            k.expect(
                failures,
                "cleanup",
                &["delete", "namespace", &ns, "--wait=false"],
                None,
                "deleted",
            );
        },
    );
}
