//! What upstream requires of Pods and of the controllers of pod templates
//! (`ValidatePodCreate`, `ValidateDeployment`, `ValidateReplicaSet`,
//! `ValidateStatefulSet`, `ValidateDaemonSet`,
//! `ValidateReplicationController`, `ValidateJob`, `ValidateCronJob`): a
//! valid pod spec, a selector that selects the template's labels, and the
//! restart policies each controller allows.

use serde_json::Value;

use super::pod;
use crate::Cause;
use crate::selector::label_selector_matches;

pub(crate) fn pod(object: &Value, causes: &mut Vec<Cause>) {
    pod::spec(object.get("spec"), "spec", causes);
}

/// What a new Pod may not carry (`ValidatePodCreate`): ephemeral
/// containers, which only `pods/<name>/ephemeralcontainers` adds.
pub(crate) fn pod_create(object: &Value, causes: &mut Vec<Cause>) {
    if object
        .pointer("/spec/ephemeralContainers")
        .and_then(Value::as_array)
        .is_some_and(|l| !l.is_empty())
    {
        causes.push(Cause::forbidden(
            "spec.ephemeralContainers",
            "cannot be set on create",
        ));
    }
}

/// A Deployment, ReplicaSet, StatefulSet or DaemonSet.
pub(crate) fn workload(object: &Value, causes: &mut Vec<Cause>) {
    selector(object, causes);
    pod::spec(
        object.pointer("/spec/template/spec"),
        "spec.template.spec",
        causes,
    );
    template_ephemeral_containers(object, "/spec/template", causes);
    template_restart_policy(object, "/spec/template", &["Always"], causes);
}

pub(crate) fn replication_controller(object: &Value, causes: &mut Vec<Cause>) {
    let template = object.pointer("/spec/template/spec");
    pod::spec(template, "spec.template.spec", causes);
    template_ephemeral_containers(object, "/spec/template", causes);
}

pub(crate) fn job(object: &Value, causes: &mut Vec<Cause>) {
    super::job::spec(object.get("spec"), "spec", causes);
    let template = object.pointer("/spec/template/spec");
    pod::spec(template, "spec.template.spec", causes);
    template_ephemeral_containers(object, "/spec/template", causes);
    template_restart_policy(object, "/spec/template", &["OnFailure", "Never"], causes);
}

pub(crate) fn cron_job(object: &Value, causes: &mut Vec<Cause>) {
    if object
        .pointer("/spec/schedule")
        .and_then(Value::as_str)
        .is_none_or(str::is_empty)
    {
        causes.push(Cause::required("spec.schedule"));
    }
    let job = object.pointer("/spec/jobTemplate/spec");
    super::job::spec(job, "spec.jobTemplate.spec", causes);
    let template = "/spec/jobTemplate/spec/template";
    let spec = object.pointer(&format!("{template}/spec"));
    pod::spec(spec, "spec.jobTemplate.spec.template.spec", causes);
    template_ephemeral_containers(object, template, causes);
    template_restart_policy(object, template, &["OnFailure", "Never"], causes);
}

/// The restart policies a controller's pod template (at `template`, a
/// JSON pointer) may have.
/// A pod template takes no ephemeral containers (`ValidatePodTemplateSpec`).
fn template_ephemeral_containers(object: &Value, template: &str, causes: &mut Vec<Cause>) {
    let list = object.pointer(&format!("{template}/spec/ephemeralContainers"));
    if list
        .and_then(Value::as_array)
        .is_some_and(|l| !l.is_empty())
    {
        let path = format!(
            "{}.spec.ephemeralContainers",
            template[1..].replace('/', ".")
        );
        causes.push(Cause::forbidden(
            path,
            "ephemeral containers not allowed in pod template",
        ));
    }
}

fn template_restart_policy(
    object: &Value,
    template: &str,
    allowed: &[&str],
    causes: &mut Vec<Cause>,
) {
    let policy = object.pointer(&format!("{template}/spec/restartPolicy"));
    let path = format!("{}.spec.restartPolicy", template[1..].replace('/', "."));
    super::one_of(policy, path, allowed, causes);
}

/// A workload's selector: present, not empty, selecting its template.
fn selector(object: &Value, causes: &mut Vec<Cause>) {
    let selector = object.pointer("/spec/selector");
    match selector {
        None | Some(Value::Null) => causes.push(Cause::required("spec.selector")),
        Some(selector) => {
            let labels = object.pointer("/spec/template/metadata/labels");
            if !label_selector_matches(selector, labels) {
                causes.push(Cause::invalid(
                    "spec.template.metadata.labels",
                    labels.unwrap_or(&Value::Null),
                    "`selector` does not match template `labels`",
                ));
            }
            if selector.get("matchLabels").is_none() && selector.get("matchExpressions").is_none() {
                causes.push(Cause::invalid(
                    "spec.selector",
                    selector,
                    "empty selector is invalid for deployment",
                ));
            }
        }
    }
}
