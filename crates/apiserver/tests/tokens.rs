//! Bearer tokens over HTTPS with kube-rs: TokenRequest (defaults,
//! validation errors, bound objects), a ServiceAccount token
//! authenticating as its account (and given nothing but discovery), a
//! pod-bound token refused once its pod is gone, bootstrap tokens, the
//! OIDC issuer documents and `/cacerts`.

mod support;

use std::path::Path;

use base64::Engine;
use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::core::v1::{Pod, Secret, ServiceAccount};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use serde_json::{Value, json};
use support::{Backend, start};

/// A client presenting `token` and no client certificate.
async fn with_token(kubeconfig: &Path, token: &str) -> kube::Client {
    let admin = std::fs::read_to_string(kubeconfig).expect("kubeconfig");
    let field = |name: &str| {
        admin
            .lines()
            .find_map(|l| l.trim().strip_prefix(name))
            .expect("field")
            .trim()
            .to_string()
    };
    let yaml = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {}\n    certificate-authority-data: {}\nusers:\n- name: u\n  user:\n    token: {token}\ncontexts:\n- name: c\n  context:\n    cluster: c\n    user: u\ncurrent-context: c\n",
        field("server:"),
        field("certificate-authority-data:")
    );
    let kubeconfig = kube::config::Kubeconfig::from_yaml(&yaml).expect("kubeconfig");
    let mut config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .expect("config");
    config.default_retry = false;
    kube::Client::try_from(config).expect("client")
}

/// The status code and body of a raw GET.
async fn get(client: &kube::Client, path: &str) -> (u16, Value) {
    let request = http::Request::get(path).body(Vec::new()).expect("request");
    match client.request_text(request).await {
        Ok(text) => (
            200,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        ),
        Err(kube::Error::Api(status)) => (
            status.code,
            serde_json::to_value(&status).expect("status json"),
        ),
        Err(other) => panic!("GET {path}: {other}"),
    }
}

/// Creates the ServiceAccount `name`.
async fn create_account(accounts: &Api<ServiceAccount>, name: &str) -> ServiceAccount {
    let account = json!({"metadata": {"name": name}});
    accounts
        .create(
            &PostParams::default(),
            &serde_json::from_value(account).expect("sa"),
        )
        .await
        .expect("create the ServiceAccount")
}

/// Creates a pod `name` running as `account`.
async fn create_pod(pods: &Api<Pod>, name: &str, account: &str) -> Pod {
    let pod = json!({"metadata": {"name": name},
        "spec": {"serviceAccountName": account, "containers": [{"name": "c", "image": "busybox"}]}});
    pods.create(
        &PostParams::default(),
        &serde_json::from_value(pod).expect("pod"),
    )
    .await
    .expect("create the pod")
}

fn request(spec: Value) -> TokenRequest {
    serde_json::from_value(
        json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec}),
    )
    .expect("token request")
}

fn api_error(error: kube::Error) -> (u16, String, String) {
    match error {
        kube::Error::Api(status) => (status.code, status.reason, status.message),
        other => panic!("expected an API error, got {other}"),
    }
}

