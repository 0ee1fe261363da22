//! The pods bound to this node, run as local process groups: started from a [`launch::plan`],
//! probed, restarted per `restartPolicy`, stopped with SIGTERM then SIGKILL when deleted, and
//! reported in `status`.

use crate::container::{ContainerRun, now};
use crate::launch::{self, PodPlace, Sources};
use crate::projection;
use crate::status::{self, PodView};
use crate::termination::{deletion_grace_seconds, signal};
use crate::token;
use crate::{AgentError, Options};
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};
use kube::Api;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams};
use serde_json::json;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::PathBuf;
use std::time::{Duration, Instant};

struct PodRun {
    namespace: String,
    name: String,
    /// The pod as it started, whose projected volumes are kept up to date.
    pod: Pod,
    dir: PathBuf,
    ip: String,
    start_time: String,
    restart_policy: String,
    containers: Vec<ContainerRun>,
    /// When SIGKILL follows the SIGTERM of a deletion.
    kill_at: Option<Instant>,
    reported: Option<serde_json::Value>,
}

pub struct PodRunner {
    client: kube::Client,
    options: Options,
    pods: HashMap<String, PodRun>,
    /// Pods that could not start yet (a missing ConfigMap, an unmapped image), by uid: the
    /// reason last reported, so it is patched once, not on every pass.
    blocked: HashMap<String, String>,
    /// The apiserver as this agent's kubeconfig names it, for the pods' own kubeconfigs.
    cluster: Option<serde_json::Value>,
    /// When the projected volumes of the running pods were last brought up to date.
    volumes_refreshed: Instant,
}

impl PodRun {
    /// Reaps exits, restarts per policy, runs due probes.
    async fn tend(&mut self) {
        let terminating = self.kill_at.is_some();
        for container in &mut self.containers {
            container.reap(&self.name, &self.restart_policy, terminating);
            if !terminating {
                container.restart_when_due(&self.ip);
            }
            container.probe_when_due(&self.name, &self.ip).await;
        }
    }

    fn view(&self) -> PodView {
        PodView {
            pod_ip: self.ip.clone(),
            start_time: self.start_time.clone(),
            restart_policy: self.restart_policy.clone(),
            containers: self.containers.iter().map(ContainerRun::view).collect(),
        }
    }

    fn terminate(&mut self, grace: Duration) {
        if self.kill_at.is_some() {
            return;
        }
        tracing::info!(pod = %self.name, grace_seconds = grace.as_secs(), "pod deleted: SIGTERM");
        for container in &mut self.containers {
            container.restart_at = None;
            if let Some(child) = &container.child {
                signal(child, "-TERM");
            }
        }
        self.kill_at = Some(Instant::now() + grace);
    }

    fn all_stopped(&mut self) -> bool {
        self.containers.iter_mut().all(|c| match c.child.as_mut() {
            None => true,
            Some(child) => matches!(child.try_wait(), Ok(Some(_))),
        })
    }

    fn kill(&mut self) {
        for container in &mut self.containers {
            if let Some(mut child) = container.child.take() {
                signal(&child, "-KILL");
                let _ = child.wait();
            }
        }
    }
}

impl PodRunner {
    pub fn new(client: kube::Client, options: Options) -> Self {
        Self {
            client,
            options,
            pods: HashMap::new(),
            blocked: HashMap::new(),
            cluster: token::own_cluster(),
            volumes_refreshed: Instant::now(),
        }
    }

    fn free_address(&self) -> Option<String> {
        let used: BTreeSet<&str> = self.pods.values().map(|p| p.ip.as_str()).collect();
        (self.options.first_pod_address..=254)
            .map(|x| format!("127.0.0.{x}"))
            .find(|ip| !used.contains(ip.as_str()))
    }

    async fn sources(&self, namespace: &str) -> Result<Sources, AgentError> {
        let maps = Api::<ConfigMap>::namespaced(self.client.clone(), namespace)
            .list(&ListParams::default())
            .await
            .map_err(AgentError::kube(format!(
                "listing configmaps in {namespace}"
            )))?;
        let secrets = Api::<Secret>::namespaced(self.client.clone(), namespace)
            .list(&ListParams::default())
            .await
            .map_err(AgentError::kube(format!("listing secrets in {namespace}")))?;
        let mut sources = Sources::default();
        for map in maps.items {
            let mut data: BTreeMap<String, Vec<u8>> = map
                .data
                .unwrap_or_default()
                .into_iter()
                .map(|(k, v)| (k, v.into_bytes()))
                .collect();
            data.extend(
                map.binary_data
                    .unwrap_or_default()
                    .into_iter()
                    .map(|(k, v)| (k, v.0)),
            );
            sources
                .config_maps
                .insert(map.metadata.name.unwrap_or_default(), data);
        }
        for secret in secrets.items {
            let mut data: BTreeMap<String, Vec<u8>> = secret
                .data
                .unwrap_or_default()
                .into_iter()
                .map(|(k, v)| (k, v.0))
                .collect();
            data.extend(
                secret
                    .string_data
                    .unwrap_or_default()
                    .into_iter()
                    .map(|(k, v)| (k, v.into_bytes())),
            );
            sources
                .secrets
                .insert(secret.metadata.name.unwrap_or_default(), data);
        }
        Ok(sources)
    }

