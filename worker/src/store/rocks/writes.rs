//! The writes of a [`RocksStore`] that a crash must never tear: a commit, a restore batch and the
//! end of a restore, each one atomic, with the write options its crash safety needs.
//!
//! Crash safety (the reasoning behind each write's options):
//! - `commit` is one `WriteBatch` (changes + metadata) through the WAL, not synced. RocksDB
//!   hands each logged write to the OS before returning, so it survives a killed process.
//!   A power loss may drop the unsynced tail; point-in-time WAL recovery then yields an older
//!   *consistent* state whose metadata says so, and the changelog replay completes it. Local
//!   state only ever holds Kafka-committed changes, so losing a suffix is always repairable.
//! - `restore_batch` writes each batch atomically with its metadata marked `restoring`. The
//!   first batch of a restore goes through the WAL (it is the durable marker); later ones
//!   skip it. Memtables flush in sequence order, so after a crash the store holds the marker
//!   plus a prefix of the batches, and the metadata of the last one: consistent, reported as
//!   [`OpenOutcome::Interrupted`](crate::store::OpenOutcome::Interrupted). No logged write is allowed between them (`commit` is
//!   refused while restoring), so an unlogged batch can never be lost *under* a later logged
//!   write.
//! - `finish_restore` flushes the memtables (waiting until the SSTs are in the MANIFEST),
//!   and only then writes the cleared marker through the WAL with sync.

use rocksdb::{WriteBatch, WriteOptions};

use super::store::RocksStore;
use crate::store::changes::ChangeSet;
use crate::store::error::{StoreError, hex};
use crate::store::metadata::{METADATA_KEY, TaskMetadata, is_reserved_key};

impl RocksStore {
    /// [`StateStore::commit`](crate::store::StateStore::commit): changes and metadata in one
    /// batch through the WAL.
    pub(super) fn write_commit(
        &mut self,
        changes: &ChangeSet,
        metadata: &TaskMetadata,
    ) -> Result<(), StoreError> {
        if metadata.restoring {
            return Err(self.invalid("commit", "the metadata is marked restoring"));
        }
        if self.restoring() {
            return Err(self.invalid(
                "commit",
                "a restore is unfinished: finish it or wipe the store first",
            ));
        }
        let batch = self.batch(changes, metadata)?;
        // WAL on, no sync: see the module docs.
        self.write("commit", batch, &WriteOptions::default(), *metadata)
    }

    /// [`StateStore::restore_batch`](crate::store::StateStore::restore_batch): a batch marked
    /// restoring, only the first one logged.
    pub(super) fn write_restore_batch(
        &mut self,
        changes: &ChangeSet,
        metadata: &TaskMetadata,
    ) -> Result<(), StoreError> {
        let meta = TaskMetadata {
            restoring: true,
            ..*metadata
        };
        let batch = self.batch(changes, &meta)?;
        // The first batch of a restore is logged: it is the durable `restoring` marker that
        // every later (unlogged) batch sorts after.
        let mut opts = WriteOptions::default();
        opts.disable_wal(self.restoring());
        self.write("restore", batch, &opts, meta)
    }

    /// [`StateStore::finish_restore`](crate::store::StateStore::finish_restore): flush, then
    /// the cleared marker, logged and synced.
    pub(super) fn write_finish_restore(&mut self) -> Result<TaskMetadata, StoreError> {
        let Some(meta) = self.meta.filter(|m| m.restoring) else {
            return Err(self.invalid("finish_restore", "no restore is in progress"));
        };
        // Every unlogged batch must be in SST files before the marker is cleared.
        self.flush()?;
        let done = TaskMetadata {
            restoring: false,
            ..meta
        };
        let mut batch = WriteBatch::default();
        batch.put(METADATA_KEY, done.encode());
        let mut opts = WriteOptions::default();
        opts.set_sync(true);
        self.write("finish_restore", batch, &opts, done)?;
        tracing::info!(task = self.task, metadata = ?done, "restore finished");
        Ok(done)
    }

    pub(super) fn restoring(&self) -> bool {
        self.meta.is_some_and(|m| m.restoring)
    }

    /// One batch of `changes` plus `meta`, after checking the keys and the task.
    fn batch(&self, changes: &ChangeSet, meta: &TaskMetadata) -> Result<WriteBatch, StoreError> {
        if meta.task != self.task {
            return Err(StoreError::TaskMismatch {
                task: self.task,
                found: meta.task,
            });
        }
        let mut batch = WriteBatch::default();
        for (key, value) in changes.iter() {
            if is_reserved_key(key) {
                return Err(StoreError::ReservedKey {
                    task: self.task,
                    key_hex: hex(key),
                });
            }
            match value {
                Some(value) => batch.put(key, value),
                None => batch.delete(key),
            }
        }
        batch.put(METADATA_KEY, meta.encode());
        Ok(batch)
    }

    fn write(
        &mut self,
        op: &'static str,
        batch: WriteBatch,
        opts: &WriteOptions,
        meta: TaskMetadata,
    ) -> Result<(), StoreError> {
        let db = self.db(op)?;
        db.write_opt(batch, opts).map_err(|e| self.engine(op, e))?;
        self.meta = Some(meta);
        Ok(())
    }
}

#[cfg(test)]
#[path = "writes_tests.rs"]
mod tests;
