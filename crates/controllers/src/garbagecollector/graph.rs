//! The garbage collector's graph of owners and dependents (upstream's
//! `graph.go` and `graph_builder.go`), sans IO: it takes what the informers
//! observed and answers which objects the workers should look at.
//!
//! Every object with owners, and every owner, is a node keyed by uid. An
//! owner not (yet) observed is a *virtual* node, built from an owner
//! reference; the delete workers verify it with the API server and remove
//! it if it does not exist, which makes its dependents dangling.

use std::collections::{HashMap, HashSet};

/// The uid of an object.
pub type Uid = String;

/// Finalizer: orphan the dependents before going.
pub const ORPHAN: &str = "orphan";
/// Finalizer: delete the blocking dependents before going.
pub const FOREGROUND: &str = "foregroundDeletion";

/// Where an object is: its reference coordinates and namespace.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Identity {
    pub api_version: String,
    pub kind: String,
    pub namespace: Option<String>,
    pub name: String,
    pub uid: Uid,
}

impl std::fmt::Display for Identity {
    /// As upstream's `objectReference.String()`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "[{}/{}, namespace: {}, name: {}, uid: {}]",
            self.api_version,
            self.kind,
            self.namespace.as_deref().unwrap_or_default(),
            self.name,
            self.uid
        )
    }
}

/// An owner reference, as far as the graph cares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owner {
    pub api_version: String,
    pub kind: String,
    pub name: String,
    pub uid: Uid,
    pub block: bool,
}

/// What an informer saw of one object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Observed {
    pub identity: Identity,
    pub owners: Vec<Owner>,
    pub deleting: bool,
    pub finalizers: Vec<String>,
    /// The version observed, for a delete that must find it unchanged.
    pub resource_version: Option<String>,
}

/// One node of the graph.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    pub identity: Identity,
    pub owners: Vec<Owner>,
    pub dependents: HashSet<Uid>,
    /// Has a deletion timestamp.
    pub being_deleted: bool,
    /// Being deleted in the foreground: waits for its blocking dependents.
    pub deleting_dependents: bool,
    /// Known only from an owner reference, not observed.
    pub virtual_: bool,
    pub finalizers: Vec<String>,
    /// The version last observed (none for a virtual node).
    pub resource_version: Option<String>,
}

/// What the graph asks the workers to do after a change.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Work {
    /// Look at these: delete them if their owners are gone, or finish a
    /// foreground deletion.
    pub attempt_to_delete: Vec<Uid>,
    /// Orphan these objects' dependents.
    pub attempt_to_orphan: Vec<Uid>,
    /// Dependents whose owner reference names an owner in another
    /// namespace: (dependent, invalid owner) — a warning event each.
    pub invalid_namespace: Vec<(Identity, Identity)>,
}

impl Work {
    fn delete(&mut self, uid: &str) {
        self.attempt_to_delete.push(uid.to_string());
    }
}

/// The graph.
#[derive(Debug, Default)]
pub struct Graph {
    nodes: HashMap<Uid, Node>,
}

fn has(finalizers: &[String], which: &str) -> bool {
    finalizers.iter().any(|f| f == which)
}

impl Graph {
    pub fn get(&self, uid: &str) -> Option<&Node> {
        self.nodes.get(uid)
    }

    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// The uids of observed nodes of `kind` in `group` (for a resync).
    pub fn observed_of(&self, group: &str, kind: &str) -> Vec<Uid> {
        self.nodes
            .values()
            .filter(|n| {
                !n.virtual_ && n.identity.kind == kind && group_of(&n.identity.api_version) == group
            })
            .map(|n| n.identity.uid.clone())
            .collect()
    }

    /// Whether any dependent of `uid` blocks its deletion (stops at the
    /// first, so a foreground owner with thousands left costs little).
    pub fn has_blocking_dependents(&self, uid: &str) -> bool {
        let Some(node) = self.nodes.get(uid) else {
            return false;
        };
        node.dependents.iter().any(|d| {
            self.nodes
                .get(d)
                .is_some_and(|dep| dep.owners.iter().any(|o| o.uid == uid && o.block))
        })
    }

