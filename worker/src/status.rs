//! What each task is doing, shared between the task threads (writers) and the HTTP server
//! (reader). Task and restore phases are explicit state machines; every transition is logged
//! with the time spent in the previous phase.

use serde::Serialize;
use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};
use std::time::Instant;

/// Task lifecycle: Created → Restoring → Running → (Suspended | Fenced), with Failed when a
/// task gives up after retries and Stopped after a graceful shutdown.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum TaskPhase {
    Created,
    Restoring,
    Running,
    Suspended,
    Fenced,
    Stopped,
    Failed,
}

/// Restore phases: Discovery → (Download) → Replay → CatchUp → Done.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum RestorePhase {
    Discovery,
    Download,
    Replay,
    CatchUp,
    Done,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum TaskRole {
    Active,
    Standby,
}

/// Progress of a restore, as `/v1/tasks`, the logs and the CR status show it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RestoreProgress {
    pub phase: RestorePhase,
    /// What the restore started from: "local", "checkpoint" or "empty".
    pub source: &'static str,
    pub records_done: u64,
    pub records_total: u64,
    pub bytes_done: u64,
    pub records_per_second: f64,
    pub eta_seconds: Option<f64>,
    /// The checkpoint download, when the restore started from an S3 checkpoint.
    pub download: Option<DownloadProgress>,
}

/// Progress of a checkpoint download (the Download restore phase).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DownloadProgress {
    pub checkpoint_sequence: u64,
    pub bytes_done: u64,
    pub bytes_total: u64,
    pub bytes_per_second: f64,
    pub eta_seconds: Option<f64>,
}

/// The newest durable checkpoint of a task (also the answer of `POST /v1/checkpoints`).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CheckpointReport {
    pub sequence: u64,
    pub created_at_ms: u64,
    pub input_offset: i64,
    pub changelog_offset: i64,
    pub total_bytes: u64,
    /// Bytes this checkpoint had to upload (objects not already in S3).
    pub uploaded_bytes: u64,
    pub files: usize,
    pub uploaded_files: usize,
    /// From the local RocksDB checkpoint to the durable manifest.
    pub seconds: f64,
}

/// One task's report.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TaskReport {
    pub task: u32,
    pub role: TaskRole,
    pub phase: TaskPhase,
    /// Why the task is in its phase, when that needs saying (fenced, failed, retrying).
    pub reason: Option<String>,
    pub next_input_offset: Option<i64>,
    pub next_changelog_offset: Option<i64>,
    pub input_lag: Option<i64>,
    pub committed_transactions: u64,
    pub restore: Option<RestoreProgress>,
    pub last_checkpoint: Option<CheckpointReport>,
}

impl TaskReport {
    pub fn new(task: u32, role: TaskRole) -> Self {
        Self {
            task,
            role,
            phase: TaskPhase::Created,
            reason: None,
            next_input_offset: None,
            next_changelog_offset: None,
            input_lag: None,
            committed_transactions: 0,
            restore: None,
            last_checkpoint: None,
        }
    }
}

/// All tasks of this worker. Cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct TaskBoard {
    tasks: Arc<RwLock<BTreeMap<u32, TaskReport>>>,
}

impl TaskBoard {
    pub fn register(&self, report: TaskReport) {
        if let Ok(mut tasks) = self.tasks.write() {
            tasks.insert(report.task, report);
        }
    }

    pub fn update(&self, task: u32, change: impl FnOnce(&mut TaskReport)) {
        if let Ok(mut tasks) = self.tasks.write()
            && let Some(report) = tasks.get_mut(&task)
        {
            change(report);
        }
    }

    pub fn snapshot(&self) -> Vec<TaskReport> {
        self.tasks
            .read()
            .map(|tasks| tasks.values().cloned().collect())
            .unwrap_or_default()
    }

    /// Ready when every active task is Running (and there is at least one task).
    pub fn ready(&self) -> bool {
        let tasks = self.snapshot();
        !tasks.is_empty()
            && tasks
                .iter()
                .filter(|t| t.role == TaskRole::Active)
                .all(|t| t.phase == TaskPhase::Running)
    }
}

/// Tracks a task's phase and logs each transition with the time spent in the previous one.
#[derive(Debug)]
pub struct PhaseTracker {
    task: u32,
    phase: TaskPhase,
    since: Instant,
    board: TaskBoard,
    metrics: crate::metrics::WorkerMetrics,
}

impl PhaseTracker {
    pub fn new(task: u32, board: TaskBoard, metrics: crate::metrics::WorkerMetrics) -> Self {
        Self {
            task,
            phase: TaskPhase::Created,
            since: Instant::now(),
            board,
            metrics,
        }
    }

    pub fn phase(&self) -> TaskPhase {
        self.phase
    }

    pub fn enter(&mut self, next: TaskPhase, reason: Option<String>) {
        let elapsed = self.since.elapsed();
        tracing::info!(
            task = self.task,
            from = ?self.phase,
            to = ?next,
            seconds_in_previous = elapsed.as_secs_f64(),
            reason = reason.as_deref().unwrap_or(""),
            "task phase transition"
        );
        self.metrics.phase_transition(self.task, next);
        self.phase = next;
        self.since = Instant::now();
        self.board.update(self.task, |report| {
            report.phase = next;
            report.reason = reason;
        });
    }
}
