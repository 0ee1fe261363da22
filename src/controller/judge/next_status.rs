//! The next status of a job from what one reconcile observed (pure; `update_status` writes it).
//!
//! Conditions are merged into the existing ones (see [`conditions`]); figures a reconcile could
//! not observe this time (S3 or Kafka unreachable) keep their last known values rather than
//! vanishing, and the condition that could not be checked says `Unknown` with the reason.

use crate::api::{JobPhase, RetentionStatus, StatefulStreamJobStatus, TaskStatus};
use crate::controller::judge::conditions::{self, ConditionStatus, ConditionUpdate};
use crate::vocabulary::types;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

/// What one reconcile found out.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Observation {
    pub generation: Option<i64>,
    pub phase: Option<JobPhase>,
    pub conditions: Vec<ConditionUpdate>,
    /// `None`: not observed this time, keep the last value.
    pub retention: Option<RetentionStatus>,
    /// `None`: not observed this time, keep the last value.
    pub tasks: Option<Vec<TaskStatus>>,
    /// A restore request that is now handled.
    pub handled_restore_id: Option<String>,
    /// `None`: not observed this time, keep the last value.
    pub ready_tasks: Option<String>,
    /// The failover loop's assignment generation; `None`: keep the last value.
    pub assignment_generation: Option<i64>,
}

/// The status after `observation`, merged into `existing`.
pub fn next_status(
    existing: &StatefulStreamJobStatus,
    observation: Observation,
    now: &Time,
) -> StatefulStreamJobStatus {
    let Observation {
        generation,
        phase,
        conditions: updates,
        retention,
        tasks,
        handled_restore_id,
        ready_tasks,
        assignment_generation,
    } = observation;
    let tasks = match tasks {
        Some(tasks) => keep_last_promotions(tasks, &existing.tasks),
        None => existing.tasks.clone(),
    };
    StatefulStreamJobStatus {
        phase: phase.or(existing.phase),
        observed_generation: generation.or(existing.observed_generation),
        conditions: conditions::merge_conditions(&existing.conditions, updates, generation, now),
        ready_tasks: ready_tasks.or_else(|| existing.ready_tasks.clone()),
        newest_checkpoint_time: oldest_newest_checkpoint(&tasks)
            .or_else(|| existing.newest_checkpoint_time.clone()),
        assignment_generation: assignment_generation.or(existing.assignment_generation),
        last_restore_id: handled_restore_id.or_else(|| existing.last_restore_id.clone()),
        retention: retention.or_else(|| existing.retention.clone()),
        tasks,
        // Recorded by `apply` when it creates a topic, never by a reconcile's observation.
        created_topics: existing.created_topics.clone(),
        // Recorded by the claims (`apply::owner_marker`), likewise.
        owner_records: existing.owner_records.clone(),
    }
}

/// A task's last promotion and handoff stay in the status until newer ones replace them (a
/// new operator process remembers none of its own).
fn keep_last_promotions(mut tasks: Vec<TaskStatus>, existing: &[TaskStatus]) -> Vec<TaskStatus> {
    for status in &mut tasks {
        let Some(old) = existing.iter().find(|old| old.task == status.task) else {
            continue;
        };
        if status.last_promotion.is_none() {
            status.last_promotion = old.last_promotion.clone();
        }
        if status.last_handoff.is_none() {
            status.last_handoff = old.last_handoff.clone();
        }
    }
    tasks
}

/// The time that matters for recovery: the oldest among the tasks' newest checkpoints. `None`
/// until every task has one (a task without a checkpoint is older than any of them).
fn oldest_newest_checkpoint(tasks: &[TaskStatus]) -> Option<Time> {
    if tasks.is_empty() {
        return None;
    }
    tasks
        .iter()
        .map(|task| task.last_checkpoint.as_ref().and_then(|c| c.time.clone()))
        .collect::<Option<Vec<_>>>()?
        .into_iter()
        .min_by_key(|time| time.0)
}

