//! The exactly-once loop of an active task (Kafka Streams EOS-v2 style):
//! poll input → process into an overlay → produce output, dead letters and one changelog record
//! per changed key → send the input offset to the transaction → commit → only then apply the
//! overlay and the offsets to RocksDB in one atomic write. Local state therefore never holds an
//! uncommitted change, and a restart needs only a delta replay.

use super::cadence::{PurgeCadence, SourceChecks};
use super::dead_letter::{self, DeadLetter};
use super::input_position;
use super::merge::{Merge, Polled};
use super::promotion::{PromotionClock, Step};
use super::sources::{self, Positions, Read, SideTopics, Source};
use super::{apply, claim, commit_mark, fence};
use crate::checkpoint::TaskCheckpoints;
use crate::failpoint;
use crate::kafka_client;
use crate::metrics::{ReasonLabel, TaskLabel};
use crate::processor::{Pipeline, ProcessError, ProcessOutput, RawInput, Side};
use crate::store::{ChangeSet, Overlay, RocksStore, StateStore, TaskMetadata};
use crate::task::changelog::changelog_consumer;
use crate::task::consumer_watch::{self, PartitionWatches};
use crate::task::{TaskError, WorkerContext, partition_of};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{DeliveryFuture, FutureProducer, FutureRecord, Producer};
use rdkafka::{Offset, TopicPartitionList};
use std::time::{Duration, Instant};

pub(super) const KAFKA_TIMEOUT: Duration = Duration::from_secs(30);

/// How long an idle task waits before committing its unchanged input offset again; far below
/// Kafka's default offset retention of 7 days. `STREAMKEEPER_OFFSET_REFRESH_SECONDS` overrides it
/// (tests use seconds).
const OFFSET_REFRESH: Duration = Duration::from_secs(3600);

fn offset_refresh_interval() -> Duration {
    crate::task::seconds_from_env("STREAMKEEPER_OFFSET_REFRESH_SECONDS", OFFSET_REFRESH)
}

/// An active task's clients and pipeline; its methods are the role's steps and the loop.
pub struct ActiveLoop<'a> {
    pub(super) context: &'a WorkerContext,
    pub(super) task: u32,
    pub(super) partition: i32,
    producer: FutureProducer,
    pub(super) input: BaseConsumer,
    /// How the job reads each side: the input, and a join's right topic.
    sides: Vec<SideTopics>,
    /// The partitions this task reads, once its input is resumed (`resume`).
    pub(super) reads: Vec<Read>,
    /// The job's task count, once the reads are planned: a join's keys are placed by it (the
    /// re-keyed ones this task writes too), and a re-keyed topic's partitions dealt out by it.
    pub(super) tasks: u32,
    /// The partition count of each side's own topic read besides partition `task` (re-keyed, or
    /// read whole) when the reads were planned.
    pub(super) source_counts: std::collections::BTreeMap<Side, u32>,
    pub(super) pipeline: Pipeline,
    /// Set when this run is a promotion: its steps and first commit are timed from it.
    promotion: std::cell::RefCell<Option<PromotionClock>>,
}

impl<'a> ActiveLoop<'a> {
    /// Creates the clients and claims the task: `init_transactions` fences any older owner
    /// and aborts its open transaction, so the changelog is final before the restore reads it.
    pub fn connect(context: &'a WorkerContext, task: u32) -> Result<Self, TaskError> {
        let config = &context.config;
        let partition = partition_of(task)?;
        let transactional_id = config.job.transactional_id(task);
        let producer = claim::claim(&config.kafka, &transactional_id, KAFKA_TIMEOUT, || {
            context.shutting_down()
        })?;
        let mut input_config =
            kafka_client::consumer_config(&config.kafka, &config.job.group_id())?;
        // An offset retention has deleted is an error here, not a silent jump to the earliest
        // record: the task restarts from its state and reports the gap (`input_position`).
        input_config.set("auto.offset.reset", "error");
        let input: BaseConsumer = input_config
            .create()
            .map_err(|e| TaskError::kafka("creating the input consumer", e))?;
        let pipeline = context
            .processor
            .pipeline()
            .map_err(|e| TaskError::Internal(format!("processor config: {e}")))?;
        Ok(Self {
            context,
            task,
            partition,
            producer,
            input,
            sides: sources::sides_of(config),
            reads: Vec::new(),
            tasks: 1,
            source_counts: Default::default(),
            pipeline,
            promotion: std::cell::RefCell::new(context.promoted_at.map(PromotionClock::since)),
        })
    }

