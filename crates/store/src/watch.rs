//! The stream a watch returns, shared by every backend.
//!
//! A backend runs one task per watch that feeds a bounded channel; the
//! consumer reads it through [`WatchStream`]. Dropping the stream cancels the
//! task.

use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::sync::mpsc;
use tokio_util::sync::{CancellationToken, DropGuard};

use crate::{Result, WatchResponse};

/// How many responses a watch buffers before its producer waits.
pub(crate) const WATCH_BUFFER: usize = 256;

/// The consumer side of a watch: events in revision order, progress
/// notifications, and at most one error, after which the stream ends.
#[derive(Debug)]
pub struct WatchStream {
    rx: mpsc::Receiver<Result<WatchResponse>>,
    progress: mpsc::Sender<()>,
    _cancel: DropGuard,
}

/// The producer side, held by the backend's watch task.
#[derive(Debug)]
pub(crate) struct WatchSink {
    pub tx: mpsc::Sender<Result<WatchResponse>>,
    pub progress_requests: mpsc::Receiver<()>,
    pub cancel: CancellationToken,
}

impl WatchSink {
    /// Delivers one item; `false` once the consumer is gone or the watch
    /// is cancelled.
    pub(crate) async fn send(&mut self, item: Result<WatchResponse>) -> bool {
        tokio::select! {
            _ = self.cancel.cancelled() => false,
            sent = self.tx.send(item) => sent.is_ok(),
        }
    }
}

pub(crate) fn watch_channel() -> (WatchSink, WatchStream) {
    let (tx, rx) = mpsc::channel(WATCH_BUFFER);
    let (progress, progress_requests) = mpsc::channel(1);
    let cancel = CancellationToken::new();
    let stream = WatchStream {
        rx,
        progress,
        _cancel: cancel.clone().drop_guard(),
    };
    (
        WatchSink {
            tx,
            progress_requests,
            cancel,
        },
        stream,
    )
}

impl WatchStream {
    /// The next response; `None` when the watch has ended.
    pub async fn recv(&mut self) -> Option<Result<WatchResponse>> {
        self.rx.recv().await
    }

    /// Asks for a [`WatchResponse::Progress`] carrying the revision up to
    /// which every matching event has been delivered. Requests made while one
    /// is pending are merged into it.
    pub fn request_progress(&self) {
        // A full channel means a request is already pending: that one answers this one too.
        let _ = self.progress.try_send(());
    }
}

impl futures::Stream for WatchStream {
    type Item = Result<WatchResponse>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.rx.poll_recv(cx)
    }
}
