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
#[path = "dedup_tests.rs"]
mod tests;
