//! Where a proxy request goes — upstream's `ResourceLocation`s for pods
//! (`pkg/registry/core/pod/strategy.go`), services
//! (`pkg/registry/core/service/storage`) and nodes
//! (`pkg/registry/core/node/strategy.go`) — and which addresses may be
//! proxied to at all (`IsGlobalUnicast`, as those functions check it).
//!
//! The pure parts live here, over the objects' JSON; `super` fetches the
//! objects and asks the resolver.

use std::net::{IpAddr, Ipv4Addr};

use rudder_api::Status;
use serde_json::Value;

/// The scheme a backend is spoken to in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheme {
    Http,
    Https,
}

impl Scheme {
    /// A requested scheme (`""` is http, as upstream's `normalizeLocation`).
    fn of(requested: &str) -> Scheme {
        if requested == "https" {
            Scheme::Https
        } else {
            Scheme::Http
        }
    }

    fn default_port(self) -> u16 {
        match self {
            Scheme::Http => 80,
            Scheme::Https => 443,
        }
    }
}

/// How the backend is reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// Upstream's proxy transport: plain TCP, or TLS that verifies no
    /// certificate (pods and services are reached by IP) and presents none.
    Proxy,
    /// The API server's kubelet client: TLS verified against the cluster
    /// CA, the kubelet client certificate presented.
    Kubelet,
}

/// Where a proxy request goes: upstream's location URL without its path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Location {
    pub scheme: Scheme,
    /// An IP address or a host name, without brackets.
    pub host: String,
    /// The port, when the location names one (a pod without a declared
    /// port has none: the scheme's default is dialled).
    pub port: Option<u16>,
    pub transport: Transport,
}

impl Location {
    /// The port dialled.
    pub fn dial_port(&self) -> u16 {
        self.port.unwrap_or(self.scheme.default_port())
    }

    /// The host as the location URL has it (`ip:port`, `[v6]:port`, or
    /// the bare address when no port is named): upstream compares a
    /// redirect's host with it.
    pub fn url_host(&self) -> String {
        match self.port {
            Some(port) => crate::kubelet::authority(&self.host, port),
            None if self.host.contains(':') => format!("[{}]", self.host),
            None => self.host.clone(),
        }
    }

    /// `host:port` as dialled.
    pub fn dial_authority(&self) -> String {
        crate::kubelet::authority(&self.host, self.dial_port())
    }
}

/// A proxy id split as upstream's `SplitSchemeNamePort`: `name`,
/// `name:port` or `scheme:name:port`; the scheme `http`, `https` or empty,
/// the name not empty. `None` when it is none of those.
pub fn split_scheme_name_port(id: &str) -> Option<(&str, &str, &str)> {
    let parts: Vec<&str> = id.split(':').collect();
    let (scheme, name, port) = match parts.as_slice() {
        [name] => ("", *name, ""),
        [name, port] => ("", *name, *port),
        [scheme, name, port] => (*scheme, *name, *port),
        _ => return None,
    };
    (!name.is_empty() && matches!(scheme, "" | "http" | "https")).then_some((scheme, name, port))
}

/// An IP address as Go's `ParseIPSloppy` reads one: IPv4 parts may have
/// leading zeros (read as decimal), an IPv4-mapped IPv6 address is the
/// IPv4 address.
pub fn parse_ip_sloppy(text: &str) -> Option<IpAddr> {
    if text.contains(':') {
        let ip: std::net::Ipv6Addr = text.parse().ok()?;
        return Some(ip.to_canonical());
    }
    let parts: Vec<&str> = text.split('.').collect();
    if parts.len() != 4 {
        return None;
    }
    let mut octets = [0u8; 4];
    for (octet, part) in octets.iter_mut().zip(&parts) {
        if part.is_empty() || !part.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        *octet = part.parse().ok()?;
    }
    Some(IpAddr::V4(Ipv4Addr::from(octets)))
}

/// Go's `IP.IsGlobalUnicast`: not unspecified, loopback, multicast,
/// link-local unicast or the IPv4 broadcast address — what upstream lets a
/// pod's or a node's proxy reach.
pub fn is_global_unicast(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            !(v4.is_unspecified()
                || v4.is_loopback()
                || v4.is_multicast()
                || v4.is_link_local()
                || v4.is_broadcast())
        }
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return is_global_unicast(IpAddr::V4(v4));
            }
            let link_local = (v6.segments()[0] & 0xffc0) == 0xfe80;
            !(v6.is_unspecified() || v6.is_loopback() || v6.is_multicast() || link_local)
        }
    }
}

