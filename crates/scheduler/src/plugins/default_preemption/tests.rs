//! Victim selection and the node choice, on the default profile's
//! filters.

use serde_json::json;

use super::*;
use crate::profile::Profile;

fn node(name: &str, cpu: &str, pods: &[&Arc<PodInfo>]) -> NodeInfo {
    let n: k8s_openapi::api::core::v1::Node = serde_json::from_value(json!({
        "metadata": {"name": name},
        "status": {"allocatable": {"cpu": cpu, "memory": "8Gi", "pods": "110"}},
    }))
    .expect("node");
    let mut info = NodeInfo::new(Arc::new(n));
    for p in pods {
        info.add_pod((*p).clone());
    }
    info
}

fn pod(name: &str, priority: i32, cpu: &str, labels: serde_json::Value) -> Arc<PodInfo> {
    let p: Pod = serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "default", "labels": labels},
        "spec": {"priority": priority, "containers": [
            {"name": "c", "resources": {"requests": {"cpu": cpu}}}]},
        "status": {"startTime": "2024-01-01T00:00:00Z"},
    }))
    .expect("pod");
    Arc::new(PodInfo::new(Arc::new(p)))
}

fn pdb(allowed: i32, labels: serde_json::Value, disrupted: &[&str]) -> Arc<PodDisruptionBudget> {
    let disrupted: serde_json::Map<String, serde_json::Value> = disrupted
        .iter()
        .map(|n| (n.to_string(), json!("2024-01-01T00:00:00Z")))
        .collect();
    Arc::new(
        serde_json::from_value(json!({
            "metadata": {"name": "budget", "namespace": "default"},
            "spec": {"selector": {"matchLabels": labels}},
            "status": {"disruptionsAllowed": allowed, "disruptedPods": disrupted,
                "currentHealthy": 0, "desiredHealthy": 0, "expectedPods": 0},
        }))
        .expect("pdb"),
    )
}

fn names(pods: &[Arc<PodInfo>]) -> Vec<&str> {
    pods.iter()
        .map(|p| p.pod.metadata.name.as_deref().unwrap_or_default())
        .collect()
}

fn victims_on(
    node: &NodeInfo,
    preemptor: &PodInfo,
    nominated: &[Arc<PodInfo>],
    pdbs: &[Arc<PodDisruptionBudget>],
) -> Result<(Vec<String>, usize), Status> {
    let profile = Profile::default_profile(None);
    let (victims, violations) = select_victims(
        &profile,
        &CycleState::default(),
        preemptor,
        node,
        nominated,
        pdbs,
    )?;
    let victims = names(&victims).into_iter().map(String::from).collect();
    Ok((victims, violations))
}

fn chosen(victims: &[&str], violations: usize) -> Result<(Vec<String>, usize), Status> {
    Ok((victims.iter().map(|v| v.to_string()).collect(), violations))
}

#[test]
fn only_lower_priority_pods_are_victims_and_the_most_important_are_reprieved() {
    let (p1, p2, p3) = (
        pod("p1", 1, "1", json!({})),
        pod("p2", 2, "1", json!({})),
        pod("p3", 3, "2", json!({})),
    );
    let high = pod("high", 20, "1", json!({}));
    let n = node("n", "5", &[&p1, &p2, &p3, &high]);
    let preemptor = pod("preemptor", 10, "2", json!({}));
    // All three out frees 4; p3 (2 cpu) comes back first and still leaves
    // 2; then neither p2 nor p1 fits back.
    assert_eq!(
        victims_on(&n, &preemptor, &[], &[]),
        chosen(&["p2", "p1"], 0)
    );
    // Equal priority is not lower: nothing to preempt.
    let equal = pod("equal", 1, "1", json!({}));
    let status = victims_on(&n, &equal, &[], &[]).expect_err("no victims");
    assert_eq!(status.code, Code::UnschedulableAndUnresolvable);
    assert_eq!(status.reasons, [NO_VICTIMS]);
    // Not even every lower-priority pod gone makes room.
    let huge = pod("huge", 10, "5", json!({}));
    let status = victims_on(&n, &huge, &[], &[]).expect_err("does not fit");
    assert_eq!(status.reasons, ["Insufficient cpu"]);
}

