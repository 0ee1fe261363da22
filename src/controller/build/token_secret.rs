//! The job's worker token Secret `<job>-worker-token`, as its metadata only.
//!
//! The token itself is not built here: a builder is pure, and a token must be random and made
//! once. [`crate::k8s::worker_token::ensure`] creates the Secret with a fresh token when it
//! does not exist and reads it back when it does; this is only what the Secret must look like
//! around the token (name, labels, the job as controlling owner, so it goes with the job).

use crate::controller::build::owned_metadata;
use crate::controller::valid_job::ValidatedJob;
use crate::k8s::names;
use k8s_openapi::api::core::v1::Secret;

/// The Secret `apply` creates when it is missing; `data` is filled in then.
pub fn build(job: &ValidatedJob) -> Secret {
    Secret {
        metadata: owned_metadata(job, names::worker_token_secret(&job.name)),
        type_: Some("Opaque".into()),
        ..Secret::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::test_support::{self, json, yaml};

    #[test]
    fn the_secret_is_named_for_the_job_owned_by_it_and_holds_no_token_yet() {
        assert_eq!(
            json(&build(&test_support::validated())),
            json(&yaml(
                r#"
apiVersion: v1
kind: Secret
type: Opaque
metadata:
  name: card-count-worker-token
  namespace: payments
  labels:
    app.kubernetes.io/instance: card-count
    app.kubernetes.io/managed-by: streamkeeper
    app.kubernetes.io/name: streamkeeper-worker
    streamkeeper.dev/job: card-count
  ownerReferences:
    - apiVersion: streamkeeper.dev/v1alpha1
      kind: StatefulStreamJob
      name: card-count
      uid: 7d0e5c1a-3f0b-4c55-9a52-1b2f5e6a7c80
      controller: true
      blockOwnerDeletion: true
"#
            ))
        );
    }
}
