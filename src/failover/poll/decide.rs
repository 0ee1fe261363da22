//! Step 3 of a poll: the next assignment, decided by the contract's rule from the pods that may
//! hold a task now and each copy's lag. No decision is made while a new job's first document
//! waits for its pods, or while no pod may hold a task.

use super::{BALANCE_AFTER_FAILOVER, FIRST_DECISION_WAIT, LoopState};
use crate::failover::health::Heartbeats;
use crate::failover::job::FailoverJob;
use crate::failover::rule_inputs::{self, PodFacts};
use crate::failover::shared::DrainTarget;
use crate::failover::{moves, scale_down};
use std::collections::BTreeMap;
use std::time::Instant;
use streamkeeper_contract::GenerationsExhausted;
use streamkeeper_contract::{
    AssignmentDocument, AssignmentInputs, CopyLag, TaskReport, next_assignment,
};

/// The next document and the copies' lags it was decided from (the moves it makes are judged
/// from them when it is stored).
pub(super) struct Decision {
    pub next: AssignmentDocument,
    pub copies: BTreeMap<u32, Vec<CopyLag>>,
}

/// The next document, or `None` when this poll decides nothing.
pub(super) fn next(
    job: &FailoverJob,
    state: &mut LoopState,
    draining: &Option<DrainTarget>,
    reports: &[(String, Vec<TaskReport>)],
    now: Instant,
) -> Result<Option<Decision>, GenerationsExhausted> {
    let pods: Vec<PodFacts> = state.pods.iter().map(|p| p.facts.clone()).collect();
    // A draining pod keeps answering (it hands its tasks over) but takes no copy, and so does
    // a worker shutting down (deleted by someone else): it would never start one. With
    // standbys, a pod a scale-down removes drains too, before the StatefulSet lets it go.
    let places = rule_inputs::places(&pods, |pod| {
        draining.as_ref().is_none_or(|target| target.pod != pod)
            && !(job.standby_replicas > 0 && scale_down::leaving(pod, job.desired_pods))
            && !state.stopping.contains(pod)
            && state.heartbeats.alive(pod, now)
    });
    let answered = pods
        .iter()
        .filter(|p| state.heartbeats.answered(&p.name))
        .count();
    let waiting_for_pods = state.document.is_none()
        && answered < usize::try_from(job.desired_pods).unwrap_or(0)
        && state.started.elapsed() < FIRST_DECISION_WAIT;
    if no_decision(places.is_empty(), waiting_for_pods, &mut state.heartbeats) {
        return Ok(None);
    }
    let copies = rule_inputs::copies(reports, job.acceptable_recovery_lag);
    let failover_settling = state
        .failed_over_at
        .is_some_and(|at| now.saturating_duration_since(at) < BALANCE_AFTER_FAILOVER);
    let settling = moves::settling(&state.pending_moves);
    let fenced_actives = rule_inputs::fenced_actives(state.document.as_ref(), reports);
    if !fenced_actives.is_empty() {
        tracing::warn!(job = %job.name, tasks = ?fenced_actives, "an owner of the document in force was fenced by a worker acting on an older one; issuing the document again under a new generation");
    }
    let next = next_assignment(AssignmentInputs {
        tasks: job.tasks,
        pods: &places,
        copies: &copies,
        current: state.document.as_ref(),
        standby_replicas: job.standby_replicas,
        acceptable_recovery_lag: job.acceptable_recovery_lag,
        balance: !failover_settling,
        settling: &settling,
        newest_recorded_generation: state.newest_recorded_generation,
        fenced_actives: &fenced_actives,
    })?;
    Ok(Some(Decision { next, copies }))
}

/// Whether this poll decides nothing: no pod may hold a task, or the first decision waits for
/// the pods. With no place at all there is no decision to make without the replaced
/// processes: nothing can move, so they count by their new processes from now on. Otherwise a
/// job whose every pod was recreated at once (a resume seen across the loop's listings, a whole
/// restart) would wait for them forever.
fn no_decision(places_empty: bool, waiting_for_pods: bool, heartbeats: &mut Heartbeats) -> bool {
    if places_empty && !waiting_for_pods {
        heartbeats.replacements_decided();
    }
    places_empty || waiting_for_pods
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::failover::health::Poll;

    #[test]
    fn a_job_whose_every_pod_was_recreated_at_once_runs_on_the_new_processes() {
        let start = Instant::now();
        let mut beats = Heartbeats::default();
        for pod in ["job-0", "job-1"] {
            beats.record(pod, Poll::Answered(Some("1-100")), start);
            beats.replaced(pod);
            beats.record(pod, Poll::Answered(Some("1-200")), start);
        }
        assert!(!beats.alive("job-0", start) && !beats.alive("job-1", start));
        assert!(
            no_decision(true, false, &mut beats),
            "no place: nothing decided"
        );
        assert!(
            beats.alive("job-0", start) && beats.alive("job-1", start),
            "the next poll places the tasks on the new processes"
        );
    }

    #[test]
    fn waiting_for_the_pods_keeps_a_replaced_process_down() {
        let start = Instant::now();
        let mut beats = Heartbeats::default();
        beats.record("job-0", Poll::Answered(Some("1-100")), start);
        beats.replaced("job-0");
        assert!(no_decision(false, true, &mut beats));
        assert!(!beats.alive("job-0", start));
        assert!(
            !no_decision(false, false, &mut beats),
            "a place: the caller decides"
        );
    }
}
