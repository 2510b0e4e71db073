//! The DaemonSet controller (upstream's `pkg/controller/daemon`): one pod
//! on every node the template fits — its nodeSelector and required node
//! affinity, and the node's NoSchedule/NoExecute taints tolerated (with the
//! tolerations upstream adds to every DaemonSet pod). Each pod is created
//! with node affinity for its node (`matchFields metadata.name`) so the
//! scheduler binds it there. Templates are recorded as ControllerRevisions;
//! RollingUpdate replaces pods within maxUnavailable (and maxSurge);
//! OnDelete waits for the user.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use k8s_openapi::api::apps::v1::{ControllerRevision, DaemonSet, DaemonSetStatus};
use k8s_openapi::api::core::v1::{
    Affinity, Node, NodeAffinity, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm, Pod,
    Taint, Toleration,
};
use k8s_openapi::apimachinery::pkg::runtime::RawExtension;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use rudder_runtime::controller::Action;
use rudder_runtime::events::reference_to;
use rudder_runtime::expectations::Seen;
use rudder_runtime::informer::{OWNER_INDEX, Store, key_of};
use rudder_runtime::meta::{controller_of, controller_reference, pod};
use rudder_runtime::{Change, EventType, Expectations, Recorder, WorkQueue};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::Context;
use crate::{failure_message, is_status};

const CONTROLLER: &str = "daemonset-controller";
pub const REVISION_LABEL: &str = "controller-revision-hash";

/// The tolerations upstream adds to every DaemonSet pod
/// (`AddOrUpdateDaemonPodTolerations`).
pub fn daemon_tolerations(host_network: bool) -> Vec<Toleration> {
    let toleration = |key: &str, effect: &str| Toleration {
        key: Some(key.into()),
        operator: Some("Exists".into()),
        effect: Some(effect.into()),
        ..Default::default()
    };
    let mut all = vec![
        toleration("node.kubernetes.io/not-ready", "NoExecute"),
        toleration("node.kubernetes.io/unreachable", "NoExecute"),
        toleration("node.kubernetes.io/disk-pressure", "NoSchedule"),
        toleration("node.kubernetes.io/memory-pressure", "NoSchedule"),
        toleration("node.kubernetes.io/pid-pressure", "NoSchedule"),
        toleration("node.kubernetes.io/unschedulable", "NoSchedule"),
    ];
    if host_network {
        all.push(toleration(
            "node.kubernetes.io/network-unavailable",
            "NoSchedule",
        ));
    }
    all
}

fn tolerates(tolerations: &[Toleration], taint: &Taint) -> bool {
    tolerations.iter().any(|t| {
        let effect = t
            .effect
            .as_deref()
            .is_none_or(|e| e.is_empty() || e == taint.effect);
        let exists = t.operator.as_deref() == Some("Exists");
        let key = match t.key.as_deref() {
            None | Some("") => exists,
            Some(k) => k == taint.key,
        };
        let value = exists
            || t.value.as_deref().unwrap_or_default() == taint.value.as_deref().unwrap_or_default();
        effect && key && value
    })
}

fn requirement_holds(r: &NodeSelectorRequirement, value: Option<&str>) -> bool {
    let values = r.values.as_deref().unwrap_or_default();
    match (r.operator.as_str(), value) {
        ("In", Some(v)) => values.iter().any(|x| x == v),
        ("NotIn", v) => v.is_none_or(|v| !values.iter().any(|x| x == v)),
        ("Exists", v) => v.is_some(),
        ("DoesNotExist", v) => v.is_none(),
        ("Gt" | "Lt", Some(v)) => match (
            v.parse::<i64>(),
            values.first().and_then(|x| x.parse::<i64>().ok()),
        ) {
            (Ok(v), Some(bound)) => {
                if r.operator == "Gt" {
                    v > bound
                } else {
                    v < bound
                }
            }
            _ => false,
        },
        _ => false,
    }
}

