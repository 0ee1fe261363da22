//! Step 6 of the pipeline (validate → read facts → build → apply → observe → **judge** →
//! update status), pure: what the facts, the apply outcome and the workers'
//! reports mean for the job's conditions, its phase and when to look again. The driver
//! ([`crate::controller::reconcile`]) gathers the evidence; nothing here performs I/O, so every
//! verdict is unit-tested from fixtures.
//!
//! A reconcile that stops early is judged too: an invalid spec or a broken rule ([`Refusal`])
//! says why nothing more was applied; an unreachable Kafka or S3 turns the conditions it could
//! not check `Unknown`.

pub mod checkpoints;
pub mod claims;
pub mod co_partitioned;
pub mod conditions;
pub mod next_status;
pub mod task_views;
pub mod wasm_module;
pub mod worker_refusal;

use crate::adapters::kafka_admin::DesiredTopic;
use crate::api::{JobPhase, RetentionStatus, StatefulStreamJob};
use crate::controller::apply::operations::{RollState, SuspendNote};
use crate::controller::cadence::{RESYNC, ROLLING_RECHECK, TASKS_RECHECK};
use crate::controller::{InvalidSpec, ValidatedJob};
use crate::failover::LastMoves;
use crate::k8s::ownership::ForeignObject;
use crate::retention::{self, RetentionViolation, TopicRetention};
use crate::vocabulary::{reasons, types};
use checkpoints::CheckpointObservation;
use conditions::{ConditionStatus, ConditionUpdate};
use next_status::{Observation, PhaseInputs, condition};
use std::collections::BTreeMap;
use std::time::Duration;
use streamkeeper_contract::co_partitioning::{PartitionCountMismatch, PartitionsChanged};
use streamkeeper_contract::task_report::{TaskFailure, TaskPhase, TaskRole};
use streamkeeper_contract::{TaskReport, format_go_duration};
use task_views::TaskView;

/// A rule the job breaks: nothing more is applied until it holds.
#[derive(Debug, Clone, PartialEq)]
pub struct Refusal {
    /// The spec field the rule is about.
    pub field: &'static str,
    pub violation: RetentionViolation,
    /// The condition that turns `False` with the violation's reason.
    pub condition_type: &'static str,
}

/// The invalid spec: `Invalid` with the error, not `Ready`, phase `Failed`.
pub fn invalid(observation: &mut Observation, invalid: &InvalidSpec) {
    observation.phase = Some(JobPhase::Failed);
    observation.conditions.extend([
        condition(
            types::INVALID,
            ConditionStatus::True,
            invalid.category(),
            invalid.to_string(),
        ),
        condition(
            types::READY,
            ConditionStatus::False,
            invalid.category(),
            "the spec is invalid; nothing is applied until it changes",
        ),
    ]);
}

/// The spec passed validation.
pub fn spec_valid() -> ConditionUpdate {
    condition(
        types::INVALID,
        ConditionStatus::False,
        reasons::SPEC_VALID,
        "",
    )
}

/// A refused job: the rule's condition, `Invalid` naming the field, not `Ready`, phase `Failed`.
pub fn refused(observation: &mut Observation, refusal: &Refusal) {
    let reason = refusal.violation.category();
    observation.phase = Some(JobPhase::Failed);
    observation.conditions.extend([
        condition(
            refusal.condition_type,
            ConditionStatus::False,
            reason,
            refusal.violation.to_string(),
        ),
        condition(
            types::INVALID,
            ConditionStatus::True,
            reason,
            format!("{}: {}", refusal.field, refusal.violation),
        ),
        condition(
            types::READY,
            ConditionStatus::False,
            reason,
            "refused; nothing is started until the rule holds",
        ),
    ]);
}

/// A join whose two topics' partition counts differ: `Invalid` naming both topics and counts,
/// not `Ready`, phase `Failed`; nothing is started (or changed) until the counts agree.
pub fn not_co_partitioned(observation: &mut Observation, mismatch: &PartitionCountMismatch) {
    observation.phase = Some(JobPhase::Failed);
    observation.conditions.extend([
        condition(
            types::INVALID,
            ConditionStatus::True,
            reasons::NOT_CO_PARTITIONED,
            mismatch.to_string(),
        ),
        condition(
            types::READY,
            ConditionStatus::False,
            reasons::NOT_CO_PARTITIONED,
            "refused; nothing is started until both topics of the join have as many partitions",
        ),
    ]);
}

