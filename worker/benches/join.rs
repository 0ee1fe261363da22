//! Join benchmark against the real broker (`tests/bench.sh join` starts it): a stream–table
//! join of `SK_BENCH_JOIN_RECORDS` (1,000,000) card transactions against a table of
//! `SK_BENCH_JOIN_KEYS` (100,000) cards, beside a `count` over the same transactions on the same
//! broker and build. Both run exactly-once with the changelog on; the rate is measured on
//! committed offsets of the transactions topic between 10 % and 95 % of it, so start-up (and
//! the join's table load, which the task reads first: the table's versions are older than
//! every transaction) does not count. The join's table load is timed on its own.
//!
//! Figures are printed and written to `bench-results/join.json`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "../tests/support/mod.rs"]
mod support;

use serde_json::json;
use std::time::{Duration, Instant};
use streamkeeper_contract::co_partitioning::Partitioner;
use streamkeeper_contract::worker_config::{
    JoinKind, JoinLeft, JoinMode, JoinRight, ProcessorConfig, ProcessorKind,
};
use support::join::{base_time, produce_raw_placed_by};
use support::rates::{sample_commits, steady_rate};
use support::{Job, create_topic, unique_name};

fn setting(name: &str, default: u32) -> u32 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn count() -> ProcessorConfig {
    ProcessorConfig {
        key_field: "card".into(),
        time_field: Some("ts".into()),
        kind: ProcessorKind::Count,
    }
}

fn enrich(cards: &str) -> ProcessorConfig {
    ProcessorConfig {
        key_field: "card".into(),
        time_field: Some("ts".into()),
        kind: ProcessorKind::Join {
            join: JoinKind::Table,
            mode: JoinMode::Left,
            left: JoinLeft::default(),
            right: JoinRight {
                topic: cards.to_string(),
                repartition_topic: None,
                key_field: None,
                time_field: Some("ts".into()),
            },
            window: None,
            history: Some(Duration::from_secs(24 * 3600)),
            partitioner: Partitioner::Murmur2,
        },
    }
}

/// What one job's run measured.
struct Run {
    steady: f64,
    total_seconds: f64,
}

/// Runs `job` until it has committed all `records` of its input; the rate and the time.
fn run(job: &Job, records: u32) -> Run {
    let mut worker = job.start(None);
    let samples = sample_commits(job, &mut worker, u64::from(records));
    worker.terminate(Duration::from_secs(60));
    Run {
        steady: steady_rate(&samples, u64::from(records), 0.10, 0.95),
        total_seconds: samples.last().map_or(0.0, |s| s.0),
    }
}

fn main() {
    let records = setting("SK_BENCH_JOIN_RECORDS", 1_000_000);
    let keys = setting("SK_BENCH_JOIN_KEYS", 100_000);
    let partitions = setting("SK_BENCH_PARTITIONS", 4) as i32;
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let transactions = unique_name("bench-transactions");
    let cards = unique_name("bench-cards");
    runtime.block_on(create_topic(&transactions, partitions, false));
    runtime.block_on(create_topic(&cards, partitions, true));

    let base = base_time();
    let card = |index: u32| format!("card-{index}");
    println!("producing {keys} cards and {records} transactions into {partitions} partitions");
    let table = (0..keys).map(|i| {
        let value = format!(
            r#"{{"card":"{}","limit":{},"ts":{base}}}"#,
            card(i),
            100 + i % 900
        );
        (card(i), Some(value), base)
    });
    produce_raw_placed_by(&cards, partitions, Partitioner::Murmur2, table);
    let produce_started = Instant::now();
    let stream = (0..records).map(|i| {
        let key = card(i.wrapping_mul(2_654_435_761) % keys);
        let time = base + 1 + i64::from(i) / 100;
        let value = format!(r#"{{"card":"{key}","amount":{},"ts":{time}}}"#, i % 97 + 1);
        (key, Some(value), time)
    });
    produce_raw_placed_by(&transactions, partitions, Partitioner::Murmur2, stream);
    let produce_rate = f64::from(records) / produce_started.elapsed().as_secs_f64();

    let mut counting =
        runtime.block_on(Job::new("bench-count", &transactions, partitions, count()));
    let mut joining = runtime.block_on(Job::new(
        "bench-join",
        &transactions,
        partitions,
        enrich(&cards),
    ));
    // The worker's defaults (100 ms or 10,000 records), not the tests' tighter cadence.
    for job in [&mut counting, &mut joining] {
        job.config.kafka.commit_max_records = 10_000;
    }
    println!("count over the transactions, exactly-once, changelog on");
    let count_run = run(&counting, records);
    println!("stream-table join of the transactions with the cards, exactly-once, changelog on");
    let join_run = run(&joining, records);
    let joined: usize = joining.output().values().map(Vec::len).sum();
    assert_eq!(
        joined, records as usize,
        "a left table join emits one record per transaction"
    );

    let report = json!({
        "bench": "join",
        "machine": { "cores": cores },
        "input": { "transactions": records, "cards": keys, "partitions": partitions,
                   "produce_records_per_second": produce_rate.round() },
        "count": {
            "steady_records_per_second": count_run.steady.round(),
            "total_seconds_including_start": count_run.total_seconds,
        },
        "join": {
            "processor": "left stream-table join, versioned table (24 h history), exactly-once",
            "steady_records_per_second": join_run.steady.round(),
            "total_seconds_including_start_and_table": join_run.total_seconds,
        },
        "join_vs_count": join_run.steady / count_run.steady,
        "commit_max_records": joining.config.kafka.commit_max_records,
    });
    println!("{}", serde_json::to_string_pretty(&report).unwrap());
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../bench-results");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("join.json");
    std::fs::write(&path, serde_json::to_string_pretty(&report).unwrap()).unwrap();
    println!(
        "stream-table join: {:.0} transactions/s against {keys} cards; count over the same stream: {:.0} records/s ({:.2}x); written to {}",
        join_run.steady,
        count_run.steady,
        join_run.steady / count_run.steady,
        path.display()
    );
}
