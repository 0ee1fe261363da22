//! Every join kind and mode against the real Kafka broker, with out-of-order and late records:
//! the worker's output is compared with the join computed here from the records produced, by a
//! second implementation of the documented rules (docs/joins.md), not the worker's code.
//!
//! A join's output depends on the order a task processes records in, which the test fixes by
//! producing in phases and waiting until each is consumed. Records of a stream join come in
//! blocks of event time 200 s apart, each spanning 50 s; with 10 s windows and a 60 s grace
//! nothing closes while a block is processed, every record of a block is closed once the next
//! block is, and no pair spans two blocks. So within a block every pair in window meets,
//! whatever the order; a block's unpaired records are emitted once a later block reaches their
//! partition; and a record of an old block produced after a newer block is late.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

mod support;

use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::time::Duration;
use streamkeeper_contract::worker_config::{JoinKind, JoinMode, JoinRight, JoinWindowConfig};
use support::join::*;
use support::*;

const KEYS: u32 = 40;
const BEFORE_MS: i64 = 10_000;
const AFTER_MS: i64 = 10_000;
const GRACE_MS: i64 = 60_000;
const BLOCK_MS: i64 = 200_000;

/// Which topic a record goes to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Side {
    Left,
    Right,
}

/// A record of either side, in the phase it is produced in.
#[derive(Clone, Debug)]
struct Sided {
    side: Side,
    record: Produced,
}

fn sided(side: Side, key: String, time: i64, n: u32) -> Sided {
    let value = json!({"card": key, "ts": time, "n": n, "side": format!("{side:?}")});
    Sided {
        side,
        record: Produced {
            key,
            value: Some(value),
            time,
        },
    }
}

/// The phases of the stream join test, in order: each block's records, then records of the
/// block before it in event time but within its grace (out of order), and after the next block,
/// records of an old block (late).
fn stream_phases(base: i64, blocks: i64) -> Vec<Vec<Sided>> {
    let mut n = 0;
    let mut next = || {
        n += 1;
        n
    };
    let mut phases = Vec::new();
    for block in 0..blocks {
        let start = base + block * BLOCK_MS;
        let mut main = Vec::new();
        for i in 0..KEYS {
            let left_time = start + 5_000 + i64::from((i * 7_919) % 40) * 1_000;
            main.push(sided(Side::Left, card(i), left_time, next()));
            match i % 3 {
                // A partner within the window, before or after.
                0 => {
                    let offset = (i64::from(i % 5) - 2) * 3_000;
                    main.push(sided(Side::Right, card(i), left_time + offset, next()));
                }
                // A record of the key outside the window: no partner.
                1 => {
                    let offset = if left_time + 25_000 <= start + 50_000 {
                        25_000
                    } else {
                        -25_000
                    };
                    main.push(sided(Side::Right, card(i), left_time + offset, next()));
                }
                _ => {}
            }
        }
        // Reverse the produce order: event times arrive out of order within the block.
        main.reverse();
        phases.push(main);
        if block > 0 {
            // Records of the block before, now past its grace: late, dropped.
            let old = start - BLOCK_MS + 20_000;
            phases.push(
                (0..KEYS)
                    .step_by(5)
                    .flat_map(|i| {
                        [
                            sided(Side::Left, card(i), old, next()),
                            sided(Side::Right, card(i), old + 1_000, next()),
                        ]
                    })
                    .collect(),
            );
        }
        // Earlier than most of the block, within its grace: out of order, still joined.
        phases.push(
            (0..KEYS)
                .step_by(4)
                .map(|i| {
                    let side = if i % 8 == 0 { Side::Left } else { Side::Right };
                    sided(side, card(i), start + 1_000 + i64::from(i) * 100, next())
                })
                .collect(),
        );
    }
    phases
}

/// The last partner time of a record of `side` at `t`: the end of its window.
fn window_end(side: Side, t: i64) -> i64 {
    match side {
        Side::Left => t + AFTER_MS,
        Side::Right => t + BEFORE_MS,
    }
}

