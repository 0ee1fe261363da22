//! What the operator reports about a job.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Observed state of a job.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StatefulStreamJobStatus {
    /// Lifecycle phase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<JobPhase>,

    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,

    /// Conditions (Ready, Invalid, RetentionSafe, CheckpointStale, RecoveryGap, ...).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,

    /// Active tasks running / tasks, e.g. `3/4`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_tasks: Option<String>,

    /// Time of the oldest of the tasks' newest checkpoints (the age that matters for recovery).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub newest_checkpoint_time: Option<Time>,

    /// Generation of the current assignment document.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub assignment_generation: Option<i64>,

    /// Id of the last restore request that finished.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_restore_id: Option<String>,

    /// Retention figures the checkpoint settings are checked against.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retention: Option<RetentionStatus>,

    /// One entry per task (input partition).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tasks: Vec<TaskStatus>,

    /// The Kafka topics the operator created for this job, by name, recorded as soon as each
    /// was created. `deletionPolicy: Delete` deletes only these (and none that another job
    /// names): a topic that existed before, such as a shared dead-letter topic, is kept.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub created_topics: BTreeMap<String, CreatedTopic>,

    /// The owner records this job holds, as the operator wrote or found them. A new operator
    /// leader reads a record again only when the job's changelog or S3 prefix is another one, so
    /// a takeover starts the job's failover loop without a read of Kafka or S3 for them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner_records: Option<OwnerRecords>,
}

/// The owner records a job holds (see `status.ownerRecords`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OwnerRecords {
    /// The changelog whose owner record names this job; or one with records but no owner
    /// record (older than owner records), which the job uses as it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub changelog: Option<String>,
    /// The key of the S3 owner marker that names this job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint_marker: Option<String>,
}

/// A topic the operator created for the job.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CreatedTopic {
    /// What the job uses it for: `changelog` or `deadLetter`.
    pub role: String,
    /// Partitions it was created with.
    pub partitions: i32,
    /// When the operator created it.
    pub created_at: Time,
}

/// Job phase: Pending, Restoring, Running, Degraded, Suspended or Failed.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, schemars::JsonSchema)]
pub enum JobPhase {
    Pending,
    Restoring,
    Running,
    Degraded,
    Suspended,
    Failed,
}

/// Retention of the input and changelog topics and what it allows.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RetentionStatus {
    /// Input topic `retention.ms`; absent when retention is unlimited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_retention_ms: Option<i64>,
    /// Input topic `retention.bytes` per partition; absent when unlimited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_retention_bytes: Option<i64>,
    /// Largest checkpoint age that still lets a task be rebuilt from checkpoint plus input.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_safe_checkpoint_age_seconds: Option<i64>,
    /// Changelog `delete.retention.ms` (how long tombstones are kept).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub changelog_delete_retention_ms: Option<i64>,
}

/// Observed state of one task.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TaskStatus {
    /// Task number (= input partition).
    pub task: i32,
    /// Pod running the task actively.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// The standby copies the pods report, with how far each is behind the changelog.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub standbys: Vec<StandbyStatus>,
    /// Task phase as the owner reports it (Created, Restoring, Running, Suspended, Fenced,
    /// Failed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    /// Why the task is in its phase, when that needs saying (retrying, failed, no owner).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Records the task's input is behind the partition end.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_lag: Option<i64>,
    /// Progress of a running restore.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restore: Option<RestoreProgress>,
    /// Newest durable checkpoint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_checkpoint: Option<TaskCheckpoint>,
    /// Id of the newest restore request (`spec.restore.id`) the task's state has applied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub applied_restore_id: Option<String>,
    /// The last time the task's owner failed and a copy on another pod took over (kept
    /// across reconciles and operator restarts).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_promotion: Option<TaskMove>,
    /// The last planned move of the task to another pod (a rolling upgrade, balance, a pod
    /// that stopped), kept the same way.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_handoff: Option<TaskMove>,
}

/// A standby copy of a task, as its pod reports it.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StandbyStatus {
    pub pod: String,
    /// Restoring (warming up) or Running (tailing the changelog).
    pub phase: String,
    /// Records behind the changelog's end; absent until first measured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lag: Option<i64>,
}

/// One move of a task's active copy.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TaskMove {
    /// `Promoted` (its owner failed) or `HandedOff` (its owner still answered).
    pub reason: String,
    pub from: String,
    pub to: String,
    /// When the operator decided the move.
    pub time: Option<Time>,
    /// Assignment generation that made the move.
    pub generation: i64,
    /// Records the new owner's copy was behind the changelog's end at the decision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lag_at_promotion: Option<i64>,
    /// A promotion: how long the old owner had been silent when the move was decided.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detection_seconds: Option<f64>,
    /// From the decision to the new owner running the task: caught up on the changelog and
    /// consuming input. A task with no input to process has this and no first commit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub running_seconds: Option<f64>,
    /// From the decision to the new owner's first commit; absent until it commits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_commit_seconds: Option<f64>,
}

/// Progress of a restore.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RestoreProgress {
    /// Discovery, Download, Replay, CatchUp or Done.
    pub phase: String,
    /// What the restore started from: local, checkpoint, empty (the whole changelog) or input.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    pub records_done: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub records_total: Option<i64>,
    pub bytes_done: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes_total: Option<i64>,
    /// Records per second over the phase so far.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub records_per_second: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eta_seconds: Option<i64>,
    /// A restore from the input: input records processed a second time, whose output is
    /// therefore emitted again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reprocessed_input_records: Option<i64>,
}

/// A durable checkpoint of a task.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TaskCheckpoint {
    /// Sequence number of the checkpoint.
    pub sequence: i64,
    pub time: Option<Time>,
    pub input_offset: i64,
    pub changelog_offset: i64,
    pub bytes: i64,
}
