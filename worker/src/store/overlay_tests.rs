//! The overlay: merging changes into a scan; over a real RocksStore, read-your-writes, scan
//! merging, commit and abort, and a model check against a plain `BTreeMap` for random operation
//! sequences; and the built-in processors run through it, a transaction at a time, with the
//! changelog those transactions wrote replayed into a fresh store, ending in the state memory
//! ends in.

use std::collections::BTreeMap;

use proptest::prelude::*;
use tempfile::tempdir;

use super::*;
use crate::processor::test_support::{CONFIGS, Outcome, pipeline, raw_record, run};
use crate::processor::{MemoryState, Pipeline};
use crate::store::RocksStore;
use crate::store::test_support::{bytes, changes, meta, open_empty};

fn entries(pairs: &[(&str, &str)]) -> Vec<Entry> {
    pairs
        .iter()
        .map(|(k, v)| (k.as_bytes().to_vec(), v.as_bytes().to_vec()))
        .collect()
}

#[test]
fn merge_replaces_hides_and_interleaves() {
    let base = entries(&[("a", "1"), ("c", "1"), ("e", "1"), ("g", "1")]);
    let mut changes = ChangeSet::new();
    changes.put(b"b", b"2".to_vec()); // new key between base keys
    changes.put(b"c", b"2".to_vec()); // replaces
    changes.delete(b"e"); // hides
    changes.delete(b"f"); // deleting an absent key shows nothing
    changes.put(b"h", b"2".to_vec()); // after every base key
    let merged = merge(base, changes.iter());
    assert_eq!(
        merged,
        entries(&[("a", "1"), ("b", "2"), ("c", "2"), ("g", "1"), ("h", "2")])
    );
}

#[test]
fn merge_of_nothing_is_nothing() {
    assert!(merge(Vec::new(), ChangeSet::new().iter()).is_empty());
    let mut only_deletes = ChangeSet::new();
    only_deletes.delete(b"a");
    assert!(merge(Vec::new(), only_deletes.iter()).is_empty());
}

#[test]
fn processors_read_their_own_writes_before_the_store() {
    let dir = tempdir().unwrap();
    let mut store = open_empty(dir.path(), 0);
    store
        .commit(
            &changes(&[("ca", Some("1")), ("cb", Some("1")), ("cc", Some("1"))]),
            &meta(0, 1, 1),
        )
        .unwrap();

    let mut overlay = Overlay::new(&store);
    overlay.put(b"cb", bytes("2")).unwrap();
    overlay.delete(b"cc").unwrap();
    overlay.put(b"cd", bytes("2")).unwrap();
    overlay.put(b"cd", bytes("3")).unwrap();

    assert_eq!(
        overlay.get(b"ca").unwrap(),
        Some(bytes("1")),
        "from the store"
    );
    assert_eq!(
        overlay.get(b"cb").unwrap(),
        Some(bytes("2")),
        "own write wins"
    );
    assert_eq!(
        overlay.get(b"cc").unwrap(),
        None,
        "own delete hides the store"
    );
    assert_eq!(
        overlay.scan(b"c", b"d").unwrap(),
        vec![
            (bytes("ca"), bytes("1")),
            (bytes("cb"), bytes("2")),
            (bytes("cd"), bytes("3"))
        ]
    );
    assert_eq!(
        overlay.scan(b"cb", b"cd").unwrap(),
        vec![(bytes("cb"), bytes("2"))]
    );
    // One change per key, last write wins: what the changelog will carry.
    let produced: Vec<_> = overlay.changes().iter().collect();
    assert_eq!(
        produced,
        vec![
            (&b"cb"[..], Some(&b"2"[..])),
            (&b"cc"[..], None),
            (&b"cd"[..], Some(&b"3"[..]))
        ]
    );
    assert_eq!(
        store.get(b"cb").unwrap(),
        Some(bytes("1")),
        "nothing reaches the store"
    );

    let committed = overlay.into_changes();
    store.commit(&committed, &meta(0, 2, 4)).unwrap();
    assert_eq!(store.scan(b"c", b"d").unwrap().len(), 3);
    assert_eq!(store.get(b"cc").unwrap(), None);
}

#[test]
fn clear_discards_an_aborted_transaction() {
    let dir = tempdir().unwrap();
    let mut store = open_empty(dir.path(), 0);
    store
        .commit(&changes(&[("ca", Some("1"))]), &meta(0, 1, 1))
        .unwrap();
    let mut overlay = Overlay::new(&store);
    overlay.put(b"ca", bytes("2")).unwrap();
    overlay.delete(b"ca").unwrap();
    overlay.clear();
    assert!(overlay.changes().is_empty());
    assert_eq!(overlay.get(b"ca").unwrap(), Some(bytes("1")));
}

