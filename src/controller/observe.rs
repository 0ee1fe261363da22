//! Step 5 of the pipeline (validate → read facts → build → apply → **observe** → judge → update
//! status): reading what a job's status depends on: each task's checkpoint a restore would use (the
//! contract's rule over the S3 manifests and the changelog's offsets) and the input partitions'
//! log-start offsets (from Kafka), judged by the pure rules of [`crate::retention`] into
//! `CheckpointStale` and `RecoveryGap`; and what the worker pods report about their tasks
//! (`GET /v1/tasks`) and whether one refused its config (its termination).

use crate::adapters::kafka_admin::KafkaAdmin;
use crate::adapters::worker_client;
use crate::controller::ValidatedJob;
use crate::controller::judge::worker_refusal::{WorkerRefusal, worker_refusal};
use crate::controller::read_facts::{checkpoint_reader, job_pods};
use crate::controller::{Context, ReconcileError};
use crate::k8s::names;
use kube::ResourceExt;
use std::time::Duration;
use streamkeeper_contract::CheckpointManifest;
use streamkeeper_contract::TaskReport;
use streamkeeper_contract::checkpoint_choice::{self, ChangelogRange};

/// How long a worker may take to answer `GET /v1/tasks`; a slower one counts as silent.
const REPORT_TIMEOUT: Duration = Duration::from_secs(3);

/// What the worker pods say: each running pod's task reports, and a pod's refusal of the job's
/// config, if one refused it.
pub struct WorkerFacts {
    pub reports: Vec<(String, Vec<TaskReport>)>,
    pub refusal: Option<WorkerRefusal>,
}

/// Each running worker pod's task reports (a pod that does not answer reports nothing, so its
/// tasks show no owner until it does), and a worker's refusal of its config, from the pods'
/// container statuses. The reports come from the job's failover loop, which hears every pod's
/// report stream; a pod the loop has no answer from is asked (`GET /v1/tasks`).
pub async fn workers(ctx: &Context, job: &ValidatedJob) -> Result<WorkerFacts, ReconcileError> {
    let pods = job_pods(ctx, job).await?;
    let refusal = worker_refusal(&pods);
    let port = u16::try_from(names::HTTP_PORT).unwrap_or(8080);
    let heard = ctx
        .failovers
        .reports(&job.namespace, &job.name)
        .unwrap_or_default();
    let calls = pods.iter().filter_map(|pod| {
        let status = pod.status.as_ref()?;
        if status.phase.as_deref() != Some("Running") || pod.metadata.deletion_timestamp.is_some() {
            return None;
        }
        let host = status.pod_ip.clone()?;
        let name = pod.name_any();
        let heard = heard.get(&name).cloned();
        Some(async move {
            if let Some(document) = heard {
                return Some((name, document.tasks.clone()));
            }
            match worker_client::task_reports(&host, port, REPORT_TIMEOUT).await {
                Ok(document) => Some((name, document.tasks)),
                Err(error) => {
                    tracing::debug!(pod = %name, %error, "no task reports from this pod");
                    None
                }
            }
        })
    });
    let reports = futures::future::join_all(calls)
        .await
        .into_iter()
        .flatten()
        .collect();
    Ok(WorkerFacts { reports, refusal })
}

/// What S3 and Kafka say about the job's checkpoints, for the judge
/// ([`crate::controller::judge::checkpoints`]).
#[derive(Debug, Clone, PartialEq)]
pub struct CheckpointFacts {
    /// Per task (index = task), the checkpoint a restore would use.
    pub restore_points: Vec<Option<CheckpointManifest>>,
    /// Per input partition, its log-start offset (empty when no task has a checkpoint).
    pub log_starts: Vec<i64>,
}

/// Reads every task's checkpoints and the changelog's offsets, picks the checkpoint a restore
/// would use, and checks it against `max_safe_age` and the input partition's log-start offset.
pub async fn checkpoints(
    ctx: &Context,
    kafka: &KafkaAdmin,
    job: &ValidatedJob,
    partitions: i32,
) -> Result<CheckpointFacts, ReconcileError> {
    let reader = checkpoint_reader(ctx, job).await?;
    let task_count = u32::try_from(partitions).unwrap_or(0);
    let mut listed = Vec::new();
    for task in 0..task_count {
        listed.push(reader.manifests(task, &ctx.manifests).await?);
    }
    ctx.metrics.set_manifests_kept(ctx.manifests.len());
    // Offsets cost broker calls; a job without checkpoints needs none.
    let (changelog, log_starts) = if listed.iter().any(|manifests| !manifests.is_empty()) {
        let changelog = kafka
            .watermarks(&job.kafka.changelog_topic, partitions)
            .await?;
        // A re-keyed input's tasks stand in its repartition topic, which they purge up to what
        // they committed: a checkpoint's position there lies below its start by design, and a
        // restore replays the changelog past it. No recovery gap is judged from it.
        let log_starts = match job.processor.left_repartition_topic() {
            Some(_) => Vec::new(),
            None => {
                kafka
                    .log_start_offsets(&job.kafka.input_topic, partitions)
                    .await?
            }
        };
        (changelog, log_starts)
    } else {
        (Vec::new(), Vec::new())
    };
    Ok(CheckpointFacts {
        restore_points: restore_checkpoints(listed, &changelog),
        log_starts,
    })
}

/// Per task (index = task), the checkpoint a restore from the changelog would use, by the
/// contract's rule, given each task's manifests and its changelog partition's `(low, high)`.
///
/// The operator does not read the changelog's records, so two facts of the worker's restore
/// are not known here. The tombstone rule is taken as met: applying it needs to know whether
/// only transaction markers follow the checkpoint (an idle task's case), and guessing "no"
/// would call every idle task's checkpoint unusable; when the rule fails, the worker replays
/// the whole changelog instead. The changelog's incarnation (named by its first record) is
/// not checked either: a rebuilt changelog starts again at 0, so the old incarnation's
/// checkpoints mostly lie past its end and are refused by the range anyway.
pub fn restore_checkpoints(
    listed: Vec<Vec<CheckpointManifest>>,
    changelog: &[(i64, i64)],
) -> Vec<Option<CheckpointManifest>> {
    listed
        .into_iter()
        .enumerate()
        .map(|(index, manifests)| {
            let task = u32::try_from(index).ok()?;
            let &(low, high) = changelog.get(index)?;
            checkpoint_choice::best(manifests, task, ChangelogRange { low, high }, |_| true)
        })
        .collect()
}
