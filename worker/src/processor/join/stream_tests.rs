//! Tests of the stream-stream join: window bounds on both sides, pair order, lateness, the
//! emission of unmatched records when their window closes (exactly once, never early), bounded
//! sweeps, and closed records the sweep has not reached yet.

use serde_json::Value;

use super::layout::BufferedAt;
use super::*;
use crate::processor::decode::RecordDecoder;
use crate::processor::keys;
use crate::processor::record::DropReason;
use crate::processor::state::MemoryState;
use crate::processor::sweep::SWEEP_LIMIT;

/// A right record may precede a left one by 10 ms and follow it by 20; grace 5.
const WINDOW: StreamWindow = StreamWindow {
    before_ms: 10,
    after_ms: 20,
    grace_ms: 5,
};

/// A join over memory state, numbering each input's offsets.
struct Run {
    join: JoinProcessor,
    state: MemoryState,
    offsets: [i64; 2],
}

impl Run {
    fn new(mode: JoinMode) -> Self {
        Self::with(mode, WINDOW)
    }

    fn with(mode: JoinMode, window: StreamWindow) -> Self {
        Self {
            join: JoinProcessor::stream(mode, window).unwrap(),
            state: MemoryState::new(),
            offsets: [0, 0],
        }
    }

    /// Feeds `{"id":"<L|R><t>","k":key,"t":t}` on `side`.
    fn send(&mut self, side: Side, key: &str, t: i64) -> ProcessOutput {
        let tag = if side == Side::Left { "L" } else { "R" };
        let raw = format!(r#"{{"id":"{tag}{t}","k":"{key}","t":{t}}}"#);
        self.send_raw(side, &raw)
    }

    fn send_raw(&mut self, side: Side, raw: &str) -> ProcessOutput {
        let offset = &mut self.offsets[side as usize];
        let record = RecordDecoder::new("k", Some("t".into()))
            .with_side(side)
            .decode(raw.as_bytes(), 0, *offset)
            .unwrap();
        *offset += 1;
        self.join.process(&record, &mut self.state).unwrap()
    }

    fn left(&mut self, key: &str, t: i64) -> Vec<(String, String)> {
        ids(&self.send(Side::Left, key, t))
    }

    fn right(&mut self, key: &str, t: i64) -> Vec<(String, String)> {
        ids(&self.send(Side::Right, key, t))
    }
}

/// The (left id, right id) of each output, `-` for null.
fn ids(out: &ProcessOutput) -> Vec<(String, String)> {
    let id = |v: &Value| v["id"].as_str().unwrap_or("-").to_owned();
    out.records
        .iter()
        .map(|r| {
            let v: Value = serde_json::from_slice(&r.value).unwrap();
            (id(&v["left"]), id(&v["right"]))
        })
        .collect()
}

fn pair(left: &str, right: &str) -> (String, String) {
    (left.to_owned(), right.to_owned())
}

#[test]
fn a_pair_is_emitted_with_both_records_byte_for_byte_keyed_by_the_join_key() {
    let mut run = Run::new(JoinMode::Inner);
    let left = r#"{ "t": 100, "k": "user-1", "amount": 1.50 }"#;
    assert!(run.send_raw(Side::Left, left).records.is_empty());
    let right = r#"{"k":"user-1","t":105,"name":"ann"}"#;
    let out = run.send_raw(Side::Right, right);
    assert_eq!(out.records.len(), 1);
    assert_eq!(out.records[0].key, b"user-1".to_vec());
    assert_eq!(
        String::from_utf8(out.records[0].value.clone()).unwrap(),
        format!(r#"{{"left":{left},"right":{right}}}"#)
    );
    assert_eq!(run.join.kind(), "join-stream");
}

#[test]
fn a_left_record_pairs_with_right_times_from_before_to_after_inclusive() {
    let mut run = Run::new(JoinMode::Inner);
    run.left("a", 100);
    assert!(run.right("a", 89).is_empty(), "tl - before - 1");
    assert_eq!(run.right("a", 90), vec![pair("L100", "R90")]);
    assert_eq!(run.right("a", 120), vec![pair("L100", "R120")]);
    assert!(run.right("a", 121).is_empty(), "tl + after + 1");
    assert!(run.right("b", 110).is_empty(), "another key");
}

#[test]
fn a_right_record_pairs_with_left_times_from_after_to_before_inclusive() {
    let mut run = Run::new(JoinMode::Inner);
    run.right("a", 100);
    assert!(run.left("a", 79).is_empty(), "tr - after - 1");
    assert_eq!(run.left("a", 80), vec![pair("L80", "R100")]);
    assert_eq!(run.left("a", 110), vec![pair("L110", "R100")]);
    assert!(run.left("a", 111).is_empty(), "tr + before + 1");
}

#[test]
fn partners_are_emitted_in_time_then_arrival_order() {
    let mut run = Run::new(JoinMode::Inner);
    run.right("a", 105);
    let first_95 = run.send_raw(Side::Right, r#"{"id":"first","k":"a","t":95}"#);
    assert!(first_95.records.is_empty());
    run.send_raw(Side::Right, r#"{"id":"second","k":"a","t":95}"#);
    assert_eq!(
        run.left("a", 100),
        vec![
            pair("L100", "first"),
            pair("L100", "second"),
            pair("L100", "R105")
        ]
    );
}

#[test]
fn a_record_closed_on_arrival_is_late_and_changes_nothing() {
    let mut run = Run::new(JoinMode::Outer);
    run.right("x", 200);
    let before = run.state.clone();
    // A left record closes when tl + after + grace < stream time: 174 + 25 < 200.
    let out = run.send(Side::Left, "a", 174);
    assert_eq!(out.dropped, Some(DropReason::Late));
    assert!(out.records.is_empty());
    assert_eq!(run.state, before, "nothing written for a late record");
    assert_eq!(
        run.send(Side::Left, "a", 175).dropped,
        None,
        "175 + 25 = 200"
    );
    // A right record closes when tr + before + grace < stream time: 184 + 15 < 200.
    assert_eq!(
        run.send(Side::Right, "a", 184).dropped,
        Some(DropReason::Late)
    );
    assert_eq!(run.send(Side::Right, "a", 185).dropped, None);
}

#[test]
fn equal_times_pair_with_a_zero_window_and_no_grace() {
    let zero = StreamWindow {
        before_ms: 0,
        after_ms: 0,
        grace_ms: 0,
    };
    let mut run = Run::with(JoinMode::Inner, zero);
    run.left("a", 50);
    assert_eq!(run.right("a", 50), vec![pair("L50", "R50")]);
    assert!(run.right("a", 51).is_empty());
    assert_eq!(
        run.send(Side::Left, "a", 50).dropped,
        Some(DropReason::Late),
        "stream time 51 is past 50 + 0 + 0"
    );
}

#[test]
fn an_unmatched_left_record_is_emitted_once_its_window_closes_and_never_again() {
    let mut run = Run::new(JoinMode::Left);
    run.left("a", 100);
    assert!(
        run.right("other", 125).is_empty(),
        "100 + 20 + 5 is still open"
    );
    assert_eq!(run.right("other", 126), vec![pair("L100", "-")]);
    // Exactly once; and right records are never emitted alone in `left` mode.
    assert!(run.right("other", 200).is_empty());
    assert!(run.right("other", 1_000).is_empty());
}

#[test]
fn a_matched_record_is_never_emitted_unmatched() {
    let mut run = Run::new(JoinMode::Outer);
    run.left("a", 100);
    assert_eq!(run.right("a", 110), vec![pair("L100", "R110")]);
    assert!(run.left("other", 1_000).is_empty());
    // The right record matched too: an outer join emits neither alone.
    let mut run = Run::new(JoinMode::Outer);
    run.right("a", 110);
    assert_eq!(run.left("a", 100), vec![pair("L100", "R110")]);
    assert!(run.left("other", 1_000).is_empty());
}

#[test]
fn an_outer_join_emits_unmatched_right_records_when_their_window_closes() {
    let mut run = Run::new(JoinMode::Outer);
    run.right("a", 100);
    assert!(
        run.left("other", 115).is_empty(),
        "100 + 10 + 5 is still open"
    );
    // The other key's left record is open; only the right one closes here.
    assert_eq!(run.left("other2", 116), vec![pair("-", "R100")]);
    assert_eq!(
        run.left("z", 200).len(),
        2,
        "the two other-key left records"
    );
}

#[test]
fn closed_records_leave_the_state_and_only_open_ones_stay() {
    let mut run = Run::new(JoinMode::Left);
    for t in [0, 5, 10] {
        run.left("a", t);
        run.right("a", t + 1);
    }
    run.left("z", 1_000);
    let tags: Vec<u8> = run.state.entries().keys().map(|k| k[0]).collect();
    // The last record (buffer, index), and metadata: stream time and the sweep position.
    assert_eq!(tags, vec![keys::JOIN_EXPIRY, keys::JOIN_BUFFER, b'm', b'm']);
}

#[test]
fn stream_time_is_shared_by_both_sides_and_kept_in_state() {
    let mut run = Run::new(JoinMode::Inner);
    run.left("a", 500);
    let mut restored = Run::new(JoinMode::Inner);
    restored.state = run.state.clone();
    // The right input never saw 500, but stream time is the task's: 400 + 15 < 500.
    assert_eq!(
        restored.send(Side::Right, "a", 400).dropped,
        Some(DropReason::Late)
    );
}

#[test]
fn a_large_jump_is_swept_a_bounded_page_per_record_emitting_each_record_once() {
    let mut run = Run::new(JoinMode::Left);
    let total = SWEEP_LIMIT * 2 + 500;
    for i in 0..total {
        run.left(&format!("k{i:05}"), 0);
    }
    let emitted: Vec<usize> = (0..4)
        .map(|i| run.left(&format!("late-{i}"), 1_000 + i).len())
        .collect();
    assert_eq!(emitted, vec![SWEEP_LIMIT, SWEEP_LIMIT, 500, 0]);
    let buffered = |s: &MemoryState| {
        s.entries()
            .keys()
            .filter(|k| k[0] == keys::JOIN_BUFFER)
            .count()
    };
    assert_eq!(buffered(&run.state), 4, "only the four open records");
}

#[test]
fn a_closed_record_the_sweep_has_not_reached_does_not_pair_and_is_emitted_later() {
    let mut run = Run::new(JoinMode::Left);
    let total = 2 * SWEEP_LIMIT + 10;
    for i in 0..total {
        run.left(&format!("k{i:05}"), 0);
    }
    // Stream time 26 closes every left record (0 + 20 + 5 < 26); one page is swept.
    assert_eq!(run.right("other", 26).len(), SWEEP_LIMIT);
    let last = format!("k{:05}", total - 1);
    let last_key = BufferedAt {
        side: Side::Left,
        key: last.clone(),
        time: 0,
        offset: total as i64 - 1,
    }
    .buffer_key();
    // A right record at 20 is in the last left record's window by time, and open itself
    // (20 + 10 + 5 >= 26), but the left record is closed, just: no pair, though not swept yet.
    let out = run.right(&last, 20);
    assert_eq!(out.len(), SWEEP_LIMIT, "the next page only");
    assert!(out.iter().all(|o| *o == pair("L0", "-")));
    assert!(run.state.get(&last_key).unwrap().is_some(), "not swept yet");
    // The rest, the unpaired record among them, each emitted once.
    assert_eq!(run.right("other", 40).len(), 10);
    assert!(run.state.get(&last_key).unwrap().is_none());
    assert!(run.right("other", 50).is_empty());
}

/// The rule lives in `JoinProcessor::process`, for both kinds: only a table input has
/// tombstones.
#[test]
fn a_null_value_on_a_stream_input_is_a_bad_record_and_writes_nothing() {
    let joins = [
        JoinProcessor::stream(JoinMode::Inner, WINDOW).unwrap(),
        JoinProcessor::table(JoinMode::Left, 10).unwrap(),
    ];
    for join in joins {
        let mut record = RecordDecoder::new("k", Some("t".into()))
            .decode(br#"{"k":"a","t":1}"#, 0, 0)
            .unwrap();
        record.tombstone = true;
        let mut state = MemoryState::new();
        let err = join.process(&record, &mut state).unwrap_err();
        assert_eq!(err.as_bad_record(), Some(&DecodeError::NullValue));
        assert!(state.is_empty());
        record.tombstone = false;
        record.event_time_ms = None;
        assert_eq!(
            join.process(&record, &mut state).unwrap_err().category(),
            "no_event_time"
        );
    }
}

#[test]
fn unreadable_buffered_state_stops_instead_of_being_overwritten() {
    let mut run = Run::new(JoinMode::Inner);
    run.left("a", 100);
    let buffered = BufferedAt {
        side: Side::Left,
        key: "a".into(),
        time: 100,
        offset: 0,
    }
    .buffer_key();
    run.state.put(&buffered, vec![9, 9]).unwrap();
    let right = RecordDecoder::new("k", Some("t".into()))
        .with_side(Side::Right)
        .decode(br#"{"k":"a","t":100}"#, 0, 0)
        .unwrap();
    let err = run.join.process(&right, &mut run.state).unwrap_err();
    assert_eq!(err.category(), "corrupt_state");
}
