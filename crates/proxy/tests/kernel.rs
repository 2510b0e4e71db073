//! The proxy's transactions in a real kernel: network namespaces this
//! test makes (a "node" holding the rules and a client, a "pods" namespace
//! holding endpoints behind a veth, and for the external traffic policy a
//! client "outside"), real `nft`, real connections. Nothing leaves the
//! machine: every address is inside the namespaces.
//!
//! Needs root: fails otherwise, unless `RUDDER_SKIP_ROOT_TESTS=1` skips it
//! knowingly.

use std::process::{Child, Command as Process, Stdio};
use std::time::Duration;

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use rudder_host::{Host, InNamespace};
use rudder_proxy::model::ServiceName;
use rudder_proxy::proxier::Proxier;
use rudder_proxy::rules::Config;
use rudder_proxy::topology::Locality;
use serde_json::json;

fn sh(script: &str) {
    let status = Process::new("sh")
        .args(["-c", script])
        .status()
        .expect("sh runs");
    assert!(status.success(), "{script}");
}

/// The two namespaces, removed when dropped.
struct Namespaces {
    node: String,
    pods: String,
    servers: Vec<Child>,
}

impl Namespaces {
    fn make() -> Namespaces {
        let id = std::process::id();
        let node = format!("rudder-proxy-node-{id}");
        let pods = format!("rudder-proxy-pods-{id}");
        sh(&format!(
            "ip netns add {node} && ip netns add {pods} && \
             ip link add rpn{id} netns {node} type veth peer name rpp{id} netns {pods} && \
             ip -n {node} addr add 10.42.1.1/24 dev rpn{id} && ip -n {node} link set rpn{id} up && \
             ip -n {node} link set lo up && \
             ip -n {pods} addr add 10.42.1.2/24 dev rpp{id} && ip -n {pods} addr add 10.42.1.3/24 dev rpp{id} && \
             ip -n {pods} link set rpp{id} up && ip -n {pods} link set lo up && \
             ip -n {node} route add 10.43.0.0/16 dev rpn{id} && \
             ip -n {pods} route add default via 10.42.1.1 && \
             ip netns exec {node} sh -c 'echo 1 > /proc/sys/net/ipv4/ip_forward'"
        ));
        let mut servers = Vec::new();
        // Busybox's nc listens on every address: the two endpoints differ
        // by port (two slices, as a named targetPort can make them).
        for (port, answer) in [(8080, "A"), (8081, "B")] {
            servers.push(
                Process::new("ip")
                    .args(["netns", "exec", &pods, "busybox", "nc", "-ll", "-p"])
                    .arg(port.to_string())
                    .args(["-e", "echo", answer])
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()
                    .expect("a server"),
            );
        }
        std::thread::sleep(Duration::from_millis(300));
        Namespaces {
            node,
            pods,
            servers,
        }
    }

    /// What a client in the node namespace gets from `address:port`: the
    /// answer, or nc's error.
    fn connect(&self, address: &str, port: u16) -> String {
        let output = Process::new("ip")
            .args([
                "netns", "exec", &self.node, "busybox", "nc", "-w", "2", address,
            ])
            .arg(port.to_string())
            .stdin(Stdio::null())
            .output()
            .expect("nc runs");
        let text = String::from_utf8_lossy(&output.stdout).trim().to_string();
        if text.is_empty() {
            String::from_utf8_lossy(&output.stderr).trim().to_string()
        } else {
            text
        }
    }
}

impl Drop for Namespaces {
    fn drop(&mut self) {
        for server in &mut self.servers {
            let _ = server.kill();
            let _ = server.wait();
        }
        let _ = Process::new("sh")
            .arg("-c")
            .arg(format!(
                "ip netns pids {pods} | xargs -r kill; ip netns del {node}; ip netns del {pods}",
                node = self.node,
                pods = self.pods
            ))
            .status();
    }
}

