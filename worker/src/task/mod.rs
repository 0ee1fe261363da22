//! One active task = one input partition, run on its own thread: restore its state, then the
//! exactly-once processing loop. The supervisor here retries failures with backoff from a
//! consistent point (the store only ever holds committed state) and stops for good only when
//! the task is fenced, its changelog is lost, or the worker shuts down.

mod active;
mod dead_letter;
mod error;
mod fence;
mod identity;
mod incarnation;
mod input_position;
mod record_size;
mod restore;

pub use error::TaskError;
pub use incarnation::of_state as changelog_incarnation_of;
pub use record_size::MAX_RECORD_BYTES;
pub use restore::restore_request_from_env;

use crate::checkpoint::CheckpointService;
use crate::metrics::WorkerMetrics;
use crate::status::{PhaseTracker, TaskBoard, TaskPhase, TaskReport, TaskRole};
use crate::store::{BlockCache, OpenOutcome, RocksStore};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use streamkeeper_contract::WorkerConfig;
use streamkeeper_contract::restore_request::RestoreRequestDocument;

/// What every task of this worker shares.
#[derive(Clone, Debug)]
pub struct WorkerContext {
    pub config: Arc<WorkerConfig>,
    pub metrics: WorkerMetrics,
    pub board: TaskBoard,
    pub shutdown: Arc<AtomicBool>,
    /// One RocksDB block cache for every task of the worker, so its memory is bounded by
    /// `blockCacheBytes` however many tasks the worker hosts.
    pub block_cache: BlockCache,
    /// Checkpoints to S3; `None` when the config has no S3 settings.
    pub checkpoints: Option<Arc<CheckpointService>>,
    /// The restore request the operator handed to this worker (`spec.restore`), if any.
    pub restore_request: Option<Arc<RestoreRequestDocument>>,
}

impl WorkerContext {
    pub fn shutting_down(&self) -> bool {
        self.shutdown.load(Ordering::SeqCst)
    }

    /// Sleeps up to `duration`, waking early on shutdown.
    fn pause(&self, duration: Duration) {
        let step = Duration::from_millis(50);
        let mut slept = Duration::ZERO;
        while slept < duration && !self.shutting_down() {
            std::thread::sleep(step);
            slept += step;
        }
    }
}

/// The changelog (and input) partition of task `task`: task i is partition i.
pub(crate) fn partition_of(task: u32) -> Result<i32, TaskError> {
    i32::try_from(task).map_err(|_| TaskError::Internal(format!("task {task} is not a partition")))
}

/// Runs active task `task` until shutdown or fencing. Never panics; errors are retried.
pub fn run_active_task(context: WorkerContext, task: u32) {
    let span = tracing::info_span!("task", task, job = %context.config.job.name);
    let _entered = span.enter();
    context
        .board
        .register(TaskReport::new(task, TaskRole::Active));
    let mut phase = PhaseTracker::new(task, context.board.clone(), context.metrics.clone());
    let mut backoff = Duration::from_millis(200);
    let mut store: Option<RocksStore> = None;
    while !context.shutting_down() {
        match run_once(&context, task, &mut store, &mut phase) {
            Ok(()) => break,
            Err(TaskError::ChangelogLost(reason)) => {
                context.metrics.task_error(task, "changelog_lost");
                tracing::error!(task, %reason, "task stopped: its changelog is gone");
                phase.enter(TaskPhase::Failed, Some(format!("changelog lost: {reason}")));
                return;
            }
            Err(error @ (TaskError::InputPosition(_) | TaskError::ProcessorMismatch(_))) => {
                context.metrics.task_error(task, error.category());
                tracing::error!(task, %error, "task stopped: its state does not fit this job");
                phase.enter(TaskPhase::Failed, Some(error.to_string()));
                return;
            }
            Err(TaskError::Fenced(reason)) => {
                if let Some(service) = &context.checkpoints {
                    service.task(task).set_fenced();
                }
                phase.enter(TaskPhase::Fenced, Some(reason));
                return;
            }
            Err(error) => {
                context.metrics.task_error(task, error.category());
                tracing::warn!(task, %error, category = error.category(), retry_in_ms = backoff.as_millis() as u64, "task failed; retrying from committed state");
                phase.enter(TaskPhase::Created, Some(format!("retrying after: {error}")));
                if error.requires_reopen() {
                    store = None;
                }
                context.pause(backoff);
                backoff = (backoff * 2).min(Duration::from_secs(10));
            }
        }
    }
    if let Some(store) = store.as_ref()
        && let Err(error) = store.flush()
    {
        tracing::warn!(task, %error, "flushing state at shutdown failed (the WAL still has it)");
    }
    phase.enter(TaskPhase::Stopped, Some("worker shut down".into()));
}

fn run_once(
    context: &WorkerContext,
    task: u32,
    store_slot: &mut Option<RocksStore>,
    phase: &mut PhaseTracker,
) -> Result<(), TaskError> {
    phase.enter(TaskPhase::Restoring, None);
    let config = &context.config;
    let outcome = match store_slot.as_ref() {
        Some(store) => store
            .metadata()
            .map(OpenOutcome::Valid)
            .unwrap_or(OpenOutcome::Empty),
        None => {
            let opened = RocksStore::open_with_cache(
                &config.state.dir,
                task,
                &config.state.rocksdb,
                &context.block_cache,
            )?;
            *store_slot = Some(opened.store);
            opened.outcome
        }
    };
    let Some(store) = store_slot.as_mut() else {
        return Err(TaskError::Internal("store missing after open".into()));
    };
    let mut loop_ = active::ActiveLoop::connect(context, task)?;
    let checkpoints = context
        .checkpoints
        .as_ref()
        .map(|service| service.task(task));
    restore::restore_task(context, task, store, outcome, &loop_)?;
    identity::check(task, store, &config.processor, &loop_)?;
    loop_.resume_input(store)?;
    phase.enter(TaskPhase::Running, None);
    loop_.run(store, checkpoints.as_ref())
}
