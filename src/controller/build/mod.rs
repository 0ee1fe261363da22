//! Step 3 of the pipeline (validate → read facts → **build** → apply → observe → judge → update
//! status): pure builders from a [`ValidatedJob`] (and [`Facts`] read from outside beforehand) to
//! every object the job should have.

pub mod config_map;
mod failover_job;
pub mod pdb;
pub mod pod;
pub mod service;
pub mod stateful_set;
pub mod token_secret;
pub mod topics;
pub mod worker_config;

pub use failover_job::failover_job;
pub use topics::DesiredTopics;

use crate::controller::valid_job::ValidatedJob;
use crate::k8s::labels;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, Secret, Service};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

/// Facts read from outside the cluster before building (never fetched by a builder).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Facts {
    /// The job's task count, from the broker's metadata: the input topic's partition count (a
    /// re-keyed input's: the right topic's). The changelog gets exactly as many partitions.
    pub tasks: i32,
    /// Pods the StatefulSet keeps instead of `spec.replicas` while the pods a scale-down removes
    /// hand their tasks off (the failover loop says when they hold nothing).
    pub pods_kept: Option<i32>,
}

/// Everything a job should have, one field per resource.
#[derive(Debug, Clone, PartialEq)]
pub struct DesiredResources {
    /// `<job>-worker-config`: the rendered worker config under `worker.yaml`.
    pub config_map: ConfigMap,
    /// `<job>`: the worker pods.
    pub stateful_set: StatefulSet,
    /// `<job>`: headless, for stable pod DNS names.
    pub service: Service,
    /// `<job>`: at most one worker pod voluntarily down at a time.
    pub pod_disruption_budget: PodDisruptionBudget,
    /// `<job>-worker-token`, metadata only: `apply` creates it with a random token when it is
    /// missing and never rewrites it. The workers use no Kubernetes API, so there is no
    /// ServiceAccount, Role or RoleBinding of theirs.
    pub worker_token: Secret,
    /// The changelog, dead-letter and repartition topics, for the Kafka admin API.
    pub topics: DesiredTopics,
}

/// Builds every desired resource of `job`.
pub fn build(job: &ValidatedJob, facts: &Facts) -> DesiredResources {
    let config = worker_config::render(job);
    let config_map = config_map::build(job, &config);
    let config_hash = config_map::config_hash(&config_map);
    DesiredResources {
        stateful_set: stateful_set::build(job, &config_hash, facts.pods_kept),
        service: service::build(job),
        pod_disruption_budget: pdb::build(job),
        worker_token: token_secret::build(job),
        topics: topics::build(job, facts),
        config_map,
    }
}

/// Metadata of an owned object: name, namespace, the job's labels, and the controller owner
/// reference so garbage collection removes it with the job.
pub(crate) fn owned_metadata(job: &ValidatedJob, name: String) -> ObjectMeta {
    ObjectMeta {
        name: Some(name),
        namespace: Some(job.namespace.clone()),
        labels: Some(labels::common(&job.name)),
        owner_references: Some(vec![job.owner.clone()]),
        ..ObjectMeta::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::test_support;
    use kube::Resource;

    #[test]
    fn every_object_is_owned_by_the_job_as_controller() {
        let job = test_support::validated();
        let DesiredResources {
            config_map,
            stateful_set,
            service,
            pod_disruption_budget,
            worker_token,
            topics: _,
        } = build(&job, &test_support::facts());
        let metas = [
            config_map.meta(),
            stateful_set.meta(),
            service.meta(),
            pod_disruption_budget.meta(),
            worker_token.meta(),
        ];
        for meta in metas {
            let name = meta.name.as_deref().unwrap();
            assert_eq!(meta.namespace.as_deref(), Some("payments"), "{name}");
            let owners = meta.owner_references.as_ref().unwrap();
            assert_eq!(owners.len(), 1, "{name}");
            let owner = &owners[0];
            assert_eq!(owner.api_version, "streamkeeper.dev/v1alpha1");
            assert_eq!(owner.kind, "StatefulStreamJob");
            assert_eq!(owner.name, "card-count");
            assert_eq!(owner.uid, test_support::UID);
            assert_eq!(owner.controller, Some(true));
            assert_eq!(owner.block_owner_deletion, Some(true));
            let labels = meta.labels.as_ref().unwrap();
            assert_eq!(
                labels
                    .get("app.kubernetes.io/managed-by")
                    .map(String::as_str),
                Some("streamkeeper"),
                "{name}"
            );
            assert_eq!(
                labels.get("streamkeeper.dev/job").map(String::as_str),
                Some("card-count"),
                "{name}"
            );
        }
    }

    #[test]
    fn building_twice_gives_the_same_objects() {
        let job = test_support::validated();
        assert_eq!(
            build(&job, &test_support::facts()),
            build(&job, &test_support::facts())
        );
    }
}
