//! What the kubectl tests share: a `rudder server` of their own, the
//! installed kubectl versions, and a runner that collects failures.
#![allow(dead_code)]

pub mod node;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Where the versioned kubectl binaries (`kubectl.1.27` … `kubectl.1.35`)
/// and `helm` are found unless `RUDDER_KUBECTL_DIR` says otherwise
/// (`scripts/setup --test` installs them there).
pub const KUBECTL_DIR: &str = "/usr/local/lib/rudder/clients";

/// The kubectl versions the README promises the tests run.
pub const KUBECTL_VERSIONS: &[&str] = &[
    "1.27", "1.28", "1.29", "1.30", "1.31", "1.32", "1.33", "1.34", "1.35",
];

/// Helm, beside the kubectl binaries.
pub fn helm() -> PathBuf {
    let helm = kubectl_dir().join("helm");
    assert!(
        helm.is_file(),
        "helm not found at {} (scripts/setup --test installs it; see the README)",
        helm.display()
    );
    helm
}

fn kubectl_dir() -> PathBuf {
    std::env::var_os("RUDDER_KUBECTL_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(KUBECTL_DIR))
}

pub struct Server {
    child: Child,
    pub dir: tempfile::TempDir,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn start() -> Server {
    let dir = tempfile::tempdir().expect("tempdir");
    let port = rudder_apiserver::testing::free_port().expect("a free port");
    let binary = Path::new(env!("CARGO_BIN_EXE_rudder"));
    let child = rudder_apiserver::testing::spawn_server(binary, dir.path(), port)
        .expect("start rudder server");
    Server { child, dir }
}

/// Every promised kubectl version and its binary. A missing one fails the
/// test that asked: a suite that cannot find its tool has checked nothing.
pub fn versions() -> Vec<(String, PathBuf)> {
    let dir = kubectl_dir();
    let (found, missing): (Vec<_>, Vec<_>) = KUBECTL_VERSIONS
        .iter()
        .map(|v| (v.to_string(), dir.join(format!("kubectl.{v}"))))
        .partition(|(_, path)| path.is_file());
    assert!(
        missing.is_empty(),
        "kubectl {} not found under {} (scripts/setup --test installs them; \
         RUDDER_KUBECTL_DIR may name another directory holding kubectl.1.27 … kubectl.1.35)",
        missing
            .iter()
            .map(|(v, _)| v.as_str())
            .collect::<Vec<_>>()
            .join(", "),
        dir.display()
    );
    found
}

pub struct Kubectl<'a> {
    pub binary: &'a Path,
    pub kubeconfig: PathBuf,
    pub cache: PathBuf,
    pub namespace: String,
}

impl Kubectl<'_> {
    /// `kubectl <args> -o jsonpath=<path>`, which must succeed: its
    /// output, trimmed.
    pub fn jsonpath(&self, args: &[&str], path: &str) -> String {
        let mut all = args.to_vec();
        let path = format!("jsonpath={path}");
        all.extend(["-o", &path]);
        let (ok, out) = self.run(&all, None);
        assert!(ok, "{out}");
        out.trim().to_string()
    }

    pub fn run(&self, args: &[&str], stdin: Option<&str>) -> (bool, String) {
        self.run_with(args, stdin, &[])
    }

    /// Runs kubectl with extra environment variables (`EDITOR`, …).
    pub fn run_with(
        &self,
        args: &[&str],
        stdin: Option<&str>,
        env: &[(&str, &str)],
    ) -> (bool, String) {
        let mut command = Command::new(self.binary);
        command.envs(env.iter().copied());
        command
            .arg(format!("--kubeconfig={}", self.kubeconfig.display()))
            .arg(format!("--cache-dir={}", self.cache.display()))
            .arg("--request-timeout=20s")
            .arg(format!("--namespace={}", self.namespace))
            .args(args)
            .stdin(if stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = command.spawn().expect("run kubectl");
        if let Some(input) = stdin {
            use std::io::Write;
            child
                .stdin
                .take()
                .expect("stdin")
                .write_all(input.as_bytes())
                .expect("write stdin");
        }
        let output = child.wait_with_output().expect("kubectl output");
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        (output.status.success(), text)
    }

    pub fn expect(
        &self,
        failures: &mut Vec<String>,
        what: &str,
        args: &[&str],
        stdin: Option<&str>,
        wanted: &str,
    ) {
        let (ok, out) = self.run(args, stdin);
        if !ok || !out.contains(wanted) {
            failures.push(format!("{what}: wanted {wanted:?}, got ({ok}) {out}"));
        }
    }

    /// Runs kubectl until its output for `args` satisfies `check` (at most
    /// 30 s); records the last output if it never does. Returns that output.
    pub fn eventually(
        &self,
        failures: &mut Vec<String>,
        what: &str,
        args: &[&str],
        check: impl Fn(&str) -> bool,
    ) -> String {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let (ok, out) = self.run(args, None);
            if ok && check(&out) {
                return out;
            }
            if Instant::now() > deadline {
                failures.push(format!("{what}: last saw ({ok}) {out}"));
                return out;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    pub fn refuse(&self, failures: &mut Vec<String>, what: &str, args: &[&str], wanted: &str) {
        self.refuse_with(failures, what, args, None, &[wanted]);
    }

    /// The command, given `stdin`, fails saying every one of `wanted`.
    pub fn refuse_with(
        &self,
        failures: &mut Vec<String>,
        what: &str,
        args: &[&str],
        stdin: Option<&str>,
        wanted: &[&str],
    ) {
        let (ok, out) = self.run(args, stdin);
        if ok || !wanted.iter().all(|w| out.contains(w)) {
            failures.push(format!(
                "{what}: wanted a failure with {wanted:?}, got ({ok}) {out}"
            ));
        }
    }
}

/// A server, and a kubectl of `version` bound to `namespace` once the
/// server answers.
impl Server {
    pub fn kubeconfig(&self) -> PathBuf {
        self.dir.path().join("kubeconfig.yaml")
    }

    pub fn wait_ready(&self, k: &Kubectl<'_>) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while !matches!(k.run(&["get", "--raw", "/readyz"], None), (true, ref out) if out.trim() == "ok")
        {
            assert!(
                Instant::now() < deadline,
                "rudder server did not become ready"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// Runs `check` with every installed kubectl against one `rudder server`,
/// each version in the namespace `namespace(tag)` (`tag`: `1-33` for
/// 1.33), collecting what fails; panics with every failure at the end.
pub fn each_version<F>(namespace: impl Fn(&str) -> String, check: F)
where
    F: FnMut(&Kubectl<'_>, &str, &mut Vec<String>),
{
    each_version_on(start(), namespace, check)
}

/// The same, with the harness's stand-in kubelet making every pod Running
/// and Ready, and every Job's pod Succeeded (until there is a node
/// agent), so rollouts and Jobs can finish.
pub fn each_version_with_nodes<F>(namespace: impl Fn(&str) -> String, check: F)
where
    F: FnMut(&Kubectl<'_>, &str, &mut Vec<String>),
{
    let server = start();
    let kubeconfig = server.kubeconfig();
    let stop = tokio_util::sync::CancellationToken::new();
    let nodes = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime");
            runtime.block_on(async move {
                let client =
                    rudder_apiserver::testing::connect(&kubeconfig, Duration::from_secs(30))
                        .await
                        .expect("connect the stand-in kubelet");
                rudder_harness::kubelet::play_nodes(
                    client,
                    rudder_runtime::clock::system(),
                    rudder_harness::kubelet::jobs_succeed(),
                    stop,
                )
                .await;
            });
        })
    };
    each_version_on(server, namespace, check);
    stop.cancel();
    let _ = nodes.join();
}

fn each_version_on<F>(server: Server, namespace: impl Fn(&str) -> String, mut check: F)
where
    F: FnMut(&Kubectl<'_>, &str, &mut Vec<String>),
{
    let versions = versions();
    let mut failures = Vec::new();
    for (version, binary) in &versions {
        let cache = tempfile::tempdir().expect("cache dir");
        let tag = version.replace('.', "-");
        let k = Kubectl {
            binary,
            kubeconfig: server.kubeconfig(),
            cache: cache.path().to_path_buf(),
            namespace: namespace(&tag),
        };
        server.wait_ready(&k);
        let mut found = Vec::new();
        check(&k, &tag, &mut found);
        failures.extend(found.into_iter().map(|m| format!("kubectl {version}: {m}")));
    }
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
    eprintln!("{} kubectl versions passed", versions.len());
}

/// The opt-out that lets a non-root run skip the suites that need root.
pub const SKIP_ROOT_TESTS: &str = "RUDDER_SKIP_ROOT_TESTS";

/// Whether the root-only `suite` runs: as root it does; otherwise it fails
/// the test, naming itself, unless `RUDDER_SKIP_ROOT_TESTS=1` asks to skip
/// it (then it says so). A suite that cannot run has tested nothing, and a
/// green run must not hide that.
pub fn require_root(suite: &str) -> bool {
    if is_root() {
        return true;
    }
    let opted_out = std::env::var(SKIP_ROOT_TESTS).is_ok_and(|v| v == "1");
    assert!(
        opted_out,
        "{suite} needs root (containers, network namespaces, routes): run the tests as root, \
         or set {SKIP_ROOT_TESTS}=1 to skip it knowingly"
    );
    eprintln!("SKIPPED: {suite} needs root and {SKIP_ROOT_TESTS}=1 skips it");
    false
}

/// Polls `check` every 200 ms until it gives a value; after `within`,
/// fails saying what it waited for and what `logs` tell.
pub fn wait_until<T>(
    what: &str,
    within: Duration,
    logs: impl Fn() -> String,
    mut check: impl FnMut() -> Option<T>,
) -> T {
    let deadline = Instant::now() + within;
    loop {
        if let Some(value) = check() {
            return value;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}; the logs end:\n{}",
            logs()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Packs Debian's busybox-static as the local image `rudder.local/busybox:1`
/// into the agent's image directory `images`, imported at the agent's start.
pub fn pack_busybox(images: &Path) {
    std::fs::create_dir_all(images).expect("images dir");
    let packed = Command::new(env!("CARGO_BIN_EXE_rudder"))
        .args(["images", "pack-busybox"])
        .arg(images.join("busybox.tar"))
        .output()
        .expect("run rudder images pack-busybox");
    assert!(
        packed.status.success(),
        "pack busybox (Debian's busybox-static; scripts/setup --test installs it): {}",
        String::from_utf8_lossy(&packed.stderr)
    );
}

/// The service CIDR `rudder server` allocates from unless told otherwise.
pub const SERVICE_CIDR: &str = "10.43.0.0/16";

/// Keeps a test's pods on this machine for as long as it lives: whatever
/// the pod network `cluster_cidr` sends to an address outside it, the
/// service CIDR and loopback is dropped (an nftables table named `table`).
pub fn egress_guard(table: &str, cluster_cidr: &str) -> rudder_kubelet::network::EgressGuard {
    let cidr = |text: &str| {
        text.parse::<rudder_kubelet::network::Cidr>()
            .expect("a CIDR")
    };
    rudder_kubelet::network::EgressGuard::install(
        table,
        cidr(cluster_cidr),
        &[cidr(cluster_cidr), cidr(SERVICE_CIDR)],
    )
    .expect("install the egress guard")
}

/// Whether the tests run as root (the node agent's end-to-end tests need it).
pub fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .map(|u| u.split_whitespace().next() == Some("0"))
        })
        .unwrap_or(false)
}

/// Writes to `out` a kubeconfig for the server of the kubeconfig `admin`
/// whose user is `token`, with no client certificate (a certificate would
/// win over the token, as upstream).
pub fn token_kubeconfig(admin: &Path, token: &str, out: &Path) -> PathBuf {
    let admin = std::fs::read_to_string(admin).expect("kubeconfig");
    let field = |name: &str| {
        admin
            .lines()
            .find_map(|l| l.trim().strip_prefix(name))
            .expect("field")
            .trim()
            .to_string()
    };
    let yaml = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {}\n    certificate-authority-data: {}\nusers:\n- name: u\n  user:\n    token: {token}\ncontexts:\n- name: c\n  context:\n    cluster: c\n    user: u\ncurrent-context: c\n",
        field("server:"),
        field("certificate-authority-data:")
    );
    std::fs::write(out, yaml).expect("write the kubeconfig");
    out.to_path_buf()
}

/// GET /index.html from `ip:port` over plain TCP (HTTP/1.0), `within` for
/// the connect and for each read: the body of a 200, or what went wrong
/// (`refused`, `timeout`, the status line, …).
pub fn http_get(ip: &str, port: u16, within: Duration) -> Result<String, String> {
    use std::io::{Read, Write};
    let address: std::net::SocketAddr =
        format!("{ip}:{port}").parse().map_err(|e| format!("{e}"))?;
    let mut stream =
        std::net::TcpStream::connect_timeout(&address, within).map_err(|e| match e.kind() {
            std::io::ErrorKind::ConnectionRefused => "refused".to_string(),
            std::io::ErrorKind::TimedOut => "timeout".to_string(),
            _ => e.to_string(),
        })?;
    stream
        .set_read_timeout(Some(within))
        .map_err(|e| e.to_string())?;
    stream
        .write_all(b"GET /index.html HTTP/1.0\r\nHost: test\r\n\r\n")
        .map_err(|e| e.to_string())?;
    let mut response = String::new();
    stream
        .read_to_string(&mut response)
        .map_err(|e| e.to_string())?;
    let (head, body) = response.split_once("\r\n\r\n").ok_or("no HTTP answer")?;
    if head.split_whitespace().nth(1) == Some("200") {
        Ok(body.trim().to_string())
    } else {
        Err(head.to_string())
    }
}
