//! Reading the real broker: end offsets, a group's committed offsets, every committed record
//! of a topic, each request retried while the broker is busy for a moment.

use super::{TIMEOUT, kafka_bootstrap, unique_name};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Headers;
use rdkafka::{Message, Offset, TopicPartitionList};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// Retries a broker request that failed for a transient reason (the broker is busy, just
/// restarted, or a new topic's metadata has not propagated yet), for up to two minutes; any
/// other error, or running out of time, fails the test.
pub fn retrying<T>(what: &str, mut request: impl FnMut() -> rdkafka::error::KafkaResult<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        match request() {
            Ok(value) => return value,
            Err(error) if Instant::now() < deadline && is_transient(&error) => {
                eprintln!(
                    "{what}: {error} ({:?}); retrying",
                    error.rdkafka_error_code()
                );
                std::thread::sleep(Duration::from_millis(500));
            }
            Err(error) => panic!("{what}: {error} ({:?})", error.rdkafka_error_code()),
        }
    }
}

fn is_transient(error: &rdkafka::error::KafkaError) -> bool {
    use rdkafka::types::RDKafkaErrorCode as Code;
    matches!(
        error.rdkafka_error_code(),
        Some(
            Code::OperationTimedOut
                | Code::RequestTimedOut
                | Code::CoordinatorLoadInProgress
                | Code::CoordinatorNotAvailable
                | Code::NotCoordinator
                | Code::LeaderNotAvailable
                | Code::NotLeaderForPartition
                | Code::UnknownTopicOrPartition
                | Code::BrokerTransportFailure
                | Code::AllBrokersDown
        )
    )
}

pub fn end_offsets(topic: &str, partitions: i32) -> BTreeMap<i32, i64> {
    watermarks(topic, partitions)
        .into_iter()
        .map(|(p, (_, end))| (p, end))
        .collect()
}

/// The first and the next offset of every partition of `topic`.
pub fn watermarks(topic: &str, partitions: i32) -> BTreeMap<i32, (i64, i64)> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", kafka_bootstrap())
        .create()
        .unwrap();
    (0..partitions)
        .map(|p| {
            let marks = retrying("reading watermarks", || {
                consumer.fetch_watermarks(topic, p, TIMEOUT)
            });
            (p, marks)
        })
        .collect()
}

pub struct Record {
    pub key: String,
    pub value: Option<String>,
    pub headers: BTreeMap<String, String>,
}

/// Every committed record of every partition of `topic`, in offset order.
pub fn read_committed(topic: &str, partitions: i32) -> BTreeMap<i32, Vec<Record>> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", kafka_bootstrap())
        .set("group.id", unique_name("reader"))
        .set("enable.auto.commit", "false")
        .set("isolation.level", "read_committed")
        .set("enable.partition.eof", "true")
        .create()
        .unwrap();
    let mut assignment = TopicPartitionList::new();
    for p in 0..partitions {
        assignment
            .add_partition_offset(topic, p, Offset::Beginning)
            .unwrap();
    }
    consumer.assign(&assignment).unwrap();
    let mut records: BTreeMap<i32, Vec<Record>> =
        (0..partitions).map(|p| (p, Vec::new())).collect();
    let mut finished = std::collections::BTreeSet::new();
    let deadline = Instant::now() + Duration::from_secs(120);
    while finished.len() < partitions as usize {
        assert!(Instant::now() < deadline, "reading {topic} timed out");
        match consumer.poll(Duration::from_millis(200)) {
            None => {}
            Some(Err(rdkafka::error::KafkaError::PartitionEOF(p))) => {
                finished.insert(p);
            }
            Some(Err(e)) => panic!("reading {topic}: {e}"),
            Some(Ok(m)) => {
                let text = |b: Option<&[u8]>| b.map(|b| String::from_utf8_lossy(b).into_owned());
                let headers = m
                    .headers()
                    .map(|h| {
                        h.iter()
                            .map(|h| (h.key.to_string(), text(h.value).unwrap_or_default()))
                            .collect()
                    })
                    .unwrap_or_default();
                records.entry(m.partition()).or_default().push(Record {
                    key: text(m.key()).unwrap_or_default(),
                    value: text(m.payload()),
                    headers,
                });
            }
        }
    }
    records
}

/// `group`'s committed offsets of `topic`, per partition (-1: none).
pub fn committed_offsets(group: &str, topic: &str, partitions: i32) -> BTreeMap<i32, i64> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", kafka_bootstrap())
        .set("group.id", group)
        .create()
        .unwrap();
    let mut wanted = TopicPartitionList::new();
    for p in 0..partitions {
        wanted.add_partition(topic, p);
    }
    let committed = retrying("reading committed offsets", || {
        consumer.committed_offsets(wanted.clone(), TIMEOUT)
    });
    (0..partitions)
        .map(|p| {
            let offset = committed
                .find_partition(topic, p)
                .and_then(|e| e.offset().to_raw())
                .unwrap_or(-1);
            (p, offset)
        })
        .collect()
}
