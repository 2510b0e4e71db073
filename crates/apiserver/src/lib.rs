//! The Kubernetes API server over the store: HTTPS with client-certificate
//! authentication, discovery, OpenAPI, and one set of REST handlers serving
//! every resource of the registry (ARCHITECTURE.md §4, docs/apiserver.md).

pub mod auth;
pub mod authn;
pub mod cache;
mod crd;
mod discovery;
pub mod health;
pub mod kubelet;
pub mod metrics;
pub mod negotiate;
mod openapi;
pub mod path;
pub mod response;
pub mod rest;
mod serve;
pub mod server;
pub mod state;
pub mod storage;
pub mod tls;

#[cfg(feature = "testing")]
pub mod testing;

use std::net::IpAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::{Request, State as AxumState};
use axum::http::StatusCode;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use rudder_api::Status;
use tokio_util::sync::CancellationToken;

use health::Endpoint;
pub use server::{Identity, Listen, Server, ServerOptions};
pub use state::State;

use crate::auth::User;
use crate::response::ApiError;

/// Where the cluster reaches a server bound to `bind` (upstream's default
/// for `--advertise-address`): the bound address, or the address this
/// machine would send from on its default route (a UDP `connect` picks it
/// without sending anything), or loopback when there is no such route.
pub fn advertise_address(bind: IpAddr) -> IpAddr {
    if !bind.is_unspecified() {
        return bind;
    }
    let routed = std::net::UdpSocket::bind("0.0.0.0:0").and_then(|socket| {
        // TEST-NET-1: any routable address does; nothing is sent.
        socket.connect("192.0.2.1:9")?;
        socket.local_addr()
    });
    match routed {
        Ok(local) if !local.ip().is_unspecified() => local.ip(),
        _ => IpAddr::V4(std::net::Ipv4Addr::LOCALHOST),
    }
}

async fn metrics(AxumState(state): AxumState<Arc<State>>) -> Response {
    let mut response = (StatusCode::OK, state.metrics.render(state.inflight_now())).into_response();
    response.headers_mut().insert(
        axum::http::header::CONTENT_TYPE,
        axum::http::HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
    );
    response
}

/// Authentication and authorization of paths that are not resources
/// (resource requests are authorized by verb in the dispatcher). A request
/// without a client certificate is authenticated by its bearer token, if
/// it has one; any other `Authorization` is refused.
async fn authorize_paths(
    AxumState(state): AxumState<Arc<State>>,
    mut request: Request,
    next: Next,
) -> Response {
    let mut user = request
        .extensions()
        .get::<User>()
        .cloned()
        .unwrap_or_else(User::anonymous);
    if user.is_anonymous()
        && request
            .headers()
            .contains_key(axum::http::header::AUTHORIZATION)
    {
        let Some(token) = authn::bearer(request.headers()) else {
            return ApiError(Status::unauthorized("Unauthorized")).into_response();
        };
        match authn::authenticate(&state, token).await {
            Ok(authenticated) => {
                user = authenticated;
                request.extensions_mut().insert(user.clone());
            }
            Err(status) => return ApiError(status).into_response(),
        }
    }
    let path = request.uri().path();
    if !path::is_resource(path)
        && let Err(status) = auth::authorize(&user, path, "get")
    {
        return ApiError(status).into_response();
    }
    next.run(request).await
}

/// A JSON document of the token issuer, 404 without one.
fn issuer_document(
    state: &State,
    content_type: &'static str,
    document: fn(&authn::serviceaccount::Issuer) -> serde_json::Value,
) -> Response {
    let Some(issuer) = state.issuer() else {
        return ApiError(Status::not_found_path("service account issuer discovery"))
            .into_response();
    };
    let body = serde_json::to_vec(&document(&issuer)).unwrap_or_default();
    let mut response = (StatusCode::OK, body).into_response();
    response.headers_mut().insert(
        axum::http::header::CONTENT_TYPE,
        axum::http::HeaderValue::from_static(content_type),
    );
    response
}

