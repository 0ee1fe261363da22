//! [`RocksStore`]: the [`StateStore`] of one task on its own RocksDB instance in
//! `<state dir>/task-<i>/db`: opening it, reading it, wiping it, and its checkpoints. The writes
//! a crash must never tear (commit, restore batches, the end of a restore) are in `writes`.

use std::fs::{self, File};
use std::io::ErrorKind;
use std::path::{Path, PathBuf};

use rocksdb::checkpoint::Checkpoint;
use rocksdb::{DB, Direction, IteratorMode, ReadOptions};
use streamkeeper_contract::worker_config::RocksDbTuning;

use super::open::{
    BlockCache, TaskPaths, db_options, engine_error, inspect, is_fresh, is_lock_error, list_files,
    lock_task_dir,
};
use crate::processor::Entry;
use crate::store::api::{CheckpointInfo, OpenOutcome, StateStore, StoreFile};
use crate::store::changes::ChangeSet;
use crate::store::error::{StoreError, hex};
use crate::store::metadata::{FIRST_STATE_KEY, TaskMetadata, is_reserved_key};

/// A freshly opened store and what it found.
#[derive(Debug)]
pub struct Opened {
    /// The store; closed when the outcome is [`OpenOutcome::Corrupt`] (wipe it first).
    pub store: RocksStore,
    /// What the task's directory held.
    pub outcome: OpenOutcome,
}

/// One task's state in its own RocksDB instance. Holds the task directory's lock.
pub struct RocksStore {
    pub(super) task: u32,
    pub(super) paths: TaskPaths,
    tuning: RocksDbTuning,
    cache: BlockCache,
    /// `None` only while the store is closed after being found corrupt.
    pub(super) db: Option<DB>,
    pub(super) meta: Option<TaskMetadata>,
    /// Declared after `db` so the database closes before the lock is released.
    _lock: File,
}

impl std::fmt::Debug for RocksStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RocksStore")
            .field("task", &self.task)
            .field("path", &self.paths.db)
            .field("open", &self.db.is_some())
            .field("metadata", &self.meta)
            .finish()
    }
}

impl RocksStore {
    /// Opens (or creates) task `task`'s store below `state_dir`, with a block cache of its own.
    pub fn open(state_dir: &Path, task: u32, tuning: &RocksDbTuning) -> Result<Opened, StoreError> {
        let cache = BlockCache::new(tuning.block_cache_bytes);
        Self::open_with_cache(state_dir, task, tuning, &cache)
    }

    /// Like [`RocksStore::open`], sharing `cache` with other stores (its size is the
    /// cache's, not `tuning.block_cache_bytes`).
    pub fn open_with_cache(
        state_dir: &Path,
        task: u32,
        tuning: &RocksDbTuning,
        cache: &BlockCache,
    ) -> Result<Opened, StoreError> {
        let paths = TaskPaths::new(state_dir, task);
        let lock = lock_task_dir(&paths, task)?;
        let mut store = RocksStore {
            task,
            paths,
            tuning: tuning.clone(),
            cache: cache.clone(),
            db: None,
            meta: None,
            _lock: lock,
        };
        let outcome = store.open_engine()?;
        match &outcome {
            OpenOutcome::Corrupt { reason } => {
                let path = store.paths.db.display();
                tracing::warn!(task, %path, %reason, "local state is corrupt");
            }
            other => tracing::info!(task, outcome = ?other, "local state opened"),
        }
        Ok(Opened { store, outcome })
    }

    /// The metadata of the stored state as of the last write (also [`StateStore::metadata`],
    /// here so callers holding a `RocksStore` need not import the trait).
    pub fn metadata(&self) -> Option<TaskMetadata> {
        self.meta
    }

    /// The database directory.
    pub fn path(&self) -> &Path {
        &self.paths.db
    }

    /// A RocksDB integer property (e.g. `rocksdb.estimate-num-keys`,
    /// `rocksdb.block-cache-usage`, `rocksdb.total-sst-files-size`) for metrics.
    pub fn int_property(&self, name: &str) -> Result<Option<u64>, StoreError> {
        let db = self.db("property")?;
        db.property_int_value(name)
            .map_err(|e| self.engine("property", e))
    }

