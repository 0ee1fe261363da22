//! `deletionPolicy: Delete`: stop the workers, then delete what the operator created for the job.
//!
//! Two rules. The workers go first: scaled to zero, and nothing is deleted while any of their
//! pods still exists, because a producer that is still running can create a deleted topic again
//! (`auto.create.topics.enable`) and write into it. And only what this job owns is deleted: the
//! topics in its `status.createdTopics` (recorded when the operator created them; Kafka topics
//! carry no labels), minus any that another job names, plus every checkpoint object the job's
//! tasks wrote under its own prefix (not another job's whose folder lies inside it). A topic the spec names but the operator did not create (a shared dead-letter topic,
//! another job's changelog) is kept and named in the Event.

use crate::api::StatefulStreamJob;
use crate::controller::ValidatedJob;
use crate::controller::apply::ApiError;
use crate::controller::apply::owner_marker;
use crate::controller::{Context, ReconcileError};
use crate::k8s::events::publish;
use crate::k8s::{labels, names};
use crate::vocabulary::reasons;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use kube::runtime::controller::Action;
use std::collections::BTreeSet;
use std::time::Duration;

/// How often a job being deleted is looked at while its worker pods stop.
pub const STOPPING_RECHECK: Duration = Duration::from_secs(2);

fn api_error(
    action: &'static str,
    kind: &str,
    namespace: &str,
    name: &str,
) -> impl FnOnce(kube::Error) -> ApiError {
    let (kind, namespace, name) = (kind.to_string(), namespace.to_string(), name.to_string());
    move |source| ApiError {
        action,
        kind,
        namespace,
        name,
        source,
    }
}

/// Scales the job's StatefulSet to zero (and deletes worker pods no StatefulSet owns any more).
/// `Some(requeue)` while any worker pod still exists; `None` once all are gone.
pub async fn stop_workers(
    ctx: &Context,
    job: &StatefulStreamJob,
) -> Result<Option<Action>, ReconcileError> {
    let namespace = job
        .namespace()
        .ok_or_else(|| ReconcileError::NoNamespace(job.name_any()))?;
    let name = job.name_any();
    let sets: Api<StatefulSet> = Api::namespaced(ctx.client.clone(), &namespace);
    let set_name = names::stateful_set(&name);
    let set = sets.get_opt(&set_name).await.map_err(api_error(
        "read",
        "StatefulSet",
        &namespace,
        &set_name,
    ))?;
    let scaled_up = set
        .as_ref()
        .and_then(|set| set.spec.as_ref())
        .and_then(|spec| spec.replicas)
        .is_none_or(|replicas| replicas > 0);
    let scaling = set.is_some() && scaled_up;
    if scaling {
        let patch = serde_json::json!({ "spec": { "replicas": 0 } });
        sets.patch(&set_name, &PatchParams::default(), &Patch::Merge(patch))
            .await
            .map_err(api_error(
                "scale to zero",
                "StatefulSet",
                &namespace,
                &set_name,
            ))?;
    }
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &namespace);
    let selector = labels::selector_string(&name);
    let remaining = pods
        .list(&ListParams::default().labels(&selector))
        .await
        .map_err(api_error("list", "Pod", &namespace, &selector))?
        .items
        .into_iter()
        .filter(|pod| crate::k8s::ownership::is_worker_pod(&pod.metadata, &set_name))
        .collect::<Vec<_>>();
    if remaining.is_empty() {
        return Ok(None);
    }
    if set.is_none() {
        // Orphaned (the StatefulSet was deleted with `--cascade=orphan`): nothing else stops them.
        for pod in remaining
            .iter()
            .filter(|pod| pod.metadata.deletion_timestamp.is_none())
        {
            match pods.delete(&pod.name_any(), &DeleteParams::default()).await {
                Ok(_) => {}
                Err(kube::Error::Api(status)) if status.code == 404 => {}
                Err(source) => {
                    return Err(
                        api_error("delete", "Pod", &namespace, &pod.name_any())(source).into(),
                    );
                }
            }
        }
    }
    let waiting: Vec<String> = remaining.iter().map(ResourceExt::name_any).collect();
    tracing::info!(job = %name, pods = ?waiting, "deletionPolicy Delete: waiting for the worker pods to stop before deleting topics");
    if scaling {
        let note = format!(
            "deletionPolicy Delete: scaled to zero; nothing is deleted until worker pods {} are gone",
            waiting.join(", ")
        );
        publish(&ctx.recorder, job, false, reasons::STOPPING_WORKERS, note).await;
    }
    Ok(Some(Action::requeue(STOPPING_RECHECK)))
}

