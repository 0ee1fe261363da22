//! The worker's answer to `GET /v1/tasks`: what each task it hosts is doing. The operator reads
//! it into the job's status (per-task owner, phase, restore progress, `readyTasks`), and people
//! read it with `curl` while a restore runs.
//!
//! Task phases: Created → Restoring → Running → (Suspended | Fenced), with Failed when a task
//! gives up and Stopped after a graceful shutdown. Restore phases: Discovery → (Download) →
//! Replay → CatchUp → Done.

use crate::co_partitioning::PlacementEvidence;
use crate::{FormatError, Versioned};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TaskReportsDocument {
    pub version: u32,
    /// One report per task the worker hosts, by task number.
    pub tasks: Vec<TaskReport>,
    /// The worker is shutting down (its pod is being deleted): it takes no new assignment, so
    /// the operator moves its tasks now and gives it none. Written only when true, so a
    /// running worker's document reads the same as before the field existed.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub stopping: bool,
    /// The newest assignment generation the worker has recorded (on its volume), if any. The
    /// operator starts a new document above it when the stored one is gone, since a worker
    /// never acts on an older generation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generation: Option<u64>,
    /// Names the worker process, fresh at each start. An answer under another name than the
    /// last one means the process that ran the pod's tasks is gone, even when the restart was
    /// too quick for the operator to find the port closed: a pod force-deleted and recreated
    /// under the same name and address answers again within a poll.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub process: Option<String>,
}

impl TaskReportsDocument {
    pub fn new(tasks: Vec<TaskReport>) -> Self {
        Self {
            version: Self::VERSION,
            tasks,
            stopping: false,
            generation: None,
            process: None,
        }
    }

    /// The same reports, answered by the process named `process`.
    pub fn answered_by(self, process: &str) -> Self {
        Self {
            process: Some(process.to_string()),
            ..self
        }
    }

    /// The same reports from a worker that has recorded `generation`.
    pub fn acting_on(self, generation: Option<u64>) -> Self {
        Self { generation, ..self }
    }

    /// The same reports from a worker that is shutting down.
    pub fn stopping(self) -> Self {
        Self {
            stopping: true,
            ..self
        }
    }
}

impl Versioned for TaskReportsDocument {
    const FORMAT: &'static str = "task reports";
    const VERSION: u32 = 1;

    fn version(&self) -> u32 {
        self.version
    }

    fn check(&self) -> Result<(), FormatError> {
        let mut seen = std::collections::BTreeSet::new();
        for report in &self.tasks {
            if !seen.insert((report.task, report.role)) {
                return Err(FormatError::InvalidField {
                    format: Self::FORMAT,
                    field: "tasks".into(),
                    reason: format!(
                        "task {} is reported twice as {:?}",
                        report.task, report.role
                    ),
                });
            }
        }
        Ok(())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum TaskPhase {
    Created,
    Restoring,
    Running,
    Suspended,
    Fenced,
    Stopped,
    Failed,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum RestorePhase {
    Discovery,
    Download,
    Replay,
    CatchUp,
    Done,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TaskRole {
    Active,
    Standby,
}

/// What a restore started from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RestoreSource {
    /// Not decided yet (Discovery).
    Unknown,
    /// The task's local state, plus the changelog after it.
    Local,
    /// An S3 checkpoint, plus the changelog after it.
    Checkpoint,
    /// Nothing: the whole changelog.
    Empty,
    /// An S3 checkpoint, then the input reprocessed from the checkpoint's input offset
    /// (`spec.restore.source: input`); output after that offset is emitted again.
    Input,
}

/// Progress of a restore.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RestoreProgress {
    pub phase: RestorePhase,
    pub source: RestoreSource,
    pub records_done: u64,
    pub records_total: u64,
    pub bytes_done: u64,
    pub records_per_second: f64,
    pub eta_seconds: Option<f64>,
    /// The checkpoint download, when the restore started from an S3 checkpoint.
    pub download: Option<DownloadProgress>,
    /// Input records that will be processed a second time, so their output is emitted again
    /// (a restore from the input only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reprocessed_input_records: Option<u64>,
}

/// Progress of a checkpoint download (the Download restore phase).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DownloadProgress {
    pub checkpoint_sequence: u64,
    pub bytes_done: u64,
    pub bytes_total: u64,
    pub bytes_per_second: f64,
    pub eta_seconds: Option<f64>,
}

/// The newest durable checkpoint of a task (also the answer of `POST /v1/checkpoints`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CheckpointReport {
    pub sequence: u64,
    pub created_at_ms: u64,
    pub input_offset: i64,
    pub changelog_offset: i64,
    pub total_bytes: u64,
    /// Bytes this checkpoint had to upload (objects not already in S3).
    pub uploaded_bytes: u64,
    pub files: usize,
    pub uploaded_files: usize,
    /// From the local RocksDB checkpoint to the durable manifest.
    pub seconds: f64,
}

