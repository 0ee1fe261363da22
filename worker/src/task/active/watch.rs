//! What an active task shows and checks of its sources every few seconds: each source's lag
//! behind the broker's last stable offset (their sum is the task's input lag), whether the
//! consumer has stalled on one of them (`consumer_watch`), and, less often, whether a join's
//! topics still have the partition count its keys are placed by, and whether a re-keyed side's
//! topic or a whole-read table got partitions (which the task then reads too).

use super::cadence::SourceChecks;
use super::processing_loop::{ActiveLoop, Transaction};
use super::sources::{self, Read, Source};
use crate::metrics::TaskLabel;
use crate::processor::Side;
use crate::store::RocksStore;
use crate::task::TaskError;
use crate::task::consumer_watch::{self, ConsumerStall, PartitionWatches};
use rdkafka::TopicPartitionList;
use rdkafka::consumer::Consumer;
use std::time::{Duration, Instant};
use streamkeeper_contract::co_partitioning;

impl ActiveLoop<'_> {
    /// Whatever of the checks below is due.
    pub(super) fn check_sources(
        &self,
        store: &RocksStore,
        txn: Option<&Transaction>,
        watch: &mut PartitionWatches<Source>,
        checks: &mut SourceChecks,
    ) -> Result<(), TaskError> {
        if self.joins() && checks.partitions_due() {
            self.source_partitions()?;
            self.check_source_counts()?;
        }
        if checks.lag_due() {
            self.check_lag(store, txn, watch)?;
        }
        Ok(())
    }

    /// Shows the input lag (summed over the sources) and judges the consumer on each source;
    /// a stall is the error that restarts the role with a new consumer.
    fn check_lag(
        &self,
        store: &RocksStore,
        txn: Option<&Transaction>,
        watch: &mut PartitionWatches<Source>,
    ) -> Result<(), TaskError> {
        let mut lag = None;
        for read in &self.reads {
            let (topic, partition) = (read.topic.as_str(), read.partition);
            let stable_end = self
                .input
                .fetch_watermarks(topic, partition, Duration::from_secs(1))
                .ok()
                .map(|(_, high)| high);
            let committed = self.state_position(store, read.source)?;
            if let Some(stable_end) = stable_end {
                *lag.get_or_insert(0) += (stable_end - committed).max(0);
            }
            let position = consumer_watch::position_of(&self.input, topic, partition)
                .or_else(|| txn.and_then(|open| open.positions.get(read.source)))
                .unwrap_or(committed);
            if let Some(stall) = watch.judge(read.source, position, stable_end, Instant::now()) {
                return Err(self.input_stalled(read, stall));
            }
        }
        if let Some(lag) = lag {
            self.show_lag(lag);
        }
        Ok(())
    }

    /// Shows the task's input lag (summed over its sources) in the metrics and on the board.
    pub(super) fn show_lag(&self, lag: i64) {
        self.context
            .metrics
            .input_lag_records
            .get_or_create(&TaskLabel { task: self.task })
            .set(lag);
        self.context
            .board
            .update(self.task, |r| r.input_lag = Some(lag));
    }

    /// Counts and reports a stalled input consumer; the error restarts the role from the
    /// committed state with a new consumer (see `consumer_watch`).
    fn input_stalled(&self, read: &Read, stall: ConsumerStall) -> TaskError {
        let which = match read.source {
            Source::Joined(Side::Left) => "input".to_string(),
            Source::Joined(Side::Right) => "right input".to_string(),
            Source::Rekeyed(_, partition) | Source::Whole(_, partition) => {
                format!("{} partition {partition}", read.topic)
            }
        };
        consumer_watch::report(self.context, self.task, &which, &stall);
        TaskError::ConsumerStalled(format!("{which}: {stall}"))
    }

    /// The `input-stops` failpoint (`right-input-stops`: only a join's right side, its other
    /// partitions going on): the consumer stops fetching as a stalled one does, while the
    /// broker keeps serving it.
    pub(super) fn stop_fetching_input(&self, only: Option<Side>) -> Result<(), TaskError> {
        let mut partitions = TopicPartitionList::new();
        let stopped = self
            .reads
            .iter()
            .filter(|read| only.is_none_or(|side| read.source.side() == side));
        for read in stopped {
            partitions.add_partition(&read.topic, read.partition);
        }
        tracing::warn!(task = self.task, side = ?only, "failpoint: the input consumer stops fetching");
        self.input
            .pause(&partitions)
            .map_err(|e| TaskError::kafka("pausing the input (failpoint)", e))
    }

    /// The partition count a join's keys are placed by: its changelog's, which the operator
    /// created with the input's count when the job started. Each source must still have it: a
    /// topic that got partitions since places keys elsewhere now, so the task stops rather than
    /// join them wrongly ([`TaskError::PartitionsChanged`]). `Ok(None)` when the broker did
    /// not answer now (the next check asks again).
    pub(super) fn source_partitions(&self) -> Result<Option<u32>, TaskError> {
        let changelog = self.context.config.kafka.changelog_topic.as_str();
        let Some(placed_by) = self.partition_count(changelog) else {
            return Ok(None);
        };
        let mut counts = Vec::new();
        // A topic read whole places nothing: every task reads every partition.
        for side in self.sides().iter().filter(|side| !side.whole) {
            let topic = side.joined();
            let Some(count) = self.partition_count(topic) else {
                return Ok(None);
            };
            counts.push((topic, i32::try_from(count).unwrap_or(i32::MAX)));
        }
        let placed = i32::try_from(placed_by).unwrap_or(i32::MAX);
        co_partitioning::still_placed_by(placed, &counts).map_err(|changed| {
            TaskError::PartitionsChanged(format!("task {}: {changed}", self.task))
        })?;
        Ok(Some(placed_by))
    }

    /// A re-keyed side's topic, or a table read whole, that got partitions this task is dealt
    /// since it planned its reads: the error restarts the role, which then reads them too (from
    /// their start: nothing of them was consumed); the other tasks go on as they are. Unlike a
    /// joined topic's, such a topic's count places nothing: the task writes each re-keyed record
    /// where its join key belongs, and every task reads a whole table.
    fn check_source_counts(&self) -> Result<(), TaskError> {
        for (side, planned) in &self.source_counts {
            let Some(topics) = self.side(*side) else {
                continue;
            };
            match self.partition_count(&topics.topic) {
                Some(now)
                    if sources::dealt_new_partitions(
                        self.task,
                        self.tasks,
                        *planned,
                        now,
                        topics.whole,
                    ) =>
                {
                    return Err(TaskError::SourcesChanged(format!(
                        "task {}: {} has {now} partitions, {planned} when the task started reading it",
                        self.task, topics.topic
                    )));
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// `topic`'s partition count, as the broker answers now.
    pub(super) fn partition_count(&self, topic: &str) -> Option<u32> {
        let metadata = self
            .input
            .fetch_metadata(Some(topic), Duration::from_secs(2))
            .ok()?;
        let found = metadata.topics().first()?;
        if found.error().is_some() {
            return None;
        }
        u32::try_from(found.partitions().len())
            .ok()
            .filter(|count| *count > 0)
    }
}
