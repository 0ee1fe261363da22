//! A join killed at a dozen points, some with its volume wiped, ends exactly as an uninterrupted
//! run: the same output (each transaction joined once, as the rules say), the same committed
//! offsets of both topics, and the same state key by key.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

mod support;

use serde_json::json;
use std::time::Duration;
use streamkeeper_contract::worker_config::{JoinKind, JoinMode, JoinRight};
use support::join::*;
use support::*;

const CARDS: u32 = 200;
const TRANSACTIONS: u32 = 20_000;
/// Longer than any of the test's times: nothing is late.
const HISTORY_MS: i64 = 24 * 3_600_000;

/// Three versions of every card (the last one a deletion for some), produced in time order.
fn table(base: i64) -> Vec<Produced> {
    let mut table = Vec::new();
    for round in 0..3i64 {
        for i in 0..CARDS {
            let time = base + round * 100_000 + i64::from(i);
            let deleted = round == 2 && i % 7 == 3;
            let value = (!deleted).then(
                || json!({"card": card(i), "limit": 100 * (round + 1) + i64::from(i), "ts": time}),
            );
            table.push(Produced {
                key: card(i),
                value,
                time,
            });
        }
    }
    table
}

/// Transactions over every card, some before any version, all before the table's end in time
/// but read after it: each meets the version valid at its own time.
fn transactions(base: i64) -> Vec<Produced> {
    (0..TRANSACTIONS)
        .map(|n| {
            let key = card((n * 13) % (CARDS + 3));
            let time = base - 5_000 + i64::from(n) * 16;
            Produced {
                value: Some(json!({"card": key, "amount": n % 97, "ts": time, "n": n})),
                key,
                time,
            }
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_table_join_killed_at_a_dozen_points_some_with_the_volume_wiped_ends_exact() {
    let base = base_time();
    let cards = topic("cards").await;
    let transactions_topic = topic("transactions").await;
    let processor = || {
        join_processor(
            JoinKind::Table,
            JoinMode::Left,
            JoinRight {
                topic: cards.clone(),
                repartition_topic: None,
                key_field: None,
                time_field: Some("ts".into()),
            },
            None,
            Some(Duration::from_millis(HISTORY_MS as u64)),
        )
    };
    let reference = Job::new("reference", &transactions_topic, PARTITIONS, processor()).await;
    let crashy = Job::new("crashy", &transactions_topic, PARTITIONS, processor()).await;
    let (table, stream) = (table(base), transactions(base));

    // The table first, read whole by both jobs before any transaction exists: what a
    // transaction meets does not depend on when the crashes fell.
    let mut uninterrupted = reference.start(None);
    produce_placed(&cards, &table);
    wait_consumed(&reference, &mut uninterrupted, &[&cards]);
    let mut crashes = crash_sweep(
        &crashy,
        &[
            "mid-transaction:150",
            "after-kafka-commit:2",
            "mid-restore:1",
        ],
        &[],
    );
    let mut worker = crashy.start(None);
    wait_consumed(&crashy, &mut worker, &[&cards]);
    worker.terminate(Duration::from_secs(30));

    produce_placed(&transactions_topic, &stream);
    wait_consumed(
        &reference,
        &mut uninterrupted,
        &[&transactions_topic, &cards],
    );
    uninterrupted.terminate(Duration::from_secs(30));
    let points = [
        "mid-transaction:1",
        "after-kafka-commit:1",
        "mid-transaction:3000",
        "after-store-commit:3",
        "mid-restore:1",
        "mid-transaction:4000",
        "after-kafka-commit:6",
        "mid-restore:1",
        "mid-transaction:2500",
    ];
    // Then kill -9 from outside, at arbitrary moments.
    crashes += crash_sweep(&crashy, &points, &[700, 1500]);
    assert!(
        crashes >= 10,
        "only {crashes} of the swept failpoints were reached"
    );
    let mut worker = crashy.start(None);
    wait_consumed(&crashy, &mut worker, &[&transactions_topic, &cards]);
    worker.terminate(Duration::from_secs(30));

    let want = expected_table_join(&table, &stream, JoinMode::Left, HISTORY_MS);
    assert_joined_once(&crashy, &reference, &want, stream.len());
    for topic in [&transactions_topic, &cards] {
        assert_eq!(
            crashy.committed_offsets_in(topic),
            reference.committed_offsets_in(topic)
        );
    }
    let (expected_state, actual_state) = (reference.local_state(), crashy.local_state());
    for task in 0..PARTITIONS as u32 {
        assert!(!expected_state[&task].is_empty());
        assert!(
            actual_state[&task] == expected_state[&task],
            "task {task}: state differs key by key"
        );
    }
    // Not vacuous: matches, deletions and transactions before any version all occur.
    assert!(want.iter().any(|(_, _, right)| right.is_null()));
    assert!(
        want.iter()
            .any(|(_, _, right)| right["limit"].as_i64() > Some(300))
    );
}