/// One task's report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TaskReport {
    pub task: u32,
    pub role: TaskRole,
    pub phase: TaskPhase,
    /// Why the task is in its phase, when that needs saying (fenced, failed, retrying).
    pub reason: Option<String>,
    pub next_input_offset: Option<i64>,
    pub next_changelog_offset: Option<i64>,
    pub input_lag: Option<i64>,
    pub committed_transactions: u64,
    pub restore: Option<RestoreProgress>,
    pub last_checkpoint: Option<CheckpointReport>,
    /// The id of the newest restore request (`spec.restore.id`) this task's state has applied.
    pub applied_restore_id: Option<String>,
    /// Input records retention deleted before this task processed them, found when it last
    /// started consuming (a recovery gap: the state lacks them for good).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_gap: Option<InputGap>,
    /// A standby's distance to the changelog's end, in records (offsets, markers included).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub changelog_lag: Option<i64>,
    /// The assignment generation under which this copy's active role ended in a fence: it waits
    /// as a standby until a newer one names it active. When the document in force still does,
    /// a worker on an older document claimed the task, and the operator issues it again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fenced_in: Option<u64>,
    /// What stopped the task for good, when its phase is Failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<TaskFailure>,
    /// A join's key placement as this copy has checked it since it last started, one entry per
    /// topic read (absent for a processor with one input).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub placement: Vec<PlacementEvidence>,
}

/// Why a task stopped for good (phase `Failed`): nothing a retry on the same pod would change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum TaskFailure {
    /// The changelog topic is gone or was recreated under the task's state.
    ChangelogLost,
    /// The state does not fit the job: another processor, another input topic, or an input
    /// position the state contradicts.
    StateMismatch,
    /// A join's topic no longer has the partition count the job's keys were placed by (someone
    /// added partitions): records of one key now land in other tasks.
    PartitionsChanged,
}

/// A range of input offsets `[from_offset, to_offset)` the task never processed because the
/// broker had deleted them (retention) before it got to them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct InputGap {
    pub from_offset: i64,
    pub to_offset: i64,
}

impl InputGap {
    /// How many input records were lost.
    pub fn records(&self) -> u64 {
        u64::try_from(self.to_offset - self.from_offset).unwrap_or(0)
    }
}

