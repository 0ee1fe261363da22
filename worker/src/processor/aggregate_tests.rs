//! Tests of the `aggregate` processor: totals, window updates, grace and lateness, window
//! closing, and a model-based property test of the windowed rules.

use std::collections::BTreeMap;

use proptest::prelude::*;
use serde_json::{Value, json};

use super::AggregateProcessor;
use crate::processor::api::Processor;
use crate::processor::codec::AggState;
use crate::processor::decode::RecordDecoder;
use crate::processor::keys;
use crate::processor::record::{DropReason, ProcessOutput};
use crate::processor::state::{MemoryState, StateAccess};
use crate::processor::stream_time;
use crate::processor::window::WindowAssigner;

fn run(p: &AggregateProcessor, s: &mut MemoryState, key: &str, t: i64, v: f64) -> ProcessOutput {
    let raw = json!({"k": key, "t": t, "v": v}).to_string();
    let record = RecordDecoder::new("k", Some("t".into()))
        .decode(raw.as_bytes(), 0, 0)
        .unwrap();
    p.process(&record, s).unwrap()
}

fn values(out: &ProcessOutput) -> Vec<Value> {
    out.records
        .iter()
        .map(|r| serde_json::from_slice(&r.value).unwrap())
        .collect()
}

fn tumbling(size: u64, grace: u64) -> AggregateProcessor {
    AggregateProcessor::windowed("v", WindowAssigner::tumbling(size).unwrap(), grace).unwrap()
}

#[test]
fn unwindowed_emits_running_totals_per_key() {
    let p = AggregateProcessor::unwindowed("v");
    let mut s = MemoryState::new();
    run(&p, &mut s, "a", 0, 4.0);
    run(&p, &mut s, "b", 0, 100.0);
    let out = run(&p, &mut s, "a", 0, -2.0);
    let raw = String::from_utf8(out.records[0].value.clone()).unwrap();
    assert_eq!(
        raw,
        r#"{"key":"a","count":2,"sum":2.0,"min":-2.0,"max":4.0,"mean":1.0}"#
    );
    assert_eq!(out.records[0].key, b"a".to_vec());
    assert_eq!(
        AggState::decode(&s.get(&keys::aggregate_key("b")).unwrap().unwrap()).unwrap(),
        AggState::first(100.0)
    );
}

#[test]
fn windowed_update_carries_the_window() {
    let p = tumbling(10, 0);
    let mut s = MemoryState::new();
    let out = run(&p, &mut s, "a", 13, 2.5);
    assert_eq!(
        String::from_utf8(out.records[0].value.clone()).unwrap(),
        r#"{"key":"a","window_start":10,"window_end":20,"count":1,"sum":2.5,"min":2.5,"max":2.5,"mean":2.5,"closed":false}"#
    );
}

#[test]
fn grace_accepts_out_of_order_records_until_end_plus_grace() {
    let p = tumbling(10, 5);
    let mut s = MemoryState::new();
    run(&p, &mut s, "a", 1, 1.0);
    run(&p, &mut s, "a", 14, 1.0); // stream time 14 < 10 + 5: window [0,10) still open
    let out = run(&p, &mut s, "a", 3, 1.0);
    assert_eq!(out.dropped, None);
    assert_eq!(values(&out)[0]["count"], json!(2), "accepted within grace");
}

#[test]
fn window_closes_exactly_at_end_plus_grace_and_later_records_are_late() {
    let p = tumbling(10, 5);
    let mut s = MemoryState::new();
    run(&p, &mut s, "a", 1, 1.0);
    run(&p, &mut s, "a", 2, 2.0);
    let out = run(&p, &mut s, "b", 14, 7.0);
    assert_eq!(out.records.len(), 1, "at 14 nothing closes yet");

    // Stream time reaches 15 = end + grace: the window's final result, then the update.
    let out = run(&p, &mut s, "b", 15, 1.0);
    let v = values(&out);
    assert_eq!(v.len(), 2);
    assert_eq!(v[0]["closed"], json!(true));
    assert_eq!(
        (v[0]["key"].clone(), v[0]["window_start"].clone()),
        (json!("a"), json!(0))
    );
    assert_eq!(
        (v[0]["count"].clone(), v[0]["sum"].clone()),
        (json!(2), json!(3.0))
    );
    assert_eq!(v[1]["closed"], json!(false));
    assert_eq!(v[1]["count"], json!(2));
    assert_eq!(
        s.get(&keys::window_key(0, "a")).unwrap(),
        None,
        "closed window deleted"
    );

    // A record for the closed window is late: dropped, counted, nothing written.
    let before = s.clone();
    let out = run(&p, &mut s, "a", 9, 100.0);
    assert_eq!(out.dropped, Some(DropReason::Late));
    assert_eq!(out.late_windows, 1);
    assert!(out.records.is_empty());
    assert_eq!(s, before);
}

