//! `streamkeeper-operator`: the operator binary.

use clap::{Args, Parser, Subcommand, ValueEnum};
use kube::Client;
use kube::runtime::events::Reporter;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;
use streamkeeper::controller::{Context, Settings};
use streamkeeper::leader::{LeaderElector, LeaseSettings, Lost, Renewals, RenewalsError};
use streamkeeper::leader::{Leadership, leader_only_builder};
use streamkeeper::telemetry::api_requests::CountedRequests;
use streamkeeper::telemetry::metrics::Metrics;
use tokio::sync::watch;

/// Kubernetes operator for exactly-once stateful stream jobs (StatefulStreamJob, streamkeeper.dev/v1alpha1).
#[derive(Parser, Debug)]
#[command(name = "streamkeeper-operator", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Print the StatefulStreamJob CustomResourceDefinition as YAML (pipe it to `kubectl apply -f -`).
    Crd,
    /// Run the operator: elect a leader through a Lease, then reconcile StatefulStreamJobs until
    /// SIGTERM (which releases the Lease so another replica takes over at once).
    Run(RunArgs),
    /// Benchmark: reconcile many jobs against the apiserver of KUBECONFIG and the given Kafka and
    /// S3, print reconcile latency p50/p99 and the process memory, and write them as JSON.
    BenchReconcile(BenchArgs),
}

#[derive(Args, Debug)]
struct BenchArgs {
    /// Number of StatefulStreamJobs.
    #[arg(long, default_value_t = 500)]
    jobs: usize,
    /// No-op passes over every job after the first pass.
    #[arg(long, default_value_t = 2)]
    passes: usize,
    #[arg(long, env = "SK_KAFKA_BOOTSTRAP")]
    bootstrap: String,
    /// Input topic (created with 3 partitions if missing).
    #[arg(long, default_value = "streamkeeper-bench-input")]
    input_topic: String,
    #[arg(long, env = "SK_S3_ENDPOINT")]
    s3_endpoint: String,
    #[arg(long, env = "SK_S3_BUCKET")]
    s3_bucket: String,
    #[arg(long, env = "SK_S3_REGION", default_value = "us-east-1")]
    s3_region: String,
    #[arg(long, env = "SK_S3_ACCESS_KEY")]
    s3_access_key: String,
    #[arg(long, env = "SK_S3_SECRET_KEY")]
    s3_secret_key: String,
    /// Give every job its own changelog and dead-letter topic (2 topics per job on the broker).
    #[arg(long)]
    own_topics: bool,
    /// Where to write the JSON result.
    #[arg(long, default_value = "bench-reconcile.json")]
    output: std::path::PathBuf,
}

#[derive(Args, Debug)]
struct RunArgs {
    /// Watch only this namespace (default: every namespace).
    #[arg(long, env = "STREAMKEEPER_NAMESPACE")]
    namespace: Option<String>,
    /// Address of the HTTP port serving /metrics and /healthz.
    #[arg(
        long,
        env = "STREAMKEEPER_METRICS_ADDR",
        default_value = "0.0.0.0:8080"
    )]
    metrics_addr: SocketAddr,
    /// Log format: human-readable text or one JSON object per line.
    #[arg(
        long,
        env = "STREAMKEEPER_LOG_FORMAT",
        value_enum,
        default_value = "text"
    )]
    log_format: LogFormat,
    /// Name of the coordination.k8s.io Lease used for leader election.
    #[arg(long, default_value = "streamkeeper-operator")]
    lease_name: String,
    /// Namespace of the Lease (default: --namespace, else `default`).
    #[arg(long, env = "POD_NAMESPACE")]
    lease_namespace: Option<String>,
    /// Identity written into the Lease; must differ between replicas (default: a unique id).
    #[arg(long, env = "POD_NAME")]
    identity: Option<String>,
    /// Seconds a silent leader's Lease is honoured before another replica takes over.
    #[arg(long, default_value_t = 15)]
    lease_duration_seconds: u64,
    /// Seconds the leader keeps leading without a successful renewal (less than the lease duration).
    #[arg(long, default_value_t = 10)]
    renew_deadline_seconds: u64,
    /// Seconds between leader election attempts and renewals.
    #[arg(long, default_value_t = 2)]
    retry_period_seconds: u64,
    /// Seconds a worker may take to answer the final checkpoint request before a suspend.
    #[arg(long, default_value_t = 60)]
    final_checkpoint_timeout_seconds: u64,
    /// This cluster's name, a DNS label, when several clusters share one Kafka or one S3 bucket
    /// (a disaster-recovery pair, staging beside production): it becomes part of every
    /// transactional id, consumer group, default topic name and S3 prefix the operator derives
    /// from a job, so same-named jobs of two clusters share none. Empty (the default) keeps the
    /// ids of a single cluster. Set it at install: changing it gives every job new ids.
    #[arg(long, env = "STREAMKEEPER_CLUSTER_NAME", default_value = "", value_parser = cluster_name)]
    cluster_name: String,
    /// Jobs reconciled at the same time; each reconcile talks to the apiserver, Kafka, S3 and
    /// the job's workers, so this bounds the load a mass restart puts on them (0: no limit).
    #[arg(
        long,
        env = "STREAMKEEPER_MAX_CONCURRENT_RECONCILES",
        default_value_t = 16
    )]
    max_concurrent_reconciles: u16,
}