#[test]
fn pods_a_budget_protects_are_reprieved_first() {
    let db = pod("db", 1, "2", json!({"app": "db"}));
    let web = pod("web", 2, "2", json!({"app": "web"}));
    let n = node("n", "4", &[&db, &web]);
    let preemptor = pod("preemptor", 10, "2", json!({}));
    // By priority alone web is given back and db goes.
    assert_eq!(victims_on(&n, &preemptor, &[], &[]), chosen(&["db"], 0));
    // db's budget allows no disruption: db is tried first and stays.
    let budget = pdb(0, json!({"app": "db"}), &[]);
    assert_eq!(
        victims_on(&n, &preemptor, &[], std::slice::from_ref(&budget)),
        chosen(&["web"], 0)
    );
    // Both must go: the budget is violated once; victims by importance.
    let big = pod("big", 10, "4", json!({}));
    assert_eq!(
        victims_on(&n, &big, &[], std::slice::from_ref(&budget)),
        chosen(&["web", "db"], 1)
    );
}

#[test]
fn budgets_are_spent_pod_by_pod() {
    let (a, b, c) = (
        pod("a", 1, "1", json!({"app": "db"})),
        pod("b", 1, "1", json!({"app": "db"})),
        pod("c", 1, "1", json!({"app": "db"})),
    );
    let pods = vec![a.clone(), b.clone(), c.clone()];
    // One disruption allowed: the first goes free, the others violate.
    let (violating, other) =
        split_by_pdb_violation(pods.clone(), &[pdb(1, json!({"app": "db"}), &[])]);
    assert_eq!(
        (names(&violating), names(&other)),
        (vec!["b", "c"], vec!["a"])
    );
    // A pod already counted as disrupted spends nothing.
    let (violating, _) =
        split_by_pdb_violation(pods.clone(), &[pdb(1, json!({"app": "db"}), &["a"])]);
    assert_eq!(names(&violating), ["c"]);
    // An empty selector, another namespace, other labels: no match.
    let mut elsewhere = (*pdb(0, json!({"app": "db"}), &[])).clone();
    elsewhere.metadata.namespace = Some("other".into());
    for budget in [
        pdb(0, json!({}), &[]),
        Arc::new(elsewhere),
        pdb(0, json!({"app": "web"}), &[]),
    ] {
        let (violating, other) = split_by_pdb_violation(pods.clone(), &[budget]);
        assert!(violating.is_empty());
        assert_eq!(other.len(), 3);
    }
}

#[test]
fn room_freed_for_a_nominated_pod_of_higher_priority_is_not_taken() {
    let low = pod("low", 1, "2", json!({}));
    let n = node("n", "4", &[&low]);
    let preemptor = pod("preemptor", 10, "2", json!({}));
    let waiting = pod("waiting", 10, "2", json!({}));
    // 2 cpu are free, but they are the nominated pod's: low must go.
    assert_eq!(
        victims_on(&n, &preemptor, std::slice::from_ref(&waiting), &[]),
        chosen(&["low"], 0)
    );
    // A lower-priority nominated pod is not counted.
    let lesser = pod("lesser", 5, "2", json!({}));
    let profile = Profile::default_profile(None);
    let state = CycleState::default();
    assert!(
        profile
            .filter_with_nominated(&state, &preemptor, &n, std::slice::from_ref(&lesser))
            .is_success()
    );
    let status =
        profile.filter_with_nominated(&state, &preemptor, &n, std::slice::from_ref(&waiting));
    assert_eq!(status.reasons, ["Insufficient cpu"]);
    // Nor is the pod itself.
    assert!(
        profile
            .filter_with_nominated(&state, &waiting, &n, std::slice::from_ref(&waiting))
            .is_success()
    );
}

fn snapshot(nodes: Vec<NodeInfo>) -> Snapshot {
    Snapshot::new(nodes.into_iter().map(Arc::new).collect())
}

fn unschedulable(nodes: &[&str]) -> HashMap<String, Status> {
    nodes
        .iter()
        .map(|n| (n.to_string(), Status::unschedulable("Insufficient cpu")))
        .collect()
}

fn preempt(
    snapshot: &Snapshot,
    preemptor: &PodInfo,
    statuses: &HashMap<String, Status>,
) -> (PostFilterResult, Status) {
    let profile = Profile::default_profile(None);
    let (result, mut status) = DefaultPreemption::default().preempt(
        &profile,
        &CycleState::default(),
        preemptor,
        snapshot,
        statuses,
        0,
    );
    status.plugin = "";
    (result, status)
}

