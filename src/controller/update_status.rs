//! Step 7 of the pipeline (validate → read facts → build → apply → observe → judge → **update
//! status**): merge what the reconcile observed into the job's status, write it only when it
//! changed, and publish an Event for each watched condition that changed.

use crate::api::{StatefulStreamJob, StatefulStreamJobStatus};
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
    let fields = serde_json::to_value(&next).unwrap_or_default();
    if as_stored(&fields).is_some_and(|stored| stored == existing) {
        return Ok(());
    }
    let namespace = job.namespace().unwrap_or_default();
    let name = job.name_any();
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

/// The status as the apiserver will hold it once `fields` are written, to compare with the one
/// it holds now. A time is written in whole seconds (`metav1.Time`), so a time read at a finer
/// grain (a checkpoint's `createdAtMs`, a move decided by this process's clock) must not count
/// as a change at every reconcile: it did, and every job with a checkpoint had its status
/// patched once a minute for nothing.
fn as_stored(fields: &serde_json::Value) -> Option<StatefulStreamJobStatus> {
    serde_json::from_value(fields.clone()).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{TaskCheckpoint, TaskStatus};

    fn with_checkpoint_at(millisecond: i64) -> StatefulStreamJobStatus {
        StatefulStreamJobStatus {
            tasks: vec![TaskStatus {
                task: 0,
                last_checkpoint: Some(TaskCheckpoint {
                    sequence: 4,
                    time: Some(Time(Timestamp::from_millisecond(millisecond).unwrap())),
                    input_offset: 10,
                    changelog_offset: 20,
                    bytes: 100,
                }),
                ..TaskStatus::default()
            }],
            ..StatefulStreamJobStatus::default()
        }
    }

    #[test]
    fn a_time_finer_than_a_second_is_no_change_but_another_second_is() {
        let held = with_checkpoint_at(1_765_000_000_000);
        let written = |status: &StatefulStreamJobStatus| {
            as_stored(&serde_json::to_value(status).unwrap()).unwrap()
        };
        let same_second = with_checkpoint_at(1_765_000_000_789);
        assert_ne!(same_second, held, "in memory the two differ");
        assert_eq!(written(&same_second), held);
        assert_ne!(written(&with_checkpoint_at(1_765_000_001_000)), held);
    }
}
