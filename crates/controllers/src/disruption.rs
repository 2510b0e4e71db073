//! The disruption controller (upstream's `pkg/controller/disruption`):
//! every PodDisruptionBudget's status — the pods it covers
//! (`expectedPods`), how many are healthy (`currentHealthy`), how many must
//! stay so (`desiredHealthy`) and so how many may be evicted now
//! (`disruptionsAllowed`), with the `DisruptionAllowed` condition the
//! eviction API reads. A percentage, or `maxUnavailable`, counts against
//! the scale of the pods' controllers (Deployments, ReplicaSets,
//! ReplicationControllers, StatefulSets).

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::{Pod, ReplicationController};
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::ResourceExt;
use kube::api::{Api, PostParams};
use rudder_runtime::controller::Action;
use rudder_runtime::informer::{NAMESPACE_INDEX, Store, key_of};
use rudder_runtime::meta::{controller_of, labels_of, pod, selector_matches};
use rudder_runtime::{Change, WorkQueue};
use tokio_util::sync::CancellationToken;

use crate::Context;
use crate::is_status;

/// How long an eviction stays in `disruptedPods` waiting for the pod to
/// go (upstream's `DeletionTimeout`).
pub const DELETION_TIMEOUT: Duration = Duration::from_secs(2 * 60);

struct Controller {
    ctx: Arc<Context>,
    budgets: Store<PodDisruptionBudget>,
    pods: Store<Pod>,
    replica_sets: Store<ReplicaSet>,
    deployments: Store<Deployment>,
    controllers: Store<ReplicationController>,
    sets: Store<StatefulSet>,
    queue: WorkQueue<String>,
}

/// Runs the disruption controller until `stop` fires.
pub async fn run(ctx: Arc<Context>, stop: CancellationToken) {
    let budgets = ctx.informers.typed::<PodDisruptionBudget>();
    let pods = ctx.informers.typed::<Pod>();
    let replica_sets = ctx.informers.typed::<ReplicaSet>();
    let deployments = ctx.informers.typed::<Deployment>();
    let controllers = ctx.informers.typed::<ReplicationController>();
    let sets = ctx.informers.typed::<StatefulSet>();
    let (mut budget_changes, mut pod_changes) = (budgets.subscribe(), pods.subscribe());
    let c = Arc::new(Controller {
        budgets: budgets.store(),
        pods: pods.store(),
        replica_sets: replica_sets.store(),
        deployments: deployments.store(),
        controllers: controllers.store(),
        sets: sets.store(),
        queue: WorkQueue::new(ctx.clock.clone()),
        ctx: ctx.clone(),
    });
    budgets.wait_synced().await;
    pods.wait_synced().await;
    replica_sets.wait_synced().await;
    deployments.wait_synced().await;
    controllers.wait_synced().await;
    sets.wait_synced().await;
    c.budgets.keys().into_iter().for_each(|k| c.queue.add(k));
    let watch = {
        let (c, stop) = (c.clone(), stop.clone());
        async move {
            loop {
                tokio::select! {
                    change = budget_changes.next_until(&stop) => match change {
                        None => return,
                        Some(Change::Applied { new: b, .. } | Change::Deleted(b)) => c.queue.add(key_of(&*b)),
                        Some(Change::Resync) => c.budgets.keys().into_iter().for_each(|k| c.queue.add(k)),
                    },
                    change = pod_changes.next_until(&stop) => match change {
                        None => return,
                        Some(Change::Applied { new: p, .. } | Change::Deleted(p)) => c.pod_changed(&p),
                        Some(Change::Resync) => c.budgets.keys().into_iter().for_each(|k| c.queue.add(k)),
                    },
                }
            }
        }
    };
    crate::serve(
        "disruption",
        c.clone(),
        c.queue.clone(),
        ctx.options.disruption_workers,
        None,
        watch,
        stop,
        |c, key| async move { c.sync(&key).await },
    )
    .await;
}

