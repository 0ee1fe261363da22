//! Failover: the operator owns each job's assignment and moves tasks off a failed pod within
//! about a second, not at the reconcile's pace.
//!
//! One loop per job runs beside the reconciles while this process leads. A few times a second
//! it asks every worker pod for its task reports (the heartbeat, [`health`]), decides the next
//! assignment with the contract's rule from the live pods and each copy's lag ([`facts`]), and
//! when the document changes it stores it first ([`store`]) and then sends it to every pod
//! that answers. A pod whose process is gone (connection refused) loses its tasks at the next
//! poll; a silent one (frozen, partitioned, its node lost) after the job's heartbeat timeout
//! ([`health::DEFAULT_SUSPECT_AFTER`] unless `spec.recovery.heartbeatTimeout` says otherwise).
//! The promoted standby fences the old owner, so a wrong suspicion costs a handoff, never
//! exactness.
//!
//! A new job's first document waits until every pod answers (up to [`FIRST_DECISION_WAIT`]),
//! so tasks do not pile up on the first pod to start. A new leader reads the stored document
//! back and goes on from it.

pub mod delivery;
mod events;
pub mod facts;
pub mod health;
pub mod moves;
pub mod refresh;
pub mod registry;
pub mod scale_down;
pub mod store;
pub mod zones;

use crate::controller::apply::ApiError;
use crate::controller::worker_token;
use crate::leadership::Leadership;
use crate::metrics::Metrics;
use crate::worker_client;
use facts::PodFacts;
use health::{Heartbeats, Poll};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, ListParams};
use kube::runtime::events::Reporter;
use kube::{Client, ResourceExt};
pub use registry::{DrainTarget, Failovers, LastMoves, ScaleDown};
use registry::{Shared, view_of};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};
use streamkeeper_contract::{AssignmentDocument, AssignmentFacts, TaskReport, next_assignment};
use tokio::sync::watch;

/// How often every pod is asked for its reports.
pub const POLL_EVERY: Duration = Duration::from_millis(250);
/// How long one poll may take before it counts as silence.
const POLL_TIMEOUT: Duration = Duration::from_millis(500);
/// How often the pod list is read from the apiserver.
const LIST_EVERY: Duration = Duration::from_secs(1);
/// How often an unchanged document is sent again (to a pod that restarted, say).
const RESEND_EVERY: Duration = Duration::from_secs(1);
/// The longest a new job waits for all its pods before the first document.
pub const FIRST_DECISION_WAIT: Duration = Duration::from_secs(30);
/// How long after a promotion (an owner failed, or its pod was deleted) nothing moves only for
/// balance: a pod that comes back warm at once would otherwise take a task straight back, a
/// second stall for one failure, and the status would show the hand-back instead of the
/// failover (seen: handed back 0.5 s after the promotion, before the new owner's first commit).
/// After it, only the promoted tasks whose new owner has not committed yet stay put
/// ([`moves::settling`]); an idle one, with nothing to commit, holds only itself.
pub const BALANCE_AFTER_FAILOVER: Duration = Duration::from_secs(5);

/// What the failover loop of one job needs to know of it.
#[derive(Debug, Clone, PartialEq)]
pub struct FailoverJob {
    pub namespace: String,
    pub name: String,
    /// The job itself, owner of the stored document and subject of the Events.
    pub owner: OwnerReference,
    pub tasks: u32,
    /// Pods the job should have (`spec.replicas`, 0 while suspended: nothing is decided then).
    /// The StatefulSet may keep more for a moment: the pods a scale-down removes drain first.
    pub desired_pods: i32,
    pub standby_replicas: u32,
    pub acceptable_recovery_lag: i64,
    /// How long a silent pod keeps its tasks (`spec.recovery.heartbeatTimeout`).
    pub heartbeat_timeout: Duration,
    pub port: u16,
}

/// What the loops share with the rest of the operator.
#[derive(Clone)]
pub struct FailoverDeps {
    pub client: Client,
    /// Who reports the move Events.
    pub reporter: Reporter,
    pub leadership: Leadership,
    pub metrics: Arc<Metrics>,
    /// Asks for the job's status to be written again once a move has finished.
    pub refresh: refresh::RefreshSender,
}

