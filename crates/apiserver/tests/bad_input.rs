//! Bad input gets a clear `Status` with upstream's code and reason, and
//! loses nothing: the router driven directly, no socket.

use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use http_body_util::BodyExt;
use rudder_api::Registry;
use rudder_apiserver::auth::User;
use rudder_apiserver::{State, router};
use serde_json::{Value, json};
use tower::ServiceExt;

fn admin() -> User {
    User {
        name: "admin".into(),
        groups: vec!["system:masters".into()],
        ..User::default()
    }
}

async fn call(state: &Arc<State>, request: Request<Body>) -> (StatusCode, Option<String>, Value) {
    let mut request = request;
    request.extensions_mut().insert(admin());
    let response = router(state.clone())
        .oneshot(request)
        .await
        .expect("response");
    let status = response.status();
    let retry = response
        .headers()
        .get(header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let bytes = response
        .into_body()
        .collect()
        .await
        .expect("body")
        .to_bytes();
    (
        status,
        retry,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

fn post(path: &str, content_type: &str, body: impl Into<Body>) -> Request<Body> {
    Request::post(path)
        .header(header::CONTENT_TYPE, content_type)
        .body(body.into())
        .expect("request")
}

async fn state(limit: usize) -> (Arc<State>, rudder_store::testing::TestStore) {
    let store = rudder_store::testing::embedded().await;
    let state = State::with_inflight_limit(
        Arc::new(Registry::builtin()),
        store.store.clone(),
        Arc::new(rudder_api::time::SystemClock),
        limit,
    );
    state
        .storage()
        .bootstrap_namespaces()
        .await
        .expect("namespaces");
    (state, store)
}

fn assert_status(got: &(StatusCode, Option<String>, Value), code: u16, reason: &str) {
    assert_eq!(got.0.as_u16(), code, "{:?}", got.2);
    assert_eq!(got.2["kind"], "Status", "{:?}", got.2);
    assert_eq!(got.2["code"], code);
    assert_eq!(got.2["reason"], reason, "{:?}", got.2);
}

#[tokio::test]
async fn malformed_requests_are_statuses_and_store_nothing() {
    let (state, _store) = state(100).await;
    let cms = "/api/v1/namespaces/default/configmaps";
    assert_status(
        &call(&state, post(cms, "application/json", "{not json")).await,
        400,
        "BadRequest",
    );
    assert_status(
        &call(&state, post(cms, "application/json", "[1,2]")).await,
        400,
        "BadRequest",
    );
    assert_status(
        &call(&state, post(cms, "text/plain", "hello")).await,
        415,
        "UnsupportedMediaType",
    );
    assert_status(
        &call(&state, post(cms, "application/yaml", "metadata: {name: [")).await,
        400,
        "BadRequest",
    );

    assert_status(
        &call(
            &state,
            post(cms, "application/vnd.kubernetes.protobuf", "k8s\0\x0a\x7f"),
        )
        .await,
        400,
        "BadRequest",
    );
    let big = format!(
        r#"{{"metadata":{{"name":"big"}},"data":{{"k":"{}"}}}}"#,
        "x".repeat(4 << 20)
    );
    assert_status(
        &call(&state, post(cms, "application/json", big)).await,
        413,
        "RequestEntityTooLarge",
    );
    let wrong_kind = json!({"kind": "Secret", "metadata": {"name": "a"}}).to_string();
    assert_status(
        &call(&state, post(cms, "application/json", wrong_kind)).await,
        400,
        "BadRequest",
    );
    let bad_name = json!({"metadata": {"name": "Bad_Name"}}).to_string();
    assert_status(
        &call(&state, post(cms, "application/json", bad_name)).await,
        422,
        "Invalid",
    );
    let no_ns = json!({"metadata": {"name": "a"}}).to_string();
    assert_status(
        &call(
            &state,
            post(
                "/api/v1/namespaces/missing/configmaps",
                "application/json",
                no_ns,
            ),
        )
        .await,
        404,
        "NotFound",
    );
    let bad_selector = Request::get(format!("{cms}?labelSelector=a%20b%20c"))
        .body(Body::empty())
        .expect("request");
    assert_status(&call(&state, bad_selector).await, 400, "BadRequest");
    let bad_field = Request::get(format!("{cms}?fieldSelector=spec.nodeName%3Dx"))
        .body(Body::empty())
        .expect("request");
    assert_status(&call(&state, bad_field).await, 400, "BadRequest");
    let bad_continue = Request::get(format!("{cms}?limit=1&continue=garbage"))
        .body(Body::empty())
        .expect("request");
    assert_status(&call(&state, bad_continue).await, 400, "BadRequest");
    let unknown = Request::get("/apis/nothing.example/v1/things")
        .body(Body::empty())
        .expect("request");
    assert_status(&call(&state, unknown).await, 404, "NotFound");
    let not_allowed = Request::put(cms).body(Body::from("{}")).expect("request");
    assert_status(&call(&state, not_allowed).await, 405, "MethodNotAllowed");
    let protobuf_only = Request::get(cms)
        .header(header::ACCEPT, "application/vnd.kubernetes.protobuf")
        .body(Body::empty())
        .expect("request");
    assert_status(&call(&state, protobuf_only).await, 406, "NotAcceptable");
    // Nothing of the above was stored.
    let list = call(
        &state,
        Request::get(cms).body(Body::empty()).expect("request"),
    )
    .await;
    assert_eq!(list.2["items"], json!([]));
}

#[tokio::test]
async fn too_many_requests_in_flight_get_429_with_retry_after() {
    let (state, _store) = state(0).await;
    let got = call(
        &state,
        Request::get("/api/v1/namespaces/default/configmaps")
            .body(Body::empty())
            .expect("request"),
    )
    .await;
    assert_status(&got, 429, "TooManyRequests");
    assert_eq!(got.1.as_deref(), Some("1"));
    assert!(
        state
            .metrics
            .render(state.inflight_now())
            .contains("apiserver_rejected_requests_total 1")
    );
}

#[tokio::test]
async fn strict_field_validation_reports_duplicate_and_unknown_fields() {
    let (state, _store) = state(100).await;
    let cms = "/api/v1/namespaces/default/configmaps";
    let body = r#"{"metadata":{"name":"a","name":"b"},"data":{"k":"1"},"bogus":1}"#;
    let strict = call(
        &state,
        post(
            &format!("{cms}?fieldValidation=Strict"),
            "application/json",
            body,
        ),
    )
    .await;
    assert_status(&strict, 400, "BadRequest");
    let message = strict.2["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("duplicate field \"metadata.name\"")
            && message.contains("unknown field \"bogus\""),
        "{message}"
    );
    // Warn (the default) stores the object, the last of the repeated keys winning.
    let warned = call(&state, post(cms, "application/json", body)).await;
    assert_eq!(warned.0, StatusCode::CREATED, "{:?}", warned.2);
    assert_eq!(warned.2["metadata"]["name"], "b");
}

#[tokio::test]
async fn a_yaml_body_is_an_object_like_json() {
    let (state, _store) = state(100).await;
    let (code, _, created) = call(
        &state,
        post(
            "/api/v1/namespaces/default/configmaps",
            "application/yaml",
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: from-yaml}\ndata: {a: \"1\"}\n",
        ),
    )
    .await;
    assert_eq!(code, StatusCode::CREATED, "{created}");
    assert_eq!(created["data"]["a"], "1");
}
