//! The processor part of the worker config: which processor a job runs, with its settings (a
//! join's two sides, windows, durations as Go duration strings, or a custom processor's name and
//! free config).

use super::Partitioner;
use crate::duration::serde_go;
use serde::{Deserialize, Serialize};
use std::time::Duration;

// No `deny_unknown_fields` here: serde cannot combine it with `flatten`; the flattened
// `ProcessorKind` refuses unknown fields instead.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProcessorConfig {
    /// JSON field holding the record key.
    pub key_field: String,
    /// JSON field holding the event time (epoch milliseconds or RFC 3339); needed by windows and dedup.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_field: Option<String>,
    #[serde(flatten)]
    pub kind: ProcessorKind,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "camelCase", deny_unknown_fields)]
pub enum ProcessorKind {
    Count,
    #[serde(rename_all = "camelCase")]
    Aggregate {
        value_field: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        window: Option<WindowConfig>,
    },
    #[serde(rename_all = "camelCase")]
    Dedup {
        #[serde(with = "serde_go")]
        ttl: Duration,
    },
    /// The job's input (the left side, keyed and timed by `keyField` and `timeField`) joined
    /// with a second topic read by the same task, partition for partition.
    #[serde(rename_all = "camelCase")]
    Join {
        /// `stream`: a windowed stream-stream join; `table`: the right topic is a table, and a
        /// left record joins its version as of the left record's event time.
        join: JoinKind,
        mode: JoinMode,
        #[serde(default, skip_serializing_if = "JoinLeft::is_plain")]
        left: JoinLeft,
        right: JoinRight,
        /// Stream joins only.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        window: Option<JoinWindowConfig>,
        /// Table joins only: how far back in event time the table's versions are kept.
        #[serde(default, skip_serializing_if = "Option::is_none", with = "optional_go")]
        history: Option<Duration>,
        /// How the producers of both topics place keys in partitions.
        partitioner: Partitioner,
    },
    /// A processor the worker binary registered under `name` (the Rust SDK): the job's image
    /// is the user's own build. `config` is free JSON, which the processor checks when it is
    /// built (`check-config`, and `run` before any task).
    #[serde(rename_all = "camelCase")]
    Custom {
        name: String,
        #[serde(default, skip_serializing_if = "serde_json::Value::is_null")]
        config: serde_json::Value,
    },
    /// A processor compiled to a WebAssembly component against `wit/processor.wit`, which the
    /// worker fetches, checks against its digest and runs sandboxed.
    #[serde(rename_all = "camelCase")]
    Wasm {
        module: WasmModuleSource,
        /// Handed to the guest's `init` as JSON text.
        #[serde(default, skip_serializing_if = "serde_json::Value::is_null")]
        config: serde_json::Value,
        #[serde(default)]
        limits: WasmLimitsConfig,
        /// Digests of earlier builds of this module whose state this one reads (a bug fix that
        /// keeps the state's format): a task whose state one of them built goes on from it, and
        /// records this module's digest instead.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        reads_state_of: Vec<String>,
    },
}

/// Where a WebAssembly processor's component is, and its digest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WasmModuleSource {
    /// The object's bucket; the job's checkpoint bucket when absent. Read with the job's S3
    /// endpoint and credentials.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bucket: Option<String>,
    /// The object's key in S3; empty when the component is a `file`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub key: String,
    /// A file in the pod holding the component (a mounted ConfigMap), instead of an S3 object.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
    /// A directory holding the S3 object's own access keys (`accessKeyId`, `secretAccessKey`, as
    /// `checkpoint.s3.credentialsDir`); the checkpoint's when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credentials_dir: Option<String>,
    /// The component's SHA-256, 64 lowercase hex digits: the worker runs those bytes or none.
    pub sha256: String,
}

impl WasmModuleSource {
    /// The object's bucket: its own, or `default` (the job's checkpoint bucket).
    pub fn bucket_or<'a>(&'a self, default: &'a str) -> &'a str {
        self.bucket.as_deref().unwrap_or(default)
    }

    /// `s3://bucket/key` (`?` for a bucket neither names), or the file's path, for messages.
    pub fn location(&self, default_bucket: Option<&str>) -> String {
        if let Some(file) = &self.file {
            return file.clone();
        }
        let bucket = self.bucket.as_deref().or(default_bucket).unwrap_or("?");
        format!("s3://{bucket}/{}", self.key)
    }
}

/// The sandbox's limits of a WebAssembly processor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WasmLimitsConfig {
    /// Fuel (about one per WebAssembly instruction) a record's calls may burn.
    pub fuel_per_record: u64,
    /// The most linear memory an instance may have, in bytes.
    pub memory_bytes: u64,
}

impl Default for WasmLimitsConfig {
    fn default() -> Self {
        Self {
            fuel_per_record: 100_000_000,
            memory_bytes: 256 << 20,
        }
    }
}

