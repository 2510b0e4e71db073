//! The sysctls the node sets, and how it undoes them.

use std::path::{Path, PathBuf};

use crate::command::{Error, Host};

/// IPv4 forwarding: pods reach beyond their bridge only with it.
pub const IP_FORWARD: &str = "/proc/sys/net/ipv4/ip_forward";

/// The file under the agent's directory that says the agent turned IPv4
/// forwarding on (it was off), so that cleaning up turns it off again.
fn forwarding_marker(agent_dir: &Path) -> PathBuf {
    agent_dir.join("ip_forward-was-off")
}

/// Turns on IPv4 forwarding, noting under `agent_dir` when it was off, for
/// [`restore_forwarding`]. The marker is a file of the agent's own data
/// directory, not of the host.
pub fn enable_forwarding(host: &dyn Host, agent_dir: &Path) -> Result<(), Error> {
    let before = host.read_file(Path::new(IP_FORWARD))?;
    if before.trim() == "1" {
        return Ok(());
    }
    let marker = forwarding_marker(agent_dir);
    let file = |what, path: &Path| {
        let path = path.to_path_buf();
        move |source| Error::File { what, path, source }
    };
    std::fs::create_dir_all(agent_dir).map_err(file("create", agent_dir))?;
    std::fs::write(&marker, before.trim()).map_err(file("write", &marker))?;
    host.write_file(Path::new(IP_FORWARD), "1")
}

/// Turns IPv4 forwarding off again if [`enable_forwarding`] turned it on.
pub fn restore_forwarding(host: &dyn Host, agent_dir: &Path) -> Result<(), Error> {
    let marker = forwarding_marker(agent_dir);
    let Ok(before) = std::fs::read_to_string(&marker) else {
        return Ok(());
    };
    host.write_file(Path::new(IP_FORWARD), before.trim())?;
    std::fs::remove_file(&marker).map_err(|source| Error::File {
        what: "remove",
        path: marker,
        source,
    })
}

/// Lets DNAT from loopback to pods through `bridge` be routed (what the
/// portmap plugin sets for the same reason: hostPorts reached from the
/// node itself).
pub fn allow_localnet(host: &dyn Host, bridge: &str) -> Result<(), Error> {
    host.write_file(
        Path::new(&format!("/proc/sys/net/ipv4/conf/{bridge}/route_localnet")),
        "1",
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::FakeHost;

    #[test]
    fn forwarding_turned_on_is_turned_off_again_and_only_then() {
        let dir = std::env::temp_dir().join(format!("rudder-host-sysctl-{}", std::process::id()));
        let host = FakeHost::new();
        host.put_file(IP_FORWARD, "0\n");
        enable_forwarding(&host, &dir).expect("enabled");
        assert_eq!(host.file(IP_FORWARD).as_deref(), Some("1"));
        restore_forwarding(&host, &dir).expect("restored");
        assert_eq!(host.file(IP_FORWARD).as_deref(), Some("0"));
        // Already on: left alone, and left on by the cleanup.
        host.put_file(IP_FORWARD, "1\n");
        enable_forwarding(&host, &dir).expect("enabled");
        restore_forwarding(&host, &dir).expect("nothing to restore");
        assert_eq!(host.file(IP_FORWARD).as_deref(), Some("1\n"));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
