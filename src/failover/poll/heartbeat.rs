//! Step 2 of a poll: the heartbeat. Every pod is asked for its task reports at once; each
//! answer, refusal or silence goes into the pure bookkeeping of [`super::health`].

use super::send::Holding;
use super::{LoopState, POLL_TIMEOUT};
use crate::adapters::worker_client;
use crate::failover::health::Poll;
use crate::failover::job::FailoverJob;
use std::time::Instant;
use streamkeeper_contract::TaskReport;

/// Asks every pod for its reports at once; records each answer (or its absence).
pub(super) async fn poll(
    job: &FailoverJob,
    state: &mut LoopState,
) -> Vec<(String, Vec<TaskReport>)> {
    state.heartbeats.suspect_after(job.heartbeat_timeout);
    let calls = state.pods.iter().map(|pod| async move {
        let answer = match &pod.ip {
            Some(ip) => Some(worker_client::task_reports(ip, job.port, POLL_TIMEOUT).await),
            // Not started yet: silent, so it counts as starting until its grace is over.
            None => None,
        };
        (pod.facts.name.clone(), answer)
    });
    let asked = Instant::now();
    let answers = futures::future::join_all(calls).await;
    let now = Instant::now();
    let mut reports = Vec::new();
    state.stopping.clear();
    state.holding.clear();
    for (pod, answer) in answers {
        let poll = match &answer {
            Some(Ok(document)) => Poll::Answered(document.process.as_deref()),
            Some(Err(worker_client::WorkerCallError::Unreachable { source, .. }))
                if source.kind() == std::io::ErrorKind::ConnectionRefused =>
            {
                Poll::Refused
            }
            Some(Err(_)) | None => Poll::Silent(asked),
        };
        let was_unanswered = state.heartbeats.unanswered(&pod);
        state.heartbeats.record(&pod, poll, now);
        if state.heartbeats.unanswered(&pod) && !was_unanswered {
            // Once per silence: the first unanswered question, with why, is what tells a slow
            // pod from a lost one when its tasks move a few polls later.
            let error = match &answer {
                Some(Err(error)) => error.to_string(),
                _ => "no address".to_string(),
            };
            let last_answer = state.heartbeats.silent_for(&pod, now).unwrap_or_default();
            tracing::warn!(job = %job.name, %pod, %error, last_answer_seconds = last_answer.as_secs_f64(), "a worker pod left the heartbeat unanswered");
        }
        if let Some(Ok(document)) = answer {
            if document.stopping {
                state.stopping.insert(pod.clone());
            }
            state.newest_recorded_generation = state
                .newest_recorded_generation
                .max(document.generation.unwrap_or(0));
            let holding = Holding {
                generation: document.generation,
                process: document.process.clone(),
            };
            state.holding.insert(pod.clone(), holding);
            reports.push((pod, document.tasks));
        }
    }
    reports
}