fn term_matches(term: &NodeSelectorTerm, node: &Node) -> bool {
    let labels = node.metadata.labels.clone().unwrap_or_default();
    let name = node.name_any();
    let expressions = term
        .match_expressions
        .iter()
        .flatten()
        .all(|r| requirement_holds(r, labels.get(&r.key).map(String::as_str)));
    let fields = term
        .match_fields
        .iter()
        .flatten()
        .all(|r| requirement_holds(r, (r.key == "metadata.name").then_some(name.as_str())));
    let empty = term.match_expressions.as_ref().is_none_or(|e| e.is_empty())
        && term.match_fields.as_ref().is_none_or(|f| f.is_empty());
    !empty && expressions && fields
}

/// Whether the DaemonSet's pod should be placed on `node` (upstream's
/// `NodeShouldRunDaemonPod` `shouldRun`): selector, required affinity,
/// NoSchedule and NoExecute taints.
pub fn should_run(set: &DaemonSet, node: &Node) -> bool {
    placement(set, node, &["NoSchedule", "NoExecute"])
}

/// Whether a pod already there may stay (`shouldContinueRunning`): a
/// NoSchedule taint added later does not evict it, a NoExecute one does.
pub fn should_continue(set: &DaemonSet, node: &Node) -> bool {
    placement(set, node, &["NoExecute"])
}

fn placement(set: &DaemonSet, node: &Node, effects: &[&str]) -> bool {
    let spec = set
        .spec
        .as_ref()
        .and_then(|s| s.template.spec.clone())
        .unwrap_or_default();
    let labels = node.metadata.labels.clone().unwrap_or_default();
    if !spec
        .node_selector
        .iter()
        .flatten()
        .all(|(k, v)| labels.get(k) == Some(v))
    {
        return false;
    }
    let required = spec
        .affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|a| {
            a.required_during_scheduling_ignored_during_execution
                .as_ref()
        });
    if let Some(required) = required
        && !required
            .node_selector_terms
            .iter()
            .any(|t| term_matches(t, node))
    {
        return false;
    }
    let mut tolerations = spec.tolerations.clone().unwrap_or_default();
    tolerations.extend(daemon_tolerations(spec.host_network.unwrap_or(false)));
    node.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .into_iter()
        .flatten()
        .filter(|t| effects.contains(&t.effect.as_str()))
        .all(|t| tolerates(&tolerations, t))
}

/// The node a DaemonSet pod is for: where it is bound, else its affinity.
fn node_of(p: &Pod) -> Option<String> {
    if let Some(node) = pod::node(p) {
        return Some(node.to_string());
    }
    p.spec
        .as_ref()?
        .affinity
        .as_ref()?
        .node_affinity
        .as_ref()?
        .required_during_scheduling_ignored_during_execution
        .as_ref()?
        .node_selector_terms
        .iter()
        .flat_map(|t| t.match_fields.iter().flatten())
        .find(|f| f.key == "metadata.name" && f.operator == "In")
        .and_then(|f| f.values.as_ref()?.first().cloned())
}

struct Controller {
    ctx: Arc<Context>,
    sets: Store<DaemonSet>,
    pods: Store<Pod>,
    nodes: Store<Node>,
    revisions: Store<ControllerRevision>,
    queue: WorkQueue<String>,
    recorder: Recorder,
    /// Pods created or deleted and not yet seen in the cache.
    expectations: Expectations,
    /// Per DaemonSet and node, how long to wait before deleting the next
    /// failed pod (upstream's `failedPodsBackoff`: 1 s doubling to 15 min),
    /// so a node that keeps failing its pods is not hot-looped.
    failed_backoff: std::sync::Mutex<HashMap<String, Backoff>>,
}

/// One backoff entry: the current delay and when it was last extended.
#[derive(Debug, Clone, Copy)]
struct Backoff {
    delay: Duration,
    at: SystemTime,
}

