//! The DNS configuration a user edits: where names outside the cluster go
//! (upstream nameservers, by default the node's resolv.conf's), stub
//! domains with their own servers, the cluster records' TTL and the
//! cache's bounds.
//!
//! One YAML document (JSON is YAML too), from a file or from the
//! `kube-system/rudder-dns` ConfigMap, which is the user's: rudder reads
//! it and never writes it, so an edit is never reverted. The keys are
//! kube-dns's (`upstreamNameservers`, `stubDomains`), and a ConfigMap may
//! hold them the kube-dns way, one JSON value per data key:
//!
//! ```yaml
//! upstreamNameservers: ["192.168.1.1", "[2001:db8::53]:53"]
//! stubDomains:
//!   corp.example: ["10.0.0.53"]
//!   consul: ["10.150.0.1:8600"]
//! ttl: 5              # seconds, cluster records (0..=3600)
//! cache:
//!   maxTTL: 30        # seconds a forwarded answer is kept at most (0 = no cache)
//!   size: 10000       # answers kept at most
//! ```
//!
//! Anything else — an unknown key, an address that is not one, a domain
//! that is not a name — is an error naming the field; the server keeps
//! what it had.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::wire::Name;

/// The ConfigMap data key that holds the whole document.
pub const CONFIG_MAP_KEY: &str = "config.yaml";
/// Most servers per list (CoreDNS's `forward` takes 15).
pub const MAX_SERVERS: usize = 15;

/// Why a configuration was refused.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("reading the DNS configuration {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("the DNS configuration is not valid YAML for it: {0}")]
    Syntax(#[from] serde_yaml_ng::Error),
    #[error("the DNS configuration's {field}: {message}")]
    Invalid { field: String, message: String },
}

fn invalid(field: impl Into<String>, message: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        field: field.into(),
        message: message.into(),
    }
}

/// The configuration, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// Where names outside the cluster go; empty: the node's resolv.conf's.
    pub upstream_nameservers: Vec<SocketAddr>,
    /// Domains (lowercase) with their own servers.
    pub stub_domains: Vec<(Name, Vec<SocketAddr>)>,
    /// The TTL of cluster records.
    pub ttl: u32,
    pub cache: CacheConfig,
}

/// The cache of forwarded answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheConfig {
    /// The longest an answer is kept, seconds (CoreDNS's `cache 30`).
    pub max_ttl: u32,
    /// How many answers are kept at most.
    pub size: usize,
}

