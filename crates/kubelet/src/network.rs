//! The node's pod network: the CNI conflist containerd's CRI plugin runs
//! (bridge + host-local on the node's podCIDR; containerd adds loopback
//! itself), and the agent's own nftables table — masquerade for traffic
//! leaving the pod network, the pods' hostPorts. The routes and sysctls
//! under it are `rudder_host`'s, run through the agent's host seam.
//!
//! Why nftables and not the plugins' `ipMasq`/`portmap`: those exec
//! `iptables`, which a fresh machine does not have; the service proxy
//! writes nftables too, so one table family, one tool, atomic replacement
//! of the whole table, and no per-sandbox chains to leak. See
//! docs/kubelet.md.

use std::path::{Path, PathBuf};

use rudder_host::{Command, Host};
use serde_json::json;

pub use rudder_host::Cidr;
pub use rudder_host::tables::agent::{EgressGuard, HostPort, egress_guard_rules, nftables_rules};

/// A failed network step, naming it.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Host(#[from] rudder_host::Error),
    #[error(transparent)]
    Routes(#[from] rudder_host::routes::Error),
    #[error("write the CNI config {path}: {source}")]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// The conflist the agent writes for containerd's CRI plugin.
pub fn conflist(pod_cidr: Cidr, bridge: &str, mtu: u32, ipam_dir: &Path) -> serde_json::Value {
    json!({
        "cniVersion": "1.0.0",
        "name": "rudder",
        "plugins": [{
            "type": "bridge",
            "bridge": bridge,
            "isGateway": true,
            "ipMasq": false,
            "hairpinMode": true,
            "mtu": mtu,
            "ipam": {
                "type": "host-local",
                "ranges": [[{"subnet": pod_cidr.to_string(), "gateway": pod_cidr.gateway().to_string()}]],
                "routes": [{"dst": "0.0.0.0/0"}],
                "dataDir": ipam_dir,
            },
        }],
    })
}

/// Writes the conflist into `conf_dir` (atomically: containerd watches the
/// directory and must never read half a file).
pub fn write_conflist(conf_dir: &Path, config: &serde_json::Value) -> Result<PathBuf, Error> {
    let path = conf_dir.join("10-rudder.conflist");
    let temporary = conf_dir.join(".10-rudder.conflist.tmp");
    let write = |path: &Path| Error::Write {
        path: path.to_path_buf(),
        source: std::io::Error::other("write"),
    };
    let text = serde_json::to_string_pretty(config).map_err(|_| write(&path))?;
    std::fs::create_dir_all(conf_dir).map_err(|source| Error::Write {
        path: conf_dir.to_path_buf(),
        source,
    })?;
    std::fs::write(&temporary, text).map_err(|source| Error::Write {
        path: temporary.clone(),
        source,
    })?;
    std::fs::rename(&temporary, &path).map_err(|source| Error::Write {
        path: path.clone(),
        source,
    })?;
    Ok(path)
}

/// Applies [`nftables_rules`] (one transaction).
pub async fn apply_nftables(host: &dyn Host, rules: &str) -> Result<(), Error> {
    Ok(rudder_host::nft::apply(host, rules).await?)
}

/// Removes the agent's nftables table (a node taken down, tests).
pub async fn delete_nftables(host: &dyn Host, table: &str) -> Result<(), Error> {
    Ok(rudder_host::nft::delete_table(host, "ip", table).await?)
}

/// Removes the bridge pods were attached to.
pub async fn delete_bridge(host: &dyn Host, bridge: &str) -> Result<(), Error> {
    host.run(&Command::new("ip", ["link", "delete", bridge]))
        .await?;
    Ok(())
}

#[cfg(test)]
mod tests {

    use super::*;

    #[test]
    fn the_conflist_is_a_bridge_on_the_pod_cidr() {
        let cidr: Cidr = "10.42.3.0/24".parse().expect("cidr");
        let list = conflist(cidr, "rudder0", 1400, Path::new("/d/ipam"));
        let bridge = &list["plugins"][0];
        assert_eq!(bridge["type"], "bridge");
        assert_eq!(bridge["isGateway"], true);
        assert_eq!(bridge["ipMasq"], false);
        assert_eq!(bridge["mtu"], 1400);
        assert_eq!(bridge["ipam"]["ranges"][0][0]["subnet"], "10.42.3.0/24");
        assert_eq!(bridge["ipam"]["ranges"][0][0]["gateway"], "10.42.3.1");
        assert_eq!(bridge["ipam"]["dataDir"], "/d/ipam");
    }
}
