//! Checkpoints to S3 and restores from them.

use kube::KubeSchema;
use serde::{Deserialize, Serialize};

/// Incremental RocksDB checkpoints to S3 (content-addressed files, a manifest as commit point).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct CheckpointSpec {
    /// Time between checkpoints (Go duration, at least 1s). Must fit inside the input topic's
    /// retention with a safety margin; the operator checks it against the broker.
    #[serde(default = "default_interval")]
    #[schemars(length(max = 64), pattern(crate::api::DURATION_PATTERN))]
    #[x_kube(validation = kube::core::Rule::new("duration(self) >= duration('1s')").message("checkpoint.interval must be at least 1s"))]
    pub interval: String,

    /// Number of newest checkpoints kept per task; older ones and files no kept checkpoint uses
    /// are deleted.
    #[serde(default = "default_retain")]
    #[schemars(range(min = 1, max = 1000))]
    pub retain: i32,

    /// Where checkpoints are stored.
    pub s3: S3Spec,
}

fn default_interval() -> String {
    "30s".into()
}

fn default_retain() -> i32 {
    3
}

/// An S3 bucket (AWS or any S3-compatible server).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct S3Spec {
    /// Bucket name (S3's rules: lowercase letters, digits, `.` and `-`). Immutable.
    #[schemars(length(min = 3, max = 63), pattern(crate::api::S3_BUCKET_PATTERN))]
    #[x_kube(validation = kube::core::Rule::new("!self.contains('..')").message("s3.bucket must not contain '..'"))]
    #[x_kube(validation = crate::api::cel::immutable("spec.checkpoint.s3.bucket", crate::api::cel::S3_IMMUTABLE))]
    pub bucket: String,

    /// Key prefix; checkpoints go under `<prefix>/<namespace>/<job>/task-<i>/`. Immutable.
    #[serde(default = "default_prefix")]
    #[schemars(length(max = 512))]
    #[x_kube(validation = crate::api::cel::immutable("spec.checkpoint.s3.prefix", crate::api::cel::S3_IMMUTABLE))]
    #[x_kube(validation = kube::core::Rule::new("!self.startsWith('/') && !self.endsWith('/')").message("s3.prefix must not start or end with '/'"))]
    pub prefix: String,

    /// Endpoint URL for S3-compatible servers; AWS when omitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 2048))]
    #[x_kube(validation = kube::core::Rule::new("self.startsWith('http://') || self.startsWith('https://')").message("s3.endpoint must be an http:// or https:// URL"))]
    pub endpoint: Option<String>,

    /// Region.
    #[serde(default = "default_region")]
    #[schemars(length(min = 1, max = 64))]
    pub region: String,

    /// Path-style addressing (`endpoint/bucket/key`), which most S3-compatible servers need.
    #[serde(default)]
    pub path_style: bool,

    /// Secret with the access key; the pod's ambient AWS credentials when omitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credentials_secret: Option<S3CredentialsSecret>,
}

fn default_prefix() -> String {
    "streamkeeper".into()
}

fn default_region() -> String {
    "us-east-1".into()
}

/// A Secret holding S3 credentials, mounted as files into the workers (never logged).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct S3CredentialsSecret {
    /// Secret name.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// Key of the access key id.
    #[serde(default = "default_access_key_id_key")]
    pub access_key_id_key: String,
    /// Key of the secret access key.
    #[serde(default = "default_secret_access_key_key")]
    pub secret_access_key_key: String,
}

fn default_access_key_id_key() -> String {
    "AWS_ACCESS_KEY_ID".into()
}

fn default_secret_access_key_key() -> String {
    "AWS_SECRET_ACCESS_KEY".into()
}

/// A restore on request. `source: changelog` (the default) restores each task from the named
/// checkpoint and replays the changelog after it, giving exact state. `source: input` is for a
/// lost changelog: it restores the checkpoint and reprocesses the input from the checkpoint's
/// input offset, so output after that offset is emitted again (the status says so).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct RestoreSpec {
    /// Identifies this request: a restore runs once per distinct id.
    #[schemars(length(min = 1, max = 63))]
    pub id: String,

    /// `latest`, or a checkpoint sequence number (each task restores its checkpoint with it).
    #[serde(default = "default_restore_checkpoint")]
    #[schemars(pattern(crate::api::RESTORE_CHECKPOINT_PATTERN))]
    pub checkpoint: String,

    /// Where the state after the checkpoint comes from.
    #[serde(default)]
    pub source: RestoreSource,

    /// Keep the restored state for the job's current `inputTopic`, although it was built from
    /// another topic (or from an earlier incarnation of this one, deleted and created again).
    /// Without it such a state stops its task, naming both topics. With it the state forgets
    /// the old topic and its position, and each task reads the current topic from its first
    /// record. Needs `source: changelog` (the input's offsets are what it discards).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub adopt_input: bool,
}

impl From<RestoreSource> for streamkeeper_contract::restore_request::RestoreReplaySource {
    fn from(source: RestoreSource) -> Self {
        match source {
            RestoreSource::Changelog => Self::Changelog,
            RestoreSource::Input => Self::Input,
        }
    }
}

fn default_restore_checkpoint() -> String {
    "latest".into()
}

/// Source of the state after a checkpoint: `changelog` or `input`.
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, schemars::JsonSchema,
)]
#[serde(rename_all = "camelCase")]
pub enum RestoreSource {
    #[default]
    Changelog,
    Input,
}
