//! Reading a task's changelog partition: the consumer a restore and a standby's tail share, and
//! the probe that reads ahead of a replay (whether anything but control records follows an
//! offset, which incarnation the topic is). The restore plan and the fence check both ask the
//! probe, so it sits below both.

use super::{TaskError, WorkerContext};
use crate::kafka_client;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::{Message, Offset, TopicPartitionList};
use std::time::{Duration, Instant};
use streamkeeper_contract::owner_marker;

const TIMEOUT: Duration = Duration::from_secs(30);

/// A changelog consumer, for a restore and a standby's tail alike: committed records only, and
/// an offset the log no longer holds is an error, never a silent jump to another position (the
/// state would skip or repeat records). `eof`: with end-of-partition events, which a replay
/// ends on; a tail, which reaches the end many times a second, goes without (librdkafka logs
/// each one as an error).
pub(crate) fn changelog_consumer(
    context: &WorkerContext,
    eof: bool,
) -> Result<BaseConsumer, TaskError> {
    let config = &context.config;
    let mut client = kafka_client::consumer_config(&config.kafka, &config.job.group_id())?;
    client
        .set("enable.partition.eof", if eof { "true" } else { "false" })
        .set("auto.offset.reset", "error");
    client
        .create()
        .map_err(|e| TaskError::kafka("creating the changelog consumer", e))
}

/// One changelog record: offset, key, value (`None`: a tombstone).
type ChangelogRecord = (i64, Vec<u8>, Option<Vec<u8>>);

/// Reads the changelog partition ahead of a replay: whether anything but control records
/// follows an offset, and which incarnation the topic is.
pub(in crate::task) struct ChangelogProbe<'a> {
    consumer: &'a BaseConsumer,
    topic: &'a str,
    partition: i32,
    /// The partition's offsets `[low, high)` at discovery.
    low: i64,
    high: i64,
    /// The topic's incarnation, read once: both the local-state and the checkpoint step ask.
    known_incarnation: std::cell::OnceCell<Option<String>>,
}

impl<'a> ChangelogProbe<'a> {
    /// A probe of changelog partition `partition`, which holds offsets `[low, high)`.
    pub(in crate::task) fn new(
        consumer: &'a BaseConsumer,
        topic: &'a str,
        partition: i32,
        (low, high): (i64, i64),
    ) -> Self {
        Self {
            consumer,
            topic,
            partition,
            low,
            high,
            known_incarnation: std::cell::OnceCell::new(),
        }
    }

    /// The incarnation the changelog's first record names (see `incarnation`). The operator's
    /// owner record, which comes first in partition 0, is passed over.
    pub(in crate::task) fn incarnation(&self) -> Result<Option<String>, TaskError> {
        if let Some(known) = self.known_incarnation.get() {
            return Ok(known.clone());
        }
        let mut from = self.low;
        let first = loop {
            if from >= self.high {
                break None;
            }
            match self.first_record_from(from)? {
                Some((offset, key, _)) if owner_marker::is_changelog_owner_key(&key) => {
                    from = offset + 1;
                }
                other => break other,
            }
        };
        let read = first.and_then(|(_, key, value)| {
            crate::store::incarnation::of_first_record(&key, value.as_deref())
        });
        Ok(self.known_incarnation.get_or_init(|| read).clone())
    }

    /// True when only control records (transaction markers) and aborted records lie between
    /// `from` and the end: a committed read from there reaches the end without a record. The
    /// offset a state stores is the one after its last record, which is that transaction's
    /// commit marker, so after a clean stop the end is one past it, never equal.
    pub(in crate::task) fn only_control_records_from(&self, from: i64) -> Result<bool, TaskError> {
        if from >= self.high {
            return Ok(true);
        }
        Ok(self
            .first_record_from(from)?
            .is_none_or(|(offset, _, _)| offset >= self.high))
    }

    /// The first committed record at or after `from`: (offset, key, value); `None` at the end.
    fn first_record_from(&self, from: i64) -> Result<Option<ChangelogRecord>, TaskError> {
        let mut assignment = TopicPartitionList::new();
        assignment
            .add_partition_offset(self.topic, self.partition, Offset::Offset(from))
            .map_err(|e| TaskError::kafka("assigning the changelog partition", e))?;
        self.consumer
            .assign(&assignment)
            .map_err(|e| TaskError::kafka("assigning the changelog partition", e))?;
        let deadline = Instant::now() + TIMEOUT;
        loop {
            match self.consumer.poll(Duration::from_millis(200)) {
                Some(Err(KafkaError::PartitionEOF(_))) => return Ok(None),
                Some(Err(error)) => {
                    return Err(TaskError::kafka("reading ahead in the changelog", error));
                }
                Some(Ok(message)) => {
                    let key = message.key().unwrap_or_default().to_vec();
                    let value = message.payload().map(<[u8]>::to_vec);
                    return Ok(Some((message.offset(), key, value)));
                }
                None if Instant::now() >= deadline => {
                    return Err(TaskError::Changelog(format!(
                        "reading {} partition {} from offset {from} answered nothing within {TIMEOUT:?}",
                        self.topic, self.partition
                    )));
                }
                None => {}
            }
        }
    }
}