/// An object with one of the job's names is someone else's: `Ready` is `False` naming it, and
/// nothing after it is applied until it is gone.
pub fn foreign(observation: &mut Observation, foreign: &ForeignObject) {
    observation.phase = Some(JobPhase::Failed);
    observation.conditions.push(condition(
        types::READY,
        ConditionStatus::False,
        reasons::FOREIGN_OBJECT,
        foreign.to_string(),
    ));
}

/// Kafka or S3 could not be reached: each condition in `affected` is `Unknown`, saying why.
pub fn unreachable(
    observation: &mut Observation,
    reason: &'static str,
    message: &str,
    affected: &[&'static str],
) {
    for type_ in affected {
        observation.conditions.push(condition(
            type_,
            ConditionStatus::Unknown,
            reason,
            message.to_string(),
        ));
    }
}

impl Refusal {
    /// The input topic's retention config makes no sense (say, not a number).
    pub fn input_retention(violation: RetentionViolation) -> Self {
        Self {
            field: "spec.kafka.inputTopic",
            violation,
            condition_type: types::RETENTION_SAFE,
        }
    }

    /// The existing changelog topic is not one the job can trust (not compacted, wrong
    /// partition count, deletes keys).
    pub fn changelog(violation: RetentionViolation) -> Self {
        Self {
            field: "spec.kafka.changelogTopic",
            violation,
            condition_type: types::CHANGELOG_READY,
        }
    }
}

/// What the input's retention allows, judged once per reconcile.
#[derive(Debug, Clone, PartialEq)]
pub struct RetentionVerdict {
    /// For the status; the changelog's `delete.retention.ms` is filled in once it is applied.
    pub status: RetentionStatus,
    /// `RetentionSafe`, or the refusal of a checkpoint interval that does not fit.
    pub condition: Result<ConditionUpdate, Refusal>,
    /// The oldest a task's newest checkpoint may be (`None`: no time limit).
    pub max_safe_age: Option<Duration>,
}

/// The input's retention against the checkpoint interval.
pub fn retention(job: &ValidatedJob, input: &TopicRetention) -> RetentionVerdict {
    let effective = retention::effective_retention(input, None);
    let max_safe_age = retention::max_safe_checkpoint_age(effective);
    let condition = match retention::check_interval(job.checkpoint.interval, effective) {
        Ok(()) => Ok(retention_safe(job, input, effective)),
        Err(violation) => Err(Refusal {
            field: "spec.checkpoint.interval",
            violation,
            condition_type: types::RETENTION_SAFE,
        }),
    };
    RetentionVerdict {
        status: RetentionStatus {
            input_retention_ms: input.time_ms(),
            input_retention_bytes: input
                .bytes_per_partition
                .and_then(|b| i64::try_from(b).ok()),
            max_safe_checkpoint_age_seconds: max_safe_age
                .and_then(|age| i64::try_from(age.as_secs()).ok()),
            changelog_delete_retention_ms: None,
        },
        condition,
        max_safe_age,
    }
}

/// `RetentionSafe` when the interval fits: the numbers, or why there is no time bound.
fn retention_safe(
    job: &ValidatedJob,
    input: &TopicRetention,
    effective: Option<Duration>,
) -> ConditionUpdate {
    let interval = format_go_duration(job.checkpoint.interval);
    match (effective, input.bytes_per_partition) {
        (Some(retention), _) => condition(
            types::RETENTION_SAFE,
            ConditionStatus::True,
            reasons::WITHIN_RETENTION,
            format!(
                "checkpoint.interval {interval} <= input retention {} / {} = {}; max safe checkpoint age {} (retention / {})",
                format_go_duration(retention),
                retention::INTERVAL_RETENTION_DIVISOR,
                format_go_duration(retention / retention::INTERVAL_RETENTION_DIVISOR),
                format_go_duration(retention / retention::SAFE_AGE_RETENTION_DIVISOR),
                retention::SAFE_AGE_RETENTION_DIVISOR,
            ),
        ),
        (None, Some(bytes)) => condition(
            types::RETENTION_SAFE,
            ConditionStatus::Unknown,
            reasons::RETENTION_UNKNOWN,
            format!(
                "the input keeps {bytes} bytes per partition and no time limit; how long that lasts depends on the input rate, so RecoveryGap watches the offsets instead"
            ),
        ),
        (None, None) => condition(
            types::RETENTION_SAFE,
            ConditionStatus::True,
            reasons::RETENTION_UNLIMITED,
            "the input topic's retention is unlimited",
        ),
    }
}

/// The changelog exists with the job's partitions and compaction (apply has checked both).
pub fn changelog_ready(changelog: &DesiredTopic) -> ConditionUpdate {
    condition(
        types::CHANGELOG_READY,
        ConditionStatus::True,
        reasons::TOPIC_READY,
        format!(
            "{}: {} partitions, cleanup.policy=compact",
            changelog.name, changelog.partitions
        ),
    )
}

/// `Suspended`: what this reconcile's suspend did, what an earlier one found out, or running.
pub fn suspended(
    job: &StatefulStreamJob,
    suspend: bool,
    note: Option<&SuspendNote>,
) -> ConditionUpdate {
    match (note, suspend) {
        (Some(note), true) => condition(
            types::SUSPENDED,
            ConditionStatus::True,
            note.reason,
            note.message.clone(),
        ),
        // Already at zero: what the suspend found out (final checkpoint or not) stays.
        (None, true) => match already_suspended(job) {
            Some((reason, message)) => {
                condition(types::SUSPENDED, ConditionStatus::True, reason, message)
            }
            None => condition(
                types::SUSPENDED,
                ConditionStatus::True,
                reasons::SUSPENDED,
                "scaled to zero; state is kept in the changelog, the checkpoints and the volumes",
            ),
        },
        (_, false) => condition(
            types::SUSPENDED,
            ConditionStatus::False,
            reasons::RUNNING,
            "",
        ),
    }
}

/// The final-checkpoint outcome a `Suspended` condition that is already `True` records.
fn already_suspended(job: &StatefulStreamJob) -> Option<(&'static str, String)> {
    let existing = conditions::find(&job.status.as_ref()?.conditions, types::SUSPENDED)?;
    let reason = [
        reasons::FINAL_CHECKPOINT,
        reasons::FINAL_CHECKPOINT_INCOMPLETE,
    ]
    .into_iter()
    .find(|reason| *reason == existing.reason)?;
    (existing.status == "True").then(|| (reason, existing.message.clone()))
}

/// Everything the tasks' verdict is drawn from.
pub struct TaskEvidence<'a> {
    /// The job as read at the start (its status says which restore was handled already).
    pub job: &'a StatefulStreamJob,
    pub validated: &'a ValidatedJob,
    pub roll: RollState,
    pub checkpoints: CheckpointObservation,
    /// Each answering worker pod's task reports.
    pub reports: &'a [(String, Vec<TaskReport>)],
    /// The StatefulSet's desired and ready pod counts.
    pub desired_pods: i32,
    pub ready_pods: i32,
    /// Each task's last move, as the failover loop decided it.
    pub moves: &'a BTreeMap<u32, LastMoves>,
    /// A join topic that no longer has the partition count the job's keys are placed by.
    pub partitions_changed: Option<&'a PartitionsChanged>,
}

