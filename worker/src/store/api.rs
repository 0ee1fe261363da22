//! The storage interface of a task's local state, independent of the engine behind it:
//! the [`StateStore`] trait and the values it returns.
//!
//! Write discipline the implementations guarantee:
//! - [`StateStore::commit`] applies a committed transaction's changes and the metadata in one
//!   atomic, logged write: after it returns the state survives a killed process.
//! - [`StateStore::restore_batch`] writes bulk restore data fast (unlogged) under a
//!   `restoring` marker; only [`StateStore::finish_restore`] makes the state durable and then
//!   clears the marker, so an interrupted restore never looks finished.

use std::path::Path;

use super::changes::ChangeSet;
use super::error::StoreError;
use super::metadata::TaskMetadata;
use crate::processor::Entry;

/// What a task's directory held when its store was opened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OpenOutcome {
    /// Usable state, exactly as described by the metadata: catch up from its offsets.
    Valid(TaskMetadata),
    /// No state at all (a new task or a wiped one): restore from a checkpoint or the changelog.
    Empty,
    /// A restore was interrupted. The state is consistent with the metadata (every restore
    /// batch is written atomically with its metadata, and batches survive a crash only as a
    /// prefix), so the caller may resume the restore from `next_changelog_offset` and then
    /// call [`StateStore::finish_restore`], or wipe. It must not process input before that.
    Interrupted(TaskMetadata),
    /// The state cannot be trusted: the engine refused to open it, or state keys exist
    /// without metadata, or the metadata is unreadable or belongs to another task. The store
    /// is closed: every operation but [`StateStore::wipe`] fails until it is wiped.
    Corrupt {
        /// Why, for logs and the task status.
        reason: String,
    },
}

/// One file of the store or of a checkpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreFile {
    /// The file name, relative to its directory.
    pub name: String,
    /// Size in bytes.
    pub size_bytes: u64,
}

/// What [`StateStore::checkpoint`] wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckpointInfo {
    /// The metadata the checkpoint contains (`None` for a store that never committed).
    pub metadata: Option<TaskMetadata>,
    /// Every file in the checkpoint directory, by name.
    pub files: Vec<StoreFile>,
}

/// The local state of one task: committed key/value state plus its [`TaskMetadata`].
///
/// Keys below 0x01 (the empty key and every key starting with 0x00) are reserved for the
/// store: reading or writing them as state is an error, and scans never return them.
pub trait StateStore: Send + Sync {
    /// The task this store belongs to.
    fn task(&self) -> u32;

    /// The metadata of the stored state as of the last write (`None` when empty).
    fn metadata(&self) -> Option<TaskMetadata>;

    /// The committed value of `key`.
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError>;

    /// Every committed entry with `from <= key < to`, in ascending key order.
    fn scan(&self, from: &[u8], to: &[u8]) -> Result<Vec<Entry>, StoreError>;

    /// The first `limit` entries of [`StateStore::scan`], read no further than that.
    fn scan_limited(&self, from: &[u8], to: &[u8], limit: usize) -> Result<Vec<Entry>, StoreError>;

    /// Applies a committed Kafka transaction's `changes` together with `metadata`, atomically
    /// and durably against a process crash. Refused while a restore is unfinished.
    fn commit(&mut self, changes: &ChangeSet, metadata: &TaskMetadata) -> Result<(), StoreError>;

    /// Applies one restore batch (e.g. one changelog fetch) with `metadata` describing the
    /// state after it; the stored metadata is marked `restoring` whatever `metadata` says.
    /// Fast but not durable on its own: see [`StateStore::finish_restore`].
    fn restore_batch(
        &mut self,
        changes: &ChangeSet,
        metadata: &TaskMetadata,
    ) -> Result<(), StoreError>;

    /// Makes every restore batch durable, then clears the `restoring` marker. Returns the
    /// final metadata. Fails when no restore is in progress.
    fn finish_restore(&mut self) -> Result<TaskMetadata, StoreError>;

    /// Deletes all local state of the task and leaves the store open and empty.
    fn wipe(&mut self) -> Result<(), StoreError>;

    /// Writes a consistent copy of the state (metadata included) into `dir`, which must not
    /// exist yet and must be on the same file system (files are hard-linked where possible).
    /// Refused while a restore is unfinished.
    fn checkpoint(&self, dir: &Path) -> Result<CheckpointInfo, StoreError>;

    /// The immutable data files the state currently consists of.
    fn live_files(&self) -> Result<Vec<StoreFile>, StoreError>;
}