    /// The dependents of `uid` whose reference to it blocks its deletion.
    pub fn blocking_dependents(&self, uid: &str) -> Vec<Uid> {
        let Some(node) = self.nodes.get(uid) else {
            return Vec::new();
        };
        node.dependents
            .iter()
            .filter(|d| {
                self.nodes
                    .get(*d)
                    .is_some_and(|dep| dep.owners.iter().any(|o| o.uid == uid && o.block))
            })
            .cloned()
            .collect()
    }

    /// An object added or changed.
    pub fn upsert(&mut self, seen: Observed) -> Work {
        let mut work = Work::default();
        let uid = seen.identity.uid.clone();
        let existing = self.nodes.get(&uid).cloned();
        match existing {
            None => {
                let node = Node {
                    identity: seen.identity.clone(),
                    owners: Vec::new(),
                    dependents: HashSet::new(),
                    being_deleted: seen.deleting,
                    deleting_dependents: seen.deleting && has(&seen.finalizers, FOREGROUND),
                    virtual_: false,
                    finalizers: Vec::new(),
                    resource_version: None,
                };
                self.nodes.insert(uid.clone(), node);
                self.add_to_owners(&uid, &seen.owners, &mut work);
                if let Some(node) = self.nodes.get_mut(&uid) {
                    node.owners = seen.owners.clone();
                }
                self.transitions(&uid, &[], false, &seen, &mut work);
            }
            Some(old) => {
                if old.virtual_ {
                    // First observation of an owner known only by reference.
                    if old.identity != seen.identity {
                        for dep in &old.dependents {
                            let Some(d) = self.nodes.get(dep) else {
                                continue;
                            };
                            let matches = d.owners.iter().any(|o| {
                                o.uid == uid
                                    && o.kind == seen.identity.kind
                                    && o.name == seen.identity.name
                                    && group_of(&o.api_version)
                                        == group_of(&seen.identity.api_version)
                            });
                            let other_namespace = seen.identity.namespace.is_some()
                                && d.identity.namespace != seen.identity.namespace;
                            if other_namespace {
                                work.invalid_namespace
                                    .push((d.identity.clone(), seen.identity.clone()));
                            }
                            if !matches || other_namespace {
                                work.delete(dep);
                            }
                        }
                    }
                    if let Some(node) = self.nodes.get_mut(&uid) {
                        node.identity = seen.identity.clone();
                        node.virtual_ = false;
                    }
                }
                let (removed, added, unblocked) = diff_owners(&old.owners, &seen.owners);
                for owner in unblocked {
                    if self
                        .nodes
                        .get(&owner)
                        .is_some_and(|o| o.deleting_dependents)
                    {
                        work.delete(&owner);
                    }
                }
                for owner in &removed {
                    if let Some(o) = self.nodes.get_mut(owner) {
                        o.dependents.remove(&uid);
                    }
                }
                let added: Vec<Owner> = seen
                    .owners
                    .iter()
                    .filter(|o| added.contains(&o.uid))
                    .cloned()
                    .collect();
                self.add_to_owners(&uid, &added, &mut work);
                if let Some(node) = self.nodes.get_mut(&uid) {
                    node.owners = seen.owners.clone();
                    if seen.deleting {
                        node.being_deleted = true;
                    }
                }
                self.transitions(&uid, &old.finalizers, old.being_deleted, &seen, &mut work);
            }
        }
        if let Some(node) = self.nodes.get_mut(&uid) {
            node.finalizers = seen.finalizers;
            node.resource_version = seen.resource_version;
        }
        work
    }