    async fn start(&mut self, pod: &Pod) -> Result<(), String> {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let namespace = pod.metadata.namespace.clone().unwrap_or_default();
        let name = pod.metadata.name.clone().unwrap_or_default();
        let ip = self.free_address().ok_or("no free loopback address")?;
        let pod_dir = self
            .options
            .root
            .join("pods")
            .join(format!("{namespace}_{name}_{uid}"));
        let sources = self.sources(&namespace).await.map_err(|e| e.to_string())?;
        let place = PodPlace {
            pod_ip: &ip,
            node_name: &self.options.node_name,
            pod_dir: &pod_dir,
            root: &self.options.root,
            images: &self.options.images,
        };
        let mut plan = launch::plan(pod, &place, &sources).map_err(|e| e.to_string())?;
        if let Some(cluster) = &self.cluster
            && token::wanted(pod)
        {
            // Best effort, so a pod whose account is missing still runs (with no API access),
            // as the pods of the tests that never talk to the apiserver always have.
            match token::write_kubeconfig(&self.client, cluster, pod, &pod_dir).await {
                Ok(path) => {
                    for container in &mut plan.containers {
                        if !container.env.iter().any(|(key, _)| key == "KUBECONFIG") {
                            container
                                .env
                                .push(("KUBECONFIG".into(), path.display().to_string()));
                        }
                    }
                }
                Err(reason) => {
                    tracing::warn!(pod = %name, %reason, "no service-account token for the pod")
                }
            }
        }
        for volume in &plan.volumes {
            projection::materialize(&volume.dir, &volume.files)
                .map_err(|e| format!("volume {}: {e}", volume.name))?;
        }
        let logs = pod_dir.join("logs");
        std::fs::create_dir_all(&logs).map_err(|e| format!("{}: {e}", logs.display()))?;
        let mut run = PodRun {
            namespace,
            name: name.clone(),
            pod: pod.clone(),
            dir: pod_dir,
            ip,
            start_time: now(),
            restart_policy: pod
                .spec
                .as_ref()
                .and_then(|s| s.restart_policy.clone())
                .unwrap_or_else(|| "Always".into()),
            containers: plan
                .containers
                .into_iter()
                .map(|plan| ContainerRun::new(logs.join(format!("{}.log", plan.name)), plan))
                .collect(),
            kill_at: None,
            reported: None,
        };
        tracing::info!(pod = %name, ip = %run.ip, dir = %run.dir.display(), "starting pod");
        for container in &mut run.containers {
            container.spawn(&run.ip);
        }
        self.pods.insert(uid, run);
        Ok(())
    }

    async fn report_blocked(&mut self, pod: &Pod, reason: String) {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        if self.blocked.get(&uid) == Some(&reason) {
            return;
        }
        tracing::warn!(pod = pod.metadata.name.as_deref().unwrap_or_default(), %reason, "pod cannot start yet");
        let containers: Vec<_> = pod
            .spec
            .iter()
            .flat_map(|s| s.containers.iter())
            .map(|c| json!({ "name": c.name, "image": c.image, "imageID": "", "ready": false, "restartCount": 0,
                             "state": { "waiting": { "reason": "CreateContainerConfigError", "message": reason } } }))
            .collect();
        let patch = json!({ "status": { "phase": "Pending", "containerStatuses": containers } });
        self.patch_status(
            pod.metadata.namespace.as_deref().unwrap_or_default(),
            pod.metadata.name.as_deref().unwrap_or_default(),
            &patch,
        )
        .await;
        self.blocked.insert(uid, reason);
    }

    async fn patch_status(&self, namespace: &str, name: &str, patch: &serde_json::Value) {
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
        if let Err(error) = pods
            .patch_status(name, &PatchParams::default(), &Patch::Merge(patch))
            .await
        {
            tracing::warn!(pod = name, %error, "status not updated");
        }
    }

