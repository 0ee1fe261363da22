//! The running failover loops as the rest of the operator sees them: started and stopped by
//! the reconcile, and, for a rolling upgrade, told which pod to drain and asked whether it is
//! drained and whether every copy is warm again.
//!
//! A drain names the pod by name and uid. It lasts until that pod is gone: the loop gives the
//! pod nothing while it still runs (its graceful shutdown included), and the mark ends only
//! when the name belongs to a new pod. Ending it at deletion would let the loop hand the
//! stopping pod new copies, and then tasks, in the moment before its process exits.

use super::refresh::StatusRefresh;
use super::{FailoverDeps, FailoverJob, run};
use crate::api::TaskMove;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use streamkeeper_contract::task_report::{TaskPhase, TaskRole};
use streamkeeper_contract::{AssignmentDocument, TaskReport};
use tokio::sync::watch;

/// The running loops, by `namespace/name`.
#[derive(Default)]
pub struct Failovers {
    loops: Mutex<HashMap<String, Running>>,
    /// The loops' requests to write a job's status now.
    pub refresh: StatusRefresh,
}

/// One job's loop as the registry holds it.
struct Running {
    job: watch::Sender<FailoverJob>,
    shared: Shared,
}

/// A pod whose tasks move off before it is deleted (a rolling upgrade).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DrainTarget {
    pub pod: String,
    pub uid: String,
}

/// What a loop and the registry share.
#[derive(Clone, Default)]
pub(super) struct Shared {
    draining: Arc<Mutex<Option<DrainTarget>>>,
    view: Arc<Mutex<LoopView>>,
    /// Each task's last moves, for the status.
    moves: Arc<Mutex<BTreeMap<u32, LastMoves>>>,
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

/// What the loop found at its last poll, for the rolling upgrade.
#[derive(Debug, Default)]
pub(super) struct LoopView {
    pub document: Option<AssignmentDocument>,
    /// Pods that answered the last poll holding no active copy (all released).
    pub released: BTreeSet<String>,
    /// Pods that do not answer at all (their process is gone, or they hang).
    pub unreachable: BTreeSet<String>,
    /// Every pod answers, every task runs on its owner and every standby is within the
    /// acceptable lag.
    pub settled: bool,
}

fn locked<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Failovers {
    fn lock(&self) -> MutexGuard<'_, HashMap<String, Running>> {
        locked(&self.loops)
    }

    fn shared(&self, namespace: &str, name: &str) -> Option<Shared> {
        let loops = self.lock();
        Some(loops.get(&format!("{namespace}/{name}"))?.shared.clone())
    }

    /// Starts the job's loop, or hands it the job's current settings.
    pub fn ensure(&self, deps: &FailoverDeps, job: FailoverJob) {
        let key = format!("{}/{}", job.namespace, job.name);
        let mut loops = self.lock();
        if let Some(running) = loops.get(&key)
            && !running.job.is_closed()
        {
            running.job.send_if_modified(|current| {
                let changed = *current != job;
                if changed {
                    *current = job.clone();
                }
                changed
            });
            return;
        }
        let (sender, receiver) = watch::channel(job);
        let shared = Shared::default();
        tokio::spawn(run(deps.clone(), receiver, shared.clone()));
        loops.insert(
            key,
            Running {
                job: sender,
                shared,
            },
        );
    }

    /// Stops the job's loop (the job is being deleted).
    pub fn stop(&self, namespace: &str, name: &str) {
        self.lock().remove(&format!("{namespace}/{name}"));
    }

    /// Moves every task of the pod to other pods' copies, and gives it none, until it is gone.
    pub fn drain(&self, namespace: &str, name: &str, target: DrainTarget) {
        if let Some(shared) = self.shared(namespace, name) {
            *locked(&shared.draining) = Some(target);
        }
    }

    /// The pod being drained, if any.
    pub fn draining(&self, namespace: &str, name: &str) -> Option<DrainTarget> {
        self.shared(namespace, name)?.draining()
    }

    /// The drained pod holds no task in the stored assignment and has released every active
    /// copy (or no longer answers at all). True when the job has no loop.
    pub fn drained(&self, namespace: &str, name: &str, pod: &str) -> bool {
        let Some(shared) = self.shared(namespace, name) else {
            return true;
        };
        let view = locked(&shared.view);
        let assigned = view.document.as_ref().is_some_and(|document| {
            document.active_tasks_of(pod).next().is_some()
                || document.standby_tasks_of(pod).next().is_some()
        });
        // A pod that did not answer this time may still hold tasks, unless it is gone.
        !assigned && (view.released.contains(pod) || view.unreachable.contains(pod))
    }

    /// The generation of the assignment the loop holds, once it has one.
    pub fn generation(&self, namespace: &str, name: &str) -> Option<u64> {
        let shared = self.shared(namespace, name)?;
        let view = locked(&shared.view);
        Some(view.document.as_ref()?.generation)
    }

    /// Each task's last move this process decided.
    pub fn moves(&self, namespace: &str, name: &str) -> BTreeMap<u32, LastMoves> {
        self.shared(namespace, name)
            .map(|shared| locked(&shared.moves).clone())
            .unwrap_or_default()
    }

    /// Every task runs on its owner and every standby is caught up: the next pod of a rolling
    /// upgrade may go. True when the job has no loop.
    pub fn settled(&self, namespace: &str, name: &str) -> bool {
        self.shared(namespace, name)
            .is_none_or(|shared| locked(&shared.view).settled)
    }
}

/// The loop's findings for the rolling upgrade: who still runs active copies, and whether
/// every pod answers and every task and standby is where the document says and caught up.
pub(super) fn view_of(
    acceptable_recovery_lag: i64,
    document: Option<&AssignmentDocument>,
    reports: &[(String, Vec<TaskReport>)],
    pods: usize,
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
    let settled = reports.len() == pods
        && document.is_some_and(|document| {
            document.tasks.iter().all(|task| {
                task.active
                    .as_deref()
                    .is_some_and(|owner| runs(owner, task.task, TaskRole::Active).is_some())
                    && task.standbys.iter().all(|standby| {
                        runs(standby, task.task, TaskRole::Standby).is_some_and(|r| {
                            r.changelog_lag.unwrap_or(0) <= acceptable_recovery_lag
                        })
                    })
            })
        });
    LoopView {
        document: document.cloned(),
        released,
        unreachable,
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
        let view = |reports: &[(String, Vec<TaskReport>)], pods| {
            view_of(10, Some(&document()), reports, pods, BTreeSet::new())
        };
        assert!(view(&warm, 2).settled);
        assert!(!view(&warm, 3).settled, "a pod did not answer");
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
