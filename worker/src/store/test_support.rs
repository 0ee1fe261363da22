//! Helpers shared by the store's tests: opening stores in temporary directories and
//! building change sets and metadata tersely.

use std::path::Path;

use streamkeeper_contract::worker_config::RocksDbTuning;

use super::{ChangeSet, OpenOutcome, Opened, RocksStore, TaskMetadata};

/// Small buffers so tests stay light; compression as in production.
pub fn tuning() -> RocksDbTuning {
    RocksDbTuning {
        block_cache_bytes: 8 << 20,
        write_buffer_bytes: 4 << 20,
        ..RocksDbTuning::default()
    }
}

pub fn open(dir: &Path, task: u32) -> Opened {
    RocksStore::open(dir, task, &tuning()).unwrap()
}

/// Opens a store that must be fresh.
pub fn open_empty(dir: &Path, task: u32) -> RocksStore {
    let opened = open(dir, task);
    assert_eq!(opened.outcome, OpenOutcome::Empty);
    opened.store
}

/// `(key, Some(value))` puts, `(key, None)` deletes.
pub fn changes(items: &[(&str, Option<&str>)]) -> ChangeSet {
    items
        .iter()
        .map(|(k, v)| (k.as_bytes().to_vec(), v.map(|v| v.as_bytes().to_vec())))
        .collect()
}

pub fn meta(task: u32, input: i64, changelog: i64) -> TaskMetadata {
    TaskMetadata {
        task,
        next_input_offset: input,
        next_changelog_offset: changelog,
        newest_changelog_timestamp_ms: Some(1_000 + changelog),
        restoring: false,
    }
}

pub fn bytes(s: &str) -> Vec<u8> {
    s.as_bytes().to_vec()
}
