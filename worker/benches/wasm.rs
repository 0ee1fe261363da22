//! WebAssembly processor benchmark against the real broker and S3 (`tests/bench.sh wasm`
//! starts them): the same count logic, exactly-once with the changelog on, over the same
//! pre-produced input, run three ways:
//!
//! 1. **native**: the built-in `count` processor (Rust, in the worker);
//! 2. **compiled guest**: `examples/wasm/c/count.c`, a C component (clang, wasi-libc);
//! 3. **Python guest**: `examples/wasm/python/count.py`, a componentize-py component.
//!
//! Each is a fresh job on the same input topic, and the three run in rounds (`SK_BENCH_ROUNDS`,
//! default 3): the ratios are taken per round, between runs next to each other in time, and
//! their median is the figure. The rate is measured on committed input offsets
//! between 10 % and 95 % of what the run processes, so start-up (a guest's fetch and compile)
//! and the tail do not count. Before them, the cost of the processor call alone: native and the
//! compiled guest over the same records in process, against an in-memory state (no Kafka, no
//! RocksDB), in nanoseconds per record. The Python guest runs over the first `SK_BENCH_PYTHON_RECORDS` of
//! the input (default 100,000): it is that much slower. Figures are printed, with the ratios to
//! native, and written to `bench-results/wasm.json`. Sizes: `SK_BENCH_RECORDS` (default
//! 400,000), `SK_BENCH_KEYS`, `SK_BENCH_PARTITIONS`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "../tests/support/mod.rs"]
mod support;

use serde_json::json;
use std::sync::Arc;
use std::time::{Duration, Instant};
use streamkeeper_contract::worker_config::{ProcessorConfig, ProcessorKind, WasmLimitsConfig};
use streamkeeper_worker::processor::wasm::{WasmLimits, WasmModule};
use streamkeeper_worker::processor::{
    CountProcessor, InputRecord, KafkaMeta, MemoryState, Processor, Side,
};
use support::Job;
use support::rates::{sample_commits, steady_rate};

/// One way of running the count.
struct Variant {
    name: &'static str,
    /// The guest, for a WebAssembly processor.
    guest: Option<&'static str>,
    records: u32,
}

struct Run {
    steady: f64,
    total_seconds: f64,
    component_bytes: Option<usize>,
}

async fn run(input: &str, partitions: i32, variant: &Variant) -> Run {
    let mut job = Job::new(variant.name, input, partitions, support::count_processor()).await;
    // The worker's defaults (100 ms or 10,000 records), not the tests' tighter cadence; S3 for
    // the module (checkpoints rare: this measures processing, not checkpoints).
    job.config.kafka.commit_max_records = 10_000;
    job.enable_checkpoints(Duration::from_secs(600), 3, None);
    let mut component_bytes = None;
    if let Some(guest) = variant.guest {
        let bytes = support::wasm::guest_bytes(guest);
        component_bytes = Some(bytes.len());
        let module = support::wasm::upload(&job, guest, bytes).await;
        job.config.processor = ProcessorConfig {
            key_field: "card".into(),
            time_field: None,
            kind: ProcessorKind::Wasm {
                module,
                config: serde_json::Value::Null,
                limits: WasmLimitsConfig::default(),
                reads_state_of: Vec::new(),
            },
        };
    }
    println!("{}: counting {} records", variant.name, variant.records);
    let mut worker = job.start(None);
    let samples = sample_commits(&job, &mut worker, u64::from(variant.records));
    worker.terminate(Duration::from_secs(60));
    let steady = steady_rate(&samples, u64::from(variant.records), 0.10, 0.95);
    println!("{}: {steady:.0} records/s steady", variant.name);
    Run {
        steady,
        total_seconds: samples.last().map_or(0.0, |s| s.0),
        component_bytes,
    }
}