    /// At most `limit` state entries from `from` on, in key order: a walk over a state too big
    /// to hold in memory, one page at a time (the next page starts after the last key).
    pub fn scan_page(&self, from: &[u8], limit: usize) -> Result<Vec<Entry>, StoreError> {
        let db = self.db("scan")?;
        db.iterator(IteratorMode::From(
            from.max(FIRST_STATE_KEY),
            Direction::Forward,
        ))
        .take(limit)
        .map(|item| {
            item.map(|(k, v)| (k.into_vec(), v.into_vec()))
                .map_err(|e| self.engine("scan", e))
        })
        .collect()
    }

    /// Flushes the memtables to SST files (e.g. before a clean shutdown).
    pub fn flush(&self) -> Result<(), StoreError> {
        let db = self.db("flush")?;
        db.flush().map_err(|e| self.engine("flush", e))
    }

    /// Replaces the whole local state with the RocksDB checkpoint in `dir` (moved, not
    /// copied: `dir` must be on the state volume) and reopens. Returns what the installed
    /// state holds. A crash in between leaves no database (reported as `Empty` on open),
    /// never a mix of old and new files.
    pub fn install_checkpoint(&mut self, dir: &Path) -> Result<OpenOutcome, StoreError> {
        self.db = None;
        self.meta = None;
        let io = |op, path: &Path| {
            let task = self.task;
            let path = path.to_path_buf();
            move |source| StoreError::Io {
                op,
                task,
                path,
                source,
            }
        };
        match fs::remove_dir_all(&self.paths.db) {
            Ok(()) => {}
            Err(e) if e.kind() == ErrorKind::NotFound => {}
            Err(e) => return Err(io("delete database directory", &self.paths.db)(e)),
        }
        fs::rename(dir, &self.paths.db).map_err(io("install checkpoint", dir))?;
        let outcome = self.open_engine()?;
        tracing::info!(task = self.task, outcome = ?outcome, "checkpoint installed as local state");
        Ok(outcome)
    }

    fn open_engine(&mut self) -> Result<OpenOutcome, StoreError> {
        let fresh = is_fresh(&self.paths.db).map_err(|source| StoreError::Io {
            op: "inspect database directory",
            task: self.task,
            path: self.paths.db.clone(),
            source,
        })?;
        let opts = db_options(&self.tuning, &self.cache, fresh);
        let db = match DB::open(&opts, &self.paths.db) {
            Ok(db) => db,
            Err(e) if is_lock_error(&e) => {
                return Err(StoreError::Locked {
                    task: self.task,
                    path: self.paths.db.join("LOCK"),
                });
            }
            Err(e) if fresh => return Err(self.engine("create", e)),
            Err(e) => {
                return Ok(OpenOutcome::Corrupt {
                    reason: format!("the database does not open: {e}"),
                });
            }
        };
        let outcome = inspect(&db, self.task);
        match &outcome {
            OpenOutcome::Valid(meta) | OpenOutcome::Interrupted(meta) => self.meta = Some(*meta),
            OpenOutcome::Empty => self.meta = None,
            // Closed until wiped: nothing may read or extend untrusted state.
            OpenOutcome::Corrupt { .. } => return Ok(outcome),
        }
        self.db = Some(db);
        Ok(outcome)
    }

    pub(super) fn db(&self, op: &'static str) -> Result<&DB, StoreError> {
        self.db.as_ref().ok_or_else(|| StoreError::InvalidState {
            op,
            task: self.task,
            path: self.paths.db.clone(),
            why: "the store was found corrupt and is closed until wiped",
        })
    }

    pub(super) fn engine(&self, op: &'static str, error: rocksdb::Error) -> StoreError {
        engine_error(op, self.task, &self.paths.db, error)
    }

    pub(super) fn invalid(&self, op: &'static str, why: &'static str) -> StoreError {
        StoreError::InvalidState {
            op,
            task: self.task,
            path: self.paths.db.clone(),
            why,
        }
    }

    fn reserved(&self, key: &[u8]) -> StoreError {
        StoreError::ReservedKey {
            task: self.task,
            key_hex: hex(key),
        }
    }
}