    /// Ends a step of the promotion this run is, if it is one.
    pub fn promotion_step(&self, step: Step) {
        if let Some(clock) = self.promotion.borrow_mut().as_mut() {
            clock.mark(step);
        }
    }

    /// How the job reads each side: the input, and a join's right topic.
    pub(super) fn sides(&self) -> &[SideTopics] {
        &self.sides
    }

    /// Whether this task joins two topics.
    pub(super) fn joins(&self) -> bool {
        self.sides.len() > 1
    }

    /// The topic `side`'s records are joined (or processed) from: the side's own topic, or its
    /// repartition topic.
    pub(super) fn topic_of(&self, side: Side) -> &str {
        self.side(side)
            .map_or(&self.context.config.kafka.input_topic, SideTopics::joined)
    }

    /// How the job reads `side`.
    pub(super) fn side(&self, side: Side) -> Option<&SideTopics> {
        self.sides.iter().find(|topics| topics.side == side)
    }

    /// The topic and partition `source` is read from.
    pub(super) fn locate(&self, source: Source) -> (&str, i32) {
        match source {
            Source::Joined(side) => (self.topic_of(side), self.partition),
            Source::Rekeyed(side, partition) | Source::Whole(side, partition) => (
                self.side(side)
                    .map_or(&self.context.config.kafka.input_topic, |s| &s.topic),
                partition,
            ),
        }
    }

    /// Which source a record read from `topic`'s `partition` belongs to.
    fn source_of(&self, topic: &str, partition: i32) -> Option<Source> {
        self.reads
            .iter()
            .find(|read| read.partition == partition && read.topic == topic)
            .map(|read| read.source)
    }

    /// A consumer for replaying the changelog, with end-of-partition events: a replay ends on
    /// one.
    pub fn restore_consumer(&self) -> Result<BaseConsumer, TaskError> {
        changelog_consumer(self.context, true)
    }

    /// Processes until shutdown. On shutdown the open transaction is committed first.
    /// Checkpoints (when configured) are taken between records; the loop pays only for the
    /// local RocksDB checkpoint, the upload runs elsewhere.
    pub fn run(
        &mut self,
        store: &mut RocksStore,
        checkpoints: Option<&TaskCheckpoints>,
    ) -> Result<(), TaskError> {
        let mut open_since = None;
        let result = self.run_transactions(store, checkpoints, &mut open_since);
        result.map_err(|error| {
            let error = fence::behind_fatal(&self.producer, error);
            let open_for = open_since.map(|at: Instant| at.elapsed());
            fence::timed_out_or_fenced(self.context, self.task, error, open_for, store)
        })
    }

