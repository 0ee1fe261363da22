//! The joins against independent reference implementations: for random input sequences, each
//! record's output (as a multiset of pairs) and lateness must equal what a naive computation
//! over the whole sequence says. The references share no code with the processors: they
//! state the documented rules directly, quadratically, over the full history of the input.

use std::collections::BTreeSet;

use proptest::prelude::*;
use serde_json::Value;

use super::layout::{self, BufferedAt, PruneKind};
use super::*;
use crate::processor::codec::Marker;
use crate::processor::decode::{RecordDecoder, TableDecoder};
use crate::processor::record::DropReason;
use crate::processor::state::MemoryState;
use crate::processor::sweep::SWEEP_LIMIT;

/// One input record: side, key (0..3), time, and for a table record whether it is a tombstone.
#[derive(Debug, Clone, Copy)]
struct Event {
    side: Side,
    key: u8,
    t: i64,
    tombstone: bool,
}

/// A pair or an unmatched record, by the input indexes of its left and right records.
type Pair = (Option<usize>, Option<usize>);

/// What one input record produced: dropped as late, and its outputs in a canonical order.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Step {
    late: bool,
    outputs: Vec<Pair>,
}

fn event(right: bool, key: u8, t: i64, tombstone: bool) -> Event {
    let side = if right { Side::Right } else { Side::Left };
    Event {
        side,
        key,
        t,
        tombstone: right && tombstone,
    }
}

fn stream_events() -> impl Strategy<Value = Vec<Event>> {
    proptest::collection::vec(
        (any::<bool>(), 0u8..3, 0i64..60).prop_map(|(r, k, t)| event(r, k, t, false)),
        0..60,
    )
}

fn table_events() -> impl Strategy<Value = Vec<Event>> {
    proptest::collection::vec(
        (
            any::<bool>(),
            0u8..3,
            0i64..80,
            proptest::bool::weighted(0.25),
        )
            .prop_map(|(r, k, t, tomb)| event(r, k, t, tomb)),
        0..60,
    )
}

fn mode() -> impl Strategy<Value = JoinMode> {
    prop_oneof![
        Just(JoinMode::Inner),
        Just(JoinMode::Left),
        Just(JoinMode::Outer)
    ]
}

