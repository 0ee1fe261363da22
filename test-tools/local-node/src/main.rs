//! `streamkeeper-local-node`: a node agent for the loopback test control plane, in the spirit of
//! a kubelet with no container runtime. It registers a Node, provisions a directory-backed
//! PersistentVolume for every pending claim, and runs each container of the Pods scheduled to it
//! as a local process: the image is mapped to a local executable, command and args are kept,
//! environment (values, field refs, ConfigMap and Secret refs) is resolved, volumes become
//! directories (a PVC keeps its directory across pod restarts), and every pod gets its own
//! loopback address as `status.podIP`. Readiness and liveness probes (HTTP GET) are honoured,
//! crashed containers restart per `restartPolicy`, and a deleted pod gets SIGTERM, its grace
//! period, then SIGKILL — so a StatefulSet behaves as in a cluster, without Docker. A pod's
//! processes get its ServiceAccount's token (as a kubeconfig in `KUBECONFIG`), so an operator run
//! as a pod talks to the apiserver with its own RBAC.

mod container;
mod launch;
mod node;
mod pods;
mod probe;
mod projection;
mod provisioner;
mod status;
mod termination;
mod token;

use clap::Parser;
use std::path::PathBuf;
use std::process::ExitCode;

/// Runs the Pods scheduled to one Node as local processes (for tests and the demo).
#[derive(Parser, Debug, Clone)]
#[command(name = "streamkeeper-local-node", version, about)]
pub struct Options {
    /// Node name to register.
    #[arg(long, env = "SK_NODE_NAME", default_value = "sk-local-node")]
    pub node_name: String,
    /// Directory for pod volumes, claims and logs.
    #[arg(long, env = "SK_NODE_ROOT")]
    pub root: PathBuf,
    /// `IMAGE=EXECUTABLE`: run containers of IMAGE (a prefix of the image reference, up to the
    /// tag) as EXECUTABLE. Repeat for each image.
    #[arg(long = "image", value_parser = parse_image_mapping, required_unless_present = "provision_only_for")]
    pub images: Vec<(String, PathBuf)>,
    /// First loopback address handed to a pod (127.0.0.x; x counts up from here).
    #[arg(long, default_value_t = 10)]
    pub first_pod_address: u8,
    /// `KEY=VALUE:EFFECT` taint on the node, so only pods that tolerate it are scheduled here.
    #[arg(long)]
    pub taint: Option<String>,
    /// Namespaces whose pending claims get a local volume (all when omitted).
    #[arg(long = "provision-namespace")]
    pub provision_namespaces: Vec<String>,
    /// `KEY=VALUE` label on the node besides the hostname and OS ones, e.g. a zone
    /// (`topology.kubernetes.io/zone=zone-a`). Repeat for each label.
    #[arg(long = "label", value_parser = parse_label)]
    pub labels: Vec<(String, String)>,
    /// Be only the volume provisioner for NODE, a real kubelet's node: no node of its own, no
    /// pods; each pending claim gets a `local` volume pinned to NODE.
    #[arg(long, value_name = "NODE")]
    pub provision_only_for: Option<String>,
    /// How often the files a ConfigMap or Secret projects into a running pod are brought up
    /// to date (a kubelet takes up to about a minute).
    #[arg(long, default_value_t = 5)]
    pub volume_refresh_seconds: u64,
}

fn parse_label(raw: &str) -> Result<(String, String), String> {
    match raw.split_once('=') {
        Some((key, value)) if !key.is_empty() => Ok((key.to_string(), value.to_string())),
        _ => Err(format!("expected KEY=VALUE, got {raw:?}")),
    }
}

fn parse_image_mapping(raw: &str) -> Result<(String, PathBuf), String> {
    let (image, executable) = raw
        .split_once('=')
        .ok_or_else(|| format!("expected IMAGE=EXECUTABLE, got {raw:?}"))?;
    if image.is_empty() || executable.is_empty() {
        return Err(format!("expected IMAGE=EXECUTABLE, got {raw:?}"));
    }
    Ok((image.to_string(), PathBuf::from(executable)))
}

#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error("{what}: {source}")]
    Kube {
        what: String,
        #[source]
        source: kube::Error,
    },
    #[error("{what} {path}: {source}")]
    Io {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot start the async runtime: {0}")]
    Runtime(#[source] std::io::Error),
}

impl AgentError {
    pub fn kube(what: impl Into<String>) -> impl FnOnce(kube::Error) -> Self {
        let what = what.into();
        move |source| Self::Kube { what, source }
    }

    pub fn io(what: &'static str, path: &std::path::Path) -> impl FnOnce(std::io::Error) -> Self {
        let path = path.to_path_buf();
        move |source| Self::Io { what, path, source }
    }
}

fn main() -> ExitCode {
    let options = Options::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    let result = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(AgentError::Runtime)
        .and_then(|runtime| runtime.block_on(run(options)));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            tracing::error!(%error, "local node stopped");
            ExitCode::FAILURE
        }
    }
}

async fn run(options: Options) -> Result<(), AgentError> {
    let client = kube::Client::try_default()
        .await
        .map_err(AgentError::kube("connecting to the apiserver"))?;
    std::fs::create_dir_all(&options.root).map_err(AgentError::io("creating", &options.root))?;
    if let Some(node) = &options.provision_only_for {
        tracing::info!(%node, root = %options.root.display(), "provisioning volumes for a kubelet's node");
        let provisioner = tokio::spawn(provisioner::run(client, options.clone()));
        wait_for_stop().await?;
        provisioner.abort();
        return Ok(());
    }
    node::register(
        &client,
        &options.node_name,
        options.taint.as_deref(),
        &options.labels,
    )
    .await?;
    tracing::info!(node = %options.node_name, root = %options.root.display(), "node registered");

    let heartbeat = tokio::spawn(node::heartbeat(client.clone(), options.node_name.clone()));
    let provisioner = tokio::spawn(provisioner::run(client.clone(), options.clone()));
    let mut pods = pods::PodRunner::new(client, options);
    let mut tick = tokio::time::interval(std::time::Duration::from_millis(500));
    let stop = wait_for_stop();
    tokio::pin!(stop);
    loop {
        tokio::select! {
            _ = tick.tick() => pods.sync().await,
            stopped = &mut stop => { stopped?; break; }
        }
    }
    tracing::info!("stopping: terminating every local container");
    heartbeat.abort();
    provisioner.abort();
    pods.stop_all().await;
    Ok(())
}

/// Returns on SIGINT or SIGTERM.
async fn wait_for_stop() -> Result<(), AgentError> {
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(|e| AgentError::Io {
        what: "installing the SIGTERM handler",
        path: PathBuf::new(),
        source: e,
    })?;
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = terminate.recv() => {}
    }
    Ok(())
}
