//! One task = one input partition, run on its own thread (`slot`) in the role the assignment
//! gives it. As active: restore its state, then the exactly-once processing loop; as standby:
//! a warm copy tailing the changelog (`standby`). The supervisor here retries failures with
//! backoff from a consistent point (the store only ever holds committed state) and ends an
//! active role only when the task is released, fenced, its changelog is lost, or the worker
//! shuts down.

mod active;
mod claim;
mod commit_mark;
mod dead_letter;
mod error;
mod fence;
mod identity;
mod incarnation;
mod input_position;
mod promotion;
mod record_size;
mod restore;
mod slot;
mod standby;
mod stop;

pub use commit_mark::last_commit_generations;
pub use error::TaskError;
pub use incarnation::of_state as changelog_incarnation_of;
pub use record_size::MAX_RECORD_BYTES;
pub use restore::restore_request_from_env;
pub use slot::{Role, TaskSlot};

use crate::checkpoint::CheckpointService;
use crate::metrics::WorkerMetrics;
use crate::status::{PhaseTracker, TaskBoard, TaskPhase};
use crate::store::{BlockCache, OpenOutcome, RocksStore};
use promotion::Step;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
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
    /// One task's own stop: its role changed, so the running role winds down as at shutdown
    /// (an active commits its open transaction first). Each task thread has its own.
    pub task_stop: Arc<AtomicBool>,
    /// When the assignment promoted this task from standby; its first commit is then timed.
    pub promoted_at: Option<Instant>,
    /// The assignment generation the task's role runs under (0 in standalone mode and on the
    /// static share); each input commit is marked with it (`commit_mark`).
    pub generation: u64,
    /// The worker's one admin client.
    pub admin: crate::kafka_client::SharedAdmin,
}

impl WorkerContext {
    /// The running role should end: the worker shuts down or the task's role changed.
    pub fn shutting_down(&self) -> bool {
        self.shutdown.load(Ordering::SeqCst) || self.task_stop.load(Ordering::SeqCst)
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

/// How a role ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RoleEnd {
    /// It wound down as asked: the role changed or the worker shuts down.
    Released,
    /// A newer owner claimed the task.
    Fenced,
    /// The state does not fit the job, or the changelog is gone: nothing to retry.
    Failed,
}

/// Runs task `task` as active until it is released, fenced or fails for good. Never panics;
/// other errors are retried.
fn run_active(
    context: &WorkerContext,
    task: u32,
    store: &mut Option<RocksStore>,
    phase: &mut PhaseTracker,
) -> RoleEnd {
    let mut backoff = Duration::from_millis(200);
    while !context.shutting_down() {
        match run_once(context, task, store, phase) {
            Ok(()) => break,
            Err(TaskError::ChangelogLost(reason)) => {
                context.metrics.task_error(task, "changelog_lost");
                tracing::error!(task, %reason, "task stopped: its changelog is gone");
                phase.enter(TaskPhase::Failed, Some(format!("changelog lost: {reason}")));
                return RoleEnd::Failed;
            }
            Err(error @ (TaskError::InputPosition(_) | TaskError::ProcessorMismatch(_))) => {
                context.metrics.task_error(task, error.category());
                tracing::error!(task, %error, "task stopped: its state does not fit this job");
                phase.enter(TaskPhase::Failed, Some(error.to_string()));
                return RoleEnd::Failed;
            }
            Err(TaskError::Stopped(during)) => {
                tracing::info!(task, %during, "active role stopped before it ran");
                break;
            }
            Err(TaskError::Fenced(reason)) => {
                if let Some(service) = &context.checkpoints {
                    service.task(task).set_fenced();
                }
                phase.enter(TaskPhase::Fenced, Some(reason));
                return RoleEnd::Fenced;
            }
            Err(error) => {
                context.metrics.task_error(task, error.category());
                tracing::warn!(task, %error, category = error.category(), retry_in_ms = backoff.as_millis() as u64, "task failed; retrying from committed state");
                phase.enter(TaskPhase::Created, Some(format!("retrying after: {error}")));
                if error.requires_reopen() {
                    *store = None;
                }
                context.pause(backoff);
                backoff = (backoff * 2).min(Duration::from_secs(10));
            }
        }
    }
    RoleEnd::Released
}

/// The task's store, opened on first use and kept open across roles, with what it holds.
fn open_store<'s>(
    context: &WorkerContext,
    task: u32,
    store_slot: &'s mut Option<RocksStore>,
) -> Result<(&'s mut RocksStore, OpenOutcome), TaskError> {
    let outcome = match store_slot.as_ref() {
        Some(store) => slot::outcome_of(store),
        None => {
            let config = &context.config;
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
    let store = store_slot
        .as_mut()
        .ok_or_else(|| TaskError::Internal("store missing after open".into()))?;
    Ok((store, outcome))
}

fn run_once(
    context: &WorkerContext,
    task: u32,
    store_slot: &mut Option<RocksStore>,
    phase: &mut PhaseTracker,
) -> Result<(), TaskError> {
    phase.enter(TaskPhase::Restoring, None);
    let config = &context.config;
    let (store, outcome) = open_store(context, task, store_slot)?;
    let mut loop_ = active::ActiveLoop::connect(context, task)?;
    loop_.promotion_step(Step::Claim);
    let checkpoints = context
        .checkpoints
        .as_ref()
        .map(|service| service.task(task));
    restore::restore_task(context, task, store, outcome, &loop_)?;
    loop_.promotion_step(Step::CatchUp);
    identity::check(task, store, &config.processor, &loop_)?;
    loop_.resume_input(store)?;
    loop_.promotion_step(Step::Input);
    phase.enter(TaskPhase::Running, None);
    loop_.run(store, checkpoints.as_ref())
}