fn claims(token: &str) -> Value {
    let payload = token.split('.').nth(1).expect("a JWT");
    serde_json::from_slice(
        &base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(payload)
            .expect("base64url"),
    )
    .expect("claims")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn service_account_tokens_are_issued_and_authenticate() {
    let server = start(Backend::Embedded).await;
    let admin = server.client.clone();
    let accounts: Api<ServiceAccount> = Api::namespaced(admin.clone(), "default");
    let sa = create_account(&accounts, "robot").await;
    let sa_uid = sa.metadata.uid.clone().expect("uid");

    // Defaults: the issuer's audience, an hour.
    let issued = accounts
        .create_token_request("robot", &PostParams::default(), &request(json!({})))
        .await
        .expect("a token");
    let spec = &issued.spec;
    assert_eq!(
        spec.audiences,
        vec!["https://kubernetes.default.svc.cluster.local".to_string()]
    );
    assert_eq!(spec.expiration_seconds, Some(3600));
    let status = issued.status.expect("status");
    let c = claims(&status.token);
    assert_eq!(c["iss"], "https://kubernetes.default.svc.cluster.local");
    assert_eq!(c["sub"], "system:serviceaccount:default:robot");
    assert_eq!(c["kubernetes.io"]["serviceaccount"]["uid"], json!(sa_uid));
    assert_eq!(
        c["exp"].as_i64().expect("exp") - c["iat"].as_i64().expect("iat"),
        3600
    );
    assert_eq!(issued.metadata.name.as_deref(), Some("robot"));

    // The token authenticates as the account, which may read discovery
    // and nothing else.
    let robot = with_token(&server.kubeconfig, &status.token).await;
    assert_eq!(get(&robot, "/api").await.0, 200);
    assert_eq!(get(&robot, "/openid/v1/jwks").await.0, 200);
    let config = get(&robot, "/.well-known/openid-configuration").await.1;
    assert_eq!(
        config["issuer"],
        "https://kubernetes.default.svc.cluster.local"
    );
    let pods: Api<Pod> = Api::namespaced(robot.clone(), "default");
    let (code, reason, message) = api_error(
        pods.list(&ListParams::default())
            .await
            .expect_err("forbidden"),
    );
    assert_eq!((code, reason.as_str()), (403, "Forbidden"));
    assert_eq!(
        message,
        "pods is forbidden: User \"system:serviceaccount:default:robot\" cannot list resource \"pods\" in API group \"\" in the namespace \"default\""
    );

    // A token bound to a pod works while the pod is there.
    let admin_pods: Api<Pod> = Api::namespaced(admin.clone(), "default");
    let pod = create_pod(&admin_pods, "web", "robot").await;
    let pod_uid = pod.metadata.uid.clone().expect("uid");
    let bound = accounts
        .create_token_request(
            "robot",
            &PostParams::default(),
            &request(json!({"boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": "web"}, "expirationSeconds": 3607})),
        )
        .await
        .expect("a bound token");
    let bound_token = bound.status.expect("status").token;
    let c = claims(&bound_token);
    assert_eq!(
        c["kubernetes.io"]["pod"],
        json!({"name": "web", "uid": pod_uid})
    );
    // 3607 s with the server's audience: a year, warning after 3607 s.
    let lifetime = c["exp"].as_i64().expect("exp") - c["iat"].as_i64().expect("iat");
    assert_eq!(lifetime, 365 * 24 * 3600);
    assert_eq!(
        c["kubernetes.io"]["warnafter"].as_i64().expect("warnafter")
            - c["iat"].as_i64().expect("iat"),
        3607
    );
    let bound_client = with_token(&server.kubeconfig, &bound_token).await;
    assert_eq!(get(&bound_client, "/apis").await.0, 200);
    admin_pods
        .delete(
            "web",
            &DeleteParams {
                grace_period_seconds: Some(0),
                ..Default::default()
            },
        )
        .await
        .expect("delete the pod");
    let (code, body) = get(&bound_client, "/apis").await;
    assert_eq!(code, 401, "a token of a deleted pod: {body}");
    assert_eq!(body["reason"], "Unauthorized");
    // A pod of the same name is another pod.
    create_pod(&admin_pods, "web", "robot").await;
    assert_eq!(get(&bound_client, "/apis").await.0, 401);

    // A garbage or foreign token is refused, not taken as anonymous.
    let garbage = with_token(&server.kubeconfig, "not-a-token").await;
    assert_eq!(get(&garbage, "/version").await.0, 401);
    // The account deleted: its tokens die with it.
    accounts
        .delete("robot", &DeleteParams::default())
        .await
        .expect("delete the account");
    assert_eq!(get(&robot, "/api").await.0, 401);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn token_requests_are_validated_as_upstream() {
    let server = start(Backend::Embedded).await;
    let admin = server.client.clone();
    let accounts: Api<ServiceAccount> = Api::namespaced(admin.clone(), "default");
    for name in ["robot", "other"] {
        create_account(&accounts, name).await;
    }
    let ask = |spec: Value| {
        let accounts = accounts.clone();
        async move {
            accounts
                .create_token_request("robot", &PostParams::default(), &request(spec))
                .await
        }
    };
    let (code, reason, message) = api_error(
        ask(json!({"expirationSeconds": 60}))
            .await
            .expect_err("short"),
    );
    assert_eq!((code, reason.as_str()), (422, "Invalid"));
    assert_eq!(
        message,
        "TokenRequest.authentication.k8s.io \"\" is invalid: spec.expirationSeconds: Invalid value: 60: may not specify a duration less than 10 minutes"
    );
    let (code, _, message) = api_error(
        ask(json!({"expirationSeconds": 1_i64 << 33}))
            .await
            .expect_err("long"),
    );
    assert_eq!(code, 422);
    assert!(
        message.ends_with("may not specify a duration larger than 2^32 seconds"),
        "{message}"
    );

    let missing = accounts
        .create_token_request("nobody", &PostParams::default(), &request(json!({})))
        .await
        .expect_err("no such account");
    assert_eq!(
        api_error(missing),
        (
            404,
            "NotFound".into(),
            "serviceaccounts \"nobody\" not found".into()
        )
    );
    let mut named = request(json!({}));
    named.metadata.name = Some("other".into());
    let (code, _, message) = api_error(
        accounts
            .create_token_request("robot", &PostParams::default(), &named)
            .await
            .expect_err("name mismatch"),
    );
    assert_eq!(code, 422);
    assert_eq!(
        message,
        "TokenRequest.authentication.k8s.io \"robot\" is invalid: metadata.name: Invalid value: \"other\": must match the service account name if specified"
    );

    let pods: Api<Pod> = Api::namespaced(admin.clone(), "default");
    create_pod(&pods, "theirs", "other").await;
    let (code, reason, message) = api_error(
        ask(json!({"boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": "theirs"}}))
            .await
            .expect_err("another account's pod"),
    );
    assert_eq!((code, reason.as_str()), (400, "BadRequest"));
    assert_eq!(
        message,
        "cannot bind token for serviceaccount \"robot\" to pod running with serviceaccount \"other\""
    );
    let (code, _, message) = api_error(
        ask(json!({"boundObjectRef": {"apiVersion": "v1", "kind": "ConfigMap", "name": "x"}}))
            .await
            .expect_err("a ConfigMap"),
    );
    assert_eq!(
        (code, message.as_str()),
        (
            400,
            "cannot bind token to object of type /v1, Kind=ConfigMap"
        )
    );
    let (code, _, _) = api_error(
        ask(json!({"boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": "absent"}}))
            .await
            .expect_err("no such pod"),
    );
    assert_eq!(code, 404);

    let secrets: Api<Secret> = Api::namespaced(admin.clone(), "default");
    let secret = secrets
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "s"}})).expect("secret"),
        )
        .await
        .expect("create the secret");
    let (code, reason, message) = api_error(
        ask(json!({"boundObjectRef": {"apiVersion": "v1", "kind": "Secret", "name": "s", "uid": "not-the-uid"}}))
            .await
            .expect_err("another uid"),
    );
    assert_eq!((code, reason.as_str()), (409, "Conflict"));
    assert!(
        message.starts_with("Operation cannot be fulfilled on Secret \"s\": the UID in the bound object reference (not-the-uid) does not match"),
        "{message}"
    );
    let bound = ask(
        json!({"boundObjectRef": {"apiVersion": "v1", "kind": "Secret", "name": "s",
        "uid": secret.metadata.uid.clone().expect("uid")}, "audiences": ["vault"]}),
    )
    .await
    .expect("a secret-bound token");
    let token = bound.status.expect("status").token;
    assert_eq!(claims(&token)["aud"], json!(["vault"]));
    // Not for this server's audience: refused here.
    let vault = with_token(&server.kubeconfig, &token).await;
    assert_eq!(get(&vault, "/api").await.0, 401);

    // Discovery lists the subresource as upstream does.
    let (_, core) = get(&admin, "/api/v1").await;
    let token_resource = core["resources"]
        .as_array()
        .expect("resources")
        .iter()
        .find(|r| r["name"] == "serviceaccounts/token")
        .cloned()
        .expect("serviceaccounts/token in discovery");
    assert_eq!(token_resource["verbs"], json!(["create"]));
    assert_eq!(token_resource["group"], "authentication.k8s.io");
    assert_eq!(token_resource["kind"], "TokenRequest");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bootstrap_tokens_authenticate_bootstrappers() {
    let server = start(Backend::Embedded).await;
    let secrets: Api<Secret> = Api::namespaced(server.client.clone(), "kube-system");
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    let secret = |id: &str, secret: &str, expiration: Option<&str>| {
        let mut data = json!({"token-id": b64(id), "token-secret": b64(secret),
            "usage-bootstrap-authentication": b64("true"),
            "auth-extra-groups": b64("system:bootstrappers:rudder:default-node-token")});
        if let Some(at) = expiration {
            data["expiration"] = json!(b64(at));
        }
        serde_json::from_value::<Secret>(
            json!({"metadata": {"name": format!("bootstrap-token-{id}")},
            "type": "bootstrap.kubernetes.io/token", "data": data}),
        )
        .expect("secret")
    };
    secrets
        .create(
            &PostParams::default(),
            &secret("abcdef", "0123456789abcdef", None),
        )
        .await
        .expect("create the token");
    secrets
        .create(
            &PostParams::default(),
            &secret("old123", "0123456789abcdef", Some("2001-01-01T00:00:00Z")),
        )
        .await
        .expect("create the expired token");
    let bootstrapper = with_token(&server.kubeconfig, "abcdef.0123456789abcdef").await;
    let (code, _) = get(
        &bootstrapper,
        "/apis/certificates.k8s.io/v1/certificatesigningrequests",
    )
    .await;
    assert_eq!(code, 200, "bootstrappers may list CSRs");
    let (code, body) = get(&bootstrapper, "/api/v1/namespaces/default/pods").await;
    assert_eq!(code, 403);
    assert_eq!(
        body["message"],
        "pods is forbidden: User \"system:bootstrap:abcdef\" cannot list resource \"pods\" in API group \"\" in the namespace \"default\""
    );
    let wrong = with_token(&server.kubeconfig, "abcdef.0123456789abcdee").await;
    assert_eq!(get(&wrong, "/api").await.0, 401);
    let expired = with_token(&server.kubeconfig, "old123.0123456789abcdef").await;
    assert_eq!(get(&expired, "/api").await.0, 401);
    let unknown = with_token(&server.kubeconfig, "zzzzzz.0123456789abcdef").await;
    assert_eq!(get(&unknown, "/api").await.0, 401);

    // The cluster CA for joining agents, to anyone.
    let anonymous = {
        let admin = std::fs::read_to_string(&server.kubeconfig).expect("kubeconfig");
        let server_url = admin
            .lines()
            .find_map(|l| l.trim().strip_prefix("server:"))
            .expect("server")
            .trim()
            .to_string();
        let yaml = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {server_url}\n    insecure-skip-tls-verify: true\nusers:\n- name: u\n  user: {{}}\ncontexts:\n- name: c\n  context:\n    cluster: c\n    user: u\ncurrent-context: c\n"
        );
        let kubeconfig = kube::config::Kubeconfig::from_yaml(&yaml).expect("kubeconfig");
        let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
            .await
            .expect("config");
        kube::Client::try_from(config).expect("client")
    };
    let (code, pem) = get(&anonymous, "/cacerts").await;
    assert_eq!(code, 200);
    let ca = std::fs::read_to_string(server.dir.path().join("tls/ca.crt")).expect("ca");
    assert_eq!(pem, Value::String(ca));
    assert_eq!(get(&anonymous, "/api").await.0, 403);
}

