//! Finds the pods to serve by watching the apiserver: worker pods (the operator's
//! `app.kubernetes.io/name=streamkeeper-worker` label) that run on a KWOK node and have a
//! loopback address. A pod is served from when it is Running with an address until it is
//! deleted; a pod recreated under the same name is a new process, even at the same address.

use crate::fleet::Fleet;
use futures::TryStreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use kube::{Api, Client};
use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;

/// The operator's worker pod label (`src/k8s/labels.rs`: `NAME=WORKER_APP`).
pub const WORKER_SELECTOR: &str = "app.kubernetes.io/name=streamkeeper-worker";

#[derive(Debug, thiserror::Error)]
pub enum DiscoverError {
    #[error("watching worker pods failed: {0}")]
    Watch(#[from] watcher::Error),
}

/// Which pods are served.
#[derive(Debug, Clone)]
pub struct Selection {
    /// A label selector on pods.
    pub labels: String,
    /// Only pods on nodes whose name starts with this (KWOK's nodes, see tests/services/kwok.sh):
    /// a pod of a real or local node has a process of its own answering.
    pub node_prefix: String,
}

/// The pods served, by uid and by address, so a pod replaced at the same address is told apart.
#[derive(Default)]
struct Served {
    by_uid: BTreeMap<String, Ipv4Addr>,
    by_ip: BTreeMap<Ipv4Addr, String>,
}

impl Served {
    fn forget(&mut self, fleet: &Fleet, uid: &str) {
        if let Some(ip) = self.by_uid.remove(uid)
            && self.by_ip.get(&ip).is_some_and(|owner| owner == uid)
        {
            self.by_ip.remove(&ip);
            fleet.remove(ip);
        }
    }

    fn apply(&mut self, fleet: &Fleet, selection: &Selection, pod: &Pod) {
        let Some(uid) = pod.metadata.uid.clone() else {
            return;
        };
        let Some((ip, name)) = address(selection, pod) else {
            self.forget(fleet, &uid);
            return;
        };
        if self.by_uid.get(&uid) == Some(&ip) {
            return;
        }
        self.forget(fleet, &uid);
        // Another pod held this address (its deletion not seen yet): its process is gone.
        if let Some(previous) = self.by_ip.get(&ip).cloned() {
            self.forget(fleet, &previous);
        }
        match fleet.add(ip, &name) {
            Ok(()) => {
                self.by_uid.insert(uid.clone(), ip);
                self.by_ip.insert(ip, uid);
            }
            Err(error) => tracing::error!(%error, "cannot serve a pod"),
        }
    }
}

/// The address and name a pod is served under, if it is served.
fn address(selection: &Selection, pod: &Pod) -> Option<(Ipv4Addr, String)> {
    let spec = pod.spec.as_ref()?;
    let on_kwok = spec
        .node_name
        .as_deref()
        .is_some_and(|node| node.starts_with(&selection.node_prefix));
    let status = pod.status.as_ref()?;
    let running = status.phase.as_deref() == Some("Running");
    let ip: Ipv4Addr = status.pod_ip.as_deref()?.parse().ok()?;
    (on_kwok && running && ip.is_loopback())
        .then(|| (ip, pod.metadata.name.clone().unwrap_or_default()))
}

/// Serves every selected pod of the cluster until the watch ends (it retries with backoff, so
/// only on a fatal error).
pub async fn run(client: Client, fleet: Fleet, selection: Selection) -> Result<(), DiscoverError> {
    let pods: Api<Pod> = Api::all(client);
    let config = watcher::Config::default().labels(&selection.labels);
    let mut events = std::pin::pin!(watcher::watcher(pods, config).default_backoff());
    let mut served = Served::default();
    // The uids listed since the last (re)list began: what was served and is not among them
    // was deleted while the watch was down.
    let mut listed: Option<BTreeSet<String>> = None;
    while let Some(event) = events.try_next().await? {
        match event {
            Event::Init => listed = Some(BTreeSet::new()),
            Event::InitApply(pod) => {
                if let (Some(seen), Some(uid)) = (listed.as_mut(), pod.metadata.uid.clone()) {
                    seen.insert(uid);
                }
                served.apply(&fleet, &selection, &pod);
            }
            Event::InitDone => {
                let seen = listed.take().unwrap_or_default();
                let gone: Vec<String> = served
                    .by_uid
                    .keys()
                    .filter(|uid| !seen.contains(*uid))
                    .cloned()
                    .collect();
                for uid in gone {
                    served.forget(&fleet, &uid);
                }
                tracing::info!(pods = served.by_uid.len(), "pod list synced");
            }
            Event::Apply(pod) => served.apply(&fleet, &selection, &pod),
            Event::Delete(pod) => {
                if let Some(uid) = pod.metadata.uid.as_deref() {
                    served.forget(&fleet, uid);
                }
            }
        }
    }
    Ok(())
}