#[test]
fn undo_takes_back_only_the_writes_of_this_overlay() {
    let dir = tempdir().unwrap();
    let mut store = open_empty(dir.path(), 0);
    store
        .commit(&changes(&[("ca", Some("1"))]), &meta(0, 1, 1))
        .unwrap();
    // Earlier records of the transaction changed cb and cc.
    let earlier = changes(&[("cb", Some("1")), ("cc", None)]);
    let mut overlay = Overlay::with_changes(&store, earlier.clone());
    overlay.put(b"ca", bytes("2")).unwrap();
    overlay.put(b"cb", bytes("2")).unwrap();
    overlay.put(b"cb", bytes("3")).unwrap();
    overlay.put(b"cd", bytes("1")).unwrap();
    let written: Vec<_> = overlay.written().collect();
    assert_eq!(
        written,
        vec![
            (&b"ca"[..], Some(&b"2"[..])),
            (&b"cb"[..], Some(&b"3"[..])),
            (&b"cd"[..], Some(&b"1"[..]))
        ]
    );
    overlay.undo();
    assert_eq!(
        overlay.changes(),
        &earlier,
        "the earlier records' changes stay"
    );
    assert_eq!(overlay.get(b"ca").unwrap(), Some(bytes("1")));
    assert_eq!(overlay.written().count(), 0);
}

#[test]
fn reserved_keys_are_refused_and_never_scanned() {
    let dir = tempdir().unwrap();
    let mut store = open_empty(dir.path(), 0);
    store
        .commit(&changes(&[("ca", Some("1"))]), &meta(0, 1, 1))
        .unwrap();
    let mut overlay = Overlay::new(&store);
    let error = overlay.put(b"\x00x", bytes("1")).unwrap_err();
    assert!(error.to_string().contains("put"), "{error}");
    assert!(overlay.delete(b"").is_err());
    assert!(overlay.get(b"\x00streamkeeper.task-metadata").is_err());
    assert_eq!(
        overlay.scan(b"", &[0xff]).unwrap(),
        vec![(bytes("ca"), bytes("1"))]
    );
}

#[derive(Debug, Clone)]
enum Op {
    Put(Vec<u8>, Vec<u8>),
    Delete(Vec<u8>),
    Get(Vec<u8>),
    Scan(Vec<u8>, Vec<u8>),
    Commit,
    Abort,
}

/// Short keys over a few bytes, including the edges of the state range.
fn key() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(
        prop::sample::select(vec![0x01u8, b'a', b'b', b'c', 0xff]),
        1..4,
    )
}

fn bound() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(
        prop::sample::select(vec![0x00u8, 0x01, b'a', b'b', b'c', 0xff]),
        0..4,
    )
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (key(), prop::collection::vec(any::<u8>(), 0..3)).prop_map(|(k, v)| Op::Put(k, v)),
        2 => key().prop_map(Op::Delete),
        2 => key().prop_map(Op::Get),
        3 => (bound(), bound()).prop_map(|(a, b)| Op::Scan(a, b)),
        1 => Just(Op::Commit),
        1 => Just(Op::Abort),
    ]
}

fn model_scan(
    model: &BTreeMap<Vec<u8>, Vec<u8>>,
    from: &[u8],
    to: &[u8],
) -> Vec<(Vec<u8>, Vec<u8>)> {
    model
        .iter()
        .filter(|(k, _)| from <= k.as_slice() && k.as_slice() < to)
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn overlay_over_rocksdb_behaves_like_a_map(ops in prop::collection::vec(op(), 1..60)) {
        let dir = tempdir().unwrap();
        let mut store = open_empty(dir.path(), 0);
        let mut committed: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
        let mut current = committed.clone();
        let mut pending = ChangeSet::new();
        let mut commits = 0i64;

        for op in ops {
            let mut overlay = Overlay::with_changes(&store, std::mem::take(&mut pending));
            match op {
                Op::Put(k, v) => {
                    overlay.put(&k, v.clone()).unwrap();
                    current.insert(k, v);
                }
                Op::Delete(k) => {
                    overlay.delete(&k).unwrap();
                    current.remove(&k);
                }
                Op::Get(k) => prop_assert_eq!(overlay.get(&k).unwrap(), current.get(&k).cloned()),
                Op::Scan(a, b) => {
                    prop_assert_eq!(overlay.scan(&a, &b).unwrap(), model_scan(&current, &a, &b));
                }
                Op::Abort => {
                    overlay.clear();
                    current = committed.clone();
                }
                Op::Commit => {
                    let changes = overlay.into_changes();
                    commits += 1;
                    store.commit(&changes, &meta(0, commits, commits)).unwrap();
                    committed = current.clone();
                    prop_assert_eq!(store.scan(b"", &[0xff, 0xff, 0xff, 0xff]).unwrap(), model_scan(&committed, b"", &[0xff, 0xff, 0xff, 0xff]));
                    continue;
                }
            }
            pending = overlay.into_changes();
        }
    }
}

