//! What upstream's `validateJobSpec` requires of a Job's spec (and of a
//! CronJob's job template) beyond its pod template: counts that are not
//! negative, a known completion mode, `backoffLimitPerIndex`,
//! `maxFailedIndexes` and `successPolicy` only on Indexed Jobs and within
//! their limits, `FailIndex` rules only with `backoffLimitPerIndex`, and
//! well-formed pod failure policy rules.

use serde_json::{Value, json};

use crate::Cause;

/// An Indexed Job's parallelism at most (upstream's
/// `maxParallelismForIndexedJob`), and its failed indexes at most.
const MAX_INDEXED: i64 = 100_000;
/// Past this many completions, `backoffLimitPerIndex` needs
/// `maxFailedIndexes`, and both it and parallelism are capped lower.
const COMPLETIONS_SOFT_LIMIT: i64 = 100_000;
const LIMIT_FOR_HIGH_COMPLETIONS: i64 = 10_000;
const MAX_POLICY_RULES: usize = 20;
const MAX_SUCCEEDED_INDEXES_LENGTH: usize = 64 * 1024;
const MAX_EXIT_CODES: usize = 255;
const ACTIONS: &[&str] = &["Count", "FailIndex", "FailJob", "Ignore"];

fn int(spec: &Value, key: &str) -> Option<i64> {
    spec.get(key).and_then(Value::as_i64)
}

fn required(field: String, detail: &str) -> Cause {
    Cause::new(
        "FieldValueRequired",
        field,
        format!("Required value: {detail}"),
    )
}

fn too_many(field: String, count: usize, max: usize) -> Cause {
    Cause::new(
        "FieldValueTooMany",
        field,
        format!("Too many: {count}: must have at most {max} items"),
    )
}

fn not_negative(spec: &Value, key: &str, path: &str, causes: &mut Vec<Cause>) {
    if let Some(n) = int(spec, key).filter(|n| *n < 0) {
        causes.push(Cause::invalid(
            format!("{path}.{key}"),
            &json!(n),
            "must be greater than or equal to 0",
        ));
    }
}

/// Validates the Job spec `spec` found at `path` ("spec",
/// "spec.jobTemplate.spec").
pub(crate) fn spec(spec: Option<&Value>, path: &str, causes: &mut Vec<Cause>) {
    let Some(spec) = spec.filter(|s| s.is_object()) else {
        return;
    };
    for key in [
        "parallelism",
        "completions",
        "activeDeadlineSeconds",
        "backoffLimit",
        "ttlSecondsAfterFinished",
        "backoffLimitPerIndex",
        "maxFailedIndexes",
    ] {
        not_negative(spec, key, path, causes);
    }
    let per_index = int(spec, "backoffLimitPerIndex");
    let max_failed = int(spec, "maxFailedIndexes");
    let completions = int(spec, "completions");
    let parallelism = int(spec, "parallelism");
    if max_failed.is_some() && per_index.is_none() {
        causes.push(required(
            format!("{path}.backoffLimitPerIndex"),
            "when maxFailedIndexes is specified",
        ));
    }
    let mode = spec.get("completionMode").and_then(Value::as_str);
    super::one_of(
        spec.get("completionMode"),
        format!("{path}.completionMode"),
        &["NonIndexed", "Indexed"],
        causes,
    );
    let indexed = mode == Some("Indexed");
    if indexed {
        indexed_limits(
            path,
            completions,
            parallelism,
            per_index,
            max_failed,
            causes,
        );
    } else if mode.is_none_or(|m| m == "NonIndexed") {
        for (key, value) in [
            ("backoffLimitPerIndex", per_index),
            ("maxFailedIndexes", max_failed),
        ] {
            if let Some(n) = value {
                causes.push(Cause::invalid(
                    format!("{path}.{key}"),
                    &json!(n),
                    "requires indexed completion mode",
                ));
            }
        }
    }
    if let Some(policy) = spec.get("podFailurePolicy").filter(|p| !p.is_null()) {
        pod_failure_policy(spec, policy, &format!("{path}.podFailurePolicy"), causes);
    }
    if let Some(policy) = spec.get("successPolicy").filter(|p| !p.is_null()) {
        let field = format!("{path}.successPolicy");
        if indexed {
            success_policy(policy, completions.unwrap_or(0), &field, causes);
        } else {
            causes.push(Cause::invalid(
                field,
                policy,
                "requires indexed completion mode",
            ));
        }
    }
}

