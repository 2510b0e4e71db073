//! Bodies encoded with the k8s-pb crate's prost types, as client-go encodes
//! them, decode to the JSON upstream would store.

use std::collections::BTreeMap;

use k8s_pb::api::apps::v1 as apps;
use k8s_pb::api::core::v1 as core;
use k8s_pb::apimachinery::pkg::api::resource::Quantity;
use k8s_pb::apimachinery::pkg::apis::meta::v1 as meta;
use k8s_pb::apimachinery::pkg::runtime::{TypeMeta, Unknown};
use k8s_pb::apimachinery::pkg::util::intstr::IntOrString;
use prost::Message;
use serde_json::json;

use super::*;

fn envelope(api_version: &str, kind: &str, raw: Vec<u8>) -> Vec<u8> {
    let unknown = Unknown {
        type_meta: Some(TypeMeta {
            api_version: Some(api_version.into()),
            kind: Some(kind.into()),
        }),
        raw: Some(raw),
        content_encoding: Some(String::new()),
        content_type: Some(String::new()),
    };
    let mut body = MAGIC.to_vec();
    body.extend(unknown.encode_to_vec());
    body
}

/// A message decoded as the server decodes a request body.
fn decoded(api_version: &str, kind: &str, message: &impl Message) -> Value {
    decode(
        &Registry::builtin(),
        &envelope(api_version, kind, message.encode_to_vec()),
    )
    .expect("decodes")
}

fn meta(name: &str) -> meta::ObjectMeta {
    meta::ObjectMeta {
        name: Some(name.into()),
        namespace: Some("default".into()),
        labels: BTreeMap::from([("app".to_string(), "web".to_string())]),
        creation_timestamp: Some(meta::Time {
            seconds: Some(1_796_000_000),
            nanos: Some(0),
        }),
        ..Default::default()
    }
}

#[test]
fn a_configmap_decodes() {
    let cm = core::ConfigMap {
        metadata: Some(meta("c1")),
        data: BTreeMap::from([("key".to_string(), "value".to_string())]),
        ..Default::default()
    };
    let object = decoded("v1", "ConfigMap", &cm);
    assert_eq!(
        object,
        json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "c1", "namespace": "default", "labels": {"app": "web"}, "creationTimestamp": "2026-11-30T00:53:20Z"},
            "data": {"key": "value"}
        })
    );
}

#[test]
fn secret_bytes_become_base64_and_namespaces_decode() {
    let secret = core::Secret {
        metadata: Some(meta("s1")),
        data: BTreeMap::from([
            ("p".to_string(), b"q".to_vec()),
            ("bin".to_string(), vec![0, 255, 1]),
        ]),
        r#type: Some("Opaque".into()),
        ..Default::default()
    };
    let object = decoded("v1", "Secret", &secret);
    assert_eq!(object["data"], json!({"p": "cQ==", "bin": "AP8B"}));
    assert_eq!(object["type"], "Opaque");

    let ns = core::Namespace {
        metadata: Some(meta::ObjectMeta {
            name: Some("n".into()),
            ..Default::default()
        }),
        ..Default::default()
    };
    let object = decoded("v1", "Namespace", &ns);
    assert_eq!(
        object,
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "n"}})
    );
}

