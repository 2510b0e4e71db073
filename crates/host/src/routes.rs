//! The node's routes: blackhole routes for the cluster and service CIDRs,
//! installed before anything else, so that no packet to a cluster address
//! that is not a pod on this machine (or a Service the proxy rewrote)
//! ever leaves it. More specific routes — the node's bridge, other nodes'
//! podCIDRs — win over them.

use rudder_api::network::Cidr;

use crate::command::{Command, Error as HostError, Host};

/// A failed route step.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Host(#[from] HostError),
    #[error(
        "a route for {cidr} exists that the agent did not make ({route}): the agent keeps the \
         cluster and service CIDRs blackholed and will not replace a route of yours; remove it \
         (ip route del {cidr}) or choose other CIDRs (--cluster-cidr, --service-cidr)"
    )]
    RouteTaken { cidr: Cidr, route: String },
}

/// A CIDR's route in the main table, as `ip -o route show exact` lists it.
#[derive(Debug, PartialEq, Eq)]
enum ExistingRoute {
    None,
    /// A blackhole: the agent's own, from an earlier start (they stay when
    /// it stops), or one with the same effect.
    Blackhole,
    /// Anything else: someone else's route.
    Other(String),
}

fn existing_route(listed: &str) -> ExistingRoute {
    let mut routes = listed.lines().map(str::trim).filter(|l| !l.is_empty());
    match (routes.next(), routes.next()) {
        (None, _) => ExistingRoute::None,
        (Some(route), None) if route.split_whitespace().next() == Some("blackhole") => {
            ExistingRoute::Blackhole
        }
        (Some(route), _) => ExistingRoute::Other(route.to_string()),
    }
}

/// Installs (or keeps) a blackhole route for each CIDR, refusing to
/// replace a route for the same CIDR that is not a blackhole (a user's).
pub async fn install_blackholes(host: &dyn Host, cidrs: &[Cidr]) -> Result<(), Error> {
    for cidr in cidrs {
        let text = cidr.to_string();
        let listed = host
            .run(&Command::new("ip", ["-o", "route", "show", "exact", &text]))
            .await?;
        match existing_route(&listed) {
            ExistingRoute::Blackhole => tracing::info!(%cidr, "blackhole route kept"),
            ExistingRoute::None => {
                host.run(&Command::new("ip", ["route", "add", "blackhole", &text]))
                    .await?;
                tracing::info!(%cidr, "blackhole route installed");
            }
            ExistingRoute::Other(route) => {
                return Err(Error::RouteTaken { cidr: *cidr, route });
            }
        }
    }
    Ok(())
}

/// The routing table (and the priority of the rule that picks it) through
/// which the node's own processes reach Service addresses.
pub const SERVICE_TABLE: u32 = 4343;

/// Lets the node's own processes (and hostNetwork pods) connect to Service
/// addresses, which the service CIDR's blackhole would refuse before the
/// proxy's DNAT could rewrite them: for traffic the node itself sends
/// (`iif lo`), the service CIDR routes to loopback instead. What the proxy
/// rewrites leaves by the endpoint's route; what it does not loops back
/// and meets the blackhole — nothing leaves the machine either way.
/// Traffic forwarded for pods still sees only the blackhole.
pub async fn install_service_route(host: &dyn Host, service_cidr: Cidr) -> Result<(), Error> {
    let table = SERVICE_TABLE.to_string();
    let cidr = service_cidr.to_string();
    let rules = host
        .run(&Command::new("ip", ["-o", "rule", "show", "pref", &table]))
        .await?;
    // As `ip -o rule show` prints it.
    let wanted = format!("from all to {cidr} iif lo lookup {table}");
    if !rules.contains(&wanted) {
        if !rules.trim().is_empty() {
            host.run(&Command::new("ip", ["rule", "del", "pref", &table]))
                .await?;
        }
        host.run(&Command::new(
            "ip",
            [
                "rule", "add", "pref", &table, "iif", "lo", "to", &cidr, "lookup", &table,
            ],
        ))
        .await?;
    }
    host.run(&Command::new(
        "ip",
        ["route", "replace", &cidr, "dev", "lo", "table", &table],
    ))
    .await?;
    Ok(())
}

/// Undoes [`install_service_route`] (a node taken down).
pub async fn remove_service_route(host: &dyn Host) -> Result<(), Error> {
    let table = SERVICE_TABLE.to_string();
    let rules = host
        .run(&Command::new("ip", ["-o", "rule", "show", "pref", &table]))
        .await?;
    if !rules.trim().is_empty() {
        host.run(&Command::new("ip", ["rule", "del", "pref", &table]))
            .await?;
    }
    host.run(&Command::new("ip", ["route", "flush", "table", &table]))
        .await?;
    Ok(())
}

/// The word after `key` in `ip`'s one-line output.
fn word_after<'a>(text: &'a str, key: &str) -> Option<&'a str> {
    let mut words = text.split_whitespace();
    while let Some(word) = words.next() {
        if word == key {
            return words.next();
        }
    }
    None
}

/// The MTU of the interface the default route leaves by (1500 when there
/// is none).
pub async fn default_mtu(host: &dyn Host) -> u32 {
    let listed = host
        .run(&Command::new("ip", ["-o", "route", "show", "default"]))
        .await
        .unwrap_or_default();
    word_after(&listed, "dev")
        .and_then(|device| {
            host.read_file(std::path::Path::new(&format!(
                "/sys/class/net/{device}/mtu"
            )))
            .ok()
        })
        .and_then(|m| m.trim().parse().ok())
        .unwrap_or(1500)
}