fn indexed_limits(
    path: &str,
    completions: Option<i64>,
    parallelism: Option<i64>,
    per_index: Option<i64>,
    max_failed: Option<i64>,
    causes: &mut Vec<Cause>,
) {
    let invalid = |key: &str, n: i64, detail: &str| {
        Cause::invalid(format!("{path}.{key}"), &json!(n), detail)
    };
    if completions.is_none() {
        causes.push(required(
            format!("{path}.completions"),
            "when completion mode is Indexed",
        ));
    }
    if let Some(p) = parallelism.filter(|p| *p > MAX_INDEXED) {
        let detail =
            format!("must be less than or equal to {MAX_INDEXED} when completion mode is Indexed");
        causes.push(invalid("parallelism", p, &detail));
    }
    if let (Some(c), Some(m)) = (completions, max_failed)
        && m > c
    {
        causes.push(invalid(
            "maxFailedIndexes",
            m,
            "must be less than or equal to completions",
        ));
    }
    if let Some(m) = max_failed.filter(|m| *m > MAX_INDEXED) {
        let detail = format!("must be less than or equal to {MAX_INDEXED}");
        causes.push(invalid("maxFailedIndexes", m, &detail));
    }
    if completions.is_some_and(|c| c > COMPLETIONS_SOFT_LIMIT) && per_index.is_some() {
        let beyond = format!(
            "must be less than or equal to {LIMIT_FOR_HIGH_COMPLETIONS} when completions are above {COMPLETIONS_SOFT_LIMIT} and used with backoff limit per index"
        );
        if max_failed.is_none() {
            causes.push(required(
                format!("{path}.maxFailedIndexes"),
                &format!("must be specified when completions is above {COMPLETIONS_SOFT_LIMIT}"),
            ));
        }
        if let Some(p) = parallelism.filter(|p| *p > LIMIT_FOR_HIGH_COMPLETIONS) {
            causes.push(invalid("parallelism", p, &beyond));
        }
        if let Some(m) = max_failed.filter(|m| *m > LIMIT_FOR_HIGH_COMPLETIONS) {
            causes.push(invalid("maxFailedIndexes", m, &beyond));
        }
    }
}

fn pod_failure_policy(spec: &Value, policy: &Value, path: &str, causes: &mut Vec<Cause>) {
    let rules = policy
        .get("rules")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    if rules.len() > MAX_POLICY_RULES {
        causes.push(too_many(
            format!("{path}.rules"),
            rules.len(),
            MAX_POLICY_RULES,
        ));
    }
    let per_index = spec
        .get("backoffLimitPerIndex")
        .is_some_and(|v| !v.is_null());
    for (i, rule) in rules.iter().enumerate() {
        let rule_path = format!("{path}.rules[{i}]");
        let action_path = format!("{rule_path}.action");
        match rule.get("action").and_then(Value::as_str) {
            None | Some("") => causes.push(required(
                action_path,
                "valid values: [\"Count\" \"FailIndex\" \"FailJob\" \"Ignore\"]",
            )),
            Some("FailIndex") if !per_index => causes.push(Cause::invalid(
                action_path,
                &json!("FailIndex"),
                "requires the backoffLimitPerIndex to be set",
            )),
            Some(action) if !ACTIONS.contains(&action) => {
                causes.push(Cause::not_supported(action_path, &json!(action), ACTIONS))
            }
            Some(_) => {}
        }
        let exit_codes = rule.get("onExitCodes").filter(|v| !v.is_null());
        let conditions = rule
            .get("onPodConditions")
            .and_then(Value::as_array)
            .is_some_and(|c| !c.is_empty());
        if let Some(codes) = exit_codes {
            on_exit_codes(codes, &format!("{rule_path}.onExitCodes"), causes);
        }
        match (exit_codes.is_some(), conditions) {
            (true, true) => causes.push(Cause::new(
                "FieldValueInvalid",
                rule_path,
                "Invalid value: specifying both OnExitCodes and OnPodConditions is not supported",
            )),
            (false, false) => causes.push(Cause::new(
                "FieldValueInvalid",
                rule_path,
                "Invalid value: specifying one of OnExitCodes and OnPodConditions is required",
            )),
            _ => {}
        }
    }
}

