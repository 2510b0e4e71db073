//! A pod's name resolution, as upstream's kubelet sets it up
//! (`pkg/kubelet/network/dns/dns.go`, `kubelet_pods.go`): the resolv.conf
//! the runtime writes from the sandbox's DNS config — by `dnsPolicy`,
//! merged with `dnsConfig`, cut to the resolver's limits — and the
//! managed `/etc/hosts` with the pod's own names and its `hostAliases`.
//! Pure: the node's resolv.conf comes in as text.

use std::net::Ipv4Addr;

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;

use crate::cri::v1 as cri;

/// Nameservers a resolver reads (glibc's `MAXNS`).
pub const MAX_NAMESERVERS: usize = 3;
/// Search domains, and their joined length (upstream's limits since
/// 1.28).
pub const MAX_SEARCHES: usize = 32;
pub const MAX_SEARCH_CHARS: usize = 2048;
/// A search domain longer than this is dropped (glibc aborts on one).
const MAX_SEARCH_NAME: usize = 253;

/// A resolv.conf, as far as a pod's DNS config takes from it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ResolvConf {
    pub nameservers: Vec<String>,
    pub searches: Vec<String>,
    pub options: Vec<String>,
}

impl ResolvConf {
    /// Upstream's `parseResolvConf`: `nameserver` lines add up, the last
    /// `search` and `options` lines win, `#` comments and anything else
    /// are ignored; a `nameserver` line without an address is an error.
    pub fn parse(text: &str) -> Result<ResolvConf, String> {
        let mut conf = ResolvConf::default();
        for line in text.lines().map(str::trim) {
            if line.starts_with('#') {
                continue;
            }
            let mut fields = line.split_whitespace();
            match fields.next() {
                Some("nameserver") => match fields.next() {
                    Some(server) => conf.nameservers.push(server.to_string()),
                    None => return Err("nameserver list is empty".into()),
                },
                Some("search") => {
                    conf.searches = fields
                        .map(|s| s.strip_suffix('.').unwrap_or(s).to_string())
                        .collect();
                }
                Some("options") => conf.options = fields.map(str::to_string).collect(),
                _ => {}
            }
        }
        Ok(conf)
    }
}

/// What the node's pods resolve with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// The cluster DNS Service's address(es) (`--cluster-dns`); empty:
    /// ClusterFirst falls back to Default, as upstream's does.
    pub cluster_dns: Vec<Ipv4Addr>,
    /// `--cluster-domain`.
    pub cluster_domain: String,
    /// The node's own resolv.conf, parsed.
    pub host: ResolvConf,
}