#[test]
fn a_deployment_with_quantities_and_int_or_strings_decodes() {
    let container = core::Container {
        name: Some("main".into()),
        image: Some("r/web:1".into()),
        ports: vec![core::ContainerPort {
            container_port: Some(8080),
            ..Default::default()
        }],
        resources: Some(core::ResourceRequirements {
            limits: BTreeMap::from([(
                "cpu".to_string(),
                Quantity {
                    string: Some("500m".into()),
                },
            )]),
            ..Default::default()
        }),
        ..Default::default()
    };
    let deployment = apps::Deployment {
        metadata: Some(meta("web")),
        spec: Some(apps::DeploymentSpec {
            replicas: Some(0),
            selector: Some(meta::LabelSelector {
                match_labels: BTreeMap::from([("app".to_string(), "web".to_string())]),
                ..Default::default()
            }),
            template: Some(core::PodTemplateSpec {
                metadata: Some(meta::ObjectMeta {
                    labels: BTreeMap::from([("app".to_string(), "web".to_string())]),
                    ..Default::default()
                }),
                spec: Some(core::PodSpec {
                    containers: vec![container],
                    ..Default::default()
                }),
            }),
            strategy: Some(apps::DeploymentStrategy {
                r#type: Some("RollingUpdate".into()),
                rolling_update: Some(apps::RollingUpdateDeployment {
                    max_unavailable: Some(IntOrString {
                        r#type: Some(0),
                        int_val: Some(1),
                        str_val: None,
                    }),
                    max_surge: Some(IntOrString {
                        r#type: Some(1),
                        int_val: None,
                        str_val: Some("25%".into()),
                    }),
                }),
            }),
            ..Default::default()
        }),
        ..Default::default()
    };
    let object = decoded("apps/v1", "Deployment", &deployment);
    assert_eq!(object["spec"]["replicas"], 0, "a present zero stays");
    assert_eq!(
        object["spec"]["selector"],
        json!({"matchLabels": {"app": "web"}})
    );
    let c = &object["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(c["ports"], json!([{"containerPort": 8080}]));
    assert_eq!(c["resources"], json!({"limits": {"cpu": "500m"}}));
    assert_eq!(
        object["spec"]["strategy"]["rollingUpdate"],
        json!({"maxUnavailable": 1, "maxSurge": "25%"})
    );
    // And the typed form agrees: the decoded object is a valid Deployment.
    let registry = Registry::builtin();
    let def = registry.get("apps", "v1", "deployments").expect("def");
    assert_eq!(
        crate::object::unknown_fields(def, &object).expect("typed"),
        Vec::<String>::new()
    );
}

/// Go's protobuf encoding writes every non-pointer string field, empty or
/// not (kubectl 1.32+ `create deployment` sends `dnsPolicy: ""` and the
/// like): those are unset, as Go's defaulting reads them.
#[test]
fn empty_strings_from_go_are_unset_values() {
    let container = core::Container {
        name: Some("main".into()),
        image: Some("nginx:1.25".into()),
        image_pull_policy: Some(String::new()),
        termination_message_path: Some(String::new()),
        ports: vec![core::ContainerPort {
            container_port: Some(80),
            protocol: Some(String::new()),
            name: Some(String::new()),
            host_ip: Some(String::new()),
            host_port: Some(0),
        }],
        stdin: Some(false),
        tty: Some(false),
        ..Default::default()
    };
    let pod = core::Pod {
        metadata: Some(meta::ObjectMeta {
            name: Some("p".into()),
            namespace: Some(String::new()),
            generate_name: Some(String::new()),
            ..Default::default()
        }),
        spec: Some(core::PodSpec {
            containers: vec![container],
            restart_policy: Some(String::new()),
            dns_policy: Some(String::new()),
            service_account_name: Some(String::new()),
            ..Default::default()
        }),
        ..Default::default()
    };
    let object = decoded("v1", "Pod", &pod);
    assert_eq!(
        object,
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
               "spec": {"containers": [{"name": "main", "image": "nginx:1.25", "ports": [{"containerPort": 80}]}]}})
    );
    // "" is a value for a storage class: no class at all.
    let claim = core::PersistentVolumeClaim {
        metadata: Some(meta("c")),
        spec: Some(core::PersistentVolumeClaimSpec {
            storage_class_name: Some(String::new()),
            ..Default::default()
        }),
        ..Default::default()
    };
    let object = decoded("v1", "PersistentVolumeClaim", &claim);
    assert_eq!(object["spec"]["storageClassName"], json!(""));
}

