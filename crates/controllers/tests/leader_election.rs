//! Two controller managers on one control plane: only one leads at a time
//! (the `kube-system/kube-controller-manager` Lease says which), and the
//! other takes over when the leader stops or dies.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::Api;
use rudder_controllers::{ControllerManager, Options};
use rudder_harness::{ControlPlane, Identity};
use rudder_runtime::LeaseConfig;
use tokio_util::sync::CancellationToken;

fn manager(plane: &ControlPlane, identity: &str) -> ControllerManager {
    let options = Options {
        lease: Some(LeaseConfig::new("kube-controller-manager", identity)),
        ..Options::default()
    };
    ControllerManager::new(plane.client(&Identity::controller_manager()), options)
        .with_clock(plane.clock())
}

async fn holder(api: &Api<Lease>) -> Option<String> {
    api.get_opt("kube-controller-manager")
        .await
        .expect("get the lease")
        .and_then(|l| l.spec)
        .and_then(|s| s.holder_identity)
}

async fn wait_for_holder(api: &Api<Lease>, plane: &ControlPlane, wanted: &str) {
    let clock = plane.fake_clock().expect("a fake clock");
    rudder_harness::eventually(
        &format!("{wanted} to lead"),
        Duration::from_secs(30),
        || async {
            clock.advance(Duration::from_secs(1));
            tokio::time::sleep(Duration::from_millis(20)).await;
            (holder(api).await.as_deref() == Some(wanted)).then_some(())
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_manager_leads_and_another_takes_over() {
    let plane = ControlPlane::with_fake_clock().await;
    let leases: Api<Lease> = Api::namespaced(plane.admin(), "kube-system");
    let (stop_a, stop_b) = (CancellationToken::new(), CancellationToken::new());
    let a = tokio::spawn(manager(&plane, "a").run(stop_a.clone()));
    wait_for_holder(&leases, &plane, "a").await;
    let b = tokio::spawn(manager(&plane, "b").run(stop_b.clone()));
    // b keeps trying while a renews: a stays the leader.
    let clock = plane.fake_clock().expect("fake");
    for _ in 0..30 {
        clock.advance(Duration::from_secs(1));
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(holder(&leases).await.as_deref(), Some("a"));
    let lease = leases.get("kube-controller-manager").await.expect("lease");
    let spec = lease.spec.expect("spec");
    assert_eq!(spec.lease_duration_seconds, Some(15));
    assert_eq!(spec.lease_transitions, Some(0));

    // a stops and releases the lease: b takes over.
    stop_a.cancel();
    a.await.expect("a stops");
    wait_for_holder(&leases, &plane, "b").await;
    let spec = leases
        .get("kube-controller-manager")
        .await
        .expect("lease")
        .spec
        .expect("spec");
    assert_eq!(spec.lease_transitions, Some(1));

    // b dies without releasing: a new candidate waits out the lease.
    b.abort();
    let _ = b.await;
    let stop_c = CancellationToken::new();
    let c = tokio::spawn(manager(&plane, "c").run(stop_c.clone()));
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        holder(&leases).await.as_deref(),
        Some("b"),
        "not before it expires"
    );
    wait_for_holder(&leases, &plane, "c").await;
    stop_c.cancel();
    c.await.expect("c stops");
}