    /// What starting to be deleted with a finalizer asks (upstream's
    /// `processTransitions`).
    fn transitions(
        &mut self,
        uid: &str,
        old_finalizers: &[String],
        was_deleting: bool,
        seen: &Observed,
        work: &mut Work,
    ) {
        let starts = |which: &str| {
            seen.deleting
                && has(&seen.finalizers, which)
                && !(was_deleting && has(old_finalizers, which))
        };
        if starts(ORPHAN) {
            work.attempt_to_orphan.push(uid.to_string());
            return;
        }
        if starts(FOREGROUND)
            && let Some(node) = self.nodes.get_mut(uid)
        {
            node.deleting_dependents = true;
            let dependents: Vec<Uid> = node.dependents.iter().cloned().collect();
            for dep in dependents {
                work.delete(&dep);
            }
            work.delete(uid);
        }
    }

    /// Adds `uid` to its owners' dependents, making virtual nodes for
    /// owners not seen yet (and asking for them to be verified).
    fn add_to_owners(&mut self, uid: &str, owners: &[Owner], work: &mut Work) {
        let Some(namespace) = self.nodes.get(uid).map(|n| n.identity.namespace.clone()) else {
            return;
        };
        for owner in owners {
            match self.nodes.get_mut(&owner.uid) {
                None => {
                    let mut node = Node {
                        identity: Identity {
                            api_version: owner.api_version.clone(),
                            kind: owner.kind.clone(),
                            namespace: namespace.clone(),
                            name: owner.name.clone(),
                            uid: owner.uid.clone(),
                        },
                        owners: Vec::new(),
                        dependents: HashSet::new(),
                        being_deleted: false,
                        deleting_dependents: false,
                        virtual_: true,
                        finalizers: Vec::new(),
                        resource_version: None,
                    };
                    node.dependents.insert(uid.to_string());
                    self.nodes.insert(owner.uid.clone(), node);
                    work.delete(&owner.uid);
                }
                Some(node) => {
                    node.dependents.insert(uid.to_string());
                    if node.virtual_ {
                        continue;
                    }
                    let other_namespace =
                        node.identity.namespace.is_some() && node.identity.namespace != namespace;
                    let mismatch = node.identity.kind != owner.kind
                        || node.identity.name != owner.name
                        || group_of(&node.identity.api_version) != group_of(&owner.api_version);
                    if other_namespace {
                        let dependent = self.nodes.get(uid).map(|d| d.identity.clone());
                        let owner_identity = self.nodes.get(&owner.uid).map(|o| o.identity.clone());
                        if let (Some(d), Some(o)) = (dependent, owner_identity) {
                            work.invalid_namespace.push((d, o));
                        }
                    }
                    if other_namespace || mismatch {
                        work.delete(uid);
                    }
                    // An owner already deleting its dependents in the
                    // foreground queued those it had when it started; one
                    // seen only now (listed after it, or created since) is
                    // queued here.
                    let owner_waits = self
                        .nodes
                        .get(&owner.uid)
                        .is_some_and(|o| o.deleting_dependents);
                    if owner_waits && !other_namespace && !mismatch {
                        work.delete(uid);
                    }
                }
            }
        }
    }

    /// An object deleted (`virtual_`: a virtual owner found not to exist).
    /// Returns the work, and the identity to remember as absent.
    pub fn remove(&mut self, uid: &str, virtual_: bool) -> (Work, Option<Identity>) {
        let mut work = Work::default();
        let Some(node) = self.nodes.get(uid) else {
            return (work, None);
        };
        if virtual_ && !node.virtual_ {
            // Observed meanwhile: a real node never goes on a virtual delete.
            return (work, None);
        }
        let Some(node) = self.nodes.remove(uid) else {
            return (work, None);
        };
        for owner in &node.owners {
            if let Some(o) = self.nodes.get_mut(&owner.uid) {
                o.dependents.remove(uid);
                if o.deleting_dependents {
                    work.delete(&owner.uid);
                }
            }
        }
        // A virtual owner with no dependents left is of no further use.
        let orphans: Vec<Uid> = node
            .owners
            .iter()
            .filter(|o| {
                self.nodes
                    .get(&o.uid)
                    .is_some_and(|n| n.virtual_ && n.dependents.is_empty())
            })
            .map(|o| o.uid.clone())
            .collect();
        for uid in orphans {
            self.nodes.remove(&uid);
        }
        let absent = (!node.dependents.is_empty()).then(|| node.identity.clone());
        for dep in &node.dependents {
            work.delete(dep);
        }
        (work, absent)
    }
}

