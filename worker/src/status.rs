//! What each task is doing, shared between the task threads (writers) and the HTTP server
//! (reader). Task and restore phases are explicit state machines; every transition is logged
//! with the time spent in the previous phase.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};
use std::time::Instant;

pub use streamkeeper_contract::task_report::{
    CheckpointReport, DownloadProgress, RestorePhase, RestoreProgress, RestoreSource, TaskPhase,
    TaskReport, TaskRole,
};

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
