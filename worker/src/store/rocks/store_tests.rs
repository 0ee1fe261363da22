//! RocksStore against the real RocksDB: commits and metadata across reopen, pages, rejected
//! commits, wipes, restores, checkpoints.

use std::fs;

use tempfile::tempdir;

use crate::store::test_support::{bytes, changes, meta, open, open_empty, tuning};
use crate::store::{OpenOutcome, RocksStore, StateStore, StoreError};

#[test]
fn a_fresh_store_is_empty_and_lives_in_its_task_directory() {
    let dir = tempdir().unwrap();
    let store = open_empty(dir.path(), 4);
    assert_eq!(store.path(), dir.path().join("task-4/db"));
    assert!(store.path().join("CURRENT").is_file());
    assert_eq!(store.metadata(), None);
    assert_eq!(store.scan(b"", &[0xff]).unwrap(), vec![]);
}

#[test]
fn commit_applies_changes_and_metadata_together_across_reopen() {
    let dir = tempdir().unwrap();
    let mut store = open_empty(dir.path(), 1);
    let first = meta(1, 10, 3);
    store
        .commit(
            &changes(&[("ca", Some("1")), ("cb", Some("1")), ("cc", Some("1"))]),
            &first,
        )
        .unwrap();
    let second = meta(1, 20, 6);
    store
        .commit(
            &changes(&[("cb", Some("2")), ("cc", None), ("cd", Some("2"))]),
            &second,
        )
        .unwrap();
    assert_eq!(store.metadata(), Some(second));
    drop(store);

    let reopened = open(dir.path(), 1);
    assert_eq!(reopened.outcome, OpenOutcome::Valid(second));
    let store = reopened.store;
    assert_eq!(store.metadata(), Some(second));
    assert_eq!(
        store.scan(b"", &[0xff]).unwrap(),
        vec![
            (bytes("ca"), bytes("1")),
            (bytes("cb"), bytes("2")),
            (bytes("cd"), bytes("2"))
        ],
        "the metadata key never shows in a scan, deletes are applied"
    );
    assert_eq!(store.get(b"cc").unwrap(), None);
    assert_eq!(
        store.scan(b"cb", b"cd").unwrap(),
        vec![(bytes("cb"), bytes("2"))]
    );
    assert_eq!(store.scan(b"cd", b"cb").unwrap(), vec![], "inverted range");
}

#[test]
fn pages_walk_the_whole_state_once_in_key_order() {
    let dir = tempdir().unwrap();
    let mut store = open_empty(dir.path(), 1);
    let keys: Vec<String> = (0..7).map(|n| format!("k{n}")).collect();
    let puts: Vec<(&str, Option<&str>)> = keys.iter().map(|k| (k.as_str(), Some("v"))).collect();
    store.commit(&changes(&puts), &meta(1, 7, 7)).unwrap();

    let mut seen = Vec::new();
    let mut from = Vec::new();
    loop {
        let page = store.scan_page(&from, 3).unwrap();
        assert!(page.len() <= 3);
        let Some((last, _)) = page.last() else { break };
        from = [last.as_slice(), &[0]].concat();
        seen.extend(page.into_iter().map(|(k, _)| String::from_utf8(k).unwrap()));
    }
    assert_eq!(seen, keys, "every key once, the metadata key never");
}

#[test]
fn a_rejected_commit_writes_nothing() {
    let dir = tempdir().unwrap();
    let mut store = open_empty(dir.path(), 2);
    let good = meta(2, 5, 5);
    store.commit(&changes(&[("ca", Some("1"))]), &good).unwrap();

    let mut reserved = changes(&[("cb", Some("1"))]);
    reserved.put(b"\x00sneaky", b"x".to_vec());
    let error = store.commit(&reserved, &meta(2, 6, 6)).unwrap_err();
    assert_eq!(error.category(), "state_reserved_key");
    let error = store
        .commit(&changes(&[("cb", Some("1"))]), &meta(3, 6, 6))
        .unwrap_err();
    assert!(matches!(
        error,
        StoreError::TaskMismatch { task: 2, found: 3 }
    ));
    let error = store
        .commit(&changes(&[("", Some("1"))]), &meta(2, 6, 6))
        .unwrap_err();
    assert_eq!(
        error.category(),
        "state_reserved_key",
        "the empty key is reserved"
    );
    assert!(matches!(
        store.get(b"\x00streamkeeper.task-metadata"),
        Err(StoreError::ReservedKey { .. })
    ));

    assert_eq!(store.get(b"cb").unwrap(), None);
    drop(store);
    assert_eq!(open(dir.path(), 2).outcome, OpenOutcome::Valid(good));
}

#[test]
fn a_wiped_store_is_open_empty_and_still_locked() {
    let dir = tempdir().unwrap();
    let mut store = open_empty(dir.path(), 0);
    store
        .commit(&changes(&[("ca", Some("1"))]), &meta(0, 1, 1))
        .unwrap();
    store.wipe().unwrap();
    assert_eq!(store.metadata(), None);
    assert_eq!(store.get(b"ca").unwrap(), None);
    assert!(matches!(
        RocksStore::open(dir.path(), 0, &tuning()),
        Err(StoreError::Locked { .. })
    ));
    store
        .commit(&changes(&[("cb", Some("1"))]), &meta(0, 2, 2))
        .unwrap();
    drop(store);
    let reopened = open(dir.path(), 0);
    assert_eq!(reopened.outcome, OpenOutcome::Valid(meta(0, 2, 2)));
    assert_eq!(reopened.store.get(b"ca").unwrap(), None);
}

