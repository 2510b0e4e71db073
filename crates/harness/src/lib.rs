//! The test harness every crate shares: an in-process control plane on a
//! temporary data dir — a real API server on a real store, reached by
//! in-process clients for chosen identities (no socket, no TLS) — and a
//! clock seam: the server and the controllers a test starts read the time
//! from one clock, the system's or a [`FakeClock`] the test advances.
//!
//! ```ignore
//! let plane = ControlPlane::start().await;
//! let admin = plane.admin();
//! let controllers = plane.client(&Identity::controller_manager());
//! ```

pub mod kubelet;

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

pub use rudder_apiserver::{Identity, Server};
use rudder_apiserver::{Listen, ServerOptions};
use rudder_runtime::clock::{self, FakeClock, Timer};
use rudder_store::testing::TestStore;

/// Which store the control plane stands on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// The embedded store with a small watch buffer and page cache, so
    /// tests exercise watchers catching up from disk.
    Embedded,
    /// The embedded store as `rudder server` configures it (benchmarks).
    EmbeddedAsServed,
    /// A real etcd of the test's own.
    Etcd,
}

/// How a control plane is started.
#[derive(Debug, Clone)]
pub struct Options {
    pub backend: Backend,
    /// A fake clock the test advances, instead of the system's.
    pub fake_clock: bool,
    /// Also serve HTTPS on a loopback port (for real kubectl).
    pub listen: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            backend: Backend::Embedded,
            fake_clock: false,
            listen: false,
        }
    }
}

/// A running control plane for one test.
pub struct ControlPlane {
    server: Option<Server>,
    clock: Arc<dyn Timer>,
    fake: Option<Arc<FakeClock>>,
    dir: tempfile::TempDir,
    store: TestStore,
}

impl std::fmt::Debug for ControlPlane {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ControlPlane")
            .field("dir", &self.dir.path())
            .field("fake_clock", &self.fake.is_some())
            .finish_non_exhaustive()
    }
}

impl ControlPlane {
    /// An in-process control plane on an embedded store and the system clock.
    pub async fn start() -> ControlPlane {
        ControlPlane::start_with(Options::default()).await
    }

    /// The same, on a fake clock the test advances.
    pub async fn with_fake_clock() -> ControlPlane {
        ControlPlane::start_with(Options {
            fake_clock: true,
            ..Options::default()
        })
        .await
    }

    pub async fn start_with(options: Options) -> ControlPlane {
        let store = match options.backend {
            Backend::Embedded => rudder_store::testing::embedded().await,
            Backend::EmbeddedAsServed => rudder_store::testing::embedded_as_served().await,
            Backend::Etcd => rudder_store::testing::etcd().await,
        };
        let dir = tempfile::tempdir().expect("a temporary data dir");
        let fake = options.fake_clock.then(FakeClock::starting_now);
        let clock: Arc<dyn Timer> = match &fake {
            Some(fake) => fake.clone(),
            None => clock::system(),
        };
        let listen = options.listen.then(|| Listen {
            bind: "127.0.0.1:0".parse().expect("an address"),
            extra_sans: Vec::new(),
            advertise: None,
        });
        let mut server_options = ServerOptions::new(dir.path(), store.store.clone(), listen);
        server_options.clock = clock.clone();
        let server = Server::start(server_options)
            .await
            .expect("the control plane starts");
        ControlPlane {
            server: Some(server),
            clock,
            fake,
            dir,
            store,
        }
    }

    fn server(&self) -> &Server {
        self.server.as_ref().expect("running")
    }

    /// A client as `identity`, in-process.
    pub fn client(&self, identity: &Identity) -> kube::Client {
        self.server().client(identity)
    }

    /// A client as the cluster admin.
    pub fn admin(&self) -> kube::Client {
        self.client(&Identity::admin())
    }

    /// The clock the control plane reads.
    pub fn clock(&self) -> Arc<dyn Timer> {
        self.clock.clone()
    }

    /// The fake clock, when the plane runs on one.
    pub fn fake_clock(&self) -> Option<Arc<FakeClock>> {
        self.fake.clone()
    }

    /// The admin kubeconfig, when the plane serves HTTPS.
    pub fn kubeconfig(&self) -> Option<std::path::PathBuf> {
        self.server().kubeconfig().map(|p| p.to_path_buf())
    }

    pub fn data_dir(&self) -> &std::path::Path {
        self.dir.path()
    }

    pub fn store(&self) -> Arc<dyn rudder_store::Store> {
        self.store.store.clone()
    }

    /// Stops the API server.
    pub async fn stop(mut self) {
        if let Some(server) = self.server.take() {
            server.stop().await;
        }
    }
}

/// Polls `check` until it returns `Some`, for at most `within` of real
/// time; panics saying `what` otherwise.
pub async fn eventually<T, F, Fut>(what: &str, within: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + within;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Waits (real time, at most 30 s) until a sleep on `clock` until
/// `deadline` is asked for after `mark` (see [`FakeClock::mark`]): a loop
/// that sleeps between passes — a periodic controller, a work queue's
/// delayed keys — has finished the pass it was woken (or triggered) for
/// and asked to be woken at `deadline`.
pub async fn asleep_until(clock: &FakeClock, deadline: std::time::SystemTime, mark: u64) {
    let at = rudder_api::time::format_rfc3339(rudder_api::time::unix_seconds(deadline));
    eventually(
        &format!("a sleep until {at}"),
        Duration::from_secs(30),
        || async { clock.sleepers_since(mark).contains(&deadline).then_some(()) },
    )
    .await
}

/// Moves `clock` forward to `at`, when a loop's sleep ends, and waits until
/// that loop has done the pass it woke for: it asks to sleep until `at` +
/// `period`.
pub async fn pass(clock: &FakeClock, at: std::time::SystemTime, period: Duration) {
    let mark = clock.mark();
    let by = at
        .duration_since(rudder_api::time::Clock::now(clock))
        .expect("a pass in the future");
    clock.advance(by);
    asleep_until(clock, at + period, mark).await
}

/// Stops a child process as an operator would: SIGTERM, SIGKILL if it is
/// still running 30 s later; its exit status.
pub fn terminate(child: &mut std::process::Child) -> Option<std::process::ExitStatus> {
    let _ = std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let deadline = Instant::now() + Duration::from_secs(30);
    while child.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = child.kill();
    child.wait().ok()
}
