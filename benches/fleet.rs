//! Bench: what one operator costs the control plane as its fleet grows, measured from outside.
//!
//! One operator process (the test build) watches one namespace; jobs are added in steps
//! (`SK_FLEET_JOBS`, default `10,50,100`), each with `SK_FLEET_PODS` worker pods (default 4) on
//! its own input topic of as many partitions, real Kafka and S3 behind them. After each step it
//! waits until every job is reconciled, then measures a window (`SK_FLEET_WINDOW_SECONDS`,
//! default 30):
//! - the apiserver's requests per second, from its own `/metrics` (`apiserver_request_total`),
//!   in all and by verb and resource (the bench's own few reads of `/metrics` and the jobs are
//!   in it too, as are the controller-manager's and scheduler's);
//! - the operator's CPU (user + system, from `/proc`) as a share of one core, and its RSS (the
//!   test build's: a debug build spends more CPU than the release image).
//!
//! This is the fleet bench's first part: no node runs the pods, so they stay Pending and no
//! worker is polled. What it measures is the operator's own loops against the apiserver, the
//! cost that grows with jobs before a single heartbeat. Simulated pods and workers (KWOK and a
//! process answering the worker contract for every pod) are the next part.
//!
//! Run: `tests/bench.sh fleet`. Prints a table and writes JSON to `$BENCH_OUT` (default
//! `bench/fleet.json` under the cargo target dir).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // bench code

#[path = "../tests/operator_support/mod.rs"]
mod operator_support;

use kube::Api;
use kube::api::{ListParams, PostParams};
use operator_support::cards::Process;
use operator_support::support;
use std::collections::BTreeMap;
use std::process::Command;
use std::time::{Duration, Instant};
use streamkeeper::api::StatefulStreamJob;

/// One measured step.
struct Step {
    jobs: usize,
    pods: usize,
    seconds: f64,
    requests: BTreeMap<String, f64>,
    cpu_share: f64,
    rss_bytes: u64,
}

impl Step {
    fn requests_per_second(&self) -> f64 {
        self.requests.values().sum::<f64>() / self.seconds
    }

    /// Requests per second by `VERB resource`.
    fn rates(&self) -> BTreeMap<String, f64> {
        self.requests
            .iter()
            .map(|(key, count)| (key.clone(), count / self.seconds))
            .collect()
    }