/// A worker pod as the loop lists it.
struct ListedPod {
    facts: PodFacts,
    uid: String,
    /// None until the pod is scheduled and started.
    ip: Option<String>,
}

/// The loop's memory between polls.
struct LoopState {
    document: Option<AssignmentDocument>,
    /// The last decision that moved tasks, as stored beside the document.
    moves: Option<store::MovesRecord>,
    /// A read-back record whose moves the previous leader did not get to report.
    unreported: Option<store::MovesRecord>,
    read_back: bool,
    heartbeats: Heartbeats,
    pods: Vec<ListedPod>,
    /// Pods whose worker said at the last poll that it is shutting down.
    stopping: BTreeSet<String>,
    /// The newest generation a worker said it has recorded, since this loop began.
    newest_recorded_generation: u64,
    /// Each listed pod's uid, by name, as of the last listing.
    uids: BTreeMap<String, String>,
    /// Moves whose new owner has not committed yet, by task.
    pending_moves: BTreeMap<u32, moves::PendingMove>,
    /// When this loop last promoted a standby (its owner failed, or its pod was deleted).
    failed_over_at: Option<Instant>,
    listed_at: Option<Instant>,
    sent_at: Option<Instant>,
    started: Instant,
    /// The job's worker tokens, which a document needs to be taken, and the answers.
    delivery: delivery::Delivery,
    zones: zones::NodeZones,
}

async fn run(deps: FailoverDeps, mut job: watch::Receiver<FailoverJob>, shared: Shared) {
    let mut state = LoopState {
        document: None,
        moves: None,
        unreported: None,
        read_back: false,
        heartbeats: Heartbeats::default(),
        pods: Vec::new(),
        stopping: BTreeSet::new(),
        newest_recorded_generation: 0,
        uids: BTreeMap::new(),
        pending_moves: BTreeMap::new(),
        failed_over_at: None,
        listed_at: None,
        sent_at: None,
        started: Instant::now(),
        delivery: delivery::Delivery::default(),
        zones: zones::NodeZones::default(),
    };
    let mut ticks = tokio::time::interval(POLL_EVERY);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        if job.has_changed().is_err() {
            tracing::info!("failover loop stopped");
            return;
        }
        let current = job.borrow_and_update().clone();
        if deps.leadership.check().is_err() {
            // A later leadership reads the stored document again: another leader may have
            // moved it on meanwhile.
            state.read_back = false;
            continue;
        }
        if let Err(error) = tick(&deps, &current, &mut state, &shared).await {
            tracing::warn!(job = %current.name, namespace = %current.namespace, %error, "failover loop: retrying next poll");
        }
    }
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

