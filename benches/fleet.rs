//! Bench: what one operator costs as its fleet grows, measured from outside.
//!
//! One operator process (the test build) watches one namespace; jobs are added in steps
//! (`SK_FLEET_JOBS`, default `10,50,100`), each with `SK_FLEET_PODS` worker pods (default 4) and
//! one standby per task, on its own input topic of as many partitions, real Kafka and S3 behind
//! them, and `SK_FLEET_MANIFESTS` checkpoint manifests a task in S3 (default 3, as a worker
//! retaining 3 would leave them). The pods run on KWOK's simulated nodes
//! (`tests/services/kwok.sh`): each gets a loopback address, where one process answers the
//! worker contract for every pod
//! (`tests/services/fleet-workers.sh`), so the operator polls, assigns and fails over as it
//! would with real workers, without a worker process per pod.
//!
//! After each step it waits until every job runs, and `SK_FLEET_SETTLE_SECONDS` (default 20)
//! more, then measures a window (`SK_FLEET_WINDOW_SECONDS`, default 30):
//! - the operator's own requests to the apiserver, by verb and resource (its
//!   `streamkeeper_operator_apiserver_requests_total`), and the apiserver's total from its
//!   `/metrics` (the controller-manager's, the scheduler's, KWOK's and the bench's too);
//! - the operator's CPU (user + system, from `/proc`) as a share of one core, and its RSS (the
//!   test build's, a debug build that spends more CPU than the release image, unless
//!   `SK_FLEET_OPERATOR_BIN` names another binary, e.g. `target/release/streamkeeper-operator`);
//! - the workers' requests from the operator per second, by kind (the heartbeat's cost);
//! - the operator's requests to S3, by operation (its `streamkeeper_operator_s3_requests_total`);
//! - failover under that load: `SK_FLEET_KILLS` (default 5) kills of a pod's process, each
//!   timed from the kill to another pod of its job receiving the new document (p50 and max),
//!   and `SK_FLEET_FREEZES` (default 2) freezes of one, timed the same way (the heartbeat
//!   timeout, 2 s, is part of it).
//!
//! At the end it restarts the operator (SIGTERM, which releases its Lease, then a new process)
//! and times the new one until every job's failover loop polls its pods again, and until it
//! has reconciled every job once.
//!
//! Run: `tests/bench.sh fleet`. Prints a table and writes JSON to `$BENCH_OUT` (default
//! `bench/fleet.json` under the cargo target dir).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // bench code

#[path = "fleet_support/jobs.rs"]
mod jobs;
#[path = "../tests/operator_support/mod.rs"]
mod operator_support;
#[path = "fleet_support/restart.rs"]
mod restart;
#[path = "fleet_support/workers.rs"]
mod workers;

use k8s_openapi::api::core::v1::PersistentVolume;
use kube::Api;
use kube::api::ListParams;
use operator_support::cards::Process;
use operator_support::support;
use std::collections::BTreeMap;
use std::process::Command;
use std::time::{Duration, Instant};
use streamkeeper::api::{JobPhase, StatefulStreamJob};

/// One measured step.
struct Step {
    jobs: usize,
    pods: usize,
    seconds: f64,
    /// Every client's requests to the apiserver in the window, by `VERB resource`.
    apiserver: BTreeMap<String, f64>,
    /// The operator's own, by `verb resource`.
    operator: BTreeMap<String, f64>,
    /// The operator's requests to S3, by operation.
    s3: BTreeMap<String, f64>,
    /// The simulated workers' requests, by `METHOD path`.
    workers: BTreeMap<String, f64>,
    cpu_share: f64,
    rss_bytes: u64,
    /// Kill → another pod of the job received the new document.
    failovers: Vec<Duration>,
    /// Freeze → another pod of the job received the new document.
    freezes: Vec<Duration>,
}

/// Per second over `seconds`.
fn rates(counts: &BTreeMap<String, f64>, seconds: f64) -> BTreeMap<String, f64> {
    counts
        .iter()
        .map(|(key, count)| (key.clone(), count / seconds))
        .collect()
}

fn total(counts: &BTreeMap<String, f64>, seconds: f64) -> f64 {
    // An empty float sum is -0.0, which prints as "-0.00".
    counts.values().sum::<f64>() / seconds + 0.0
}

