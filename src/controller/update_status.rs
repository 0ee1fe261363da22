//! Step 7 of the pipeline (validate → read facts → build → apply → observe → judge → **update
//! status**): merge what the reconcile observed into the job's status, write it only when it
//! changed, and publish an Event for each watched condition that changed.

use crate::api::StatefulStreamJob;
use crate::controller::Context;
use crate::controller::apply::ApiError;
use crate::controller::judge::next_status::{Observation, next_status, transition_events};
use crate::k8s::events::publish;
use crate::k8s::status::merge_status;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;

/// Writes the merged status of `job` (nothing when it is unchanged) and the Events of its
/// condition transitions.
pub async fn update_status(
    ctx: &Context,
    job: &StatefulStreamJob,
    observation: Observation,
) -> Result<(), ApiError> {
    let existing = job.status.clone().unwrap_or_default();
    let next = next_status(&existing, observation, &Time(Timestamp::now()));
    if next == existing {
        return Ok(());
    }
    let namespace = job.namespace().unwrap_or_default();
    let name = job.name_any();
    let fields = serde_json::to_value(&next).unwrap_or_default();
    merge_status(
        (&ctx.client, &ctx.status_writes),
        (&namespace, &name),
        fields,
        "update the status of",
    )
    .await?;
    for event in transition_events(&existing.conditions, &next.conditions) {
        publish(&ctx.recorder, job, event.warning, &event.reason, event.note).await;
    }
    Ok(())
}
