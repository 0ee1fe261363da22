//! What the loop says about a task whose active copy moved: a log line, a counter, an Event, the
//! move in the job's status, and, once the new owner commits, how long the task stood still.
//!
//! A move is a promotion when its old owner is down (refused, or silent past the suspicion
//! time) and a handoff when it still answers or said it is stopping. The time to the new
//! owner's first commit is the figure a user feels: for a promotion it runs from the old
//! owner's last answer, so it includes the detection; for a handoff from the decision.

use super::health::Heartbeats;
use super::registry::Shared;
use super::{FailoverDeps, FailoverJob};
use crate::api::TaskMove;
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::runtime::events::{Event, EventType};
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};
use streamkeeper_contract::task_report::{TaskPhase, TaskRole};
use streamkeeper_contract::{AssignmentDocument, CopyLag, TaskReport};

/// A move whose new owner has not committed yet.
#[derive(Debug, Clone, PartialEq)]
pub struct PendingMove {
    pub to: String,
    pub promoted: bool,
    /// Where the stall is measured from: the old owner's last answer (a promotion) or the
    /// decision (a handoff).
    pub since: Instant,
    pub decided: Instant,
}

/// What the loop knows of the pods when it decides a move.
pub struct PodsNow<'a> {
    pub heartbeats: &'a Heartbeats,
    /// Pods whose worker said it is stopping.
    pub stopping: &'a BTreeSet<String>,
}

/// Logs, counts and publishes every task whose active moved from `current` to `next`, records
/// it for the status, and starts waiting for its new owner's first commit.
#[allow(clippy::too_many_arguments)] // the facts of one decision, each used once
pub(super) async fn report(
    deps: &FailoverDeps,
    job: &FailoverJob,
    shared: &Shared,
    pods: PodsNow<'_>,
    (current, next): (Option<&AssignmentDocument>, &AssignmentDocument),
    copies: &BTreeMap<u32, Vec<CopyLag>>,
    pending: &mut BTreeMap<u32, PendingMove>,
    now: Instant,
) {
    let Some(current) = current else {
        tracing::info!(job = %job.name, generation = next.generation, "first assignment");
        return;
    };
    for (before, after) in current.tasks.iter().zip(&next.tasks) {
        let (Some(from), Some(to)) = (&before.active, &after.active) else {
            continue;
        };
        if from == to {
            continue;
        }
        let lag = copies
            .get(&after.task)
            .and_then(|list| list.iter().find(|c| &c.pod == to))
            .map(|c| c.lag);
        // A worker that said it is stopping hands its tasks off; one that is gone or silent
        // has failed.
        let stopping = pods.stopping.contains(from);
        let down = !stopping && !pods.heartbeats.alive(from, now);
        let silent = pods.heartbeats.silent_for(from, now);
        let (reason, note) = if down {
            deps.metrics.promotion(silent.unwrap_or_default());
            (
                "Promoted",
                format!(
                    "task {}: {to} took over from {from} (no answer for {:.1} s); its copy was {} records behind; generation {}",
                    after.task,
                    silent.unwrap_or_default().as_secs_f64(),
                    lag.map_or("?".to_string(), |l| l.to_string()),
                    next.generation
                ),
            )
        } else {
            deps.metrics.handoff();
            (
                "HandedOff",
                format!(
                    "task {}: moved from {from}{} to {to}, whose copy was {} records behind; generation {}",
                    after.task,
                    if stopping {
                        " (its worker is stopping)"
                    } else {
                        ""
                    },
                    lag.map_or("?".to_string(), |l| l.to_string()),
                    next.generation
                ),
            )
        };
        tracing::info!(job = %job.name, task = after.task, %from, %to, ?lag, ?silent, generation = next.generation, reason, "task moved");
        shared.record_move(
            after.task,
            down,
            TaskMove {
                reason: reason.to_string(),
                from: from.clone(),
                to: to.clone(),
                time: Some(Time(Timestamp::now())),
                generation: i64::try_from(next.generation).unwrap_or(i64::MAX),
                lag_at_promotion: lag,
                detection_seconds: down.then(|| silent.unwrap_or_default().as_secs_f64()),
                first_commit_seconds: None,
            },
        );
        let since = if down {
            silent.and_then(|s| now.checked_sub(s)).unwrap_or(now)
        } else {
            now
        };
        pending.insert(
            after.task,
            PendingMove {
                to: to.clone(),
                promoted: down,
                since,
                decided: now,
            },
        );
        publish(deps, job, reason, note).await;
    }
}

