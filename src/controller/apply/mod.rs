//! Step 4 of the pipeline (validate → read facts → build → **apply** → observe → judge →
//! update status): make the cluster and Kafka match [`DesiredResources`].
//!
//! Kubernetes objects go through server-side apply with one field manager, forced, so a no-op
//! reconcile sends the same intent and the apiserver stores nothing. Topics go first: an existing
//! changelog that breaks a rule, or whose owner record names another job, stops the apply
//! before any pod could start writing to it. Each
//! topic the operator creates is recorded in the job's status at once (Kafka topics carry no
//! labels), so that `deletionPolicy: Delete` deletes what this job created and nothing else.

pub mod cleanup;
pub mod operations;
pub mod owner_marker;

use crate::adapters::kafka_admin::DesiredTopic;
use crate::adapters::kafka_admin::{Creation, KafkaAdmin, KafkaAdminError};
use crate::api::status::CreatedTopic;
use crate::controller::build::DesiredTopics;
pub use crate::controller::error::ApplyError;
use crate::controller::{Context, DesiredResources};
pub use crate::k8s::apply::{ApiError, server_side_apply};
use crate::k8s::owned_cache::{CachedKind, OwnedCaches};
use crate::k8s::ownership::{self, Verified};
use crate::k8s::status;
use crate::k8s::unchanged;
use crate::k8s::worker_token::{self, WorkerTokenError};
use crate::retention::{self, RetentionViolation};
use crate::telemetry::metrics::Metrics;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::Api;
pub use owner_marker::ChangelogClaimant;
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::collections::BTreeMap;
use std::fmt::Debug;
use std::time::Duration;

/// What `apply` did.
#[derive(Debug)]
pub enum ApplyOutcome {
    /// Every object and topic is as desired; the StatefulSet as the apiserver returned it, and
    /// the changelog's actual `delete.retention.ms` (a pre-existing changelog keeps its own).
    Applied {
        stateful_set: Box<StatefulSet>,
        changelog_delete_retention_ms: Option<i64>,
    },
    /// The existing changelog breaks a rule: nothing was applied.
    ChangelogRefused(RetentionViolation),
}

/// Applies `desired` for the job `job` in `namespace`. Objects that exist and are not the job's
/// are refused, never taken over ([`ownership`]), and so is a changelog whose owner record
/// names another job (`changelog_claimant`: the job as it claims its changelog); `verified`
/// remembers the ones that are the job's.
pub async fn apply(
    ctx: &Context,
    kafka: &KafkaAdmin,
    (namespace, job): (&str, &str),
    desired: &DesiredResources,
    changelog_claimant: &ChangelogClaimant<'_>,
) -> Result<ApplyOutcome, ApplyError> {
    let (client, verified) = (&ctx.client, &ctx.verified);
    let DesiredResources {
        config_map,
        stateful_set,
        service,
        pod_disruption_budget,
        worker_token,
        topics,
    } = desired;
    let mut created = BTreeMap::new();
    let ensured = ensure_topics(kafka, topics, &mut created).await;
    // Recorded even when a later topic failed: what was created must not be forgotten.
    record_created_topics(ctx, namespace, job, &created).await?;
    let changelog_delete_retention_ms = match ensured? {
        Ok(delete_retention_ms) => delete_retention_ms,
        Err(violation) => return Ok(ApplyOutcome::ChangelogRefused(violation)),
    };
    // One changelog per job, across clusters: claimed before any worker can write to it.
    owner_marker::claim_changelog(ctx, kafka, &topics.changelog.name, changelog_claimant).await??;
    // Before the StatefulSet: its pods mount the Secret and cannot start without it. The token is
    // read back here only to prove it usable; the suspend step reads it when it needs it.
    worker_token::ensure((client, &ctx.secrets), namespace, worker_token)
        .await
        .map_err(|error| match error {
            WorkerTokenError::Foreign(foreign) => ApplyError::Foreign(foreign),
            other => other.into(),
        })?;
    let owned = Owned {
        client,
        namespace,
        verified,
        caches: ctx.owned.get(),
        metrics: &ctx.metrics,
    };
    owned.apply(config_map).await?;
    owned.apply(service).await?;
    owned.apply(pod_disruption_budget).await?;
    let stateful_set = owned.apply(stateful_set).await?;
    Ok(ApplyOutcome::Applied {
        stateful_set: Box::new(stateful_set),
        changelog_delete_retention_ms,
    })
}

/// Creates missing topics (each one this call created goes into `created`); checks an existing
/// changelog's partitions and cleanup policy. A refused changelog creates nothing else. Returns the changelog's `delete.retention.ms`, or
/// the violation that refuses it.
async fn ensure_topics(
    kafka: &KafkaAdmin,
    topics: &DesiredTopics,
    created: &mut BTreeMap<String, CreatedTopic>,
) -> Result<Result<Option<i64>, RetentionViolation>, KafkaAdminError> {
    let DesiredTopics {
        changelog,
        dead_letter,
        repartition,
    } = topics;
    let delete_retention = match kafka.topic(&changelog.name).await? {
        Some(existing) => {
            if let Err(violation) = check_changelog(&existing, changelog.partitions) {
                return Ok(Err(violation));
            }
            // An existing changelog keeps its configs: altering them is the owner's call.
            existing.config.get("delete.retention.ms").cloned()
        }
        None => match kafka.create(changelog).await? {
            Creation::Created => {
                created.insert(
                    changelog.name.clone(),
                    created_topic("changelog", changelog),
                );
                changelog.config.get("delete.retention.ms").cloned()
            }
            // Created by someone else between our read and our create (or our read saw stale
            // metadata): it must pass the same checks as any existing changelog.
            Creation::AlreadyExisted => {
                let existing = created_elsewhere(kafka, &changelog.name).await?;
                if let Err(violation) = check_changelog(&existing, changelog.partitions) {
                    return Ok(Err(violation));
                }
                existing.config.get("delete.retention.ms").cloned()
            }
        },
    };
    // A dead-letter topic that exists already (shared by several jobs, say) is used as it is.
    if !kafka.exists(&dead_letter.name).await?
        && kafka.create(dead_letter).await? == Creation::Created
    {
        created.insert(
            dead_letter.name.clone(),
            created_topic("deadLetter", dead_letter),
        );
    }
    // A repartition topic that exists already is the job's from an earlier run (its name is
    // the job's); a wrong partition count there stops the join's tasks (PartitionsChanged).
    for topic in repartition {
        if !kafka.exists(&topic.name).await? && kafka.create(topic).await? == Creation::Created {
            created.insert(topic.name.clone(), created_topic("repartition", topic));
        }
    }
    Ok(Ok(delete_retention.and_then(|ms| ms.parse().ok())))
}

