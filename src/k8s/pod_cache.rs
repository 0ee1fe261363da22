//! The operator's one watch of the worker pods, read by every job's reconcile and failover loop
//! instead of a list per job (a fleet's lists were most of the apiserver's load). The controller
//! runs the watch ([`crate::controller::run`]); here is how a job's pods are read.

use super::apply::ApiError;
use super::labels;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, PoisonError};
use tokio::sync::watch;

/// The watch's worker pods by job, and whether its first list is in.
///
/// By job, because every job's loop reads its own pods every second: filtering all the fleet's
/// pods each time costs the operator the number of jobs times the number of pods.
///
/// Why not kube's `Store::wait_until_ready`: its readiness is a oneshot receiver, which keeps
/// the waker of only the last task that polled it. When several tasks wait at once (every job's
/// reconcile and failover loop, right after the operator starts leading), the first list wakes
/// one of them and the others wait forever (seen: an operator restarted over 50 and 100 jobs
/// finished no reconcile and ran one failover loop). A watch channel wakes every waiting task.
#[derive(Clone)]
pub struct PodCache {
    index: Arc<Mutex<PodIndex>>,
    listed: watch::Receiver<bool>,
}

/// The watch's end of a [`PodCache`]: it hands over each event.
pub struct PodCacheWriter {
    index: Arc<Mutex<PodIndex>>,
    listed: watch::Sender<bool>,
}

impl PodCache {
    /// An empty cache, and the writer the watch feeds it with.
    pub fn new() -> (Self, PodCacheWriter) {
        let index = Arc::new(Mutex::new(PodIndex::default()));
        let (sender, listed) = watch::channel(false);
        let writer = PodCacheWriter {
            index: Arc::clone(&index),
            listed: sender,
        };
        (Self { index, listed }, writer)
    }

    /// Waits until the watch's first list is in; `false` when the watch stopped before.
    async fn listed(&self) -> bool {
        self.listed.clone().wait_for(|listed| *listed).await.is_ok()
    }

    fn pods_of(&self, namespace: &str, job: &str) -> Vec<Arc<Pod>> {
        let index = self.index.lock().unwrap_or_else(PoisonError::into_inner);
        let key = (namespace.to_string(), job.to_string());
        index
            .by_job
            .get(&key)
            .map(|pods| pods.values().cloned().collect())
            .unwrap_or_default()
    }
}

impl PodCacheWriter {
    /// Takes one event of the pod watch; its first `InitDone` marks the cache listed.
    pub fn event(&self, event: watcher::Event<Pod>) {
        let done = matches!(event, watcher::Event::InitDone);
        self.index
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .apply(event);
        if done {
            self.listed.send_replace(true);
        }
    }
}

/// (namespace, job)
type JobKey = (String, String);

/// The pods by job, as the watch's events leave them.
#[derive(Default)]
struct PodIndex {
    by_job: HashMap<JobKey, BTreeMap<String, Arc<Pod>>>,
    /// Each indexed pod's job, by (namespace, name): a relabelled pod moves.
    job_of: HashMap<(String, String), JobKey>,
    /// A relist under way: the pods it found so far, which replace all at its end.
    relisting: Option<Vec<Pod>>,
}

impl PodIndex {
    fn apply(&mut self, event: watcher::Event<Pod>) {
        match event {
            watcher::Event::Apply(pod) => self.put(pod),
            watcher::Event::Delete(pod) => self.remove(&pod),
            watcher::Event::Init => self.relisting = Some(Vec::new()),
            watcher::Event::InitApply(pod) => self.relisting.get_or_insert_default().push(pod),
            watcher::Event::InitDone => {
                let found = self.relisting.take().unwrap_or_default();
                self.by_job.clear();
                self.job_of.clear();
                for pod in found {
                    self.put(pod);
                }
            }
        }
    }

    fn put(&mut self, pod: Pod) {
        self.remove(&pod);
        let Some(job) = worker_job(&pod) else {
            return;
        };
        let name = pod.name_any();
        let key = (pod.namespace().unwrap_or_default(), job);
        self.job_of
            .insert((key.0.clone(), name.clone()), key.clone());
        self.by_job
            .entry(key)
            .or_default()
            .insert(name, Arc::new(pod));
    }

