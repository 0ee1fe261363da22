//! Worker benchmark against the real broker (`tests/bench.sh worker` starts it):
//!
//! 1. **EOS throughput**: an `aggregate` job with hourly tumbling windows, exactly-once and the
//!    changelog on, over a pre-produced input; the rate is measured on committed input offsets
//!    (what a transaction made durable), between 10 % and 95 % of the input, so start-up and the
//!    tail do not count.
//! 2. **Changelog restore**: the same job restarted on an empty state directory rebuilds every
//!    task from its changelog (at least 1,000,000 records); records/s and MB/s, next to a plain
//!    `read_committed` read of the same changelog with one consumer thread per partition — the
//!    limit the broker and this machine set.
//!
//! Figures are printed and written to `bench-results/worker.json`. Sizes can be changed with
//! `SK_BENCH_RECORDS`, `SK_BENCH_KEYS` and `SK_BENCH_PARTITIONS`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "../tests/support/mod.rs"]
mod support;

use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::{Message, Offset, TopicPartitionList};
use serde_json::{Value, json};
use std::time::{Duration, Instant};
use streamkeeper_contract::worker_config::{ProcessorConfig, ProcessorKind, WindowConfig};
use support::Job;
use support::rates::{sample_commits, steady_rate};

const MB: f64 = 1024.0 * 1024.0;

fn hourly_aggregate() -> ProcessorConfig {
    ProcessorConfig {
        key_field: "card".into(),
        time_field: Some("ts".into()),
        kind: ProcessorKind::Aggregate {
            value_field: "amount".into(),
            window: Some(WindowConfig {
                size: Duration::from_secs(3600),
                advance: None,
                grace: Duration::from_secs(60),
            }),
        },
    }
}

struct Restore {
    seconds: f64,
    records: u64,
    bytes: u64,
}

