//! Co-partitioning, judged by evidence: which partition each partitioner puts a key in, and
//! what a record's actual partition says about the partitioner that placed it.
//!
//! A join reads partition `i` of both of its topics in one task, so a key must sit in the same
//! partition of both. Equal partition counts are necessary, not sufficient: two producers that
//! place keys differently (the Java client hashes with murmur2, librdkafka's default with
//! crc32) put a key in different partitions, and its records never meet. The worker checks each
//! record's partition against its key with [`fits`]; the operator compares partition counts
//! before anything starts ([`partition_counts`]).

use serde::{Deserialize, Serialize};

/// How a producer maps a key to a partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Partitioner {
    /// The Java client's default (`Utils.murmur2`, positive part, modulo the partition count);
    /// librdkafka's `murmur2` and `murmur2_random` match it.
    Murmur2,
    /// librdkafka's default for keyed records (`consistent` and `consistent_random`): CRC-32
    /// (IEEE) of the key, modulo the partition count.
    Crc32,
}

impl Partitioner {
    pub const ALL: [Partitioner; 2] = [Partitioner::Murmur2, Partitioner::Crc32];

    /// The name the job's spec and the conditions use.
    pub fn as_str(self) -> &'static str {
        match self {
            Partitioner::Murmur2 => "murmur2",
            Partitioner::Crc32 => "crc32",
        }
    }

    /// The partition this partitioner puts `key` in, among `partitions` (> 0).
    pub fn partition(self, key: &[u8], partitions: u32) -> u32 {
        let partitions = partitions.max(1);
        match self {
            Partitioner::Murmur2 => (murmur2(key) & 0x7fff_ffff) % partitions,
            Partitioner::Crc32 => crc32(key) % partitions,
        }
    }
}

/// Kafka's murmur2 as the Java client computes it (`org.apache.kafka.common.utils.Utils`),
/// as the unsigned bits of its `int`.
pub fn murmur2(data: &[u8]) -> u32 {
    const SEED: u32 = 0x9747_b28c;
    const M: u32 = 0x5bd1_e995;
    const R: u32 = 24;
    // The Java code takes the length as an int; keys are far below 2^31 bytes.
    let length = u32::try_from(data.len()).unwrap_or(u32::MAX);
    let mut h = SEED ^ length;
    let mut chunks = data.chunks_exact(4);
    for chunk in &mut chunks {
        let mut k = u32::from_le_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> R;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M);
        h ^= k;
    }
    let tail = chunks.remainder();
    if !tail.is_empty() {
        for (i, byte) in tail.iter().enumerate().rev() {
            h ^= u32::from(*byte) << (8 * i);
        }
        h = h.wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^= h >> 15;
    h
}

/// CRC-32 (IEEE 802.3, reflected, as zlib and librdkafka's `rd_crc32` compute it).
pub fn crc32(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for byte in data {
        crc ^= u32::from(*byte);
        for _ in 0..8 {
            let mask = (crc & 1).wrapping_neg();
            crc = (crc >> 1) ^ (0xedb8_8320 & mask);
        }
    }
    !crc
}

/// Whether a record of `key` read in `partition` of a topic of `partitions` could have been
/// placed there by `partitioner`.
pub fn fits(partitioner: Partitioner, key: &[u8], partition: u32, partitions: u32) -> bool {
    partitioner.partition(key, partitions) == partition
}

/// The partitioners a record's placement is consistent with (empty: none of the known ones,
/// e.g. a custom partitioner or records written to explicit partitions).
pub fn consistent_with(key: &[u8], partition: u32, partitions: u32) -> Vec<Partitioner> {
    Partitioner::ALL
        .into_iter()
        .filter(|partitioner| fits(*partitioner, key, partition, partitions))
        .collect()
}

/// The refusal of two topics whose partition counts differ: no key placement can make their
/// partitions meet.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "not co-partitioned: {left_topic} has {left_partitions} partitions and {right_topic} has {right_partitions}; a join needs equal counts (and the same partitioner)"
)]
pub struct PartitionCountMismatch {
    pub left_topic: String,
    pub left_partitions: i32,
    pub right_topic: String,
    pub right_partitions: i32,
}

