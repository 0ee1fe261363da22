//! `streamkeeper-fleet-workers`: serves the worker HTTP contract for every simulated worker pod
//! of the cluster in `KUBECONFIG` (KWOK pods with loopback addresses), with a control API for
//! faults. See the library's docs; the control API's routes are in `control.rs`.
//!
//! Each pod takes a listening socket, and each call of the operator a connection: 4,000 pods
//! need well over 4,000 descriptors. The process cannot raise its own limit without `unsafe`
//! (or a crate the workspace does not carry), so it checks the limit at start and says what to
//! run: `ulimit -n 65536` in the shell that launches it.

use anyhow::Context;
use clap::Parser;
use std::net::SocketAddr;
use streamkeeper_fleet_workers::discover::{self, Selection};
use streamkeeper_fleet_workers::{Fleet, control};

/// Answers the worker HTTP contract for every simulated (KWOK) worker pod.
#[derive(Parser, Debug)]
#[command(name = "streamkeeper-fleet-workers", version, about)]
struct Options {
    /// The port each pod listens on, at its own address (the operator's worker port).
    #[arg(long, env = "SK_FLEET_PORT", default_value_t = 8080)]
    port: u16,
    /// Where the control API listens.
    #[arg(long, env = "SK_FLEET_CONTROL", default_value = "127.0.0.1:18090")]
    control: SocketAddr,
    /// Serve only the pods added through the control API (`PUT /pods/{ip}`); no apiserver.
    #[arg(long)]
    no_watch: bool,
    /// Label selector of the worker pods to serve.
    #[arg(long, default_value = discover::WORKER_SELECTOR)]
    labels: String,
    /// Serve only pods on nodes whose name starts with this (tests/services/kwok.sh's nodes).
    #[arg(long, default_value = "kwok-node-")]
    node_prefix: String,
    /// Descriptors needed at least (pods × 2 and some): below it the process refuses to start.
    #[arg(long, default_value_t = 1024)]
    min_open_files: u64,
}

fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    let options = Options::parse();
    check_open_files(options.min_open_files)?;
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the runtime")?
        .block_on(run(options))
}

async fn run(options: Options) -> anyhow::Result<()> {
    let fleet = Fleet::new(options.port);
    let listener = tokio::net::TcpListener::bind(options.control)
        .await
        .with_context(|| format!("binding the control API to {}", options.control))?;
    tracing::info!(control = %options.control, port = options.port, "fleet workers up");
    let control = tokio::spawn(control::serve(listener, fleet.clone()));
    let watch = if options.no_watch {
        None
    } else {
        let client = kube::Client::try_default()
            .await
            .context("connecting to the apiserver (KUBECONFIG)")?;
        let selection = Selection {
            labels: options.labels,
            node_prefix: options.node_prefix,
        };
        Some(tokio::spawn(discover::run(
            client,
            fleet.clone(),
            selection,
        )))
    };
    tokio::select! {
        stopped = tokio::signal::ctrl_c() => stopped.context("waiting for a signal")?,
        ended = control => ended.context("the control API task")?.context("the control API")?,
        ended = async { match watch { Some(task) => task.await, None => std::future::pending().await } } => {
            ended.context("the pod watch task")?.context("the pod watch")?;
        }
    }
    tracing::info!(pods = fleet.addresses().len(), "stopping");
    Ok(())
}

/// Fails when the soft limit on open files is below `needed`, saying how to raise it.
fn check_open_files(needed: u64) -> anyhow::Result<()> {
    let limits = std::fs::read_to_string("/proc/self/limits").unwrap_or_default();
    let soft = limits
        .lines()
        .find(|line| line.starts_with("Max open files"))
        .and_then(|line| line.split_whitespace().nth(3))
        .and_then(|value| value.parse::<u64>().ok());
    match soft {
        Some(soft) if soft < needed => anyhow::bail!(
            "the open-file limit is {soft}, below the {needed} this fleet needs: run `ulimit -n {}` first",
            needed.max(65_536)
        ),
        Some(soft) => tracing::info!(soft, "open-file limit"),
        None => tracing::warn!("cannot read the open-file limit"),
    }
    Ok(())
}
