//! Resuming the input of an active task where the state's own position says, by the rule in
//! `input_position` (which decides, purely; this carries the decision out on the partition),
//! and reading the partition's committed offset and watermarks. A join resumes each partition
//! it reads by the same rule (`sources`).

use super::input_position::{self, InputFacts, InputStart, Resume};
use super::processing_loop::{ActiveLoop, KAFKA_TIMEOUT};
use super::sources::{self, Positions, Read, Source};
use crate::metrics::{ReasonLabel, TaskLabel};
use crate::processor::{Placement, Side};
use crate::store::{ChangeSet, RocksStore, StateStore};
use crate::task::{TaskError, stop};
use rdkafka::consumer::Consumer;
use rdkafka::{Offset, TopicPartitionList};
use std::collections::{BTreeMap, BTreeSet};

impl ActiveLoop<'_> {
    /// Positions the input where the state's own position says, by the rule in
    /// [`input_position`]: Kafka's committed offset is a copy that may be gone or moved, and a
    /// disagreement is repaired (committed again), a recovery gap reported, never either one
    /// silently followed. A join resumes each partition it reads by the same rule.
    pub fn resume_input(&mut self, store: &mut RocksStore) -> Result<(), TaskError> {
        self.plan_reads()?;
        let mut assignment = TopicPartitionList::new();
        let mut again = Positions::default();
        let mut resumed = Vec::new();
        let mut identities_checked = BTreeSet::new();
        let mut lag = 0;
        for read in self.reads.clone() {
            // The state's position is an offset of the topic it was built from: only there.
            if identities_checked.insert(sources::identity_key(read.source)) {
                self.check_input_identity(store, read.source)?;
            }
            let (resume, log_end) = self.resume_source(store, &read)?;
            lag += (log_end - resume.offset).max(0);
            assignment
                .add_partition_offset(&read.topic, read.partition, Offset::Offset(resume.offset))
                .map_err(|e| TaskError::kafka("assigning the input partition", e))?;
            if resume.commit_again() {
                again.set(read.source, resume.offset);
            }
            resumed.push((read.topic, read.partition, resume.offset));
        }
        self.input
            .assign(&assignment)
            .map_err(|e| TaskError::kafka("assigning the input partition", e))?;
        if again.moved().next().is_some() {
            self.commit_changes(store, ChangeSet::new(), again)?;
        }
        let changelog_offset = store.metadata().map_or(0, |m| m.next_changelog_offset);
        let input_offset = resumed.first().map_or(0, |(_, _, offset)| *offset);
        tracing::info!(
            task = self.task,
            input_offset,
            ?resumed,
            changelog_offset,
            "resuming input"
        );
        self.context.board.update(self.task, |r| {
            r.next_input_offset = Some(input_offset);
            r.next_changelog_offset = Some(changelog_offset);
        });
        // The loop looks at the lag a period in; until then it is what resuming found.
        self.show_lag(lag);
        Ok(())
    }

    /// Decides which partitions this task reads (`sources::plan`). A join's keys are placed by
    /// its task count, which its topics must still have (see `watch`), and each record is
    /// checked against its key's placement; a re-keyed side's partitions are dealt out among
    /// the tasks by that count. A table read whole is read from all of its partitions, and then
    /// no key needs a place.
    fn plan_reads(&mut self) -> Result<(), TaskError> {
        let mut tasks = 1;
        if self.joins() {
            let partitions = self.source_partitions()?;
            let rekeys = self.sides().iter().any(|side| side.repartition.is_some());
            let whole = self.sides().iter().any(|side| side.whole);
            if let Some(partitions) = partitions {
                tasks = partitions;
                // A join reading its table whole can answer any key in any task.
                if let Some(partitioner) = self.context.config.processor.partitioner()
                    && !whole
                {
                    let (left, right) = (self.topic_of(Side::Left), self.topic_of(Side::Right));
                    let placement = Placement::new(partitioner, partitions, left, right);
                    self.pipeline.set_placement(placement);
                }
            } else if rekeys {
                return Err(TaskError::Internal(
                    "the broker did not tell the join's partition counts, which a re-keyed side is dealt out by".into(),
                ));
            }
        }
        let mut counts = BTreeMap::new();
        let own_partitions = self
            .sides()
            .iter()
            .filter(|s| sources::reads_own_partitions(s));
        for side in own_partitions {
            let count = self.partition_count(&side.topic).ok_or_else(|| {
                TaskError::Internal(format!(
                    "the broker did not tell {}'s partition count, to read them",
                    side.topic
                ))
            })?;
            counts.insert(side.side, count);
        }
        self.reads = sources::plan(self.task, tasks, self.sides(), &counts);
        self.tasks = tasks;
        self.source_counts = counts;
        Ok(())
    }

    /// Decides where `read` resumes, and reports a gap or a disagreement with Kafka; with the
    /// partition's end offset.
    fn resume_source(&self, store: &RocksStore, read: &Read) -> Result<(Resume, i64), TaskError> {
        let (topic, partition) = (read.topic.as_str(), read.partition);
        let (log_start, log_end) = self.watermarks(topic, partition)?;
        let state_position = self.state_position(store, read.source)?;
        // A whole table's positions have no copy in Kafka (see `send_input_offsets`): the
        // state's own is all there is, and nothing disagrees with it.
        let committed = match read.source {
            Source::Whole(..) => Some(state_position).filter(|position| *position > 0),
            _ => self.committed_offset(topic, partition)?,
        };
        let facts = InputFacts {
            state_position,
            committed,
            log_start,
            log_end,
        };
        let resume = match input_position::decide(self.task, facts) {
            InputStart::Resume(resume) => resume,
            InputStart::Stop(reason) => return Err(TaskError::InputPosition(reason)),
        };
        if let Some(gap) = resume.gap {
            self.context
                .metrics
                .input_records_lost
                .get_or_create(&TaskLabel { task: self.task })
                .inc_by(gap.records());
            tracing::error!(
                task = self.task,
                %topic,
                partition,
                from_offset = gap.from_offset,
                to_offset = gap.to_offset,
                records = gap.records(),
                "recovery gap: the input's retention deleted these records before the task processed them; the state lacks them for good"
            );
            self.context
                .board
                .update(self.task, |r| r.input_gap = Some(gap));
        }
        if let Some(disagreement) = resume.disagreement {
            self.context
                .metrics
                .input_offset_repairs
                .get_or_create(&ReasonLabel {
                    task: self.task,
                    reason: disagreement.as_str().into(),
                })
                .inc();
            tracing::warn!(task = self.task, %topic, partition, committed = ?committed, state_position, resume_at = resume.offset, how = disagreement.as_str(), "Kafka's committed input offset disagrees with the state's position; the state is the truth, committing its position again");
        }
        Ok((resume, log_end))
    }

    /// The next offset of `source` the state has not consumed: the metadata's for the input,
    /// the state's own key for every other source.
    pub(super) fn state_position(
        &self,
        store: &RocksStore,
        source: Source,
    ) -> Result<i64, TaskError> {
        Ok(match source {
            Source::Joined(Side::Left) => store.metadata().map_or(0, |m| m.next_input_offset),
            _ => store
                .get(&sources::position_key(source))?
                .as_deref()
                .and_then(input_position::decode_position)
                .unwrap_or(0),
        })
    }

    /// The committed input position of this task's partition, if any.
    pub fn committed_input_offset(&self) -> Result<Option<i64>, TaskError> {
        self.committed_offset(self.topic_of(Side::Left), self.partition)
    }

    fn committed_offset(&self, topic: &str, partition: i32) -> Result<Option<i64>, TaskError> {
        let mut wanted = TopicPartitionList::new();
        wanted.add_partition(topic, partition);
        let committed = stop::kafka_call(
            self.context,
            KAFKA_TIMEOUT,
            "reading committed input offsets",
            |t| self.input.committed_offsets(wanted.clone(), t),
        )?;
        Ok(committed
            .find_partition(topic, partition)
            .and_then(|p| p.offset().to_raw())
            .filter(|o| *o >= 0))
    }

    /// The first offset of this task's input partition the broker still holds.
    pub fn input_log_start(&self) -> Result<i64, TaskError> {
        Ok(self
            .watermarks(self.topic_of(Side::Left), self.partition)?
            .0)
    }

    /// The first and the next offset of `topic`'s `partition`.
    fn watermarks(&self, topic: &str, partition: i32) -> Result<(i64, i64), TaskError> {
        stop::kafka_call(
            self.context,
            KAFKA_TIMEOUT,
            "reading input watermarks",
            |t| self.input.fetch_watermarks(topic, partition, t),
        )
    }
}
