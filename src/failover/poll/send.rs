//! Step 5 of a poll: the document goes to every pod that answers and is not stopping, through
//! the loop's [`crate::failover::delivery::Delivery`] (with the job's worker token).

use super::{LoopState, RESEND_EVERY};
use crate::failover::job::FailoverJob;
use std::time::Instant;

/// Sends the current document to every live pod when it changed, or again every
/// [`RESEND_EVERY`] (to a pod that restarted, say).
pub(super) fn document(job: &FailoverJob, state: &mut LoopState, changed: bool, now: Instant) {
    if !changed && state.sent_at.is_some_and(|at| at.elapsed() < RESEND_EVERY) {
        return;
    }
    let Some(document) = &state.document else {
        return;
    };
    let targets = state
        .pods
        .iter()
        .filter(|pod| state.heartbeats.reachable(&pod.facts.name, now))
        .filter(|pod| !state.stopping.contains(&pod.facts.name))
        .filter_map(|pod| Some((pod.facts.name.clone(), pod.ip.clone()?)));
    state.delivery.send(job.port, document, targets);
    state.sent_at = Some(Instant::now());
}
