//! The kube-runtime `Controller`: watches StatefulStreamJobs (all namespaces or one) and the
//! objects they own, and runs [`reconcile`] with [`error_policy`] until `shutdown` resolves.

use crate::api::StatefulStreamJob;
use crate::controller::labels;
use crate::controller::reconcile::{Context, error_policy, reconcile};
use futures::StreamExt;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, Service, ServiceAccount};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::Api;
use kube::runtime::controller::Controller;
use kube::runtime::watcher;
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

/// Runs the controller until `shutdown` resolves; reconciles in flight finish first.
pub async fn run(
    ctx: Arc<Context>,
    namespace: Option<String>,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
) {
    let client = ctx.client.clone();
    let namespace = namespace.as_deref();
    // Only objects the operator made: the watch caches stay small in a busy cluster.
    let owned =
        watcher::Config::default().labels(&format!("{}={}", labels::MANAGED_BY, labels::MANAGER));
    Controller::new(
        scoped::<StatefulStreamJob>(&client, namespace),
        watcher::Config::default(),
    )
    .owns(scoped::<StatefulSet>(&client, namespace), owned.clone())
    .owns(scoped::<ConfigMap>(&client, namespace), owned.clone())
    .owns(scoped::<Service>(&client, namespace), owned.clone())
    .owns(
        scoped::<PodDisruptionBudget>(&client, namespace),
        owned.clone(),
    )
    .owns(scoped::<ServiceAccount>(&client, namespace), owned.clone())
    .owns(scoped::<Role>(&client, namespace), owned.clone())
    .owns(scoped::<RoleBinding>(&client, namespace), owned)
    .graceful_shutdown_on(shutdown)
    .run(reconcile, error_policy, ctx)
    .for_each(|result| async move {
        match result {
            Ok((job, _action)) => tracing::debug!(job = %job, "reconciled"),
            Err(error) => tracing::debug!(%error, "reconcile did not complete"),
        }
    })
    .await;
}