    /// The loop itself; `open_since` tells the caller how long the open transaction (if any)
    /// had been open when an error ended it.
    fn run_transactions(
        &mut self,
        store: &mut RocksStore,
        checkpoints: Option<&TaskCheckpoints>,
        open_since: &mut Option<Instant>,
    ) -> Result<(), TaskError> {
        let kafka = &self.context.config.kafka;
        let mut txn: Option<Transaction> = None;
        let mut checks = SourceChecks::starting_now();
        let refresh_every = offset_refresh_interval();
        let mut input_watch = PartitionWatches::new(consumer_watch::stall_after());
        let mut merge = (self.reads.len() > 1).then(Merge::default);
        let mut last_commit = Instant::now();
        let re_keys = self.sides.iter().any(|side| side.repartition.is_some());
        let mut purge = re_keys.then(PurgeCadence::starting_now);
        // The input had nothing more at the last poll.
        let mut drained = false;
        loop {
            let shutting_down = self.context.shutting_down();
            if let Some(open) = &txn {
                // A promotion's first transaction commits as soon as the backlog read so far
                // is processed: the task's output has stalled since the old owner's last commit.
                let first_after_promotion = drained && self.promotion.borrow().is_some();
                let due = open.started.elapsed() >= kafka.commit_interval
                    || open.records >= kafka.commit_max_records
                    || first_after_promotion;
                if due || shutting_down {
                    let open = txn
                        .take()
                        .ok_or_else(|| TaskError::Internal("no transaction".into()))?;
                    self.commit(store, open)?;
                    *open_since = None;
                    last_commit = Instant::now();
                }
            }
            if shutting_down {
                return Ok(());
            }
            if txn.is_none() && last_commit.elapsed() >= refresh_every {
                self.refresh_input_offset(store)?;
                last_commit = Instant::now();
            }
            if txn.is_none() && purge.as_mut().is_some_and(PurgeCadence::due) {
                self.purge_repartitioned(store);
            }
            if let Some(checkpoints) = checkpoints {
                checkpoints.maybe_checkpoint(store);
            }
            self.check_sources(store, txn.as_ref(), &mut input_watch, &mut checks)?;
            let polled = self.poll(merge.as_mut());
            let message = match polled {
                None => {
                    drained = true;
                    continue;
                }
                Some(Err(error)) => return Err(TaskError::kafka("polling input", error)),
                Some(Ok(message)) => message,
            };
            drained = false;
            if txn.is_none() {
                self.producer
                    .begin_transaction()
                    .map_err(|e| TaskError::kafka("begin_transaction", e))?;
                txn = Some(Transaction::new());
                *open_since = Some(Instant::now());
            }
            let open = txn
                .as_mut()
                .ok_or_else(|| TaskError::Internal("no transaction".into()))?;
            let source = message.source();
            match source {
                Source::Joined(_) | Source::Whole(..) => {
                    self.process_one(store, open, source, &message.raw())?
                }
                Source::Rekeyed(..) => self.rekey_one(open, source, &message.raw())?,
            }
            failpoint::hit("mid-transaction");
            if failpoint::reached("input-stops") {
                self.stop_fetching_input(None)?;
            }
            if failpoint::reached("right-input-stops") {
                self.stop_fetching_input(Some(Side::Right))?;
            }
        }
    }

