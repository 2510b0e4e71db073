//! Transactions checked against a model of the kernel's table: every
//! statement must be one the kernel accepts at that point (no element
//! deleted that is not there, no chain deleted that still has rules, no
//! element added over another value), and after any sequence of changes
//! the table must hold exactly what a rebuild from scratch would.

use std::collections::{BTreeMap, BTreeSet};

use super::*;
use crate::model::{Endpoint, Protocol, Service, ServicePort};
use crate::testing::{config, endpoint, here, port, service};

/// What `nft -f` would leave in the table.
#[derive(Debug, Default, PartialEq, Eq)]
struct Kernel {
    chains: BTreeMap<String, Vec<String>>,
    sets: BTreeMap<String, BTreeMap<String, String>>,
}

impl Kernel {
    fn apply(&mut self, text: &str) -> Result<(), String> {
        for line in text.lines() {
            self.statement(line).map_err(|e| format!("{e}: {line}"))?;
        }
        Ok(())
    }

    fn statement(&mut self, line: &str) -> Result<(), String> {
        let words: Vec<&str> = line.splitn(5, ' ').collect();
        let (verb, kind) = (words[0], words[1]);
        let name = words
            .get(4)
            .map(|rest| rest.split(' ').next().unwrap_or_default())
            .unwrap_or_default();
        let rest = words
            .get(4)
            .map(|r| r[name.len()..].trim())
            .unwrap_or_default();
        match (verb, kind) {
            ("add", "table") => {}
            ("delete", "table") => *self = Kernel::default(),
            ("add", "chain") => {
                self.chains.entry(name.into()).or_default();
            }
            ("flush", "chain") => self.chains.get_mut(name).ok_or("no such chain")?.clear(),
            ("delete", "chain") => {
                let chain = self.chains.remove(name).ok_or("no such chain")?;
                if !chain.is_empty() {
                    return Err("chain is not empty".into());
                }
                let referenced = self
                    .chains
                    .values()
                    .flatten()
                    .any(|r| r.split(' ').any(|w| w == name))
                    || self
                        .sets
                        .values()
                        .flat_map(|s| s.values())
                        .any(|v| v == &format!("goto {name}"));
                if referenced {
                    return Err("chain is still referenced".into());
                }
            }
            ("add", "rule") => self
                .chains
                .get_mut(name)
                .ok_or("no such chain")?
                .push(rest.to_string()),
            ("add", "set") | ("add", "map") => {
                self.sets.entry(name.into()).or_default();
            }
            ("delete", "set") => {
                self.sets.remove(name).ok_or("no such set")?;
                if self
                    .chains
                    .values()
                    .flatten()
                    .any(|r| r.contains(&format!("@{name} ")))
                {
                    return Err("set is still used by a rule".into());
                }
            }
            ("add", "element") | ("delete", "element") => {
                let set = self.sets.get_mut(name).ok_or("no such set")?;
                let inner = rest.trim_start_matches("{ ").trim_end_matches(" }");
                for item in inner.split(", ") {
                    let (key, value) = item.split_once(" : ").unwrap_or((item, ""));
                    if verb == "add" {
                        if let Some(existing) = set.get(key)
                            && existing != value
                        {
                            return Err(format!("element {key} exists with {existing}"));
                        }
                        if let Some(chain) = value.strip_prefix("goto ")
                            && !self.chains.contains_key(chain)
                        {
                            return Err(format!("no chain {chain} for {key}"));
                        }
                        set.insert(key.into(), value.into());
                    } else if set.remove(key).is_none() {
                        return Err(format!("no element {key}"));
                    }
                }
            }
            _ => return Err("unknown statement".into()),
        }
        Ok(())
    }
}

/// A small deterministic generator (no dependency, same sequence on
/// every run).
struct Lcg(u64);

impl Lcg {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % n
    }
}