    /// The `most` busiest kinds of request, busiest first.
    fn busiest(&self, most: usize) -> Vec<(String, f64)> {
        let mut rates: Vec<(String, f64)> = self.rates().into_iter().collect();
        rates.sort_by(|a, b| b.1.total_cmp(&a.1));
        rates.truncate(most);
        rates
    }
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
    let mut counts = BTreeMap::new();
    for line in text.lines() {
        let Some(labels) = line.strip_prefix("apiserver_request_total{") else {
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
        let subresource = label("subresource");
        let resource = if subresource.is_empty() {
            label("resource")
        } else {
            format!("{}/{subresource}", label("resource"))
        };
        *counts
            .entry(format!("{} {resource}", label("verb")))
            .or_insert(0.0) += value.trim().parse::<f64>().unwrap_or(0.0);
    }
    counts
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

/// Adds jobs until `namespace` holds `total`, each with `pods` pods and as many partitions.
async fn add_jobs(client: &kube::Client, namespace: &str, from: usize, total: usize, pods: i32) {
    let jobs: Api<StatefulStreamJob> = Api::namespaced(client.clone(), namespace);
    for index in from..total {
        let input = support::unique_name(&format!("fleet{index}-in"));
        operator_support::create_topic(&input, pods, &[]).await;
        operator_support::create_topic(&format!("{input}-out"), pods, &[]).await;
        let mut value = serde_json::to_value(operator_support::job(
            &format!("job{index}"),
            &input,
            &support::unique_name("fleet"),
        ))
        .unwrap();
        value["spec"]["replicas"] = serde_json::json!(pods);
        let job: StatefulStreamJob = serde_json::from_value(value).unwrap();
        jobs.create(&PostParams::default(), &job).await.unwrap();
    }
}

/// Waits until every job in `namespace` has a status for its current generation.
async fn wait_reconciled(client: &kube::Client, namespace: &str, total: usize) -> Duration {
    let jobs: Api<StatefulStreamJob> = Api::namespaced(client.clone(), namespace);
    let started = Instant::now();
    let limit = Duration::from_secs(60) + Duration::from_secs(2) * total as u32;
    support::wait_until(&format!("{total} jobs reconciled"), limit, async || {
        let listed = jobs.list(&ListParams::default()).await.ok()?;
        let reconciled = listed
            .items
            .iter()
            .filter(|job| {
                job.status
                    .as_ref()
                    .and_then(|status| status.observed_generation)
                    == job.metadata.generation
            })
            .count();
        (reconciled == total).then_some(())
    })
    .await;
    started.elapsed()
}

async fn measure(
    client: &kube::Client,
    operator: u32,
    window: Duration,
    jobs: usize,
    pods: usize,
) -> Step {
    let requests_before = request_counts(client).await;
    let (ticks_before, _) = cpu_and_rss(operator);
    let started = Instant::now();
    tokio::time::sleep(window).await;
    let requests_after = request_counts(client).await;
    let (ticks_after, rss_bytes) = cpu_and_rss(operator);
    let seconds = started.elapsed().as_secs_f64();
    let requests = requests_after
        .iter()
        .map(|(key, after)| {
            let before = requests_before.get(key).copied().unwrap_or(0.0);
            (key.clone(), after - before)
        })
        .filter(|(_, count)| *count > 0.0)
        .collect();
    Step {
        jobs,
        pods,
        seconds,
        requests,
        cpu_share: (ticks_after - ticks_before) as f64 / clock_ticks_per_second() / seconds,
        rss_bytes,
    }
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
    let client = operator_support::client().await;
    let namespace = operator_support::namespace(&client, "fleet").await;
    let dir = tempfile::tempdir().unwrap();
    let operator = Process::spawn(
        "operator",
        Command::new(env!("CARGO_BIN_EXE_streamkeeper-operator"))
            .args(["run", "--namespace", &namespace, "--identity", "fleet"])
            .args(["--metrics-addr", "127.0.0.1:0"])
            .env("RUST_LOG", "warn"),
        dir.path().join("operator.log"),
    );
    let operator_pid = operator.child.id();
    println!(
        "fleet bench: namespace {namespace}, {pods} pods a job (Pending: no node), a {}s window per step",
        window.as_secs()
    );

    let mut steps = Vec::new();
    let mut created = 0;
    for &size in &sizes {
        add_jobs(&client, &namespace, created, size, pods).await;
        created = size;
        let took = wait_reconciled(&client, &namespace, size).await;
        println!(
            "{size} jobs reconciled {:.1}s after the last was created",
            took.as_secs_f64()
        );
        let step = measure(&client, operator_pid, window, size, size * pods as usize).await;
        println!(
            "{size} jobs: {:.1} apiserver requests/s ({:.2} a job), operator {:.1}% of a core, {:.0} MiB RSS; most: {}",
            step.requests_per_second(),
            step.requests_per_second() / size as f64,
            step.cpu_share * 100.0,
            step.rss_bytes as f64 / (1 << 20) as f64,
            step.busiest(3)
                .iter()
                .map(|(key, rate)| format!("{key} {rate:.1}/s"))
                .collect::<Vec<_>>()
                .join(", ")
        );
        steps.push(step);
    }

    println!("\n| jobs | pods | apiserver requests/s | a job | operator CPU | operator RSS |");
    println!("|---|---|---|---|---|---|");
    for step in &steps {
        println!(
            "| {} | {} | {:.1} | {:.2} | {:.1} % of a core | {:.0} MiB |",
            step.jobs,
            step.pods,
            step.requests_per_second(),
            step.requests_per_second() / step.jobs as f64,
            step.cpu_share * 100.0,
            step.rss_bytes as f64 / (1 << 20) as f64
        );
    }
    let report = serde_json::json!({
        "bench": "fleet",
        "part": "control plane only: pods Pending, no worker polled",
        "pods_per_job": pods,
        "window_seconds": window.as_secs(),
        "steps": steps.iter().map(|step| serde_json::json!({
            "jobs": step.jobs,
            "pods": step.pods,
            "seconds": step.seconds,
            "apiserver_requests_per_second": step.requests_per_second(),
            "apiserver_requests_per_second_by_kind": step.rates(),
            "operator_cpu_share_of_a_core": step.cpu_share,
            "operator_rss_bytes": step.rss_bytes,
        })).collect::<Vec<_>>(),
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
    drop(operator);
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    let _ = namespaces.delete(&namespace, &Default::default()).await;
}
