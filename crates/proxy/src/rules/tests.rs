//! The rules for tables of Services and endpoints, as upstream's proxier
//! tests assert its rulesets: every element and chain, by name.

use super::*;
use crate::model::Protocol;
use crate::testing::{config, endpoint, here, port, service};

/// The elements as `map key : value` lines, sorted.
fn elements(rules: &ServiceRules) -> Vec<String> {
    let mut lines: Vec<String> = rules
        .elements
        .iter()
        .map(|e| {
            if e.map.is_set() {
                format!("{} {}", e.map.name(), e.key)
            } else {
                format!("{} {} : {}", e.map.name(), e.key, e.value)
            }
        })
        .collect();
    lines.sort();
    lines
}

#[test]
fn chain_names_hash_as_upstreams() {
    // Upstream's proxier tests' names.
    assert!(hashed("ns1/svc1/tcp/p80").starts_with("ULMVA6XW-"));
    assert!(hashed("ns1/svc1/tcp/p80__10.180.0.1/80").starts_with("5OJB2KTY-"));
    assert_eq!(
        hashed("kproxy-lab/backend-api/tcp/http"),
        "YVSKLJHA-kproxy-lab/backend-api/tcp/http"
    );
    let long = hashed(&"a".repeat(400));
    assert_eq!(long.len(), 240);
    assert!(long.ends_with("..."));
}

#[test]
fn a_cluster_ip_maps_to_its_endpoints_through_a_dispatch_chain() {
    let svc = service(
        "web",
        [10, 43, 0, 41],
        vec![port("http", Protocol::Tcp, 80, None)],
    );
    let eps = vec![vec![
        endpoint([10, 42, 1, 5], 8080, "n2"),
        endpoint([10, 42, 0, 7], 8080, "n1"),
    ]];
    let rules = service_rules(&svc, &eps, &here(), &config());
    assert_eq!(
        elements(&rules),
        [
            "cluster-endpoints-tcp 10.43.0.41 . 80 . 0 : 10.42.1.5 . 8080",
            "cluster-endpoints-tcp 10.43.0.41 . 80 . 1 : 10.42.0.7 . 8080",
            "cluster-ips 10.43.0.41",
            "hairpin-connections 10.42.0.7 . 10.42.0.7 . tcp . 8080",
            "hairpin-connections 10.42.1.5 . 10.42.1.5 . tcp . 8080",
            "service-ips 10.43.0.41 . tcp . 80 : goto cluster-tcp-2",
        ]
    );
    assert!(rules.chains.is_empty(), "no chain of its own");
    let dispatch = Dispatch {
        endpoints: Endpoints::Cluster,
        protocol: Protocol::Tcp,
        n: 2,
        masquerade: false,
    };
    assert_eq!(
        rules.dispatch.iter().copied().collect::<Vec<_>>(),
        [dispatch]
    );
    assert_eq!(dispatch.chain(), "cluster-tcp-2");
    assert_eq!(
        dispatch.rule(),
        "dnat ip to ip daddr . tcp dport . numgen random mod 2 map @cluster-endpoints-tcp"
    );
}

#[test]
fn no_endpoints_reject_and_endpoints_elsewhere_drop_under_a_local_policy() {
    let svc = service(
        "empty",
        [10, 43, 0, 46],
        vec![port("", Protocol::Udp, 53, None)],
    );
    let rules = service_rules(&svc, &[vec![]], &here(), &config());
    assert_eq!(
        elements(&rules),
        [
            "cluster-ips 10.43.0.46",
            "no-endpoint-services 10.43.0.46 . udp . 53 : goto reject-chain",
        ]
    );
    let mut local = service(
        "local",
        [10, 43, 0, 47],
        vec![port("", Protocol::Tcp, 80, None)],
    );
    local.internal_local = true;
    let rules = service_rules(
        &local,
        &[vec![endpoint([10, 42, 1, 5], 80, "n2")]],
        &here(),
        &config(),
    );
    assert_eq!(
        elements(&rules),
        [
            "cluster-ips 10.43.0.47",
            "no-endpoint-services 10.43.0.47 . tcp . 80 : drop"
        ]
    );
    let rules = service_rules(
        &local,
        &[vec![endpoint([10, 42, 0, 5], 80, "n1")]],
        &here(),
        &config(),
    );
    assert!(
        elements(&rules)
            .contains(&"service-ips 10.43.0.47 . tcp . 80 : goto local-tcp-1".to_string()),
        "{:?}",
        elements(&rules)
    );
}