#[test]
fn a_limited_scan_reads_past_deletions_and_counts_only_live_entries() {
    let dir = tempdir().unwrap();
    let mut store = open_empty(dir.path(), 0);
    let base: Vec<(String, Option<&str>)> = (0..10).map(|i| (format!("c{i}"), Some("1"))).collect();
    let base: Vec<(&str, Option<&str>)> = base.iter().map(|(k, v)| (k.as_str(), *v)).collect();
    store.commit(&changes(&base), &meta(0, 1, 1)).unwrap();
    let mut overlay = Overlay::new(&store);
    for i in 0..5 {
        overlay.delete(format!("c{i}").as_bytes()).unwrap();
    }
    overlay.put(b"c55", bytes("2")).unwrap();
    let keys = |limit| -> Vec<Vec<u8>> {
        overlay
            .scan_limited(b"c", b"d", limit)
            .unwrap()
            .into_iter()
            .map(|(k, _)| k)
            .collect()
    };
    // The first page of the base is all deleted: the scan reads on instead of stopping.
    assert_eq!(keys(3), vec![bytes("c5"), bytes("c55"), bytes("c6")]);
    assert_eq!(
        keys(100).len(),
        6,
        "fewer than the limit: the range is done"
    );
    assert_eq!(
        keys(100),
        overlay
            .scan(b"c", b"d")
            .unwrap()
            .into_iter()
            .map(|(k, _)| k)
            .collect::<Vec<_>>()
    );
}

/// A changelog record: key and value (`None`: a tombstone).
type ChangelogRecord = (Vec<u8>, Option<Vec<u8>>);

/// Runs `inputs` the way the active loop does: each record through an overlay over `store`,
/// committed every `per_transaction` records. Returns the outcomes and the changelog those
/// transactions wrote (every change of each transaction, in order).
fn run_on_rocksdb(
    p: &Pipeline,
    inputs: &[Vec<u8>],
    per_transaction: usize,
    store: &mut RocksStore,
) -> (Vec<Outcome>, Vec<ChangelogRecord>) {
    let mut outcomes = Vec::new();
    let mut changelog = Vec::new();
    for (chunk_index, chunk) in inputs.chunks(per_transaction).enumerate() {
        let mut changes = ChangeSet::new();
        for (i, raw) in chunk.iter().enumerate() {
            let offset = (chunk_index * per_transaction + i) as i64;
            let mut overlay = Overlay::with_changes(&*store, changes);
            let outcome = p.process(raw, 0, offset, None, &mut overlay).map_err(|e| {
                (
                    e.category().to_owned(),
                    e.as_bad_record().map(|b| b.reason().to_owned()),
                )
            });
            changes = overlay.into_changes();
            outcomes.push(outcome);
        }
        changelog.extend(
            changes
                .iter()
                .map(|(k, v)| (k.to_vec(), v.map(<[u8]>::to_vec))),
        );
        let next_input = ((chunk_index + 1) * per_transaction).min(inputs.len()) as i64;
        store
            .commit(&changes, &meta(0, next_input, changelog.len() as i64))
            .unwrap();
    }
    (outcomes, changelog)
}

fn every_key(store: &RocksStore) -> BTreeMap<Vec<u8>, Vec<u8>> {
    store
        .scan(&[0x01], &[0xff, 0xff])
        .unwrap()
        .into_iter()
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    #[test]
    fn the_overlay_over_rocksdb_and_a_changelog_replay_end_where_memory_ends(
        config in 0..CONFIGS.len(),
        inputs in proptest::collection::vec(raw_record(), 1..60),
        per_transaction in 1usize..12,
    ) {
        let mut memory = MemoryState::new();
        let expected = run(&pipeline(config), &inputs, 0, &mut memory);

        let dir = tempfile::tempdir().unwrap();
        let mut store = open_empty(&dir.path().join("active"), 0);
        let (outcomes, changelog) = run_on_rocksdb(&pipeline(config), &inputs, per_transaction, &mut store);
        prop_assert_eq!(&outcomes, &expected);
        prop_assert_eq!(&every_key(&store), memory.entries());

        // A restore replays that changelog, in batches, into an empty store.
        let mut restored = open_empty(&dir.path().join("restored"), 0);
        for (index, batch) in changelog.chunks(7).enumerate() {
            let changes: ChangeSet = batch.iter().cloned().collect();
            let offset = (index * 7 + batch.len()) as i64;
            restored.restore_batch(&changes, &meta(0, 0, offset)).unwrap();
        }
        if !changelog.is_empty() {
            restored.finish_restore().unwrap();
        }
        prop_assert_eq!(&every_key(&restored), memory.entries());
    }
}
