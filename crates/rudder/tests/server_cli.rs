//! `rudder server` as a user runs it: it opens its store, stops cleanly on
//! SIGTERM keeping what it had, and refuses a data path it does not own.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn rudder() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_rudder"));
    command.env("RUST_BACKTRACE", "0").env("RUDDER_LOG", "info");
    command
}

fn wait_for_file(path: &std::path::Path, within: Duration) {
    let deadline = Instant::now() + within;
    while !path.exists() {
        assert!(
            Instant::now() < deadline,
            "{} did not appear",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn server_opens_its_store_and_stops_cleanly_on_sigterm() {
    let dir = tempfile::tempdir().expect("tempdir");
    for _ in 0..2 {
        let child = rudder()
            .args(["server", "--data-dir"])
            .arg(dir.path())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start rudder server");
        wait_for_file(&dir.path().join("db.wal"), Duration::from_secs(20));
        std::thread::sleep(Duration::from_millis(300));
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