/// Which of the topics this job created to delete, and which to keep because another job names
/// them. `(delete, kept)`, each sorted.
pub fn topics_to_delete(
    created: impl IntoIterator<Item = String>,
    named_by_others: &BTreeSet<String>,
) -> (Vec<String>, Vec<String>) {
    created
        .into_iter()
        .collect::<BTreeSet<_>>()
        .into_iter()
        .partition(|topic| !named_by_others.contains(topic))
}

/// Every topic another StatefulStreamJob names or has recorded as created.
async fn topics_of_other_jobs(
    ctx: &Context,
    job: &StatefulStreamJob,
) -> Result<BTreeSet<String>, ReconcileError> {
    let jobs = crate::controller::read_facts::other_jobs_listed(ctx, job).await?;
    let mut topics = BTreeSet::new();
    for other in &jobs {
        let identity = names::identity_of(other, ctx.settings.cluster.as_deref());
        let kafka = &other.spec.kafka;
        topics.insert(kafka.input_topic.clone());
        topics.insert(kafka.output_topic.clone());
        topics.insert(
            kafka
                .changelog_topic
                .clone()
                .unwrap_or_else(|| identity.default_changelog_topic()),
        );
        topics.insert(
            kafka
                .dead_letter_topic
                .clone()
                .unwrap_or_else(|| identity.default_dead_letter_topic()),
        );
        if let Some(status) = &other.status {
            topics.extend(status.created_topics.keys().cloned());
        }
    }
    Ok(topics)
}

/// Deletes the topics `job_object` created (none another job names) and the checkpoint objects
/// its tasks wrote under its S3 prefix, if the prefix's owner marker names this job. The workers must be stopped already ([`stop_workers`]).
pub async fn delete_external_state(
    ctx: &Context,
    job_object: &StatefulStreamJob,
    job: &ValidatedJob,
) -> Result<(), ReconcileError> {
    let created: Vec<String> = job_object
        .status
        .as_ref()
        .map(|status| status.created_topics.keys().cloned().collect())
        .unwrap_or_default();
    let others = topics_of_other_jobs(ctx, job_object).await?;
    let (delete, shared) = topics_to_delete(created, &others);
    let not_created: Vec<&str> = [&job.kafka.changelog_topic, &job.kafka.dead_letter_topic]
        .into_iter()
        .filter(|topic| !delete.contains(topic) && !shared.contains(topic))
        .map(String::as_str)
        .collect();
    if !delete.is_empty() {
        let kafka = crate::controller::read_facts::kafka_for_job(ctx, job).await?;
        let topics: Vec<&str> = delete.iter().map(String::as_str).collect();
        kafka.delete(&topics).await?;
    }
    let reader = crate::controller::read_facts::checkpoint_reader(ctx, job).await?;
    let checkpoints = owner_marker::delete_under_marker(ctx, job, &reader).await?;
    let mut note = match &checkpoints {
        Ok(objects) => format!(
            "deletionPolicy Delete: deleted topics [{}] and {objects} S3 objects under {}",
            delete.join(", "),
            reader.job_prefix()
        ),
        Err(why) => format!(
            "deletionPolicy Delete: deleted topics [{}]; kept every S3 object under {}: {why}",
            delete.join(", "),
            reader.job_prefix()
        ),
    };
    if !not_created.is_empty() {
        note.push_str(&format!(
            "; kept [{}]: not created by this job",
            not_created.join(", ")
        ));
    }
    if !shared.is_empty() {
        note.push_str(&format!(
            "; kept [{}]: another job names them",
            shared.join(", ")
        ));
    }
    tracing::info!(job = %job.name, "{note}");
    let kept_any = !not_created.is_empty() || !shared.is_empty();
    let reason = if checkpoints.is_err() {
        reasons::CHECKPOINTS_KEPT
    } else if kept_any {
        reasons::TOPICS_KEPT
    } else {
        reasons::CLEANED_UP
    };
    publish(
        &ctx.recorder,
        job_object,
        checkpoints.is_err(),
        reason,
        note,
    )
    .await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_created_topics_no_other_job_names_are_deleted() {
        let others = BTreeSet::from(["shared.dlq".to_string()]);
        let (delete, kept) = topics_to_delete(
            ["ns.job.changelog".to_string(), "shared.dlq".to_string()],
            &others,
        );
        assert_eq!(delete, ["ns.job.changelog"]);
        assert_eq!(kept, ["shared.dlq"]);
        let (delete, kept) = topics_to_delete(Vec::new(), &others);
        assert!(
            delete.is_empty() && kept.is_empty(),
            "nothing recorded, nothing deleted"
        );
    }
}