fn selects(budget: &PodDisruptionBudget, p: &Pod) -> bool {
    budget
        .spec
        .as_ref()
        .and_then(|s| s.selector.as_ref())
        .is_some_and(|sel| selector_matches(sel, labels_of(p)))
}

/// An int-or-percent of `total`, rounded up (`GetScaledValueFromIntOrPercent`).
fn scaled_up(value: &IntOrString, total: i32) -> Option<i32> {
    match value {
        IntOrString::Int(n) => Some(*n),
        IntOrString::String(s) => {
            let p: i64 = s.strip_suffix('%')?.parse().ok()?;
            Some(((p * i64::from(total) + 99).div_euclid(100)) as i32)
        }
    }
}

impl Controller {
    fn pod_changed(&self, p: &Pod) {
        let namespace = p.metadata.namespace.as_deref().unwrap_or_default();
        for budget in self.budgets.by_index(NAMESPACE_INDEX, namespace) {
            if selects(&budget, p) {
                self.queue.add(key_of(&*budget));
            }
        }
    }

    /// The scale of the controller of `p` (its uid, and replicas), as
    /// upstream's `finders` find it.
    fn scale_of(&self, p: &Pod) -> Option<(String, i32)> {
        let reference = controller_of(p)?;
        let namespace = p.metadata.namespace.as_deref();
        let replicas = |r: Option<i32>| r.unwrap_or(1);
        match reference.kind.as_str() {
            "ReplicaSet" => {
                let rs = self.replica_sets.get_in(namespace, &reference.name)?;
                // A Deployment's ReplicaSet counts as its Deployment.
                if let Some(owner) = controller_of(&*rs).filter(|o| o.kind == "Deployment")
                    && let Some(d) = self.deployments.get_in(namespace, &owner.name)
                {
                    return Some((
                        owner.uid.clone(),
                        replicas(d.spec.as_ref().and_then(|s| s.replicas)),
                    ));
                }
                Some((
                    reference.uid.clone(),
                    replicas(rs.spec.as_ref().and_then(|s| s.replicas)),
                ))
            }
            "ReplicationController" => {
                let rc = self.controllers.get_in(namespace, &reference.name)?;
                Some((
                    reference.uid.clone(),
                    replicas(rc.spec.as_ref().and_then(|s| s.replicas)),
                ))
            }
            "StatefulSet" => {
                let set = self.sets.get_in(namespace, &reference.name)?;
                Some((
                    reference.uid.clone(),
                    replicas(set.spec.as_ref().and_then(|s| s.replicas)),
                ))
            }
            _ => None,
        }
    }

