//! The processing logic a job runs and the record fields it reads.

use super::checkpoint::S3CredentialsSecret;
use super::join::JoinSpec;
use kube::KubeSchema;
use serde::{Deserialize, Serialize};

/// The processing logic: `count` (running count per key), `aggregate` (count/sum/min/max/mean
/// per key, optionally per event-time window), `dedup` (first occurrence per key within a TTL),
/// `join` (with a second topic), `custom` (a processor of your own worker build, named in
/// `custom`; `spec.image` is that build), or `wasm` (a WebAssembly component, in `wasm`).
/// Records are JSON objects.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = kube::core::Rule::new("self.type == 'aggregate' ? has(self.aggregate) : !has(self.aggregate)").message("processor.aggregate is required when processor.type is aggregate, and only then").field_path(".aggregate"))]
#[x_kube(validation = kube::core::Rule::new("self.type == 'dedup' ? has(self.dedup) : !has(self.dedup)").message("processor.dedup is required when processor.type is dedup, and only then").field_path(".dedup"))]
#[x_kube(validation = kube::core::Rule::new("self.type == 'join' ? has(self.join) : !has(self.join)").message("processor.join is required when processor.type is join, and only then").field_path(".join"))]
#[x_kube(validation = kube::core::Rule::new("self.type == 'wasm' ? has(self.wasm) : !has(self.wasm)").message("processor.wasm is required when processor.type is wasm, and only then").field_path(".wasm"))]
#[x_kube(validation = kube::core::Rule::new("self.type == 'custom' ? has(self.custom) : !has(self.custom)").message("processor.custom is required when processor.type is custom, and only then").field_path(".custom"))]
#[x_kube(validation = kube::core::Rule::new("(self.type == 'dedup' || self.type == 'join' || (self.type == 'aggregate' && has(self.aggregate) && has(self.aggregate.window))) ? has(self.timeField) : true").message("processor.timeField is required by windows, dedup and joins: they run on event time, never the wall clock").field_path(".timeField"))]
pub struct ProcessorSpec {
    /// Which built-in processor runs.
    #[serde(rename = "type")]
    pub type_: ProcessorType,

    /// JSON field holding the record key (a string or a number).
    #[schemars(length(min = 1, max = 256))]
    pub key_field: String,

    /// JSON field holding the event time (epoch milliseconds or an RFC 3339 string).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 256))]
    pub time_field: Option<String>,

    /// Settings of the `aggregate` processor.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aggregate: Option<AggregateSpec>,

    /// Settings of the `dedup` processor.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dedup: Option<DedupSpec>,

    /// Settings of a `join`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub join: Option<JoinSpec>,

    /// Which processor of your own worker build runs, and its settings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub custom: Option<CustomSpec>,

    /// A processor compiled to a WebAssembly component, and its settings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wasm: Option<WasmSpec>,
}

/// A processor compiled to a WebAssembly component against the worker's interface
/// (`wit/processor.wit`, `streamkeeper:processor@0.2.0`), run sandboxed by the stock worker: a
/// fuel budget per record, a memory cap, no files, network, clock or randomness.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct WasmSpec {
    /// The component, in S3.
    pub module: WasmModuleSpec,

    /// Handed to the guest's `init` as JSON; the guest checks it (a refusal is `Invalid`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "free_object")]
    pub config: Option<serde_json::Map<String, serde_json::Value>>,

    /// The sandbox's limits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<WasmLimitsSpec>,

    /// The SHA-256 digests of earlier builds of this module whose state this build reads: a
    /// bug fix that keeps the state's format. A task whose state one of them built goes on from
    /// it and records this build's digest; a state built by any other module stops the task,
    /// naming both. Changing `module` (and this list) is the one change `spec.processor` allows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 16), inner(pattern(r"^[0-9a-f]{64}$")))]
    pub reads_state_of: Option<Vec<String>>,
}

/// Where the component is, pinned by its digest: an S3 object (`key`, read with the job's
/// checkpoint endpoint and credentials), or a key of a ConfigMap in the job's namespace
/// (`configMap`, for a small module: a ConfigMap holds at most 1 MiB).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = kube::core::Rule::new("has(self.key) != has(self.configMap)").message("spec.processor.wasm.module names an S3 key or a configMap, one of them"))]
#[x_kube(validation = kube::core::Rule::new("!has(self.bucket) || has(self.key)").message("spec.processor.wasm.module.bucket goes with an S3 key").field_path(".bucket"))]
#[x_kube(validation = kube::core::Rule::new("!has(self.credentialsSecret) || has(self.key)").message("spec.processor.wasm.module.credentialsSecret goes with an S3 key").field_path(".credentialsSecret"))]
pub struct WasmModuleSpec {
    /// The bucket; `spec.checkpoint.s3.bucket` when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 3, max = 63))]
    pub bucket: Option<String>,

    /// The S3 object's key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 1024))]
    pub key: Option<String>,

    /// The ConfigMap and its key holding the component (in `binaryData`), mounted into the
    /// worker pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_map: Option<WasmModuleConfigMap>,

