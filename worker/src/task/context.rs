//! What every task of this worker shares: the config, the metrics, the task board, the block
//! cache, the checkpoint service, the admin client and the shutdown flag; and what one task's
//! thread adds: its own stop, its promotion time and the assignment generation it runs under.

use crate::board::TaskBoard;
use crate::checkpoint::CheckpointService;
use crate::kafka_client::SharedAdmin;
use crate::metrics::WorkerMetrics;
use crate::processor::JobProcessor;
use crate::store::BlockCache;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use streamkeeper_contract::WorkerConfig;
use streamkeeper_contract::restore_request::RestoreRequestDocument;

/// What every task of this worker shares.
#[derive(Clone, Debug)]
pub struct WorkerContext {
    pub config: Arc<WorkerConfig>,
    /// The job's processor, resolved and checked before any task started.
    pub processor: Arc<JobProcessor>,
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
    pub admin: SharedAdmin,
}

impl WorkerContext {
    /// The running role should end: the worker shuts down or the task's role changed.
    pub fn shutting_down(&self) -> bool {
        self.shutdown.load(Ordering::SeqCst) || self.task_stop.load(Ordering::SeqCst)
    }

    /// Sleeps up to `duration`, waking early on shutdown.
    pub(super) fn pause(&self, duration: Duration) {
        let step = Duration::from_millis(50);
        let mut slept = Duration::ZERO;
        while slept < duration && !self.shutting_down() {
            std::thread::sleep(step);
            slept += step;
        }
    }
}
