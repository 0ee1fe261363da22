//! The topic partitions an active task reads, and what it does with each one's records.
//!
//! Every job joins (or counts, aggregates, dedups) partition `task` of its input topic, the
//! left side; a join also partition `task` of its right topic. A **re-keyed** join side is
//! read twice over: task `i` of `n` reads the partitions `p` of the side's own topic with
//! `p mod n == i` and writes each record, keyed by its join key, to the side's repartition
//! topic (the partition the join's partitioner gives the key among `n`), in its transaction;
//! and it joins partition `i` of the repartition topic, which thereby holds every record of
//! its keys, from every task. This is Kafka Streams' repartition topic for a changed key.
//! A side read **whole** (a global table) is read from every one of its partitions by every
//! task: each task holds the whole table, so no key needs to be placed.
//!
//! Each source partition's position travels in the state under its own key, is committed as a
//! group offset in the task's transaction, and is resumed by the same rule (`input_position`);
//! each topic's identity is checked the same way (`input_identity`).

use crate::processor::Side;
use crate::processor::keys;
use std::borrow::Cow;
use std::collections::BTreeMap;
use streamkeeper_contract::WorkerConfig;

/// A partition a task reads, by what the task does with its records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Source {
    /// Partition `task` of the topic a side's records are joined from: the side's topic, or
    /// its repartition topic when it is re-keyed. A job with one input reads `Joined(Left)`.
    Joined(Side),
    /// Partition `p` of a re-keyed side's own topic, whose records go to its repartition
    /// topic.
    Rekeyed(Side, i32),
    /// Partition `p` of a side every task reads whole (a global table): its records are
    /// joined.
    Whole(Side, i32),
}

impl Source {
    /// The side whose records these are.
    pub fn side(self) -> Side {
        match self {
            Source::Joined(side) | Source::Rekeyed(side, _) | Source::Whole(side, _) => side,
        }
    }
}

/// One topic partition the task reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Read {
    pub source: Source,
    pub topic: String,
    pub partition: i32,
}

/// How a job reads one side, as its config says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SideTopics {
    pub side: Side,
    /// The side's own topic.
    pub topic: String,
    /// The repartition topic, when the side is re-keyed.
    pub repartition: Option<String>,
    /// Every task reads every partition of the side's topic (a global table).
    pub whole: bool,
}

impl SideTopics {
    /// The topic whose partition `task` the side's records are joined from.
    pub fn joined(&self) -> &str {
        self.repartition.as_deref().unwrap_or(&self.topic)
    }
}

/// How `config`'s job reads each side: its input, and a join's right topic.
pub fn sides_of(config: &WorkerConfig) -> Vec<SideTopics> {
    let processor = &config.processor;
    let mut sides = vec![SideTopics {
        side: Side::Left,
        topic: config.kafka.input_topic.clone(),
        repartition: processor.left_repartition_topic().map(str::to_string),
        whole: false,
    }];
    if let Some(right) = processor.right_topic() {
        sides.push(SideTopics {
            side: Side::Right,
            topic: right.to_string(),
            repartition: processor.right_repartition_topic().map(str::to_string),
            whole: processor.right_read_whole(),
        });
    }
    sides
}

/// The partitions task `task` of `tasks` reads (pure). `source_partitions` gives the partition
/// count of each side's own topic that is re-keyed or read whole; a side missing there reads
/// none of it.
pub fn plan(
    task: u32,
    tasks: u32,
    sides: &[SideTopics],
    source_partitions: &BTreeMap<Side, u32>,
) -> Vec<Read> {
    let partition = i32::try_from(task).unwrap_or(i32::MAX);
    let count = |side: &SideTopics| source_partitions.get(&side.side).copied().unwrap_or(0);
    let mut reads = Vec::new();
    for side in sides {
        if side.whole {
            for p in 0..count(side) {
                let p = i32::try_from(p).unwrap_or(i32::MAX);
                reads.push(Read {
                    source: Source::Whole(side.side, p),
                    topic: side.topic.clone(),
                    partition: p,
                });
            }
            continue;
        }
        reads.push(Read {
            source: Source::Joined(side.side),
            topic: side.joined().to_string(),
            partition,
        });
    }
    for side in sides.iter().filter(|side| side.repartition.is_some()) {
        for p in (0..count(side)).filter(|p| p % tasks.max(1) == task) {
            let p = i32::try_from(p).unwrap_or(i32::MAX);
            reads.push(Read {
                source: Source::Rekeyed(side.side, p),
                topic: side.topic.clone(),
                partition: p,
            });
        }
    }
    reads
}

