//! A join's key placement, checked record by record: a record read from another partition than
//! the job's partitioner gives its key can never meet its matches (the other topic holds them in
//! that partition), so it is a bad record, `not_co_partitioned`. Every check is also counted as
//! evidence of which partitioner each topic's producers use ([`PlacementEvidence`]), which the
//! task reports and the operator's `CoPartitioned` condition states.

use super::decode::DecodeError;
use super::record::Side;
use std::sync::{Mutex, PoisonError};
use streamkeeper_contract::co_partitioning::{self, Partitioner, PlacementEvidence};

/// How a join's producers place keys, among how many partitions, and what the checks found.
#[derive(Debug)]
pub struct Placement {
    partitioner: Partitioner,
    partitions: u32,
    /// One per side, left first. Behind a lock, never contended: the pipeline processes
    /// through `&self` (and is shared), and the evidence is a tally beside the processing, not
    /// part of any state.
    evidence: Mutex<[PlacementEvidence; 2]>,
}

impl Placement {
    /// The placement of a join reading `left_topic` and `right_topic`, each of `partitions`.
    pub fn new(
        partitioner: Partitioner,
        partitions: u32,
        left_topic: &str,
        right_topic: &str,
    ) -> Self {
        Self {
            partitioner,
            partitions: partitions.max(1),
            evidence: Mutex::new([
                PlacementEvidence::new(left_topic),
                PlacementEvidence::new(right_topic),
            ]),
        }
    }

    /// The partition count the keys are placed by.
    pub fn partitions(&self) -> u32 {
        self.partitions
    }

    /// Counts a record of `key` read in `partition` from `side`; `Err` when it is not where
    /// this placement puts it, naming which known partitioner its placement fits instead.
    pub fn check(&self, side: Side, key: &str, partition: i32) -> Result<(), DecodeError> {
        let partition = u32::try_from(partition).unwrap_or(u32::MAX);
        let key_bytes = key.as_bytes();
        let index = match side {
            Side::Left => 0,
            Side::Right => 1,
        };
        let observed =
            self.tally()[index].observe(self.partitioner, key_bytes, partition, self.partitions);
        let Err(expected) = observed else {
            return Ok(());
        };
        let fits = co_partitioning::consistent_with(key_bytes, partition, self.partitions);
        let evidence = match fits.as_slice() {
            [] => "its placement fits neither murmur2 nor crc32 (a custom partitioner, or records written to chosen partitions)".to_string(),
            [one] => format!("its placement fits {}: the producer uses another partitioner than the job says", one.as_str()),
            _ => "its placement fits both partitioners".to_string(),
        };
        Err(DecodeError::NotCoPartitioned {
            key: key.to_string(),
            partition,
            expected,
            partitioner: self.partitioner.as_str(),
            evidence,
        })
    }

    /// The evidence so far, left topic first.
    pub fn evidence(&self) -> Vec<PlacementEvidence> {
        self.tally().to_vec()
    }

    fn tally(&self) -> std::sync::MutexGuard<'_, [PlacementEvidence; 2]> {
        // A count is never left half-updated, so a panic elsewhere leaves it readable.
        self.evidence.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A key murmur2 and crc32 place in different partitions among 4.
    fn key_placed_apart() -> String {
        (0..1000)
            .map(|i| format!("card-{i}"))
            .find(|key| {
                Partitioner::Murmur2.partition(key.as_bytes(), 4)
                    != Partitioner::Crc32.partition(key.as_bytes(), 4)
            })
            .unwrap()
    }

    #[test]
    fn a_misplaced_record_is_refused_naming_where_it_belongs_and_counted_on_its_side() {
        let placement = Placement::new(Partitioner::Murmur2, 4, "transactions", "cards");
        let key = key_placed_apart();
        let by_murmur2 = Partitioner::Murmur2.partition(key.as_bytes(), 4);
        let by_crc32 = Partitioner::Crc32.partition(key.as_bytes(), 4);
        let left = i32::try_from(by_murmur2).unwrap();
        let right = i32::try_from(by_crc32).unwrap();
        placement.check(Side::Left, &key, left).unwrap();
        let refused = placement.check(Side::Right, &key, right).unwrap_err();
        assert_eq!(refused.reason(), "not_co_partitioned");
        let text = refused.to_string();
        for part in [
            format!("belongs in partition {by_murmur2} by murmur2"),
            format!("read from partition {by_crc32}"),
            "its placement fits crc32".to_string(),
        ] {
            assert!(text.contains(&part), "{part}: {text}");
        }
        let [left, right] = <[PlacementEvidence; 2]>::try_from(placement.evidence()).unwrap();
        assert_eq!(
            (left.topic.as_str(), left.checked, left.misplaced),
            ("transactions", 1, 0)
        );
        assert_eq!(
            (right.topic.as_str(), right.checked, right.misplaced),
            ("cards", 1, 1)
        );
        assert_eq!(right.example.as_ref().unwrap().expected, by_murmur2);
        assert_eq!(right.fitting(), [Partitioner::Crc32]);
    }
}
