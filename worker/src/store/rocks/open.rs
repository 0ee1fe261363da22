//! The RocksDB glue under [`super::RocksStore`]: a task's paths, the task-directory lock, the
//! engine options derived from [`RocksDbTuning`], the mapping of engine errors, and the
//! inspection that classifies what an opened directory holds.
//!
//! This module decides *whether* local state can be trusted; it never deletes anything.

use std::fs::{self, File, OpenOptions, TryLockError};
use std::io::ErrorKind;
use std::path::{Path, PathBuf};

use rocksdb::{
    BlockBasedOptions, Cache, DB, DBCompressionType, DBRecoveryMode, Direction, IteratorMode,
    Options,
};
use streamkeeper_contract::worker_config::{Compression, RocksDbTuning};

use crate::store::api::{OpenOutcome, StoreFile};
use crate::store::error::StoreError;
use crate::store::metadata::{FIRST_STATE_KEY, METADATA_KEY, TaskMetadata};

/// The files of one task below the state directory.
#[derive(Debug, Clone)]
pub(super) struct TaskPaths {
    /// `<state dir>/task-<i>`: everything of the task lives below it.
    pub task_dir: PathBuf,
    /// `<task dir>/db`: the RocksDB instance, deleted as a whole by a wipe.
    pub db: PathBuf,
    /// `<task dir>/owner.lock`: held for the store's lifetime, wipes included.
    pub lock: PathBuf,
}

impl TaskPaths {
    pub fn new(state_dir: &Path, task: u32) -> Self {
        let task_dir = state_dir.join(format!("task-{task}"));
        Self {
            db: task_dir.join("db"),
            lock: task_dir.join("owner.lock"),
            task_dir,
        }
    }
}

/// An LRU block cache that several tasks' stores can share, so a worker's cache memory is
/// bounded by one `blockCacheBytes` however many tasks it hosts.
#[derive(Clone)]
pub struct BlockCache(pub(super) Cache);

impl BlockCache {
    /// A cache of `bytes` capacity.
    pub fn new(bytes: u64) -> Self {
        Self(Cache::new_lru_cache(saturating_usize(bytes)))
    }
}

impl std::fmt::Debug for BlockCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("BlockCache")
            .field(&self.0.get_usage())
            .finish()
    }
}

fn saturating_usize(bytes: u64) -> usize {
    usize::try_from(bytes).unwrap_or(usize::MAX)
}

/// Takes the task directory's lock (creating the directory), held as long as the file is.
///
/// RocksDB's own `LOCK` file also refuses a second open, but only while the database is
/// open; this lock also covers a store that is closed because it was found corrupt, and the
/// delete-and-recreate of a wipe.
pub(super) fn lock_task_dir(paths: &TaskPaths, task: u32) -> Result<File, StoreError> {
    let io = |op, path: &Path| {
        let path = path.to_path_buf();
        move |source| StoreError::Io {
            op,
            task,
            path,
            source,
        }
    };
    fs::create_dir_all(&paths.task_dir).map_err(io("create task directory", &paths.task_dir))?;
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&paths.lock)
        .map_err(io("open task lock file", &paths.lock))?;
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(TryLockError::WouldBlock) => Err(StoreError::Locked {
            task,
            path: paths.lock.clone(),
        }),
        Err(TryLockError::Error(source)) => Err(io("lock task directory", &paths.lock)(source)),
    }
}

/// True when `db` holds nothing yet: it does not exist or is an empty directory. Only then
/// may the engine create a database; anything else must open as it is (a missing `CURRENT`
/// next to other files is damage, not a fresh start).
pub(super) fn is_fresh(db: &Path) -> std::io::Result<bool> {
    match fs::read_dir(db) {
        Ok(mut entries) => Ok(entries.next().is_none()),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(true),
        Err(e) => Err(e),
    }
}