    fn remove(&mut self, pod: &Pod) {
        let at = (pod.namespace().unwrap_or_default(), pod.name_any());
        let Some(key) = self.job_of.remove(&at) else {
            return;
        };
        if let Some(pods) = self.by_job.get_mut(&key) {
            pods.remove(&at.1);
            if pods.is_empty() {
                self.by_job.remove(&key);
            }
        }
    }
}

/// The job a worker pod belongs to, by the labels a job's selector matches.
fn worker_job(pod: &Pod) -> Option<String> {
    let pod_labels = pod.labels();
    (pod_labels.get(labels::NAME).map(String::as_str) == Some(labels::WORKER_APP))
        .then(|| pod_labels.get(labels::INSTANCE).cloned())
        .flatten()
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
    cache.pods_of(namespace, job)
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
    fn a_worker_pod_belongs_to_the_job_its_selector_labels_name() {
        assert_eq!(
            worker_job(&pod("shop", "card-count")).as_deref(),
            Some("card-count")
        );
        let mut unlabelled = pod("shop", "card-count");
        unlabelled.metadata.labels = None;
        assert_eq!(worker_job(&unlabelled), None);
        let mut not_a_worker = pod("shop", "card-count");
        not_a_worker
            .metadata
            .labels
            .as_mut()
            .unwrap()
            .insert(labels::NAME.to_string(), "something-else".to_string());
        assert_eq!(worker_job(&not_a_worker), None);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn every_task_waiting_for_the_first_list_goes_on_once_it_is_in() {
        use kube::runtime::watcher::Event;
        use std::sync::atomic::{AtomicUsize, Ordering};
        let (cache, writer) = PodCache::new();
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
        writer.event(Event::Init);
        writer.event(Event::InitApply(pod("shop", "card-count")));
        writer.event(Event::InitDone);
        for task in tasks {
            let found = tokio::time::timeout(std::time::Duration::from_secs(5), task)
                .await
                .expect("a task waiting for the first list was never woken")
                .unwrap();
            assert_eq!(found, 1);
        }
    }

    #[test]
    fn the_index_follows_the_watch_by_job() {
        use kube::runtime::watcher::Event;
        let named = |namespace: &str, job: &str, name: &str| {
            let mut pod = pod(namespace, job);
            pod.metadata.name = Some(name.to_string());
            pod
        };
        let (cache, writer) = PodCache::new();
        let names = |job: &str| -> Vec<String> {
            cache
                .pods_of("shop", job)
                .iter()
                .map(|pod| pod.name_any())
                .collect()
        };
        writer.event(Event::Init);
        writer.event(Event::InitApply(named("shop", "a", "a-0")));
        writer.event(Event::InitApply(named("shop", "a", "a-1")));
        writer.event(Event::InitApply(named("other", "a", "a-0")));
        assert!(names("a").is_empty(), "nothing before the list is in");
        writer.event(Event::InitDone);
        assert_eq!(names("a"), ["a-0", "a-1"]);
        assert_eq!(cache.pods_of("other", "a").len(), 1);

        writer.event(Event::Apply(named("shop", "b", "a-1")));
        assert_eq!(names("a"), ["a-0"], "relabelled: moved to job b");
        assert_eq!(names("b"), ["a-1"]);
        writer.event(Event::Delete(named("shop", "a", "a-0")));
        assert!(names("a").is_empty());
        let mut foreign = named("shop", "b", "b-9");
        foreign.metadata.labels = Some(
            labels::common("b")
                .into_iter()
                .filter(|(k, _)| k != labels::NAME)
                .collect(),
        );
        writer.event(Event::Apply(foreign));
        assert_eq!(names("b"), ["a-1"], "not a worker pod");

        // A relist replaces everything: a pod it does not find is gone.
        writer.event(Event::Init);
        writer.event(Event::InitApply(named("shop", "c", "c-0")));
        writer.event(Event::InitDone);
        assert!(names("b").is_empty());
        assert_eq!(names("c"), ["c-0"]);
    }
}
