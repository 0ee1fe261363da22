//! The processor selection of a job, as a plain serde type, and its validation into a
//! ready [`Processor`]. The shared contract's worker config maps onto this type; nothing
//! here reads the raw spec of the custom resource.
//!
//! JSON form:
//! ```json
//! {"key_field": "user", "time_field": "ts",
//!  "processor": {"kind": "aggregate", "value_field": "amount",
//!                "window": {"type": "hopping", "size_ms": 60000, "advance_ms": 20000},
//!                "grace_ms": 5000}}
//! ```
//!
//! A join reads the left input with `key_field`/`time_field` and the right one with its own
//! settings:
//! ```json
//! {"key_field": "user", "time_field": "ts",
//!  "processor": {"kind": "join", "join": "stream", "mode": "left",
//!                "right_key_field": "user_id", "right_time_field": "at",
//!                "before_ms": 5000, "after_ms": 10000, "grace_ms": 1000}}
//! {"key_field": "user", "time_field": "ts",
//!  "processor": {"kind": "join", "join": "table", "mode": "inner", "history_ms": 86400000}}
//! ```

use serde::{Deserialize, Serialize};

use super::aggregate::AggregateProcessor;
use super::api::Processor;
use super::count::CountProcessor;
use super::decode::{RecordDecoder, RightDecoder, TableDecoder};
use super::dedup::{DedupProcessor, TtlError};
use super::join::{JoinConfigError, JoinKind, JoinMode, JoinSpec};
use super::record::Side;
use super::window::{WindowAssigner, WindowError};

/// Which processor a job runs and which fields of the input it reads.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProcessorConfig {
    /// Top-level field holding the grouping key (string or number).
    pub key_field: String,
    /// Top-level field holding the event time (epoch millis or RFC 3339). Required by
    /// windowed `aggregate`, by `dedup` and by `join` (for its left input).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_field: Option<String>,
    /// The processor.
    pub processor: ProcessorKind,
}

/// The built-in processors.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum ProcessorKind {
    /// Running count per key. Braced (not a unit variant) so that serde rejects unknown
    /// fields in it like in the other kinds.
    Count {},
    /// Count, sum, min, max, mean of `value_field` per key (and window).
    Aggregate {
        /// Top-level numeric field to aggregate.
        value_field: String,
        /// Optional event-time window.
        #[serde(default)]
        window: WindowSpec,
        /// How long after a window's end (in stream time) records are still accepted.
        #[serde(default)]
        grace_ms: u64,
    },
    /// First occurrence per key within `ttl_ms` of event time.
    Dedup {
        /// How long (event time) a key stays seen.
        ttl_ms: u64,
    },
    /// The input (left) joined by key with a second input (right) of the same task: another
    /// stream within a time window, or a versioned table as of each stream record's time. The
    /// settings that apply to one kind of join only are refused on the other.
    Join {
        /// `stream` or `table`.
        join: JoinKind,
        /// `inner`, `left`, or (stream joins only) `outer`.
        mode: JoinMode,
        /// The right stream's key field. Stream joins only: a table is keyed by its Kafka
        /// record key, since a tombstone has no field to read.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        right_key_field: Option<String>,
        /// The right input's time field: required for a stream; for a table, the version time
        /// (else the Kafka record timestamp).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        right_time_field: Option<String>,
        /// Stream joins: how far a right record may precede a left one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        before_ms: Option<u64>,
        /// Stream joins: how far a right record may follow a left one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        after_ms: Option<u64>,
        /// Stream joins: how long after a window's end records are still accepted (default 0).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        grace_ms: Option<u64>,
        /// Table joins: how far back from the newest table time lookups stay exact.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        history_ms: Option<u64>,
    },
    /// A processor a worker binary registered by name (see [`super::registry`], which builds
    /// it; a config alone builds none).
    Custom {
        /// The registered name.
        name: String,
        /// The job's free config for it.
        #[serde(default)]
        config: serde_json::Value,
    },
    /// A WebAssembly component (see [`super::wasm`]; the registry builds it from the module's
    /// bytes, which a config alone does not have).
    Wasm {
        /// Handed to the guest's `init`.
        #[serde(default)]
        config: serde_json::Value,
        /// The sandbox's fuel per record.
        fuel_per_record: u64,
        /// The sandbox's memory cap.
        memory_bytes: u64,
    },
}