#[test]
fn one_ms_before_end_plus_grace_is_still_accepted() {
    let p = tumbling(10, 5);
    let mut s = MemoryState::new();
    run(&p, &mut s, "x", 14, 0.0); // stream time 14 = end(10) + grace(5) - 1
    let out = run(&p, &mut s, "a", 9, 1.0);
    assert_eq!((out.dropped, out.late_windows), (None, 0));
}

#[test]
fn hopping_record_can_be_late_for_some_windows_only() {
    let p = AggregateProcessor::windowed("v", WindowAssigner::hopping(10, 5).unwrap(), 0).unwrap();
    let mut s = MemoryState::new();
    run(&p, &mut s, "a", 12, 1.0); // windows [5,15) and [10,20); stream time 12
    let out = run(&p, &mut s, "a", 9, 1.0); // windows [0,10) (late) and [5,15) (open)
    assert_eq!(out.late_windows, 1);
    assert_eq!(out.dropped, None);
    let v = values(&out);
    assert_eq!(v.len(), 1);
    assert_eq!(
        (v[0]["window_start"].clone(), v[0]["count"].clone()),
        (json!(5), json!(2))
    );
}

#[test]
fn closing_emits_in_window_then_key_order_and_keeps_state_bounded() {
    let p = tumbling(10, 0);
    let mut s = MemoryState::new();
    for (k, t) in [("b", 1), ("a", 2), ("c", 11), ("a", 12), ("b", 25)] {
        run(&p, &mut s, k, t, 1.0);
    }
    // At 25 windows [0,10) and [10,20) closed; only [20,30) for "b" is open.
    let open: Vec<Vec<u8>> = s
        .entries()
        .keys()
        .filter(|k| k[0] == keys::WINDOW)
        .cloned()
        .collect();
    assert_eq!(open, vec![keys::window_key(20, "b")]);

    // With a grace long enough that nothing closes early, one jump closes all four.
    let p = tumbling(10, 50);
    let mut s = MemoryState::new();
    for (k, t) in [("b", 1), ("a", 2), ("c", 11), ("a", 12)] {
        run(&p, &mut s, k, t, 1.0);
    }
    let out = run(&p, &mut s, "z", 100, 1.0);
    let closed: Vec<(Value, Value)> = values(&out)
        .into_iter()
        .filter(|v| v["closed"] == json!(true))
        .map(|v| (v["window_start"].clone(), v["key"].clone()))
        .collect();
    assert_eq!(
        closed,
        vec![
            (json!(0), json!("a")),
            (json!(0), json!("b")),
            (json!(10), json!("a")),
            (json!(10), json!("c"))
        ]
    );
}

#[test]
fn stream_time_is_restored_from_state_not_kept_in_memory() {
    let p = tumbling(10, 0);
    let mut s = MemoryState::new();
    run(&p, &mut s, "a", 50, 1.0);
    // A new processor instance (a restarted worker) on the restored state.
    let restored = tumbling(10, 0);
    let mut s2 = s.clone();
    assert_eq!(stream_time::load(&s2).unwrap(), Some(50));
    assert_eq!(
        run(&restored, &mut s2, "a", 5, 1.0).dropped,
        Some(DropReason::Late)
    );
}

