//! Answering a question from the zone. Names below the cluster domain
//! follow CoreDNS's grammar (`[_port._proto. | endpoint.] service .
//! namespace . (svc|pod) . zone`), compared in lowercase and answered
//! with the question's own case:
//!
//! | name | answers |
//! |---|---|
//! | `<zone>` | SOA, NS `ns.dns.<zone>` (+ kube-dns's address); else NODATA |
//! | `dns-version.<zone>` | TXT `"1.1.0"`, TTL 28800 |
//! | `ns.dns.<zone>` | A/AAAA of `kube-system/kube-dns` |
//! | `svc.<zone>`, `pod.<zone>`, `<ns>.pod.<zone>` | NODATA |
//! | `<ns>.svc.<zone>` | NODATA if the namespace has Services, else NXDOMAIN |
//! | `<svc>.<ns>.svc.<zone>` | ClusterIP: A/AAAA of its ClusterIPs (other family NODATA), SRV of every port; headless: A/AAAA of every ready endpoint, NXDOMAIN with none; ExternalName: CNAME |
//! | `<ep>.<svc>.<ns>.svc.<zone>` | A/AAAA of the endpoint whose hostname (else dashed address) is `<ep>` |
//! | `_<port>._<proto>.<svc>.<ns>.svc.<zone>` | SRV `0 <100/n> <port> <target>`, target's addresses in additional |
//! | `<a-b-c-d>.<ns>.pod.<zone>` | A (or AAAA) of the address in the name |
//! | anything else in the zone | NXDOMAIN |
//!
//! Negative answers carry the zone's SOA (CoreDNS's values) in authority.
//! A name that exists with no record of the asked type is NODATA; other
//! types than A/AAAA/SRV/TXT/SOA/NS on an existing name are NODATA;
//! zone transfers are REFUSED.

use std::collections::hash_map::Entry;
use std::collections::{HashMap, HashSet};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use super::{Endpoint, Kind, Namespace, Port, Zone};
use crate::wire::{Name, Question, Rcode, Record, Soa, rtype};

/// The TTL of the `dns-version` record (the specification's example, and
/// CoreDNS's).
const VERSION_TTL: u32 = 28800;
/// ExternalNames followed inside the zone before giving up on a chain.
const MAX_CHAIN: u8 = 8;

/// What the zone says about a question.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lookup {
    /// The zone's answer.
    Answer(Answer),
    /// Not a name of this zone: forward it.
    NotOurs,
}

/// An authoritative answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    pub rcode: Rcode,
    pub answers: Vec<Record>,
    pub authority: Vec<Record>,
    pub additional: Vec<Record>,
    /// An ExternalName's target outside the zone: the server resolves it
    /// and appends what it finds after the CNAME, as CoreDNS does (stub
    /// resolvers do not chase a CNAME themselves).
    pub chase: Option<Name>,
}

impl Answer {
    pub(crate) fn rcode(rcode: Rcode) -> Answer {
        Answer {
            rcode,
            answers: Vec::new(),
            authority: Vec::new(),
            additional: Vec::new(),
            chase: None,
        }
    }

    fn records(answers: Vec<Record>) -> Answer {
        Answer {
            answers,
            ..Answer::rcode(Rcode::NOERROR)
        }
    }
}

/// Whether `qtype` asks for addresses of `ip`'s family.
fn wants(qtype: u16, ip: IpAddr) -> bool {
    match qtype {
        rtype::A => ip.is_ipv4(),
        rtype::AAAA => ip.is_ipv6(),
        rtype::ANY => true,
        _ => false,
    }
}

fn label_str(label: &[u8]) -> Option<&str> {
    std::str::from_utf8(label).ok()
}

impl Zone {
    /// The zone's answer to `question` (class IN), or [`Lookup::NotOurs`].
    pub fn lookup(&self, question: &Question) -> Lookup {
        let lower = question.name.to_lowercase();
        let labels: Vec<&[u8]> = lower.labels().collect();
        if !lower.is_subdomain_of(&self.domain) {
            return super::reverse::lookup(self, question, &labels);
        }
        let relative = &labels[..labels.len() - self.domain_labels];
        let mut answer = self.cluster(question, relative, 0);
        if !self.synced && answer.rcode == Rcode::NXDOMAIN {
            answer = Answer::rcode(Rcode::SERVFAIL);
        }
        Lookup::Answer(answer)
    }