/// The two sides' partition counts, judged: equal is the only co-partitioned case.
pub fn partition_counts(
    (left_topic, left_partitions): (&str, i32),
    (right_topic, right_partitions): (&str, i32),
) -> Result<(), PartitionCountMismatch> {
    if left_partitions == right_partitions {
        return Ok(());
    }
    Err(PartitionCountMismatch {
        left_topic: left_topic.to_string(),
        left_partitions,
        right_topic: right_topic.to_string(),
        right_partitions,
    })
}

/// A join topic whose partition count is no longer the one the job's keys are placed by (its
/// task count, which is its changelog's partition count): someone added partitions after the
/// job started, and a key's records now sit in other partitions than its state.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{topic} has {partitions} partitions, but the job's keys are placed by {placed_by} (its tasks, and its changelog): a key's records now sit in other partitions than its state; recreate the job to place its keys by the new count"
)]
pub struct PartitionsChanged {
    pub topic: String,
    pub partitions: i32,
    pub placed_by: i32,
}

/// Each of a started join's `topics` (name, partition count) against `placed_by`, the count
/// its keys are placed by: the first that differs, if any.
pub fn still_placed_by(placed_by: i32, topics: &[(&str, i32)]) -> Result<(), PartitionsChanged> {
    match topics
        .iter()
        .find(|(_, partitions)| *partitions != placed_by)
    {
        None => Ok(()),
        Some((topic, partitions)) => Err(PartitionsChanged {
            topic: (*topic).to_string(),
            partitions: *partitions,
            placed_by,
        }),
    }
}

/// The longest example key a report carries: enough to find the record, never a payload.
pub const EXAMPLE_KEY_CHARS: usize = 128;

/// What a join's task has seen of one topic's key placement since it last started: how many
/// records it checked, how many of them each known partitioner would have placed where they
/// were, and the ones not where the job's partitioner puts them. The operator's
/// `CoPartitioned` condition is drawn from it (`GET /v1/tasks`, `placement`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PlacementEvidence {
    pub topic: String,
    /// Records whose partition was checked against their key.
    pub checked: u64,
    /// Of those, how many murmur2 would have placed in the partition they were read from.
    pub fit_murmur2: u64,
    /// Of those, how many crc32 would have placed there.
    pub fit_crc32: u64,
    /// Records not where the job's partitioner puts their key (dead-lettered).
    pub misplaced: u64,
    /// The first misplaced record.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub example: Option<MisplacedRecord>,
}

/// A record read from another partition than the job's partitioner gives its key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MisplacedRecord {
    /// Its join key, cut to [`EXAMPLE_KEY_CHARS`] characters.
    pub key: String,
    pub partition: u32,
    /// Where the job's partitioner puts the key.
    pub expected: u32,
}

impl PlacementEvidence {
    pub fn new(topic: &str) -> Self {
        Self {
            topic: topic.to_string(),
            ..Self::default()
        }
    }

    /// Counts a record of `key` read in `partition` of `partitions`; `Err` with the partition
    /// `partitioner` (the job's) gives the key when the record is not there.
    pub fn observe(
        &mut self,
        partitioner: Partitioner,
        key: &[u8],
        partition: u32,
        partitions: u32,
    ) -> Result<(), u32> {
        self.checked += 1;
        let by_murmur2 = Partitioner::Murmur2.partition(key, partitions);
        let by_crc32 = Partitioner::Crc32.partition(key, partitions);
        self.fit_murmur2 += u64::from(by_murmur2 == partition);
        self.fit_crc32 += u64::from(by_crc32 == partition);
        let expected = match partitioner {
            Partitioner::Murmur2 => by_murmur2,
            Partitioner::Crc32 => by_crc32,
        };
        if expected == partition {
            return Ok(());
        }
        self.misplaced += 1;
        if self.example.is_none() {
            self.example = Some(MisplacedRecord {
                key: String::from_utf8_lossy(key)
                    .chars()
                    .take(EXAMPLE_KEY_CHARS)
                    .collect(),
                partition,
                expected,
            });
        }
        Err(expected)
    }

    /// How many checked records `partitioner` would have placed where they were.
    pub fn fit(&self, partitioner: Partitioner) -> u64 {
        match partitioner {
            Partitioner::Murmur2 => self.fit_murmur2,
            Partitioner::Crc32 => self.fit_crc32,
        }
    }