/// Engine options from the tuning. `create` only for a fresh directory.
pub(super) fn db_options(tuning: &RocksDbTuning, cache: &BlockCache, create: bool) -> Options {
    let mut table = BlockBasedOptions::default();
    table.set_block_cache(&cache.0);
    // Index and filter blocks are charged to the cache, so it bounds the read memory.
    table.set_cache_index_and_filter_blocks(true);
    table.set_bloom_filter(10.0, false);

    let mut opts = Options::default();
    opts.create_if_missing(create);
    opts.set_paranoid_checks(true);
    // A torn tail of the (unsynced) WAL after a power loss recovers to the last complete
    // write: the state is then an older but consistent prefix, which the changelog replay
    // completes. Refusing to open would only force a full rebuild.
    opts.set_wal_recovery_mode(DBRecoveryMode::PointInTime);
    opts.set_write_buffer_size(saturating_usize(tuning.write_buffer_bytes));
    opts.set_compression_type(match tuning.compression {
        Compression::None => DBCompressionType::None,
        Compression::Lz4 => DBCompressionType::Lz4,
        Compression::Zstd => DBCompressionType::Zstd,
    });
    opts.set_block_based_table_factory(&table);
    opts.set_keep_log_file_num(4);
    opts.set_max_log_file_size(8 << 20);
    opts
}

/// True when the engine refused to open because another owner holds its `LOCK` file: in
/// another process ("While lock file") or in this one ("lock hold by current process").
pub(super) fn is_lock_error(error: &rocksdb::Error) -> bool {
    let message = error.as_ref();
    message.contains("While lock file") || message.contains("lock hold by current process")
}

/// What an opened database holds, judged from its metadata key and whether state keys exist.
/// An engine error while reading (a damaged block) also means the state cannot be trusted.
pub(super) fn inspect(db: &DB, task: u32) -> OpenOutcome {
    let corrupt = |reason: String| OpenOutcome::Corrupt { reason };
    let raw = match db.get(METADATA_KEY) {
        Ok(raw) => raw,
        Err(e) => return corrupt(format!("reading the task metadata failed: {e}")),
    };
    let Some(raw) = raw else {
        let mut first = db.iterator(IteratorMode::From(FIRST_STATE_KEY, Direction::Forward));
        return match first.next() {
            None => OpenOutcome::Empty,
            Some(Ok(_)) => corrupt("state keys exist but the task metadata is missing".into()),
            Some(Err(e)) => corrupt(format!("reading the state failed: {e}")),
        };
    };
    match TaskMetadata::decode(&raw) {
        Err(e) => corrupt(format!("the task metadata is unreadable: {e}")),
        Ok(meta) if meta.task != task => corrupt(format!(
            "the metadata belongs to task {}, not task {task}",
            meta.task
        )),
        Ok(meta) if meta.restoring => OpenOutcome::Interrupted(meta),
        Ok(meta) => OpenOutcome::Valid(meta),
    }
}

/// A typed error for an engine failure; damage the engine detected becomes
/// [`StoreError::Corruption`] so the caller knows to wipe and rebuild.
pub(super) fn engine_error(
    op: &'static str,
    task: u32,
    path: &Path,
    error: rocksdb::Error,
) -> StoreError {
    let path = path.to_path_buf();
    if error.kind() == rocksdb::ErrorKind::Corruption {
        StoreError::Corruption {
            op,
            task,
            path,
            source: error.into(),
        }
    } else {
        StoreError::Engine {
            op,
            task,
            path,
            source: error.into(),
        }
    }
}

/// The regular files directly in `dir`, sorted by name.
pub(super) fn list_files(dir: &Path) -> std::io::Result<Vec<StoreFile>> {
    let mut files = Vec::new();
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        let meta = entry.metadata()?;
        if meta.is_file() {
            files.push(StoreFile {
                name: entry.file_name().to_string_lossy().into_owned(),
                size_bytes: meta.len(),
            });
        }
    }
    files.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(files)
}

#[cfg(test)]
#[path = "open_tests.rs"]
mod tests;
