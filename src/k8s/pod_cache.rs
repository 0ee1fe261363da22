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
use tokio::sync::watch;

/// The watch's cache of the worker pods, and whether its first list is in.
///
/// Why not kube's `Store::wait_until_ready`: its readiness is a oneshot receiver, which keeps
/// the waker of only the last task that polled it. When several tasks wait at once (every job's
/// reconcile and failover loop, right after the operator starts leading), the first list wakes
/// one of them and the others wait forever (seen: an operator restarted over 50 and 100 jobs
/// finished no reconcile and ran one failover loop). A watch channel wakes every waiting task.
#[derive(Clone)]
pub struct PodCache {
    store: Store<Pod>,
    listed: watch::Receiver<bool>,
}

impl PodCache {
    /// The cache over `store`, and the sender the watch marks it listed with (at its first
    /// `InitDone`).
    pub fn new(store: Store<Pod>) -> (Self, watch::Sender<bool>) {
        let (sender, listed) = watch::channel(false);
        (Self { store, listed }, sender)
    }

    /// Waits until the watch's first list is in; `false` when the watch stopped before.
    async fn listed(&self) -> bool {
        self.listed.clone().wait_for(|listed| *listed).await.is_ok()
    }
}

/// The pods of job `job` in `namespace`, found by the job's selector labels: in the watch's
/// `cache`, or listed from the apiserver where no controller runs (a reconcile run on its own).
pub async fn job_pods(
    cache: Option<&PodCache>,
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
async fn cached(cache: &PodCache, namespace: &str, job: &str) -> Vec<Arc<Pod>> {
    if !cache.listed().await {
        tracing::warn!("the worker pod watch has stopped; its last pods are used");
    }
    cache
        .store
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

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn every_task_waiting_for_the_first_list_goes_on_once_it_is_in() {
        use kube::runtime::watcher::Event;
        use std::sync::atomic::{AtomicUsize, Ordering};
        let (reader, mut writer) = kube::runtime::reflector::store::<Pod>();
        let (cache, listed) = PodCache::new(reader);
        let client =
            kube::Client::try_from(kube::Config::new("http://127.0.0.1:1".parse().unwrap()))
                .unwrap();
        let waiting = Arc::new(AtomicUsize::new(0));
        let tasks: Vec<_> = (0..8)
            .map(|_| {
                let (cache, client, waiting) =
                    (cache.clone(), client.clone(), Arc::clone(&waiting));
                tokio::spawn(async move {
                    let mut pods =
                        std::pin::pin!(job_pods(Some(&cache), &client, "shop", "card-count"));
                    // Polled once before the list is in: this task waits, as a reconcile does.
                    assert!(futures::poll!(pods.as_mut()).is_pending());
                    waiting.fetch_add(1, Ordering::SeqCst);
                    pods.await.unwrap().len()
                })
            })
            .collect();
        while waiting.load(Ordering::SeqCst) < tasks.len() {
            tokio::task::yield_now().await;
        }
        writer.apply_watcher_event(&Event::Init);
        writer.apply_watcher_event(&Event::InitApply(pod("shop", "card-count")));
        writer.apply_watcher_event(&Event::InitDone);
        listed.send_replace(true);
        for task in tasks {
            let found = tokio::time::timeout(std::time::Duration::from_secs(5), task)
                .await
                .expect("a task waiting for the first list was never woken")
                .unwrap();
            assert_eq!(found, 1);
        }
    }
}
