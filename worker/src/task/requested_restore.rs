//! A restore on request (`spec.restore`), handed over by the operator as a versioned document in
//! [`RESTORE_REQUEST_ENV`], applied once per request id.
//!
//! The id of the newest request applied lives in the task's state under
//! [`keys::APPLIED_RESTORE`], so it reaches the changelog and every later checkpoint: a restart,
//! a wiped volume or another pod restores the marker with the state and does not apply the
//! request again. A task therefore first restores as usual, then compares the marker:
//!
//! - `source: changelog`: discard the state, install the named checkpoint (`latest`: the newest
//!   usable one), replay the changelog after it, and commit the marker. The state ends exact.
//! - `source: input`: install the named checkpoint (`latest`: the newest written), rewrite the
//!   changelog so its last value per key equals that state (every key of the state, and a
//!   tombstone for every other key the changelog holds), and commit the marker together with
//!   the checkpoint's input offset; the task then reprocesses the input from there. Output of
//!   the reprocessed records is emitted again, and the restore progress says how many. This is
//!   the one way past a lost changelog ([`TaskError::ChangelogLost`]); on an intact changelog
//!   it rewinds the job to the checkpoint. The rewrite walks the state a page at a time and
//!   checks the old changelog's keys against it one by one, so it holds one batch in memory
//!   whatever the state's size.

use super::active::ActiveLoop;
use super::restore::{ChangelogProbe, Progress, RestorePlan, partition_of, restore_from_changelog};
use super::restore_checkpoint::install_first_usable;
use super::{TaskError, WorkerContext};
use crate::checkpoint::CheckpointError;
use crate::checkpoint::download::list_manifests;
use crate::checkpoint::select::{self, Choice};
use crate::processor::keys;
use crate::status::{RestorePhase, RestoreSource};
use crate::store::metadata::is_reserved_key;
use crate::store::{ChangeSet, OpenOutcome, RocksStore, StateStore};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::{Message, Offset, TopicPartitionList};
use std::time::Duration;
use streamkeeper_contract::restore_request::{
    RESTORE_REQUEST_ENV, RestoreCheckpoint, RestoreReplaySource, RestoreRequestDocument,
};
use streamkeeper_contract::{FormatError, Versioned};

