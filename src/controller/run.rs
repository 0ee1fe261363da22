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
use crate::controller::relevant::reconcile_relevant;
use crate::controller::resume;
use crate::k8s::labels;
use crate::k8s::owned_cache::OwnedCaches;
use crate::k8s::pod_cache::PodCache;
use futures::StreamExt;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Service};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::Api;
use kube::runtime::controller::{self, Controller};
use kube::runtime::reflector::Store;
use kube::runtime::{WatchStreamExt, reflector, watcher};
use kube::{Client, Resource, ResourceExt};
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
    let (reader, writer) = reflector::store();
    // The reconciles read the other jobs (one changelog per job) from this cache.
    if ctx.jobs.set(reader.clone()).is_err() {
        tracing::warn!("the job cache was set before: a second controller in one process");
    }
    // The first complete list of the jobs starts the loops the last leader ran (see
    // [`crate::controller::resume`]), before their reconciles come round.
    let (listed, mut first_list) = tokio::sync::watch::channel(false);
    let jobs = watcher(
        scoped::<StatefulStreamJob>(&client, namespace),
        watcher::Config::default(),
    )
    .default_backoff()
    .reflect(writer)
    .inspect(move |event| {
        if matches!(event, Ok(watcher::Event::InitDone)) {
            listed.send_replace(true);
        }
    })
    .applied_objects()
    .predicate_filter(reconcile_relevant, Default::default());
    let worker_pods = watch_worker_pods(&ctx, &client, namespace);
    let resume = {
        let (ctx, jobs) = (Arc::clone(&ctx), reader.clone());
        async move {
            if first_list.wait_for(|listed| *listed).await.is_ok() {
                let resumed = resume::resume_loops(&ctx, &jobs.state());
                tracing::info!(resumed, "failover loops resumed from the jobs' status");
            }
        }
    };
    let mut controller = Controller::for_stream(jobs, reader)
        .with_config(controller::Config::default().concurrency(concurrency));
    // A finished move changes the status but nothing watched (see failover::status_requests).
    if let Some(refreshes) = ctx.failovers.refresh.take_requests() {
        controller = controller.reconcile_on(refreshes);
    }
    // Only objects the operator made: the watch caches stay small in a busy cluster.
    let owned =
        watcher::Config::default().labels(&format!("{}={}", labels::MANAGED_BY, labels::MANAGER));
    // The caches the apply step compares with (an object already as desired is not applied
    // again), fed by watches of their own that nothing holds back: the controller's trigger
    // streams are read only as fast as reconciles finish.
    let (stateful_sets, stateful_set_cache) = cache_owned::<StatefulSet>(&client, namespace);
    let (config_maps, config_map_cache) = cache_owned::<ConfigMap>(&client, namespace);
    let (services, service_cache) = cache_owned::<Service>(&client, namespace);
    let (budgets, budget_cache) = cache_owned::<PodDisruptionBudget>(&client, namespace);
    let caches = OwnedCaches {
        stateful_sets,
        config_maps,
        services,
        budgets,
    };
    if ctx.owned.set(caches).is_err() {
        tracing::warn!(
            "the owned object caches were set before: a second controller in one process"
        );
    }
    let owned_caches = futures::future::join4(
        stateful_set_cache,
        config_map_cache,
        service_cache,
        budget_cache,
    );
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
    let resume_then_wait = async move {
        resume.await;
        std::future::pending::<()>().await;
    };
    tokio::select! {
        () = controller => {}
        () = worker_pods => {}
        _ = owned_caches => {}
        () = resume_then_wait => {}
    }
}

/// A cache of the objects of kind `K` the operator made (only those: the caches stay small in a
/// busy cluster), and the future that feeds it, to be polled on its own. Managed fields are
/// dropped: nothing reads them, and they are a large share of each object.
fn cache_owned<K>(
    client: &Client,
    namespace: Option<&str>,
) -> (Store<K>, impl Future<Output = ()> + Send + 'static)
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + DeserializeOwned
        + Debug
        + Send
        + Sync
        + 'static,
{
    let owned =
        watcher::Config::default().labels(&format!("{}={}", labels::MANAGED_BY, labels::MANAGER));
    let (reader, writer) = reflector::store();
    let feed = watcher(scoped::<K>(client, namespace), owned)
        .default_backoff()
        .modify(|object| object.managed_fields_mut().clear())
        .reflect(writer)
        .for_each(|event| async move {
            if let Err(error) = event {
                tracing::warn!(%error, "an owned object watch failed; retrying");
            }
        });
    (reader, feed)
}

/// The watch of every worker pod (the operator's own, in `namespace` or all), kept in a cache
/// that the failover loops read ([`Context::pods`]): one watch for the whole fleet instead of a
/// list per job every second. The returned future feeds the cache.
fn watch_worker_pods(
    ctx: &Context,
    client: &Client,
    namespace: Option<&str>,
) -> impl Future<Output = ()> + use<> {
    let (cache, writer) = PodCache::new();
    if ctx.pods.set(cache).is_err() {
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
    // Nothing reads them, and they are a large share of each pod.
    .modify(|pod| pod.managed_fields_mut().clear())
    .for_each(move |event| {
        match event {
            Ok(event) => writer.event(event),
            Err(error) => tracing::warn!(%error, "the worker pod watch failed; retrying"),
        }
        std::future::ready(())
    })
}
