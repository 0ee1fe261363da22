//! The owner records at the start of a changelog (`streamkeeper_contract::owner_marker`), written
//! and read as another cluster's operator, or this one, would.

use super::support;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{Message, Offset, TopicPartitionList};
use std::time::{Duration, Instant};
use streamkeeper_contract::owner_marker::changelog_owner_key;
use streamkeeper_contract::{OwnerMarker, Versioned};

/// Another cluster's owner record for job `namespace`/`name`, into partition 0 of `topic`.
pub fn write_foreign_owner_record(topic: &str, namespace: &str, name: &str, cluster_id: &str) {
    let marker = OwnerMarker {
        version: 1,
        cluster: None,
        cluster_id: Some(cluster_id.into()),
        namespace: namespace.into(),
        name: name.into(),
        uid: "uid-of-the-other-clusters-job".into(),
    };
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", support::kafka_bootstrap())
        .create()
        .unwrap();
    let key = changelog_owner_key(&marker);
    let value = marker.to_json();
    producer
        .send(
            BaseRecord::to(topic)
                .partition(0)
                .key(key.as_slice())
                .payload(value.as_slice()),
        )
        .map_err(|(error, _)| error)
        .unwrap();
    producer.flush(Duration::from_secs(30)).unwrap();
}

/// The first record of partition 0 of `topic`, parsed as an owner record: (key, marker).
pub fn first_record_as_owner(topic: &str) -> (Vec<u8>, OwnerMarker) {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", support::kafka_bootstrap())
        .set("group.id", support::unique_name("owner-reader"))
        .create()
        .unwrap();
    let mut assignment = TopicPartitionList::new();
    assignment
        .add_partition_offset(topic, 0, Offset::Beginning)
        .unwrap();
    consumer.assign(&assignment).unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        assert!(
            Instant::now() < deadline,
            "no record in {topic} partition 0"
        );
        if let Some(message) = consumer.poll(Duration::from_millis(200)) {
            let message = message.unwrap();
            let key = message.key().unwrap_or_default().to_vec();
            let marker = OwnerMarker::from_json(message.payload().unwrap_or_default()).unwrap();
            return (key, marker);
        }
    }
}