/// The `most` busiest kinds of request, busiest first.
fn busiest(counts: &BTreeMap<String, f64>, seconds: f64, most: usize) -> String {
    let mut rates: Vec<(String, f64)> = rates(counts, seconds).into_iter().collect();
    rates.sort_by(|a, b| b.1.total_cmp(&a.1));
    rates.truncate(most);
    rates
        .iter()
        .map(|(key, rate)| format!("{key} {rate:.2}/s"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// What changed between two readings of counters.
fn difference(
    before: &BTreeMap<String, f64>,
    after: &BTreeMap<String, f64>,
) -> BTreeMap<String, f64> {
    after
        .iter()
        .map(|(key, after)| (key.clone(), after - before.get(key).copied().unwrap_or(0.0)))
        .filter(|(_, count)| *count > 0.0)
        .collect()
}

/// The samples of counter `family` in Prometheus `text`, summed by the key `key` makes of each
/// sample's labels (`label(name)` reads one; absent ones read empty).
fn counters(
    text: &str,
    family: &str,
    key: impl Fn(&dyn Fn(&str) -> String) -> String,
) -> BTreeMap<String, f64> {
    let mut counts = BTreeMap::new();
    for line in text.lines() {
        let Some(labels) = line.strip_prefix(family).and_then(|l| l.strip_prefix('{')) else {
            continue;
        };
        let Some((labels, value)) = labels.rsplit_once("} ") else {
            continue;
        };
        let label = |name: &str| {
            labels
                .split(',')
                .find_map(|pair| pair.strip_prefix(&format!("{name}=\"")))
                .map_or("", |value| value.trim_end_matches('"'))
                .to_string()
        };
        *counts.entry(key(&label)).or_insert(0.0) += value.trim().parse::<f64>().unwrap_or(0.0);
    }
    counts
}

/// The operator's own requests so far, from its `/metrics`: to the apiserver by
/// `verb resource`, and to S3 by operation.
async fn operator_requests(
    metrics_address: &str,
) -> (BTreeMap<String, f64>, BTreeMap<String, f64>) {
    let text = operator_support::metrics_text(metrics_address)
        .await
        .expect("the operator's /metrics");
    let apiserver = counters(
        &text,
        "streamkeeper_operator_apiserver_requests_total",
        |label| format!("{} {}", label("verb"), label("resource")),
    );
    let s3 = counters(&text, "streamkeeper_operator_s3_requests_total", |label| {
        label("operation")
    });
    (apiserver, s3)
}

fn setting(name: &str, default: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| default.to_string())
}

/// The apiserver's request counters, summed by `VERB resource[/subresource]`.
async fn request_counts(client: &kube::Client) -> BTreeMap<String, f64> {
    let request = http::Request::get("/metrics").body(Vec::new()).unwrap();
    let text = client
        .request_text(request)
        .await
        .expect("the apiserver's /metrics");
    counters(&text, "apiserver_request_total", |label| {
        let subresource = label("subresource");
        let resource = if subresource.is_empty() {
            label("resource")
        } else {
            format!("{}/{subresource}", label("resource"))
        };
        format!("{} {resource}", label("verb"))
    })
}

/// The process's CPU time (user + system) so far, in clock ticks, and its RSS in bytes.
fn cpu_and_rss(pid: u32) -> (u64, u64) {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // The fields after the command name, which is in parentheses and may hold spaces.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .unwrap()
        .1
        .split_whitespace()
        .collect();
    let ticks = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let rss_kib = status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|value| value.split_whitespace().next())
        .and_then(|kib| kib.parse::<u64>().ok())
        .unwrap_or(0);
    (ticks, rss_kib * 1024)
}

fn clock_ticks_per_second() -> f64 {
    let output = Command::new("getconf").arg("CLK_TCK").output().unwrap();
    String::from_utf8_lossy(&output.stdout)
        .trim()
        .parse()
        .unwrap_or(100.0)
}

/// Waits until every job in `namespace` runs: reconciled at its generation, phase Running.
async fn wait_running(client: &kube::Client, namespace: &str, total: usize) -> Duration {
    let jobs: Api<StatefulStreamJob> = Api::namespaced(client.clone(), namespace);
    let started = Instant::now();
    let limit = Duration::from_secs(120) + Duration::from_secs(2) * total as u32;
    support::wait_until(&format!("{total} jobs running"), limit, async || {
        let listed = jobs.list(&ListParams::default()).await.ok()?;
        let running = listed
            .items
            .iter()
            .filter(|job| {
                job.status.as_ref().is_some_and(|status| {
                    status.observed_generation == job.metadata.generation
                        && status.phase == Some(JobPhase::Running)
                })
            })
            .count();
        (running == total).then_some(())
    })
    .await;
    started.elapsed()
}

/// Where the measurements of a step come from.
struct Probes<'a> {
    client: &'a kube::Client,
    operator_pid: u32,
    operator_metrics: &'a str,
    workers: &'a workers::Workers,
}

