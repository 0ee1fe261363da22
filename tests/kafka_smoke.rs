//! Smoke test of the real Kafka broker (tests/services/kafka.sh) with the project's own client:
//! a compacted topic created through the admin API really compacts, and a transactional
//! producer's committed records are visible to a read_committed consumer while aborted ones are not.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

mod support;

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
use rdkafka::{Message, Offset, TopicPartitionList};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

const TIMEOUT: Duration = Duration::from_secs(30);

fn admin() -> AdminClient<DefaultClientContext> {
    ClientConfig::new()
        .set("bootstrap.servers", support::kafka_bootstrap())
        .create()
        .expect("admin client")
}

async fn create_topic(name: &str, config: &[(&str, &str)]) {
    let mut topic = NewTopic::new(name, 1, TopicReplication::Fixed(1));
    for (key, value) in config {
        topic = topic.set(key, value);
    }
    let results = admin()
        .create_topics(
            [&topic],
            &AdminOptions::new().operation_timeout(Some(TIMEOUT)),
        )
        .await
        .expect("create_topics request");
    for result in results {
        result.unwrap_or_else(|(topic, code)| panic!("creating {topic} failed: {code}"));
    }
}

fn producer(transactional_id: Option<&str>) -> ThreadedProducer<DefaultProducerContext> {
    let mut config = ClientConfig::new();
    config
        .set("bootstrap.servers", support::kafka_bootstrap())
        .set("enable.idempotence", "true")
        .set("linger.ms", "5");
    if let Some(id) = transactional_id {
        config.set("transactional.id", id);
    }
    config.create().expect("producer")
}

/// Reads the whole partition 0 of `topic` as (key, value) pairs, in offset order.
fn read_all(topic: &str, isolation: &str) -> Vec<(String, Option<String>)> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", support::kafka_bootstrap())
        .set("group.id", support::unique_name("smoke-reader"))
        .set("enable.auto.commit", "false")
        .set("isolation.level", isolation)
        .create()
        .expect("consumer");
    let (_, high) = consumer
        .fetch_watermarks(topic, 0, TIMEOUT)
        .expect("watermarks");
    let mut assignment = TopicPartitionList::new();
    assignment
        .add_partition_offset(topic, 0, Offset::Beginning)
        .unwrap();
    consumer.assign(&assignment).unwrap();
    let mut records = Vec::new();
    let deadline = Instant::now() + TIMEOUT;
    loop {
        let position = consumer
            .position()
            .unwrap()
            .find_partition(topic, 0)
            .and_then(|p| p.offset().to_raw())
            .unwrap_or(0);
        if position >= high {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "reading {topic} timed out at offset {position} of {high}"
        );
        if let Some(message) = consumer.poll(Duration::from_millis(200)) {
            let message = message.expect("consume");
            let text =
                |bytes: Option<&[u8]>| bytes.map(|b| String::from_utf8_lossy(b).into_owned());
            records.push((
                text(message.key()).unwrap_or_default(),
                text(message.payload()),
            ));
        }
    }
    records
}

#[tokio::test]
async fn transactions_commit_and_abort_as_read_committed_sees_them() {
    let topic = support::unique_name("smoke-txn");
    create_topic(&topic, &[]).await;
    let producer = producer(Some(&support::unique_name("smoke-txn-producer")));
    producer
        .init_transactions(TIMEOUT)
        .expect("init_transactions");

    producer.begin_transaction().unwrap();
    for (key, value) in [("card-456", "1"), ("card-456", "2"), ("card-456", "3")] {
        producer
            .send(BaseRecord::to(&topic).key(key).payload(value))
            .map_err(|(e, _)| e)
            .unwrap();
    }
    producer.commit_transaction(TIMEOUT).expect("commit");

    producer.begin_transaction().unwrap();
    producer
        .send(BaseRecord::to(&topic).key("card-456").payload("aborted"))
        .map_err(|(e, _)| e)
        .unwrap();
    producer.flush(TIMEOUT).unwrap();
    producer.abort_transaction(TIMEOUT).expect("abort");

    let committed: Vec<_> = read_all(&topic, "read_committed")
        .into_iter()
        .map(|(_, v)| v.unwrap())
        .collect();
    assert_eq!(
        committed,
        vec!["1", "2", "3"],
        "read_committed sees exactly the committed records"
    );

    let uncommitted: Vec<_> = read_all(&topic, "read_uncommitted")
        .into_iter()
        .map(|(_, v)| v.unwrap())
        .collect();
    assert!(
        uncommitted.contains(&"aborted".to_string()),
        "the aborted record is in the log, only hidden from read_committed: {uncommitted:?}"
    );
}

#[tokio::test]
async fn compacted_topic_keeps_the_last_value_per_key() {
    let topic = support::unique_name("smoke-changelog");
    create_topic(
        &topic,
        &[
            ("cleanup.policy", "compact"),
            ("segment.ms", "100"),
            ("min.cleanable.dirty.ratio", "0.001"),
            ("min.compaction.lag.ms", "0"),
            ("delete.retention.ms", "100"),
        ],
    )
    .await;

    let resource = support::topic_configs(&admin(), &topic).await;
    let policy = resource.get("cleanup.policy").and_then(|e| e.value.clone());
    assert_eq!(policy.as_deref(), Some("compact"));

    let producer = producer(None);
    let send = |key: &str, value: Option<&str>| {
        let mut record = BaseRecord::<str, str>::to(&topic).key(key);
        if let Some(value) = value {
            record = record.payload(value);
        }
        producer.send(record).map_err(|(e, _)| e).unwrap();
        producer.flush(TIMEOUT).unwrap();
    };
    for round in 0..5 {
        send("card-1", Some(&format!("count={round}")));
        send("card-2", Some(&format!("count={round}")));
        std::thread::sleep(Duration::from_millis(150));
    }
    send("card-2", None); // tombstone: the key is deleted

    // The cleaner only touches closed segments: keep rolling the active one until the log is
    // compacted (bounded wait).
    let deadline = Instant::now() + Duration::from_secs(90);
    let latest = loop {
        std::thread::sleep(Duration::from_millis(300));
        send("roll", Some("x"));
        let records = read_all(&topic, "read_committed");
        let card_records: Vec<_> = records.iter().filter(|(k, _)| k != "roll").collect();
        if card_records.len() <= 2 {
            break card_records
                .into_iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect::<BTreeMap<_, _>>();
        }
        assert!(
            Instant::now() < deadline,
            "the log cleaner did not compact {topic} within 90 s: {} records left",
            card_records.len()
        );
    };
    assert_eq!(latest.get("card-1"), Some(&Some("count=4".to_string())));
    assert!(
        latest.get("card-2").is_none_or(|v| v.is_none()),
        "card-2 was deleted; at most its tombstone may remain: {latest:?}"
    );
}
