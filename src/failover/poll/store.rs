//! Step 4 of a poll: a changed document is stored ([`crate::failover::document_store`]) before
//! any worker hears of it, with the record of the moves it makes; a new leadership reads the
//! stored document back first and goes on from it.

use super::LoopState;
use super::decide::Decision;
use crate::failover::document_store::{self, MovesRecord};
use crate::failover::job::{FailoverDeps, FailoverJob};
use crate::failover::moves;
use crate::failover::shared::Shared;
use crate::k8s::apply::ApiError;
use std::time::Instant;

/// Stores `next` as the job's document with the record of the moves it makes (if any, else the
/// last record is kept beside it); those moves, to be reported once the document is sent.
pub(super) async fn decision(
    deps: &FailoverDeps,
    job: &FailoverJob,
    state: &mut LoopState,
    decision: Decision,
    now: Instant,
) -> Result<Option<MovesRecord>, ApiError> {
    let Decision { next, copies } = decision;
    let moved = match &state.document {
        Some(current) => moves::decide(
            moves::PodsNow {
                heartbeats: &state.heartbeats,
                stopping: &state.stopping,
                desired_pods: job.desired_pods,
            },
            (current, &next),
            &copies,
            now,
            k8s_openapi::jiff::Timestamp::now(),
        ),
        None => {
            tracing::info!(job = %job.name, generation = next.generation, "first assignment");
            Vec::new()
        }
    };
    if moved.iter().any(|m| m.promoted) {
        state.failed_over_at = Some(now);
    }
    let decided = (!moved.is_empty()).then(|| MovesRecord::new(next.generation, moved));
    if decided.is_some() {
        state.moves = decided.clone();
    }
    document_store::write(
        &deps.client,
        &job.namespace,
        &job.name,
        &job.owner,
        (&next, state.moves.as_ref()),
    )
    .await?;
    state.document = Some(next);
    if decided.is_some() {
        // The leader-takeover test stops the process here: stored, neither sent nor reported.
        streamkeeper_failpoint::hit("assignment-stored-with-moves");
    }
    Ok(decided)
}

/// Reads the stored document back (a new leadership goes on from it) with the last moves
/// record: its moves go into the status again, and the ones not yet reported are reported
/// after the first poll.
pub(super) async fn read_back(
    deps: &FailoverDeps,
    job: &FailoverJob,
    state: &mut LoopState,
    shared: &Shared,
) -> Result<(), ApiError> {
    let stored = document_store::read(&deps.client, &job.namespace, &job.name).await?;
    state.document = stored.document;
    state.moves = stored.moves;
    state.unreported = None;
    if let Some(record) = &state.moves {
        if record.reported {
            for decided in &record.moves {
                shared.record_move(decided.task, decided.promoted, decided.moved.clone());
            }
        } else {
            tracing::info!(job = %job.name, generation = record.generation, moves = record.moves.len(), "reporting the moves the previous leader stored but did not report");
            state.unreported = Some(record.clone());
        }
    }
    state.read_back = true;
    Ok(())
}
