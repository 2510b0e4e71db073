//! The generic REST handlers: one dispatcher for every resource URL, verbs
//! by method and shape, every kind served by the same code through its
//! registry entry (ARCHITECTURE.md §4).

mod apply;
mod components;
mod connect;
pub(crate) mod objects;
mod podlog;
mod proxy;
mod read;
mod review;
mod subresource;
mod token;
mod watch;
mod write;

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Request, State as AxumState};
use axum::http::Method;
use axum::response::{IntoResponse, Response};
use rudder_api::Status;
use rudder_api::strategy::Rest;

use crate::auth::{self, User};
use crate::path::{self, ResourcePath};
use crate::response::{ApiError, ApiResult};
use crate::state::State;

/// Bodies larger than this are refused with 413, as upstream's 3 MiB limit.
pub const MAX_BODY_BYTES: usize = 3 * 1024 * 1024;

/// The query parameters of a request, decoded.
#[derive(Debug, Clone, Default)]
pub struct Params {
    pairs: Vec<(String, String)>,
}

impl Params {
    pub fn parse(query: Option<&str>) -> Self {
        let pairs = query.map(url_decode_pairs).unwrap_or_default();
        Params { pairs }
    }

    pub fn get(&self, key: &str) -> Option<&str> {
        self.pairs
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// Every value of a repeated parameter, in order.
    pub fn all<'a>(&'a self, key: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        self.pairs
            .iter()
            .filter(move |(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// A boolean parameter: `true`, `True` or `1`.
    pub fn flag(&self, key: &str) -> bool {
        matches!(self.get(key), Some("true" | "True" | "1"))
    }

    pub fn dry_run(&self) -> Result<bool, Status> {
        let mut dry = false;
        for (k, v) in &self.pairs {
            if k == "dryRun" {
                match v.as_str() {
                    "All" => dry = true,
                    "" => {}
                    other => {
                        return Err(Status::bad_request(format!(
                            "dryRun: Unsupported value: {other:?}: supported values: \"All\""
                        )));
                    }
                }
            }
        }
        Ok(dry)
    }

    pub fn number(&self, key: &str) -> Result<Option<i64>, Status> {
        match self.get(key) {
            None | Some("") => Ok(None),
            Some(v) => v.parse().map(Some).map_err(|_| {
                Status::bad_request(format!("{key}: invalid value {v:?}: must be an integer"))
            }),
        }
    }
}

fn hex(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

fn url_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' => match (
                bytes.get(i + 1).and_then(|b| hex(*b)),
                bytes.get(i + 2).and_then(|b| hex(*b)),
            ) {
                (Some(h), Some(l)) => {
                    out.push(h * 16 + l);
                    i += 2;
                }
                _ => out.push(b'%'),
            },
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn url_decode_pairs(query: &str) -> Vec<(String, String)> {
    query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| match p.split_once('=') {
            Some((k, v)) => (url_decode(k), url_decode(v)),
            None => (url_decode(p), String::new()),
        })
        .collect()
}

/// What a request asks, resolved from method, path shape and query.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verb {
    Get,
    List,
    Watch,
    Create,
    Update,
    Patch,
    Delete,
    DeleteCollection,
}

impl Verb {
    pub fn as_str(self) -> &'static str {
        match self {
            Verb::Get => "get",
            Verb::List => "list",
            Verb::Watch => "watch",
            Verb::Create => "create",
            Verb::Update => "update",
            Verb::Patch => "patch",
            Verb::Delete => "delete",
            Verb::DeleteCollection => "deletecollection",
        }
    }
}

fn verb(method: &Method, path: &ResourcePath, params: &Params) -> Option<Verb> {
    let item = path.name.is_some();
    Some(match (method.as_str(), item) {
        ("GET", false) if params.flag("watch") => Verb::Watch,
        ("GET", false) => Verb::List,
        ("GET", true) if params.flag("watch") => Verb::Watch,
        ("GET", true) => Verb::Get,
        ("POST", false) => Verb::Create,
        ("POST", true) if path.subresource.is_some() => Verb::Create,
        ("PUT", true) => Verb::Update,
        ("PATCH", true) => Verb::Patch,
        ("DELETE", true) => Verb::Delete,
        ("DELETE", false) => Verb::DeleteCollection,
        // A proxy passes HEAD and OPTIONS on, authorized as reads.
        ("HEAD" | "OPTIONS", true) if path.subresource.as_deref() == Some("proxy") => Verb::Get,
        _ => return None,
    })
}

/// Serves every resource URL, metered by verb, resource and code.
pub async fn dispatch(AxumState(state): AxumState<Arc<State>>, request: Request) -> Response {
    let began = std::time::Instant::now();
    let metrics = state.metrics.clone();
    let (resource, params, verb) = match resolve(&state, &request) {
        Ok(resolved) => resolved,
        Err(error) => return error.into_response(),
    };
    let label = match &resource.subresource {
        Some(sub) => format!("{}/{sub}", resource.def.plural),
        None => resource.def.plural.clone(),
    };
    let deprecation = resource.def.deprecation;
    let mut response = match serve(state, request, resource, params, verb).await {
        Ok(response) => response,
        Err(error) => error.into_response(),
    };
    if let Some(warning) = deprecation {
        response = crate::response::with_warnings(response, &[warning.to_string()]);
    }
    metrics.request(
        verb.as_str(),
        &label,
        response.status().as_u16(),
        began.elapsed(),
    );
    response
}

