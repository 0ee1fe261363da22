//! A global table join (`join.kind: globalTable`): every task reads every partition of the
//! table, so transactions keyed and placed by anything meet their card in whichever task reads
//! them; exactly once through crashes (the volume wiped once), a table given partitions while
//! the job runs is read whole by every task, and each task's state holds the whole table.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

mod support;

use rdkafka::admin::{AdminOptions, NewPartitions};
use serde_json::json;
use std::time::Duration;
use streamkeeper_contract::co_partitioning::Partitioner;
use streamkeeper_contract::task_report::TaskPhase;
use streamkeeper_contract::worker_config::{JoinKind, JoinMode};
use support::join::*;
use support::*;

const CARDS: u32 = 120;
const TABLE_PARTITIONS: i32 = 3;
/// Longer than any of the test's times: nothing is late.
const HISTORY_MS: i64 = 24 * 3_600_000;

/// Transactions `range` at times from `from` on, as the join sees them (keyed by card).
fn transactions(from: i64, range: std::ops::Range<u32>) -> Vec<Produced> {
    range
        .map(|n| {
            let key = card((n * 13) % (CARDS + 3));
            let time = from + i64::from(n) * 10;
            Produced {
                value: Some(json!({"id": format!("txn-{n}"), "card": key, "ts": time})),
                key,
                time,
            }
        })
        .collect()
}

/// Produces transactions keyed by their id (not the join key), placed by murmur2 of it.
fn produce_by_id(topic: &str, stream: &[Produced]) {
    let records = stream.iter().map(|record| {
        let value = record.value.as_ref().unwrap();
        let id = value["id"].as_str().unwrap().to_string();
        (id, Some(value.to_string()), record.time)
    });
    produce_raw_placed_by(topic, PARTITIONS, Partitioner::Murmur2, records);
}

/// Produces table versions placed by crc32 among `partitions`.
fn produce_table(topic: &str, partitions: i32, table: &[Produced]) {
    let records = table.iter().map(|version| {
        let value = version.value.as_ref().map(|v| v.to_string());
        (version.key.clone(), value, version.time)
    });
    produce_raw_placed_by(topic, partitions, Partitioner::Crc32, records);
}

/// Waits until every task of the worker at `address` runs with nothing left to read, and,
/// when `restarted` is given, after each one restarted for `restarted`'s reason.
fn wait_all_read(address: &str, worker: &mut Worker, restarted: Option<&str>) {
    wait_while_running(worker, Duration::from_secs(120), || {
        let reports = task_reports(address);
        let read = reports.len() == PARTITIONS as usize
            && reports
                .iter()
                .all(|r| r.phase == TaskPhase::Running && r.input_lag == Some(0));
        let restarts = restarted.is_none_or(|reason| {
            let metrics = http_get(address, "/metrics")
                .map(|(_, body)| body)
                .unwrap_or_default();
            (0..PARTITIONS).all(|task| {
                let series = format!(
                    "streamkeeper_task_errors_total{{task=\"{task}\",reason=\"{reason}\"}} "
                );
                metrics
                    .lines()
                    .find_map(|line| line.strip_prefix(&series))
                    .is_some_and(|count| count != "0")
            })
        });
        if read && restarts {
            return Ok(());
        }
        Err(format!("not every task read everything: {reports:?}"))
    });
}

#[tokio::test(flavor = "multi_thread")]
async fn every_task_reads_the_whole_table_through_crashes_and_new_partitions() {
    let base = base_time();
    let cards = unique_name("cards");
    create_topic(&cards, TABLE_PARTITIONS, false).await;
    let transactions_topic = topic("transactions").await;
    let job = Job::new(
        "global",
        &transactions_topic,
        PARTITIONS,
        card_table_join(JoinKind::GlobalTable, &cards, None),
    )
    .await;

    // The table, placed by another partitioner among another count than the transactions.
    let mut table = card_versions(base, CARDS, 0..2);
    produce_table(&cards, TABLE_PARTITIONS, &table);
    let address = format!("127.0.0.1:{}", free_port());
    let mut worker = job.start_listening(&address);
    wait_all_read(&address, &mut worker, None);
    worker.terminate(Duration::from_secs(30));

    let mut stream = transactions(base + 250_000, 0..6_000);
    produce_by_id(&transactions_topic, &stream);
    let points = [
        "mid-transaction:700",
        "after-kafka-commit:2",
        "mid-restore:1",
    ];
    let crashes = crash_sweep(&job, &points, &[900]);
    assert!(crashes >= 2, "only {crashes} failpoints reached");

    // The table gets a partition while the job runs; new versions land there only, and every
    // task reads them before the later transactions.
    let mut worker = job.start_listening(&address);
    wait_all_read(&address, &mut worker, None);
    let admin = rdkafka::config::ClientConfig::new()
        .set("bootstrap.servers", kafka_bootstrap())
        .create::<rdkafka::admin::AdminClient<rdkafka::client::DefaultClientContext>>()
        .unwrap();
    let options = AdminOptions::new().operation_timeout(Some(Duration::from_secs(30)));
    let added = admin
        .create_partitions(&[NewPartitions::new(&cards, 4)], &options)
        .await
        .unwrap();
    assert!(added.iter().all(Result::is_ok), "{added:?}");
    // After every earlier transaction's time, before every later one's.
    let newest = card_versions(base, CARDS, 4..5);
    let records = newest.iter().map(|version| {
        let value = version.value.as_ref().map(|v| v.to_string());
        (version.key.clone(), value, version.time)
    });
    produce_raw_to(&cards, |_| 3, records);
    wait_all_read(&address, &mut worker, Some("sources_changed"));
    table.extend(newest);
    let later = transactions(base + 450_000, 6_000..8_000);
    produce_by_id(&transactions_topic, &later);
    stream.extend(later);
    wait_consumed(&job, &mut worker, &[&transactions_topic]);
    worker.terminate(Duration::from_secs(30));

    let want = expected_table_join(&table, &stream, JoinMode::Left, HISTORY_MS);
    let got = joined_output(&job);
    assert_eq!(got.len(), stream.len(), "each transaction joined once");
    assert_eq!(got, want);
    assert!(want.iter().any(|(_, _, right)| right["limit"] == 500));
    assert!(want.iter().any(|(_, _, right)| right["limit"] == 200));
    // Every task holds every card's versions: the whole table, four times over.
    for (task, state) in job.local_state() {
        let versioned: std::collections::BTreeSet<Vec<u8>> = state
            .keys()
            .filter(|key| key.first() == Some(&b'v'))
            .map(|key| key[..key.len() - 8].to_vec())
            .collect();
        assert_eq!(versioned.len(), CARDS as usize, "task {task}");
    }
}

