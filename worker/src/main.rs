//! `streamkeeper-worker`: the worker binary.

use clap::{Args, Parser, Subcommand, ValueEnum};
use std::path::PathBuf;
use std::process::ExitCode;
use streamkeeper_contract::{FormatError, Versioned, WorkerConfig};
use streamkeeper_worker::runtime::{self, TaskShare};

/// The streamkeeper worker: exactly-once stateful processing on RocksDB with a Kafka changelog.
#[derive(Parser, Debug)]
#[command(name = "streamkeeper-worker", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run the job's tasks in this process: every partition (standalone mode), or with
    /// `--replicas` this StatefulSet pod's share of them.
    Run(RunArgs),
    /// Read and check a worker config file, then print it back normalized. Exits non-zero with
    /// a message naming the bad field.
    CheckConfig(ConfigArgs),
}

#[derive(Args, Debug)]
struct ConfigArgs {
    /// Worker config (YAML or JSON), as the operator renders it.
    #[arg(long, env = "STREAMKEEPER_CONFIG")]
    config: PathBuf,
    /// Override `state.dir`: where each task's RocksDB lives (the persistent volume).
    #[arg(long, env = "STREAMKEEPER_STATE_DIR")]
    state_dir: Option<PathBuf>,
    /// Override `http.listen`: address of /healthz, /readyz, /metrics, /v1/tasks and /v1/checkpoints.
    #[arg(long, env = "STREAMKEEPER_HTTP_LISTEN")]
    http_listen: Option<String>,
    /// Override `kafka.bootstrapServers`.
    #[arg(long, env = "STREAMKEEPER_KAFKA_BOOTSTRAP")]
    kafka_bootstrap: Option<String>,
    /// Override `http.tokenFile`: the file holding the token that `POST /v1/checkpoints` (every
    /// request but a read) must carry as `Authorization: Bearer <token>`. Without one, such
    /// requests are refused.
    #[arg(long, env = "STREAMKEEPER_HTTP_TOKEN_FILE")]
    http_token_file: Option<PathBuf>,
}

#[derive(Args, Debug)]
struct RunArgs {
    #[command(flatten)]
    config: ConfigArgs,
    /// Log format: `json` in clusters, `text` for people.
    #[arg(long, env = "STREAMKEEPER_LOG_FORMAT", default_value = "text")]
    log_format: LogFormat,
    /// Number of worker pods sharing the job: until the operator's first assignment document,
    /// this pod runs task i when i mod replicas is its ordinal (from --pod-name). Without it, a
    /// pod with a name runs nothing until that document, and a worker without one every task.
    #[arg(long, env = "STREAMKEEPER_REPLICAS", requires = "pod_name")]
    replicas: Option<u32>,
    /// This pod's name, ending in -<ordinal> as StatefulSet pods do.
    #[arg(long, env = "POD_NAME")]
    pod_name: Option<String>,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum LogFormat {
    Json,
    Text,
}

#[derive(Debug, thiserror::Error)]
enum LoadError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: {source}")]
    Format {
        path: String,
        #[source]
        source: FormatError,
    },
}

fn load(args: &ConfigArgs) -> Result<WorkerConfig, LoadError> {
    let path = args.config.display().to_string();
    let text = std::fs::read_to_string(&args.config).map_err(|source| LoadError::Read {
        path: path.clone(),
        source,
    })?;
    let mut config = WorkerConfig::from_yaml(&text).map_err(|source| LoadError::Format {
        path: path.clone(),
        source,
    })?;
    if let Some(dir) = &args.state_dir {
        config.state.dir = dir.clone();
    }
    if let Some(listen) = &args.http_listen {
        config.http.listen = listen.clone();
    }
    if let Some(bootstrap) = &args.kafka_bootstrap {
        config.kafka.bootstrap_servers = bootstrap.clone();
    }
    if let Some(file) = &args.http_token_file {
        config.http.token_file = Some(file.clone());
    }
    config
        .check()
        .map_err(|source| LoadError::Format { path, source })?;
    Ok(config)
}

fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Json => builder.json().init(),
        LogFormat::Text => builder.init(),
    }
}

fn main() -> ExitCode {
    match Cli::parse().command {
        Command::CheckConfig(args) => match load(&args) {
            Ok(config) => {
                print!("{}", config.to_yaml());
                ExitCode::SUCCESS
            }
            Err(error) => {
                eprintln!("error: {error}");
                ExitCode::FAILURE
            }
        },
        Command::Run(args) => {
            init_logging(args.log_format);
            let config = match load(&args.config) {
                Ok(config) => config,
                Err(error) => {
                    tracing::error!(%error, "refusing to start");
                    return ExitCode::FAILURE;
                }
            };
            let share = match (args.replicas, args.pod_name.as_deref()) {
                (Some(replicas), Some(pod)) => match TaskShare::of_pod(pod, replicas) {
                    Ok(share) => share,
                    Err(error) => {
                        tracing::error!(%error, "refusing to start");
                        return ExitCode::FAILURE;
                    }
                },
                (None, Some(_)) => TaskShare::Assigned,
                (_, None) => TaskShare::All,
            };
            let pod = args.pod_name.clone();
            match runtime::run(config, share, pod) {
                Ok(()) => ExitCode::SUCCESS,
                Err(error) => {
                    tracing::error!(%error, "worker failed");
                    ExitCode::FAILURE
                }
            }
        }
    }
}
