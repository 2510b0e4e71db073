//! Objects are written as Go writes them on every path — the answer to a
//! create, GET, LIST (from the watch cache and from the store), watch (from
//! the watch cache and from the store): `kind`, `apiVersion`, `metadata`,
//! `spec`, `status`, and each struct's fields in declaration order
//! (ObjectMeta's `name`, `namespace`, `uid`, `resourceVersion`,
//! `generation`, `creationTimestamp`, …). Custom resources are unstructured
//! upstream, written with sorted keys, and so here.

mod support;

use std::fmt;

use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Api, PostParams};
use serde::de::{Deserializer, MapAccess, Visitor};
use serde_json::json;
use serde_json::value::RawValue;
use support::Backend;

/// The keys of a JSON object in the order written, each with its value's
/// text.
struct Keys(Vec<(String, Box<RawValue>)>);

impl<'de> serde::Deserialize<'de> for Keys {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Collect;
        impl<'de> Visitor<'de> for Collect {
            type Value = Keys;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Keys, A::Error> {
                let mut keys = Vec::new();
                while let Some((key, value)) = map.next_entry::<String, Box<RawValue>>()? {
                    keys.push((key, value));
                }
                Ok(Keys(keys))
            }
        }
        deserializer.deserialize_map(Collect)
    }
}

fn keys(json: &str) -> Keys {
    serde_json::from_str(json).unwrap_or_else(|e| panic!("{e}: {json}"))
}

impl Keys {
    fn names(&self) -> Vec<&str> {
        self.0.iter().map(|(k, _)| k.as_str()).collect()
    }

    fn get(&self, key: &str) -> Keys {
        let (_, raw) = self
            .0
            .iter()
            .find(|(k, _)| k == key)
            .unwrap_or_else(|| panic!("no {key} in {:?}", self.names()));
        keys(raw.get())
    }
}

/// Checks a Deployment's JSON for Go's order at the levels that show it.
fn assert_go_order(what: &str, json: &str) {
    let top = keys(json);
    assert_eq!(
        top.names(),
        ["kind", "apiVersion", "metadata", "spec", "status"],
        "{what}: {json}"
    );
    let metadata = top.get("metadata");
    assert_eq!(
        metadata.names(),
        [
            "name",
            "namespace",
            "uid",
            "resourceVersion",
            "generation",
            "creationTimestamp",
            "labels",
            "annotations",
            "managedFields",
        ],
        "{what}: {json}"
    );
    let spec = top.get("spec");
    assert_eq!(
        spec.names(),
        [
            "replicas",
            "selector",
            "template",
            "strategy",
            "revisionHistoryLimit",
            "progressDeadlineSeconds",
        ],
        "{what}: {json}"
    );
    let pod_spec = spec.get("template").get("spec");
    let template_spec = pod_spec.names();
    let order = |a: &str, b: &str| {
        let at = |k: &str| template_spec.iter().position(|x| *x == k);
        at(a) < at(b)
    };
    assert!(
        order("containers", "restartPolicy")
            && order("restartPolicy", "terminationGracePeriodSeconds")
            && order("dnsPolicy", "securityContext")
            && order("securityContext", "schedulerName"),
        "{what}: pod spec keys {template_spec:?}"
    );
}

fn deployment() -> Deployment {
    serde_json::from_value(json!({
        "metadata": {"name": "web", "labels": {"app": "web"}, "annotations": {"note": "x"}},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "web", "image": "nginx", "ports": [{"containerPort": 80}]}]},
            },
        },
    }))
    .expect("deployment")
}

async fn text(client: &kube::Client, path: &str) -> String {
    let request = http::Request::get(path).body(Vec::new()).expect("request");
    client.request_text(request).await.expect(path)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn objects_are_written_in_gos_field_order_on_every_path() {
    let server = support::start(Backend::Embedded).await;
    let client = server.client.clone();
    let api: Api<Deployment> = Api::namespaced(client.clone(), "default");

    // The create's answer.
    let request = http::Request::post("/apis/apps/v1/namespaces/default/deployments")
        .header("Content-Type", "application/json")
        .body(serde_json::to_vec(&deployment()).expect("json"))
        .expect("request");
    let created = client.request_text(request).await.expect("create");
    assert_go_order("create", &created);

    let path = "/apis/apps/v1/namespaces/default/deployments";
    assert_go_order("GET", &text(&client, &format!("{path}/web")).await);
    for (what, query) in [
        ("LIST from the watch cache", ""),
        (
            "LIST from the store",
            "?resourceVersion=1&resourceVersionMatch=NotOlderThan&limit=5",
        ),
    ] {
        let list = keys(&text(&client, &format!("{path}{query}")).await);
        assert_eq!(
            list.names(),
            ["kind", "apiVersion", "metadata", "items"],
            "{what}"
        );
        let (_, items) = &list.0[3];
        let items: Vec<Box<RawValue>> = serde_json::from_str(items.get()).expect("items");
        assert_go_order(what, items[0].get());
    }

    // Watches: the first event of a watch from before the create, and
    // the ADDED events of one without a resourceVersion.
    for (what, query) in [
        ("watch", "?watch=true&resourceVersion=1&timeoutSeconds=1"),
        ("watch of the state", "?watch=true&timeoutSeconds=1"),
    ] {
        let body = text(&client, &format!("{path}{query}")).await;
        let line = body.lines().next().expect("an event");
        let event = keys(line);
        assert_eq!(event.names(), ["type", "object"], "{what}");
        assert_go_order(what, event.0[1].1.get());
    }

    // A write on top of an object stored in Go's order keeps it.
    let mut scaled = api.get("web").await.expect("get");
    scaled.spec.as_mut().expect("spec").replicas = Some(3);
    api.replace("web", &PostParams::default(), &scaled)
        .await
        .expect("replace");
    assert_go_order(
        "GET after an update",
        &text(&client, &format!("{path}/web")).await,
    );
}
