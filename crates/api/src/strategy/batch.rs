//! The strategies of batch/v1 (`pkg/registry/batch/*`).

use super::{GENERIC, Propagation, Strategy};
use crate::table::workloads as print;
use crate::validation::workloads;
use crate::{defaults, update};

pub static CRON_JOB: Strategy = Strategy {
    defaults: defaults::cron_job,
    validate: workloads::cron_job,
    printer: Some(print::cron_job),
    ..GENERIC
};

/// batch/v1 orphans a Job's pods unless told otherwise, for compatibility
/// (upstream warns about it; `kubectl delete` asks for Background).
pub static JOB: Strategy = Strategy {
    defaults: defaults::job,
    on_create: defaults::job_selector,
    validate: workloads::job,
    update_rules: Some(update::job),
    printer: Some(print::job),
    field_selectors: &["status.successful"],
    default_propagation: Some(Propagation::Orphan),
    ..GENERIC
};
