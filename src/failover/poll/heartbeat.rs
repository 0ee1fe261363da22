//! Step 2 of a poll: the heartbeat. Every pod with an address has a link that follows its
//! report stream ([`crate::failover::links`]); what each link heard last (reports, a refusal or
//! silence) goes into the pure bookkeeping of [`super::health`].

use super::LoopState;
use super::send::Holding;
use crate::failover::health::Poll;
use crate::failover::job::FailoverJob;
use crate::failover::links::{ASK_TIMEOUT, Heard, Target};
use std::time::Instant;
use streamkeeper_contract::TaskReport;
use streamkeeper_contract::report_stream;

/// Reads what every pod's link heard; records each answer (or its absence).
pub(super) async fn poll(
    job: &FailoverJob,
    state: &mut LoopState,
) -> Vec<(String, Vec<TaskReport>)> {
    state.heartbeats.suspect_after(job.heartbeat_timeout);
    let beat = report_stream::beat_for(job.heartbeat_timeout);
    let targets = state.pods.iter().filter_map(|pod| {
        let target = Target {
            uid: pod.uid.clone(),
            ip: pod.ip.clone()?,
            port: job.port,
            beat,
        };
        Some((pod.facts.name.clone(), target))
    });
    state.links.follow(targets);
    let asked = Instant::now();
    state.links.first_answers(ASK_TIMEOUT).await;
    let now = Instant::now();
    let heard: Vec<(String, Heard)> = state
        .pods
        .iter()
        .map(|pod| {
            let name = pod.facts.name.clone();
            // No address: not started yet, silent, so it counts as starting until its grace
            // is over.
            let heard = state.links.heard(&name).unwrap_or(Heard::Nothing);
            (name, heard)
        })
        .collect();
    let mut reports = Vec::new();
    state.stopping.clear();
    state.holding.clear();
    state.answered.clear();
    for (pod, heard) in heard {
        // An answer counts from when its frame came, not from this poll: the silence after it
        // is measured from there.
        let (poll, at) = match &heard {
            Heard::Answered(document, at) => (Poll::Answered(document.process.as_deref()), *at),
            Heard::Refused(_) => (Poll::Refused, now),
            Heard::Silent(since, _) => (Poll::Silent(*since), now),
            Heard::Nothing => (Poll::Silent(asked), now),
        };
        let was_unanswered = state.heartbeats.unanswered(&pod);
        state.heartbeats.record(&pod, poll, at);
        if state.heartbeats.unanswered(&pod) && !was_unanswered {
            // Once per silence: the first unanswered question, with why, is what tells a slow
            // pod from a lost one when its tasks move a few polls later.
            let error = match &heard {
                Heard::Refused(error) | Heard::Silent(_, error) => error.as_str(),
                Heard::Nothing | Heard::Answered(..) => "no address, or no answer yet",
            };
            let last_answer = state.heartbeats.silent_for(&pod, now).unwrap_or_default();
            let last_answer_seconds = last_answer.as_secs_f64();
            // A refusal is news (the process is gone); a missed beat or two is often only a
            // busy node or operator, and is judged at the heartbeat timeout, which logs the move.
            if matches!(heard, Heard::Refused(_)) {
                tracing::warn!(job = %job.name, %pod, %error, last_answer_seconds, "a worker pod refused the heartbeat");
            } else {
                tracing::info!(job = %job.name, %pod, %error, last_answer_seconds, "a worker pod left the heartbeat unanswered");
            }
        }
        if let Heard::Answered(document, _) = heard {
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
            reports.push((pod.clone(), document.tasks.clone()));
            state.answered.insert(pod, document);
        }
    }
    reports
}
