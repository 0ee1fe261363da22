//! Delivering the document to the pods: each `PUT /v1/assignment` on its own task, with the
//! job's worker token, and what the loop learns from the answers.
//!
//! The token rotates when its Secret is deleted: the next reconcile writes a new one, and the
//! kubelet updates each pod's mounted file on its own schedule (a minute or more later). So for
//! a while the Secret and the pods' files differ, and the pods do not all change at once. The
//! loop keeps the two tokens that can be in a pod's file: the one the Secret holds now and the
//! one before it ([`Tokens`]). A call refused with the current one (401) is tried once more with
//! the previous one, and any 401 makes the loop read the Secret again (at most once a second),
//! so a rotation is learned at the first refusal, not at the next operator restart.
//!
//! Why the operator tries both rather than the worker accepting both: only the operator learns
//! the new token before the kubelet delivers it. A worker cannot accept a token its file does not
//! hold yet, so accepting "the previous and the current" on the worker would cover only the
//! other side of the window (an operator still sending the old token), which re-reading the
//! Secret on the first 401 already covers. And a worker keeps accepting exactly the token it is
//! given: an old token stops opening it as soon as its file changes.
//!
//! A pod that refuses every token the loop holds, after a fresh read of the Secret, is reported
//! once (a Warning Event `AssignmentRefused`, until it takes a document again); every refused
//! delivery is counted by reason (`streamkeeper_operator_assignment_refusals_total`).

use super::events;
use super::job::{FailoverDeps, FailoverJob};
use crate::adapters::worker_client::{self, RefusalReason, WorkerCallError};
use crate::k8s::worker_token::{self, WorkerTokenError};
use crate::vocabulary::reasons;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};
use streamkeeper_contract::{AssignmentDocument, WorkerToken};
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};

/// How long one delivery of the document may take.
const SEND_TIMEOUT: Duration = Duration::from_millis(2_500);
/// The shortest time between two reads of the token Secret after refusals.
const REREAD_AFTER: Duration = Duration::from_secs(1);

/// The tokens a pod's mounted file may hold: the Secret's current one first, then the one it
/// replaced (a pod whose file the kubelet has not updated yet).
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Tokens {
    current: Option<WorkerToken>,
    previous: Option<WorkerToken>,
}

impl Tokens {
    /// Takes what the Secret holds now; true when that is a new token (the current one becomes
    /// the previous one). A Secret that is gone for a moment (deleted, not yet written again)
    /// changes nothing: the pods' files still hold the last token.
    pub fn learn(&mut self, read: Option<WorkerToken>) -> bool {
        match read {
            Some(token) if self.current.as_ref() != Some(&token) => {
                self.previous = self.current.replace(token);
                true
            }
            _ => false,
        }
    }

    /// The tokens to try, in order; empty before the Secret was ever read.
    pub fn to_try(&self) -> Vec<WorkerToken> {
        self.current.iter().chain(&self.previous).cloned().collect()
    }

    pub fn known(&self) -> bool {
        self.current.is_some()
    }
}

/// Whether a user should hear of a refusal: a stale or a shutting-down pod is part of normal
/// operation, a pod that cannot be given documents is not.
fn worth_an_event(reason: RefusalReason) -> bool {
    matches!(
        reason,
        RefusalReason::Unauthorized | RefusalReason::Invalid | RefusalReason::Other
    )
}

/// The answer of one delivery.
#[derive(Debug)]
struct Answer {
    pod: String,
    generation: u64,
    result: Result<(), WorkerCallError>,
}

/// The loop's side of the deliveries: the tokens, the answers coming back, the pods reported.
pub struct Delivery {
    tokens: Tokens,
    read_at: Option<Instant>,
    /// A 401 came back since the last read of the Secret.
    reread_wanted: bool,
    sender: UnboundedSender<Answer>,
    answers: UnboundedReceiver<Answer>,
    /// Pods that refused every token since the last read, waiting for the read's verdict.
    unauthorized: BTreeSet<String>,
    /// Pods reported as refusing, until they take a document again.
    reported: BTreeSet<String>,
}

impl Default for Delivery {
    fn default() -> Self {
        let (sender, answers) = unbounded_channel();
        Self {
            tokens: Tokens::default(),
            read_at: None,
            reread_wanted: false,
            sender,
            answers,
            unauthorized: BTreeSet::new(),
            reported: BTreeSet::new(),
        }
    }
}

impl Delivery {
    /// Takes the answers that came back since the last poll: counts each refusal, reports the
    /// pods that refuse for a reason a user must hear of, and reads the token Secret again when
    /// a pod refused the token. True when that read found a new token: send again now, the
    /// refused pods may hold it already.
    pub async fn take_answers(
        &mut self,
        deps: &FailoverDeps,
        job: &FailoverJob,
    ) -> Result<bool, WorkerTokenError> {
        let mut to_report = Vec::new();
        while let Ok(Answer {
            pod,
            generation,
            result,
        }) = self.answers.try_recv()
        {
            let error = match result {
                Ok(()) => {
                    self.unauthorized.remove(&pod);
                    self.reported.remove(&pod);
                    continue;
                }
                Err(error) => error,
            };
            let WorkerCallError::Refused { status, .. } = &error else {
                tracing::warn!(%pod, generation, %error, "the assignment did not reach this pod; sending again");
                continue;
            };
            let reason = RefusalReason::of_status(*status);
            deps.metrics.assignment_refused(reason.label());
            tracing::warn!(%pod, generation, reason = reason.label(), %error, "the pod refused the assignment");
            if reason == RefusalReason::Unauthorized {
                self.reread_wanted = true;
                self.unauthorized.insert(pod);
            } else if worth_an_event(reason) && self.reported.insert(pod.clone()) {
                to_report.push(format!(
                    "pod {pod} refused generation {generation}: {error}"
                ));
            }
        }
        let renewed = self.read_token(deps, job).await?;
        if !renewed && !self.reread_wanted {
            // The read (or a read that already happened) found no newer token: the pods still
            // refusing hold one this job's Secret never had, or the kubelet has not delivered it.
            for pod in std::mem::take(&mut self.unauthorized) {
                if self.reported.insert(pod.clone()) {
                    to_report.push(unauthorized_note(&pod, job));
                }
            }
        }
        for note in to_report {
            events::publish(deps, job, true, reasons::ASSIGNMENT_REFUSED, "Assign", note).await;
        }
        Ok(renewed)
    }