/// The expected stream join, from the rules: per partition, stream time is the largest event
/// time seen; a record is late when its window end plus grace is below the stream time it
/// arrives at (phases fix that order); a left and a right record of a key pair when the right
/// one's time lies in [left − before, left + after] and neither is late; in `left` (`outer`)
/// mode an unpaired left (or right) record is emitted once its window end plus grace is below
/// the final stream time.
/// Also returns how many records were late.
fn expected_stream_join(phases: &[Vec<Sided>], mode: JoinMode) -> (Vec<Joined>, usize) {
    let mut stream_time: BTreeMap<u32, i64> = BTreeMap::new();
    let mut kept: Vec<&Sided> = Vec::new();
    let mut late_records = 0;
    for phase in phases {
        let before_phase = stream_time.clone();
        for record in phase {
            let partition = partition_of_key(&record.record.key);
            let now = before_phase.get(&partition).copied().unwrap_or(i64::MIN);
            let late = window_end(record.side, record.record.time) + GRACE_MS < now;
            late_records += usize::from(late);
            if !late {
                kept.push(record);
                let time = stream_time.entry(partition).or_insert(i64::MIN);
                *time = (*time).max(record.record.time);
            }
        }
    }
    let value = |sided: &Sided| sided.record.value.clone().unwrap();
    let mut joined = Vec::new();
    let mut paired = vec![false; kept.len()];
    for (l, left) in kept
        .iter()
        .enumerate()
        .filter(|(_, s)| s.side == Side::Left)
    {
        for (r, right) in kept
            .iter()
            .enumerate()
            .filter(|(_, s)| s.side == Side::Right)
        {
            let (tl, tr) = (left.record.time, right.record.time);
            if left.record.key == right.record.key && tr >= tl - BEFORE_MS && tr <= tl + AFTER_MS {
                joined.push((left.record.key.clone(), value(left), value(right)));
                paired[l] = true;
                paired[r] = true;
            }
        }
    }
    for (index, record) in kept.iter().enumerate() {
        let emits = match mode {
            JoinMode::Inner => false,
            JoinMode::Left => record.side == Side::Left,
            JoinMode::Outer => true,
        };
        let final_time = stream_time[&partition_of_key(&record.record.key)];
        let closed = window_end(record.side, record.record.time) + GRACE_MS < final_time;
        if emits && closed && !paired[index] {
            let (left, right) = match record.side {
                Side::Left => (value(record), Value::Null),
                Side::Right => (Value::Null, value(record)),
            };
            joined.push((record.record.key.clone(), left, right));
        }
    }
    (sorted(joined), late_records)
}