/// The tasks' verdict: their status, `CheckpointStale`, `RecoveryGap`, `Restoring`, `Ready`,
/// the phase, and how soon to look again (sooner while pods roll or tasks settle).
pub fn tasks(observation: &mut Observation, evidence: TaskEvidence<'_>) -> Duration {
    let TaskEvidence {
        job,
        validated,
        roll,
        checkpoints,
        reports,
        desired_pods,
        ready_pods,
        moves,
        partitions_changed,
    } = evidence;
    let CheckpointObservation {
        tasks,
        checkpoint_stale,
        recovery_gap,
    } = checkpoints;
    // Input lost to retention, as a worker reports it, is a recovery gap too.
    let recovery_gap = checkpoints::with_input_gaps(recovery_gap, reports);
    let at_risk = checkpoint_stale.status == ConditionStatus::True
        || recovery_gap.status == ConditionStatus::True;
    observation
        .conditions
        .extend([checkpoint_stale, recovery_gap]);

    let restore_id = validated.restore.as_ref().map(|r| r.id.as_str());
    let mut view = task_views::merge(tasks, reports, restore_id);
    for status in &mut view.tasks {
        let task = u32::try_from(status.task).ok();
        let last = task.and_then(|task| moves.get(&task));
        status.last_promotion = last.and_then(|moves| moves.promotion.clone());
        status.last_handoff = last.and_then(|moves| moves.handoff.clone());
    }
    if let Some(join) = join_topics(validated)
        && let Some(verdict) = co_partitioned::co_partitioned(job, join, reports)
    {
        observation.conditions.push(verdict);
    }
    observation.conditions.push(standbys_ready(
        validated.workers.standby_replicas,
        validated.acceptable_recovery_lag,
        view.tasks.len(),
        reports,
    ));
    let restoring = restore_progress(job, validated, &roll, &view, observation);
    observation.ready_tasks = Some(view.ready_tasks());
    let phase = next_status::phase(PhaseInputs {
        refused: false,
        suspended: validated.workers.suspend,
        restoring: restoring || view.restoring > 0,
        desired_pods,
        ready_pods,
        at_risk,
        task_failed: !view.failed.is_empty() || partitions_changed.is_some(),
    });
    observation.phase = Some(phase);
    let ready = match partitions_changed {
        Some(changed) if phase != JobPhase::Suspended => condition(
            types::READY,
            ConditionStatus::False,
            reasons::PARTITIONS_CHANGED,
            format!("the join's tasks stop: {changed}"),
        ),
        _ => ready(phase, &view, desired_pods, ready_pods),
    };
    observation.conditions.push(ready);
    let tasks_settling = !validated.workers.suspend && view.running < view.tasks.len();
    observation.tasks = Some(view.tasks);
    if roll.in_progress() {
        ROLLING_RECHECK
    } else if tasks_settling {
        TASKS_RECHECK
    } else {
        RESYNC
    }
}

