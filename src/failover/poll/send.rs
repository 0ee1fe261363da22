//! Step 5 of a poll: the document goes to the live pods that need it, through the loop's
//! [`crate::failover::delivery::Delivery`] (with the job's worker token).
//!
//! A pod needs the document when it changed, and otherwise only when its reports show it does
//! not act on it: it holds an older generation (a delivery was lost or refused), or it is
//! another process than the one the document was last sent to (a restarted worker acts on no
//! document until it is sent one, even though its volume records the generation). An
//! unchanged document is not sent again to a pod that acts on it: at 4,000 pods, sending it
//! every second was 4,000 requests a second for nothing. A worker whose reports do not say
//! which generation it holds and which process it is (an older version) gets it every
//! [`RESEND_EVERY`], as before. A pod that did not answer this poll gets nothing until it does.

use super::{LoopState, RESEND_EVERY};
use crate::failover::job::FailoverJob;
use std::time::Instant;

/// What a pod's last answer said it acts on.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(in crate::failover) struct Holding {
    /// The generation it records (`None` for a worker that does not report it).
    pub(super) generation: Option<u64>,
    /// The process that answered (`None` for a worker that does not report it).
    pub(super) process: Option<String>,
}

/// The document last sent to a pod.
#[derive(Debug, Clone)]
pub(in crate::failover) struct Sent {
    generation: u64,
    /// The process that answered the poll before the send.
    process: Option<String>,
    at: Instant,
}

/// Whether a pod that was `sent` a document (by this loop) and answered `holding` at this poll
/// needs `generation` sent (again) `now`.
fn needs(sent: Option<&Sent>, holding: Option<&Holding>, generation: u64, now: Instant) -> bool {
    let Some(sent) = sent else {
        return true;
    };
    let again = now.saturating_duration_since(sent.at) >= RESEND_EVERY;
    if sent.generation != generation {
        return true;
    }
    let Some(holding) = holding else {
        // No answer this poll: its next answer tells whether it holds the document. (Sending
        // on every silence resent to every pod that missed a poll under load.)
        return false;
    };
    match (&holding.process, holding.generation) {
        // Restarted since (or answering for the first time): it acts on nothing yet, even when
        // its volume records the generation.
        (Some(process), _) if sent.process.as_ref() != Some(process) => true,
        (Some(_), Some(held)) => held < generation && again,
        // A worker that does not say what it holds, or which process it is: the old pace.
        _ => again,
    }
}

/// Sends the current document to every live pod when it changed (or when the loop asks for it
/// again: a new worker token), else to the live pods that need it.
pub(super) fn document(job: &FailoverJob, state: &mut LoopState, changed: bool, now: Instant) {
    let Some(document) = &state.document else {
        return;
    };
    let everyone = changed || state.sent_at.is_none();
    let targets: Vec<(String, String)> = state
        .pods
        .iter()
        .filter(|pod| state.heartbeats.reachable(&pod.facts.name, now))
        .filter(|pod| !state.stopping.contains(&pod.facts.name))
        .filter(|pod| {
            let name = &pod.facts.name;
            everyone
                || needs(
                    state.sent.get(name),
                    state.holding.get(name),
                    document.generation,
                    now,
                )
        })
        .filter_map(|pod| Some((pod.facts.name.clone(), pod.ip.clone()?)))
        .collect();
    // Only the pods listed now: the memory of a job's loop stays as large as its pods.
    let listed: std::collections::BTreeSet<&str> = state
        .pods
        .iter()
        .map(|pod| pod.facts.name.as_str())
        .collect();
    state.sent.retain(|pod, _| listed.contains(pod.as_str()));
    if targets.is_empty() {
        return;
    }
    for (pod, _) in &targets {
        let process = state
            .holding
            .get(pod)
            .and_then(|holding| holding.process.clone());
        let sent = Sent {
            generation: document.generation,
            process,
            at: now,
        };
        state.sent.insert(pod.clone(), sent);
    }
    state.delivery.send(job.port, document, targets.into_iter());
    state.sent_at = Some(now);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn holding(generation: u64, process: &str) -> Holding {
        Holding {
            generation: Some(generation),
            process: Some(process.into()),
        }
    }

    fn sent(generation: u64, process: Option<&str>, at: Instant) -> Sent {
        Sent {
            generation,
            process: process.map(str::to_string),
            at,
        }
    }

    #[test]
    fn a_pod_acting_on_the_document_is_not_sent_it_again() {
        let at = Instant::now();
        let later = at + Duration::from_secs(30);
        let to_a = sent(7, Some("a"), at);
        assert!(!needs(Some(&to_a), Some(&holding(7, "a")), 7, later));
    }

    #[test]
    fn a_restarted_process_is_sent_the_document_at_once() {
        let at = Instant::now();
        // Its volume records generation 7, but the new process acts on nothing yet.
        let to_a = sent(7, Some("a"), at);
        assert!(needs(Some(&to_a), Some(&holding(7, "b")), 7, at));
        // Without a volume record either.
        let fresh = Holding {
            generation: None,
            process: Some("b".into()),
        };
        assert!(needs(Some(&to_a), Some(&fresh), 7, at));
    }

    #[test]
    fn a_pod_behind_gets_it_again_at_the_old_pace() {
        let at = Instant::now();
        let to_a = sent(7, Some("a"), at);
        let behind = holding(6, "a");
        assert!(!needs(Some(&to_a), Some(&behind), 7, at + RESEND_EVERY / 2));
        assert!(needs(Some(&to_a), Some(&behind), 7, at + RESEND_EVERY));
    }

    #[test]
    fn a_pod_never_sent_it_or_first_answering_gets_it() {
        let at = Instant::now();
        assert!(needs(None, Some(&holding(7, "a")), 7, at));
        // Sent before its first answer: the process that took it is not known yet.
        let before_answer = sent(7, None, at);
        assert!(needs(Some(&before_answer), Some(&holding(7, "a")), 7, at));
        assert!(needs(
            Some(&sent(6, Some("a"), at)),
            Some(&holding(6, "a")),
            7,
            at
        ));
    }

    #[test]
    fn an_older_worker_that_does_not_say_what_it_holds_gets_it_every_second() {
        let at = Instant::now();
        let to_a = sent(7, None, at);
        let silent_about_it = Holding::default();
        assert!(!needs(Some(&to_a), Some(&silent_about_it), 7, at));
        assert!(needs(
            Some(&to_a),
            Some(&silent_about_it),
            7,
            at + RESEND_EVERY
        ));
        assert!(
            !needs(Some(&to_a), None, 7, at + RESEND_EVERY),
            "no answer this poll: wait for one"
        );
    }
}
