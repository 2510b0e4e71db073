//! What every API client in rudder shares — the controllers, the scheduler
//! and the node agent are all built of these parts, as upstream's are of
//! client-go's:
//!
//! - [`informer`]: shared informers. One list+watch per resource per
//!   process ([`Informers`]); each keeps a [`Store`] with indexes (by
//!   namespace, by owner, and any a controller adds) and fans its changes
//!   out to every subscriber.
//! - [`queue`]: the work queue — a key is queued once however often it is
//!   added, never handed to two workers at once, and retried with
//!   upstream's rate limits (5 ms doubling to 1000 s per key, 10/s overall).
//! - [`controller`]: the worker loop that joins a queue to a reconcile
//!   function.
//! - [`expectations`]: what a controller created or deleted and has not
//!   yet seen in its informers, so it never acts twice.
//! - [`events`]: an event recorder writing `events.k8s.io/v1` Events with
//!   upstream's series de-duplication.
//! - [`leader`]: leader election on a `coordination.k8s.io/v1` Lease.
//! - [`clock`]: time as a seam — the system clock, or a fake that tests
//!   advance.
//! - [`meta`]: owner references and conditions.
//!
//! This crate talks to the API server only through `kube::Client`, which is
//! wired in-process in `rudder server` and over HTTPS on a remote node.

pub mod clock;
pub mod controller;
pub mod events;
pub mod expectations;
pub mod informer;
pub mod leader;
pub mod meta;
pub mod queue;

pub use clock::{FakeClock, SystemClock, Timer};
pub use controller::{Action, run_workers};
pub use events::{EventType, Recorder};
pub use expectations::{Expectations, Seen};
pub use informer::{Change, Informer, Informers, Store, Subscription};
pub use leader::{LeaderElector, LeaseConfig, identity};
pub use queue::{RateLimiter, WorkQueue};