async fn measure(probes: &Probes<'_>, window: Duration, jobs: usize, pods: usize) -> Step {
    let apiserver_before = request_counts(probes.client).await;
    let (operator_before, s3_before) = operator_requests(probes.operator_metrics).await;
    let (_, workers_before) = probes.workers.stats();
    let (ticks_before, _) = cpu_and_rss(probes.operator_pid);
    let started = Instant::now();
    tokio::time::sleep(window).await;
    let apiserver_after = request_counts(probes.client).await;
    let (operator_after, s3_after) = operator_requests(probes.operator_metrics).await;
    let (_, workers_after) = probes.workers.stats();
    let (ticks_after, rss_bytes) = cpu_and_rss(probes.operator_pid);
    let seconds = started.elapsed().as_secs_f64();
    Step {
        jobs,
        pods,
        seconds,
        apiserver: difference(&apiserver_before, &apiserver_after),
        operator: difference(&operator_before, &operator_after),
        s3: difference(&s3_before, &s3_after),
        workers: difference(&workers_before, &workers_after),
        cpu_share: (ticks_after - ticks_before) as f64 / clock_ticks_per_second() / seconds,
        rss_bytes,
        failovers: Vec::new(),
        freezes: Vec::new(),
    }
}

fn print_step(step: &Step) {
    let (jobs, seconds) = (step.jobs as f64, step.seconds);
    println!(
        "{} jobs: operator {:.2} apiserver requests/s ({:.4} a job; all clients {:.1}/s), {:.1}% of a core, {:.0} MiB RSS; workers called {:.0}/s",
        step.jobs,
        total(&step.operator, seconds),
        total(&step.operator, seconds) / jobs,
        total(&step.apiserver, seconds),
        step.cpu_share * 100.0,
        step.rss_bytes as f64 / (1 << 20) as f64,
        total(&step.workers, seconds),
    );
    println!(
        "  operator's busiest: {}",
        busiest(&step.operator, seconds, 5)
    );
    println!("  workers' busiest: {}", busiest(&step.workers, seconds, 3));
    println!(
        "  operator's S3 requests: {:.2}/s ({:.4} a job): {}",
        total(&step.s3, seconds),
        total(&step.s3, seconds) / jobs,
        busiest(&step.s3, seconds, 4)
    );
    if !step.failovers.is_empty() {
        println!(
            "  kill -> document received: p50 {:.2}s, max {:.2}s ({} kills)",
            workers::quantile(&step.failovers, 0.5).as_secs_f64(),
            workers::quantile(&step.failovers, 1.0).as_secs_f64(),
            step.failovers.len()
        );
    }
    if !step.freezes.is_empty() {
        println!(
            "  freeze -> document received: p50 {:.2}s, max {:.2}s ({} freezes; heartbeat timeout 2 s)",
            workers::quantile(&step.freezes, 0.5).as_secs_f64(),
            workers::quantile(&step.freezes, 1.0).as_secs_f64(),
            step.freezes.len()
        );
    }
}

fn step_json(step: &Step) -> serde_json::Value {
    let seconds = step.seconds;
    let failover = |share: f64| {
        (!step.failovers.is_empty())
            .then(|| workers::quantile(&step.failovers, share).as_secs_f64())
    };
    serde_json::json!({
        "jobs": step.jobs,
        "pods": step.pods,
        "seconds": seconds,
        "operator_apiserver_requests_per_second": total(&step.operator, seconds),
        "operator_apiserver_requests_per_second_by_kind": rates(&step.operator, seconds),
        "apiserver_requests_per_second_all_clients": total(&step.apiserver, seconds),
        "apiserver_requests_per_second_all_clients_by_kind": rates(&step.apiserver, seconds),
        "operator_s3_requests_per_second": total(&step.s3, seconds),
        "operator_s3_requests_per_second_by_operation": rates(&step.s3, seconds),
        "worker_requests_per_second": total(&step.workers, seconds),
        "worker_requests_per_second_by_kind": rates(&step.workers, seconds),
        "operator_cpu_share_of_a_core": step.cpu_share,
        "operator_rss_bytes": step.rss_bytes,
        "kill_to_document_seconds": step.failovers.iter().map(Duration::as_secs_f64).collect::<Vec<_>>(),
        "kill_to_document_p50_seconds": failover(0.5),
        "kill_to_document_max_seconds": failover(1.0),
        "freeze_to_document_seconds": step.freezes.iter().map(Duration::as_secs_f64).collect::<Vec<_>>(),
    })
}

