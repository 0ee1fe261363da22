//! The [`Processor`] trait: the contract between the exactly-once loop and the logic that
//! turns records into state changes and output. Implement it to build a worker with custom
//! logic; the built-in processors implement it the same way.

use super::codec::StateCodecError;
use super::decode::DecodeError;
use super::record::{InputRecord, ProcessOutput, Side};
use super::state::{StateAccess, StateError};

/// Why processing a record failed.
#[derive(Debug, thiserror::Error)]
pub enum ProcessError {
    /// The record itself is bad: dead-letter it and go on. Returned before any state write,
    /// so the overlay holds nothing of this record.
    #[error("bad record: {0}")]
    BadRecord(#[from] DecodeError),
    /// The state backend failed: abort the batch (its transaction and overlay) and retry.
    #[error(transparent)]
    State(#[from] StateError),
    /// A stored value or key is not in a format this worker reads: stop the task rather than
    /// overwrite state it does not understand.
    #[error("state at key {key} is unreadable")]
    CorruptState {
        /// The state key, escaped for display.
        key: String,
        /// What is wrong with it.
        #[source]
        source: StateCodecError,
    },
    /// The processor needs event time but the record has none (no time field configured).
    /// A configuration error, caught when the processor is built; kept as a typed error so
    /// a custom processor can report it too.
    #[error("processor `{processor}` needs event time but no time field is configured")]
    NoEventTime {
        /// The processor kind.
        processor: &'static str,
    },
    /// An output value could not be serialised.
    #[error("could not encode output: {0}")]
    Encode(#[source] serde_json::Error),
    /// A record of an input the pipeline does not read (the right side, for a processor with
    /// one input). The caller's wiring is wrong, not the record: fatal for the batch.
    #[error("the pipeline reads no {side} input")]
    UnexpectedSide {
        /// The side the record was said to come from.
        side: Side,
    },
    /// A custom processor's own failure; fatal for the batch, like [`ProcessError::State`].
    #[error("processor failed: {0}")]
    Custom(#[source] Box<dyn std::error::Error + Send + Sync>),
}

impl ProcessError {
    /// A stable category for metrics labels and logs.
    pub fn category(&self) -> &'static str {
        match self {
            ProcessError::BadRecord(_) => "bad_record",
            ProcessError::State(_) => "state_backend",
            ProcessError::CorruptState { .. } => "corrupt_state",
            ProcessError::NoEventTime { .. } => "no_event_time",
            ProcessError::Encode(_) => "encode",
            ProcessError::UnexpectedSide { .. } => "unexpected_side",
            ProcessError::Custom(_) => "custom",
        }
    }

    /// The decode error when the record should go to the dead-letter topic; `None` when the
    /// failure is not the record's fault and the batch must be aborted instead.
    pub fn as_bad_record(&self) -> Option<&DecodeError> {
        match self {
            ProcessError::BadRecord(e) => Some(e),
            _ => None,
        }
    }

    /// The record is unusable for the processor, for `reason`: it goes to the dead-letter
    /// topic (headers `streamkeeper.reason: rejected` and `streamkeeper.detail`: the reason) and the
    /// task goes on; the loop undoes the call's state writes.
    pub fn rejected(reason: impl Into<String>) -> Self {
        ProcessError::BadRecord(DecodeError::Rejected {
            detail: reason.into(),
        })
    }

    /// A [`ProcessError::CorruptState`] for `key`.
    pub fn corrupt(key: &[u8], source: StateCodecError) -> Self {
        ProcessError::CorruptState {
            key: key.escape_ascii().to_string(),
            source,
        }
    }
}

/// Logic applied to each record of a task.
///
/// The loop calls [`Processor::process`] once per decoded record, in input offset order,
/// with the task's state view; it produces the returned output and every state change the
/// call recorded in one Kafka transaction.
///
/// Rules an implementation must follow so that recovery is exact:
/// - **Deterministic.** The same record against the same state gives the same state changes
///   and output, byte for byte. Use the record's event time, never the wall clock, random
///   numbers, or iteration order of hash maps.
/// - **All state in `state`.** `process` takes `&self`: anything kept in the processor
///   itself would be lost on restore and missing on a promoted standby.
/// - **Full values.** `put` a key's complete new value; the changelog carries it as is.
/// - **A bad record leaves no trace.** Return [`ProcessError::BadRecord`] for a record that
///   cannot be applied: the loop undoes every write the call made, sends the record to the
///   dead-letter topic, and the rest of the batch commits. Any other error aborts the whole
///   batch. Either way, writes made before the error do no harm.
pub trait Processor: Send + Sync {
    /// A stable name of the logic and its state layout (`count`, `aggregate`, `dedup`,
    /// `join-stream`, `join-table`), recorded in checkpoint manifests so a checkpoint is never
    /// restored into different logic.
    fn kind(&self) -> &'static str;

    /// Applies one record.
    fn process(
        &self,
        record: &InputRecord<'_>,
        state: &mut dyn StateAccess,
    ) -> Result<ProcessOutput, ProcessError>;
}
