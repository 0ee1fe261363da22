//! What the loop says about a task whose active copy moved: a log line, a counter, an Event, the
//! move in the job's status, and, once the new owner commits, how long the task stood still.
//!
//! A move is a promotion when its old owner is down (refused, or silent past the suspicion
//! time, or its process replaced) or stopping while its StatefulSet keeps it (someone deleted
//! the pod: `kubectl delete pod`, an eviction), and a handoff when it still answers or stops
//! because the job scaled down. The time to the new
//! owner's first commit is the figure a user feels: for a promotion it runs from the old
//! owner's last answer, so it includes the detection; for a handoff from the decision.

use super::health::Heartbeats;
use super::job::{FailoverDeps, FailoverJob};
use super::shared::Shared;
use crate::api::TaskMove;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use serde::{Deserialize, Serialize};
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
    /// Whether the new owner was seen running the task (caught up, consuming input).
    pub running: bool,
}

/// What the loop knows of the pods when it decides a move.
pub struct PodsNow<'a> {
    pub heartbeats: &'a Heartbeats,
    /// Pods whose worker said it is stopping.
    pub stopping: &'a BTreeSet<String>,
    /// Pods the StatefulSet keeps: a pod of a lower ordinal that stops was deleted by someone,
    /// one of a higher ordinal goes because the job scaled down.
    pub desired_pods: i32,
}

/// A move the loop decided: the status's record of it and its Event's message. Stored with
/// the document, so a new leader reports a move its predecessor decided but did not get to.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DecidedMove {
    pub task: u32,
    /// Its owner failed (a promotion); else it handed the task over.
    pub promoted: bool,
    pub note: String,
    #[serde(rename = "move")]
    pub moved: TaskMove,
}

impl DecidedMove {
    /// Where its stall is measured from, as an instant of this process: the old owner's last
    /// answer (a promotion) or the decision (a handoff). `None` when the decision time is
    /// unknown.
    fn since_and_decided(&self, now: Instant, wall_now: Timestamp) -> Option<(Instant, Instant)> {
        let decided_at = self.moved.time.as_ref()?.0;
        let ago = Duration::try_from(wall_now.duration_since(decided_at)).unwrap_or_default();
        let decided = now.checked_sub(ago)?;
        let silent = Duration::from_secs_f64(self.moved.detection_seconds.unwrap_or(0.0).max(0.0));
        Some((decided.checked_sub(silent).unwrap_or(decided), decided))
    }
}

/// Every task whose active moved from `current` to `next`, decided at `now` (`wall` on the
/// clock). Pure, so it is tested.
pub fn decide(
    pods: PodsNow<'_>,
    (current, next): (&AssignmentDocument, &AssignmentDocument),
    copies: &BTreeMap<u32, Vec<CopyLag>>,
    now: Instant,
    wall: Timestamp,
) -> Vec<DecidedMove> {
    let mut decided = Vec::new();
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
        let lag_text = lag.map_or("?".to_string(), |l| l.to_string());
        // A worker that is gone or silent has failed, and so has one stopping in a pod the
        // StatefulSet keeps (deleted by someone else); one stopping in a scale-down hands
        // its tasks off.
        let stopping = pods.stopping.contains(from);
        let kept = super::rule_inputs::ordinal(from)
            .and_then(|n| i32::try_from(n).ok())
            .is_some_and(|n| n < pods.desired_pods);
        let down = if stopping {
            kept
        } else {
            !pods.heartbeats.alive(from, now)
        };
        let silent = pods.heartbeats.silent_for(from, now).unwrap_or_default();
        let (reason, note) = if down {
            let why = if stopping {
                "its pod was deleted".to_string()
            } else {
                format!("no answer for {:.1} s", silent.as_secs_f64())
            };
            (
                "Promoted",
                format!(
                    "task {}: {to} took over from {from} ({why}); its copy was {lag_text} records behind; generation {}",
                    after.task, next.generation
                ),
            )
        } else {
            let why = if stopping {
                " (its worker is stopping: the job scaled down)"
            } else if super::scale_down::leaving(from, pods.desired_pods) {
                " (the job scales down: it leaves once it holds nothing)"
            } else {
                ""
            };
            (
                "HandedOff",
                format!(
                    "task {}: moved from {from}{why} to {to}, whose copy was {lag_text} records behind; generation {}",
                    after.task, next.generation
                ),
            )
        };
        decided.push(DecidedMove {
            task: after.task,
            promoted: down,
            note,
            moved: TaskMove {
                reason: reason.to_string(),
                from: from.clone(),
                to: to.clone(),
                time: Some(Time(wall)),
                generation: i64::try_from(next.generation).unwrap_or(i64::MAX),
                lag_at_promotion: lag,
                detection_seconds: down.then_some(silent.as_secs_f64()),
                running_seconds: None,
                first_commit_seconds: None,
            },
        });
    }
    decided
}

