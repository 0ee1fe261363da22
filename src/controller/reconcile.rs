//! One reconcile of a `StatefulStreamJob`: **validate → read facts → build → apply → observe →
//! update_status**, behind a finalizer that runs the clean-up `deletionPolicy` asks for.
//!
//! A broken rule (schema-invisible spec error, a changelog that is not compacted, an interval
//! that does not fit the input retention) is a condition and a wait, never an error loop; Kafka,
//! S3 or apiserver trouble is a condition plus an error, which the controller's error policy
//! turns into a backoff requeue.

use crate::api::{DeletionPolicy, JobPhase, RetentionStatus, StatefulStreamJob};
use crate::checkpoint_reader::CheckpointReadError;
use crate::controller::apply::{self, ApiError, ApplyError, ApplyOutcome, REFUSED_RECHECK};
use crate::controller::cadence::{RESYNC, ROLLING_RECHECK, TASKS_RECHECK, spread};
use crate::controller::cleanup;
use crate::controller::conditions::{self, ConditionStatus, reasons, types};
use crate::controller::observe::{self, CheckpointObservation};
use crate::controller::operations::{self, RollState};
use crate::controller::status::{self, Observation, PhaseInputs, condition};
use crate::controller::task_status::{self, TaskView};
use crate::controller::update_status::update_status;
use crate::controller::worker_token::WorkerTokenError;
use crate::controller::{Facts, ValidatedJob, build, validate};
use crate::kafka_admin::{KafkaAdmin, KafkaAdminError, KafkaAdmins};
use crate::kafka_security::{KafkaClientSecurity, KafkaSecretError};
use crate::leadership::{Leadership, NotLeading};
use crate::metrics::Metrics;
use crate::retention::{self, RetentionViolation, TopicRetention};
use kube::api::Api;
use kube::runtime::controller::Action;
use kube::runtime::events::Recorder;
use kube::runtime::finalizer::{self, Event as FinalizerEvent};
use kube::{Client, ResourceExt};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use streamkeeper_contract::format_go_duration;

/// Put on every job so deleting it waits for the clean-up its `deletionPolicy` asks for.
pub const FINALIZER: &str = "streamkeeper.dev/cleanup";

/// Settings of the reconcile that are not part of any job.
#[derive(Debug, Clone)]
pub struct Settings {
    /// How long a worker may take to answer `POST /v1/checkpoints` before suspend goes on.
    pub final_checkpoint_timeout: Duration,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            final_checkpoint_timeout: Duration::from_secs(60),
        }
    }
}

/// What every reconcile shares: clients, the Event recorder, metrics, per-job failure counts.
pub struct Context {
    pub client: Client,
    pub recorder: Recorder,
    pub kafka: KafkaAdmins,
    pub metrics: Arc<Metrics>,
    pub settings: Settings,
    /// Checked before every write that does not go through `client` (Kafka, S3, workers); the
    /// binary's `client` checks it itself on each request.
    pub leadership: Leadership,
    failures: Mutex<HashMap<String, u32>>,
}

impl Context {
    pub fn new(
        client: Client,
        recorder: Recorder,
        metrics: Arc<Metrics>,
        settings: Settings,
    ) -> Self {
        Self {
            client,
            recorder,
            kafka: KafkaAdmins::default(),
            metrics,
            settings,
            leadership: Leadership::unconditional(),
            failures: Mutex::new(HashMap::new()),
        }
    }

    /// Writes to Kafka, S3 and the workers only while `leadership` allows them (the default
    /// allows them always, for code that runs without an election).
    pub fn with_leadership(mut self, leadership: Leadership) -> Self {
        self.kafka = KafkaAdmins::new(leadership.clone());
        self.leadership = leadership;
        self
    }

    fn failures(&self) -> std::sync::MutexGuard<'_, HashMap<String, u32>> {
        self.failures
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Counts a failure of `key` and returns the requeue delay: 2 s doubling up to 5 min.
    pub fn backoff(&self, key: &str) -> Duration {
        let mut failures = self.failures();
        let count = failures.entry(key.to_string()).or_insert(0);
        *count = count.saturating_add(1);
        let exponent = (*count - 1).min(8);
        Duration::from_secs(2u64 << exponent).min(Duration::from_secs(300))
    }

    fn succeeded(&self, key: &str) {
        self.failures().remove(key);
    }
}

