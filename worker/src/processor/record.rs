//! The records a processor consumes and produces, and what it reports besides output.

use serde_json::{Map, Value};

/// Which input of a task a record was read from. A single-input processor only ever sees
/// [`Side::Left`]; a join reads partition `i` of two topics in one task and tells them apart
/// by this.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Side {
    /// The first (or only) input.
    #[default]
    Left,
    /// The second input of a join.
    Right,
}

impl Side {
    /// The other input.
    pub fn other(self) -> Side {
        match self {
            Side::Left => Side::Right,
            Side::Right => Side::Left,
        }
    }

    /// Stable lower-case name for logs and errors.
    pub fn as_str(self) -> &'static str {
        match self {
            Side::Left => "left",
            Side::Right => "right",
        }
    }
}

impl std::fmt::Display for Side {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One decoded input record. Built by [`super::RecordDecoder`] (or, for a table input, by
/// [`super::TableDecoder`]); a processor never sees a record that failed decoding.
#[derive(Debug, Clone, PartialEq)]
pub struct InputRecord<'a> {
    /// The input the record was read from ([`Side::Left`] for every single-input processor).
    pub side: Side,
    /// The grouping key, read from the configured key field (numbers in their JSON text form);
    /// for a table input, the Kafka record key as UTF-8.
    pub key: String,
    /// The whole JSON object (empty for a tombstone).
    pub value: Map<String, Value>,
    /// The exact bytes the object was decoded from (so a pass-through processor such as
    /// `dedup` emits the input unchanged, not a re-serialisation). Empty for a tombstone.
    pub raw: &'a [u8],
    /// True for a table record whose Kafka value is null: it deletes its key from the table
    /// from its time on. Only a table input produces one (a null value on any other input is a
    /// bad record), so processors that read no table never see it set.
    pub tombstone: bool,
    /// Input partition (= task id).
    pub partition: i32,
    /// Offset in the input partition.
    pub offset: i64,
    /// Event time in epoch millis, when a time field is configured.
    pub event_time_ms: Option<i64>,
    /// What the Kafka record carried besides its value.
    pub kafka: KafkaMeta<'a>,
}

/// What a Kafka record carries besides its value: its own key, its headers, its timestamp.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KafkaMeta<'a> {
    /// The record's key as it was produced (the grouping [`InputRecord::key`] is read from the
    /// value, except on a table input); `None` for a null key.
    pub key: Option<&'a [u8]>,
    /// The record's headers, in order, each a name and a value (`None` for a null value).
    pub headers: &'a [(&'a str, Option<&'a [u8]>)],
    /// The record's timestamp, epoch milliseconds, when it has one.
    pub timestamp_ms: Option<i64>,
}

/// One record to produce to the output topic, in the same transaction as the state changes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutputRecord {
    /// Kafka record key.
    pub key: Vec<u8>,
    /// Kafka record value.
    pub value: Vec<u8>,
}

/// Why an input record changed nothing and produced nothing. Counted as a metric by the
/// loop (`DropReason::as_str` is the label); never an error, the task goes on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DropReason {
    /// Too old for the stream time: every window of the record was already closed (end +
    /// grace <= stream time), or a dedup record expired on arrival (t + ttl <= stream time).
    Late,
    /// A repeat of a key seen within the dedup TTL.
    Duplicate,
}

impl DropReason {
    pub const ALL: [DropReason; 2] = [DropReason::Late, DropReason::Duplicate];

    /// Stable label for metrics and logs.
    pub fn as_str(&self) -> &'static str {
        match self {
            DropReason::Late => "late",
            DropReason::Duplicate => "duplicate",
        }
    }
}

/// What processing one record produced.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProcessOutput {
    /// Output records, in the order they must be produced.
    pub records: Vec<OutputRecord>,
    /// Set when the record as a whole was dropped.
    pub dropped: Option<DropReason>,
    /// Windows this record was too late for (with hopping windows a record can be late for
    /// its oldest windows and still update the newer ones). Counted by the late-records metric.
    pub late_windows: u32,
}

impl ProcessOutput {
    /// Output that just emits `records`.
    pub fn emit(records: Vec<OutputRecord>) -> Self {
        Self {
            records,
            ..Self::default()
        }
    }

    /// Output for a dropped record.
    pub fn dropped(reason: DropReason) -> Self {
        Self {
            dropped: Some(reason),
            ..Self::default()
        }
    }
}