/// Whether the side reads partitions of its own topic besides (or instead of) partition `task`:
/// it is re-keyed, or read whole. Its partition count is then read, and watched.
pub fn reads_own_partitions(side: &SideTopics) -> bool {
    side.repartition.is_some() || side.whole
}

/// Whether task `task` of `tasks` is dealt any of the partitions a re-keyed topic (or, `whole`,
/// a topic every task reads whole) got when its count went from `planned` to `now` (pure).
pub fn dealt_new_partitions(task: u32, tasks: u32, planned: u32, now: u32, whole: bool) -> bool {
    (planned..now).any(|p| whole || p % tasks.max(1) == task)
}

/// Where each source resumes after a transaction: only the sources it consumed from.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Positions(BTreeMap<Source, i64>);

impl Positions {
    /// `source` at `next`, nothing else moved.
    pub fn of(source: Source, next: i64) -> Self {
        let mut positions = Self::default();
        positions.set(source, next);
        positions
    }

    /// `source` resumes at `next`.
    pub fn set(&mut self, source: Source, next: i64) {
        self.0.insert(source, next);
    }

    /// Where `source` resumes, if the transaction moved it.
    pub fn get(&self, source: Source) -> Option<i64> {
        self.0.get(&source).copied()
    }

    /// The sources the transaction moved, with their next offsets.
    pub fn moved(&self) -> impl Iterator<Item = (Source, i64)> + '_ {
        self.0.iter().map(|(source, next)| (*source, *next))
    }
}

/// The state key holding `source`'s position.
pub fn position_key(source: Source) -> Cow<'static, [u8]> {
    match source {
        Source::Joined(Side::Left) => Cow::Borrowed(keys::INPUT_POSITION),
        Source::Joined(Side::Right) => Cow::Borrowed(keys::RIGHT_INPUT_POSITION),
        Source::Rekeyed(side, partition) | Source::Whole(side, partition) => {
            let mut key = source_positions_prefix(side).to_vec();
            key.extend_from_slice(partition.to_string().as_bytes());
            Cow::Owned(key)
        }
    }
}

/// The prefix of the keys holding the positions of a side's own topic's partitions, when it is
/// re-keyed or read whole (never both: a table is not re-keyed).
pub fn source_positions_prefix(side: Side) -> &'static [u8] {
    match side {
        Side::Left => keys::LEFT_SOURCE_POSITION,
        Side::Right => keys::RIGHT_SOURCE_POSITION,
    }
}