/// The window of an `aggregate`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum WindowSpec {
    /// All time, no window.
    #[default]
    None,
    /// Non-overlapping windows of `size_ms`, aligned to the epoch.
    Tumbling {
        /// Window length.
        size_ms: u64,
    },
    /// Windows of `size_ms` every `advance_ms` (`size_ms` a multiple of `advance_ms`).
    Hopping {
        /// Window length.
        size_ms: u64,
        /// Distance between window starts.
        advance_ms: u64,
    },
}

/// Why a processor configuration is invalid.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// A field name is empty.
    #[error("`{0}` must not be empty")]
    EmptyField(&'static str),
    /// The processor needs event time and `time_field` is not set.
    #[error("processor `{0}` needs `time_field`")]
    NeedsTimeField(&'static str),
    /// `grace_ms` was set on an unwindowed aggregate, where it means nothing.
    #[error("`grace_ms` only applies to a windowed aggregate")]
    GraceWithoutWindow,
    /// Invalid window or grace.
    #[error(transparent)]
    Window(#[from] WindowError),
    /// Invalid dedup TTL.
    #[error(transparent)]
    Ttl(#[from] TtlError),
    /// Invalid join settings.
    #[error(transparent)]
    Join(#[from] JoinConfigError),
    /// The job names a custom processor this worker binary does not offer.
    #[error(
        "this worker has no processor `{name}` (it offers: {offered}): is spec.image the build that registers it?"
    )]
    UnknownCustom {
        /// The name the job asks for.
        name: String,
        /// The names the binary registered, comma-separated (empty for the stock worker).
        offered: String,
    },
    /// A WebAssembly processor without its module's bytes (`check-config` does not fetch it).
    #[error("the WebAssembly module is not loaded")]
    WasmNotLoaded,
    /// The WebAssembly module cannot run, or refused its config.
    #[error("WebAssembly processor: {0}")]
    Wasm(String),
    /// A custom processor refused the job's config.
    #[error("processor `{name}` (version {version}) refused its config: {reason}")]
    Refused {
        name: String,
        version: u32,
        /// The processor's own words.
        reason: String,
    },
}

impl ProcessorConfig {
    /// The decoder for this configuration's fields.
    pub fn decoder(&self) -> RecordDecoder {
        RecordDecoder::new(self.key_field.clone(), self.time_field.clone())
    }

    /// The decoder of a join's right input; `None` for a processor with one input.
    pub fn right_decoder(&self) -> Option<RightDecoder> {
        let ProcessorKind::Join {
            join,
            right_key_field,
            right_time_field,
            ..
        } = &self.processor
        else {
            return None;
        };
        Some(match join {
            // The key field is present in every config `build_processor` accepts.
            JoinKind::Stream => RightDecoder::Stream(
                RecordDecoder::new(
                    right_key_field.clone().unwrap_or_default(),
                    right_time_field.clone(),
                )
                .with_side(Side::Right),
            ),
            JoinKind::Table => RightDecoder::Table(TableDecoder::new(right_time_field.clone())),
        })
    }

    /// Validates the configuration and builds its processor.
    pub fn build_processor(&self) -> Result<Box<dyn Processor>, ConfigError> {
        if self.key_field.is_empty() {
            return Err(ConfigError::EmptyField("key_field"));
        }
        if self.time_field.as_deref() == Some("") {
            return Err(ConfigError::EmptyField("time_field"));
        }
        let has_time = self.time_field.is_some();
        match &self.processor {
            ProcessorKind::Count {} => Ok(Box::new(CountProcessor)),
            ProcessorKind::Aggregate {
                value_field,
                window,
                grace_ms,
            } => {
                if value_field.is_empty() {
                    return Err(ConfigError::EmptyField("value_field"));
                }
                let assigner = match *window {
                    WindowSpec::None if *grace_ms > 0 => {
                        return Err(ConfigError::GraceWithoutWindow);
                    }
                    WindowSpec::None => {
                        return Ok(Box::new(AggregateProcessor::unwindowed(
                            value_field.clone(),
                        )));
                    }
                    WindowSpec::Tumbling { size_ms } => WindowAssigner::tumbling(size_ms)?,
                    WindowSpec::Hopping {
                        size_ms,
                        advance_ms,
                    } => WindowAssigner::hopping(size_ms, advance_ms)?,
                };
                if !has_time {
                    return Err(ConfigError::NeedsTimeField("aggregate"));
                }
                let p = AggregateProcessor::windowed(value_field.clone(), assigner, *grace_ms)?;
                Ok(Box::new(p))
            }
            ProcessorKind::Dedup { ttl_ms } => {
                if !has_time {
                    return Err(ConfigError::NeedsTimeField("dedup"));
                }
                Ok(Box::new(DedupProcessor::new(*ttl_ms)?))
            }
            ProcessorKind::Join {
                join,
                mode,
                right_key_field,
                right_time_field,
                before_ms,
                after_ms,
                grace_ms,
                history_ms,
            } => {
                let spec = JoinSpec {
                    join: *join,
                    mode: *mode,
                    right_key_field: right_key_field.as_deref(),
                    right_time_field: right_time_field.as_deref(),
                    before_ms: *before_ms,
                    after_ms: *after_ms,
                    grace_ms: *grace_ms,
                    history_ms: *history_ms,
                };
                build_join(&spec, has_time)
            }
            ProcessorKind::Custom { name, .. } => Err(ConfigError::UnknownCustom {
                name: name.clone(),
                offered: String::new(),
            }),
            ProcessorKind::Wasm { .. } => Err(ConfigError::WasmNotLoaded),
        }
    }
}

/// Checks a join's fields (the spec checks the rest) and builds it.
fn build_join(spec: &JoinSpec<'_>, has_time: bool) -> Result<Box<dyn Processor>, ConfigError> {
    if spec.right_key_field == Some("") {
        return Err(ConfigError::EmptyField("right_key_field"));
    }
    if spec.right_time_field == Some("") {
        return Err(ConfigError::EmptyField("right_time_field"));
    }
    // Both joins place left records in time: in windows, or against table versions.
    if !has_time {
        return Err(ConfigError::NeedsTimeField(spec.join.processor_kind()));
    }
    Ok(Box::new(spec.build()?))
}

/// The processor selection as the operator renders it in the worker config. Durations are whole
/// milliseconds there: the contract's rules refuse any other before a task starts, so the
/// conversion loses nothing.
impl From<&streamkeeper_contract::worker_config::ProcessorConfig> for ProcessorConfig {
    fn from(config: &streamkeeper_contract::worker_config::ProcessorConfig) -> Self {
        use streamkeeper_contract::worker_config::ProcessorKind as Rendered;
        let millis = |d: std::time::Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        let processor = match &config.kind {
            Rendered::Count => ProcessorKind::Count {},
            Rendered::Aggregate {
                value_field,
                window,
            } => ProcessorKind::Aggregate {
                value_field: value_field.clone(),
                window: match window {
                    None => WindowSpec::None,
                    Some(w) => match w.advance {
                        None => WindowSpec::Tumbling {
                            size_ms: millis(w.size),
                        },
                        Some(advance) => WindowSpec::Hopping {
                            size_ms: millis(w.size),
                            advance_ms: millis(advance),
                        },
                    },
                },
                grace_ms: window.as_ref().map(|w| millis(w.grace)).unwrap_or(0),
            },
            Rendered::Dedup { ttl } => ProcessorKind::Dedup {
                ttl_ms: millis(*ttl),
            },
            // Where a side is re-keyed is the task's reading, not the processor's logic: a
            // change of it changes the topic the join reads, which the input identity catches.
            Rendered::Join {
                join,
                mode,
                left: _,
                right,
                window,
                history,
                partitioner: _,
            } => {
                use streamkeeper_contract::worker_config::{JoinKind as Kind, JoinMode as Mode};
                ProcessorKind::Join {
                    join: match join {
                        Kind::Stream => JoinKind::Stream,
                        // The same join: only where the table's records come from differs
                        // (every partition, read by every task: `task::active::sources`).
                        Kind::Table | Kind::GlobalTable => JoinKind::Table,
                    },
                    mode: match mode {
                        Mode::Inner => JoinMode::Inner,
                        Mode::Left => JoinMode::Left,
                        Mode::Outer => JoinMode::Outer,
                    },
                    right_key_field: right.key_field.clone(),
                    right_time_field: right.time_field.clone(),
                    before_ms: window.as_ref().map(|w| millis(w.before)),
                    after_ms: window.as_ref().map(|w| millis(w.after)),
                    grace_ms: window.as_ref().map(|w| millis(w.grace)),
                    history_ms: history.map(millis),
                }
            }
            Rendered::Custom { name, config } => ProcessorKind::Custom {
                name: name.clone(),
                config: config.clone(),
            },
            Rendered::Wasm { config, limits, .. } => ProcessorKind::Wasm {
                config: config.clone(),
                fuel_per_record: limits.fuel_per_record,
                memory_bytes: limits.memory_bytes,
            },
        };
        Self {
            key_field: config.key_field.clone(),
            time_field: config.time_field.clone(),
            processor,
        }
    }
}

#[cfg(test)]
#[path = "config_tests.rs"]
mod tests;
