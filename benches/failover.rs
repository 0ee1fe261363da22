//! Bench: failover time through the whole system (operator binary, local node agent, worker
//! processes, real Kafka, S3 and apiserver), from the failure of a task's owner to the first
//! committed transaction of its new owner, over many failures while input flows:
//! - `standby`: 3 pods, 1 standby per task, the owner killed with kill -9;
//! - `no-standby`: the same without standbys (the task restarts on the returning pod's volume,
//!   or is restored on another pod);
//! - `frozen`: 1 standby, the owner frozen with SIGSTOP (resumed after its task moved);
//! - `frozen-1s`: the same with `spec.recovery.heartbeatTimeout: 1s` instead of the default 2 s;
//! - `join`: as `standby`, the job a left stream-table join of the events with a card table
//!   instead of a count (its output checked: every event joined exactly once).
//!
//! Needs the real services (`tests/services/{kafka,s3,kube}.sh start`, their `env` exported).
//! Run: `tests/bench.sh failover` (BENCH_FAILURES per scenario, default 20; BENCH_SCENARIOS,
//! default all five). It runs on the debug build the tests use (`--profile dev`): the time is
//! Kafka round trips, fencing and the heartbeat, not CPU. Prints the figures and writes them as
//! JSON to `$BENCH_OUT` (default `target/bench/failover.json` under the cargo target dir).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // bench code

#[path = "../tests/operator_support/mod.rs"]
mod operator_support;

use operator_support::failover::*;
use std::process::Command;
use std::time::Duration;
use streamkeeper_contract::co_partitioning::Partitioner;

struct Scenario {
    name: &'static str,
    standbys: i32,
    signal: &'static str,
    /// `spec.recovery.heartbeatTimeout`, when not the default.
    heartbeat_timeout: Option<&'static str>,
    /// The job joins the events with a card table instead of counting them.
    join: bool,
}

const SCENARIOS: [Scenario; 5] = [
    Scenario {
        name: "standby",
        standbys: 1,
        signal: "KILL",
        heartbeat_timeout: None,
        join: false,
    },
    Scenario {
        name: "no-standby",
        standbys: 0,
        signal: "KILL",
        heartbeat_timeout: None,
        join: false,
    },
    Scenario {
        name: "frozen",
        standbys: 1,
        signal: "STOP",
        heartbeat_timeout: None,
        join: false,
    },
    Scenario {
        name: "frozen-1s",
        standbys: 1,
        signal: "STOP",
        heartbeat_timeout: Some("1s"),
        join: false,
    },
    Scenario {
        name: "join",
        standbys: 1,
        signal: "KILL",
        heartbeat_timeout: None,
        join: true,
    },
];

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let rank = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

/// Every one of the 3 pods answers and owns one or two of the 4 tasks, each running there.
async fn whole_again(system: &System) -> bool {
    let Some(document) = system.document().await else {
        return false;
    };
    let reports = system.reports().await;
    let counts: Vec<usize> = (0..3)
        .map(|i| document.active_tasks_of(&format!("cards-{i}")).count())
        .collect();
    reports.len() == 3
        && counts.iter().all(|&n| (1..=2).contains(&n))
        && settled(&document, &reports, document.tasks[0].standbys.len())
}

