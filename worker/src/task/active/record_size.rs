//! Record sizes: what the producer can send, decided before anything is sent. Pure.
//!
//! Kafka refuses a record larger than the producer's `message.max.bytes` ([`MAX_RECORD_BYTES`],
//! which `kafka_client` sets) and the topic's `max.message.bytes` (1 MiB + 12 by default, above
//! ours). A refused record fails the whole transaction, and a retry produces the same record
//! again: the partition is wedged for good. So every record derived from one input record (its
//! output records and the changelog records of the keys it changed) is checked first; a record
//! whose derived records do not fit is dead-lettered instead and its state changes are undone.
//! A dead-letter record that would not fit either carries only the reference (source topic,
//! partition, offset) in its headers, not the payload.

use crate::kafka_client::MAX_RECORD_BYTES;

/// What librdkafka counts on top of key, value and headers for one record (the v2 record
/// framing is at most about 40 bytes; this leaves room).
const FRAMING_BYTES: usize = 128;

/// Whether a record of these parts fits under [`MAX_RECORD_BYTES`].
pub fn fits(key: usize, value: usize, headers: usize) -> bool {
    key.saturating_add(value)
        .saturating_add(headers)
        .saturating_add(FRAMING_BYTES)
        <= MAX_RECORD_BYTES
}

/// A derived record that does not fit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Oversized {
    /// `output` or `changelog`.
    pub topic_role: &'static str,
    /// Key plus value bytes.
    pub bytes: usize,
}

impl std::fmt::Display for Oversized {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "a derived {} record of {} bytes (key and value) exceeds the {MAX_RECORD_BYTES}-byte record limit",
            self.topic_role, self.bytes
        )
    }
}

/// The first derived record of one input record that does not fit: `outputs` as (key, value)
/// lengths, `changes` the keys it changed with their new values (`None`: a tombstone).
pub fn first_oversized<'a>(
    outputs: impl IntoIterator<Item = (usize, usize)>,
    changes: impl IntoIterator<Item = (&'a [u8], Option<&'a [u8]>)>,
) -> Option<Oversized> {
    let output = outputs
        .into_iter()
        .find(|(key, value)| !fits(*key, *value, 0))
        .map(|(key, value)| Oversized {
            topic_role: "output",
            bytes: key + value,
        });
    output.or_else(|| {
        changes
            .into_iter()
            .map(|(key, value)| key.len() + value.map_or(0, <[u8]>::len))
            .find(|bytes| !fits(*bytes, 0, 0))
            .map(|bytes| Oversized {
                topic_role: "changelog",
                bytes,
            })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_up_to_the_limit_fit_and_one_byte_more_does_not() {
        let room = MAX_RECORD_BYTES - FRAMING_BYTES;
        assert!(fits(room - 10, 10, 0));
        assert!(!fits(room - 10, 11, 0));
        assert!(!fits(room, 0, 1));
        assert!(!fits(usize::MAX, usize::MAX, usize::MAX), "no overflow");
    }

    #[test]
    fn the_first_oversized_derived_record_is_named() {
        let big = vec![b'k'; 600_000];
        assert_eq!(
            first_oversized([(10, 20)], [(&b"ck"[..], Some(&b"1"[..]))]),
            None
        );
        assert_eq!(
            first_oversized([(600_000, 600_010)], []),
            Some(Oversized {
                topic_role: "output",
                bytes: 1_200_010
            })
        );
        let value = vec![b'v'; 500_000];
        let changes = [(&big[..], Some(&value[..]))];
        let oversized = first_oversized([(1, 1)], changes).unwrap();
        assert_eq!(oversized.topic_role, "changelog");
        assert!(
            oversized.to_string().contains("1100000 bytes"),
            "{oversized}"
        );
        assert_eq!(
            first_oversized([], [(&big[..], None)]),
            None,
            "a tombstone fits"
        );
    }
}