/// The sum over tasks of the worker's `streamkeeper_consumer_stalls_total`.
fn consumer_stalls(address: &str) -> u64 {
    let metrics = http_get(address, "/metrics")
        .map(|(_, body)| body)
        .unwrap_or_default();
    metrics
        .lines()
        .filter(|line| line.starts_with("streamkeeper_consumer_stalls_total{"))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_table_partition_that_stops_delivering_while_the_stream_flows_is_found_stalled() {
    let base = base_time();
    let cards = unique_name("cards");
    create_topic(&cards, TABLE_PARTITIONS, false).await;
    let transactions_topic = topic("transactions").await;
    let mut job = Job::new(
        "stalled",
        &transactions_topic,
        PARTITIONS,
        card_table_join(JoinKind::GlobalTable, &cards, None),
    )
    .await;
    job.env
        .push(("STREAMKEEPER_CONSUMER_STALL_SECONDS".into(), "4".into()));
    produce_table(&cards, TABLE_PARTITIONS, &card_versions(base, CARDS, 0..1));

    // Transactions flow the whole time, so the consumer always has records of some partition;
    // one task's table partitions stop delivering after 20 records (the failpoint pauses
    // their fetch as a stalled consumer does), and the table's next versions come after.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flowing = {
        let (stop, topic) = (std::sync::Arc::clone(&stop), transactions_topic.clone());
        std::thread::spawn(move || {
            let mut next = 0;
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                produce_by_id(&topic, &transactions(base + 250_000, next..next + 50));
                next += 50;
                std::thread::sleep(Duration::from_millis(100));
            }
        })
    };
    let address = format!("127.0.0.1:{}", free_port());
    let mut worker = job.spawn_with(
        &job.config.state.dir,
        Some("right-input-stops:20"),
        Some(&address),
    );
    let log = worker.log_path.clone();
    wait_while_running(&mut worker, Duration::from_secs(60), || {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        match text.contains("failpoint: the input consumer stops fetching") {
            true => Ok(()),
            false => Err("the failpoint has not stopped a table partition yet".into()),
        }
    });
    produce_table(&cards, TABLE_PARTITIONS, &card_versions(base, CARDS, 1..2));
    wait_while_running(
        &mut worker,
        Duration::from_secs(60),
        || match consumer_stalls(&address) {
            0 => Err("no consumer stall found while a table partition delivers nothing".into()),
            _ => Ok(()),
        },
    );
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    flowing.join().unwrap();
    // The stalled task restarted its reading with a new consumer and read its whole table.
    wait_all_read(&address, &mut worker, None);
    // Later transactions (ids from 100,000 on, after every flowing one) meet the whole table.
    let later = transactions(base + 450_000, 100_000..100_400);
    produce_by_id(&transactions_topic, &later);
    let later_met = |job: &Job| -> Vec<Joined> {
        joined_output(job)
            .into_iter()
            .filter(|(_, left, _)| {
                let id = left["id"].as_str().unwrap();
                id.trim_start_matches("txn-").parse::<u32>().unwrap() >= 100_000
            })
            .collect()
    };
    wait_while_running(&mut worker, Duration::from_secs(120), || {
        let met = later_met(&job).len();
        match met == later.len() {
            true => Ok(()),
            false => Err(format!(
                "{met} of {} later transactions joined",
                later.len()
            )),
        }
    });
    worker.terminate(Duration::from_secs(30));
    for (key, _, right) in &later_met(&job) {
        let index: u32 = key.trim_start_matches("card-").parse().unwrap();
        if index < CARDS {
            assert_eq!(right["limit"], 200, "{key} met its card's newest version");
        } else {
            assert!(right.is_null(), "{key} has no card");
        }
    }
}
