//! Two controller managers on one control plane: only one leads at a time
//! (the `kube-system/kube-controller-manager` Lease says which), and the
//! other takes over when the leader stops or dies.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::Api;
use rudder_api::time::Clock as _;
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

/// The candidates' retry period (`LeaseConfig::new`'s).
const RETRY: Duration = Duration::from_secs(2);

/// Waits until a candidate started after `mark` has found the lease held
/// by another and backs off: it sleeps for the retry period and a jitter
/// of up to 1.2 times it — a deadline no periodic loop of whole seconds
/// has.
async fn backed_off(clock: &rudder_runtime::clock::FakeClock, mark: u64) {
    let now = clock.now();
    rudder_harness::eventually(
        "a candidate backing off",
        Duration::from_secs(30),
        || async {
            clock
                .sleepers_since(mark)
                .iter()
                .any(|d| {
                    let wait = d.duration_since(now).unwrap_or_default();
                    wait > RETRY && wait < RETRY.mul_f64(2.2) && wait.subsec_nanos() != 0
                })
                .then_some(())
        },
    )
    .await
}

/// Waits until the leader keeps pace with the clock: it renewed the lease
/// less than a retry period ago and sleeps until its next renewal, a
/// retry period after the last (so moving the clock on cannot catch it
/// between the two).
async fn renewing(clock: &rudder_runtime::clock::FakeClock, api: &Api<Lease>) {
    rudder_harness::eventually("the leader renewing", Duration::from_secs(30), || async {
        let renewed = api
            .get("kube-controller-manager")
            .await
            .expect("get the lease")
            .spec
            .and_then(|s| s.renew_time)
            .map(|t| std::time::SystemTime::from(t.0))?;
        let next = renewed + RETRY;
        (next > clock.now() && clock.sleepers_since(0).contains(&next)).then_some(())
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_manager_leads_and_another_takes_over() {
    let plane = ControlPlane::with_fake_clock().await;
    let leases: Api<Lease> = Api::namespaced(plane.admin(), "kube-system");
    let (stop_a, stop_b) = (CancellationToken::new(), CancellationToken::new());
    let a = tokio::spawn(manager(&plane, "a").run(stop_a.clone()));
    wait_for_holder(&leases, &plane, "a").await;
    let clock = plane.fake_clock().expect("fake");
    let mark = clock.mark();
    let b = tokio::spawn(manager(&plane, "b").run(stop_b.clone()));
    backed_off(&clock, mark).await;
    // b keeps trying while a renews — each second of the clock, past the
    // lease's 15 s, waiting for a's renewal to keep pace: a stays the
    // leader.
    for _ in 0..30 {
        renewing(&clock, &leases).await;
        clock.advance(Duration::from_secs(1));
    }
    renewing(&clock, &leases).await;
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
    let mark = clock.mark();
    let c = tokio::spawn(manager(&plane, "c").run(stop_c.clone()));
    backed_off(&clock, mark).await;
    assert_eq!(holder(&leases).await.as_deref(), Some("b"));
    // 14 s on, the lease unrenewed all that time but not for its 15 s: c
    // tries again and backs off again.
    let mark = clock.mark();
    clock.advance(Duration::from_secs(14));
    backed_off(&clock, mark).await;
    assert_eq!(
        holder(&leases).await.as_deref(),
        Some("b"),
        "not before it expires"
    );
    wait_for_holder(&leases, &plane, "c").await;
    stop_c.cancel();
    c.await.expect("c stops");
}
