//! Join benchmark against the real broker (`tests/bench.sh join` starts it): a stream–table
//! join of `SK_BENCH_JOIN_RECORDS` (1,000,000) card transactions against a table of
//! `SK_BENCH_JOIN_KEYS` (100,000) cards, beside a `count` over the same transactions on the same
//! broker and build; the same join with its transactions re-keyed through a repartition topic;
//! and the same join against a global table (every task holds all the cards), with what that
//! costs: each task's state on disk, and the records and time a task's restore from its
//! changelog takes (the volume wiped), beside the partitioned table's. Both run exactly-once with the changelog on; the rate is measured on
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
use streamkeeper_contract::worker_config::{JoinKind, ProcessorConfig, ProcessorKind};
use support::join::{base_time, card_table_join, produce_raw_placed_by};
use support::rates::{sample_commits, sample_commits_in, steady_rate};
use support::{Job, create_topic, unique_name};

fn count() -> ProcessorConfig {
    ProcessorConfig {
        key_field: "card".into(),
        time_field: Some("ts".into()),
        kind: ProcessorKind::Count,
    }
}

/// What one job's run measured.
struct Run {
    steady: f64,
    total_seconds: f64,
}

/// What a restore of every task from its changelog took, the volume wiped.
struct Restore {
    /// The most records one task replayed.
    replayed_per_task: u64,
    /// The longest one task's replay took.
    seconds: f64,
    /// The job's state on disk before the wipe, per task on average.
    state_bytes_per_task: u64,
}

/// Wipes the job's volume and restarts it; what the restores took, from the worker's log.
fn restore(job: &Job) -> Restore {
    let state_bytes_per_task = dir_bytes(&job.config.state.dir) / job.partitions as u64;
    std::fs::remove_dir_all(&job.config.state.dir).unwrap();
    let mut worker = job.start(None);
    let deadline = Instant::now() + Duration::from_secs(600);
    while support::restored_tasks(&worker.log()) != support::all_tasks(job.partitions) {
        assert!(Instant::now() < deadline, "restore: {}", worker.log_tail());
        std::thread::sleep(Duration::from_millis(200));
    }
    worker.terminate(Duration::from_secs(60));
    let log = worker.log();
    let field = |line: &str, name: &str| -> f64 {
        line.split(&format!("{name}="))
            .nth(1)
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|value| value.parse().ok())
            .unwrap_or(0.0)
    };
    let finished: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("restore finished"))
        .collect();
    Restore {
        replayed_per_task: finished
            .iter()
            .map(|line| field(line, "replayed") as u64)
            .max()
            .unwrap_or(0),
        seconds: finished
            .iter()
            .map(|line| field(line, "seconds"))
            .fold(0.0, f64::max),
        state_bytes_per_task,
    }
}

