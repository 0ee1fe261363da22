//! One reconcile of a `StatefulStreamJob`, the driver of the pipeline **validate → read facts →
//! build → apply → observe → judge → update status**, behind a finalizer that runs the clean-up
//! `deletionPolicy` asks for. Each step is a module; this file only runs them in order.
//!
//! A broken rule (schema-invisible spec error, a changelog that is not compacted, an interval
//! that does not fit the input retention) is a condition and a wait, never an error loop; Kafka,
//! S3 or apiserver trouble is a condition plus an error, which the controller's error policy
//! turns into a backoff requeue.

use crate::adapters::kafka_admin::KafkaAdmin;
use crate::api::{DeletionPolicy, StatefulStreamJob};
use crate::controller::apply::{
    self, ApiError, ApplyError, ApplyOutcome, ChangelogClaimant, REFUSED_RECHECK,
};
use crate::controller::apply::{cleanup, operations, owner_marker};
use crate::controller::cadence::{ROLLING_RECHECK, spread};
use crate::controller::judge::next_status::Observation;
use crate::controller::judge::wasm_module::{MODULE_RECHECK, ModuleRefusal};
use crate::controller::judge::{self, Refusal, TaskEvidence};
use crate::controller::update_status::update_status;
use crate::controller::{
    Context, DesiredResources, Facts, InvalidSpec, ReconcileError, ValidatedJob, build, observe,
    read_facts, validate,
};
use crate::failover::ScaleDown;
use crate::k8s::events::publish;
use crate::k8s::names;
use crate::k8s::ownership::ForeignObject;
use crate::vocabulary::{reasons, types};
use k8s_openapi::api::apps::v1::StatefulSet;
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::controller::Action;
use kube::runtime::finalizer::{self, Event as FinalizerEvent};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use streamkeeper_contract::co_partitioning::{self, PartitionCountMismatch, PartitionsChanged};
use streamkeeper_contract::worker_config::ProcessorKind;

/// Put on every job so deleting it waits for the clean-up its `deletionPolicy` asks for.
pub const FINALIZER: &str = "streamkeeper.dev/cleanup";

fn job_key(job: &StatefulStreamJob) -> String {
    format!("{}/{}", job.namespace().unwrap_or_default(), job.name_any())
}

/// The controller's reconcile function: times it, counts it, resets the backoff on success.
pub async fn reconcile(
    job: Arc<StatefulStreamJob>,
    ctx: Arc<Context>,
) -> Result<Action, ReconcileError> {
    let timer = ctx.metrics.reconcile_started();
    let key = job_key(&job);
    let namespace = job.namespace().unwrap_or_default();
    // A touched job (a rotation is announced by touching it) reads its Secrets anew.
    if ctx.changed_since_last_look(&key, crate::controller::relevant::touched(&job)) {
        ctx.secrets.forget_namespace(&namespace);
    }
    let result = reconcile_with_finalizer(job, &ctx).await;
    match &result {
        Ok(_) => {
            ctx.succeeded(&key);
            timer.done(None);
        }
        Err(error) => {
            // Stale keys that S3 or Kafka refuse are read again on the retry.
            ctx.secrets.forget_namespace(&namespace);
            tracing::warn!(job = %key, category = error.category(), %error, "reconcile failed");
            timer.done(Some(error.category()));
        }
    }
    result
}

/// The controller's error policy: requeue with a per-job exponential backoff.
pub fn error_policy(
    job: Arc<StatefulStreamJob>,
    error: &ReconcileError,
    ctx: Arc<Context>,
) -> Action {
    let delay = ctx.backoff(&job_key(&job));
    tracing::info!(job = %job_key(&job), category = error.category(), ?delay, "requeue after error");
    Action::requeue(delay)
}

