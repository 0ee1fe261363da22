//! A pod's service-account identity, as a kubelet gives it: a token from the TokenRequest API for
//! the pod's ServiceAccount, bound to the pod (it stops working when the pod is deleted).
//!
//! A kubelet mounts the token at `/var/run/secrets/kubernetes.io/serviceaccount`, which a local
//! process cannot have, so the liberty taken here is the kubeconfig form of the same identity: a
//! file in the pod's directory naming this node's apiserver and the token, passed to every
//! container as `KUBECONFIG` (which kube-rs and client-go read before the in-cluster files). A
//! process in the pod then talks to the apiserver with its ServiceAccount's RBAC, not the node's.

use k8s_openapi::api::authentication::v1::{BoundObjectReference, TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{Pod, ServiceAccount};
use kube::Api;
use kube::api::PostParams;
use kube::config::Kubeconfig;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};

/// How long a token lives: a test or demo run is much shorter; the pod's deletion ends it sooner.
const TOKEN_SECONDS: i64 = 24 * 3600;

/// The cluster entry (server and CA) of this agent's own kubeconfig, to hand to pods; `None`
/// when there is no kubeconfig (then pods get no token, as with `automountServiceAccountToken:
/// false`).
pub fn own_cluster() -> Option<Value> {
    let config = Kubeconfig::read().ok()?;
    let context_name = config.current_context.clone()?;
    let context = config
        .contexts
        .iter()
        .find(|c| c.name == context_name)?
        .context
        .clone()?;
    let cluster = config
        .clusters
        .into_iter()
        .find(|c| c.name == context.cluster)?;
    serde_json::to_value(cluster).ok()
}

/// Whether the pod wants its token (the Kubernetes default is yes).
pub fn wanted(pod: &Pod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|spec| spec.automount_service_account_token)
        != Some(false)
}

/// Asks for the pod's token and writes `<pod_dir>/serviceaccount/kubeconfig`; returns its path.
pub async fn write_kubeconfig(
    client: &kube::Client,
    cluster: &Value,
    pod: &Pod,
    pod_dir: &Path,
) -> Result<PathBuf, String> {
    let namespace = pod.metadata.namespace.clone().unwrap_or_default();
    let account = pod
        .spec
        .as_ref()
        .and_then(|spec| spec.service_account_name.clone())
        .unwrap_or_else(|| "default".into());
    let request = TokenRequest {
        spec: TokenRequestSpec {
            // Empty: the apiserver's own audience, which is what its authenticator accepts.
            audiences: Vec::new(),
            bound_object_ref: Some(BoundObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Pod".into()),
                name: pod.metadata.name.clone(),
                uid: pod.metadata.uid.clone(),
            }),
            expiration_seconds: Some(TOKEN_SECONDS),
        },
        ..TokenRequest::default()
    };
    let granted = Api::<ServiceAccount>::namespaced(client.clone(), &namespace)
        .create_token_request(&account, &PostParams::default(), &request)
        .await
        .map_err(|e| format!("token for service account {namespace}/{account}: {e}"))?;
    let token = granted.status.map(|s| s.token).unwrap_or_default();
    let cluster_name = cluster["name"].as_str().unwrap_or("cluster").to_string();
    let user = format!("system:serviceaccount:{namespace}:{account}");
    // JSON is YAML: any kubeconfig reader takes it.
    let kubeconfig = json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [cluster],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": "pod", "context": {"cluster": cluster_name, "user": user, "namespace": namespace}}],
        "current-context": "pod",
    });
    let dir = pod_dir.join("serviceaccount");
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let path = dir.join("kubeconfig");
    let body = serde_json::to_vec_pretty(&kubeconfig).map_err(|e| e.to_string())?;
    std::fs::write(&path, body).map_err(|e| format!("{}: {e}", path.display()))?;
    restrict(&path);
    Ok(path)
}

/// The token is a credential: readable by this user only.
fn restrict(path: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let _ = std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600));
}