/// The state key holding the identity of the topic `source` is read from.
pub fn identity_key(source: Source) -> &'static [u8] {
    match source {
        Source::Joined(Side::Left) | Source::Whole(Side::Left, _) => keys::INPUT,
        Source::Joined(Side::Right) | Source::Whole(Side::Right, _) => keys::RIGHT_INPUT,
        Source::Rekeyed(Side::Left, _) => keys::LEFT_SOURCE,
        Source::Rekeyed(Side::Right, _) => keys::RIGHT_SOURCE,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn side(side: Side, topic: &str, repartition: Option<&str>) -> SideTopics {
        SideTopics {
            side,
            topic: topic.into(),
            repartition: repartition.map(str::to_string),
            whole: false,
        }
    }

    #[test]
    fn positions_name_only_the_sources_a_transaction_moved() {
        let mut positions = Positions::default();
        assert_eq!(positions.moved().count(), 0);
        positions.set(Source::Joined(Side::Right), 7);
        positions.set(Source::Rekeyed(Side::Left, 4), 9);
        positions.set(Source::Joined(Side::Left), 3);
        assert_eq!(
            positions.moved().collect::<Vec<_>>(),
            [
                (Source::Joined(Side::Left), 3),
                (Source::Joined(Side::Right), 7),
                (Source::Rekeyed(Side::Left, 4), 9)
            ]
        );
        assert_eq!(positions.get(Source::Joined(Side::Right)), Some(7));
        assert_eq!(
            Positions::of(Source::Joined(Side::Left), 5)
                .moved()
                .collect::<Vec<_>>(),
            [(Source::Joined(Side::Left), 5)]
        );
    }

    #[test]
    fn each_source_has_its_own_keys() {
        let sources = [
            Source::Joined(Side::Left),
            Source::Joined(Side::Right),
            Source::Rekeyed(Side::Left, 0),
            Source::Rekeyed(Side::Left, 10),
            Source::Rekeyed(Side::Left, 1),
            Source::Rekeyed(Side::Right, 0),
        ];
        let keys: std::collections::BTreeSet<_> =
            sources.iter().map(|s| position_key(*s)).collect();
        assert_eq!(keys.len(), sources.len());
        for source in &sources[2..] {
            let Source::Rekeyed(side, _) = source else {
                unreachable!()
            };
            assert!(position_key(*source).starts_with(source_positions_prefix(*side)));
        }
        let identities: std::collections::BTreeSet<_> = [
            Source::Joined(Side::Left),
            Source::Joined(Side::Right),
            Source::Rekeyed(Side::Left, 0),
            Source::Rekeyed(Side::Right, 0),
        ]
        .iter()
        .map(|s| identity_key(*s))
        .collect();
        assert_eq!(identities.len(), 4);
        // The identity key sorts before its side's position range, outside a scan of it.
        assert!(keys::LEFT_SOURCE < keys::LEFT_SOURCE_POSITION);
        assert!(keys::RIGHT_SOURCE < keys::RIGHT_SOURCE_POSITION);
    }

    #[test]
    fn a_plain_job_reads_its_partition_of_each_side() {
        let sides = [
            side(Side::Left, "transactions", None),
            side(Side::Right, "cards", None),
        ];
        let reads = plan(2, 4, &sides, &BTreeMap::new());
        assert_eq!(
            reads,
            [
                Read {
                    source: Source::Joined(Side::Left),
                    topic: "transactions".into(),
                    partition: 2
                },
                Read {
                    source: Source::Joined(Side::Right),
                    topic: "cards".into(),
                    partition: 2
                },
            ]
        );
    }

    #[test]
    fn a_re_keyed_side_is_joined_from_its_repartition_topic_and_its_partitions_are_dealt_out() {
        let sides = [
            side(Side::Left, "transactions", Some("job.left-repartition")),
            side(Side::Right, "cards", None),
        ];
        let counts = BTreeMap::from([(Side::Left, 7)]);
        let mut re_keyed = Vec::new();
        for task in 0..3 {
            let reads = plan(task, 3, &sides, &counts);
            assert_eq!(reads[0].topic, "job.left-repartition");
            assert_eq!(reads[0].source, Source::Joined(Side::Left));
            assert_eq!(reads[1].topic, "cards");
            for read in &reads[2..] {
                assert_eq!(read.topic, "transactions");
                assert_eq!(read.source, Source::Rekeyed(Side::Left, read.partition));
                assert_eq!(read.partition as u32 % 3, task);
                re_keyed.push(read.partition);
            }
        }
        re_keyed.sort();
        assert_eq!(re_keyed, (0..7).collect::<Vec<_>>(), "each partition once");
        // Partitions added later go to the tasks the same rule deals them to.
        assert!(dealt_new_partitions(1, 3, 7, 8, false));
        assert!(!dealt_new_partitions(0, 3, 7, 8, false));
        assert!(!dealt_new_partitions(2, 3, 7, 7, false));
        assert!(dealt_new_partitions(2, 3, 7, 9, false));
        // A topic read whole: every task reads every new partition.
        assert!(dealt_new_partitions(0, 3, 7, 8, true));
        assert!(!dealt_new_partitions(0, 3, 7, 7, true));
        // Fewer source partitions than tasks: some tasks re-key nothing.
        let counts = BTreeMap::from([(Side::Left, 2)]);
        assert_eq!(plan(2, 3, &sides, &counts).len(), 2);
    }

    #[test]
    fn a_side_read_whole_is_read_from_every_partition_by_every_task() {
        let sides = [
            side(Side::Left, "transactions", None),
            SideTopics {
                whole: true,
                ..side(Side::Right, "currencies", None)
            },
        ];
        let counts = BTreeMap::from([(Side::Right, 3)]);
        for task in 0..5 {
            let reads = plan(task, 5, &sides, &counts);
            assert_eq!(reads[0].source, Source::Joined(Side::Left));
            assert_eq!(reads[0].partition, task as i32);
            let whole: Vec<_> = reads[1..]
                .iter()
                .map(|r| (r.source, r.topic.as_str()))
                .collect();
            assert_eq!(
                whole,
                (0..3)
                    .map(|p| (Source::Whole(Side::Right, p), "currencies"))
                    .collect::<Vec<_>>()
            );
        }
        assert!(reads_own_partitions(&sides[1]));
        assert!(!reads_own_partitions(&sides[0]));
        // Each partition's position has its own key; the topic's identity is the right input's.
        assert_ne!(
            position_key(Source::Whole(Side::Right, 0)),
            position_key(Source::Whole(Side::Right, 1))
        );
        assert_eq!(
            identity_key(Source::Whole(Side::Right, 2)),
            keys::RIGHT_INPUT
        );
    }
}
