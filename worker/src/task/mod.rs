//! A task: one input partition, run on its own thread in the role the assignment gives it, with
//! its RocksDB store kept open across roles.
//!
//! Its life: its slot (`slot`) starts the thread and switches the role when the assignment
//! changes. As active (`active`), the task claims the partition, restores its state (`restore`),
//! checks which processor built it, resumes the input and runs the exactly-once loop; as standby
//! (`standby`), it warms up with the same restore and tails the changelog, a warm copy ready to
//! be promoted. Every phase it enters (`phase`) is logged, counted and shown on the task board.
//!
//! The supervisor here runs each role (`run_active`, `run_standby`): it retries failures with
//! backoff from a consistent point (the store only ever holds committed state) and ends an active
//! role only when the task is released, fenced, its changelog is lost, or the worker shuts down.
//!
//! The files, lowest first (each uses only files before it, and this supervisor):
//! - `error`: why an attempt failed ([`TaskError`]); `context`: what the tasks share
//!   ([`WorkerContext`]);
//! - `stop`: ending a role's long waits in bounded time; `phase`: the task's phase transitions;
//! - `consumer_watch`: telling a stalled consumer from an idle partition, for both roles;
//! - `changelog`: reading the task's changelog partition;
//! - `active/`: the active role: the claim, the exactly-once loop and its parts;
//! - `restore/`: the restore, for both roles;
//! - `standby`: the warm copy;
//! - `slot`: the task's thread and its role ([`TaskSlot`], [`Role`]).

mod active;
mod changelog;
mod consumer_watch;
mod context;
mod error;
mod phase;
mod restore;
mod slot;
mod standby;
mod stop;

pub use active::{apply_record, last_commit_generations};
pub use context::WorkerContext;
pub use error::TaskError;
pub use phase::PhaseTracker;
pub use restore::restore_request_from_env;
pub use slot::{Role, TaskSlot};

use crate::store::{OpenOutcome, RocksStore};
use active::ActiveLoop;
use active::promotion::Step;
use std::time::Duration;
use streamkeeper_contract::task_report::{TaskFailure, TaskPhase};

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
                phase.fail(
                    TaskFailure::ChangelogLost,
                    format!("changelog lost: {reason}"),
                );
                return RoleEnd::Failed;
            }
            Err(
                error @ (TaskError::InputPosition(_)
                | TaskError::ProcessorMismatch(_)
                | TaskError::InputMismatch(_)),
            ) => {
                context.metrics.task_error(task, error.category());
                tracing::error!(task, %error, "task stopped: its state does not fit this job");
                phase.fail(TaskFailure::StateMismatch, error.to_string());
                return RoleEnd::Failed;
            }
            Err(error @ TaskError::PartitionsChanged(_)) => {
                context.metrics.task_error(task, error.category());
                tracing::error!(task, %error, "task stopped: its topics' key placement changed");
                phase.fail(TaskFailure::PartitionsChanged, error.to_string());
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

/// Runs the standby role, retrying errors from valid state, until the role changes.
fn run_standby(
    context: &WorkerContext,
    task: u32,
    store_slot: &mut Option<RocksStore>,
    phase: &mut PhaseTracker,
) -> RoleEnd {
    let mut backoff = Duration::from_millis(200);
    while !context.shutting_down() {
        let result = open_store(context, task, store_slot)
            .and_then(|(store, outcome)| standby::run(context, task, store, outcome, phase));
        match result {
            Ok(()) => return RoleEnd::Released,
            Err(TaskError::Stopped(during)) => {
                tracing::info!(task, %during, "standby stopped before it was warm");
                return RoleEnd::Released;
            }
            Err(error) => {
                context.metrics.task_error(task, error.category());
                tracing::warn!(task, %error, retry_in_ms = backoff.as_millis() as u64, "standby failed; retrying from its applied state");
                phase.enter(
                    TaskPhase::Created,
                    Some(format!("standby retrying after: {error}")),
                );
                if error.requires_reopen() {
                    *store_slot = None;
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
        Some(store) => outcome_of(store),
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

/// The store's open outcome as the next role sees it: an open store reports its metadata, and
/// a restore the last role left unfinished (it was stopped mid-replay) is still one to finish.
fn outcome_of(store: &RocksStore) -> OpenOutcome {
    match store.metadata() {
        Some(meta) if meta.restoring => OpenOutcome::Interrupted(meta),
        Some(meta) => OpenOutcome::Valid(meta),
        None => OpenOutcome::Empty,
    }
}

/// One attempt at the active role, its steps in order: claim the task, restore its state, check
/// which processor built it, resume the input, run the exactly-once loop.
fn run_once(
    context: &WorkerContext,
    task: u32,
    store_slot: &mut Option<RocksStore>,
    phase: &mut PhaseTracker,
) -> Result<(), TaskError> {
    phase.enter(TaskPhase::Restoring, None);
    let (store, outcome) = open_store(context, task, store_slot)?;
    let mut loop_ = ActiveLoop::connect(context, task)?;
    loop_.promotion_step(Step::Claim);
    let checkpoints = context
        .checkpoints
        .as_ref()
        .map(|service| service.task(task));
    restore::restore_task(context, task, store, outcome, &loop_)?;
    loop_.promotion_step(Step::CatchUp);
    active::identity::check(task, store, context.processor.identity(), &loop_)?;
    loop_.resume_input(store)?;
    loop_.promotion_step(Step::Input);
    phase.enter(TaskPhase::Running, None);
    loop_.run(store, checkpoints.as_ref())
}

/// A duration the environment variable `name` overrides in seconds (tests use seconds where a
/// pod waits minutes); `default` when it is unset or not a positive number.
pub(crate) fn seconds_from_env(name: &str, default: Duration) -> Duration {
    std::env::var(name)
        .ok()
        .and_then(|text| text.parse::<f64>().ok())
        .filter(|seconds| seconds.is_finite() && *seconds > 0.0)
        .map_or(default, Duration::from_secs_f64)
}
