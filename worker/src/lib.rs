//! The streamkeeper worker: exactly-once stateful processing of Kafka records.
//!
//! The modules, lowest first. A module imports only modules listed before it, never one after
//! it, and the files inside a folder import each other in one direction too: there is no import
//! circle. (A file's unit tests, and a folder's `test_support`, sit above everything they test.)
//!
//! 1. [`processor`]: the pure processing logic (decoding, built-in processors, state encodings)
//!    behind the [`processor::Processor`] trait; knows nothing of Kafka or RocksDB.
//! 2. [`metrics`]: the worker's Prometheus metrics, in one registry.
//! 3. [`board`]: the task board, every task's report, which the HTTP port serves.
//! 4. [`kafka_client`]: Kafka client settings (connection, security, the exactly-once roles).
//! 5. [`store`]: a task's local state (RocksDB) and its crash safety.
//! 6. [`checkpoint`]: incremental checkpoints of a task's state to S3, and restores from them.
//! 7. [`task`]: one task's lifecycle: its thread and roles, its restore, the standby and the
//!    exactly-once loop.
//! 8. [`runtime`]: what runs the tasks in a process: the run loop, the static share, the
//!    operator's assignment documents, the HTTP port.
//!
//! Below them all, [`failpoint`]: the crash and stall points of the failure tests, from the
//! failpoint crate.

/// Crash and stall points for the failure tests (shared with the operator).
pub use streamkeeper_failpoint as failpoint;

// In layer order (rustfmt keeps the order of declarations a blank line separates); the
// operator's `tests/layering.rs` reads it.
pub mod processor;

pub mod metrics;

pub mod board;

pub mod kafka_client;

pub mod store;

pub mod checkpoint;

pub mod task;

pub mod runtime;