/// POSTs `body` to `path` as `client`: the status code and the answer.
async fn post(client: &kube::Client, path: &str, body: Value) -> (u16, Value) {
    let request = http::Request::post(path)
        .header("content-type", "application/json")
        .body(serde_json::to_vec(&body).expect("json"))
        .expect("request");
    match client.request_text(request).await {
        Ok(text) => (201, serde_json::from_str(&text).expect("json")),
        Err(kube::Error::Api(status)) => (
            status.code,
            serde_json::to_value(&status).expect("status json"),
        ),
        Err(other) => panic!("POST {path}: {other}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reviews_say_who_a_token_is_and_node_bound_tokens_die_with_their_node() {
    let server = start(Backend::Embedded).await;
    let admin = server.client.clone();
    let accounts: Api<ServiceAccount> = Api::namespaced(admin.clone(), "default");
    let sa = create_account(&accounts, "robot").await;
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(admin.clone());
    let node = nodes
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "n1"}})).expect("node"),
        )
        .await
        .expect("create the node");
    let node_uid = node.metadata.uid.clone().expect("uid");

    // A pod's token names the pod's node; the user carries both.
    let pods: Api<Pod> = Api::namespaced(admin.clone(), "default");
    let pod = json!({"metadata": {"name": "web"}, "spec": {"serviceAccountName": "robot",
        "nodeName": "n1", "containers": [{"name": "c", "image": "busybox"}]}});
    let pod = pods
        .create(
            &PostParams::default(),
            &serde_json::from_value(pod).expect("pod"),
        )
        .await
        .expect("create the pod");
    let pod_uid = pod.metadata.uid.clone().expect("uid");
    let issued = accounts
        .create_token_request(
            "robot",
            &PostParams::default(),
            &request(json!({"boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": "web"}})),
        )
        .await
        .expect("a pod token");
    let token = issued.status.expect("status").token;
    assert_eq!(
        claims(&token)["kubernetes.io"]["node"],
        json!({"name": "n1", "uid": node_uid})
    );
    let robot = with_token(&server.kubeconfig, &token).await;
    let (code, me) = post(
        &robot,
        "/apis/authentication.k8s.io/v1/selfsubjectreviews",
        json!({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}),
    )
    .await;
    assert_eq!(code, 201, "{me}");
    let info = &me["status"]["userInfo"];
    assert_eq!(info["username"], "system:serviceaccount:default:robot");
    assert_eq!(info["uid"], json!(sa.metadata.uid));
    assert_eq!(
        info["groups"],
        json!([
            "system:serviceaccounts",
            "system:serviceaccounts:default",
            "system:authenticated"
        ])
    );
    assert_eq!(
        info["extra"]["authentication.kubernetes.io/pod-name"],
        json!(["web"])
    );
    assert_eq!(
        info["extra"]["authentication.kubernetes.io/pod-uid"],
        json!([pod_uid])
    );
    assert_eq!(
        info["extra"]["authentication.kubernetes.io/node-name"],
        json!(["n1"])
    );
    assert!(
        info["extra"]["authentication.kubernetes.io/credential-id"][0]
            .as_str()
            .is_some_and(|id| id.starts_with("JTI=")),
        "{info}"
    );

    // TokenReview: the admin may ask, the account may not.
    let review = |token: &str, audiences: Value| {
        json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
               "spec": {"token": token, "audiences": audiences}})
    };
    let path = "/apis/authentication.k8s.io/v1/tokenreviews";
    let (code, answer) = post(&admin, path, review(&token, json!([]))).await;
    assert_eq!(code, 201, "{answer}");
    assert_eq!(answer["status"]["authenticated"], true);
    assert_eq!(
        answer["status"]["user"]["username"],
        "system:serviceaccount:default:robot"
    );
    assert_eq!(
        answer["status"]["audiences"],
        json!(["https://kubernetes.default.svc.cluster.local"])
    );
    let (_, answer) = post(&admin, path, review(&token, json!(["vault"]))).await;
    assert_eq!(answer["status"]["authenticated"], json!(null), "{answer}");
    assert!(
        answer["status"]["error"]
            .as_str()
            .is_some_and(|e| e.contains("is invalid for the target audiences [\"vault\"]")),
        "{answer}"
    );
    let (_, answer) = post(&admin, path, review("garbage", json!([]))).await;
    assert_eq!(answer["status"]["error"], "invalid bearer token");
    let (code, answer) = post(
        &admin,
        path,
        json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {}}),
    )
    .await;
    assert_eq!(code, 400, "{answer}");
    let (code, _) = post(&robot, path, review(&token, json!([]))).await;
    assert_eq!(code, 403, "an account may not review tokens");

    // A token bound to a node lives as long as the node.
    let bound = accounts
        .create_token_request(
            "robot",
            &PostParams::default(),
            &request(json!({"boundObjectRef": {"apiVersion": "v1", "kind": "Node", "name": "n1", "uid": node_uid}})),
        )
        .await
        .expect("a node token");
    let node_token = bound.status.expect("status").token;
    let c = claims(&node_token);
    assert_eq!(c["kubernetes.io"]["node"]["name"], "n1");
    assert_eq!(c["kubernetes.io"].get("pod"), None);
    let on_node = with_token(&server.kubeconfig, &node_token).await;
    assert_eq!(get(&on_node, "/api").await.0, 200);
    nodes
        .delete("n1", &DeleteParams::default())
        .await
        .expect("delete the node");
    assert_eq!(get(&on_node, "/api").await.0, 401);
}