/// Runs `events` through `join` on `state` from input index `first`; each record's value
/// carries its index as `i`.
fn run(join: &JoinProcessor, events: &[Event], first: usize, state: &mut MemoryState) -> Vec<Step> {
    let stream = |side| RecordDecoder::new("k", Some("t".into())).with_side(side);
    let table = TableDecoder::new(None);
    let mut steps = Vec::new();
    for (n, e) in events.iter().enumerate() {
        let i = first + n;
        let raw = format!(r#"{{"i":{i},"k":"k{}","t":{}}}"#, e.key, e.t);
        let key = format!("k{}", e.key);
        let payload = (!e.tombstone).then_some(raw.as_bytes());
        let record = match (join.join_kind(), e.side) {
            (JoinKind::Table, Side::Right) => table
                .decode(Some(key.as_bytes()), payload, 0, i as i64, Some(e.t))
                .unwrap(),
            (_, side) => stream(side).decode(raw.as_bytes(), 0, i as i64).unwrap(),
        };
        let out = join.process(&record, state).unwrap();
        let index = |v: &Value| v["i"].as_u64().map(|i| i as usize);
        let mut outputs: Vec<Pair> = out
            .records
            .iter()
            .map(|r| {
                let v: Value = serde_json::from_slice(&r.value).unwrap();
                let join_key = v["left"]["k"].as_str().or(v["right"]["k"].as_str());
                assert_eq!(Some(r.key.as_slice()), join_key.map(str::as_bytes));
                (index(&v["left"]), index(&v["right"]))
            })
            .collect();
        outputs.sort();
        steps.push(Step {
            late: out.dropped == Some(DropReason::Late),
            outputs,
        });
    }
    steps
}

/// The stream-stream rules, stated over the whole input: stream time after record `i` is the
/// largest time among records `0..=i`; a record is open at stream time `s` while its time plus
/// its reach (`after` for left, `before` for right) plus grace is `>= s`; a record is accepted
/// when open at the stream time after it. Record `i` pairs with each earlier accepted record of
/// the other side and key within the time difference that is still open at `i`'s stream time.
/// An accepted record the mode emits alone, that never paired, is emitted by the first record
/// whose stream time closes it.
fn stream_reference(events: &[Event], w: StreamWindow, mode: JoinMode) -> Vec<Step> {
    let (before, after, grace) = (w.before_ms as i64, w.after_ms as i64, w.grace_ms as i64);
    let mut stream_time = Vec::with_capacity(events.len());
    for e in events {
        let previous = stream_time.last().copied().unwrap_or(i64::MIN);
        stream_time.push(e.t.max(previous));
    }
    let reach = |e: &Event| if e.side == Side::Left { after } else { before };
    let open_until = |e: &Event| e.t + reach(e) + grace;
    let accepted: Vec<bool> = (0..events.len())
        .map(|i| open_until(&events[i]) >= stream_time[i])
        .collect();
    let mut steps: Vec<Step> = accepted
        .iter()
        .map(|a| Step {
            late: !a,
            outputs: Vec::new(),
        })
        .collect();
    let mut matched = vec![false; events.len()];
    for i in 0..events.len() {
        for j in 0..i {
            let (a, b) = (&events[i], &events[j]);
            let (l, r, li, ri) = match a.side {
                Side::Left => (a, b, i, j),
                Side::Right => (b, a, j, i),
            };
            let in_window = -before <= r.t - l.t && r.t - l.t <= after;
            if accepted[i]
                && accepted[j]
                && a.side != b.side
                && a.key == b.key
                && in_window
                && open_until(b) >= stream_time[i]
            {
                steps[i].outputs.push((Some(li), Some(ri)));
                matched[i] = true;
                matched[j] = true;
            }
        }
    }
    for j in 0..events.len() {
        let e = &events[j];
        let alone = match mode {
            JoinMode::Inner => false,
            JoinMode::Left => e.side == Side::Left,
            JoinMode::Outer => true,
        };
        if !accepted[j] || matched[j] || !alone {
            continue;
        }
        if let Some(k) = (j + 1..events.len()).find(|&k| stream_time[k] > open_until(e)) {
            let pair = match e.side {
                Side::Left => (Some(j), None),
                Side::Right => (None, Some(j)),
            };
            steps[k].outputs.push(pair);
        }
    }
    for step in &mut steps {
        step.outputs.sort();
    }
    steps
}

/// The stream-table rules, stated over the whole input: table time after record `i` is the
/// largest time among the table records `0..=i`, and a record of either input with a time below
/// table time minus history is late. A table record produces nothing. A stream record's partner
/// is the accepted table record of its key, among the records before it, with the greatest time
/// `<= t` (the later one on equal times), unless that is a tombstone.
fn table_reference(events: &[Event], history: i64, mode: JoinMode) -> Vec<Step> {
    let late = |i: usize| {
        let table_time = events[..=i]
            .iter()
            .filter(|x| x.side == Side::Right)
            .map(|x| x.t)
            .max();
        table_time.is_some_and(|tt| events[i].t < tt - history)
    };
    let mut steps = Vec::with_capacity(events.len());
    for (i, e) in events.iter().enumerate() {
        if e.side == Side::Right || late(i) {
            steps.push(Step {
                late: late(i),
                outputs: Vec::new(),
            });
            continue;
        }
        let version = (0..i)
            .filter(|&j| events[j].side == Side::Right && events[j].key == e.key && !late(j))
            .filter(|&j| events[j].t <= e.t)
            .max_by_key(|&j| (events[j].t, j))
            .filter(|&j| !events[j].tombstone);
        let outputs = match (version, mode) {
            (Some(j), _) => vec![(Some(i), Some(j))],
            (None, JoinMode::Left) => vec![(Some(i), None)],
            (None, _) => Vec::new(),
        };
        steps.push(Step {
            late: false,
            outputs,
        });
    }
    steps
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    /// Per record, the stream join emits exactly the reference's pairs and unmatched records;
    /// a last record far ahead closes every window, so in `left`/`outer` modes every record
    /// without a partner has been emitted by then, once. Afterwards only that last record is
    /// buffered. A restart from the state after any prefix continues identically.
    #[test]
    fn the_stream_join_matches_the_reference(
        events in stream_events(),
        before in 0u64..6, after in 0u64..6, grace in 0u64..6,
        mode in mode(), cut in any::<prop::sample::Index>(),
    ) {
        let window = StreamWindow { before_ms: before, after_ms: after, grace_ms: grace };
        let mut events = events;
        events.push(event(false, 9, 10_000, false));
        let join = JoinProcessor::stream(mode, window).unwrap();
        let mut state = MemoryState::new();
        let got = run(&join, &events, 0, &mut state);
        prop_assert_eq!(&got, &stream_reference(&events, window, mode));
        let buffered = state.entries().keys().filter(|k| k[0] == crate::processor::keys::JOIN_BUFFER).count();
        prop_assert_eq!(buffered, 1);

        let cut = cut.index(events.len());
        let mut committed = MemoryState::new();
        let mut resumed = run(&join, &events[..cut], 0, &mut committed);
        let restarted = JoinProcessor::stream(mode, window).unwrap();
        resumed.extend(run(&restarted, &events[cut..], cut, &mut committed));
        prop_assert_eq!(&resumed, &got);
        prop_assert_eq!(&committed, &state);
    }

    /// Per record, the table join answers exactly as the reference: same partner or none, same
    /// lateness. A restart from the state after any prefix continues identically.
    #[test]
    fn the_table_join_matches_the_reference(
        events in table_events(),
        history in 1u64..30,
        left_mode in any::<bool>(),
        cut in any::<prop::sample::Index>(),
    ) {
        let mode = if left_mode { JoinMode::Left } else { JoinMode::Inner };
        let join = JoinProcessor::table(mode, history).unwrap();
        let mut state = MemoryState::new();
        let got = run(&join, &events, 0, &mut state);
        prop_assert_eq!(&got, &table_reference(&events, history as i64, mode));

        let cut = cut.index(events.len() + 1);
        let mut committed = MemoryState::new();
        let mut resumed = run(&join, &events[..cut], 0, &mut committed);
        let restarted = JoinProcessor::table(mode, history).unwrap();
        resumed.extend(run(&restarted, &events[cut..], cut, &mut committed));
        prop_assert_eq!(&resumed, &got);
        prop_assert_eq!(&committed, &state);
    }
}

/// A state whose sweep (or pruning) is `pages` pages behind: due index entries that point at
/// nothing, sorted before every real entry, each page of which keeps one record's sweep busy.
fn backlogged(pages: usize) -> MemoryState {
    let mut state = MemoryState::new();
    for offset in 0..SWEEP_LIMIT * pages {
        let nothing = BufferedAt {
            side: Side::Left,
            key: String::new(),
            time: -1,
            offset: offset as i64,
        };
        state.put(&nothing.expiry_key(-1), Marker.encode()).unwrap();
        let key = format!("nothing{offset}");
        let pruned = layout::prune_key(-1_000, PruneKind::Ends, &key);
        state.put(&pruned, Marker.encode()).unwrap();
    }
    state
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(16))]

    /// While the sweep lags behind (it reaches no real entry during the input), the stream
    /// join decides every lateness and every pair as the reference does: closed records are
    /// judged by their own times. Records without partner come out later than the reference's
    /// step, never earlier, and once the sweep catches up each comes out exactly once.
    #[test]
    fn a_lagging_sweep_changes_no_stream_join_decision(
        events in stream_events(),
        before in 0u64..6, after in 0u64..6, grace in 0u64..6, mode in mode(),
    ) {
        let window = StreamWindow { before_ms: before, after_ms: after, grace_ms: grace };
        let mut events = events;
        events.push(event(false, 9, 10_000, false));
        let n = events.len();
        let reference = stream_reference(&events, window, mode);
        let join = JoinProcessor::stream(mode, window).unwrap();
        let mut state = backlogged(n + 1);
        // More records at the same (final) stream time let the sweep catch up: each record
        // that is not late sweeps one page, and these are not.
        let catch_up = vec![event(false, 9, 10_000, false); n + 3];
        let got = run(&join, &[events, catch_up].concat(), 0, &mut state);
        let alone = |p: &Pair| p.0.is_none() || p.1.is_none();
        let mut emitted_alone = Vec::new();
        for (step, got) in got.iter().enumerate() {
            let pairs: Vec<Pair> = got.outputs.iter().copied().filter(|p| !alone(p)).collect();
            if let Some(want) = reference.get(step) {
                prop_assert_eq!(got.late, want.late);
                let want_pairs: Vec<Pair> = want.outputs.iter().copied().filter(|p| !alone(p)).collect();
                prop_assert_eq!(pairs, want_pairs);
            }
            emitted_alone.extend(got.outputs.iter().copied().filter(alone).map(|p| (p, step)));
        }
        let mut want_alone = Vec::new();
        for (step, want) in reference.iter().enumerate() {
            want_alone.extend(want.outputs.iter().copied().filter(alone).map(|p| (p, step)));
        }
        emitted_alone.sort();
        want_alone.sort();
        prop_assert_eq!(emitted_alone.len(), want_alone.len());
        for ((got, got_step), (want, want_step)) in emitted_alone.iter().zip(&want_alone) {
            prop_assert_eq!(got, want);
            prop_assert!(got_step >= want_step, "{:?} emitted before its window closed", got);
        }
    }

    /// While pruning lags behind, the table join answers every record as the reference does.
    #[test]
    fn a_lagging_pruning_changes_no_table_join_answer(
        events in table_events(), history in 1u64..30, left_mode in any::<bool>(),
    ) {
        let mode = if left_mode { JoinMode::Left } else { JoinMode::Inner };
        let join = JoinProcessor::table(mode, history).unwrap();
        let mut state = backlogged(events.len() + 1);
        let got = run(&join, &events, 0, &mut state);
        prop_assert_eq!(&got, &table_reference(&events, history as i64, mode));
    }
}