/// Logs, counts and publishes each decided move, records it for the status, and starts
/// waiting for its new owner's first commit (unless the task is in `committed_already`: a new
/// leader cannot tell when that commit happened).
pub(super) async fn report(
    deps: &FailoverDeps,
    job: &FailoverJob,
    shared: &Shared,
    decided: &[DecidedMove],
    committed_already: &[u32],
    pending: &mut BTreeMap<u32, PendingMove>,
) {
    let (now, wall_now) = (Instant::now(), Timestamp::now());
    for decision in decided {
        let moved = &decision.moved;
        let silent = Duration::from_secs_f64(moved.detection_seconds.unwrap_or(0.0).max(0.0));
        if decision.promoted {
            deps.metrics.promotion(silent);
        } else {
            deps.metrics.handoff();
        }
        tracing::info!(job = %job.name, task = decision.task, from = %moved.from, to = %moved.to, lag = ?moved.lag_at_promotion, detection_seconds = ?moved.detection_seconds, generation = moved.generation, reason = %moved.reason, "task moved");
        shared.record_move(decision.task, decision.promoted, moved.clone());
        if !committed_already.contains(&decision.task)
            && let Some((since, decided_at)) = decision.since_and_decided(now, wall_now)
        {
            pending.insert(
                decision.task,
                PendingMove {
                    to: moved.to.clone(),
                    promoted: decision.promoted,
                    since,
                    decided: decided_at,
                    running: false,
                },
            );
        }
        super::events::publish(
            deps,
            job,
            false,
            &moved.reason,
            "Assign",
            decision.note.clone(),
        )
        .await;
    }
}

/// Whether `pod` reports `task` as its running active with at least `commits` transactions.
fn runs_as_owner(
    reports: &[(String, Vec<TaskReport>)],
    pod: &str,
    task: u32,
    commits: u64,
) -> bool {
    reports
        .iter()
        .filter(|(name, _)| name == pod)
        .flat_map(|(_, list)| list)
        .any(|r| {
            r.task == task
                && r.role == TaskRole::Active
                && r.phase == TaskPhase::Running
                && r.committed_transactions >= commits
        })
}

/// Whether `pod` reports a commit of `task` as its running active.
fn commits_as_owner(reports: &[(String, Vec<TaskReport>)], pod: &str, task: u32) -> bool {
    runs_as_owner(reports, pod, task, 1)
}

/// The tasks that stay with their new owner whatever the balance: promoted, and not committed
/// there yet. A task with no input keeps the mark until its move expires unmeasured.
pub fn settling(pending: &BTreeMap<u32, PendingMove>) -> BTreeSet<u32> {
    pending
        .iter()
        .filter(|(_, moved)| moved.promoted)
        .map(|(task, _)| *task)
        .collect()
}

/// The pending moves whose new owner now runs the task (caught up, consuming input) and was
/// not seen doing so before. Pure, so it is tested.
pub fn now_running(
    pending: &BTreeMap<u32, PendingMove>,
    reports: &[(String, Vec<TaskReport>)],
) -> Vec<u32> {
    tasks_where(pending, |task, moved| {
        !moved.running && runs_as_owner(reports, &moved.to, task, 0)
    })
}

fn tasks_where(
    pending: &BTreeMap<u32, PendingMove>,
    keep: impl Fn(u32, &PendingMove) -> bool,
) -> Vec<u32> {
    pending
        .iter()
        .filter(|(task, moved)| keep(**task, moved))
        .map(|(task, _)| *task)
        .collect()
}

/// The pending moves whose new owner now reports a commit of its task as the running active.
/// Pure, so it is tested; the caller takes them out of `pending`.
pub fn committed(
    pending: &BTreeMap<u32, PendingMove>,
    reports: &[(String, Vec<TaskReport>)],
) -> Vec<u32> {
    tasks_where(pending, |task, moved| {
        commits_as_owner(reports, &moved.to, task)
    })
}

/// The decided moves whose new owner already commits in `reports`.
pub fn committed_already(
    decided: &[DecidedMove],
    reports: &[(String, Vec<TaskReport>)],
) -> Vec<u32> {
    decided
        .iter()
        .filter(|d| commits_as_owner(reports, &d.moved.to, d.task))
        .map(|d| d.task)
        .collect()
}

