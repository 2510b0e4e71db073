//! Printers of workload kinds: apps, batch, autoscaling and policy.

use serde_json::{Value, json};

use super::read::{
    SELECTOR, age, arr, bool_at, bool_text, condition_true, containers, deleting, int_at,
    label_selector, labels, name, present, since, text_at,
};
use super::{Cell, col};
use crate::json::str_at;
use crate::time::{human_duration, parse_rfc3339};

/// Name, Desired, Current, Ready, Age: ReplicaSets and ReplicationControllers.
fn replica_counts(o: &Value, now: i64) -> Vec<Cell> {
    vec![
        name(o),
        (
            col(
                "Desired",
                "integer",
                "Replicas is the number of desired replicas.",
            ),
            json!(int_at(o, "/spec/replicas")),
        ),
        (
            col(
                "Current",
                "integer",
                "Replicas is the most recently observed number of replicas.",
            ),
            json!(int_at(o, "/status/replicas")),
        ),
        (
            col(
                "Ready",
                "integer",
                "The number of ready replicas for this replica set.",
            ),
            json!(int_at(o, "/status/readyReplicas")),
        ),
        age(o, now),
    ]
}

pub(crate) fn replication_controller(o: &Value, now: i64) -> Vec<Cell> {
    let mut row = replica_counts(o, now);
    row.extend(containers(o, "/spec/template/spec/containers"));
    row.push((SELECTOR, json!(labels(o.pointer("/spec/selector")))));
    row
}

pub(crate) fn replica_set(o: &Value, now: i64) -> Vec<Cell> {
    let mut row = replica_counts(o, now);
    row.extend(containers(o, "/spec/template/spec/containers"));
    row.push((SELECTOR, json!(label_selector(o.pointer("/spec/selector")))));
    row
}

/// `ready/desired`.
fn ready_of(o: &Value) -> String {
    let ready = int_at(o, "/status/readyReplicas");
    format!("{ready}/{}", int_at(o, "/spec/replicas"))
}

pub(crate) fn deployment(o: &Value, now: i64) -> Vec<Cell> {
    let mut row = vec![
        name(o),
        (
            col("Ready", "string", "Number of the pod with ready state"),
            json!(ready_of(o)),
        ),
        (
            col(
                "Up-to-date",
                "string",
                "Total number of non-terminated pods targeted by this deployment that have the desired template spec.",
            ),
            json!(int_at(o, "/status/updatedReplicas")),
        ),
        (
            col(
                "Available",
                "string",
                "Total number of available pods (ready for at least minReadySeconds) targeted by this deployment.",
            ),
            json!(int_at(o, "/status/availableReplicas")),
        ),
        age(o, now),
    ];
    row.extend(containers(o, "/spec/template/spec/containers"));
    row.push((SELECTOR, json!(label_selector(o.pointer("/spec/selector")))));
    row
}

pub(crate) fn stateful_set(o: &Value, now: i64) -> Vec<Cell> {
    let mut row = vec![
        name(o),
        (
            col("Ready", "string", "Number of the pod with ready state"),
            json!(ready_of(o)),
        ),
        age(o, now),
    ];
    row.extend(containers(o, "/spec/template/spec/containers"));
    row
}

pub(crate) fn daemon_set(o: &Value, now: i64) -> Vec<Cell> {
    let mut row = vec![
        name(o),
        (
            col(
                "Desired",
                "integer",
                "The total number of nodes that should be running the daemon pod.",
            ),
            json!(int_at(o, "/status/desiredNumberScheduled")),
        ),
        (
            col(
                "Current",
                "integer",
                "The number of nodes that are running at least 1 daemon pod and are supposed to run the daemon pod.",
            ),
            json!(int_at(o, "/status/currentNumberScheduled")),
        ),
        (
            col(
                "Ready",
                "integer",
                "The number of nodes that should be running the daemon pod and have one or more of the daemon pod running and ready.",
            ),
            json!(int_at(o, "/status/numberReady")),
        ),
        (
            col(
                "Up-to-date",
                "integer",
                "The total number of nodes that are running updated daemon pod",
            ),
            json!(int_at(o, "/status/updatedNumberScheduled")),
        ),
        (
            col(
                "Available",
                "integer",
                "The number of nodes that should be running the daemon pod and have one or more of the daemon pod running and available.",
            ),
            json!(int_at(o, "/status/numberAvailable")),
        ),
        (
            col(
                "Node Selector",
                "string",
                "NodeSelector is a selector which must be true for the pod to fit on a node.",
            ),
            json!(labels(o.pointer("/spec/template/spec/nodeSelector"))),
        ),
        age(o, now),
    ];
    row.extend(containers(o, "/spec/template/spec/containers"));
    row.push((SELECTOR, json!(label_selector(o.pointer("/spec/selector")))));
    row
}

