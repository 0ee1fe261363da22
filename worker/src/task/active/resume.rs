//! Resuming the input of an active task where the state's own position says, by the rule in
//! `input_position` (which decides, purely; this carries the decision out on the partition),
//! and reading the partition's committed offset and watermarks.

use super::input_position::{self, InputFacts, InputStart};
use super::processing_loop::{ActiveLoop, KAFKA_TIMEOUT};
use crate::metrics::{ReasonLabel, TaskLabel};
use crate::store::{ChangeSet, RocksStore};
use crate::task::{TaskError, stop};
use rdkafka::consumer::Consumer;
use rdkafka::{Offset, TopicPartitionList};

impl ActiveLoop<'_> {
    /// Positions the input where the state's own position says, by the rule in
    /// [`input_position`]: Kafka's committed offset is a copy that may be gone or moved, and a
    /// disagreement is repaired (committed again), a recovery gap reported, never either one
    /// silently followed.
    pub fn resume_input(&mut self, store: &mut RocksStore) -> Result<(), TaskError> {
        // The state's position is an offset of the topic it was built from: only there.
        self.check_input_identity(store)?;
        let topic = self.context.config.kafka.input_topic.as_str();
        let committed = self.committed_input_offset()?;
        let (log_start, log_end) = self.input_watermarks()?;
        let state_position = store.metadata().map_or(0, |m| m.next_input_offset);
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
        let mut assignment = TopicPartitionList::new();
        assignment
            .add_partition_offset(topic, self.partition, Offset::Offset(resume.offset))
            .map_err(|e| TaskError::kafka("assigning the input partition", e))?;
        self.input
            .assign(&assignment)
            .map_err(|e| TaskError::kafka("assigning the input partition", e))?;
        if let Some(gap) = resume.gap {
            self.context
                .metrics
                .input_records_lost
                .get_or_create(&TaskLabel { task: self.task })
                .inc_by(gap.records());
            tracing::error!(
                task = self.task,
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
            tracing::warn!(task = self.task, committed = ?committed, state_position, resume_at = resume.offset, how = disagreement.as_str(), "Kafka's committed input offset disagrees with the state's position; the state is the truth, committing its position again");
        }
        if resume.commit_again() {
            self.commit_changes(store, ChangeSet::new(), Some(resume.offset))?;
        }
        let changelog_offset = store.metadata().map_or(0, |m| m.next_changelog_offset);
        tracing::info!(
            task = self.task,
            input_offset = resume.offset,
            ?committed,
            changelog_offset,
            "resuming input"
        );
        self.context.board.update(self.task, |r| {
            r.next_input_offset = Some(resume.offset);
            r.next_changelog_offset = Some(changelog_offset);
        });
        Ok(())
    }

    /// The committed input position of this task's partition, if any.
    pub fn committed_input_offset(&self) -> Result<Option<i64>, TaskError> {
        let topic = self.context.config.kafka.input_topic.as_str();
        let mut wanted = TopicPartitionList::new();
        wanted.add_partition(topic, self.partition);
        let committed = stop::kafka_call(
            self.context,
            KAFKA_TIMEOUT,
            "reading committed input offsets",
            |t| self.input.committed_offsets(wanted.clone(), t),
        )?;
        Ok(committed
            .find_partition(topic, self.partition)
            .and_then(|p| p.offset().to_raw())
            .filter(|o| *o >= 0))
    }

    /// The first offset of this task's input partition the broker still holds.
    pub fn input_log_start(&self) -> Result<i64, TaskError> {
        Ok(self.input_watermarks()?.0)
    }

    /// The first and the next offset of this task's input partition.
    fn input_watermarks(&self) -> Result<(i64, i64), TaskError> {
        let topic = self.context.config.kafka.input_topic.as_str();
        stop::kafka_call(
            self.context,
            KAFKA_TIMEOUT,
            "reading input watermarks",
            |t| self.input.fetch_watermarks(topic, self.partition, t),
        )
    }
}
