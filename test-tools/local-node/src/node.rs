//! The Node object and its heartbeats (the node Lease every 10 s, the Ready condition every
//! 20 s), so the node lifecycle controller keeps the node Ready and never evicts its pods.

use crate::AgentError;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::json;
use std::time::Duration;

const MANAGER: &str = "streamkeeper-local-node";

fn node_status(now: &str) -> serde_json::Value {
    let condition = |type_: &str, status: &str, reason: &str, message: &str| {
        json!({
            "type": type_, "status": status, "reason": reason, "message": message,
            "lastHeartbeatTime": now, "lastTransitionTime": now,
        })
    };
    json!({
        "capacity": { "cpu": "64", "memory": "256Gi", "pods": "250", "ephemeral-storage": "1Ti" },
        "allocatable": { "cpu": "64", "memory": "256Gi", "pods": "250", "ephemeral-storage": "1Ti" },
        "conditions": [
            condition("Ready", "True", "LocalNodeReady", "streamkeeper-local-node runs pods as local processes"),
            condition("MemoryPressure", "False", "LocalNodeHasSufficientMemory", "no pressure"),
            condition("DiskPressure", "False", "LocalNodeHasNoDiskPressure", "no pressure"),
            condition("PIDPressure", "False", "LocalNodeHasSufficientPID", "no pressure"),
            condition("NetworkUnavailable", "False", "LocalNodeNetwork", "loopback"),
        ],
        "addresses": [
            { "type": "InternalIP", "address": "127.0.0.1" },
            { "type": "Hostname", "address": "localhost" },
        ],
        "nodeInfo": {
            "machineID": "", "systemUUID": "", "bootID": "", "kernelVersion": "",
            "osImage": "local processes", "containerRuntimeVersion": "local://0",
            "kubeletVersion": "v1.34.4", "kubeProxyVersion": "", "operatingSystem": "linux",
            "architecture": std::env::consts::ARCH,
        },
    })
}

/// Creates or takes over the Node object and marks it Ready.
pub async fn register(
    client: &kube::Client,
    name: &str,
    taint: Option<&str>,
    extra_labels: &[(String, String)],
) -> Result<(), AgentError> {
    let nodes: Api<Node> = Api::all(client.clone());
    let taints: Vec<serde_json::Value> = taint
        .into_iter()
        .map(|raw| {
            let (key_value, effect) = raw.rsplit_once(':').unwrap_or((raw, "NoSchedule"));
            let (key, value) = key_value.split_once('=').unwrap_or((key_value, ""));
            json!({ "key": key, "value": value, "effect": effect })
        })
        .collect();
    let mut labels = json!({
        "kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
        "streamkeeper.dev/local-node": "true",
    });
    for (key, value) in extra_labels {
        labels[key] = json!(value);
    }
    let node = json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": { "name": name, "labels": labels },
        "spec": {},
    });
    let params = PatchParams::apply(MANAGER).force();
    nodes
        .patch(name, &params, &Patch::Apply(&node))
        .await
        .map_err(AgentError::kube(format!("registering node {name}")))?;
    patch_status(&nodes, name).await?;
    // The apiserver taints every new node `not-ready`; the node lifecycle controller that would
    // lift it is off in the test control plane (no kubelets), so the agent sets the taints it
    // wants once the node reports Ready. A merge patch replaces the whole list.
    nodes
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({ "spec": { "taints": taints } })),
        )
        .await
        .map_err(AgentError::kube(format!(
            "setting the taints of node {name}"
        )))?;
    Ok(())
}

async fn patch_status(nodes: &Api<Node>, name: &str) -> Result<(), AgentError> {
    let now = Timestamp::now().to_string();
    nodes
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({ "status": node_status(&now) })),
        )
        .await
        .map_err(AgentError::kube(format!(
            "updating the status of node {name}"
        )))?;
    Ok(())
}

async fn renew_lease(client: &kube::Client, name: &str) -> Result<(), AgentError> {
    let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-node-lease");
    let lease = json!({
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": { "name": name },
        "spec": {
            "holderIdentity": name,
            "leaseDurationSeconds": 40,
            "renewTime": MicroTime(Timestamp::now()),
        },
    });
    leases
        .patch(
            name,
            &PatchParams::apply(MANAGER).force(),
            &Patch::Apply(&lease),
        )
        .await
        .map_err(AgentError::kube(format!(
            "renewing the lease of node {name}"
        )))?;
    Ok(())
}

/// Runs until aborted; a failed beat is logged and retried on the next one.
pub async fn heartbeat(client: kube::Client, name: String) {
    let nodes: Api<Node> = Api::all(client.clone());
    let mut beat = 0u64;
    loop {
        if let Err(error) = renew_lease(&client, &name).await {
            tracing::warn!(%error, "node lease not renewed");
        }
        if beat.is_multiple_of(2)
            && let Err(error) = patch_status(&nodes, &name).await
        {
            tracing::warn!(%error, "node status not updated");
        }
        beat += 1;
        tokio::time::sleep(Duration::from_secs(10)).await;
    }
}
