//! Restore of a task's state, in reported phases (Discovery → Download → Replay → CatchUp →
//! Done): valid local state replays only the delta after its stored changelog offset; else the
//! best usable S3 checkpoint is downloaded and the changelog replayed from its offset; else the
//! state is wiped (if needed) and rebuilt from the whole changelog.
//!
//! [`plan`] decides, purely, from facts; this module is the thin layer that gathers those facts
//! (only the ones the plan asks for: reads of the changelog probe, [`retention`]), calls the plan
//! and carries it out: [`install`] (Download), [`replay`] (Replay, CatchUp), [`input`] (a rebuild
//! from the input), with [`progress`] publishing the figures. Dependencies point one way: the
//! executor uses the steps, the steps never the executor.
//!
//! A restore on request (`spec.restore`, handed over by the operator as a versioned document in
//! [`RESTORE_REQUEST_ENV`]) is applied once per request id. The id of the newest request
//! applied lives in the task's state under [`keys::APPLIED_RESTORE`], so it reaches the
//! changelog and every later checkpoint: a restart, a wiped volume or another pod restores the
//! marker with the state and does not apply the request again. A task therefore first restores
//! as usual, then compares the marker. `source: changelog` discards the state, installs the
//! named checkpoint (`latest`: the newest usable one), replays the changelog after it and
//! commits the marker; the state ends exact. `source: input` is [`input`].

mod input;
mod install;
mod plan;
mod progress;
mod replay;
mod retention;

pub(super) use replay::take_record;

use self::input::Rebuilder;
use self::plan::{
    CheckpointDecision, Decision, Facts, Listed, LocalState, Manifests, Mode, Need, RequestStep,
    Step, UsualRestore,
};
use self::progress::Progress;
use self::replay::{ReplayRange, replay};
use self::retention::{RetentionLookup, now_ms};
use super::active::ActiveLoop;
use super::active::sources::{self, Positions, Source};
use super::changelog::ChangelogProbe;
use super::{TaskError, WorkerContext, partition_of, stop};
use crate::checkpoint::CheckpointError;
use crate::checkpoint::download::list_manifests;
use crate::processor::keys;
use crate::store::{ChangeSet, OpenOutcome, RocksStore, StateStore, TaskMetadata};
use rdkafka::consumer::{BaseConsumer, Consumer};
use std::collections::BTreeMap;
use std::time::Duration;
use streamkeeper_contract::WorkerConfig;
use streamkeeper_contract::restore_request::{
    RESTORE_REQUEST_ENV, RestoreReplaySource, RestoreRequestDocument,
};
use streamkeeper_contract::task_report::{RestorePhase, RestoreSource};
use streamkeeper_contract::{FormatError, Versioned};

const TIMEOUT: Duration = Duration::from_secs(30);

/// The restore request handed to this worker, if any.
pub fn restore_request_from_env() -> Result<Option<RestoreRequestDocument>, FormatError> {
    match std::env::var(RESTORE_REQUEST_ENV) {
        Ok(text) if !text.trim().is_empty() => {
            RestoreRequestDocument::from_json(text.as_bytes()).map(Some)
        }
        _ => Ok(None),
    }
}