fn on_exit_codes(codes: &Value, path: &str, causes: &mut Vec<Cause>) {
    let operator = codes.get("operator").and_then(Value::as_str);
    match operator {
        None | Some("") => causes.push(required(
            format!("{path}.operator"),
            "valid values: [\"In\" \"NotIn\"]",
        )),
        Some("In" | "NotIn") => {}
        Some(other) => causes.push(Cause::not_supported(
            format!("{path}.operator"),
            &json!(other),
            &["In", "NotIn"],
        )),
    }
    let values: Vec<i64> = codes
        .get("values")
        .and_then(Value::as_array)
        .map(|v| v.iter().filter_map(Value::as_i64).collect())
        .unwrap_or_default();
    let values_path = format!("{path}.values");
    if values.is_empty() {
        causes.push(Cause::invalid(
            values_path.clone(),
            &json!(values),
            "at least one value is required",
        ));
    } else if values.len() > MAX_EXIT_CODES {
        causes.push(too_many(values_path.clone(), values.len(), MAX_EXIT_CODES));
    }
    for (j, &v) in values.iter().enumerate() {
        if operator == Some("In") && v == 0 {
            causes.push(Cause::invalid(
                format!("{values_path}[{j}]"),
                &json!(v),
                "must not be 0 for the In operator",
            ));
        }
        if values[..j].contains(&v) {
            causes.push(Cause::duplicate(format!("{values_path}[{j}]"), &json!(v)));
        }
    }
    if values.windows(2).any(|w| w[0] > w[1]) {
        causes.push(Cause::invalid(
            values_path,
            &json!(values),
            "must be ordered",
        ));
    }
}

fn success_policy(policy: &Value, completions: i64, path: &str, causes: &mut Vec<Cause>) {
    let rules = policy
        .get("rules")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    if rules.is_empty() {
        causes.push(required(
            format!("{path}.rules"),
            "at least one rules must be specified when the successPolicy is specified",
        ));
    }
    if rules.len() > MAX_POLICY_RULES {
        causes.push(too_many(
            format!("{path}.rules"),
            rules.len(),
            MAX_POLICY_RULES,
        ));
    }
    for (i, rule) in rules.iter().enumerate() {
        let rule_path = format!("{path}.rules[{i}]");
        let indexes = rule.get("succeededIndexes").and_then(Value::as_str);
        let count = rule.get("succeededCount").and_then(Value::as_i64);
        if indexes.is_none() && count.is_none() {
            causes.push(required(
                rule_path.clone(),
                "at least one of succeededCount or succeededIndexes must be specified",
            ));
        }
        let mut total = 0;
        if let Some(text) = indexes {
            let field = format!("{rule_path}.succeededIndexes");
            if text.len() > MAX_SUCCEEDED_INDEXES_LENGTH {
                causes.push(Cause::new(
                    "FieldValueTooLong",
                    field.clone(),
                    format!("Too long: may not be more than {MAX_SUCCEEDED_INDEXES_LENGTH} bytes"),
                ));
            }
            match indexes_total(text, completions) {
                Ok(n) => total = n,
                Err(e) => causes.push(Cause::invalid(
                    field,
                    &json!(text),
                    &format!("error parsing succeededIndexes: {e}"),
                )),
            }
        }
        if let Some(count) = count {
            let field = format!("{rule_path}.succeededCount");
            if count < 0 {
                causes.push(Cause::invalid(
                    field.clone(),
                    &json!(count),
                    "must be greater than or equal to 0",
                ));
            }
            if count > completions {
                let detail = format!(
                    "must be less than or equal to {completions} (the number of specified completions)"
                );
                causes.push(Cause::invalid(field.clone(), &json!(count), &detail));
            }
            if indexes.is_some() && count > total {
                let detail = format!(
                    "must be less than or equal to {total} (the number of indexes in the specified succeededIndexes field)"
                );
                causes.push(Cause::invalid(field, &json!(count), &detail));
            }
        }
    }
}

