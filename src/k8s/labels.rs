//! Labels and annotations the operator puts on what it owns. The selector labels are immutable
//! once a StatefulSet exists, so they are defined once here and never derived from user input.

use std::collections::BTreeMap;

pub const NAME: &str = "app.kubernetes.io/name";
pub const INSTANCE: &str = "app.kubernetes.io/instance";
pub const MANAGED_BY: &str = "app.kubernetes.io/managed-by";
pub const JOB: &str = "streamkeeper.dev/job";

/// Value of [`NAME`] on every worker pod.
pub const WORKER_APP: &str = "streamkeeper-worker";
/// Value of [`MANAGED_BY`].
pub const MANAGER: &str = "streamkeeper";

/// Pod template annotation: hash of the rendered worker config, so a config change changes the
/// template (and the StatefulSet's update revision).
pub const CONFIG_HASH_ANNOTATION: &str = "streamkeeper.dev/config-hash";
/// Pod template annotation: `spec.restartNonce`, so changing the nonce changes the template.
pub const RESTART_NONCE_ANNOTATION: &str = "streamkeeper.dev/restart-nonce";
/// Pod template annotation: the restore request (contract `RestoreRequestDocument`, JSON), passed
/// to the worker as an environment variable; changing it replaces the pods.
pub const RESTORE_ANNOTATION: &str = "streamkeeper.dev/restore";
/// Makes `kubectl logs/exec` pick the worker container without `-c`.
pub const DEFAULT_CONTAINER_ANNOTATION: &str = "kubectl.kubernetes.io/default-container";

/// Label keys a user may not set through `spec.pod.labels`: overriding them would detach pods
/// from their StatefulSet selector or from the operator's pod watch.
pub const RESERVED_LABELS: [&str; 4] = [NAME, INSTANCE, MANAGED_BY, JOB];
/// Annotation keys a user may not set through `spec.pod.annotations`.
pub const RESERVED_ANNOTATIONS: [&str; 4] = [
    CONFIG_HASH_ANNOTATION,
    RESTART_NONCE_ANNOTATION,
    RESTORE_ANNOTATION,
    DEFAULT_CONTAINER_ANNOTATION,
];

/// The StatefulSet, Service and PodDisruptionBudget selector. Two keys are enough to be unique
/// (the job name is unique in its namespace) and fewer keys mean less to keep immutable.
pub fn selector(job: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (NAME.to_string(), WORKER_APP.to_string()),
        (INSTANCE.to_string(), job.to_string()),
    ])
}

/// Labels on every object the operator owns for a job.
pub fn common(job: &str) -> BTreeMap<String, String> {
    let mut labels = selector(job);
    labels.insert(MANAGED_BY.to_string(), MANAGER.to_string());
    labels.insert(JOB.to_string(), job.to_string());
    labels
}

/// Labels of a worker pod: the user's extra labels, then ours on top (validation refuses a user
/// label with a reserved key, so "on top" never actually overrides anything).
pub fn pod(job: &str, extra: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    let mut labels = extra.clone();
    labels.extend(common(job));
    labels
}

/// `key=value,...` form of [`selector`], for list/watch calls on the job's pods.
pub fn selector_string(job: &str) -> String {
    selector(job)
        .iter()
        .map(|(key, value)| format!("{key}={value}"))
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn common_labels_include_the_selector() {
        let common = common("card-count");
        for (key, value) in selector("card-count") {
            assert_eq!(common.get(&key), Some(&value));
        }
        assert_eq!(common.get(JOB).map(String::as_str), Some("card-count"));
        assert_eq!(
            common.get(MANAGED_BY).map(String::as_str),
            Some("streamkeeper")
        );
    }

    #[test]
    fn ours_win_over_extra_labels() {
        let extra = BTreeMap::from([
            ("team".to_string(), "payments".to_string()),
            (INSTANCE.to_string(), "other".to_string()),
        ]);
        let labels = pod("card-count", &extra);
        assert_eq!(labels.get("team").map(String::as_str), Some("payments"));
        assert_eq!(labels.get(INSTANCE).map(String::as_str), Some("card-count"));
    }

    #[test]
    fn selector_string_is_sorted_and_complete() {
        assert_eq!(
            selector_string("card-count"),
            "app.kubernetes.io/instance=card-count,app.kubernetes.io/name=streamkeeper-worker"
        );
    }
}
