//! Content negotiation (kubectl-wire.md §1.16): what the client accepts and
//! what the body it sent is.

use axum::http::HeaderMap;
use axum::http::header::{ACCEPT, CONTENT_TYPE};

use rudder_api::Status;

/// What a response body is rendered as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Output {
    Json,
    /// `meta.k8s.io/v1 Table` (or v1beta1: same shape).
    Table,
    /// `meta.k8s.io/v1 PartialObjectMetadata` (a list:
    /// `PartialObjectMetadataList`): objects' metadata alone, as metadata
    /// informers (the garbage collector's) ask.
    Metadata,
}

/// One media range of an `Accept` header: type and its parameters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MediaRange {
    pub media: String,
    pub params: Vec<(String, String)>,
}

impl MediaRange {
    pub fn param(&self, name: &str) -> Option<&str> {
        self.params
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Parses an `Accept` header into media ranges, in order.
pub fn parse_accept(header: &str) -> Vec<MediaRange> {
    header
        .split(',')
        .filter_map(|range| {
            let mut parts = range.split(';').map(str::trim);
            let media = parts.next()?.to_ascii_lowercase();
            if media.is_empty() {
                return None;
            }
            let params = parts
                .filter_map(|p| {
                    p.split_once('=').map(|(k, v)| {
                        (k.trim().to_string(), v.trim().trim_matches('"').to_string())
                    })
                })
                .collect();
            Some(MediaRange { media, params })
        })
        .collect()
}

fn accepts_json(range: &MediaRange) -> bool {
    matches!(
        range.media.as_str(),
        "application/json" | "application/*" | "*/*"
    )
}

fn accept_header(headers: &HeaderMap) -> String {
    headers
        .get(ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string()
}

/// How to render an object or list for this request: the first range we
/// can serve wins; protobuf and YAML ranges are skipped for a JSON one.
pub fn output(headers: &HeaderMap) -> Result<Output, Status> {
    let header = accept_header(headers);
    if header.trim().is_empty() {
        return Ok(Output::Json);
    }
    for range in parse_accept(&header) {
        if range.param("as") == Some("Table")
            && range.param("g") == Some("meta.k8s.io")
            && accepts_json(&range)
        {
            return Ok(Output::Table);
        }
        if matches!(
            range.param("as"),
            Some("PartialObjectMetadata" | "PartialObjectMetadataList")
        ) && range.param("g") == Some("meta.k8s.io")
            && matches!(range.param("v"), Some("v1" | "v1beta1"))
            && accepts_json(&range)
        {
            return Ok(Output::Metadata);
        }
        if range.param("as").is_none() && accepts_json(&range) {
            return Ok(Output::Json);
        }
    }
    Err(Status::not_acceptable(format!(
        "only the following media types are accepted: application/json, application/json;as=Table;v=v1;g=meta.k8s.io, application/json;as=PartialObjectMetadata;v=v1;g=meta.k8s.io (got {header:?})"
    )))
}

/// Which discovery document a request to `/api` or `/apis` wants.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Discovery {
    Legacy,
    /// Aggregated, at this `apidiscovery.k8s.io` version (`v2` or `v2beta1`).
    Aggregated(&'static str),
}

pub fn discovery(headers: &HeaderMap) -> Discovery {
    for range in parse_accept(&accept_header(headers)) {
        if range.param("g") == Some("apidiscovery.k8s.io")
            && range.param("as") == Some("APIGroupDiscoveryList")
        {
            match range.param("v") {
                Some("v2") => return Discovery::Aggregated("v2"),
                Some("v2beta1") => return Discovery::Aggregated("v2beta1"),
                _ => continue,
            }
        }
        if accepts_json(&range) && range.param("as").is_none() {
            return Discovery::Legacy;
        }
    }
    Discovery::Legacy
}

/// The request body's media type (JSON when absent, as upstream takes it).
pub fn content_type(headers: &HeaderMap) -> String {
    headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(|v| {
            v.split(';')
                .next()
                .unwrap_or_default()
                .trim()
                .to_ascii_lowercase()
        })
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| "application/json".into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn headers(accept: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(ACCEPT, HeaderValue::from_str(accept).expect("header"));
        h
    }

    #[test]
    fn kubectl_accept_headers_negotiate_as_upstream() {
        let table = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json";
        assert_eq!(output(&headers(table)), Ok(Output::Table));
        assert_eq!(
            output(&headers(
                "application/vnd.kubernetes.protobuf,application/json"
            )),
            Ok(Output::Json)
        );
        assert_eq!(output(&headers("application/json, */*")), Ok(Output::Json));
        assert_eq!(output(&HeaderMap::new()), Ok(Output::Json));
        assert_eq!(
            output(&headers("application/vnd.kubernetes.protobuf"))
                .expect_err("406")
                .code,
            406
        );
        let v2 = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json";
        assert_eq!(discovery(&headers(v2)), Discovery::Aggregated("v2"));
        assert_eq!(
            discovery(&headers(
                "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json"
            )),
            Discovery::Aggregated("v2beta1")
        );
        assert_eq!(discovery(&headers("application/json")), Discovery::Legacy);
    }
}