#[test]
fn the_node_with_the_least_important_victims_is_nominated() {
    let (a1, b1) = (pod("a1", 5, "2", json!({})), pod("b1", 1, "2", json!({})));
    let s = snapshot(vec![node("a", "2", &[&a1]), node("b", "2", &[&b1])]);
    let preemptor = pod("preemptor", 10, "2", json!({}));
    let (result, status) = preempt(&s, &preemptor, &unschedulable(&["a", "b"]));
    assert!(status.is_success());
    assert_eq!(result.nominated_node.as_deref(), Some("b"));
    assert_eq!(names(&result.victims), ["b1"]);
    // A budget on b's pod sends preemption to a, though a's victim is
    // more important.
    let labelled = pod("b1", 1, "2", json!({"app": "db"}));
    let s = snapshot(vec![node("a", "2", &[&a1]), node("b", "2", &[&labelled])])
        .with_pdbs(Arc::new(vec![pdb(0, json!({"app": "db"}), &[])]));
    let (result, _) = preempt(&s, &preemptor, &unschedulable(&["a", "b"]));
    assert_eq!(result.nominated_node.as_deref(), Some("a"));
    assert_eq!(names(&result.victims), ["a1"]);
}

#[test]
fn when_preemption_cannot_help_it_says_why_as_upstream() {
    let high = pod("high", 100, "2", json!({}));
    let s = snapshot(vec![
        node("a", "2", &[&high]),
        node("b", "2", &[&high]),
        node("tainted", "8", &[]),
    ]);
    let preemptor = pod("preemptor", 10, "2", json!({}));
    let mut statuses = unschedulable(&["a", "b"]);
    statuses.insert(
        "tainted".into(),
        Status::unresolvable("node(s) had untolerated taint {k: v}"),
    );
    let (result, status) = preempt(&s, &preemptor, &statuses);
    assert_eq!(status.code, Code::Unschedulable);
    assert_eq!(
        status.message(),
        // Sorted as strings, as upstream's histogram.
        "0/3 nodes are available: 1 Preemption is not helpful for scheduling, 2 No preemption victims found for incoming pod."
    );
    assert_eq!(
        result.nominated_node.as_deref(),
        Some(""),
        "nomination cleared"
    );
    // Through the plugin the message is prefixed.
    let profile = Profile::default_profile(None);
    let (_, status) = DefaultPreemption::default().post_filter(
        &profile,
        &CycleState::default(),
        &preemptor,
        &s,
        &statuses,
    );
    assert!(
        status
            .message()
            .starts_with("preemption: 0/3 nodes are available: 1 Preemption")
    );
}

#[test]
fn pods_that_may_not_preempt() {
    let s = snapshot(vec![node("a", "2", &[])]);
    let statuses = unschedulable(&["a"]);
    let never: Pod = serde_json::from_value(json!({
        "metadata": {"name": "p", "namespace": "default"},
        "spec": {"priority": 10, "preemptionPolicy": "Never", "containers": []},
    }))
    .expect("pod");
    let (result, status) = preempt(&s, &PodInfo::new(Arc::new(never)), &statuses);
    assert_eq!(
        status.reasons,
        ["not eligible due to preemptionPolicy=Never."]
    );
    assert_eq!(result.nominated_node, None, "the nomination is left alone");
    // Nominated to a node where its victim is still terminating.
    let victim: Pod = serde_json::from_value(json!({
        "metadata": {"name": "v", "namespace": "default",
            "deletionTimestamp": "2024-01-01T00:00:00Z"},
        "spec": {"priority": 1, "containers": []},
        "status": {"conditions": [{"type": "DisruptionTarget", "status": "True",
            "reason": "PreemptionByScheduler"}]},
    }))
    .expect("pod");
    let victim = Arc::new(PodInfo::new(Arc::new(victim)));
    let s = snapshot(vec![node("a", "2", &[&victim])]);
    let waiting: Pod = serde_json::from_value(json!({
        "metadata": {"name": "p", "namespace": "default"},
        "spec": {"priority": 10, "containers": []},
        "status": {"nominatedNodeName": "a"},
    }))
    .expect("pod");
    let waiting = PodInfo::new(Arc::new(waiting));
    assert_eq!(
        eligible(&waiting, &s, &statuses),
        Err("not eligible due to a terminating pod on the nominated node.")
    );
    // Unless the nominated node cannot take it any more.
    let gone = HashMap::from([("a".to_string(), Status::unresolvable("gone"))]);
    assert_eq!(eligible(&waiting, &s, &gone), Ok(()));
}
