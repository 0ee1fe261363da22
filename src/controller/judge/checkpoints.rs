//! What a job's checkpoints mean for its status (pure): each task's newest usable checkpoint
//! against the max safe age (`CheckpointStale`) and against the input's log-start offset
//! (`RecoveryGap`), with the gaps the workers themselves found. The reconcile reads the
//! manifests and offsets ([`crate::controller::observe::checkpoints`]).

use super::conditions::{ConditionStatus, ConditionUpdate};
use super::next_status::condition;
use crate::api::{TaskCheckpoint, TaskStatus};
use crate::retention;
use crate::vocabulary::{reasons, types};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use std::time::Duration;
use streamkeeper_contract::{CheckpointManifest, TaskReport};

/// What S3 and Kafka say about the job's checkpoints.
#[derive(Debug, Clone, PartialEq)]
pub struct CheckpointObservation {
    pub tasks: Vec<TaskStatus>,
    pub checkpoint_stale: ConditionUpdate,
    pub recovery_gap: ConditionUpdate,
}

/// The pure part: the checkpoint a restore would use per task (index = task), log-start offset
/// per input partition.
pub fn judge(
    newest: &[Option<CheckpointManifest>],
    log_starts: &[i64],
    max_safe_age: Option<Duration>,
    now_ms: u64,
) -> CheckpointObservation {
    let mut tasks = Vec::new();
    let mut stale = Vec::new();
    let mut gaps = Vec::new();
    let mut without = Vec::new();
    for (index, manifest) in newest.iter().enumerate() {
        let task = u32::try_from(index).unwrap_or(u32::MAX);
        let Some(manifest) = manifest else {
            without.push(task.to_string());
            tasks.push(TaskStatus {
                task: i32::try_from(task).unwrap_or(i32::MAX),
                ..TaskStatus::default()
            });
            continue;
        };
        let age = Duration::from_millis(now_ms.saturating_sub(manifest.created_at_ms));
        if let Err(violation) = retention::check_checkpoint_age(task, age, max_safe_age) {
            stale.push(violation.to_string());
        }
        if let Some(log_start) = log_starts.get(index)
            && let Err(violation) =
                retention::check_recovery_gap(task, manifest.input_offset, *log_start)
        {
            gaps.push(violation.to_string());
        }
        tasks.push(TaskStatus {
            task: i32::try_from(task).unwrap_or(i32::MAX),
            last_checkpoint: Some(TaskCheckpoint {
                sequence: i64::try_from(manifest.sequence).unwrap_or(i64::MAX),
                time: i64::try_from(manifest.created_at_ms)
                    .ok()
                    .and_then(|ms| Timestamp::from_millisecond(ms).ok())
                    .map(Time),
                input_offset: manifest.input_offset,
                changelog_offset: manifest.changelog_offset,
                bytes: i64::try_from(manifest.total_bytes()).unwrap_or(i64::MAX),
            }),
            ..TaskStatus::default()
        });
    }
    let checkpoint_stale = if !stale.is_empty() {
        condition(
            types::CHECKPOINT_STALE,
            ConditionStatus::True,
            reasons::CHECKPOINT_TOO_OLD,
            stale.join("; "),
        )
    } else if !without.is_empty() {
        condition(
            types::CHECKPOINT_STALE,
            ConditionStatus::False,
            reasons::NO_CHECKPOINT_YET,
            format!("no checkpoint yet for tasks {}", without.join(", ")),
        )
    } else {
        condition(
            types::CHECKPOINT_STALE,
            ConditionStatus::False,
            reasons::CHECKPOINTS_FRESH,
            "every task's newest checkpoint is within the max safe age",
        )
    };
    let recovery_gap = if gaps.is_empty() {
        condition(
            types::RECOVERY_GAP,
            ConditionStatus::False,
            reasons::INPUT_AVAILABLE,
            "the input after every task's newest checkpoint is still in Kafka",
        )
    } else {
        condition(
            types::RECOVERY_GAP,
            ConditionStatus::True,
            reasons::INPUT_TRUNCATED,
            gaps.join("; "),
        )
    };
    CheckpointObservation {
        tasks,
        checkpoint_stale,
        recovery_gap,
    }
}