#[derive(ValueEnum, Clone, Copy, Debug)]
enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, thiserror::Error)]
enum RunError {
    #[error("could not connect to the Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error("could not serve metrics on {addr}: {source}")]
    Metrics {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "lost the leader Lease ({0}); reconciles aborted, exiting so a fresh start competes again"
    )]
    LostLeadership(#[source] Lost),
    #[error("the lease timings must satisfy retry period < renew deadline < lease duration")]
    LeaseTimings,
    #[error("could not start the async runtime: {0}")]
    Runtime(#[source] std::io::Error),
    #[error(transparent)]
    Renewals(#[from] RenewalsError),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Crd => match streamkeeper::api::crd::crd_yaml() {
            Ok(yaml) => {
                print!("{yaml}");
                ExitCode::SUCCESS
            }
            Err(error) => {
                eprintln!("error: {error}");
                ExitCode::FAILURE
            }
        },
        Command::BenchReconcile(args) => {
            init_logging(LogFormat::Text);
            let result = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()
                .map_err(|e| e.to_string())
                .and_then(|runtime| runtime.block_on(bench(args)));
            match result {
                Ok(()) => ExitCode::SUCCESS,
                Err(error) => {
                    eprintln!("error: {error}");
                    ExitCode::FAILURE
                }
            }
        }
        Command::Run(args) => {
            init_logging(args.log_format);
            let result = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()
                .map_err(RunError::Runtime)
                .and_then(|runtime| {
                    let result = runtime.block_on(run(args));
                    // Blocking calls still running (librdkafka metadata, up to its timeout) must
                    // not delay the exit: after a lost Lease nothing of this process may go on.
                    runtime.shutdown_background();
                    result
                });
            match result {
                Ok(()) => ExitCode::SUCCESS,
                Err(error) => {
                    tracing::error!(%error, "operator stopped");
                    ExitCode::FAILURE
                }
            }
        }
    }
}

fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().flatten_event(true).init(),
    }
}

fn default_identity() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or_default();
    format!("streamkeeper-operator-{}-{nanos:x}", std::process::id())
}

