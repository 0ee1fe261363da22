//! The worker's command line, for the stock binary and for a user's own: a [`Worker`] holds the
//! processors the binary offers and runs `run` or `check-config` with them.
//!
//! A worker refuses a config before it runs any task: a bad file, a processor its binary does
//! not offer, or settings the processor refuses. `check-config` says so and exits 1; `run` prints
//! the reason as its last line and exits with [`CONFIG_REFUSED_EXIT_CODE`], which the operator
//! reads from the pod as the job's `Invalid` condition.

use crate::checkpoint::{self, module::ModuleError};
use crate::processor::{ConfigError, CustomProcessor, JobProcessor, RegistrationError, Registry};
use crate::runtime::{self, TaskShare};
use clap::{Args, Parser, Subcommand, ValueEnum};
use std::path::PathBuf;
use std::process::ExitCode;
use streamkeeper_contract::worker_config::{CONFIG_REFUSED_EXIT_CODE, ProcessorKind};
use streamkeeper_contract::{FormatError, Versioned, WorkerConfig};

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
    /// This pod's name, ending in `-<ordinal>` as StatefulSet pods do.
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
    #[error("{path}: processor: {source}")]
    Processor {
        path: String,
        #[source]
        source: ConfigError,
    },
    #[error("{0}")]
    Module(#[from] ModuleError),
    #[error("cannot start the runtime that fetches the WebAssembly module: {0}")]
    Runtime(#[source] std::io::Error),
}

/// Whether [`load`] fetches a WebAssembly processor's module (`run`), or checks the settings
/// alone (`check-config`, which needs no S3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Module {
    Fetch,
    Skip,
}

/// Reads and checks the config, and resolves its processor among `registry`'s.
fn load(
    args: &ConfigArgs,
    registry: &Registry,
    module: Module,
) -> Result<(WorkerConfig, JobProcessor), LoadError> {
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
    config.check().map_err(|source| LoadError::Format {
        path: path.clone(),
        source,
    })?;
    let bytes = match (&config.processor.kind, module) {
        (ProcessorKind::Wasm { module: source, .. }, Module::Fetch) => {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(LoadError::Runtime)?;
            let s3 = config.checkpoint.s3.as_ref();
            let started = std::time::Instant::now();
            let bytes =
                runtime.block_on(checkpoint::module::fetch(source, s3, &config.state.dir))?;
            tracing::info!(module = %checkpoint::module::location(source, s3), bytes = bytes.len(), seconds = started.elapsed().as_secs_f64(), "WebAssembly module fetched and its digest checked");
            Some(bytes)
        }
        _ => None,
    };
    let started = std::time::Instant::now();
    let processor = registry
        .resolve_with(&config.processor, bytes.as_deref())
        .map_err(|source| LoadError::Processor { path, source })?;
    if bytes.is_some() {
        tracing::info!(
            seconds = started.elapsed().as_secs_f64(),
            "WebAssembly module compiled, and an instance took its config"
        );
    }
    Ok((config, processor))
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

/// A worker binary: the built-in processors and the ones it registers, run by its command
/// line.
///
/// The stock `streamkeeper-worker` is `Worker::new().main()`. A binary with processors of its
/// own registers them first; a job then names one (`processor: {type: custom, custom: {name:
/// velocity-check, config: {…}}}`) and runs the binary's image:
///
/// ```no_run
/// # use streamkeeper_worker::{CustomProcessor, Worker};
/// # struct Velocity;
/// # impl streamkeeper_worker::Processor for Velocity {
/// #     fn kind(&self) -> &'static str { "velocity-check" }
/// #     fn process(&self, _: &streamkeeper_worker::InputRecord<'_>, _: &mut dyn streamkeeper_worker::StateAccess)
/// #         -> Result<streamkeeper_worker::ProcessOutput, streamkeeper_worker::ProcessError> { Ok(Default::default()) }
/// # }
/// fn main() -> std::process::ExitCode {
///     Worker::new()
///         .processor(CustomProcessor::new("velocity-check", 1, |_settings| Ok(Velocity)))
///         .main()
/// }
/// ```
#[derive(Debug, Default)]
pub struct Worker {
    registry: Registry,
    /// The first registration that failed: the binary refuses to run with it.
    refused: Option<RegistrationError>,
}

impl Worker {
    /// A worker with the built-in processors only.
    pub fn new() -> Self {
        Self::default()
    }

    /// Offers `processor` under its name. A name that is taken or that a job cannot name makes
    /// [`Worker::main`] refuse to run, saying which.
    pub fn processor(mut self, processor: CustomProcessor) -> Self {
        if self.refused.is_none()
            && let Err(error) = self.registry.register(processor)
        {
            self.refused = Some(error);
        }
        self
    }

    /// Parses the command line and runs it: the worker's `main`.
    pub fn main(self) -> ExitCode {
        let cli = Cli::parse();
        if let Some(error) = &self.refused {
            eprintln!("error: {error}");
            return ExitCode::FAILURE;
        }
        match cli.command {
            Command::CheckConfig(args) => match load(&args, &self.registry, Module::Skip) {
                Ok((config, _)) => {
                    print!("{}", config.to_yaml());
                    ExitCode::SUCCESS
                }
                Err(error) => {
                    eprintln!("error: {error}");
                    ExitCode::FAILURE
                }
            },
            Command::Run(args) => self.run(args),
        }
    }

    fn run(&self, args: RunArgs) -> ExitCode {
        init_logging(args.log_format);
        let (config, processor) = match load(&args.config, &self.registry, Module::Fetch) {
            Ok(loaded) => loaded,
            Err(error) => {
                // One plain line, the last the process writes: the pod's termination message.
                eprintln!("refusing to start: {error}");
                return ExitCode::from(u8::try_from(CONFIG_REFUSED_EXIT_CODE).unwrap_or(1));
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
        match runtime::run(config, processor, share, args.pod_name.clone()) {
            Ok(()) => ExitCode::SUCCESS,
            Err(error) => {
                tracing::error!(%error, "worker failed");
                ExitCode::FAILURE
            }
        }
    }
}