/// `recovery_gap` with the gaps the workers found when their tasks started consuming: input
/// retention deleted before a task processed it (`inputGap` in `/v1/tasks`). Such records are
/// lost to the state for good, which the condition says with the offsets.
pub fn with_input_gaps(
    recovery_gap: ConditionUpdate,
    reports: &[(String, Vec<TaskReport>)],
) -> ConditionUpdate {
    let lost: Vec<String> = reports
        .iter()
        .flat_map(|(pod, list)| list.iter().map(move |report| (pod, report)))
        .filter_map(|(pod, report)| {
            let gap = report.input_gap?;
            Some(format!(
                "task {}: input offsets {}..{} ({} records) were deleted by retention before {pod} processed them; the state lacks them",
                report.task,
                gap.from_offset,
                gap.to_offset,
                gap.records()
            ))
        })
        .collect();
    if lost.is_empty() {
        return recovery_gap;
    }
    let mut message = lost.join("; ");
    if recovery_gap.status == ConditionStatus::True {
        message = format!("{}; {message}", recovery_gap.message);
    }
    condition(
        types::RECOVERY_GAP,
        ConditionStatus::True,
        reasons::INPUT_RECORDS_LOST,
        message,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::observe::restore_checkpoints;
    use streamkeeper_contract::task_report::{InputGap, TaskRole};

    #[test]
    fn a_gap_a_worker_reports_makes_the_recovery_gap_true_with_its_offsets() {
        let fine = condition(
            types::RECOVERY_GAP,
            ConditionStatus::False,
            reasons::INPUT_AVAILABLE,
            "the input after every task's newest checkpoint is still in Kafka",
        );
        let quiet = vec![(
            "job-0".to_string(),
            vec![TaskReport::new(0, TaskRole::Active)],
        )];
        assert_eq!(with_input_gaps(fine.clone(), &quiet), fine);
        let mut report = TaskReport::new(2, TaskRole::Active);
        report.input_gap = Some(InputGap {
            from_offset: 40,
            to_offset: 100,
        });
        let gapped = vec![("job-1".to_string(), vec![report])];
        let judged = with_input_gaps(fine, &gapped);
        assert_eq!(judged.status, ConditionStatus::True);
        assert_eq!(judged.reason, reasons::INPUT_RECORDS_LOST);
        assert!(
            judged
                .message
                .contains("task 2: input offsets 40..100 (60 records)"),
            "{}",
            judged.message
        );
    }

    const HOUR_MS: u64 = 3_600_000;

    fn manifest(task: u32, created_at_ms: u64, input_offset: i64) -> CheckpointManifest {
        CheckpointManifest {
            version: 1,
            task,
            sequence: 9,
            owner: "job-0".into(),
            assignment_generation: 1,
            created_at_ms,
            input_offset,
            changelog_offset: 100,
            newest_record_ms: created_at_ms,
            processor_kind: "count".into(),
            state_format_version: 1,
            files: vec![],
            changelog_incarnation: None,
        }
    }

    #[test]
    fn fresh_checkpoints_above_the_log_start_are_fine() {
        let now = 100 * HOUR_MS;
        let observation = judge(
            &[
                Some(manifest(0, now - HOUR_MS, 50)),
                Some(manifest(1, now, 7)),
            ],
            &[10, 7],
            Some(Duration::from_secs(12 * 3600)),
            now,
        );
        assert_eq!(observation.checkpoint_stale.reason, "CheckpointsFresh");
        assert_eq!(observation.recovery_gap.status, ConditionStatus::False);
        let checkpoint = observation.tasks[0].last_checkpoint.clone().unwrap();
        assert_eq!(checkpoint.input_offset, 50);
        assert_eq!(checkpoint.sequence, 9);
        assert_eq!(
            checkpoint.time.unwrap().0.as_millisecond(),
            i64::try_from(now - HOUR_MS).unwrap()
        );
    }

    #[test]
    fn an_old_checkpoint_is_stale_and_a_truncated_input_is_a_gap() {
        let now = 100 * HOUR_MS;
        let observation = judge(
            &[Some(manifest(0, now - 13 * HOUR_MS, 5)), None],
            &[10, 0],
            Some(Duration::from_secs(12 * 3600)),
            now,
        );
        assert_eq!(observation.checkpoint_stale.status, ConditionStatus::True);
        assert!(
            observation.checkpoint_stale.message.contains("task 0"),
            "{}",
            observation.checkpoint_stale.message
        );
        assert_eq!(observation.recovery_gap.status, ConditionStatus::True);
        assert!(
            observation.recovery_gap.message.contains("5 records"),
            "{}",
            observation.recovery_gap.message
        );
        assert_eq!(observation.tasks[1].last_checkpoint, None);
    }

    #[test]
    fn each_task_shows_its_best_checkpoint_within_its_changelog_partition() {
        let at = |task, sequence, changelog_offset| CheckpointManifest {
            sequence,
            changelog_offset,
            ..manifest(task, 0, 0)
        };
        let listed = vec![
            vec![at(0, 1, 7), at(0, 2, 2), at(0, 3, 2)],
            vec![at(1, 1, 12), at(1, 2, 6)],
            vec![at(2, 1, 0)],
        ];
        // Task 2's changelog partition is unknown: no checkpoint can be judged usable.
        let best = restore_checkpoints(listed, &[(5, 10), (0, 10)]);
        let shown: Vec<Option<u64>> = best
            .iter()
            .map(|m| m.as_ref().map(|m| m.sequence))
            .collect();
        assert_eq!(shown, vec![Some(1), Some(2), None]);
    }

    #[test]
    fn tasks_without_checkpoints_are_named() {
        let observation = judge(&[None, None], &[], None, 0);
        assert_eq!(observation.checkpoint_stale.reason, "NoCheckpointYet");
        assert!(observation.checkpoint_stale.message.contains("0, 1"));
    }
}
