//! What one job's loop shares with the registry (and through it the reconciles): the pod being
//! drained, the loop's latest view of its job (owners, standbys, lags, unreachable pods), the
//! last moves of each task, and since when a scale-down has been held back.
//!
//! A drain names the pod by name and uid. It lasts until that pod is gone: the loop gives the
//! pod nothing while it still runs (its graceful shutdown included), and the mark ends only
//! when the name belongs to a new pod. Ending it at deletion would let the loop hand the
//! stopping pod new copies, and then tasks, in the moment before its process exits.

use crate::api::TaskMove;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Instant;
use streamkeeper_contract::task_report::{TaskPhase, TaskRole};
use streamkeeper_contract::{AssignmentDocument, TaskReport, TaskReportsDocument};

/// A pod whose tasks move off before it is deleted (a rolling upgrade).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DrainTarget {
    pub pod: String,
    pub uid: String,
}

/// What a loop and the registry share.
#[derive(Clone, Default)]
pub(super) struct Shared {
    pub(super) draining: Arc<Mutex<Option<DrainTarget>>>,
    pub(super) view: Arc<Mutex<LoopView>>,
    /// Since when the StatefulSet has been kept above the job's replicas for a drain.
    pub(super) scale_down_since: Arc<Mutex<Option<Instant>>>,
    /// Each task's last moves, for the status.
    pub(super) moves: Arc<Mutex<BTreeMap<u32, LastMoves>>>,
    /// What each pod that answered the last poll reported, by pod name: the reconcile's status
    /// reads it instead of asking the pods again.
    pub(super) reports: Arc<Mutex<BTreeMap<String, Arc<TaskReportsDocument>>>>,
}

impl Shared {
    /// The pod being drained, if any.
    pub(super) fn draining(&self) -> Option<DrainTarget> {
        locked(&self.draining).clone()
    }

    /// Ends the drain once its pod is gone: the pod of that name (if listed) is another one.
    pub(super) fn end_drain_if_replaced(&self, listed: &[(String, String)]) {
        let mut draining = locked(&self.draining);
        let replaced = draining.as_ref().is_some_and(|target| {
            listed
                .iter()
                .any(|(pod, uid)| *pod == target.pod && *uid != target.uid)
        });
        if replaced {
            *draining = None;
        }
    }

    pub(super) fn publish(&self, view: LoopView) {
        *locked(&self.view) = view;
    }

    pub(super) fn record_move(&self, task: u32, promoted: bool, moved: TaskMove) {
        let mut moves = locked(&self.moves);
        let last = moves.entry(task).or_default();
        *last.of(promoted) = Some(moved);
    }

    #[cfg(test)]
    pub(super) fn last_moves(&self, task: u32) -> Option<LastMoves> {
        locked(&self.moves).get(&task).cloned()
    }

    /// The new owner of `task`'s last promotion (or handoff) runs it, `seconds` after the
    /// decision.
    pub(super) fn record_running(&self, task: u32, promoted: bool, seconds: f64) {
        if let Some(last) = locked(&self.moves).get_mut(&task)
            && let Some(moved) = last.of(promoted)
        {
            moved.running_seconds = Some(seconds);
        }
    }

    /// The new owner of `task`'s last promotion (or handoff) committed, `seconds` after the
    /// decision.
    pub(super) fn record_first_commit(&self, task: u32, promoted: bool, seconds: f64) {
        if let Some(last) = locked(&self.moves).get_mut(&task)
            && let Some(moved) = last.of(promoted)
        {
            moved.first_commit_seconds = Some(seconds);
        }
    }
}

/// A task's last promotion and last handoff.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LastMoves {
    pub promotion: Option<TaskMove>,
    pub handoff: Option<TaskMove>,
}

impl LastMoves {
    fn of(&mut self, promoted: bool) -> &mut Option<TaskMove> {
        if promoted {
            &mut self.promotion
        } else {
            &mut self.handoff
        }
    }
}

/// What the loop found at its last poll, for the rolling upgrade and the scale-down.
#[derive(Debug, Default)]
pub(super) struct LoopView {
    pub document: Option<AssignmentDocument>,
    /// The job's pods as the loop last listed them.
    pub pods: Vec<String>,
    /// Whether the loop has listed the pods and polled them since it started.
    pub listed: bool,
    /// Pods that answered the last poll holding no active copy (all released).
    pub released: BTreeSet<String>,
    /// Pods that do not answer at all (their process is gone, or they hang).
    pub unreachable: BTreeSet<String>,
    /// Every task runs on its owner and every standby is within the acceptable lag.
    pub copies_warm: bool,
    /// The copies are warm and every pod answers.
    pub settled: bool,
}

