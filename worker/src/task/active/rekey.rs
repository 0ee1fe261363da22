//! Re-keying a join side (see `sources`): each record of a partition the task re-keys is
//! written to the side's repartition topic, keyed by its join key, in the partition the join's
//! partitioner gives that key, inside the task's open transaction together with the source
//! partition's new position. So a record reaches the repartition topic exactly once, whatever
//! crashes: an aborted transaction takes both back. A record without a join key goes to the
//! dead-letter topic right here, naming the topic and partition it was read from.
//!
//! The join reads the repartition topic like any input, so what it has consumed is never needed
//! again: every 30 s the task deletes the records of its repartition partition below the
//! position its state has committed (`DeleteRecords`, as Kafka Streams purges its repartition
//! topics). The topic keeps records until then (`retention.ms: -1`), so none is lost to time.

use super::dead_letter::DeadLetter;
use super::processing_loop::{ActiveLoop, Transaction};
use super::sources::Source;
use crate::metrics::TaskLabel;
use crate::processor::{ProcessError, RawInput};
use crate::store::RocksStore;
use crate::task::TaskError;
use rdkafka::admin::AdminOptions;
use rdkafka::producer::FutureRecord;
use rdkafka::{Offset, TopicPartitionList};
use std::time::Duration;
use streamkeeper_contract::co_partitioning::Partitioner;

impl ActiveLoop<'_> {
    /// Writes `input`, read from `source` (a partition this task re-keys), to its side's
    /// repartition topic in the open transaction.
    pub(super) fn rekey_one(
        &self,
        txn: &mut Transaction,
        source: Source,
        input: &RawInput<'_>,
    ) -> Result<(), TaskError> {
        txn.records += 1;
        txn.positions.set(source, input.offset + 1);
        let (source_topic, _) = self.locate(source);
        let key = match self.pipeline.join_key(input) {
            Ok(key) => key,
            Err(ProcessError::BadRecord(error)) => {
                let letter =
                    DeadLetter::refused(&error, source_topic, input.partition, input.offset);
                return self.send_dead_letter(txn, input, &letter);
            }
            Err(other) => return Err(TaskError::Process(other)),
        };
        let repartition = self.topic_of(input.side);
        let partition = self.rekey_partition(&key);
        let mut record = FutureRecord::<str, [u8]>::to(repartition)
            .key(&key)
            .partition(partition);
        if let Some(payload) = input.payload {
            record = record.payload(payload);
        }
        // The record keeps its time: the join orders its two sides by it.
        if let Some(timestamp) = input.timestamp_ms {
            record = record.timestamp(timestamp);
        }
        txn.pending.push(self.send(record)?);
        self.context
            .metrics
            .records_repartitioned
            .get_or_create(&TaskLabel { task: self.task })
            .inc();
        Ok(())
    }

    /// The repartition partition of `key`: where the join's partitioner puts it among the
    /// task count.
    fn rekey_partition(&self, key: &str) -> i32 {
        let partitioner = self
            .context
            .config
            .processor
            .partitioner()
            .unwrap_or(Partitioner::Murmur2);
        let partition = partitioner.partition(key.as_bytes(), self.tasks);
        i32::try_from(partition).unwrap_or(i32::MAX)
    }

    /// Deletes the records of this task's repartition partitions below the positions the state
    /// has committed (when `cadence::PurgeCadence` says). A failure is logged and retried at
    /// the next turn: the records only take room meanwhile.
    pub(super) fn purge_repartitioned(&self, store: &RocksStore) {
        let mut below = TopicPartitionList::new();
        for side in self
            .sides()
            .iter()
            .filter(|side| side.repartition.is_some())
        {
            let position = match self.state_position(store, Source::Joined(side.side)) {
                Ok(position) if position > 0 => position,
                _ => continue,
            };
            let added =
                below.add_partition_offset(side.joined(), self.partition, Offset::Offset(position));
            if let Err(error) = added {
                tracing::warn!(task = self.task, %error, "purging the repartition topic");
                return;
            }
        }
        if below.count() == 0 {
            return;
        }
        let admin = match self.context.admin.get(&self.context.config.kafka) {
            Ok(admin) => admin,
            Err(error) => {
                tracing::warn!(task = self.task, %error, "purging the repartition topic");
                return;
            }
        };
        let options = AdminOptions::new().operation_timeout(Some(Duration::from_secs(5)));
        match futures::executor::block_on(admin.delete_records(&below, &options)) {
            Ok(result) => {
                for element in result.elements() {
                    match element.error() {
                        Ok(()) => {
                            tracing::debug!(task = self.task, topic = element.topic(), partition = element.partition(), low_watermark = ?element.offset(), "repartition topic purged")
                        }
                        Err(error) => {
                            tracing::warn!(task = self.task, topic = element.topic(), partition = element.partition(), %error, "purging the repartition topic")
                        }
                    }
                }
            }
            Err(error) => tracing::warn!(task = self.task, %error, "purging the repartition topic"),
        }
    }
}
