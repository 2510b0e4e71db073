//! Patches: JSON patch (RFC 6902), JSON merge patch (RFC 7386) and
//! Kubernetes' strategic merge patch ([`strategic`]).

use serde_json::Value;

use crate::Status;

pub mod strategic;

/// The patch formats the API server accepts, by request `Content-Type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchType {
    Json,
    Merge,
    StrategicMerge,
    Apply,
}

impl PatchType {
    pub fn from_content_type(content_type: &str) -> Option<PatchType> {
        let media = content_type.split(';').next().unwrap_or_default().trim();
        match media {
            "application/json-patch+json" => Some(PatchType::Json),
            "application/merge-patch+json" => Some(PatchType::Merge),
            "application/strategic-merge-patch+json" => Some(PatchType::StrategicMerge),
            "application/apply-patch+yaml" => Some(PatchType::Apply),
            _ => None,
        }
    }
}

/// Applies an RFC 6902 patch document to `target`.
pub fn json_patch(target: &Value, patch: &Value) -> Result<Value, Status> {
    let ops: json_patch::Patch = serde_json::from_value(patch.clone())
        .map_err(|e| Status::bad_request(format!("the server rejected our request due to an error in our request: invalid JSON patch: {e}")))?;
    let mut out = target.clone();
    json_patch::patch(&mut out, &ops).map_err(|e| {
        Status::new(
            422,
            "Invalid",
            format!("the server rejected our request due to an error in our request: {e}"),
        )
    })?;
    Ok(out)
}

/// Applies an RFC 7386 merge patch to `target`.
pub fn merge_patch(target: &Value, patch: &Value) -> Result<Value, Status> {
    if !patch.is_object() {
        return Err(Status::bad_request("a merge patch must be a JSON object"));
    }
    let mut out = target.clone();
    json_patch::merge(&mut out, patch);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn content_types_name_patch_types() {
        assert_eq!(
            PatchType::from_content_type("application/merge-patch+json; charset=utf-8"),
            Some(PatchType::Merge)
        );
        assert_eq!(
            PatchType::from_content_type("application/json-patch+json"),
            Some(PatchType::Json)
        );
        assert_eq!(PatchType::from_content_type("application/json"), None);
    }

    #[test]
    fn json_patch_applies_and_reports_failures() {
        let doc = json!({"spec": {"replicas": 2, "paused": false}});
        let out = json_patch(
            &doc,
            &json!([{"op": "replace", "path": "/spec/replicas", "value": 3}]),
        )
        .expect("applies");
        assert_eq!(out["spec"]["replicas"], 3);
        let err = json_patch(
            &doc,
            &json!([{"op": "test", "path": "/spec/replicas", "value": 9}]),
        )
        .expect_err("test fails");
        assert_eq!(err.code, 422);
        assert_eq!(
            json_patch(&doc, &json!({"op": "x"}))
                .expect_err("malformed")
                .code,
            400
        );
    }

    #[test]
    fn merge_patch_merges_and_null_deletes() {
        let doc = json!({"metadata": {"labels": {"a": "1", "b": "2"}}, "spec": {"x": [1, 2]}});
        let out = merge_patch(
            &doc,
            &json!({"metadata": {"labels": {"b": null, "c": "3"}}, "spec": {"x": [3]}}),
        )
        .expect("merges");
        assert_eq!(
            out,
            json!({"metadata": {"labels": {"a": "1", "c": "3"}}, "spec": {"x": [3]}})
        );
        assert_eq!(
            merge_patch(&doc, &json!([1]))
                .expect_err("not an object")
                .code,
            400
        );
    }
}
