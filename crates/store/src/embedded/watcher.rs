//! One task per watch of the embedded store.
//!
//! The task subscribed to the writer's broadcast of committed batches before
//! it was started, so nothing committed after its starting point can slip
//! past it. It first replays the history from the start revision out of the
//! `log` table, then streams live batches, skipping what the replay covered.
//! A watcher that falls behind the broadcast buffer (a slow consumer) is not
//! dropped: it goes back to replaying from the log where it stopped, as etcd
//! does with its unsynced watchers.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::broadcast::{self, error::RecvError, error::TryRecvError};
use tokio::time::Instant;

use super::writer::Batch;
use super::{Shared, read};
use crate::watch::WatchSink;
use crate::{Error, Event, Result, WatchRequest, WatchResponse};

/// Events read from the log per replay step.
const REPLAY_CHUNK: usize = 1024;

pub(crate) struct Watcher {
    pub shared: Arc<Shared>,
    pub live: broadcast::Receiver<Arc<Batch>>,
    pub request: WatchRequest,
    /// The next revision to deliver; everything below it has been handled.
    pub next: u64,
    pub sink: WatchSink,
    pub progress_interval: Option<Duration>,
}

enum Live {
    /// Fell behind the broadcast: replay from the log.
    Lagged,
    /// The consumer went away or the store shut down.
    Stop,
}

impl Watcher {
    pub(crate) async fn run(mut self) {
        loop {
            if !self.replay().await {
                return;
            }
            match self.stream_live().await {
                Live::Lagged => continue,
                Live::Stop => return,
            }
        }
    }

    /// Delivers the logged events from `next` up to the current revision.
    async fn replay(&mut self) -> bool {
        loop {
            let shared = self.shared.clone();
            let request = self.request.clone();
            let from = self.next;
            let read = tokio::task::spawn_blocking(move || -> Result<_> {
                let txn = shared.begin_read()?;
                let current = read::revisions(&txn)?.current;
                let (events, next) = read::events(&txn, &request, from, REPLAY_CHUNK)?;
                Ok((events, next, current))
            })
            .await
            .unwrap_or_else(|e| Err(Error::unavailable("watch replay task", e)));
            match read {
                Ok((events, next, current)) => {
                    self.next = next;
                    if !events.is_empty() && !self.deliver(WatchResponse::Events(events)).await {
                        return false;
                    }
                    if next > current {
                        return true;
                    }
                }
                Err(error) => {
                    self.deliver_error(error).await;
                    return false;
                }
            }
        }
    }

    async fn stream_live(&mut self) -> Live {
        let mut idle_since = Instant::now();
        loop {
            let idle_deadline = self.progress_interval.map(|every| idle_since + every);
            tokio::select! {
                _ = self.sink.cancel.cancelled() => return Live::Stop,
                request = self.sink.progress_requests.recv() => {
                    if request.is_none() {
                        return Live::Stop;
                    }
                    // Take in what was committed before the request first.
                    loop {
                        match self.live.try_recv() {
                            Ok(batch) => {
                                if !self.take_batch(&batch).await {
                                    return Live::Stop;
                                }
                            }
                            Err(TryRecvError::Empty) => break,
                            Err(TryRecvError::Lagged(_)) => return Live::Lagged,
                            Err(TryRecvError::Closed) => return self.closed().await,
                        }
                    }
                    if !self.deliver_progress().await {
                        return Live::Stop;
                    }
                    idle_since = Instant::now();
                }
                received = self.live.recv() => match received {
                    Ok(batch) => {
                        if !self.take_batch(&batch).await {
                            return Live::Stop;
                        }
                        idle_since = Instant::now();
                    }
                    Err(RecvError::Lagged(_)) => return Live::Lagged,
                    Err(RecvError::Closed) => return self.closed().await,
                },
                _ = sleep_until(idle_deadline) => {
                    if !self.deliver_progress().await {
                        return Live::Stop;
                    }
                    idle_since = Instant::now();
                }
            }
        }
    }

    /// Delivers the batch's events this watch has not seen and wants.
    async fn take_batch(&mut self, batch: &Batch) -> bool {
        if batch.last < self.next {
            return true;
        }
        let events: Vec<Event> = batch
            .events
            .iter()
            .filter(|e| e.revision() >= self.next && self.request.matches(&e.kv.key))
            .cloned()
            .collect();
        self.next = batch.last + 1;
        events.is_empty() || self.deliver(WatchResponse::Events(events)).await
    }

    async fn deliver_progress(&mut self) -> bool {
        let revision = self.next - 1;
        self.deliver(WatchResponse::Progress { revision }).await
    }

    async fn closed(&mut self) -> Live {
        self.deliver_error(Error::closed()).await;
        Live::Stop
    }

    async fn deliver_error(&mut self, error: Error) {
        let _ = self.sink.send(Err(error)).await;
    }

    async fn deliver(&mut self, response: WatchResponse) -> bool {
        self.sink.send(Ok(response)).await
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}
