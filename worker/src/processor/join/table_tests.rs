//! Tests of the stream-table join: the version valid at a stream record's time, tombstones,
//! out-of-order table records, answers never revised, history and lateness, and bounded pruning.

use serde_json::Value;

use super::layout::{self, PruneKind};
use super::*;
use crate::processor::decode::{RecordDecoder, TableDecoder};
use crate::processor::keys;
use crate::processor::record::DropReason;
use crate::processor::state::MemoryState;
use crate::processor::sweep::SWEEP_LIMIT;

/// A table join over memory state, numbering each input's offsets.
struct Run {
    join: JoinProcessor,
    state: MemoryState,
    offsets: [i64; 2],
}

impl Run {
    fn new(mode: JoinMode, history_ms: u64) -> Self {
        Self {
            join: JoinProcessor::table(mode, history_ms).unwrap(),
            state: MemoryState::new(),
            offsets: [0, 0],
        }
    }

    /// A table record for `key` at Kafka timestamp `t`: `{"v":value}`, or a tombstone.
    fn table(&mut self, key: &str, t: i64, value: Option<&str>) -> ProcessOutput {
        let raw = value.map(|v| format!(r#"{{"v":"{v}"}}"#));
        let offset = self.offsets[1];
        self.offsets[1] += 1;
        let record = TableDecoder::new(None)
            .decode(
                Some(key.as_bytes()),
                raw.as_deref().map(str::as_bytes),
                0,
                offset,
                Some(t),
            )
            .unwrap();
        let out = self.join.process(&record, &mut self.state).unwrap();
        assert!(out.records.is_empty(), "a table record emits nothing");
        out
    }

    fn send_stream(&mut self, key: &str, t: i64) -> ProcessOutput {
        let raw = format!(r#"{{"k":"{key}","t":{t}}}"#);
        let offset = self.offsets[0];
        self.offsets[0] += 1;
        let record = RecordDecoder::new("k", Some("t".into()))
            .decode(raw.as_bytes(), 0, offset)
            .unwrap();
        self.join.process(&record, &mut self.state).unwrap()
    }

    /// The right `v` of each output for a stream record (`-` for null).
    fn stream(&mut self, key: &str, t: i64) -> Vec<String> {
        self.send_stream(key, t)
            .records
            .iter()
            .map(|r| {
                let v: Value = serde_json::from_slice(&r.value).unwrap();
                v["right"]["v"].as_str().unwrap_or("-").to_owned()
            })
            .collect()
    }

    /// Stored (valid_to) of the versions of `key`, in order.
    fn version_ends(&self, key: &str) -> Vec<i64> {
        self.state
            .entries()
            .keys()
            .filter(|k| k[0] == keys::TABLE_VERSION)
            .map(|k| layout::decode_version_key(k).unwrap())
            .filter(|(k, _)| k == key)
            .map(|(_, to)| to)
            .collect()
    }
}

fn names(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

#[test]
fn a_stream_record_joins_the_version_with_the_greatest_start_at_or_before_its_time() {
    let mut run = Run::new(JoinMode::Inner, 1_000);
    run.table("a", 10, Some("v10"));
    run.table("a", 20, Some("v20"));
    assert!(run.stream("a", 9).is_empty(), "no version yet at 9");
    assert_eq!(run.stream("a", 10), names(&["v10"]));
    assert_eq!(run.stream("a", 19), names(&["v10"]));
    assert_eq!(run.stream("a", 20), names(&["v20"]));
    assert_eq!(run.stream("a", 500), names(&["v20"]));
    assert!(run.stream("b", 500).is_empty(), "another key");
    assert_eq!(run.join.kind(), "join-table");
}

#[test]
fn the_output_embeds_both_records_byte_for_byte_keyed_by_the_join_key() {
    let mut run = Run::new(JoinMode::Left, 1_000);
    run.table("a", 10, Some("v10"));
    let out = run.send_stream("a", 15);
    assert_eq!(out.records[0].key, b"a".to_vec());
    assert_eq!(
        String::from_utf8(out.records[0].value.clone()).unwrap(),
        r#"{"left":{"k":"a","t":15},"right":{"v":"v10"}}"#
    );
    let out = run.send_stream("b", 15);
    assert_eq!(
        String::from_utf8(out.records[0].value.clone()).unwrap(),
        r#"{"left":{"k":"b","t":15},"right":null}"#
    );
}

#[test]
fn a_tombstone_ends_a_key_until_its_next_version() {
    let mut run = Run::new(JoinMode::Left, 1_000);
    run.table("a", 10, Some("v10"));
    run.table("a", 20, None);
    run.table("a", 30, Some("v30"));
    assert_eq!(run.stream("a", 15), names(&["v10"]));
    assert_eq!(run.stream("a", 20), names(&["-"]));
    assert_eq!(run.stream("a", 29), names(&["-"]));
    assert_eq!(run.stream("a", 30), names(&["v30"]));
    let mut inner = Run::new(JoinMode::Inner, 1_000);
    inner.table("a", 10, Some("v10"));
    inner.table("a", 20, None);
    assert!(inner.stream("a", 25).is_empty(), "inner: no output");
}

#[test]
fn out_of_order_table_records_land_between_and_before_versions() {
    let mut run = Run::new(JoinMode::Left, 1_000);
    run.table("a", 10, Some("v10"));
    run.table("a", 30, Some("v30"));
    run.table("a", 20, Some("v20"));
    run.table("a", 5, Some("v5"));
    let answers: Vec<Vec<String>> = [4, 5, 9, 10, 19, 20, 29, 30]
        .iter()
        .map(|t| run.stream("a", *t))
        .collect();
    let want = ["-", "v5", "v5", "v10", "v10", "v20", "v20", "v30"];
    assert_eq!(answers, want.map(|w| names(&[w])).to_vec());
    // A tombstone before a key's first version, then a value before it.
    run.table("b", 50, None);
    run.table("b", 20, Some("b20"));
    assert_eq!(run.stream("b", 30), names(&["b20"]));
    assert_eq!(run.stream("b", 60), names(&["-"]));
}

#[test]
fn a_table_record_at_the_same_time_replaces_the_version() {
    let mut run = Run::new(JoinMode::Inner, 1_000);
    run.table("a", 10, Some("first"));
    run.table("a", 20, Some("later"));
    run.table("a", 10, Some("second"));
    assert_eq!(run.stream("a", 15), names(&["second"]));
    run.table("a", 10, None);
    assert!(run.stream("a", 15).is_empty(), "replaced by a tombstone");
    run.table("a", 10, Some("third"));
    assert_eq!(run.stream("a", 15), names(&["third"]));
    assert_eq!(run.version_ends("a"), vec![20, i64::MAX]);
}

#[test]
fn a_table_record_after_a_stream_record_does_not_change_its_answer() {
    let mut run = Run::new(JoinMode::Left, 1_000);
    run.table("a", 10, Some("v10"));
    let out = run.send_stream("a", 50);
    let first = out.records.clone();
    // The table learns of a version at 40 only now: nothing is emitted or revised...
    let out = run.table("a", 40, Some("v40"));
    assert_eq!((out.records.len(), out.dropped), (0, None));
    assert_eq!(first.len(), 1);
    // ...and later stream records see it.
    assert_eq!(run.stream("a", 50), names(&["v40"]));
}

#[test]
fn a_stream_record_older_than_the_history_is_late_and_changes_nothing() {
    let mut run = Run::new(JoinMode::Left, 100);
    run.table("a", 500, Some("v500"));
    run.table("x", 1_000, Some("x"));
    let before = run.state.clone();
    let out = run.send_stream("a", 899);
    assert_eq!(out.dropped, Some(DropReason::Late));
    assert!(out.records.is_empty());
    assert_eq!(run.state, before);
    assert_eq!(
        run.stream("a", 900),
        names(&["v500"]),
        "exactly at the cutoff"
    );
}

#[test]
fn a_table_record_older_than_the_history_is_late_and_changes_nothing() {
    let mut run = Run::new(JoinMode::Left, 100);
    run.table("a", 500, Some("v500"));
    run.table("x", 1_000, Some("x")); // cutoff 900
    let before = run.state.clone();
    assert_eq!(
        run.table("a", 899, Some("v899")).dropped,
        Some(DropReason::Late)
    );
    assert_eq!(run.state, before);
    // Exactly at the cutoff it counts; v500 then ends at the cutoff and is not kept.
    assert_eq!(run.table("a", 900, Some("v900")).dropped, None);
    assert_eq!(run.stream("a", 900), names(&["v900"]));
    assert_eq!(run.version_ends("a"), vec![i64::MAX]);
}

#[test]
fn history_keeps_the_newest_version_at_or_before_the_cutoff_and_prunes_older_ones() {
    let mut run = Run::new(JoinMode::Inner, 100);
    for t in [0, 100, 200, 300] {
        run.table("a", t, Some(&format!("v{t}")));
    }
    // Table time 300, cutoff 200: (100, 200) is not needed, (200, 300) is.
    assert_eq!(run.version_ends("a"), vec![300, i64::MAX]);
    assert_eq!(run.stream("a", 200), names(&["v200"]));
    assert_eq!(run.stream("a", 299), names(&["v200"]));
    assert_eq!(
        run.send_stream("a", 199).dropped,
        Some(DropReason::Late),
        "its answer may be gone"
    );
    let index: Vec<(i64, PruneKind, String)> = run
        .state
        .entries()
        .keys()
        .filter(|k| k[0] == keys::TABLE_PRUNE)
        .map(|k| layout::decode_prune_key(k).unwrap())
        .collect();
    assert_eq!(index, vec![(300, PruneKind::Ends, "a".to_owned())]);
}

#[test]
fn a_deleted_key_leaves_the_state_once_the_cutoff_passes_its_tombstone() {
    let mut run = Run::new(JoinMode::Left, 100);
    run.table("a", 0, Some("v0"));
    run.table("a", 50, None);
    assert_eq!(run.version_ends("a"), vec![50, i64::MAX]);
    run.table("x", 200, Some("x")); // cutoff 100
    assert!(run.version_ends("a").is_empty());
    assert_eq!(run.stream("a", 150), names(&["-"]), "as with the tombstone");
    let tags: Vec<u8> = run.state.entries().keys().map(|k| k[0]).collect();
    assert_eq!(tags, vec![b'm', b'm', keys::TABLE_VERSION], "x's version");
    // A value older than the pruned tombstone cannot revive the key: it is late.
    assert_eq!(
        run.table("a", 40, Some("v40")).dropped,
        Some(DropReason::Late)
    );
    assert_eq!(run.stream("a", 150), names(&["-"]));
}

#[test]
fn a_large_cutoff_jump_is_pruned_a_bounded_page_per_record() {
    let mut run = Run::new(JoinMode::Inner, 10);
    let total = SWEEP_LIMIT * 2 + 500;
    for i in 0..total {
        let key = format!("k{i:05}");
        run.table(&key, 0, Some("old"));
        run.table(&key, 1, Some("new"));
    }
    let index = |s: &MemoryState| {
        s.entries()
            .keys()
            .filter(|k| k[0] == keys::TABLE_PRUNE)
            .count()
    };
    assert_eq!(index(&run.state), total);
    let mut left = Vec::new();
    for i in 0..3 {
        run.table("jump", 100 + i, Some("x"));
        left.push(index(&run.state));
    }
    // "jump" adds one entry of its own with each later version.
    assert_eq!(left, vec![SWEEP_LIMIT + 500, 501, 2]);
    // A stream record continues a lagging pruning too, and answers right meanwhile.
    let mut lagging = Run::new(JoinMode::Inner, 10);
    for i in 0..total {
        let key = format!("k{i:05}");
        lagging.table(&key, 0, Some("old"));
        lagging.table(&key, 1, Some("new"));
    }
    lagging.table("jump", 100, Some("x"));
    assert_eq!(
        lagging.stream(&format!("k{:05}", total - 1), 95),
        names(&["new"])
    );
    assert_eq!(index(&lagging.state), 500);
}

#[test]
fn unreadable_table_state_stops_instead_of_being_overwritten() {
    let mut run = Run::new(JoinMode::Inner, 10);
    run.table("a", 5, Some("v5"));
    run.state
        .put(&layout::version_key("a", i64::MAX), vec![1, 0])
        .unwrap();
    let err = run
        .join
        .process(
            &RecordDecoder::new("k", Some("t".into()))
                .decode(br#"{"k":"a","t":6}"#, 0, 0)
                .unwrap(),
            &mut run.state,
        )
        .unwrap_err();
    assert_eq!(err.category(), "corrupt_state");
    run.state.put(keys::TABLE_TIME, vec![7]).unwrap();
    let record = TableDecoder::new(None)
        .decode(Some(b"b"), Some(b"{}"), 0, 0, Some(1))
        .unwrap();
    let err = run.join.process(&record, &mut run.state).unwrap_err();
    assert_eq!(err.category(), "corrupt_state");
}