/// A reconcile that failed; the controller requeues it with backoff.
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    #[error(transparent)]
    Api(Box<ApiError>),
    #[error(transparent)]
    Kafka(#[from] KafkaAdminError),
    #[error(transparent)]
    Checkpoints(#[from] CheckpointReadError),
    #[error(transparent)]
    KafkaCredentials(#[from] KafkaSecretError),
    #[error("S3 credentials Secret {namespace}/{name}: {reason}")]
    S3Credentials {
        namespace: String,
        name: String,
        reason: String,
    },
    #[error("StatefulStreamJob {0} has no namespace")]
    NoNamespace(String),
    #[error(transparent)]
    Finalizer(Box<finalizer::Error<ReconcileError>>),
    #[error(transparent)]
    NotLeading(#[from] NotLeading),
    #[error(transparent)]
    WorkerToken(#[from] WorkerTokenError),
}

impl ReconcileError {
    /// Stable label for metrics and Events (the condition reasons' words).
    pub fn category(&self) -> &'static str {
        match self {
            ReconcileError::Api(_) | ReconcileError::NoNamespace(_) => reasons::API_ERROR,
            ReconcileError::Kafka(error) => error.category(),
            ReconcileError::Checkpoints(error) => error.category(),
            ReconcileError::S3Credentials { .. } => reasons::S3_UNAVAILABLE,
            ReconcileError::KafkaCredentials(_) => reasons::KAFKA_CREDENTIALS,
            ReconcileError::NotLeading(_) => reasons::NOT_LEADING,
            ReconcileError::WorkerToken(error) => error.category(),
            ReconcileError::Finalizer(error) => match error.as_ref() {
                finalizer::Error::ApplyFailed(inner) | finalizer::Error::CleanupFailed(inner) => {
                    inner.category()
                }
                _ => reasons::API_ERROR,
            },
        }
    }
}

impl From<ApiError> for ReconcileError {
    fn from(error: ApiError) -> Self {
        ReconcileError::Api(Box::new(error))
    }
}

impl From<ApplyError> for ReconcileError {
    fn from(error: ApplyError) -> Self {
        match error {
            ApplyError::Api(error) => error.into(),
            ApplyError::Kafka(error) => ReconcileError::Kafka(error),
            ApplyError::WorkerToken(WorkerTokenError::Api(error)) => ReconcileError::Api(error),
            ApplyError::WorkerToken(error) => ReconcileError::WorkerToken(error),
        }
    }
}

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
    let result = reconcile_with_finalizer(job, &ctx).await;
    match &result {
        Ok(_) => {
            ctx.succeeded(&key);
            timer.done(None);
        }
        Err(error) => {
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

/// The job refused by a rule: the message names the field, nothing more is applied.
async fn refuse(
    ctx: &Context,
    job: &StatefulStreamJob,
    mut observation: Observation,
    field: &str,
    violation: &RetentionViolation,
    condition_type: &'static str,
) -> Result<Action, ReconcileError> {
    let reason = violation.category();
    observation.phase = Some(JobPhase::Failed);
    observation.conditions.extend([
        condition(
            condition_type,
            ConditionStatus::False,
            reason,
            violation.to_string(),
        ),
        condition(
            types::INVALID,
            ConditionStatus::True,
            reason,
            format!("{field}: {violation}"),
        ),
        condition(
            types::READY,
            ConditionStatus::False,
            reason,
            "refused; nothing is started until the rule holds",
        ),
    ]);
    update_status(ctx, job, observation).await?;
    Ok(Action::requeue(REFUSED_RECHECK))
}

/// Kafka or S3 could not be reached: say so in status, then fail so the error policy backs off.
async fn unreachable(
    ctx: &Context,
    job: &StatefulStreamJob,
    mut observation: Observation,
    error: ReconcileError,
    affected: &[&'static str],
) -> Result<Action, ReconcileError> {
    let reason = error.category();
    for type_ in affected {
        observation.conditions.push(condition(
            type_,
            ConditionStatus::Unknown,
            reason,
            error.to_string(),
        ));
    }
    update_status(ctx, job, observation).await?;
    Err(error)
}

async fn apply_job(job: &StatefulStreamJob, ctx: &Context) -> Result<Action, ReconcileError> {
    // The watch cache can still hold the status from before the previous reconcile's own write.
    // What the status keeps (the final checkpoint's outcome, merged conditions) must be merged
    // into the current status, so read it.
    let Some(current) = current_job(ctx, job).await? else {
        return Ok(Action::await_change());
    };
    let job = &current;
    let mut observation = Observation {
        generation: job.metadata.generation,
        ..Observation::default()
    };

    let validated = match validate(job) {
        Ok(validated) => validated,
        Err(invalid) => {
            observation.phase = Some(JobPhase::Failed);
            observation.conditions.extend([
                condition(
                    types::INVALID,
                    ConditionStatus::True,
                    invalid.category(),
                    invalid.to_string(),
                ),
                condition(
                    types::READY,
                    ConditionStatus::False,
                    invalid.category(),
                    "the spec is invalid; nothing is applied until it changes",
                ),
            ]);
            update_status(ctx, job, observation).await?;
            return Ok(Action::await_change());
        }
    };
    observation.conditions.push(condition(
        types::INVALID,
        ConditionStatus::False,
        reasons::SPEC_VALID,
        "",
    ));

    // Facts from Kafka: the input's partitions and retention.
    let kafka = match kafka_for_job(ctx, &validated).await {
        Ok(kafka) => kafka,
        Err(error) => {
            let affected = [types::CHANGELOG_READY, types::RETENTION_SAFE, types::READY];
            return unreachable(ctx, job, observation, error, &affected).await;
        }
    };
    let input = match kafka.topic(&validated.kafka.input_topic).await {
        Ok(Some(input)) => input,
        Ok(None) => {
            let error = KafkaAdminError::InputTopicMissing {
                bootstrap: kafka.bootstrap().to_string(),
                topic: validated.kafka.input_topic.clone(),
            };
            let affected = [types::CHANGELOG_READY, types::RETENTION_SAFE, types::READY];
            return unreachable(ctx, job, observation, error.into(), &affected).await;
        }
        Err(error) => {
            let affected = [types::CHANGELOG_READY, types::RETENTION_SAFE, types::READY];
            return unreachable(ctx, job, observation, error.into(), &affected).await;
        }
    };
    let config = |key: &str| input.config.get(key).map(String::as_str);
    let input_retention = match TopicRetention::from_topic_config(
        config("retention.ms"),
        config("retention.bytes"),
    ) {
        Ok(retention) => retention,
        Err(violation) => {
            let field = "spec.kafka.inputTopic";
            return refuse(
                ctx,
                job,
                observation,
                field,
                &violation,
                types::RETENTION_SAFE,
            )
            .await;
        }
    };
    let effective = retention::effective_retention(&input_retention, None);
    let max_safe_age = retention::max_safe_checkpoint_age(effective);
    let facts = Facts {
        input_partitions: input.partitions,
    };
    let desired = build(&validated, &facts);
    observation.retention = Some(RetentionStatus {
        input_retention_ms: input_retention.time_ms(),
        input_retention_bytes: input_retention
            .bytes_per_partition
            .and_then(|b| i64::try_from(b).ok()),
        max_safe_checkpoint_age_seconds: max_safe_age
            .and_then(|age| i64::try_from(age.as_secs()).ok()),
        // Known once the changelog has been read or created (see the apply below).
        changelog_delete_retention_ms: None,
    });
    if let Err(violation) = retention::check_interval(validated.checkpoint.interval, effective) {
        let field = "spec.checkpoint.interval";
        return refuse(
            ctx,
            job,
            observation,
            field,
            &violation,
            types::RETENTION_SAFE,
        )
        .await;
    }
    observation
        .conditions
        .push(retention_safe(&validated, &input_retention, effective));

    // Suspend: the final checkpoint comes before the scale to zero.
    let suspend_note = if validated.workers.suspend {
        operations::final_checkpoint_before_suspend(ctx, &validated).await?
    } else {
        None
    };

    let outcome = apply::apply(
        &ctx.client,
        &kafka,
        &validated.namespace,
        &validated.name,
        &desired,
    )
    .await;
    let stateful_set = match outcome {
        Ok(ApplyOutcome::Applied {
            stateful_set,
            changelog_delete_retention_ms,
        }) => {
            if let Some(retention) = observation.retention.as_mut() {
                retention.changelog_delete_retention_ms = changelog_delete_retention_ms;
            }
            stateful_set
        }
        Ok(ApplyOutcome::ChangelogRefused(violation)) => {
            let field = "spec.kafka.changelogTopic";
            return refuse(
                ctx,
                job,
                observation,
                field,
                &violation,
                types::CHANGELOG_READY,
            )
            .await;
        }
        Err(ApplyError::Kafka(error)) => {
            let affected = [types::CHANGELOG_READY, types::READY];
            return unreachable(ctx, job, observation, error.into(), &affected).await;
        }
        Err(error) => return Err(error.into()),
    };
    observation.conditions.push(condition(
        types::CHANGELOG_READY,
        ConditionStatus::True,
        reasons::TOPIC_READY,
        format!(
            "{}: {} partitions, cleanup.policy=compact",
            desired.topics.changelog.name, desired.topics.changelog.partitions
        ),
    ));
    observation
        .conditions
        .push(match (&suspend_note, validated.workers.suspend) {
            (Some(note), true) => condition(
                types::SUSPENDED,
                ConditionStatus::True,
                note.reason,
                note.message.clone(),
            ),
            // Already at zero: what the suspend found out (final checkpoint or not) stays.
            (None, true) => match already_suspended(job) {
                Some((reason, message)) => {
                    condition(types::SUSPENDED, ConditionStatus::True, reason, message)
                }
                None => condition(
                    types::SUSPENDED,
                    ConditionStatus::True,
                    reasons::SUSPENDED,
                    "scaled to zero; state is kept in the changelog, the checkpoints and the volumes",
                ),
            },
            (_, false) => condition(
                types::SUSPENDED,
                ConditionStatus::False,
                reasons::RUNNING,
                "",
            ),
        });

    // Pods whose template is outdated (image, config, restartNonce, restore) are replaced.
    let roll = operations::replace_outdated_pods(ctx, &validated, &stateful_set).await?;

    // Checkpoint ages and recovery gaps, from S3 and the input's log-start offsets.
    let checkpoints =
        match observe::checkpoints(ctx, &kafka, &validated, input.partitions, max_safe_age).await {
            Ok(checkpoints) => checkpoints,
            Err(error) => {
                let affected = [types::CHECKPOINT_STALE, types::RECOVERY_GAP];
                return unreachable(ctx, job, observation, error, &affected).await;
            }
        };
    let CheckpointObservation {
        tasks,
        checkpoint_stale,
        recovery_gap,
    } = checkpoints;
    // What the workers say about their tasks (input lost to retention is a recovery gap too).
    let reports = observe::worker_reports(ctx, &validated).await?;
    let recovery_gap = observe::with_input_gaps(recovery_gap, &reports);
    let at_risk = checkpoint_stale.status == ConditionStatus::True
        || recovery_gap.status == ConditionStatus::True;
    observation
        .conditions
        .extend([checkpoint_stale, recovery_gap]);

    let restore_id = validated.restore.as_ref().map(|r| r.id.as_str());
    let view = task_status::merge(tasks, &reports, restore_id);
    let restoring = restore_progress(job, &validated, &roll, &view, &mut observation);
    observation.ready_tasks = Some(view.ready_tasks());

    let sts_status = stateful_set.status.clone().unwrap_or_default();
    let desired_pods = stateful_set
        .spec
        .as_ref()
        .and_then(|spec| spec.replicas)
        .unwrap_or_default();
    let ready_pods = sts_status.ready_replicas.unwrap_or_default();
    let task_count = view.tasks.len();
    let phase = status::phase(PhaseInputs {
        refused: false,
        suspended: validated.workers.suspend,
        restoring: restoring || view.restoring > 0,
        desired_pods,
        ready_pods,
        at_risk,
    });
    observation.phase = Some(phase);
    let figures = format!(
        "{}/{task_count} tasks running; {ready_pods}/{desired_pods} worker pods ready",
        view.running
    );
    observation.conditions.push(match phase {
        JobPhase::Running => condition(
            types::READY,
            ConditionStatus::True,
            reasons::ALL_TASKS_RUNNING,
            figures,
        ),
        JobPhase::Suspended => condition(
            types::READY,
            ConditionStatus::False,
            reasons::SUSPENDED,
            "suspended",
        ),
        _ => condition(
            types::READY,
            ConditionStatus::False,
            reasons::TASKS_NOT_RUNNING,
            figures,
        ),
    });
    let tasks_settling = !validated.workers.suspend && view.running < task_count;
    observation.tasks = Some(view.tasks);
    update_status(ctx, job, observation).await?;

    let interval = if roll.in_progress() {
        ROLLING_RECHECK
    } else if tasks_settling {
        TASKS_RECHECK
    } else {
        RESYNC
    };
    Ok(Action::requeue(spread(interval, &job_key(job))))
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

/// The job's Kafka admin client, with the TLS and SASL settings its Secrets hold.
pub(crate) async fn kafka_for_job(
    ctx: &Context,
    job: &ValidatedJob,
) -> Result<KafkaAdmin, ReconcileError> {
    let security = KafkaClientSecurity::read(
        &ctx.client,
        &job.namespace,
        job.kafka.tls.as_ref(),
        job.kafka.sasl.as_ref(),
    )
    .await?;
    Ok(ctx
        .kafka
        .for_cluster(&job.kafka.bootstrap_servers, security.as_ref())?)
}

/// The final-checkpoint outcome a `Suspended` condition that is already `True` records.
fn already_suspended(job: &StatefulStreamJob) -> Option<(&'static str, String)> {
    let existing = conditions::find(&job.status.as_ref()?.conditions, types::SUSPENDED)?;
    let reason = [
        reasons::FINAL_CHECKPOINT,
        reasons::FINAL_CHECKPOINT_INCOMPLETE,
    ]
    .into_iter()
    .find(|reason| *reason == existing.reason)?;
    (existing.status == "True").then(|| (reason, existing.message.clone()))
}

/// `RetentionSafe` when the interval fits: the numbers, or why there is no time bound.
fn retention_safe(
    job: &ValidatedJob,
    input: &TopicRetention,
    effective: Option<Duration>,
) -> crate::controller::conditions::ConditionUpdate {
    let interval = format_go_duration(job.checkpoint.interval);
    match (effective, input.bytes_per_partition) {
        (Some(retention), _) => condition(
            types::RETENTION_SAFE,
            ConditionStatus::True,
            reasons::WITHIN_RETENTION,
            format!(
                "checkpoint.interval {interval} <= input retention {} / {} = {}; max safe checkpoint age {} (retention / {})",
                format_go_duration(retention),
                retention::INTERVAL_RETENTION_DIVISOR,
                format_go_duration(retention / retention::INTERVAL_RETENTION_DIVISOR),
                format_go_duration(retention / retention::SAFE_AGE_RETENTION_DIVISOR),
                retention::SAFE_AGE_RETENTION_DIVISOR,
            ),
        ),
        (None, Some(bytes)) => condition(
            types::RETENTION_SAFE,
            ConditionStatus::Unknown,
            reasons::RETENTION_UNKNOWN,
            format!(
                "the input keeps {bytes} bytes per partition and no time limit; how long that lasts depends on the input rate, so RecoveryGap watches the offsets instead"
            ),
        ),
        (None, None) => condition(
            types::RETENTION_SAFE,
            ConditionStatus::True,
            reasons::RETENTION_UNLIMITED,
            "the input topic's retention is unlimited",
        ),
    }
}

/// The `Restoring` condition; whether a requested restore is still under way: pods are being
/// replaced to hand it over, or some task has not applied it yet (as the workers report).
fn restore_progress(
    job: &StatefulStreamJob,
    validated: &ValidatedJob,
    roll: &RollState,
    view: &TaskView,
    observation: &mut Observation,
) -> bool {
    let handled = job
        .status
        .as_ref()
        .and_then(|status| status.last_restore_id.clone());
    let Some(request) = &validated.restore else {
        observation.conditions.push(condition(
            types::RESTORING,
            ConditionStatus::False,
            reasons::NO_RESTORE,
            "",
        ));
        return false;
    };
    let done = || {
        condition(
            types::RESTORING,
            ConditionStatus::False,
            reasons::RESTORE_DONE,
            format!("every task has applied restore {}", request.id),
        )
    };
    if handled.as_deref() == Some(request.id.as_str()) {
        observation.conditions.push(done());
        return false;
    }
    if roll.in_progress() {
        observation.conditions.push(condition(
            types::RESTORING,
            ConditionStatus::True,
            reasons::RESTORE_ROLLING_OUT,
            format!(
                "restore {}: replacing {} worker pods that do not have the request yet",
                request.id, roll.outdated
            ),
        ));
        return true;
    }
    let tasks = view.tasks.len();
    if validated.workers.suspend || tasks == 0 || view.applied_restore < tasks {
        observation.conditions.push(condition(
            types::RESTORING,
            ConditionStatus::True,
            reasons::RESTORE_APPLYING,
            format!(
                "restore {}: {}/{tasks} tasks have applied it",
                request.id, view.applied_restore
            ),
        ));
        return true;
    }
    observation.handled_restore_id = Some(request.id.clone());
    observation.conditions.push(done());
    false
}

/// Deletion: `Retain` keeps the changelog and the checkpoints; `Delete` (once the workers have
/// stopped) removes the topics the operator created for the job and every S3 object under the
/// job's prefix.
async fn on_delete(job: &StatefulStreamJob, ctx: &Context) -> Result<Action, ReconcileError> {
    if job.spec.deletion_policy == DeletionPolicy::Retain {
        tracing::info!(job = %job_key(job), "deleted; changelog and checkpoints retained");
        return Ok(Action::await_change());
    }
    let validated = match validate(job) {
        Ok(validated) => validated,
        Err(invalid) => {
            // An invalid spec names no topic or prefix the operator can trust to delete.
            tracing::warn!(job = %job_key(job), %invalid, "deleted with an invalid spec; nothing cleaned up");
            operations::publish(
                ctx,
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
