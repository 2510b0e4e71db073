//! Reading collections from the store: label and field selectors,
//! `limit`/`continue` chunking at one revision, `resourceVersion` and
//! `resourceVersionMatch`. (Lists a request may take from the watch cache
//! are served there, in `rest/read.rs`.)

use base64::Engine;
use bytes::Bytes;
use rudder_api::selector::{FieldSelector, LabelSelector};
use rudder_api::{ResourceDef, Status};
use rudder_store::ListOptions;
use serde_json::{Value, json};

use super::{Storage, decode, served};
use crate::response::store_error;

/// A continue token: the revision of the first page and the last key returned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Continue {
    pub revision: u64,
    pub after: Vec<u8>,
}

impl Continue {
    pub fn encode(&self) -> String {
        let body = json!({"v": "meta.k8s.io/v1", "rv": self.revision, "start": base64::engine::general_purpose::STANDARD.encode(&self.after)});
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(body.to_string())
    }

    pub fn decode(token: &str) -> Result<Continue, Status> {
        let bad =
            || Status::bad_request("continue key is not valid: the continue token is malformed");
        let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(token.trim_end_matches('='))
            .map_err(|_| bad())?;
        let body: Value = serde_json::from_slice(&raw).map_err(|_| bad())?;
        let revision = body.get("rv").and_then(Value::as_u64).ok_or_else(bad)?;
        let after = body.get("start").and_then(Value::as_str).ok_or_else(bad)?;
        let after = base64::engine::general_purpose::STANDARD
            .decode(after)
            .map_err(|_| bad())?;
        Ok(Continue { revision, after })
    }
}

/// The selectors of a list or watch.
#[derive(Debug, Clone, Default)]
pub struct Selectors {
    pub labels: LabelSelector,
    pub fields: FieldSelector,
}

impl Selectors {
    /// Parses `labelSelector` and `fieldSelector` for `def`'s kind.
    pub fn parse(def: &ResourceDef, labels: &str, fields: &str) -> Result<Selectors, Status> {
        Ok(Selectors {
            labels: LabelSelector::parse(labels)?,
            fields: FieldSelector::parse_for(fields, def)?,
        })
    }

    pub fn matches(&self, object: &Value) -> bool {
        self.labels.matches(object.pointer("/metadata/labels")) && self.fields.matches(object)
    }

    pub fn is_empty(&self) -> bool {
        self.labels.is_empty() && self.fields.is_empty()
    }
}

/// What a list asks besides its selectors.
#[derive(Debug, Clone, Default)]
pub struct ListRequest {
    /// At most this many items (`None`: all).
    pub limit: Option<usize>,
    /// Where the previous page ended.
    pub continue_token: Option<String>,
    /// `resourceVersion`, as sent (`None` or `""`: the latest).
    pub resource_version: Option<String>,
    /// `resourceVersionMatch`, as sent.
    pub resource_version_match: Option<String>,
}

/// One consistent page of a list.
#[derive(Debug)]
pub struct Listed {
    pub items: Vec<Value>,
    pub revision: u64,
    pub next: Option<Continue>,
    pub remaining: Option<u64>,
}

const STALE_CONTINUE: &str = "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results. Continuing with the provided token results in an inconsistent list - objects that were created, modified, or deleted between the time the first chunk was returned and now may show up in the list.";

impl Storage<'_> {
    /// Lists `def`'s objects (in `namespace`) at one revision, filtered,
    /// at most `request.limit` of them.
    pub async fn list(
        &self,
        def: &ResourceDef,
        namespace: Option<&str>,
        selectors: &Selectors,
        request: &ListRequest,
    ) -> Result<Listed, Status> {
        let limit = request.limit.filter(|l| *l > 0);
        let prefix = match namespace.filter(|_| def.namespaced) {
            Some(ns) => format!("{}{ns}/", def.key_prefix()),
            None => def.key_prefix(),
        };
        let store = &self.state.store;
        let err = |e| store_error(e, def, "");
        let rv = request
            .resource_version
            .as_deref()
            .filter(|rv| !rv.is_empty() && *rv != "0");
        let continuing = request.continue_token.as_deref().filter(|c| !c.is_empty());
        let (mut revision, mut after) = match continuing {
            Some(token) => {
                if rv.is_some() {
                    return Err(Status::bad_request(
                        "specifying resource version is not allowed when using continue",
                    ));
                }
                let token = Continue::decode(token)?;
                (Some(token.revision), Some(Bytes::from(token.after)))
            }
            None => {
                let rv = rv
                    .map(|rv| {
                        rv.parse::<u64>().map_err(|_| {
                            Status::bad_request(format!("invalid resourceVersion {rv:?}"))
                        })
                    })
                    .transpose()?;
                match (rv, request.resource_version_match.as_deref()) {
                    (Some(rv), Some("Exact")) => (Some(rv), None),
                    (None, Some(m)) if !m.is_empty() => {
                        return Err(Status::bad_request(
                            "resourceVersionMatch is forbidden unless resourceVersion is provided",
                        ));
                    }
                    (Some(rv), _) => {
                        let current = store.current_revision().await.map_err(err)?;
                        if rv > current {
                            return Err(Status::timeout(format!(
                                "Too large resource version: {rv}, current: {current}"
                            )));
                        }
                        (None, None)
                    }
                    (None, _) => (None, None),
                }
            }
        };
        let mut items = Vec::new();
        let fetch = limit.map_or(0, |l| l.max(64) * 2);
        loop {
            let page = store
                .list(
                    prefix.as_bytes(),
                    ListOptions {
                        revision,
                        limit: fetch,
                        continue_after: after.clone(),
                    },
                )
                .await
                .map_err(|e| match e {
                    rudder_store::Error::Compacted { .. } if continuing.is_some() => {
                        Status::gone(STALE_CONTINUE)
                    }
                    other => err(other),
                })?;
            revision = Some(page.revision);
            for (i, kv) in page.kvs.iter().enumerate() {
                let object = served(def, decode(kv)?);
                if !selectors.matches(&object) {
                    continue;
                }
                items.push(object);
                if limit.is_some_and(|l| items.len() >= l) {
                    let more = page.more || i + 1 < page.kvs.len();
                    let next = more.then(|| Continue {
                        revision: page.revision,
                        after: kv.key.to_vec(),
                    });
                    let remaining =
                        (more && selectors.is_empty()).then(|| page.count - (i as u64 + 1));
                    return Ok(Listed {
                        items,
                        revision: page.revision,
                        next,
                        remaining,
                    });
                }
            }
            if !page.more {
                return Ok(Listed {
                    items,
                    revision: page.revision,
                    next: None,
                    remaining: None,
                });
            }
            after = page.kvs.last().map(|kv| kv.key.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn continue_tokens_round_trip_and_reject_garbage() {
        let token = Continue {
            revision: 42,
            after: b"/registry/core/configmaps/ns/a\x00".to_vec(),
        };
        assert_eq!(Continue::decode(&token.encode()).expect("valid"), token);
        assert_eq!(Continue::decode("not a token").expect_err("bad").code, 400);
    }
}
