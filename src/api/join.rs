//! The settings of a join (`spec.processor.type: join`): the job's input topic is the left side,
//! keyed and timed by `spec.processor.keyField` and `timeField`; `join.right` is the other.

use kube::KubeSchema;
use serde::{Deserialize, Serialize};

/// A join of the job's input with a second topic, read partition for partition by the same
/// task. Both topics must have the same partition count and place keys with the same
/// partitioner: the operator checks the counts before anything starts, and the worker checks
/// each record's partition against its key.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = kube::core::Rule::new("self.kind == 'stream' ? has(self.window) : !has(self.window)").message("join.window is required by a stream join, and only allowed there").field_path(".window"))]
#[x_kube(validation = kube::core::Rule::new("self.kind != 'stream' ? has(self.history) : !has(self.history)").message("join.history is required by a table join, and only allowed there").field_path(".history"))]
#[x_kube(validation = kube::core::Rule::new("self.kind == 'stream' || self.mode != 'outer'").message("join.mode outer is a stream join's; a table join is inner or left").field_path(".mode"))]
pub struct JoinSpec {
    /// `stream`: records of both topics meet within a window of event time. `table`: the right
    /// topic is a table's changelog (latest value per Kafka key; a tombstone deletes), and a
    /// left record joins the value its key had at the left record's event time. `globalTable`:
    /// a table join in which every task reads the whole right topic, from all of its
    /// partitions (a small dimension table: no co-partitioning needed, each task holds it all).
    pub kind: JoinKindSpec,

    /// `inner` emits matches only; `left` also a left record that found no match (a stream
    /// join: once its window closes; a table join: at once); `outer` (stream joins) also an
    /// unmatched right record.
    #[serde(default)]
    pub mode: JoinModeSpec,

    /// The left side (the job's input topic, keyed and timed by `spec.processor.keyField` and
    /// `timeField`): whether it is re-keyed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub left: Option<JoinLeftSpec>,

    /// The right side.
    pub right: JoinRightSpec,

    /// Stream joins: which right records a left record meets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<JoinWindowSpec>,

    /// Table joins: how far back in event time, before the newest table record, the table's
    /// versions are kept (a left record older than that is late). Whole milliseconds, at most
    /// 720h.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64), pattern(crate::api::EVENT_DURATION_PATTERN))]
    #[x_kube(validation = crate::api::cel::event_duration("join.history"))]
    pub history: Option<String>,

    /// How the producers of both topics place keys: `murmur2` (the Java client's default, and
    /// Kafka Streams') or `crc32` (librdkafka's default, `consistent_random`).
    #[serde(default)]
    pub partitioner: PartitionerSpec,
}

/// Join kinds.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum JoinKindSpec {
    Stream,
    Table,
    GlobalTable,
}

/// Which unmatched records a join emits.
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, schemars::JsonSchema,
)]
#[serde(rename_all = "camelCase")]
pub enum JoinModeSpec {
    #[default]
    Inner,
    Left,
    Outer,
}

/// Key placement.
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, schemars::JsonSchema,
)]
#[serde(rename_all = "camelCase")]
pub enum PartitionerSpec {
    #[default]
    Murmur2,
    Crc32,
}

/// The left side of a join.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct JoinLeftSpec {
    /// Re-key the input: when its records' Kafka key is not the join key (transactions keyed
    /// by their own id, joined by card), the job writes each record, keyed by its join key, to
    /// an internal repartition topic (`<namespace>.<job>.left-repartition`, the right topic's
    /// partition count) in its exactly-once transaction, and joins it from there. The input
    /// may then have any partition count.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub repartition: bool,
}

/// The right side of a join.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct JoinRightSpec {
    /// The right topic: as many partitions as the input topic, unless a side is re-keyed.
    #[schemars(length(min = 1, max = 249))]
    pub topic: String,

    /// Stream joins: re-key the right topic, as `join.left.repartition` does the input
    /// (`<namespace>.<job>.right-repartition`). A table is keyed by its Kafka key and cannot be
    /// re-keyed.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub repartition: bool,

    /// Stream joins: the JSON field holding the join key. A table is keyed by its records'
    /// Kafka key, so a table join has none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 256))]
    pub key_field: Option<String>,

    /// The JSON field holding the event time; required by stream joins. A table without one
    /// versions its records by their Kafka timestamp.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 256))]
    pub time_field: Option<String>,
}

/// Which records of the other side a stream record meets: those whose event time lies at most
/// `before` earlier or `after` later than its own.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct JoinWindowSpec {
    /// Whole milliseconds; `0s` allowed.
    #[schemars(length(max = 64), pattern(crate::api::EVENT_DURATION_PATTERN))]
    pub before: String,

    /// Whole milliseconds; `0s` allowed.
    #[schemars(length(max = 64), pattern(crate::api::EVENT_DURATION_PATTERN))]
    pub after: String,

    /// How long after a record's window closes (in stream time) late records are still
    /// accepted; at most 168h.
    #[serde(default = "super::processor::default_grace")]
    #[schemars(length(max = 64), pattern(crate::api::EVENT_DURATION_PATTERN))]
    #[x_kube(validation = crate::api::cel::window_grace())]
    pub grace: String,
}