impl StateStore for RocksStore {
    fn task(&self) -> u32 {
        self.task
    }

    fn metadata(&self) -> Option<TaskMetadata> {
        RocksStore::metadata(self)
    }

    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        if is_reserved_key(key) {
            return Err(self.reserved(key));
        }
        let db = self.db("get")?;
        db.get(key).map_err(|e| self.engine("get", e))
    }

    fn scan(&self, from: &[u8], to: &[u8]) -> Result<Vec<Entry>, StoreError> {
        self.scan_limited(from, to, usize::MAX)
    }

    fn scan_limited(&self, from: &[u8], to: &[u8], limit: usize) -> Result<Vec<Entry>, StoreError> {
        // The reserved range (metadata) is never part of a scan.
        let from = from.max(FIRST_STATE_KEY);
        if from >= to || limit == 0 {
            return Ok(Vec::new());
        }
        let db = self.db("scan")?;
        let mut opts = ReadOptions::default();
        opts.set_iterate_upper_bound(to.to_vec());
        db.iterator_opt(IteratorMode::From(from, Direction::Forward), opts)
            .take(limit)
            .map(|item| {
                item.map(|(k, v)| (k.into_vec(), v.into_vec()))
                    .map_err(|e| self.engine("scan", e))
            })
            .collect()
    }

    fn commit(&mut self, changes: &ChangeSet, metadata: &TaskMetadata) -> Result<(), StoreError> {
        self.write_commit(changes, metadata)
    }

    fn restore_batch(
        &mut self,
        changes: &ChangeSet,
        metadata: &TaskMetadata,
    ) -> Result<(), StoreError> {
        self.write_restore_batch(changes, metadata)
    }

    fn finish_restore(&mut self) -> Result<TaskMetadata, StoreError> {
        self.write_finish_restore()
    }

    fn wipe(&mut self) -> Result<(), StoreError> {
        // Close first; the task lock stays held throughout.
        self.db = None;
        self.meta = None;
        match fs::remove_dir_all(&self.paths.db) {
            Ok(()) => {}
            Err(e) if e.kind() == ErrorKind::NotFound => {}
            Err(source) => {
                return Err(StoreError::Io {
                    op: "delete database directory",
                    task: self.task,
                    path: self.paths.db.clone(),
                    source,
                });
            }
        }
        let opts = db_options(&self.tuning, &self.cache, true);
        let db = DB::open(&opts, &self.paths.db).map_err(|e| self.engine("create", e))?;
        self.db = Some(db);
        tracing::info!(task = self.task, path = %self.paths.db.display(), "local state wiped");
        Ok(())
    }

    fn checkpoint(&self, dir: &Path) -> Result<CheckpointInfo, StoreError> {
        if self.restoring() {
            return Err(self.invalid("checkpoint", "a restore is unfinished"));
        }
        let db = self.db("checkpoint")?;
        Checkpoint::new(db)
            .and_then(|c| c.create_checkpoint(dir))
            .map_err(|e| self.engine("checkpoint", e))?;
        let files = list_files(dir).map_err(|source| StoreError::Io {
            op: "list checkpoint",
            task: self.task,
            path: dir.to_path_buf(),
            source,
        })?;
        Ok(CheckpointInfo {
            metadata: self.meta,
            files,
        })
    }

    fn live_files(&self) -> Result<Vec<StoreFile>, StoreError> {
        let db = self.db("live_files")?;
        let mut files: Vec<StoreFile> = db
            .live_files()
            .map_err(|e| self.engine("live_files", e))?
            .into_iter()
            .map(|f| StoreFile {
                name: f.name.trim_start_matches('/').to_owned(),
                size_bytes: u64::try_from(f.size).unwrap_or(u64::MAX),
            })
            .collect();
        files.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(files)
    }
}

/// The path of task `task`'s database below `state_dir` (for tools and tests).
pub fn db_path(state_dir: &Path, task: u32) -> PathBuf {
    TaskPaths::new(state_dir, task).db
}

#[cfg(test)]
#[path = "store_tests.rs"]
mod tests;
