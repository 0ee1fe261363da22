//! The words of a `StatefulStreamJob`'s status: condition types and reasons.
//!
//! Every type and reason the operator writes is a constant here, so a reason is spelled one way
//! in status, Events and metrics. It sits below the controller because the adapters (Kafka
//! admin, S3 reader, retention rules) name the reason of their own errors.

/// Condition types.
pub mod types {
    /// All active tasks run on ready pods and nothing below is wrong.
    pub const READY: &str = "Ready";
    /// The spec breaks a rule the CRD schema cannot express; nothing is applied until it changes.
    pub const INVALID: &str = "Invalid";
    /// The checkpoint interval fits inside the input topic's retention with the safety margin.
    pub const RETENTION_SAFE: &str = "RetentionSafe";
    /// Some task's newest checkpoint is older than the retention allows for a rebuild from input.
    pub const CHECKPOINT_STALE: &str = "CheckpointStale";
    /// Some task's newest checkpoint points below its input partition's log-start offset.
    pub const RECOVERY_GAP: &str = "RecoveryGap";
    /// The changelog topic exists, is compacted and has as many partitions as the input.
    pub const CHANGELOG_READY: &str = "ChangelogReady";
    /// The job is suspended (scaled to zero after a final checkpoint).
    pub const SUSPENDED: &str = "Suspended";
    /// A restore (on request or after a failure) is running.
    pub const RESTORING: &str = "Restoring";
    /// Every task has its `standbyReplicas` warm standbys, so any one pod can fail without a
    /// restore.
    pub const STANDBYS_READY: &str = "StandbysReady";
    /// A join's records sit where its partitioner puts their keys, as the tasks checked them.
    pub const CO_PARTITIONED: &str = "CoPartitioned";
}

/// Condition reasons (CamelCase, as the API conventions ask). Error `category()`s return these,
/// so the same word is the condition reason, the Event reason and the metric label.
pub mod reasons {
    // Invalid
    pub const SPEC_VALID: &str = "SpecValid";
    pub const INVALID_SPEC: &str = "InvalidSpec";
    /// The workers refused the config the spec makes (a processor their image does not offer,
    /// settings the processor refuses); the message names the pod and the worker's reason.
    pub const CONFIG_REFUSED: &str = "ConfigRefused";
    /// A WebAssembly processor's module is not at the location the spec names.
    pub const MODULE_MISSING: &str = "ModuleMissing";
    /// The object at the module's location has another digest than the spec pins.
    pub const MODULE_MISMATCH: &str = "ModuleMismatch";
    // Ready
    pub const ALL_TASKS_RUNNING: &str = "AllTasksRunning";
    pub const TASKS_NOT_RUNNING: &str = "TasksNotRunning";
    /// A task's owner stopped it on an error (its changelog lost, its input position
    /// contradicting its state); the message names the task, the pod and the worker's reason.
    pub const TASK_FAILED: &str = "TaskFailed";
    pub const RECONCILING: &str = "Reconciling";
    /// An object with one of the job's names exists and is not the job's; the message names it.
    pub const FOREIGN_OBJECT: &str = "ForeignObject";
    pub const SUSPENDED: &str = "Suspended";
    // RetentionSafe
    pub const WITHIN_RETENTION: &str = "WithinRetention";
    pub const RETENTION_UNLIMITED: &str = "RetentionUnlimited";
    pub const RETENTION_UNKNOWN: &str = "RetentionUnknown";
    pub const INTERVAL_EXCEEDS_RETENTION: &str = "IntervalExceedsRetention";
    pub const INVALID_TOPIC_CONFIG: &str = "InvalidTopicConfig";
    // CheckpointStale
    pub const CHECKPOINTS_FRESH: &str = "CheckpointsFresh";
    pub const CHECKPOINT_TOO_OLD: &str = "CheckpointTooOld";
    pub const NO_CHECKPOINT_YET: &str = "NoCheckpointYet";
    // RecoveryGap
    pub const INPUT_AVAILABLE: &str = "InputAvailable";
    pub const INPUT_TRUNCATED: &str = "InputTruncated";
    pub const INPUT_RECORDS_LOST: &str = "InputRecordsLost";
    // ChangelogReady
    pub const TOPIC_READY: &str = "TopicReady";
    pub const TOPIC_MISSING: &str = "TopicMissing";
    pub const NOT_COMPACTED: &str = "NotCompacted";
    pub const CHANGELOG_DELETES_KEYS: &str = "ChangelogDeletesKeys";
    pub const PARTITION_MISMATCH: &str = "PartitionMismatch";
    pub const CHANGELOG_CLAIMED: &str = "ChangelogClaimed";
    // Invalid (a join's topics)
    pub const NOT_CO_PARTITIONED: &str = "NotCoPartitioned";
    // CoPartitioned
    pub const KEYS_PLACED: &str = "KeysPlaced";
    pub const KEYS_MISPLACED: &str = "KeysMisplaced";
    pub const DIFFERENT_PARTITIONERS: &str = "DifferentPartitioners";
    pub const NO_RECORDS_CHECKED: &str = "NoRecordsChecked";
    // Ready (a join's task stopped: a topic's partition count changed)
    pub const PARTITIONS_CHANGED: &str = "PartitionsChanged";
    pub const KAFKA_UNAVAILABLE: &str = "KafkaUnavailable";
    pub const KAFKA_CREDENTIALS: &str = "KafkaCredentialsUnavailable";
    pub const KAFKA_REFUSED: &str = "KafkaRefused";
    pub const INPUT_TOPIC_MISSING: &str = "InputTopicMissing";
    // CheckpointStale / RecoveryGap when S3 cannot be read
    pub const S3_UNAVAILABLE: &str = "S3Unavailable";
    // Errors of the apiserver itself (metric label and Event reason only)
    pub const API_ERROR: &str = "ApiError";
    // The job's worker token Secret exists but holds no usable token (metric label and Event reason)
    pub const WORKER_TOKEN_UNUSABLE: &str = "WorkerTokenUnusable";
    // A write refused because this process no longer leads (metric label only)
    pub const NOT_LEADING: &str = "NotLeading";