const FAILED_BACKOFF_INITIAL: Duration = Duration::from_secs(1);
const FAILED_BACKOFF_MAX: Duration = Duration::from_secs(15 * 60);

/// Whether a failed pod for `key` must wait: the delay since the last
/// deletion has not passed (`IsInBackOffSinceUpdate`); with the wait left.
fn in_backoff(entries: &HashMap<String, Backoff>, key: &str, now: SystemTime) -> Option<Duration> {
    let entry = entries.get(key)?;
    let since = now.duration_since(entry.at).unwrap_or_default();
    (since < entry.delay).then(|| entry.delay - since)
}

/// Records a deletion for `key`: the delay doubles, up to the maximum; an
/// entry idle for twice the maximum starts over (flowcontrol's `Next`).
fn next_backoff(entries: &mut HashMap<String, Backoff>, key: &str, now: SystemTime) {
    let delay = match entries.get(key) {
        Some(e) if now.duration_since(e.at).unwrap_or_default() <= 2 * FAILED_BACKOFF_MAX => {
            (e.delay * 2).min(FAILED_BACKOFF_MAX)
        }
        _ => FAILED_BACKOFF_INITIAL,
    };
    entries.insert(key.to_string(), Backoff { delay, at: now });
    entries.retain(|_, e| now.duration_since(e.at).unwrap_or_default() <= 2 * FAILED_BACKOFF_MAX);
}

/// Runs the DaemonSet controller until `stop` fires.
pub async fn run(ctx: Arc<Context>, stop: CancellationToken) {
    let sets = ctx.informers.typed::<DaemonSet>();
    let pods = ctx.informers.typed::<Pod>();
    let nodes = ctx.informers.typed::<Node>();
    let revisions = ctx.informers.typed::<ControllerRevision>();
    let (mut set_changes, mut pod_changes, mut node_changes) =
        (sets.subscribe(), pods.subscribe(), nodes.subscribe());
    let c = Arc::new(Controller {
        sets: sets.store(),
        pods: pods.store(),
        nodes: nodes.store(),
        revisions: revisions.store(),
        queue: WorkQueue::new(ctx.clock.clone()),
        recorder: Recorder::new(
            ctx.client.clone(),
            CONTROLLER,
            &ctx.identity,
            ctx.clock.clone(),
        ),
        expectations: Expectations::new(ctx.clock.clone()),
        failed_backoff: Default::default(),
        ctx: ctx.clone(),
    });
    sets.wait_synced().await;
    pods.wait_synced().await;
    nodes.wait_synced().await;
    revisions.wait_synced().await;
    let all = {
        let c = c.clone();
        move || c.sets.keys().into_iter().for_each(|k| c.queue.add(k))
    };
    all();
    let watch = {
        let (c, stop) = (c.clone(), stop.clone());
        async move {
            loop {
                tokio::select! {
                    change = set_changes.next_until(&stop) => match change {
                        None => return,
                        Some(Change::Applied { new: s, .. } | Change::Deleted(s)) => c.queue.add(key_of(&*s)),
                        Some(Change::Resync) => all(),
                    },
                    change = pod_changes.next_until(&stop) => match change {
                        None => return,
                        Some(change @ (Change::Applied { .. } | Change::Deleted(_))) => {
                            let (p, gone) = match change {
                                Change::Applied { new, .. } => {
                                    let deleting = new.metadata.deletion_timestamp.is_some();
                                    (new, deleting)
                                }
                                Change::Deleted(old) => (old, true),
                                Change::Resync => continue,
                            };
                            if let Some(owner) = controller_of(&*p).filter(|r| r.kind == "DaemonSet") {
                                let key = rudder_runtime::informer::key(p.metadata.namespace.as_deref(), &owner.name);
                                c.expectations.observed(&key, &key_of(&*p), gone);
                                c.queue.add(key);
                            }
                        }
                        Some(Change::Resync) => all(),
                    },
                    // A node added, relabelled, tainted or gone: every set looks.
                    change = node_changes.next_until(&stop) => match change {
                        None => return,
                        Some(_) => all(),
                    },
                }
            }
        }
    };
    crate::serve(
        CONTROLLER,
        c.clone(),
        c.queue.clone(),
        ctx.options.daemonset_workers,
        Some(c.recorder.clone()),
        watch,
        stop,
        |c, key| async move { c.sync(&key).await },
    )
    .await;
}

