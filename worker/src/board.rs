//! The task board: each task's report (the contract's `TaskReport`: role, phase, offsets, lag,
//! restore progress, last checkpoint), shared between the task threads and the checkpoint service
//! (writers) and the HTTP server (reader, `/v1/tasks` and `/readyz`). It holds what the reports
//! say, never decides anything: the task's phases are moved by `task::phase`.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};
use streamkeeper_contract::task_report::{TaskPhase, TaskReport, TaskRole};

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

    /// Forgets `task`: it left this worker.
    pub fn remove(&self, task: u32) {
        if let Ok(mut tasks) = self.tasks.write() {
            tasks.remove(&task);
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

    /// Ready when every active task is Running (and there is at least one task). A task that
    /// left the worker is no longer on the board ([`TaskBoard::remove`]).
    pub fn ready(&self) -> bool {
        let tasks = self.snapshot();
        !tasks.is_empty()
            && tasks
                .iter()
                .filter(|t| t.role == TaskRole::Active)
                .all(|t| t.phase == TaskPhase::Running)
    }
}
