//! Joins against the real Kafka broker: the worker's output is compared with the expected join
//! computed here, independently of the worker's code, from the records produced to both topics;
//! an abort in the middle of a transaction changes nothing in it (exactly once, both topics'
//! positions in the state).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

mod support;

use serde_json::json;
use std::time::Duration;
use streamkeeper_contract::worker_config::{JoinKind, JoinMode, JoinRight, JoinWindowConfig};
use support::join::*;
use support::*;

const CARDS: u32 = 60;
/// The table join's history: longer than any of the test's times, so nothing is late.
const HISTORY_MS: i64 = 24 * 3_600_000;

#[tokio::test(flavor = "multi_thread")]
async fn a_table_join_meets_the_table_as_of_each_records_time_exactly_once_across_a_crash() {
    let base = base_time();
    let cards = topic("cards").await;
    let transactions = topic("transactions").await;
    // Versions of the card table: a first limit for every card, a raise for a third of them
    // later, a tombstone for some (a deleted card), and a card that never had a version.
    let mut table = Vec::new();
    for i in 0..CARDS {
        let version = |limit: u32, time: i64| Produced {
            key: card(i),
            value: Some(json!({"card": card(i), "limit": limit, "ts": time})),
            time,
        };
        table.push(version(100 + i, base + 1_000));
        if i % 3 == 0 {
            table.push(version(500 + i, base + 300_000));
        }
        if i % 10 == 7 {
            table.push(Produced {
                key: card(i),
                value: None,
                time: base + 600_000,
            });
        }
    }
    // Transactions over 15 minutes, and a few before any card version existed.
    let stream: Vec<Produced> = (0..3_000u32)
        .map(|n| {
            let key = card((n * 7) % (CARDS + 1));
            let time = base + if n < 20 { 500 } else { i64::from(n) * 300 };
            Produced {
                value: Some(json!({"card": key, "amount": n % 97, "ts": time, "n": n})),
                key,
                time,
            }
        })
        .collect();

    let processor = join_processor(
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
    );
    let job = Job::new("enrich", &transactions, PARTITIONS, processor).await;
    // The first worker aborts in the middle of a transaction once it has processed the table
    // (fewer than 100 records) and part of the stream's first half; the second one resumes both
    // topics from the state's positions.
    let mut worker = job.start(Some("mid-transaction:800"));
    produce_placed(&cards, &table);
    wait_consumed(&job, &mut worker, &[&cards]);
    produce_placed(&transactions, &stream[..1_500]);
    assert!(
        worker.wait_for_crash(Duration::from_secs(120)),
        "the first worker aborts mid-transaction"
    );
    let mut worker = job.start(None);
    produce_placed(&transactions, &stream[1_500..]);
    wait_consumed(&job, &mut worker, &[&transactions, &cards]);

    // A raise of card 1 valid from before the last transactions, read after them: their output
    // stands (a version does not reach back), and a transaction read after it sees it.
    let late = Produced {
        key: card(1),
        value: Some(json!({"card": card(1), "limit": 9_999, "ts": base + 400_000})),
        time: base + 400_000,
    };
    produce_placed(&cards, std::slice::from_ref(&late));
    wait_consumed(&job, &mut worker, &[&cards]);
    let after = Produced {
        key: card(1),
        value: Some(json!({"card": card(1), "amount": 1, "ts": base + 900_000, "n": -1})),
        time: base + 900_000,
    };
    produce_placed(&transactions, std::slice::from_ref(&after));
    wait_consumed(&job, &mut worker, &[&transactions]);
    worker.terminate(Duration::from_secs(30));

    let mut want = expected_table_join(&table, &stream, JoinMode::Left, HISTORY_MS);
    want.push((
        card(1),
        after.value.clone().unwrap(),
        late.value.clone().unwrap(),
    ));
    let want = sorted(want);
    let got = joined_output(&job);
    assert_eq!(
        got.len(),
        want.len(),
        "one output per transaction (left join)"
    );
    assert_eq!(got, want);
    // Not vacuous: matches, unmatched (deleted or never-seen cards) and raised limits all occur.
    assert!(want.iter().any(|(_, _, right)| right.is_null()));
    assert!(
        want.iter()
            .any(|(_, _, right)| right["limit"].as_u64() > Some(500))
    );
}

/// The expected windowed stream join, computed pairwise: a left record meets every right record
/// of its key whose time lies within `before` before and `after` after its own.
fn expected_stream_join(
    left: &[Produced],
    right: &[Produced],
    before: i64,
    after: i64,
) -> Vec<Joined> {
    let mut joined = Vec::new();
    for l in left {
        for r in right {
            if l.key == r.key && r.time >= l.time - before && r.time <= l.time + after {
                joined.push((
                    l.key.clone(),
                    l.value.clone().unwrap(),
                    r.value.clone().unwrap(),
                ));
            }
        }
    }
    sorted(joined)
}

#[tokio::test(flavor = "multi_thread")]
async fn an_inner_stream_join_pairs_records_within_the_window_exactly_once_across_a_crash() {
    let base = base_time();
    let clicks = topic("clicks").await;
    let views = topic("views").await;
    let records = |side: &str, count: u32, step: i64, shift: i64| -> Vec<Produced> {
        (0..count)
            .map(|n| {
                let key = card(n % 40);
                let time = base + i64::from(n) * step + shift;
                Produced {
                    value: Some(json!({"card": key, "side": side, "n": n, "ts": time})),
                    key,
                    time,
                }
            })
            .collect()
    };
    let left = records("view", 1_200, 97, 0);
    let right = records("click", 1_200, 101, 250);
    let (before, after) = (2_000, 1_000);
    let processor = join_processor(
        JoinKind::Stream,
        JoinMode::Inner,
        JoinRight {
            topic: clicks.clone(),
            repartition_topic: None,
            key_field: Some("card".into()),
            time_field: Some("ts".into()),
        },
        Some(JoinWindowConfig {
            before: Duration::from_millis(before as u64),
            after: Duration::from_millis(after as u64),
            // Enough grace for the order the two topics are read in: every pair meets.
            grace: Duration::from_secs(3_600),
        }),
        None,
    );
    let job = Job::new("pairs", &views, PARTITIONS, processor).await;
    // The first worker aborts in the middle of a transaction, part way through the first half.
    let mut worker = job.start(Some("mid-transaction:700"));
    produce_placed(&views, &left[..600]);
    produce_placed(&clicks, &right[..600]);
    assert!(
        worker.wait_for_crash(Duration::from_secs(120)),
        "the first worker aborts mid-transaction"
    );
    let mut worker = job.start(None);
    produce_placed(&views, &left[600..]);
    produce_placed(&clicks, &right[600..]);
    wait_consumed(&job, &mut worker, &[&views, &clicks]);
    worker.terminate(Duration::from_secs(30));

    let want = expected_stream_join(&left, &right, before, after);
    assert!(want.len() > 500, "not vacuous: {} pairs", want.len());
    let got = joined_output(&job);
    assert_eq!(got.len(), want.len(), "every pair once");
    assert_eq!(got, want);
}
