//! SchedulingGates: a pod with `spec.schedulingGates` waits outside the
//! active queue until every gate is removed.

use k8s_openapi::api::core::v1::Pod;

use crate::framework::{Plugin, PreEnqueue, Status};

pub const NAME: &str = "SchedulingGates";

#[derive(Debug, Default)]
pub struct SchedulingGates;

impl Plugin for SchedulingGates {
    fn name(&self) -> &'static str {
        NAME
    }
}

impl PreEnqueue for SchedulingGates {
    fn pre_enqueue(&self, pod: &Pod) -> Status {
        let gates: Vec<&str> = pod
            .spec
            .as_ref()
            .and_then(|s| s.scheduling_gates.as_ref())
            .into_iter()
            .flatten()
            .map(|g| g.name.as_str())
            .collect();
        if gates.is_empty() {
            Status::success()
        } else {
            Status::unresolvable(format!(
                "waiting for scheduling gates: [{}]",
                gates.join(" ")
            ))
        }
    }
}
