//! Splicing two upgraded connections byte for byte (upstream's
//! `UpgradeAwareHandler` after the 101): each direction is copied as it
//! arrives; when either ends (end of stream, an error) both are closed, as
//! upstream does; a connection on which nothing moves for the idle timeout
//! (the kubelet's `--streaming-connection-idle-timeout`) is closed too.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// How a splice ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// One side closed its end (or failed).
    Closed,
    /// Nothing moved for the idle timeout.
    Idle,
    /// The owner stopped it (shutdown).
    Stopped,
}

/// What a splice carried, and how it ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Spliced {
    /// Bytes from `a` to `b`.
    pub a_to_b: u64,
    /// Bytes from `b` to `a`.
    pub b_to_a: u64,
    pub ended: Ended,
}

/// The size of each direction's buffer.
const BUFFER: usize = 64 * 1024;

/// Copies `a` to `b` and `b` to `a` until one side ends, `idle` passes
/// without a byte in either direction, or `stop` is cancelled. Both
/// connections are dropped (closed) on return.
pub async fn splice<A, B>(a: A, b: B, idle: Duration, stop: CancellationToken) -> Spliced
where
    A: AsyncRead + AsyncWrite + Send,
    B: AsyncRead + AsyncWrite + Send,
{
    let (a_read, a_write) = tokio::io::split(a);
    let (b_read, b_write) = tokio::io::split(b);
    let activity = Activity::new();
    let a_to_b = AtomicU64::new(0);
    let b_to_a = AtomicU64::new(0);
    let forward = copy(a_read, b_write, &activity, &a_to_b);
    let backward = copy(b_read, a_write, &activity, &b_to_a);
    let ended = tokio::select! {
        _ = forward => Ended::Closed,
        _ = backward => Ended::Closed,
        _ = activity.idle_for(idle) => Ended::Idle,
        _ = stop.cancelled() => Ended::Stopped,
    };
    Spliced {
        a_to_b: a_to_b.load(Ordering::Relaxed),
        b_to_a: b_to_a.load(Ordering::Relaxed),
        ended,
    }
}

async fn copy<R, W>(mut from: R, mut to: W, activity: &Activity, moved: &AtomicU64)
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut buffer = vec![0; BUFFER];
    loop {
        let n = match from.read(&mut buffer).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if to.write_all(&buffer[..n]).await.is_err() || to.flush().await.is_err() {
            return;
        }
        moved.fetch_add(n as u64, Ordering::Relaxed);
        activity.touch();
    }
    let _ = to.shutdown().await;
}

/// When a byte last moved on a stream, for its idle timeout; clones
/// share it (each direction's copy touches it).
#[derive(Debug, Clone)]
pub(crate) struct Activity {
    began: Instant,
    /// Milliseconds since `began` of the last byte moved.
    last: Arc<AtomicU64>,
}

impl Activity {
    pub(crate) fn new() -> Activity {
        Activity {
            began: Instant::now(),
            last: Arc::new(AtomicU64::new(0)),
        }
    }

    /// Something moved now.
    pub(crate) fn touch(&self) {
        self.last
            .store(self.began.elapsed().as_millis() as u64, Ordering::Relaxed);
    }

    /// Resolves once nothing has moved for `idle`.
    pub(crate) async fn idle_for(&self, idle: Duration) {
        loop {
            let last = self.began + Duration::from_millis(self.last.load(Ordering::Relaxed));
            let deadline = last + idle;
            if Instant::now() >= deadline {
                return;
            }
            tokio::time::sleep_until(deadline).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn bytes_cross_both_ways_and_one_side_closing_ends_both() {
        let (client, proxy_front) = tokio::io::duplex(1024);
        let (proxy_back, server) = tokio::io::duplex(1024);
        let task = tokio::spawn(splice(
            proxy_front,
            proxy_back,
            Duration::from_secs(60),
            CancellationToken::new(),
        ));
        let (mut client_read, mut client_write) = tokio::io::split(client);
        let (mut server_read, mut server_write) = tokio::io::split(server);
        let payload: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
        let sent = payload.clone();
        let writer = tokio::spawn(async move {
            client_write.write_all(&sent).await.expect("write");
            client_write
        });
        let mut received = vec![0; payload.len()];
        server_read.read_exact(&mut received).await.expect("read");
        assert_eq!(received, payload);
        server_write.write_all(b"back").await.expect("write back");
        let mut back = [0; 4];
        client_read.read_exact(&mut back).await.expect("read back");
        assert_eq!(&back, b"back");
        let _client_write = writer.await.expect("writer");
        drop(server_write);
        drop(server_read);
        let spliced = task.await.expect("splice");
        assert_eq!(spliced.a_to_b, payload.len() as u64);
        assert_eq!(spliced.b_to_a, 4);
        assert_eq!(spliced.ended, Ended::Closed);
        // The client's side was closed too.
        let mut rest = Vec::new();
        client_read.read_to_end(&mut rest).await.expect("eof");
        assert!(rest.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn a_silent_connection_is_closed_after_the_idle_timeout() {
        let (_client, proxy_front) = tokio::io::duplex(64);
        let (proxy_back, _server) = tokio::io::duplex(64);
        let spliced = splice(
            proxy_front,
            proxy_back,
            Duration::from_secs(4 * 3600),
            CancellationToken::new(),
        )
        .await;
        assert_eq!(spliced.ended, Ended::Idle);
    }

    #[tokio::test]
    async fn stopping_ends_a_splice() {
        let (_client, proxy_front) = tokio::io::duplex(64);
        let (proxy_back, _server) = tokio::io::duplex(64);
        let stop = CancellationToken::new();
        stop.cancel();
        let spliced = splice(proxy_front, proxy_back, Duration::from_secs(60), stop).await;
        assert_eq!(spliced.ended, Ended::Stopped);
    }
}
