//! `rudder-bench <scenario> [--quick]`: runs one benchmark scenario, prints
//! one JSON object as its last line (ARCHITECTURE.md §8) and, on a full run
//! only (not `--quick`, not cut short by a development switch), rewrites the
//! scenario's section of docs/benchmarks.md.

/// mimalloc: the many small allocations of JSON objects cost a quarter
/// of the API server's CPU under glibc's malloc.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod api;
mod apply;
mod controllers;
mod dns;
mod gc;
mod node;
mod plane;
mod report;
mod scheduler;
mod services;
mod store;
mod streams;

use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(name = "rudder-bench", about = "rudder's benchmark scenarios")]
struct Cli {
    #[command(subcommand)]
    scenario: Scenario,
}

#[derive(Debug, Subcommand)]
enum Scenario {
    /// The store: write throughput and latency, watch delivery, large lists,
    /// side by side with a single-member etcd on the same machine.
    Store(Options),
    /// The API server: Pod creates, GET latency, large LISTs, watch
    /// fan-out, idle memory and start-up, over HTTPS with kube-rs.
    Api(Options),
    /// Strategic merge patch and server-side apply: server-side cost per
    /// object, the same requests over HTTPS, and `kubectl apply` of 1,000
    /// objects.
    Apply(Options),
    /// The garbage collector and namespace controller: an owner with 10,000
    /// dependents deleted in each propagation mode, a namespace with 10,000
    /// objects deleted, each beside the controller's own requests for them
    /// made plainly on the same in-process path.
    Gc(Options),
    /// The workload controllers: a 10,000-replica Deployment until its pods
    /// exist, beside the same 10,000 Pods created plainly on the same
    /// in-process path; memory and idle CPU with them; a rollout of a
    /// 1,000-replica Deployment.
    Controllers(Options),
    /// The scheduler: upstream's scheduler_perf workloads on fake nodes,
    /// beside plain bindings of the same pods.
    Scheduler(Options),
    /// The service proxy in network namespaces: programming 10,000
    /// Services (cold, replaced, one on top, endpoint changes) beside
    /// upstream's nftables layout through the same nft; connect latency
    /// through a ClusterIP with 1 and 10,000 Services; throughput through
    /// a ClusterIP against the pod's address. Needs root.
    Services(Options),
    /// (the services bench's client, in its namespace)
    #[command(hide = true)]
    ConnectProbe {
        #[arg(long)]
        target: std::net::SocketAddr,
        #[arg(long)]
        count: usize,
    },
    /// (the services bench's programming phases, in the node's namespace)
    #[command(hide = true)]
    ServicesProgram {
        #[arg(long)]
        phase: String,
        #[arg(long)]
        services: usize,
        #[arg(long)]
        endpoints: usize,
        #[arg(long)]
        changes: usize,
    },
    /// (the services bench's DNS server, in a process of its own)
    #[command(hide = true)]
    DnsServe {
        #[arg(long)]
        listen: std::net::SocketAddr,
        #[arg(long)]
        services: usize,
        #[arg(long)]
        endpoints: usize,
    },
    /// (the services bench's server, in its namespace)
    #[command(hide = true)]
    TcpSink {
        #[arg(long)]
        port: u16,
    },
    /// One real node: pods started by `rudder server`'s agent on
    /// containerd, beside the same pods started directly (their volumes set
    /// up by the agent's code, then direct CRI calls); the server's memory
    /// and idle CPU with 100 pods. Needs root.
    Node(Options),
    /// exec and port-forward into a pod through the API server and the
    /// agent, beside the same exec straight at the runtime's streaming
    /// server and the same copy straight to the pod's address. Needs root.
    Streams(Options),
}

#[derive(Debug, Clone, clap::Args)]
pub struct Options {
    /// A smaller run that finishes within a minute.
    #[arg(long)]
    pub quick: bool,
    /// Where the stores under test keep their files (a real disk, not tmpfs).
    #[arg(long, default_value = "/var/tmp")]
    pub work_dir: std::path::PathBuf,
    /// The docs/benchmarks.md a full run updates.
    #[arg(long, default_value = "docs/benchmarks.md")]
    pub doc: std::path::PathBuf,
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let (report, options) = match cli.scenario {
        Scenario::Store(options) => (runtime.block_on(store::run(&options))?, options),
        Scenario::Api(options) => (runtime.block_on(api::run(&options))?, options),
        Scenario::Apply(options) => (runtime.block_on(apply::run(&options))?, options),
        Scenario::Gc(options) => (runtime.block_on(gc::run(&options))?, options),
        Scenario::Controllers(options) => (runtime.block_on(controllers::run(&options))?, options),
        Scenario::Scheduler(options) => (runtime.block_on(scheduler::run(&options))?, options),
        Scenario::Node(options) => (runtime.block_on(node::run(&options))?, options),
        Scenario::Services(options) => (runtime.block_on(services::run(&options))?, options),
        Scenario::Streams(options) => (runtime.block_on(streams::run(&options))?, options),
        Scenario::ConnectProbe { target, count } => return services::connect_probe(target, count),
        Scenario::TcpSink { port } => return services::tcp_sink(port),
        Scenario::DnsServe {
            listen,
            services,
            endpoints,
        } => return runtime.block_on(dns::serve(listen, services, endpoints)),
        Scenario::ServicesProgram {
            phase,
            services,
            endpoints,
            changes,
        } => {
            return runtime.block_on(services::program(&phase, services, endpoints, changes));
        }
    };
    match report.not_for_doc() {
        None => {
            report.update_doc(&options.doc)?;
            eprintln!("updated {}", options.doc.display());
        }
        Some(why) => eprintln!("{why}: did not update {}", options.doc.display()),
    }
    println!("{}", report.json());
    Ok(())
}
