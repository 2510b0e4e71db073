//! The listeners: UDP and TCP on every address given.
//!
//! UDP: several sockets on one address (`SO_REUSEPORT`, one per core by
//! default), each read by one task, so the kernel spreads clients over
//! cores without a lock or a channel between receive and reply. A task
//! answers zone and cache hits in place — one `recvfrom`, one `sendto` —
//! and hands a query that needs an upstream to a task of its own, owned by
//! a `JoinSet` and bounded (past the bound: REFUSED at once).
//!
//! TCP (RFC 7766): length-prefixed messages, several in flight per
//! connection (answered as they complete, so possibly out of order), an
//! idle timeout (10 s, CoreDNS's) and a bounded number of connections
//! (past it a new one is closed at once).
//!
//! `IP_FREEBIND` lets the server bind an address before it is routed
//! (the cluster DNS address, say) — optional.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use socket2::{Domain, Protocol, Socket, Type};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UdpSocket};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::handler::{Handler, Step, Transport};
use crate::metrics::Metrics;
use crate::wire;

/// How the listeners behave.
#[derive(Debug, Clone, Copy)]
pub struct ServerOptions {
    /// UDP sockets (and tasks) per address.
    pub udp_sockets: usize,
    /// Queries waiting for an upstream per UDP socket.
    pub udp_pending: usize,
    /// Open TCP connections, all addresses together.
    pub tcp_connections: usize,
    /// Queries in flight per TCP connection.
    pub tcp_pipeline: usize,
    /// A TCP connection with nothing to do for this long is closed.
    pub tcp_idle: Duration,
    /// A reply that cannot be written within this long closes it.
    pub tcp_write: Duration,
    /// Bind with `IP_FREEBIND`.
    pub freebind: bool,
}

impl Default for ServerOptions {
    fn default() -> Self {
        ServerOptions {
            udp_sockets: std::thread::available_parallelism()
                .map(|n| n.get().min(4))
                .unwrap_or(1),
            udp_pending: 1000,
            tcp_connections: 256,
            tcp_pipeline: 16,
            tcp_idle: Duration::from_secs(10),
            tcp_write: Duration::from_secs(5),
            freebind: false,
        }
    }
}

/// Why the listeners could not be opened.
#[derive(Debug, thiserror::Error)]
#[error("listening for DNS on {address} ({transport}): {source}")]
pub struct BindError {
    pub address: SocketAddr,
    pub transport: &'static str,
    pub source: io::Error,
}

/// Bound listeners, not yet serving.
#[derive(Debug)]
pub struct Server {
    udp: Vec<Arc<UdpSocket>>,
    tcp: Vec<TcpListener>,
    addresses: Vec<SocketAddr>,
    options: ServerOptions,
}

impl Server {
    /// Binds UDP and TCP on every address (port 0: one free port for
    /// both). Must run inside a tokio runtime.
    pub fn bind(listen: &[SocketAddr], options: ServerOptions) -> Result<Server, BindError> {
        let mut server = Server {
            udp: Vec::new(),
            tcp: Vec::new(),
            addresses: Vec::new(),
            options,
        };
        for &address in listen {
            let (udp, tcp, bound) = bind_pair(address, options)?;
            server.udp.extend(udp);
            server.tcp.push(tcp);
            server.addresses.push(bound);
        }
        Ok(server)
    }

    /// The addresses bound, in the order given (with the ports chosen).
    pub fn local_addrs(&self) -> &[SocketAddr] {
        &self.addresses
    }

    /// Serves until `stop`; every task it started is ended when it returns.
    pub async fn serve(self, handler: Arc<Handler>, stop: CancellationToken) {
        let mut tasks = JoinSet::new();
        for socket in self.udp {
            tasks.spawn(udp_loop(
                socket,
                handler.clone(),
                self.options,
                stop.clone(),
            ));
        }
        let connections = Arc::new(Semaphore::new(self.options.tcp_connections));
        for listener in self.tcp {
            let accept = accept_loop(
                listener,
                handler.clone(),
                connections.clone(),
                self.options,
                stop.clone(),
            );
            tasks.spawn(accept);
        }
        stop.cancelled().await;
        tasks.shutdown().await;
    }
}