/// How many indexes `text` names, each below `completions`, in increasing
/// order (upstream's `validateIndexesFormat`).
fn indexes_total(text: &str, completions: i64) -> Result<i64, String> {
    if text.is_empty() {
        return Ok(0);
    }
    let mut last: Option<i64> = None;
    let mut total = 0;
    for interval in text.split(',') {
        let (first, end) = index_interval(interval, completions)?;
        if let Some(previous) = last.filter(|l| *l >= first) {
            return Err(format!(
                "non-increasing order, previous: {previous}, current: {first}"
            ));
        }
        total += end - first + 1;
        last = Some(end);
    }
    Ok(total)
}

fn index_interval(interval: &str, completions: i64) -> Result<(i64, i64), String> {
    let parts: Vec<&str> = interval.split('-').collect();
    if parts.len() > 2 {
        return Err(format!(
            "the fragment {interval:?} violates the requirement that an index interval can have at most two parts separated by '-'"
        ));
    }
    let index = |s: &str| -> Result<i64, String> {
        let n: i64 = s
            .parse()
            .map_err(|_| format!("cannot convert string to integer for index: {s:?}"))?;
        if n >= completions {
            return Err(format!("too large index: {s:?}"));
        }
        Ok(n)
    };
    let first = index(parts[0])?;
    let Some(second) = parts.get(1) else {
        return Ok((first, first));
    };
    let end = index(second)?;
    if first >= end {
        return Err(format!(
            "non-increasing order, previous: {first}, current: {end}"
        ));
    }
    Ok((first, end))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn causes_of(s: Value) -> Vec<(String, String)> {
        let mut causes = Vec::new();
        spec(Some(&s), "spec", &mut causes);
        causes.into_iter().map(|c| (c.field, c.message)).collect()
    }

    fn fields_of(s: Value) -> Vec<String> {
        causes_of(s).into_iter().map(|c| c.0).collect()
    }

    #[test]
    fn per_index_fields_need_an_indexed_job_and_fit_its_completions() {
        assert!(
            fields_of(json!({"completionMode": "Indexed", "completions": 4,
            "backoffLimitPerIndex": 1, "maxFailedIndexes": 4}))
            .is_empty()
        );
        assert_eq!(
            causes_of(json!({"backoffLimitPerIndex": 1, "maxFailedIndexes": 2})),
            [
                (
                    "spec.backoffLimitPerIndex".to_string(),
                    "Invalid value: 1: requires indexed completion mode".to_string()
                ),
                (
                    "spec.maxFailedIndexes".into(),
                    "Invalid value: 2: requires indexed completion mode".into()
                ),
            ]
        );
        assert_eq!(
            causes_of(json!({"completionMode": "Indexed", "completions": 2,
                "backoffLimitPerIndex": 1, "maxFailedIndexes": 3})),
            [(
                "spec.maxFailedIndexes".to_string(),
                "Invalid value: 3: must be less than or equal to completions".to_string()
            )]
        );
        assert_eq!(
            causes_of(
                json!({"completionMode": "Indexed", "completions": 2, "maxFailedIndexes": 1})
            ),
            [(
                "spec.backoffLimitPerIndex".to_string(),
                "Required value: when maxFailedIndexes is specified".to_string()
            )]
        );
        assert_eq!(
            fields_of(json!({"completionMode": "Indexed", "completions": 200000,
                "parallelism": 20000, "backoffLimitPerIndex": 1})),
            ["spec.maxFailedIndexes", "spec.parallelism"]
        );
        assert_eq!(
            fields_of(json!({"completionMode": "Indexed", "backoffLimitPerIndex": -1})),
            ["spec.backoffLimitPerIndex", "spec.completions"]
        );
        assert_eq!(
            fields_of(json!({"completionMode": "Sometimes"})),
            ["spec.completionMode"]
        );
    }

    #[test]
    fn fail_index_needs_a_backoff_limit_per_index() {
        let policy = json!({"rules": [
            {"action": "FailIndex", "onExitCodes": {"operator": "In", "values": [1, 2]}},
            {"action": "Restart", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]},
            {"action": "Ignore"},
            {"action": "Count", "onExitCodes": {"operator": "In", "values": [3, 0, 3]}},
        ]});
        assert_eq!(
            causes_of(json!({"podFailurePolicy": policy})),
            [
                (
                    "spec.podFailurePolicy.rules[0].action".to_string(),
                    r#"Invalid value: "FailIndex": requires the backoffLimitPerIndex to be set"#
                        .to_string()
                ),
                (
                    "spec.podFailurePolicy.rules[1].action".into(),
                    r#"Unsupported value: "Restart": supported values: "Count", "FailIndex", "FailJob", "Ignore""#.into()
                ),
                (
                    "spec.podFailurePolicy.rules[2]".into(),
                    "Invalid value: specifying one of OnExitCodes and OnPodConditions is required"
                        .into()
                ),
                (
                    "spec.podFailurePolicy.rules[3].onExitCodes.values[1]".into(),
                    "Invalid value: 0: must not be 0 for the In operator".into()
                ),
                (
                    "spec.podFailurePolicy.rules[3].onExitCodes.values[2]".into(),
                    "Duplicate value: 3".into()
                ),
                (
                    "spec.podFailurePolicy.rules[3].onExitCodes.values".into(),
                    "Invalid value: [3,0,3]: must be ordered".into()
                ),
            ]
        );
        let fine = json!({"completionMode": "Indexed", "completions": 2, "backoffLimitPerIndex": 0,
            "podFailurePolicy": {"rules": [{"action": "FailIndex", "onExitCodes": {"operator": "In", "values": [1]}}]}});
        assert!(fields_of(fine).is_empty());
    }

    #[test]
    fn a_success_policy_needs_an_indexed_job_and_indexes_it_has() {
        let rules = |rules: Value| {
            causes_of(json!({"completionMode": "Indexed", "completions": 5,
                "successPolicy": {"rules": rules}}))
        };
        assert!(rules(json!([{"succeededIndexes": "0,2-4", "succeededCount": 4}])).is_empty());
        assert_eq!(
            causes_of(json!({"successPolicy": {"rules": [{"succeededCount": 1}]}}))[0].1,
            r#"Invalid value: {"rules":[{"succeededCount":1}]}: requires indexed completion mode"#
        );
        assert_eq!(
            rules(json!([])),
            [(
                "spec.successPolicy.rules".to_string(),
                "Required value: at least one rules must be specified when the successPolicy is specified".to_string()
            )]
        );
        assert_eq!(
            rules(json!([{}, {"succeededIndexes": "3-1"}, {"succeededIndexes": "1,7"},
                {"succeededIndexes": "0-1", "succeededCount": 3}])),
            [
                (
                    "spec.successPolicy.rules[0]".to_string(),
                    "Required value: at least one of succeededCount or succeededIndexes must be specified".to_string()
                ),
                (
                    "spec.successPolicy.rules[1].succeededIndexes".into(),
                    r#"Invalid value: "3-1": error parsing succeededIndexes: non-increasing order, previous: 3, current: 1"#.into()
                ),
                (
                    "spec.successPolicy.rules[2].succeededIndexes".into(),
                    r#"Invalid value: "1,7": error parsing succeededIndexes: too large index: "7""#.into()
                ),
                (
                    "spec.successPolicy.rules[3].succeededCount".into(),
                    "Invalid value: 3: must be less than or equal to 2 (the number of indexes in the specified succeededIndexes field)".into()
                ),
            ]
        );
        assert_eq!(
            rules(json!([{"succeededCount": 6}]))[0].1,
            "Invalid value: 6: must be less than or equal to 5 (the number of specified completions)"
        );
    }
}
