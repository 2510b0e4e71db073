//! The zone's answers for a table of Services, as CoreDNS gives them.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Service, ServicePort, ServiceSpec};
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions, EndpointPort, EndpointSlice};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use rudder_api::network::Cidr;

use super::reverse::reverse_name;
use super::*;
use crate::wire::{CLASS_IN, Question, Record, rtype};

fn meta(ns: &str, name: &str, labels: &[(&str, &str)]) -> ObjectMeta {
    ObjectMeta {
        namespace: Some(ns.into()),
        name: Some(name.into()),
        labels: (!labels.is_empty()).then(|| {
            labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<BTreeMap<_, _>>()
        }),
        ..Default::default()
    }
}

pub(crate) fn service(
    ns: &str,
    name: &str,
    cluster_ip: &str,
    ports: &[(&str, &str, i32)],
) -> Service {
    Service {
        metadata: meta(ns, name, &[]),
        spec: Some(ServiceSpec {
            cluster_ip: Some(cluster_ip.into()),
            cluster_ips: Some(vec![cluster_ip.into()]),
            ports: Some(
                ports
                    .iter()
                    .map(|(name, proto, port)| ServicePort {
                        name: (!name.is_empty()).then(|| name.to_string()),
                        protocol: Some(proto.to_string()),
                        port: *port,
                        ..Default::default()
                    })
                    .collect(),
            ),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn external(ns: &str, name: &str, target: &str) -> Service {
    Service {
        metadata: meta(ns, name, &[]),
        spec: Some(ServiceSpec {
            type_: Some("ExternalName".into()),
            external_name: Some(target.into()),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// Endpoints as (address, hostname, ready).
pub(crate) fn slice(
    ns: &str,
    svc: &str,
    name: &str,
    endpoints: &[(&str, Option<&str>, bool)],
    ports: &[(&str, &str, i32)],
) -> EndpointSlice {
    let v6 = endpoints.first().is_some_and(|(ip, _, _)| ip.contains(':'));
    EndpointSlice {
        metadata: meta(ns, name, &[(SERVICE_NAME_LABEL, svc)]),
        address_type: if v6 { "IPv6" } else { "IPv4" }.into(),
        endpoints: endpoints
            .iter()
            .map(|(ip, hostname, ready)| Endpoint {
                addresses: vec![ip.to_string()],
                hostname: hostname.map(str::to_string),
                conditions: Some(EndpointConditions {
                    ready: Some(*ready),
                    ..Default::default()
                }),
                ..Default::default()
            })
            .collect(),
        ports: Some(
            ports
                .iter()
                .map(|(name, proto, port)| EndpointPort {
                    name: Some(name.to_string()),
                    protocol: Some(proto.to_string()),
                    port: Some(*port),
                    ..Default::default()
                })
                .collect(),
        ),
    }
}

/// The cluster every test asks: two namespaces, ClusterIP Services with
/// named and unnamed ports, headless ones with and without hostnames, one
/// without ready endpoints, ExternalNames in and out of the zone.
pub(crate) fn cluster() -> Zone {
    let mut zone = Zone::new("cluster.local", DEFAULT_TTL).expect("a zone");
    zone.set_reverse_cidrs(vec![
        Cidr::parse("10.43.0.0/16").expect("a CIDR"),
        Cidr::parse("10.42.0.0/16").expect("a CIDR"),
    ]);
    zone.apply_service(&service(
        "default",
        "kubernetes",
        "10.43.0.1",
        &[("https", "TCP", 443)],
    ));
    zone.apply_service(&service(
        "kube-system",
        "kube-dns",
        "10.43.0.10",
        &[("dns", "UDP", 53), ("dns-tcp", "TCP", 53)],
    ));
    zone.apply_service(&service(
        "demo",
        "web",
        "10.43.0.20",
        &[("http", "TCP", 80), ("", "TCP", 8080)],
    ));
    zone.apply_slice(&slice(
        "demo",
        "web",
        "web-abc",
        &[("10.42.0.7", None, true), ("10.42.0.8", None, false)],
        &[("http", "TCP", 8000)],
    ));
    zone.apply_service(&service("demo", "db", "None", &[("pg", "TCP", 5432)]));
    zone.apply_slice(&slice(
        "demo",
        "db",
        "db-1",
        &[
            ("10.42.1.5", Some("db-0"), true),
            ("10.42.1.6", Some("db-1"), true),
            ("10.42.1.7", None, true),
            ("10.42.1.9", Some("db-9"), false),
        ],
        &[("pg", "TCP", 5433)],
    ));
    zone.apply_service(&service("demo", "empty", "None", &[("x", "TCP", 1)]));
    zone.apply_service(&external("demo", "ext", "www.example.com"));
    zone.apply_service(&external("demo", "alias", "web.demo.svc.cluster.local"));
    zone.apply_service(&external("demo", "ip", "192.0.2.1"));
    zone.apply_service(&service(
        "other",
        "web",
        "10.43.1.20",
        &[("http", "TCP", 80)],
    ));
    zone
}

/// An answer as text: rcode, then each section's records, dig-style, the
/// SOA's serial written `S`.
pub(crate) fn text(answer: &Answer) -> String {
    let records = |records: &[Record]| {
        records
            .iter()
            .map(|r| {
                let line = r.to_string();
                match &r.data {
                    crate::wire::RData::Soa(soa) => {
                        line.replace(&format!(" {} ", soa.serial), " S ")
                    }
                    _ => line,
                }
            })
            .collect::<Vec<_>>()
            .join("; ")
    };
    let mut out = answer.rcode.to_string();
    for (section, rs) in [
        ("an", &answer.answers),
        ("ns", &answer.authority),
        ("ad", &answer.additional),
    ] {
        if !rs.is_empty() {
            out.push_str(&format!(" | {section}: {}", records(rs)));
        }
    }
    out
}

fn ask(zone: &Zone, name: &str, qtype: u16) -> String {
    let question = Question {
        name: Name::from_text(name).expect("a valid name"),
        qtype,
        qclass: CLASS_IN,
    };
    match zone.lookup(&question) {
        Lookup::Answer(answer) => {
            let mut out = text(&answer);
            if let Some(target) = answer.chase {
                out.push_str(&format!(" | chase {target}"));
            }
            out
        }
        Lookup::NotOurs => "forward".into(),
    }
}

const SOA: &str =
    "cluster.local. 5 IN SOA ns.dns.cluster.local. hostmaster.cluster.local. S 7200 1800 86400 5";

#[test]
fn services_answer_as_the_specification_says() {
    let zone = cluster();
    let nx = format!("NXDOMAIN | ns: {SOA}");
    let nodata = format!("NOERROR | ns: {SOA}");
    let cases: &[(&str, u16, &str)] = &[
        (
            "kubernetes.default.svc.cluster.local",
            rtype::A,
            "NOERROR | an: kubernetes.default.svc.cluster.local. 5 IN A 10.43.0.1",
        ),
        ("kubernetes.default.svc.cluster.local", rtype::AAAA, &nodata),
        ("kubernetes.default.svc.cluster.local", rtype::TXT, &nodata),
        ("kubernetes.default.svc.cluster.local", rtype::MX, &nodata),
        ("nosuch.default.svc.cluster.local", rtype::A, &nx),
        ("x.nosuchns.svc.cluster.local", rtype::A, &nx),
        (
            "web.demo.svc.cluster.local",
            rtype::A,
            "NOERROR | an: web.demo.svc.cluster.local. 5 IN A 10.43.0.20",
        ),
        // The same name in another namespace is another Service.
        (
            "web.other.svc.cluster.local",
            rtype::A,
            "NOERROR | an: web.other.svc.cluster.local. 5 IN A 10.43.1.20",
        ),
        (
            "_http._tcp.web.demo.svc.cluster.local",
            rtype::SRV,
            "NOERROR | an: _http._tcp.web.demo.svc.cluster.local. 5 IN SRV 0 100 80 web.demo.svc.cluster.local. \
          | ad: web.demo.svc.cluster.local. 5 IN A 10.43.0.20",
        ),
        ("_http._udp.web.demo.svc.cluster.local", rtype::SRV, &nx),
        ("_nope._tcp.web.demo.svc.cluster.local", rtype::SRV, &nx),
        ("_http._tcp.web.demo.svc.cluster.local", rtype::A, &nodata),
        ("_tcp.web.demo.svc.cluster.local", rtype::SRV, &nodata),
        // Every port, the unnamed one too, on the Service's own name.
        (
            "web.demo.svc.cluster.local",
            rtype::SRV,
            "NOERROR | an: web.demo.svc.cluster.local. 5 IN SRV 0 50 80 web.demo.svc.cluster.local.; \
          web.demo.svc.cluster.local. 5 IN SRV 0 50 8080 web.demo.svc.cluster.local. \
          | ad: web.demo.svc.cluster.local. 5 IN A 10.43.0.20",
        ),
        // Endpoints of a ClusterIP Service have names too; unready ones not.
        (
            "10-42-0-7.web.demo.svc.cluster.local",
            rtype::A,
            "NOERROR | an: 10-42-0-7.web.demo.svc.cluster.local. 5 IN A 10.42.0.7",
        ),
        ("10-42-0-8.web.demo.svc.cluster.local", rtype::A, &nx),
        // Headless: every ready endpoint.
        (
            "db.demo.svc.cluster.local",
            rtype::A,
            "NOERROR | an: db.demo.svc.cluster.local. 5 IN A 10.42.1.5; db.demo.svc.cluster.local. 5 IN A 10.42.1.6; \
          db.demo.svc.cluster.local. 5 IN A 10.42.1.7",
        ),
        ("db.demo.svc.cluster.local", rtype::AAAA, &nodata),
        (
            "db-0.db.demo.svc.cluster.local",
            rtype::A,
            "NOERROR | an: db-0.db.demo.svc.cluster.local. 5 IN A 10.42.1.5",
        ),
        ("db-0.db.demo.svc.cluster.local", rtype::AAAA, &nodata),
        (
            "10-42-1-7.db.demo.svc.cluster.local",
            rtype::A,
            "NOERROR | an: 10-42-1-7.db.demo.svc.cluster.local. 5 IN A 10.42.1.7",
        ),
        // An endpoint with a hostname is not also named by its address.
        ("10-42-1-5.db.demo.svc.cluster.local", rtype::A, &nx),
        ("db-9.db.demo.svc.cluster.local", rtype::A, &nx),
        (
            "_pg._tcp.db.demo.svc.cluster.local",
            rtype::SRV,
            "NOERROR | an: _pg._tcp.db.demo.svc.cluster.local. 5 IN SRV 0 33 5433 db-0.db.demo.svc.cluster.local.; \
          _pg._tcp.db.demo.svc.cluster.local. 5 IN SRV 0 33 5433 db-1.db.demo.svc.cluster.local.; \
          _pg._tcp.db.demo.svc.cluster.local. 5 IN SRV 0 33 5433 10-42-1-7.db.demo.svc.cluster.local. \
          | ad: db-0.db.demo.svc.cluster.local. 5 IN A 10.42.1.5; db-1.db.demo.svc.cluster.local. 5 IN A 10.42.1.6; \
          10-42-1-7.db.demo.svc.cluster.local. 5 IN A 10.42.1.7",
        ),
        // Headless without ready endpoints does not exist.
        ("empty.demo.svc.cluster.local", rtype::A, &nx),
        ("_x._tcp.empty.demo.svc.cluster.local", rtype::SRV, &nx),
        // ExternalName: a CNAME, chased by the server outside the zone,
        // here inside it.
        (
            "ext.demo.svc.cluster.local",
            rtype::A,
            "NOERROR | an: ext.demo.svc.cluster.local. 5 IN CNAME www.example.com. | chase www.example.com.",
        ),
        (
            "ext.demo.svc.cluster.local",
            rtype::CNAME,
            "NOERROR | an: ext.demo.svc.cluster.local. 5 IN CNAME www.example.com.",
        ),
        (
            "alias.demo.svc.cluster.local",
            rtype::A,
            "NOERROR | an: alias.demo.svc.cluster.local. 5 IN CNAME web.demo.svc.cluster.local.; \
          web.demo.svc.cluster.local. 5 IN A 10.43.0.20",
        ),
        ("x.ext.demo.svc.cluster.local", rtype::A, &nx),
        ("_http._tcp.ext.demo.svc.cluster.local", rtype::SRV, &nx),
        // An ExternalName that is an address is ignored, as CoreDNS does.
        ("ip.demo.svc.cluster.local", rtype::A, &nx),
        // Pods by address, any namespace.
        (
            "10-42-0-9.demo.pod.cluster.local",
            rtype::A,
            "NOERROR | an: 10-42-0-9.demo.pod.cluster.local. 5 IN A 10.42.0.9",
        ),
        ("10-42-0-9.demo.pod.cluster.local", rtype::AAAA, &nodata),
        (
            "fd00--1.demo.pod.cluster.local",
            rtype::AAAA,
            "NOERROR | an: fd00--1.demo.pod.cluster.local. 5 IN AAAA fd00::1",
        ),
        ("not-an-ip.demo.pod.cluster.local", rtype::A, &nx),
        ("demo.pod.cluster.local", rtype::A, &nodata),
        // The tree above the Services.
        ("demo.svc.cluster.local", rtype::A, &nodata),
        ("nosuchns.svc.cluster.local", rtype::A, &nx),
        ("svc.cluster.local", rtype::A, &nodata),
        ("pod.cluster.local", rtype::A, &nodata),
        ("cluster.local", rtype::A, &nodata),
        ("foo.cluster.local", rtype::A, &nx),
        ("a.b.c.web.demo.svc.cluster.local", rtype::A, &nx),
        ("cluster.local", rtype::SOA, &format!("NOERROR | an: {SOA}")),
        (
            "cluster.local",
            rtype::NS,
            "NOERROR | an: cluster.local. 5 IN NS ns.dns.cluster.local. | ad: ns.dns.cluster.local. 5 IN A 10.43.0.10",
        ),
        (
            "ns.dns.cluster.local",
            rtype::A,
            "NOERROR | an: ns.dns.cluster.local. 5 IN A 10.43.0.10",
        ),
        (
            "dns-version.cluster.local",
            rtype::TXT,
            "NOERROR | an: dns-version.cluster.local. 28800 IN TXT \"1.1.0\"",
        ),
        ("dns-version.cluster.local", rtype::A, &nodata),
        ("cluster.local", rtype::AXFR, "REFUSED"),
        // Outside the zone.
        ("www.example.com", rtype::A, "forward"),
        ("cluster.local.example.com", rtype::A, "forward"),
    ];
    let mut failures = Vec::new();
    for (name, qtype, want) in cases {
        let want = want.split_whitespace().collect::<Vec<_>>().join(" ");
        let got = ask(&zone, name, *qtype);
        if got != want {
            failures.push(format!(
                "{name} {}:\n  got  {got}\n  want {want}",
                rtype::name(*qtype)
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn names_are_matched_in_any_case_and_answered_in_the_questions() {
    let zone = cluster();
    assert_eq!(
        ask(&zone, "Kubernetes.DEFAULT.svc.Cluster.Local", rtype::A),
        "NOERROR | an: Kubernetes.DEFAULT.svc.Cluster.Local. 5 IN A 10.43.0.1"
    );
    // The SOA's owner is the zone as the question spelled it.
    let nx = ask(&zone, "NoSuch.default.SVC.Cluster.LOCAL", rtype::A);
    assert!(
        nx.starts_with("NXDOMAIN | ns: Cluster.LOCAL. 5 IN SOA"),
        "{nx}"
    );
    assert_eq!(
        ask(&zone, "_HTTP._TCP.web.demo.svc.cluster.local", rtype::SRV)
            .split(" | ")
            .nth(1),
        Some(
            "an: _HTTP._TCP.web.demo.svc.cluster.local. 5 IN SRV 0 100 80 web.demo.svc.cluster.local."
        )
    );
    assert!(
        ask(&zone, "DB-0.db.demo.svc.cluster.local", rtype::A).starts_with("NOERROR | an: DB-0.")
    );
}

#[test]
fn reverse_names_point_at_services_and_endpoints() {
    let zone = cluster();
    let ptr = |ip: &str| {
        let name = reverse_name(ip.parse().expect("an address")).to_string();
        ask(&zone, &name, rtype::PTR)
    };
    assert_eq!(
        ptr("10.43.0.10"),
        "NOERROR | an: 10.0.43.10.in-addr.arpa. 5 IN PTR kube-dns.kube-system.svc.cluster.local."
    );
    assert_eq!(
        ptr("10.42.1.5"),
        "NOERROR | an: 5.1.42.10.in-addr.arpa. 5 IN PTR db-0.db.demo.svc.cluster.local."
    );
    assert_eq!(
        ptr("10.42.0.7"),
        "NOERROR | an: 7.0.42.10.in-addr.arpa. 5 IN PTR 10-42-0-7.web.demo.svc.cluster.local."
    );
    // Unknown inside the cluster's ranges: ours to deny; outside: forwarded.
    let soa = "in-addr.arpa. 5 IN SOA ns.dns.cluster.local. hostmaster.cluster.local. S 7200 1800 86400 5";
    assert_eq!(ptr("10.43.9.9"), format!("NXDOMAIN | ns: {soa}"));
    assert_eq!(ptr("10.42.1.9"), format!("NXDOMAIN | ns: {soa}"), "unready");
    assert_eq!(ptr("192.168.1.1"), "forward");
    assert_eq!(
        ask(&zone, "43.10.in-addr.arpa", rtype::PTR),
        format!("NOERROR | ns: {soa}")
    );
    assert_eq!(ask(&zone, "10.in-addr.arpa", rtype::PTR), "forward");
    assert_eq!(
        ask(&zone, "010.0.43.10.in-addr.arpa", rtype::PTR),
        "forward"
    );
    assert_eq!(
        ask(&zone, "10.0.43.10.in-addr.arpa", rtype::A),
        format!("NOERROR | ns: {soa}")
    );
    assert_eq!(ptr("2001:db8::1"), "forward");
}

#[test]
fn updates_touch_only_their_service() {
    let mut zone = cluster();
    let before = zone.services();
    // A new endpoint; then the slice moves to another Service.
    zone.apply_slice(&slice(
        "demo",
        "db",
        "db-1",
        &[("10.42.1.8", Some("db-3"), true)],
        &[],
    ));
    assert!(ask(&zone, "db-0.db.demo.svc.cluster.local", rtype::A).starts_with("NXDOMAIN"));
    assert!(ask(&zone, "db-3.db.demo.svc.cluster.local", rtype::A).starts_with("NOERROR | an"));
    let reverse = reverse_name("10.42.1.5".parse().expect("an address")).to_string();
    assert!(
        ask(&zone, &reverse, rtype::PTR).starts_with("NXDOMAIN"),
        "old address gone"
    );
    zone.apply_service(&service("demo", "db2", "None", &[]));
    zone.apply_slice(&slice(
        "demo",
        "db2",
        "db-1",
        &[("10.42.1.8", Some("db-3"), true)],
        &[],
    ));
    assert!(ask(&zone, "db.demo.svc.cluster.local", rtype::A).starts_with("NXDOMAIN"));
    assert!(ask(&zone, "db-3.db2.demo.svc.cluster.local", rtype::A).starts_with("NOERROR | an"));
    let reverse = reverse_name("10.42.1.8".parse().expect("an address")).to_string();
    assert_eq!(
        ask(&zone, &reverse, rtype::PTR),
        "NOERROR | an: 8.1.42.10.in-addr.arpa. 5 IN PTR db-3.db2.demo.svc.cluster.local."
    );
    // A slice before its Service: answered once the Service comes.
    zone.apply_slice(&slice(
        "late",
        "svc",
        "svc-1",
        &[("10.42.2.1", None, true)],
        &[],
    ));
    assert!(ask(&zone, "svc.late.svc.cluster.local", rtype::A).starts_with("NXDOMAIN"));
    zone.apply_service(&service("late", "svc", "None", &[]));
    assert!(ask(&zone, "svc.late.svc.cluster.local", rtype::A).starts_with("NOERROR | an"));
    // Deleting the Service removes its names and addresses; the namespace
    // goes with its last Service.
    zone.delete_service(&service("demo", "web", "10.43.0.20", &[]));
    assert!(ask(&zone, "web.demo.svc.cluster.local", rtype::A).starts_with("NXDOMAIN"));
    assert!(ask(&zone, "web.other.svc.cluster.local", rtype::A).starts_with("NOERROR | an"));
    let reverse = reverse_name("10.43.0.20".parse().expect("an address")).to_string();
    assert!(ask(&zone, &reverse, rtype::PTR).starts_with("NXDOMAIN"));
    zone.delete_service(&service("other", "web", "", &[]));
    assert!(ask(&zone, "other.svc.cluster.local", rtype::A).starts_with("NXDOMAIN"));
    zone.delete_slice(&slice("late", "svc", "svc-1", &[], &[]));
    assert!(ask(&zone, "svc.late.svc.cluster.local", rtype::A).starts_with("NXDOMAIN"));
    assert_eq!(zone.services(), before + 2 - 2);
    // A Service turned ExternalName loses its ClusterIP's reverse name.
    zone.apply_service(&external("default", "kubernetes", "api.example.com"));
    let reverse = reverse_name("10.43.0.1".parse().expect("an address")).to_string();
    assert!(ask(&zone, &reverse, rtype::PTR).starts_with("NXDOMAIN"));
}

#[test]
fn an_unsynced_zone_does_not_deny_names() {
    let mut zone = cluster();
    zone.set_synced(false);
    assert_eq!(
        ask(&zone, "nosuch.default.svc.cluster.local", rtype::A),
        "SERVFAIL"
    );
    assert!(
        ask(&zone, "kubernetes.default.svc.cluster.local", rtype::A).starts_with("NOERROR | an")
    );
}

#[test]
fn other_domains_and_ttls() {
    let mut zone = Zone::new("Corp.Example.", 30).expect("a zone");
    zone.apply_service(&service("a", "b", "10.0.0.1", &[]));
    assert_eq!(
        ask(&zone, "b.a.svc.corp.example", rtype::A),
        "NOERROR | an: b.a.svc.corp.example. 30 IN A 10.0.0.1"
    );
    assert_eq!(ask(&zone, "b.a.svc.cluster.local", rtype::A), "forward");
    assert!(Zone::new("bad..domain", 5).is_err());
    assert!(Zone::new(".", 5).is_err());
    assert!(Zone::new("", 5).is_err());
}

#[test]
fn ten_thousand_services_stay_compact_and_fast() {
    let mut zone = Zone::new("cluster.local", DEFAULT_TTL).expect("a zone");
    for i in 0..10_000u32 {
        let ns = format!("ns-{}", i % 100);
        let ip = format!("10.43.{}.{}", i / 250, i % 250 + 1);
        zone.apply_service(&service(
            &ns,
            &format!("svc-{i}"),
            &ip,
            &[("http", "TCP", 80)],
        ));
        let ep = format!("10.42.{}.{}", i / 250, i % 250 + 1);
        zone.apply_slice(&slice(
            &ns,
            &format!("svc-{i}"),
            &format!("svc-{i}-x"),
            &[(&ep, None, true)],
            &[("http", "TCP", 8080)],
        ));
    }
    assert_eq!(zone.services(), 10_000);
    assert_eq!(zone.namespaces.len(), 100);
    // Namespace names are shared, not copied per Service.
    let ns = zone
        .namespaces
        .get_key_value("ns-7")
        .expect("the namespace")
        .0
        .clone();
    assert!(std::sync::Arc::strong_count(&ns) > 100);
    assert_eq!(zone.cluster_ips.len(), 10_000);
    assert_eq!(zone.endpoint_ips.len(), 10_000);
    assert!(
        ask(&zone, "svc-9999.ns-99.svc.cluster.local", rtype::A).ends_with("IN A 10.43.39.250")
    );
}