/// A pod's DNS config for its sandbox, and the warnings (upstream's
/// `DNSConfigForming` events) when it had to be cut to fit.
pub fn dns_config(pod: &Pod, settings: &Settings) -> (cri::DnsConfig, Vec<String>) {
    let spec = pod.spec.clone().unwrap_or_default();
    let host_network = spec.host_network.unwrap_or(false);
    let policy = spec.dns_policy.as_deref().unwrap_or("ClusterFirst");
    let cluster = match policy {
        "ClusterFirstWithHostNet" => true,
        "ClusterFirst" => !host_network,
        "Default" | "None" => false,
        _ => !host_network,
    };
    let mut config = cri::DnsConfig::default();
    if policy != "None" {
        if cluster && !settings.cluster_dns.is_empty() {
            config.servers = settings
                .cluster_dns
                .iter()
                .map(ToString::to_string)
                .collect();
            let domain = &settings.cluster_domain;
            if !domain.is_empty() {
                let namespace = pod.namespace().unwrap_or_default();
                config.searches = vec![
                    format!("{namespace}.svc.{domain}"),
                    format!("svc.{domain}"),
                    domain.clone(),
                ];
            }
            config
                .searches
                .extend(settings.host.searches.iter().cloned());
            config.options = vec!["ndots:5".into()];
        } else {
            config.servers = settings.host.nameservers.clone();
            config.searches = settings.host.searches.clone();
            config.options = settings.host.options.clone();
        }
    }
    if let Some(extra) = &spec.dns_config {
        config
            .servers
            .extend(extra.nameservers.iter().flatten().cloned());
        config
            .searches
            .extend(extra.searches.iter().flatten().cloned());
        for option in extra.options.iter().flatten() {
            let name = option.name.clone().unwrap_or_default();
            let text = match &option.value {
                Some(value) => format!("{name}:{value}"),
                None => name.clone(),
            };
            // A later option of the same name replaces the earlier one,
            // in its place (upstream's map leaves the order random).
            let same = |o: &String| o.split(':').next() == Some(name.as_str());
            match config.options.iter().position(same) {
                Some(at) => config.options[at] = text,
                None => config.options.push(text),
            }
        }
    }
    dedup(&mut config.servers);
    dedup(&mut config.searches);
    let mut warnings = Vec::new();
    if config.servers.len() > MAX_NAMESERVERS {
        config.servers.truncate(MAX_NAMESERVERS);
        warnings.push(format!(
            "Nameserver limits were exceeded, some nameservers have been omitted, the applied nameserver line is: {}",
            config.servers.join(" ")
        ));
    }
    let before = config.searches.len();
    config.searches.truncate(MAX_SEARCHES);
    config.searches.retain(|s| s.len() <= MAX_SEARCH_NAME);
    let mut exceeded = config.searches.len() != before;
    while config.searches.join(" ").len() > MAX_SEARCH_CHARS {
        config.searches.pop();
        exceeded = true;
    }
    if exceeded {
        warnings.push(format!(
            "Search Line limits were exceeded, some search paths have been omitted, the applied search line is: {}",
            config.searches.join(" ")
        ));
    }
    (config, warnings)
}

/// Drops repeats, keeping the first of each.
fn dedup(list: &mut Vec<String>) {
    let mut seen = std::collections::HashSet::new();
    list.retain(|item| seen.insert(item.clone()));
}

/// The pod's host name (`spec.hostname`, else its name, cut to 63
/// characters) and its domain (`<subdomain>.<namespace>.svc.<cluster
/// domain>` when it has a subdomain).
pub fn hostname_and_domain(pod: &Pod, cluster_domain: &str) -> (String, Option<String>) {
    let spec = pod.spec.clone().unwrap_or_default();
    let mut hostname = spec
        .hostname
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| pod.name_any());
    if hostname.len() > 63 {
        hostname.truncate(63);
        hostname = hostname.trim_end_matches(['-', '.']).to_string();
    }
    let domain = spec.subdomain.filter(|s| !s.is_empty()).map(|subdomain| {
        format!(
            "{subdomain}.{}.svc.{cluster_domain}",
            pod.namespace().unwrap_or_default()
        )
    });
    (hostname, domain)
}

/// The name the pod's kernel gets: its host name, or with
/// `setHostnameAsFQDN` its fully qualified one.
pub fn kernel_hostname(pod: &Pod, cluster_domain: &str) -> String {
    let (hostname, domain) = hostname_and_domain(pod, cluster_domain);
    let fqdn = pod
        .spec
        .as_ref()
        .and_then(|s| s.set_hostname_as_fqdn)
        .unwrap_or(false);
    match domain {
        Some(domain) if fqdn => format!("{hostname}.{domain}"),
        _ => hostname,
    }
}

