//! The operator's one watch of the worker pods, read by every job's reconcile and failover loop
//! instead of a list per job (a fleet's lists were most of the apiserver's load). The controller
//! runs the watch ([`crate::controller::run`]); here is how a job's pods are read.

use super::apply::ApiError;
use super::labels;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};
use kube::runtime::reflector::Store;
use kube::{Client, ResourceExt};
use std::sync::Arc;

/// The pods of job `job` in `namespace`, found by the job's selector labels: in the watch's
/// `cache`, or listed from the apiserver where no controller runs (a reconcile run on its own).
pub async fn job_pods(
    cache: Option<&Store<Pod>>,
    client: &Client,
    namespace: &str,
    job: &str,
) -> Result<Vec<Arc<Pod>>, ApiError> {
    match cache {
        Some(cache) => Ok(cached(cache, namespace, job).await),
        None => listed(client, namespace, job).await,
    }
}

/// The job's pods in the cache, once the watch's first list is in: before that, an empty cache
/// would read as a job without pods.
async fn cached(cache: &Store<Pod>, namespace: &str, job: &str) -> Vec<Arc<Pod>> {
    if cache.wait_until_ready().await.is_err() {
        tracing::warn!("the worker pod watch has stopped; its last pods are used");
    }
    cache
        .state()
        .into_iter()
        .filter(|pod| selects(pod, namespace, job))
        .collect()
}

async fn listed(client: &Client, namespace: &str, job: &str) -> Result<Vec<Arc<Pod>>, ApiError> {
    let selector = labels::selector_string(job);
    let list = Api::<Pod>::namespaced(client.clone(), namespace)
        .list(&ListParams::default().labels(&selector))
        .await
        .map_err(|source| ApiError {
            action: "list",
            kind: "Pod".into(),
            namespace: namespace.to_string(),
            name: selector.clone(),
            source,
        })?;
    Ok(list.items.into_iter().map(Arc::new).collect())
}

/// Whether `pod` is one of job `job`'s in `namespace`, as the list by its selector finds them.
pub fn selects(pod: &Pod, namespace: &str, job: &str) -> bool {
    let pod_labels = pod.labels();
    pod.namespace().as_deref() == Some(namespace)
        && labels::selector(job)
            .iter()
            .all(|(key, value)| pod_labels.get(key) == Some(value))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(namespace: &str, job: &str) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": { "namespace": namespace, "name": format!("{job}-0"),
                          "labels": labels::common(job) },
        }))
        .unwrap()
    }

    #[test]
    fn a_job_selects_its_own_pods_in_its_own_namespace_only() {
        assert!(selects(&pod("shop", "card-count"), "shop", "card-count"));
        assert!(!selects(&pod("shop", "card-countx"), "shop", "card-count"));
        assert!(!selects(&pod("other", "card-count"), "shop", "card-count"));
        let mut unlabelled = pod("shop", "card-count");
        unlabelled.metadata.labels = None;
        assert!(!selects(&unlabelled, "shop", "card-count"));
    }
}