/// Records per transaction when the changelog is rewritten; the marker and the input offset go
/// in the last one, so a crash part-way applies the request again from the start.
const REWRITE_BATCH: usize = 20_000;
const TIMEOUT: Duration = Duration::from_secs(30);
/// How long the first checkpoint after a restore from the input may take.
const FIRST_CHECKPOINT_LIMIT: Duration = Duration::from_secs(120);

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
    let consumer = active.restore_consumer()?;
    let usual =
        restore_from_changelog(context, task, store, outcome, &consumer, RestorePlan::Usual);
    let Some(request) = context.restore_request.as_deref() else {
        usual?;
        return report_applied(context, task, store);
    };
    let changelog_lost = match usual {
        Ok(_) if applied_restore_id(store)?.as_deref() == Some(request.id.as_str()) => {
            tracing::info!(task, id = %request.id, "restore request already applied to this state");
            return report_applied(context, task, store);
        }
        Ok(_) => false,
        Err(TaskError::ChangelogLost(reason)) if request.source == RestoreReplaySource::Input => {
            tracing::warn!(task, %reason, id = %request.id, "the restore request rebuilds the lost changelog from a checkpoint and the input");
            true
        }
        Err(error) => return Err(error),
    };
    let choice = match request.checkpoint {
        RestoreCheckpoint::Latest => Choice::Newest,
        RestoreCheckpoint::Sequence(sequence) => Choice::Sequence(sequence),
    };
    tracing::warn!(task, id = %request.id, ?choice, source = ?request.source, "applying restore request: discarding the task's state");
    store.wipe()?;
    match request.source {
        RestoreReplaySource::Changelog => {
            let plan = RestorePlan::Checkpoint(choice);
            restore_from_changelog(context, task, store, OpenOutcome::Empty, &consumer, plan)?;
            active.commit_changes(store, marker(&request.id), None)?;
        }
        RestoreReplaySource::Input => {
            let rebuild = Rebuild {
                request,
                choice,
                changelog_lost,
            };
            from_input(context, task, store, &consumer, active, &rebuild)?
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

fn marker(id: &str) -> ChangeSet {
    let mut changes = ChangeSet::new();
    changes.put(keys::APPLIED_RESTORE, id.as_bytes().to_vec());
    changes
}

/// What a restore from the input rebuilds from, and whether the changelog it rewrites is a new
/// topic (lost, so a new incarnation) or the same one rewound.
struct Rebuild<'a> {
    request: &'a RestoreRequestDocument,
    choice: Choice,
    changelog_lost: bool,
}

fn from_input(
    context: &WorkerContext,
    task: u32,
    store: &mut RocksStore,
    consumer: &BaseConsumer,
    active: &ActiveLoop<'_>,
    rebuild: &Rebuild<'_>,
) -> Result<(), TaskError> {
    let Rebuild {
        request, choice, ..
    } = *rebuild;
    let Some(service) = context.checkpoints.as_ref() else {
        return Err(CheckpointError::Internal(
            "a restore from the input starts from a checkpoint, but the worker config has no checkpoint.s3".into(),
        )
        .into());
    };
    let mut progress = Progress::new(context, task);
    progress.report(RestorePhase::Discovery);
    let manifests = service
        .runtime()
        .block_on(list_manifests(service.storage(), &service.prefix(task)))?;
    let candidates = select::for_input_replay(manifests, task, choice);
    let installed = install_first_usable(context, task, store, candidates, choice, &mut progress)?;
    let Some((_, manifest)) = installed else {
        return Err(CheckpointError::Internal(format!(
            "restore request {}: no usable checkpoint ({choice:?}) to reprocess the input from",
            request.id
        ))
        .into());
    };
    // Reprocessing needs every input record after the checkpoint (the RecoveryGap condition).
    let log_start = active.input_log_start()?;
    if manifest.input_offset < log_start {
        return Err(CheckpointError::Internal(format!(
            "restore request {}: checkpoint {} starts at input offset {}, but the input partition now starts at {log_start}: the records in between are gone, so the input cannot rebuild the state",
            request.id, manifest.sequence, manifest.input_offset
        ))
        .into());
    }
    let previous_position = active.committed_input_offset()?;
    let reprocessed = previous_position
        .map(|position| u64::try_from(position - manifest.input_offset).unwrap_or(0));
    progress.set_reprocessed_input_records(reprocessed);

    // Reads stop at the changelog's end before the rewrite: what follows is the rewrite.
    let (low, high) = changelog_watermarks(context, task, consumer)?;
    let state_keys = store
        .int_property("rocksdb.estimate-num-keys")?
        .unwrap_or(0);
    tracing::info!(
        task,
        sequence = manifest.sequence,
        input_offset = manifest.input_offset,
        changelog_records = high - low,
        state_keys,
        ?previous_position,
        "restore from the input: rewriting the changelog from the checkpoint"
    );
    // Work units: every old changelog record read, then every state key written.
    progress.start_replay(
        RestoreSource::Input,
        u64::try_from(high - low).unwrap_or(0) + state_keys,
    );
    progress.report(RestorePhase::Replay);
    // The rewritten state names the topic's incarnation: a fresh one for a topic created
    // anew, the topic's own for a rewind (see `incarnation`). It leads the first transaction.
    let incarnation = if rebuild.changelog_lost {
        Some(super::incarnation::fresh(task))
    } else {
        let topic = context.config.kafka.changelog_topic.as_str();
        ChangelogProbe::new(consumer, topic, partition_of(task)?, (low, high)).incarnation()?
    };
    let mut rewrite = ChangelogRewrite {
        active,
        progress,
        batch: ChangeSet::new(),
        batch_bytes: 0,
        units: 0,
    };
    match &incarnation {
        Some(id) => rewrite
            .batch
            .put(keys::CHANGELOG_INCARNATION, id.as_bytes().to_vec()),
        None => rewrite.batch.delete(keys::CHANGELOG_INCARNATION),
    }
    tombstone_keys_not_in_state(context, task, consumer, store, &mut rewrite, low..high)?;
    write_every_state_key(store, &mut rewrite)?;
    let mut progress = rewrite.finish(store, &request.id, manifest.input_offset)?;
    progress.report(RestorePhase::Done);
    tracing::warn!(
        task,
        id = %request.id,
        from_input_offset = manifest.input_offset,
        reprocessed_input_records = reprocessed.unwrap_or(0),
        "restored from checkpoint {}; the input from offset {} is processed again and its output emitted again",
        manifest.sequence,
        manifest.input_offset
    );
    // Until a checkpoint of the new changelog exists, the newest one describes the old.
    match service
        .task(task)
        .checkpoint_and_wait(store, FIRST_CHECKPOINT_LIMIT)
    {
        Ok(report) => {
            tracing::info!(
                task,
                sequence = report.sequence,
                "first checkpoint after the restore from the input is durable"
            );
        }
        Err(reason) => {
            tracing::warn!(task, %reason, "no checkpoint after the restore from the input yet; the periodic ones follow");
        }
    }
    Ok(())
}

/// Writes the rewrite in transactions of [`REWRITE_BATCH`] records; only the last one, with
/// the request's marker, moves the input position, so a crash part-way starts the request over.
struct ChangelogRewrite<'a, 'b> {
    active: &'a ActiveLoop<'b>,
    progress: Progress<'a>,
    batch: ChangeSet,
    batch_bytes: u64,
    /// Progress units counted since the last commit.
    units: u64,
}

impl<'a> ChangelogRewrite<'a, '_> {
    fn set(
        &mut self,
        store: &mut RocksStore,
        key: Vec<u8>,
        value: Option<Vec<u8>>,
    ) -> Result<(), TaskError> {
        self.batch_bytes += (key.len() + value.as_ref().map_or(0, Vec::len)) as u64;
        self.batch.set(key, value);
        if self.batch.len() >= REWRITE_BATCH {
            self.commit(store, None)?;
        }
        Ok(())
    }

    /// Counts work done without a record written (an old changelog record read).
    fn count(&mut self, units: u64) {
        self.units += units;
        if self.units >= REWRITE_BATCH as u64 {
            self.progress.add_done(std::mem::take(&mut self.units), 0);
            self.progress.report(RestorePhase::Replay);
        }
    }

    fn commit(
        &mut self,
        store: &mut RocksStore,
        input_offset: Option<i64>,
    ) -> Result<(), TaskError> {
        let changes = std::mem::take(&mut self.batch);
        self.active.commit_changes(store, changes, input_offset)?;
        self.progress.add_done(
            std::mem::take(&mut self.units),
            std::mem::take(&mut self.batch_bytes),
        );
        self.progress.report(RestorePhase::Replay);
        Ok(())
    }

    fn finish(
        mut self,
        store: &mut RocksStore,
        request_id: &str,
        input_offset: i64,
    ) -> Result<Progress<'a>, TaskError> {
        if !self.batch.is_empty() {
            self.commit(store, None)?;
        }
        // The marker alone, after the whole rewrite: its record ends the rewritten changelog.
        self.batch
            .put(keys::APPLIED_RESTORE, request_id.as_bytes().to_vec());
        self.commit(store, Some(input_offset))?;
        Ok(self.progress)
    }
}