    /// Every reason an error's `category()` returns: the operator's error counter starts each at
    /// 0 (a category missing here only appears at its first error).
    pub const ERROR_CATEGORIES: [&str; 18] = [
        API_ERROR,
        CHANGELOG_CLAIMED,
        CHANGELOG_DELETES_KEYS,
        CHECKPOINT_TOO_OLD,
        FOREIGN_OBJECT,
        INPUT_TOPIC_MISSING,
        INPUT_TRUNCATED,
        INTERVAL_EXCEEDS_RETENTION,
        INVALID_SPEC,
        INVALID_TOPIC_CONFIG,
        KAFKA_CREDENTIALS,
        KAFKA_REFUSED,
        KAFKA_UNAVAILABLE,
        NOT_COMPACTED,
        NOT_LEADING,
        PARTITION_MISMATCH,
        S3_UNAVAILABLE,
        WORKER_TOKEN_UNUSABLE,
    ];
    // Suspended
    pub const RUNNING: &str = "Running";
    pub const FINAL_CHECKPOINT: &str = "FinalCheckpoint";
    pub const FINAL_CHECKPOINT_INCOMPLETE: &str = "FinalCheckpointIncomplete";
    // Restoring
    pub const RESTORE_REQUESTED: &str = "RestoreRequested";
    pub const RESTORE_DONE: &str = "RestoreDone";
    pub const RESTORE_ROLLING_OUT: &str = "RestoreRollingOut";
    pub const RESTORE_APPLYING: &str = "RestoreApplying";
    pub const NO_RESTORE: &str = "NoRestore";
    // StandbysReady
    pub const STANDBYS_WARM: &str = "StandbysWarm";
    pub const STANDBYS_WARMING: &str = "StandbysWarming";
    pub const NO_STANDBYS_REQUESTED: &str = "NoStandbysRequested";
    // Events of operations
    pub const PODS_RESTARTED: &str = "PodsRestarted";
    pub const CLEANED_UP: &str = "CleanedUp";
    pub const STOPPING_WORKERS: &str = "StoppingWorkers";
    pub const TOPICS_KEPT: &str = "TopicsKept";
    /// A deleted job's S3 prefix holds no owner marker naming it: its objects are left alone.
    pub const CHECKPOINTS_KEPT: &str = "CheckpointsKept";
    /// A worker pod refused the assignment (its worker token differs, say): its tasks cannot
    /// move until it takes one.
    pub const ASSIGNMENT_REFUSED: &str = "AssignmentRefused";
}