impl Controller {
    /// The hash of the current template's revision, created if missing.
    async fn revision(&self, set: &DaemonSet) -> Result<String, kube::Error> {
        let template = set
            .spec
            .as_ref()
            .map(|s| s.template.clone())
            .unwrap_or_default();
        let collision = set.status.as_ref().and_then(|s| s.collision_count);
        let hash = crate::deployment::util::template_hash(&template, collision);
        let namespace = set.metadata.namespace.clone().unwrap_or_default();
        let name = format!("{}-{hash}", set.name_any());
        let uid = set.metadata.uid.clone().unwrap_or_default();
        let owned = self.revisions.by_index(OWNER_INDEX, &uid);
        if let Some(current) = self.revisions.get_in(Some(&namespace), &name) {
            // A template brought back (a rollback) is the newest revision
            // again: its ControllerRevision is renumbered past the others,
            // as upstream's `constructHistory` does.
            let newest_other = owned
                .iter()
                .filter(|r| r.metadata.uid != current.metadata.uid)
                .map(|r| r.revision)
                .max()
                .unwrap_or(0);
            if current.revision <= newest_other {
                let patch = json!({"revision": newest_other + 1});
                match Api::<ControllerRevision>::namespaced(self.ctx.client.clone(), &namespace)
                    .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                {
                    Ok(_) => {}
                    Err(e) if is_status(&e, 404) => {}
                    Err(e) => return Err(e),
                }
            }
            return Ok(hash);
        }
        let newest = owned.iter().map(|r| r.revision).max().unwrap_or(0);
        let mut data = serde_json::to_value(&template).unwrap_or_default();
        data["$patch"] = json!("replace");
        let mut revision = ControllerRevision {
            data: Some(RawExtension(json!({"spec": {"template": data}}))),
            revision: newest + 1,
            ..Default::default()
        };
        revision.metadata.name = Some(name);
        revision.metadata.namespace = Some(namespace.clone());
        revision.metadata.labels = set
            .spec
            .as_ref()
            .and_then(|s| s.template.metadata.as_ref()?.labels.clone());
        revision
            .metadata
            .labels
            .get_or_insert_default()
            .insert(REVISION_LABEL.into(), hash.clone());
        revision.metadata.owner_references = controller_reference(set).map(|r| vec![r]);
        match Api::<ControllerRevision>::namespaced(self.ctx.client.clone(), &namespace)
            .create(&PostParams::default(), &revision)
            .await
        {
            Ok(_) => Ok(hash),
            Err(e) if is_status(&e, 409) => Ok(hash),
            Err(e) => Err(e),
        }
    }

