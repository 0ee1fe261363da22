//! The PodDisruptionBudget `<job>`: node drains take at most one worker pod at a time, so every
//! task keeps a warm standby to fail over to while the other pods move.

use crate::controller::build::owned_metadata;
use crate::controller::valid_job::ValidatedJob;
use crate::k8s::labels;
use crate::k8s::names;
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

pub fn build(job: &ValidatedJob) -> PodDisruptionBudget {
    PodDisruptionBudget {
        metadata: owned_metadata(job, names::pod_disruption_budget(&job.name)),
        spec: Some(PodDisruptionBudgetSpec {
            max_unavailable: Some(IntOrString::Int(1)),
            selector: Some(LabelSelector {
                match_labels: Some(labels::selector(&job.name)),
                ..LabelSelector::default()
            }),
            // A pod that is not ready (stuck restoring, crash-looping) serves no task, so
            // evicting it costs nothing; without this a single such pod blocks every drain.
            unhealthy_pod_eviction_policy: Some("AlwaysAllow".into()),
            ..PodDisruptionBudgetSpec::default()
        }),
        status: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::test_support::{self, json, yaml};

    #[test]
    fn allows_one_pod_down_at_a_time() {
        let pdb = build(&test_support::validated());
        assert_eq!(pdb.metadata.name.as_deref(), Some("card-count"));
        assert_eq!(
            json(&pdb.spec),
            yaml(
                r#"
maxUnavailable: 1
unhealthyPodEvictionPolicy: AlwaysAllow
selector:
  matchLabels:
    app.kubernetes.io/instance: card-count
    app.kubernetes.io/name: streamkeeper-worker
"#
            )
        );
    }
}
