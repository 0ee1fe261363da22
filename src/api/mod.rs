//! The `StatefulStreamJob` API (group `streamkeeper.dev`, version `v1alpha1`).
//!
//! Types only: what a user writes and what the operator reports. `///` docs become the CRD
//! descriptions, and the validation the apiserver can do itself (ranges, enums, patterns, CEL
//! rules) is declared here so a bad resource is refused at `kubectl apply`, naming the field.

pub mod cel;
pub mod checkpoint;
pub mod crd;
pub mod join;
pub mod kafka;
pub mod pod;
pub mod processor;
pub mod state;
pub mod status;

use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

pub use checkpoint::{CheckpointSpec, RestoreSource, RestoreSpec, S3CredentialsSecret, S3Spec};
pub use join::{
    JoinKindSpec, JoinModeSpec, JoinRightSpec, JoinSpec, JoinWindowSpec, PartitionerSpec,
};
pub use kafka::{KafkaSaslSpec, KafkaSpec, KafkaTlsSpec, SaslMechanism, SecretKeyRef};
pub use pod::PodOverrides;
pub use processor::{
    AggregateSpec, CustomSpec, DedupSpec, ProcessorSpec, ProcessorType, WasmLimitsSpec,
    WasmModuleConfigMap, WasmModuleSpec, WasmSpec, WindowSpec, WindowType,
};
pub use state::{Compression, RocksDbSpec, StateSpec};
pub use status::{
    JobPhase, RestoreProgress, RetentionStatus, StandbyStatus, StatefulStreamJobStatus,
    TaskCheckpoint, TaskMove, TaskStatus,
};

/// Regular expression for durations (Go syntax, as Kubernetes CEL's `duration()` reads them).
pub const DURATION_PATTERN: &str = streamkeeper_contract::duration::GO_DURATION_PATTERN;

/// Regular expression for event-time durations (windows, grace, TTL): whole milliseconds.
pub const EVENT_DURATION_PATTERN: &str = streamkeeper_contract::duration::EVENT_DURATION_PATTERN;

/// `latest` or a checkpoint sequence number.
pub const RESTORE_CHECKPOINT_PATTERN: &str = r"^(latest|[0-9]{1,19})$";

/// Regular expression for S3 bucket names (the contract's; CEL refuses `..` besides).
pub const S3_BUCKET_PATTERN: &str = streamkeeper_contract::rules::S3_BUCKET_PATTERN;

/// Regular expression for Kafka topic names.
pub const TOPIC_PATTERN: &str = r"^[a-zA-Z0-9._-]{1,249}$";

/// A stateful stream job: reads one Kafka topic, keeps per-key state in RocksDB with a compacted
/// Kafka changelog and S3 checkpoints, and writes results exactly once.
// Each printcolumn repeats `type_`, which clippy reads as a duplicated attribute.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "streamkeeper.dev",
    version = "v1alpha1",
    kind = "StatefulStreamJob",
    plural = "statefulstreamjobs",
    shortname = "ssj",
    category = "streamkeeper",
    namespaced,
    status = "StatefulStreamJobStatus",
    derive = "PartialEq",
    doc = "A stateful stream job whose state survives any crash exactly.",
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.readyTasks",
        description = "Active tasks running / tasks"
    ),
    printcolumn(
        name = "Standbys",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"StandbysReady\")].status",
        description = "Every task has its warm standbys (the StandbysReady condition)"
    ),
    printcolumn(
        name = "Checkpoint",
        type_ = "date",
        json_path = ".status.newestCheckpointTime",
        description = "Age of the oldest of the tasks' newest checkpoints"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    ),
    validation = crate::api::cel::job_name()
)]
#[x_kube(validation = kube::core::Rule::new(
    "!has(self.standbyReplicas) || self.standbyReplicas < self.replicas"
).message(
    "spec.standbyReplicas must be less than spec.replicas: each standby of a task runs on a different pod than its active"
).field_path(".standbyReplicas"))]
#[serde(rename_all = "camelCase")]
pub struct StatefulStreamJobSpec {
    /// Worker container image (the bundled streamkeeper-worker, or your own build with a custom processor).
    #[schemars(length(min = 1, max = 512))]
    pub image: String,

