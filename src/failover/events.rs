//! Events about a job from its failover loop: moves, and pods that refuse the assignment.

use super::job::{FailoverDeps, FailoverJob};
use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::Recorder;

/// Publishes an Event about `job`; a failure is logged, never stops the loop.
pub async fn publish(
    deps: &FailoverDeps,
    job: &FailoverJob,
    warning: bool,
    reason: &str,
    action: &str,
    note: String,
) {
    let reference = ObjectReference {
        api_version: Some(job.owner.api_version.clone()),
        kind: Some(job.owner.kind.clone()),
        name: Some(job.name.clone()),
        namespace: Some(job.namespace.clone()),
        uid: Some(job.owner.uid.clone()),
        ..ObjectReference::default()
    };
    let event = crate::k8s::events::event(warning, reason, action, note);
    // A recorder of its own: a shared one folds a second Event with the same reason into the
    // first one's series (a series keeps the first note), so a pod's second task or a task's
    // second move would be missing from `kubectl get events`.
    let recorder = Recorder::new(deps.client.clone(), deps.reporter.clone());
    if let Err(error) = recorder.publish(&event, &reference).await {
        tracing::warn!(job = %job.name, %error, "could not publish an Event");
    }
}
