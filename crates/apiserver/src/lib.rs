//! The Kubernetes API server over the store: HTTPS with client-certificate
//! authentication, discovery, OpenAPI, and one set of REST handlers serving
//! every resource of the registry (ARCHITECTURE.md §4, docs/apiserver.md).

pub mod auth;
pub mod cache;
mod crd;
mod discovery;
pub mod health;
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
/// (resource requests are authorized by verb in the dispatcher).
async fn authorize_paths(request: Request, next: Next) -> Response {
    let user = request
        .extensions()
        .get::<User>()
        .cloned()
        .unwrap_or_else(User::anonymous);
    if user.is_anonymous()
        && request
            .headers()
            .contains_key(axum::http::header::AUTHORIZATION)
    {
        return ApiError(Status::unauthorized("Unauthorized")).into_response();
    }
    let path = request.uri().path();
    if !path::is_resource(path)
        && let Err(status) = auth::authorize(&user, path, "get")
    {
        return ApiError(status).into_response();
    }
    next.run(request).await
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
        .fallback(rest::dispatch)
        .layer(middleware::from_fn(authorize_paths))
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