/// Nanoseconds per record of `processor` over `records`, from an empty in-memory state: the
/// best of three passes.
fn ns_per_record(processor: &dyn Processor, records: &[InputRecord<'_>]) -> f64 {
    (0..3)
        .map(|_| {
            let mut state = MemoryState::new();
            let started = Instant::now();
            for record in records {
                std::hint::black_box(processor.process(record, &mut state).unwrap());
            }
            started.elapsed().as_secs_f64() * 1e9 / records.len() as f64
        })
        .fold(f64::INFINITY, f64::min)
}

/// The call alone, in process: (native, compiled guest) nanoseconds per record.
fn in_process(records: u32, keys: u32) -> (f64, f64) {
    let events: Vec<(String, String)> =
        (0..records).map(|i| support::card_event(i, keys)).collect();
    let inputs: Vec<InputRecord<'_>> = events
        .iter()
        .enumerate()
        .map(|(offset, (key, value))| InputRecord {
            side: Side::Left,
            key: key.clone(),
            value: serde_json::from_str(value).unwrap(),
            raw: value.as_bytes(),
            tombstone: false,
            partition: 0,
            offset: offset as i64,
            event_time_ms: None,
            kafka: KafkaMeta {
                key: Some(key.as_bytes()),
                headers: &[],
                timestamp_ms: None,
            },
        })
        .collect();
    let module = Arc::new(WasmModule::compile(&support::wasm::guest_bytes("c-count")).unwrap());
    let guest = module.processor("null", WasmLimits::default()).unwrap();
    let native = ns_per_record(&CountProcessor, &inputs);
    let compiled = ns_per_record(&guest, &inputs);
    println!(
        "in process, the call alone: native {native:.0} ns/record, compiled guest {compiled:.0} ns/record (+{:.0} ns)",
        compiled - native
    );
    (native, compiled)
}

fn main() {
    let records = support::rates::setting("SK_BENCH_RECORDS", 400_000);
    let python_records = support::rates::setting("SK_BENCH_PYTHON_RECORDS", 100_000).min(records);
    let keys = support::rates::setting("SK_BENCH_KEYS", 10_000);
    let partitions = support::rates::setting("SK_BENCH_PARTITIONS", 4) as i32;
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let (native_ns, compiled_ns) = in_process(records.min(200_000), keys);
    let runtime = tokio::runtime::Runtime::new().unwrap();

    let input = support::unique_name("bench-wasm-input");
    runtime.block_on(support::create_topic(&input, partitions, false));
    let produce_rate = support::rates::produce_card_events(&input, partitions, records, keys);

    let variants = [
        Variant {
            name: "native",
            guest: None,
            records,
        },
        Variant {
            name: "compiled-guest",
            guest: Some("c-count"),
            records,
        },
        Variant {
            name: "python-guest",
            guest: Some("python-count"),
            records: python_records,
        },
    ];
    // Rounds of the three, one after the other: a ratio compares runs next to each other in
    // time, and the median of the rounds leaves out a run the shared machine disturbed.
    let rounds = support::rates::setting("SK_BENCH_ROUNDS", 3).max(1) as usize;
    let runs: Vec<Vec<Run>> = (0..rounds)
        .map(|round| {
            println!("round {} of {rounds}", round + 1);
            variants
                .iter()
                .map(|variant| runtime.block_on(run(&input, partitions, variant)))
                .collect()
        })
        .collect();
    let of =
        |variant: usize| -> Vec<f64> { runs.iter().map(|round| round[variant].steady).collect() };
    let ratios = |variant: usize| -> Vec<f64> {
        runs.iter()
            .map(|round| round[variant].steady / round[0].steady)
            .collect()
    };
    let report = json!({
        "bench": "wasm",
        "machine": { "cores": cores },
        "input": { "records": records, "keys": keys, "partitions": partitions,
                   "produce_records_per_second": produce_rate.round() },
        "logic": "count per key, exactly-once, changelog on",
        "in_process_ns_per_record": { "native": native_ns.round(), "compiled_guest": compiled_ns.round() },
        "rounds": rounds,
        "variants": variants.iter().enumerate().map(|(i, variant)| json!({
            "name": variant.name,
            "guest": variant.guest,
            "component_bytes": runs[0][i].component_bytes,
            "records": variant.records,
            "steady_records_per_second": of(i).iter().map(|r| r.round()).collect::<Vec<_>>(),
            "median_records_per_second": median(of(i)).round(),
            "ratio_to_native_per_round": ratios(i),
            "median_ratio_to_native": median(ratios(i)),
            "total_seconds_including_start": runs.iter().map(|round| round[i].total_seconds).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
    });
    println!("{}", serde_json::to_string_pretty(&report).unwrap());
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../bench-results");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("wasm.json");
    std::fs::write(&path, serde_json::to_string_pretty(&report).unwrap()).unwrap();
    println!(
        "count, exactly-once, median of {rounds} rounds: native {:.0} records/s; compiled guest {:.0} ({:.2}x native, per round {}); Python guest {:.0} ({:.3}x native); written to {}",
        median(of(0)),
        median(of(1)),
        median(ratios(1)),
        ratios(1)
            .iter()
            .map(|r| format!("{r:.2}x"))
            .collect::<Vec<_>>()
            .join(", "),
        median(of(2)),
        median(ratios(2)),
        path.display()
    );
}

/// The middle value (the mean of the two middle ones for an even count).
fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    let middle = values.len() / 2;
    if values.len().is_multiple_of(2) {
        (values[middle - 1] + values[middle]) / 2.0
    } else {
        values[middle]
    }
}