/// Go structs embedded inline in JSON are messages of their own on the
/// wire: their fields belong to the parent.
#[test]
fn inline_structs_merge_into_their_parent() {
    let pod = core::Pod {
        metadata: Some(meta("p")),
        spec: Some(core::PodSpec {
            containers: vec![core::Container {
                name: Some("c".into()),
                image: Some("i".into()),
                liveness_probe: Some(core::Probe {
                    handler: Some(core::ProbeHandler {
                        tcp_socket: Some(core::TcpSocketAction {
                            port: Some(IntOrString {
                                r#type: Some(0),
                                int_val: Some(80),
                                str_val: None,
                            }),
                            host: None,
                        }),
                        ..Default::default()
                    }),
                    period_seconds: Some(5),
                    ..Default::default()
                }),
                ..Default::default()
            }],
            volumes: vec![core::Volume {
                name: Some("v".into()),
                volume_source: Some(core::VolumeSource {
                    empty_dir: Some(core::EmptyDirVolumeSource::default()),
                    ..Default::default()
                }),
            }],
            ..Default::default()
        }),
        ..Default::default()
    };
    let object = decoded("v1", "Pod", &pod);
    assert_eq!(
        object["spec"]["volumes"],
        json!([{"name": "v", "emptyDir": {}}])
    );
    assert_eq!(
        object["spec"]["containers"][0]["livenessProbe"],
        json!({"tcpSocket": {"port": 80}, "periodSeconds": 5})
    );
}

#[test]
fn irregular_json_names_follow_the_openapi_schema() {
    let status = core::PodStatus {
        pod_ip: Some("10.42.0.5".into()),
        host_ip: Some("10.0.0.1".into()),
        ..Default::default()
    };
    let pod = core::Pod {
        metadata: Some(meta("p")),
        status: Some(status),
        ..Default::default()
    };
    let object = decoded("v1", "Pod", &pod);
    assert_eq!(
        object["status"],
        json!({"podIP": "10.42.0.5", "hostIP": "10.0.0.1"})
    );
}

#[test]
fn delete_options_decode_from_any_group() {
    let options = meta::DeleteOptions {
        grace_period_seconds: Some(0),
        propagation_policy: Some("Foreground".into()),
        ..Default::default()
    };
    let object = decoded("v1", "DeleteOptions", &options);
    assert_eq!(object["gracePeriodSeconds"], 0);
    assert_eq!(object["propagationPolicy"], "Foreground");
}

#[test]
fn malformed_bodies_are_errors_not_panics() {
    let registry = Registry::builtin();
    assert!(decode(&registry, b"{}").is_err());
    assert!(decode(&registry, b"k8s\0\x0a\xff").is_err());
    let truncated = envelope(
        "v1",
        "ConfigMap",
        core::ConfigMap {
            metadata: Some(meta("c")),
            ..Default::default()
        }
        .encode_to_vec(),
    );
    assert!(decode(&registry, &truncated[..truncated.len() - 3]).is_err());
    for cut in 0..truncated.len() {
        let _ = decode(&registry, &truncated[..cut]);
    }
}

#[test]
fn go_durations_read_as_go_prints_them() {
    assert_eq!(go_duration(0), "0s");
    assert_eq!(go_duration(1_500_000_000), "1.5s");
    assert_eq!(go_duration(90_000_000_000), "1m30s");
    assert_eq!(go_duration(3_600_000_000_000), "1h0m0s");
    assert_eq!(go_duration(150_000_000), "150ms");
}

#[test]
fn the_inline_fields_are_upstreams() {
    let schema = Schema::get();
    let mut inline: Vec<String> = schema
        .messages
        .iter()
        .flat_map(|(name, fields)| {
            fields
                .values()
                .filter(|f| f.inline)
                .map(move |f| format!("{}.{}", name.rsplit('.').next().unwrap_or(name), f.json))
        })
        .collect();
    inline.sort();
    assert_eq!(
        inline,
        [
            "configmapenvsource.localObjectReference",
            "configmapkeyselector.localObjectReference",
            "configmapprojection.localObjectReference",
            "configmapvolumesource.localObjectReference",
            "ephemeralcontainer.ephemeralContainerCommon",
            "ingressrule.ingressRuleValue",
            "namedrulewithoperations.ruleWithOperations",
            "persistentvolumespec.persistentVolumeSource",
            "probe.handler",
            "rulewithoperations.rule",
            "secretenvsource.localObjectReference",
            "secretkeyselector.localObjectReference",
            "secretprojection.localObjectReference",
            "volume.volumeSource",
        ]
    );
}