impl TaskReport {
    pub fn new(task: u32, role: TaskRole) -> Self {
        Self {
            task,
            role,
            phase: TaskPhase::Created,
            reason: None,
            next_input_offset: None,
            next_changelog_offset: None,
            input_lag: None,
            committed_transactions: 0,
            restore: None,
            last_checkpoint: None,
            applied_restore_id: None,
            input_gap: None,
            changelog_lag: None,
            fenced_in: None,
            failure: None,
            placement: Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn restoring_task() -> TaskReport {
        TaskReport {
            phase: TaskPhase::Restoring,
            next_input_offset: Some(120),
            restore: Some(RestoreProgress {
                phase: RestorePhase::Download,
                source: RestoreSource::Checkpoint,
                records_done: 0,
                records_total: 0,
                bytes_done: 1 << 20,
                records_per_second: 0.0,
                eta_seconds: None,
                download: Some(DownloadProgress {
                    checkpoint_sequence: 7,
                    bytes_done: 1 << 20,
                    bytes_total: 4 << 20,
                    bytes_per_second: 2e6,
                    eta_seconds: Some(1.5),
                }),
                reprocessed_input_records: None,
            }),
            applied_restore_id: Some("incident-3".into()),
            input_gap: Some(InputGap {
                from_offset: 40,
                to_offset: 100,
            }),
            ..TaskReport::new(2, TaskRole::Active)
        }
    }

    #[test]
    fn round_trips_with_camel_case_fields() {
        let fenced = TaskReport {
            fenced_in: Some(9),
            ..TaskReport::new(4, TaskRole::Standby)
        };
        let mut evidence = crate::co_partitioning::PlacementEvidence::new("cards");
        let _ = evidence.observe(
            crate::co_partitioning::Partitioner::Murmur2,
            b"card-1",
            3,
            4,
        );
        let failed = TaskReport {
            phase: TaskPhase::Failed,
            failure: Some(TaskFailure::PartitionsChanged),
            placement: vec![evidence],
            ..TaskReport::new(5, TaskRole::Active)
        };
        let document = TaskReportsDocument::new(vec![
            restoring_task(),
            TaskReport::new(3, TaskRole::Standby),
            fenced,
            failed,
        ]);
        let bytes = document.to_json();
        assert_eq!(TaskReportsDocument::from_json(&bytes).unwrap(), document);
        let value: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        let task = &value["tasks"][0];
        assert_eq!(task["phase"], "Restoring");
        assert_eq!(task["role"], "active");
        assert_eq!(task["nextInputOffset"], 120);
        assert_eq!(task["appliedRestoreId"], "incident-3");
        assert_eq!(task["restore"]["source"], "checkpoint");
        assert_eq!(task["restore"]["download"]["bytesTotal"], 4 << 20);
        assert_eq!(task["inputGap"]["fromOffset"], 40);
        assert!(
            value["tasks"][1].get("inputGap").is_none(),
            "absent, not null"
        );
        assert!(value["tasks"][1].get("fencedIn").is_none());
        assert_eq!(value["tasks"][2]["fencedIn"], 9);
        assert!(value["tasks"][2].get("failure").is_none());
        assert!(value["tasks"][2].get("placement").is_none());
        assert_eq!(value["tasks"][3]["failure"], "partitionsChanged");
        assert_eq!(value["tasks"][3]["placement"][0]["topic"], "cards");
    }

    #[test]
    fn a_stopping_worker_says_so_and_a_running_one_reads_as_before() {
        let running = TaskReportsDocument::new(vec![TaskReport::new(0, TaskRole::Active)]);
        let text = String::from_utf8(running.to_json()).unwrap();
        assert!(!text.contains("stopping"), "{text}");
        let stopping = running.clone().stopping();
        let bytes = stopping.to_json();
        let value: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(value["stopping"], true);
        assert_eq!(TaskReportsDocument::from_json(&bytes).unwrap(), stopping);
        // A document written before the field existed reads as a running worker's.
        let older = br#"{"version":1,"tasks":[]}"#;
        assert!(!TaskReportsDocument::from_json(older).unwrap().stopping);
    }

    #[test]
    fn the_recorded_generation_round_trips_and_is_absent_when_none() {
        let none = TaskReportsDocument::new(vec![]);
        assert!(
            !String::from_utf8(none.to_json())
                .unwrap()
                .contains("generation")
        );
        let seen = none.acting_on(Some(17));
        let bytes = seen.to_json();
        let value: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(value["generation"], 17);
        assert_eq!(TaskReportsDocument::from_json(&bytes).unwrap(), seen);
        let older = br#"{"version":1,"tasks":[]}"#;
        assert_eq!(
            TaskReportsDocument::from_json(older).unwrap().generation,
            None
        );
    }

    #[test]
    fn the_answering_process_round_trips_and_an_older_document_names_none() {
        let named = TaskReportsDocument::new(vec![]).answered_by("41-1764633600000000000");
        let bytes = named.to_json();
        let value: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(value["process"], "41-1764633600000000000");
        assert_eq!(TaskReportsDocument::from_json(&bytes).unwrap(), named);
        let older = br#"{"version":1,"tasks":[]}"#;
        assert_eq!(TaskReportsDocument::from_json(older).unwrap().process, None);
    }

    #[test]
    fn refuses_a_newer_version_and_a_task_reported_twice() {
        let newer = br#"{"version":2,"tasks":[]}"#;
        let error = TaskReportsDocument::from_json(newer).unwrap_err();
        assert!(error.to_string().contains("version 2"), "{error}");
        let twice = TaskReportsDocument::new(vec![
            TaskReport::new(1, TaskRole::Active),
            TaskReport::new(1, TaskRole::Active),
        ]);
        let error = TaskReportsDocument::from_json(&twice.to_json()).unwrap_err();
        assert!(error.to_string().contains("task 1"), "{error}");
    }
}
