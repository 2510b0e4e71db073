//! What several plugins match with (upstream's
//! `component-helpers/scheduling/corev1`): node selector terms against a
//! node's labels and name, tolerations against taints, and upstream's
//! default score normalization.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{NodeSelectorRequirement, NodeSelectorTerm, Taint, Toleration};

use crate::framework::MAX_NODE_SCORE;

/// Whether one requirement holds for `labels` (`In`, `NotIn`, `Exists`,
/// `DoesNotExist`, `Gt`, `Lt`).
pub fn requirement_matches(r: &NodeSelectorRequirement, labels: &BTreeMap<String, String>) -> bool {
    let value = labels.get(&r.key);
    let values = r.values.as_deref().unwrap_or_default();
    let number = |v: &str| v.parse::<i64>().ok();
    match r.operator.as_str() {
        "In" => value.is_some_and(|v| values.contains(v)),
        "NotIn" => value.is_none_or(|v| !values.contains(v)),
        "Exists" => value.is_some(),
        "DoesNotExist" => value.is_none(),
        "Gt" | "Lt" => {
            let (Some(have), Some(bound)) = (
                value.and_then(|v| number(v)),
                values.first().and_then(|v| number(v)),
            ) else {
                return false;
            };
            if r.operator == "Gt" {
                have > bound
            } else {
                have < bound
            }
        }
        _ => false,
    }
}

/// Whether a term holds for a node: every expression on its labels and
/// every field (`metadata.name`) on its name; an empty term matches
/// nothing, as upstream.
pub fn term_matches(
    term: &NodeSelectorTerm,
    labels: &BTreeMap<String, String>,
    name: &str,
) -> bool {
    let expressions = term.match_expressions.as_deref().unwrap_or_default();
    let fields = term.match_fields.as_deref().unwrap_or_default();
    if expressions.is_empty() && fields.is_empty() {
        return false;
    }
    let fields_ok = fields.iter().all(|f| {
        f.key == "metadata.name" && {
            let as_labels: BTreeMap<String, String> =
                [("metadata.name".to_string(), name.to_string())].into();
            requirement_matches(f, &as_labels)
        }
    });
    fields_ok && expressions.iter().all(|e| requirement_matches(e, labels))
}

/// Whether any of the terms holds (terms are ORed).
pub fn terms_match(
    terms: &[NodeSelectorTerm],
    labels: &BTreeMap<String, String>,
    name: &str,
) -> bool {
    terms.iter().any(|t| term_matches(t, labels, name))
}

/// Whether a toleration tolerates a taint (upstream's
/// `Toleration.ToleratesTaint`).
pub fn tolerates(toleration: &Toleration, taint: &Taint) -> bool {
    if let Some(effect) = toleration.effect.as_deref().filter(|e| !e.is_empty())
        && effect != taint.effect
    {
        return false;
    }
    let key = toleration.key.as_deref().unwrap_or_default();
    if !key.is_empty() && key != taint.key {
        return false;
    }
    match toleration.operator.as_deref().unwrap_or("Equal") {
        "Exists" => true,
        "Equal" | "" => {
            toleration.value.as_deref().unwrap_or_default()
                == taint.value.as_deref().unwrap_or_default()
        }
        _ => false,
    }
}

/// The first taint of `effects` no toleration tolerates.
pub fn untolerated<'t>(
    taints: &'t [Taint],
    tolerations: &[Toleration],
    effects: &[&str],
) -> Option<&'t Taint> {
    taints
        .iter()
        .filter(|t| effects.contains(&t.effect.as_str()))
        .find(|t| !tolerations.iter().any(|tol| tolerates(tol, t)))
}

/// Upstream's `DefaultNormalizeScore`: scales scores so the highest is
/// 100 (reversed: the highest becomes 0).
pub fn default_normalize(scores: &mut [i64], reverse: bool) {
    let max = scores.iter().copied().max().unwrap_or(0);
    if max == 0 {
        if reverse {
            scores.iter_mut().for_each(|s| *s = MAX_NODE_SCORE);
        }
        return;
    }
    for s in scores.iter_mut() {
        let scaled = MAX_NODE_SCORE * *s / max;
        *s = if reverse {
            MAX_NODE_SCORE - scaled
        } else {
            scaled
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn requirement(key: &str, op: &str, values: &[&str]) -> NodeSelectorRequirement {
        NodeSelectorRequirement {
            key: key.into(),
            operator: op.into(),
            values: Some(values.iter().map(|v| v.to_string()).collect()),
        }
    }

    #[test]
    fn requirements_and_terms() {
        let labels: BTreeMap<String, String> =
            [("zone".into(), "a".into()), ("cores".into(), "8".into())].into();
        assert!(requirement_matches(
            &requirement("zone", "In", &["a", "b"]),
            &labels
        ));
        assert!(!requirement_matches(
            &requirement("zone", "NotIn", &["a"]),
            &labels
        ));
        assert!(requirement_matches(
            &requirement("gpu", "DoesNotExist", &[]),
            &labels
        ));
        assert!(requirement_matches(
            &requirement("cores", "Gt", &["4"]),
            &labels
        ));
        assert!(!requirement_matches(
            &requirement("cores", "Lt", &["4"]),
            &labels
        ));
        let by_name = NodeSelectorTerm {
            match_fields: Some(vec![requirement("metadata.name", "In", &["n1"])]),
            ..Default::default()
        };
        assert!(term_matches(&by_name, &labels, "n1"));
        assert!(!term_matches(&by_name, &labels, "n2"));
        assert!(!term_matches(&NodeSelectorTerm::default(), &labels, "n1"));
    }

    #[test]
    fn tolerations() {
        let taint = Taint {
            key: "dedicated".into(),
            value: Some("gpu".into()),
            effect: "NoSchedule".into(),
            ..Default::default()
        };
        let equal = Toleration {
            key: Some("dedicated".into()),
            value: Some("gpu".into()),
            ..Default::default()
        };
        assert!(tolerates(&equal, &taint));
        let exists_all = Toleration {
            operator: Some("Exists".into()),
            ..Default::default()
        };
        assert!(tolerates(&exists_all, &taint));
        let wrong_effect = Toleration {
            effect: Some("NoExecute".into()),
            ..equal.clone()
        };
        assert!(!tolerates(&wrong_effect, &taint));
    }

    #[test]
    fn normalization() {
        let mut scores = [0, 5, 10];
        default_normalize(&mut scores, false);
        assert_eq!(scores, [0, 50, 100]);
        let mut scores = [0, 5, 10];
        default_normalize(&mut scores, true);
        assert_eq!(scores, [100, 50, 0]);
    }
}