fn created_topic(role: &str, topic: &DesiredTopic) -> CreatedTopic {
    CreatedTopic {
        role: role.to_string(),
        partitions: topic.partitions,
        created_at: Time(Timestamp::now()),
    }
}

/// Adds `created` to the job's `status.createdTopics`. A merge patch of the map adds keys and
/// removes none, so neither a concurrent status write nor an older status overwrites them.
async fn record_created_topics(
    ctx: &Context,
    namespace: &str,
    job: &str,
    created: &BTreeMap<String, CreatedTopic>,
) -> Result<(), ApiError> {
    if created.is_empty() {
        return Ok(());
    }
    let fields = serde_json::json!({ "createdTopics": created });
    let action = "record the created topics in the status of";
    let writer = (&ctx.client, &ctx.status_writes);
    status::merge_status(writer, (namespace, job), fields, action).await?;
    tracing::info!(%namespace, %job, topics = ?created.keys().collect::<Vec<_>>(), "created topics recorded");
    Ok(())
}

/// The facts of a topic the broker says exists, waiting out metadata that has not caught up.
async fn created_elsewhere(
    kafka: &KafkaAdmin,
    name: &str,
) -> Result<crate::adapters::kafka_admin::TopicFacts, KafkaAdminError> {
    for _ in 0..20 {
        if let Some(existing) = kafka.topic(name).await? {
            return Ok(existing);
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    Err(KafkaAdminError::NotVisible {
        topic: name.to_string(),
    })
}

fn check_changelog(
    existing: &crate::adapters::kafka_admin::TopicFacts,
    tasks: i32,
) -> Result<(), RetentionViolation> {
    retention::check_changelog_partitions(existing.partitions, tasks)?;
    let config = |key: &str| existing.config.get(key).map(String::as_str);
    let time = retention::TopicRetention::from_topic_config(config("retention.ms"), None)?.time;
    retention::check_changelog_cleanup_policy(config("cleanup.policy").unwrap_or("delete"), time)
}

/// Applies objects that are, or will be, the job's own.
struct Owned<'a> {
    client: &'a Client,
    namespace: &'a str,
    verified: &'a Verified,
    /// The controller's watch caches, when it runs: an object they hold as desired is not
    /// applied again.
    caches: Option<&'a OwnedCaches>,
    metrics: &'a Metrics,
}

impl Owned<'_> {
    /// [`server_side_apply`] of `object` (with its [`unchanged::APPLIED_HASH`]), after checking
    /// that an object of its name, if there is one, is the job's (named by `object`'s owner
    /// reference); read once per object and operator start ([`Verified`]). Nothing is sent
    /// when the watch cache holds the object as desired: the cached object is returned.
    async fn apply<K>(&self, object: &K) -> Result<K, ApplyError>
    where
        K: CachedKind + Serialize + DeserializeOwned + Debug,
    {
        let kind = K::kind(&()).to_string();
        let name = object.meta().name.clone().unwrap_or_default();
        let desired = unchanged::with_applied_hash(object);
        let cached = self
            .caches
            .and_then(|caches| caches.get::<K>(self.namespace, &name));
        if let Some(current) = &cached
            && unchanged::already_applied(&desired, current.as_ref())
        {
            self.metrics.object_apply(&kind, true);
            return Ok(K::clone(current));
        }
        let owner = object.meta().owner_references.iter().flatten().next();
        if let Some(owner) = owner
            && !self.verified.contains(owner, &kind, &name)
        {
            let existing = match cached {
                Some(current) => Some(K::clone(&current)),
                None => self.read::<K>(&kind, &name).await?,
            };
            if let Some(existing) = existing {
                ownership::check(&kind, self.namespace, existing.meta(), owner)?;
            }
        }
        let applied = server_side_apply(self.client, self.namespace, &desired).await?;
        self.metrics.object_apply(&kind, false);
        if let Some(owner) = owner {
            self.verified.insert(owner, &kind, &name);
        }
        Ok(applied)
    }

    async fn read<K>(&self, kind: &str, name: &str) -> Result<Option<K>, ApiError>
    where
        K: CachedKind + DeserializeOwned + Debug,
    {
        let api: Api<K> = Api::namespaced(self.client.clone(), self.namespace);
        api.get_opt(name).await.map_err(|source| ApiError {
            action: "read",
            kind: kind.to_string(),
            namespace: self.namespace.to_string(),
            name: name.to_string(),
            source,
        })
    }
}

/// How long to wait before looking again at a refused changelog or retention: topic configs are
/// not watched, so a fix on the broker side is noticed at this pace.
pub const REFUSED_RECHECK: Duration = Duration::from_secs(60);
