//! The event recorder against a real API server: events.k8s.io/v1 Events
//! named and filled as client-go's recorder does, and a repeat forming a
//! series whose count is written on the second occurrence and when the
//! series ends (on a fake clock).

use std::time::Duration;

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ListParams};
use rudder_harness::{ControlPlane, Identity};
use rudder_runtime::events::{EventType, FINISH_AFTER, Recorder};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repeats_form_a_series_whose_count_is_written() {
    let plane = ControlPlane::with_fake_clock().await;
    let clock = plane.fake_clock().expect("fake");
    let client = plane.client(&Identity::controller_manager());
    let recorder = Recorder::new(
        client,
        "test-controller",
        "test-controller-host",
        plane.clock(),
    );
    let regarding = ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("ConfigMap".into()),
        namespace: Some("default".into()),
        name: Some("cm".into()),
        uid: Some("u-1".into()),
        ..Default::default()
    };
    let events: Api<Event> = Api::namespaced(plane.admin(), "default");
    recorder
        .publish(
            &regarding,
            EventType::Warning,
            "Broken",
            "Checking",
            "it is broken",
        )
        .await
        .expect("record");
    let listed = events
        .list(&ListParams::default())
        .await
        .expect("list")
        .items;
    assert_eq!(listed.len(), 1);
    let event = &listed[0];
    assert!(
        event
            .metadata
            .name
            .as_deref()
            .is_some_and(|n| n.starts_with("cm."))
    );
    assert_eq!(event.reason.as_deref(), Some("Broken"));
    assert_eq!(event.action.as_deref(), Some("Checking"));
    assert_eq!(event.type_.as_deref(), Some("Warning"));
    assert_eq!(
        event.reporting_controller.as_deref(),
        Some("test-controller")
    );
    assert_eq!(
        event.regarding.as_ref().and_then(|r| r.uid.as_deref()),
        Some("u-1")
    );
    assert!(event.series.is_none());

    // The same event again (another note counts as the same): a series.
    clock.advance(Duration::from_secs(1));
    recorder
        .publish(
            &regarding,
            EventType::Warning,
            "Broken",
            "Checking",
            "still broken",
        )
        .await
        .expect("record");
    recorder
        .publish(
            &regarding,
            EventType::Warning,
            "Broken",
            "Checking",
            "still broken",
        )
        .await
        .expect("record");
    let listed = events
        .list(&ListParams::default())
        .await
        .expect("list")
        .items;
    assert_eq!(listed.len(), 1, "no second Event");
    assert_eq!(
        listed[0].series.as_ref().map(|s| s.count),
        Some(2),
        "written at the second"
    );
    // The series ends after six quiet minutes: its final count is written.
    clock.advance(FINISH_AFTER + Duration::from_secs(1));
    recorder.tend().await;
    let listed = events
        .list(&ListParams::default())
        .await
        .expect("list")
        .items;
    assert_eq!(listed[0].series.as_ref().map(|s| s.count), Some(3));
    // Another reason is another event.
    recorder
        .publish(
            &regarding,
            EventType::Normal,
            "Fixed",
            "Checking",
            "fine now",
        )
        .await
        .expect("record");
    assert_eq!(
        events
            .list(&ListParams::default())
            .await
            .expect("list")
            .items
            .len(),
        2
    );
}
