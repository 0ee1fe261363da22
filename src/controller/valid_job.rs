//! The job as every step after validation reads it: a spec that passed every rule, with
//! everything resolved (durations parsed, sizes in bytes, names defaulted, the processor in the
//! contract's terms). The builders read only this, never the raw spec; [`super::validate()`]
//! makes it.

use crate::adapters::checkpoints::S3Location;
use crate::api::{
    DeletionPolicy, KafkaSaslSpec, KafkaTlsSpec, PodOverrides, PullPolicy, RestoreSource,
    S3CredentialsSecret,
};
use k8s_openapi::api::core::v1::ResourceRequirements;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use std::time::Duration;
use streamkeeper_contract::worker_config::{JobIdentity, ProcessorConfig, RocksDbTuning};

/// A job whose spec passed every rule, with everything resolved.
#[derive(Debug, Clone, PartialEq)]
pub struct ValidatedJob {
    pub namespace: String,
    pub name: String,
    /// The operator's cluster name, if it has one: part of every id derived from the job.
    pub cluster: Option<String>,
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
    /// The ConfigMap key a WebAssembly processor's module is read from, mounted into the pods
    /// (`processor`'s module then names the mounted file).
    pub module_config_map: Option<ModuleConfigMap>,
    /// The Secret with a WebAssembly processor's module's own S3 access keys, mounted into the
    /// pods (`processor`'s module then names the directory).
    pub module_credentials: Option<S3CredentialsSecret>,
}

/// A ConfigMap key holding a WebAssembly component.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModuleConfigMap {
    pub name: String,
    pub key: String,
}

impl ValidatedJob {
    /// The job's identity, from which every id, default topic and S3 prefix is derived.
    pub fn identity(&self) -> JobIdentity {
        JobIdentity {
            cluster: self.cluster.clone(),
            namespace: self.namespace.clone(),
            name: self.name.clone(),
        }
    }
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
    /// The state is kept for the current input topic (`spec.restore.adoptInput`).
    pub adopt_input: bool,
}

/// Which checkpoint a restore starts from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RestorePoint {
    Latest,
    Sequence(u64),
}
