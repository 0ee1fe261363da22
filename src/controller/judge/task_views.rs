//! Each task's status from what the workers report on `GET /v1/tasks` (owner, standbys, phase,
//! lag, restore progress, the restore request its state has applied), merged with its newest
//! checkpoint from S3. Pure: the reconcile fetches the reports (`observe::workers`).
//!
//! A task can be reported by more than one pod for a moment (a new owner restoring while the
//! old one is being fenced); the owner is the pod whose active copy is furthest along (Running
//! before Restoring before the rest), and a fenced or stopped copy never owns a task.

use crate::api::{RestoreProgress, StandbyStatus, TaskStatus};
use streamkeeper_contract::task_report::{
    RestorePhase, RestoreProgress as ReportedRestore, TaskFailure, TaskPhase, TaskReport, TaskRole,
};

/// The tasks' status and how many of them are running.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TaskView {
    pub tasks: Vec<TaskStatus>,
    pub running: usize,
    pub restoring: usize,
    /// Tasks whose state has applied the given restore request id.
    pub applied_restore: usize,
    /// Tasks whose owner stopped them on an error, with the pod and its reason.
    pub failed: Vec<FailedTask>,
}

/// A task its owner stopped on an error it cannot recover from by itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FailedTask {
    pub task: u32,
    pub pod: String,
    pub reason: String,
    /// What stopped it, as its owner names it.
    pub failure: Option<TaskFailure>,
}

impl TaskView {
    /// `readyTasks`: running tasks / tasks.
    pub fn ready_tasks(&self) -> String {
        format!("{}/{}", self.running, self.tasks.len())
    }
}

/// Merges `reports` (pod name, the pod's task reports) into `tasks` (one per task, with its
/// checkpoint already filled in). `restore_id`: the restore request being rolled out, if any.
pub fn merge(
    mut tasks: Vec<TaskStatus>,
    reports: &[(String, Vec<TaskReport>)],
    restore_id: Option<&str>,
) -> TaskView {
    let mut view = TaskView::default();
    for status in &mut tasks {
        let Ok(task) = u32::try_from(status.task) else {
            continue;
        };
        let copies: Vec<(&str, &TaskReport)> = reports
            .iter()
            .flat_map(|(pod, list)| list.iter().map(move |report| (pod.as_str(), report)))
            .filter(|(_, report)| report.task == task)
            .collect();
        let owner = copies
            .iter()
            .filter(|(_, r)| r.role == TaskRole::Active)
            .filter(|(_, r)| !matches!(r.phase, TaskPhase::Fenced | TaskPhase::Stopped))
            .min_by_key(|(pod, r)| (phase_rank(r.phase), *pod));
        let mut standbys: Vec<StandbyStatus> = copies
            .iter()
            .filter(|(_, r)| r.role == TaskRole::Standby)
            .map(|(pod, r)| StandbyStatus {
                pod: (*pod).to_string(),
                phase: format!("{:?}", r.phase),
                lag: r.changelog_lag,
            })
            .collect();
        standbys.sort_by(|a, b| a.pod.cmp(&b.pod));
        status.standbys = standbys;
        match owner {
            Some((pod, report)) => {
                status.owner = Some((*pod).to_string());
                status.phase = Some(format!("{:?}", report.phase));
                status.reason = report.reason.clone();
                status.input_lag = report.input_lag;
                status.restore = report.restore.as_ref().map(restore_progress);
                status.applied_restore_id = report.applied_restore_id.clone();
                match report.phase {
                    TaskPhase::Running => view.running += 1,
                    TaskPhase::Restoring => view.restoring += 1,
                    TaskPhase::Failed => view.failed.push(FailedTask {
                        task,
                        pod: (*pod).to_string(),
                        reason: report.reason.clone().unwrap_or_default(),
                        failure: report.failure,
                    }),
                    _ => {}
                }
                if restore_id.is_some() && report.applied_restore_id.as_deref() == restore_id {
                    view.applied_restore += 1;
                }
            }
            None => {
                status.owner = None;
                status.phase = None;
                status.reason = copies
                    .first()
                    .map(|(pod, r)| format!("no active owner; {pod} reports {:?}", r.phase));
                status.input_lag = None;
                status.restore = None;
            }
        }
    }
    view.tasks = tasks;
    view
}

fn phase_rank(phase: TaskPhase) -> u8 {
    match phase {
        TaskPhase::Running => 0,
        TaskPhase::Restoring => 1,
        TaskPhase::Created => 2,
        TaskPhase::Suspended => 3,
        TaskPhase::Failed => 4,
        TaskPhase::Fenced | TaskPhase::Stopped => 5,
    }
}

