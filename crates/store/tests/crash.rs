//! Crash safety of the embedded store: a child process writes concurrently
//! and is killed with SIGKILL at a random moment, many times over. After each
//! kill the store must reopen as it is (no repair), hold every write the
//! child saw acknowledged, and have a gap-free history.
//!
//! The child is this test binary itself, re-run on the ignored test
//! `crash_child` with the store path in `RUDDER_CRASH_DIR`.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use rand::Rng;
use rudder_store::embedded::{EmbeddedConfig, EmbeddedStore};
use rudder_store::{Error, Store, WatchRequest, WatchResponse};

const WRITERS: usize = 16;

fn rounds() -> usize {
    std::env::var("RUDDER_CRASH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(25)
}

/// Writes until killed: each writer creates fresh keys and bumps its own
/// counter with compare-and-swap, printing every acknowledged write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "the child half of `acknowledged_writes_survive_sigkill`"]
async fn crash_child() {
    let Ok(dir) = std::env::var("RUDDER_CRASH_DIR") else {
        return;
    };
    let round: usize = std::env::var("RUDDER_CRASH_ROUND")
        .expect("round")
        .parse()
        .expect("number");
    let store =
        Arc::new(EmbeddedStore::open(EmbeddedConfig::new(format!("{dir}/db"))).expect("open"));
    let out = Arc::new(std::sync::Mutex::new(std::io::stdout()));
    let mut tasks = tokio::task::JoinSet::new();
    for w in 0..WRITERS {
        let (store, out) = (store.clone(), out.clone());
        tasks.spawn(async move {
            let counter = format!("/counter/{w}");
            for i in 0.. {
                let key = format!("/keys/{round}/{w}/{i}");
                let kv = store
                    .create(key.as_bytes(), Bytes::from(vec![w as u8; 300]))
                    .await
                    .expect("create");
                let mut line = format!("create {key} {}\n", kv.mod_revision);
                let current = match store.get(counter.as_bytes(), None).await {
                    Ok(kv) => Some(kv),
                    Err(Error::NotFound) => None,
                    Err(e) => panic!("get: {e}"),
                };
                let written = match current {
                    None => store.create(counter.as_bytes(), Bytes::from("1")).await,
                    Some(kv) => {
                        let n: u64 = std::str::from_utf8(&kv.value)
                            .expect("utf8")
                            .parse()
                            .expect("n");
                        store
                            .update(
                                counter.as_bytes(),
                                Bytes::from((n + 1).to_string()),
                                kv.mod_revision,
                            )
                            .await
                    }
                };
                let kv = written.expect("counter write");
                line.push_str(&format!(
                    "counter {counter} {} {}\n",
                    kv.mod_revision,
                    String::from_utf8_lossy(&kv.value)
                ));
                let mut out = out.lock().expect("stdout");
                out.write_all(line.as_bytes()).expect("write");
                out.flush().expect("flush");
            }
        });
    }
    while tasks.join_next().await.is_some() {}
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_writes_survive_sigkill() {
    let dir = tempfile::tempdir().expect("tempdir");
    let exe = std::env::current_exe().expect("test binary");
    let mut rng = rand::rng();
    let mut created: HashMap<String, u64> = HashMap::new();
    let mut counters: HashMap<String, (u64, u64)> = HashMap::new();
    let mut total_acks = 0;

    for round in 0..rounds() {
        let mut child = Command::new(&exe)
            .args([
                "--exact",
                "crash_child",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env("RUDDER_CRASH_DIR", dir.path())
            .env("RUDDER_CRASH_ROUND", round.to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn child");
        let stdout = child.stdout.take().expect("stdout");
        let reader = std::thread::spawn(move || {
            BufReader::new(stdout)
                .lines()
                .map_while(Result::ok)
                .collect::<Vec<String>>()
        });
        std::thread::sleep(Duration::from_millis(rng.random_range(150..600)));
        child.kill().expect("SIGKILL the child");
        child.wait().expect("reap the child");
        let lines = reader.join().expect("reader");
        for line in lines {
            let parts: Vec<&str> = line.split(' ').collect();
            match parts.as_slice() {
                ["create", key, rev] => {
                    created.insert(key.to_string(), rev.parse().expect("rev"));
                    total_acks += 1;
                }
                ["counter", key, rev, value] => {
                    let entry = (rev.parse().expect("rev"), value.parse().expect("value"));
                    let known = counters.entry(key.to_string()).or_insert(entry);
                    if entry.0 > known.0 {
                        *known = entry;
                    }
                    total_acks += 1;
                }
                _ => {} // the test harness's own lines, or a line cut by the kill
            }
        }

        let store = EmbeddedStore::open(EmbeddedConfig::new(dir.path().join("db")))
            .unwrap_or_else(|e| panic!("round {round}: the store did not reopen cleanly: {e}"));
        for (key, rev) in &created {
            let kv = store.get(key.as_bytes(), None).await.unwrap_or_else(|e| {
                panic!("round {round}: acknowledged create of {key} at {rev} lost: {e}")
            });
            assert_eq!(kv.mod_revision, *rev, "round {round}: {key}");
        }
        for (key, (rev, value)) in &counters {
            let kv = store
                .get(key.as_bytes(), None)
                .await
                .expect("counter present");
            let n: u64 = std::str::from_utf8(&kv.value)
                .expect("utf8")
                .parse()
                .expect("n");
            assert!(
                kv.mod_revision >= *rev && n >= *value,
                "round {round}: counter {key} went back"
            );
        }
        assert_gap_free_history(&store).await;
        store.close();
    }
    assert!(
        total_acks > rounds() * 10,
        "the child acknowledged too little to prove anything: {total_acks}"
    );
    eprintln!(
        "{} rounds, {total_acks} acknowledged writes, none lost",
        rounds()
    );
}

/// Every revision from 1 to the current one is in the history, once.
async fn assert_gap_free_history(store: &EmbeddedStore) {
    let current = store.current_revision().await.expect("revision");
    let mut watch = store
        .watch(WatchRequest::prefix(Bytes::from_static(b"/"), 1))
        .await
        .expect("watch");
    let mut expected = 1;
    while expected <= current {
        match tokio::time::timeout(Duration::from_secs(30), watch.recv()).await {
            Ok(Some(Ok(WatchResponse::Events(events)))) => {
                for event in events {
                    assert_eq!(event.revision(), expected, "history has a gap or a repeat");
                    expected += 1;
                }
            }
            Ok(Some(Ok(WatchResponse::Progress { .. }))) => {}
            other => panic!("replaying the history failed: {other:?}"),
        }
    }
}
