//! Which objects the operator may write: only its job's own. An object with a job's derived
//! name (its ConfigMap, Service, PodDisruptionBudget, StatefulSet, token Secret) that exists
//! without that job's owner reference is someone else's: a user's PDB named like a new job, say.
//! A forced apply would take it over (change its selector, add our owner reference), and
//! deleting the job would then have the garbage collector delete the user's object. So the
//! apply refuses instead, naming the object, as a Deployment does with a ReplicaSet it did not
//! create. The same rule guards the pods the operator deletes by label.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use std::collections::HashSet;
use std::sync::Mutex;

/// The objects this process has seen to be their job's own (job uid, kind, name), so each is
/// read once per operator start, not before every apply. An object of ours deleted and
/// replaced by a foreign one between two reconciles is still caught by the apiserver when the
/// foreign one has a controller (an object has at most one); only an ownerless one could slip
/// through, in that window.
#[derive(Debug, Default)]
pub struct Verified(Mutex<HashSet<(String, String, String)>>);

impl Verified {
    pub fn contains(&self, owner: &OwnerReference, kind: &str, name: &str) -> bool {
        self.lock()
            .contains(&(owner.uid.clone(), kind.to_string(), name.to_string()))
    }

    pub fn insert(&self, owner: &OwnerReference, kind: &str, name: &str) {
        self.lock()
            .insert((owner.uid.clone(), kind.to_string(), name.to_string()));
    }

    /// Forgets a job's objects (it is gone).
    pub fn forget(&self, owner_uid: &str) {
        self.lock().retain(|(uid, _, _)| uid != owner_uid);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashSet<(String, String, String)>> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// An existing object that is not the job's, for the refusal.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{kind} {namespace}/{name} exists and is not this job's ({held_by}): the operator does not take over objects it did not create; delete or rename it, or rename the job"
)]
pub struct ForeignObject {
    pub kind: String,
    pub namespace: String,
    pub name: String,
    /// Who holds it, in words: "no owner", or the controller's kind and name.
    pub held_by: String,
}

/// Whether `meta` (an existing object) names `owner` (by uid) among its owner references.
pub fn is_owned_by(meta: &ObjectMeta, owner: &OwnerReference) -> bool {
    meta.owner_references
        .iter()
        .flatten()
        .any(|reference| reference.uid == owner.uid)
}

/// `Err` naming the object when `existing` is not owned by `owner`.
pub fn check(
    kind: &str,
    namespace: &str,
    existing: &ObjectMeta,
    owner: &OwnerReference,
) -> Result<(), ForeignObject> {
    if is_owned_by(existing, owner) {
        return Ok(());
    }
    let held_by = existing
        .owner_references
        .iter()
        .flatten()
        .find(|reference| reference.controller == Some(true))
        .or_else(|| existing.owner_references.iter().flatten().next())
        .map_or_else(
            || "it has no owner".to_string(),
            |reference| format!("owned by {} {}", reference.kind, reference.name),
        );
    Err(ForeignObject {
        kind: kind.to_string(),
        namespace: namespace.to_string(),
        name: existing.name.clone().unwrap_or_default(),
        held_by,
    })
}

/// Whether a pod carrying the job's labels is one of the job's workers: controlled by the job's
/// StatefulSet `stateful_set`, or, orphaned (no owner at all, as `--cascade=orphan` leaves them),
/// named as that StatefulSet names its pods. A labelled pod of anyone else is left alone.
pub fn is_worker_pod(pod: &ObjectMeta, stateful_set: &str) -> bool {
    let mut owners = pod.owner_references.iter().flatten().peekable();
    if owners.peek().is_none() {
        let ordinal = pod
            .name
            .as_deref()
            .and_then(|name| name.strip_prefix(stateful_set))
            .and_then(|rest| rest.strip_prefix('-'));
        return ordinal.is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
    }
    owners.any(|owner| {
        owner.controller == Some(true) && owner.kind == "StatefulSet" && owner.name == stateful_set
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reference(kind: &str, name: &str, uid: &str) -> OwnerReference {
        OwnerReference {
            api_version: "v1".into(),
            kind: kind.into(),
            name: name.into(),
            uid: uid.into(),
            controller: Some(true),
            block_owner_deletion: Some(true),
        }
    }

    fn meta(owners: Option<Vec<OwnerReference>>) -> ObjectMeta {
        ObjectMeta {
            name: Some("payments".into()),
            owner_references: owners,
            ..ObjectMeta::default()
        }
    }

    #[test]
    fn a_labelled_pod_is_a_worker_only_when_the_jobs_stateful_set_made_it() {
        let pod = |name: &str, owners: Option<Vec<OwnerReference>>| ObjectMeta {
            name: Some(name.into()),
            owner_references: owners,
            ..ObjectMeta::default()
        };
        let set = reference("StatefulSet", "payments-worker", "uid-set");
        assert!(is_worker_pod(
            &pod("payments-worker-0", Some(vec![set])),
            "payments-worker"
        ));
        let other = reference("StatefulSet", "payments-worker-canary", "uid-2");
        assert!(!is_worker_pod(
            &pod("payments-worker-canary-0", Some(vec![other])),
            "payments-worker"
        ));
        let job = reference("Job", "debug", "uid-3");
        assert!(!is_worker_pod(
            &pod("payments-worker-1", Some(vec![job])),
            "payments-worker"
        ));
        assert!(
            is_worker_pod(&pod("payments-worker-12", None), "payments-worker"),
            "orphaned"
        );
        assert!(!is_worker_pod(
            &pod("payments-worker-debug", None),
            "payments-worker"
        ));
        assert!(!is_worker_pod(
            &pod("payments-worker-", None),
            "payments-worker"
        ));
    }

    #[test]
    fn only_an_object_naming_the_job_by_uid_is_the_jobs() {
        let job = reference("StatefulStreamJob", "payments", "uid-1");
        assert!(check("ConfigMap", "shop", &meta(Some(vec![job.clone()])), &job).is_ok());
        // The same name, another incarnation of the job (deleted and created again).
        let before = reference("StatefulStreamJob", "payments", "uid-0");
        let refused = check("ConfigMap", "shop", &meta(Some(vec![before])), &job).unwrap_err();
        assert_eq!(refused.held_by, "owned by StatefulStreamJob payments");
        let refused = check("PodDisruptionBudget", "shop", &meta(None), &job).unwrap_err();
        assert_eq!(
            refused.to_string(),
            "PodDisruptionBudget shop/payments exists and is not this job's (it has no owner): the operator does not take over objects it did not create; delete or rename it, or rename the job"
        );
    }
}
