//! Services carry traffic on a real one-node cluster (`rudder server` with
//! its agent and service proxy, containerd, the CNI bridge, nftables):
//! `kubectl expose` gives a ClusterIP that a client pod and the host
//! reach, balanced over the Deployment's pods; a NodePort answers on the
//! node's addresses; a Service whose selector matches nothing refuses at
//! once; a pod taken out of the Service leaves the rotation. Needs root: fails
//! otherwise, unless `RUDDER_SKIP_ROOT_TESTS=1` skips it knowingly.
//!
//! Nothing leaves the machine: the test talks to loopback, to its own
//! bridge's addresses and to Service addresses the proxy rewrites to
//! them; the cluster and service CIDRs stay blackholed.

mod common;

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use common::Kubectl;
use common::node::{Cluster, NodeAddress, wait_for};

const BRIDGE: &str = "rudsvc0";
const CLUSTER_CIDR: &str = "10.42.224.0/20";
const IMAGE: &str = "rudder.local/busybox:1";
/// The node's address: one the test adds to loopback (a node at 127.0.0.1
/// could carry no load balancer, nor NodePorts).
const NODE_IP: &str = "10.99.224.1";

/// GET /index.html from `ip:port`, two seconds at most per step.
fn get(ip: &str, port: u16) -> Result<String, String> {
    common::http_get(ip, port, Duration::from_secs(2))
}

/// What busybox's nslookup on the host says of `name`, asking the cluster
/// DNS Service's address.
fn lookup_from_host(name: &str) -> Option<String> {
    let out = std::process::Command::new("busybox")
        .args(["nslookup", name, "10.43.0.10"])
        .output()
        .ok()?;
    Some(String::from_utf8_lossy(&out.stdout).to_string())
}

/// The bodies `n` requests to `ip:port` got.
fn answers(ip: &str, port: u16, n: usize) -> BTreeSet<String> {
    (0..n)
        .map(|_| get(ip, port).unwrap_or_else(|e| format!("error: {e}")))
        .collect()
}