#[test]
fn node_ports_and_external_addresses_under_the_cluster_policy_are_masqueraded() {
    let mut svc = service(
        "lb",
        [10, 43, 0, 42],
        vec![port("http", Protocol::Tcp, 80, Some(30080))],
    );
    svc.load_balancer_ips = vec![[192, 168, 1, 5].into()];
    svc.external_ips = vec![[192, 0, 2, 7].into()];
    let eps = vec![vec![endpoint([10, 42, 1, 5], 8080, "n2")]];
    let rules = service_rules(&svc, &eps, &here(), &config());
    let lines = elements(&rules);
    for expected in [
        "service-ips 192.168.1.5 . tcp . 80 : goto cluster-masquerade-tcp-1",
        "service-ips 192.0.2.7 . tcp . 80 : goto cluster-masquerade-tcp-1",
        "cluster-endpoints-tcp 192.168.1.5 . 80 . 0 : 10.42.1.5 . 8080",
        "service-nodeports tcp . 30080 : goto nodeport-masquerade-tcp-1",
        "nodeport-endpoints-tcp 30080 . 0 : 10.42.1.5 . 8080",
        "service-ips 10.43.0.42 . tcp . 80 : goto cluster-tcp-1",
    ] {
        assert!(
            lines.contains(&expected.to_string()),
            "{expected} in {lines:#?}"
        );
    }
    let node_port = Dispatch {
        endpoints: Endpoints::NodePort,
        protocol: Protocol::Tcp,
        n: 1,
        masquerade: true,
    };
    assert_eq!(
        node_port.rule(),
        "meta mark set meta mark or 0x4000 dnat ip to tcp dport . numgen random mod 1 map @nodeport-endpoints-tcp"
    );
}

#[test]
fn the_local_external_policy_short_circuits_pods_and_the_node_and_drops_without_local_endpoints() {
    let mut svc = service(
        "svc2",
        [10, 43, 0, 42],
        vec![port("p80", Protocol::Tcp, 80, Some(3001))],
    );
    svc.load_balancer_ips = vec![[1, 2, 3, 4].into()];
    svc.external_local = true;
    // Its only endpoint is on another node.
    let rules = service_rules(
        &svc,
        &[vec![endpoint([10, 42, 1, 2], 80, "n2")]],
        &here(),
        &config(),
    );
    let external = format!("external-{}", hashed("ns/svc2/tcp/p80"));
    let nodeport = format!("nodeport-{}", hashed("ns/svc2/tcp/p80"));
    let lines = elements(&rules);
    for expected in [
        format!("service-ips 1.2.3.4 . tcp . 80 : goto {external}"),
        "no-endpoint-services 1.2.3.4 . tcp . 80 : drop".to_string(),
        format!("service-nodeports tcp . 3001 : goto {nodeport}"),
        "no-endpoint-nodeports tcp . 3001 : drop".to_string(),
        "cluster-endpoints-tcp 1.2.3.4 . 80 . 0 : 10.42.1.2 . 80".to_string(),
    ] {
        assert!(lines.contains(&expected), "{expected} in {lines:#?}");
    }
    assert_eq!(
        rules.chains[&external],
        [
            "ip saddr 10.42.0.0/16 goto cluster-tcp-1 comment \"short-circuit pod traffic\"",
            "fib saddr type local meta mark set meta mark or 0x4000 goto cluster-tcp-1 comment \"short-circuit local traffic\"",
        ]
    );
    // With an endpoint here, the rest goes to it, unmasqueraded.
    let both = vec![vec![
        endpoint([10, 42, 1, 2], 80, "n2"),
        endpoint([10, 42, 0, 9], 80, "n1"),
    ]];
    let rules = service_rules(&svc, &both, &here(), &config());
    assert_eq!(
        rules.chains[&external].last().map(String::as_str),
        Some("goto local-tcp-1")
    );
    assert_eq!(
        rules.chains[&nodeport].last().map(String::as_str),
        Some("goto nodeport-local-tcp-1")
    );
    assert!(
        elements(&rules)
            .contains(&"local-endpoints-tcp 1.2.3.4 . 80 . 0 : 10.42.0.9 . 80".to_string())
    );
    assert!(
        !elements(&rules)
            .iter()
            .any(|l| l.starts_with("no-endpoint"))
    );
}