    /// The partitioners that placed every checked record where it was: the ones the topic's
    /// producers may use. Empty when none did (a custom partitioner, records written to chosen
    /// partitions) or nothing was checked.
    pub fn fitting(&self) -> Vec<Partitioner> {
        if self.checked == 0 {
            return Vec::new();
        }
        Partitioner::ALL
            .into_iter()
            .filter(|partitioner| self.fit(*partitioner) == self.checked)
            .collect()
    }

    /// Adds another task's evidence of the same topic; the first example stays.
    pub fn add(&mut self, other: &PlacementEvidence) {
        self.checked += other.checked;
        self.fit_murmur2 += other.fit_murmur2;
        self.fit_crc32 += other.fit_crc32;
        self.misplaced += other.misplaced;
        if self.example.is_none() {
            self.example.clone_from(&other.example);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Kafka's own vectors (`UtilsTest.testMurmur2` in the Java client), as signed ints.
    #[test]
    fn murmur2_matches_the_java_clients_vectors() {
        let cases: [(&[u8], i32); 6] = [
            (b"21", -973_932_308),
            (b"foobar", -790_332_482),
            (b"a-little-bit-long-string", -985_981_536),
            (b"a-little-bit-longer-string", -1_486_304_829),
            (
                b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8",
                -58_897_971,
            ),
            (b"abc", 479_470_107),
        ];
        for (key, java) in cases {
            assert_eq!(murmur2(key).cast_signed(), java, "{key:?}");
        }
    }

    #[test]
    fn crc32_matches_the_ieee_check_value() {
        assert_eq!(crc32(b"123456789"), 0xcbf4_3926);
        assert_eq!(crc32(b""), 0);
        assert_eq!(
            crc32(b"The quick brown fox jumps over the lazy dog"),
            0x414f_a339
        );
    }

    #[test]
    fn the_evidence_names_the_partitioners_a_placement_fits() {
        // A key the two partitioners place apart among 8 partitions.
        let key = (0..1000)
            .map(|i| format!("card-{i}"))
            .find(|key| {
                Partitioner::Murmur2.partition(key.as_bytes(), 8)
                    != Partitioner::Crc32.partition(key.as_bytes(), 8)
            })
            .unwrap();
        let key = key.as_bytes();
        let by_murmur = Partitioner::Murmur2.partition(key, 8);
        let by_crc = Partitioner::Crc32.partition(key, 8);
        assert_eq!(consistent_with(key, by_murmur, 8), [Partitioner::Murmur2]);
        assert_eq!(consistent_with(key, by_crc, 8), [Partitioner::Crc32]);
        let neither = (0..8).find(|p| *p != by_murmur && *p != by_crc).unwrap();
        assert!(consistent_with(key, neither, 8).is_empty());
        // One partition: every placement fits every partitioner.
        assert_eq!(consistent_with(key, 0, 1), Partitioner::ALL);
    }

    #[test]
    fn unequal_partition_counts_are_refused_naming_both_topics() {
        assert_eq!(partition_counts(("a", 6), ("b", 6)), Ok(()));
        let refused = partition_counts(("transactions", 6), ("cards", 4)).unwrap_err();
        let text = refused.to_string();
        for part in ["transactions has 6", "cards has 4"] {
            assert!(text.contains(part), "{text}");
        }
    }

    #[test]
    fn a_started_joins_topic_with_another_count_is_named_with_both_counts() {
        assert_eq!(
            still_placed_by(4, &[("transactions", 4), ("cards", 4)]),
            Ok(())
        );
        let changed = still_placed_by(4, &[("transactions", 4), ("cards", 6)]).unwrap_err();
        assert_eq!(changed.topic, "cards");
        let text = changed.to_string();
        for part in ["cards has 6 partitions", "placed by 4"] {
            assert!(text.contains(part), "{text}");
        }
        // Both topics expanded alike still place keys elsewhere than the state.
        assert!(still_placed_by(4, &[("transactions", 8), ("cards", 8)]).is_err());
    }

    #[test]
    fn partitioner_names_round_trip() {
        for partitioner in Partitioner::ALL {
            let json = serde_json::to_string(&partitioner).unwrap();
            assert_eq!(json, format!("\"{}\"", partitioner.as_str()));
            let back: Partitioner = serde_json::from_str(&json).unwrap();
            assert_eq!(back, partitioner);
        }
    }

    /// Keys among `count` card names that the two partitioners place apart among 8 partitions.
    fn keys_placed_apart(count: usize) -> Vec<String> {
        (0..1000)
            .map(|i| format!("card-{i}"))
            .filter(|key| {
                Partitioner::Murmur2.partition(key.as_bytes(), 8)
                    != Partitioner::Crc32.partition(key.as_bytes(), 8)
            })
            .take(count)
            .collect()
    }

    #[test]
    fn evidence_of_a_crc32_producer_under_a_murmur2_job_names_a_misplaced_key() {
        let mut evidence = PlacementEvidence::new("cards");
        for key in keys_placed_apart(20) {
            let partition = Partitioner::Crc32.partition(key.as_bytes(), 8);
            let expected = Partitioner::Murmur2.partition(key.as_bytes(), 8);
            assert_eq!(
                evidence.observe(Partitioner::Murmur2, key.as_bytes(), partition, 8),
                Err(expected)
            );
        }
        assert_eq!((evidence.checked, evidence.misplaced), (20, 20));
        assert_eq!(evidence.fitting(), [Partitioner::Crc32]);
        let example = evidence.example.clone().unwrap();
        assert_eq!(example.key, keys_placed_apart(1)[0]);
        assert_ne!(example.partition, example.expected);
        // Placed right by the job's own partitioner: fits it, nothing misplaced.
        let mut right = PlacementEvidence::new("transactions");
        for key in keys_placed_apart(20) {
            let partition = Partitioner::Murmur2.partition(key.as_bytes(), 8);
            assert_eq!(
                right.observe(Partitioner::Murmur2, key.as_bytes(), partition, 8),
                Ok(())
            );
        }
        assert_eq!(right.fitting(), [Partitioner::Murmur2]);
        assert_eq!(right.misplaced, 0);
        assert_eq!(right.example, None);
    }

    #[test]
    fn evidence_adds_up_across_tasks_keeping_the_first_example_and_round_trips() {
        let key = keys_placed_apart(1).remove(0);
        let misplaced_at = Partitioner::Crc32.partition(key.as_bytes(), 8);
        let mut first = PlacementEvidence::new("cards");
        first
            .observe(Partitioner::Murmur2, b"card-x", 0, 1)
            .unwrap();
        let mut second = PlacementEvidence::new("cards");
        let _ = second.observe(Partitioner::Murmur2, key.as_bytes(), misplaced_at, 8);
        first.add(&second);
        assert_eq!((first.checked, first.misplaced), (2, 1));
        assert_eq!(first.example, second.example);
        // A record written to a partition neither partitioner gives: no partitioner fits all.
        let elsewhere = (0..8)
            .find(|p| *p != misplaced_at && *p != Partitioner::Murmur2.partition(key.as_bytes(), 8))
            .unwrap();
        let _ = first.observe(Partitioner::Murmur2, key.as_bytes(), elsewhere, 8);
        assert!(first.fitting().is_empty());
        assert!(PlacementEvidence::new("none").fitting().is_empty());

        let json = serde_json::to_value(&first).unwrap();
        assert_eq!(json["topic"], "cards");
        assert_eq!(json["fitMurmur2"], first.fit_murmur2);
        assert_eq!(json["example"]["key"], key);
        let back: PlacementEvidence = serde_json::from_value(json).unwrap();
        assert_eq!(back, first);
        let quiet = serde_json::to_string(&PlacementEvidence::new("t")).unwrap();
        assert!(!quiet.contains("example"), "{quiet}");
    }

    #[test]
    fn an_example_key_is_cut_to_a_readable_length() {
        let long = "k".repeat(1000);
        let mut evidence = PlacementEvidence::new("t");
        let wrong = (Partitioner::Murmur2.partition(long.as_bytes(), 8) + 1) % 8;
        let _ = evidence.observe(Partitioner::Murmur2, long.as_bytes(), wrong, 8);
        assert_eq!(
            evidence.example.unwrap().key.chars().count(),
            EXAMPLE_KEY_CHARS
        );
    }
}