    /// A Secret with access keys of the module's own for its S3 object (mounted as files);
    /// the job's checkpoint credentials when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credentials_secret: Option<S3CredentialsSecret>,

    /// The component's SHA-256 (`sha256sum module.wasm`): the worker runs those bytes or none.
    #[schemars(pattern(r"^[0-9a-f]{64}$"))]
    pub sha256: String,
}

/// A ConfigMap key holding a WebAssembly component.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct WasmModuleConfigMap {
    /// The ConfigMap's name, in the job's namespace.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// The key of its `binaryData` (or `data`) holding the component.
    #[schemars(length(min = 1, max = 253), pattern(r"^[-._a-zA-Z0-9]+$"))]
    pub key: String,
}

/// A WebAssembly processor's limits.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct WasmLimitsSpec {
    /// Fuel (about one per WebAssembly instruction) a record may burn; past it the record is
    /// dead-lettered `guest_out_of_fuel` (default 100000000). Nothing a guest calls waits (its
    /// clock stands still, so a sleep is over at once): fuel alone bounds a record's time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 10_000_000_000u64))]
    pub fuel_per_record: Option<u64>,

    /// The most memory an instance may have, in bytes; a record that wants more is
    /// dead-lettered `guest_out_of_memory` (default 268435456, 256 MiB).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 16_777_216u64, max = 4_294_967_296u64))]
    pub memory_bytes: Option<u64>,
}

/// A processor your own worker binary registered (the Rust SDK, `docs/processors.md`). The
/// job's `spec.image` must be that build: a worker without a processor of this name, or whose
/// processor refuses `config`, stops before it runs a task, and the job shows `Invalid` with the
/// worker's reason.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct CustomSpec {
    /// The name the processor was registered under (lowercase letters, digits and `-`).
    #[schemars(length(min = 1, max = 63), pattern(r"^[a-z][a-z0-9-]*$"))]
    pub name: String,

    /// The processor's own settings, as free JSON; the processor checks them when it is built.
    /// Part of the state's identity: a job's state is only read by the same name, config and
    /// a processor version that declares it can.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "free_object")]
    pub config: Option<serde_json::Map<String, serde_json::Value>>,
}

/// Any JSON object, kept as it is by the apiserver.
fn free_object(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": true,
    })
}

/// Built-in processor kinds.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum ProcessorType {
    Count,
    Aggregate,
    Dedup,
    Join,
    Custom,
    Wasm,
}

/// Count, sum, min, max and mean of a numeric field per key.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct AggregateSpec {
    /// JSON field holding the number to aggregate.
    #[schemars(length(min = 1, max = 256))]
    pub value_field: String,

    /// Aggregate per event-time window instead of over all time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<WindowSpec>,
}

/// An event-time window: `tumbling` (back to back, `size` long) or `hopping` (`size` long,
/// starting every `advance`).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = kube::core::Rule::new("self.type == 'hopping' ? has(self.advance) : !has(self.advance)").message("window.advance is required for hopping windows and not allowed for tumbling ones").field_path(".advance"))]
#[x_kube(validation = kube::core::Rule::new("!has(self.advance) || (duration(self.advance) > duration('0s') && duration(self.advance) <= duration(self.size))").message("window.advance must be positive and at most window.size").field_path(".advance"))]
pub struct WindowSpec {
    /// Window kind.
    #[serde(rename = "type")]
    pub type_: WindowType,

    /// Window length (Go duration, e.g. `1h`; whole milliseconds).
    #[schemars(length(max = 64), pattern(crate::api::EVENT_DURATION_PATTERN))]
    #[x_kube(validation = crate::api::cel::event_duration("window.size"))]
    pub size: String,

    /// Start-to-start distance of hopping windows (whole milliseconds). `size` must be a multiple
    /// of it, and a record falls in at most 1000 windows (`size / advance`); the operator checks
    /// those two and reports them in the `Invalid` condition.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64), pattern(crate::api::EVENT_DURATION_PATTERN))]
    #[x_kube(validation = crate::api::cel::event_duration("window.advance"))]
    pub advance: Option<String>,

    /// How long after a window's end late records are still accepted (by event time; whole
    /// milliseconds, at most 168h).
    #[serde(default = "default_grace")]
    #[schemars(length(max = 64), pattern(crate::api::EVENT_DURATION_PATTERN))]
    #[x_kube(validation = crate::api::cel::window_grace())]
    pub grace: String,
}

/// A grace of none: records are late as soon as their window ends.
pub(super) fn default_grace() -> String {
    "0s".into()
}

/// Window kinds.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum WindowType {
    Tumbling,
    Hopping,
}

/// First occurrence per key within a time-to-live of event time.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct DedupSpec {
    /// A repeat of a key within this much event time of its first occurrence is dropped (whole
    /// milliseconds).
    #[schemars(length(max = 64), pattern(crate::api::EVENT_DURATION_PATTERN))]
    #[x_kube(validation = crate::api::cel::event_duration("dedup.ttl"))]
    pub ttl: String,
}