    /// One pass: start new pods, tend running ones, finish deletions, report status.
    pub async fn sync(&mut self) {
        let pods: Api<Pod> = Api::all(self.client.clone());
        let listed = match pods
            .list(
                &ListParams::default().fields(&format!("spec.nodeName={}", self.options.node_name)),
            )
            .await
        {
            Ok(list) => list.items,
            Err(error) => {
                tracing::warn!(%error, "listing pods failed");
                return;
            }
        };
        let listed: HashMap<String, Pod> = listed
            .into_iter()
            .filter_map(|p| Some((p.metadata.uid.clone()?, p)))
            .collect();
        // Pods gone from the API (force-deleted): nothing may keep running.
        let gone: Vec<String> = self
            .pods
            .keys()
            .filter(|uid| !listed.contains_key(*uid))
            .cloned()
            .collect();
        for uid in gone {
            if let Some(mut run) = self.pods.remove(&uid) {
                tracing::info!(pod = %run.name, "pod removed from the API: killing its containers");
                run.kill();
            }
        }
        self.blocked.retain(|uid, _| listed.contains_key(uid));
        for (uid, pod) in &listed {
            let finished = matches!(
                pod.status.as_ref().and_then(|s| s.phase.as_deref()),
                Some("Succeeded" | "Failed")
            );
            if pod.metadata.deletion_timestamp.is_some() {
                let grace = deletion_grace_seconds(pod);
                let done = match self.pods.get_mut(uid) {
                    None => true,
                    Some(run) => {
                        run.terminate(Duration::from_secs(grace));
                        let overdue = run.kill_at.is_some_and(|at| Instant::now() >= at);
                        if overdue {
                            run.kill();
                        }
                        overdue || run.all_stopped()
                    }
                };
                if done {
                    self.pods.remove(uid);
                    let name = pod.metadata.name.as_deref().unwrap_or_default();
                    let namespace = pod.metadata.namespace.as_deref().unwrap_or_default();
                    let api: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
                    match api
                        .delete(name, &DeleteParams::default().grace_period(0))
                        .await
                    {
                        Ok(_) => tracing::info!(pod = name, "pod stopped and removed"),
                        Err(kube::Error::Api(e)) if e.code == 404 => {}
                        Err(error) => tracing::warn!(pod = name, %error, "final delete failed"),
                    }
                }
                continue;
            }
            if !self.pods.contains_key(uid)
                && !finished
                && let Err(reason) = self.start(pod).await
            {
                self.report_blocked(pod, reason).await;
            }
        }
        self.refresh_volumes().await;
        let uids: Vec<String> = self.pods.keys().cloned().collect();
        for uid in uids {
            let Some(run) = self.pods.get_mut(&uid) else {
                continue;
            };
            run.tend().await;
            let status = status::pod_status(&run.view(), &now());
            // Compare without the transition times, which change on every pass.
            let comparable = status::strip_times(&status);
            if run.reported.as_ref() != Some(&comparable) {
                let (namespace, name) = (run.namespace.clone(), run.name.clone());
                run.reported = Some(comparable);
                self.patch_status(&namespace, &name, &json!({ "status": status }))
                    .await;
            }
        }
    }

    /// Brings the running pods' ConfigMap and Secret files up to date, every
    /// `--volume-refresh-seconds` ([`projection`]).
    async fn refresh_volumes(&mut self) {
        let every = Duration::from_secs(self.options.volume_refresh_seconds);
        if self.volumes_refreshed.elapsed() < every {
            return;
        }
        self.volumes_refreshed = Instant::now();
        let namespaces: BTreeSet<String> =
            self.pods.values().map(|r| r.namespace.clone()).collect();
        for namespace in namespaces {
            let Ok(sources) = self.sources(&namespace).await else {
                continue;
            };
            for run in self.pods.values().filter(|r| r.namespace == namespace) {
                let place = PodPlace {
                    pod_ip: &run.ip,
                    node_name: &self.options.node_name,
                    pod_dir: &run.dir,
                    root: &self.options.root,
                    images: &self.options.images,
                };
                // A source missing for the moment keeps the files as they are.
                let Ok(plan) = launch::plan(&run.pod, &place, &sources) else {
                    continue;
                };
                match projection::refresh(&plan.volumes) {
                    Ok(changed) if !changed.is_empty() => {
                        tracing::info!(pod = %run.name, volumes = ?changed, "projected volumes updated")
                    }
                    Ok(_) => {}
                    Err(error) => {
                        tracing::warn!(pod = %run.name, %error, "projected volumes not updated")
                    }
                }
            }
        }
    }

    /// SIGTERM every container, wait up to 10 s, then SIGKILL.
    pub async fn stop_all(&mut self) {
        for run in self.pods.values_mut() {
            run.terminate(Duration::from_secs(10));
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline && !self.pods.values_mut().all(PodRun::all_stopped) {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        for run in self.pods.values_mut() {
            run.kill();
        }
    }
}
