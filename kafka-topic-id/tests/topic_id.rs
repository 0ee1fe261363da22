//! Against the real broker of `tests/services/kafka.sh`: an id is stable, a re-created topic gets
//! another, and a missing topic is an error that names it.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use rdkafka::ClientConfig;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use std::time::Duration;
use streamkeeper_kafka_topic_id::{TopicIdError, topic_id};
use streamkeeper_test_support::{kafka_bootstrap, unique_name, wait_for};

const LIMIT: Duration = Duration::from_secs(10);

fn admin() -> AdminClient<DefaultClientContext> {
    ClientConfig::new()
        .set("bootstrap.servers", kafka_bootstrap())
        .create()
        .expect("admin client")
}

fn create(admin: &AdminClient<DefaultClientContext>, topic: &str) {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let results = runtime
        .block_on(admin.create_topics(
            &[NewTopic::new(topic, 2, TopicReplication::Fixed(1))],
            &AdminOptions::new(),
        ))
        .unwrap();
    results.into_iter().for_each(|r| {
        r.unwrap();
    });
}

#[test]
fn a_topics_id_is_stable_and_a_re_created_topic_has_another() {
    let admin = admin();
    let topic = unique_name("topic-id");
    create(&admin, &topic);
    let mut first = None;
    // The topic's metadata reaches every broker shortly after the create answers.
    wait_for("the new topic's id", LIMIT, || {
        first = topic_id(admin.inner(), &topic, LIMIT).ok();
        first.is_some()
    });
    let first = first.unwrap();
    assert_eq!(first.as_str().len(), 22, "base64 of 16 bytes: {first}");
    assert_eq!(topic_id(admin.inner(), &topic, LIMIT).unwrap(), first);

    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime
        .block_on(admin.delete_topics(&[&topic], &AdminOptions::new()))
        .unwrap()
        .into_iter()
        .for_each(|r| {
            r.unwrap();
        });
    // The broker refuses a create of a name still being deleted: try until it takes it.
    wait_for("the topic created again", LIMIT * 3, || {
        let created = runtime
            .block_on(admin.create_topics(
                &[NewTopic::new(&topic, 2, TopicReplication::Fixed(1))],
                &AdminOptions::new(),
            ))
            .unwrap();
        created.iter().all(|r| r.is_ok())
    });
    let mut second = None;
    wait_for("the re-created topic's id", LIMIT, || {
        second = topic_id(admin.inner(), &topic, LIMIT)
            .ok()
            .filter(|id| *id != first);
        second.is_some()
    });
    assert_ne!(second.unwrap(), first);
}

#[test]
fn a_missing_topic_is_an_error_naming_it() {
    let admin = admin();
    let topic = unique_name("no-such-topic");
    match topic_id(admin.inner(), &topic, LIMIT) {
        Err(error @ TopicIdError::Broker { .. }) => {
            assert!(error.to_string().contains(&topic), "{error}");
        }
        other => panic!("expected the broker's refusal, got {other:?}"),
    }
}
