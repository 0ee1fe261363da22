//! A join whose left topic is keyed by something else than the join key (transactions keyed by
//! their own id, joined to cards by card id) re-keys it through a repartition topic: every
//! transaction reaches the task holding its card, exactly once through crashes, whatever the
//! two topics' partition counts; a record without a join key is dead-lettered where it was read,
//! and what the join has consumed of the repartition topic is deleted.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

mod support;

use serde_json::json;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};
use streamkeeper_contract::co_partitioning::Partitioner;
use streamkeeper_contract::worker_config::{JoinKind, JoinMode};
use support::join::*;
use support::topics::{Record, read_committed, watermarks};
use support::*;

const CARDS: u32 = 150;
/// Longer than any of the test's times: nothing is late.
const HISTORY_MS: i64 = 24 * 3_600_000;

/// Transactions over every card (and a few without one), as the join sees them: keyed by card.
fn transactions(base: i64, count: u32) -> Vec<Produced> {
    (0..count)
        .map(|n| {
            let key = card((n * 13) % (CARDS + 3));
            let time = base - 5_000 + i64::from(n) * 20;
            Produced {
                value: Some(
                    json!({"id": format!("txn-{n}"), "card": key, "amount": n % 97, "ts": time}),
                ),
                key,
                time,
            }
        })
        .collect()
}

/// Produces `stream` as its producer does: keyed by the transaction id, placed by murmur2 among
/// `partitions`.
fn produce_keyed_by_id(topic: &str, partitions: i32, stream: &[Produced]) {
    let records = stream.iter().map(|record| {
        let value = record.value.as_ref().unwrap();
        let id = value["id"].as_str().unwrap().to_string();
        (id, Some(value.to_string()), record.time)
    });
    produce_raw_placed_by(topic, partitions, Partitioner::Murmur2, records);
}

/// A job re-keying `transactions` into a repartition topic of its own, as the operator would
/// create it (the task count's partitions, records kept until purged).
async fn job(name: &str, transactions: &str, cards: &str) -> Job {
    let repartition = unique_name(&format!("{name}.left-repartition"));
    create_topic(&repartition, PARTITIONS, false).await;
    Job::new(
        name,
        transactions,
        PARTITIONS,
        card_table_join(JoinKind::Table, cards, Some(repartition)),
    )
    .await
}

