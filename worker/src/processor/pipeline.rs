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
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;
    use crate::processor::record::{InputRecord, OutputRecord};
    use crate::processor::state::MemoryState;

    /// A user-defined processor: echoes the key's length. Shows the trait is implementable
    /// outside the built-ins and drives through the same pipeline.
    struct KeyLength;

    impl Processor for KeyLength {
        fn kind(&self) -> &'static str {
            "key_length"
        }

        fn process(
            &self,
            record: &InputRecord<'_>,
            state: &mut dyn StateAccess,
        ) -> Result<ProcessOutput, ProcessError> {
            state.put(record.key.as_bytes(), vec![1])?;
            Ok(ProcessOutput::emit(vec![OutputRecord {
                key: record.key.clone().into_bytes(),
                value: record.key.len().to_string().into_bytes(),
            }]))
        }
    }

    #[test]
    fn custom_processor_runs_through_the_pipeline() {
        let p = Pipeline::new(RecordDecoder::new("k", None), Box::new(KeyLength));
        let mut s = MemoryState::new();
        let out = p.process(br#"{"k":"abc"}"#, 0, 0, None, &mut s).unwrap();
        assert_eq!(out.records[0].value, b"3".to_vec());
        assert_eq!(s.get(b"abc").unwrap(), Some(vec![1]));
        assert_eq!(p.kind(), "key_length");
    }

    #[test]
    fn bad_records_are_flagged_for_the_dead_letter_topic_and_write_nothing() {
        let config: ProcessorConfig = serde_json::from_str(
            r#"{"key_field":"k","time_field":"t","processor":{"kind":"aggregate",
                "value_field":"v","window":{"type":"tumbling","size_ms":10}}}"#,
        )
        .unwrap();
        let p = Pipeline::from_config(&config).unwrap();
        let mut s = MemoryState::new();
        p.process(br#"{"k":"a","t":1,"v":1}"#, 0, 0, None, &mut s)
            .unwrap();
        let before = s.clone();
        for (raw, reason) in [
            (&b"not json"[..], "not_json"),
            (br#"[]"#, "not_an_object"),
            (br#"{"t":1,"v":1}"#, "missing_field"),
            (br#"{"k":"a","v":1}"#, "missing_field"),
            (br#"{"k":"a","t":1}"#, "missing_field"),
            (br#"{"k":"a","t":1,"v":"1"}"#, "wrong_type"),
            (br#"{"k":"a","t":"soon","v":1}"#, "bad_timestamp"),
        ] {
            let err = p.process(raw, 0, 1, None, &mut s).unwrap_err();
            assert_eq!(err.category(), "bad_record");
            assert_eq!(err.as_bad_record().map(|e| e.reason()), Some(reason));
            assert_eq!(s, before, "a bad record leaves no trace in state");
        }
    }

    #[test]
    fn an_event_time_far_past_its_record_timestamp_is_refused() {
        let config = crate::processor::config::ProcessorConfig {
            key_field: "k".into(),
            time_field: Some("t".into()),
            processor: crate::processor::config::ProcessorKind::Count {},
        };
        let p = Pipeline::from_config(&config).unwrap();
        let mut s = MemoryState::new();
        let at = 1_764_000_000_000i64;
        let near = format!(r#"{{"k":"a","t":{}}}"#, at + MAX_EVENT_TIME_AHEAD_MS);
        p.process(near.as_bytes(), 0, 0, Some(at), &mut s).unwrap();
        let far = r#"{"k":"a","t":"9999-12-31T00:00:00Z"}"#;
        let error = p
            .process(far.as_bytes(), 0, 1, Some(at), &mut s)
            .unwrap_err();
        assert_eq!(
            error.as_bad_record().map(|b| b.reason()),
            Some("event_time_too_far_ahead")
        );
        // Without a record timestamp there is nothing to compare with.
        p.process(far.as_bytes(), 0, 2, None, &mut s).unwrap();
    }
}