    /// Image pull policy of the worker container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_pull_policy: Option<PullPolicy>,

    /// Number of worker pods. Tasks (one per input partition) are spread over them.
    #[serde(default = "default_replicas")]
    #[schemars(range(min = 1, max = 1000))]
    pub replicas: i32,

    /// Standby copies of each task, each on a different pod than the task's active, kept warm by
    /// tailing the changelog so failover needs no restore.
    #[serde(default = "default_standby_replicas")]
    #[schemars(range(min = 0, max = 10))]
    pub standby_replicas: i32,

    /// Kafka connection and topics.
    pub kafka: KafkaSpec,

    /// The processing logic and the record fields it reads. Immutable: the state of one
    /// processor means nothing to another. A WebAssembly processor's module, limits and
    /// `readsStateOf` may change: a new build that declares it reads the old one's state.
    #[x_kube(validation = crate::api::cel::processor_immutable())]
    pub processor: ProcessorSpec,

    /// Local state on a persistent volume per pod.
    #[serde(default)]
    pub state: StateSpec,

    /// Incremental RocksDB checkpoints to S3.
    pub checkpoint: CheckpointSpec,

    /// Failover and task movement.
    #[serde(default)]
    pub recovery: RecoverySpec,

    /// A restore on request: stop the tasks, restore them from a checkpoint, start them again.
    /// Runs once per distinct `restore.id`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restore: Option<RestoreSpec>,

    /// Changing this value restarts every worker pod (state is kept; tasks resume from it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253))]
    pub restart_nonce: Option<String>,

    /// Suspend the job: take a final checkpoint, then scale to zero. Resuming restores from it.
    #[serde(default)]
    pub suspend: bool,

    /// What happens to the changelog topic and the S3 checkpoints when the resource is deleted.
    #[serde(default)]
    pub deletion_policy: DeletionPolicy,

    /// Compute resources of the worker container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<k8s_openapi::api::core::v1::ResourceRequirements>,

    /// Scheduling and metadata overrides for the worker pods.
    #[serde(default)]
    pub pod: PodOverrides,
}

fn default_replicas() -> i32 {
    1
}

fn default_standby_replicas() -> i32 {
    0
}

/// When to pull the worker image.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, schemars::JsonSchema)]
pub enum PullPolicy {
    Always,
    IfNotPresent,
    Never,
}

/// Failover and task movement.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RecoverySpec {
    /// A task moves only to a standby whose changelog lag is at most this many records; otherwise
    /// the standby warms up first (as in Kafka Streams' KIP-441).
    #[serde(default = "default_acceptable_recovery_lag")]
    #[schemars(range(min = 0))]
    pub acceptable_recovery_lag: i64,
    /// How long a worker pod may leave the operator's heartbeat (4 polls a second) unanswered
    /// before its tasks move to their standbys (Go duration, 1s to 60s). A process that is gone
    /// is found at the next poll whatever this says (its port refuses connections); this bounds
    /// how soon a frozen process, a lost node or a partition is found. Too low for the pods'
    /// load moves tasks off pods that were only slow: safe (the old owner is fenced), at the
    /// cost of a handoff each time.
    #[serde(default = "default_heartbeat_timeout")]
    #[schemars(length(max = 64), pattern(crate::api::DURATION_PATTERN))]
    pub heartbeat_timeout: String,
}

impl Default for RecoverySpec {
    fn default() -> Self {
        Self {
            acceptable_recovery_lag: default_acceptable_recovery_lag(),
            heartbeat_timeout: default_heartbeat_timeout(),
        }
    }
}

fn default_heartbeat_timeout() -> String {
    "2s".into()
}

fn default_acceptable_recovery_lag() -> i64 {
    10_000
}

/// What deleting the resource removes outside the cluster: `Retain` (the default) keeps the
/// changelog topic and the S3 checkpoints, so state is never lost by accident; `Delete` removes
/// the changelog and dead-letter topics and the checkpoints too.
// Variant docs would turn the schema into a `oneOf`, which is not structural: keep them above.
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, schemars::JsonSchema,
)]
pub enum DeletionPolicy {
    #[default]
    Retain,
    Delete,
}

#[cfg(test)]
mod tests;
