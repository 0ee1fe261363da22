//! A restore request with `source: input`: install the named checkpoint (`latest`: the newest
//! written), rewrite the changelog so its last value per key equals that state (every key of
//! the state, and a tombstone for every other key the changelog holds), and commit the marker
//! together with the checkpoint's input offset; the task then reprocesses the input from there.
//! Output of the reprocessed records is emitted again, and the restore progress says how many.
//! This is the one way past a lost changelog ([`TaskError::ChangelogLost`]); on an intact
//! changelog it rewinds the job to the checkpoint. The rewrite walks the state a page at a time
//! and checks the old changelog's keys against it one by one, so it holds one batch in memory
//! whatever the state's size.

use super::install::install_first_usable;
use super::plan::{self, ApplyRequest, InputRebuild, RewriteIncarnation};
use super::progress::Progress;
use crate::checkpoint::{CheckpointError, CheckpointService};
use crate::processor::Side;
use crate::processor::keys;
use crate::store::metadata::is_reserved_key;
use crate::store::{ChangeSet, RocksStore, StateStore};
use crate::task::active::ActiveLoop;
use crate::task::active::sources::{Positions, Source};
use crate::task::changelog::ChangelogProbe;
use crate::task::{TaskError, WorkerContext, partition_of, stop};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::{Message, Offset, TopicPartitionList};
use std::sync::Arc;
use std::time::Duration;
use streamkeeper_contract::CheckpointManifest;
use streamkeeper_contract::restore_request::RestoreRequestDocument;
use streamkeeper_contract::task_report::{RestorePhase, RestoreSource};

/// Records per transaction when the changelog is rewritten; the marker and the input offset go
/// in the last one, so a crash part-way applies the request again from the start.
const REWRITE_BATCH: usize = 20_000;
const TIMEOUT: Duration = Duration::from_secs(30);
/// How long the first checkpoint after a restore from the input may take.
const FIRST_CHECKPOINT_LIMIT: Duration = Duration::from_secs(120);

/// Who does the rebuild, with what.
pub(super) struct Rebuilder<'a, 'b> {
    pub context: &'a WorkerContext,
    pub task: u32,
    pub consumer: &'a BaseConsumer,
    pub active: &'a ActiveLoop<'b>,
}

impl<'a> Rebuilder<'a, '_> {
    /// Applies `request` (`source: input`) to the wiped `store`.
    pub(super) fn rebuild(
        &self,
        store: &mut RocksStore,
        request: &RestoreRequestDocument,
        apply: ApplyRequest,
    ) -> Result<(), TaskError> {
        let Rebuilder {
            context,
            task,
            active,
            ..
        } = *self;
        let choice = apply.choice;
        let Some(service) = context.checkpoints.as_ref() else {
            return Err(CheckpointError::Internal(
                "a restore from the input starts from a checkpoint, but the worker config has no checkpoint.s3".into(),
            )
            .into());
        };
        let mut progress = Progress::new(context, task);
        progress.report(RestorePhase::Discovery);
        let manifests = super::list_checkpoints(context, service, task)??;
        let candidates = plan::input_candidates(manifests, task, choice);
        let installed =
            install_first_usable(context, task, store, candidates, choice, &mut progress)?;
        let Some((_, manifest)) = installed else {
            return Err(CheckpointError::Internal(format!(
                "restore request {}: no usable checkpoint ({choice:?}) to reprocess the input from",
                request.id
            ))
            .into());
        };
        let committed = active.committed_input_offset()?;
        let rebuild = plan::plan_input_rebuild(
            &request.id,
            &manifest,
            active.input_log_start()?,
            committed,
            apply.changelog_lost,
        )
        .map_err(|refusal| CheckpointError::Internal(refusal.to_string()))?;
        progress.set_reprocessed_input_records(rebuild.reprocessed);
        let target = Target {
            manifest: &manifest,
            rebuild,
            previous_position: committed,
            request_id: &request.id,
        };
        let mut progress = self.rewrite(store, progress, &target)?;
        progress.report(RestorePhase::Done);
        tracing::warn!(
            task,
            id = %request.id,
            from_input_offset = rebuild.from_input_offset,
            reprocessed_input_records = rebuild.reprocessed.unwrap_or(0),
            "restored from checkpoint {}; the input from offset {} is processed again and its output emitted again",
            manifest.sequence,
            rebuild.from_input_offset
        );
        first_checkpoint(service, task, store);
        Ok(())
    }

    /// Rewrites the changelog to hold exactly the installed state, ending with the marker of
    /// the request and the rebuild's input offset.
    fn rewrite(
        &self,
        store: &mut RocksStore,
        mut progress: Progress<'a>,
        target: &Target<'_>,
    ) -> Result<Progress<'a>, TaskError> {
        let Target {
            manifest,
            rebuild,
            previous_position,
            request_id,
        } = *target;
        let Rebuilder {
            context,
            task,
            consumer,
            active,
        } = *self;
        // Reads stop at the changelog's end before the rewrite: what follows is the rewrite.
        let topic = context.config.kafka.changelog_topic.as_str();
        let partition = partition_of(task)?;
        let (low, high) =
            stop::kafka_call(context, TIMEOUT, "reading changelog watermarks", |t| {
                consumer.fetch_watermarks(topic, partition, t)
            })?;
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
        let incarnation = match rebuild.incarnation {
            RewriteIncarnation::Fresh => Some(crate::store::incarnation::fresh(task)),
            RewriteIncarnation::Topic => {
                ChangelogProbe::new(consumer, topic, partition, (low, high)).incarnation()?
            }
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
        self.tombstone_keys_not_in_state(store, &mut rewrite, low..high)?;
        write_every_state_key(store, &mut rewrite)?;
        rewrite.finish(store, request_id, rebuild.from_input_offset)
    }
}

/// What the rewrite writes towards.
#[derive(Clone, Copy)]
struct Target<'m> {
    manifest: &'m CheckpointManifest,
    rebuild: InputRebuild,
    /// Kafka's committed input position before the rebuild, for the log.
    previous_position: Option<i64>,
    request_id: &'m str,
}

/// Until a checkpoint of the new changelog exists, the newest one describes the old.
fn first_checkpoint(service: &Arc<CheckpointService>, task: u32, store: &RocksStore) {
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
        let positions = input_offset
            .map(|next| Positions::of(Source::Joined(Side::Left), next))
            .unwrap_or_default();
        self.active.commit_changes(store, changes, positions)?;
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

impl Rebuilder<'_, '_> {
    /// A tombstone for every key the old changelog (offsets `old`) gives a value that the
    /// installed state does not hold. The state is asked key by key, so nothing but the current
    /// batch is held in memory; a key repeated in the changelog may get a second tombstone,
    /// which compaction removes.
    fn tombstone_keys_not_in_state(
        &self,
        store: &mut RocksStore,
        rewrite: &mut ChangelogRewrite<'_, '_>,
        old: std::ops::Range<i64>,
    ) -> Result<(), TaskError> {
        let Rebuilder {
            context,
            task,
            consumer,
            ..
        } = *self;
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
                Some(Err(error)) => {
                    return Err(TaskError::kafka("reading the changelog keys", error));
                }
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