/// The pending moves whose new owner now reports a commit of its task as the running active.
/// Pure, so it is tested; the caller takes them out of `pending`.
pub fn committed(
    pending: &BTreeMap<u32, PendingMove>,
    reports: &[(String, Vec<TaskReport>)],
) -> Vec<u32> {
    pending
        .iter()
        .filter(|(task, to)| {
            reports
                .iter()
                .filter(|(pod, _)| *pod == to.to)
                .flat_map(|(_, list)| list)
                .any(|r| {
                    r.task == **task
                        && r.role == TaskRole::Active
                        && r.phase == TaskPhase::Running
                        && r.committed_transactions >= 1
                })
        })
        .map(|(task, _)| *task)
        .collect()
}

/// Records the first commits seen in `reports`: the status's move, the histogram, a log line.
/// A move whose task moved on again, or that waited over a minute, is dropped unmeasured.
pub(super) fn first_commits(
    deps: &FailoverDeps,
    job: &FailoverJob,
    shared: &Shared,
    pending: &mut BTreeMap<u32, PendingMove>,
    reports: &[(String, Vec<TaskReport>)],
    now: Instant,
) {
    for task in committed(pending, reports) {
        let Some(moved) = pending.remove(&task) else {
            continue;
        };
        let stall = now.saturating_duration_since(moved.since);
        let after_decision = now.saturating_duration_since(moved.decided);
        deps.metrics.moved_task_committed(moved.promoted, stall);
        shared.record_first_commit(task, moved.promoted, after_decision.as_secs_f64());
        tracing::info!(job = %job.name, task, to = %moved.to, promoted = moved.promoted, stall_seconds = stall.as_secs_f64(), after_decision_seconds = after_decision.as_secs_f64(), "the task's new owner committed");
    }
    pending
        .retain(|_, moved| now.saturating_duration_since(moved.decided) < Duration::from_secs(60));
}

async fn publish(deps: &FailoverDeps, job: &FailoverJob, reason: &str, note: String) {
    let reference = ObjectReference {
        api_version: Some(job.owner.api_version.clone()),
        kind: Some(job.owner.kind.clone()),
        name: Some(job.name.clone()),
        namespace: Some(job.namespace.clone()),
        uid: Some(job.owner.uid.clone()),
        ..ObjectReference::default()
    };
    let event = Event {
        type_: EventType::Normal,
        reason: reason.to_string(),
        note: Some(note.chars().take(1000).collect()),
        action: "Assign".into(),
        secondary: None,
    };
    if let Err(error) = deps.recorder.publish(&event, &reference).await {
        tracing::warn!(job = %job.name, %error, "could not publish an Event");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_move_is_committed_once_its_new_owner_commits_as_the_running_active() {
        let start = Instant::now();
        let pending = BTreeMap::from([(
            2,
            PendingMove {
                to: "job-1".into(),
                promoted: true,
                since: start,
                decided: start,
            },
        )]);
        let report = |role, phase, commits| TaskReport {
            phase,
            committed_transactions: commits,
            ..TaskReport::new(2, role)
        };
        let at = |pod: &str, report| vec![(pod.to_string(), vec![report])];
        let restoring = at("job-1", report(TaskRole::Active, TaskPhase::Restoring, 0));
        assert!(committed(&pending, &restoring).is_empty());
        let no_commit_yet = at("job-1", report(TaskRole::Active, TaskPhase::Running, 0));
        assert!(committed(&pending, &no_commit_yet).is_empty());
        let old_owner = at("job-0", report(TaskRole::Active, TaskPhase::Running, 9));
        assert!(
            committed(&pending, &old_owner).is_empty(),
            "not the new owner"
        );
        let committing = at("job-1", report(TaskRole::Active, TaskPhase::Running, 1));
        assert_eq!(committed(&pending, &committing), [2]);
    }
}