    fn pod_for(&self, set: &DaemonSet, node: &str, hash: &str) -> Pod {
        let spec = set.spec.clone().unwrap_or_default();
        let namespace = set.metadata.namespace.clone().unwrap_or_default();
        let mut p = crate::replicaset::pod_from_template(
            &spec.template,
            &format!("{}-", set.name_any()),
            &namespace,
            controller_reference(set).unwrap_or_default(),
        );
        let labels = p.metadata.labels.get_or_insert_default();
        labels.insert(REVISION_LABEL.into(), hash.into());
        labels.insert(
            "pod-template-generation".into(),
            set.metadata.generation.unwrap_or(1).to_string(),
        );
        if let Some(pod_spec) = p.spec.as_mut() {
            // Affinity for its node: replace any matchFields on the name.
            let term = NodeSelectorTerm {
                match_fields: Some(vec![NodeSelectorRequirement {
                    key: "metadata.name".into(),
                    operator: "In".into(),
                    values: Some(vec![node.into()]),
                }]),
                match_expressions: None,
            };
            let affinity = pod_spec.affinity.get_or_insert_with(Affinity::default);
            let node_affinity = affinity
                .node_affinity
                .get_or_insert_with(NodeAffinity::default);
            let required = node_affinity
                .required_during_scheduling_ignored_during_execution
                .get_or_insert_with(|| NodeSelector {
                    node_selector_terms: Vec::new(),
                });
            if required.node_selector_terms.is_empty() {
                required.node_selector_terms.push(term);
            } else {
                for t in &mut required.node_selector_terms {
                    t.match_fields = term.match_fields.clone();
                }
            }
            let host_network = pod_spec.host_network.unwrap_or(false);
            let tolerations = pod_spec.tolerations.get_or_insert_default();
            for t in daemon_tolerations(host_network) {
                if !tolerations
                    .iter()
                    .any(|x| x.key == t.key && x.effect == t.effect)
                {
                    tolerations.push(t);
                }
            }
        }
        p
    }