async fn run(scenario: &Scenario, failures: u32) -> serde_json::Value {
    let mut spec = match scenario.heartbeat_timeout {
        Some(timeout) => serde_json::json!({ "recovery": { "heartbeatTimeout": timeout } }),
        None => serde_json::json!({}),
    };
    let table = if scenario.join {
        let (table, processor) =
            operator_support::cards::card_table_join(CARDS, Partitioner::Crc32).await;
        spec["processor"] = processor;
        Some(table)
    } else {
        None
    };
    // A join's first events come once its tasks have read the whole table (see `table_read`).
    let first_events = if table.is_some() { 0 } else { 1_000 };
    let system = System::start_with(
        &format!("bench-{}", scenario.name),
        160,
        &[None],
        (3, scenario.standbys),
        first_events,
        spec,
    )
    .await;
    if let Some(table) = &table {
        operator_support::cards::table_read(&system, table, CARDS).await;
        operator_support::cards::produce_cards(&system.input, CARDS, 0..1_000);
    }
    system.settled(scenario.standbys as usize).await;
    let chunks = failures * 80;
    let producing = produce_in_background(&system.input, 1_000, chunks);
    let mut seconds = Vec::new();
    for failure in 0..failures {
        let task = failure % PARTITIONS as u32;
        let (victim, owner, took) = system.fail_owner_of(task, scenario.signal).await;
        if scenario.signal == "STOP" {
            let pid = system.pid_of(&victim).await.unwrap();
            Command::new("kill").args(["-CONT", &pid]).status().unwrap();
        }
        eprintln!(
            "{} #{failure}: task {task} from {victim} to {owner} in {:.3} s",
            scenario.name,
            took.as_secs_f64()
        );
        seconds.push(took.as_secs_f64());
        // The failed pod is back and every copy is warm again before the next failure, and
        // the tasks are spread over every pod again: without standbys a failover piles the
        // lost pod's tasks onto the others until warm-up copies let them move back, and
        // killing the next owner before that (or while the last victim is still in its restart
        // backoff) fails every task at once, with no live pod left to take them (the slow
        // tail of 7-9 s samples in the runs before commit f17733b).
        system.settled(scenario.standbys as usize).await;
        wait_until("every pod answers and runs its share", async || {
            whole_again(&system).await.then_some(())
        })
        .await;
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    producing.finish();
    let events = 1_000 + chunks * 100;
    if scenario.join {
        wait_until("every event joined exactly once", async || {
            operator_support::cards::exact_join_output(&system.output, PARTITIONS, events)
        })
        .await;
    } else {
        wait_until("exactly one count per event", async || {
            operator_support::cards::exact_output(&system.output, PARTITIONS, events)
        })
        .await;
    }
    system.clean_up().await;
    let mut sorted = seconds.clone();
    sorted.sort_by(f64::total_cmp);
    let (p50, p99) = (percentile(&sorted, 0.5), percentile(&sorted, 0.99));
    println!(
        "failover {:<10} p50 {p50:.3} s, p99 {p99:.3} s, max {:.3} s over {failures} failures; output exact",
        scenario.name,
        sorted.last().copied().unwrap_or_default()
    );
    serde_json::json!({
        "scenario": scenario.name,
        "standbyReplicas": scenario.standbys,
        "signal": scenario.signal,
        "heartbeatTimeout": scenario.heartbeat_timeout.unwrap_or("2s"),
        "failures": failures,
        "p50Seconds": p50,
        "p99Seconds": p99,
        "maxSeconds": sorted.last(),
        "samplesSeconds": seconds,
        "outputExact": true,
    })
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let failures: u32 = std::env::var("BENCH_FAILURES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20);
    let wanted = std::env::var("BENCH_SCENARIOS").unwrap_or_default();
    let mut results = Vec::new();
    for scenario in &SCENARIOS {
        if wanted.is_empty() || wanted.split(',').any(|w| w == scenario.name) {
            results.push(run(scenario, failures).await);
        }
    }
    let json = serde_json::json!({
        "bench": "failover",
        "profile": "dev",
        "pods": 3,
        "tasks": PARTITIONS,
        "failoverBoundP50Seconds": 2.0,
        "failoverBoundP99Seconds": 5.0,
        "kafkaStreamsKilledSeconds": 43.0,
        "kafkaStreamsMinSessionTimeoutSeconds": 6.4,
        "results": results,
    });
    let out = std::env::var("BENCH_OUT").unwrap_or_else(|_| {
        let target = std::env::var("CARGO_TARGET_DIR").unwrap_or_else(|_| "target".into());
        format!("{target}/bench/failover.json")
    });
    if let Some(dir) = std::path::Path::new(&out).parent() {
        std::fs::create_dir_all(dir).unwrap();
    }
    std::fs::write(&out, serde_json::to_string_pretty(&json).unwrap()).unwrap();
    println!("written to {out}");
}
