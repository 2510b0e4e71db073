//! ResourceQuotas and LimitRanges as every installed kubectl drives them,
//! against `rudder server` with its controllers: `create quota`, the
//! counted usage in `get` and `describe`, a create past the quota refused
//! with upstream's words, a LimitRange's defaults on a `run` pod and its
//! maximum enforced.

mod common;

use common::each_version;

const POD: &str = r#"{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "NAME"},
 "spec": {"containers": [{"name": "c", "image": "busybox:1",
  "resources": {"requests": {"cpu": "CPU", "memory": "32Mi"}, "limits": {"cpu": "CPU", "memory": "32Mi"}}}]}}"#;

fn pod(name: &str, cpu: &str) -> String {
    POD.replace("NAME", name).replace("CPU", cpu)
}

#[test]
fn quotas_and_limit_ranges() {
    each_version(
        |tag| format!("quota-{tag}"),
        |k, tag, failures| {
            let ns = format!("quota-{tag}");
            k.expect(
                failures,
                "namespace",
                &["create", "namespace", &ns],
                None,
                "created",
            );
            k.expect(
                failures,
                "create quota",
                &[
                    "create",
                    "quota",
                    "compute",
                    "--hard=pods=2,requests.cpu=1,configmaps=5",
                ],
                None,
                "resourcequota/compute created",
            );
            k.eventually(
                failures,
                "the quota is counted",
                &[
                    "get",
                    "quota",
                    "compute",
                    "-o",
                    "jsonpath={.status.used.pods}",
                ],
                |out| out.contains("0"),
            );
            k.expect(
                failures,
                "a pod within the quota",
                &["create", "-f", "-"],
                Some(&pod("small", "600m")),
                "pod/small created",
            );
            let (ok, out) = k.run(&["create", "-f", "-"], Some(&pod("big", "600m")));
            let refused = "pods \"big\" is forbidden: exceeded quota: compute, requested: requests.cpu=600m, used: requests.cpu=600m, limited: requests.cpu=1";
            if ok || !out.contains("Error from server (Forbidden)") || !out.contains(refused) {
                failures.push(format!("a pod past the quota: ({ok}) {out}"));
            }
            k.expect(
                failures,
                "get quota",
                &["get", "quota", "compute"],
                None,
                "pods: 1/2",
            );
            k.expect(
                failures,
                "describe quota",
                &["describe", "quota", "compute"],
                None,
                "requests.cpu  600m  1",
            );
            k.expect(
                failures,
                "delete the pod",
                &["delete", "pod", "small", "--grace-period=0", "--force"],
                None,
                "deleted",
            );
            k.eventually(
                failures,
                "the deleted pod is given back",
                &[
                    "get",
                    "quota",
                    "compute",
                    "-o",
                    "jsonpath={.status.used.requests\\.cpu}",
                ],
                |out| out.contains("0"),
            );

            let range = r#"{"apiVersion": "v1", "kind": "LimitRange", "metadata": {"name": "limits"},
              "spec": {"limits": [{"type": "Container", "max": {"cpu": "800m", "memory": "1Gi"},
                "default": {"cpu": "200m", "memory": "64Mi"}}]}}"#;
            k.expect(
                failures,
                "create limitrange",
                &["create", "-f", "-"],
                Some(range),
                "limitrange/limits created",
            );
            k.expect(
                failures,
                "describe limitrange",
                &["describe", "limitrange", "limits"],
                None,
                "800m",
            );
            k.expect(
                failures,
                "run a pod without resources",
                &["run", "defaulted", "--image=busybox:1", "--restart=Never"],
                None,
                "pod/defaulted created",
            );
            k.expect(
                failures,
                "the pod got the range's defaults",
                &["get", "pod", "defaulted", "-o", "jsonpath={.spec.containers[0].resources.requests.cpu}/{.spec.containers[0].resources.limits.memory}"],
                None,
                "200m/64Mi",
            );
            let (ok, out) = k.run(&["create", "-f", "-"], Some(&pod("over", "900m")));
            if ok || !out.contains("pods \"over\" is forbidden: maximum cpu usage per Container is 800m, but limit is 900m") {
                failures.push(format!("a pod over the range's max: ({ok}) {out}"));
            }
        },
    );
}