/// Starts an operator process for `namespace` (its log in `dir`); returns it and the address
/// of its `/metrics`.
pub(crate) fn start_operator(
    namespace: &str,
    dir: &std::path::Path,
    run: usize,
) -> (Process, String) {
    let metrics_address = format!("127.0.0.1:{}", support::free_port());
    // Another build of the operator (a release one) when named; the test build's otherwise.
    let binary = setting(
        "SK_FLEET_OPERATOR_BIN",
        env!("CARGO_BIN_EXE_streamkeeper-operator"),
    );
    let operator = Process::spawn(
        "operator",
        Command::new(binary)
            .args(["run", "--namespace", namespace, "--identity", "fleet"])
            .args(["--metrics-addr", &metrics_address])
            .args(setting("SK_FLEET_OPERATOR_ARGS", "").split_whitespace())
            .env("RUST_LOG", setting("SK_FLEET_OPERATOR_LOG", "warn")),
        dir.join(format!("operator-{run}.log")),
    );
    (operator, metrics_address)
}

#[tokio::main]
async fn main() {
    let sizes: Vec<usize> = setting("SK_FLEET_JOBS", "10,50,100")
        .split(',')
        .map(|size| {
            size.trim()
                .parse()
                .expect("SK_FLEET_JOBS: job counts, a comma between")
        })
        .collect();
    let pods: i32 = setting("SK_FLEET_PODS", "4").parse().unwrap();
    let window = Duration::from_secs(setting("SK_FLEET_WINDOW_SECONDS", "30").parse().unwrap());
    let kills: usize = setting("SK_FLEET_KILLS", "5").parse().unwrap();
    let freezes: usize = setting("SK_FLEET_FREEZES", "2").parse().unwrap();
    let settle = Duration::from_secs(setting("SK_FLEET_SETTLE_SECONDS", "20").parse().unwrap());
    let manifests: u64 = setting("SK_FLEET_MANIFESTS", "3").parse().unwrap();
    let workers = workers::Workers::from_env();
    let client = operator_support::client().await;
    let namespace = operator_support::namespace(&client, "fleet").await;
    // The operators' logs stay for a look after the run.
    let dir = std::path::PathBuf::from(format!(
        "{}/bench/fleet-logs/{namespace}",
        std::env::var("CARGO_TARGET_DIR").unwrap_or_else(|_| "target".into())
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let (operator, metrics_address) = start_operator(&namespace, &dir, 1);
    let probes = Probes {
        client: &client,
        operator_pid: operator.child.id(),
        operator_metrics: &metrics_address,
        workers: &workers,
    };
    println!(
        "fleet bench: namespace {namespace}, {pods} pods a job on KWOK's nodes, a {}s window and {kills} kills per step",
        window.as_secs()
    );

    let mut steps = Vec::new();
    let mut created = 0;
    for &size in &sizes {
        jobs::add_jobs((&client, &namespace), (created, size), pods, manifests).await;
        created = size;
        let took = wait_running(&client, &namespace, size).await;
        println!(
            "{size} jobs running {:.1}s after the last was created",
            took.as_secs_f64()
        );
        // New jobs' first reads and writes (Secrets, status) are not the steady state.
        tokio::time::sleep(settle).await;
        let mut step = measure(&probes, window, size, size * pods as usize).await;
        // Kills spread over the jobs, one at a time, each job whole again before the next.
        for kill in 0..kills {
            let job = format!("job{}", kill * size / kills.max(1));
            let took = workers.time_a_fault(&client, (&namespace, &job), "refuse");
            step.failovers.push(took.await);
        }
        for freeze in 0..freezes {
            let job = format!("job{}", (freeze * size / freezes.max(1) + 1) % size);
            let took = workers.time_a_fault(&client, (&namespace, &job), "silent");
            step.freezes.push(took.await);
        }
        print_step(&step);
        steps.push(step);
    }
    let (operator, restart) =
        restart::restart_operator(operator, (&client, &namespace, &dir), created, &workers).await;
    let seconds = |took: Option<Duration>| took.map(|took| took.as_secs_f64());
    let shown = |took: Option<Duration>| {
        seconds(took).map_or("- (not within 120 s)".to_string(), |s| format!("{s:.1}s"))
    };
    println!(
        "operator restarted over {created} jobs: every job's failover loop polling again after {}, every job reconciled after {} ({} of {} pods polled, {} reconciles)",
        shown(restart.loops),
        shown(restart.reconciled),
        restart.polled,
        restart.pods,
        restart.reconciles,
    );

    println!(
        "\n| jobs | pods | operator's apiserver requests/s | a job | all clients' | operator CPU | operator RSS | worker calls/s | kill → document p50 / max | freeze → document p50 / max |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    let p50_max = |samples: &[Duration]| {
        if samples.is_empty() {
            "-".to_string()
        } else {
            format!(
                "{:.2} s / {:.2} s",
                workers::quantile(samples, 0.5).as_secs_f64(),
                workers::quantile(samples, 1.0).as_secs_f64()
            )
        }
    };
    for step in &steps {
        let (failover, freeze) = (p50_max(&step.failovers), p50_max(&step.freezes));
        println!(
            "| {} | {} | {:.2} | {:.4} | {:.1} | {:.1} % of a core | {:.0} MiB | {:.0} | {failover} | {freeze} |",
            step.jobs,
            step.pods,
            total(&step.operator, step.seconds),
            total(&step.operator, step.seconds) / step.jobs as f64,
            total(&step.apiserver, step.seconds),
            step.cpu_share * 100.0,
            step.rss_bytes as f64 / (1 << 20) as f64,
            total(&step.workers, step.seconds),
        );
    }
    let report = serde_json::json!({
        "bench": "fleet",
        "pods_per_job": pods,
        "standby_replicas": 1,
        "window_seconds": window.as_secs(),
        "steps": steps.iter().map(step_json).collect::<Vec<_>>(),
        "restart": {
            "jobs": created,
            "every_loop_polling_seconds": seconds(restart.loops),
            "every_job_reconciled_seconds": seconds(restart.reconciled),
            "pods_polled": restart.polled,
            "pods": restart.pods,
            "reconciles": restart.reconciles,
        },
    });
    let out = std::env::var("BENCH_OUT").unwrap_or_else(|_| {
        format!(
            "{}/bench/fleet.json",
            std::env::var("CARGO_TARGET_DIR").unwrap_or_else(|_| "target".into())
        )
    });
    let out = std::path::PathBuf::from(out);
    std::fs::create_dir_all(out.parent().unwrap()).unwrap();
    std::fs::write(&out, serde_json::to_string_pretty(&report).unwrap()).unwrap();
    println!("written to {}", out.display());
    clean_up(&client, &namespace, operator).await;
}

/// Deletes the jobs while `operator` still runs (their finalizer waits for it), then stops it
/// and deletes the namespace, its pods at once (no kubelet finishes a deletion, and KWOK stops
/// with the bench) and the volumes bound ahead.
async fn clean_up(client: &kube::Client, namespace: &str, operator: Process) {
    let jobs: Api<StatefulStreamJob> = Api::namespaced(client.clone(), namespace);
    let _ = jobs
        .delete_collection(&Default::default(), &ListParams::default())
        .await;
    support::wait_until("the jobs deleted", Duration::from_secs(300), async || {
        jobs.list(&ListParams::default())
            .await
            .ok()?
            .items
            .is_empty()
            .then_some(())
    })
    .await;
    drop(operator);
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    let _ = namespaces.delete(namespace, &Default::default()).await;
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(client.clone(), namespace);
    let at_once = kube::api::DeleteParams {
        grace_period_seconds: Some(0),
        ..Default::default()
    };
    let _ = pods
        .delete_collection(&at_once, &ListParams::default())
        .await;
    let volumes: Api<PersistentVolume> = Api::all(client.clone());
    let ours = ListParams::default().labels(&format!("{}={namespace}", jobs::VOLUME_LABEL));
    let _ = volumes.delete_collection(&Default::default(), &ours).await;
}
