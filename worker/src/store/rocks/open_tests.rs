//! Opening a task's store: damaged local state is reported as `Corrupt` (never a panic, never
//! silently `Empty` or `Valid`), the store stays closed until wiped, and a wipe makes it usable
//! again; a store another owner holds is `Locked`; the tuning reaches the engine.

use std::fs::{self, OpenOptions};
use std::path::{Path, PathBuf};

use rocksdb::DB;
use streamkeeper_contract::worker_config::{Compression, RocksDbTuning};
use tempfile::tempdir;

use crate::store::metadata::METADATA_KEY;
use crate::store::test_support::{changes, meta, open, open_empty, tuning};
use crate::store::{
    BlockCache, OpenOutcome, RocksStore, StateStore, StoreError, TaskMetadata, db_path,
};

/// A closed store with flushed data (SST files, a MANIFEST) for task 0.
fn populated(dir: &Path) -> PathBuf {
    let mut store = open_empty(dir, 0);
    for i in 0..5i64 {
        let key = format!("c{i}");
        store
            .commit(
                &changes(&[(key.as_str(), Some("v"))]),
                &meta(0, i + 1, i + 1),
            )
            .unwrap();
    }
    store.flush().unwrap();
    store.path().to_path_buf()
}

fn files_named(db: &Path, pred: impl Fn(&str) -> bool) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = fs::read_dir(db)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| pred(&p.file_name().unwrap().to_string_lossy()))
        .collect();
    found.sort();
    assert!(!found.is_empty(), "no matching file in {}", db.display());
    found
}

fn truncate_to_half(path: &Path) {
    let len = fs::metadata(path).unwrap().len();
    OpenOptions::new()
        .write(true)
        .open(path)
        .unwrap()
        .set_len(len / 2)
        .unwrap();
}

/// Opens, expects `Corrupt`, checks the store is closed, wipes, checks it works again.
fn assert_corrupt_then_wipe(dir: &Path, what: &str) -> String {
    let opened = open(dir, 0);
    let OpenOutcome::Corrupt { reason } = opened.outcome else {
        panic!("{what}: expected Corrupt, got {:?}", opened.outcome);
    };
    let mut store = opened.store;
    let closed = store.get(b"c1").unwrap_err();
    assert_eq!(
        closed.category(),
        "state_invalid_call",
        "{what}: closed until wiped"
    );
    assert!(store.commit(&changes(&[]), &meta(0, 9, 9)).is_err());

    store.wipe().unwrap();
    assert_eq!(store.scan(b"", &[0xff]).unwrap(), vec![], "{what}: wiped");
    store
        .commit(&changes(&[("c1", Some("new"))]), &meta(0, 1, 1))
        .unwrap();
    drop(store);
    assert_eq!(
        open(dir, 0).outcome,
        OpenOutcome::Valid(meta(0, 1, 1)),
        "{what}"
    );
    reason
}

#[test]
fn a_deleted_sst_is_corrupt() {
    let dir = tempdir().unwrap();
    let db = populated(dir.path());
    for sst in files_named(&db, |n| n.ends_with(".sst")) {
        fs::remove_file(sst).unwrap();
    }
    assert_corrupt_then_wipe(dir.path(), "deleted SST");
}

#[test]
fn a_truncated_sst_is_corrupt() {
    let dir = tempdir().unwrap();
    let db = populated(dir.path());
    truncate_to_half(&files_named(&db, |n| n.ends_with(".sst"))[0]);
    assert_corrupt_then_wipe(dir.path(), "truncated SST");
}

#[test]
fn a_deleted_manifest_is_corrupt() {
    let dir = tempdir().unwrap();
    let db = populated(dir.path());
    for manifest in files_named(&db, |n| n.starts_with("MANIFEST-")) {
        fs::remove_file(manifest).unwrap();
    }
    assert_corrupt_then_wipe(dir.path(), "deleted MANIFEST");
}

#[test]
fn a_truncated_manifest_is_corrupt() {
    let dir = tempdir().unwrap();
    let db = populated(dir.path());
    for manifest in files_named(&db, |n| n.starts_with("MANIFEST-")) {
        OpenOptions::new()
            .write(true)
            .open(manifest)
            .unwrap()
            .set_len(0)
            .unwrap();
    }
    assert_corrupt_then_wipe(dir.path(), "truncated MANIFEST");
}

#[test]
fn a_deleted_current_is_corrupt_not_a_fresh_database() {
    let dir = tempdir().unwrap();
    let db = populated(dir.path());
    fs::remove_file(db.join("CURRENT")).unwrap();
    assert_corrupt_then_wipe(dir.path(), "deleted CURRENT");
}

