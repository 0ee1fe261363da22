//! How a pod's containers are stopped: a signal to each container's whole process group, after
//! the grace its deletion gives.

use k8s_openapi::api::core::v1::Pod;
use std::process::{Child, Command, Stdio};

/// SIGTERM or SIGKILL to the whole process group of a container.
pub fn signal(child: &Child, signal: &str) {
    let group = format!("-{}", child.id());
    let _ = Command::new("kill")
        .args([signal, "--", &group])
        .stderr(Stdio::null())
        .status();
}

/// The grace a deleted pod's containers get: the deletion's own (`kubectl delete
/// --grace-period`, which the apiserver records on the pod), else the pod's, as a kubelet does.
pub fn deletion_grace_seconds(pod: &Pod) -> u64 {
    let requested = pod.metadata.deletion_grace_period_seconds;
    let own = pod
        .spec
        .as_ref()
        .and_then(|s| s.termination_grace_period_seconds);
    u64::try_from(requested.or(own).unwrap_or(30)).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::PodSpec;

    #[test]
    fn a_deletion_with_its_own_grace_period_overrides_the_pods() {
        let mut pod = Pod {
            spec: Some(PodSpec {
                termination_grace_period_seconds: Some(60),
                ..PodSpec::default()
            }),
            ..Pod::default()
        };
        assert_eq!(deletion_grace_seconds(&pod), 60);
        pod.metadata.deletion_grace_period_seconds = Some(0);
        assert_eq!(deletion_grace_seconds(&pod), 0, "--grace-period=0");
        pod.spec = None;
        pod.metadata.deletion_grace_period_seconds = None;
        assert_eq!(deletion_grace_seconds(&pod), 30, "Kubernetes' default");
    }
}