    async fn sync(&self, key: &str) -> Result<Action, kube::Error> {
        let Some(set) = self.sets.get(key) else {
            return Ok(Action::Done);
        };
        if set.metadata.deletion_timestamp.is_some() {
            return Ok(Action::Done);
        }
        let hash = self.revision(&set).await?;
        let uid = set.metadata.uid.clone().unwrap_or_default();
        let namespace = set.metadata.namespace.clone().unwrap_or_default();
        let api: Api<Pod> = Api::namespaced(self.ctx.client.clone(), &namespace);
        let mut by_node: BTreeMap<String, Vec<Arc<Pod>>> = BTreeMap::new();
        for p in self.pods.by_index(OWNER_INDEX, &uid) {
            if controller_of(&*p).is_some_and(|r| r.uid == uid)
                && p.metadata.deletion_timestamp.is_none()
                && let Some(node) = node_of(&p)
            {
                by_node.entry(node).or_default().push(p);
            }
        }
        let nodes = self.nodes.list();
        let wanted: Vec<&Arc<Node>> = nodes.iter().filter(|n| should_run(&set, n)).collect();
        let keep: Vec<String> = nodes
            .iter()
            .filter(|n| should_continue(&set, n))
            .map(|n| n.name_any())
            .collect();
        let satisfied = self
            .expectations
            .satisfied(key, |k| match self.pods.get(k) {
                None => Seen::Absent,
                Some(p) if p.metadata.deletion_timestamp.is_some() => Seen::Deleting,
                Some(_) => Seen::Present,
            });
        let surging = matches!(
            set.spec
                .as_ref()
                .and_then(|s| s.update_strategy.as_ref())
                .and_then(|u| u.rolling_update.as_ref())
                .and_then(|r| r.max_surge.as_ref()),
            Some(IntOrString::Int(n)) if *n > 0
        ) || matches!(
            set.spec
                .as_ref()
                .and_then(|s| s.update_strategy.as_ref())
                .and_then(|u| u.rolling_update.as_ref())
                .and_then(|r| r.max_surge.as_ref()),
            Some(IntOrString::String(p)) if p.trim_end_matches('%') != "0"
        );
        let spec = set.spec.clone().unwrap_or_default();
        let min_ready = Duration::from_secs(spec.min_ready_seconds.unwrap_or(0).max(0) as u64);
        let now = self.ctx.clock.now();
        let mut creates: Vec<String> = Vec::new();
        let mut deletes: Vec<Arc<Pod>> = Vec::new();
        let mut retry: Option<Duration> = None;
        for node in &wanted {
            let name = node.name_any();
            let mut pods = by_node.get(&name).cloned().unwrap_or_default();
            // Failed (and, under restartPolicy Always, succeeded) pods go
            // and are replaced — failed ones no faster than the node's
            // backoff allows, with an event each time.
            let (ended, live): (Vec<_>, Vec<_>) = pods
                .drain(..)
                .partition(|p| matches!(pod::phase(p), "Failed" | "Succeeded"));
            let mut waiting = false;
            for p in ended {
                if pod::phase(&p) == "Succeeded" {
                    deletes.push(p);
                    continue;
                }
                let backoff_key = format!("{uid}/{name}");
                let mut entries = self
                    .failed_backoff
                    .lock()
                    .unwrap_or_else(|e| e.into_inner());
                if let Some(left) = in_backoff(&entries, &backoff_key, now) {
                    retry = Some(retry.map_or(left, |r| r.min(left)));
                    waiting = true;
                    continue;
                }
                next_backoff(&mut entries, &backoff_key, now);
                drop(entries);
                self.recorder.event(
                    &reference_to(&*set),
                    EventType::Warning,
                    "FailedDaemonPod",
                    "Delete",
                    &format!(
                        "Found failed daemon pod {namespace}/{} on node {name}, will try to kill it",
                        p.name_any()
                    ),
                );
                deletes.push(p);
            }
            let mut live = live;
            live.sort_by_key(|p| p.metadata.creation_timestamp.as_ref().map(|t| t.0));
            match live.len() {
                // A failed pod waiting out its backoff still holds the node.
                0 if waiting => {}
                0 => creates.push(name),
                1 => {}
                // Surging: the oldest old and the oldest new stay a while.
                2 if surging
                    && live
                        .iter()
                        .filter(|p| p.labels().get(REVISION_LABEL) == Some(&hash))
                        .count()
                        == 1 => {}
                _ => deletes.extend(live.into_iter().skip(1)),
            }
        }
        // Pods on nodes where they should not run.
        let wanted_names: Vec<String> = wanted.iter().map(|n| n.name_any()).collect();
        let misscheduled: Vec<Arc<Pod>> = by_node
            .iter()
            .filter(|(node, _)| !keep.contains(node))
            .flat_map(|(_, pods)| pods.iter().cloned())
            .collect();
        deletes.extend(misscheduled.iter().cloned());
        // Rolling update: old pods replaced within maxUnavailable / maxSurge.
        let rolling = spec
            .update_strategy
            .as_ref()
            .and_then(|u| u.type_.as_deref())
            .is_none_or(|t| t == "RollingUpdate");
        if rolling {
            let desired = wanted.len() as i32;
            let rolling_update = spec
                .update_strategy
                .as_ref()
                .and_then(|u| u.rolling_update.clone());
            let scaled = |v: Option<IntOrString>, default: i32, up: bool| match v {
                Some(IntOrString::Int(n)) => n,
                Some(IntOrString::String(s)) => {
                    let p: i64 = s.trim_end_matches('%').parse().unwrap_or(0);
                    let product = p * i64::from(desired);
                    (if up {
                        (product + 99) / 100
                    } else {
                        product / 100
                    }) as i32
                }
                None => default,
            };
            let surge = scaled(
                rolling_update.as_ref().and_then(|r| r.max_surge.clone()),
                0,
                true,
            );
            let mut unavailable_budget = scaled(
                rolling_update
                    .as_ref()
                    .and_then(|r| r.max_unavailable.clone()),
                1,
                true,
            );
            if surge == 0 && unavailable_budget == 0 {
                unavailable_budget = 1;
            }
            let unavailable_now = wanted_names
                .iter()
                .filter(|n| {
                    !by_node
                        .get(*n)
                        .is_some_and(|ps| ps.iter().any(|p| pod::is_available(p, min_ready, now)))
                })
                .count() as i32;
            let mut budget = unavailable_budget - unavailable_now;
            let mut surge_budget = surge;
            for name in &wanted_names {
                let Some(pods) = by_node.get(name) else {
                    continue;
                };
                let old: Vec<&Arc<Pod>> = pods
                    .iter()
                    .filter(|p| p.labels().get(REVISION_LABEL) != Some(&hash))
                    .collect();
                let new_ready = pods.iter().any(|p| {
                    p.labels().get(REVISION_LABEL) == Some(&hash)
                        && pod::is_available(p, min_ready, now)
                });
                let has_new = pods
                    .iter()
                    .any(|p| p.labels().get(REVISION_LABEL) == Some(&hash));
                for p in old {
                    if deletes.iter().any(|d| d.metadata.uid == p.metadata.uid) {
                        continue;
                    }
                    if new_ready {
                        deletes.push(p.clone());
                    } else if surge > 0 && !has_new && surge_budget > 0 {
                        surge_budget -= 1;
                        creates.push(name.clone());
                    } else if surge == 0 && (budget > 0 || !pod::is_available(p, min_ready, now)) {
                        if pod::is_available(p, min_ready, now) {
                            budget -= 1;
                        }
                        deletes.push(p.clone());
                    }
                }
            }
        }
        // What was asked for last time must show first (upstream's
        // expectations): nothing is created or deleted twice.
        if !satisfied {
            creates.clear();
            deletes.clear();
        }
        self.expectations.expect_creations(key, creates.len());
        self.expectations
            .expect_deletions(key, deletes.iter().map(|p| key_of(&**p)));
        for node in &creates {
            let p = self.pod_for(&set, node, &hash);
            match api.create(&PostParams::default(), &p).await {
                Ok(created) => {
                    self.expectations.created(key, Some(key_of(&created)));
                    self.recorder.event(
                        &reference_to(&*set),
                        EventType::Normal,
                        "SuccessfulCreate",
                        "Create",
                        &format!("Created pod: {}", created.name_any()),
                    )
                }
                Err(e) => {
                    self.expectations.created(key, None);
                    self.recorder.event(
                        &reference_to(&*set),
                        EventType::Warning,
                        "FailedCreate",
                        "Create",
                        &format!("Error creating: {}", failure_message(&e)),
                    );
                    return Err(e);
                }
            }
        }
        for p in &deletes {
            match api.delete(&p.name_any(), &DeleteParams::default()).await {
                Ok(_) => self.recorder.event(
                    &reference_to(&*set),
                    EventType::Normal,
                    "SuccessfulDelete",
                    "Delete",
                    &format!("Deleted pod: {}", p.name_any()),
                ),
                Err(e) => {
                    self.expectations.deletion_failed(key, &key_of(&**p));
                    if !is_status(&e, 404) {
                        return Err(e);
                    }
                }
            }
        }
        // Status, from what exists now (the next pass counts what changed).
        let on_wanted = |f: &dyn Fn(&Pod) -> bool| {
            wanted_names
                .iter()
                .filter(|n| by_node.get(*n).is_some_and(|ps| ps.iter().any(|p| f(p))))
                .count() as i32
        };
        let scheduled = on_wanted(&|_| true);
        let available = on_wanted(&|p| pod::is_available(p, min_ready, now));
        let status = DaemonSetStatus {
            desired_number_scheduled: wanted_names.len() as i32,
            current_number_scheduled: scheduled,
            number_misscheduled: by_node.keys().filter(|n| !wanted_names.contains(n)).count()
                as i32,
            number_ready: on_wanted(&|p| pod::is_ready(p)),
            updated_number_scheduled: Some(on_wanted(&|p| {
                p.labels().get(REVISION_LABEL) == Some(&hash)
            })),
            number_available: Some(available),
            number_unavailable: Some(wanted_names.len() as i32 - available).filter(|n| *n > 0),
            observed_generation: set.metadata.generation,
            collision_count: set.status.as_ref().and_then(|s| s.collision_count),
            conditions: set.status.as_ref().and_then(|s| s.conditions.clone()),
        };
        if set.status.as_ref() != Some(&status) {
            let mut fresh = (*set).clone();
            fresh.status = Some(status);
            match Api::<DaemonSet>::namespaced(self.ctx.client.clone(), &namespace)
                .replace_status(&set.name_any(), &PostParams::default(), &fresh)
                .await
            {
                Ok(_) => {}
                Err(e) if is_status(&e, 409) || is_status(&e, 404) => {}
                Err(e) => return Err(e),
            }
        }
        let requeue = match (retry, min_ready.is_zero()) {
            (Some(r), true) => Some(r),
            (Some(r), false) => Some(r.min(min_ready)),
            (None, false) => Some(min_ready),
            (None, true) => None,
        };
        Ok(requeue.map_or(Action::Done, Action::RequeueAfter))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str, labels: serde_json::Value, taints: serde_json::Value) -> Node {
        serde_json::from_value(
            json!({"metadata": {"name": name, "labels": labels}, "spec": {"taints": taints}}),
        )
        .expect("node")
    }

