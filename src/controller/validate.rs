//! Step 1 of the pipeline: the raw `StatefulStreamJob` in, a [`ValidatedJob`] out.
//!
//! Everything the later steps need is resolved here once: durations parsed, sizes read as bytes,
//! topic and object names defaulted, the processor turned into the contract's
//! [`ProcessorConfig`], and every rule checked that the CRD schema cannot express (or that a
//! client bypassing schema defaults could break). Builders read only the [`ValidatedJob`].
//! Nothing here touches the network; facts from Kafka are checked later, in [`crate::retention`].

mod kafka;
mod processor;
mod quantity;
mod rules;

pub use quantity::{QuantityError, quantity_to_bytes};

use crate::api::{
    DeletionPolicy, KafkaSaslSpec, KafkaTlsSpec, PodOverrides, PullPolicy, RestoreSource,
    S3CredentialsSecret, StatefulStreamJob,
};
use crate::checkpoint_reader::S3Location;
use crate::vocabulary::reasons;
use k8s_openapi::api::core::v1::ResourceRequirements;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use std::time::Duration;
use streamkeeper_contract::DurationError;
use streamkeeper_contract::rules::Violation;
use streamkeeper_contract::worker_config::{ProcessorConfig, RocksDbTuning};

/// A job whose spec passed every rule, with everything resolved.
#[derive(Debug, Clone, PartialEq)]
pub struct ValidatedJob {
    pub namespace: String,
    pub name: String,
    /// `metadata.generation`, reported back as `observedGeneration`.
    pub generation: Option<i64>,
    /// Controller owner reference to the job, put on everything the operator creates.
    pub owner: OwnerReference,
    pub workers: Workers,
    pub kafka: KafkaSettings,
    pub processor: ProcessorConfig,
    pub state: StateSettings,
    pub checkpoint: CheckpointSettings,
    pub acceptable_recovery_lag: u64,
    /// How long a silent pod keeps its tasks.
    pub heartbeat_timeout: Duration,
    pub restore: Option<RestoreRequest>,
    pub deletion_policy: DeletionPolicy,
}

/// The worker pods.
#[derive(Debug, Clone, PartialEq)]
pub struct Workers {
    pub image: String,
    pub image_pull_policy: Option<PullPolicy>,
    /// Pods when running (at least 1); the StatefulSet has 0 while `suspend` is set.
    pub replicas: i32,
    /// Standbys per task, less than `replicas`.
    pub standby_replicas: u32,
    pub suspend: bool,
    pub restart_nonce: Option<String>,
    pub resources: Option<ResourceRequirements>,
    /// Scheduling and metadata overrides; no reserved label or annotation key among them.
    pub pod: PodOverrides,
    /// `spec.pod.serviceAccountName`, or `None` for the namespace's `default` account. The
    /// workers use no Kubernetes API, so the operator creates no account, Role or binding for
    /// them and mounts no token either way; a user's account is only an identity (for cloud
    /// workload identity, say).
    pub service_account: Option<String>,
}

/// Kafka connection, topics (defaults resolved) and transaction cadence.
#[derive(Debug, Clone, PartialEq)]
pub struct KafkaSettings {
    pub bootstrap_servers: String,
    pub input_topic: String,
    pub output_topic: String,
    pub changelog_topic: String,
    pub dead_letter_topic: String,
    pub replication_factor: Option<i32>,
    pub min_insync_replicas: Option<i32>,
    pub commit_interval: Duration,
    pub commit_max_records: u32,
    pub tls: Option<KafkaTlsSpec>,
    pub sasl: Option<KafkaSaslSpec>,
}

/// The state volume and RocksDB tuning.
#[derive(Debug, Clone, PartialEq)]
pub struct StateSettings {
    /// As written, for the volume claim (Kubernetes reads it itself).
    pub storage_size: Quantity,
    pub storage_bytes: u64,
    pub storage_class_name: Option<String>,
    pub rocksdb: RocksDbTuning,
}