impl LoopView {
    /// `pod` holds no task in the document and has released every active copy (or no longer
    /// answers at all: a pod that did not answer this time may still hold tasks, unless gone).
    pub fn holds_nothing(&self, pod: &str) -> bool {
        let assigned = self.document.as_ref().is_some_and(|document| {
            document.active_tasks_of(pod).next().is_some()
                || document.standby_tasks_of(pod).next().is_some()
        });
        !assigned && (self.released.contains(pod) || self.unreachable.contains(pod))
    }
}

pub(super) fn locked<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The loop's findings for the rolling upgrade: who still runs active copies, and whether
/// every pod answers and every task and standby is where the document says and caught up.
pub(super) fn view_of(
    acceptable_recovery_lag: i64,
    document: Option<&AssignmentDocument>,
    reports: &[(String, Vec<TaskReport>)],
    pods: Vec<String>,
    unreachable: BTreeSet<String>,
) -> LoopView {
    let released = reports
        .iter()
        .filter(|(_, list)| {
            list.iter()
                .filter(|r| r.role == TaskRole::Active)
                .all(|r| matches!(r.phase, TaskPhase::Stopped | TaskPhase::Fenced))
        })
        .map(|(pod, _)| pod.clone())
        .collect();
    let runs = |pod: &str, task: u32, role: TaskRole| {
        reports
            .iter()
            .filter(|(name, _)| name == pod)
            .flat_map(|(_, list)| list)
            .find(|r| r.task == task && r.role == role && r.phase == TaskPhase::Running)
    };
    let copies_warm = document.is_some_and(|document| {
        document.tasks.iter().all(|task| {
            task.active
                .as_deref()
                .is_some_and(|owner| runs(owner, task.task, TaskRole::Active).is_some())
                && task.standbys.iter().all(|standby| {
                    runs(standby, task.task, TaskRole::Standby)
                        .is_some_and(|r| r.changelog_lag.unwrap_or(0) <= acceptable_recovery_lag)
                })
        })
    });
    let settled = copies_warm && reports.len() == pods.len();
    LoopView {
        document: document.cloned(),
        pods,
        listed: true,
        released,
        unreachable,
        copies_warm,
        settled,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use streamkeeper_contract::TaskAssignment;

    fn report(task: u32, role: TaskRole, phase: TaskPhase, lag: Option<i64>) -> TaskReport {
        TaskReport {
            phase,
            changelog_lag: lag,
            ..TaskReport::new(task, role)
        }
    }

    fn document() -> AssignmentDocument {
        AssignmentDocument {
            version: 1,
            generation: 5,
            tasks: vec![TaskAssignment {
                task: 0,
                active: Some("job-0".into()),
                standbys: vec!["job-1".into()],
            }],
        }
    }

    #[test]
    fn settled_needs_every_pod_every_owner_running_and_every_standby_warm() {
        let warm = vec![
            (
                "job-0".to_string(),
                vec![report(0, TaskRole::Active, TaskPhase::Running, None)],
            ),
            (
                "job-1".to_string(),
                vec![report(0, TaskRole::Standby, TaskPhase::Running, Some(3))],
            ),
        ];
        let view = |reports: &[(String, Vec<TaskReport>)], pods: usize| {
            let names = (0..pods).map(|i| format!("job-{i}")).collect();
            view_of(10, Some(&document()), reports, names, BTreeSet::new())
        };
        assert!(view(&warm, 2).settled);
        assert!(!view(&warm, 3).settled, "a pod did not answer");
        assert!(view(&warm, 3).copies_warm);
        let mut cold = warm.clone();
        cold[1].1[0].changelog_lag = Some(11);
        assert!(!view(&cold, 2).settled, "the standby is behind");
        let mut taking_over = warm.clone();
        taking_over[0].1[0].phase = TaskPhase::Restoring;
        assert!(
            !view(&taking_over, 2).settled,
            "the owner is not running yet"
        );
        // job-1 holds only a standby: it runs no active copy, so it counts as released.
        assert_eq!(
            view(&warm, 2).released,
            BTreeSet::from(["job-1".to_string()])
        );
    }

    #[test]
    fn a_drain_lasts_until_its_pod_is_replaced() {
        let shared = Shared::default();
        *locked(&shared.draining) = Some(DrainTarget {
            pod: "job-1".into(),
            uid: "old".into(),
        });
        // Deleted and not yet recreated, or still listed as itself: the drain goes on.
        shared.end_drain_if_replaced(&[("job-0".into(), "a".into())]);
        shared.end_drain_if_replaced(&[("job-1".into(), "old".into())]);
        assert!(shared.draining().is_some());
        shared.end_drain_if_replaced(&[("job-1".into(), "new".into())]);
        assert_eq!(shared.draining(), None);
    }
}
