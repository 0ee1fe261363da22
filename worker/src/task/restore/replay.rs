//! The Replay (and CatchUp) phase: the changelog from the planned offset to its end, read
//! committed, in large batches, each written with one unlogged WriteBatch together with the
//! metadata it brings the state to; the state is marked valid only after a final flush.
//!
//! The state's input position travels in the changelog (`minput_position`), so every replay
//! moves the metadata's input offset with the records, and a checkpoint taken after a restore
//! records the input the state includes, not a stale one.

use super::progress::Progress;
use crate::failpoint;
use crate::store::{ChangeSet, RocksStore, StateStore, TaskMetadata};
use crate::task::active::input_position::position_in_record;
use crate::task::{TaskError, WorkerContext};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::BorrowedMessage;
use rdkafka::{Message, Offset, TopicPartitionList};
use std::time::Duration;
use streamkeeper_contract::owner_marker;
use streamkeeper_contract::task_report::RestorePhase;

const BATCH_RECORDS: usize = 20_000;

/// Where a replay reads.
pub(super) struct ReplayRange<'a> {
    pub topic: &'a str,
    pub partition: i32,
    pub task: u32,
    /// The first offset to read.
    pub start: i64,
    /// The partition's end at discovery; records past it are a catch-up.
    pub high: i64,
}

/// Replays `range` into `store`; returns the records replayed. Logs "restore finished".
pub(super) fn replay(
    context: &WorkerContext,
    store: &mut RocksStore,
    consumer: &BaseConsumer,
    range: &ReplayRange<'_>,
    progress: &mut Progress<'_>,
) -> Result<u64, TaskError> {
    let ReplayRange {
        topic,
        partition,
        task,
        start,
        high,
    } = *range;
    if start >= high && store.metadata().is_some_and(|m| !m.restoring) {
        progress.report(RestorePhase::Done);
        tracing::info!(
            task,
            replayed = 0,
            bytes = 0,
            seconds = 0.0,
            "restore finished"
        );
        return Ok(0);
    }
    let mut assignment = TopicPartitionList::new();
    assignment
        .add_partition_offset(topic, partition, Offset::Offset(start))
        .map_err(|e| TaskError::kafka("assigning the changelog partition", e))?;
    consumer
        .assign(&assignment)
        .map_err(|e| TaskError::kafka("assigning the changelog partition", e))?;

    let mut meta = store
        .metadata()
        .unwrap_or_else(|| TaskMetadata::initial(task));
    meta.next_changelog_offset = meta.next_changelog_offset.max(start);
    let bytes = read_to_end(context, store, consumer, &mut meta, high, progress)?;
    if store.metadata().is_some_and(|m| m.restoring) {
        store.finish_restore()?;
    }
    progress.report(RestorePhase::Done);
    tracing::info!(
        task,
        replayed = progress.records_done,
        bytes,
        seconds = progress.started.elapsed().as_secs_f64(),
        "restore finished"
    );
    Ok(progress.records_done)
}

/// Adds one changelog record to `batch` and moves `meta` past it (offset, input position,
/// newest timestamp); returns its key and value bytes. A restore and a standby's tail apply
/// the changelog the same way. The operator's owner record is not state: only passed over.
pub(in crate::task) fn take_record(
    message: &BorrowedMessage<'_>,
    batch: &mut ChangeSet,
    meta: &mut TaskMetadata,
) -> u64 {
    let key = message.key().unwrap_or_default();
    if !owner_marker::is_changelog_owner_key(key) {
        batch.set(key.to_vec(), message.payload().map(<[u8]>::to_vec));
    }
    if let Some(position) = position_in_record(key, message.payload()) {
        meta.next_input_offset = position;
    }
    meta.next_changelog_offset = message.offset() + 1;
    if let Some(ts) = message.timestamp().to_millis() {
        meta.newest_changelog_timestamp_ms = Some(ts);
    }
    (key.len() + message.payload().map_or(0, <[u8]>::len)) as u64
}

/// Polls the assigned partition to its end, writing a batch every [`BATCH_RECORDS`] records
/// (and at the end) with `meta` as it stands after them. Returns the bytes read.
/// A stop ends it after writing what was read: the state is a consistent prefix, still marked
/// restoring, which the next role resumes (`OpenOutcome::Interrupted`).
fn read_to_end(
    context: &WorkerContext,
    store: &mut RocksStore,
    consumer: &BaseConsumer,
    meta: &mut TaskMetadata,
    high: i64,
    progress: &mut Progress<'_>,
) -> Result<u64, TaskError> {
    let mut batch = ChangeSet::new();
    let mut bytes = 0u64;
    loop {
        if context.shutting_down() {
            if !batch.is_empty() {
                store.restore_batch(&batch, meta)?;
            }
            return Err(TaskError::Stopped("replaying the changelog".into()));
        }
        let at_end = match consumer.poll(Duration::from_millis(200)) {
            None => false,
            Some(Err(KafkaError::PartitionEOF(_))) => true,
            Some(Err(error)) => return Err(TaskError::kafka("replaying the changelog", error)),
            Some(Ok(message)) => {
                bytes += take_record(&message, &mut batch, meta);
                progress.records_done += 1;
                false
            }
        };
        if !batch.is_empty() && (at_end || batch.len() >= BATCH_RECORDS) {
            store.restore_batch(&batch, meta)?;
            failpoint::hit("mid-restore");
            batch.clear();
            progress.bytes_done = bytes;
            // Past the end seen at discovery, the replay is catching up with records written
            // since (an owner not yet fenced); the phase says so.
            let phase = if meta.next_changelog_offset > high {
                RestorePhase::CatchUp
            } else {
                RestorePhase::Replay
            };
            progress.report(phase);
        }
        if at_end {
            return Ok(bytes);
        }
    }
}
