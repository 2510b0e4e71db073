//! What controllers read and write on objects besides their spec: owner
//! references (who controls an object) and status conditions (set with
//! upstream's rule for `lastTransitionTime`). Pure, on JSON objects; the
//! typed helpers over k8s-openapi types are in `rudder-runtime`'s `meta`.

use serde_json::{Value, json};

/// The strings of the list at `pointer` (`/metadata/finalizers`).
pub fn strings_at(object: &Value, pointer: &str) -> Vec<String> {
    object
        .pointer(pointer)
        .and_then(Value::as_array)
        .map(|l| {
            l.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

/// `object`'s finalizers.
pub fn finalizers(object: &Value) -> Vec<String> {
    strings_at(object, "/metadata/finalizers")
}

/// Whether `object` is being deleted (has a `deletionTimestamp`).
pub fn is_deleting(object: &Value) -> bool {
    object
        .pointer("/metadata/deletionTimestamp")
        .is_some_and(|v| !v.is_null())
}

/// The owner reference of `object` that names its controller
/// (`controller: true`), if any.
pub fn controller_of(object: &Value) -> Option<&Value> {
    object
        .pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)?
        .iter()
        .find(|r| r.get("controller") == Some(&Value::Bool(true)))
}

/// The uids of `object`'s owners.
pub fn owner_uids(object: &Value) -> Vec<&str> {
    object
        .pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .map(|refs| refs.iter().filter_map(|r| r.get("uid")?.as_str()).collect())
        .unwrap_or_default()
}

/// A status condition, as `metav1.Condition` and the older per-kind
/// conditions (`NamespaceCondition`, …) share its fields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Condition {
    pub type_: String,
    pub status: String,
    pub reason: String,
    pub message: String,
}

/// Sets `wanted` in a JSON list of conditions: replaced in place, its
/// `lastTransitionTime` kept unless its status changed (then `now`, an RFC
/// 3339 time). Returns whether the list changed.
pub fn set_condition(conditions: &mut Vec<Value>, wanted: &Condition, now: &str) -> bool {
    let mut fresh = json!({
        "type": wanted.type_,
        "status": wanted.status,
        "reason": wanted.reason,
        "message": wanted.message,
        "lastTransitionTime": now,
    });
    match conditions
        .iter_mut()
        .find(|c| c["type"] == wanted.type_.as_str())
    {
        Some(existing) => {
            if existing["status"] == wanted.status.as_str() {
                fresh["lastTransitionTime"] = existing["lastTransitionTime"].clone();
            }
            if *existing == fresh {
                return false;
            }
            *existing = fresh;
            true
        }
        None => {
            conditions.push(fresh);
            true
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_condition_keeps_its_transition_time_while_its_status_holds() {
        let mut list = Vec::new();
        let wanted = Condition {
            type_: "Ready".into(),
            status: "False".into(),
            reason: "Waiting".into(),
            message: "a".into(),
        };
        assert!(set_condition(&mut list, &wanted, "2026-01-01T00:00:00Z"));
        assert!(
            !set_condition(&mut list, &wanted, "2026-01-02T00:00:00Z"),
            "unchanged"
        );
        let reworded = Condition {
            message: "b".into(),
            ..wanted.clone()
        };
        assert!(set_condition(&mut list, &reworded, "2026-01-02T00:00:00Z"));
        assert_eq!(list[0]["lastTransitionTime"], "2026-01-01T00:00:00Z");
        let flipped = Condition {
            status: "True".into(),
            ..wanted
        };
        assert!(set_condition(&mut list, &flipped, "2026-01-03T00:00:00Z"));
        assert_eq!(list[0]["lastTransitionTime"], "2026-01-03T00:00:00Z");
        assert_eq!(list.len(), 1);
    }

    #[test]
    fn owners_and_the_controller_are_read_off_references() {
        let object = json!({"metadata": {"ownerReferences": [
            {"uid": "a", "controller": false}, {"uid": "b", "controller": true}
        ]}});
        assert_eq!(owner_uids(&object), ["a", "b"]);
        assert_eq!(
            controller_of(&object).and_then(|r| r["uid"].as_str()),
            Some("b")
        );
        assert!(controller_of(&json!({})).is_none());
    }
}