/// Restores the task's state, applying the worker's restore request if this state has not.
pub(super) fn restore_task(
    context: &WorkerContext,
    task: u32,
    store: &mut RocksStore,
    outcome: OpenOutcome,
    active: &ActiveLoop<'_>,
) -> Result<(), TaskError> {
    let consumer = crate::kafka_client::ClosedAside::new(active.restore_consumer()?);
    let usual = restore_from_changelog(context, task, store, outcome, &consumer, Mode::Usual);
    let request = context.restore_request.as_deref();
    let ended = match &usual {
        Ok(_) if request.is_some() => UsualRestore::Restored {
            applied: applied_restore_id(store)?,
        },
        Ok(_) => UsualRestore::Restored { applied: None },
        Err(TaskError::ChangelogLost(_)) => UsualRestore::ChangelogLost,
        Err(_) => UsualRestore::Failed,
    };
    let (request, apply) = match (plan::plan_request(request, &ended), request) {
        (RequestStep::Apply(apply), Some(request)) => (request, apply),
        (RequestStep::AlreadyApplied, Some(request)) => {
            tracing::info!(task, id = %request.id, "restore request already applied to this state");
            return report_applied(context, task, store);
        }
        // No request, or the usual restore's error stands.
        _ => {
            usual?;
            return report_applied(context, task, store);
        }
    };
    if let Err(TaskError::ChangelogLost(reason)) = &usual {
        tracing::warn!(task, %reason, id = %request.id, "the restore request rebuilds the lost changelog from a checkpoint and the input");
    }
    let choice = apply.choice;
    tracing::warn!(task, id = %request.id, ?choice, source = ?request.source, "applying restore request: discarding the task's state");
    store.wipe()?;
    match apply.source {
        RestoreReplaySource::Changelog => {
            let mode = Mode::Requested(choice);
            restore_from_changelog(context, task, store, OpenOutcome::Empty, &consumer, mode)?;
            let (changes, positions) = applied(request, &context.config, store)?;
            if request.adopt_input {
                tracing::warn!(task, id = %request.id, topic = %context.config.kafka.input_topic, "the restore request adopts the input: the state forgets the topic it was built from, and the task reads this one from its first record");
            }
            active.commit_changes(store, changes, positions)?;
        }
        RestoreReplaySource::Input => {
            let rebuilder = Rebuilder {
                context,
                task,
                consumer: &consumer,
                active,
            };
            rebuilder.rebuild(store, request, apply)?;
        }
    }
    tracing::info!(task, id = %request.id, "restore request applied");
    report_applied(context, task, store)
}

/// The id of the newest restore request applied to the state in `store`.
fn applied_restore_id(store: &RocksStore) -> Result<Option<String>, TaskError> {
    Ok(store
        .get(keys::APPLIED_RESTORE)?
        .map(|bytes| String::from_utf8_lossy(&bytes).into_owned()))
}

fn report_applied(context: &WorkerContext, task: u32, store: &RocksStore) -> Result<(), TaskError> {
    let applied = applied_restore_id(store)?;
    context
        .board
        .update(task, |report| report.applied_restore_id = applied);
    Ok(())
}

/// The changes that mark `request` applied, and the input positions they set. A request that
/// adopts the input also forgets which input the state was built from and its position there,
/// for every topic the job reads (`sources`): position 0 (nothing consumed) resumes a joined
/// topic at its first record, the positions of a re-keyed or whole-read topic's partitions are
/// deleted (each resumes at its start), and the task's input check then records the current
/// topics as the state's.
fn applied(
    request: &RestoreRequestDocument,
    config: &WorkerConfig,
    store: &RocksStore,
) -> Result<(ChangeSet, Positions), TaskError> {
    let mut changes = marker(&request.id);
    let mut positions = Positions::default();
    if !request.adopt_input {
        return Ok((changes, positions));
    }
    let sides = sources::sides_of(config);
    // One partition of each topic a side reads names every key there is to forget.
    let one_each = sides.iter().map(|side| (side.side, 1)).collect();
    for read in sources::plan(0, 1, &sides, &one_each) {
        changes.delete(sources::identity_key(read.source));
        match read.source {
            Source::Joined(_) => positions.set(read.source, 0),
            Source::Rekeyed(side, _) | Source::Whole(side, _) => {
                let prefix = sources::source_positions_prefix(side);
                let end = keys::prefix_end(prefix).unwrap_or_default();
                for (key, _) in store.scan(prefix, &end)? {
                    changes.delete(&key);
                }
            }
        }
    }
    Ok((changes, positions))
}

fn marker(id: &str) -> ChangeSet {
    let mut changes = ChangeSet::new();
    changes.put(keys::APPLIED_RESTORE, id.as_bytes().to_vec());
    changes
}

/// A standby's warm-up: the usual restore (local delta, else the best checkpoint, else the
/// whole changelog) with the standby's own `read_committed` consumer, and no restore request
/// (only an active task applies one). Returns the records replayed.
pub(super) fn warm_up(
    context: &WorkerContext,
    task: u32,
    store: &mut RocksStore,
    outcome: OpenOutcome,
    consumer: &BaseConsumer,
) -> Result<u64, TaskError> {
    restore_from_changelog(context, task, store, outcome, consumer, Mode::Usual)
}