impl Default for CacheConfig {
    fn default() -> Self {
        CacheConfig {
            max_ttl: 30,
            size: 10_000,
        }
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            upstream_nameservers: Vec::new(),
            stub_domains: Vec::new(),
            ttl: crate::zone::DEFAULT_TTL,
            cache: CacheConfig::default(),
        }
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Raw {
    #[serde(default)]
    upstream_nameservers: Vec<String>,
    #[serde(default)]
    stub_domains: BTreeMap<String, Vec<String>>,
    ttl: Option<u32>,
    cache: Option<RawCache>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCache {
    #[serde(rename = "maxTTL")]
    max_ttl: Option<u32>,
    size: Option<usize>,
}

impl Config {
    /// Parses a YAML (or JSON) document; an empty one is the default.
    pub fn from_yaml(text: &str) -> Result<Config, ConfigError> {
        if text.trim().is_empty() {
            return Ok(Config::default());
        }
        let raw: Raw = serde_yaml_ng::from_str(text)?;
        raw.check()
    }

    /// Reads and parses the file at `path`.
    pub fn from_file(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Config::from_yaml(&text)
    }

    /// Parses a ConfigMap's data: the document under [`CONFIG_MAP_KEY`],
    /// or kube-dns's keys `upstreamNameservers` and `stubDomains`, each a
    /// JSON value, but not both ways at once.
    pub fn from_config_map(data: &BTreeMap<String, String>) -> Result<Config, ConfigError> {
        const KUBE_DNS_KEYS: [&str; 2] = ["upstreamNameservers", "stubDomains"];
        if let Some(key) = data
            .keys()
            .find(|k| *k != CONFIG_MAP_KEY && !KUBE_DNS_KEYS.contains(&k.as_str()))
        {
            return Err(invalid(
                format!("data key {key:?}"),
                format!(
                    "unknown (use {CONFIG_MAP_KEY:?}, or kube-dns's upstreamNameservers and stubDomains)"
                ),
            ));
        }
        if let Some(document) = data.get(CONFIG_MAP_KEY) {
            if let Some(key) = KUBE_DNS_KEYS.iter().find(|k| data.contains_key(**k)) {
                return Err(invalid(
                    format!("data key {key:?}"),
                    format!("set in {CONFIG_MAP_KEY:?} instead, not beside it"),
                ));
            }
            return Config::from_yaml(document);
        }
        let mut raw = Raw::default();
        if let Some(value) = data.get("upstreamNameservers") {
            raw.upstream_nameservers = serde_yaml_ng::from_str(value)?;
        }
        if let Some(value) = data.get("stubDomains") {
            raw.stub_domains = serde_yaml_ng::from_str(value)?;
        }
        raw.check()
    }
}

impl Raw {
    fn check(self) -> Result<Config, ConfigError> {
        let upstream_nameservers = servers("upstreamNameservers", &self.upstream_nameservers)?;
        let mut stub_domains = Vec::new();
        for (domain, list) in &self.stub_domains {
            let field = format!("stubDomains[{domain:?}]");
            let name = Name::from_text(domain)
                .map_err(|e| invalid(&field, format!("not a domain name: {e}")))?;
            if name.is_root() {
                return Err(invalid(&field, "the root is upstreamNameservers"));
            }
            if list.is_empty() {
                return Err(invalid(&field, "no servers"));
            }
            stub_domains.push((name.to_lowercase(), servers(&field, list)?));
        }
        // Most specific first, so the first match is the longest.
        stub_domains.sort_by_key(|(name, _)| std::cmp::Reverse(name.label_count()));
        let ttl = self.ttl.unwrap_or(crate::zone::DEFAULT_TTL);
        if ttl > 3600 {
            return Err(invalid("ttl", format!("{ttl} is more than 3600 seconds")));
        }
        let mut cache = CacheConfig::default();
        if let Some(raw) = self.cache {
            cache.max_ttl = raw.max_ttl.unwrap_or(cache.max_ttl);
            cache.size = raw.size.unwrap_or(cache.size);
            if cache.max_ttl > 86400 {
                return Err(invalid("cache.maxTTL", "more than a day"));
            }
            if cache.size > 10_000_000 {
                return Err(invalid("cache.size", "more than 10,000,000 answers"));
            }
        }
        Ok(Config {
            upstream_nameservers,
            stub_domains,
            ttl,
            cache,
        })
    }
}

fn servers(field: &str, list: &[String]) -> Result<Vec<SocketAddr>, ConfigError> {
    if list.len() > MAX_SERVERS {
        return Err(invalid(field, format!("more than {MAX_SERVERS} servers")));
    }
    list.iter()
        .enumerate()
        .map(|(i, text)| {
            server(text).ok_or_else(|| {
                invalid(
                    format!("{field}[{i}]"),
                    format!("{text:?} is not an IP address or IP:port"),
                )
            })
        })
        .collect()
}

/// `192.0.2.1`, `192.0.2.1:5353`, `2001:db8::1` or `[2001:db8::1]:5353`.
fn server(text: &str) -> Option<SocketAddr> {
    let text = text.trim();
    if let Ok(ip) = text.parse::<IpAddr>() {
        return Some(SocketAddr::new(ip, 53));
    }
    text.parse::<SocketAddr>().ok().filter(|s| s.port() != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addrs(list: &[SocketAddr]) -> Vec<String> {
        list.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn a_full_document_parses() {
        let config = Config::from_yaml(
            "upstreamNameservers: [192.168.1.1, \"[2001:db8::53]:5353\"]\n\
             stubDomains:\n  consul: [\"10.150.0.1:8600\"]\n  a.corp.example: [10.0.0.54]\n  corp.example: [10.0.0.53, 10.0.0.52]\n\
             ttl: 30\ncache:\n  maxTTL: 10\n  size: 50\n",
        )
        .expect("a valid configuration");
        assert_eq!(
            addrs(&config.upstream_nameservers),
            ["192.168.1.1:53", "[2001:db8::53]:5353"]
        );
        let stubs: Vec<String> = config
            .stub_domains
            .iter()
            .map(|(d, s)| format!("{d} {}", addrs(s).join(",")))
            .collect();
        assert_eq!(
            stubs,
            [
                "a.corp.example. 10.0.0.54:53",
                "corp.example. 10.0.0.53:53,10.0.0.52:53",
                "consul. 10.150.0.1:8600",
            ]
        );
        assert_eq!(
            (config.ttl, config.cache.max_ttl, config.cache.size),
            (30, 10, 50)
        );
        // JSON is YAML; empty is the default.
        let json = Config::from_yaml(r#"{"upstreamNameservers": ["1.1.1.1"]}"#)
            .expect("a valid configuration");
        assert_eq!(addrs(&json.upstream_nameservers), ["1.1.1.1:53"]);
        assert_eq!(
            Config::from_yaml("  \n").expect("a valid configuration"),
            Config::default()
        );
    }

    #[test]
    fn mistakes_are_errors_that_name_the_field() {
        let error = |text: &str| {
            Config::from_yaml(text)
                .expect_err("should be refused")
                .to_string()
        };
        assert!(
            error("upstreamNameserver: [1.1.1.1]").contains("unknown field `upstreamNameserver`")
        );
        assert_eq!(
            error("upstreamNameservers: [1.1.1.1, 10.0.0.300]"),
            "the DNS configuration's upstreamNameservers[1]: \"10.0.0.300\" is not an IP address or IP:port"
        );
        assert!(
            error("stubDomains:\n  \"bad..name\": [1.1.1.1]")
                .contains("stubDomains[\"bad..name\"]")
        );
        assert!(error("stubDomains:\n  corp: []").contains("no servers"));
        assert!(error("stubDomains:\n  corp: [dns.example.com]").contains("not an IP address"));
        assert!(error("ttl: 9999").contains("ttl: 9999 is more than 3600"));
        assert!(error("ttl: -1").contains("not valid YAML"));
        assert!(error("cache: {maxTtl: 3}").contains("unknown field `maxTtl`"));
        assert!(error("[1, 2").contains("not valid YAML"));
        let missing = Config::from_file(Path::new("/nonexistent/rudder-dns.yaml"))
            .expect_err("should be refused");
        assert!(
            missing
                .to_string()
                .starts_with("reading the DNS configuration /nonexistent")
        );
    }

    #[test]
    fn a_config_map_holds_a_document_or_kube_dns_keys() {
        let data = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let config =
            Config::from_config_map(&data(&[(CONFIG_MAP_KEY, "upstreamNameservers: [9.9.9.9]")]))
                .expect("a valid configuration");
        assert_eq!(addrs(&config.upstream_nameservers), ["9.9.9.9:53"]);
        let config = Config::from_config_map(&data(&[
            ("upstreamNameservers", r#"["8.8.8.8", "8.8.4.4"]"#),
            ("stubDomains", r#"{"acme.local": ["1.2.3.4"]}"#),
        ]))
        .expect("a valid configuration");
        assert_eq!(config.upstream_nameservers.len(), 2);
        assert_eq!(config.stub_domains[0].0.to_string(), "acme.local.");
        assert_eq!(
            Config::from_config_map(&data(&[])).expect("a valid configuration"),
            Config::default()
        );
        let both = Config::from_config_map(&data(&[(CONFIG_MAP_KEY, ""), ("stubDomains", "{}")]));
        assert!(
            both.expect_err("should be refused")
                .to_string()
                .contains("not beside it")
        );
        let unknown = Config::from_config_map(&data(&[("Corefile", ".:53 {}")]));
        assert!(
            unknown
                .expect_err("should be refused")
                .to_string()
                .contains("data key \"Corefile\"")
        );
    }
}
