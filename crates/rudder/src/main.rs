//! `rudder`: Kubernetes in one small binary. This file is the CLI; the
//! wiring of each subcommand lives in its own module.

/// mimalloc for `rudder server`, the system's allocator otherwise.
#[global_allocator]
static ALLOCATOR: alloc::Allocator = alloc::Allocator;

mod agent;
mod alloc;
mod dns;
mod explain;
mod images;
mod join;
mod server;

use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(name = "rudder", version, about = "Kubernetes in one small binary")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the control plane on this machine.
    Server(Box<server::ServerArgs>),
    /// Join this machine to a cluster as a node (`--server URL --token
    /// TOKEN`) and run its pods.
    Agent(Box<agent::AgentArgs>),
    /// Print the server's join token (for `rudder agent --token`).
    Token(agent::TokenArgs),
    /// Explain why a pod is Pending (or went where it went): every node
    /// with each scheduler plugin's verdict and score.
    Explain(explain::ExplainArgs),
    /// Images for machines without a registry: import archives into the
    /// node's containerd, pack local images.
    #[command(subcommand)]
    Images(images::ImagesCommand),
    /// Stop every pod of this machine's agent, its containerd and its pod
    /// network (k3s-killall.sh).
    Killall(images::KillallArgs),
}

fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("RUDDER_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    match cli.command {
        Command::Server(args) => runtime.block_on(server::run(*args)),
        Command::Agent(args) => runtime.block_on(agent::run(*args)),
        Command::Token(args) => agent::token(args),
        Command::Explain(args) => runtime.block_on(explain::run(args)),
        Command::Images(command) => runtime.block_on(images::run(command)),
        Command::Killall(args) => runtime.block_on(images::killall(args)),
    }
}