#[test]
fn value_field_errors_are_bad_records() {
    let p = AggregateProcessor::unwindowed("v");
    let mut s = MemoryState::new();
    let record = RecordDecoder::new("k", None)
        .decode(br#"{"k":"a","v":"x"}"#, 0, 0)
        .unwrap();
    let err = p.process(&record, &mut s).unwrap_err();
    assert_eq!(err.as_bad_record().map(|e| e.reason()), Some("wrong_type"));
    assert!(s.is_empty());
}

/// Per (key, window start): what was emitted, in order.
#[derive(Default, Debug)]
struct Seen {
    updates: Vec<u64>,
    closed: Option<u64>,
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Against an independent model: a window accepts a record iff end + grace > the stream
    /// time after it; closes exactly once when stream time reaches end + grace; never updates
    /// after closing; and state holds exactly the windows still open.
    #[test]
    fn windowed_rules_match_the_model(
        advance in 1u64..20, ratio in 1u64..4, grace in 0u64..30,
        events in proptest::collection::vec((0usize..3, 0i64..200, -5i64..5), 1..60)
    ) {
        let assigner = WindowAssigner::hopping(advance * ratio, advance).unwrap();
        let p = AggregateProcessor::windowed("v", assigner, grace).unwrap();
        let grace = grace as i64;
        let mut s = MemoryState::new();
        let mut seen: BTreeMap<(String, i64), Seen> = BTreeMap::new();
        let mut model: BTreeMap<(String, i64), u64> = BTreeMap::new();
        let mut stream = i64::MIN;
        let (mut late_total, mut update_total, mut pairs_total) = (0u64, 0u64, 0u64);

        for (k, t, v) in events {
            let key = ["a", "b", "c"][k].to_string();
            stream = stream.max(t);
            let out = run(&p, &mut s, &key, t, v as f64);
            late_total += u64::from(out.late_windows);
            pairs_total += assigner.windows_per_event() as u64;
            // Dropped as late exactly when late for every one of its windows.
            prop_assert_eq!(
                out.dropped == Some(DropReason::Late),
                i64::from(out.late_windows) == assigner.windows_per_event()
            );
            for w in assigner.windows_for(t) {
                if w.end_ms + grace > stream {
                    *model.entry((key.clone(), w.start_ms)).or_default() += 1;
                }
            }
            for val in values(&out) {
                let id = (val["key"].as_str().unwrap().to_string(), val["window_start"].as_i64().unwrap());
                let count = val["count"].as_u64().unwrap();
                let entry = seen.entry(id.clone()).or_default();
                prop_assert!(entry.closed.is_none(), "{:?} emitted after its close", id);
                if val["closed"] == json!(true) {
                    prop_assert!(val["window_end"].as_i64().unwrap() + grace <= stream);
                    entry.closed = Some(count);
                } else {
                    update_total += 1;
                    entry.updates.push(count);
                }
            }
        }

        // Every record-window pair was either applied (as the model says) or counted late.
        prop_assert_eq!(update_total, model.values().sum::<u64>());
        prop_assert_eq!(late_total + update_total, pairs_total);
        check_final_state(&seen, &model, &s, &assigner, grace, stream)?;
    }
}

/// Checks what was emitted and what is stored against the model.
fn check_final_state(
    seen: &BTreeMap<(String, i64), Seen>,
    model: &BTreeMap<(String, i64), u64>,
    s: &MemoryState,
    assigner: &WindowAssigner,
    grace: i64,
    stream: i64,
) -> Result<(), TestCaseError> {
    for ((key, start), want) in model {
        let got = seen
            .get(&(key.clone(), *start))
            .map(|e| e.updates.clone())
            .unwrap_or_default();
        prop_assert_eq!(
            got,
            (1..=*want).collect::<Vec<_>>(),
            "updates count up by one"
        );
        let window = assigner.window_at(*start);
        let stored = s.get(&keys::window_key(*start, key)).unwrap();
        let closed = seen.get(&(key.clone(), *start)).and_then(|e| e.closed);
        if window.end_ms + grace <= stream {
            prop_assert_eq!(closed, Some(*want), "closed once with the final count");
            prop_assert_eq!(stored, None, "closed window deleted");
        } else {
            prop_assert_eq!(closed, None);
            prop_assert_eq!(AggState::decode(&stored.unwrap()).unwrap().count, *want);
        }
    }
    let windows = s.entries().keys().filter(|k| k[0] == keys::WINDOW).count();
    let open = model
        .keys()
        .filter(|(_, st)| assigner.window_at(*st).end_ms + grace > stream)
        .count();
    prop_assert_eq!(windows, open, "state holds exactly the open windows");
    Ok(())
}
