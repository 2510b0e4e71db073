//! A crashed server loses nothing it acknowledged: `rudder server` is killed
//! with SIGKILL while clients create objects concurrently; after a restart
//! every object the server answered 201 for is there.

use std::collections::HashSet;
use std::process::Child;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams, PostParams};
use rand::Rng;
use rudder_apiserver::testing;

fn start(dir: &std::path::Path, port: u16) -> Child {
    testing::spawn_server(
        std::path::Path::new(env!("CARGO_BIN_EXE_rudder")),
        dir,
        port,
    )
    .expect("start rudder server")
}

async fn connect(kubeconfig: &std::path::Path) -> kube::Client {
    testing::connect(kubeconfig, Duration::from_secs(20))
        .await
        .expect("rudder server became ready")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_acknowledged_create_survives_sigkill() {
    let dir = tempfile::tempdir().expect("tempdir");
    let port = testing::free_port().expect("a free port");
    let kubeconfig = dir.path().join("kubeconfig.yaml");
    let acknowledged: Arc<Mutex<HashSet<String>>> = Arc::default();
    let rounds = 4;
    for round in 0..rounds {
        let mut server = start(dir.path(), port);
        let client = connect(&kubeconfig).await;
        let mut writers = tokio::task::JoinSet::new();
        for w in 0..16 {
            let (client, acknowledged) = (client.clone(), acknowledged.clone());
            writers.spawn(async move {
                let api: Api<ConfigMap> = Api::namespaced(client, "default");
                for i in 0.. {
                    let name = format!("r{round}-w{w}-{i}");
                    let cm: ConfigMap = serde_json::from_value(serde_json::json!({"metadata": {"name": name}, "data": {"i": i.to_string()}})).expect("cm");
                    match api.create(&PostParams::default(), &cm).await {
                        Ok(_) => {
                            acknowledged.lock().expect("lock").insert(name);
                        }
                        Err(_) => return,
                    }
                }
            });
        }
        let delay = rand::rng().random_range(300..900);
        tokio::time::sleep(Duration::from_millis(delay)).await;
        server.kill().expect("SIGKILL");
        server.wait().expect("reap");
        while writers.join_next().await.is_some() {}
    }
    let mut server = start(dir.path(), port);
    let client = connect(&kubeconfig).await;
    let api: Api<ConfigMap> = Api::namespaced(client, "default");
    let stored: HashSet<String> = api
        .list(&ListParams::default())
        .await
        .expect("list")
        .items
        .into_iter()
        .filter_map(|cm| cm.metadata.name)
        .collect();
    let acknowledged = acknowledged.lock().expect("lock").clone();
    let lost: Vec<&String> = acknowledged.difference(&stored).collect();
    server.kill().expect("stop");
    let _ = server.wait();
    assert!(
        acknowledged.len() > rounds * 20,
        "too few creates to prove anything: {}",
        acknowledged.len()
    );
    assert!(
        lost.is_empty(),
        "{} of {} acknowledged creates lost: {:?}",
        lost.len(),
        acknowledged.len(),
        &lost[..lost.len().min(10)]
    );
    eprintln!(
        "{rounds} kills, {} acknowledged creates, none lost",
        acknowledged.len()
    );
}