/// Resolves when SIGTERM or Ctrl-C arrives.
async fn termination_signal() {
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(term) => term,
                Err(error) => {
                    tracing::warn!(%error, "cannot listen for SIGTERM; Ctrl-C only");
                    let _ = tokio::signal::ctrl_c().await;
                    return;
                }
            };
        tokio::select! {
            _ = term.recv() => {}
            _ = tokio::signal::ctrl_c() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

async fn bench(args: BenchArgs) -> Result<(), String> {
    let client = Client::try_default().await.map_err(|e| e.to_string())?;
    let kafka = streamkeeper::adapters::kafka_admin::KafkaAdmin::connect(&args.bootstrap, None)
        .map_err(|e| e.to_string())?;
    if kafka
        .topic(&args.input_topic)
        .await
        .map_err(|e| e.to_string())?
        .is_none()
    {
        let topic = streamkeeper::adapters::kafka_admin::DesiredTopic {
            name: args.input_topic.clone(),
            partitions: 3,
            replication_factor: None,
            config: Default::default(),
        };
        kafka.create(&topic).await.map_err(|e| e.to_string())?;
    }
    let settings = streamkeeper::bench::BenchSettings {
        jobs: args.jobs,
        bootstrap: args.bootstrap,
        input_topic: args.input_topic,
        s3_endpoint: args.s3_endpoint,
        s3_bucket: args.s3_bucket,
        s3_region: args.s3_region,
        s3_access_key: args.s3_access_key,
        s3_secret_key: args.s3_secret_key,
        own_topics: args.own_topics,
        passes: args.passes,
    };
    let result = streamkeeper::bench::run(client, settings)
        .await
        .map_err(|e| e.to_string())?;
    let json = serde_json::to_string_pretty(&result).map_err(|e| e.to_string())?;
    std::fs::write(&args.output, format!("{json}\n")).map_err(|e| e.to_string())?;
    println!("wrote {}", args.output.display());
    Ok(())
}

async fn fired(mut receiver: watch::Receiver<bool>) {
    let _ = receiver.wait_for(|fired| *fired).await;
}

async fn run(args: RunArgs) -> Result<(), RunError> {
    let lease_duration = Duration::from_secs(args.lease_duration_seconds);
    let renew_deadline = Duration::from_secs(args.renew_deadline_seconds);
    let retry_period = Duration::from_secs(args.retry_period_seconds);
    if !(retry_period < renew_deadline && renew_deadline < lease_duration) {
        return Err(RunError::LeaseTimings);
    }
    let config = kube::Config::infer()
        .await
        .map_err(kube::Error::InferConfig)?;
    // The Lease is read and written without the write guard: it is how leadership is kept.
    // Renewals have a client of their own, on their own thread (see `leader::renewals`).
    let lease_client = Client::try_from(config.clone())?;
    let renewal_config = config.clone();
    let leadership = Leadership::elected();
    let metrics = Arc::new(Metrics::new());
    let client = leader_only_builder(config, &leadership)?
        .with_layer(&CountedRequests::new(Arc::clone(&metrics)))
        .build();

    let (stop_sender, stop) = watch::channel(false);
    tokio::spawn(async move {
        termination_signal().await;
        tracing::info!("termination signal: finishing reconciles, then releasing the Lease");
        let _ = stop_sender.send(true);
    });

    let (bound, server) = streamkeeper::telemetry::http::serve(
        args.metrics_addr,
        Arc::clone(&metrics),
        fired(stop.clone()),
    )
    .await
    .map_err(|source| RunError::Metrics {
        addr: args.metrics_addr,
        source,
    })?;
    tracing::info!(address = %bound, "serving /metrics and /healthz");
    let server = tokio::spawn(server);

    let identity = args.identity.clone().unwrap_or_else(default_identity);
    let lease_namespace = args
        .lease_namespace
        .clone()
        .or_else(|| args.namespace.clone())
        .unwrap_or_else(|| "default".into());
    let settings = LeaseSettings {
        lease_duration,
        renew_deadline,
        retry_period,
        ..LeaseSettings::new(lease_namespace, args.lease_name.clone(), identity.clone())
    };
    let elector = LeaderElector::new(lease_client, settings.clone(), leadership.clone());
    tracing::info!(%identity, lease = %args.lease_name, "waiting to lead");
    let mut waiting = stop.clone();
    if !elector.acquire(&mut waiting).await {
        tracing::info!("stopped before leading");
        let _ = server.await;
        return Ok(());
    }
    tracing::info!(%identity, namespace = ?args.namespace, "leading: reconciling StatefulStreamJobs");
    metrics.set_leader(true);
    let renewals = Renewals::start(renewal_config, settings, leadership)?;
    let result = lead(&args, renewals, client, &metrics, identity, &stop).await;
    metrics.set_leader(false);
    result?;
    let _ = server.await;
    Ok(())
}

/// Reconciles while this process leads. `Err` as soon as the Lease is lost; `Ok` once SIGTERM
/// has drained the reconciles (still renewing meanwhile) and the Lease is released.
async fn lead(
    args: &RunArgs,
    mut renewals: Renewals,
    client: Client,
    metrics: &Arc<Metrics>,
    identity: String,
    stop: &watch::Receiver<bool>,
) -> Result<(), RunError> {
    let reporter = Reporter {
        controller: "streamkeeper-operator".into(),
        instance: Some(identity),
    };
    let cluster_id = cluster_id(&client).await;
    let ctx = Arc::new(
        Context::new(
            client,
            reporter,
            Arc::clone(metrics),
            Settings {
                final_checkpoint_timeout: Duration::from_secs(
                    args.final_checkpoint_timeout_seconds,
                ),
                cluster: Some(args.cluster_name.clone()).filter(|name| !name.is_empty()),
                cluster_id,
            },
        )
        .with_leadership(renewals.leadership().clone()),
    );
    // SIGTERM: the controller finishes its reconciles while the Lease is still renewed, then
    // the Lease is released. A lost Lease: the controller is dropped at once, aborting the
    // reconciles in flight (their writes are refused already by the expired deadline).
    let controller = streamkeeper::controller::run::run(
        ctx,
        args.namespace.clone(),
        args.max_concurrent_reconciles,
        fired(stop.clone()),
    );
    tokio::select! {
        lost = renewals.lost() => {
            tracing::error!(%lost, "lost the leader Lease; aborting reconciles and exiting");
            return Err(RunError::LostLeadership(lost));
        }
        () = controller => {}
    }
    if let Err(error) = renewals.release().await {
        tracing::warn!(%error, "could not release the Lease; another replica takes over when it expires");
    } else {
        tracing::info!("released the leader Lease");
    }
    Ok(())
}

/// `--cluster-name`: empty, or a DNS label (it goes into Kafka ids, topic names and S3 keys).
fn cluster_name(text: &str) -> Result<String, String> {
    streamkeeper::k8s::names::check_cluster_name(text).map(|()| text.to_string())
}

/// This cluster's id for the jobs' S3 owner markers: the `kube-system` namespace's uid, which no
/// other cluster shares. `None` (logged) when the operator may not read it (the chart grants it
/// with a ClusterRole only, not with `watchNamespace`): the markers then tell clusters apart by
/// `--cluster-name` alone.
async fn cluster_id(client: &Client) -> Option<String> {
    let namespaces: kube::Api<k8s_openapi::api::core::v1::Namespace> =
        kube::Api::all(client.clone());
    match namespaces.get("kube-system").await {
        Ok(namespace) => namespace.metadata.uid,
        Err(error) => {
            tracing::warn!(%error, "cannot read the kube-system namespace: the S3 owner markers name this cluster by --cluster-name only");
            None
        }
    }
}