fn dir_bytes(dir: &std::path::Path) -> u64 {
    std::fs::read_dir(dir).map_or(0, |entries| {
        entries
            .flatten()
            .map(|entry| match entry.metadata() {
                Ok(meta) if meta.is_dir() => dir_bytes(&entry.path()),
                Ok(meta) => meta.len(),
                Err(_) => 0,
            })
            .sum()
    })
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

/// Runs a re-keyed join until it has joined all `records`: its rate is the join's, on the
/// committed offsets of its repartition topic (its transaction markers, a few per commit, are
/// counted too: well under 1 % of the records), and it ends once the output holds every record.
fn run_re_keyed(job: &Job, records: u32) -> Run {
    let repartition = job.config.processor.left_repartition_topic().unwrap();
    let mut worker = job.start(None);
    let samples = sample_commits_in(job, &mut worker, repartition, u64::from(records));
    let deadline = Instant::now() + Duration::from_secs(300);
    while job.output().values().map(Vec::len).sum::<usize>() < records as usize {
        assert!(Instant::now() < deadline, "{}", worker.log_tail());
        std::thread::sleep(Duration::from_secs(1));
    }
    worker.terminate(Duration::from_secs(60));
    Run {
        steady: steady_rate(&samples, u64::from(records), 0.10, 0.95),
        total_seconds: samples.last().map_or(0.0, |s| s.0),
    }
}

fn main() {
    let records = support::rates::setting("SK_BENCH_JOIN_RECORDS", 1_000_000);
    let keys = support::rates::setting("SK_BENCH_JOIN_KEYS", 100_000);
    let partitions = support::rates::setting("SK_BENCH_PARTITIONS", 4) as i32;
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
        card_table_join(JoinKind::Table, &cards, None),
    ));
    let repartition = unique_name("bench-join-rekeyed.left-repartition");
    runtime.block_on(create_topic(&repartition, partitions, false));
    let mut rekeying = runtime.block_on(Job::new(
        "bench-join-rekeyed",
        &transactions,
        partitions,
        card_table_join(JoinKind::Table, &cards, Some(repartition)),
    ));
    let mut global = runtime.block_on(Job::new(
        "bench-join-global",
        &transactions,
        partitions,
        card_table_join(JoinKind::GlobalTable, &cards, None),
    ));
    // The worker's defaults (100 ms or 10,000 records), not the tests' tighter cadence.
    for job in [&mut counting, &mut joining, &mut rekeying, &mut global] {
        job.config.kafka.commit_max_records = 10_000;
    }
    println!("count over the transactions, exactly-once, changelog on");
    let count_run = run(&counting, records);
    println!("stream-table join of the transactions with the cards, exactly-once, changelog on");
    let join_run = run(&joining, records);
    println!("the same join, the transactions re-keyed through a repartition topic");
    let rekey_run = run_re_keyed(&rekeying, records);
    println!("the same join against a global table (every task reads all the cards)");
    let global_run = run(&global, records);
    for job in [&joining, &rekeying, &global] {
        let joined: usize = job.output().values().map(Vec::len).sum();
        assert_eq!(
            joined, records as usize,
            "{}: a left table join emits one record per transaction",
            job.name
        );
    }
    println!("restores from the changelog, the volume wiped: partitioned table, then global");
    let (join_restore, global_restore) = (restore(&joining), restore(&global));
    let restore_figures = |restore: &Restore| {
        json!({
            "state_bytes_per_task": restore.state_bytes_per_task,
            "restore_records_per_task": restore.replayed_per_task,
            "restore_seconds": restore.seconds,
        })
    };

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
            "restore": restore_figures(&join_restore),
        },
        "join_rekeyed": {
            "processor": "the same join, the transactions re-keyed through a repartition topic",
            "steady_records_per_second": rekey_run.steady.round(),
            "total_seconds_including_start_and_table": rekey_run.total_seconds,
        },
        "join_global": {
            "processor": "the same join against a global table: every task holds every card",
            "steady_records_per_second": global_run.steady.round(),
            "total_seconds_including_start_and_table": global_run.total_seconds,
            "restore": restore_figures(&global_restore),
        },
        "join_vs_count": join_run.steady / count_run.steady,
        "rekeyed_vs_join": rekey_run.steady / join_run.steady,
        "global_vs_join": global_run.steady / join_run.steady,
        "commit_max_records": joining.config.kafka.commit_max_records,
    });
    println!("{}", serde_json::to_string_pretty(&report).unwrap());
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../bench-results");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("join.json");
    std::fs::write(&path, serde_json::to_string_pretty(&report).unwrap()).unwrap();
    println!(
        "stream-table join: {:.0} transactions/s against {keys} cards; count over the same stream: {:.0} records/s ({:.2}x); re-keyed: {:.0}/s ({:.2}x the join); global table: {:.0}/s ({:.2}x the join); written to {}",
        join_run.steady,
        count_run.steady,
        join_run.steady / count_run.steady,
        rekey_run.steady,
        rekey_run.steady / join_run.steady,
        global_run.steady,
        global_run.steady / join_run.steady,
        path.display()
    );
    println!(
        "restore per task, volume wiped: partitioned table {} records in {:.2} s ({} bytes of state), global table {} records in {:.2} s ({} bytes of state)",
        join_restore.replayed_per_task,
        join_restore.seconds,
        join_restore.state_bytes_per_task,
        global_restore.replayed_per_task,
        global_restore.seconds,
        global_restore.state_bytes_per_task,
    );
}