/// The node's IPv4 address: the source address of its default route, or
/// loopback on a machine with none.
pub async fn node_ip(host: &dyn Host) -> std::net::Ipv4Addr {
    let listed = host
        .run(&Command::new("ip", ["-o", "-4", "route", "get", "1.1.1.1"]))
        .await
        .unwrap_or_default();
    word_after(&listed, "src")
        .and_then(|a| a.parse().ok())
        .unwrap_or(std::net::Ipv4Addr::LOCALHOST)
}

/// The IPv4 addresses on the node's interfaces, loopback excluded
/// (NodePorts answer on these).
pub async fn local_addresses(host: &dyn Host) -> Result<Vec<std::net::Ipv4Addr>, Error> {
    let listed = host
        .run(&Command::new("ip", ["-o", "-4", "addr", "show"]))
        .await?;
    let mut addresses: Vec<std::net::Ipv4Addr> = listed
        .lines()
        .filter_map(|line| word_after(line, "inet"))
        .filter_map(|cidr| cidr.split('/').next()?.parse().ok())
        .filter(|ip: &std::net::Ipv4Addr| !ip.is_loopback())
        .collect();
    addresses.sort();
    addresses.dedup();
    Ok(addresses)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::FakeHost;

    #[test]
    fn only_a_blackhole_or_nothing_is_the_agents_to_keep_or_add() {
        assert_eq!(existing_route(""), ExistingRoute::None);
        assert_eq!(
            existing_route("blackhole 10.42.0.0/16 \n"),
            ExistingRoute::Blackhole
        );
        assert_eq!(
            existing_route("10.42.0.0/16 via 192.168.1.1 dev eth0 \n"),
            ExistingRoute::Other("10.42.0.0/16 via 192.168.1.1 dev eth0".into())
        );
        assert!(matches!(
            existing_route("blackhole 10.42.0.0/16\n10.42.0.0/16 dev wg0 metric 5\n"),
            ExistingRoute::Other(_)
        ));
    }

    #[tokio::test]
    async fn blackholes_are_added_where_there_is_no_route_and_a_users_route_is_refused() {
        let host = FakeHost::new();
        host.answer(|c| {
            Ok(match c.args.last().map(String::as_str) {
                Some("10.43.0.0/16") if c.args[1] == "route" => {
                    "blackhole 10.43.0.0/16 \n".to_string()
                }
                _ => String::new(),
            })
        });
        let cidrs = [
            "10.42.0.0/16".parse().expect("cidr"),
            "10.43.0.0/16".parse().expect("cidr"),
        ];
        install_blackholes(&host, &cidrs).await.expect("installed");
        let run: Vec<String> = host.commands().iter().map(ToString::to_string).collect();
        assert_eq!(
            run,
            [
                "ip -o route show exact 10.42.0.0/16",
                "ip route add blackhole 10.42.0.0/16",
                "ip -o route show exact 10.43.0.0/16",
            ]
        );
        host.answer(|_| Ok("10.42.0.0/16 dev eth0 scope link\n".into()));
        let error = install_blackholes(&host, &cidrs[..1])
            .await
            .expect_err("refused");
        assert!(matches!(error, Error::RouteTaken { .. }), "{error}");
    }

    #[tokio::test]
    async fn the_service_route_is_added_once_and_replaced_for_another_cidr() {
        let host = FakeHost::new();
        let cidr = "10.43.0.0/16".parse().expect("cidr");
        install_service_route(&host, cidr).await.expect("installed");
        let run: Vec<String> = host.commands().iter().map(ToString::to_string).collect();
        assert_eq!(
            run,
            [
                "ip -o rule show pref 4343",
                "ip rule add pref 4343 iif lo to 10.43.0.0/16 lookup 4343",
                "ip route replace 10.43.0.0/16 dev lo table 4343",
            ]
        );
        host.clear();
        host.answer(|c| {
            Ok(if c.args.contains(&"show".to_string()) {
                "4343:\tfrom all to 10.43.0.0/16 iif lo lookup 4343\n".into()
            } else {
                String::new()
            })
        });
        install_service_route(&host, cidr).await.expect("kept");
        assert_eq!(
            host.commands().len(),
            2,
            "the rule is there: only the route is replaced"
        );
        host.clear();
        install_service_route(&host, "10.96.0.0/12".parse().expect("cidr"))
            .await
            .expect("replaced");
        let run: Vec<String> = host.commands().iter().map(ToString::to_string).collect();
        assert_eq!(run[1], "ip rule del pref 4343");
    }

    #[tokio::test]
    async fn local_addresses_leave_loopback_out() {
        let host = FakeHost::new();
        host.answer(|_| {
            Ok("1: lo    inet 127.0.0.1/8 scope host lo\n\
                2: eth0    inet 192.168.1.5/24 brd 192.168.1.255 scope global eth0\n\
                3: rudder0    inet 10.42.0.1/24 brd 10.42.0.255 scope global rudder0\n"
                .into())
        });
        assert_eq!(
            local_addresses(&host).await.expect("listed"),
            [
                std::net::Ipv4Addr::new(10, 42, 0, 1),
                std::net::Ipv4Addr::new(192, 168, 1, 5)
            ]
        );
    }
}