/// The managed `/etc/hosts` (upstream's exact bytes): localhost, the pod's
/// addresses with its names, then its `hostAliases`. For a `hostNetwork`
/// pod, the node's own hosts file (`node_hosts`) instead of the first
/// part.
pub fn hosts_file(
    pod: &Pod,
    pod_ips: &[String],
    cluster_domain: &str,
    node_hosts: Option<&str>,
) -> String {
    let mut out = String::new();
    match node_hosts {
        Some(node) => {
            out.push_str("# Kubernetes-managed hosts file (host network).\n");
            out.push_str(node);
        }
        None => {
            out.push_str("# Kubernetes-managed hosts file.\n");
            out.push_str("127.0.0.1\tlocalhost\n");
            out.push_str("::1\tlocalhost ip6-localhost ip6-loopback\n");
            out.push_str("fe00::0\tip6-localnet\n");
            out.push_str("fe00::0\tip6-mcastprefix\n");
            out.push_str("fe00::1\tip6-allnodes\n");
            out.push_str("fe00::2\tip6-allrouters\n");
            let (hostname, domain) = hostname_and_domain(pod, cluster_domain);
            for ip in pod_ips {
                match &domain {
                    Some(domain) => {
                        out.push_str(&format!("{ip}\t{hostname}.{domain}\t{hostname}\n"))
                    }
                    None => out.push_str(&format!("{ip}\t{hostname}\n")),
                }
            }
        }
    }
    let aliases = pod
        .spec
        .as_ref()
        .and_then(|s| s.host_aliases.clone())
        .unwrap_or_default();
    if !aliases.is_empty() {
        out.push_str("\n# Entries added by HostAliases.\n");
        for alias in aliases {
            let names = alias.hostnames.unwrap_or_default();
            out.push_str(&format!("{}\t{}\n", alias.ip, names.join("\t")));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(spec: serde_json::Value) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "web-0", "namespace": "shop"},
            "spec": spec,
        }))
        .expect("a Pod")
    }

    fn settings() -> Settings {
        Settings {
            cluster_dns: vec![Ipv4Addr::new(10, 43, 0, 10)],
            cluster_domain: "cluster.local".into(),
            host: ResolvConf::parse(
                "# comment\nnameserver 192.168.1.1\nsearch old.example\nsearch lan.\noptions edns0\nnameserver 192.168.1.2\n",
            )
            .expect("parses"),
        }
    }

    #[test]
    fn the_hosts_resolv_conf_is_read_as_upstream_reads_it() {
        let host = settings().host;
        assert_eq!(host.nameservers, ["192.168.1.1", "192.168.1.2"]);
        assert_eq!(
            host.searches,
            ["lan"],
            "the last search line wins, its dot trimmed"
        );
        assert_eq!(host.options, ["edns0"]);
        assert!(ResolvConf::parse("nameserver\n").is_err());
    }

    #[test]
    fn cluster_first_searches_the_namespace_then_the_cluster_then_the_host() {
        let (config, warnings) = dns_config(&pod(json!({"containers": []})), &settings());
        assert_eq!(config.servers, ["10.43.0.10"]);
        assert_eq!(
            config.searches,
            [
                "shop.svc.cluster.local",
                "svc.cluster.local",
                "cluster.local",
                "lan"
            ]
        );
        assert_eq!(config.options, ["ndots:5"]);
        assert!(warnings.is_empty());
    }

    #[test]
    fn host_network_pods_use_the_nodes_resolver_unless_they_ask_for_the_cluster() {
        let (config, _) = dns_config(
            &pod(json!({"containers": [], "hostNetwork": true})),
            &settings(),
        );
        assert_eq!(config.servers, ["192.168.1.1", "192.168.1.2"]);
        assert_eq!(config.options, ["edns0"]);
        let (config, _) = dns_config(
            &pod(
                json!({"containers": [], "hostNetwork": true, "dnsPolicy": "ClusterFirstWithHostNet"}),
            ),
            &settings(),
        );
        assert_eq!(config.servers, ["10.43.0.10"]);
        let (config, _) = dns_config(
            &pod(json!({"containers": [], "dnsPolicy": "Default"})),
            &settings(),
        );
        assert_eq!(config.searches, ["lan"]);
    }

    #[test]
    fn dns_config_merges_and_none_takes_only_it() {
        let spec = json!({"containers": [], "dnsPolicy": "None", "dnsConfig": {
            "nameservers": ["1.2.3.4"], "searches": ["a.example", "a.example"],
            "options": [{"name": "ndots", "value": "2"}, {"name": "edns0"}]}});
        let (config, _) = dns_config(&pod(spec), &settings());
        assert_eq!(config.servers, ["1.2.3.4"]);
        assert_eq!(config.searches, ["a.example"]);
        assert_eq!(config.options, ["ndots:2", "edns0"]);
        let spec = json!({"containers": [], "dnsConfig": {
            "nameservers": ["1.2.3.4"], "options": [{"name": "ndots", "value": "1"}]}});
        let (config, _) = dns_config(&pod(spec), &settings());
        assert_eq!(config.servers, ["10.43.0.10", "1.2.3.4"]);
        assert_eq!(
            config.options,
            ["ndots:1"],
            "a later option of the same name replaces it"
        );
    }

    #[test]
    fn too_many_servers_and_searches_are_cut_with_upstreams_warnings() {
        let searches: Vec<String> = (0..40).map(|i| format!("d{i}.example")).collect();
        let spec = json!({"containers": [], "dnsConfig": {
            "nameservers": ["1.1.1.1", "2.2.2.2", "3.3.3.3"], "searches": searches}});
        let (config, warnings) = dns_config(&pod(spec), &settings());
        assert_eq!(config.servers, ["10.43.0.10", "1.1.1.1", "2.2.2.2"]);
        assert_eq!(config.searches.len(), MAX_SEARCHES);
        assert_eq!(warnings.len(), 2);
        assert!(warnings[0].starts_with(
            "Nameserver limits were exceeded, some nameservers have been omitted, the applied nameserver line is: 10.43.0.10 1.1.1.1 2.2.2.2"
        ));
        assert!(warnings[1].starts_with("Search Line limits were exceeded"));
    }

    #[test]
    fn the_hosts_file_names_the_pod_and_its_aliases() {
        let spec = json!({"containers": [], "hostname": "db", "subdomain": "backend",
            "hostAliases": [{"ip": "10.1.2.3", "hostnames": ["foo.local", "bar.local"]}]});
        let text = hosts_file(&pod(spec), &["10.42.0.5".into()], "cluster.local", None);
        assert!(text.starts_with("# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n"));
        assert!(
            text.contains("10.42.0.5\tdb.backend.shop.svc.cluster.local\tdb\n"),
            "{text}"
        );
        assert!(
            text.ends_with("\n# Entries added by HostAliases.\n10.1.2.3\tfoo.local\tbar.local\n"),
            "{text}"
        );
        let plain = hosts_file(
            &pod(json!({"containers": []})),
            &["10.42.0.6".into()],
            "cluster.local",
            None,
        );
        assert!(plain.ends_with("10.42.0.6\tweb-0\n"), "{plain}");
        let host = hosts_file(
            &pod(json!({"containers": []})),
            &[],
            "cluster.local",
            Some("127.0.0.1 localhost\n"),
        );
        assert_eq!(
            host,
            "# Kubernetes-managed hosts file (host network).\n127.0.0.1 localhost\n"
        );
    }

    #[test]
    fn long_names_are_cut_and_fqdn_hostnames_asked_for() {
        let name = format!("{}-x", "a".repeat(62));
        let p: Pod = serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "ns"},
            "spec": {"containers": [], "subdomain": "s", "setHostnameAsFQDN": true},
        }))
        .expect("a Pod");
        let (hostname, domain) = hostname_and_domain(&p, "cluster.local");
        assert_eq!(hostname, "a".repeat(62), "cut to 63, trailing dash trimmed");
        assert_eq!(domain.as_deref(), Some("s.ns.svc.cluster.local"));
        assert_eq!(
            kernel_hostname(&p, "cluster.local"),
            format!("{}.s.ns.svc.cluster.local", "a".repeat(62))
        );
    }
}
