//! A topic's offsets by partition, asked with one ListOffsets request per partition leader
//! (`offsets_for_times` with the protocol's special timestamps) instead of one per partition.

use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::error::KafkaError as RdKafkaError;
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{Offset, TopicPartitionList};
use std::time::Duration;

/// The ListOffsets "timestamps" that ask for a partition's log-start offset and its end (the
/// protocol's -2 and -1).
pub(super) const EARLIEST: Offset = Offset::Beginning;
pub(super) const LATEST: Offset = Offset::End;

/// The offset `spec` ([`EARLIEST`] or [`LATEST`]) names in each partition `0..partitions` of
/// `topic`, asked of every partition's leader at once.
pub(super) fn offsets_at<C: ConsumerContext>(
    client: &BaseConsumer<C>,
    (topic, partitions): (&str, i32),
    spec: Offset,
    timeout: Duration,
) -> Result<Vec<i64>, RdKafkaError> {
    let mut asked = TopicPartitionList::new();
    for partition in 0..partitions {
        asked.add_partition_offset(topic, partition, spec)?;
    }
    let answered = client.offsets_for_times(asked, timeout)?;
    (0..partitions)
        .map(|partition| {
            let element =
                answered
                    .find_partition(topic, partition)
                    .ok_or(RdKafkaError::OffsetFetch(
                        RDKafkaErrorCode::UnknownPartition,
                    ))?;
            element.error()?;
            match element.offset() {
                Offset::Offset(offset) => Ok(offset),
                _ => Err(RdKafkaError::OffsetFetch(RDKafkaErrorCode::InvalidArgument)),
            }
        })
        .collect()
}
