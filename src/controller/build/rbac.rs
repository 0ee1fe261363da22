//! The workers' identity: ServiceAccount, Role and RoleBinding `<job>-worker`.
//!
//! Least privilege: a worker reads its assignment document (one named ConfigMap) and may look up
//! pods (to learn a peer's address and phase); it writes nothing through the API. Secrets reach
//! it as mounted files, so it gets no access to Secrets at all.

use crate::controller::build::owned_metadata;
use crate::controller::names;
use crate::controller::validate::{ServiceAccountChoice, ValidatedJob};
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::{PolicyRule, Role, RoleBinding, RoleRef, Subject};

/// Our ServiceAccount, or `None` when the user named their own.
pub fn service_account(job: &ValidatedJob) -> Option<ServiceAccount> {
    match &job.workers.service_account {
        ServiceAccountChoice::Operator(name) => Some(ServiceAccount {
            metadata: owned_metadata(job, name.clone()),
            ..ServiceAccount::default()
        }),
        ServiceAccountChoice::User(_) => None,
    }
}

/// `get/list/watch` on the job's assignment ConfigMap only (`resourceNames` limits list and
/// watch too, so the worker must list/watch with `fieldSelector=metadata.name=<job>-assignment`),
/// and `get` on pods in the namespace.
pub fn role(job: &ValidatedJob) -> Role {
    Role {
        metadata: owned_metadata(job, names::worker_role(&job.name)),
        rules: Some(vec![
            PolicyRule {
                api_groups: Some(vec![String::new()]),
                resources: Some(vec!["configmaps".into()]),
                resource_names: Some(vec![names::assignment_config_map(&job.name)]),
                verbs: vec!["get".into(), "list".into(), "watch".into()],
                ..PolicyRule::default()
            },
            PolicyRule {
                api_groups: Some(vec![String::new()]),
                resources: Some(vec!["pods".into()]),
                verbs: vec!["get".into()],
                ..PolicyRule::default()
            },
        ]),
    }
}

/// Binds [`role`] to the workers' service account, whoever created it.
pub fn role_binding(job: &ValidatedJob) -> RoleBinding {
    RoleBinding {
        metadata: owned_metadata(job, names::worker_role_binding(&job.name)),
        role_ref: RoleRef {
            api_group: "rbac.authorization.k8s.io".into(),
            kind: "Role".into(),
            name: names::worker_role(&job.name),
        },
        subjects: Some(vec![Subject {
            kind: "ServiceAccount".into(),
            name: job.workers.service_account.name().to_string(),
            namespace: Some(job.namespace.clone()),
            ..Subject::default()
        }]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::fixtures::{self, json, yaml};

    #[test]
    fn role_grants_exactly_the_listed_verbs() {
        let role = role(&fixtures::validated());
        assert_eq!(role.metadata.name.as_deref(), Some("card-count-worker"));
        assert_eq!(
            json(&role.rules),
            yaml(
                r#"
- apiGroups: [""]
  resources: [configmaps]
  resourceNames: [card-count-assignment]
  verbs: [get, list, watch]
- apiGroups: [""]
  resources: [pods]
  verbs: [get]
"#
            )
        );
    }

    #[test]
    fn binding_names_our_service_account_by_default() {
        let job = fixtures::validated();
        let account = service_account(&job).unwrap();
        assert_eq!(account.metadata.name.as_deref(), Some("card-count-worker"));
        assert_eq!(
            json(&role_binding(&job)),
            json(&yaml(
                r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: card-count-worker
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
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: Role
  name: card-count-worker
subjects:
  - kind: ServiceAccount
    name: card-count-worker
    namespace: payments
"#
            ))
        );
    }

    #[test]
    fn a_user_service_account_is_bound_not_created() {
        let job = fixtures::validated_with(|job| {
            job.spec.pod.service_account_name = Some("payments-workers".into());
        });
        assert_eq!(service_account(&job), None);
        let subjects = role_binding(&job).subjects.unwrap();
        assert_eq!(subjects[0].name, "payments-workers");
    }
}