    async fn sync(&self, key: &str) -> Result<Action, kube::Error> {
        let Some(budget) = self.budgets.get(key) else {
            return Ok(Action::Done);
        };
        let namespace = budget.metadata.namespace.clone().unwrap_or_default();
        let pods: Vec<Arc<Pod>> = self
            .pods
            .by_index(NAMESPACE_INDEX, &namespace)
            .into_iter()
            .filter(|p| selects(&budget, p))
            .collect();
        let now = self.ctx.clock.now();
        let previous = budget.status.clone().unwrap_or_default();
        // Evictions not yet seen through: dropped once the pod is going or
        // they are too old.
        let mut disrupted: BTreeMap<String, Time> =
            previous.disrupted_pods.clone().unwrap_or_default();
        disrupted.retain(|name, at| {
            let going = pods
                .iter()
                .find(|p| p.name_any() == *name)
                .is_none_or(|p| p.metadata.deletion_timestamp.is_some());
            !going && SystemTime::from(at.0) + DELETION_TIMEOUT > now
        });
        let healthy = pods
            .iter()
            .filter(|p| {
                p.metadata.deletion_timestamp.is_none()
                    && pod::is_ready(p)
                    && !disrupted.contains_key(&p.name_any())
            })
            .count() as i32;
        let spec = budget.spec.clone().unwrap_or_default();
        let counted = match (&spec.max_unavailable, &spec.min_available) {
            (Some(max), _) => self.expected_scale(&pods).map(|expected| {
                let unavailable = scaled_up(max, expected).unwrap_or(0);
                (expected, (expected - unavailable).max(0))
            }),
            (None, Some(IntOrString::Int(min))) => Ok((pods.len() as i32, *min)),
            (None, Some(min @ IntOrString::String(_))) => self
                .expected_scale(&pods)
                .map(|expected| (expected, scaled_up(min, expected).unwrap_or(0))),
            // Neither: upstream counts nothing.
            (None, None) => Ok((0, 0)),
        };
        let mut status = PodDisruptionBudgetStatus {
            current_healthy: healthy,
            observed_generation: budget.metadata.generation,
            disrupted_pods: (!disrupted.is_empty()).then_some(disrupted),
            conditions: previous.conditions.clone(),
            ..Default::default()
        };
        let (reason, message, allowed) = match counted {
            Ok((expected, desired)) => {
                status.expected_pods = expected;
                status.desired_healthy = desired;
                status.disruptions_allowed = (healthy - desired).max(0);
                if status.disruptions_allowed > 0 {
                    ("SufficientPods", String::new(), "True")
                } else {
                    ("InsufficientPods", String::new(), "False")
                }
            }
            Err(message) => ("SyncFailed", message, "False"),
        };
        let conditions = status.conditions.get_or_insert_default();
        let time = crate::deployment::util::time(now);
        match conditions
            .iter_mut()
            .find(|c| c.type_ == "DisruptionAllowed")
        {
            Some(c) if c.status == allowed && c.reason == reason && c.message == message => {}
            Some(c) => {
                if c.status != allowed {
                    c.last_transition_time = time;
                }
                c.status = allowed.into();
                c.reason = reason.into();
                c.message = message;
                c.observed_generation = budget.metadata.generation;
            }
            None => conditions.push(Condition {
                type_: "DisruptionAllowed".into(),
                status: allowed.into(),
                reason: reason.into(),
                message,
                last_transition_time: time,
                observed_generation: budget.metadata.generation,
            }),
        }
        if budget.status.as_ref() != Some(&status) {
            let mut fresh = (*budget).clone();
            fresh.status = Some(status);
            match Api::<PodDisruptionBudget>::namespaced(self.ctx.client.clone(), &namespace)
                .replace_status(&budget.name_any(), &PostParams::default(), &fresh)
                .await
            {
                Ok(_) => {}
                Err(e) if is_status(&e, 409) || is_status(&e, 404) => {}
                Err(e) => return Err(e),
            }
        }
        // Look again when the oldest eviction entry lapses.
        let next = previous
            .disrupted_pods
            .iter()
            .flatten()
            .map(|(_, at)| SystemTime::from(at.0) + DELETION_TIMEOUT)
            .filter_map(|at| at.duration_since(now).ok())
            .min();
        Ok(next.map_or(Action::Done, Action::RequeueAfter))
    }

    /// The summed scale of the pods' controllers; an error naming a pod
    /// without one.
    fn expected_scale(&self, pods: &[Arc<Pod>]) -> Result<i32, String> {
        let mut seen = HashSet::new();
        let mut total = 0;
        for p in pods {
            match self.scale_of(p) {
                Some((uid, replicas)) => {
                    if seen.insert(uid) {
                        total += replicas;
                    }
                }
                None => {
                    return Err(format!("found no controllers for pod {:?}", p.name_any()));
                }
            }
        }
        Ok(total)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentages_round_up() {
        assert_eq!(scaled_up(&IntOrString::String("50%".into()), 3), Some(2));
        assert_eq!(scaled_up(&IntOrString::String("10%".into()), 10), Some(1));
        assert_eq!(scaled_up(&IntOrString::Int(4), 10), Some(4));
        assert_eq!(scaled_up(&IntOrString::String("x".into()), 10), None);
    }
}
