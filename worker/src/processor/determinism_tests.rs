//! Whole-pipeline properties every built-in processor must have for exactly-once recovery:
//! the same input from the same state gives identical output and state; resuming from the
//! state committed after any prefix (a restart or a promoted standby) continues exactly as an
//! uninterrupted run; and a bad record never changes state. The same runs through the real
//! path (the overlay over RocksDB, committed a transaction at a time, and the changelog those
//! transactions wrote replayed into a fresh store) end in the state memory ends in.

use proptest::prelude::*;

use super::config::ProcessorConfig;
use super::pipeline::Pipeline;
use super::record::ProcessOutput;
use super::state::MemoryState;
use crate::store::test_support::{meta, open_empty};
use crate::store::{ChangeSet, Overlay, RocksStore, StateStore};
use std::collections::BTreeMap;

/// What one record produced: its output, or the category and reason of its error.
type Outcome = Result<ProcessOutput, (String, Option<String>)>;

const CONFIGS: [&str; 5] = [
    r#"{"key_field":"k","processor":{"kind":"count"}}"#,
    r#"{"key_field":"k","processor":{"kind":"aggregate","value_field":"v"}}"#,
    r#"{"key_field":"k","time_field":"t","processor":{"kind":"aggregate","value_field":"v",
        "window":{"type":"tumbling","size_ms":50},"grace_ms":20}}"#,
    r#"{"key_field":"k","time_field":"t","processor":{"kind":"aggregate","value_field":"v",
        "window":{"type":"hopping","size_ms":60,"advance_ms":20},"grace_ms":0}}"#,
    r#"{"key_field":"k","time_field":"t","processor":{"kind":"dedup","ttl_ms":40}}"#,
];

fn pipeline(config: usize) -> Pipeline {
    let c: ProcessorConfig = serde_json::from_str(CONFIGS[config]).unwrap();
    Pipeline::from_config(&c).unwrap()
}

/// One raw input: mostly good records over a few keys with out-of-order times, some bad.
fn raw_record() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        8 => (0u8..4, 0i64..400, -100i32..100).prop_map(|(k, t, v)| {
            format!(r#"{{"k":"key{k}","t":{t},"v":{v}}}"#).into_bytes()
        }),
        1 => (0u8..4, 0i64..400).prop_map(|(k, t)| format!(r#"{{"k":{k},"t":{t},"v":0.5}}"#).into_bytes()),
        1 => Just(b"{not json".to_vec()),
        1 => Just(br#"{"t":1,"v":1}"#.to_vec()),
        1 => Just(br#"{"k":"key1","t":1,"v":"one"}"#.to_vec()),
        1 => Just(br#"{"k":"key1","t":"never","v":1}"#.to_vec()),
    ]
}

/// Runs `inputs` (starting at `first_offset`) against `state`, checking that every failed
/// record left the state untouched.
fn run(
    p: &Pipeline,
    inputs: &[Vec<u8>],
    first_offset: i64,
    state: &mut MemoryState,
) -> Vec<Outcome> {
    let mut outcomes = Vec::with_capacity(inputs.len());
    for (i, raw) in inputs.iter().enumerate() {
        let before = state.clone();
        let outcome = p
            .process(raw, 0, first_offset + i as i64, None, state)
            .map_err(|e| {
                (
                    e.category().to_owned(),
                    e.as_bad_record().map(|b| b.reason().to_owned()),
                )
            });
        if outcome.is_err() {
            assert_eq!(*state, before, "a failed record changed state");
        }
        outcomes.push(outcome);
    }
    outcomes
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn same_input_from_empty_state_gives_identical_output_and_state(
        config in 0..CONFIGS.len(),
        inputs in proptest::collection::vec(raw_record(), 0..80)
    ) {
        let (mut s1, mut s2) = (MemoryState::new(), MemoryState::new());
        let o1 = run(&pipeline(config), &inputs, 0, &mut s1);
        let o2 = run(&pipeline(config), &inputs, 0, &mut s2);
        prop_assert_eq!(&o1, &o2);
        prop_assert_eq!(&s1, &s2);
        // Only bad records fail, and always as bad records with a reason.
        for o in &o1 {
            if let Err((category, reason)) = o {
                prop_assert_eq!(category.as_str(), "bad_record");
                prop_assert!(reason.is_some());
            }
        }
    }

    #[test]
    fn resuming_from_committed_state_equals_an_uninterrupted_run(
        config in 0..CONFIGS.len(),
        inputs in proptest::collection::vec(raw_record(), 1..80),
        cut in any::<prop::sample::Index>()
    ) {
        let cut = cut.index(inputs.len() + 1);
        let mut whole = MemoryState::new();
        let expected = run(&pipeline(config), &inputs, 0, &mut whole);

        // First owner processes the prefix and commits; a new owner (fresh pipeline, state
        // restored as committed) processes the rest.
        let mut committed = MemoryState::new();
        let mut got = run(&pipeline(config), &inputs[..cut], 0, &mut committed);
        let mut restored = committed.clone();
        got.extend(run(&pipeline(config), &inputs[cut..], cut as i64, &mut restored));

        prop_assert_eq!(got, expected);
        prop_assert_eq!(restored, whole);
    }
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

#[test]
fn processors_can_be_shared_across_threads() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Pipeline>();
}
