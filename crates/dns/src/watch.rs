//! Keeping the server in step with the cluster and the node: Services and
//! EndpointSlices from the shared informers into the [`Zone`], and the
//! configuration — the file, the user's ConfigMap, the node's
//! resolv.conf — into the forwarder and the zone's TTL.
//!
//! Which configuration wins: the ConfigMap while it exists and is valid,
//! else the file, else the defaults. An invalid ConfigMap or file is
//! logged once and the last good configuration stays.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, RwLock};

use k8s_openapi::api::core::v1::{ConfigMap, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use rudder_runtime::Change;

use crate::config::{Config, ConfigError};
use crate::forward::{Forwarder, Upstreams};
use crate::zone::Zone;

/// One Service change into the zone; `all` re-reads everything (after a
/// resync) into a fresh zone swapped in whole.
pub(crate) fn service_change(
    zone: &mut Zone,
    change: Change<Service>,
    all: impl FnOnce() -> (Vec<Arc<Service>>, Vec<Arc<EndpointSlice>>),
) {
    match change {
        Change::Applied { new, .. } => zone.apply_service(&new),
        Change::Deleted(old) => zone.delete_service(&old),
        Change::Resync => reload(zone, all()),
    }
}

/// One EndpointSlice change into the zone.
pub(crate) fn slice_change(
    zone: &mut Zone,
    change: Change<EndpointSlice>,
    all: impl FnOnce() -> (Vec<Arc<Service>>, Vec<Arc<EndpointSlice>>),
) {
    match change {
        Change::Applied { new, .. } => zone.apply_slice(&new),
        Change::Deleted(old) => zone.delete_slice(&old),
        Change::Resync => reload(zone, all()),
    }
}

/// Replaces the zone's contents with `services` and `slices`.
pub(crate) fn reload(
    zone: &mut Zone,
    (services, slices): (Vec<Arc<Service>>, Vec<Arc<EndpointSlice>>),
) {
    let mut fresh = zone.empty_like();
    for service in &services {
        fresh.apply_service(service);
    }
    for slice in &slices {
        fresh.apply_slice(slice);
    }
    *zone = fresh;
}

/// Where the configuration comes from, and what each source said last.
#[derive(Debug)]
pub(crate) struct Settings {
    file: Option<PathBuf>,
    resolv_conf: PathBuf,
    /// This server's own addresses, never upstreams.
    own: Vec<SocketAddr>,
    from_file: Option<Config>,
    from_map: Option<Config>,
    resolv: Vec<SocketAddr>,
    /// The last error logged per source, so a bad file is logged once.
    file_error: Option<String>,
    map_error: Option<String>,
    resolv_error: Option<String>,
}

impl Settings {
    /// Reads the file (an invalid one is an error at start) and the node's
    /// resolv.conf.
    pub(crate) fn load(
        file: Option<PathBuf>,
        resolv_conf: PathBuf,
        own: Vec<SocketAddr>,
    ) -> Result<Settings, ConfigError> {
        let from_file = file.as_deref().map(Config::from_file).transpose()?;
        let mut settings = Settings {
            file,
            resolv_conf,
            own,
            from_file,
            from_map: None,
            resolv: Vec::new(),
            file_error: None,
            map_error: None,
            resolv_error: None,
        };
        settings.read_resolv_conf();
        Ok(settings)
    }

    /// The configuration in force.
    pub(crate) fn config(&self) -> Config {
        self.from_map
            .clone()
            .or_else(|| self.from_file.clone())
            .unwrap_or_default()
    }

    pub(crate) fn upstreams(&self) -> Upstreams {
        let upstreams = Upstreams::new(&self.config(), self.resolv.clone(), &self.own);
        if upstreams.default_servers().is_empty() {
            tracing::warn!(
                resolv_conf = %self.resolv_conf.display(),
                "no upstream nameserver: names outside the cluster will fail (SERVFAIL)"
            );
        }
        upstreams
    }

    /// Puts the configuration in force.
    pub(crate) fn apply(&self, forwarder: &Forwarder, zone: &RwLock<Zone>) {
        let config = self.config();
        forwarder.set_upstreams(self.upstreams());
        forwarder.set_cache(config.cache);
        zone.write()
            .unwrap_or_else(|e| e.into_inner())
            .set_ttl(config.ttl);
    }

    /// Re-reads resolv.conf; one that cannot be read keeps the servers it
    /// last named (a file being replaced must not cut the node off).
    fn read_resolv_conf(&mut self) -> bool {
        match crate::resolv::read(&self.resolv_conf) {
            Ok(servers) => {
                self.resolv_error = None;
                let changed = servers != self.resolv;
                self.resolv = servers;
                changed
            }
            Err(error) => {
                let text = error.to_string();
                if self.resolv_error.as_ref() != Some(&text) {
                    tracing::warn!(
                        path = %self.resolv_conf.display(),
                        %error,
                        "cannot read the node's resolv.conf; keeping the nameservers it last named"
                    );
                    self.resolv_error = Some(text);
                }
                false
            }
        }
    }

    /// Re-reads the file and resolv.conf; whether anything changed.
    pub(crate) fn reread(&mut self) -> bool {
        let mut changed = self.read_resolv_conf();
        if let Some(path) = &self.file {
            match Config::from_file(path) {
                Ok(config) => {
                    self.file_error = None;
                    if self.from_file.as_ref() != Some(&config) {
                        tracing::info!(path = %path.display(), "DNS configuration file changed");
                        self.from_file = Some(config);
                        changed = true;
                    }
                }
                Err(error) => {
                    let text = error.to_string();
                    if self.file_error.as_ref() != Some(&text) {
                        tracing::error!(%error, "keeping the last good DNS configuration");
                        self.file_error = Some(text);
                    }
                }
            }
        }
        changed
    }

    /// The ConfigMap's data (`None`: it is gone); whether anything changed.
    pub(crate) fn config_map(&mut self, data: Option<&BTreeMap<String, String>>) -> bool {
        let parsed = match data {
            None => None,
            Some(data) => match Config::from_config_map(data) {
                Ok(config) => Some(config),
                Err(error) => {
                    let text = error.to_string();
                    if self.map_error.as_ref() != Some(&text) {
                        tracing::error!(%error, "keeping the last good DNS configuration");
                        self.map_error = Some(text);
                    }
                    return false;
                }
            },
        };
        self.map_error = None;
        let changed = parsed != self.from_map;
        self.from_map = parsed;
        changed
    }
}

/// Whether `map` is the ConfigMap `namespace/name`.
pub(crate) fn is_config_map(map: &ConfigMap, namespace: &str, name: &str) -> bool {
    map.metadata.namespace.as_deref() == Some(namespace)
        && map.metadata.name.as_deref() == Some(name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::zone::tests::{cluster, service, slice};

    #[test]
    fn changes_reach_the_zone_and_a_resync_rebuilds_it() {
        let mut zone = cluster();
        let before = zone.services();
        let svc = Arc::new(service("demo", "new", "10.43.5.5", &[]));
        service_change(
            &mut zone,
            Change::Applied {
                old: None,
                new: svc.clone(),
            },
            || unreachable!(),
        );
        assert_eq!(zone.services(), before + 1);
        slice_change(
            &mut zone,
            Change::Applied {
                old: None,
                new: Arc::new(slice(
                    "demo",
                    "new",
                    "new-1",
                    &[("10.42.3.3", None, true)],
                    &[],
                )),
            },
            || unreachable!(),
        );
        service_change(&mut zone, Change::Deleted(svc), || unreachable!());
        assert_eq!(zone.services(), before);
        service_change(&mut zone, Change::Resync, || {
            (
                vec![Arc::new(service("a", "only", "10.43.9.9", &[]))],
                Vec::new(),
            )
        });
        assert_eq!(zone.services(), 1);
        assert_eq!(zone.domain().to_string(), "cluster.local.");
    }

    #[test]
    fn the_config_map_wins_while_it_is_there_and_valid() {
        let dir = std::env::temp_dir().join(format!("rudder-dns-watch-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a temporary directory");
        let file = dir.join("dns.yaml");
        let resolv = dir.join("resolv.conf");
        std::fs::write(&file, "upstreamNameservers: [192.0.2.1]\nttl: 7\n")
            .expect("a temporary file");
        std::fs::write(&resolv, "nameserver 192.0.2.53\n").expect("a temporary file");
        let mut settings =
            Settings::load(Some(file.clone()), resolv.clone(), Vec::new()).expect("settings");
        assert_eq!(settings.config().ttl, 7);
        assert_eq!(
            settings.resolv,
            ["192.0.2.53:53".parse().expect("an address")]
        );
        let data = |text: &str| BTreeMap::from([("config.yaml".to_string(), text.to_string())]);
        assert!(settings.config_map(Some(&data("ttl: 9"))));
        assert_eq!(settings.config().ttl, 9);
        assert!(
            settings.config().upstream_nameservers.is_empty(),
            "not merged"
        );
        // A broken edit keeps what was in force.
        assert!(!settings.config_map(Some(&data("ttl: [nope"))));
        assert_eq!(settings.config().ttl, 9);
        assert!(settings.config_map(None));
        assert_eq!(settings.config().ttl, 7);
        // The file and resolv.conf are re-read; a broken file keeps the last.
        std::fs::write(&file, "ttl: 8\n").expect("a temporary file");
        assert!(settings.reread());
        assert_eq!(settings.config().ttl, 8);
        std::fs::write(&file, "ttl: eight\n").expect("a temporary file");
        assert!(!settings.reread());
        assert_eq!(settings.config().ttl, 8);
        std::fs::write(&resolv, "nameserver 192.0.2.54\n").expect("a temporary file");
        assert!(settings.reread());
        std::fs::remove_file(&resolv).expect("a temporary file");
        assert!(!settings.reread());
        assert_eq!(
            settings.resolv,
            ["192.0.2.54:53".parse().expect("an address")]
        );
        std::fs::write(&resolv, "").expect("a temporary file");
        // A broken file at start is an error.
        assert!(Settings::load(Some(file), resolv, Vec::new()).is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
