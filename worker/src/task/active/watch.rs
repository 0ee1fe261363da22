//! What an active task shows and checks of its sources every few seconds: each source's lag
//! behind the broker's last stable offset (their sum is the task's input lag), whether the
//! consumer has stalled on one of them (`consumer_watch`), and whether a join's two topics still
//! have as many partitions.

use super::processing_loop::{ActiveLoop, Transaction};
use crate::metrics::TaskLabel;
use crate::processor::Side;
use crate::store::RocksStore;
use crate::task::TaskError;
use crate::task::consumer_watch::{self, ConsumerStall, ConsumerWatch};
use rdkafka::TopicPartitionList;
use rdkafka::consumer::Consumer;
use std::time::{Duration, Instant};

impl ActiveLoop<'_> {
    /// Shows the input lag (summed over the sources) and judges the consumer on each source;
    /// a stall is the error that restarts the role with a new consumer.
    pub(super) fn check_sources(
        &self,
        store: &RocksStore,
        txn: Option<&Transaction>,
        watch: &mut ConsumerWatch,
    ) -> Result<(), TaskError> {
        if self.sides().len() > 1 {
            self.source_partitions()?;
        }
        let mut lag = None;
        for side in self.sides() {
            let topic = self.topic_of(side);
            let stable_end = self
                .input
                .fetch_watermarks(topic, self.partition, Duration::from_secs(1))
                .ok()
                .map(|(_, high)| high);
            let committed = self.state_position(store, side)?;
            if let Some(stable_end) = stable_end {
                *lag.get_or_insert(0) += (stable_end - committed).max(0);
            }
            let position = consumer_watch::position_of(&self.input, topic, self.partition)
                .or_else(|| txn.and_then(|open| open.positions_of(side)))
                .unwrap_or(committed);
            if let Some(stall) = watch.judge(position, stable_end, Instant::now()) {
                return Err(self.input_stalled(side, stall));
            }
        }
        if let Some(lag) = lag {
            self.context
                .metrics
                .input_lag_records
                .get_or_create(&TaskLabel { task: self.task })
                .set(lag);
            self.context
                .board
                .update(self.task, |r| r.input_lag = Some(lag));
        }
        Ok(())
    }

    /// Counts and reports a stalled input consumer; the error restarts the role from the
    /// committed state with a new consumer (see `consumer_watch`).
    fn input_stalled(&self, side: Side, stall: ConsumerStall) -> TaskError {
        let which = match side {
            Side::Left => "input",
            Side::Right => "right input",
        };
        consumer_watch::report(self.context, self.task, which, &stall);
        TaskError::ConsumerStalled(format!("{which}: {stall}"))
    }

    /// The `input-stops` failpoint: the consumer stops fetching as a stalled one does, while the
    /// broker keeps serving it.
    pub(super) fn stop_fetching_input(&self) -> Result<(), TaskError> {
        let mut partitions = TopicPartitionList::new();
        for side in self.sides() {
            partitions.add_partition(self.topic_of(side), self.partition);
        }
        self.input
            .pause(&partitions)
            .map_err(|e| TaskError::kafka("pausing the input (failpoint)", e))
    }

    /// The partition count of the task's sources, which must be one: a join whose topics no
    /// longer agree (a topic got partitions after the job started) stops its tasks. `Ok(None)`
    /// when the broker did not answer now (the next check asks again).
    pub(super) fn source_partitions(&self) -> Result<Option<u32>, TaskError> {
        let mut counts = Vec::new();
        for side in self.sides() {
            let topic = self.topic_of(side);
            let Ok(metadata) = self
                .input
                .fetch_metadata(Some(topic), Duration::from_secs(2))
            else {
                return Ok(None);
            };
            let count = metadata
                .topics()
                .first()
                .map_or(0, |found| found.partitions().len());
            counts.push((topic.to_string(), count));
        }
        match counts.as_slice() {
            [(_, left), (_, right)] if left != right => Err(TaskError::PartitionsChanged(format!(
                "task {}: {} has {left} partitions and {} has {right}: a join needs both alike; give them the same count (and recreate the job, whose state placed keys by the old one)",
                self.task, counts[0].0, counts[1].0
            ))),
            [(_, count), ..] => Ok(u32::try_from(*count).ok()),
            [] => Ok(None),
        }
    }
}