/// Brings `store` up to the end of the changelog as `mode` says. Returns the records replayed.
fn restore_from_changelog(
    context: &WorkerContext,
    task: u32,
    store: &mut RocksStore,
    outcome: OpenOutcome,
    consumer: &BaseConsumer,
    mode: Mode,
) -> Result<u64, TaskError> {
    let topic = context.config.kafka.changelog_topic.as_str();
    let partition = partition_of(task)?;
    let mut progress = Progress::new(context, task);
    progress.report(RestorePhase::Discovery);
    let (low, high) = stop::kafka_call(context, TIMEOUT, "reading changelog watermarks", |t| {
        consumer.fetch_watermarks(topic, partition, t)
    })?;
    let mut gatherer = Gatherer {
        context,
        probe: ChangelogProbe::new(consumer, topic, partition, (low, high)),
        retention: RetentionLookup::new(context, topic),
        listing_error: None,
    };
    let mut facts = Facts {
        task,
        topic: topic.to_string(),
        partition,
        mode,
        low,
        high,
        local: local_state(&outcome, store),
        incarnation: None,
        quiet: BTreeMap::new(),
        delete_retention_ms: None,
        now_ms: now_ms(),
        manifests: None,
    };
    if context.promoted_at.is_some() && matches!(mode, Mode::Usual) {
        // A promoted standby replays a delta of the last moments, which is rarely only
        // markers: the tombstone rule decides it with one request, sparing the read ahead.
        facts.delete_retention_ms = gatherer.retention.get().ok();
    }
    let decision = loop {
        match plan::discover(&facts) {
            Step::Decided(decision) => break decision,
            Step::Need(need) => gatherer.answer(need, &mut facts)?,
        }
    };
    let mut carrier = Carrier {
        context,
        store,
        outcome: &outcome,
        facts: &facts,
        progress: &mut progress,
        listing_error: gatherer.listing_error.take(),
    };
    let (start, source) = carrier.start(decision)?;
    let total = u64::try_from(high - start).unwrap_or(0);
    tracing::info!(
        task,
        ?source,
        start,
        end = high,
        records_to_replay = total,
        "restore: discovery done"
    );
    progress.start_replay(source, total);
    progress.report(RestorePhase::Replay);
    let range = ReplayRange {
        topic,
        partition,
        task,
        start,
        high,
    };
    replay(context, store, consumer, &range, &mut progress)
}

/// The plan's view of the state on the volume.
fn local_state(outcome: &OpenOutcome, store: &RocksStore) -> Option<LocalState> {
    let (OpenOutcome::Valid(meta) | OpenOutcome::Interrupted(meta)) = outcome else {
        return None;
    };
    let TaskMetadata {
        next_changelog_offset,
        newest_changelog_timestamp_ms,
        ..
    } = *meta;
    Some(LocalState {
        next_changelog_offset,
        newest_changelog_timestamp_ms,
        incarnation: crate::store::incarnation::of_state(store),
    })
}

/// Reads the facts the plan asks for.
struct Gatherer<'a> {
    context: &'a WorkerContext,
    probe: ChangelogProbe<'a>,
    retention: RetentionLookup<'a>,
    /// Why the manifests could not be listed, for the error the plan may make of it.
    listing_error: Option<CheckpointError>,
}

impl Gatherer<'_> {
    fn answer(&mut self, need: Need, facts: &mut Facts) -> Result<(), TaskError> {
        match need {
            Need::Incarnation => facts.incarnation = Some(self.probe.incarnation()?),
            Need::OnlyControlRecordsFrom(offset) => {
                let quiet = self.probe.only_control_records_from(offset)?;
                facts.quiet.insert(offset, quiet);
            }
            Need::DeleteRetention => facts.delete_retention_ms = Some(self.retention.get()?),
            Need::Manifests => facts.manifests = Some(self.manifests(facts.task)?),
        }
        Ok(())
    }

    fn manifests(&mut self, task: u32) -> Result<Manifests, TaskError> {
        let Some(service) = self.context.checkpoints.as_ref() else {
            return Ok(Manifests::Off);
        };
        let listed = list_checkpoints(self.context, service, task)?;
        Ok(match listed {
            Ok(manifests) => Manifests::Listed(manifests),
            Err(error) => {
                self.listing_error = Some(error);
                Manifests::Unlisted
            }
        })
    }
}