/// The two topics a join's tasks join (a re-keyed side's: its repartition topic), and its
/// partitioner; `None` for a processor with one input, and for a join whose table every task
/// reads whole: its keys need no placement.
fn join_topics(validated: &ValidatedJob) -> Option<co_partitioned::JoinTopics<'_>> {
    let processor = &validated.processor;
    if processor.right_read_whole() {
        return None;
    }
    Some(co_partitioned::JoinTopics {
        left: processor
            .left_repartition_topic()
            .unwrap_or(&validated.kafka.input_topic),
        right: processor
            .right_repartition_topic()
            .or(processor.right_topic())?,
        partitioner: validated.processor.partitioner()?,
    })
}

/// `StandbysReady`: every task has `wanted` standbys that run and are within `acceptable_lag`
/// records of the changelog's end, as the workers report them; `False` names the tasks short
/// of warm standbys.
pub fn standbys_ready(
    wanted: u32,
    acceptable_lag: u64,
    tasks: usize,
    reports: &[(String, Vec<TaskReport>)],
) -> ConditionUpdate {
    let condition_type = types::STANDBYS_READY;
    if wanted == 0 {
        return condition(
            condition_type,
            ConditionStatus::False,
            reasons::NO_STANDBYS_REQUESTED,
            "spec.standbyReplicas is 0: a failed pod's tasks restore from its volume or a checkpoint",
        );
    }
    let acceptable = i64::try_from(acceptable_lag).unwrap_or(i64::MAX);
    let mut warm = vec![0u32; tasks];
    for report in reports.iter().flat_map(|(_, list)| list) {
        let is_warm = report.role == TaskRole::Standby
            && report.phase == TaskPhase::Running
            && report.changelog_lag.is_some_and(|lag| lag <= acceptable);
        if let Some(count) = warm.get_mut(report.task as usize).filter(|_| is_warm) {
            *count += 1;
        }
    }
    let short: Vec<String> = warm
        .iter()
        .enumerate()
        .filter(|(_, count)| **count < wanted)
        .map(|(task, count)| format!("{task} ({count}/{wanted})"))
        .collect();
    if short.is_empty() {
        condition(
            condition_type,
            ConditionStatus::True,
            reasons::STANDBYS_WARM,
            format!("every task has {wanted} standby(s) within {acceptable_lag} records"),
        )
    } else {
        condition(
            condition_type,
            ConditionStatus::False,
            reasons::STANDBYS_WARMING,
            format!(
                "tasks short of warm standbys (within {acceptable_lag} records): {}",
                short.join(", ")
            ),
        )
    }
}

