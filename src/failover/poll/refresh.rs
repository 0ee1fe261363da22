//! Step 1 of a poll: the job's worker pods (at most every [`LIST_EVERY`]), with their nodes'
//! zones, and which of them were recreated under the same name since the last listing. The pods
//! come from the controller's watch of every worker pod ([`FailoverDeps::pods`]), not from a list
//! per job: a fleet's loops cost the apiserver nothing here.

use super::{LIST_EVERY, ListedPod, LoopState};
use crate::failover::job::{FailoverDeps, FailoverJob};
use crate::failover::rule_inputs::PodFacts;
use crate::failover::shared::Shared;
use crate::k8s::apply::ApiError;
use crate::k8s::pod_cache;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use std::collections::BTreeMap;
use std::time::Instant;

/// Lists the pods again when the last listing is [`LIST_EVERY`] old: learns their zones, and
/// marks a pod recreated under the same name (a new uid) as replaced.
pub(super) async fn pods(
    deps: &FailoverDeps,
    job: &FailoverJob,
    state: &mut LoopState,
    shared: &Shared,
) -> Result<(), ApiError> {
    if state.listed_at.is_some_and(|at| at.elapsed() < LIST_EVERY) {
        return Ok(());
    }
    let pods =
        pod_cache::job_pods(deps.pods.as_ref(), &deps.client, &job.namespace, &job.name).await?;
    state.pods = listed_pods(pods.iter().map(AsRef::as_ref));
    let nodes = state.pods.iter().filter_map(|p| p.facts.node.as_deref());
    deps.zones.learn(&deps.client, nodes).await;
    for pod in &mut state.pods {
        pod.facts.zone = pod.facts.node.as_deref().and_then(|n| deps.zones.zone(n));
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

/// Of the job's `pods`, those not being deleted, with their addresses, by name.
fn listed_pods<'p>(pods: impl Iterator<Item = &'p Pod>) -> Vec<ListedPod> {
    let mut listed: Vec<ListedPod> = pods
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
        .collect();
    listed.sort_by(|a, b| a.facts.name.cmp(&b.facts.name));
    listed
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str, deleting: bool) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {
                "namespace": "shop",
                "name": name,
                "uid": format!("uid-{name}"),
                "labels": crate::k8s::labels::common("card-count"),
                "deletionTimestamp": deleting.then_some("2026-12-05T00:00:00Z"),
            },
            "spec": { "nodeName": "node-a", "containers": [] },
            "status": { "podIP": "10.0.0.7" },
        }))
        .unwrap()
    }

    #[test]
    fn a_jobs_pods_not_being_deleted_are_listed_by_name_with_their_address_and_node() {
        // Which pods are the job's is `pod_cache`'s index, tested there.
        let pods = [
            pod("card-count-1", false),
            pod("card-count-0", false),
            pod("card-count-2", true),
        ];
        let listed = listed_pods(pods.iter());
        let names: Vec<&str> = listed.iter().map(|p| p.facts.name.as_str()).collect();
        assert_eq!(names, ["card-count-0", "card-count-1"]);
        assert_eq!(listed[0].uid, "uid-card-count-0");
        assert_eq!(listed[0].ip.as_deref(), Some("10.0.0.7"));
        assert_eq!(listed[0].facts.node.as_deref(), Some("node-a"));
    }
}