    /// A name below the cluster domain; `relative` are its labels above it.
    fn cluster(&self, q: &Question, relative: &[&[u8]], depth: u8) -> Answer {
        if matches!(q.qtype, rtype::AXFR | rtype::IXFR) {
            return Answer::rcode(Rcode::REFUSED);
        }
        let skip = relative.len();
        match relative {
            [] => self.apex(q),
            [b"dns-version"] if q.qtype == rtype::TXT => Answer::records(vec![Record::txt(
                q.name.clone(),
                VERSION_TTL,
                super::SCHEMA_VERSION,
            )]),
            [b"dns-version"] | [b"dns"] => self.nodata(q, skip),
            [b"ns", b"dns"] => self.addresses(q, skip, self.kube_dns()),
            [rest @ .., b"svc"] => self.svc(q, rest, skip, depth),
            [rest @ .., b"pod"] => self.pod(q, rest, skip),
            _ => self.nxdomain(q, skip),
        }
    }

    fn apex(&self, q: &Question) -> Answer {
        match q.qtype {
            rtype::SOA => Answer::records(vec![self.soa(q.name.clone())]),
            rtype::NS => {
                let Ok(ns) = self.in_zone(&[b"ns", b"dns"]) else {
                    return self.nodata(q, 0);
                };
                let mut answer =
                    Answer::records(vec![Record::ns(q.name.clone(), self.ttl, ns.clone())]);
                answer.additional = self
                    .kube_dns()
                    .into_iter()
                    .map(|ip| Record::address(ns.clone(), self.ttl, ip))
                    .collect();
                answer
            }
            _ => self.nodata(q, 0),
        }
    }

    /// `kube-system/kube-dns`'s ClusterIPs: the zone's name server.
    fn kube_dns(&self) -> Vec<IpAddr> {
        let service = self
            .namespaces
            .get("kube-system")
            .and_then(|ns| ns.services.get("kube-dns"));
        match service.map(|s| &s.kind) {
            Some(Kind::ClusterIp(ips)) => ips.to_vec(),
            _ => Vec::new(),
        }
    }

    /// `rest` are the labels before `svc`.
    fn svc(&self, q: &Question, rest: &[&[u8]], skip: usize, depth: u8) -> Answer {
        let namespace = |label: &[u8]| label_str(label).and_then(|n| self.namespaces.get(n));
        match rest {
            [] => self.nodata(q, skip),
            [ns] => match namespace(ns) {
                Some(ns) if !ns.services.is_empty() => self.nodata(q, skip),
                _ => self.nxdomain(q, skip),
            },
            [svc, ns_label] => match namespace(ns_label) {
                Some(ns) => self.service(q, ns, svc, ns_label, skip, depth),
                None => self.nxdomain(q, skip),
            },
            [endpoint, svc, ns_label] => match namespace(ns_label) {
                Some(ns) => self.endpoint(q, ns, endpoint, svc, skip),
                None => self.nxdomain(q, skip),
            },
            [port, proto, svc, ns_label] => match namespace(ns_label) {
                Some(ns) => self.srv_name(q, ns, (port, proto), (svc, ns_label), skip),
                None => self.nxdomain(q, skip),
            },
            _ => self.nxdomain(q, skip),
        }
    }

    fn service(
        &self,
        q: &Question,
        ns: &Namespace,
        svc: &[u8],
        ns_label: &[u8],
        skip: usize,
        depth: u8,
    ) -> Answer {
        let Some((name, service)) = label_str(svc).and_then(|s| ns.services.get_key_value(s))
        else {
            return self.nxdomain(q, skip);
        };
        let ips = match &service.kind {
            Kind::ExternalName(target) => return self.external(q, target, depth),
            Kind::ClusterIp(ips) => ips.to_vec(),
            Kind::Headless => {
                let mut seen = HashSet::new();
                let ips: Vec<IpAddr> = ns
                    .endpoints(name)
                    .flat_map(|(endpoint, _)| endpoint.addresses.iter().copied())
                    .filter(|ip| seen.insert(*ip))
                    .collect();
                if ips.is_empty() {
                    return self.nxdomain(q, skip);
                }
                ips
            }
        };
        if q.qtype == rtype::SRV {
            return self.srv(q, ns, (svc, ns_label), &service.kind, &service.ports, skip);
        }
        self.addresses(q, skip, ips)
    }

    fn external(&self, q: &Question, target: &Name, depth: u8) -> Answer {
        let cname = Record::cname(q.name.clone(), self.ttl, target.clone());
        if q.qtype == rtype::CNAME {
            return Answer::records(vec![cname]);
        }
        let lower = target.to_lowercase();
        if !lower.is_subdomain_of(&self.domain) {
            let mut answer = Answer::records(vec![cname]);
            answer.chase = Some(target.clone());
            return answer;
        }
        if depth >= MAX_CHAIN {
            return Answer::records(vec![cname]);
        }
        // Inside the zone: follow it here (RFC 6604: the rcode is the last
        // name's).
        let labels: Vec<&[u8]> = lower.labels().collect();
        let relative = &labels[..labels.len() - self.domain_labels];
        let next = Question {
            name: target.clone(),
            qtype: q.qtype,
            qclass: q.qclass,
        };
        let mut answer = self.cluster(&next, relative, depth + 1);
        answer.answers.insert(0, cname);
        answer
    }