/// The refusal of an address that may not be proxied to.
pub fn not_allowed() -> Status {
    Status::bad_request("address not allowed")
}

/// Whether `address` (an IP, as text) may be proxied to.
pub fn check_ip(address: &str) -> Result<(), Status> {
    match parse_ip_sloppy(address) {
        Some(ip) if is_global_unicast(ip) => Ok(()),
        _ => Err(not_allowed()),
    }
}

/// A pod's first IP (`status.podIPs[0]`, or the older `status.podIP`).
fn pod_ip(pod: &Value) -> &str {
    pod.pointer("/status/podIPs/0/ip")
        .and_then(Value::as_str)
        .or_else(|| pod.pointer("/status/podIP").and_then(Value::as_str))
        .unwrap_or_default()
}

/// Every IP of a pod.
fn pod_ips(pod: &Value) -> Vec<&str> {
    let mut ips: Vec<&str> = pod
        .pointer("/status/podIPs")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|p| p["ip"].as_str())
        .collect();
    if ips.is_empty()
        && let Some(ip) = pod.pointer("/status/podIP").and_then(Value::as_str)
    {
        ips.push(ip);
    }
    ips
}

/// A port as requested (`""`: none); a port that is no port number is
/// refused as the request it came in.
fn port_number(port: &str, refuse: impl Fn() -> Status) -> Result<Option<u16>, Status> {
    if port.is_empty() {
        return Ok(None);
    }
    port.parse::<u16>().map(Some).map_err(|_| refuse())
}

/// Upstream's pod `ResourceLocation`, once the pod is read: the port
/// requested or the first one a container declares, the pod's first IP,
/// which must be a global unicast address.
pub fn pod(pod: &Value, id: &str, scheme: &str, port: &str) -> Result<Location, Status> {
    let declared = pod
        .pointer("/spec/containers")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .find_map(|c| c.pointer("/ports/0/containerPort").and_then(Value::as_i64))
        .map(|p| p.to_string());
    let port = match (port, &declared) {
        ("", Some(declared)) => declared.as_str(),
        (port, _) => port,
    };
    let ip = pod_ip(pod);
    check_ip(ip)?;
    let port = port_number(port, || {
        Status::bad_request(format!("invalid pod request {id:?}"))
    })?;
    Ok(Location {
        scheme: Scheme::of(scheme),
        host: ip.to_string(),
        port,
        transport: Transport::Proxy,
    })
}

/// The port name a service port number stands for (upstream looks the
/// number up in the Service's ports, by `port`).
pub fn service_port_name(service: &Value, name: &str, number: i64) -> Result<String, Status> {
    service
        .pointer("/spec/ports")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .find(|p| p["port"].as_i64() == Some(number))
        .map(|p| p["name"].as_str().unwrap_or_default().to_string())
        .ok_or_else(|| {
            service_unavailable(format!(
                "no service port {number} found for service {name:?}"
            ))
        })
}

/// A 503 as upstream's `NewServiceUnavailable` makes it.
pub fn service_unavailable(message: impl Into<String>) -> Status {
    Status::new(503, "ServiceUnavailable", message)
}

/// One address of an Endpoints object that serves the wanted port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    pub ip: String,
    pub port: u16,
    /// The pod it is, when its `targetRef` names one: (namespace, name).
    pub pod: Option<(String, String)>,
}

