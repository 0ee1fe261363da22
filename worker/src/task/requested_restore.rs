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
//!   it rewinds the job to the checkpoint.

use super::active::ActiveLoop;
use super::restore::{Progress, RestorePlan, partition_of, restore_from_changelog};
use super::restore_checkpoint::install_first_usable;
use super::{TaskError, WorkerContext};
use crate::checkpoint::CheckpointError;
use crate::checkpoint::download::list_manifests;
use crate::checkpoint::select::{self, Choice};
use crate::processor::keys;
use crate::status::{RestorePhase, RestoreSource};
use crate::store::{ChangeSet, OpenOutcome, RocksStore, StateStore};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::{Message, Offset, TopicPartitionList};
use std::collections::HashMap;
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
    match usual {
        Ok(_) if applied_restore_id(store)?.as_deref() == Some(request.id.as_str()) => {
            tracing::info!(task, id = %request.id, "restore request already applied to this state");
            return report_applied(context, task, store);
        }
        Ok(_) => {}
        Err(TaskError::ChangelogLost(reason)) if request.source == RestoreReplaySource::Input => {
            tracing::warn!(task, %reason, id = %request.id, "the restore request rebuilds the lost changelog from a checkpoint and the input");
        }
        Err(error) => return Err(error),
    }
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
            from_input(context, task, store, &consumer, active, request, choice)?
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

fn from_input(
    context: &WorkerContext,
    task: u32,
    store: &mut RocksStore,
    consumer: &BaseConsumer,
    active: &ActiveLoop<'_>,
    request: &RestoreRequestDocument,
    choice: Choice,
) -> Result<(), TaskError> {
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

    let changelog_values = changelog_last_values(context, task, consumer)?;
    let mut rewrite = ChangeSet::new();
    for (key, value) in store.scan(&[], &[u8::MAX])? {
        rewrite.put(&key, value);
    }
    for (key, has_value) in changelog_values {
        if has_value && rewrite.get(&key).is_none() {
            rewrite.delete(&key);
        }
    }
    rewrite.put(keys::APPLIED_RESTORE, request.id.as_bytes().to_vec());
    let total = rewrite.len();
    tracing::info!(
        task,
        sequence = manifest.sequence,
        input_offset = manifest.input_offset,
        changelog_records = total,
        ?previous_position,
        "restore from the input: rewriting the changelog from the checkpoint"
    );
    progress.start_replay(RestoreSource::Input, total as u64);
    progress.report(RestorePhase::Replay);
    let mut batch = ChangeSet::new();
    let mut written = 0usize;
    for (key, value) in rewrite {
        batch.set(key, value);
        written += 1;
        if batch.len() >= REWRITE_BATCH || written == total {
            let records = batch.len() as u64;
            let bytes = batch
                .iter()
                .map(|(k, v)| (k.len() + v.map_or(0, <[u8]>::len)) as u64)
                .sum();
            let last = written == total;
            let input_offset = last.then_some(manifest.input_offset);
            active.commit_changes(store, std::mem::take(&mut batch), input_offset)?;
            progress.add_done(records, bytes);
            progress.report(RestorePhase::Replay);
        }
    }
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

/// For every key in the task's changelog partition: whether its last record holds a value (a
/// tombstone: `false`).
fn changelog_last_values(
    context: &WorkerContext,
    task: u32,
    consumer: &BaseConsumer,
) -> Result<HashMap<Vec<u8>, bool>, TaskError> {
    let topic = context.config.kafka.changelog_topic.as_str();
    let partition = partition_of(task)?;
    let (low, high) = consumer
        .fetch_watermarks(topic, partition, TIMEOUT)
        .map_err(|e| TaskError::kafka("reading changelog watermarks", e))?;
    let mut values = HashMap::new();
    if low >= high {
        return Ok(values);
    }
    let mut assignment = TopicPartitionList::new();
    assignment
        .add_partition_offset(topic, partition, Offset::Offset(low))
        .map_err(|e| TaskError::kafka("assigning the changelog partition", e))?;
    consumer
        .assign(&assignment)
        .map_err(|e| TaskError::kafka("assigning the changelog partition", e))?;
    loop {
        match consumer.poll(Duration::from_millis(200)) {
            None => {}
            Some(Err(KafkaError::PartitionEOF(_))) => break,
            Some(Err(error)) => return Err(TaskError::kafka("reading the changelog keys", error)),
            Some(Ok(message)) => {
                let key = message.key().unwrap_or_default().to_vec();
                values.insert(key, message.payload().is_some());
            }
        }
    }
    Ok(values)
}