#[test]
fn a_truncated_current_is_corrupt() {
    let dir = tempdir().unwrap();
    let db = populated(dir.path());
    truncate_to_half(&db.join("CURRENT"));
    assert_corrupt_then_wipe(dir.path(), "truncated CURRENT");
}

#[test]
fn state_without_metadata_is_corrupt() {
    let dir = tempdir().unwrap();
    {
        let raw = DB::open_default(db_path(dir.path(), 0)).unwrap();
        raw.put(b"cfoo", b"1").unwrap();
    }
    let reason = assert_corrupt_then_wipe(dir.path(), "data without metadata");
    assert!(reason.contains("metadata is missing"), "{reason}");
}

#[test]
fn unreadable_or_foreign_metadata_is_corrupt() {
    let cases: [(&str, Vec<u8>); 3] = [
        ("unknown version", {
            let mut raw = TaskMetadata::initial(0).encode();
            raw[0] = 99;
            raw
        }),
        ("wrong length", b"\x01not metadata".to_vec()),
        ("another task's", TaskMetadata::initial(7).encode()),
    ];
    for (what, value) in cases {
        let dir = tempdir().unwrap();
        {
            let raw = DB::open_default(db_path(dir.path(), 0)).unwrap();
            raw.put(METADATA_KEY, value).unwrap();
        }
        let reason = assert_corrupt_then_wipe(dir.path(), what);
        assert!(reason.contains("metadata"), "{what}: {reason}");
    }
}

#[test]
fn a_database_that_never_committed_is_empty() {
    let dir = tempdir().unwrap();
    drop(DB::open_default(db_path(dir.path(), 0)).unwrap());
    let opened = RocksStore::open(dir.path(), 0, &tuning()).unwrap();
    assert_eq!(opened.outcome, OpenOutcome::Empty);
}

#[test]
fn a_second_open_of_the_same_task_is_locked() {
    let dir = tempdir().unwrap();
    let _first = open_empty(dir.path(), 0);
    let error = RocksStore::open(dir.path(), 0, &tuning()).unwrap_err();
    let StoreError::Locked { task, path } = &error else {
        panic!("expected Locked, got {error:?}");
    };
    assert_eq!(*task, 0);
    assert_eq!(path, &dir.path().join("task-0/owner.lock"));
    assert!(
        error.to_string().contains("locked by another owner"),
        "{error}"
    );
    // Other tasks are independent.
    let _other = open_empty(dir.path(), 1);
}

#[test]
fn rocksdbs_own_lock_is_reported_as_locked() {
    // Someone opened the database directly (not through a store): only RocksDB's LOCK
    // file stands in the way, and its refusal must still come out typed.
    let dir = tempdir().unwrap();
    drop(open_empty(dir.path(), 0));
    let _raw = DB::open_default(db_path(dir.path(), 0)).unwrap();
    let error = RocksStore::open(dir.path(), 0, &tuning()).unwrap_err();
    let StoreError::Locked { path, .. } = &error else {
        panic!("expected Locked, got {error:?}");
    };
    assert_eq!(path, &db_path(dir.path(), 0).join("LOCK"));
}

#[test]
fn tuning_reaches_the_engine() {
    let dir = tempdir().unwrap();
    let tuning = RocksDbTuning {
        block_cache_bytes: 16 << 20,
        write_buffer_bytes: 3 << 20,
        compression: Compression::Zstd,
    };
    let opened = RocksStore::open(dir.path(), 0, &tuning).unwrap();
    let options = fs::read_dir(opened.store.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("OPTIONS-")
        })
        .expect("RocksDB writes its options file");
    let text = fs::read_to_string(options).unwrap();
    assert!(
        text.contains(&format!("write_buffer_size={}", 3 << 20)),
        "write buffer"
    );
    assert!(text.contains("compression=kZSTD"), "compression");
    assert!(
        text.contains("wal_recovery_mode=kPointInTimeRecovery"),
        "recovery mode"
    );
    let capacity = |store: &RocksStore| store.int_property("rocksdb.block-cache-capacity").unwrap();
    assert_eq!(capacity(&opened.store), Some(16 << 20), "block cache");

    // A shared cache bounds several tasks together.
    let shared = BlockCache::new(5 << 20);
    let a = RocksStore::open_with_cache(dir.path(), 1, &tuning, &shared).unwrap();
    let b = RocksStore::open_with_cache(dir.path(), 2, &tuning, &shared).unwrap();
    assert_eq!(capacity(&a.store), Some(5 << 20));
    assert_eq!(capacity(&b.store), Some(5 << 20));
}