/// Starts the job on an empty state directory and waits until every task is Running.
fn restore_from_empty(job: &Job) -> Restore {
    let state = job.dir.path().join("restore-state");
    let listen = format!("127.0.0.1:{}", support::free_port());
    let started = Instant::now();
    let mut worker = job.spawn_with(&state, None, Some(&listen));
    loop {
        if let Some((200, body)) = support::http_get(&listen, "/v1/tasks") {
            let tasks: Value = serde_json::from_str(&body).unwrap();
            let tasks = tasks["tasks"].as_array().cloned().unwrap_or_default();
            let running = tasks.len() == job.partitions as usize
                && tasks.iter().all(|t| t["phase"] == "Running");
            if running {
                let seconds = started.elapsed().as_secs_f64();
                let sum = |field: &str| {
                    tasks
                        .iter()
                        .map(|t| t["restore"][field].as_u64().unwrap_or(0))
                        .sum()
                };
                let restore = Restore {
                    seconds,
                    records: sum("recordsDone"),
                    bytes: sum("bytesDone"),
                };
                worker.terminate(Duration::from_secs(60));
                return restore;
            }
        }
        if let Some(status) = worker.child.try_wait().unwrap() {
            panic!("worker exited with {status}:\n{}", worker.log_tail());
        }
        assert!(
            started.elapsed() < Duration::from_secs(1800),
            "restore did not finish in 30 min:\n{}",
            worker.log_tail()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Reads every committed record of `topic`, one consumer thread per partition.
fn raw_read(topic: &str, partitions: i32) -> Restore {
    let started = Instant::now();
    let threads: Vec<_> = (0..partitions)
        .map(|partition| {
            let topic = topic.to_string();
            std::thread::spawn(move || {
                let consumer: BaseConsumer = ClientConfig::new()
                    .set("bootstrap.servers", support::kafka_bootstrap())
                    .set("group.id", support::unique_name("bench-raw"))
                    .set("enable.auto.commit", "false")
                    .set("isolation.level", "read_committed")
                    .set("enable.partition.eof", "true")
                    .set("fetch.max.bytes", "52428800")
                    .set("max.partition.fetch.bytes", "10485760")
                    .create()
                    .unwrap();
                let mut assignment = TopicPartitionList::new();
                assignment
                    .add_partition_offset(&topic, partition, Offset::Beginning)
                    .unwrap();
                consumer.assign(&assignment).unwrap();
                let (mut records, mut bytes) = (0u64, 0u64);
                loop {
                    match consumer.poll(Duration::from_secs(5)) {
                        Some(Ok(m)) => {
                            records += 1;
                            bytes += (m.key().map_or(0, <[u8]>::len)
                                + m.payload().map_or(0, <[u8]>::len))
                                as u64;
                        }
                        Some(Err(rdkafka::error::KafkaError::PartitionEOF(_))) => break,
                        Some(Err(e)) => panic!("reading {topic}: {e}"),
                        None => {}
                    }
                }
                (records, bytes)
            })
        })
        .collect();
    let (mut records, mut bytes) = (0, 0);
    for thread in threads {
        let (r, b) = thread.join().unwrap();
        records += r;
        bytes += b;
    }
    Restore {
        seconds: started.elapsed().as_secs_f64(),
        records,
        bytes,
    }
}

fn main() {
    let records = support::rates::setting("SK_BENCH_RECORDS", 2_000_000);
    let keys = support::rates::setting("SK_BENCH_KEYS", 100_000);
    let partitions = support::rates::setting("SK_BENCH_PARTITIONS", 4) as i32;
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let runtime = tokio::runtime::Runtime::new().unwrap();

    let input = support::unique_name("bench-input");
    runtime.block_on(support::create_topic(&input, partitions, false));
    let mut job = runtime.block_on(Job::new("bench", &input, partitions, hourly_aggregate()));
    // The worker's defaults (100 ms or 10,000 records), not the tests' tighter cadence.
    job.config.kafka.commit_max_records = 10_000;

    let produce_rate = support::rates::produce_card_events(&input, partitions, records, keys);

    println!("throughput: aggregate (hourly windows), exactly-once, changelog on");
    let mut worker = job.start(None);
    let samples = sample_commits(&job, &mut worker, u64::from(records));
    worker.terminate(Duration::from_secs(60));
    let total_seconds = samples.last().map_or(0.0, |s| s.0);
    let steady = steady_rate(&samples, u64::from(records), 0.10, 0.95);

    let changelog = job.config.kafka.changelog_topic.clone();
    let changelog_records: u64 = support::end_offsets(&changelog, partitions)
        .values()
        .map(|&o| o as u64)
        .sum();
    println!("restore: {changelog_records} changelog offsets, empty state directory");
    let raw = raw_read(&changelog, partitions);
    let restore = restore_from_empty(&job);
    assert!(
        restore.records >= 1_000_000,
        "the restore bench needs at least 1,000,000 changelog records, got {}; raise SK_BENCH_RECORDS",
        restore.records
    );
    assert_eq!(
        restore.records, raw.records,
        "the restore replays every committed changelog record"
    );

    let rate = |r: &Restore| r.records as f64 / r.seconds;
    let mbps = |r: &Restore| r.bytes as f64 / MB / r.seconds;
    let report = json!({
        "bench": "worker",
        "machine": { "cores": cores },
        "input": { "records": records, "keys": keys, "partitions": partitions,
                   "produce_records_per_second": produce_rate.round() },
        "throughput": {
            "processor": "aggregate, 1 h tumbling windows, exactly-once",
            "steady_records_per_second": steady.round(),
            "steady_records_per_second_per_core": (steady / cores as f64).round(),
            "total_seconds_including_start": total_seconds,
            "commit_interval_ms": job.config.kafka.commit_interval.as_millis() as u64,
            "commit_max_records": job.config.kafka.commit_max_records,
        },
        "restore_from_changelog": {
            "records": restore.records,
            "bytes": restore.bytes,
            "seconds": restore.seconds,
            "records_per_second": rate(&restore).round(),
            "mb_per_second": mbps(&restore),
        },
        "raw_changelog_read": {
            "records": raw.records,
            "bytes": raw.bytes,
            "seconds": raw.seconds,
            "records_per_second": rate(&raw).round(),
            "mb_per_second": mbps(&raw),
        },
        "restore_vs_raw_read": rate(&restore) / rate(&raw),
    });
    println!("{}", serde_json::to_string_pretty(&report).unwrap());
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../bench-results");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("worker.json");
    std::fs::write(&path, serde_json::to_string_pretty(&report).unwrap()).unwrap();
    println!(
        "EOS aggregate: {:.0} records/s ({:.0}/core on {cores} cores, broker on the same cores); \
         changelog restore: {:.0} records/s, {:.1} MB/s = {:.2}x a raw read_committed read; written to {}",
        steady,
        steady / cores as f64,
        rate(&restore),
        mbps(&restore),
        rate(&restore) / rate(&raw),
        path.display()
    );
}
