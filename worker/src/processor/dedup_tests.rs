//! Tests of the `dedup` processor.

use super::*;
use crate::processor::decode::RecordDecoder;
use crate::processor::state::MemoryState;

const TTL: u64 = 1_000;

fn feed(state: &mut MemoryState, key: &str, ts: i64) -> ProcessOutput {
    let raw = format!(r#"{{"id":"{key}","ts":{ts}}}"#);
    let record = RecordDecoder::new("id", Some("ts".into()))
        .decode(raw.as_bytes(), 0, 0)
        .unwrap();
    DedupProcessor::new(TTL)
        .unwrap()
        .process(&record, state)
        .unwrap()
}

fn emitted(out: &ProcessOutput) -> bool {
    assert_eq!(out.records.is_empty(), out.dropped.is_some());
    !out.records.is_empty()
}

#[test]
fn first_occurrence_passes_through_unchanged() {
    let mut s = MemoryState::new();
    let out = feed(&mut s, "a", 5);
    assert_eq!(out.records.len(), 1);
    assert_eq!(out.records[0].key, b"a".to_vec());
    assert_eq!(out.records[0].value, br#"{"id":"a","ts":5}"#.to_vec());
}

#[test]
fn repeat_one_ms_before_ttl_is_suppressed_and_exactly_at_ttl_is_new() {
    let mut s = MemoryState::new();
    assert!(emitted(&feed(&mut s, "a", 0)));
    assert!(
        !emitted(&feed(&mut s, "a", 999)),
        "t = first + ttl - 1 is a duplicate"
    );
    assert!(emitted(&feed(&mut s, "a", 1000)), "t = first + ttl is new");
    // The new occurrence starts a new period from 1000.
    assert!(!emitted(&feed(&mut s, "a", 1999)));
    assert!(emitted(&feed(&mut s, "a", 2000)));
}

#[test]
fn a_suppressed_repeat_does_not_extend_the_period() {
    let mut s = MemoryState::new();
    assert!(emitted(&feed(&mut s, "a", 0)));
    assert!(!emitted(&feed(&mut s, "a", 900)));
    assert!(
        emitted(&feed(&mut s, "a", 1000)),
        "period runs from the emitted one"
    );
}

#[test]
fn keys_are_independent() {
    let mut s = MemoryState::new();
    assert!(emitted(&feed(&mut s, "a", 0)));
    assert!(emitted(&feed(&mut s, "b", 10)));
    assert!(!emitted(&feed(&mut s, "a", 20)));
    assert!(!emitted(&feed(&mut s, "b", 30)));
}

#[test]
fn late_record_is_duplicate_while_entry_lives_and_new_once_expired() {
    let mut s = MemoryState::new();
    assert!(emitted(&feed(&mut s, "a", 500)));
    assert!(
        !emitted(&feed(&mut s, "a", 100)),
        "earlier event time, entry alive"
    );
    // Another key moves stream time to 1500 >= 500 + 1000: "a" expires.
    assert!(emitted(&feed(&mut s, "b", 1500)));
    assert!(emitted(&feed(&mut s, "a", 600)), "expired entry is gone");
}

#[test]
fn record_expired_on_arrival_is_dropped_as_late() {
    let mut s = MemoryState::new();
    feed(&mut s, "a", 5_000);
    let before = s.clone();
    let out = feed(&mut s, "b", 4_000); // 4000 + 1000 <= 5000
    assert_eq!(out.dropped, Some(DropReason::Late));
    assert!(out.records.is_empty());
    assert_eq!(s, before, "nothing stored for a late record");
    assert!(
        emitted(&feed(&mut s, "b", 4_001)),
        "one ms later it is still in time"
    );
}

#[test]
fn expired_entries_are_removed_from_state() {
    let mut s = MemoryState::new();
    for (i, key) in ["a", "b", "c"].iter().enumerate() {
        feed(&mut s, key, i as i64);
    }
    // Three entries, three index entries, stream time, the sweep's position.
    assert_eq!(s.len(), 8);
    feed(&mut s, "z", 10_000);
    let live: Vec<&Vec<u8>> = s.entries().keys().collect();
    assert_eq!(
        live,
        vec![
            &b"dz".to_vec(),
            &b"mstream_time".to_vec(),
            &keys::EXPIRY_SWEEP.to_vec(),
            &keys::expiry_key(11_000, "z")
        ]
    );
}

#[test]
fn renewed_key_keeps_its_new_entry_when_the_old_index_entry_is_swept() {
    let mut s = MemoryState::new();
    feed(&mut s, "a", 0); // expires at 1000
    feed(&mut s, "a", 1000); // renewed at 1000 (swept old entry first), expires at 2000
    feed(&mut s, "b", 1500); // sweeps up to 1500: nothing of "a" is due
    assert_eq!(
        s.get(b"da").unwrap(),
        Some(
            DedupState {
                first_seen_ms: 1000
            }
            .encode()
        )
    );
    assert!(!emitted(&feed(&mut s, "a", 1999)));
}

#[test]
fn stale_index_entry_does_not_delete_a_renewed_entry() {
    // Construct the state a renewal without a sweep would leave: an old index entry
    // pointing at a key whose entry has since moved on.
    let mut s = MemoryState::new();
    s.put(
        &keys::dedup_key("a"),
        DedupState { first_seen_ms: 900 }.encode(),
    )
    .unwrap();
    s.put(&keys::expiry_key(500, "a"), Marker.encode()).unwrap();
    s.put(&keys::expiry_key(1900, "a"), Marker.encode())
        .unwrap();
    feed(&mut s, "b", 1000);
    assert_eq!(
        s.get(b"da").unwrap(),
        Some(DedupState { first_seen_ms: 900 }.encode())
    );
    assert_eq!(
        s.get(&keys::expiry_key(500, "a")).unwrap(),
        None,
        "stale index removed"
    );
    assert!(!emitted(&feed(&mut s, "a", 1899)));
}

#[test]
fn entry_past_its_expiry_is_new_on_read_even_before_a_sweep() {
    // The sweep normally removes such an entry first; the read check must agree with it
    // on its own (state written by a build whose sweep ran differently, or a bug there).
    let mut s = MemoryState::new();
    s.put(
        keys::STREAM_TIME,
        crate::processor::codec::encode_time(1000),
    )
    .unwrap();
    s.put(
        &keys::dedup_key("a"),
        DedupState { first_seen_ms: 0 }.encode(),
    )
    .unwrap();
    assert!(!emitted(&feed(&mut s, "a", 999)));
    assert!(
        emitted(&feed(&mut s, "a", 1000)),
        "exactly at first + ttl is new"
    );
}

proptest::proptest! {
    /// Against a model of the documented rule, with TTL edges hit often (times on a
    /// coarse grid of multiples of 250 = TTL / 4): same emit/suppress decision for every
    /// record, and state holds only live entries (entry + index each, plus stream time and the
    /// sweep's position).
    #[test]
    fn matches_the_model_and_stays_bounded(
        events in proptest::collection::vec((0usize..3, 0i64..40), 1..80)
    ) {
        let ttl = TTL as i64;
        let mut s = MemoryState::new();
        let mut live: std::collections::BTreeMap<&str, i64> = Default::default();
        let mut stream = i64::MIN;
        for (k, step) in events {
            let (key, t) = (["a", "b", "c"][k], step * 250);
            stream = stream.max(t);
            live.retain(|_, first| *first + ttl > stream);
            let late = t + ttl <= stream;
            let want_emit = !late && live.get(key).is_none_or(|first| t >= *first + ttl);
            if want_emit {
                live.insert(key, t);
            }
            let out = feed(&mut s, key, t);
            proptest::prop_assert_eq!(emitted(&out), want_emit);
            proptest::prop_assert_eq!(out.dropped == Some(DropReason::Late), late);
            proptest::prop_assert_eq!(s.len(), 2 * live.len() + 2);
        }
    }
}

#[test]
fn a_jump_over_many_expiries_is_swept_a_bounded_page_per_record() {
    use crate::processor::sweep::SWEEP_LIMIT;
    let mut s = MemoryState::new();
    let keys_total = SWEEP_LIMIT * 2 + 500;
    for i in 0..keys_total {
        feed(&mut s, &format!("k{i:05}"), 0);
    }
    let index_entries = |s: &MemoryState| {
        s.entries()
            .keys()
            .filter(|k| k.first() == Some(&keys::EXPIRY))
            .count()
    };
    // Stream time jumps past every expiry: each record removes at most one page.
    let mut left = Vec::new();
    for i in 0..4 {
        feed(&mut s, &format!("late-{i}"), 10_000 + i);
        left.push(index_entries(&s) - (i as usize + 1));
    }
    assert_eq!(left, vec![SWEEP_LIMIT + 500, 500, 0, 0]);
    // An entry the sweep had not reached yet was already treated as expired on read.
    let mut lagging = MemoryState::new();
    for i in 0..keys_total {
        feed(&mut lagging, &format!("k{i:05}"), 0);
    }
    feed(&mut lagging, "jump", 10_000);
    assert!(emitted(&feed(
        &mut lagging,
        &format!("k{:05}", keys_total - 1),
        9_500
    )));
}

#[test]
fn zero_and_oversized_ttl_are_rejected() {
    assert_eq!(DedupProcessor::new(0), Err(TtlError(0)));
    assert_eq!(DedupProcessor::new(u64::MAX), Err(TtlError(u64::MAX)));
    assert!(DedupProcessor::new(1).is_ok());
}
