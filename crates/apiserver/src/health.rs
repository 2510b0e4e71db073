//! `/healthz`, `/livez` and `/readyz` as upstream's healthz handlers
//! answer them: named checks, each also at `/<endpoint>/<check>`;
//! `?verbose` lists them (`[+]etcd ok`) ending `readyz check passed`;
//! `?exclude=<check>` leaves one out (naming one that does not exist is
//! warned about); any failing check makes the answer 500 and verbose
//! (`[-]etcd failed: reason withheld` … `readyz check failed`).
//!
//! The `etcd` checks ask the store whether it can serve reads and take
//! writes now (a linearizable read for etcd; for the embedded store a read
//! transaction and its writer's answer), so a store that refuses writes is
//! a server that is neither live nor ready.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use axum::extract::{Path, Query, State as AxumState};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

use crate::state::State;

/// How long a store check may take before it counts as failed.
const STORE_TIMEOUT: Duration = Duration::from_secs(2);

/// One check's name and whether it passes (`Err`: why not).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Check {
    Ping,
    Log,
    Etcd,
    EtcdReadiness,
    InformerSync,
    Bootstrap,
    CustomResources,
    Shutdown,
}

impl Check {
    fn name(self) -> &'static str {
        match self {
            Check::Ping => "ping",
            Check::Log => "log",
            Check::Etcd => "etcd",
            Check::EtcdReadiness => "etcd-readiness",
            Check::InformerSync => "informer-sync",
            Check::Bootstrap => "poststarthook/bootstrap-controller",
            Check::CustomResources => "poststarthook/start-apiextensions-controllers",
            Check::Shutdown => "shutdown",
        }
    }

    async fn run(self, state: &State) -> Result<(), String> {
        let started = state.ready.load(Ordering::SeqCst);
        match self {
            Check::Ping | Check::Log => Ok(()),
            Check::Etcd | Check::EtcdReadiness => {
                match tokio::time::timeout(STORE_TIMEOUT, state.store.check()).await {
                    Ok(Ok(())) => Ok(()),
                    Ok(Err(error)) => Err(error.to_string()),
                    Err(_) => Err(format!("the store did not answer within {STORE_TIMEOUT:?}")),
                }
            }
            Check::InformerSync | Check::Bootstrap | Check::CustomResources => {
                if started {
                    Ok(())
                } else {
                    Err("not finished".into())
                }
            }
            Check::Shutdown => {
                if state.shutdown.is_cancelled() {
                    Err("the server is shutting down".into())
                } else {
                    Ok(())
                }
            }
        }
    }
}

/// The three endpoints and their checks, as upstream lists them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoint {
    Healthz,
    Livez,
    Readyz,
}

impl Endpoint {
    fn name(self) -> &'static str {
        match self {
            Endpoint::Healthz => "healthz",
            Endpoint::Livez => "livez",
            Endpoint::Readyz => "readyz",
        }
    }

    fn checks(self) -> &'static [Check] {
        const LIVE: &[Check] = &[
            Check::Ping,
            Check::Log,
            Check::Etcd,
            Check::Bootstrap,
            Check::CustomResources,
        ];
        const READY: &[Check] = &[
            Check::Ping,
            Check::Log,
            Check::Etcd,
            Check::EtcdReadiness,
            Check::InformerSync,
            Check::Bootstrap,
            Check::CustomResources,
            Check::Shutdown,
        ];
        match self {
            Endpoint::Healthz | Endpoint::Livez => LIVE,
            Endpoint::Readyz => READY,
        }
    }
}

fn text(code: StatusCode, body: String) -> Response {
    let mut response = (code, body).into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    response
}

/// The answer of `endpoint` with the request's query pairs.
async fn answer(state: &State, endpoint: Endpoint, query: &[(String, String)]) -> Response {
    let verbose = query.iter().any(|(k, _)| k == "verbose");
    let excluded: Vec<&str> = query
        .iter()
        .filter(|(k, _)| k == "exclude")
        .map(|(_, v)| v.as_str())
        .collect();
    let mut lines = Vec::new();
    let mut failed = false;
    for check in endpoint.checks() {
        if excluded.contains(&check.name()) {
            lines.push(format!("[+]{} excluded: ok", check.name()));
            continue;
        }
        match check.run(state).await {
            Ok(()) => lines.push(format!("[+]{} ok", check.name())),
            Err(reason) => {
                tracing::warn!(check = check.name(), %reason, "{} check failed", endpoint.name());
                failed = true;
                lines.push(format!("[-]{} failed: reason withheld", check.name()));
            }
        }
    }
    let unknown: Vec<String> = excluded
        .iter()
        .filter(|e| !endpoint.checks().iter().any(|c| c.name() == **e))
        .map(|e| format!("{e:?}"))
        .collect();
    if !unknown.is_empty() {
        lines.push(format!(
            "warn: some health checks cannot be excluded: no matches for {}",
            unknown.join(",")
        ));
    }
    let name = endpoint.name();
    if failed {
        return text(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("{}\n{name} check failed\n", lines.join("\n")),
        );
    }
    if verbose {
        return text(
            StatusCode::OK,
            format!("{}\n{name} check passed\n", lines.join("\n")),
        );
    }
    text(StatusCode::OK, "ok".into())
}

/// `GET /<endpoint>`.
pub async fn serve(
    endpoint: Endpoint,
    AxumState(state): AxumState<Arc<State>>,
    Query(query): Query<Vec<(String, String)>>,
) -> Response {
    answer(&state, endpoint, &query).await
}

/// `GET /<endpoint>/<check>`: one check.
pub async fn serve_one(
    endpoint: Endpoint,
    AxumState(state): AxumState<Arc<State>>,
    Path(name): Path<String>,
) -> Response {
    let Some(check) = endpoint.checks().iter().find(|c| c.name() == name) else {
        return text(StatusCode::NOT_FOUND, "404 page not found\n".into());
    };
    match check.run(&state).await {
        Ok(()) => text(StatusCode::OK, "ok".into()),
        Err(reason) => text(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("internal server error: {reason}\n"),
        ),
    }
}
