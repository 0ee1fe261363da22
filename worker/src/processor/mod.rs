//! Pure record processing for a task: decoding, the `Processor` trait, the built-in
//! processors (`count`, `aggregate`, `dedup`, `join`) and the state encodings they use.
//!
//! This module owns *what* a record does to a task's state and output. It must not touch
//! Kafka, RocksDB, the clock or the network: the exactly-once loop hands each record a
//! [`StateAccess`] (its uncommitted overlay over RocksDB) and produces the returned output
//! and the recorded state changes in one transaction. Because the same input against the
//! same state must always give the same changes and output (replay after a crash, standby
//! promotion), processors use event time only, never the wall clock.
//!
//! Layout: [`api`] (the trait and its errors), [`record`] (input/output types), [`decode`]
//! (JSON → [`InputRecord`]), [`config`] (the processor selection), [`state`] (the state access
//! trait and an in-memory implementation), [`keys`] and [`codec`] (stable state encodings),
//! [`window`] (window assignment math), [`stream_time`], [`sweep`] (bounded sweeps), and one
//! module per built-in processor ([`join`] keeps its own key and value layouts). [`registry`]
//! holds the processors a binary offers by name (the built-in ones and its own) and resolves a
//! job's. [`pipeline`]
//! ties the decoders (one per input) and a processor together for the loop, checking a join's
//! key placement with [`placement`]; `test_support` holds helpers of the tests.

pub mod aggregate;
pub mod api;
pub mod codec;
pub mod config;
pub mod count;
pub mod decode;
pub mod dedup;
pub mod identity;
pub mod join;
pub mod keys;
pub mod pipeline;
pub mod placement;
pub mod record;
pub mod registry;
pub mod rfc3339;
pub mod state;
pub mod stream_time;
pub mod sweep;
pub mod wasm;
pub mod window;

#[cfg(test)]
pub(crate) mod test_support;

pub use aggregate::AggregateProcessor;
pub use api::{ProcessError, Processor};
pub use codec::{AggState, CountState, DedupState, Marker, STATE_FORMAT_VERSION, StateCodecError};
pub use config::{ConfigError, ProcessorConfig, ProcessorKind, WindowSpec};
pub use count::CountProcessor;
pub use decode::{DecodeError, MAX_ABS_EVENT_TIME_MS, RecordDecoder, RightDecoder, TableDecoder};
pub use dedup::DedupProcessor;
pub use identity::{Build, ProcessorIdentity};
pub use join::{JoinConfigError, JoinKind, JoinMode, JoinProcessor};
pub use pipeline::{Pipeline, RawInput};
pub use placement::Placement;
pub use record::{DropReason, InputRecord, KafkaMeta, OutputRecord, ProcessOutput, Side};
pub use registry::{
    ConfigRefused, CustomProcessor, CustomSettings, JobProcessor, RegistrationError, Registry,
};
pub use state::{Entry, MemoryState, StateAccess, StateError};
pub use window::{Window, WindowAssigner, WindowError};
