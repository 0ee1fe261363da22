//! Bench: processing throughput of the worker (release binary, real Kafka, real S3) with
//! checkpoints every 5 s and every 30 s against checkpoints off, on the same input.
//!
//! Needs the real services (`tests/services/{kafka,s3}.sh start`, their `env` exported). Run:
//! `cargo bench --workspace --bench checkpoint_overhead` (BENCH_RECORDS, default 1_000_000).
//! Prints the figures and writes them as JSON to `$BENCH_OUT` (default
//! `target/bench/checkpoint-overhead.json` under the cargo target directory).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // bench code

#[path = "../tests/support/mod.rs"]
mod support;

use std::time::{Duration, Instant};
use support::*;

const PARTITIONS: i32 = 4;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let records: u32 = std::env::var("BENCH_RECORDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    let input = unique_name("bench-input");
    create_topic(&input, PARTITIONS, false).await;
    let started = Instant::now();
    produce(
        &input,
        PARTITIONS,
        (0..records).map(|i| card_event(i, 50_000)),
    );
    eprintln!(
        "{records} input records produced in {:.1}s",
        started.elapsed().as_secs_f64()
    );

    let mut results = Vec::new();
    for interval in [None, Some(30u64), Some(5)] {
        let mut job = Job::new("bench", &input, PARTITIONS, count_processor()).await;
        job.config.kafka.commit_max_records = 10_000;
        if let Some(seconds) = interval {
            job.enable_checkpoints(Duration::from_secs(seconds), 3, None);
        }
        let started = Instant::now();
        let mut worker = job.start(None);
        job.wait_until_caught_up(&mut worker, Duration::from_secs(1800));
        let seconds = started.elapsed().as_secs_f64();
        worker.terminate(Duration::from_secs(60));
        let checkpoints = worker.log().matches("checkpoint durable").count();
        let rate = f64::from(records) / seconds;
        let label = interval.map_or("off".to_string(), |s| format!("every {s}s"));
        eprintln!(
            "checkpoints {label}: {seconds:.1}s, {rate:.0} records/s, {checkpoints} checkpoints"
        );
        results.push((label, seconds, rate, checkpoints));
    }
    let off = results[0].2;
    let figures = serde_json::json!({
        "bench": "checkpoint-overhead",
        "records": records,
        "partitions": PARTITIONS,
        "runs": results.iter().map(|(label, seconds, rate, checkpoints)| serde_json::json!({
            "checkpoints": label,
            "seconds": seconds,
            "records_per_second": rate,
            "durable_checkpoints": checkpoints,
            "throughput_vs_off": rate / off,
        })).collect::<Vec<_>>(),
    });
    println!("{}", serde_json::to_string_pretty(&figures).unwrap());
    let out = std::env::var("BENCH_OUT").unwrap_or_else(|_| {
        let target = std::env::var("CARGO_TARGET_DIR").unwrap_or_else(|_| "target".into());
        format!("{target}/bench/checkpoint-overhead.json")
    });
    if let Some(parent) = std::path::Path::new(&out).parent() {
        std::fs::create_dir_all(parent).unwrap();
    }
    std::fs::write(&out, serde_json::to_vec_pretty(&figures).unwrap()).unwrap();
    eprintln!("written to {out}");
}
