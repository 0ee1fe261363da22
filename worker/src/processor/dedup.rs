//! The `dedup` processor: passes the first occurrence of each key through and suppresses
//! repeats within a TTL of event time.
//!
//! State: `d<key>` → [`DedupState`] (event time of the emitted occurrence), an expiry index
//! `x<first seen + ttl><key>` → [`Marker`], and the task's stream time.
//!
//! Rule for a record with event time `t`, in this order:
//! 1. stream time becomes `max(stream time, t)`;
//! 2. if it moved, every key whose expiry (`first seen + ttl`) is `<= stream time` is
//!    removed (one range scan of the index), so state holds only live keys;
//! 3. if `t + ttl <= stream time` the record is late: dropped and counted, nothing written.
//!    Any entry it could be a repeat of may already have been removed, so emitting it could
//!    emit a duplicate, and storing it would store an entry that is expired on arrival;
//! 4. if the key is present and `t < first seen + ttl`, the record is a duplicate: dropped,
//!    nothing written. Otherwise it is emitted (its raw bytes, unchanged, keyed by the record
//!    key) and `first seen = t` starts a new TTL period.
//!
//! So a repeat exactly at `first seen + ttl` is new again, one millisecond earlier it is a
//! duplicate. An out-of-order record (event time before the first-seen one) is a duplicate
//! while the entry lives. An entry exists exactly while `first seen + ttl > stream time`:
//! the same bounded-state rule windows follow with grace, and just as deterministic.

use super::api::{ProcessError, Processor};
use super::codec::{DedupState, Marker};
use super::keys;
use super::record::{DropReason, InputRecord, OutputRecord, ProcessOutput};
use super::state::StateAccess;
use super::stream_time;
use super::sweep;
use super::window::MAX_DURATION_MS;

/// Why a dedup TTL is invalid.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("dedup ttl_ms must be between 1 and {MAX_DURATION_MS}, got {0}")]
pub struct TtlError(pub u64);

/// First-seen-per-key with an event-time TTL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DedupProcessor {
    ttl_ms: i64,
}

impl DedupProcessor {
    /// A dedup processor whose entries live `ttl_ms` of event time.
    pub fn new(ttl_ms: u64) -> Result<Self, TtlError> {
        // A zero TTL would make every record new: a pass-through, almost surely a mistake.
        let ttl = i64::try_from(ttl_ms)
            .ok()
            .filter(|t| *t > 0 && ttl_ms <= MAX_DURATION_MS)
            .ok_or(TtlError(ttl_ms))?;
        Ok(Self { ttl_ms: ttl })
    }

    /// Removes entries whose expiry is at or before the current stream time, and their index
    /// entries, at most [`sweep::SWEEP_LIMIT`] per record from where the last sweep stopped
    /// (the rest follow with the next records). An index entry whose key was since renewed
    /// (its stored expiry differs) only loses the stale index entry. A state from before
    /// bounded sweeps starts at the previous stream time: expiries at or before it went in
    /// the previous sweep, and an entry is never stored already expired.
    fn sweep(
        &self,
        state: &mut dyn StateAccess,
        time: stream_time::Advance,
    ) -> Result<(), ProcessError> {
        let (from, to) = keys::expiring_between(time.previous, time.current);
        for (index_key, marker) in sweep::next_due(state, keys::EXPIRY_SWEEP, from, to)? {
            Marker::decode(&marker).map_err(|e| ProcessError::corrupt(&index_key, e))?;
            let (expiry, key) = keys::decode_expiry_key(&index_key)
                .map_err(|e| ProcessError::corrupt(&index_key, e))?;
            let entry_key = keys::dedup_key(&key);
            if let Some(entry) = self.load(state, &entry_key)?
                && self.expiry(&entry) == expiry
            {
                state.delete(&entry_key)?;
            }
            state.delete(&index_key)?;
        }
        Ok(())
    }

    fn load(
        &self,
        state: &dyn StateAccess,
        entry_key: &[u8],
    ) -> Result<Option<DedupState>, ProcessError> {
        match state.get(entry_key)? {
            None => Ok(None),
            Some(bytes) => DedupState::decode(&bytes)
                .map(Some)
                .map_err(|e| ProcessError::corrupt(entry_key, e)),
        }
    }

    fn expiry(&self, entry: &DedupState) -> i64 {
        entry.first_seen_ms.saturating_add(self.ttl_ms)
    }
}

impl Processor for DedupProcessor {
    fn kind(&self) -> &'static str {
        "dedup"
    }

    fn process(
        &self,
        record: &InputRecord<'_>,
        state: &mut dyn StateAccess,
    ) -> Result<ProcessOutput, ProcessError> {
        let t = record.event_time_ms.ok_or(ProcessError::NoEventTime {
            processor: self.kind(),
        })?;
        let time = stream_time::advance(state, t)?;
        self.sweep(state, time)?;
        if t.saturating_add(self.ttl_ms) <= time.current {
            return Ok(ProcessOutput::dropped(DropReason::Late));
        }
        let entry_key = keys::dedup_key(&record.key);
        // A bounded sweep may not have reached an expired entry yet: its own expiry decides.
        if let Some(entry) = self.load(state, &entry_key)?
            && t < self.expiry(&entry)
        {
            return Ok(ProcessOutput::dropped(DropReason::Duplicate));
        }
        let entry = DedupState { first_seen_ms: t };
        state.put(&entry_key, entry.encode())?;
        state.put(
            &keys::expiry_key(self.expiry(&entry), &record.key),
            Marker.encode(),
        )?;
        Ok(ProcessOutput::emit(vec![OutputRecord {
            key: record.key.as_bytes().to_vec(),
            value: record.raw.to_vec(),
        }]))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
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
}
