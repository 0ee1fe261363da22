//! Step 2 of the pipeline (validate → **read facts** → build → apply → observe → judge → update
//! status): what the job's Kafka cluster says about its input topic (partitions and retention), and
//! the admin client the later steps reuse. Whether the retention is acceptable is judged in
//! [`crate::controller::judge`], not here. Also the other facts the later steps read: the other
//! jobs (one changelog per job), the S3 access keys, a WebAssembly processor's module and the
//! job's worker pods.

use crate::adapters::checkpoints::{CheckpointReader, CountS3Request, S3AccessKeys};
use crate::adapters::kafka_admin::{KafkaAdmin, KafkaAdminError};
use crate::adapters::kafka_security::KafkaClientSecurity;
use crate::adapters::wasm_module::{self, ModuleFound};
use crate::api::{S3CredentialsSecret, StatefulStreamJob};
use crate::controller::valid_job::ModuleConfigMap;
use crate::controller::{Context, ReconcileError, ValidatedJob};
use crate::k8s::apply::ApiError;
use crate::k8s::{names, ownership, pod_cache};
use crate::retention::{RetentionViolation, TopicRetention};
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::ResourceExt;
use kube::api::{Api, ListParams};
use std::collections::BTreeSet;
use std::sync::Arc;
use streamkeeper_contract::module_digest::ModuleDigest;
use streamkeeper_contract::worker_config::ProcessorKind;

/// The facts a reconcile reads from Kafka before it builds anything.
pub struct KafkaFacts {
    /// The job's admin client, with its TLS and SASL settings.
    pub admin: KafkaAdmin,
    pub input_partitions: i32,
    /// The job's task count: the input's partition count, or the right topic's when the input
    /// is re-keyed (its repartition topic is created with that count).
    pub tasks: i32,
    /// A join's right topic and its partition count.
    pub right_partitions: Option<(String, i32)>,
    /// A join's changelog's partition count, once it exists: the count the job's keys are
    /// placed by since it started.
    pub changelog_partitions: Option<i32>,
    /// The input's `retention.ms` and `retention.bytes`, or the config that makes no sense.
    pub input_retention: Result<TopicRetention, RetentionViolation>,
}

/// Reads the input topic's partitions and retention (and a join's right topic's partitions). An error means the cluster (or the input
/// topic) could not be reached; the reconcile reports it and backs off.
pub async fn read_kafka(ctx: &Context, job: &ValidatedJob) -> Result<KafkaFacts, ReconcileError> {
    let admin = kafka_for_job(ctx, job).await?;
    let input = admin.topic(&job.kafka.input_topic).await?.ok_or_else(|| {
        KafkaAdminError::InputTopicMissing {
            bootstrap: admin.bootstrap().to_string(),
            topic: job.kafka.input_topic.clone(),
        }
    })?;
    let right_partitions =
        match job.processor.right_topic() {
            None => None,
            Some(right) => {
                let topic = admin.topic(right).await?.ok_or_else(|| {
                    KafkaAdminError::InputTopicMissing {
                        bootstrap: admin.bootstrap().to_string(),
                        topic: right.to_string(),
                    }
                })?;
                Some((right.to_string(), topic.partitions))
            }
        };
    let changelog_partitions = match right_partitions {
        None => None,
        Some(_) => admin
            .topic(&job.kafka.changelog_topic)
            .await?
            .map(|changelog| changelog.partitions),
    };
    let tasks = match (&right_partitions, job.processor.left_repartition_topic()) {
        (Some((_, right)), Some(_)) => *right,
        _ => input.partitions,
    };
    let config = |key: &str| input.config.get(key).map(String::as_str);
    let input_retention =
        TopicRetention::from_topic_config(config("retention.ms"), config("retention.bytes"));
    Ok(KafkaFacts {
        input_partitions: input.partitions,
        tasks,
        right_partitions,
        changelog_partitions,
        input_retention,
        admin,
    })
}

/// The job's Kafka admin client, with the TLS and SASL settings its Secrets hold.
pub(crate) async fn kafka_for_job(
    ctx: &Context,
    job: &ValidatedJob,
) -> Result<KafkaAdmin, ReconcileError> {
    let security = KafkaClientSecurity::read(
        (&ctx.client, &ctx.secrets),
        &job.namespace,
        job.kafka.tls.as_ref(),
        job.kafka.sasl.as_ref(),
    )
    .await?;
    Ok(ctx
        .kafka
        .for_cluster(&job.kafka.bootstrap_servers, security.as_ref())?)
}

