//! The `aggregate` processor: count, sum, min, max and mean of a numeric field per key,
//! over all time or per event-time window with a grace period.
//!
//! Unwindowed state: `a<key>` → [`AggState`]; each record emits the key's new totals.
//!
//! Windowed state: `w<start><key>` → [`AggState`] plus the task's stream time. For each
//! record, in this order:
//! 1. stream time becomes `max(stream time, event time)`;
//! 2. if it moved, every window with `end + grace <= stream time` is closed: its final
//!    result is emitted with `"closed":true` and its state deleted, in (start, key) order —
//!    so state holds only open windows;
//! 3. for each window of the record: if `end + grace <= stream time` the record is late for
//!    it (counted, nothing written — the window is closed, possibly already emitted and
//!    deleted, so updating it would reopen it); otherwise the window is updated and its new
//!    totals emitted with `"closed":false`.
//!
//! A window's update can therefore never follow its closed result, and a closed result is
//! emitted exactly once. Output key: the record key; value: `{"key","window_start",
//! "window_end","count","sum","min","max","mean","closed"}` (window fields only when windowed).

use serde::Serialize;

use super::api::{ProcessError, Processor};
use super::codec::AggState;
use super::decode::number_field;
use super::keys;
use super::record::{DropReason, InputRecord, OutputRecord, ProcessOutput};
use super::state::StateAccess;
use super::stream_time;
use super::sweep;
use super::window::{MAX_DURATION_MS, Window, WindowAssigner, WindowError};

#[derive(Debug, Clone, PartialEq, Eq)]
enum Mode {
    Unwindowed,
    Windowed {
        assigner: WindowAssigner,
        grace_ms: i64,
    },
}

/// Aggregates a numeric field per key, optionally per window.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AggregateProcessor {
    value_field: String,
    mode: Mode,
}

#[derive(Serialize)]
struct AggUpdate<'a> {
    key: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    window_start: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    window_end: Option<i64>,
    count: u64,
    sum: f64,
    min: f64,
    max: f64,
    mean: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    closed: Option<bool>,
}

fn output(
    key: &str,
    window: Option<(Window, bool)>,
    agg: &AggState,
) -> Result<OutputRecord, ProcessError> {
    let value = serde_json::to_vec(&AggUpdate {
        key,
        window_start: window.map(|(w, _)| w.start_ms),
        window_end: window.map(|(w, _)| w.end_ms),
        count: agg.count,
        sum: agg.sum,
        min: agg.min,
        max: agg.max,
        mean: agg.mean(),
        closed: window.map(|(_, closed)| closed),
    })
    .map_err(ProcessError::Encode)?;
    Ok(OutputRecord {
        key: key.as_bytes().to_vec(),
        value,
    })
}

/// Reads and adds `value` to the aggregate at `state_key`, writes it back, returns it.
fn accumulate(
    state: &mut dyn StateAccess,
    state_key: &[u8],
    value: f64,
) -> Result<AggState, ProcessError> {
    let next = match state.get(state_key)? {
        Some(bytes) => AggState::decode(&bytes)
            .map_err(|e| ProcessError::corrupt(state_key, e))?
            .add(value),
        None => AggState::first(value),
    };
    state.put(state_key, next.encode())?;
    Ok(next)
}

impl AggregateProcessor {
    /// Aggregates `value_field` per key over all time.
    pub fn unwindowed(value_field: impl Into<String>) -> Self {
        Self {
            value_field: value_field.into(),
            mode: Mode::Unwindowed,
        }
    }

    /// Aggregates `value_field` per key and window; a window accepts records until stream
    /// time reaches its end + `grace_ms`.
    pub fn windowed(
        value_field: impl Into<String>,
        assigner: WindowAssigner,
        grace_ms: u64,
    ) -> Result<Self, WindowError> {
        let grace = i64::try_from(grace_ms)
            .ok()
            .filter(|g| grace_ms <= MAX_DURATION_MS && *g >= 0)
            .ok_or(WindowError::TooLarge {
                what: "grace_ms",
                value: grace_ms,
            })?;
        Ok(Self {
            value_field: value_field.into(),
            mode: Mode::Windowed {
                assigner,
                grace_ms: grace,
            },
        })
    }

