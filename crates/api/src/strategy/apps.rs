//! The strategies of apps/v1 (`pkg/registry/apps/*`). Every kind deletes
//! its dependents in the background: only the retired `extensions/v1beta1`,
//! `apps/v1beta1` and `apps/v1beta2` orphaned them by default.

use super::{GENERIC, Strategy};
use crate::table::workloads as print;
use crate::validation::workloads;
use crate::{defaults, update};

pub static CONTROLLER_REVISION: Strategy = Strategy {
    update_rules: Some(update::controller_revision),
    printer: Some(print::controller_revision),
    ..GENERIC
};

pub static DAEMON_SET: Strategy = Strategy {
    defaults: defaults::daemon_set,
    validate: workloads::workload,
    update_rules: Some(update::workload_selector),
    printer: Some(print::daemon_set),
    ..GENERIC
};

pub static DEPLOYMENT: Strategy = Strategy {
    defaults: defaults::deployment,
    validate: workloads::workload,
    update_rules: Some(update::workload_selector),
    printer: Some(print::deployment),
    ..GENERIC
};

pub static REPLICA_SET: Strategy = Strategy {
    defaults: defaults::replica_set,
    validate: workloads::workload,
    update_rules: Some(update::workload_selector),
    printer: Some(print::replica_set),
    field_selectors: &["status.replicas"],
    ..GENERIC
};

pub static STATEFUL_SET: Strategy = Strategy {
    defaults: defaults::stateful_set,
    validate: workloads::workload,
    update_rules: Some(update::stateful_set),
    printer: Some(print::stateful_set),
    ..GENERIC
};