/// Why a poll could not finish; the next one tries again.
#[derive(Debug, thiserror::Error)]
enum PollError {
    #[error(transparent)]
    Api(#[from] ApiError),
    #[error(transparent)]
    Token(#[from] worker_token::WorkerTokenError),
    #[error(transparent)]
    Generations(#[from] streamkeeper_contract::assign::GenerationsExhausted),
}

/// One poll: heartbeat, decide, store, send.
async fn tick(
    deps: &FailoverDeps,
    job: &FailoverJob,
    state: &mut LoopState,
    shared: &Shared,
) -> Result<(), PollError> {
    if !state.read_back {
        read_back(deps, job, state, shared).await?;
    }
    if state.delivery.take_answers(deps, job).await? {
        // A new token: the pods that refused the old one may hold it already.
        state.sent_at = None;
    }
    if state.listed_at.is_none_or(|at| at.elapsed() >= LIST_EVERY) {
        state.pods = list_pods(&deps.client, job).await?;
        let nodes = state.pods.iter().filter_map(|p| p.facts.node.as_deref());
        state.zones.learn(&deps.client, nodes).await;
        for pod in &mut state.pods {
            pod.facts.zone = pod.facts.node.as_deref().and_then(|n| state.zones.zone(n));
        }
        state.listed_at = Some(Instant::now());
        let listed: Vec<(String, String)> = state
            .pods
            .iter()
            .map(|p| (p.facts.name.clone(), p.uid.clone()))
            .collect();
        // A pod recreated under the same name (a new uid) lost the process that ran its
        // tasks, even if the new one already answers.
        let previous = std::mem::replace(&mut state.uids, listed.iter().cloned().collect());
        for (pod, uid) in &listed {
            if previous.get(pod).is_some_and(|before| before != uid) {
                state.heartbeats.replaced(pod);
            }
        }
        let uids = &state.uids;
        state.heartbeats.retain(|pod| uids.contains_key(pod));
        shared.end_drain_if_replaced(&listed);
    }
    if job.desired_pods == 0 {
        return Ok(());
    }
    state.heartbeats.suspect_after(job.heartbeat_timeout);
    let reports = poll_pods(job, state).await;
    let now = Instant::now();
    if let Some(record) = state.unreported.take() {
        finish_report(deps, job, shared, state, record, &reports).await?;
    }
    moves::first_commits(deps, job, shared, &mut state.pending_moves, &reports, now);
    let pods: Vec<PodFacts> = state.pods.iter().map(|p| p.facts.clone()).collect();
    // A draining pod keeps answering (it hands its tasks over) but takes no copy, and so does
    // a worker shutting down (deleted by someone else): it would never start one. With
    // standbys, a pod a scale-down removes drains too, before the StatefulSet lets it go.
    let draining = shared.draining();
    let places = facts::places(&pods, |pod| {
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
        return Ok(());
    }
    let copies = facts::copies(&reports, job.acceptable_recovery_lag);
    let failover_settling = state
        .failed_over_at
        .is_some_and(|at| now.saturating_duration_since(at) < BALANCE_AFTER_FAILOVER);
    let settling = moves::settling(&state.pending_moves);
    let fenced_actives = facts::fenced_actives(state.document.as_ref(), &reports);
    if !fenced_actives.is_empty() {
        tracing::warn!(job = %job.name, tasks = ?fenced_actives, "an owner of the document in force was fenced by a worker acting on an older one; issuing the document again under a new generation");
    }
    let next = next_assignment(AssignmentFacts {
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
    let changed = state.document.as_ref() != Some(&next);
    // Stored first, with its moves (a new leader must read back what workers may act on, and
    // what is left to report), then sent, and only then reported: Events and the status are
    // not on the failover's path.
    let decided = if changed {
        store_decision(deps, job, state, next, &copies, now).await?
    } else {
        None
    };
    state.heartbeats.replacements_decided();
    if changed || state.sent_at.is_none_or(|at| at.elapsed() >= RESEND_EVERY) {
        send(job, state, now);
        state.sent_at = Some(Instant::now());
    }
    if let Some(record) = decided {
        finish_report(deps, job, shared, state, record, &[]).await?;
    }
    let unreachable = state
        .pods
        .iter()
        .filter(|pod| !state.heartbeats.reachable(&pod.facts.name, now))
        .map(|pod| pod.facts.name.clone())
        .collect();
    shared.publish(view_of(
        job.acceptable_recovery_lag,
        state.document.as_ref(),
        &reports,
        state.pods.iter().map(|p| p.facts.name.clone()).collect(),
        unreachable,
    ));
    Ok(())
}

/// Stores `next` as the job's document with the record of the moves it makes (if any, else the
/// last record is kept beside it); those moves, to be reported once the document is sent.
async fn store_decision(
    deps: &FailoverDeps,
    job: &FailoverJob,
    state: &mut LoopState,
    next: AssignmentDocument,
    copies: &BTreeMap<u32, Vec<streamkeeper_contract::CopyLag>>,
    now: Instant,
) -> Result<Option<store::MovesRecord>, PollError> {
    let moved = match &state.document {
        Some(current) => moves::decide(
            moves::PodsNow {
                heartbeats: &state.heartbeats,
                stopping: &state.stopping,
                desired_pods: job.desired_pods,
            },
            (current, &next),
            copies,
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
    let decided = (!moved.is_empty()).then(|| store::MovesRecord::new(next.generation, moved));
    if decided.is_some() {
        state.moves = decided.clone();
    }
    store::write(
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
        streamkeeper_contract::failpoint::hit("assignment-stored-with-moves");
    }
    Ok(decided)
}

/// Reads the stored document back (a new leadership goes on from it) with the last moves
/// record: its moves go into the status again, and the ones not yet reported are reported
/// after the first poll.
async fn read_back(
    deps: &FailoverDeps,
    job: &FailoverJob,
    state: &mut LoopState,
    shared: &Shared,
) -> Result<(), PollError> {
    let stored = store::read(&deps.client, &job.namespace, &job.name).await?;
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

/// Reports a stored record's moves and stores it again marked reported. A move whose new
/// owner already commits in `reports` is not timed: this leader cannot tell when that began.
async fn finish_report(
    deps: &FailoverDeps,
    job: &FailoverJob,
    shared: &Shared,
    state: &mut LoopState,
    mut record: store::MovesRecord,
    reports: &[(String, Vec<TaskReport>)],
) -> Result<(), PollError> {
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
        store::write(
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

/// The job's worker pods that exist and are not being deleted, with their addresses.
async fn list_pods(client: &Client, job: &FailoverJob) -> Result<Vec<ListedPod>, ApiError> {
    let api: Api<Pod> = Api::namespaced(client.clone(), &job.namespace);
    let selector = crate::controller::labels::selector_string(&job.name);
    let list = api
        .list(&ListParams::default().labels(&selector))
        .await
        .map_err(|source| ApiError {
            action: "list",
            kind: "Pod".into(),
            namespace: job.namespace.clone(),
            name: selector.clone(),
            source,
        })?;
    Ok(list
        .items
        .into_iter()
        .filter(|pod| pod.metadata.deletion_timestamp.is_none())
        .map(|pod| ListedPod {
            ip: pod.status.as_ref().and_then(|status| status.pod_ip.clone()),
            uid: pod.uid().unwrap_or_default(),
            facts: PodFacts {
                name: pod.name_any(),
                node: pod.spec.as_ref().and_then(|spec| spec.node_name.clone()),
                // Filled in from the pod's Node (`zones`).
                zone: None,
            },
        })
        .collect())
}

/// Asks every pod for its reports at once; records each answer (or its absence).
async fn poll_pods(job: &FailoverJob, state: &mut LoopState) -> Vec<(String, Vec<TaskReport>)> {
    let calls = state.pods.iter().map(|pod| async move {
        let answer = match &pod.ip {
            Some(ip) => Some(worker_client::task_reports(ip, job.port, POLL_TIMEOUT).await),
            // Not started yet: silent, so it counts as starting until its grace is over.
            None => None,
        };
        (pod.facts.name.clone(), answer)
    });
    let answers = futures::future::join_all(calls).await;
    let now = Instant::now();
    let mut reports = Vec::new();
    state.stopping.clear();
    for (pod, answer) in answers {
        let poll = match &answer {
            Some(Ok(document)) => Poll::Answered(document.process.as_deref()),
            Some(Err(worker_client::WorkerCallError::Unreachable { source, .. }))
                if source.kind() == std::io::ErrorKind::ConnectionRefused =>
            {
                Poll::Refused
            }
            Some(Err(_)) | None => Poll::Silent,
        };
        state.heartbeats.record(&pod, poll, now);
        if let Some(Ok(document)) = answer {
            if document.stopping {
                state.stopping.insert(pod.clone());
            }
            state.newest_recorded_generation = state
                .newest_recorded_generation
                .max(document.generation.unwrap_or(0));
            reports.push((pod, document.tasks));
        }
    }
    reports
}

/// Sends the current document to every live pod ([`delivery::Delivery::send`]).
fn send(job: &FailoverJob, state: &LoopState, now: Instant) {
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
}

#[cfg(test)]
mod tests {
    use super::*;

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
