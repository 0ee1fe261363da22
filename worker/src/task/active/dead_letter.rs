//! The dead-letter record of an input record the task will not process: the input's payload
//! with the reason and the source in headers, or, when that would not fit in a record, the
//! headers alone with `streamkeeper.payload-omitted` (the source partition and offset still
//! find the original).

use super::record_size;
use crate::processor::decode::DecodeError;
use rdkafka::message::{Header, OwnedHeaders};

/// The reason of a record whose output would not fit in a Kafka record.
pub const OVERSIZED: &str = "derived-record-too-large";

/// Every reason a record is dead-lettered for.
pub fn reasons() -> impl Iterator<Item = &'static str> {
    DecodeError::REASONS.into_iter().chain([OVERSIZED])
}

/// Why a record goes to the dead-letter topic and where it came from.
pub struct DeadLetter<'a> {
    /// Stable reason label (also the metric label).
    pub reason: &'a str,
    /// What exactly was wrong, for people.
    pub detail: String,
    pub topic: &'a str,
    pub partition: i32,
    pub offset: i64,
    /// Where the job's partitioner puts the record's key, when it was read elsewhere (a join's
    /// `not_co_partitioned`).
    pub expected_partition: Option<u32>,
}

impl<'a> DeadLetter<'a> {
    /// The dead letter of a record the pipeline refused for `error`, read at `partition` and
    /// `offset` of `topic`.
    pub fn refused(error: &DecodeError, topic: &'a str, partition: i32, offset: i64) -> Self {
        let expected_partition = match error {
            DecodeError::NotCoPartitioned { expected, .. } => Some(*expected),
            _ => None,
        };
        Self {
            reason: error.reason(),
            detail: error.to_string(),
            topic,
            partition,
            offset,
            expected_partition,
        }
    }
}

impl DeadLetter<'_> {
    /// The headers, and the payload to send with them (`None`: reference only).
    pub fn record<'p>(&self, payload: &'p [u8]) -> (OwnedHeaders, Option<&'p [u8]>) {
        let partition = self.partition.to_string();
        let offset = self.offset.to_string();
        let expected = self.expected_partition.map(|p| p.to_string());
        let mut fields = vec![
            ("streamkeeper.reason", self.reason),
            ("streamkeeper.detail", self.detail.as_str()),
            ("streamkeeper.source.topic", self.topic),
            ("streamkeeper.source.partition", partition.as_str()),
            ("streamkeeper.source.offset", offset.as_str()),
        ];
        if let Some(expected) = &expected {
            fields.push(("streamkeeper.expected-partition", expected.as_str()));
        }
        let header_bytes: usize = fields.iter().map(|(k, v)| k.len() + v.len()).sum();
        let keep_payload = record_size::fits(0, payload.len(), header_bytes + 64);
        if !keep_payload {
            fields.push(("streamkeeper.payload-omitted", "true"));
        }
        let headers = fields
            .into_iter()
            .fold(OwnedHeaders::new(), |headers, (key, value)| {
                headers.insert(Header {
                    key,
                    value: Some(value),
                })
            });
        (headers, keep_payload.then_some(payload))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rdkafka::message::Headers;

    fn letter() -> DeadLetter<'static> {
        DeadLetter {
            reason: "derived-record-too-large",
            detail: "too big".into(),
            topic: "in",
            partition: 3,
            offset: 77,
            expected_partition: None,
        }
    }

    fn header(headers: &OwnedHeaders, key: &str) -> Option<String> {
        headers
            .iter()
            .find(|h| h.key == key)
            .and_then(|h| h.value)
            .map(|v| String::from_utf8_lossy(v).into_owned())
    }

    #[test]
    fn a_small_record_keeps_its_payload_and_names_its_source() {
        let (headers, payload) = letter().record(b"{\"card\":1}");
        assert_eq!(payload, Some(&b"{\"card\":1}"[..]));
        assert_eq!(
            header(&headers, "streamkeeper.source.partition").unwrap(),
            "3"
        );
        assert_eq!(
            header(&headers, "streamkeeper.source.offset").unwrap(),
            "77"
        );
        assert_eq!(header(&headers, "streamkeeper.payload-omitted"), None);
    }

    #[test]
    fn a_misplaced_record_names_the_partition_its_key_belongs_in() {
        let error = DecodeError::NotCoPartitioned {
            key: "card-7".into(),
            partition: 1,
            expected: 2,
            partitioner: "murmur2",
            evidence: "its placement fits crc32".into(),
        };
        let (headers, _) = DeadLetter::refused(&error, "cards", 1, 5).record(b"{}");
        assert_eq!(
            header(&headers, "streamkeeper.reason").unwrap(),
            "not_co_partitioned"
        );
        assert_eq!(
            header(&headers, "streamkeeper.expected-partition").unwrap(),
            "2"
        );
        let (headers, _) = letter().record(b"{}");
        assert_eq!(header(&headers, "streamkeeper.expected-partition"), None);
    }

    #[test]
    fn a_record_too_large_to_forward_is_sent_as_a_reference() {
        let big = vec![b'x'; crate::kafka_client::MAX_RECORD_BYTES];
        let (headers, payload) = letter().record(&big);
        assert_eq!(payload, None);
        assert_eq!(
            header(&headers, "streamkeeper.payload-omitted").unwrap(),
            "true"
        );
        assert_eq!(
            header(&headers, "streamkeeper.reason").unwrap(),
            "derived-record-too-large"
        );
    }
}
