//! The local state store of a task: committed state plus the metadata that says which input
//! and changelog offsets it includes, behind the [`StateStore`] trait, with RocksDB
//! ([`RocksStore`], one instance per task in `<state dir>/task-<i>/db`) as the engine.
//!
//! This module owns the on-disk state of a task and its crash safety (atomic commits,
//! restores that never look finished before they are, corruption detection on open, the
//! task directory lock). It knows nothing of Kafka or S3: the exactly-once loop decides
//! *when* to commit and the checkpoint uploader what to do with a checkpoint directory.
//!
//! Layout: [`api`] (the trait and its outcomes), [`error`], [`metadata`] (the reserved
//! metadata key and its encoding), [`changes`] (a transaction's coalesced writes),
//! [`overlay`] (uncommitted changes over the store, the processors' `StateAccess`),
//! [`incarnation`] (which changelog history a state belongs to), `rocks/` (the RocksDB engine:
//! opening, the store, its crash-safe writes), and `test_support` (helpers of the tests).

pub mod api;
pub mod changes;
pub mod error;
pub mod incarnation;
pub mod metadata;
pub mod overlay;
mod rocks;

#[cfg(test)]
pub(crate) mod test_support;

pub use api::{CheckpointInfo, OpenOutcome, StateStore, StoreFile};
pub use changes::ChangeSet;
pub use error::StoreError;
pub use metadata::{METADATA_FORMAT_VERSION, MetadataError, TaskMetadata};
pub use overlay::Overlay;
pub use rocks::{BlockCache, Opened, RocksStore, db_path};