async fn reconcile_with_finalizer(
    job: Arc<StatefulStreamJob>,
    ctx: &Context,
) -> Result<Action, ReconcileError> {
    let namespace = job
        .namespace()
        .ok_or_else(|| ReconcileError::NoNamespace(job.name_any()))?;
    let api: Api<StatefulStreamJob> = Api::namespaced(ctx.client.clone(), &namespace);
    // Delete: the workers stop before the finalizer's clean-up may run (it removes the finalizer
    // as soon as it succeeds, so it cannot be the one that waits).
    let cleaning = job.metadata.deletion_timestamp.is_some()
        && job.spec.deletion_policy == DeletionPolicy::Delete
        && job.finalizers().iter().any(|f| f == FINALIZER);
    if cleaning && let Some(wait) = cleanup::stop_workers(ctx, &job).await? {
        return Ok(wait);
    }
    finalizer::finalizer(&api, FINALIZER, job, |event| async move {
        match event {
            FinalizerEvent::Apply(job) => apply_job(&job, ctx).await,
            FinalizerEvent::Cleanup(job) => on_delete(&job, ctx).await,
        }
    })
    .await
    .map_err(|error| ReconcileError::Finalizer(Box::new(error)))
}

/// Why a reconcile stopped before the end of the pipeline.
enum Halt {
    /// The spec breaks a rule the schema cannot express: wait for it to change.
    Invalid(InvalidSpec),
    /// The job breaks a retention or changelog rule: look again later.
    Refused(Refusal),
    /// A join's two topics have different partition counts: look again later (a topic may get
    /// partitions without a change of the spec).
    NotCoPartitioned(PartitionCountMismatch),
    /// An object with one of the job's names is someone else's: look again later.
    Foreign(ForeignObject),
    /// A WebAssembly processor's module is missing or not the pinned one: look again soon.
    Module(ModuleRefusal),
    /// Kafka or S3 did not answer: these conditions are `Unknown`, then back off.
    Unreachable(ReconcileError, &'static [&'static str]),
    /// The apiserver failed (or this process no longer leads): back off, write nothing.
    Failed(ReconcileError),
}

impl From<ReconcileError> for Halt {
    fn from(error: ReconcileError) -> Self {
        Halt::Failed(error)
    }
}

/// Conditions an unreachable Kafka leaves unchecked before anything is applied.
const UNCHECKED_BEFORE_APPLY: &[&str] =
    &[types::CHANGELOG_READY, types::RETENTION_SAFE, types::READY];

async fn apply_job(job: &StatefulStreamJob, ctx: &Context) -> Result<Action, ReconcileError> {
    // What the status keeps (the final checkpoint's outcome, merged conditions) must be merged
    // into the current status. The watch cache can still hold the status from before this
    // process's last write: then read the job (in steady state the cache is current, and a
    // reconcile reads nothing from the apiserver).
    let current = if ctx.status_writes.seen_in(job) {
        job.clone()
    } else {
        match current_job(ctx, job).await? {
            Some(current) => current,
            None => return Ok(Action::await_change()),
        }
    };
    let job = &current;
    let mut observation = Observation {
        generation: job.metadata.generation,
        ..Observation::default()
    };
    let next = match run_pipeline(ctx, job, &mut observation).await {
        Ok(recheck) => Ok(Action::requeue(spread(recheck, &job_key(job)))),
        Err(Halt::Failed(error)) => return Err(error),
        Err(Halt::Invalid(invalid)) => {
            judge::invalid(&mut observation, &invalid);
            Ok(Action::await_change())
        }
        Err(Halt::Refused(refusal)) => {
            judge::refused(&mut observation, &refusal);
            Ok(Action::requeue(REFUSED_RECHECK))
        }
        Err(Halt::Module(refusal)) => {
            judge::wasm_module::refused(&mut observation, &refusal);
            Ok(Action::requeue(MODULE_RECHECK))
        }
        Err(Halt::NotCoPartitioned(mismatch)) => {
            judge::not_co_partitioned(&mut observation, &mismatch);
            Ok(Action::requeue(REFUSED_RECHECK))
        }
        Err(Halt::Foreign(foreign)) => {
            tracing::warn!(job = %job.name_any(), %foreign, "refusing to take over an object");
            judge::foreign(&mut observation, &foreign);
            Ok(Action::requeue(REFUSED_RECHECK))
        }
        Err(Halt::Unreachable(error, unchecked)) => {
            judge::unreachable(
                &mut observation,
                error.category(),
                &error.to_string(),
                unchecked,
            );
            Err(error)
        }
    };
    update_status(ctx, job, observation).await?;
    next
}