/// A Service `i` in one of several shapes, with endpoints drawn from a
/// small pool (so that Services share hairpin elements and addresses).
fn random_service(rng: &mut Lcg, i: u64) -> (ServiceName, Option<ServiceRules>) {
    let name = ServiceName::new("ns", &format!("s{i}"));
    if rng.below(5) == 0 {
        return (name, None);
    }
    let port = ServicePort {
        name: "p".into(),
        protocol: if rng.below(3) == 0 {
            Protocol::Udp
        } else {
            Protocol::Tcp
        },
        port: 80,
        node_port: (rng.below(2) == 0).then_some(30000 + i as u16),
    };
    let service = Service {
        name: name.clone(),
        cluster_ip: [10, 43, 0, i as u8 + 1].into(),
        ports: vec![port],
        // Shared on purpose: several Services claim the same address.
        external_ips: if rng.below(3) == 0 {
            vec![[192, 0, 2, 1].into()]
        } else {
            vec![]
        },
        load_balancer_ips: vec![],
        source_ranges: vec![],
        affinity_timeout: (rng.below(4) == 0).then_some(60 + rng.below(2) as u32),
        internal_local: false,
        external_local: rng.below(3) == 0,
        health_check_node_port: None,
    };
    let endpoints: Vec<Endpoint> = (0..rng.below(4))
        .map(|_| Endpoint {
            ip: [10, 42, rng.below(2) as u8, rng.below(4) as u8 + 2].into(),
            port: 8080,
            ready: rng.below(4) != 0,
            serving: true,
            terminating: false,
            node_name: Some(if rng.below(2) == 0 { "n1" } else { "n2" }.into()),
            zone_hints: None,
            node_hints: None,
        })
        .collect();
    let mut unique = BTreeMap::new();
    for e in endpoints {
        unique.insert(e.key(), e);
    }
    let endpoints: Vec<Endpoint> = unique.into_values().collect();
    let rules = crate::rules::service_rules(&service, &[endpoints], &here(), &config());
    (name, Some(rules))
}

#[test]
fn every_transaction_is_accepted_and_ends_where_a_rebuild_would() {
    let mut rng = Lcg(7);
    let mut table = Table::new(config());
    let mut kernel = Kernel::default();
    let first = table.rebuild(Vec::new());
    kernel.apply(&first).expect("the empty table");
    let mut wanted: BTreeMap<ServiceName, ServiceRules> = BTreeMap::new();
    for round in 0..300 {
        let mut changes = BTreeMap::new();
        for _ in 0..=rng.below(4) {
            let which = rng.below(12);
            let (name, rules) = random_service(&mut rng, which);
            changes.insert(name, rules);
        }
        for (name, rules) in &changes {
            match rules {
                Some(r) => wanted.insert(name.clone(), r.clone()),
                None => wanted.remove(name),
            };
        }
        if let Some(text) = table.transaction(changes) {
            kernel
                .apply(&text)
                .unwrap_or_else(|e| panic!("round {round}: {e}\n{text}"));
        }
        let mut fresh_table = Table::new(config());
        let mut fresh = Kernel::default();
        fresh
            .apply(&fresh_table.rebuild(wanted.iter().map(|(n, r)| (n.clone(), Some(r.clone())))))
            .expect("a rebuild");
        assert_eq!(kernel.sets, fresh.sets, "round {round}");
        let service_chains = |k: &Kernel| -> BTreeMap<String, Vec<String>> {
            // Dispatch chains stay once made; the rest must match.
            k.chains
                .iter()
                .filter(|(name, _)| name.contains('/'))
                .map(|(n, r)| (n.clone(), r.clone()))
                .collect()
        };
        assert_eq!(
            service_chains(&kernel),
            service_chains(&fresh),
            "round {round}"
        );
    }
}

#[test]
fn an_unchanged_service_writes_nothing_and_one_endpoint_change_writes_only_its_elements() {
    let mut rng = Lcg(1);
    let mut table = Table::new(config());
    let services: Vec<_> = (0..10).map(|i| random_service(&mut rng, i)).collect();
    table.rebuild(services.clone());
    assert_eq!(table.transaction(services.clone()), None, "nothing changed");

    let service = service(
        "web",
        [10, 43, 1, 1],
        vec![port("", Protocol::Tcp, 80, None)],
    );
    let endpoint = |last: u8| endpoint([10, 42, 9, last], 80, "n2");
    let rules =
        |eps: Vec<Endpoint>| crate::rules::service_rules(&service, &[eps], &here(), &config());
    let text = table
        .transaction([(service.name.clone(), Some(rules(vec![endpoint(1)])))])
        .expect("a new Service");
    assert!(
        text.contains(
            "add element ip rudder-proxy service-ips { 10.43.1.1 . tcp . 80 : goto cluster-tcp-1 }"
        ),
        "{text}"
    );
    let text = table
        .transaction([(service.name.clone(), Some(rules(vec![endpoint(2)])))])
        .expect("an endpoint replaced");
    let expected: BTreeSet<&str> = [
        "delete element ip rudder-proxy cluster-endpoints-tcp { 10.43.1.1 . 80 . 0 }",
        "delete element ip rudder-proxy hairpin-connections { 10.42.9.1 . 10.42.9.1 . tcp . 80 }",
        "add element ip rudder-proxy cluster-endpoints-tcp { 10.43.1.1 . 80 . 0 : 10.42.9.2 . 80 }",
        "add element ip rudder-proxy hairpin-connections { 10.42.9.2 . 10.42.9.2 . tcp . 80 }",
    ]
    .into();
    assert_eq!(text.lines().collect::<BTreeSet<_>>(), expected, "{text}");
}
