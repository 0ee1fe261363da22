//! `streamkeeper-operator bench-reconcile`: reconcile many jobs against a real apiserver, Kafka
//! and S3, and report reconcile latency (p50/p99, first pass and no-op passes) and the process's
//! memory. Prints the figures and writes them as JSON.
//!
//! The jobs share one input topic and, unless `--own-topics`, one changelog and one dead-letter
//! topic: on a shared test broker 500 jobs would otherwise add 1000 topics. The reconcile work per
//! job is the same either way except the first pass's topic creation.

use crate::api::StatefulStreamJob;
use crate::controller::reconcile::{FINALIZER, reconcile};
use crate::controller::{Context, Settings};
use crate::telemetry::metrics::Metrics;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::api::{Api, DeleteParams, PostParams};
use kube::runtime::events::Reporter;
use kube::{Client, ResourceExt};
use serde::Serialize;
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(Debug, Clone)]
pub struct BenchSettings {
    pub jobs: usize,
    pub bootstrap: String,
    pub input_topic: String,
    pub s3_endpoint: String,
    pub s3_bucket: String,
    pub s3_region: String,
    pub s3_access_key: String,
    pub s3_secret_key: String,
    pub own_topics: bool,
    /// No-op passes after the first.
    pub passes: usize,
}

#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    #[error("apiserver: {0}")]
    Kube(#[from] kube::Error),
    #[error("reconcile of {job} failed: {message}")]
    Reconcile { job: String, message: String },
    #[error("could not serialize the result: {0}")]
    Json(#[from] serde_json::Error),
}

/// Latency figures of one pass over every job, in milliseconds.
#[derive(Debug, Clone, Serialize)]
pub struct PassFigures {
    pub reconciles: usize,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
    pub total_seconds: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct BenchResult {
    pub jobs: usize,
    pub own_topics: bool,
    pub first_pass: PassFigures,
    pub no_op_passes: PassFigures,
    /// Resident memory of the operator process after the passes (kB, from /proc/self/status).
    pub rss_kb: Option<u64>,
    /// Peak resident memory of the operator process (kB).
    pub peak_rss_kb: Option<u64>,
}

fn percentile(sorted: &[f64], fraction: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    // Nearest rank.
    let rank = (fraction * sorted.len() as f64).ceil().max(1.0) as usize;
    sorted[rank.min(sorted.len()) - 1]
}

fn figures(mut samples: Vec<f64>, total: Duration) -> PassFigures {
    samples.sort_by(f64::total_cmp);
    PassFigures {
        reconciles: samples.len(),
        p50_ms: percentile(&samples, 0.50),
        p99_ms: percentile(&samples, 0.99),
        max_ms: samples.last().copied().unwrap_or_default(),
        total_seconds: total.as_secs_f64(),
    }
}

fn proc_status_kb(field: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find_map(|line| line.strip_prefix(field))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|number| number.parse().ok())
}

fn job(
    settings: &BenchSettings,
    namespace: &str,
    index: usize,
) -> Result<StatefulStreamJob, serde_json::Error> {
    let mut kafka = serde_json::json!({
        "bootstrapServers": settings.bootstrap,
        "inputTopic": settings.input_topic,
        "outputTopic": format!("{}-out", settings.input_topic),
    });
    if !settings.own_topics {
        kafka["changelogTopic"] = format!("{namespace}.bench.changelog").into();
        kafka["deadLetterTopic"] = format!("{namespace}.bench.dlq").into();
    }
    serde_json::from_value(serde_json::json!({
        "apiVersion": "streamkeeper.dev/v1alpha1",
        "kind": "StatefulStreamJob",
        "metadata": {"name": format!("bench-{index:04}")},
        "spec": {
            "image": "streamkeeper/worker:bench",
            "replicas": 1,
            "kafka": kafka,
            "processor": {"type": "count", "keyField": "card"},
            "deletionPolicy": "Delete",
            "checkpoint": {"interval": "30s", "s3": {
                "bucket": settings.s3_bucket,
                "prefix": "bench",
                "endpoint": settings.s3_endpoint,
                "region": settings.s3_region,
                "pathStyle": true,
                "credentialsSecret": {"name": "s3-credentials"},
            }},
        }
    }))
}

async fn reconcile_timed(
    ctx: &Arc<Context>,
    jobs: &Api<StatefulStreamJob>,
    name: &str,
) -> Result<f64, BenchError> {
    let job = jobs.get(name).await?;
    let start = Instant::now();
    let needs_finalizer = !job.finalizers().iter().any(|f| f == FINALIZER);
    reconcile(Arc::new(job), Arc::clone(ctx))
        .await
        .map_err(|e| BenchError::Reconcile {
            job: name.to_string(),
            message: e.to_string(),
        })?;
    if needs_finalizer {
        // The first call only added the finalizer; the apply happens on the next one, as in
        // the Controller (where the finalizer patch triggers it).
        let job = jobs.get(name).await?;
        reconcile(Arc::new(job), Arc::clone(ctx))
            .await
            .map_err(|e| BenchError::Reconcile {
                job: name.to_string(),
                message: e.to_string(),
            })?;
    }
    Ok(start.elapsed().as_secs_f64() * 1000.0)
}

/// Runs the benchmark in a fresh namespace (deleted afterwards with its topics and objects).
pub async fn run(client: Client, settings: BenchSettings) -> Result<BenchResult, BenchError> {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or_default();
    let namespace = format!("sk-bench-{nanos:x}");
    let namespaces: Api<Namespace> = Api::all(client.clone());
    namespaces
        .create(
            &PostParams::default(),
            &serde_json::from_value(serde_json::json!({"metadata": {"name": namespace}}))?,
        )
        .await?;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &namespace);
    secrets
        .create(
            &PostParams::default(),
            &serde_json::from_value(serde_json::json!({
                "metadata": {"name": "s3-credentials"},
                "stringData": {
                    "AWS_ACCESS_KEY_ID": settings.s3_access_key,
                    "AWS_SECRET_ACCESS_KEY": settings.s3_secret_key,
                },
            }))?,
        )
        .await?;
    let jobs: Api<StatefulStreamJob> = Api::namespaced(client.clone(), &namespace);
    let mut names = Vec::new();
    for index in 0..settings.jobs {
        let created = jobs
            .create(&PostParams::default(), &job(&settings, &namespace, index)?)
            .await?;
        names.push(created.name_any());
    }
    let reporter = Reporter {
        controller: "streamkeeper-operator".into(),
        instance: Some("bench".into()),
    };
    let ctx = Arc::new(Context::new(
        client.clone(),
        reporter,
        Arc::new(Metrics::new()),
        Settings::default(),
    ));

    let start = Instant::now();
    let mut first = Vec::new();
    for name in &names {
        first.push(reconcile_timed(&ctx, &jobs, name).await?);
    }
    let first_pass = figures(first, start.elapsed());
    println!(
        "first pass: {} reconciles, p50 {:.1} ms, p99 {:.1} ms, total {:.1} s",
        first_pass.reconciles, first_pass.p50_ms, first_pass.p99_ms, first_pass.total_seconds
    );

    let start = Instant::now();
    let mut no_op = Vec::new();
    for _ in 0..settings.passes {
        for name in &names {
            no_op.push(reconcile_timed(&ctx, &jobs, name).await?);
        }
    }
    let no_op_passes = figures(no_op, start.elapsed());
    println!(
        "no-op passes: {} reconciles, p50 {:.1} ms, p99 {:.1} ms, total {:.1} s",
        no_op_passes.reconciles,
        no_op_passes.p50_ms,
        no_op_passes.p99_ms,
        no_op_passes.total_seconds
    );
    let result = BenchResult {
        jobs: settings.jobs,
        own_topics: settings.own_topics,
        first_pass,
        no_op_passes,
        rss_kb: proc_status_kb("VmRSS:"),
        peak_rss_kb: proc_status_kb("VmHWM:"),
    };
    println!(
        "operator memory: RSS {} kB, peak {} kB",
        result.rss_kb.unwrap_or_default(),
        result.peak_rss_kb.unwrap_or_default()
    );

    // Clean up through each job's finalizer (deletionPolicy Delete: topics and S3 objects), so
    // the namespace is not left waiting on finalizers no operator will remove.
    for name in &names {
        jobs.delete(name, &DeleteParams::default()).await?;
        if let Some(job) = jobs.get_opt(name).await? {
            let _ = reconcile(Arc::new(job), Arc::clone(&ctx)).await;
        }
    }
    namespaces
        .delete(&namespace, &DeleteParams::default())
        .await?;
    Ok(result)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let samples: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&samples, 0.50), 50.0);
        assert_eq!(percentile(&samples, 0.99), 99.0);
        assert_eq!(percentile(&[7.0], 0.99), 7.0);
        assert_eq!(percentile(&[], 0.5), 0.0);
    }
}