/// Checkpoint cadence and the S3 location.
#[derive(Debug, Clone, PartialEq)]
pub struct CheckpointSettings {
    pub interval: Duration,
    pub retain: u32,
    pub bucket: String,
    pub prefix: String,
    pub endpoint: Option<String>,
    pub region: String,
    pub path_style: bool,
    pub credentials: Option<S3CredentialsSecret>,
}

impl CheckpointSettings {
    /// Where the checkpoints are, as the S3 reader takes it.
    pub fn location(&self) -> S3Location {
        S3Location {
            bucket: self.bucket.clone(),
            prefix: self.prefix.clone(),
            endpoint: self.endpoint.clone(),
            region: self.region.clone(),
            path_style: self.path_style,
        }
    }
}

/// A restore on request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RestoreRequest {
    pub id: String,
    pub checkpoint: RestorePoint,
    pub source: RestoreSource,
}

/// Which checkpoint a restore starts from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RestorePoint {
    Latest,
    Sequence(u64),
}

/// A spec that breaks a rule, naming the field (`spec.processor.aggregate.window.advance`).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum InvalidSpec {
    #[error("{field} is required: {why}")]
    Missing { field: String, why: &'static str },
    #[error("{field}: {source}")]
    Duration {
        field: String,
        #[source]
        source: DurationError,
    },
    #[error("{field}: {source}")]
    Quantity {
        field: String,
        #[source]
        source: QuantityError,
    },
    #[error("{field}: {rule}")]
    Rule { field: String, rule: String },
}

impl InvalidSpec {
    /// The path of the offending field, as `kubectl explain` spells it.
    pub fn field(&self) -> &str {
        match self {
            InvalidSpec::Missing { field, .. }
            | InvalidSpec::Duration { field, .. }
            | InvalidSpec::Quantity { field, .. }
            | InvalidSpec::Rule { field, .. } => field,
        }
    }

    /// Stable name for the `Invalid` condition reason, the Event reason and the metric label.
    /// One value for every variant: which field is wrong is in the message, not the label, so
    /// the metric's cardinality stays fixed.
    pub fn category(&self) -> &'static str {
        reasons::INVALID_SPEC
    }

    pub(crate) fn rule(field: impl Into<String>, rule: impl Into<String>) -> Self {
        InvalidSpec::Rule {
            field: field.into(),
            rule: rule.into(),
        }
    }
}

/// A broken contract rule, named by its path in the spec.
impl From<Violation> for InvalidSpec {
    fn from(violation: Violation) -> Self {
        InvalidSpec::rule(violation.field.spec_path(), violation.reason)
    }
}

/// Checks `job` and resolves everything the builders need. Stops at the first broken rule: the
/// user fixes one field at a time, and the message names it.
pub fn validate(job: &StatefulStreamJob) -> Result<ValidatedJob, InvalidSpec> {
    let (namespace, name, owner) = rules::identity(job)?;
    let spec = &job.spec;
    let validated = ValidatedJob {
        generation: job.metadata.generation,
        owner,
        workers: rules::workers(spec)?,
        kafka: kafka::settings(&spec.kafka, &namespace, &name)?,
        processor: processor::config(&spec.processor)?,
        state: rules::state(&spec.state)?,
        checkpoint: rules::checkpoint(&spec.checkpoint)?,
        acceptable_recovery_lag: rules::non_negative(
            "spec.recovery.acceptableRecoveryLag",
            spec.recovery.acceptable_recovery_lag,
        )?,
        heartbeat_timeout: rules::heartbeat_timeout(&spec.recovery.heartbeat_timeout)?,
        restore: spec.restore.as_ref().map(rules::restore).transpose()?,
        deletion_policy: spec.deletion_policy,
        namespace,
        name,
    };
    rules::worker_config_accepted(&validated)?;
    Ok(validated)
}

#[cfg(test)]
mod tests;