/// The changelog claims of every other StatefulStreamJob the operator can see: read from the
/// controller's watch cache when it runs (no request, and no copy of each job), else from
/// [`other_jobs_listed`].
pub(crate) async fn other_changelog_claims(
    ctx: &Context,
    job: &StatefulStreamJob,
) -> Result<Vec<ChangelogClaim>, ReconcileError> {
    let cluster = ctx.settings.cluster.as_deref();
    let Some(cache) = ctx.jobs.get() else {
        let others = other_jobs_listed(ctx, job).await?;
        return Ok(others
            .iter()
            .map(|other| changelog_claim(other, cluster))
            .collect());
    };
    let uid = job.uid();
    Ok(cache
        .state()
        .iter()
        .filter(|other| other.uid() != uid)
        .map(|other| changelog_claim(other, cluster))
        .collect())
}

/// Every other StatefulStreamJob, listed now (in every namespace the operator may list; its own
/// namespace when it may not list them all): what a deletion decides from, where a cache a
/// moment behind could miss a job created a moment ago.
pub(crate) async fn other_jobs_listed(
    ctx: &Context,
    job: &StatefulStreamJob,
) -> Result<Vec<StatefulStreamJob>, ReconcileError> {
    let uid = job.uid();
    let jobs = list_jobs(ctx, &job.namespace().unwrap_or_default()).await?;
    Ok(jobs
        .into_iter()
        .filter(|other| other.uid() != uid)
        .collect())
}

async fn list_jobs(ctx: &Context, namespace: &str) -> Result<Vec<StatefulStreamJob>, ApiError> {
    let error = |namespace: &str| {
        let namespace = namespace.to_string();
        move |source| ApiError {
            action: "list",
            kind: "StatefulStreamJob".into(),
            namespace,
            name: "*".into(),
            source,
        }
    };
    let all: Api<StatefulStreamJob> = Api::all(ctx.client.clone());
    match all.list(&ListParams::default()).await {
        Ok(list) => Ok(list.items),
        Err(kube::Error::Api(response)) if response.code == 403 => {
            Api::<StatefulStreamJob>::namespaced(ctx.client.clone(), namespace)
                .list(&ListParams::default())
                .await
                .map(|list| list.items)
                .map_err(error(namespace))
        }
        Err(source) => Err(error("*")(source)),
    }
}

/// What one job claims: the changelog topic it writes, on which cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChangelogClaim {
    /// `namespace/name`.
    pub job: String,
    pub uid: String,
    /// The bootstrap servers, each trimmed and lower-cased.
    pub cluster: BTreeSet<String>,
    pub topic: String,
    /// Whether the job's status records that the operator created the topic for it.
    pub created_it: bool,
    /// Creation time, milliseconds since the epoch.
    pub created_at: i64,
}

impl ChangelogClaim {
    /// The cluster as a set of `host:port`, so the order and case of a list do not matter.
    pub fn cluster_of(bootstrap_servers: &str) -> BTreeSet<String> {
        bootstrap_servers
            .split(',')
            .map(|server| server.trim().to_ascii_lowercase())
            .filter(|server| !server.is_empty())
            .collect()
    }
}

/// The changelog `job` writes, as the one-changelog-per-job rule compares it
/// ([`crate::controller::judge::claims`]), under an operator whose cluster name is `cluster`.
pub fn changelog_claim(job: &StatefulStreamJob, cluster: Option<&str>) -> ChangelogClaim {
    let identity = names::identity_of(job, cluster);
    let (namespace, name) = (&identity.namespace, &identity.name);
    let topic = job
        .spec
        .kafka
        .changelog_topic
        .clone()
        .unwrap_or_else(|| identity.default_changelog_topic());
    ChangelogClaim {
        created_it: job
            .status
            .as_ref()
            .is_some_and(|status| status.created_topics.contains_key(&topic)),
        job: format!("{namespace}/{name}"),
        uid: job.uid().unwrap_or_default(),
        cluster: ChangelogClaim::cluster_of(&job.spec.kafka.bootstrap_servers),
        created_at: job
            .metadata
            .creation_timestamp
            .as_ref()
            .map_or(i64::MAX, |time| time.0.as_millisecond()),
        topic,
    }
}

/// The job's S3 checkpoint reader, with the credentials its spec names.
pub async fn checkpoint_reader(
    ctx: &Context,
    job: &ValidatedJob,
) -> Result<CheckpointReader, ReconcileError> {
    let keys = s3_access_keys(ctx, job).await?;
    let location = job.checkpoint.location();
    let client = ctx.s3_clients.client(&location, keys).await;
    Ok(CheckpointReader::new(
        location,
        client,
        job.identity(),
        s3_counter(ctx),
    ))
}