/// The steps after reading the job; each judged piece goes into `observation`. Returns how soon
/// to look at the job again.
async fn run_pipeline(
    ctx: &Context,
    job: &StatefulStreamJob,
    observation: &mut Observation,
) -> Result<Duration, Halt> {
    let validated = validate(job, ctx.settings.cluster.as_deref()).map_err(Halt::Invalid)?;
    observation.conditions.push(judge::spec_valid());
    // One changelog per job: a topic another job keeps is refused before anything is created.
    refuse_a_claimed_changelog(ctx, job).await?;
    // Nothing starts, and nothing running changes, on a module that is not there.
    let module = read_facts::wasm_module(ctx, &validated)
        .await
        .map_err(|error| Halt::Unreachable(error, &[types::READY]))?;
    if let (Some((location, found)), ProcessorKind::Wasm { module: pinned, .. }) =
        (module, &validated.processor.kind)
    {
        judge::wasm_module::judge(&location, &pinned.sha256, &found).map_err(Halt::Module)?;
    }

    let kafka = read_facts::read_kafka(ctx, &validated)
        .await
        .map_err(|error| Halt::Unreachable(error, UNCHECKED_BEFORE_APPLY))?;
    let partitions_changed = join_partitions(job, &validated, &kafka)?;
    let input_retention = kafka
        .input_retention
        .map_err(|violation| Halt::Refused(Refusal::input_retention(violation)))?;
    let retention = judge::retention(&validated, &input_retention);
    observation.retention = Some(retention.status);
    observation
        .conditions
        .push(retention.condition.map_err(Halt::Refused)?);

    let pods_kept = pods_kept_for_scale_down(ctx, &validated).await?;
    let desired = build(
        &validated,
        &Facts {
            tasks: kafka.tasks,
            pods_kept,
        },
    );
    // One S3 prefix per job, across clusters: claimed before any worker writes there.
    let recorded = owner_marker::recorded(job);
    owner_marker::claim(ctx, &validated, &recorded)
        .await
        .map_err(|error| Halt::Unreachable(error, &[types::READY, types::CHECKPOINT_STALE]))?
        .map_err(Halt::Foreign)?;
    // Suspend: the final checkpoint comes before the scale to zero.
    let suspend_note = if validated.workers.suspend {
        operations::final_checkpoint_before_suspend(ctx, &validated).await?
    } else {
        None
    };
    let claimant = ChangelogClaimant {
        owner: &validated.owner,
        marker: &owner_marker::ours(ctx, &validated),
        recorded: recorded.changelog.as_deref(),
    };
    let stateful_set = apply_desired(
        ctx,
        (&kafka.admin, &validated, &desired),
        &claimant,
        observation,
    )
    .await?;
    // Assign: the job's failover loop decides and sends the assignment between reconciles.
    ctx.failovers.ensure(
        &ctx.failover_deps(),
        build::failover_job(&validated, kafka.tasks),
    );
    observation.assignment_generation = ctx
        .failovers
        .generation(&validated.namespace, &validated.name)
        .and_then(|generation| i64::try_from(generation).ok());
    observation
        .conditions
        .push(judge::changelog_ready(&desired.topics.changelog));
    observation.conditions.push(judge::suspended(
        job,
        validated.workers.suspend,
        suspend_note.as_ref(),
    ));
    // Pods whose template is outdated (image, config, restartNonce, restore) are replaced.
    let roll = operations::replace_outdated_pods(ctx, &validated, &stateful_set).await?;

    // Checkpoint ages and recovery gaps, from S3 and the input's log-start offsets.
    let checkpoint_facts = observe::checkpoints(ctx, &kafka.admin, &validated, kafka.tasks)
        .await
        .map_err(|error| {
            Halt::Unreachable(error, &[types::CHECKPOINT_STALE, types::RECOVERY_GAP])
        })?;
    let checkpoints = judge::checkpoints::judge(
        &checkpoint_facts.restore_points,
        &checkpoint_facts.log_starts,
        retention.max_safe_age,
        now_ms(),
    );
    // What the workers say about their tasks.
    let workers = observe::workers(ctx, &validated).await?;
    let reports = workers.reports;
    let (desired_pods, ready_pods) = pod_counts(&stateful_set);
    let recheck = judge::tasks(
        observation,
        TaskEvidence {
            job,
            validated: &validated,
            roll,
            checkpoints,
            reports: &reports,
            desired_pods,
            ready_pods,
            moves: &ctx.failovers.moves(&validated.namespace, &validated.name),
            partitions_changed: partitions_changed.as_ref(),
        },
    );
    // A worker's refusal of the config outweighs what the tasks say: none can run.
    if let Some(refusal) = &workers.refusal {
        judge::worker_refusal::refused_by_worker(observation, refusal);
    }
    // A drain for a scale-down is watched at the rolling upgrade's pace.
    Ok(match pods_kept {
        Some(_) => recheck.min(ROLLING_RECHECK),
        None => recheck,
    })
}

