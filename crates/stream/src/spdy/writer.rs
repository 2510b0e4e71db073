//! The session's writing task: frames out in queue order, header blocks
//! through the connection's sending zlib context (so compression follows
//! wire order), batched into few writes; at the end it stops the reader,
//! finishes every stream and publishes why the session ended.

use std::sync::Arc;

use bytes::Bytes;
use futures::StreamExt;
use futures::channel::mpsc;
use tokio::io::{AsyncWrite, AsyncWriteExt};

use super::frame::Frame;
use super::headers::{Compressor, Headers};
use super::session::{CLOSE_GRACE, Ended, Error, Out, Shared, WRITE_BATCH};
use super::stream::lock;

/// The writing task: writes until closed, then ends the reader, finishes
/// every stream and publishes why the session ended.
pub(super) async fn run<W>(
    shared: Arc<Shared>,
    mut rx: mpsc::Receiver<Out>,
    w: W,
    reader: tokio::task::JoinHandle<Option<Ended>>,
) where
    W: AsyncWrite + Send,
{
    tokio::pin!(w);
    let grace = async {
        shared.closing.notified().await;
        tokio::time::sleep(CLOSE_GRACE).await;
    };
    let written = tokio::select! {
        r = write_loop(&shared, &mut rx, w.as_mut()) => Some(r),
        () = shared.abort.cancelled() => None,
        () = grace => Some(Err(Ended::Io("closing took longer than the grace period".into()))),
    };
    shared.abort.cancel();
    let read = match reader.await {
        Ok(r) => r,
        Err(e) => Some(Ended::Io(format!("the reader task failed: {e}"))),
    };
    rx.close();
    drop(rx);
    let streams: Vec<_> = {
        let mut st = lock(&shared.state);
        st.going_away = true;
        st.pings.clear();
        st.streams.drain().map(|(_, s)| s).collect()
    };
    for s in streams {
        s.terminate(false, Error::Closed);
    }
    let ended = match (read, written) {
        (Some(e), _) => e,
        (None, Some(Err(e))) => e,
        (None, _) => Ended::Closed,
    };
    tracing::debug!(?ended, "SPDY session ended");
    shared.ended.send_replace(Some(ended));
}

async fn write_loop<W: AsyncWrite>(
    shared: &Shared,
    rx: &mut mpsc::Receiver<Out>,
    mut w: std::pin::Pin<&mut W>,
) -> Result<(), Ended> {
    let io = |e: std::io::Error| Ended::Io(e.to_string());
    let mut deflate = Compressor::new().map_err(|e| Ended::Io(e.to_string()))?;
    let mut buf = Vec::with_capacity(64 * 1024);
    loop {
        let Some(first) = rx.next().await else {
            return Ok(());
        };
        let mut last = encode(shared, &mut deflate, first, &mut buf)?;
        while !last && buf.len() < WRITE_BATCH {
            match rx.try_recv() {
                Ok(out) => last = encode(shared, &mut deflate, out, &mut buf)?,
                Err(_) => break,
            }
        }
        w.write_all(&buf).await.map_err(io)?;
        w.flush().await.map_err(io)?;
        buf.clear();
        if last {
            w.shutdown().await.map_err(io)?;
            return Ok(());
        }
    }
}

/// Appends `out`'s frame to `buf`; true when it was the last.
fn encode(
    shared: &Shared,
    deflate: &mut Compressor,
    out: Out,
    buf: &mut Vec<u8>,
) -> Result<bool, Ended> {
    let frame = match out {
        Out::Frame(f) => f,
        Out::Syn { id, headers, fin } => Frame::SynStream {
            stream_id: id,
            associated_to: 0,
            priority: 0,
            slot: 0,
            fin,
            unidirectional: false,
            block: compress(deflate, &headers)?,
        },
        Out::Reply { id, fin } => Frame::SynReply {
            stream_id: id,
            fin,
            block: compress(deflate, &Headers::new())?,
        },
        Out::Close(status) => {
            if let Some(status) = status {
                let last_good_stream_id = lock(&shared.state).last_remote_id;
                let frame = Frame::GoAway {
                    last_good_stream_id,
                    status,
                };
                frame.encode(buf).map_err(|e| Ended::Io(e.to_string()))?;
            }
            return Ok(true);
        }
    };
    frame.encode(buf).map_err(|e| Ended::Io(e.to_string()))?;
    Ok(false)
}

fn compress(deflate: &mut Compressor, headers: &Headers) -> Result<Bytes, Ended> {
    deflate
        .compress(headers)
        .map(Bytes::from)
        .map_err(|e| Ended::Io(e.to_string()))
}