/// UDP sockets and a TCP listener on one address (the same port).
fn bind_pair(
    address: SocketAddr,
    options: ServerOptions,
) -> Result<(Vec<Arc<UdpSocket>>, TcpListener, SocketAddr), BindError> {
    let error = |transport, source| BindError {
        address,
        transport,
        source,
    };
    // With port 0 the UDP port chosen may be taken for TCP: try again.
    let attempts = if address.port() == 0 { 10 } else { 1 };
    let mut last = None;
    for _ in 0..attempts {
        let count = options.udp_sockets.max(1);
        let first =
            udp_socket(address, count > 1, options.freebind).map_err(|e| error("udp", e))?;
        let bound = first.local_addr().map_err(|e| error("udp", e))?;
        let tcp = match tcp_listener(bound, options.freebind) {
            Ok(tcp) => tcp,
            Err(e) => {
                last = Some(error("tcp", e));
                continue;
            }
        };
        let mut sockets = vec![first];
        for _ in 1..count {
            sockets.push(udp_socket(bound, true, options.freebind).map_err(|e| error("udp", e))?);
        }
        let sockets = sockets
            .into_iter()
            .map(|s| UdpSocket::from_std(s).map(Arc::new))
            .collect::<io::Result<Vec<_>>>()
            .map_err(|e| error("udp", e))?;
        let tcp = TcpListener::from_std(tcp).map_err(|e| error("tcp", e))?;
        return Ok((sockets, tcp, bound));
    }
    Err(last.unwrap_or_else(|| error("tcp", io::ErrorKind::AddrInUse.into())))
}

fn socket(
    address: SocketAddr,
    kind: Type,
    protocol: Protocol,
    freebind: bool,
) -> io::Result<Socket> {
    let socket = Socket::new(Domain::for_address(address), kind, Some(protocol))?;
    if address.is_ipv6() {
        // `[::]` is IPv6 only: IPv4 is its own address in the list.
        socket.set_only_v6(true)?;
    }
    if freebind {
        if address.is_ipv4() {
            socket.set_freebind_v4(true)?;
        } else {
            socket.set_freebind_v6(true)?;
        }
    }
    socket.set_nonblocking(true)?;
    Ok(socket)
}

fn udp_socket(
    address: SocketAddr,
    reuse_port: bool,
    freebind: bool,
) -> io::Result<std::net::UdpSocket> {
    let socket = socket(address, Type::DGRAM, Protocol::UDP, freebind)?;
    socket.set_reuse_port(reuse_port)?;
    // Room for bursts (capped by net.core.rmem_max).
    let _ = socket.set_recv_buffer_size(4 << 20);
    socket.bind(&address.into())?;
    Ok(socket.into())
}

pub(crate) fn tcp_listener(
    address: SocketAddr,
    freebind: bool,
) -> io::Result<std::net::TcpListener> {
    let socket = socket(address, Type::STREAM, Protocol::TCP, freebind)?;
    socket.set_reuse_address(true)?;
    socket.bind(&address.into())?;
    socket.listen(1024)?;
    Ok(socket.into())
}

async fn udp_loop(
    socket: Arc<UdpSocket>,
    handler: Arc<Handler>,
    options: ServerOptions,
    stop: CancellationToken,
) {
    // Queries are small; a larger datagram is cut and answered FORMERR.
    let mut buffer = vec![0u8; 4096];
    let mut out = Vec::with_capacity(usize::from(crate::handler::UDP_PAYLOAD));
    let mut pending = JoinSet::new();
    let stopped = stop.cancelled();
    tokio::pin!(stopped);
    loop {
        let received = tokio::select! {
            biased;
            _ = &mut stopped => return,
            Some(_) = pending.join_next(), if !pending.is_empty() => continue,
            received = socket.recv_from(&mut buffer) => received,
        };
        let (len, peer) = match received {
            Ok(received) => received,
            Err(error) => {
                tracing::debug!(%error, "receiving a DNS query");
                continue;
            }
        };
        out.clear();
        match handler.answer(&buffer[..len], Transport::Udp, &mut out) {
            Step::Reply => {
                if let Err(error) = socket.send_to(&out, peer).await {
                    tracing::debug!(%error, %peer, "sending a DNS reply");
                }
            }
            Step::Drop => {}
            Step::Forward(query) if pending.len() >= options.udp_pending => {
                handler.refuse(query, &mut out);
                let _ = socket.send_to(&out, peer).await;
            }
            Step::Forward(query) => {
                let handler = handler.clone();
                let socket = socket.clone();
                pending.spawn(async move {
                    let mut out = Vec::with_capacity(512);
                    handler.finish(query, &mut out).await;
                    if let Err(error) = socket.send_to(&out, peer).await {
                        tracing::debug!(%error, %peer, "sending a DNS reply");
                    }
                });
            }
        }
    }
}

