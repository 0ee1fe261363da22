//! A join's settings as a job states them (which join, which mode, which fields and
//! durations), and the rules that make them valid. Building a [`JoinProcessor`] is the only
//! way past these rules, so the join logic never sees a setting that does not apply to it.

use serde::{Deserialize, Serialize};

use super::JoinProcessor;
use crate::processor::window::MAX_DURATION_MS;

/// What the left input is joined with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JoinKind {
    /// Another stream: records whose event times lie within a window of each other.
    Stream,
    /// A versioned table: the right record's version valid at the left record's time.
    Table,
}

impl JoinKind {
    /// Stable lower-case name, as in the JSON form.
    pub fn as_str(self) -> &'static str {
        match self {
            JoinKind::Stream => "stream",
            JoinKind::Table => "table",
        }
    }

    /// The processor kind (`Processor::kind`) of a join of this kind.
    pub fn processor_kind(self) -> &'static str {
        match self {
            JoinKind::Stream => "join-stream",
            JoinKind::Table => "join-table",
        }
    }
}

impl std::fmt::Display for JoinKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Which records without a partner are emitted too.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JoinMode {
    /// Only pairs.
    Inner,
    /// Pairs, and each left record that found no partner, with `null` for the right.
    Left,
    /// Pairs, and each record of either side that found no partner (stream joins only).
    Outer,
}

impl JoinMode {
    /// Stable lower-case name, as in the JSON form.
    pub fn as_str(self) -> &'static str {
        match self {
            JoinMode::Inner => "inner",
            JoinMode::Left => "left",
            JoinMode::Outer => "outer",
        }
    }
}

impl std::fmt::Display for JoinMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a join's settings are invalid.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JoinConfigError {
    /// `outer` on a table join: a table's versions are not records that can go unmatched.
    #[error("a `{join}` join cannot be `{mode}`: a table join is `inner` or `left`")]
    UnsupportedMode {
        /// The join kind.
        join: JoinKind,
        /// The mode asked for.
        mode: JoinMode,
    },
    /// A setting this kind of join needs is not given.
    #[error("a `{join}` join needs `{field}`")]
    Missing {
        /// The join kind.
        join: JoinKind,
        /// The setting.
        field: &'static str,
    },
    /// A setting of the other kind of join is given: refused rather than silently ignored.
    #[error("`{field}` does not apply to a `{join}` join")]
    NotApplicable {
        /// The join kind.
        join: JoinKind,
        /// The setting.
        field: &'static str,
    },
    /// A duration out of its range (the upper bound keeps all time arithmetic far from
    /// overflow, as for windows).
    #[error("`{field}` must be between {min} and {MAX_DURATION_MS} ms, got {value}")]
    Duration {
        /// The setting.
        field: &'static str,
        /// The value given.
        value: u64,
        /// The smallest value allowed.
        min: u64,
    },
}

/// The validated window of a stream-stream join: a left record at `tl` pairs with right
/// records at `tr` in `[tl - before_ms, tl + after_ms]`; records are accepted until stream time
/// passes the end of their window by more than `grace_ms`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamWindow {
    /// How far a right record may precede a left one.
    pub before_ms: u64,
    /// How far a right record may follow a left one.
    pub after_ms: u64,
    /// How long after a window's end out-of-order records are still accepted.
    pub grace_ms: u64,
}

/// A duration setting as an `i64` in `[min, MAX_DURATION_MS]`.
pub(super) fn duration(field: &'static str, value: u64, min: u64) -> Result<i64, JoinConfigError> {
    i64::try_from(value)
        .ok()
        .filter(|_| value >= min && value <= MAX_DURATION_MS)
        .ok_or(JoinConfigError::Duration { field, value, min })
}

/// The join settings of a processor config, borrowed from it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JoinSpec<'a> {
    /// Stream or table.
    pub join: JoinKind,
    /// Inner, left or outer.
    pub mode: JoinMode,
    /// The right stream's key field (stream joins only).
    pub right_key_field: Option<&'a str>,
    /// The right input's time field (required for a stream, optional for a table).
    pub right_time_field: Option<&'a str>,
    /// Stream joins: how far a right record may precede a left one.
    pub before_ms: Option<u64>,
    /// Stream joins: how far a right record may follow a left one.
    pub after_ms: Option<u64>,
    /// Stream joins: grace after a window's end (default 0).
    pub grace_ms: Option<u64>,
    /// Table joins: how far back in table time lookups stay exact.
    pub history_ms: Option<u64>,
}

impl JoinSpec<'_> {
    /// Checks the settings against the join kind and builds the processor.
    pub fn build(&self) -> Result<JoinProcessor, JoinConfigError> {
        let join = self.join;
        let missing = |field| JoinConfigError::Missing { join, field };
        let refuse = |field: &'static str, given: bool| {
            if given {
                Err(JoinConfigError::NotApplicable { join, field })
            } else {
                Ok(())
            }
        };
        match join {
            JoinKind::Stream => {
                refuse("history_ms", self.history_ms.is_some())?;
                self.right_key_field.ok_or(missing("right_key_field"))?;
                self.right_time_field.ok_or(missing("right_time_field"))?;
                let window = StreamWindow {
                    before_ms: self.before_ms.ok_or(missing("before_ms"))?,
                    after_ms: self.after_ms.ok_or(missing("after_ms"))?,
                    grace_ms: self.grace_ms.unwrap_or(0),
                };
                JoinProcessor::stream(self.mode, window)
            }
            JoinKind::Table => {
                if self.mode == JoinMode::Outer {
                    return Err(JoinConfigError::UnsupportedMode {
                        join,
                        mode: self.mode,
                    });
                }
                // The table's key is the Kafka record key: a tombstone has no field to read.
                refuse("right_key_field", self.right_key_field.is_some())?;
                refuse("before_ms", self.before_ms.is_some())?;
                refuse("after_ms", self.after_ms.is_some())?;
                refuse("grace_ms", self.grace_ms.is_some())?;
                let history_ms = self.history_ms.ok_or(missing("history_ms"))?;
                JoinProcessor::table(self.mode, history_ms)
            }
        }
    }
}