    fn set(template_spec: serde_json::Value) -> DaemonSet {
        serde_json::from_value(
            json!({"spec": {"selector": {}, "template": {"spec": template_spec}}}),
        )
        .expect("set")
    }

    #[test]
    fn failed_pods_are_deleted_with_a_doubling_backoff() {
        let mut entries = HashMap::new();
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        assert_eq!(in_backoff(&entries, "k", t0), None);
        next_backoff(&mut entries, "k", t0);
        assert_eq!(in_backoff(&entries, "k", t0), Some(Duration::from_secs(1)));
        let t1 = t0 + Duration::from_secs(1);
        assert_eq!(in_backoff(&entries, "k", t1), None);
        next_backoff(&mut entries, "k", t1);
        assert_eq!(
            in_backoff(&entries, "k", t1 + Duration::from_millis(500)),
            Some(Duration::from_millis(1500))
        );
        // Capped at 15 minutes; forgotten after twice that idle.
        for _ in 0..20 {
            next_backoff(&mut entries, "k", t1);
        }
        assert_eq!(entries["k"].delay, FAILED_BACKOFF_MAX);
        let much_later = t1 + 3 * FAILED_BACKOFF_MAX;
        next_backoff(&mut entries, "k", much_later);
        assert_eq!(entries["k"].delay, FAILED_BACKOFF_INITIAL);
    }

