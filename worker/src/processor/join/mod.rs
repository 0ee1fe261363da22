//! The `join` processors: a task's input (left) joined by key with a second input (right) read
//! by the same task, partition `i` of each topic. The runtime tells each record's side
//! ([`InputRecord::side`]); all state is in the task's state, like every processor's.
//!
//! **Stream-stream** (`join-stream`; Kafka Streams' `JoinWindows.ofTimeDifferenceAndGrace`
//! with separate before/after). A left record at `tl` pairs with the right records of its key at
//! `tr` in `[tl - before, tl + after]`; a right record at `tr` with the left ones at `tl` in
//! `[tr - after, tr + before]`. Stream time is the largest event time seen on either input.
//! A record's window ends at its last partner time (`tl + after`, `tr + before`) and closes once
//! stream time passes that end by more than grace: a left record is open while
//! `tl + after + grace >= stream time` (the aggregate's `end + grace <= stream time` rule for the
//! half-open window ending at `tl + after + 1`). Per record, in this order:
//! 1. a record closed on arrival is dropped as late: nothing written, nothing emitted;
//! 2. stream time moves to `max(stream time, t)`;
//! 3. buffered records that are now closed are removed, at most `SWEEP_LIMIT` per record
//!    (bounded sweep); in `left` mode each left one that never found a partner is emitted as
//!    `(left, null)`, in `outer` mode right ones too as `(null, right)`;
//! 4. the record pairs with every buffered record of the other side with its key, a time in its
//!    window, and still open (judged by its own time, so a sweep that lags never makes a
//!    closed record pair): one output per pair, in the partners' (time, offset) order;
//! 5. it is buffered itself, with whether it found a partner.
//!
//! So a record is emitted unmatched only once its window is closed, never earlier, exactly
//! once, and never after it was part of a pair: a closed record can no longer pair.
//!
//! **Stream-table** (`join-table`; a versioned table, KIP-889/914). A table record starts a
//! version of its key (the Kafka record key) at its time (its time field, else its Kafka
//! timestamp), valid until the next version's start; a null value starts a tombstone. A stream
//! record at `t` is answered right away with the version of its key with the greatest start
//! `<= t` (ties: the later record), and a tombstone or no version is no partner: `inner` emits
//! nothing then, `left` emits `(left, null)`. A table record arriving later never changes an
//! answer already given. Table time is the greatest table record time seen; versions are kept
//! so that lookups at `t >= table time - history` are exact (pruned at most `SWEEP_LIMIT` per
//! record). A record of either input before that cutoff is dropped as late: a stream record's
//! answer may be pruned, and a table record's version may no longer be placed exactly (as in
//! Kafka Streams' versioned stores, which drop such writes).
//!
//! **Output**, for both: Kafka key = the join key (UTF-8); value =
//! `{"left":<left record or null>,"right":<right record or null>}`, where each record is
//! embedded as the exact bytes it was read as. Re-serialising would not be byte-stable here:
//! `serde_json::Map` is sorted by key in this build, so field order and number formatting
//! would differ from the input.
//!
//! `kind()` names the logic and its state layout, not the mode: the modes share one layout
//! and differ only in what they emit, and a job whose mode changes is already stopped by the
//! processor identity stored in its state (the whole config is compared).
//!
//! Layout: `spec` (settings and their rules), [`layout`] (keys and values), `stream` and
//! `table` (the two joins).

pub mod layout;
mod spec;
mod stream;
mod table;

pub use spec::{JoinConfigError, JoinKind, JoinMode, JoinSpec, StreamWindow};

use super::api::{ProcessError, Processor};
use super::decode::DecodeError;
use super::record::{InputRecord, OutputRecord, ProcessOutput, Side};
use super::state::StateAccess;
use stream::StreamJoin;
use table::TableJoin;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Logic {
    Stream(StreamJoin),
    Table(TableJoin),
}

/// A stream-stream or stream-table join.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JoinProcessor {
    logic: Logic,
}

impl JoinProcessor {
    /// A stream-stream join in `mode` over `window`.
    pub fn stream(mode: JoinMode, window: StreamWindow) -> Result<Self, JoinConfigError> {
        Ok(Self {
            logic: Logic::Stream(StreamJoin::new(mode, window)?),
        })
    }

    /// A stream-table join in `mode` (`inner` or `left`) keeping `history_ms` of table
    /// versions.
    pub fn table(mode: JoinMode, history_ms: u64) -> Result<Self, JoinConfigError> {
        if mode == JoinMode::Outer {
            return Err(JoinConfigError::UnsupportedMode {
                join: JoinKind::Table,
                mode,
            });
        }
        Ok(Self {
            logic: Logic::Table(TableJoin::new(mode, history_ms)?),
        })
    }

    /// Stream or table.
    pub fn join_kind(&self) -> JoinKind {
        match self.logic {
            Logic::Stream(_) => JoinKind::Stream,
            Logic::Table(_) => JoinKind::Table,
        }
    }
}

impl Processor for JoinProcessor {
    fn kind(&self) -> &'static str {
        self.join_kind().processor_kind()
    }

    fn process(
        &self,
        record: &InputRecord<'_>,
        state: &mut dyn StateAccess,
    ) -> Result<ProcessOutput, ProcessError> {
        let t = record.event_time_ms.ok_or(ProcessError::NoEventTime {
            processor: self.kind(),
        })?;
        // Only a table input has tombstones; a stream record must have a value to emit.
        let table_record = matches!(self.logic, Logic::Table(_)) && record.side == Side::Right;
        if record.tombstone && !table_record {
            return Err(DecodeError::NullValue.into());
        }
        match &self.logic {
            Logic::Stream(join) => join.process(record, t, state),
            Logic::Table(join) => join.process(record, t, state),
        }
    }
}

/// The output of a pair, or of a record without partner (`None` side: `null`).
fn output(key: &str, left: Option<&[u8]>, right: Option<&[u8]>) -> OutputRecord {
    const NULL: &[u8] = b"null";
    let (left, right) = (left.unwrap_or(NULL), right.unwrap_or(NULL));
    let mut value = Vec::with_capacity(20 + left.len() + right.len());
    value.extend_from_slice(br#"{"left":"#);
    value.extend_from_slice(left);
    value.extend_from_slice(br#","right":"#);
    value.extend_from_slice(right);
    value.push(b'}');
    OutputRecord {
        key: key.as_bytes().to_vec(),
        value,
    }
}

/// The output of a record of `side` (raw value `own`) with its partner from the other side.
fn joined(key: &str, side: Side, own: &[u8], partner: Option<&[u8]>) -> OutputRecord {
    match side {
        Side::Left => output(key, Some(own), partner),
        Side::Right => output(key, partner, Some(own)),
    }
}

/// The output of a record of `side` that found no partner.
fn unmatched(key: &str, side: Side, own: &[u8]) -> OutputRecord {
    joined(key, side, own, None)
}

#[cfg(test)]
#[path = "stream_tests.rs"]
mod stream_tests;

#[cfg(test)]
#[path = "table_tests.rs"]
mod table_tests;

#[cfg(test)]
#[path = "reference_tests.rs"]
mod reference_tests;