async fn openid_configuration(AxumState(state): AxumState<Arc<State>>) -> Response {
    issuer_document(&state, "application/json", authn::openid_configuration)
}

async fn jwks(AxumState(state): AxumState<Arc<State>>) -> Response {
    issuer_document(&state, "application/jwk-set+json", authn::jwks)
}

/// `/cacerts`: the cluster CA (PEM), k3s's endpoint for joining agents,
/// which check it against the hash in their join token.
async fn cacerts(AxumState(state): AxumState<Arc<State>>) -> Response {
    match state.ca_bundle.get() {
        Some(pem) => {
            let mut response = (StatusCode::OK, pem.clone()).into_response();
            response.headers_mut().insert(
                axum::http::header::CONTENT_TYPE,
                axum::http::HeaderValue::from_static("text/plain; charset=utf-8"),
            );
            response
        }
        None => ApiError(Status::not_found_path("/cacerts")).into_response(),
    }
}

/// The API server's router (no socket: tests call it directly).
pub fn router(state: Arc<State>) -> Router {
    discovery_routes(Router::new())
        .route(
            "/healthz",
            get(|s, q| health::serve(Endpoint::Healthz, s, q)),
        )
        .route("/livez", get(|s, q| health::serve(Endpoint::Livez, s, q)))
        .route("/readyz", get(|s, q| health::serve(Endpoint::Readyz, s, q)))
        .route(
            "/healthz/{*check}",
            get(|s, p| health::serve_one(Endpoint::Healthz, s, p)),
        )
        .route(
            "/livez/{*check}",
            get(|s, p| health::serve_one(Endpoint::Livez, s, p)),
        )
        .route(
            "/readyz/{*check}",
            get(|s, p| health::serve_one(Endpoint::Readyz, s, p)),
        )
        .route("/metrics", get(metrics))
        .route("/openapi/v2", get(openapi::v2))
        .route("/swagger-2.0.0.pb-v1", get(openapi::v2_legacy_protobuf))
        .route("/openapi/v3", get(openapi::v3_index))
        .route("/openapi/v3/{*path}", get(openapi::v3))
        .route(
            "/.well-known/openid-configuration",
            get(openid_configuration),
        )
        .route("/openid/v1/jwks", get(jwks))
        .route("/cacerts", get(cacerts))
        .fallback(rest::dispatch)
        .layer(middleware::from_fn_with_state(
            state.clone(),
            authorize_paths,
        ))
        .with_state(state)
}

/// The discovery documents, each served with and without a trailing slash
/// as upstream's mux serves them (kr8s asks for `/version/`); resource
/// paths are not among them.
fn discovery_routes(router: Router<Arc<State>>) -> Router<Arc<State>> {
    let mut router = router;
    for slash in ["", "/"] {
        router = router
            .route(&format!("/version{slash}"), get(discovery::version))
            .route(&format!("/api{slash}"), get(discovery::api))
            .route(&format!("/apis{slash}"), get(discovery::apis))
            .route(
                &format!("/api/{{version}}{slash}"),
                get(discovery::core_version),
            )
            .route(&format!("/apis/{{group}}{slash}"), get(discovery::group))
            .route(
                &format!("/apis/{{group}}/{{version}}{slash}"),
                get(discovery::group_version_resources),
            );
    }
    router
}

/// Runs an API server on `store` until `cancel` fires (for callers that
/// need nothing but the server; others start a [`Server`]).
pub async fn run(options: ServerOptions, cancel: CancellationToken) -> anyhow::Result<()> {
    let mut server = Server::start(options).await?;
    let outcome = tokio::select! {
        _ = cancel.cancelled() => Ok(()),
        ended = server.wait() => ended,
    };
    server.stop().await;
    outcome
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_server_advertises_its_bound_address_or_a_routed_one() {
        let bound: IpAddr = "192.0.2.7".parse().expect("ip");
        assert_eq!(advertise_address(bound), bound);
        let any: IpAddr = "0.0.0.0".parse().expect("ip");
        assert!(!advertise_address(any).is_unspecified());
    }
}
