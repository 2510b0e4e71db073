//! Forwarding names outside the cluster to upstream resolvers: the stub
//! domain's servers for a name below one (longest match), else the
//! upstream nameservers (by default the node's resolv.conf's).
//!
//! One exchange: a fresh UDP socket (a random source port) and a random
//! ID per query, replies accepted only from the server, with that ID and
//! that question; a truncated reply is asked again over TCP. Each server
//! gets 2 s (`timeout`), then the next is tried, within 5 s in all
//! (`deadline`); the server that answered last is tried first next time.
//! A reply is relayed whatever its rcode (NXDOMAIN, SERVFAIL, …); only
//! when no server replies is it SERVFAIL. Answers go through the
//! [`Cache`]. Queries in flight are bounded (CoreDNS's `max_concurrent`):
//! past the bound a query is refused at once rather than queued.

use std::hash::{BuildHasher, Hasher};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UdpSocket};
use tokio::sync::Semaphore;
use tokio::time::Instant;

use crate::cache::{Cache, Entry, Key};
use crate::config::{CacheConfig, Config};
use crate::wire::{Edns, MAX_MESSAGE, Message, Name, Question, query};

/// How the forwarder talks to upstreams.
#[derive(Debug, Clone, Copy)]
pub struct ForwardOptions {
    /// Per server.
    pub timeout: Duration,
    /// Per query, over every server tried.
    pub deadline: Duration,
    /// Queries waiting for an upstream at once.
    pub max_in_flight: usize,
    /// The UDP payload size advertised upstream.
    pub udp_size: u16,
}

impl Default for ForwardOptions {
    fn default() -> Self {
        ForwardOptions {
            timeout: Duration::from_secs(2),
            deadline: Duration::from_secs(5),
            max_in_flight: 1000,
            udp_size: crate::handler::UDP_PAYLOAD,
        }
    }
}

/// Why a forwarded query has no upstream reply (answered SERVFAIL, or
/// REFUSED when busy).
#[derive(Debug, thiserror::Error)]
pub enum ForwardError {
    #[error("no upstream nameserver is configured")]
    NoUpstreams,
    #[error("too many forwarded queries in flight")]
    Busy,
    #[error("no upstream nameserver answered (last: {server}: {reason})")]
    AllFailed { server: SocketAddr, reason: String },
}

/// Servers of one list, and which of them answered last.
#[derive(Debug, Default)]
struct ServerList {
    servers: Vec<SocketAddr>,
    preferred: AtomicUsize,
}

impl ServerList {
    fn new(servers: Vec<SocketAddr>) -> ServerList {
        ServerList {
            servers,
            preferred: AtomicUsize::new(0),
        }
    }
}

/// Where each name goes.
#[derive(Debug, Default)]
pub struct Upstreams {
    default: ServerList,
    /// Most specific domain first.
    stubs: Vec<(Name, ServerList)>,
}

impl Upstreams {
    /// The configuration's servers; `resolv_conf` (the node's) when it
    /// names no upstream nameservers. Servers in `exclude` (this server's
    /// own addresses: forwarding to itself would loop) are left out.
    pub fn new(config: &Config, resolv_conf: Vec<SocketAddr>, exclude: &[SocketAddr]) -> Upstreams {
        let keep = |servers: &[SocketAddr]| -> Vec<SocketAddr> {
            servers
                .iter()
                .copied()
                .filter(|s| {
                    let own = is_own(*s, exclude);
                    if own {
                        tracing::warn!(server = %s, "not forwarding to this DNS server itself");
                    }
                    !own
                })
                .collect()
        };
        let default = if config.upstream_nameservers.is_empty() {
            resolv_conf
        } else {
            config.upstream_nameservers.clone()
        };
        Upstreams {
            default: ServerList::new(keep(&default)),
            stubs: config
                .stub_domains
                .iter()
                .map(|(domain, servers)| (domain.clone(), ServerList::new(keep(servers))))
                .collect(),
        }
    }

    fn for_name(&self, name: &Name) -> &ServerList {
        self.stubs
            .iter()
            .find(|(domain, _)| name.is_subdomain_of(domain))
            .map(|(_, list)| list)
            .unwrap_or(&self.default)
    }

    /// The default servers (for logs).
    pub fn default_servers(&self) -> &[SocketAddr] {
        &self.default.servers
    }
}

/// Whether `server` is one of `own` addresses (a wildcard listener owns
/// the loopback addresses on its port).
fn is_own(server: SocketAddr, own: &[SocketAddr]) -> bool {
    own.iter().any(|own| {
        own.port() == server.port()
            && (own.ip() == server.ip() || (own.ip().is_unspecified() && server.ip().is_loopback()))
    })
}

/// The forwarder: upstreams, cache, bounds.
#[derive(Debug)]
pub struct Forwarder {
    upstreams: RwLock<Arc<Upstreams>>,
    cache: RwLock<(CacheConfig, Arc<Cache>)>,
    options: ForwardOptions,
    in_flight: Semaphore,
}

impl Forwarder {
    pub fn new(upstreams: Upstreams, cache: CacheConfig, options: ForwardOptions) -> Forwarder {
        Forwarder {
            upstreams: RwLock::new(Arc::new(upstreams)),
            cache: RwLock::new((cache, Arc::new(Cache::new(cache.size, cache.max_ttl)))),
            options,
            in_flight: Semaphore::new(options.max_in_flight),
        }
    }

    /// New upstreams (a changed configuration or resolv.conf).
    pub fn set_upstreams(&self, upstreams: Upstreams) {
        *self.upstreams.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(upstreams);
    }

