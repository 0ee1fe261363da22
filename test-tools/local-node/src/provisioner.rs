//! A directory-backed PersistentVolume for every pending claim, pre-bound to it: the claim's
//! data lives in `<root>/volumes/<namespace>/<claim>` and outlives every pod that mounts it,
//! as a StatefulSet's PVC does in a cluster. For this agent's own pods it is a `hostPath` volume
//! (the agent maps it into the process); for a real kubelet's pods (`--provision-only-for`) it is
//! a `local` volume pinned to that node, since a kubelet applies a pod's `fsGroup` to `local`
//! volumes but never to `hostPath` ones, and a non-root container could not write its state.

use crate::{AgentError, Options};
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use kube::Api;
use kube::api::{ListParams, PostParams};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Where a claim's data lives.
pub fn claim_dir(root: &Path, namespace: &str, claim: &str) -> PathBuf {
    root.join("volumes").join(namespace).join(claim)
}

/// The PersistentVolume for `claim`, or `None` when it needs none (bound, or not pending):
/// `hostPath` for this agent's pods, `local` on `kubelet_node` for a real kubelet's.
pub fn volume_for(
    claim: &PersistentVolumeClaim,
    root: &Path,
    kubelet_node: Option<&str>,
) -> Option<serde_json::Value> {
    let namespace = claim.metadata.namespace.as_deref()?;
    let name = claim.metadata.name.as_deref()?;
    let uid = claim.metadata.uid.as_deref()?;
    let spec = claim.spec.as_ref()?;
    let pending = claim.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Pending");
    if !pending || spec.volume_name.is_some() || claim.metadata.deletion_timestamp.is_some() {
        return None;
    }
    let storage = spec
        .resources
        .as_ref()
        .and_then(|r| r.requests.as_ref())
        .and_then(|r| r.get("storage"))
        .map_or_else(|| "1Gi".to_string(), |q| q.0.clone());
    let path = claim_dir(root, namespace, name).display().to_string();
    let mut volume = json!({
        "apiVersion": "v1", "kind": "PersistentVolume",
        "metadata": {
            "name": format!("local-{uid}"),
            "labels": { "streamkeeper.dev/local-node": "true" },
        },
        "spec": {
            "capacity": { "storage": storage },
            "accessModes": spec.access_modes.clone().unwrap_or_else(|| vec!["ReadWriteOnce".into()]),
            "persistentVolumeReclaimPolicy": "Delete",
            "storageClassName": spec.storage_class_name.clone().unwrap_or_default(),
            "volumeMode": "Filesystem",
            "claimRef": {
                "apiVersion": "v1", "kind": "PersistentVolumeClaim",
                "namespace": namespace, "name": name, "uid": uid,
            },
        },
    });
    if let Some(node) = kubelet_node {
        volume["spec"]["local"] = json!({ "path": path });
        volume["spec"]["nodeAffinity"] = json!({ "required": { "nodeSelectorTerms": [{
            "matchExpressions": [{ "key": "kubernetes.io/hostname", "operator": "In", "values": [node] }],
        }]}});
    } else {
        volume["spec"]["hostPath"] = json!({ "path": path });
    }
    Some(volume)
}

/// The directory a volume built by [`volume_for`] keeps its data in.
fn volume_path(volume: &serde_json::Value) -> &str {
    let spec = &volume["spec"];
    spec["local"]["path"]
        .as_str()
        .or_else(|| spec["hostPath"]["path"].as_str())
        .unwrap_or_default()
}

async fn provision_once(client: &kube::Client, options: &Options) -> Result<(), AgentError> {
    let claims: Vec<PersistentVolumeClaim> = if options.provision_namespaces.is_empty() {
        Api::<PersistentVolumeClaim>::all(client.clone())
            .list(&ListParams::default())
            .await
            .map_err(AgentError::kube("listing claims"))?
            .items
    } else {
        let mut all = Vec::new();
        for namespace in &options.provision_namespaces {
            all.extend(
                Api::<PersistentVolumeClaim>::namespaced(client.clone(), namespace)
                    .list(&ListParams::default())
                    .await
                    .map_err(AgentError::kube(format!("listing claims in {namespace}")))?
                    .items,
            );
        }
        all
    };
    let volumes: Api<PersistentVolume> = Api::all(client.clone());
    for claim in &claims {
        let Some(volume) = volume_for(claim, &options.root, options.provision_only_for.as_deref())
        else {
            continue;
        };
        let path = volume_path(&volume).to_string();
        std::fs::create_dir_all(&path).map_err(AgentError::io("creating", Path::new(&path)))?;
        let volume: PersistentVolume =
            serde_json::from_value(volume).map_err(|e| AgentError::Io {
                what: "building a volume",
                path: PathBuf::from(&path),
                source: std::io::Error::other(e),
            })?;
        match volumes.create(&PostParams::default(), &volume).await {
            Ok(created) => tracing::info!(
                volume = created.metadata.name.as_deref().unwrap_or_default(),
                %path,
                "provisioned a local volume"
            ),
            Err(kube::Error::Api(response)) if response.code == 409 => {}
            Err(error) => return Err(AgentError::kube("creating a volume")(error)),
        }
    }
    Ok(())
}

/// Runs until aborted.
pub async fn run(client: kube::Client, options: Options) {
    loop {
        if let Err(error) = provision_once(&client, &options).await {
            tracing::warn!(%error, "provisioning pass failed");
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim(phase: &str, volume_name: Option<&str>) -> PersistentVolumeClaim {
        serde_json::from_value(json!({
            "metadata": { "name": "state-job-0", "namespace": "ns", "uid": "u-1" },
            "spec": {
                "accessModes": ["ReadWriteOnce"],
                "resources": { "requests": { "storage": "2Gi" } },
                "volumeName": volume_name,
            },
            "status": { "phase": phase },
        }))
        .unwrap()
    }

    #[test]
    fn a_pending_claim_gets_a_prebound_directory_volume() {
        let volume = volume_for(&claim("Pending", None), Path::new("/r"), None).unwrap();
        assert_eq!(volume["metadata"]["name"], "local-u-1");
        assert_eq!(volume["spec"]["capacity"]["storage"], "2Gi");
        assert_eq!(
            volume["spec"]["hostPath"]["path"],
            "/r/volumes/ns/state-job-0"
        );
        assert_eq!(volume["spec"]["claimRef"]["uid"], "u-1");
        assert_eq!(volume["spec"]["storageClassName"], "");
    }

    #[test]
    fn bound_claims_get_nothing() {
        assert!(volume_for(&claim("Bound", Some("v")), Path::new("/r"), None).is_none());
        assert!(volume_for(&claim("Pending", Some("v")), Path::new("/r"), None).is_none());
    }

    #[test]
    fn a_real_kubelets_claim_gets_a_local_volume_pinned_to_its_node() {
        let volume = volume_for(&claim("Pending", None), Path::new("/r"), Some("n-1")).unwrap();
        assert!(volume["spec"].get("hostPath").is_none());
        assert_eq!(volume["spec"]["local"]["path"], "/r/volumes/ns/state-job-0");
        assert_eq!(volume_path(&volume), "/r/volumes/ns/state-job-0");
        let term = &volume["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"][0];
        assert_eq!(term["matchExpressions"][0]["key"], "kubernetes.io/hostname");
        assert_eq!(term["matchExpressions"][0]["values"][0], "n-1");
    }
}
