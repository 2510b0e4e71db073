//! The worker loop that joins a [`WorkQueue`] to a reconcile function —
//! client-go's `processNextWorkItem` contract in one place: take a key,
//! reconcile it, forget its failures on success or retry it rate-limited on
//! error, and always give it back.
//!
//! A controller is then one module of one shape: what it watches (its
//! informers' changes turned into queue keys), its reconcile function, and
//! its tests.

use std::fmt::Display;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::queue::{Key, WorkQueue};

/// What a successful reconcile asks for next.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Action {
    /// Nothing until something changes.
    #[default]
    Done,
    /// Look again after this long from the sync's start (a deadline, a
    /// timeout, a poll).
    RequeueAfter(Duration),
    /// Not done, though nothing failed (waiting on something else): look
    /// again after the key's rate-limited backoff.
    Retry,
}

/// Runs `workers` workers on `queue` until `cancel` fires, then shuts the
/// queue down and waits for the keys in hand to finish.
pub async fn run_workers<T, F, Fut, E>(
    name: &'static str,
    queue: WorkQueue<T>,
    workers: usize,
    cancel: CancellationToken,
    reconcile: F,
) where
    T: Key,
    F: Fn(T) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Action, E>> + Send,
    E: Display + Send,
{
    let reconcile = Arc::new(reconcile);
    let mut tasks = JoinSet::new();
    for _ in 0..workers.max(1) {
        let (queue, reconcile) = (queue.clone(), reconcile.clone());
        tasks.spawn(async move {
            while let Some(key) = queue.get().await {
                // A requeue's delay counts from the sync's start, whose
                // clock it was computed from: a clock that moves on during
                // the sync (a fake one jumps) must not push it further.
                let began = queue.now();
                // A panicking reconcile is a failure like any other: its key
                // is given back and retried, the worker lives on.
                let outcome = std::panic::AssertUnwindSafe(reconcile(key.clone()))
                    .catch_unwind()
                    .await;
                match outcome {
                    Ok(Ok(Action::Done)) => queue.forget(&key),
                    Ok(Ok(Action::RequeueAfter(after))) => {
                        queue.forget(&key);
                        queue.add_at(key.clone(), began + after);
                    }
                    Ok(Ok(Action::Retry)) => queue.add_rate_limited(key.clone()),
                    Ok(Err(error)) => {
                        let retries = queue.retries(&key);
                        tracing::info!(controller = name, key = ?key, retries, %error, "reconcile failed; retrying");
                        queue.add_rate_limited(key.clone());
                    }
                    Err(_) => {
                        tracing::error!(controller = name, key = ?key, "reconcile panicked; retrying");
                        queue.add_rate_limited(key.clone());
                    }
                }
                queue.done(&key);
            }
        });
    }
    cancel.cancelled().await;
    queue.shut_down();
    while tasks.join_next().await.is_some() {}
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::FakeClock;
    use std::sync::Mutex;

    #[tokio::test]
    async fn failures_are_retried_and_successes_forgotten() {
        let clock = FakeClock::starting_now();
        let queue: WorkQueue<u32> = WorkQueue::new(clock.clone());
        let attempts = Arc::new(Mutex::new(Vec::new()));
        let cancel = CancellationToken::new();
        let seen = attempts.clone();
        let runner = tokio::spawn(run_workers(
            "test",
            queue.clone(),
            2,
            cancel.clone(),
            move |key: u32| {
                let seen = seen.clone();
                async move {
                    let tries = {
                        let mut seen = seen.lock().unwrap_or_else(|e| e.into_inner());
                        seen.push(key);
                        seen.iter().filter(|k| **k == key).count()
                    };
                    if key == 3 && tries == 1 {
                        panic!("a bug in a reconcile");
                    }
                    if key == 1 && tries < 3 {
                        Err("not yet")
                    } else {
                        Ok(Action::Done)
                    }
                }
            },
        ));
        queue.add(1);
        queue.add(2);
        queue.add(3);
        for _ in 0..100 {
            clock.advance(Duration::from_millis(50));
            tokio::time::sleep(Duration::from_millis(5)).await;
            if attempts.lock().unwrap_or_else(|e| e.into_inner()).len() >= 6 {
                break;
            }
        }
        let mut seen = attempts.lock().unwrap_or_else(|e| e.into_inner()).clone();
        seen.sort();
        assert_eq!(seen, vec![1, 1, 1, 2, 3, 3], "a panic is retried too");
        assert_eq!(queue.retries(&1), 0, "forgotten after it succeeded");
        cancel.cancel();
        runner.await.expect("workers stop");
    }

    #[tokio::test]
    async fn a_requeue_counts_from_the_syncs_start_when_the_clock_jumps_during_it() {
        let clock = FakeClock::starting_now();
        let queue: WorkQueue<u32> = WorkQueue::new(clock.clone());
        let runs = Arc::new(Mutex::new(0usize));
        let cancel = CancellationToken::new();
        let (counted, jumping) = (runs.clone(), clock.clone());
        let runner = tokio::spawn(run_workers(
            "test",
            queue.clone(),
            1,
            cancel.clone(),
            move |_key: u32| {
                let (counted, jumping) = (counted.clone(), jumping.clone());
                async move {
                    let first = {
                        let mut runs = counted.lock().unwrap_or_else(|e| e.into_inner());
                        *runs += 1;
                        *runs == 1
                    };
                    if first {
                        // The minute the sync asks to wait passes while it
                        // still runs.
                        jumping.advance(Duration::from_secs(60));
                    }
                    Ok::<_, String>(Action::RequeueAfter(Duration::from_secs(60)))
                }
            },
        ));
        queue.add(1);
        for _ in 0..200 {
            tokio::time::sleep(Duration::from_millis(5)).await;
            if *runs.lock().unwrap_or_else(|e| e.into_inner()) >= 2 {
                break;
            }
        }
        assert_eq!(
            *runs.lock().unwrap_or_else(|e| e.into_inner()),
            2,
            "run again with no further move of the clock"
        );
        cancel.cancel();
        runner.await.expect("workers stop");
    }
}