async fn accept_loop(
    listener: TcpListener,
    handler: Arc<Handler>,
    connections: Arc<Semaphore>,
    options: ServerOptions,
    stop: CancellationToken,
) {
    let mut open = JoinSet::new();
    loop {
        let accepted = tokio::select! {
            _ = stop.cancelled() => return,
            Some(_) = open.join_next(), if !open.is_empty() => continue,
            accepted = listener.accept() => accepted,
        };
        let stream = match accepted {
            Ok((stream, _)) => stream,
            Err(error) => {
                // Out of descriptors, most likely: let some close.
                tracing::warn!(%error, "accepting a DNS connection");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let Ok(permit) = connections.clone().try_acquire_owned() else {
            Metrics::add(&handler.metrics().tcp_rejected);
            continue;
        };
        Metrics::add(&handler.metrics().tcp_connections);
        let _ = stream.set_nodelay(true);
        open.spawn(connection(
            stream,
            handler.clone(),
            options,
            stop.clone(),
            permit,
        ));
    }
}

/// One TCP connection: frames in, frames out, until the client closes it,
/// goes idle, or the server stops.
async fn connection(
    mut stream: TcpStream,
    handler: Arc<Handler>,
    options: ServerOptions,
    stop: CancellationToken,
    _permit: OwnedSemaphorePermit,
) {
    let (mut reader, mut writer) = stream.split();
    let mut input: Vec<u8> = Vec::with_capacity(1024);
    let mut chunk = [0u8; 4096];
    let mut pending: JoinSet<Vec<u8>> = JoinSet::new();
    let mut out = Vec::with_capacity(1024);
    let mut closed = false;
    let idle = tokio::time::sleep(options.tcp_idle);
    tokio::pin!(idle);
    loop {
        // Every whole frame received, while there is room in flight.
        while pending.len() < options.tcp_pipeline {
            let Some((range, next)) = wire::split_frame(&input) else {
                break;
            };
            out.clear();
            let at = wire::begin_frame(&mut out);
            match handler.answer(&input[range], Transport::Tcp, &mut out) {
                Step::Reply => {
                    wire::end_frame(&mut out, at);
                    let write = tokio::time::timeout(options.tcp_write, writer.write_all(&out));
                    if !matches!(write.await, Ok(Ok(()))) {
                        return;
                    }
                }
                Step::Drop => {}
                Step::Forward(query) => {
                    let handler = handler.clone();
                    pending.spawn(async move {
                        let mut out = Vec::with_capacity(512);
                        let at = wire::begin_frame(&mut out);
                        handler.finish(query, &mut out).await;
                        wire::end_frame(&mut out, at);
                        out
                    });
                }
            }
            input.drain(..next);
        }
        if closed && pending.is_empty() {
            return;
        }
        let room = pending.len() < options.tcp_pipeline && !closed;
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = &mut idle => return,
            Some(done) = pending.join_next(), if !pending.is_empty() => {
                if let Ok(reply) = done {
                    let write = tokio::time::timeout(options.tcp_write, writer.write_all(&reply));
                    if !matches!(write.await, Ok(Ok(()))) {
                        return;
                    }
                }
                idle.as_mut().reset(tokio::time::Instant::now() + options.tcp_idle);
            }
            read = reader.read(&mut chunk), if room => match read {
                Ok(0) => closed = true,
                Ok(n) => {
                    input.extend_from_slice(&chunk[..n]);
                    idle.as_mut().reset(tokio::time::Instant::now() + options.tcp_idle);
                }
                Err(_) => return,
            },
        }
    }
}

#[cfg(test)]
mod tests;