    /// New cache bounds: a new, empty cache if they changed.
    pub fn set_cache(&self, config: CacheConfig) {
        let mut cache = self.cache.write().unwrap_or_else(|e| e.into_inner());
        if cache.0 != config {
            *cache = (config, Arc::new(Cache::new(config.size, config.max_ttl)));
        }
    }

    fn upstreams(&self) -> Arc<Upstreams> {
        self.upstreams
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    pub fn cache(&self) -> Arc<Cache> {
        self.cache
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .1
            .clone()
    }

    /// The answer kept for `key`, if fresh.
    pub fn cached(&self, key: &Key) -> Option<Arc<Entry>> {
        self.cache().get(key, Instant::now())
    }

    /// Resolves `question` upstream (or from the cache).
    pub async fn resolve(
        &self,
        question: &Question,
        dnssec_ok: bool,
        checking_disabled: bool,
    ) -> Result<Arc<Entry>, ForwardError> {
        let key = Key::new(question, dnssec_ok, checking_disabled);
        let cache = self.cache();
        if let Some(entry) = cache.get(&key, Instant::now()) {
            return Ok(entry);
        }
        let _permit = self
            .in_flight
            .try_acquire()
            .map_err(|_| ForwardError::Busy)?;
        let upstreams = self.upstreams();
        let list = upstreams.for_name(&question.name);
        if list.servers.is_empty() {
            return Err(ForwardError::NoUpstreams);
        }
        let id = random_id();
        let mut message = query(
            id,
            question.name.clone(),
            question.qtype,
            Some(Edns {
                udp_size: self.options.udp_size,
                version: 0,
                dnssec_ok,
            }),
        );
        message.header.checking_disabled = checking_disabled;
        if let Some(q) = &mut message.question {
            q.qclass = question.qclass;
        }
        let bytes = message.to_vec();
        let deadline = Instant::now() + self.options.deadline;
        let first = list.preferred.load(Ordering::Relaxed);
        let mut last = None;
        for i in 0..list.servers.len() {
            let index = (first + i) % list.servers.len();
            let server = list.servers[index];
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            let exchange = exchange(server, &bytes, id, question);
            match tokio::time::timeout(self.options.timeout.min(left), exchange).await {
                Ok(Ok(reply)) => {
                    list.preferred.store(index, Ordering::Relaxed);
                    return Ok(cache.insert(key, reply, Instant::now()));
                }
                Ok(Err(error)) => last = Some((server, error.to_string())),
                Err(_) => last = Some((server, "timed out".to_string())),
            }
            tracing::debug!(%server, name = %question.name, "upstream failed; trying the next");
        }
        let (server, reason) = last.unwrap_or((list.servers[0], "out of time".into()));
        Err(ForwardError::AllFailed { server, reason })
    }
}

/// One upstream exchange: UDP, then TCP if the reply was truncated.
async fn exchange(
    server: SocketAddr,
    query: &[u8],
    id: u16,
    question: &Question,
) -> std::io::Result<Message> {
    match udp(server, query, id, question).await? {
        Some(reply) => Ok(reply),
        None => tcp(server, query, id, question).await,
    }
}

/// The reply over UDP; `None` if it is truncated (TC), parsed or not: a
/// server may cut a reply mid-record.
async fn udp(
    server: SocketAddr,
    query: &[u8],
    id: u16,
    question: &Question,
) -> std::io::Result<Option<Message>> {
    let local: SocketAddr = if server.is_ipv4() {
        (Ipv4Addr::UNSPECIFIED, 0).into()
    } else {
        (Ipv6Addr::UNSPECIFIED, 0).into()
    };
    let socket = UdpSocket::bind(local).await?;
    socket.connect(server).await?;
    socket.send(query).await?;
    let mut buffer = vec![0u8; MAX_MESSAGE];
    loop {
        let len = socket.recv(&mut buffer).await?;
        let packet = &buffer[..len];
        if let Some(reply) = reply_to(packet, id, question) {
            return Ok((!reply.header.truncated).then_some(reply));
        }
        // Unparsable, but ours and truncated: over TCP it comes whole.
        let flags = packet.get(2).copied().unwrap_or(0);
        if packet.len() >= 12 && packet[..2] == id.to_be_bytes() && flags & 0x82 == 0x82 {
            return Ok(None);
        }
    }
}

async fn tcp(
    server: SocketAddr,
    query: &[u8],
    id: u16,
    question: &Question,
) -> std::io::Result<Message> {
    let mut stream = TcpStream::connect(server).await?;
    let mut frame = Vec::with_capacity(query.len() + 2);
    let len = u16::try_from(query.len()).map_err(std::io::Error::other)?;
    frame.extend_from_slice(&len.to_be_bytes());
    frame.extend_from_slice(query);
    stream.write_all(&frame).await?;
    let mut len = [0u8; 2];
    stream.read_exact(&mut len).await?;
    let mut body = vec![0u8; usize::from(u16::from_be_bytes(len))];
    stream.read_exact(&mut body).await?;
    reply_to(&body, id, question)
        .ok_or_else(|| std::io::Error::other("the reply over TCP does not match the query"))
}

/// `packet` parsed, if it is the reply to our query.
fn reply_to(packet: &[u8], id: u16, question: &Question) -> Option<Message> {
    let reply = Message::parse(packet).ok()?;
    let q = reply.question.as_ref()?;
    let matches = reply.header.response
        && reply.header.id == id
        && q.qtype == question.qtype
        && q.qclass == question.qclass
        && q.name.eq_ignore_case(&question.name);
    matches.then_some(reply)
}

/// An unpredictable query ID: SipHash under the standard library's random
/// per-process keys (fresh ones on every call), so that no new dependency
/// is needed for 16 random bits.
fn random_id() -> u16 {
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u64(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0),
    );
    hasher.finish() as u16
}

#[cfg(test)]
pub(crate) mod tests;
