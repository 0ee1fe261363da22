//! A join's co-partitioning, proven against the real Kafka broker: a record its producer
//! placed by another partitioner than the job's is dead-lettered naming where it belongs, the
//! task reports the evidence per topic (which partitioner every record fits, an example key),
//! and a topic that gets partitions while the job runs stops the join's tasks for good.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

mod support;

use rdkafka::admin::{AdminClient, AdminOptions, NewPartitions};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use serde_json::json;
use std::time::Duration;
use streamkeeper_contract::TaskReport;
use streamkeeper_contract::co_partitioning::Partitioner;
use streamkeeper_contract::task_report::{TaskFailure, TaskPhase};
use streamkeeper_contract::worker_config::{JoinKind, JoinMode, JoinRight, ProcessorConfig};
use support::join::*;
use support::*;

/// A left table join of transactions to `cards`, both keyed by card.
fn table_join(cards: &str) -> ProcessorConfig {
    join_processor(
        JoinKind::Table,
        JoinMode::Left,
        JoinRight {
            topic: cards.to_string(),
            repartition_topic: None,
            key_field: None,
            time_field: None,
        },
        None,
        Some(Duration::from_secs(3_600)),
    )
}

/// Card keys crc32 (librdkafka's default) places elsewhere than murmur2 (the job's).
fn keys_placed_apart(count: usize) -> Vec<String> {
    (0..1000)
        .map(card)
        .filter(|key| {
            let partitions = PARTITIONS as u32;
            Partitioner::Crc32.partition(key.as_bytes(), partitions)
                != Partitioner::Murmur2.partition(key.as_bytes(), partitions)
        })
        .take(count)
        .collect()
}

