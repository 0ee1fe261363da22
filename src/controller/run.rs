//! The kube-runtime `Controller`: watches StatefulStreamJobs (all namespaces or one) and the
//! objects they own, and runs [`reconcile`] with [`error_policy`] until `shutdown` resolves.
//!
//! A job triggers a reconcile only when something the reconcile acts on changes (see
//! [`reconcile_relevant`]): the operator's own status writes (task lag, restore progress) must
//! not trigger the next reconcile, or a busy job would be reconciled in a loop. Status freshness
//! comes from the requeue intervals, the owned objects' changes, and the failover loops' requests
//! once a move has finished.

use crate::api::StatefulStreamJob;
use crate::controller::Context;
use crate::controller::reconcile::{error_policy, reconcile};
use crate::k8s::labels;
use futures::StreamExt;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Service};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::Api;
use kube::runtime::controller::{self, Controller};
use kube::runtime::{WatchStreamExt, reflector, watcher};
use kube::{Client, Resource};
use serde::de::DeserializeOwned;
use std::fmt::Debug;
use std::future::Future;
use std::sync::Arc;

fn scoped<K>(client: &Client, namespace: Option<&str>) -> Api<K>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + DeserializeOwned
        + Debug,
{
    match namespace {
        Some(namespace) => Api::namespaced(client.clone(), namespace),
        None => Api::all(client.clone()),
    }
}

/// Runs the controller until `shutdown` resolves; reconciles in flight finish first. At most
/// `concurrency` jobs reconcile at once (0: no limit); one job never reconciles twice at once.
pub async fn run(
    ctx: Arc<Context>,
    namespace: Option<String>,
    concurrency: u16,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
) {
    let client = ctx.client.clone();
    let namespace = namespace.as_deref();
    // Only objects the operator made: the watch caches stay small in a busy cluster.
    let owned =
        watcher::Config::default().labels(&format!("{}={}", labels::MANAGED_BY, labels::MANAGER));
    let (reader, writer) = reflector::store();
    // The reconciles read the other jobs (one changelog per job) from this cache.
    if ctx.jobs.set(reader.clone()).is_err() {
        tracing::warn!("the job cache was set before: a second controller in one process");
    }
    let jobs = watcher(
        scoped::<StatefulStreamJob>(&client, namespace),
        watcher::Config::default(),
    )
    .default_backoff()
    .reflect(writer)
    .applied_objects()
    .predicate_filter(reconcile_relevant, Default::default());
    let worker_pods = watch_worker_pods(&ctx, &client, namespace);
    let mut controller = Controller::for_stream(jobs, reader)
        .with_config(controller::Config::default().concurrency(concurrency));
    // A finished move changes the status but nothing watched (see failover::status_requests).
    if let Some(refreshes) = ctx.failovers.refresh.take_requests() {
        controller = controller.reconcile_on(refreshes);
    }
    let controller = controller
        .owns(scoped::<StatefulSet>(&client, namespace), owned.clone())
        .owns(scoped::<ConfigMap>(&client, namespace), owned.clone())
        .owns(scoped::<Service>(&client, namespace), owned.clone())
        // Not the worker token Secret: watching it would need `list`/`watch` on every Secret
        // of the namespace; a deleted one is recreated at the next reconcile instead.
        .owns(scoped::<PodDisruptionBudget>(&client, namespace), owned)
        .graceful_shutdown_on(shutdown)
        .run(reconcile, error_policy, ctx)
        .for_each(|result| async move {
            match result {
                Ok((job, _action)) => tracing::debug!(job = %job, "reconciled"),
                Err(error) => tracing::debug!(%error, "reconcile did not complete"),
            }
        });
    // The pod watch lives as long as the controller (it has no end of its own).
    tokio::select! {
        () = controller => {}
        () = worker_pods => {}
    }
}

/// The watch of every worker pod (the operator's own, in `namespace` or all), kept in a cache
/// that the failover loops read ([`Context::pods`]): one watch for the whole fleet instead of a
/// list per job every second. The returned future feeds the cache.
fn watch_worker_pods(
    ctx: &Context,
    client: &Client,
    namespace: Option<&str>,
) -> impl Future<Output = ()> + use<> {
    let (reader, writer) = reflector::store();
    if ctx.pods.set(reader).is_err() {
        tracing::warn!("the pod cache was set before: a second controller in one process");
    }
    let workers = format!(
        "{}={},{}={}",
        labels::MANAGED_BY,
        labels::MANAGER,
        labels::NAME,
        labels::WORKER_APP
    );
    watcher(
        scoped::<Pod>(client, namespace),
        watcher::Config::default().labels(&workers),
    )
    .default_backoff()
    .reflect(writer)
    .for_each(|event| async move {
        if let Err(error) = event {
            tracing::warn!(%error, "the worker pod watch failed; retrying");
        }
    })
}

/// A hash of what a reconcile acts on: the spec (through `generation`), deletion, finalizers,
/// annotations and labels. The status and `resourceVersion` are left out.
pub fn reconcile_relevant(job: &StatefulStreamJob) -> Option<u64> {
    use std::hash::{Hash, Hasher};
    let meta = &job.metadata;
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    meta.generation.hash(&mut hasher);
    meta.deletion_timestamp
        .as_ref()
        .map(|time| time.0.as_millisecond())
        .hash(&mut hasher);
    meta.finalizers.hash(&mut hasher);
    meta.annotations.hash(&mut hasher);
    meta.labels.hash(&mut hasher);
    Some(hasher.finish())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{JobPhase, StatefulStreamJobStatus};

    #[test]
    fn status_writes_do_not_trigger_a_reconcile_but_spec_and_metadata_changes_do() {
        let mut job = crate::controller::test_support::job();
        job.metadata.generation = Some(3);
        job.metadata.resource_version = Some("100".into());
        let before = reconcile_relevant(&job);
        job.status = Some(StatefulStreamJobStatus {
            phase: Some(JobPhase::Running),
            ready_tasks: Some("4/4".into()),
            ..StatefulStreamJobStatus::default()
        });
        job.metadata.resource_version = Some("101".into());
        assert_eq!(reconcile_relevant(&job), before, "a status write");
        for change in [
            |job: &mut StatefulStreamJob| job.metadata.generation = Some(4),
            |job: &mut StatefulStreamJob| job.metadata.finalizers = Some(vec!["f".into()]),
            |job: &mut StatefulStreamJob| {
                job.metadata.annotations = Some([("a".to_string(), "b".to_string())].into())
            },
        ] {
            let mut changed = job.clone();
            change(&mut changed);
            assert_ne!(reconcile_relevant(&changed), before);
        }
    }
}