    fn endpoint(
        &self,
        q: &Question,
        ns: &Namespace,
        label: &[u8],
        svc: &[u8],
        skip: usize,
    ) -> Answer {
        let Some(service) = label_str(svc).and_then(|s| ns.services.get(s)) else {
            return self.nxdomain(q, skip);
        };
        if matches!(service.kind, Kind::ExternalName(_)) {
            return self.nxdomain(q, skip);
        }
        // `_tcp.<svc>…` above an SRV name exists, empty.
        if let Some(proto) = label.strip_prefix(b"_")
            && service
                .ports
                .iter()
                .any(|p| p.protocol.as_str().as_bytes() == proto)
        {
            return self.nodata(q, skip);
        }
        let Some(label) = label_str(label) else {
            return self.nxdomain(q, skip);
        };
        let dashed = pod_address(label);
        let mut found = false;
        let mut records = Vec::new();
        for (endpoint, _) in ns.endpoints(label_str(svc).unwrap_or_default()) {
            for &ip in endpoint.addresses.iter() {
                if endpoint_named(endpoint, ip, label, dashed) {
                    found = true;
                    if wants(q.qtype, ip) {
                        records.push(Record::address(q.name.clone(), self.ttl, ip));
                    }
                }
            }
        }
        match (found, records.is_empty()) {
            (false, _) => self.nxdomain(q, skip),
            (true, true) => self.nodata(q, skip),
            (true, false) => Answer::records(records),
        }
    }

    fn srv_name(
        &self,
        q: &Question,
        ns: &Namespace,
        (port, proto): (&[u8], &[u8]),
        (svc, ns_label): (&[u8], &[u8]),
        skip: usize,
    ) -> Answer {
        let port = port.strip_prefix(b"_").unwrap_or(port);
        let proto = proto.strip_prefix(b"_").unwrap_or(proto);
        let Some((name, service)) = label_str(svc).and_then(|s| ns.services.get_key_value(s))
        else {
            return self.nxdomain(q, skip);
        };
        let ports: Vec<Port> = service
            .ports
            .iter()
            .filter(|p| p.name.as_bytes() == port && p.protocol.as_str().as_bytes() == proto)
            .cloned()
            .collect();
        if ports.is_empty() || matches!(service.kind, Kind::ExternalName(_)) {
            return self.nxdomain(q, skip);
        }
        if service.kind == Kind::Headless && ns.endpoints(name).next().is_none() {
            return self.nxdomain(q, skip);
        }
        if q.qtype != rtype::SRV {
            return self.nodata(q, skip);
        }
        self.srv(q, ns, (svc, ns_label), &service.kind, &ports, skip)
    }

    /// SRV records of `ports` of a Service: to the Service's name for a
    /// ClusterIP, to each ready endpoint's name (with the slice's port)
    /// for a headless one; priority 0, weight 100/n; the targets'
    /// addresses in additional.
    fn srv(
        &self,
        q: &Question,
        ns: &Namespace,
        (svc, ns_label): (&[u8], &[u8]),
        kind: &Kind,
        ports: &[Port],
        skip: usize,
    ) -> Answer {
        // (target, port, the target's addresses), once per target and port.
        let mut targets: Vec<(Name, u16, Vec<IpAddr>)> = Vec::new();
        let mut index: HashMap<(Name, u16), usize> = HashMap::new();
        match kind {
            Kind::ClusterIp(ips) => {
                if let Ok(target) = self.in_zone(&[svc, ns_label, b"svc"]) {
                    for port in ports {
                        targets.push((target.clone(), port.port, ips.to_vec()));
                    }
                }
            }
            Kind::Headless => {
                for (endpoint, slice_ports) in ns.endpoints(label_str(svc).unwrap_or_default()) {
                    for &ip in endpoint.addresses.iter() {
                        let label = endpoint.label(ip);
                        let Ok(target) = self.in_zone(&[label.as_bytes(), svc, ns_label, b"svc"])
                        else {
                            continue;
                        };
                        for port in slice_ports.iter().filter(|p| {
                            ports
                                .iter()
                                .any(|w| w.name == p.name && w.protocol == p.protocol)
                        }) {
                            match index.entry((target.clone(), port.port)) {
                                Entry::Occupied(at) => {
                                    let ips = &mut targets[*at.get()].2;
                                    if !ips.contains(&ip) {
                                        ips.push(ip);
                                    }
                                }
                                Entry::Vacant(slot) => {
                                    slot.insert(targets.len());
                                    targets.push((target.clone(), port.port, vec![ip]));
                                }
                            }
                        }
                    }
                }
            }
            Kind::ExternalName(_) => {}
        }
        if targets.is_empty() {
            return self.nodata(q, skip);
        }
        let weight = (100 / targets.len()).max(1) as u16;
        let mut answer = Answer::records(Vec::with_capacity(targets.len()));
        let mut seen: HashSet<&Name> = HashSet::new();
        for (target, port, ips) in &targets {
            answer.answers.push(Record::srv(
                q.name.clone(),
                self.ttl,
                0,
                weight,
                *port,
                target.clone(),
            ));
            if !seen.insert(target) {
                continue;
            }
            for &ip in ips {
                answer
                    .additional
                    .push(Record::address(target.clone(), self.ttl, ip));
            }
        }
        answer
    }

