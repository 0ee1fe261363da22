//! Step 1 of a poll: the job's worker pods as the apiserver lists them (at most every
//! [`LIST_EVERY`]), with their nodes' zones, and which of them were recreated under the same
//! name since the last listing.

use super::{LIST_EVERY, ListedPod, LoopState};
use crate::failover::job::FailoverJob;
use crate::failover::rule_inputs::PodFacts;
use crate::failover::shared::Shared;
use crate::k8s::apply::ApiError;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};
use kube::{Client, ResourceExt};
use std::collections::BTreeMap;
use std::time::Instant;

/// Lists the pods again when the last listing is [`LIST_EVERY`] old: learns their zones, and
/// marks a pod recreated under the same name (a new uid) as replaced.
pub(super) async fn pods(
    client: &Client,
    job: &FailoverJob,
    state: &mut LoopState,
    shared: &Shared,
) -> Result<(), ApiError> {
    if state.listed_at.is_some_and(|at| at.elapsed() < LIST_EVERY) {
        return Ok(());
    }
    state.pods = list_pods(client, job).await?;
    let nodes = state.pods.iter().filter_map(|p| p.facts.node.as_deref());
    state.zones.learn(client, nodes).await;
    for pod in &mut state.pods {
        pod.facts.zone = pod.facts.node.as_deref().and_then(|n| state.zones.zone(n));
    }
    state.listed_at = Some(Instant::now());
    let listed: Vec<(String, String)> = state
        .pods
        .iter()
        .map(|p| (p.facts.name.clone(), p.uid.clone()))
        .collect();
    // A pod recreated under the same name (a new uid) lost the process that ran its
    // tasks, even if the new one already answers.
    let previous: BTreeMap<String, String> =
        std::mem::replace(&mut state.uids, listed.iter().cloned().collect());
    for (pod, uid) in &listed {
        if previous.get(pod).is_some_and(|before| before != uid) {
            state.heartbeats.replaced(pod);
        }
    }
    let uids = &state.uids;
    state.heartbeats.retain(|pod| uids.contains_key(pod));
    shared.end_drain_if_replaced(&listed);
    Ok(())
}

/// The job's worker pods that exist and are not being deleted, with their addresses.
async fn list_pods(client: &Client, job: &FailoverJob) -> Result<Vec<ListedPod>, ApiError> {
    let api: Api<Pod> = Api::namespaced(client.clone(), &job.namespace);
    let selector = crate::k8s::labels::selector_string(&job.name);
    let list = api
        .list(&ListParams::default().labels(&selector))
        .await
        .map_err(|source| ApiError {
            action: "list",
            kind: "Pod".into(),
            namespace: job.namespace.clone(),
            name: selector.clone(),
            source,
        })?;
    Ok(list
        .items
        .into_iter()
        .filter(|pod| pod.metadata.deletion_timestamp.is_none())
        .map(|pod| ListedPod {
            ip: pod.status.as_ref().and_then(|status| status.pod_ip.clone()),
            uid: pod.uid().unwrap_or_default(),
            facts: PodFacts {
                name: pod.name_any(),
                node: pod.spec.as_ref().and_then(|spec| spec.node_name.clone()),
                // Filled in from the pod's Node (`zones`).
                zone: None,
            },
        })
        .collect())
}
