//! The streamkeeper worker: exactly-once stateful processing of Kafka records, and the SDK for
//! running your own logic in it.
//!
//! # Your own processor
//!
//! A processor turns each input record into state changes and output records. The worker runs
//! it exactly once per record: the state changes go to RocksDB and the job's compacted
//! changelog, the output to the output topic, in one Kafka transaction with the input's
//! position; standbys, checkpoints to S3 and restores work as for the built-in processors.
//!
//! 1. Implement [`Processor`]: `process` gets one decoded [`InputRecord`] and the task's
//!    [`StateAccess`], and returns a [`ProcessOutput`]. Its rules (deterministic, all state in
//!    the state access, full values) are what make recovery exact.
//! 2. Register it under a name with a version: [`CustomProcessor::new`], which builds it from
//!    the job's settings ([`CustomSettings`]) or refuses them ([`ConfigRefused`]).
//! 3. Your binary's `main` is [`Worker::new`]`().`[`processor`](Worker::processor)`(…).`
//!    [`main`](Worker::main)`()`; build it into an image, and name the processor in the job:
//!    `processor: {type: custom, keyField: card, custom: {name: velocity-check, config: {…}}}`
//!    with `spec.image` your image.
//!
//! `examples/custom-processor` is a whole one, and `docs/processors.md` the guide.
//!
//! # The worker's own modules
//!
//! Hidden from this documentation, public for the worker's tests. The modules, lowest first. A
//! module imports only modules listed before it, never one after it, and the files inside a
//! folder import each other in one direction too: there is no import circle. (A file's unit
//! tests, and a folder's `test_support`, sit above everything they test.)
//!
//! 1. `processor`: the pure processing logic (decoding, built-in processors, state encodings,
//!    the registry of processors by name) behind the [`Processor`] trait; knows nothing of
//!    Kafka or RocksDB.
//! 2. `metrics`: the worker's Prometheus metrics, in one registry.
//! 3. `board`: the task board, every task's report, which the HTTP port serves.
//! 4. `kafka_client`: Kafka client settings (connection, security, the exactly-once roles).
//! 5. `store`: a task's local state (RocksDB) and its crash safety.
//! 6. `checkpoint`: incremental checkpoints of a task's state to S3, and restores from them.
//! 7. `task`: one task's lifecycle: its thread and roles, its restore, the standby and the
//!    exactly-once loop.
//! 8. `runtime`: what runs the tasks in a process: the run loop, the static share, the
//!    operator's assignment documents, the HTTP port.
//! 9. `app`: the command line ([`Worker`]), with the processors a binary offers.
//!
//! Below them all, `failpoint`: the crash and stall points of the failure tests, from the
//! failpoint crate.

/// Crash and stall points for the failure tests (shared with the operator).
#[doc(hidden)]
pub use streamkeeper_failpoint as failpoint;

// In layer order (rustfmt keeps the order of declarations a blank line separates); the
// operator's `tests/layering.rs` reads it.
#[doc(hidden)]
pub mod processor;

#[doc(hidden)]
pub mod metrics;

#[doc(hidden)]
pub mod board;

#[doc(hidden)]
pub mod kafka_client;

#[doc(hidden)]
pub mod store;

#[doc(hidden)]
pub mod checkpoint;

#[doc(hidden)]
pub mod task;

#[doc(hidden)]
pub mod runtime;

#[doc(hidden)]
pub mod app;

pub use app::Worker;
pub use processor::{
    ConfigRefused, CustomProcessor, CustomSettings, DecodeError, DropReason, Entry, InputRecord,
    KafkaMeta, MemoryState, OutputRecord, ProcessError, ProcessOutput, Processor, Side,
    StateAccess, StateCodecError, StateError,
};