/// What the phase is decided from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PhaseInputs {
    /// Invalid spec, a refused changelog or an interval that does not fit the retention.
    pub refused: bool,
    pub suspended: bool,
    /// A requested restore is rolling out.
    pub restoring: bool,
    pub desired_pods: i32,
    pub ready_pods: i32,
    /// A recovery risk is flagged (CheckpointStale or RecoveryGap).
    pub at_risk: bool,
    /// A task's owner stopped it on an error it cannot recover from by itself (its changelog
    /// lost, its input position contradicting its state): a ready pod does not run it.
    pub task_failed: bool,
}

/// The phase: Failed, Suspended, Restoring, then by the pods: all ready → Running (Degraded
/// when at risk or a task failed), some ready → Degraded, none → Pending.
pub fn phase(inputs: PhaseInputs) -> JobPhase {
    if inputs.refused {
        JobPhase::Failed
    } else if inputs.suspended {
        JobPhase::Suspended
    } else if inputs.restoring {
        JobPhase::Restoring
    } else if inputs.desired_pods > 0 && inputs.ready_pods >= inputs.desired_pods {
        if inputs.at_risk || inputs.task_failed {
            JobPhase::Degraded
        } else {
            JobPhase::Running
        }
    } else if inputs.ready_pods > 0 {
        JobPhase::Degraded
    } else {
        JobPhase::Pending
    }
}

/// An Event to publish because a watched condition changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConditionEvent {
    pub warning: bool,
    pub reason: String,
    pub note: String,
}

/// The condition types that get an Event when they change, and the status that is bad news.
const EVENT_CONDITIONS: [(&str, ConditionStatus); 4] = [
    (types::INVALID, ConditionStatus::True),
    (types::RETENTION_SAFE, ConditionStatus::False),
    (types::CHECKPOINT_STALE, ConditionStatus::True),
    (types::RECOVERY_GAP, ConditionStatus::True),
];

/// Conditions that get an Event only when they change, never when first seen: a new job is not
/// Ready yet, which is no news; a Ready job losing tasks (a pod failed) and getting them back
/// is the recovery `kubectl get events` should show.
const TRANSITION_CONDITIONS: [(&str, ConditionStatus); 1] =
    [(types::READY, ConditionStatus::False)];

/// Events for the watched conditions whose status changed between `old` and `new`. A condition
/// seen for the first time gets one only when it is bad news or unknown (and never for
/// the conditions of `TRANSITION_CONDITIONS`).
pub fn transition_events(old: &[Condition], new: &[Condition]) -> Vec<ConditionEvent> {
    let mut events = Vec::new();
    let watched = EVENT_CONDITIONS
        .iter()
        .map(|watched| (watched, true))
        .chain(TRANSITION_CONDITIONS.iter().map(|watched| (watched, false)));
    for ((type_, bad), first_seen_counts) in watched {
        let Some(now) = conditions::find(new, type_) else {
            continue;
        };
        let bad_news = now.status == bad.as_str();
        let unknown = now.status == ConditionStatus::Unknown.as_str();
        let changed = match conditions::find(old, type_) {
            Some(before) => before.status != now.status,
            None => first_seen_counts && (bad_news || unknown),
        };
        if changed {
            events.push(ConditionEvent {
                warning: bad_news || unknown,
                reason: now.reason.clone(),
                note: format!("{type_}={}: {}", now.status, now.message),
            });
        }
    }
    events
}

