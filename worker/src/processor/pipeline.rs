//! A decoder and a processor together: what the exactly-once loop calls per raw record.

use super::api::{ProcessError, Processor};
use super::config::{ConfigError, ProcessorConfig};
use super::decode::RecordDecoder;
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

    /// Decodes `raw` (read at `partition`/`offset`) and applies the processor.
    /// [`ProcessError::as_bad_record`] tells the loop whether to dead-letter the record.
    pub fn process(
        &self,
        raw: &[u8],
        partition: i32,
        offset: i64,
        state: &mut dyn StateAccess,
    ) -> Result<ProcessOutput, ProcessError> {
        let record = self.decoder.decode(raw, partition, offset)?;
        self.processor.process(&record, state)
    }
}

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
        let out = p.process(br#"{"k":"abc"}"#, 0, 0, &mut s).unwrap();
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
        p.process(br#"{"k":"a","t":1,"v":1}"#, 0, 0, &mut s)
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
            let err = p.process(raw, 0, 1, &mut s).unwrap_err();
            assert_eq!(err.category(), "bad_record");
            assert_eq!(err.as_bad_record().map(|e| e.reason()), Some(reason));
            assert_eq!(s, before, "a bad record leaves no trace in state");
        }
    }
}