#[test]
fn restore_batches_become_valid_only_after_finish() {
    let dir = tempdir().unwrap();
    let mut store = open_empty(dir.path(), 3);
    store
        .restore_batch(
            &changes(&[("ca", Some("1")), ("cb", Some("1"))]),
            &meta(3, 0, 100),
        )
        .unwrap();
    store
        .restore_batch(
            &changes(&[("cb", None), ("cc", Some("2"))]),
            &meta(3, 0, 200),
        )
        .unwrap();
    let during = store.metadata().unwrap();
    assert!(during.restoring, "the stored metadata is marked restoring");
    assert_eq!(during.next_changelog_offset, 200);

    // Nothing else may write or copy the state while it is restoring.
    let refused = store.commit(&changes(&[]), &meta(3, 1, 200)).unwrap_err();
    assert_eq!(refused.category(), "state_invalid_call");
    assert!(store.checkpoint(&dir.path().join("cp")).is_err());

    let done = store.finish_restore().unwrap();
    assert_eq!(done, meta(3, 0, 200));
    assert!(
        store.finish_restore().is_err(),
        "no restore in progress any more"
    );
    drop(store);

    let reopened = open(dir.path(), 3);
    assert_eq!(reopened.outcome, OpenOutcome::Valid(done));
    assert_eq!(
        reopened.store.scan(b"c", b"d").unwrap(),
        vec![(bytes("ca"), bytes("1")), (bytes("cc"), bytes("2"))]
    );
}

#[test]
fn an_unfinished_restore_reopens_interrupted_and_can_resume() {
    let dir = tempdir().unwrap();
    let mut store = open_empty(dir.path(), 0);
    store
        .commit(&changes(&[("ca", Some("0"))]), &meta(0, 7, 10))
        .unwrap();
    store
        .restore_batch(&changes(&[("ca", Some("1"))]), &meta(0, 7, 20))
        .unwrap();
    store
        .restore_batch(&changes(&[("cb", Some("1"))]), &meta(0, 7, 30))
        .unwrap();
    drop(store); // no finish_restore

    let reopened = open(dir.path(), 0);
    let OpenOutcome::Interrupted(found) = reopened.outcome else {
        panic!(
            "an unfinished restore must not open as {:?}",
            reopened.outcome
        );
    };
    assert!(found.restoring);
    assert_eq!(found.next_changelog_offset, 30);
    let mut store = reopened.store;
    assert!(store.commit(&changes(&[]), &meta(0, 8, 30)).is_err());

    store
        .restore_batch(&changes(&[("cc", Some("1"))]), &meta(0, 7, 40))
        .unwrap();
    assert_eq!(store.finish_restore().unwrap(), meta(0, 7, 40));
    drop(store);
    let reopened = open(dir.path(), 0);
    assert_eq!(reopened.outcome, OpenOutcome::Valid(meta(0, 7, 40)));
    assert_eq!(reopened.store.scan(b"", &[0xff]).unwrap().len(), 3);
}

#[test]
fn a_checkpoint_opens_as_a_valid_store_with_the_same_state() {
    let dir = tempdir().unwrap();
    let mut store = open_empty(dir.path(), 5);
    let m = meta(5, 42, 17);
    store
        .commit(&changes(&[("ca", Some("1")), ("cb", Some("2"))]), &m)
        .unwrap();
    store.flush().unwrap();
    let live = store.live_files().unwrap();
    assert!(
        !live.is_empty()
            && live
                .iter()
                .all(|f| f.name.ends_with(".sst") && f.size_bytes > 0)
    );

    let target = tempdir().unwrap();
    let cp = target.path().join("task-5/db");
    fs::create_dir_all(cp.parent().unwrap()).unwrap();
    let info = store.checkpoint(&cp).unwrap();
    assert_eq!(info.metadata, Some(m));
    let names: Vec<&str> = info.files.iter().map(|f| f.name.as_str()).collect();
    assert!(names.contains(&"CURRENT"), "{names:?}");
    assert!(
        names.iter().any(|n| n.starts_with("MANIFEST-")),
        "{names:?}"
    );
    for file in &live {
        assert!(
            names.contains(&file.name.as_str()),
            "live SST {} in checkpoint",
            file.name
        );
    }
    // Writes after the checkpoint do not leak into it.
    store
        .commit(&changes(&[("ca", None)]), &meta(5, 43, 18))
        .unwrap();

    let restored = open(target.path(), 5);
    assert_eq!(restored.outcome, OpenOutcome::Valid(m));
    assert_eq!(restored.store.get(b"ca").unwrap(), Some(bytes("1")));
    assert_eq!(store.get(b"ca").unwrap(), None);
}