/// What a join's right side is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum JoinKind {
    Stream,
    Table,
    /// A table every task reads whole, from all of its partitions: no co-partitioning needed.
    GlobalTable,
}

impl JoinKind {
    /// Whether the right side is a table (read partition for partition, or whole).
    pub fn is_table(self) -> bool {
        matches!(self, JoinKind::Table | JoinKind::GlobalTable)
    }
}

/// Which unmatched records a join emits: none (`inner`), the left side's (`left`), or both
/// sides' (`outer`, stream joins only).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum JoinMode {
    Inner,
    Left,
    Outer,
}

/// The left side of a join: the job's input topic, keyed and timed by `keyField` and
/// `timeField`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct JoinLeft {
    /// Set when the side is re-keyed: the internal topic its records are written to, keyed by
    /// their join key, and read back from (see [`ProcessorConfig::left_repartition_topic`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repartition_topic: Option<String>,
}

impl JoinLeft {
    /// Read as it is, not re-keyed.
    pub fn is_plain(&self) -> bool {
        self.repartition_topic.is_none()
    }
}

/// The right side of a join.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct JoinRight {
    pub topic: String,
    /// Set when the side is re-keyed (stream joins only), as [`JoinLeft::repartition_topic`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repartition_topic: Option<String>,
    /// The join key's field in a stream's records. A table is keyed by its records' Kafka key
    /// (a tombstone has no value to read a field from), so a table has none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_field: Option<String>,
    /// The event time's field (a table without one versions by the Kafka record timestamp).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_field: Option<String>,
}

/// Which records of the other side a stream record meets: those within `before` and `after`
/// of its own event time; `grace` bounds lateness.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct JoinWindowConfig {
    #[serde(with = "serde_go")]
    pub before: Duration,
    #[serde(with = "serde_go")]
    pub after: Duration,
    #[serde(with = "serde_go", default)]
    pub grace: Duration,
}

impl ProcessorConfig {
    /// How a join's producers place keys; `None` for a processor with one input.
    pub fn partitioner(&self) -> Option<Partitioner> {
        match &self.kind {
            ProcessorKind::Join { partitioner, .. } => Some(*partitioner),
            _ => None,
        }
    }

    /// The second topic the job's tasks read (a join's right side), if any.
    pub fn right_topic(&self) -> Option<&str> {
        match &self.kind {
            ProcessorKind::Join { right, .. } => Some(right.topic.as_str()),
            _ => None,
        }
    }

    /// The internal topic a re-keyed join's left side (the job's input) is written to and
    /// read back from; `None` when the side is read as it is.
    ///
    /// Task `i` of `n` re-keys the partitions `p` of the side's topic with `p mod n == i`,
    /// writing each record, keyed by its join key, to the partition the join's partitioner
    /// gives that key among `n`, in the task's transaction; and it joins partition `i` of the
    /// repartition topic, which thereby holds every record of its keys.
    pub fn left_repartition_topic(&self) -> Option<&str> {
        match &self.kind {
            ProcessorKind::Join { left, .. } => left.repartition_topic.as_deref(),
            _ => None,
        }
    }

    /// Whether every task reads a join's right topic whole (`globalTable`): its keys then need
    /// no placement, and the right topic may have any partition count.
    pub fn right_read_whole(&self) -> bool {
        matches!(
            self.kind,
            ProcessorKind::Join {
                join: JoinKind::GlobalTable,
                ..
            }
        )
    }

    /// The right side's counterpart of [`Self::left_repartition_topic`].
    pub fn right_repartition_topic(&self) -> Option<&str> {
        match &self.kind {
            ProcessorKind::Join { right, .. } => right.repartition_topic.as_deref(),
            _ => None,
        }
    }
}

impl ProcessorKind {
    pub fn name(&self) -> &'static str {
        match self {
            ProcessorKind::Count => "count",
            ProcessorKind::Aggregate { .. } => "aggregate",
            ProcessorKind::Dedup { .. } => "dedup",
            ProcessorKind::Join { .. } => "join",
            ProcessorKind::Custom { .. } => "custom",
            ProcessorKind::Wasm { .. } => "wasm",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WindowConfig {
    #[serde(with = "serde_go")]
    pub size: Duration,
    /// Hopping windows advance by less than their size; tumbling windows have no advance.
    #[serde(default, skip_serializing_if = "Option::is_none", with = "optional_go")]
    pub advance: Option<Duration>,
    #[serde(with = "serde_go", default)]
    pub grace: Duration,
}

mod optional_go {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;

    pub fn serialize<S: Serializer>(value: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match value {
            Some(duration) => super::serde_go::serialize(duration, s),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
        Option::<String>::deserialize(d)?
            .map(|text| crate::parse_go_duration(&text).map_err(serde::de::Error::custom))
            .transpose()
    }
}
