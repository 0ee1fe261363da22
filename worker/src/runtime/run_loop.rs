//! The run loop of a worker process, standalone or as a pod. Standalone, one worker runs every
//! partition of a job as an active task (the demo and the worker tests use it); as a StatefulSet
//! pod, it runs what the operator's assignment documents say (nothing before the first, or a
//! static share when started by hand with `--replicas`; after a restart, the recorded one when no
//! operator sends any). Task threads do the Kafka and RocksDB work; the async runtime only serves
//! HTTP and waits for signals.
//!
//! Requests that change the worker (`POST /v1/checkpoints`) need the token in `http.tokenFile`
//! (or `--http-token-file`), as in a cluster; with none configured they are refused, never open.

use super::assignment::Assignments;
use super::http;
use super::share::TaskShare;
use crate::board::TaskBoard;
use crate::checkpoint::CheckpointService;
use crate::kafka_client;
use crate::metrics::WorkerMetrics;
use crate::processor::JobProcessor;
use crate::store::BlockCache;
use crate::task::WorkerContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use streamkeeper_contract::WorkerConfig;
use streamkeeper_contract::restore_request::RESTORE_REQUEST_ENV;

/// Why the worker process could not run.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("cannot listen on {address}: {source}")]
    Listen {
        address: String,
        #[source]
        source: std::io::Error,
    },
    #[error("kafka client setup: {0}")]
    Setup(#[from] kafka_client::KafkaSetupError),
    #[error("checkpoint storage: {0}")]
    Checkpoints(#[from] crate::checkpoint::CheckpointError),
    #[error("cannot start the async runtime: {0}")]
    Runtime(#[source] std::io::Error),
    #[error("cannot create the Kafka client that discovers the input partitions: {0}")]
    Client(#[source] rdkafka::error::KafkaError),
    #[error("the partition discovery thread failed: {0}")]
    Discovery(#[source] tokio::task::JoinError),
    #[error("{RESTORE_REQUEST_ENV} holds no valid restore request: {0}")]
    RestoreRequest(#[source] streamkeeper_contract::FormatError),
    #[error(transparent)]
    TokenFile(#[from] http::TokenFileError),
}

/// Runs the worker until SIGTERM or Ctrl-C. `pod`: the StatefulSet pod name, which makes the
/// worker take assignment documents; `None` in standalone mode.
pub fn run(
    config: WorkerConfig,
    processor: JobProcessor,
    share: TaskShare,
    pod: Option<String>,
) -> Result<(), RunError> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(RunError::Runtime)?;
    runtime.block_on(run_async(config, processor, share, pod))
}

/// The steps: the shared context, the HTTP port, the input's partitions, the tasks, then the
/// wait for the signal and the shutdown.
async fn run_async(
    config: WorkerConfig,
    processor: JobProcessor,
    share: TaskShare,
    pod: Option<String>,
) -> Result<(), RunError> {
    let context = worker_context(config, processor).await?;
    let takes_documents = pod.is_some();
    let assignments = Arc::new(Assignments::new(
        context.clone(),
        pod.unwrap_or_else(|| "standalone".into()),
    ));
    serve_http(&context, takes_documents.then(|| Arc::clone(&assignments))).await?;

    let discovery = {
        let context = context.clone();
        tokio::task::spawn_blocking(move || discover_partitions(&context))
    };
    let signal = shutdown_signal();
    tokio::pin!(signal);
    let partitions = tokio::select! {
        found = discovery => found.map_err(RunError::Discovery)??,
        () = &mut signal => {
            // The discovery thread retries until this is set, and the runtime waits for it
            // before the process can exit.
            context.shutdown.store(true, Ordering::SeqCst);
            None
        }
    };
    let Some(partitions) = partitions else {
        tracing::info!("shut down before the tasks started");
        return Ok(());
    };
    start_tasks(&context, &assignments, share, partitions);

    signal.await;
    tracing::info!("shutdown requested: finishing open transactions");
    context.shutdown.store(true, Ordering::SeqCst);
    let _ = tokio::task::spawn_blocking(move || assignments.join_all()).await;
    tracing::info!("worker stopped");
    Ok(())
}

/// What every task of this worker shares: the config, the metrics, the task board, the
/// checkpoint service and the restore request handed over, if any.
async fn worker_context(
    config: WorkerConfig,
    processor: JobProcessor,
) -> Result<WorkerContext, RunError> {
    let config = Arc::new(config);
    let metrics = WorkerMetrics::new();
    let board = TaskBoard::default();
    let checkpoints =
        CheckpointService::connect(Arc::clone(&config), metrics.clone(), board.clone()).await?;
    let restore_request = crate::task::restore_request_from_env()
        .map_err(RunError::RestoreRequest)?
        .map(Arc::new);
    if let Some(request) = &restore_request {
        tracing::info!(id = %request.id, checkpoint = ?request.checkpoint, source = ?request.source, "restore request handed over; each task applies it once");
    }
    Ok(WorkerContext {
        processor: Arc::new(processor),
        restore_request,
        block_cache: BlockCache::new(config.state.rocksdb.block_cache_bytes),
        config,
        metrics,
        board,
        shutdown: Arc::new(AtomicBool::new(false)),
        checkpoints,
        task_stop: Arc::new(AtomicBool::new(false)),
        promoted_at: None,
        generation: 0,
        admin: Default::default(),
    })
}

/// Listens on `http.listen` (and on loopback too when that is a pod's own address) and serves
/// the HTTP port there. `assignments`: where assignment documents go, when this worker takes
/// them.
async fn serve_http(
    context: &WorkerContext,
    assignments: Option<Arc<Assignments>>,
) -> Result<(), RunError> {
    let address = context.config.http.listen.clone();
    let listener = tokio::net::TcpListener::bind(&address)
        .await
        .map_err(|source| RunError::Listen {
            address: address.clone(),
            source,
        })?;
    let token = http::TokenSource::from_config(context.config.http.token_file.as_deref());
    // A token file that is there but unusable is a broken deployment: say so now, not at the
    // first checkpoint request.
    match token.current().await? {
        Some(_) => {
            tracing::info!(token_file = ?context.config.http.token_file, "requests that change the worker need the token in http.tokenFile");
        }
        None => {
            tracing::warn!(
                "no http.tokenFile: POST /v1/checkpoints (every request but a read) is refused"
            );
        }
    }
    let takes_documents = assignments.is_some();
    let app = http::router(
        context.board.clone(),
        context.metrics.clone(),
        context.checkpoints.clone(),
        assignments,
        token,
    );
    let companion = listener
        .local_addr()
        .ok()
        .and_then(http::loopback_companion);
    if let Some(loopback) = companion {
        // Best effort: port-forwarding is a convenience; probes and the operator use `address`.
        match tokio::net::TcpListener::bind(loopback).await {
            Ok(listener) => serve(listener, app.clone()),
            Err(error) => {
                tracing::warn!(%loopback, %error, "cannot also listen on loopback; kubectl port-forward will not reach this worker");
            }
        }
    }
    tracing::info!(%address, loopback = ?companion, takes_documents, "serving /healthz /readyz /metrics /v1/tasks /v1/checkpoints /v1/assignment");
    serve(listener, app);
    Ok(())
}

/// Starts the tasks `share` gives this worker among the input's `partitions`; with
/// [`TaskShare::Assigned`], none, and a restarted pod's record runs again when no operator
/// sends a document.
fn start_tasks(
    context: &WorkerContext,
    assignments: &Arc<Assignments>,
    share: TaskShare,
    partitions: u32,
) {
    let tasks = share.tasks(partitions);
    tracing::info!(partitions, ?share, ?tasks, topic = %context.config.tasks_topic(), "starting one active task per assigned input partition");
    if tasks.is_empty() && share == TaskShare::Assigned {
        tracing::info!(partitions, "waiting for the operator's assignment document");
    } else if tasks.is_empty() {
        tracing::warn!(
            partitions,
            ?share,
            "no task falls to this worker (more replicas than input partitions)"
        );
    }
    assignments.start_static(&tasks);
    if share == TaskShare::Assigned {
        // A pod restarted with a record runs it again when no operator sends a document.
        let assignments = Arc::clone(assignments);
        tokio::task::spawn_blocking(move || assignments.resume_when_no_operator());
    }
}

/// Partition count of the input topic (of a re-keyed input's repartition topic: see
/// `WorkerConfig::tasks_topic`), retried with backoff until the broker answers; `None` when
/// shutdown was requested first.
fn discover_partitions(context: &WorkerContext) -> Result<Option<u32>, RunError> {
    let config = &context.config;
    let consumer: BaseConsumer = kafka_client::base_config(&config.kafka)?
        .create()
        .map_err(RunError::Client)?;
    let mut backoff = Duration::from_millis(200);
    while !context.shutting_down() {
        match consumer.fetch_metadata(Some(config.tasks_topic()), Duration::from_secs(10)) {
            Ok(metadata) => {
                let count = metadata
                    .topics()
                    .first()
                    .map_or(0, |t| t.partitions().len());
                if let Some(count) = u32::try_from(count).ok().filter(|&c| c > 0) {
                    return Ok(Some(count));
                }
                tracing::warn!(topic = %config.tasks_topic(), "input topic has no partitions yet");
            }
            Err(error) => {
                // The metadata error says only "transport failure". The reason (refused
                // credentials, a certificate that does not verify) is a librdkafka log line,
                // queued until the client is polled; polling logs it.
                while consumer.poll(Duration::ZERO).is_some() {}
                tracing::warn!(%error, "cannot reach Kafka; retrying");
            }
        }
        std::thread::sleep(backoff);
        backoff = (backoff * 2).min(Duration::from_secs(5));
    }
    Ok(None)
}

fn serve(listener: tokio::net::TcpListener, app: axum::Router) {
    http::spawn(listener, app, http::Limits::default());
}

async fn shutdown_signal() {
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut stream) => {
                stream.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        () = terminate => {}
    }
}
