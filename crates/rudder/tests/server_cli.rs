//! `rudder server` as a user runs it: it opens its store, stops cleanly on
//! SIGTERM keeping what it had (an object written before is there after a
//! restart), keeps its data private, and refuses a data path it does not
//! own.

use std::process::{Command, Stdio};
use std::time::Duration;

fn rudder() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_rudder"));
    command.env("RUST_BACKTRACE", "0").env("RUDDER_LOG", "info");
    command
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_stops_cleanly_on_sigterm_and_keeps_what_it_had() {
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::{Api, PostParams};
    use std::os::unix::fs::PermissionsExt;

    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let port = rudder_apiserver::testing::free_port().expect("a free port");
    let mut uid = None;
    for round in 0..2 {
        let child = rudder()
            .args([
                "server",
                // The agent's own lifecycle is agent_e2e.rs's.
                "--disable-agent",
                "--bind-address",
                "127.0.0.1",
                "--port",
                &port.to_string(),
                "--data-dir",
            ])
            .arg(&data)
            .stderr(Stdio::piped())
            .spawn()
            .expect("start rudder server");
        let client = rudder_apiserver::testing::connect(
            &data.join("kubeconfig.yaml"),
            Duration::from_secs(20),
        )
        .await
        .expect("ready");
        let config_maps: Api<ConfigMap> = Api::namespaced(client, "default");
        if round == 0 {
            let mut object = ConfigMap::default();
            object.metadata.name = Some("kept".into());
            object.data = Some([("a".to_string(), "b".to_string())].into());
            let created = config_maps
                .create(&PostParams::default(), &object)
                .await
                .expect("create");
            uid = created.metadata.uid;
        } else {
            let kept = config_maps
                .get("kept")
                .await
                .expect("kept across the restart");
            assert_eq!(kept.metadata.uid, uid, "the same object");
            assert_eq!(
                kept.data.and_then(|d| d.get("a").cloned()).as_deref(),
                Some("b")
            );
        }
        let status = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()
            .expect("kill");
        assert!(status.success());
        let output = child.wait_with_output().expect("wait");
        let log = String::from_utf8_lossy(&output.stderr);
        assert!(output.status.success(), "exit {:?}: {log}", output.status);
        assert!(log.contains("store ready"), "{log}");
        assert!(log.contains("shutting down"), "{log}");
    }
    // The data dir and everything secret in it are the owner's alone.
    let mode =
        |p: &std::path::Path| std::fs::metadata(p).expect("metadata").permissions().mode() & 0o777;
    assert_eq!(mode(&data), 0o700);
    for file in [
        "db",
        "db.wal",
        "kubeconfig.yaml",
        "tls/ca.key",
        "tls/server.key",
        "tls/admin.key",
    ] {
        assert_eq!(mode(&data.join(file)), 0o600, "{file}");
    }
}

#[test]
fn server_refuses_a_foreign_file_at_its_store_path_and_leaves_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("db"), "not yours\n").expect("write");
    let output = rudder()
        .args(["server", "--data-dir"])
        .arg(dir.path())
        .output()
        .expect("run");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("not a rudder store"), "{stderr}");
    assert_eq!(
        std::fs::read_to_string(dir.path().join("db")).expect("read"),
        "not yours\n"
    );
}

#[test]
fn server_rejects_an_unknown_store_kind() {
    let dir = tempfile::tempdir().expect("tempdir");
    let output = rudder()
        .args(["server", "--store", "postgres://db", "--data-dir"])
        .arg(dir.path())
        .output()
        .expect("run");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success());
    assert!(
        stderr.contains("expected `embedded` or etcd://"),
        "{stderr}"
    );
}
