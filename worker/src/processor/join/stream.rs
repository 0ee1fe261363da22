//! The stream-stream join: each record pairs with the buffered records of the other input whose
//! event times lie in its window, then waits in the buffer for later partners until its window
//! closes. The rules are in the module doc of `join`.

use super::layout::{self, BufferedAt, BufferedRecord};
use super::spec::{self, JoinConfigError, JoinMode, StreamWindow};
use crate::processor::api::ProcessError;
use crate::processor::codec::Marker;
use crate::processor::keys;
use crate::processor::record::{DropReason, InputRecord, OutputRecord, ProcessOutput, Side};
use crate::processor::state::StateAccess;
use crate::processor::stream_time;
use crate::processor::sweep;

/// A validated stream-stream join.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct StreamJoin {
    mode: JoinMode,
    before_ms: i64,
    after_ms: i64,
    grace_ms: i64,
}

impl StreamJoin {
    pub(super) fn new(mode: JoinMode, window: StreamWindow) -> Result<Self, JoinConfigError> {
        Ok(Self {
            mode,
            before_ms: spec::duration("before_ms", window.before_ms, 0)?,
            after_ms: spec::duration("after_ms", window.after_ms, 0)?,
            grace_ms: spec::duration("grace_ms", window.grace_ms, 0)?,
        })
    }

    /// The event times of the other input a record of `side` at `t` pairs with, inclusive.
    fn partner_times(&self, side: Side, t: i64) -> (i64, i64) {
        let (back, ahead) = match side {
            Side::Left => (self.before_ms, self.after_ms),
            Side::Right => (self.after_ms, self.before_ms),
        };
        (t.saturating_sub(back), t.saturating_add(ahead))
    }

    /// The first stream time at which a record of `side` at `t` is closed: its window ends at
    /// the last partner time `e`, and it stays open while stream time <= `e + grace`. This is
    /// the aggregate's rule (a window `[start, end)` closes when `end + grace <= stream time`)
    /// for the half-open window `[.., e + 1)`. With `after = grace = 0` a left record is thus
    /// still open at its own time, so a right record at the same time can pair with it.
    fn expiry(&self, side: Side, t: i64) -> i64 {
        self.partner_times(side, t)
            .1
            .saturating_add(self.grace_ms)
            .saturating_add(1)
    }

    /// True when the mode emits the records of `side` that never found a partner.
    fn emits_unmatched(&self, side: Side) -> bool {
        match self.mode {
            JoinMode::Inner => false,
            JoinMode::Left => side == Side::Left,
            JoinMode::Outer => true,
        }
    }

    /// Applies one record of either input at event time `t`.
    pub(super) fn process(
        &self,
        record: &InputRecord<'_>,
        t: i64,
        state: &mut dyn StateAccess,
    ) -> Result<ProcessOutput, ProcessError> {
        let side = record.side;
        let now = stream_time::load(state)?.map_or(t, |previous| previous.max(t));
        // Closed on arrival: a partner buffered earlier may already be gone (or emitted
        // unmatched), so joining it could contradict output already produced. Nothing is
        // written; stream time cannot move, since `t` is below it.
        if self.expiry(side, t) <= now {
            return Ok(ProcessOutput::dropped(DropReason::Late));
        }
        stream_time::advance(state, t)?;
        let mut out = Vec::new();
        self.sweep(state, now, &mut out)?;
        let matched = self.pair_with_buffered(record, t, now, state, &mut out)?;
        let at = BufferedAt {
            side,
            key: record.key.clone(),
            time: t,
            offset: record.offset,
        };
        let entry = BufferedRecord {
            matched,
            raw: record.raw.to_vec(),
        };
        state.put(&at.buffer_key(), entry.encode())?;
        state.put(&at.expiry_key(self.expiry(side, t)), Marker.encode())?;
        Ok(ProcessOutput::emit(out))
    }

    /// Emits one output per open buffered partner of `record`, in the partners' (time, offset)
    /// order, and marks them matched. Returns whether there was any.
    fn pair_with_buffered(
        &self,
        record: &InputRecord<'_>,
        t: i64,
        now: i64,
        state: &mut dyn StateAccess,
        out: &mut Vec<OutputRecord>,
    ) -> Result<bool, ProcessError> {
        let other = record.side.other();
        let (from_time, to_time) = self.partner_times(record.side, t);
        let (from, to) = layout::buffer_range(other, &record.key, from_time, to_time);
        let mut matched = false;
        for (state_key, bytes) in state.scan(&from, &to)? {
            let partner = BufferedAt::decode_buffer_key(&state_key)
                .map_err(|e| ProcessError::corrupt(&state_key, e))?;
            // Judged by its own time, not by whether the bounded sweep has reached it yet:
            // a closed partner may already have been emitted unmatched elsewhere.
            if self.expiry(other, partner.time) <= now {
                continue;
            }
            let mut entry =
                BufferedRecord::decode(&bytes).map_err(|e| ProcessError::corrupt(&state_key, e))?;
            out.push(super::joined(
                &record.key,
                record.side,
                record.raw,
                Some(entry.raw.as_slice()),
            ));
            matched = true;
            if !entry.matched && self.emits_unmatched(other) {
                entry.matched = true;
                state.put(&state_key, entry.encode())?;
            }
        }
        Ok(matched)
    }

    /// Removes the buffered records closed at stream time `now` (expiry <= now), emitting those
    /// that never found a partner when the mode asks for them, in (expiry, side, time, offset,
    /// key) order. At most [`sweep::SWEEP_LIMIT`] per record, from where the last sweep
    /// stopped; the rest follow with the next records. Every expiry index entry is written
    /// with an expiry above the stream time of its record, so above every position a sweep
    /// has stored so far, and no entry is ever skipped.
    fn sweep(
        &self,
        state: &mut dyn StateAccess,
        now: i64,
        out: &mut Vec<OutputRecord>,
    ) -> Result<(), ProcessError> {
        let (from, to) = layout::expiring_upto(now);
        for (index_key, marker) in sweep::next_due(state, keys::JOIN_SWEEP, from, to)? {
            Marker::decode(&marker).map_err(|e| ProcessError::corrupt(&index_key, e))?;
            let (_, at) = BufferedAt::decode_expiry_key(&index_key)
                .map_err(|e| ProcessError::corrupt(&index_key, e))?;
            let buffer_key = at.buffer_key();
            if let Some(bytes) = state.get(&buffer_key)? {
                let entry = BufferedRecord::decode(&bytes)
                    .map_err(|e| ProcessError::corrupt(&buffer_key, e))?;
                if !entry.matched && self.emits_unmatched(at.side) {
                    out.push(super::unmatched(&at.key, at.side, &entry.raw));
                }
                state.delete(&buffer_key)?;
            }
            state.delete(&index_key)?;
        }
        Ok(())
    }
}
