//! The failover loop of one job: its memory between polls (`LoopState`) and one poll (`tick`)
//! as the sequence of its steps, each a child module: `refresh` → `heartbeat` → `decide` →
//! `store` → `send` → `publish`.

mod decide;
mod heartbeat;
mod publish;
mod refresh;
mod send;
mod store;

use super::delivery::Delivery;
use super::document_store::MovesRecord;
use super::health::Heartbeats;
use super::job::{FailoverDeps, FailoverJob};
use super::links::Links;
use super::moves;
use super::rule_inputs::PodFacts;
use super::shared::Shared;
use crate::k8s::apply::ApiError;
use crate::k8s::worker_token;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};
use streamkeeper_contract::{AssignmentDocument, TaskReportsDocument};
use tokio::sync::watch;

/// How often the loop reads its pods' links and decides while something is in motion: a pod
/// silent, a move not committed yet, a document not acted on everywhere.
pub const POLL_EVERY: Duration = Duration::from_millis(250);
/// How often it does when the job is settled. News from a link (a refusal, a silence, a role or
/// phase that changed) wakes it at once either way.
pub const SETTLED_POLL_EVERY: Duration = Duration::from_secs(1);
/// How often the pod list is read from the apiserver.
pub(super) const LIST_EVERY: Duration = Duration::from_secs(1);
/// How soon an unchanged document is sent again to a pod that does not act on it yet (or that
/// does not say which generation it holds), see [`send`].
pub(super) const RESEND_EVERY: Duration = Duration::from_secs(1);
/// The longest a new job waits for all its pods before the first document. A worker with a
/// WebAssembly processor compiles its component before it listens: seen near 30 s for a Python
/// guest (a debug build on 2 busy cores), where a shorter wait started the job on the one pod
/// that was up, and moved its tasks back as the others came.
pub const FIRST_DECISION_WAIT: Duration = Duration::from_secs(60);
/// How long after a promotion (an owner failed, or its pod was deleted) nothing moves only for
/// balance: a pod that comes back warm at once would otherwise take a task straight back, a
/// second stall for one failure, and the status would show the hand-back instead of the
/// failover (seen: handed back 0.5 s after the promotion, before the new owner's first commit).
/// After it, only the promoted tasks whose new owner has not committed yet stay put
/// ([`moves::settling`]); an idle one, with nothing to commit, holds only itself.
pub const BALANCE_AFTER_FAILOVER: Duration = Duration::from_secs(5);

/// A worker pod as the loop lists it.
pub(super) struct ListedPod {
    pub(super) facts: PodFacts,
    pub(super) uid: String,
    /// None until the pod is scheduled and started.
    pub(super) ip: Option<String>,
}

/// The loop's memory between polls.
pub(super) struct LoopState {
    pub(super) document: Option<AssignmentDocument>,
    /// The last decision that moved tasks, as stored beside the document.
    pub(super) moves: Option<MovesRecord>,
    /// A read-back record whose moves the previous leader did not get to report.
    pub(super) unreported: Option<MovesRecord>,
    pub(super) read_back: bool,
    pub(super) heartbeats: Heartbeats,
    /// Each pod's report stream, by pod name.
    pub(super) links: Links,
    pub(super) pods: Vec<ListedPod>,
    /// Pods whose worker said at the last poll that it is shutting down.
    pub(super) stopping: BTreeSet<String>,
    /// The newest generation a worker said it has recorded, since this loop began.
    pub(super) newest_recorded_generation: u64,
    /// Each listed pod's uid, by name, as of the last listing.
    pub(super) uids: BTreeMap<String, String>,
    /// Moves whose new owner has not committed yet, by task.
    pub(super) pending_moves: BTreeMap<u32, moves::PendingMove>,
    /// When this loop last promoted a standby (its owner failed, or its pod was deleted).
    pub(super) failed_over_at: Option<Instant>,
    pub(super) listed_at: Option<Instant>,
    /// When a document was last sent; `None` asks the next poll to send it to every pod.
    pub(super) sent_at: Option<Instant>,
    /// What each pod that answered the last poll said it acts on.
    pub(super) holding: BTreeMap<String, send::Holding>,
    /// What each pod that answered the last poll reported.
    pub(super) answered: BTreeMap<String, Arc<TaskReportsDocument>>,
    /// The document last sent to each pod.
    pub(super) sent: BTreeMap<String, send::Sent>,
    pub(super) started: Instant,
    /// The job's worker tokens, which a document needs to be taken, and the answers.
    pub(super) delivery: Delivery,
}