/// A join's partition counts. Before the job starts, both topics must have as many partitions,
/// or nothing starts. Once it has (its tasks were assigned, and its changelog exists), its keys
/// are placed by its changelog's count: a topic that changed since stops the join's tasks,
/// which the job shows as `PartitionsChanged` (the workers find it too); it is not a refusal of
/// the spec. A re-keyed side's topic places nothing (the job writes each record where its key
/// belongs), so it is compared with nothing; its repartition topic the workers check. Nor does
/// a table every task reads whole (`globalTable`).
fn join_partitions(
    job: &StatefulStreamJob,
    validated: &ValidatedJob,
    kafka: &read_facts::KafkaFacts,
) -> Result<Option<PartitionsChanged>, Halt> {
    let Some((right_topic, right_partitions)) = &kafka.right_partitions else {
        return Ok(None);
    };
    let left = (validated.kafka.input_topic.as_str(), kafka.input_partitions);
    let right = (right_topic.as_str(), *right_partitions);
    let processor = &validated.processor;
    let right_places_keys =
        processor.right_repartition_topic().is_none() && !processor.right_read_whole();
    let placed: Vec<_> = [
        (left, processor.left_repartition_topic().is_none()),
        (right, right_places_keys),
    ]
    .into_iter()
    .filter(|(_, places_keys)| *places_keys)
    .map(|(topic, _)| topic)
    .collect();
    let started = job
        .status
        .as_ref()
        .is_some_and(|status| status.assignment_generation.is_some());
    match (kafka.changelog_partitions.filter(|_| started), &placed[..]) {
        (Some(placed_by), _) => Ok(co_partitioning::still_placed_by(placed_by, &placed).err()),
        (None, [left, right]) => co_partitioning::partition_counts(*left, *right)
            .map(|()| None)
            .map_err(Halt::NotCoPartitioned),
        (None, _) => Ok(None),
    }
}

/// With standbys, a scale-down keeps the pods it removes until they have handed every task off
/// and every copy is warm again ([`crate::failover::scale_down`]). Until the job's loop has
/// seen its pods (this process just started leading), the StatefulSet keeps the size it has.
async fn pods_kept_for_scale_down(
    ctx: &Context,
    validated: &ValidatedJob,
) -> Result<Option<i32>, ReconcileError> {
    let workers = &validated.workers;
    if workers.suspend || workers.standby_replicas == 0 {
        return Ok(None);
    }
    let kept =
        match ctx
            .failovers
            .scale_down(&validated.namespace, &validated.name, workers.replicas)
        {
            ScaleDown::Now => return Ok(None),
            ScaleDown::Keep(kept) => kept,
            ScaleDown::NotYetKnown => {
                let api: Api<StatefulSet> =
                    Api::namespaced(ctx.client.clone(), &validated.namespace);
                let name = names::stateful_set(&validated.name);
                let current = api
                    .get_opt(&name)
                    .await
                    .map_err(|source| ApiError {
                        action: "get",
                        kind: "StatefulSet".into(),
                        namespace: validated.namespace.clone(),
                        name,
                        source,
                    })?
                    .and_then(|set| set.spec?.replicas)
                    .unwrap_or(0);
                if current <= workers.replicas {
                    return Ok(None);
                }
                current
            }
        };
    tracing::info!(job = %validated.name, replicas = workers.replicas, kept, "keeping the pods a scale-down removes until they hold nothing");
    Ok(Some(kept))
}

/// Refuses the job when another job keeps its changelog ([`judge::claims`]).
async fn refuse_a_claimed_changelog(ctx: &Context, job: &StatefulStreamJob) -> Result<(), Halt> {
    let claims = read_facts::other_changelog_claims(ctx, job).await?;
    let own = read_facts::changelog_claim(job, ctx.settings.cluster.as_deref());
    judge::claims::changelog_claim(&own, &claims).map_err(Halt::Refused)
}