#[test]
fn services_reach_their_pods_from_pods_and_from_the_host() {
    if !common::require_root("services_e2e") {
        return;
    }
    let _address = NodeAddress::add(NODE_IP);
    let mut cluster = Cluster::start_with_node_ip(BRIDGE, CLUSTER_CIDR, NODE_IP);
    let kubectl = common::versions().pop().expect("a kubectl").1;
    let k = cluster.kubectl(&kubectl, "default");
    cluster.wait_node_ready(&k);

    // Two web pods, each answering with its own name; ready while
    // /tmp/ready exists.
    let web = format!(
        r#"{{"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {{"name": "web"}},
          "spec": {{"replicas": 2, "selector": {{"matchLabels": {{"app": "web"}}}},
            "template": {{"metadata": {{"labels": {{"app": "web"}}}},
              "spec": {{"terminationGracePeriodSeconds": 1, "containers": [{{"name": "web", "image": "{IMAGE}",
                "command": ["sh", "-c", "echo $(hostname) > /tmp/index.html; touch /tmp/ready; exec httpd -f -p 8080 -h /tmp"],
                "readinessProbe": {{"exec": {{"command": ["test", "-f", "/tmp/ready"]}}, "periodSeconds": 1, "failureThreshold": 1}}}}]}}}}}}}}"#
    );
    let (ok, out) = k.run(&["apply", "-f", "-"], Some(&web));
    assert!(ok, "{out}");
    let (ok, out) = k.run(
        &[
            "expose",
            "deployment",
            "web",
            "--port=80",
            "--target-port=8080",
        ],
        None,
    );
    assert!(ok, "{out}");
    let (ok, out) = k.run(
        &[
            "create",
            "service",
            "nodeport",
            "web-np",
            "--tcp=81:8080",
            "--node-port=30981",
        ],
        None,
    );
    assert!(ok, "{out}");
    // create service nodeport selects app=web-np: point it at the pods.
    let (ok, out) = k.run(&["set", "selector", "service", "web-np", "app=web"], None);
    assert!(ok, "{out}");
    let (ok, out) = k.run(
        &["create", "service", "clusterip", "nobody", "--tcp=80:8080"],
        None,
    );
    assert!(ok, "{out}");

    let pods: BTreeSet<String> = wait_for(
        "2 ready web pods",
        Duration::from_secs(90),
        &cluster,
        || {
            let out = k.jsonpath(&["get", "pods", "-l", "app=web"],
                r#"{range .items[*]}{.metadata.name} {.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}"#,
            );
            let ready: BTreeSet<String> = out
                .lines()
                .filter(|l| l.ends_with(" True"))
                .filter_map(|l| l.split_whitespace().next().map(str::to_string))
                .collect();
            (ready.len() == 2).then_some(ready)
        },
    );
    let cluster_ip = k.jsonpath(&["get", "service", "web"], "{.spec.clusterIP}");
    assert!(cluster_ip.starts_with("10.43."), "{cluster_ip}");

    // From the host: the ClusterIP balances over both pods.
    let seen = wait_for(
        "both pods through the ClusterIP",
        Duration::from_secs(30),
        &cluster,
        || {
            let seen = answers(&cluster_ip, 80, 20);
            (seen == pods).then_some(seen)
        },
    );
    assert_eq!(seen, pods);

    // A NodePort answers on the node's addresses (its bridge's here; the
    // test reaches no other), never on loopback.
    let gateway = rudder_api::network::Cidr::parse(
        &k.jsonpath(&["get", "node", "e2e-node"], "{.spec.podCIDR}"),
    )
    .expect("a podCIDR")
    .gateway()
    .to_string();
    let through_node_port = wait_for("the NodePort", Duration::from_secs(30), &cluster, || {
        get(&gateway, 30981).ok()
    });
    assert!(pods.contains(&through_node_port), "{through_node_port}");
    assert!(get("127.0.0.1", 30981).is_err(), "no NodePort on loopback");

    // A LoadBalancer gets the node's address (no class: rudder's own load
    // balancer), shown by kubectl, and answers on it.
    let (ok, out) = k.run(
        &[
            "create",
            "service",
            "loadbalancer",
            "web-lb",
            "--tcp=82:8080",
        ],
        None,
    );
    assert!(ok, "{out}");
    let (ok, out) = k.run(&["set", "selector", "service", "web-lb", "app=web"], None);
    assert!(ok, "{out}");
    let node_ip = k.jsonpath(
        &["get", "node", "e2e-node"],
        r#"{.status.addresses[?(@.type=="InternalIP")].address}"#,
    );
    let ingress = wait_for(
        "the load balancer's address",
        Duration::from_secs(30),
        &cluster,
        || {
            let ip = k.jsonpath(
                &["get", "service", "web-lb"],
                "{.status.loadBalancer.ingress[0].ip}",
            );
            (!ip.is_empty()).then_some(ip)
        },
    );
    assert_eq!(ingress, node_ip);
    let (ok, table) = k.run(&["get", "service", "web-lb"], None);
    assert!(ok && table.contains(&node_ip), "EXTERNAL-IP shown: {table}");
    let through_lb = wait_for(
        "the load balancer",
        Duration::from_secs(30),
        &cluster,
        || get(&ingress, 82).ok(),
    );
    assert!(pods.contains(&through_lb), "{through_lb}");

    // With the Local external policy, the load balancer's health check
    // node port answers 200 while this node has ready endpoints.
    let (ok, out) = k.run(
        &[
            "patch",
            "service",
            "web-lb",
            "-p",
            r#"{"spec":{"externalTrafficPolicy":"Local"}}"#,
        ],
        None,
    );
    assert!(ok, "{out}");
    let health_port: u16 = k
        .jsonpath(&["get", "service", "web-lb"], "{.spec.healthCheckNodePort}")
        .parse()
        .expect("a healthCheckNodePort");
    let health = wait_for(
        "the health check node port",
        Duration::from_secs(30),
        &cluster,
        || {
            let address: SocketAddr = format!("{NODE_IP}:{health_port}").parse().ok()?;
            let mut stream = TcpStream::connect_timeout(&address, Duration::from_secs(2)).ok()?;
            stream.write_all(b"GET /healthz HTTP/1.0\r\n\r\n").ok()?;
            let mut text = String::new();
            stream.read_to_string(&mut text).ok()?;
            text.contains("\"localEndpoints\": 2").then_some(text)
        },
    );
    assert!(health.starts_with("HTTP/1.1 200"), "{health}");
    assert!(health.contains("\"name\": \"web-lb\""), "{health}");

    // Names for them: a headless Service (one address per ready pod) and
    // an ExternalName one.
    let (ok, out) = k.run(
        &[
            "create",
            "service",
            "clusterip",
            "web-headless",
            "--clusterip=None",
            "--tcp=8080:8080",
        ],
        None,
    );
    assert!(ok, "{out}");
    let (ok, out) = k.run(
        &["set", "selector", "service", "web-headless", "app=web"],
        None,
    );
    assert!(ok, "{out}");
    let (ok, out) = k.run(
        &[
            "create",
            "service",
            "externalname",
            "ext",
            "--external-name=kubernetes.default.svc.cluster.local",
        ],
        None,
    );
    assert!(ok, "{out}");
    // The cluster DNS Service, its endpoint this node's DNS.
    let (ok, out) = k.run(&["-n", "kube-system", "get", "svc,endpointslices"], None);
    assert!(
        ok && out.contains("kube-dns") && out.contains("10.43.0.10"),
        "{out}"
    );
    wait_for(
        "this node's DNS among kube-dns's endpoints",
        Duration::from_secs(30),
        &cluster,
        || {
            let out = k.jsonpath(
                &[
                    "-n",
                    "kube-system",
                    "get",
                    "endpointslice",
                    "kube-dns-rudder",
                ],
                "{.endpoints[*].nodeName}",
            );
            (out == "e2e-node").then_some(())
        },
    );
    // From the host, through the Service address.
    let host_lookup = wait_for(
        "a name from the host",
        Duration::from_secs(30),
        &cluster,
        || {
            let text = lookup_from_host("web.default.svc.cluster.local")?;
            text.contains(&cluster_ip).then_some(text)
        },
    );
    assert!(
        host_lookup.contains("web.default.svc.cluster.local"),
        "{host_lookup}"
    );

    // From a pod: the client pod's log holds what the Service answered.
    let client = format!(
        r#"{{"apiVersion": "v1", "kind": "Pod", "metadata": {{"name": "client"}},
          "spec": {{"restartPolicy": "Never", "containers": [{{"name": "c", "image": "{IMAGE}",
            "command": ["sh", "-c", "cat /etc/resolv.conf /etc/hosts; nslookup web.default.svc.cluster.local; nslookup web; nslookup web-headless; nslookup ext; nslookup no-such-service; for i in 1 2 3 4 5 6 7 8 9 10; do printf 'GET /index.html HTTP/1.0\\r\\n\\r\\n' | nc -w 3 {cluster_ip} 80 | tail -n 1; done; printf 'GET / HTTP/1.0\\r\\n\\r\\n' | nc -w 3 {nobody} 80 2>&1 | tail -n 1"]}}]}}}}"#,
        nobody = k.jsonpath(&["get", "service", "nobody"], "{.spec.clusterIP}"),
    );
    let (ok, out) = k.run(&["apply", "-f", "-"], Some(&client));
    assert!(ok, "{out}");
    wait_for(
        "the client pod to finish",
        Duration::from_secs(60),
        &cluster,
        || {
            let phase = k.jsonpath(&["get", "pod", "client"], "{.status.phase}");
            (phase == "Succeeded" || phase == "Failed").then_some(())
        },
    );
    let (ok, log) = k.run(&["logs", "client"], None);
    assert!(ok, "{log}");
    let lines: BTreeSet<String> = log.lines().map(|l| l.trim().to_string()).collect();
    // Its resolv.conf and hosts file as upstream's kubelet makes them.
    for expected in [
        "search default.svc.cluster.local svc.cluster.local cluster.local",
        "nameserver 10.43.0.10",
        "options ndots:5",
        "# Kubernetes-managed hosts file.",
    ] {
        assert!(
            log.contains(expected),
            "{expected} in the client pod's files: {log}"
        );
    }
    // Its names: the Service's address, by its full name and by the search
    // list; the headless Service's pods; the ExternalName's target; and
    // NXDOMAIN for what does not exist.
    let pod_ips: Vec<String> = pods
        .iter()
        .map(|p| k.jsonpath(&["get", "pod", p], "{.status.podIP}"))
        .collect();
    for expected in [
        "Name:\tweb.default.svc.cluster.local".to_string(),
        format!("Address: {cluster_ip}"),
        format!("Address: {}", pod_ips[0]),
        format!("Address: {}", pod_ips[1]),
        "ext.default.svc.cluster.local\tcanonical name = kubernetes.default.svc.cluster.local"
            .to_string(),
        "can't find no-such-service".to_string(),
    ] {
        assert!(
            log.contains(&expected),
            "{expected:?} in the client pod's lookups: {log}"
        );
    }
    let client_ip = k.jsonpath(&["get", "pod", "client"], "{.status.podIP}");
    assert!(
        log.contains(&format!("{client_ip}\tclient\n")),
        "its own name in /etc/hosts: {log}"
    );
    for pod in &pods {
        assert!(lines.contains(pod), "{pod} answered the client pod: {log}");
    }
    assert!(
        log.contains("Connection refused"),
        "a Service without endpoints refuses (a drop would time out): {log}"
    );

    // A Service whose selector matches nothing refuses at once (a
    // time-out would mean the packet was dropped, not rejected).
    let nobody = k.jsonpath(&["get", "service", "nobody"], "{.spec.clusterIP}");
    assert_eq!(get(&nobody, 80), Err("refused".into()));

    // An established connection through a Service survives the agent
    // (and its proxy) being killed and started again: the conntrack NAT
    // stays, and the restarted proxy replaces its table in one
    // transaction, never leaving it half made.
    let echo = format!(
        r#"{{"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {{"name": "echo"}},
          "spec": {{"replicas": 1, "selector": {{"matchLabels": {{"app": "echo"}}}},
            "template": {{"metadata": {{"labels": {{"app": "echo"}}}},
              "spec": {{"terminationGracePeriodSeconds": 1, "containers": [{{"name": "echo", "image": "{IMAGE}",
                "command": ["nc", "-ll", "-p", "9000", "-e", "cat"]}}]}}}}}}}}"#
    );
    let (ok, out) = k.run(&["apply", "-f", "-"], Some(&echo));
    assert!(ok, "{out}");
    let (ok, out) = k.run(&["expose", "deployment", "echo", "--port=9000"], None);
    assert!(ok, "{out}");
    let echo_ip = k.jsonpath(&["get", "service", "echo"], "{.spec.clusterIP}");
    let mut stream = wait_for(
        "a connection to the echo Service",
        Duration::from_secs(60),
        &cluster,
        || {
            let address: SocketAddr = format!("{echo_ip}:9000").parse().ok()?;
            let mut stream = TcpStream::connect_timeout(&address, Duration::from_secs(2)).ok()?;
            stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
            stream.write_all(b"before\n").ok()?;
            let mut line = [0u8; 7];
            stream.read_exact(&mut line).ok()?;
            (&line == b"before\n").then_some(stream)
        },
    );
    cluster.kill_hard();
    cluster.spawn();
    cluster.wait_node_ready(&k);
    // Proof the new agent's proxy ran: a Service made after the restart
    // answers.
    let (ok, out) = k.run(
        &["create", "service", "clusterip", "after", "--tcp=80:8080"],
        None,
    );
    assert!(ok, "{out}");
    let (ok, out) = k.run(&["set", "selector", "service", "after", "app=web"], None);
    assert!(ok, "{out}");
    let after_ip = k.jsonpath(&["get", "service", "after"], "{.spec.clusterIP}");
    wait_for(
        "a Service made after the restart",
        Duration::from_secs(60),
        &cluster,
        || get(&after_ip, 80).ok(),
    );
    // The restarted node's DNS answers again.
    wait_for(
        "a name after the restart",
        Duration::from_secs(30),
        &cluster,
        || {
            lookup_from_host("after.default.svc.cluster.local")?
                .contains(&after_ip)
                .then_some(())
        },
    );
    stream
        .write_all(b"after!\n")
        .expect("the connection is still open");
    let mut line = [0u8; 7];
    stream
        .read_exact(&mut line)
        .expect("an answer on the same connection");
    assert_eq!(&line, b"after!\n");

    // A pod taken out of the Service (relabelled: its ReplicaSet makes
    // another) leaves the rotation.
    let leaving = pods.iter().next().expect("a pod").clone();
    let (ok, out) = k.run(
        &["label", "pod", &leaving, "app=retired", "--overwrite"],
        None,
    );
    assert!(ok, "{out}");
    wait_for(
        "the relabelled pod out of rotation",
        Duration::from_secs(60),
        &cluster,
        || {
            let seen = answers(&cluster_ip, 80, 20);
            (!seen.contains(&leaving)
                && seen.len() == 2
                && seen.iter().all(|s| !s.starts_with("error")))
            .then_some(())
        },
    );
    assert!(
        get(&leaving_ip(&k, &leaving), 8080).is_ok(),
        "the pod itself still runs"
    );
}

/// The pod IP of `pod`.
fn leaving_ip(k: &Kubectl<'_>, pod: &str) -> String {
    k.jsonpath(&["get", "pod", pod], "{.status.podIP}")
}