/// The group of an `apiVersion`.
pub fn group_of(api_version: &str) -> &str {
    api_version.split_once('/').map_or("", |(g, _)| g)
}

/// Owners removed, added, and those whose blocking reference was removed
/// or stopped blocking (by uid).
fn diff_owners(old: &[Owner], new: &[Owner]) -> (Vec<Uid>, Vec<Uid>, Vec<Uid>) {
    let removed: Vec<Uid> = old
        .iter()
        .filter(|o| !new.iter().any(|n| n.uid == o.uid))
        .map(|o| o.uid.clone())
        .collect();
    let added: Vec<Uid> = new
        .iter()
        .filter(|n| !old.iter().any(|o| o.uid == n.uid))
        .map(|n| n.uid.clone())
        .collect();
    let unblocked: Vec<Uid> = old
        .iter()
        .filter(|o| o.block)
        .filter(|o| new.iter().find(|n| n.uid == o.uid).is_none_or(|n| !n.block))
        .map(|o| o.uid.clone())
        .collect();
    (removed, added, unblocked)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(kind: &str, name: &str, uid: &str) -> Identity {
        Identity {
            api_version: if kind == "Deployment" || kind == "ReplicaSet" {
                "apps/v1".into()
            } else {
                "v1".into()
            },
            kind: kind.into(),
            namespace: Some("ns".into()),
            name: name.into(),
            uid: uid.into(),
        }
    }

    fn owner(of: &Identity, block: bool) -> Owner {
        Owner {
            api_version: of.api_version.clone(),
            kind: of.kind.clone(),
            name: of.name.clone(),
            uid: of.uid.clone(),
            block,
        }
    }

    fn seen(
        identity: &Identity,
        owners: Vec<Owner>,
        deleting: bool,
        finalizers: &[&str],
    ) -> Observed {
        Observed {
            identity: identity.clone(),
            owners,
            deleting,
            finalizers: finalizers.iter().map(|f| f.to_string()).collect(),
            resource_version: None,
        }
    }

    #[test]
    fn an_unseen_owner_is_virtual_and_verified_then_observed() {
        let mut graph = Graph::default();
        let (rs, pod) = (id("ReplicaSet", "rs", "u-rs"), id("Pod", "p", "u-p"));
        let work = graph.upsert(seen(&pod, vec![owner(&rs, true)], false, &[]));
        assert_eq!(work.attempt_to_delete, ["u-rs"], "verify the virtual owner");
        assert!(graph.get("u-rs").expect("node").virtual_);
        let work = graph.upsert(seen(&rs, vec![], false, &[]));
        assert_eq!(work, Work::default());
        let node = graph.get("u-rs").expect("node");
        assert!(!node.virtual_ && node.dependents.contains("u-p"));
        assert_eq!(graph.blocking_dependents("u-rs"), ["u-p"]);
        assert!(graph.has_blocking_dependents("u-rs"));
    }

    #[test]
    fn a_deleted_owner_sends_its_dependents_to_be_deleted() {
        let mut graph = Graph::default();
        let (rs, pod) = (id("ReplicaSet", "rs", "u-rs"), id("Pod", "p", "u-p"));
        graph.upsert(seen(&rs, vec![], false, &[]));
        graph.upsert(seen(&pod, vec![owner(&rs, false)], false, &[]));
        let (work, absent) = graph.remove("u-rs", false);
        assert_eq!(work.attempt_to_delete, ["u-p"]);
        assert_eq!(absent, Some(rs));
        assert!(graph.get("u-rs").is_none());
    }

    #[test]
    fn finalizers_start_orphaning_or_foreground_deletion_once() {
        let mut graph = Graph::default();
        let (rs, pod) = (id("ReplicaSet", "rs", "u-rs"), id("Pod", "p", "u-p"));
        graph.upsert(seen(&rs, vec![], false, &[]));
        graph.upsert(seen(&pod, vec![owner(&rs, true)], false, &[]));
        let work = graph.upsert(seen(&rs, vec![], true, &[ORPHAN]));
        assert_eq!(work.attempt_to_orphan, ["u-rs"]);
        let again = graph.upsert(seen(&rs, vec![], true, &[ORPHAN]));
        assert!(again.attempt_to_orphan.is_empty(), "only when it starts");
        let work = graph.upsert(seen(&rs, vec![], true, &[FOREGROUND]));
        assert_eq!(work.attempt_to_delete, ["u-p", "u-rs"]);
        assert!(graph.get("u-rs").expect("node").deleting_dependents);
        // The dependent going lets the owner look again.
        let (work, _) = graph.remove("u-p", false);
        assert_eq!(work.attempt_to_delete, ["u-rs"]);
        assert!(graph.blocking_dependents("u-rs").is_empty());
        assert!(!graph.has_blocking_dependents("u-rs"));
    }

    #[test]
    fn a_dependent_seen_after_its_owner_started_a_foreground_deletion_is_deleted() {
        let mut graph = Graph::default();
        let (rs, pod) = (id("ReplicaSet", "rs", "u-rs"), id("Pod", "p", "u-p"));
        // Listed in this order: the owner's deletion started with no
        // dependent known.
        let work = graph.upsert(seen(&rs, vec![], true, &[FOREGROUND]));
        assert_eq!(work.attempt_to_delete, ["u-rs"]);
        let work = graph.upsert(seen(&pod, vec![owner(&rs, true)], false, &[]));
        assert_eq!(work.attempt_to_delete, ["u-p"]);
    }

    #[test]
    fn a_reference_that_stops_blocking_unblocks_a_waiting_owner() {
        let mut graph = Graph::default();
        let (rs, pod) = (id("ReplicaSet", "rs", "u-rs"), id("Pod", "p", "u-p"));
        graph.upsert(seen(&rs, vec![], true, &[FOREGROUND]));
        graph.upsert(seen(&pod, vec![owner(&rs, true)], false, &[]));
        let work = graph.upsert(seen(&pod, vec![owner(&rs, false)], false, &[]));
        assert_eq!(work.attempt_to_delete, ["u-rs"]);
        let work = graph.upsert(seen(&pod, vec![], false, &[]));
        assert!(work.attempt_to_delete.is_empty());
        assert!(graph.get("u-rs").expect("node").dependents.is_empty());
    }

    #[test]
    fn an_owner_in_another_namespace_is_reported_and_its_dependent_checked() {
        let mut graph = Graph::default();
        let mut rs = id("ReplicaSet", "rs", "u-rs");
        rs.namespace = Some("other".into());
        let pod = id("Pod", "p", "u-p");
        graph.upsert(seen(&rs, vec![], false, &[]));
        let work = graph.upsert(seen(&pod, vec![owner(&rs, false)], false, &[]));
        assert_eq!(work.attempt_to_delete, ["u-p"]);
        assert_eq!(work.invalid_namespace, [(pod, rs)]);
    }

    #[test]
    fn a_virtual_delete_removes_only_unobserved_nodes() {
        let mut graph = Graph::default();
        let (rs, pod) = (id("ReplicaSet", "rs", "u-rs"), id("Pod", "p", "u-p"));
        graph.upsert(seen(&pod, vec![owner(&rs, false)], false, &[]));
        graph.upsert(seen(&rs, vec![], false, &[]));
        let (work, absent) = graph.remove("u-rs", true);
        assert_eq!((work, absent), (Work::default(), None));
        let (other, dep) = (id("ReplicaSet", "gone", "u-gone"), id("Pod", "q", "u-q"));
        graph.upsert(seen(&dep, vec![owner(&other, false)], false, &[]));
        let (work, absent) = graph.remove("u-gone", true);
        assert_eq!(work.attempt_to_delete, ["u-q"]);
        assert_eq!(absent, Some(other));
    }
}