pub(crate) fn controller_revision(o: &Value, now: i64) -> Vec<Cell> {
    let controller = arr(o, "/metadata/ownerReferences")
        .iter()
        .find(|r| bool_at(r, "/controller", false))
        .map_or("<none>".to_string(), |r| {
            let group = str_at(r, "/apiVersion")
                .rsplit_once('/')
                .map_or("", |(g, _)| g);
            let kind = match group {
                "" => str_at(r, "/kind").to_string(),
                group => format!("{}.{group}", str_at(r, "/kind")),
            };
            format!("{}/{}", kind.to_lowercase(), str_at(r, "/name"))
        });
    vec![
        name(o),
        (
            col("Controller", "string", "Controller of the object"),
            json!(controller),
        ),
        (
            col(
                "Revision",
                "string",
                "Revision indicates the revision of the state represented by Data.",
            ),
            json!(int_at(o, "/revision")),
        ),
        age(o, now),
    ]
}

pub(crate) fn job(o: &Value, now: i64) -> Vec<Cell> {
    let succeeded = int_at(o, "/status/succeeded");
    let completions = match int_at(o, "/spec/parallelism") {
        _ if present(o, "/spec/completions") => {
            format!("{succeeded}/{}", int_at(o, "/spec/completions"))
        }
        p if p > 1 => format!("{succeeded}/1 of {p}"),
        _ => format!("{succeeded}/1"),
    };
    let duration = match (
        parse_rfc3339(str_at(o, "/status/startTime")),
        parse_rfc3339(str_at(o, "/status/completionTime")),
    ) {
        (Some(start), Some(end)) => human_duration(end - start),
        (Some(start), None) => human_duration(now - start),
        _ => String::new(),
    };
    let has = |t: &str| condition_true(o, "/status/conditions", t);
    let status = if has("Complete") {
        "Complete"
    } else if has("Failed") {
        "Failed"
    } else if deleting(o) {
        "Terminating"
    } else if has("Suspended") {
        "Suspended"
    } else if has("FailureTarget") {
        "FailureTarget"
    } else {
        "Running"
    };
    let mut row = vec![
        name(o),
        (col("Status", "string", "Status of the job."), json!(status)),
        (
            col(
                "Completions",
                "string",
                "The number of pods which reached phase Succeeded.",
            ),
            json!(completions),
        ),
        (
            col("Duration", "string", "Time required to complete the job."),
            json!(duration),
        ),
        age(o, now),
    ];
    row.extend(containers(o, "/spec/template/spec/containers"));
    row.push((SELECTOR, json!(label_selector(o.pointer("/spec/selector")))));
    row
}

pub(crate) fn cron_job(o: &Value, now: i64) -> Vec<Cell> {
    let timezone = o.pointer("/spec/timeZone").and_then(Value::as_str);
    let suspend = o.pointer("/spec/suspend").and_then(Value::as_bool);
    let last = since(o, "/status/lastScheduleTime", now);
    let mut row = vec![
        name(o),
        (
            col(
                "Schedule",
                "string",
                "The schedule in Cron format, see https://en.wikipedia.org/wiki/Cron.",
            ),
            json!(str_at(o, "/spec/schedule")),
        ),
        (
            col(
                "Timezone",
                "string",
                "The time zone name for the given schedule.",
            ),
            json!(timezone.unwrap_or("<none>")),
        ),
        (
            col(
                "Suspend",
                "boolean",
                "This flag tells the controller to suspend subsequent executions.",
            ),
            json!(bool_text(suspend)),
        ),
        (
            col(
                "Active",
                "integer",
                "A list of pointers to currently running jobs.",
            ),
            json!(arr(o, "/status/active").len()),
        ),
        (
            col(
                "Last Schedule",
                "string",
                "Information when was the last time the job was successfully scheduled.",
            ),
            json!(last.unwrap_or_else(|| "<none>".into())),
        ),
        age(o, now),
    ];
    row.extend(containers(
        o,
        "/spec/jobTemplate/spec/template/spec/containers",
    ));
    let selector = label_selector(o.pointer("/spec/jobTemplate/spec/selector"));
    row.push((SELECTOR, json!(selector)));
    row
}

