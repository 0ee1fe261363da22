//! A task's phase (the contract's `TaskPhase`: Created, Restoring, Running, Fenced, Failed,
//! Stopped), tracked: each transition is logged with the time spent in the previous phase,
//! counted (`streamkeeper_task_phase_transitions_total`) and shown on the task board.

use crate::board::TaskBoard;
use crate::metrics::WorkerMetrics;
use std::time::Instant;
use streamkeeper_contract::task_report::{TaskFailure, TaskPhase};

/// Tracks a task's phase and logs each transition with the time spent in the previous one.
#[derive(Debug)]
pub struct PhaseTracker {
    task: u32,
    phase: TaskPhase,
    since: Instant,
    board: TaskBoard,
    metrics: WorkerMetrics,
}

impl PhaseTracker {
    pub fn new(task: u32, board: TaskBoard, metrics: WorkerMetrics) -> Self {
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
            report.failure = None;
        });
    }

    /// Enters `Failed` for `failure`, which the report names beside the reason.
    pub fn fail(&mut self, failure: TaskFailure, reason: String) {
        self.enter(TaskPhase::Failed, Some(reason));
        self.board
            .update(self.task, |report| report.failure = Some(failure));
    }
}