/// One record per key, at `time`.
fn records(keys: &[String], time: i64) -> Vec<Produced> {
    keys.iter()
        .map(|key| Produced {
            key: key.clone(),
            value: Some(json!({"card": key, "ts": time})),
            time,
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_record_its_producer_placed_by_another_partitioner_is_dead_lettered_naming_it() {
    let base = base_time();
    let cards = topic("cards").await;
    let transactions = topic("transactions").await;
    let job = Job::new("placed", &transactions, PARTITIONS, table_join(&cards)).await;
    let mut worker = job.start(None);
    let apart = keys_placed_apart(5);
    produce_placed_by(
        &transactions,
        &records(&apart, base + 10),
        Partitioner::Crc32,
    );
    produce_placed(&transactions, &records(&apart, base + 20));
    wait_consumed(&job, &mut worker, &[&transactions]);
    worker.terminate(Duration::from_secs(30));

    let letters: Vec<Record> = read_committed(&job.config.kafka.dead_letter_topic, 1)
        .into_values()
        .flatten()
        .collect();
    assert_eq!(letters.len(), apart.len(), "each misplaced record, once");
    for letter in &letters {
        assert_eq!(letter.headers["streamkeeper.reason"], "not_co_partitioned");
        let detail = &letter.headers["streamkeeper.detail"];
        for part in ["by murmur2 (join.partitioner)", "its placement fits crc32"] {
            assert!(detail.contains(part), "{part}: {detail}");
        }
        let source: u32 = letter.headers["streamkeeper.source.partition"]
            .parse()
            .unwrap();
        let expected: u32 = letter.headers["streamkeeper.expected-partition"]
            .parse()
            .unwrap();
        assert_ne!(source, expected);
        assert!(
            detail.contains(&format!("belongs in partition {expected}")),
            "{detail}"
        );
    }
    // The records placed by murmur2 were joined (no card yet: with null).
    assert_eq!(joined_output(&job).len(), apart.len());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_table_written_by_crc32_under_a_murmur2_job_is_reported_as_such_with_an_example_key() {
    let base = base_time();
    let cards = topic("cards").await;
    let transactions = topic("transactions").await;
    let job = Job::new("evidence", &transactions, PARTITIONS, table_join(&cards)).await;
    let address = format!("127.0.0.1:{}", free_port());
    let mut worker = job.start_listening(&address);
    let keys = keys_placed_apart(12);
    // The table's producer is librdkafka's default (crc32); the stream's is the Java client's.
    produce_placed_by(&cards, &records(&keys, base + 10), Partitioner::Crc32);
    produce_placed(&transactions, &records(&keys, base + 20));
    wait_consumed(&job, &mut worker, &[&cards, &transactions]);

    let reports = task_reports(&address);
    let evidence = |topic: &str| {
        let mut total = streamkeeper_contract::co_partitioning::PlacementEvidence::new(topic);
        for side in reports
            .iter()
            .flat_map(|r| &r.placement)
            .filter(|e| e.topic == topic)
        {
            total.add(side);
        }
        total
    };
    let (stream, table) = (evidence(&transactions), evidence(&cards));
    worker.terminate(Duration::from_secs(30));
    assert_eq!((stream.checked, stream.misplaced), (12, 0), "{reports:?}");
    assert_eq!(stream.fitting(), [Partitioner::Murmur2]);
    assert_eq!((table.checked, table.misplaced), (12, 12), "{reports:?}");
    assert_eq!(
        table.fitting(),
        [Partitioner::Crc32],
        "the evidence names crc32"
    );
    let example = table.example.unwrap();
    assert!(keys.contains(&example.key), "{example:?}");
    let key = example.key.as_bytes();
    assert_eq!(
        example.partition,
        Partitioner::Crc32.partition(key, PARTITIONS as u32)
    );
    assert_eq!(
        example.expected,
        Partitioner::Murmur2.partition(key, PARTITIONS as u32)
    );
    // Every transaction went unmatched: its card sat in another task.
    let output = joined_output(&job);
    assert_eq!(output.len(), keys.len());
    assert!(
        output.iter().all(|(_, _, right)| right.is_null()),
        "{output:?}"
    );
}

/// Gives `topic` `total` partitions.
async fn add_partitions(topic: &str, total: usize) {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", kafka_bootstrap())
        .create()
        .unwrap();
    let options = AdminOptions::new().operation_timeout(Some(TIMEOUT));
    for result in admin
        .create_partitions(&[NewPartitions::new(topic, total)], &options)
        .await
        .unwrap()
    {
        result.unwrap_or_else(|(t, e)| panic!("adding partitions to {t}: {e}"));
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_topic_given_partitions_while_the_join_runs_stops_its_tasks_for_good() {
    let base = base_time();
    let cards = topic("cards").await;
    let transactions = topic("transactions").await;
    let job = Job::new("expanded", &transactions, PARTITIONS, table_join(&cards)).await;
    let address = format!("127.0.0.1:{}", free_port());
    let mut worker = job.start_listening(&address);
    let keys: Vec<String> = (0..20).map(card).collect();
    produce_placed(&cards, &records(&keys, base + 10));
    produce_placed(&transactions, &records(&keys, base + 20));
    wait_consumed(&job, &mut worker, &[&cards, &transactions]);

    add_partitions(&cards, PARTITIONS as usize + 2).await;
    let stopped = |reports: &[TaskReport]| {
        reports.len() == PARTITIONS as usize
            && reports.iter().all(|r| {
                r.phase == TaskPhase::Failed && r.failure == Some(TaskFailure::PartitionsChanged)
            })
    };
    let mut last = Vec::new();
    wait_for_or(
        "every task to stop as PartitionsChanged",
        Duration::from_secs(60),
        || {
            last = task_reports(&address);
            stopped(&last)
        },
        || worker.log_tail(),
    );
    let reason = last[0].reason.clone().unwrap_or_default();
    for part in [
        format!("{cards} has {} partitions", PARTITIONS + 2),
        format!("placed by {PARTITIONS}"),
    ] {
        assert!(reason.contains(&part), "{part}: {reason}");
    }
    worker.terminate(Duration::from_secs(30));
    assert_eq!(
        joined_output(&job).len(),
        keys.len(),
        "each transaction joined once"
    );
}