/// The ready addresses of an Endpoints object serving the port named
/// `port` (`""`: the unnamed port), in the order upstream tries them:
/// from a subset picked at random, each subset from an address picked at
/// random. `pick(n)` is a number below `n`.
pub fn candidates(
    endpoints: &Value,
    port: &str,
    pick: &mut impl FnMut(usize) -> usize,
) -> Vec<Candidate> {
    let subsets = endpoints["subsets"].as_array().cloned().unwrap_or_default();
    let mut found = Vec::new();
    if subsets.is_empty() {
        return found;
    }
    let start = pick(subsets.len());
    for k in 0..subsets.len() {
        let subset = &subsets[(start + k) % subsets.len()];
        let addresses = subset["addresses"].as_array().cloned().unwrap_or_default();
        if addresses.is_empty() {
            continue;
        }
        let ports = subset["ports"].as_array().cloned().unwrap_or_default();
        for wanted in ports
            .iter()
            .filter(|p| p["name"].as_str().unwrap_or_default() == port)
        {
            let Some(number) = wanted["port"].as_u64().and_then(|p| u16::try_from(p).ok()) else {
                continue;
            };
            let first = pick(addresses.len());
            for a in 0..addresses.len() {
                let address = &addresses[(first + a) % addresses.len()];
                let target = &address["targetRef"];
                let pod = target.is_object().then(|| {
                    (
                        target["namespace"].as_str().unwrap_or_default().to_string(),
                        target["name"].as_str().unwrap_or_default().to_string(),
                    )
                });
                found.push(Candidate {
                    ip: address["ip"].as_str().unwrap_or_default().to_string(),
                    port: number,
                    pod,
                });
            }
        }
    }
    found
}

/// Where a service's endpoint is reached: its address, which must be a
/// global unicast one, and its port, in the scheme asked.
pub fn endpoint(candidate: &Candidate, scheme: &str) -> Result<Location, Status> {
    check_ip(&candidate.ip)?;
    Ok(Location {
        scheme: Scheme::of(scheme),
        host: candidate.ip.clone(),
        port: Some(candidate.port),
        transport: Transport::Proxy,
    })
}

/// Upstream's `isValidAddress`, once the pod is read: the address is one
/// of the pod's IPs.
pub fn is_pods_address(pod: &Value, ip: &str) -> bool {
    pod_ips(pod).contains(&ip)
}

/// Upstream's node `ResourceLocation`, once the node is read: the node
/// agent's address and port, through the kubelet client when no port or
/// the agent's port is asked; another port with the scheme asked, through
/// the proxy transport. The host's addresses are checked by the caller.
pub fn node(node: &Value, id: &str, scheme: &str, port: &str) -> Result<Location, Status> {
    let (host, kubelet_port) =
        crate::kubelet::location(node).map_err(|message| Status::new(500, "", message))?;
    if port.is_empty() || port == kubelet_port.to_string() {
        return Ok(Location {
            scheme: Scheme::Https,
            host,
            port: Some(kubelet_port),
            transport: Transport::Kubelet,
        });
    }
    let port = port_number(port, || {
        Status::bad_request(format!("invalid node request {id:?}"))
    })?;
    Ok(Location {
        scheme: Scheme::of(scheme),
        host,
        port,
        transport: Transport::Proxy,
    })
}