/// Counts the S3 requests the adapters send in the operator's metrics.
fn s3_counter(ctx: &Context) -> CountS3Request {
    let metrics = Arc::clone(&ctx.metrics);
    Arc::new(move |operation| metrics.s3_request(operation))
}

/// The access keys from the job's credentials Secret, or `None` for ambient credentials.
pub async fn s3_access_keys(
    ctx: &Context,
    job: &ValidatedJob,
) -> Result<Option<S3AccessKeys>, ReconcileError> {
    match &job.checkpoint.credentials {
        Some(secret) => Ok(Some(read_access_keys(ctx, &job.namespace, secret).await?)),
        None => Ok(None),
    }
}

/// The access keys `secret_ref` names, read from its Secret in `namespace`.
async fn read_access_keys(
    ctx: &Context,
    namespace: &str,
    secret_ref: &S3CredentialsSecret,
) -> Result<S3AccessKeys, ReconcileError> {
    let failure = |reason: String| ReconcileError::S3Credentials {
        namespace: namespace.to_string(),
        name: secret_ref.name.clone(),
        reason,
    };
    let secret = ctx
        .secrets
        .get_opt(&ctx.client, namespace, &secret_ref.name)
        .await
        .map_err(|e| failure(format!("could not be read: {e}")))?
        .ok_or_else(|| failure("does not exist".into()))?;
    let data = secret.data.clone().unwrap_or_default();
    let value = |key: &str| {
        data.get(key)
            .map(|bytes| String::from_utf8_lossy(&bytes.0).trim().to_string())
            .ok_or_else(|| failure(format!("has no key {key}")))
    };
    Ok(S3AccessKeys {
        access_key_id: value(&secret_ref.access_key_id_key)?,
        secret_access_key: value(&secret_ref.secret_access_key_key)?,
    })
}

/// A WebAssembly processor's module as it is in S3 (read with the module's own credentials, or
/// the job's checkpoint endpoint and credentials, as the workers read it) or in its ConfigMap:
/// its location and what is there; `None` for any other processor.
pub async fn wasm_module(
    ctx: &Context,
    job: &ValidatedJob,
) -> Result<Option<(String, ModuleFound)>, ReconcileError> {
    let ProcessorKind::Wasm { module, .. } = &job.processor.kind else {
        return Ok(None);
    };
    if let Some(source) = &job.module_config_map {
        return Ok(Some(module_in_config_map(ctx, job, source).await?));
    }
    let location = job.checkpoint.location();
    let keys = match &job.module_credentials {
        Some(secret) => Some(read_access_keys(ctx, &job.namespace, secret).await?),
        None => s3_access_keys(ctx, job).await?,
    };
    let client = ctx.s3_clients.client(&location, keys).await;
    let bucket = module.bucket_or(&location.bucket);
    let count = s3_counter(ctx);
    let found = wasm_module::look_up(&client, (bucket, &module.key), &ctx.modules, &*count).await?;
    Ok(Some((module.location(Some(&location.bucket)), found)))
}

/// A module in a ConfigMap key (`binaryData`, or `data` for a text-safe one): its location for
/// messages and what is there.
async fn module_in_config_map(
    ctx: &Context,
    job: &ValidatedJob,
    source: &ModuleConfigMap,
) -> Result<(String, ModuleFound), ApiError> {
    let location = format!(
        "configmap {}/{} key {}",
        job.namespace, source.name, source.key
    );
    let maps: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), &job.namespace);
    let map = maps.get_opt(&source.name).await.map_err(|error| ApiError {
        action: "get",
        kind: "ConfigMap".into(),
        namespace: job.namespace.clone(),
        name: source.name.clone(),
        source: error,
    })?;
    let bytes = map.and_then(|map| {
        let binary = map
            .binary_data
            .and_then(|mut data| data.remove(&source.key));
        binary
            .map(|bytes| bytes.0)
            .or_else(|| map.data?.remove(&source.key).map(String::into_bytes))
    });
    let found = match bytes {
        Some(bytes) => ModuleFound::Found {
            sha256: ModuleDigest::of(&bytes),
        },
        None => ModuleFound::Missing,
    };
    Ok((location, found))
}

/// The job's worker pods: the pods its StatefulSet owns, found by the job's labels.
pub(crate) async fn job_pods(ctx: &Context, job: &ValidatedJob) -> Result<Vec<Pod>, ApiError> {
    let pods = pod_cache::job_pods(ctx.pods.get(), &ctx.client, &job.namespace, &job.name).await?;
    let stateful_set = names::stateful_set(&job.name);
    Ok(pods
        .iter()
        .filter(|pod| ownership::is_worker_pod(&pod.metadata, &stateful_set))
        .map(|pod| Pod::clone(pod))
        .collect())
}
