//! A decoder and a processor together: what the exactly-once loop calls per raw record.

use super::api::{ProcessError, Processor};
use super::config::{ConfigError, ProcessorConfig};
use super::decode::{DecodeError, RecordDecoder};
use super::record::ProcessOutput;
use super::state::StateAccess;

/// Decodes each raw input value and applies the processor to it.
pub struct Pipeline {
    decoder: RecordDecoder,
    processor: Box<dyn Processor>,
}

impl std::fmt::Debug for Pipeline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pipeline")
            .field("decoder", &self.decoder)
            .field("processor", &self.processor.kind())
            .finish()
    }
}

impl Pipeline {
    /// The pipeline of a built-in processor selection.
    pub fn from_config(config: &ProcessorConfig) -> Result<Self, ConfigError> {
        Ok(Self {
            processor: config.build_processor()?,
            decoder: config.decoder(),
        })
    }

    /// A pipeline around a custom processor (for a user's own worker binary).
    pub fn new(decoder: RecordDecoder, processor: Box<dyn Processor>) -> Self {
        Self { decoder, processor }
    }

    /// The processor's kind, for checkpoint manifests.
    pub fn kind(&self) -> &'static str {
        self.processor.kind()
    }

    /// Decodes `raw` (read at `partition`/`offset`, with the Kafka record timestamp
    /// `record_timestamp_ms` when it has one) and applies the processor.
    /// [`ProcessError::as_bad_record`] tells the loop whether to dead-letter the record.
    ///
    /// An event time more than [`MAX_EVENT_TIME_AHEAD_MS`] past the record's own Kafka
    /// timestamp is refused: stream time is persisted and only moves forward, so one record
    /// from year 9999 would make every later record late, for good. The Kafka timestamp is part
    /// of the record, so the rule decides the same on every replay.
    pub fn process(
        &self,
        raw: &[u8],
        partition: i32,
        offset: i64,
        record_timestamp_ms: Option<i64>,
        state: &mut dyn StateAccess,
    ) -> Result<ProcessOutput, ProcessError> {
        let record = self.decoder.decode(raw, partition, offset)?;
        if let (Some(event_time_ms), Some(record_timestamp_ms)) =
            (record.event_time_ms, record_timestamp_ms)
            && event_time_ms > record_timestamp_ms.saturating_add(MAX_EVENT_TIME_AHEAD_MS)
        {
            return Err(DecodeError::EventTimeTooFarAhead {
                event_time_ms,
                record_timestamp_ms,
            }
            .into());
        }
        self.processor.process(&record, state)
    }
}

/// How far an event time may lie ahead of its Kafka record's timestamp (one hour: producer
/// clocks drift by seconds, not hours; an event is normally stamped before it is sent).
pub const MAX_EVENT_TIME_AHEAD_MS: i64 = 3_600_000;

#[cfg(test)]
#[path = "pipeline_tests.rs"]
mod tests;
