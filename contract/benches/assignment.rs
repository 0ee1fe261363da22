//! Bench: the assignment rule at scale. 10,000 tasks over 1,000 pods on 200 nodes in 3 zones,
//! one standby each: the time of one decision (new job, steady state, one pod lost) and the
//! tasks that move when a pod is lost, against the minimum (that pod's own tasks).
//!
//! Pure CPU, no services. Run: `tests/bench.sh assignment` (or `cargo bench -p
//! streamkeeper-contract --bench assignment`). BENCH_TASKS, BENCH_PODS and BENCH_LOSSES
//! change the sizes. Prints the figures and writes them as JSON to `$BENCH_OUT` (default
//! `target/bench/assignment.json` under the cargo target directory).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // bench code

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};
use streamkeeper_contract::{
    AssignmentDocument, AssignmentInputs, CopyLag, PodPlace, next_assignment,
};

const NODES: usize = 200;
const ZONES: usize = 3;

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn pods(count: usize) -> Vec<PodPlace> {
    (0..count)
        .map(|i| PodPlace {
            name: format!("job-{i}"),
            node: Some(format!("node-{}", i % NODES)),
            zone: Some(format!("zone-{}", (i % NODES) % ZONES)),
        })
        .collect()
}

fn warm_copies(doc: &AssignmentDocument, without: Option<&str>) -> BTreeMap<u32, Vec<CopyLag>> {
    doc.tasks
        .iter()
        .map(|t| {
            let copies = t
                .active
                .iter()
                .chain(&t.standbys)
                .filter(|pod| Some(pod.as_str()) != without)
                .map(|pod| CopyLag {
                    pod: pod.clone(),
                    lag: 0,
                })
                .collect();
            (t.task, copies)
        })
        .collect()
}

fn decide(
    tasks: u32,
    pods: &[PodPlace],
    copies: &BTreeMap<u32, Vec<CopyLag>>,
    current: Option<&AssignmentDocument>,
) -> (AssignmentDocument, Duration) {
    let started = Instant::now();
    let doc = next_assignment(AssignmentInputs {
        tasks,
        pods,
        copies,
        current,
        standby_replicas: 1,
        acceptable_recovery_lag: 10_000,
        balance: true,
        settling: &BTreeSet::new(),
        newest_recorded_generation: 0,
        fenced_actives: &BTreeSet::new(),
    })
    .expect("generations left");
    (doc, started.elapsed())
}

fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1000.0
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let rank = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

fn main() {
    let task_count = env_or("BENCH_TASKS", 10_000) as u32;
    let pod_count = env_or("BENCH_PODS", 1_000);
    let losses = env_or("BENCH_LOSSES", 20);
    let all = pods(pod_count);

    let (fresh, fresh_time) = decide(task_count, &all, &BTreeMap::new(), None);
    let (steady, steady_time) = decide(task_count, &all, &warm_copies(&fresh, None), Some(&fresh));
    assert_eq!(
        steady, fresh,
        "a new assignment decided again must not change"
    );

    let mut times = Vec::new();
    let mut minimal = 0;
    for loss in 0..losses {
        let lost = &all[(loss * 37) % pod_count].name;
        let survivors: Vec<PodPlace> = all.iter().filter(|p| &p.name != lost).cloned().collect();
        let copies = warm_copies(&fresh, Some(lost));
        let (next, time) = decide(task_count, &survivors, &copies, Some(&fresh));
        times.push(ms(time));
        let own_actives = fresh.active_tasks_of(lost).count();
        let moved = fresh
            .tasks
            .iter()
            .zip(&next.tasks)
            .filter(|(before, after)| before.active != after.active)
            .count();
        let untouched_changed = fresh
            .tasks
            .iter()
            .zip(&next.tasks)
            .filter(|(before, _)| {
                before.active.as_deref() != Some(lost.as_str())
                    && !before.standbys.iter().any(|s| s == lost)
            })
            .filter(|(before, after)| before != after)
            .count();
        if moved == own_actives && untouched_changed == 0 {
            minimal += 1;
        } else {
            eprintln!(
                "loss of {lost}: {moved} actives moved (its own: {own_actives}), {untouched_changed} untouched tasks changed"
            );
        }
    }
    times.sort_by(f64::total_cmp);
    let p50 = percentile(&times, 0.5);
    let p99 = percentile(&times, 0.99);
    let max = times.last().copied().unwrap_or_default();

    println!(
        "assignment rule: {task_count} tasks, {pod_count} pods, {NODES} nodes, {ZONES} zones, 1 standby"
    );
    println!("  new job:          {:>8.2} ms", ms(fresh_time));
    println!("  steady (no change): {:>6.2} ms", ms(steady_time));
    println!(
        "  one pod lost:     p50 {p50:.2} ms, p99 {p99:.2} ms, max {max:.2} ms over {losses} losses (bound 50 ms)"
    );
    println!(
        "  minimal moves:    {minimal}/{losses} losses moved only the lost pod's own actives and changed no other task"
    );

    let json = serde_json::json!({
        "bench": "assignment",
        "tasks": task_count,
        "pods": pod_count,
        "nodes": NODES,
        "zones": ZONES,
        "standbyReplicas": 1,
        "newJobMs": ms(fresh_time),
        "steadyMs": ms(steady_time),
        "podLostMs": { "p50": p50, "p99": p99, "max": max, "samples": losses },
        "podLostBoundMs": 50,
        "lossesWithMinimalMoves": minimal,
    });
    let out = std::env::var("BENCH_OUT").unwrap_or_else(|_| {
        let target = std::env::var("CARGO_TARGET_DIR").unwrap_or_else(|_| "target".into());
        format!("{target}/bench/assignment.json")
    });
    if let Some(dir) = std::path::Path::new(&out).parent() {
        std::fs::create_dir_all(dir).unwrap();
    }
    std::fs::write(&out, serde_json::to_string_pretty(&json).unwrap()).unwrap();
    println!("  written to {out}");
}