/// Runs a stream join of `mode` over the phases and compares its output with the expected one.
async fn stream_join_matches_the_rules(mode: JoinMode) {
    let left_topic = topic("payments").await;
    let right_topic = topic("authorisations").await;
    let processor = join_processor(
        JoinKind::Stream,
        mode,
        JoinRight {
            topic: right_topic.clone(),
            repartition_topic: None,
            key_field: Some("card".into()),
            time_field: Some("ts".into()),
        },
        Some(JoinWindowConfig {
            before: Duration::from_millis(BEFORE_MS as u64),
            after: Duration::from_millis(AFTER_MS as u64),
            grace: Duration::from_millis(GRACE_MS as u64),
        }),
        None,
    );
    let job = Job::new("stream-modes", &left_topic, PARTITIONS, processor).await;
    let phases = stream_phases(base_time(), 4);
    let mut worker = job.start(None);
    for phase in &phases {
        for (side, topic) in [(Side::Left, &left_topic), (Side::Right, &right_topic)] {
            let records: Vec<Produced> = phase
                .iter()
                .filter(|s| s.side == side)
                .map(|s| s.record.clone())
                .collect();
            produce_placed(topic, &records);
        }
        wait_consumed(&job, &mut worker, &[&left_topic, &right_topic]);
    }
    worker.terminate(Duration::from_secs(30));

    let (want, late) = expected_stream_join(&phases, mode);
    assert!(late >= 20, "late records occur: {late}");
    let got = joined_output(&job);
    let unmatched = |joined: &[Joined]| {
        joined
            .iter()
            .filter(|(_, l, r)| l.is_null() || r.is_null())
            .count()
    };
    assert_eq!(
        (got.len(), unmatched(&got)),
        (want.len(), unmatched(&want)),
        "outputs and unmatched outputs"
    );
    assert_eq!(got, want);
    // Not vacuous: pairs, and (but for inner) unmatched records, occur.
    assert!(want.len() - unmatched(&want) > 30, "{} pairs", want.len());
    if mode != JoinMode::Inner {
        assert!(unmatched(&want) > 10, "{} unmatched", unmatched(&want));
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_left_stream_join_emits_each_unpaired_left_record_once_when_its_window_closes() {
    stream_join_matches_the_rules(JoinMode::Left).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_outer_stream_join_emits_unpaired_records_of_both_sides_and_drops_late_ones() {
    stream_join_matches_the_rules(JoinMode::Outer).await;
}

/// Table records: two versions of each card, produced out of time order for half of them, then
/// tombstones for some (a tombstone's time is its Kafka timestamp). The tombstones come last:
/// they move table time past the first versions' time plus the history, and a version read
/// after that would be late.
fn table_versions(base: i64) -> Vec<Produced> {
    let mut table = Vec::new();
    for i in 0..KEYS {
        let version = |limit: u32, time: i64| Produced {
            key: card(i),
            value: Some(json!({"card": card(i), "limit": limit, "ts": time})),
            time,
        };
        let mut versions = vec![version(100 + i, base), version(200 + i, base + 300_000)];
        if i % 2 == 0 {
            versions.reverse();
        }
        table.extend(versions);
    }
    table.extend((0..KEYS).filter(|i| i % 5 == 3).map(|i| Produced {
        key: card(i),
        value: None,
        time: base + 500_000,
    }));
    table
}

#[tokio::test(flavor = "multi_thread")]
async fn an_inner_table_join_meets_versions_as_of_each_records_time_and_drops_late_records() {
    let base = base_time();
    let history = Duration::from_secs(400);
    let cards = topic("cards").await;
    let transactions = topic("transactions").await;
    let processor = join_processor(
        JoinKind::Table,
        JoinMode::Inner,
        JoinRight {
            topic: cards.clone(),
            repartition_topic: None,
            key_field: None,
            time_field: Some("ts".into()),
        },
        None,
        Some(history),
    );
    let job = Job::new("table-inner", &transactions, PARTITIONS, processor).await;
    let table = table_versions(base);
    // Transactions before the first version, between versions, after a deletion, and older
    // than the table's time minus the history (late: table time is base + 500 s, history 400 s).
    let stream: Vec<Produced> = (0..400u32)
        .map(|n| {
            let key = card(n % (KEYS + 2));
            let time = base - 50_000 + i64::from(n) * 1_500;
            Produced {
                value: Some(json!({"card": key, "amount": n % 97, "ts": time, "n": n})),
                key,
                time,
            }
        })
        .collect();
    let mut worker = job.start(None);
    produce_placed(&cards, &table);
    wait_consumed(&job, &mut worker, &[&cards]);
    // Out of order: the second half of the transactions first.
    produce_placed(&transactions, &stream[200..]);
    produce_placed(&transactions, &stream[..200]);
    wait_consumed(&job, &mut worker, &[&transactions]);
    worker.terminate(Duration::from_secs(30));

    let history_ms = i64::try_from(history.as_millis()).unwrap();
    let want = expected_table_join(&table, &stream, JoinMode::Inner, history_ms);
    let got = joined_output(&job);
    assert_eq!(
        got.len(),
        want.len(),
        "one output per transaction that met a version"
    );
    assert_eq!(got, want);
    // Not vacuous: both versions met, some transactions late, some before any version or
    // after a deletion.
    let limits: Vec<u64> = want
        .iter()
        .filter_map(|(_, _, r)| r["limit"].as_u64())
        .collect();
    assert!(limits.iter().any(|l| *l < 200) && limits.iter().any(|l| *l >= 200));
    assert!(
        want.len() < stream.len() - 50,
        "{} of {}",
        want.len(),
        stream.len()
    );
    // In left mode every transaction but a late one has an output.
    let late = stream
        .iter()
        .filter(|record| {
            let one = std::slice::from_ref(*record);
            expected_table_join(&table, one, JoinMode::Left, history_ms).is_empty()
        })
        .count();
    assert!(late > 20, "late transactions occur: {late}");
}