fn service(name: &str, ip: &str, node_port: Option<u16>) -> Service {
    let mut port = json!({"name": "http", "port": 80, "targetPort": 8080});
    if let Some(node_port) = node_port {
        port["nodePort"] = json!(node_port);
    }
    serde_json::from_value(json!({
        "metadata": {"namespace": "default", "name": name},
        "spec": {"type": if node_port.is_some() { "NodePort" } else { "ClusterIP" },
                 "clusterIP": ip, "ports": [port]}
    }))
    .expect("a Service")
}

/// The slice `n` of `service`: one endpoint, ready or not, on `port`.
fn slice(service: &str, n: u32, ip: &str, port: u16, ready: bool) -> EndpointSlice {
    serde_json::from_value(json!({
        "metadata": {"namespace": "default", "name": format!("{service}-{n}"),
                     "labels": {"kubernetes.io/service-name": service}},
        "addressType": "IPv4",
        "ports": [{"name": "http", "port": port, "protocol": "TCP"}],
        "endpoints": [{"addresses": [ip], "conditions": {"ready": ready}, "nodeName": "n1"}]
    }))
    .expect("an EndpointSlice")
}

async fn sync(proxier: &mut Proxier, host: &dyn Host) {
    while let Some(transaction) = proxier.next_transaction(1000) {
        rudder_host::nft::apply(host, &transaction)
            .await
            .unwrap_or_else(|e| panic!("{e}\n{transaction}"));
    }
}

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .map(|l| l.split_whitespace().nth(1) == Some("0"))
        })
        .unwrap_or(false)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_ips_and_node_ports_reach_ready_endpoints_and_nothing_else() {
    if !is_root() {
        assert!(
            std::env::var("RUDDER_SKIP_ROOT_TESTS").is_ok_and(|v| v == "1"),
            "the proxy's kernel test needs root (network namespaces, nftables): run it as root, \
             or set RUDDER_SKIP_ROOT_TESTS=1 to skip it knowingly"
        );
        eprintln!(
            "SKIPPED: the proxy's kernel test needs root and RUDDER_SKIP_ROOT_TESTS=1 skips it"
        );
        return;
    }
    let namespaces = Namespaces::make();
    let host = InNamespace::new(&namespaces.node);
    let config = Config {
        cluster_cidr: "10.42.0.0/16".parse().expect("cidr"),
        service_cidr: "10.43.0.0/16".parse().expect("cidr"),
    };
    let here = Locality {
        node_name: "n1".into(),
        zone: None,
    };
    let mut proxier = Proxier::new(config, here);
    let web = ServiceName::new("default", "web");
    let empty = ServiceName::new("default", "empty");
    proxier.service(
        web.clone(),
        Some(&service("web", "10.43.0.10", Some(30080))),
    );
    proxier.slice(None, Some(&slice("web", 1, "10.42.1.2", 8080, true)));
    proxier.slice(None, Some(&slice("web", 2, "10.42.1.3", 8081, true)));
    proxier.service(empty.clone(), Some(&service("empty", "10.43.0.11", None)));
    sync(&mut proxier, &host).await;

    // Both endpoints answer through the ClusterIP, and through the
    // NodePort on the node's own address.
    let mut seen = std::collections::BTreeSet::new();
    for _ in 0..30 {
        seen.insert(namespaces.connect("10.43.0.10", 80));
        if seen.len() == 2 {
            break;
        }
    }
    assert_eq!(
        seen,
        ["A".to_string(), "B".to_string()].into(),
        "both endpoints answer"
    );
    let through_node_port = namespaces.connect("10.42.1.1", 30080);
    assert!(
        ["A", "B"].contains(&through_node_port.as_str()),
        "{through_node_port}"
    );

    // No endpoints: refused (nc says "timed out" when a packet is
    // dropped); the same for an undefined port of a ClusterIP.
    let refused = namespaces.connect("10.43.0.11", 80);
    assert!(refused.contains("refused"), "{refused}");
    let refused = namespaces.connect("10.43.0.10", 81);
    assert!(refused.contains("refused"), "{refused}");

    // Hairpin: a pod reaching itself through its Service is answered
    // (masqueraded, so that the reply comes back through the node).
    proxier.service(
        ServiceName::new("default", "self"),
        Some(&service("self", "10.43.0.13", None)),
    );
    proxier.slice(None, Some(&slice("self", 1, "10.42.1.2", 8080, true)));
    sync(&mut proxier, &host).await;
    let output = Process::new("ip")
        .args([
            "netns",
            "exec",
            &namespaces.pods,
            "busybox",
            "nc",
            "-w",
            "2",
            "10.43.0.13",
            "80",
        ])
        .stdin(Stdio::null())
        .output()
        .expect("nc runs");
    assert_eq!(
        String::from_utf8_lossy(&output.stdout).trim(),
        "A",
        "the pod reached itself: {}",
        String::from_utf8_lossy(&output.stderr)
    );

    // ClientIP affinity: once a client has reached an endpoint, it keeps
    // reaching that one.
    let mut sticky = service("sticky", "10.43.0.12", None);
    if let Some(spec) = sticky.spec.as_mut() {
        spec.session_affinity = Some("ClientIP".into());
    }
    proxier.service(ServiceName::new("default", "sticky"), Some(&sticky));
    proxier.slice(None, Some(&slice("sticky", 1, "10.42.1.2", 8080, true)));
    proxier.slice(None, Some(&slice("sticky", 2, "10.42.1.3", 8081, true)));
    sync(&mut proxier, &host).await;
    let first = namespaces.connect("10.43.0.12", 80);
    assert!(["A", "B"].contains(&first.as_str()), "{first}");
    for _ in 0..10 {
        assert_eq!(
            namespaces.connect("10.43.0.12", 80),
            first,
            "affinity holds"
        );
    }

    // An endpoint going unready is out of rotation after one sync.
    proxier.slice(None, Some(&slice("web", 2, "10.42.1.3", 8081, false)));
    sync(&mut proxier, &host).await;
    for _ in 0..10 {
        assert_eq!(namespaces.connect("10.43.0.10", 80), "A");
    }

    // A Service deleted leaves nothing behind: its address is dropped
    // like any unallocated one.
    proxier.service(web, None);
    sync(&mut proxier, &host).await;
    let gone = namespaces.connect("10.43.0.10", 80);
    assert!(!["A", "B"].contains(&gone.as_str()), "{gone}");

    // A refused transaction changes nothing; the next one rebuilds the
    // table whole and it serves again.
    assert!(
        rudder_host::nft::apply(&host, "add element ip rudder-proxy no-such-map { 1 }\n")
            .await
            .is_err()
    );
    proxier.failed();
    proxier.slice(None, Some(&slice("empty", 1, "10.42.1.3", 8081, true)));
    sync(&mut proxier, &host).await;
    assert_eq!(namespaces.connect("10.43.0.11", 80), "B");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_local_external_policy_keeps_the_clients_address_and_cluster_masquerades_it() {
    if !is_root() {
        assert!(
            std::env::var("RUDDER_SKIP_ROOT_TESTS").is_ok_and(|v| v == "1"),
            "the proxy's kernel test needs root: run it as root, or set RUDDER_SKIP_ROOT_TESTS=1"
        );
        return;
    }
    // A client outside the cluster (192.0.2.10) reaches the node's
    // address (192.0.2.1), a load balancer's, whose one endpoint is a pod
    // on this node.
    let id = std::process::id();
    let (node, pods, outside) = (
        format!("rudder-lb-node-{id}"),
        format!("rudder-lb-pods-{id}"),
        format!("rudder-lb-out-{id}"),
    );
    struct Cleanup(String);
    impl Drop for Cleanup {
        fn drop(&mut self) {
            let _ = Process::new("sh").arg("-c").arg(&self.0).status();
        }
    }
    let _cleanup = Cleanup(format!(
        "for n in {node} {pods} {outside}; do ip netns pids $n 2>/dev/null | xargs -r kill; ip netns del $n 2>/dev/null; done"
    ));
    sh(&format!(
        "ip netns add {node} && ip netns add {pods} && ip netns add {outside} && \
         ip link add rln{id} netns {node} type veth peer name rlp{id} netns {pods} && \
         ip link add rlo{id} netns {node} type veth peer name rlc{id} netns {outside} && \
         ip -n {node} addr add 10.42.1.1/24 dev rln{id} && ip -n {node} link set rln{id} up && \
         ip -n {node} addr add 192.0.2.1/24 dev rlo{id} && ip -n {node} link set rlo{id} up && \
         ip -n {node} link set lo up && \
         ip -n {pods} addr add 10.42.1.2/24 dev rlp{id} && ip -n {pods} link set rlp{id} up && \
         ip -n {pods} route add default via 10.42.1.1 && \
         ip -n {outside} addr add 192.0.2.10/24 dev rlc{id} && ip -n {outside} link set rlc{id} up && \
         ip netns exec {node} sh -c 'echo 1 > /proc/sys/net/ipv4/ip_forward'"
    ));
    let mut server = Process::new("ip")
        .args([
            "netns", "exec", &pods, "busybox", "nc", "-ll", "-p", "9090", "-e", "sleep", "3",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("a server");
    std::thread::sleep(Duration::from_millis(300));
    let host = InNamespace::new(&node);
    let mut proxier = Proxier::new(
        Config {
            cluster_cidr: "10.42.0.0/16".parse().expect("cidr"),
            service_cidr: "10.43.0.0/16".parse().expect("cidr"),
        },
        Locality {
            node_name: "n1".into(),
            zone: None,
        },
    );
    let lb = |policy: &str| -> Service {
        serde_json::from_value(json!({
            "metadata": {"namespace": "default", "name": "lb"},
            "spec": {"type": "LoadBalancer", "clusterIP": "10.43.0.30", "externalTrafficPolicy": policy,
                     "ports": [{"name": "http", "port": 80, "nodePort": 30090}]},
            "status": {"loadBalancer": {"ingress": [{"ip": "192.0.2.1"}]}}
        }))
        .expect("a Service")
    };
    let name = ServiceName::new("default", "lb");
    proxier.service(name.clone(), Some(&lb("Local")));
    proxier.slice(None, Some(&slice("lb", 1, "10.42.1.2", 9090, true)));
    sync(&mut proxier, &host).await;
    // What the pod answered to, from the node's connection tracking: the
    // reply's destination is the client when its address was kept, the
    // node when it was masqueraded.
    let replied_to = || -> String {
        let status = Process::new("ip")
            .args([
                "netns",
                "exec",
                &outside,
                "busybox",
                "nc",
                "-w",
                "2",
                "192.0.2.1",
                "80",
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .expect("a client");
        assert!(status.success(), "the client connected");
        let tracked = Process::new("ip")
            .args([
                "netns",
                "exec",
                &node,
                "conntrack",
                "-L",
                "-p",
                "tcp",
                "--orig-dst",
                "192.0.2.1",
            ])
            .output()
            .expect("conntrack runs");
        let _ = Process::new("ip")
            .args(["netns", "exec", &node, "conntrack", "-F"])
            .output();
        String::from_utf8_lossy(&tracked.stdout).to_string()
    };
    let local = replied_to();
    assert!(
        local.contains("src=10.42.1.2 dst=192.0.2.10"),
        "the client's own address reached the pod: {local}"
    );
    // The Cluster policy masquerades: the pod sees the node.
    proxier.service(name, Some(&lb("Cluster")));
    sync(&mut proxier, &host).await;
    let cluster = replied_to();
    assert!(
        cluster.contains("src=10.42.1.2 dst=10.42.1.1"),
        "the node's address reached the pod: {cluster}"
    );
    let _ = server.kill();
    let _ = server.wait();
}
