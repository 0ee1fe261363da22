//! The streamkeeper worker: exactly-once stateful processing of Kafka records.
//!
//! - `processor`: the pure processing logic (decoding, built-in processors, state encodings)
//!   behind the [`processor::Processor`] trait; knows nothing of Kafka or RocksDB.
//! - `store`: a task's local state (RocksDB) and its crash safety.
//! - `checkpoint`: incremental checkpoints of a task's state to S3, and restores from them.
//! - `task`: a task's restore and exactly-once loop; `standalone`: every partition in one process.
//! - `http`, `metrics`, `status`: what the worker exposes.

pub mod assignment;
pub mod checkpoint;
/// Crash and stall points for the failure tests (shared with the operator).
pub use streamkeeper_contract::failpoint;
pub mod http;
pub mod http_server;
pub mod kafka_client;
pub mod metrics;
pub mod processor;
pub mod share;
pub mod standalone;
pub mod status;
pub mod store;
pub mod task;
