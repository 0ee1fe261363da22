//! The worker StatefulSet `<job>`: stable pod names and one state PVC per pod (same pod, same
//! volume, so a restart replays only the changelog delta).
//!
//! `OnDelete` because the operator, not the StatefulSet controller, decides when a pod goes: it
//! first hands the pod's active tasks to caught-up standbys. `Parallel` because pods do not
//! depend on each other's order; waiting for pod 0 to be ready would stall every other restore.

use crate::api::DeletionPolicy;
use crate::controller::build::{owned_metadata, pod};
use crate::controller::valid_job::ValidatedJob;
use crate::k8s::labels;
use crate::k8s::names;
use k8s_openapi::api::apps::v1::{
    StatefulSet, StatefulSetPersistentVolumeClaimRetentionPolicy, StatefulSetSpec,
    StatefulSetUpdateStrategy,
};
use k8s_openapi::api::core::v1::{
    PersistentVolumeClaim, PersistentVolumeClaimSpec, VolumeResourceRequirements,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use std::collections::BTreeMap;

/// Old revisions kept for `kubectl rollout history`; the operator never rolls back by itself.
const REVISION_HISTORY_LIMIT: i32 = 5;

/// The StatefulSet; `config_hash` goes into the pod template (see [`pod::template`]).
/// `pods_kept`: more pods than `spec.replicas` while a scale-down drains the leaving ones.
pub fn build(job: &ValidatedJob, config_hash: &str, pods_kept: Option<i32>) -> StatefulSet {
    let workers = &job.workers;
    let replicas = if workers.suspend {
        // Suspend scales to zero (after the final checkpoint); the PVCs stay (see the
        // retention policy below).
        0
    } else {
        pods_kept.map_or(workers.replicas, |kept| kept.max(workers.replicas))
    };
    StatefulSet {
        metadata: owned_metadata(job, names::stateful_set(&job.name)),
        spec: Some(StatefulSetSpec {
            replicas: Some(replicas),
            service_name: Some(names::service(&job.name)),
            pod_management_policy: Some("Parallel".into()),
            update_strategy: Some(StatefulSetUpdateStrategy {
                type_: Some("OnDelete".into()),
                rolling_update: None,
            }),
            revision_history_limit: Some(REVISION_HISTORY_LIMIT),
            selector: LabelSelector {
                match_labels: Some(labels::selector(&job.name)),
                ..LabelSelector::default()
            },
            template: pod::template(job, config_hash),
            volume_claim_templates: Some(vec![state_claim(job)]),
            persistent_volume_claim_retention_policy: Some(
                StatefulSetPersistentVolumeClaimRetentionPolicy {
                    // `deletionPolicy: Delete` removes the job's state everywhere, PVCs too.
                    when_deleted: Some(
                        match job.deletion_policy {
                            DeletionPolicy::Retain => "Retain",
                            DeletionPolicy::Delete => "Delete",
                        }
                        .into(),
                    ),
                    // Suspend and scale-down keep local state for a delta restore on return.
                    when_scaled: Some("Retain".into()),
                },
            ),
            ..StatefulSetSpec::default()
        }),
        status: None,
    }
}

/// The `state` claim template. Its fields are immutable once the StatefulSet exists: a size
/// change has to be applied to the existing PVCs, not here.
fn state_claim(job: &ValidatedJob) -> PersistentVolumeClaim {
    PersistentVolumeClaim {
        metadata: ObjectMeta {
            name: Some(names::STATE_VOLUME.into()),
            labels: Some(labels::selector(&job.name)),
            ..ObjectMeta::default()
        },
        spec: Some(PersistentVolumeClaimSpec {
            access_modes: Some(vec!["ReadWriteOnce".into()]),
            storage_class_name: job.state.storage_class_name.clone(),
            resources: Some(VolumeResourceRequirements {
                requests: Some(BTreeMap::from([(
                    "storage".to_string(),
                    job.state.storage_size.clone(),
                )])),
                ..VolumeResourceRequirements::default()
            }),
            ..PersistentVolumeClaimSpec::default()
        }),
        status: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::test_support;
    use crate::controller::test_support::{json, yaml};

    fn built(job: &ValidatedJob) -> StatefulSetSpec {
        build(job, "0123456789abcdef", None).spec.unwrap()
    }

    #[test]
    fn spec_matches_the_expected_shape() {
        let spec = json(&built(&test_support::validated()));
        for (field, expected) in [
            ("replicas", "3"),
            ("serviceName", "card-count"),
            ("podManagementPolicy", "Parallel"),
            ("updateStrategy", "type: OnDelete"),
            (
                "selector",
                "matchLabels:\n  app.kubernetes.io/instance: card-count\n  app.kubernetes.io/name: streamkeeper-worker",
            ),
            (
                "persistentVolumeClaimRetentionPolicy",
                "whenDeleted: Retain\nwhenScaled: Retain",
            ),
        ] {
            assert_eq!(spec[field], yaml(expected), "{field}");
        }
    }

    #[test]
    fn claims_the_state_volume_with_the_spec_size_and_class() {
        let spec = json(&built(&test_support::validated()));
        assert_eq!(
            spec["volumeClaimTemplates"],
            yaml(
                r#"
- apiVersion: v1
  kind: PersistentVolumeClaim
  metadata:
    name: state
    labels:
      app.kubernetes.io/instance: card-count
      app.kubernetes.io/name: streamkeeper-worker
  spec:
    accessModes: [ReadWriteOnce]
    storageClassName: fast-ssd
    resources:
      requests:
        storage: 20Gi
"#
            )
        );
        let mounts = &spec["template"]["spec"]["containers"][0]["volumeMounts"];
        assert!(
            mounts
                .as_array()
                .unwrap()
                .contains(&yaml("name: state\nmountPath: /var/lib/streamkeeper")),
            "{mounts}"
        );
    }

    #[test]
    fn a_draining_scale_down_keeps_the_leaving_pods_and_suspend_does_not() {
        let job = test_support::validated_with(|job| job.spec.replicas = 2);
        let kept = |job: &ValidatedJob, kept| build(job, "h", kept).spec.unwrap().replicas;
        assert_eq!(kept(&job, Some(3)), Some(3), "pod 2 still hands off");
        assert_eq!(kept(&job, None), Some(2));
        assert_eq!(kept(&job, Some(1)), Some(2), "never fewer than asked");
        let suspended = test_support::validated_with(|job| {
            job.spec.replicas = 2;
            job.spec.suspend = true;
        });
        assert_eq!(kept(&suspended, Some(3)), Some(0));
    }

    #[test]
    fn suspend_scales_to_zero_and_keeps_the_rest() {
        let running = built(&test_support::validated());
        let suspended = built(&test_support::validated_with(|job| job.spec.suspend = true));
        assert_eq!(suspended.replicas, Some(0));
        assert_eq!(suspended.template, running.template);
        assert_eq!(
            suspended.volume_claim_templates,
            running.volume_claim_templates
        );
    }

    #[test]
    fn delete_policy_deletes_claims_with_the_job() {
        let spec = built(&test_support::validated_with(|job| {
            job.spec.deletion_policy = DeletionPolicy::Delete;
        }));
        let policy = spec.persistent_volume_claim_retention_policy.unwrap();
        assert_eq!(policy.when_deleted.as_deref(), Some("Delete"));
        assert_eq!(policy.when_scaled.as_deref(), Some("Retain"));
    }

    #[test]
    fn selector_matches_the_pod_labels() {
        let spec = built(&test_support::validated());
        let pod_labels = spec.template.metadata.unwrap().labels.unwrap();
        for (key, value) in spec.selector.match_labels.unwrap() {
            assert_eq!(pod_labels.get(&key), Some(&value), "{key}");
        }
    }
}