fn changelog_watermarks(
    context: &WorkerContext,
    task: u32,
    consumer: &BaseConsumer,
) -> Result<(i64, i64), TaskError> {
    consumer
        .fetch_watermarks(
            context.config.kafka.changelog_topic.as_str(),
            partition_of(task)?,
            TIMEOUT,
        )
        .map_err(|e| TaskError::kafka("reading changelog watermarks", e))
}

/// A tombstone for every key the old changelog (offsets `old`) gives a value that the
/// installed state does not hold. The state is asked key by key, so nothing but the current
/// batch is held in memory; a key repeated in the changelog may get a second tombstone, which
/// compaction removes.
fn tombstone_keys_not_in_state(
    context: &WorkerContext,
    task: u32,
    consumer: &BaseConsumer,
    store: &mut RocksStore,
    rewrite: &mut ChangelogRewrite<'_, '_>,
    old: std::ops::Range<i64>,
) -> Result<(), TaskError> {
    if old.is_empty() {
        return Ok(());
    }
    let topic = context.config.kafka.changelog_topic.as_str();
    let mut assignment = TopicPartitionList::new();
    assignment
        .add_partition_offset(topic, partition_of(task)?, Offset::Offset(old.start))
        .map_err(|e| TaskError::kafka("assigning the changelog partition", e))?;
    consumer
        .assign(&assignment)
        .map_err(|e| TaskError::kafka("assigning the changelog partition", e))?;
    loop {
        match consumer.poll(Duration::from_millis(200)) {
            None => {}
            Some(Err(KafkaError::PartitionEOF(_))) => return Ok(()),
            Some(Err(error)) => return Err(TaskError::kafka("reading the changelog keys", error)),
            Some(Ok(message)) => {
                if message.offset() >= old.end {
                    return Ok(());
                }
                rewrite.count(1);
                let key = message.key().unwrap_or_default();
                if message.payload().is_none()
                    || is_reserved_key(key)
                    || rewrite.batch.get(key).is_some()
                    || store.get(key)?.is_some()
                {
                    continue;
                }
                rewrite.set(store, key.to_vec(), None)?;
            }
        }
    }
}

/// Every key of the installed state with its value, walked a page at a time.
fn write_every_state_key(
    store: &mut RocksStore,
    rewrite: &mut ChangelogRewrite<'_, '_>,
) -> Result<(), TaskError> {
    let mut from = Vec::new();
    loop {
        let page = store.scan_page(&from, REWRITE_BATCH)?;
        let Some((last, _)) = page.last() else {
            return Ok(());
        };
        from = [last.as_slice(), &[0]].concat();
        for (key, value) in page {
            rewrite.units += 1;
            // The checkpoint's own incarnation is replaced by the rewrite's (set first).
            if key == keys::CHANGELOG_INCARNATION {
                continue;
            }
            rewrite.set(store, key, Some(value))?;
        }
    }
}