fn restore_progress(reported: &ReportedRestore) -> RestoreProgress {
    let to_i64 = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
    let downloading = reported.phase == RestorePhase::Download;
    let download = reported.download.as_ref().filter(|_| downloading);
    RestoreProgress {
        phase: format!("{:?}", reported.phase),
        source: Some(
            serde_json::to_value(reported.source)
                .ok()
                .and_then(|v| v.as_str().map(str::to_string))
                .unwrap_or_default(),
        ),
        records_done: to_i64(reported.records_done),
        records_total: Some(to_i64(reported.records_total)),
        bytes_done: to_i64(download.map_or(reported.bytes_done, |d| d.bytes_done)),
        bytes_total: download.map(|d| to_i64(d.bytes_total)),
        records_per_second: Some((reported.records_per_second * 10.0).round() / 10.0),
        eta_seconds: download
            .and_then(|d| d.eta_seconds)
            .or(reported.eta_seconds)
            .map(|s| s.ceil() as i64),
        reprocessed_input_records: reported.reprocessed_input_records.map(to_i64),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use streamkeeper_contract::task_report::{DownloadProgress, RestoreSource};

    fn task(number: i32) -> TaskStatus {
        TaskStatus {
            task: number,
            ..TaskStatus::default()
        }
    }

    fn report(task: u32, role: TaskRole, phase: TaskPhase) -> TaskReport {
        TaskReport {
            phase,
            ..TaskReport::new(task, role)
        }
    }

    #[test]
    fn owners_standbys_and_ready_tasks() {
        let reports = vec![
            (
                "job-0".to_string(),
                vec![
                    report(0, TaskRole::Active, TaskPhase::Running),
                    report(1, TaskRole::Standby, TaskPhase::Running),
                ],
            ),
            (
                "job-1".to_string(),
                vec![
                    report(1, TaskRole::Active, TaskPhase::Restoring),
                    TaskReport {
                        changelog_lag: Some(4),
                        ..report(0, TaskRole::Standby, TaskPhase::Running)
                    },
                ],
            ),
        ];
        let view = merge(vec![task(0), task(1), task(2)], &reports, None);
        assert_eq!(view.ready_tasks(), "1/3");
        assert_eq!(view.restoring, 1);
        assert_eq!(view.tasks[0].owner.as_deref(), Some("job-0"));
        let standby = StandbyStatus {
            pod: "job-1".into(),
            phase: "Running".into(),
            lag: Some(4),
        };
        assert_eq!(view.tasks[0].standbys, vec![standby]);
        assert_eq!(view.tasks[1].owner.as_deref(), Some("job-1"));
        assert_eq!(view.tasks[1].phase.as_deref(), Some("Restoring"));
        assert_eq!(view.tasks[2].owner, None, "nobody reports task 2");
    }

    #[test]
    fn a_fenced_copy_never_owns_and_running_beats_restoring() {
        let reports = vec![
            (
                "job-0".to_string(),
                vec![report(0, TaskRole::Active, TaskPhase::Fenced)],
            ),
            (
                "job-1".to_string(),
                vec![report(0, TaskRole::Active, TaskPhase::Restoring)],
            ),
            (
                "job-2".to_string(),
                vec![report(0, TaskRole::Active, TaskPhase::Running)],
            ),
        ];
        let view = merge(vec![task(0)], &reports, None);
        assert_eq!(view.tasks[0].owner.as_deref(), Some("job-2"));
        let fenced_only = vec![(
            "job-0".to_string(),
            vec![report(0, TaskRole::Active, TaskPhase::Fenced)],
        )];
        let view = merge(vec![task(0)], &fenced_only, None);
        assert_eq!(view.tasks[0].owner, None);
        assert!(
            view.tasks[0]
                .reason
                .as_deref()
                .unwrap()
                .contains("job-0 reports Fenced")
        );
    }

    #[test]
    fn restore_progress_and_applied_requests_are_reported() {
        let mut restoring = report(0, TaskRole::Active, TaskPhase::Restoring);
        restoring.restore = Some(ReportedRestore {
            phase: RestorePhase::Download,
            source: RestoreSource::Checkpoint,
            records_done: 0,
            records_total: 0,
            bytes_done: 10,
            records_per_second: 0.0,
            eta_seconds: None,
            download: Some(DownloadProgress {
                checkpoint_sequence: 4,
                bytes_done: 300,
                bytes_total: 1_000,
                bytes_per_second: 100.0,
                eta_seconds: Some(6.2),
            }),
            reprocessed_input_records: None,
        });
        let mut done = report(1, TaskRole::Active, TaskPhase::Running);
        done.applied_restore_id = Some("r7".into());
        let reports = vec![("job-0".to_string(), vec![restoring, done])];
        let view = merge(vec![task(0), task(1)], &reports, Some("r7"));
        let progress = view.tasks[0].restore.clone().unwrap();
        assert_eq!(progress.phase, "Download");
        assert_eq!(progress.source.as_deref(), Some("checkpoint"));
        assert_eq!(
            (progress.bytes_done, progress.bytes_total),
            (300, Some(1_000))
        );
        assert_eq!(progress.eta_seconds, Some(7));
        assert_eq!(view.applied_restore, 1);
        assert_eq!(view.tasks[1].applied_restore_id.as_deref(), Some("r7"));
    }
}