/// The pods the StatefulSet asks for and how many of them are ready.
fn pod_counts(stateful_set: &StatefulSet) -> (i32, i32) {
    let desired = stateful_set.spec.as_ref().and_then(|spec| spec.replicas);
    let ready = stateful_set
        .status
        .as_ref()
        .and_then(|status| status.ready_replicas);
    (desired.unwrap_or_default(), ready.unwrap_or_default())
}

/// Applies the desired objects and topics; the StatefulSet as the apiserver has it after.
async fn apply_desired(
    ctx: &Context,
    (kafka, validated, desired): (&KafkaAdmin, &ValidatedJob, &DesiredResources),
    claimant: &ChangelogClaimant<'_>,
    observation: &mut Observation,
) -> Result<StatefulSet, Halt> {
    let outcome = apply::apply(
        ctx,
        kafka,
        (&validated.namespace, &validated.name),
        desired,
        claimant,
    )
    .await;
    match outcome {
        Ok(ApplyOutcome::Applied {
            stateful_set,
            changelog_delete_retention_ms,
        }) => {
            if let Some(retention) = observation.retention.as_mut() {
                retention.changelog_delete_retention_ms = changelog_delete_retention_ms;
            }
            Ok(*stateful_set)
        }
        Ok(ApplyOutcome::ChangelogRefused(violation)) => {
            Err(Halt::Refused(Refusal::changelog(violation)))
        }
        Err(ApplyError::Foreign(foreign)) => Err(Halt::Foreign(foreign)),
        Err(ApplyError::Kafka(error)) => Err(Halt::Unreachable(
            error.into(),
            &[types::CHANGELOG_READY, types::READY],
        )),
        Err(error) => Err(Halt::Failed(error.into())),
    }
}

/// The job as the apiserver has it now; `None` when it is gone.
async fn current_job(
    ctx: &Context,
    job: &StatefulStreamJob,
) -> Result<Option<StatefulStreamJob>, ReconcileError> {
    let namespace = job.namespace().unwrap_or_default();
    let api: Api<StatefulStreamJob> = Api::namespaced(ctx.client.clone(), &namespace);
    api.get_opt(&job.name_any()).await.map_err(|source| {
        ReconcileError::from(ApiError {
            action: "read",
            kind: "StatefulStreamJob".into(),
            namespace: namespace.clone(),
            name: job.name_any(),
            source,
        })
    })
}

/// Deletion: `Retain` keeps the changelog and the checkpoints; `Delete` (once the workers have
/// stopped) removes the topics the operator created for the job and the checkpoint objects its
/// tasks wrote.
async fn on_delete(job: &StatefulStreamJob, ctx: &Context) -> Result<Action, ReconcileError> {
    ctx.failovers
        .stop(&job.namespace().unwrap_or_default(), &job.name_any());
    ctx.status_writes
        .forget(&job.namespace().unwrap_or_default(), &job.name_any());
    ctx.verified.forget(&job.uid().unwrap_or_default());
    ctx.manifests.forget(&job_key(job));
    if job.spec.deletion_policy == DeletionPolicy::Retain {
        tracing::info!(job = %job_key(job), "deleted; changelog and checkpoints retained");
        return Ok(Action::await_change());
    }
    let validated = match validate(job, ctx.settings.cluster.as_deref()) {
        Ok(validated) => validated,
        Err(invalid) => {
            // An invalid spec names no topic or prefix the operator can trust to delete.
            tracing::warn!(job = %job_key(job), %invalid, "deleted with an invalid spec; nothing cleaned up");
            publish(
                &ctx.recorder,
                job,
                true,
                reasons::INVALID_SPEC,
                format!("deletionPolicy Delete skipped: the spec is invalid ({invalid})"),
            )
            .await;
            return Ok(Action::await_change());
        }
    };
    // The record of created topics is in the status, which the watch cache may hold older.
    let current = current_job(ctx, job).await?;
    let job = current.as_ref().unwrap_or(job);
    cleanup::delete_external_state(ctx, job, &validated).await?;
    Ok(Action::await_change())
}

/// The wall clock in milliseconds since the epoch, which checkpoint ages are measured against.
fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or_default()
}