/// `Ready` from the phase, with the figures behind it.
fn ready(phase: JobPhase, view: &TaskView, desired_pods: i32, ready_pods: i32) -> ConditionUpdate {
    let figures = format!(
        "{}/{} tasks running; {ready_pods}/{desired_pods} worker pods ready",
        view.running,
        view.tasks.len()
    );
    if phase != JobPhase::Suspended
        && let Some(first) = view.failed.first()
    {
        let others = match view.failed.len() {
            1 => String::new(),
            n => format!(" (and {} more failed tasks)", n - 1),
        };
        // A join's topic that changed its partition count is the job's problem, not the task's.
        let reason = match first.failure {
            Some(TaskFailure::PartitionsChanged) => reasons::PARTITIONS_CHANGED,
            _ => reasons::TASK_FAILED,
        };
        return condition(
            types::READY,
            ConditionStatus::False,
            reason,
            format!(
                "task {} stopped on {}: {}{others}; {figures}",
                first.task, first.pod, first.reason
            ),
        );
    }
    match phase {
        JobPhase::Running => condition(
            types::READY,
            ConditionStatus::True,
            reasons::ALL_TASKS_RUNNING,
            figures,
        ),
        JobPhase::Suspended => condition(
            types::READY,
            ConditionStatus::False,
            reasons::SUSPENDED,
            "suspended",
        ),
        _ => condition(
            types::READY,
            ConditionStatus::False,
            reasons::TASKS_NOT_RUNNING,
            figures,
        ),
    }
}

/// The `Restoring` condition; whether a requested restore is still under way: pods are being
/// replaced to hand it over, or some task has not applied it yet (as the workers report).
fn restore_progress(
    job: &StatefulStreamJob,
    validated: &ValidatedJob,
    roll: &RollState,
    view: &TaskView,
    observation: &mut Observation,
) -> bool {
    let handled = job
        .status
        .as_ref()
        .and_then(|status| status.last_restore_id.clone());
    let Some(request) = &validated.restore else {
        observation.conditions.push(condition(
            types::RESTORING,
            ConditionStatus::False,
            reasons::NO_RESTORE,
            "",
        ));
        return false;
    };
    let done = || {
        condition(
            types::RESTORING,
            ConditionStatus::False,
            reasons::RESTORE_DONE,
            format!("every task has applied restore {}", request.id),
        )
    };
    if handled.as_deref() == Some(request.id.as_str()) {
        observation.conditions.push(done());
        return false;
    }
    if roll.in_progress() {
        observation.conditions.push(condition(
            types::RESTORING,
            ConditionStatus::True,
            reasons::RESTORE_ROLLING_OUT,
            format!(
                "restore {}: replacing {} worker pods that do not have the request yet",
                request.id, roll.outdated
            ),
        ));
        return true;
    }
    let tasks = view.tasks.len();
    if validated.workers.suspend || tasks == 0 || view.applied_restore < tasks {
        observation.conditions.push(condition(
            types::RESTORING,
            ConditionStatus::True,
            reasons::RESTORE_APPLYING,
            format!(
                "restore {}: {}/{tasks} tasks have applied it",
                request.id, view.applied_restore
            ),
        ));
        return true;
    }
    observation.handled_restore_id = Some(request.id.clone());
    observation.conditions.push(done());
    false
}

#[cfg(test)]
mod tests;
