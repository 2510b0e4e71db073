//! Deletion as every installed kubectl drives it, against `rudder server`
//! with its controllers: `kubectl delete --cascade=foreground|background|
//! orphan` of an owner with dependents (the workload controllers are not
//! here yet, so the test makes the dependents itself), and `kubectl delete
//! namespace`, which waits until the namespace and all in it are gone.

mod common;

use common::{Kubectl, each_version};

/// A Deployment and a ConfigMap it owns (blocking its deletion).
fn owner_and_dependent(k: &Kubectl<'_>, failures: &mut Vec<String>, owner: &str) {
    let (ok, out) = k.run(
        &[
            "create",
            "deployment",
            owner,
            "--image=registry.invalid/app",
        ],
        None,
    );
    if !ok {
        failures.push(format!("create deployment {owner}: {out}"));
        return;
    }
    let (_, uid) = k.run(
        &["get", "deployment", owner, "-o", "jsonpath={.metadata.uid}"],
        None,
    );
    let dependent = format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {owner}-dep\n  ownerReferences:\n  - {{apiVersion: apps/v1, kind: Deployment, name: {owner}, uid: {uid}, blockOwnerDeletion: true}}\n"
    );
    k.expect(
        failures,
        "create a dependent",
        &["apply", "-f", "-"],
        Some(&dependent),
        "created",
    );
}

fn gone(k: &Kubectl<'_>, what: &str) -> bool {
    let (ok, out) = k.run(&["wait", "--for=delete", what, "--timeout=30s"], None);
    ok || out.contains("NotFound") || out.contains("not found")
}

#[test]
fn cascading_deletes_and_namespace_deletion() {
    each_version(
        |tag| format!("gc-{tag}"),
        |k, tag, failures| {
            let ns = format!("gc-{tag}");
            k.expect(
                failures,
                "create the namespace",
                &["create", "namespace", &ns],
                None,
                "created",
            );

            owner_and_dependent(k, failures, "fg");
            // Foreground: kubectl waits for the owner, which waits for its
            // dependent.
            k.expect(
                failures,
                "delete --cascade=foreground",
                &["delete", "deployment", "fg", "--cascade=foreground"],
                None,
                "deleted",
            );
            let (_, left) = k.run(&["get", "configmap", "fg-dep", "--ignore-not-found"], None);
            if left.contains("fg-dep") {
                failures.push(format!(
                    "foreground: the dependent outlived its owner: {left}"
                ));
            }

            owner_and_dependent(k, failures, "bg");
            k.expect(
                failures,
                "delete --cascade=background",
                &["delete", "deployment", "bg", "--cascade=background"],
                None,
                "deleted",
            );
            if !gone(k, "configmap/bg-dep") {
                failures.push("background: the dependent was not collected".into());
            }

            owner_and_dependent(k, failures, "or");
            k.expect(
                failures,
                "delete --cascade=orphan",
                &["delete", "deployment", "or", "--cascade=orphan"],
                None,
                "deleted",
            );
            if !gone(k, "deployment/or") {
                failures.push("orphan: the owner stayed".into());
            }
            let (ok, refs) = k.run(
                &[
                    "get",
                    "configmap",
                    "or-dep",
                    "-o",
                    "jsonpath={.metadata.ownerReferences}",
                ],
                None,
            );
            if !ok || !refs.trim().is_empty() {
                failures.push(format!(
                    "orphan: the dependent should stay, unowned: ({ok}) {refs}"
                ));
            }

            // A namespace with content: kubectl waits until it is gone.
            k.expect(
                failures,
                "a secret in the namespace",
                &["create", "secret", "generic", "s", "--from-literal=a=b"],
                None,
                "created",
            );
            let (ok, out) = k.run(&["delete", "namespace", &ns, "--timeout=60s"], None);
            if !ok || !out.contains("deleted") {
                failures.push(format!("delete namespace: ({ok}) {out}"));
            }
            let (ok, out) = k.run(&["get", "namespace", &ns], None);
            if ok || !out.contains("NotFound") {
                failures.push(format!("the namespace is still there: ({ok}) {out}"));
            }
        },
    );
}