#[test]
fn client_ip_affinity_keeps_upstreams_endpoint_chains_and_sets() {
    let mut svc = service(
        "svc5",
        [10, 43, 0, 45],
        vec![port("p80", Protocol::Tcp, 80, None)],
    );
    svc.affinity_timeout = Some(10800);
    let rules = service_rules(
        &svc,
        &[vec![endpoint([10, 180, 0, 3], 80, "n2")]],
        &here(),
        &config(),
    );
    let name = hashed("ns/svc5/tcp/p80__10.180.0.3/80");
    let service_chain = format!("service-{}", hashed("ns/svc5/tcp/p80"));
    assert_eq!(
        rules.chains[&service_chain],
        [
            format!("ip saddr @affinity-{name} goto endpoint-{name}"),
            format!("numgen random mod 1 vmap {{ 0 : goto endpoint-{name} }}"),
        ]
    );
    assert_eq!(
        rules.chains[&format!("endpoint-{name}")],
        [
            format!("update @affinity-{name} {{ ip saddr }}"),
            "meta l4proto tcp dnat to 10.180.0.3:80".to_string(),
        ]
    );
    assert_eq!(rules.affinity_sets[&format!("affinity-{name}")], 10800);
    assert!(elements(&rules).contains(&format!(
        "service-ips 10.43.0.45 . tcp . 80 : goto {service_chain}"
    )));
    assert!(
        !elements(&rules)
            .iter()
            .any(|l| l.starts_with("cluster-endpoints"))
    );
}

#[test]
fn source_ranges_guard_load_balancer_addresses() {
    let mut svc = service(
        "fw",
        [10, 43, 0, 45],
        vec![port("p80", Protocol::Tcp, 80, None)],
    );
    svc.load_balancer_ips = vec![[5, 6, 7, 8].into()];
    svc.source_ranges = vec!["203.0.113.0/25".parse().expect("cidr")];
    let rules = service_rules(
        &svc,
        &[vec![endpoint([10, 180, 0, 3], 80, "n2")]],
        &here(),
        &config(),
    );
    let firewall = format!("firewall-{}", hashed("ns/fw/tcp/p80"));
    assert_eq!(
        rules.chains[&firewall],
        ["ip saddr != { 203.0.113.0/25 } drop"]
    );
    assert!(elements(&rules).contains(&format!(
        "firewall-ips 5.6.7.8 . tcp . 80 : goto {firewall}"
    )));
}

#[test]
fn a_service_whose_names_cannot_be_written_gets_no_rules() {
    let mut svc = service(
        "web",
        [10, 43, 0, 41],
        vec![port("http", Protocol::Tcp, 80, None)],
    );
    svc.name.name = "web; flush ruleset".into();
    let rules = service_rules(
        &svc,
        &[vec![endpoint([10, 42, 1, 5], 80, "n2")]],
        &here(),
        &config(),
    );
    assert_eq!(rules, ServiceRules::default());
    svc.name.name = "x".repeat(300);
    assert_eq!(
        service_rules(&svc, &[vec![]], &here(), &config()),
        ServiceRules::default()
    );
}

#[test]
fn the_fixed_part_names_the_cidrs_and_hooks_every_path() {
    let text = base(&config());
    for expected in [
        "add chain ip rudder-proxy nat-prerouting { type nat hook prerouting priority -100 ; }",
        "add chain ip rudder-proxy nat-output { type nat hook output priority -100 ; }",
        "add rule ip rudder-proxy services ip daddr @cluster-ips ip saddr != 10.42.0.0/16 meta mark set meta mark or 0x4000",
        "add rule ip rudder-proxy cluster-ips-check ip daddr 10.43.0.0/16 drop",
        "add rule ip rudder-proxy reject-chain reject",
        "add map ip rudder-proxy cluster-endpoints-udp { typeof ip daddr . udp dport . numgen random mod 1 : ip daddr . udp dport ; }",
    ] {
        assert!(text.contains(expected), "{expected} in\n{text}");
    }
}

#[test]
fn a_service_of_ten_thousand_ports_is_written_whole() {
    let ports: Vec<ServicePort> = (0..10_000u16)
        .map(|i| port(&format!("p{i}"), Protocol::Tcp, 1 + i, None))
        .collect();
    let svc = service("many", [10, 43, 0, 50], ports);
    let eps: Vec<Vec<Endpoint>> = (0..10_000u16)
        .map(|i| vec![endpoint([10, 42, 0, 5], 1 + i, "n2")])
        .collect();
    let rules = service_rules(&svc, &eps, &here(), &config());
    assert_eq!(
        rules
            .elements
            .iter()
            .filter(|e| e.map == Map::ServiceIps)
            .count(),
        10_000
    );
    let mut table = crate::table::Table::new(config());
    let text = table.rebuild([(svc.name.clone(), Some(rules))]);
    assert!(
        text.lines().all(|l| l.len() < 200_000),
        "statements are chunked"
    );
}
