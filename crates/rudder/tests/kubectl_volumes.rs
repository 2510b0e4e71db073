//! PersistentVolumes and claims as every installed kubectl sees them
//! against `rudder server`: a claim applied beside a volume is bound by the
//! PersistentVolume binder, `kubectl get pv,pvc` shows both Bound (with the
//! claim, capacity and access modes), and deleting the claim leaves the
//! volume Released (reclaim policy Retain).

mod common;

use std::time::{Duration, Instant};

use common::{Kubectl, each_version};

fn manifest(tag: &str, ns: &str) -> String {
    format!(
        r#"apiVersion: v1
kind: PersistentVolume
metadata:
  name: pv-{tag}
spec:
  capacity:
    storage: 2Gi
  accessModes: [ReadWriteOnce]
  persistentVolumeReclaimPolicy: Retain
  hostPath:
    path: /tmp/rudder-kubectl/{tag}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: data
  namespace: {ns}
spec:
  accessModes: [ReadWriteOnce]
  storageClassName: ""
  resources:
    requests:
      storage: 1Gi
"#
    )
}

/// Waits (at most 30 s) until `kubectl get <what> -o jsonpath=<path>`
/// prints `wanted`; records a failure if it never does.
fn wait_for(k: &Kubectl<'_>, failures: &mut Vec<String>, what: &[&str], path: &str, wanted: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    let jsonpath = format!("jsonpath={path}");
    let mut args = vec!["get"];
    args.extend_from_slice(what);
    args.extend_from_slice(&["-o", &jsonpath]);
    loop {
        let (_, out) = k.run(&args, None);
        if out.trim() == wanted {
            return;
        }
        if Instant::now() > deadline {
            failures.push(format!(
                "{what:?} {path}: wanted {wanted:?}, last saw {out:?}"
            ));
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn claims_are_bound_to_volumes_and_released() {
    each_version(
        |tag| format!("pv-{tag}"),
        |k, tag, failures| {
            let ns = format!("pv-{tag}");
            let pv = format!("pv-{tag}");
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
                Some(&manifest(tag, &ns)),
                "created",
            );
            wait_for(k, failures, &["pvc", "data"], "{.status.phase}", "Bound");
            wait_for(k, failures, &["pv", &pv], "{.status.phase}", "Bound");
            let (ok, out) = k.run(&["get", &format!("pv/{pv}"), "pvc/data"], None);
            let claim_row = out
                .lines()
                .find(|l| l.starts_with("persistentvolumeclaim/data"));
            let volume_row = out
                .lines()
                .find(|l| l.starts_with(&format!("persistentvolume/{pv}")));
            let fine =
                ok && claim_row.is_some_and(|r| {
                    r.contains("Bound") && r.contains(&pv) && r.contains("2Gi") && r.contains("RWO")
                }) && volume_row.is_some_and(|r| {
                    r.contains("Bound") && r.contains(&format!("{ns}/data")) && r.contains("Retain")
                });
            if !fine {
                failures.push(format!("get pv,pvc: {out}"));
            }
            k.expect(
                failures,
                "delete the claim",
                &["delete", "pvc", "data"],
                None,
                "deleted",
            );
            wait_for(k, failures, &["pv", &pv], "{.status.phase}", "Released");
            let (_, out) = k.run(&["get", "pv", &pv], None);
            if !out.contains("Released") {
                failures.push(format!("get pv after the claim went: {out}"));
            }
            k.run(&["delete", "pv", &pv], None);
        },
    );
}
