//! ServiceAccount tokens as every installed kubectl asks for and uses
//! them against `rudder server`: `kubectl create token` (plain, bound to a
//! pod, too short), the token in a kubeconfig of its own authenticating
//! as the account (which may read discovery and nothing else), and a
//! bound token refused once its pod is deleted.

mod common;

use common::{Kubectl, each_version};

/// A kubeconfig like `k`'s whose user is `token`.
fn kubeconfig_for(k: &Kubectl<'_>, token: &str, dir: &std::path::Path) -> std::path::PathBuf {
    let out = dir.join(format!("token-{}.yaml", rand::random::<u32>()));
    common::token_kubeconfig(&k.kubeconfig, token, &out)
}

fn as_token<'a>(k: &Kubectl<'a>, kubeconfig: std::path::PathBuf) -> Kubectl<'a> {
    Kubectl {
        binary: k.binary,
        kubeconfig,
        cache: k.cache.clone(),
        namespace: k.namespace.clone(),
    }
}

#[test]
fn kubectl_create_token_gives_tokens_that_authenticate_as_the_account() {
    let dir = tempfile::tempdir().expect("dir");
    each_version(
        |tag| format!("tokens-{tag}"),
        |k, tag, failures| {
            let ns = format!("tokens-{tag}");
            k.expect(
                failures,
                "namespace",
                &["create", "namespace", &ns],
                None,
                "created",
            );
            k.expect(
                failures,
                "account",
                &["create", "serviceaccount", "robot"],
                None,
                "created",
            );
            let (ok, token) = k.run(&["create", "token", "robot"], None);
            let token = token.trim().to_string();
            if !ok || token.split('.').count() != 3 {
                failures.push(format!("create token: ({ok}) {token}"));
                return;
            }
            let robot = as_token(k, kubeconfig_for(k, &token, dir.path()));
            let user = format!("system:serviceaccount:{ns}:robot");
            robot.refuse(
                failures,
                "the account may not list pods",
                &["get", "pods"],
                &format!(
                    "pods is forbidden: User \"{user}\" cannot list resource \"pods\" in API group \"\" in the namespace \"{ns}\""
                ),
            );
            robot.expect(
                failures,
                "the account reads discovery",
                &["get", "--raw", "/api"],
                None,
                "\"versions\"",
            );
            robot.expect(
                failures,
                "issuer discovery",
                &["get", "--raw", "/.well-known/openid-configuration"],
                None,
                "https://kubernetes.default.svc.cluster.local/openid/v1/jwks",
            );
            // `auth whoami` asks authentication.k8s.io/v1 from 1.28 on
            // (1.27 knows only v1beta1, which upstream 1.33 no longer
            // serves either).
            if tag != "1-27" {
                robot.expect(
                    failures,
                    "auth whoami",
                    &["auth", "whoami"],
                    None,
                    &format!("system:serviceaccount:{ns}:robot"),
                );
            }
            k.refuse(
                failures,
                "too short",
                &["create", "token", "robot", "--duration", "5m"],
                "spec.expirationSeconds: Invalid value: 300: may not specify a duration less than 10 minutes",
            );
            k.refuse(
                failures,
                "no such account",
                &["create", "token", "nobody"],
                "serviceaccounts \"nobody\" not found",
            );

            // Bound to a pod: good while the pod is there.
            let pod = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: web\nspec:\n  serviceAccountName: robot\n  containers:\n  - name: c\n    image: rudder.local/busybox:1\n";
            k.expect(
                failures,
                "pod",
                &["create", "-f", "-"],
                Some(pod),
                "created",
            );
            let (ok, bound) = k.run(
                &[
                    "create",
                    "token",
                    "robot",
                    "--bound-object-kind",
                    "Pod",
                    "--bound-object-name",
                    "web",
                ],
                None,
            );
            if !ok {
                failures.push(format!("bound token: {bound}"));
                return;
            }
            let bound = as_token(k, kubeconfig_for(k, bound.trim(), dir.path()));
            bound.expect(
                failures,
                "a bound token authenticates",
                &["get", "--raw", "/apis"],
                None,
                "\"groups\"",
            );
            k.expect(
                failures,
                "delete the pod",
                &["delete", "pod", "web", "--grace-period=0", "--force"],
                None,
                "deleted",
            );
            bound.refuse(
                failures,
                "the pod is gone",
                &["get", "--raw", "/apis"],
                "Unauthorized",
            );
            k.refuse(
                failures,
                "a pod that is not there",
                &[
                    "create",
                    "token",
                    "robot",
                    "--bound-object-kind",
                    "Pod",
                    "--bound-object-name",
                    "web",
                ],
                "pods \"web\" not found",
            );
        },
    );
}
