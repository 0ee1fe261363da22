//! Incremental checkpoints of a task's RocksDB state to S3, and restores from them.
//!
//! - `s3`: the client (config, credentials) and the object operations used here.
//! - `files`: describing a local checkpoint (sizes, SHA-256, remembered for immutable SSTs).
//! - `upload`: one task's uploads (content-addressed objects, then the manifest with
//!   `If-None-Match: *` as the commit point) and its retention run.
//! - `gc`: the retention plan (pure). Which checkpoints a restore may use is the contract's
//!   rule (`streamkeeper_contract::checkpoint_choice`), shared with the operator's status.
//! - `download`: fetching and verifying one checkpoint for a restore.
//! - `module`: a WebAssembly processor's component, fetched, checked and kept on the volume.
//! - `service`: when checkpoints are taken, on the async runtime beside the task threads.
//!
//! Key layout and manifest format come from `streamkeeper_contract` (the operator reads them).
//! This module never touches the live RocksDB directory: it gets checkpoint directories from
//! the store and hands downloaded ones back to it.

pub mod download;
pub mod error;
pub mod files;
pub mod gc;
pub mod module;
pub mod s3;
pub mod service;
pub mod upload;

pub use error::CheckpointError;
pub use service::{CheckpointService, TaskCheckpoints};