    /// The next record: the input's as the consumer delivers them, or a join's topics in the
    /// order [`Merge`] decides.
    fn poll(&self, merge: Option<&mut Merge>) -> Option<Result<Polled<'_>, KafkaError>> {
        const WAIT: Duration = Duration::from_millis(20);
        match merge {
            Some(merge) => merge
                .next(&self.input, |topic, p| self.source_of(topic, p), WAIT)
                .transpose()
                .map(|polled| polled.map(|(source, message)| Polled::Merged(source, message))),
            None => self
                .input
                .poll(WAIT)
                .map(|polled| polled.map(Polled::Input)),
        }
    }

    fn process_one(
        &self,
        store: &RocksStore,
        txn: &mut Transaction,
        source: Source,
        input: &RawInput<'_>,
    ) -> Result<(), TaskError> {
        let changes = std::mem::take(&mut txn.changes);
        let mut overlay = Overlay::with_changes(store, changes);
        // A bad record, or one whose derived records cannot be produced (it would wedge the
        // partition), leaves no trace and goes to the dead-letter topic instead.
        let result = apply::apply_record(&self.pipeline, input, &mut overlay);
        txn.changes = overlay.into_changes();
        txn.records += 1;
        txn.positions.set(source, input.offset + 1);
        let label = TaskLabel { task: self.task };
        self.context
            .metrics
            .records_processed
            .get_or_create(&label)
            .inc();
        let (topic, _) = self.locate(source);
        let letter = match result {
            Ok(Ok(output)) => return self.emit(txn, &output),
            Ok(Err(oversized)) => DeadLetter {
                reason: dead_letter::OVERSIZED,
                detail: oversized.to_string(),
                topic,
                partition: self.partition,
                offset: input.offset,
                expected_partition: None,
            },
            Err(ProcessError::BadRecord(error)) => {
                DeadLetter::refused(&error, topic, self.partition, input.offset)
            }
            Err(other) => return Err(TaskError::Process(other)),
        };
        self.send_dead_letter(txn, input, &letter)
    }

    /// Produces a processed record's output into the open transaction.
    fn emit(&self, txn: &mut Transaction, output: &ProcessOutput) -> Result<(), TaskError> {
        let kafka = &self.context.config.kafka;
        if let Some(reason) = output.dropped {
            self.context
                .metrics
                .records_dropped
                .get_or_create(&ReasonLabel {
                    task: self.task,
                    reason: reason.as_str().into(),
                })
                .inc();
        }
        for record in &output.records {
            let future = self.send(
                FutureRecord::to(&kafka.output_topic)
                    .key(&record.key)
                    .payload(&record.value),
            )?;
            txn.pending.push(future);
        }
        Ok(())
    }

    /// Sends the input record `input` to the dead-letter topic in the open transaction.
    pub(super) fn send_dead_letter(
        &self,
        txn: &mut Transaction,
        input: &RawInput<'_>,
        letter: &DeadLetter<'_>,
    ) -> Result<(), TaskError> {
        let kafka = &self.context.config.kafka;
        let (offset, reason) = (input.offset, letter.reason);
        let (headers, kept) = letter.record(input.payload.unwrap_or_default());
        let mut record = FutureRecord::<(), [u8]>::to(&kafka.dead_letter_topic).headers(headers);
        if let Some(kept) = kept {
            record = record.payload(kept);
        }
        txn.pending.push(self.send(record)?);
        self.context
            .metrics
            .records_dead_lettered
            .get_or_create(&ReasonLabel {
                task: self.task,
                reason: reason.into(),
            })
            .inc();
        tracing::debug!(task = self.task, offset, reason, "record dead-lettered");
        Ok(())
    }

    /// Produces one changelog record per changed key, adds the input offset, commits, then
    /// applies the changes to local state.
    fn commit(&self, store: &mut RocksStore, mut txn: Transaction) -> Result<(), TaskError> {
        let kafka = &self.context.config.kafka;
        // The input positions travel with the state (see `input_position`).
        for (source, next) in txn.positions.moved() {
            txn.changes.put(
                &sources::position_key(source),
                input_position::encode_position(next),
            );
        }
        let mut last_changelog: Option<DeliveryFuture> = None;
        for (key, value) in txn.changes.iter() {
            let mut record = FutureRecord::<[u8], [u8]>::to(&kafka.changelog_topic)
                .key(key)
                .partition(self.partition);
            if let Some(value) = value {
                record = record.payload(value);
            }
            last_changelog = Some(self.send(record)?);
        }
        let changelog_records = txn.changes.len() as u64;
        self.send_input_offsets(&txn.positions)?;
        self.producer
            .commit_transaction(KAFKA_TIMEOUT)
            .map_err(|e| TaskError::kafka("commit_transaction", e))?;
        failpoint::hit("after-kafka-commit");

        let mut meta = store
            .metadata()
            .unwrap_or_else(|| TaskMetadata::initial(self.task));
        if let Some(next_input_offset) = txn.positions.get(Source::Joined(Side::Left)) {
            meta.next_input_offset = next_input_offset;
        }
        if let Some(future) = last_changelog {
            let delivery = futures::executor::block_on(future)
                .map_err(|_| TaskError::Internal("changelog delivery report lost".into()))?
                .map_err(|(e, _)| TaskError::kafka("changelog delivery", e))?;
            meta.next_changelog_offset = delivery.offset + 1;
            meta.newest_changelog_timestamp_ms = delivery
                .timestamp
                .to_millis()
                .or(meta.newest_changelog_timestamp_ms);
        }
        // Outputs were acknowledged by the commit; their reports only need draining.
        txn.pending.clear();
        store.commit(&txn.changes, &meta)?;
        failpoint::hit("after-store-commit");
        self.report_commit(&meta, changelog_records);
        Ok(())
    }

    /// Adds the input positions the transaction moved to it, marked with the assignment
    /// generation this role runs under (`commit_mark`).
    fn send_input_offsets(&self, positions: &Positions) -> Result<(), TaskError> {
        let mut offsets = TopicPartitionList::new();
        for (source, next) in positions.moved() {
            // Every task reads a whole table's partitions: one group offset cannot stand for
            // them all, so its positions are only in each task's state.
            if matches!(source, Source::Whole(..)) {
                continue;
            }
            let (topic, partition) = self.locate(source);
            let mut offset = offsets.add_partition(topic, partition);
            offset
                .set_offset(Offset::Offset(next))
                .map_err(|e| TaskError::kafka("building the offsets", e))?;
            offset.set_metadata(commit_mark::encode(self.context.generation));
        }
        if offsets.count() == 0 {
            return Ok(());
        }
        let group = self.input.group_metadata().ok_or_else(|| {
            TaskError::Internal("the input consumer has no group metadata".into())
        })?;
        self.producer
            .send_offsets_to_transaction(&offsets, &group, KAFKA_TIMEOUT)
            .map_err(|e| TaskError::kafka("send_offsets_to_transaction", e))
    }

    /// Counts a commit that brought the state to `meta`, shows it on the task board, and ends
    /// the promotion this run is, if it is one.
    fn report_commit(&self, meta: &TaskMetadata, changelog_records: u64) {
        let label = TaskLabel { task: self.task };
        let metrics = &self.context.metrics;
        metrics.transactions_committed.get_or_create(&label).inc();
        metrics
            .changelog_records_written
            .get_or_create(&label)
            .inc_by(changelog_records);
        let placement = self.pipeline.placement_evidence();
        self.context.board.update(self.task, |r| {
            r.committed_transactions += 1;
            r.next_input_offset = Some(meta.next_input_offset);
            r.next_changelog_offset = Some(meta.next_changelog_offset);
            // A restarted run has checked nothing yet: the last run's evidence stays shown.
            if placement.iter().any(|side| side.checked > 0) {
                r.placement = placement;
            }
        });
        if let Some(mut clock) = self.promotion.take() {
            clock.mark(Step::FirstCommit);
            let seconds = clock.total().as_secs_f64();
            metrics.promotion_seconds.get_or_create(&label).set(seconds);
            tracing::info!(
                task = self.task,
                seconds,
                steps = %clock.summary(),
                "promotion: first commit as the new owner"
            );
        }
    }

    /// Commits `changes` in one Kafka transaction that consumes no input, then applies them to
    /// local state; the transaction also moves the committed input positions to `positions`.
    /// A restore request records itself, and a restore from the input rewrites the changelog,
    /// this way.
    pub fn commit_changes(
        &self,
        store: &mut RocksStore,
        changes: ChangeSet,
        positions: Positions,
    ) -> Result<(), TaskError> {
        self.producer
            .begin_transaction()
            .map_err(|e| TaskError::kafka("begin_transaction", e))?;
        let mut txn = Transaction::new();
        txn.changes = changes;
        txn.positions = positions;
        self.commit(store, txn)
    }

    /// Commits the unchanged input position of an idle task. Kafka expires a manual-assign
    /// group's offsets `offsets.retention.minutes` after its last commit; the state would still
    /// resume right without them, but tools reading the group's lag would not.
    fn refresh_input_offset(&self, store: &mut RocksStore) -> Result<(), TaskError> {
        let Some(position) = store
            .metadata()
            .map(|m| m.next_input_offset)
            .filter(|p| *p > 0)
        else {
            return Ok(());
        };
        let mut positions = Positions::default();
        for read in &self.reads {
            let next = self.state_position(store, read.source)?;
            positions.set(read.source, next);
        }
        self.commit_changes(store, ChangeSet::new(), positions)?;
        self.context
            .metrics
            .input_offset_refreshes
            .get_or_create(&TaskLabel { task: self.task })
            .inc();
        tracing::debug!(
            task = self.task,
            position,
            "idle: input offset committed again"
        );
        Ok(())
    }

    /// Sends a record, waiting for room in the producer queue rather than failing.
    pub(super) fn send<K, P>(
        &self,
        record: FutureRecord<'_, K, P>,
    ) -> Result<DeliveryFuture, TaskError>
    where
        K: rdkafka::message::ToBytes + ?Sized,
        P: rdkafka::message::ToBytes + ?Sized,
    {
        let mut record = record;
        loop {
            match self.producer.send_result(record) {
                Ok(future) => return Ok(future),
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back)) => {
                    record = back;
                    self.producer.poll(Duration::from_millis(10));
                }
                Err((error, _)) => return Err(TaskError::kafka("producing", error)),
            }
        }
    }
}

/// The open Kafka transaction: the overlay of state changes and what it has consumed.
pub(super) struct Transaction {
    started: Instant,
    pub(super) records: u32,
    /// Where each source resumes after this transaction.
    pub(super) positions: Positions,
    changes: ChangeSet,
    pub(super) pending: Vec<DeliveryFuture>,
}

impl Transaction {
    fn new() -> Self {
        Self {
            started: Instant::now(),
            records: 0,
            positions: Positions::default(),
            changes: ChangeSet::new(),
            pending: Vec::new(),
        }
    }
}