    /// True when the processor needs event time.
    pub fn needs_event_time(&self) -> bool {
        matches!(self.mode, Mode::Windowed { .. })
    }

    fn process_windowed(
        &self,
        record: &InputRecord<'_>,
        value: f64,
        assigner: &WindowAssigner,
        grace_ms: i64,
        state: &mut dyn StateAccess,
    ) -> Result<ProcessOutput, ProcessError> {
        let t = record.event_time_ms.ok_or(ProcessError::NoEventTime {
            processor: self.kind(),
        })?;
        let time = stream_time::advance(state, t)?;
        let mut out = ProcessOutput::default();
        close_windows(state, assigner, grace_ms, time, &mut out.records)?;
        let mut updated = 0u32;
        for window in assigner.windows_for(t) {
            if window.end_ms.saturating_add(grace_ms) <= time.current {
                out.late_windows = out.late_windows.saturating_add(1);
                continue;
            }
            let agg = accumulate(
                state,
                &keys::window_key(window.start_ms, &record.key),
                value,
            )?;
            out.records
                .push(output(&record.key, Some((window, false)), &agg)?);
            updated = updated.saturating_add(1);
        }
        if updated == 0 {
            tracing::debug!(
                key = %record.key,
                event_time_ms = t,
                stream_time_ms = time.current,
                offset = record.offset,
                "late record dropped"
            );
            out.dropped = Some(DropReason::Late);
        }
        Ok(out)
    }
}

/// Emits the final result of, and deletes, windows with `end + grace <= stream_time`, at most
/// [`sweep::SWEEP_LIMIT`] per record from where the last sweep stopped (the rest follow with
/// the next records; a record for a closable window is late whether it was swept or not).
///
/// No window that is already closable is ever opened (its records are late), so a state from
/// before bounded sweeps starts at the windows closable at the previous stream time.
fn close_windows(
    state: &mut dyn StateAccess,
    assigner: &WindowAssigner,
    grace_ms: i64,
    time: stream_time::Advance,
    out: &mut Vec<OutputRecord>,
) -> Result<(), ProcessError> {
    // start + size + grace <= stream time  <=>  start <= stream time - size - grace.
    let last_closable_start = |stream_time_ms: i64| {
        stream_time_ms
            .saturating_sub(assigner.size_ms())
            .saturating_sub(grace_ms)
    };
    let (from, to) = keys::windows_starting_between(
        time.previous.map(last_closable_start),
        last_closable_start(time.current),
    );
    for (state_key, bytes) in sweep::next_due(state, keys::WINDOW_SWEEP, from, to)? {
        let (start, key) = keys::decode_window_key(&state_key)
            .map_err(|e| ProcessError::corrupt(&state_key, e))?;
        let agg = AggState::decode(&bytes).map_err(|e| ProcessError::corrupt(&state_key, e))?;
        out.push(output(&key, Some((assigner.window_at(start), true)), &agg)?);
        state.delete(&state_key)?;
    }
    Ok(())
}

impl Processor for AggregateProcessor {
    fn kind(&self) -> &'static str {
        "aggregate"
    }

    fn process(
        &self,
        record: &InputRecord<'_>,
        state: &mut dyn StateAccess,
    ) -> Result<ProcessOutput, ProcessError> {
        // Read the value before any write: a bad record must leave no trace in the overlay.
        let value = number_field(&record.value, &self.value_field)?;
        match &self.mode {
            Mode::Unwindowed => {
                let agg = accumulate(state, &keys::aggregate_key(&record.key), value)?;
                Ok(ProcessOutput::emit(vec![output(&record.key, None, &agg)?]))
            }
            Mode::Windowed { assigner, grace_ms } => {
                self.process_windowed(record, value, assigner, *grace_ms, state)
            }
        }
    }
}

#[cfg(test)]
#[path = "aggregate_tests.rs"]
mod tests;
