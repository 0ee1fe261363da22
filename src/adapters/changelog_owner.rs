//! The owner record of a job's changelog (see [`streamkeeper_contract::owner_marker`]): read from
//! the start of partition 0, and written there, through clients made for the call. The reconcile
//! reads it once per job and operator process (a claim made or found is remembered), so a client
//! per call costs nothing that matters, and the cached admin client stays a pure admin client.

use super::kafka_admin::{KafkaAdmin, KafkaAdminError, REQUEST_TIMEOUT};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError as RdKafkaError;
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::{Message, Offset, TopicPartitionList};
use std::time::{Duration, Instant};
use streamkeeper_contract::owner_marker::{self, CHANGELOG_OWNER_SEARCH_RECORDS};
use streamkeeper_contract::{OwnerMarker, Versioned};

/// What the start of changelog partition 0 holds.
#[derive(Debug)]
pub struct ChangelogHead {
    /// The first owner record among the partition's first records (`Err`: it does not parse).
    pub first_owner: Option<Result<OwnerMarker, String>>,
    /// The partition holds no record.
    pub empty: bool,
}

impl KafkaAdmin {
    /// Reads the first [`CHANGELOG_OWNER_SEARCH_RECORDS`] records of partition 0 of `topic` for
    /// its owner record.
    pub async fn changelog_head(&self, topic: &str) -> Result<ChangelogHead, KafkaAdminError> {
        let (low, high) = self.first_partition_watermarks(topic).await?;
        if low >= high {
            return Ok(ChangelogHead {
                first_owner: None,
                empty: true,
            });
        }
        let mut config = self.client_config();
        // Assigned, never subscribed: the group id only satisfies the consumer; nothing commits.
        config
            .set("group.id", "streamkeeper-operator-owner-records")
            .set("enable.partition.eof", "true")
            .set("enable.auto.commit", "false")
            .set("isolation.level", "read_committed");
        let consumer: BaseConsumer = config
            .create()
            .map_err(|source| self.client_error(source))?;
        let name = topic.to_string();
        let read = tokio::task::spawn_blocking(move || first_owner_record(&consumer, &name))
            .await
            .map_err(|source| KafkaAdminError::Blocking {
                topic: topic.to_string(),
                source,
            })?;
        let first_owner = read.map_err(|source| self.unavailable("Fetch", topic, source))?;
        Ok(ChangelogHead {
            first_owner,
            empty: false,
        })
    }

    /// The watermarks of partition 0 of `topic`, waiting out a topic created a moment ago (the
    /// claim reads a changelog right after creating it): until the client's metadata knows the
    /// topic, librdkafka answers "unknown partition", and until the partition has a leader, the
    /// broker answers "not leader".
    async fn first_partition_watermarks(&self, topic: &str) -> Result<(i64, i64), KafkaAdminError> {
        let deadline = Instant::now() + NEW_TOPIC_VISIBLE_WITHIN;
        loop {
            match self.watermarks(topic, 1).await {
                Ok(watermarks) => {
                    return watermarks.first().copied().ok_or_else(|| {
                        KafkaAdminError::NotVisible {
                            topic: topic.to_string(),
                        }
                    });
                }
                Err(error) if not_ready_yet(&error) && Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(250)).await;
                }
                Err(error) => return Err(error),
            }
        }
    }

    /// Writes `marker`'s owner record into partition 0 of `topic`, once the broker has it.
    pub async fn write_changelog_owner(
        &self,
        topic: &str,
        marker: &OwnerMarker,
    ) -> Result<(), KafkaAdminError> {
        self.may_write("write the owner record into", topic)?;
        let producer: FutureProducer = self
            .client_config()
            .set("acks", "all")
            .set(
                "message.timeout.ms",
                REQUEST_TIMEOUT.as_millis().to_string(),
            )
            .create()
            .map_err(|source| self.client_error(source))?;
        let key = owner_marker::changelog_owner_key(marker);
        let value = marker.to_json();
        producer
            .send(
                FutureRecord::to(topic)
                    .partition(0)
                    .key(key.as_slice())
                    .payload(value.as_slice()),
                REQUEST_TIMEOUT,
            )
            .await
            .map_err(|(source, _)| self.unavailable("Produce", topic, source))?;
        Ok(())
    }
}

/// How long a topic just created may stay unknown to the client, or without a leader.
const NEW_TOPIC_VISIBLE_WITHIN: Duration = Duration::from_secs(5);

/// The error of a topic not ready yet: unknown to the client, or its partition without a leader.
fn not_ready_yet(error: &KafkaAdminError) -> bool {
    let KafkaAdminError::Unavailable { source, .. } = error else {
        return false;
    };
    matches!(
        source.rdkafka_error_code(),
        Some(
            rdkafka::types::RDKafkaErrorCode::UnknownPartition
                | rdkafka::types::RDKafkaErrorCode::UnknownTopic
                | rdkafka::types::RDKafkaErrorCode::UnknownTopicOrPartition
                | rdkafka::types::RDKafkaErrorCode::NotLeaderForPartition
                | rdkafka::types::RDKafkaErrorCode::LeaderNotAvailable
        )
    )
}

/// Polls partition 0 of `topic` from its start until an owner record, its end, or
/// [`CHANGELOG_OWNER_SEARCH_RECORDS`] records.
fn first_owner_record(
    consumer: &BaseConsumer,
    topic: &str,
) -> Result<Option<Result<OwnerMarker, String>>, RdKafkaError> {
    let mut assignment = TopicPartitionList::new();
    assignment.add_partition_offset(topic, 0, Offset::Beginning)?;
    consumer.assign(&assignment)?;
    let deadline = Instant::now() + REQUEST_TIMEOUT;
    let mut records = 0;
    while records < CHANGELOG_OWNER_SEARCH_RECORDS {
        match consumer.poll(Duration::from_millis(100)) {
            None if Instant::now() >= deadline => {
                return Err(RdKafkaError::MessageConsumption(
                    rdkafka::types::RDKafkaErrorCode::RequestTimedOut,
                ));
            }
            None => {}
            Some(Err(RdKafkaError::PartitionEOF(_))) => return Ok(None),
            Some(Err(error)) => return Err(error),
            Some(Ok(message)) => {
                records += 1;
                let key = message.key().unwrap_or_default();
                if owner_marker::is_changelog_owner_key(key) {
                    let parsed = OwnerMarker::from_json(message.payload().unwrap_or_default())
                        .map_err(|error| error.to_string());
                    return Ok(Some(parsed));
                }
            }
        }
    }
    Ok(None)
}
