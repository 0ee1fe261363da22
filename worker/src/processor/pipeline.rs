//! A decoder and a processor together: what the exactly-once loop calls per raw record.
//!
//! A single-input job goes through [`Pipeline::process`]. A join reads two inputs in one task
//! and goes through [`Pipeline::process_input`], which says which input a record came from and
//! carries what a table record needs beyond its value (its Kafka key; a null value).

use super::api::{ProcessError, Processor};
use super::config::{ConfigError, ProcessorConfig};
use super::decode::{DecodeError, RecordDecoder, RightDecoder};
use super::placement::Placement;
use super::record::{InputRecord, KafkaMeta, ProcessOutput, Side};
use super::state::StateAccess;
use streamkeeper_contract::co_partitioning::PlacementEvidence;

/// One raw Kafka record of either input, as the loop read it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawInput<'a> {
    /// Which input it was read from.
    pub side: Side,
    /// The Kafka record key (a table input's key; ignored for stream inputs).
    pub kafka_key: Option<&'a [u8]>,
    /// The Kafka record value; `None` when null (a tombstone on a table input, a bad record on
    /// any other).
    pub payload: Option<&'a [u8]>,
    /// Input partition (= task id).
    pub partition: i32,
    /// Offset in its input partition.
    pub offset: i64,
    /// The Kafka record timestamp, when it has one.
    pub timestamp_ms: Option<i64>,
    /// The Kafka record's headers, in order (empty when it has none).
    pub headers: Vec<(&'a str, Option<&'a [u8]>)>,
}

impl<'a> RawInput<'a> {
    /// A record of the (only or left) input with a value, no Kafka key and no headers.
    pub fn left(payload: &'a [u8], partition: i32, offset: i64, timestamp_ms: Option<i64>) -> Self {
        Self {
            side: Side::Left,
            kafka_key: None,
            payload: Some(payload),
            partition,
            offset,
            timestamp_ms,
            headers: Vec::new(),
        }
    }
}

/// Decodes each raw input value and applies the processor to it.
pub struct Pipeline {
    decoder: RecordDecoder,
    right: Option<RightDecoder>,
    processor: Box<dyn Processor>,
    /// A join's key placement: each record's partition is checked against its key.
    placement: Option<Placement>,
}

impl std::fmt::Debug for Pipeline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pipeline")
            .field("decoder", &self.decoder)
            .field("right", &self.right)
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
            right: config.right_decoder(),
            placement: None,
        })
    }

    /// A pipeline around a custom processor (for a user's own worker binary) reading one input.
    pub fn new(decoder: RecordDecoder, processor: Box<dyn Processor>) -> Self {
        Self {
            decoder,
            right: None,
            processor,
            placement: None,
        }
    }

    /// Checks every record's partition against its key by `placement` from now on (a join's
    /// task, once it knows its topics' partition count): a misplaced record is a bad record,
    /// `not_co_partitioned`.
    pub fn set_placement(&mut self, placement: Placement) {
        self.placement = Some(placement);
    }

    /// What the placement checks have found so far (empty when records are not checked).
    pub fn placement_evidence(&self) -> Vec<PlacementEvidence> {
        self.placement
            .as_ref()
            .map(Placement::evidence)
            .unwrap_or_default()
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
        let input = RawInput::left(raw, partition, offset, record_timestamp_ms);
        self.process_input(&input, state)
    }

    /// Decodes a record of either input with that input's decoder and applies the processor,
    /// like [`Pipeline::process`] (the same event-time rule holds on both inputs). A right
    /// record on a pipeline with one input is [`ProcessError::UnexpectedSide`]: a wiring fault,
    /// not a bad record.
    pub fn process_input(
        &self,
        input: &RawInput<'_>,
        state: &mut dyn StateAccess,
    ) -> Result<ProcessOutput, ProcessError> {
        let record = self.decode(input)?;
        if let Some(placement) = &self.placement {
            placement.check(input.side, &record.key, input.partition)?;
        }
        if let (Some(event_time_ms), Some(record_timestamp_ms)) =
            (record.event_time_ms, input.timestamp_ms)
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

    /// The join key of a record of a re-keyed side, read as the join will read it; a record
    /// without one is a bad record here already.
    pub fn join_key(&self, input: &RawInput<'_>) -> Result<String, ProcessError> {
        Ok(self.decode(input)?.key)
    }

    fn decode<'a>(&self, input: &'a RawInput<'_>) -> Result<InputRecord<'a>, ProcessError> {
        let value = || input.payload.ok_or(DecodeError::NullValue);
        let (partition, offset) = (input.partition, input.offset);
        let record = match (input.side, &self.right) {
            (Side::Left, _) => self.decoder.decode(value()?, partition, offset)?,
            (Side::Right, Some(RightDecoder::Stream(decoder))) => {
                decoder.decode(value()?, partition, offset)?
            }
            (Side::Right, Some(RightDecoder::Table(decoder))) => decoder.decode(
                input.kafka_key,
                input.payload,
                partition,
                offset,
                input.timestamp_ms,
            )?,
            (Side::Right, None) => {
                return Err(ProcessError::UnexpectedSide { side: Side::Right });
            }
        };
        Ok(InputRecord {
            kafka: KafkaMeta {
                key: input.kafka_key,
                headers: &input.headers,
                timestamp_ms: input.timestamp_ms,
            },
            ..record
        })
    }
}

/// How far an event time may lie ahead of its Kafka record's timestamp (one hour: producer
/// clocks drift by seconds, not hours; an event is normally stamped before it is sent).
pub const MAX_EVENT_TIME_AHEAD_MS: i64 = 3_600_000;

#[cfg(test)]
#[path = "pipeline_tests.rs"]
mod tests;
