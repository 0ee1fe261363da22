//! Reading the facts a restore plan needs: the changelog partition ahead of a replay (whether
//! anything but control records follows an offset, which incarnation the topic is) and the
//! topic's `delete.retention.ms`. Each is read only when the plan asks for it.

use crate::task::{TaskError, WorkerContext};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::{Message, Offset, TopicPartitionList};
use std::time::{Duration, Instant};

const TIMEOUT: Duration = Duration::from_secs(30);

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

    /// The incarnation the changelog's first record names (see `incarnation`).
    pub(in crate::task) fn incarnation(&self) -> Result<Option<String>, TaskError> {
        if let Some(known) = self.known_incarnation.get() {
            return Ok(known.clone());
        }
        let read = if self.low >= self.high {
            None
        } else {
            self.first_record_from(self.low)?
                .and_then(|(_, key, value)| {
                    crate::task::incarnation::of_first_record(&key, value.as_deref())
                })
        };
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

pub(super) fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// The changelog's `delete.retention.ms`, asked of the broker at most once per restore and
/// only when a delta replay needs the tombstone rule.
pub(super) struct RetentionLookup<'a> {
    context: &'a WorkerContext,
    topic: &'a str,
    value: Option<i64>,
}

impl<'a> RetentionLookup<'a> {
    pub(super) fn new(context: &'a WorkerContext, topic: &'a str) -> Self {
        Self {
            context,
            topic,
            value: None,
        }
    }

    pub(super) fn get(&mut self) -> Result<i64, TaskError> {
        if let Some(value) = self.value {
            return Ok(value);
        }
        let value = changelog_delete_retention_ms(self.context, self.topic)?;
        self.value = Some(value);
        Ok(value)
    }
}

/// The changelog topic's `delete.retention.ms`, read from the broker.
fn changelog_delete_retention_ms(context: &WorkerContext, topic: &str) -> Result<i64, TaskError> {
    use rdkafka::admin::{AdminOptions, ResourceSpecifier};
    let admin = context
        .admin
        .get(&context.config.kafka)
        .map_err(|e| TaskError::Changelog(format!("reading {topic}'s delete.retention.ms: {e}")))?;
    let options = AdminOptions::new().request_timeout(Some(TIMEOUT));
    // A broker whose metadata does not show the topic yet answers with an error for it, which
    // rust-rdkafka drops: the answer then lists no config at all. Ask again for a few seconds.
    for _ in 0..CONFIG_VISIBILITY_ATTEMPTS {
        let results = futures::executor::block_on(
            admin.describe_configs([&ResourceSpecifier::Topic(topic)], &options),
        )
        .map_err(|e| TaskError::kafka("describing the changelog topic", e))?;
        let config = results
            .into_iter()
            .next()
            .ok_or_else(|| TaskError::Changelog(format!("no configuration returned for {topic}")))?
            .map_err(|code| TaskError::Changelog(format!("describing {topic}: {code}")))?;
        if config.entries.is_empty() {
            std::thread::sleep(CONFIG_VISIBILITY_PAUSE);
            continue;
        }
        return config
            .get("delete.retention.ms")
            .and_then(|entry| entry.value.as_deref())
            .and_then(|value| value.parse().ok())
            .ok_or_else(|| {
                TaskError::Changelog(format!("{topic} has no readable delete.retention.ms"))
            });
    }
    Err(TaskError::Changelog(format!(
        "the broker lists no configs for {topic} yet (its metadata is catching up)"
    )))
}

const CONFIG_VISIBILITY_ATTEMPTS: u32 = 20;
const CONFIG_VISIBILITY_PAUSE: Duration = Duration::from_millis(250);
