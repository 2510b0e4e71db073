//! The conditions a namespace carries while its content is deleted, with
//! upstream's types, reasons and messages
//! (`pkg/controller/namespace/deletion/status_condition_utils.go`). Pure:
//! what a deletion pass found goes in, the five conditions come out.

use std::collections::BTreeMap;

use rudder_api::meta::Condition;

/// What one pass of content deletion found.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Found {
    /// Discovery failed: why.
    pub discovery_failure: Option<String>,
    /// Deletes or lists that failed, one message each.
    pub content_failures: Vec<String>,
    /// Objects left, per qualified resource (`pods.`, `deployments.apps`).
    pub remaining: BTreeMap<String, usize>,
    /// Objects left, per finalizer they carry.
    pub finalizers: BTreeMap<String, usize>,
}

fn condition(type_: &str, failing: Option<(&str, String)>, ok: (&str, &str)) -> Condition {
    match failing {
        Some((reason, message)) => Condition {
            type_: type_.into(),
            status: "True".into(),
            reason: reason.into(),
            message,
        },
        None => Condition {
            type_: type_.into(),
            status: "False".into(),
            reason: ok.0.into(),
            message: ok.1.into(),
        },
    }
}

/// The five conditions, in upstream's order.
pub fn conditions(found: &Found) -> Vec<Condition> {
    let discovery = found
        .discovery_failure
        .clone()
        .map(|why| ("DiscoveryFailed", why));
    let content = (!found.content_failures.is_empty()).then(|| {
        let mut failures = found.content_failures.clone();
        failures.sort();
        (
            "ContentDeletionFailed",
            format!(
                "Failed to delete all resource types, {} remaining: {}",
                failures.len(),
                failures.join(", ")
            ),
        )
    });
    let remaining = (!found.remaining.is_empty()).then(|| {
        let items: Vec<String> = found
            .remaining
            .iter()
            .map(|(resource, count)| format!("{resource} has {count} resource instances"))
            .collect();
        (
            "SomeResourcesRemain",
            format!("Some resources are remaining: {}", items.join(", ")),
        )
    });
    let finalizers = (!found.finalizers.is_empty()).then(|| {
        let items: Vec<String> = found
            .finalizers
            .iter()
            .map(|(finalizer, count)| format!("{finalizer} in {count} resource instances"))
            .collect();
        (
            "SomeFinalizersRemain",
            format!(
                "Some content in the namespace has finalizers remaining: {}",
                items.join(", ")
            ),
        )
    });
    vec![
        condition(
            "NamespaceDeletionDiscoveryFailure",
            discovery,
            (
                "ResourcesDiscovered",
                "All resources successfully discovered",
            ),
        ),
        condition(
            "NamespaceDeletionGroupVersionParsingFailure",
            None,
            (
                "ParsedGroupVersions",
                "All legacy kube types successfully parsed",
            ),
        ),
        condition(
            "NamespaceDeletionContentFailure",
            content,
            (
                "ContentDeleted",
                "All content successfully deleted, may be waiting on finalization",
            ),
        ),
        condition(
            "NamespaceContentRemaining",
            remaining,
            ("ContentRemoved", "All content successfully removed"),
        ),
        condition(
            "NamespaceFinalizersRemaining",
            finalizers,
            (
                "ContentHasNoFinalizers",
                "All content-preserving finalizers finished",
            ),
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conditions_say_what_remains_in_upstreams_words() {
        let mut found = Found::default();
        found.remaining.insert("pods.".into(), 3);
        found.remaining.insert("deployments.apps".into(), 1);
        found.finalizers.insert("example.com/hold".into(), 1);
        let all = conditions(&found);
        assert_eq!(all.len(), 5);
        let remaining = &all[3];
        assert_eq!(
            (
                remaining.type_.as_str(),
                remaining.status.as_str(),
                remaining.reason.as_str()
            ),
            ("NamespaceContentRemaining", "True", "SomeResourcesRemain")
        );
        assert_eq!(
            remaining.message,
            "Some resources are remaining: deployments.apps has 1 resource instances, pods. has 3 resource instances"
        );
        assert_eq!(
            all[4].message,
            "Some content in the namespace has finalizers remaining: example.com/hold in 1 resource instances"
        );
        let clean = conditions(&Found::default());
        assert!(clean.iter().all(|c| c.status == "False"));
        assert_eq!(clean[2].reason, "ContentDeleted");
    }
}