/// The task's checkpoint manifests, listed on the checkpoint service's runtime. The outer error
/// is a stop, the inner one what the listing found.
pub(super) fn list_checkpoints(
    context: &WorkerContext,
    service: &crate::checkpoint::CheckpointService,
    task: u32,
) -> Result<Result<Vec<streamkeeper_contract::CheckpointManifest>, CheckpointError>, TaskError> {
    let storage = service.storage().clone();
    let prefix = service.prefix(task);
    let listing = async move { list_manifests(&storage, &prefix).await };
    stop::on_runtime(
        context,
        service.runtime(),
        "listing checkpoints",
        listing,
        || {},
    )
}

/// Carries a discovery decision out up to the replay: installs a checkpoint, or wipes.
struct Carrier<'a, 'p> {
    context: &'a WorkerContext,
    store: &'a mut RocksStore,
    outcome: &'a OpenOutcome,
    facts: &'a Facts,
    progress: &'a mut Progress<'p>,
    listing_error: Option<CheckpointError>,
}

impl Carrier<'_, '_> {
    /// Where the replay starts, and from what.
    fn start(&mut self, decision: Decision) -> Result<(i64, RestoreSource), TaskError> {
        let Facts {
            task,
            low,
            high,
            mode,
            ..
        } = *self.facts;
        let checkpoints = match decision {
            Decision::Refused(refusal) => {
                return Err(TaskError::ChangelogLost(refusal.to_string()));
            }
            Decision::Local { from } => return Ok((from, RestoreSource::Local)),
            Decision::NotLocal(checkpoints) => checkpoints,
        };
        let outcome = self.outcome;
        if !matches!(outcome, OpenOutcome::Empty) {
            let chosen = matches!(mode, Mode::Requested(_));
            tracing::warn!(task, outcome = ?outcome, low, high, chosen, "local state unusable for a delta replay");
        }
        match self.install(checkpoints)? {
            Some(meta) => Ok((meta.next_changelog_offset, RestoreSource::Checkpoint)),
            None => {
                if !matches!(outcome, OpenOutcome::Empty) || self.store.metadata().is_some() {
                    tracing::warn!(task, low, high, "rebuilding from the whole changelog");
                    self.store.wipe()?;
                }
                Ok((low, RestoreSource::Empty))
            }
        }
    }

    /// The checkpoint installed, if the decision names one that installs.
    fn install(&mut self, decision: CheckpointDecision) -> Result<Option<TaskMetadata>, TaskError> {
        let Facts {
            task, low, high, ..
        } = *self.facts;
        let choice = self.facts.mode.choice();
        let (summary, listed) = match decision {
            CheckpointDecision::Off => return Ok(None),
            CheckpointDecision::UnlistedRebuild => {
                if let Some(error) = &self.listing_error {
                    tracing::warn!(task, %error, "cannot list checkpoints; rebuilding from the changelog instead");
                }
                return Ok(None);
            }
            CheckpointDecision::UnlistedFail => {
                return Err(self.listing_error.take().map_or_else(
                    || TaskError::Internal("the checkpoint listing failed".into()),
                    TaskError::from,
                ));
            }
            CheckpointDecision::Listed { summary, outcome } => (summary, outcome),
        };
        if summary.ignored > 0 {
            let incarnation = self.facts.incarnation.clone().flatten();
            tracing::info!(
                task,
                ignored = summary.ignored,
                ?incarnation,
                "restore: ignoring checkpoints of another changelog incarnation"
            );
        }
        let (candidates, refusal) = match listed {
            Listed::NewestPastEnd(refusal) => {
                return Err(TaskError::ChangelogLost(refusal.to_string()));
            }
            Listed::Usable(candidates) => (candidates, None),
            Listed::ChosenUnusable(refusal) => (Vec::new(), Some(refusal)),
        };
        tracing::info!(
            task,
            listed = summary.listed,
            usable = candidates.len(),
            ?choice,
            low,
            high,
            "restore: checkpoints discovered"
        );
        if let Some(refusal) = refusal {
            return Err(CheckpointError::Internal(refusal.to_string()).into());
        }
        if candidates.is_empty() {
            return Ok(None);
        }
        let installed = install::install_first_usable(
            self.context,
            task,
            self.store,
            candidates,
            choice,
            self.progress,
        )?;
        Ok(installed.map(|(meta, _)| meta))
    }
}
