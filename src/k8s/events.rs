//! Events about a job: what `kubectl describe ssj` and `kubectl get events` show. Publishing is
//! best effort: a failure is logged and never fails the reconcile.

use crate::api::StatefulStreamJob;
use kube::Client;
use kube::api::Api;
use kube::runtime::events::{Event, EventType, Recorder};
use kube::{Resource, ResourceExt};

/// Publishes an Event about `job`; a failure is logged, never fails the reconcile.
pub async fn publish(
    recorder: &Recorder,
    job: &StatefulStreamJob,
    warning: bool,
    reason: &str,
    note: String,
) {
    let event = event(warning, reason, "Reconcile", note);
    if let Err(error) = recorder.publish(&event, &job.object_ref(&())).await {
        tracing::warn!(job = %job.name_any(), %error, "could not publish an Event");
    }
}

/// An Event with `reason` and `note` (cut to the 1 kB the Events API takes), a Warning when
/// `warning`, for `action`.
pub fn event(warning: bool, reason: &str, action: &str, note: String) -> Event {
    Event {
        type_: if warning {
            EventType::Warning
        } else {
            EventType::Normal
        },
        reason: reason.to_string(),
        note: Some(note.chars().take(1000).collect()),
        action: action.into(),
        secondary: None,
    }
}

/// The job object an Event about `job` refers to; `None` when it is gone.
pub async fn job_reference(
    client: &Client,
    namespace: &str,
    name: &str,
) -> Option<StatefulStreamJob> {
    let jobs: Api<StatefulStreamJob> = Api::namespaced(client.clone(), namespace);
    jobs.get_opt(name).await.ok().flatten()
}