/// A status condition update in one call, for the reconcile's readability.
pub fn condition(
    type_: &'static str,
    status: ConditionStatus,
    reason: &'static str,
    message: impl Into<String>,
) -> ConditionUpdate {
    ConditionUpdate::new(type_, status, reason, message)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::TaskCheckpoint;
    use crate::vocabulary::reasons;
    use k8s_openapi::jiff::Timestamp;

    fn at(seconds: i64) -> Time {
        Time(Timestamp::from_second(seconds).unwrap())
    }

    fn inputs() -> PhaseInputs {
        PhaseInputs {
            refused: false,
            suspended: false,
            restoring: false,
            desired_pods: 3,
            ready_pods: 3,
            at_risk: false,
            task_failed: false,
        }
    }

    #[test]
    fn phase_follows_the_documented_order() {
        assert_eq!(phase(inputs()), JobPhase::Running);
        assert_eq!(
            phase(PhaseInputs {
                at_risk: true,
                ..inputs()
            }),
            JobPhase::Degraded
        );
        assert_eq!(
            phase(PhaseInputs {
                task_failed: true,
                ..inputs()
            }),
            JobPhase::Degraded,
            "every pod ready does not make a failed task run"
        );
        assert_eq!(
            phase(PhaseInputs {
                ready_pods: 1,
                ..inputs()
            }),
            JobPhase::Degraded
        );
        assert_eq!(
            phase(PhaseInputs {
                ready_pods: 0,
                ..inputs()
            }),
            JobPhase::Pending
        );
        assert_eq!(
            phase(PhaseInputs {
                restoring: true,
                ..inputs()
            }),
            JobPhase::Restoring
        );
        assert_eq!(
            phase(PhaseInputs {
                suspended: true,
                restoring: true,
                ..inputs()
            }),
            JobPhase::Suspended
        );
        assert_eq!(
            phase(PhaseInputs {
                refused: true,
                suspended: true,
                ..inputs()
            }),
            JobPhase::Failed
        );
    }

    fn task(number: i32, time: Option<i64>) -> TaskStatus {
        TaskStatus {
            task: number,
            last_checkpoint: time.map(|t| TaskCheckpoint {
                sequence: 1,
                time: Some(at(t)),
                ..TaskCheckpoint::default()
            }),
            ..TaskStatus::default()
        }
    }

    #[test]
    fn unobserved_figures_keep_their_last_value_and_a_no_op_is_identical() {
        let first = next_status(
            &StatefulStreamJobStatus::default(),
            Observation {
                generation: Some(2),
                phase: Some(JobPhase::Running),
                conditions: vec![condition(
                    types::RETENTION_SAFE,
                    ConditionStatus::True,
                    reasons::WITHIN_RETENTION,
                    "ok",
                )],
                retention: Some(RetentionStatus {
                    input_retention_ms: Some(3_600_000),
                    ..RetentionStatus::default()
                }),
                tasks: Some(vec![task(0, Some(200)), task(1, Some(100))]),
                handled_restore_id: Some("r1".into()),
                ready_tasks: Some("2/2".into()),
                assignment_generation: Some(7),
            },
            &at(1000),
        );
        assert_eq!(first.assignment_generation, Some(7));
        assert_eq!(first.newest_checkpoint_time, Some(at(100)));
        assert_eq!(first.ready_tasks.as_deref(), Some("2/2"));
        assert_eq!(first.observed_generation, Some(2));
        let later = next_status(
            &first,
            Observation {
                generation: Some(2),
                phase: Some(JobPhase::Running),
                conditions: vec![condition(
                    types::RETENTION_SAFE,
                    ConditionStatus::True,
                    reasons::WITHIN_RETENTION,
                    "ok",
                )],
                ..Observation::default()
            },
            &at(2000),
        );
        assert_eq!(later, first);
    }

    #[test]
    fn a_tasks_last_promotion_stays_until_a_newer_one_replaces_it() {
        let promotion = |to: &str| crate::api::TaskMove {
            reason: "Promoted".into(),
            from: "job-0".into(),
            to: to.into(),
            generation: 3,
            ..crate::api::TaskMove::default()
        };
        let mut moved = task(0, Some(100));
        moved.last_promotion = Some(promotion("job-1"));
        moved.last_handoff = Some(promotion("job-9"));
        let first = next_status(
            &StatefulStreamJobStatus::default(),
            Observation {
                tasks: Some(vec![moved, task(1, Some(100))]),
                ..Observation::default()
            },
            &at(1),
        );
        // A new operator process remembers no move: the status keeps the last one it wrote.
        let later = next_status(
            &first,
            Observation {
                tasks: Some(vec![task(0, Some(100)), task(1, Some(100))]),
                ..Observation::default()
            },
            &at(2),
        );
        assert_eq!(later.tasks[0].last_promotion, Some(promotion("job-1")));
        assert_eq!(later.tasks[0].last_handoff, Some(promotion("job-9")));
        assert_eq!(later.tasks[1].last_promotion, None);
        let mut again = task(0, Some(100));
        again.last_promotion = Some(promotion("job-2"));
        let newest = next_status(
            &later,
            Observation {
                tasks: Some(vec![again, task(1, Some(100))]),
                ..Observation::default()
            },
            &at(3),
        );
        assert_eq!(newest.tasks[0].last_promotion, Some(promotion("job-2")));
    }

    #[test]
    fn the_record_of_created_topics_survives_every_status_write() {
        let mut existing = StatefulStreamJobStatus::default();
        existing.created_topics.insert(
            "ns.job.changelog".into(),
            crate::api::status::CreatedTopic {
                role: "changelog".into(),
                partitions: 3,
                created_at: at(1),
            },
        );
        let next = next_status(&existing, Observation::default(), &at(2));
        assert_eq!(next.created_topics, existing.created_topics);
    }

    #[test]
    fn a_task_without_checkpoint_leaves_no_newest_time() {
        assert_eq!(
            oldest_newest_checkpoint(&[task(0, Some(5)), task(1, None)]),
            None
        );
        assert_eq!(oldest_newest_checkpoint(&[]), None);
    }

    #[test]
    fn events_fire_on_transitions_only() {
        let bad = conditions::merge_conditions(
            &[],
            [
                condition(
                    types::RECOVERY_GAP,
                    ConditionStatus::True,
                    reasons::INPUT_TRUNCATED,
                    "task 0 gap",
                ),
                condition(
                    types::RETENTION_SAFE,
                    ConditionStatus::True,
                    reasons::WITHIN_RETENTION,
                    "fine",
                ),
            ],
            Some(1),
            &at(1),
        );
        let first = transition_events(&[], &bad);
        assert_eq!(
            first,
            vec![ConditionEvent {
                warning: true,
                reason: "InputTruncated".into(),
                note: "RecoveryGap=True: task 0 gap".into(),
            }]
        );
        assert!(transition_events(&bad, &bad).is_empty());
        let healed = conditions::merge_conditions(
            &bad,
            [condition(
                types::RECOVERY_GAP,
                ConditionStatus::False,
                reasons::INPUT_AVAILABLE,
                "",
            )],
            Some(1),
            &at(2),
        );
        let events = transition_events(&bad, &healed);
        assert_eq!(events.len(), 1);
        assert!(!events[0].warning);
        assert_eq!(events[0].reason, "InputAvailable");
    }

    #[test]
    fn ready_gets_events_when_a_ready_job_loses_tasks_and_recovers_but_not_when_it_starts() {
        fn ready(
            old: &[Condition],
            status: ConditionStatus,
            reason: &'static str,
            at_seconds: i64,
        ) -> Vec<Condition> {
            let update = condition(types::READY, status, reason, "n/4 tasks running");
            conditions::merge_conditions(old, [update], Some(1), &at(at_seconds))
        }
        let starting = ready(&[], ConditionStatus::False, reasons::TASKS_NOT_RUNNING, 1);
        assert!(transition_events(&[], &starting).is_empty(), "a new job");
        let running = ready(
            &starting,
            ConditionStatus::True,
            reasons::ALL_TASKS_RUNNING,
            2,
        );
        let lost = ready(
            &running,
            ConditionStatus::False,
            reasons::TASKS_NOT_RUNNING,
            3,
        );
        let events = transition_events(&running, &lost);
        assert_eq!(events.len(), 1);
        assert!(events[0].warning);
        assert_eq!(events[0].reason, "TasksNotRunning");
        let back = ready(&lost, ConditionStatus::True, reasons::ALL_TASKS_RUNNING, 4);
        let events = transition_events(&lost, &back);
        assert_eq!(events.len(), 1);
        assert!(!events[0].warning);
        assert_eq!(events[0].reason, "AllTasksRunning");
        assert!(transition_events(&back, &back).is_empty());
    }
}