    #[test]
    fn nodes_are_chosen_by_selector_affinity_and_taints() {
        let plain = set(json!({"containers": []}));
        assert!(should_run(&plain, &node("a", json!({}), json!([]))));
        let tainted = node(
            "b",
            json!({}),
            json!([{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}]),
        );
        assert!(!should_run(&plain, &tainted));
        assert!(
            should_continue(&plain, &tainted),
            "NoSchedule keeps what runs"
        );
        let evicting = node("x", json!({}), json!([{"key": "k", "effect": "NoExecute"}]));
        assert!(!should_continue(&plain, &evicting));
        let tolerant = set(
            json!({"containers": [], "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "gpu"}]}),
        );
        assert!(should_run(&tolerant, &tainted));
        // Upstream's own tolerations: not-ready and unschedulable nodes still run it.
        let not_ready = node(
            "c",
            json!({}),
            json!([{"key": "node.kubernetes.io/not-ready", "effect": "NoExecute"}, {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}]),
        );
        assert!(should_run(&plain, &not_ready));
        let picky = set(json!({"containers": [], "nodeSelector": {"disk": "ssd"}}));
        assert!(!should_run(
            &picky,
            &node("d", json!({"disk": "hdd"}), json!([]))
        ));
        assert!(should_run(
            &picky,
            &node("e", json!({"disk": "ssd"}), json!([]))
        ));
        let affine = set(
            json!({"containers": [], "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["z1"]}]}]}}}}),
        );
        assert!(should_run(
            &affine,
            &node("f", json!({"zone": "z1"}), json!([]))
        ));
        assert!(!should_run(
            &affine,
            &node("g", json!({"zone": "z2"}), json!([]))
        ));
    }
}