/// Upstream's `isProxyableHostname`: every address the host resolves to
/// is a global unicast address. The error is the refusal's message.
pub async fn check_hostname(host: &str) -> Result<(), String> {
    let addresses: Vec<IpAddr> = match parse_ip_sloppy(host) {
        Some(ip) => vec![ip],
        None => tokio::net::lookup_host((host, 0))
            .await
            .map_err(|e| format!("lookup {host}: {e}"))?
            .map(|a| a.ip())
            .collect(),
    };
    if addresses.is_empty() {
        return Err("no addresses for hostname".into());
    }
    let canonical = |ip: IpAddr| match ip {
        IpAddr::V6(v6) => v6.to_canonical(),
        v4 => v4,
    };
    if addresses
        .into_iter()
        .all(|ip| is_global_unicast(canonical(ip)))
    {
        Ok(())
    } else {
        Err("address not allowed".into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn ids_split_as_upstreams_split_scheme_name_port() {
        assert_eq!(split_scheme_name_port("web"), Some(("", "web", "")));
        assert_eq!(split_scheme_name_port("web:80"), Some(("", "web", "80")));
        assert_eq!(
            split_scheme_name_port("web:http"),
            Some(("", "web", "http"))
        );
        assert_eq!(
            split_scheme_name_port("https:web:443"),
            Some(("https", "web", "443"))
        );
        assert_eq!(
            split_scheme_name_port("http:web:"),
            Some(("http", "web", ""))
        );
        // Two parts are a name and a port, whatever the first looks like.
        assert_eq!(
            split_scheme_name_port("https:web"),
            Some(("", "https", "web"))
        );
        assert_eq!(split_scheme_name_port("ftp:web:21"), None);
        assert_eq!(split_scheme_name_port(":80"), None);
        assert_eq!(split_scheme_name_port("a:b:c:d"), None);
        assert_eq!(split_scheme_name_port(""), None);
    }

    #[test]
    fn only_global_unicast_addresses_are_proxyable() {
        for allowed in [
            "10.244.0.5",
            "192.0.2.2",
            "8.8.8.8",
            "010.1.2.3",
            "fd00::1",
            "2001:db8::1",
        ] {
            assert_eq!(check_ip(allowed), Ok(()), "{allowed}");
        }
        for refused in [
            "127.0.0.1",
            "127.9.9.9",
            "169.254.169.254",
            "0.0.0.0",
            "255.255.255.255",
            "224.0.0.1",
            "239.1.1.1",
            "::1",
            "::",
            "fe80::1",
            "ff02::1",
            "ff01::1",
            "::ffff:127.0.0.1",
            "::ffff:169.254.1.1",
            "",
            "not-an-ip",
            "1.2.3",
        ] {
            let refusal = check_ip(refused).expect_err(refused);
            assert_eq!((refusal.code, refusal.reason), (400, "BadRequest"));
            assert_eq!(refusal.message, "address not allowed");
        }
        assert_eq!(
            parse_ip_sloppy("010.001.002.003"),
            Some(IpAddr::V4(Ipv4Addr::new(10, 1, 2, 3)))
        );
    }

    #[test]
    fn a_pods_port_defaults_to_its_first_declared_one() {
        let p = json!({
            "spec": {"containers": [{"name": "a"}, {"name": "b", "ports": [{"containerPort": 8080}, {"containerPort": 9090}]}]},
            "status": {"podIP": "10.0.0.9", "podIPs": [{"ip": "10.0.0.7"}, {"ip": "fd00::7"}]}
        });
        let at = pod(&p, "p", "", "").expect("location");
        assert_eq!(
            (at.scheme, at.host.as_str(), at.port),
            (Scheme::Http, "10.0.0.7", Some(8080))
        );
        assert_eq!(at.url_host(), "10.0.0.7:8080");
        let at = pod(&p, "https:p:8443", "https", "8443").expect("location");
        assert_eq!((at.scheme, at.port), (Scheme::Https, Some(8443)));
        let bare = json!({"spec": {"containers": [{"name": "a"}]}, "status": {"podIP": "fd00::7"}});
        let at = pod(&bare, "p", "", "").expect("location");
        assert_eq!((at.port, at.dial_port()), (None, 80));
        assert_eq!(at.url_host(), "[fd00::7]");
        assert_eq!(at.dial_authority(), "[fd00::7]:80");
        let unscheduled = json!({"spec": {"containers": [{"name": "a"}]}});
        assert_eq!(
            pod(&unscheduled, "p", "", "").expect_err("no IP").message,
            "address not allowed"
        );
        let loopback =
            json!({"spec": {"containers": [{"name": "a"}]}, "status": {"podIP": "127.0.0.1"}});
        assert_eq!(
            pod(&loopback, "p", "", "80").expect_err("loopback").message,
            "address not allowed"
        );
        assert_eq!(
            pod(&bare, "p:x", "", "x").expect_err("named").message,
            "invalid pod request \"p:x\""
        );
    }

    #[test]
    fn service_port_numbers_resolve_to_their_names() {
        let service = json!({"spec": {"ports": [{"name": "http", "port": 80}, {"name": "metrics", "port": 9100}]}});
        assert_eq!(service_port_name(&service, "web", 80).expect("80"), "http");
        let missing = service_port_name(&service, "web", 81).expect_err("81");
        assert_eq!(
            (missing.code, missing.reason, missing.message.as_str()),
            (
                503,
                "ServiceUnavailable",
                "no service port 81 found for service \"web\""
            )
        );
        let unnamed = json!({"spec": {"ports": [{"port": 80}]}});
        assert_eq!(service_port_name(&unnamed, "web", 80).expect("80"), "");
    }

    #[test]
    fn endpoints_are_tried_from_a_random_start_for_the_named_port() {
        let endpoints = json!({"subsets": [
            {"notReadyAddresses": [{"ip": "10.0.0.1"}], "ports": [{"name": "http", "port": 8080}]},
            {"addresses": [
                {"ip": "10.0.0.2", "targetRef": {"kind": "Pod", "namespace": "ns", "name": "a"}},
                {"ip": "10.0.0.3"}],
             "ports": [{"name": "http", "port": 8080}, {"name": "metrics", "port": 9100}]},
            {"addresses": [{"ip": "10.0.0.4"}], "ports": [{"port": 7000}]}
        ]});
        let mut first = |_: usize| 0;
        let http = candidates(&endpoints, "http", &mut first);
        assert_eq!(
            http,
            vec![
                Candidate {
                    ip: "10.0.0.2".into(),
                    port: 8080,
                    pod: Some(("ns".into(), "a".into()))
                },
                Candidate {
                    ip: "10.0.0.3".into(),
                    port: 8080,
                    pod: None
                },
            ]
        );
        let mut last = |n: usize| n - 1;
        let ips: Vec<String> = candidates(&endpoints, "http", &mut last)
            .into_iter()
            .map(|c| c.ip)
            .collect();
        assert_eq!(ips, ["10.0.0.3", "10.0.0.2"]);
        let unnamed = candidates(&endpoints, "", &mut first);
        assert_eq!(
            unnamed
                .iter()
                .map(|c| (c.ip.as_str(), c.port))
                .collect::<Vec<_>>(),
            [("10.0.0.4", 7000)]
        );
        assert!(candidates(&endpoints, "web", &mut first).is_empty());
        assert!(candidates(&json!({}), "", &mut first).is_empty());
    }

    #[test]
    fn an_endpoint_is_reached_at_its_address_if_that_may_be_proxied_to() {
        let candidate = Candidate {
            ip: "10.0.0.2".into(),
            port: 8443,
            pod: None,
        };
        let at = endpoint(&candidate, "https").expect("location");
        assert_eq!(
            (at.scheme, at.url_host().as_str(), at.transport),
            (Scheme::Https, "10.0.0.2:8443", Transport::Proxy)
        );
        let looped = Candidate {
            ip: "127.0.0.1".into(),
            ..candidate
        };
        assert_eq!(endpoint(&looped, "").expect_err("loopback"), not_allowed());
    }

    #[test]
    fn an_endpoint_address_must_be_one_of_its_pods_ips() {
        let p = json!({"status": {"podIP": "10.0.0.2", "podIPs": [{"ip": "10.0.0.2"}, {"ip": "fd00::2"}]}});
        assert!(is_pods_address(&p, "fd00::2"));
        assert!(!is_pods_address(&p, "10.0.0.3"));
        assert!(is_pods_address(
            &json!({"status": {"podIP": "10.0.0.2"}}),
            "10.0.0.2"
        ));
    }

    #[test]
    fn a_node_is_reached_through_its_agent_unless_another_port_is_asked() {
        let n = json!({"metadata": {"name": "n1"}, "status": {
            "addresses": [{"type": "InternalIP", "address": "10.1.0.5"}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}}}});
        let agent = node(&n, "n1", "", "").expect("agent");
        assert_eq!(
            (
                agent.scheme,
                agent.host.as_str(),
                agent.port,
                agent.transport
            ),
            (Scheme::Https, "10.1.0.5", Some(10250), Transport::Kubelet)
        );
        assert_eq!(
            node(&n, "http:n1:10250", "http", "10250")
                .expect("same")
                .transport,
            Transport::Kubelet
        );
        let other = node(&n, "n1:9100", "", "9100").expect("other");
        assert_eq!(
            (other.scheme, other.port, other.transport),
            (Scheme::Http, Some(9100), Transport::Proxy)
        );
        assert_eq!(
            node(&n, "https:n1:9443", "https", "9443")
                .expect("tls")
                .scheme,
            Scheme::Https
        );
        let nowhere = node(&json!({"metadata": {"name": "n1"}}), "n1", "", "").expect_err("none");
        assert_eq!(nowhere.code, 500);
    }

    #[tokio::test]
    async fn a_node_host_is_checked_by_what_it_resolves_to() {
        assert_eq!(check_hostname("10.1.0.5").await, Ok(()));
        assert_eq!(
            check_hostname("127.0.0.1").await,
            Err("address not allowed".into())
        );
        assert_eq!(
            check_hostname("localhost").await,
            Err("address not allowed".into())
        );
    }
}