    /// `rest` are the labels before `pod`.
    fn pod(&self, q: &Question, rest: &[&[u8]], skip: usize) -> Answer {
        match rest {
            [] | [_] => self.nodata(q, skip),
            [address, _namespace] => match label_str(address).and_then(pod_address) {
                Some(ip) => self.addresses(q, skip, vec![ip]),
                None => self.nxdomain(q, skip),
            },
            _ => self.nxdomain(q, skip),
        }
    }

    /// The addresses among `ips` the question asks for, owned by its name;
    /// NODATA when none is.
    fn addresses(&self, q: &Question, skip: usize, ips: Vec<IpAddr>) -> Answer {
        let records: Vec<Record> = ips
            .into_iter()
            .filter(|ip| wants(q.qtype, *ip))
            .map(|ip| Record::address(q.name.clone(), self.ttl, ip))
            .collect();
        if records.is_empty() {
            return self.nodata(q, skip);
        }
        Answer::records(records)
    }

    /// A name in the zone from its labels above the domain.
    pub(crate) fn in_zone(&self, labels: &[&[u8]]) -> Result<Name, crate::wire::WireError> {
        Name::from_labels(labels.iter().copied().chain(self.domain.labels()))
    }

    /// The zone's SOA, owned by `owner` (the zone's name in the question's
    /// case): CoreDNS's `ns.dns.<zone>`, `hostmaster.<zone>`, refresh
    /// 7200, retry 1800, expire 86400, minimum = TTL.
    pub(crate) fn soa(&self, owner: Name) -> Record {
        let in_zone = |label: &[u8]| self.in_zone(&[label]).unwrap_or_else(|_| Name::root());
        let mname = self
            .in_zone(&[b"ns", b"dns"])
            .unwrap_or_else(|_| Name::root());
        let soa = Soa {
            mname,
            rname: in_zone(b"hostmaster"),
            serial: self.serial,
            refresh: 7200,
            retry: 1800,
            expire: 86400,
            minimum: self.ttl,
        };
        Record::soa(owner, self.ttl.min(300), soa)
    }

    /// A negative answer; the SOA's owner is the question's name without
    /// its first `skip` labels.
    pub(crate) fn negative(&self, q: &Question, skip: usize, rcode: Rcode) -> Answer {
        Answer {
            authority: vec![self.soa(q.name.suffix(skip))],
            ..Answer::rcode(rcode)
        }
    }

    pub(crate) fn nxdomain(&self, q: &Question, skip: usize) -> Answer {
        self.negative(q, skip, Rcode::NXDOMAIN)
    }

    pub(crate) fn nodata(&self, q: &Question, skip: usize) -> Answer {
        self.negative(q, skip, Rcode::NOERROR)
    }
}

/// Whether `label` names `ip` of `endpoint`; `dashed` is the address
/// `label` reads as, if it reads as one (so that no name is formatted per
/// endpoint: only a match is checked to be written exactly so).
fn endpoint_named(endpoint: &Endpoint, ip: IpAddr, label: &str, dashed: Option<IpAddr>) -> bool {
    match &endpoint.hostname {
        Some(hostname) => **hostname == *label,
        None => dashed == Some(ip) && super::dashed(ip) == label,
    }
}

/// A pod name's address: `10-42-0-5` (exactly three dashes, none doubled)
/// is IPv4, anything else is read as IPv6 with `-` for `:`.
fn pod_address(label: &str) -> Option<IpAddr> {
    if label.matches('-').count() == 3 && !label.contains("--") {
        label
            .replace('-', ".")
            .parse::<Ipv4Addr>()
            .ok()
            .map(IpAddr::V4)
    } else {
        label
            .replace('-', ":")
            .parse::<Ipv6Addr>()
            .ok()
            .map(IpAddr::V6)
    }
}