    /// Reads the token Secret when it was never read, or when a pod refused the token and the
    /// last read is [`REREAD_AFTER`] old; true when it holds a new token.
    async fn read_token(
        &mut self,
        deps: &FailoverDeps,
        job: &FailoverJob,
    ) -> Result<bool, WorkerTokenError> {
        let due = match self.read_at {
            None => true,
            Some(at) => self.reread_wanted && at.elapsed() >= REREAD_AFTER,
        };
        if !due && self.tokens.known() {
            return Ok(false);
        }
        if self.read_at.is_some() {
            // Read again because a pod refused the token: the Secret as it is now, not as kept.
            let name = crate::k8s::names::worker_token_secret(&job.name);
            deps.secrets.forget(&job.namespace, &name);
        }
        let reads = (&deps.client, deps.secrets.as_ref());
        let read = worker_token::read(reads, &job.namespace, &job.name).await?;
        self.read_at = Some(Instant::now());
        self.reread_wanted = false;
        let renewed = self.tokens.learn(read);
        if renewed && self.tokens.previous.is_some() {
            tracing::info!(job = %job.name, namespace = %job.namespace, "the worker token changed; the previous one is tried too until the pods' files hold the new one");
            // The refusals were answers to the old token: the next delivery tells again.
            self.unauthorized.clear();
        }
        Ok(renewed)
    }

    /// Sends `document` to each of `targets` (pod, address), each call on its own task: a call
    /// that hangs (a pod frozen before its silence counts) must not hold up the next poll, or a
    /// frozen owner is found late (measured: decisions after 3.8 s of silence for a 2 s
    /// suspicion, the send timeout added on top). A late call is harmless: a worker never acts
    /// on a generation older than one it has seen.
    pub fn send(
        &self,
        port: u16,
        document: &AssignmentDocument,
        targets: impl Iterator<Item = (String, String)>,
    ) {
        let document = Arc::new(document.clone());
        let tokens = Arc::new(self.tokens.to_try());
        for (pod, ip) in targets {
            let document = Arc::clone(&document);
            let tokens = Arc::clone(&tokens);
            let answers = self.sender.clone();
            tokio::spawn(async move {
                let result = deliver(&ip, port, &tokens, &document).await;
                // The loop is gone when the receiver is: nobody is left to tell.
                let _ = answers.send(Answer {
                    pod,
                    generation: document.generation,
                    result,
                });
            });
        }
    }
}

/// One delivery: with each token in turn while the pod refuses the token (none known: without
/// one, and the worker says why it refuses).
async fn deliver(
    ip: &str,
    port: u16,
    tokens: &[WorkerToken],
    document: &AssignmentDocument,
) -> Result<(), WorkerCallError> {
    let mut tokens = tokens.iter();
    let mut token = tokens.next();
    loop {
        let sent = worker_client::put_assignment(ip, port, token, document, SEND_TIMEOUT).await;
        match (sent, tokens.next()) {
            (Err(error), Some(next)) if error.is_unauthorized() => token = Some(next),
            (sent, _) => return sent,
        }
    }
}

fn unauthorized_note(pod: &str, job: &FailoverJob) -> String {
    format!(
        "pod {pod} refuses the assignment: its worker token (the file mounted from Secret {secret}) is neither the Secret's current token nor the one before it. Until it takes the assignment, its tasks cannot move. After a rotation the kubelet updates the file within about a minute; a Secret edited by hand must hold a token the pods mount",
        secret = crate::k8s::names::worker_token_secret(&job.name)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use streamkeeper_contract::worker_http::TOKEN_BYTES;

    fn token(byte: u8) -> WorkerToken {
        WorkerToken::from_random_bytes(&[byte; TOKEN_BYTES])
    }

    #[test]
    fn a_rotation_keeps_the_replaced_token_to_try_after_the_new_one() {
        let mut tokens = Tokens::default();
        assert!(tokens.to_try().is_empty());
        assert!(tokens.learn(Some(token(1))));
        assert_eq!(tokens.to_try(), vec![token(1)]);
        assert!(
            !tokens.learn(Some(token(1))),
            "the same token is no rotation"
        );
        assert!(
            !tokens.learn(None),
            "a Secret gone for a moment keeps what the pods hold"
        );
        assert_eq!(tokens.to_try(), vec![token(1)]);
        assert!(tokens.learn(Some(token(2))));
        assert_eq!(tokens.to_try(), vec![token(2), token(1)]);
        assert!(tokens.learn(Some(token(3))));
        assert_eq!(
            tokens.to_try(),
            vec![token(3), token(2)],
            "two rotations: the first token is gone"
        );
    }

    #[test]
    fn only_refusals_a_user_must_act_on_are_events() {
        let reasons: Vec<_> = [401, 409, 400, 503, 500]
            .into_iter()
            .map(RefusalReason::of_status)
            .collect();
        assert_eq!(reasons, RefusalReason::ALL);
        let events: Vec<_> = reasons.iter().map(|r| worth_an_event(*r)).collect();
        assert_eq!(events, [true, false, true, false, true]);
    }
}
