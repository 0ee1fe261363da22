//! Step 6 of a poll: what the rest of the operator learns. The moves a stored decision made
//! are reported (log, counter, Event, the job's status; [`super::moves`]) and the stored record
//! marked reported; the loop's view (owners, standbys, lags, unreachable pods) and the reports
//! of the pods that answered are published for the reconciles to read.

use super::LoopState;
use crate::failover::document_store::{self, MovesRecord};
use crate::failover::job::{FailoverDeps, FailoverJob};
use crate::failover::moves;
use crate::failover::shared::{Shared, locked, view_of};
use crate::k8s::apply::ApiError;
use std::time::Instant;
use streamkeeper_contract::TaskReport;

/// Reports a stored record's moves and stores it again marked reported. A move whose new
/// owner already commits in `reports` is not timed: this leader cannot tell when that began.
pub(super) async fn report_moves(
    deps: &FailoverDeps,
    job: &FailoverJob,
    shared: &Shared,
    state: &mut LoopState,
    mut record: MovesRecord,
    reports: &[(String, Vec<TaskReport>)],
) -> Result<(), ApiError> {
    let committed = moves::committed_already(&record.moves, reports);
    moves::report(
        deps,
        job,
        shared,
        &record.moves,
        &committed,
        &mut state.pending_moves,
    )
    .await;
    record.reported = true;
    state.moves = Some(record);
    if let Some(document) = &state.document {
        document_store::write(
            &deps.client,
            &job.namespace,
            &job.name,
            &job.owner,
            (document, state.moves.as_ref()),
        )
        .await?;
    }
    Ok(())
}

/// Publishes the loop's view of the job for the reconciles.
pub(super) fn view(
    job: &FailoverJob,
    state: &LoopState,
    shared: &Shared,
    reports: &[(String, Vec<TaskReport>)],
    now: Instant,
) {
    let unreachable = state
        .pods
        .iter()
        .filter(|pod| !state.heartbeats.reachable(&pod.facts.name, now))
        .map(|pod| pod.facts.name.clone())
        .collect();
    *locked(&shared.reports) = state.answered.clone();
    shared.publish(view_of(
        job.acceptable_recovery_lag,
        state.document.as_ref(),
        reports,
        state.pods.iter().map(|p| p.facts.name.clone()).collect(),
        unreachable,
    ));
}