/// Records when each new owner in `reports` first runs its task (the status's move), and the
/// first commits seen: the status's move, the histogram, a log line, and a request to write
/// the status now (its owners changed).
/// A move whose task moved on again, or that waited over a minute, is dropped unmeasured.
pub(super) fn first_commits(
    deps: &FailoverDeps,
    job: &FailoverJob,
    shared: &Shared,
    pending: &mut BTreeMap<u32, PendingMove>,
    reports: &[(String, Vec<TaskReport>)],
    now: Instant,
) {
    for task in now_running(pending, reports) {
        if let Some(moved) = pending.get_mut(&task) {
            moved.running = true;
            let after_decision = now.saturating_duration_since(moved.decided);
            shared.record_running(task, moved.promoted, after_decision.as_secs_f64());
        }
    }
    let finished = committed(pending, reports);
    for &task in &finished {
        let Some(moved) = pending.remove(&task) else {
            continue;
        };
        let stall = now.saturating_duration_since(moved.since);
        let after_decision = now.saturating_duration_since(moved.decided);
        deps.metrics.moved_task_committed(moved.promoted, stall);
        shared.record_first_commit(task, moved.promoted, after_decision.as_secs_f64());
        tracing::info!(job = %job.name, task, to = %moved.to, promoted = moved.promoted, stall_seconds = stall.as_secs_f64(), after_decision_seconds = after_decision.as_secs_f64(), "the task's new owner committed");
    }
    if !finished.is_empty() {
        deps.refresh.request(&job.namespace, &job.name);
    }
    pending
        .retain(|_, moved| now.saturating_duration_since(moved.decided) < Duration::from_secs(60));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn document(generation: u64, actives: &[&str]) -> AssignmentDocument {
        AssignmentDocument {
            version: 1,
            generation,
            tasks: actives
                .iter()
                .enumerate()
                .map(|(task, active)| streamkeeper_contract::TaskAssignment {
                    task: u32::try_from(task).unwrap_or(0),
                    active: Some(active.to_string()),
                    standbys: Vec::new(),
                })
                .collect(),
        }
    }

    #[test]
    fn a_move_off_a_dead_or_deleted_pod_is_a_promotion_and_off_a_live_or_scaled_down_one_a_handoff()
    {
        use super::super::health::Poll;
        let start = Instant::now();
        let now = start + Duration::from_millis(700);
        let mut heartbeats = Heartbeats::default();
        heartbeats.record("dead", Poll::Answered(None), start);
        heartbeats.record("dead", Poll::Refused, now);
        for pod in ["live", "job-1", "job-3", "job-4", "new"] {
            heartbeats.record(pod, Poll::Answered(None), now);
        }
        // Both stop: job-1 is kept by its StatefulSet of 3 (someone deleted it), job-3 is
        // not (the job scaled down).
        let stopping = BTreeSet::from(["job-1".to_string(), "job-3".to_string()]);
        let pods = PodsNow {
            heartbeats: &heartbeats,
            stopping: &stopping,
            desired_pods: 3,
        };
        let current = document(4, &["dead", "live", "job-3", "new", "job-1", "job-4"]);
        let next = document(5, &["new", "new", "new", "new", "new", "new"]);
        let copies = BTreeMap::from([(
            0,
            vec![CopyLag {
                pod: "new".into(),
                lag: 3,
            }],
        )]);
        let wall: Timestamp = "2026-12-01T10:00:00Z".parse().unwrap();
        let decided = decide(pods, (&current, &next), &copies, now, wall);

        let summary: Vec<(u32, bool, &str)> = decided
            .iter()
            .map(|d| (d.task, d.promoted, d.moved.reason.as_str()))
            .collect();
        assert_eq!(
            summary,
            [
                (0, true, "Promoted"),
                (1, false, "HandedOff"),
                (2, false, "HandedOff"),
                (4, true, "Promoted"),
                (5, false, "HandedOff")
            ],
            "task 3 stayed on its pod"
        );
        let promotion = &decided[0].moved;
        assert_eq!(promotion.detection_seconds, Some(0.7));
        assert_eq!(promotion.lag_at_promotion, Some(3));
        assert_eq!(promotion.generation, 5);
        assert_eq!(promotion.time, Some(Time(wall)));
        assert!(
            decided[0]
                .note
                .starts_with("task 0: new took over from dead (no answer for 0.7 s)")
        );
        assert!(
            decided[2]
                .note
                .contains("(its worker is stopping: the job scaled down)")
        );
        assert!(decided[3].note.contains("(its pod was deleted)"));
        assert!(
            decided[4]
                .note
                .contains("(the job scales down: it leaves once it holds nothing)"),
            "job-4 still runs, above the 3 pods the job keeps: {}",
            decided[4].note
        );
        assert_eq!(decided[1].moved.detection_seconds, None);
    }

    #[test]
    fn a_stored_moves_clock_is_read_back_as_instants_of_this_process() {
        let wall: Timestamp = "2026-12-01T10:00:00Z".parse().unwrap();
        let decided = DecidedMove {
            task: 0,
            promoted: true,
            note: String::new(),
            moved: TaskMove {
                time: Some(Time(wall)),
                detection_seconds: Some(0.5),
                ..TaskMove::default()
            },
        };
        let now = Instant::now() + Duration::from_secs(60);
        let later = wall + k8s_openapi::jiff::SignedDuration::from_secs(7);
        let (since, decided_at) = decided.since_and_decided(now, later).unwrap();
        assert_eq!(now - decided_at, Duration::from_secs(7));
        assert_eq!(decided_at - since, Duration::from_millis(500));
        let untimed = DecidedMove {
            moved: TaskMove::default(),
            ..decided
        };
        assert_eq!(untimed.since_and_decided(now, later), None);
    }

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
                running: false,
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

        assert!(now_running(&pending, &restoring).is_empty());
        assert!(now_running(&pending, &old_owner).is_empty());
        assert_eq!(now_running(&pending, &no_commit_yet), [2], "running, idle");
        let mut seen = pending.clone();
        seen.get_mut(&2).unwrap().running = true;
        assert!(now_running(&seen, &committing).is_empty(), "recorded once");
    }

    #[test]
    fn only_promotions_not_yet_committed_settle_their_task() {
        let start = Instant::now();
        let pending_move = |promoted| PendingMove {
            to: "job-1".into(),
            promoted,
            since: start,
            decided: start,
            running: true,
        };
        let pending = BTreeMap::from([(1, pending_move(true)), (3, pending_move(false))]);
        assert_eq!(
            settling(&pending),
            BTreeSet::from([1]),
            "a handoff holds nothing"
        );
    }

    #[tokio::test]
    async fn a_finished_move_asks_for_the_jobs_status_to_be_written_now() {
        use futures::StreamExt;
        let refresh = super::super::status_requests::StatusRefresh::default();
        let mut requests = refresh.take_requests().unwrap();
        let client =
            kube::Client::try_from(kube::Config::new("http://127.0.0.1:1".parse().unwrap()))
                .unwrap();
        let deps = FailoverDeps {
            client,
            reporter: "test".into(),
            leadership: crate::leader::Leadership::unconditional(),
            metrics: std::sync::Arc::new(crate::telemetry::metrics::Metrics::new()),
            refresh: refresh.sender(),
            pods: None,
            zones: Default::default(),
            secrets: Default::default(),
        };
        let job = FailoverJob {
            namespace: "shop".into(),
            name: "card-count".into(),
            owner: Default::default(),
            tasks: 4,
            desired_pods: 2,
            standby_replicas: 1,
            acceptable_recovery_lag: 10_000,
            heartbeat_timeout: Duration::from_secs(2),
            port: 8080,
        };
        let now = Instant::now();
        let mut pending = BTreeMap::from([(
            2,
            PendingMove {
                to: "job-1".into(),
                promoted: false,
                since: now,
                decided: now,
                running: false,
            },
        )]);
        let running = |commits| {
            vec![(
                "job-1".to_string(),
                vec![TaskReport {
                    phase: TaskPhase::Running,
                    committed_transactions: commits,
                    ..TaskReport::new(2, TaskRole::Active)
                }],
            )]
        };
        let shared = Shared::default();
        shared.record_move(2, false, TaskMove::default());
        first_commits(&deps, &job, &shared, &mut pending, &running(0), now);
        assert_eq!(pending.len(), 1, "not finished before its first commit");
        let handoff = |shared: &Shared| shared.last_moves(2).and_then(|m| m.handoff);
        assert!(
            handoff(&shared).unwrap().running_seconds.is_some(),
            "running timed"
        );
        assert_eq!(handoff(&shared).unwrap().first_commit_seconds, None);
        first_commits(&deps, &job, &shared, &mut pending, &running(1), now);
        assert!(pending.is_empty());
        assert!(handoff(&shared).unwrap().first_commit_seconds.is_some());
        drop(deps);
        drop(refresh);
        let asked: Vec<_> = requests.by_ref().collect().await;
        assert_eq!(
            asked,
            [kube::runtime::reflector::ObjectRef::new("card-count").within("shop")]
        );
    }
}