/// The references themselves, on hand-checked cases: a reference that agrees with a wrong
/// processor would make the property vacuous.
#[test]
fn the_references_give_the_documented_answers() {
    let w = StreamWindow {
        before_ms: 10,
        after_ms: 20,
        grace_ms: 5,
    };
    let l = |key, t| event(false, key, t, false);
    let r = |key, t| event(true, key, t, false);
    // L@100 pairs with R@90 and R@120; R@121 no; L@0 is closed (0 + 25 < 121): late.
    let steps = stream_reference(
        &[l(0, 100), r(0, 90), r(0, 120), r(0, 121), l(0, 0)],
        w,
        JoinMode::Left,
    );
    let outputs: Vec<Vec<Pair>> = steps.iter().map(|s| s.outputs.clone()).collect();
    assert_eq!(
        outputs,
        vec![
            vec![],
            vec![(Some(0), Some(1))],
            vec![(Some(0), Some(2))],
            vec![],
            vec![]
        ]
    );
    assert!(steps[4].late);
    // Left mode: L@0 (never matched) is emitted by the first record past 0 + 25.
    let steps = stream_reference(&[l(0, 0), r(1, 25), r(1, 26)], w, JoinMode::Left);
    assert_eq!(steps[2].outputs, vec![(Some(0), None)]);
    assert!(steps[1].outputs.is_empty());
    // Table: versions at 10 and 20, a tombstone at 30; history 100.
    let t = |key, at, tomb| event(true, key, at, tomb);
    let events = [
        t(0, 10, false),
        t(0, 20, false),
        t(0, 30, true),
        l(0, 15),
        l(0, 25),
        l(0, 35),
    ];
    let steps = table_reference(&events, 100, JoinMode::Left);
    let answers: BTreeSet<Pair> = steps.iter().flat_map(|s| s.outputs.clone()).collect();
    let want: BTreeSet<Pair> = [(Some(3), Some(0)), (Some(4), Some(1)), (Some(5), None)].into();
    assert_eq!(answers, want);
}