/// What a request addresses and asks: the resource, the query, the verb.
fn resolve(state: &State, request: &Request) -> Result<(ResourcePath, Params, Verb), ApiError> {
    let uri_path = request.uri().path();
    let Some(parsed) = path::parse(&state.registry(), uri_path) else {
        return Err(ApiError(Status::not_found_path(uri_path)));
    };
    let resource = parsed?;
    let params = Params::parse(request.uri().query());
    let method = request.method();
    let verb = verb(method, &resource, &params).ok_or_else(|| {
        Status::method_not_allowed(format!(
            "the server does not allow this method on the requested resource ({method} {uri_path})"
        ))
    })?;
    Ok((resource, params, verb))
}

async fn serve(
    state: Arc<State>,
    request: Request,
    resource: ResourcePath,
    params: Params,
    verb: Verb,
) -> ApiResult {
    let uri_path = request.uri().path().to_string();
    let method = request.method().clone();
    let user = request
        .extensions()
        .get::<User>()
        .cloned()
        .unwrap_or_else(User::anonymous);
    auth::authorize(&user, &uri_path, verb.as_str())
        .map_err(|_| auth::forbidden_resource(&user, verb.as_str(), &resource))?;
    let allowed = match &resource.subresource {
        Some(sub) => resource
            .def
            .subresource(sub)
            .is_some_and(|s| s.verbs.contains(&verb.as_str())),
        None => resource.def.has_verb(verb.as_str()),
    };
    if !allowed {
        return Err(ApiError(Status::method_not_allowed(format!(
            "the server does not allow this method on the requested resource ({method} {uri_path})"
        ))));
    }
    // Streams into pods are long-running: not counted against the
    // in-flight limit, served before the body is read (it is the
    // upgraded connection).
    let core = resource.def.group.is_empty();
    let plural = resource.def.plural.as_str();
    let stream = (core && plural == "pods")
        .then(|| resource.subresource.as_deref().and_then(connect::Kind::of))
        .flatten();
    let proxied = core
        && matches!(plural, "pods" | "services" | "nodes")
        && resource.subresource.as_deref() == Some("proxy");
    if stream.is_some() || proxied {
        let ctx = Context {
            state,
            resource,
            params,
            headers: request.headers().clone(),
            user,
        };
        return match stream {
            Some(kind) => connect::serve(ctx, kind, request).await,
            None => proxy::serve(ctx, request).await,
        };
    }
    // Long-running watches are not counted against the in-flight limit.
    let _permit = if verb == Verb::Watch {
        None
    } else {
        match state.inflight.clone().try_acquire_owned() {
            Ok(permit) => Some(permit),
            Err(_) => {
                state.metrics.rejected();
                return Err(ApiError(Status::too_many_requests(1)));
            }
        }
    };
    let (parts, body) = request.into_parts();
    let headers = parts.headers;
    write::check_media_type(&resource.def, verb, &headers)?;
    let ctx = Context {
        state,
        resource,
        params,
        headers,
        user,
    };
    match ctx.def().strategy.rest {
        Rest::ComponentStatus => return components::serve(&ctx, verb).await,
        Rest::Review if verb == Verb::Create => {
            return review::create(&ctx, read_body(body).await?).await;
        }
        Rest::Binding if verb == Verb::Create => {
            return subresource::bind_legacy(&ctx, read_body(body).await?).await;
        }
        _ => {}
    }
    match (verb, ctx.resource.subresource.as_deref()) {
        (Verb::List, _) => read::list(&ctx).await,
        (Verb::Watch, _) => watch::watch(ctx).await,
        (Verb::Get, None) => read::get(&ctx).await,
        (Verb::Create, None) => write::create(&ctx, read_body(body).await?).await,
        (Verb::Update, None) => write::update(&ctx, read_body(body).await?).await,
        (Verb::Patch, None) => write::patch(&ctx, read_body(body).await?).await,
        (Verb::Delete, None) => write::delete(&ctx, read_body(body).await?).await,
        (Verb::DeleteCollection, None) => {
            write::delete_collection(&ctx, read_body(body).await?).await
        }
        (verb, Some(sub)) => {
            let sub = sub.to_string();
            let body = read_body(body).await?;
            subresource::serve(&ctx, &sub, verb, body).await
        }
    }
}

/// Everything a handler needs about its request.
#[derive(Debug)]
pub struct Context {
    pub state: Arc<State>,
    pub resource: ResourcePath,
    pub params: Params,
    pub headers: axum::http::HeaderMap,
    pub user: User,
}

async fn read_body(body: Body) -> Result<bytes::Bytes, ApiError> {
    axum::body::to_bytes(body, MAX_BODY_BYTES)
        .await
        .map_err(|e| {
            let too_large = std::error::Error::source(&e)
                .is_some_and(|s| s.to_string().contains("length limit"))
                || e.to_string().contains("length limit");
            if too_large {
                ApiError(Status::too_large(format!(
                    "the request body is larger than {MAX_BODY_BYTES} bytes"
                )))
            } else {
                ApiError(Status::bad_request(format!(
                    "reading the request body: {e}"
                )))
            }
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_parameters_decode() {
        let p = Params::parse(Some(
            "labelSelector=app%3Dweb%2Ctier+in+%28a%29&watch=1&dryRun=All&limit=5",
        ));
        assert_eq!(p.get("labelSelector"), Some("app=web,tier in (a)"));
        assert!(p.flag("watch"));
        assert_eq!(p.dry_run(), Ok(true));
        assert_eq!(p.number("limit"), Ok(Some(5)));
        assert_eq!(
            Params::parse(Some("dryRun=Some"))
                .dry_run()
                .expect_err("bad")
                .code,
            400
        );
        assert_eq!(
            Params::parse(Some("limit=x"))
                .number("limit")
                .expect_err("bad")
                .code,
            400
        );
    }
}