/// One metric of an HPA (autoscaling/v2 shapes) as `current/target`.
fn hpa_metric(spec: &Value, status: Option<&Value>) -> String {
    let kind = str_at(spec, "/type");
    let source = match kind {
        "External" => "external",
        "Pods" => "pods",
        "Object" => "object",
        "Resource" => "resource",
        "ContainerResource" => "containerResource",
        _ => return "<unknown type>".into(),
    };
    let target = spec.get(source).unwrap_or(&Value::Null);
    let current = status.and_then(|s| s.get(source)).filter(|c| !c.is_null());
    let current_at = |p: &str| {
        current
            .and_then(|c| text_at(c, p))
            .unwrap_or_else(|| "<unknown>".into())
    };
    let target_at = |p: &str| text_at(target, p).unwrap_or_default();
    let average = present(target, "/target/averageValue");
    match kind {
        "Pods" => format!(
            "{}/{}",
            current_at("/current/averageValue"),
            target_at("/target/averageValue")
        ),
        "External" | "Object" if average => format!(
            "{}/{} (avg)",
            current_at("/current/averageValue"),
            target_at("/target/averageValue")
        ),
        "External" | "Object" => format!(
            "{}/{}",
            current_at("/current/value"),
            target_at("/target/value")
        ),
        _ if average => format!(
            "{}: {}/{}",
            str_at(target, "/name"),
            current_at("/current/averageValue"),
            target_at("/target/averageValue")
        ),
        _ => {
            let percent = |v: Option<&Value>, p: &str| {
                let n = v.and_then(|v| v.pointer(p)).and_then(Value::as_i64);
                n.map(|n| format!("{n}%"))
            };
            format!(
                "{}: {}/{}",
                str_at(target, "/name"),
                percent(current, "/current/averageUtilization")
                    .unwrap_or_else(|| "<unknown>".into()),
                percent(Some(target), "/target/averageUtilization")
                    .unwrap_or_else(|| "<auto>".into())
            )
        }
    }
}

/// The Targets cell: autoscaling/v2 metrics, or autoscaling/v1's CPU target.
fn hpa_targets(o: &Value) -> String {
    const MAX: usize = 2;
    if present(o, "/spec/targetCPUUtilizationPercentage") {
        let current = o
            .pointer("/status/currentCPUUtilizationPercentage")
            .and_then(Value::as_i64)
            .map_or("<unknown>".to_string(), |n| format!("{n}%"));
        let target = int_at(o, "/spec/targetCPUUtilizationPercentage");
        return format!("cpu: {current}/{target}%");
    }
    let statuses = arr(o, "/status/currentMetrics");
    let list: Vec<String> = arr(o, "/spec/metrics")
        .iter()
        .enumerate()
        .map(|(i, spec)| hpa_metric(spec, statuses.get(i)))
        .collect();
    match list.len() {
        0 => "<none>".to_string(),
        n if n > MAX => format!("{} + {} more...", list[..MAX].join(", "), n - MAX),
        _ => list.join(", "),
    }
}

pub(crate) fn horizontal_pod_autoscaler(o: &Value, now: i64) -> Vec<Cell> {
    let reference = format!(
        "{}/{}",
        str_at(o, "/spec/scaleTargetRef/kind"),
        str_at(o, "/spec/scaleTargetRef/name")
    );
    let min = o.pointer("/spec/minReplicas").and_then(Value::as_i64);
    vec![
        name(o),
        (
            col(
                "Reference",
                "string",
                "reference to scaled resource; horizontal pod autoscaler will learn the current resource consumption and will set the desired number of pods by using its Scale subresource.",
            ),
            json!(reference),
        ),
        (
            col(
                "Targets",
                "string",
                "metrics contains the specifications for which to use to calculate the desired replica count.",
            ),
            json!(hpa_targets(o)),
        ),
        (
            col(
                "MinPods",
                "string",
                "minReplicas is the lower limit for the number of replicas to which the autoscaler can scale down.",
            ),
            json!(min.map_or("<unset>".to_string(), |n| n.to_string())),
        ),
        (
            col(
                "MaxPods",
                "string",
                "maxReplicas is the upper limit for the number of pods that can be set by the autoscaler.",
            ),
            json!(int_at(o, "/spec/maxReplicas")),
        ),
        (
            col(
                "Replicas",
                "string",
                "currentReplicas is current number of replicas of pods managed by this autoscaler.",
            ),
            json!(int_at(o, "/status/currentReplicas")),
        ),
        age(o, now),
    ]
}

pub(crate) fn pod_disruption_budget(o: &Value, now: i64) -> Vec<Cell> {
    let or_na = |p: &str| text_at(o, p).unwrap_or_else(|| "N/A".into());
    vec![
        name(o),
        (
            col(
                "Min Available",
                "string",
                "The minimum number of pods that must be available.",
            ),
            json!(or_na("/spec/minAvailable")),
        ),
        (
            col(
                "Max Unavailable",
                "string",
                "The maximum number of pods that may be unavailable.",
            ),
            json!(or_na("/spec/maxUnavailable")),
        ),
        (
            col(
                "Allowed Disruptions",
                "integer",
                "Calculated number of pods that may be disrupted at this time.",
            ),
            json!(int_at(o, "/status/disruptionsAllowed")),
        ),
        age(o, now),
    ]
}
