//! What is particular to each kind, in one value per kind — upstream's
//! per-kind REST strategy (`pkg/registry/<group>/<resource>/strategy.go`)
//! with the few settings of its `genericregistry.Store` (`storage.go`) that
//! the generic handlers need: how objects are named, defaulted, given what
//! only a create sets, validated, what an update may change, the Table
//! printer, the fields a selector may name, and how the kind is deleted.
//!
//! Every [`ResourceDef`](crate::ResourceDef) carries one; defaulting,
//! validation, update rules, Table output and field selectors all read it,
//! so no other module keeps a table of kinds. The functions a strategy names
//! live with their concern (`defaults.rs`, `validation/`, `update.rs`,
//! `table/`); the files here only assemble them, one static per kind with
//! anything particular (a static, so that the versions of a kind share one),
//! grouped as upstream groups its registries. Custom resources get
//! [`GENERIC`]: their definition's schema does the rest.

mod apps;
mod batch;
mod core;
mod others;

use serde_json::Value;

pub use self::{apps::*, batch::*, core::*, others::*};
use crate::Cause;
use crate::validation::NameRule;
use crate::{table, update};

/// Everything particular to one kind.
#[derive(Debug, Clone, Copy)]
pub struct Strategy {
    /// The rule `metadata.name` (and `generateName`) follows.
    pub name_rule: NameRule,
    /// Fills in what upstream defaults (`pkg/apis/<group>/<version>/defaults.go`).
    pub defaults: fn(&mut Value),
    /// What only a create sets, before defaulting (upstream's
    /// `PrepareForCreate` beyond status and generation: a Job's selector).
    pub on_create: fn(&mut Value),
    /// Appends what the kind requires beyond its metadata (upstream's
    /// `ValidateX`).
    pub validate: fn(&Value, &mut Vec<Cause>),
    /// Appends what only a create may not carry (upstream's
    /// `ValidateXCreate` beyond `ValidateX`: a Pod's ephemeral containers).
    pub validate_create: fn(&Value, &mut Vec<Cause>),
    /// What an update through the main resource may not change (upstream's
    /// `ValidateXUpdate`).
    pub update_rules: Option<update::Rules>,
    /// The Table columns upstream prints; `None`: Name and Created At.
    pub printer: Option<table::Printer>,
    /// The fields beyond `metadata.name` and `metadata.namespace` a field
    /// selector may name (upstream's field label conversion functions).
    pub field_selectors: &'static [&'static str],
    /// Whether a delete answers with the deleted object rather than a
    /// `Status` (the store's `ReturnDeletedObject`).
    pub returns_deleted: bool,
    /// What happens to dependents when a delete names no policy (the
    /// strategy's `DefaultGarbageCollectionPolicy` for the served version);
    /// `None` for a kind outside garbage collection (upstream's
    /// `rest.Unsupported`: no `orphan` or `foregroundDeletion` finalizer,
    /// whatever policy the request names).
    pub default_propagation: Option<Propagation>,
    /// For a kind deleted gracefully (pods): given the stored object and the
    /// request's `gracePeriodSeconds`, the grace period to use, 0 to delete
    /// at once (the strategy's `CheckGracefulDelete`).
    pub graceful_delete: Option<fn(&Value, Option<i64>) -> i64>,
    /// Which of the API server's storages serves the kind.
    pub rest: Rest,
    /// JSON pointers an update through the main endpoint cannot change
    /// (upstream's `PrepareForUpdate` puts them back): a Namespace's
    /// `spec.finalizers`, which only `namespaces/<name>/finalize` writes.
    pub kept_on_update: &'static [&'static str],
    /// What an update through one of the kind's subresources keeps of the
    /// stored object and may not change, beyond the generic status rules
    /// (upstream's per-subresource `PrepareForUpdate` and `ValidateUpdate`):
    /// given the subresource, the object written, the stored one and the
    /// time now, it adjusts the object and returns the causes refusing it.
    pub subresource_update: Option<SubresourceUpdate>,
    /// Records who creates an object, given the user's name and groups
    /// (upstream's `PrepareForCreate` reading the request's user).
    pub requester: Option<fn(&mut Value, &str, &[String])>,
    /// Whether a create keeps the status it is given although the status
    /// subresource owns it: a Node, which its kubelet registers with its
    /// capacity and conditions (upstream's node strategy does not reset it).
    pub keeps_status_on_create: bool,
}

/// See [`Strategy::subresource_update`].
pub type SubresourceUpdate = fn(&str, &mut Value, &Value, &str) -> Vec<Cause>;

/// Which storage serves a kind: the generic registry store, or one that
/// adds to it (upstream's per-resource REST storages).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rest {
    /// The generic registry store.
    Generic,
    /// Services: every write allocates (or frees) ClusterIPs and NodePorts.
    Service,
    /// Namespaces: a delete makes them `Terminating` until the namespace
    /// controller has emptied them and cleared `spec.finalizers`.
    Namespace,
    /// ComponentStatuses: computed on every read, never stored.
    ComponentStatus,
    /// The legacy `bindings`: a create binds the pod it names.
    Binding,
    /// TokenReview and SelfSubjectReview: a create is answered from the
    /// request (who a token or the caller is), never stored.
    Review,
}

/// A kind with nothing particular: no defaults, metadata validation only,
/// no update rules, the default Table, deleted at once and answered with a
/// `Status`, dependents deleted in the background.
pub const GENERIC: Strategy = Strategy {
    name_rule: NameRule::Subdomain,
    defaults: nothing,
    on_create: nothing,
    validate: valid,
    validate_create: valid,
    update_rules: None,
    printer: None,
    field_selectors: &[],
    returns_deleted: false,
    default_propagation: Some(Propagation::Background),
    graceful_delete: None,
    rest: Rest::Generic,
    kept_on_update: &[],
    subresource_update: None,
    requester: None,
    keeps_status_on_create: false,
};

fn nothing(_: &mut Value) {}

fn valid(_: &Value, _: &mut Vec<Cause>) {}

/// A deletion propagation policy (`DeleteOptions.propagationPolicy`): what
/// the garbage collector does with the dependents of a deleted object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Propagation {
    /// The object goes at once; its dependents are deleted afterwards.
    Background,
    /// The object stays, with the `foregroundDeletion` finalizer, until its
    /// blocking dependents are gone.
    Foreground,
    /// The dependents stay, their owner references to the object removed
    /// (the `orphan` finalizer).
    Orphan,
}

impl Propagation {
    /// The policy a `propagationPolicy` value names.
    pub fn parse(value: &str) -> Option<Self> {
        match value {
            "Background" => Some(Propagation::Background),
            "Foreground" => Some(Propagation::Foreground),
            "Orphan" => Some(Propagation::Orphan),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Propagation::Background => "Background",
            Propagation::Foreground => "Foreground",
            Propagation::Orphan => "Orphan",
        }
    }
}

#[cfg(test)]
mod tests;