fn repartition_topic(job: &Job) -> String {
    job.config
        .processor
        .left_repartition_topic()
        .unwrap()
        .to_string()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_re_keyed_join_killed_at_many_points_some_with_the_volume_wiped_ends_exact() {
    // Fewer transaction partitions than tasks: task 3 re-keys nothing, and joins all the same.
    const SOURCE_PARTITIONS: i32 = 3;
    let base = base_time();
    let cards = topic("cards").await;
    let transactions_topic = unique_name("transactions");
    create_topic(&transactions_topic, SOURCE_PARTITIONS, false).await;
    let mut reference = job("reference", &transactions_topic, &cards).await;
    let mut crashy = job("crashy", &transactions_topic, &cards).await;
    for job in [&mut reference, &mut crashy] {
        // The repartition topics are counted at the end: nothing is purged before.
        job.env.push((
            "STREAMKEEPER_REPARTITION_PURGE_SECONDS".into(),
            "100000".into(),
        ));
    }
    let (table, stream) = (card_versions(base, CARDS, 0..2), transactions(base, 12_000));

    produce_placed(&cards, &table);
    let mut uninterrupted = reference.start(None);
    wait_consumed(&reference, &mut uninterrupted, &[&cards]);
    let mut worker = crashy.start(None);
    wait_consumed(&crashy, &mut worker, &[&cards]);
    worker.terminate(Duration::from_secs(30));

    produce_keyed_by_id(&transactions_topic, SOURCE_PARTITIONS, &stream);
    let consumed = [
        (transactions_topic.as_str(), SOURCE_PARTITIONS),
        (cards.as_str(), PARTITIONS),
    ];
    wait_consumed_of(&reference, &mut uninterrupted, &consumed);
    wait_joined(&reference, &mut uninterrupted, stream.len());
    uninterrupted.terminate(Duration::from_secs(30));
    let points = [
        "mid-transaction:1",
        "mid-transaction:150",
        "after-kafka-commit:1",
        "mid-transaction:2500",
        "after-store-commit:3",
        "mid-restore:1",
        "after-kafka-commit:5",
        "mid-transaction:4000",
    ];
    let crashes = crash_sweep(&crashy, &points, &[700, 1500]);
    assert!(
        crashes >= 6,
        "only {crashes} of the swept failpoints were reached"
    );
    let mut worker = crashy.start(None);
    wait_consumed_of(&crashy, &mut worker, &consumed);
    wait_joined(&crashy, &mut worker, stream.len());
    worker.terminate(Duration::from_secs(30));

    let want = expected_table_join(&table, &stream, JoinMode::Left, HISTORY_MS);
    assert_joined_once(&crashy, &reference, &want, stream.len());
    // Each transaction reached the repartition topic once, in the partition of its card.
    let mut per_partition = BTreeMap::new();
    for record in &stream {
        *per_partition
            .entry(partition_of_key(&record.key) as i32)
            .or_insert(0) += 1;
    }
    for topic in [repartition_topic(&reference), repartition_topic(&crashy)] {
        let written: BTreeMap<i32, usize> = read_committed(&topic, PARTITIONS)
            .into_iter()
            .map(|(p, records)| {
                assert!(records.iter().all(|r| partition_of_key(&r.key) as i32 == p));
                (p, records.len())
            })
            .collect();
        assert_eq!(written, per_partition, "{topic}");
    }
    let group = |job: &Job| job.config.job.group_id();
    assert_eq!(
        committed_offsets(&group(&crashy), &transactions_topic, SOURCE_PARTITIONS),
        committed_offsets(&group(&reference), &transactions_topic, SOURCE_PARTITIONS),
    );
    // Key by key the same state, but for what names each job's own repartition topic: the
    // processor config (which holds its name), the topic's identity, and the position in it
    // (the crashed job's topic holds the aborted transactions too).
    let own_topic = |state: BTreeMap<u32, BTreeMap<Vec<u8>, Vec<u8>>>| {
        state
            .into_iter()
            .map(|(task, mut entries)| {
                assert!(entries.remove(&b"mprocessor"[..]).is_some());
                assert!(entries.remove(&b"minput"[..]).is_some());
                assert!(entries.remove(&b"minput_position"[..]).is_some());
                (task, entries)
            })
            .collect::<BTreeMap<_, _>>()
    };
    let expected_state = own_topic(reference.local_state());
    let actual_state = own_topic(crashy.local_state());
    for task in 0..PARTITIONS as u32 {
        assert!(!expected_state[&task].is_empty());
        let differing: Vec<String> = expected_state[&task]
            .iter()
            .filter(|(key, value)| actual_state[&task].get(*key) != Some(*value))
            .map(|(key, _)| String::from_utf8_lossy(key).into_owned())
            .chain(
                actual_state[&task]
                    .keys()
                    .filter(|key| !expected_state[&task].contains_key(*key))
                    .map(|key| String::from_utf8_lossy(key).into_owned()),
            )
            .collect();
        assert!(
            differing.is_empty(),
            "task {task}: state differs at {differing:?}"
        );
    }
    assert!(want.iter().any(|(_, _, right)| right.is_null()));
    assert!(want.iter().any(|(_, _, right)| right["limit"] == 200));
}

#[tokio::test(flavor = "multi_thread")]
async fn more_source_partitions_than_tasks_are_dealt_out_bad_records_dead_lettered_and_consumed_records_purged()
 {
    // More transaction partitions than tasks: tasks 0 and 1 re-key two each.
    const SOURCE_PARTITIONS: i32 = 6;
    let base = base_time();
    let cards = topic("cards").await;
    let transactions_topic = unique_name("transactions");
    create_topic(&transactions_topic, SOURCE_PARTITIONS, false).await;
    let mut job = job("dealt", &transactions_topic, &cards).await;
    job.env
        .push(("STREAMKEEPER_REPARTITION_PURGE_SECONDS".into(), "1".into()));
    let (table, stream) = (card_versions(base, CARDS, 0..2), transactions(base, 3_000));
    produce_placed(&cards, &table);
    let mut worker = job.start(None);
    wait_consumed(&job, &mut worker, &[&cards]);
    produce_keyed_by_id(&transactions_topic, SOURCE_PARTITIONS, &stream);
    // Two records without a join key.
    let bad = [
        ("no-card-1".to_string(), json!({"id": "x", "ts": base})),
        ("no-card-2".to_string(), json!({"id": "y", "ts": base})),
    ];
    let mut placed = Vec::new();
    for (key, value) in &bad {
        let partition = Partitioner::Murmur2.partition(key.as_bytes(), SOURCE_PARTITIONS as u32);
        placed.push(partition.to_string());
        produce_raw_placed_by(
            &transactions_topic,
            SOURCE_PARTITIONS,
            Partitioner::Murmur2,
            [(key.clone(), Some(value.to_string()), base)],
        );
    }
    let repartition = repartition_topic(&job);
    let source = [(transactions_topic.as_str(), SOURCE_PARTITIONS)];
    wait_consumed_of(&job, &mut worker, &source);
    wait_joined(&job, &mut worker, stream.len());

    // What the join consumed of the repartition topic is deleted, up to its committed position.
    let committed = committed_offsets(&job.config.job.group_id(), &repartition, PARTITIONS);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let starts: BTreeMap<i32, i64> = watermarks(&repartition, PARTITIONS)
            .into_iter()
            .map(|(p, (start, _))| (p, start))
            .collect();
        if starts == committed {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "repartition topic not purged: starts {starts:?}, committed {committed:?}; log:\n{}",
            worker.log_tail()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    worker.terminate(Duration::from_secs(30));
    assert!(
        committed.values().all(|offset| *offset > 0),
        "{committed:?}"
    );

    assert_eq!(
        joined_output(&job),
        expected_table_join(&table, &stream, JoinMode::Left, HISTORY_MS)
    );
    let letters: Vec<Record> = read_committed(&job.config.kafka.dead_letter_topic, 1)
        .into_values()
        .flatten()
        .collect();
    assert_eq!(letters.len(), bad.len(), "each record without a card, once");
    let mut partitions = Vec::new();
    for letter in &letters {
        assert_eq!(letter.headers["streamkeeper.reason"], "missing_field");
        assert_eq!(
            letter.headers["streamkeeper.source.topic"],
            transactions_topic
        );
        partitions.push(letter.headers["streamkeeper.source.partition"].clone());
    }
    partitions.sort();
    placed.sort();
    assert_eq!(partitions, placed, "named where they were read");
}
