//! Bench: how fast a new standby copy warms up, from an S3 checkpoint against a full changelog
//! read, through the whole system (operator binary, local node agent, worker processes, real
//! Kafka, S3 and apiserver).
//!
//! Each scenario runs a job of 2 pods without standbys over `BENCH_WARMUP_EVENTS` events
//! (default 200,000) on `BENCH_WARMUP_KEYS` keys (default 50,000); periodic checkpoints are
//! off (a 24 h interval), so the only checkpoint is the one the bench asks for. Then
//! `standbyReplicas` goes from 0 to 1 and the time until every task has a warm standby (lag ≤
//! 50 records) is measured, with each standby's restore source and the records it replayed:
//! - `changelog`: no checkpoint exists; each standby reads its task's whole changelog, as a
//!   Kafka Streams standby must;
//! - `checkpoint`: every task is checkpointed (`POST /v1/checkpoints`) after the events, then
//!   `BENCH_WARMUP_DELTA` more events (default 10 % of them) arrive; each standby installs
//!   the checkpoint and replays only the delta.
//!
//! Needs the real services (`tests/services/{kafka,s3,kube}.sh start`, their `env` exported).
//! Run: `tests/bench.sh warmup`. It runs on the debug build the tests use (`--profile dev`),
//! like the failover bench; RocksDB's replay is slower there than in a release build, which
//! favours the checkpoint less than production would. Prints the figures and writes them as
//! JSON to `$BENCH_OUT` (default `target/bench/warmup.json` under the cargo target dir).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // bench code

#[path = "../tests/operator_support/mod.rs"]
mod operator_support;

use kube::api::{Api, Patch, PatchParams};
use operator_support::cards::produce_cards;
use operator_support::failover::*;
use std::time::{Duration, Instant};
use streamkeeper::api::StatefulStreamJob;
use streamkeeper_contract::task_report::{RestoreSource, TaskRole};

fn setting(name: &str, default: u32) -> u32 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Waits until the actives have consumed `events` input records in all.
async fn processed(system: &System, events: u32) {
    wait_until("every event processed", async || {
        let reports = system.reports().await;
        let consumed: i64 = reports
            .values()
            .flatten()
            .filter(|r| r.role == TaskRole::Active)
            .filter_map(|r| r.next_input_offset)
            .sum();
        (consumed == i64::from(events)).then_some(())
    })
    .await;
}

/// Checkpoints every task on every pod.
async fn checkpoint_every_task(system: &System) {
    let reads = streamkeeper::adapters::secret_reads::SecretReads::default();
    let token = streamkeeper::k8s::worker_token::read(
        (&system.client, &reads),
        &system.namespace,
        system.name,
    )
    .await
    .unwrap();
    for pod in system.pods().await {
        let ip = pod.status.and_then(|s| s.pod_ip).unwrap();
        streamkeeper::adapters::worker_client::request_checkpoint(
            &ip,
            8080,
            token.as_ref(),
            Duration::from_secs(120),
        )
        .await
        .unwrap();
    }
}

async fn run(name: &str, address: u8, keys: u32, events: u32, delta: u32) -> serde_json::Value {
    let spec = serde_json::json!({ "checkpoint": { "interval": "24h" } });
    let system = System::start_with(
        &format!("bench-warmup-{name}"),
        address,
        &[None],
        (2, 0),
        0,
        spec,
    )
    .await;
    produce_cards(&system.input, keys, 0..events);
    system.settled(0).await;
    processed(&system, events).await;
    let mut total = events;
    if name == "checkpoint" {
        checkpoint_every_task(&system).await;
        produce_cards(&system.input, keys, events..events + delta);
        total += delta;
        processed(&system, total).await;
    }

    let jobs: Api<StatefulStreamJob> = Api::namespaced(system.client.clone(), &system.namespace);
    let started = Instant::now();
    let patch = serde_json::json!({ "spec": { "standbyReplicas": 1 } });
    jobs.patch(system.name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    system.settled(1).await;
    let seconds = started.elapsed().as_secs_f64();

    let reports = system.reports().await;
    let standbys: Vec<serde_json::Value> = reports
        .iter()
        .flat_map(|(pod, list)| list.iter().map(move |r| (pod, r)))
        .filter(|(_, r)| r.role == TaskRole::Standby)
        .map(|(pod, r)| {
            let restore = r.restore.as_ref().unwrap();
            serde_json::json!({
                "task": r.task,
                "pod": pod,
                "source": restore.source,
                "recordsReplayed": restore.records_done,
                "bytesReplayed": restore.bytes_done,
                "checkpointBytes": restore.download.as_ref().map(|d| d.bytes_total),
            })
        })
        .collect();
    let expected = if name == "checkpoint" {
        RestoreSource::Checkpoint
    } else {
        RestoreSource::Empty
    };
    for report in reports
        .values()
        .flatten()
        .filter(|r| r.role == TaskRole::Standby)
    {
        assert_eq!(
            report.restore.as_ref().unwrap().source,
            expected,
            "{report:?}"
        );
    }
    let replayed: u64 = standbys
        .iter()
        .map(|s| s["recordsReplayed"].as_u64().unwrap())
        .sum();
    eprintln!(
        "{name}: every task warm-standby'd {seconds:.2} s after standbyReplicas 0 -> 1; {replayed} changelog records replayed for {total} events"
    );
    system.clean_up().await;
    serde_json::json!({
        "scenario": name,
        "events": total,
        "keys": keys,
        "secondsToWarm": seconds,
        "changelogRecordsReplayed": replayed,
        "standbys": standbys,
    })
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let events = setting("BENCH_WARMUP_EVENTS", 200_000);
    let keys = setting("BENCH_WARMUP_KEYS", 50_000);
    let delta = setting("BENCH_WARMUP_DELTA", events / 10);
    let changelog = run("changelog", 160, keys, events, 0).await;
    let checkpoint = run("checkpoint", 170, keys, events, delta).await;
    let speedup = changelog["secondsToWarm"].as_f64().unwrap()
        / checkpoint["secondsToWarm"].as_f64().unwrap();
    println!(
        "standby warm-up: full changelog {:.2} s, checkpoint + delta {:.2} s: {speedup:.1}x faster",
        changelog["secondsToWarm"].as_f64().unwrap(),
        checkpoint["secondsToWarm"].as_f64().unwrap()
    );
    let json = serde_json::json!({
        "bench": "warmup",
        "profile": "dev",
        "pods": 2,
        "tasks": PARTITIONS,
        "results": [changelog, checkpoint],
        "checkpointSpeedup": speedup,
    });
    let out = std::env::var("BENCH_OUT").unwrap_or_else(|_| {
        let target = std::env::var("CARGO_TARGET_DIR").unwrap_or_else(|_| "target".into());
        format!("{target}/bench/warmup.json")
    });
    if let Some(dir) = std::path::Path::new(&out).parent() {
        std::fs::create_dir_all(dir).unwrap();
    }
    std::fs::write(&out, serde_json::to_string_pretty(&json).unwrap()).unwrap();
    println!("written to {out}");
}