pub(super) async fn run(deps: FailoverDeps, mut job: watch::Receiver<FailoverJob>, shared: Shared) {
    let mut state = LoopState {
        document: None,
        moves: None,
        unreported: None,
        read_back: false,
        heartbeats: Heartbeats::default(),
        links: Links::default(),
        pods: Vec::new(),
        stopping: BTreeSet::new(),
        newest_recorded_generation: 0,
        uids: BTreeMap::new(),
        pending_moves: BTreeMap::new(),
        failed_over_at: None,
        listed_at: None,
        sent_at: None,
        holding: BTreeMap::new(),
        answered: BTreeMap::new(),
        sent: BTreeMap::new(),
        started: Instant::now(),
        delivery: Delivery::default(),
    };
    let mut pace = POLL_EVERY;
    loop {
        tokio::select! {
            () = tokio::time::sleep(pace) => {}
            () = state.links.news() => {}
        }
        if job.has_changed().is_err() {
            tracing::info!("failover loop stopped");
            return;
        }
        let current = job.borrow_and_update().clone();
        if deps.leadership.check().is_err() {
            // A later leadership reads the stored document again: another leader may have
            // moved it on meanwhile. The links close: the leader follows the pods.
            state.read_back = false;
            state.links.clear();
            continue;
        }
        pace = match tick(&deps, &current, &mut state, &shared).await {
            Ok(()) if settled(&state, &shared, Instant::now()) => SETTLED_POLL_EVERY,
            Ok(()) => POLL_EVERY,
            Err(error) => {
                tracing::warn!(job = %current.name, namespace = %current.namespace, %error, "failover loop: retrying next poll");
                POLL_EVERY
            }
        };
    }
}

/// Nothing is in motion: every pod answers and acts on the document in force, no move waits for
/// its first commit, no pod stops or drains, and the last failover is past its settling time.
fn settled(state: &LoopState, shared: &Shared, now: Instant) -> bool {
    let Some(document) = &state.document else {
        return false;
    };
    let every_pod_holds_it = state.pods.iter().all(|pod| {
        let name = &pod.facts.name;
        state.heartbeats.reachable(name, now)
            && !state.heartbeats.unanswered(name)
            && state
                .holding
                .get(name)
                .is_some_and(|holding| holding.generation == Some(document.generation))
    });
    every_pod_holds_it
        && state.pending_moves.is_empty()
        && state.stopping.is_empty()
        && shared.draining().is_none()
        && state
            .failed_over_at
            .is_none_or(|at| now.saturating_duration_since(at) >= BALANCE_AFTER_FAILOVER)
}

/// Why a poll could not finish; the next one tries again.
#[derive(Debug, thiserror::Error)]
pub(super) enum PollError {
    #[error(transparent)]
    Api(#[from] ApiError),
    #[error(transparent)]
    Token(#[from] worker_token::WorkerTokenError),
    #[error(transparent)]
    Generations(#[from] streamkeeper_contract::GenerationsExhausted),
}

/// One poll, step by step: refresh the pod list, heartbeat, decide, store, send, publish.
async fn tick(
    deps: &FailoverDeps,
    job: &FailoverJob,
    state: &mut LoopState,
    shared: &Shared,
) -> Result<(), PollError> {
    if !state.read_back {
        store::read_back(deps, job, state, shared).await?;
    }
    if state.delivery.take_answers(deps, job).await? {
        // A new token: the pods that refused the old one may hold it already.
        state.sent_at = None;
    }
    refresh::pods(deps, job, state, shared).await?;
    if job.desired_pods == 0 {
        return Ok(());
    }
    let reports = heartbeat::poll(job, state).await;
    let now = Instant::now();
    if let Some(record) = state.unreported.take() {
        publish::report_moves(deps, job, shared, state, record, &reports).await?;
    }
    moves::first_commits(deps, job, shared, &mut state.pending_moves, &reports, now);
    let Some(decision) = decide::next(job, state, &shared.draining(), &reports, now)? else {
        return Ok(());
    };
    let changed = state.document.as_ref() != Some(&decision.next);
    // Stored first, with its moves (a new leader must read back what workers may act on, and
    // what is left to report), then sent, and only then reported: Events and the status are
    // not on the failover's path.
    let decided = if changed {
        store::decision(deps, job, state, decision, now).await?
    } else {
        None
    };
    state.heartbeats.replacements_decided();
    send::document(job, state, changed, now);
    if let Some(record) = decided {
        publish::report_moves(deps, job, shared, state, record, &[]).await?;
    }
    publish::view(job, state, shared, &reports, now);
    Ok(())
}
