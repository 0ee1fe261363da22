//! A standby task: a warm copy of another pod's active task, kept close enough to take over in
//! a moment.
//!
//! It warms up with the same restore an active task runs (valid local state replays only the
//! delta, by the same tombstone rule; else the newest usable S3 checkpoint is installed first;
//! else the whole changelog is read), then tails changelog partition `i` with
//! `read_committed`, applying each fetch as a restore batch. It consumes no input, produces
//! nothing and writes no checkpoint. Its state therefore never holds an uncommitted change,
//! and when the task is promoted, the active path finds valid local state and replays only
//! what the standby had not applied yet.
//!
//! Lag is the distance to the changelog's end, reported on `/v1/tasks` (`changelogLag`) and
//! as `streamkeeper_standby_lag_records`; warm-up progress is the restore progress. A tail whose
//! consumer stops delivering records the broker holds restarts with a new one
//! (`consumer_watch`).

use super::changelog::changelog_consumer;
use super::consumer_watch::{self, ConsumerWatch};
use super::phase::PhaseTracker;
use super::{TaskError, WorkerContext, partition_of, restore};
use crate::kafka_client::ClosedAside;
use crate::metrics::TaskLabel;
use crate::store::{ChangeSet, OpenOutcome, RocksStore, StateStore, TaskMetadata};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::{Offset, TopicPartitionList};
use std::time::{Duration, Instant};
use streamkeeper_contract::task_report::TaskPhase;

/// What was fetched is applied once this many records are waiting, or after [`APPLY_EVERY`].
const BATCH_RECORDS: usize = 5_000;
const APPLY_EVERY: Duration = Duration::from_millis(100);
/// How often the lag is measured against the changelog's end.
const LAG_EVERY: Duration = Duration::from_millis(500);

/// Keeps `store` a warm copy of the task's state until the task's role changes or the worker
/// shuts down; the state it leaves is valid (every applied batch durable).
pub(super) fn run(
    context: &WorkerContext,
    task: u32,
    store: &mut RocksStore,
    outcome: OpenOutcome,
    phase: &mut PhaseTracker,
) -> Result<(), TaskError> {
    phase.enter(TaskPhase::Restoring, Some("standby warming up".into()));
    let warm_up = ClosedAside::new(changelog_consumer(context, true)?);
    restore::warm_up(context, task, store, outcome, &warm_up)?;
    drop(warm_up);
    phase.enter(
        TaskPhase::Running,
        Some("standby: tailing the changelog".into()),
    );
    // No end-of-partition events while tailing: the end is reached many times a second.
    let consumer = ClosedAside::new(changelog_consumer(context, false)?);
    let tailed = tail(context, task, store, &consumer);
    // Whatever ended the tail, what was applied is made durable, so a promotion (or a restart
    // on this volume) replays only what follows it.
    if store.metadata().is_some_and(|m| m.restoring) {
        store.finish_restore()?;
    }
    context
        .metrics
        .standby_lag_records
        .remove(&TaskLabel { task });
    tailed
}

/// Applies the changelog from the state's position on, until the task stops.
fn tail(
    context: &WorkerContext,
    task: u32,
    store: &mut RocksStore,
    consumer: &BaseConsumer,
) -> Result<(), TaskError> {
    let topic = context.config.kafka.changelog_topic.as_str();
    let partition = partition_of(task)?;
    let mut meta = store
        .metadata()
        .unwrap_or_else(|| TaskMetadata::initial(task));
    let mut assignment = TopicPartitionList::new();
    assignment
        .add_partition_offset(topic, partition, Offset::Offset(meta.next_changelog_offset))
        .map_err(|e| TaskError::kafka("assigning the changelog partition", e))?;
    consumer
        .assign(&assignment)
        .map_err(|e| TaskError::kafka("assigning the changelog partition", e))?;
    let mut batch = ChangeSet::new();
    let mut applied_at = Instant::now();
    let mut lag_at: Option<Instant> = None;
    let mut watch = ConsumerWatch::new(consumer_watch::stall_after());
    while !context.shutting_down() {
        let polled = consumer.poll(Duration::from_millis(50));
        watch.polled(matches!(polled, Some(Ok(_))), Instant::now());
        let idle = match polled {
            None => true,
            Some(Err(error)) => return Err(TaskError::kafka("tailing the changelog", error)),
            Some(Ok(message)) => {
                restore::take_record(&message, &mut batch, &mut meta);
                if crate::failpoint::reached("changelog-stops") {
                    // The consumer stops fetching as a stalled one does (see `consumer_watch`).
                    consumer
                        .pause(&assignment)
                        .map_err(|e| TaskError::kafka("pausing the tail (failpoint)", e))?;
                }
                false
            }
        };
        let due = idle || batch.len() >= BATCH_RECORDS || applied_at.elapsed() >= APPLY_EVERY;
        if !batch.is_empty() && due {
            store.restore_batch(&batch, &meta)?;
            batch.clear();
            applied_at = Instant::now();
        }
        if lag_at.is_none_or(|at| at.elapsed() >= LAG_EVERY) {
            let stable_end = report_lag(context, task, consumer, topic, partition, &meta);
            lag_at = Some(Instant::now());
            let position = consumer_watch::position_of(consumer, topic, partition)
                .unwrap_or(meta.next_changelog_offset);
            if let Some(stall) = watch.judge(position, stable_end, Instant::now()) {
                consumer_watch::report(context, task, "changelog", &stall);
                if !batch.is_empty() {
                    store.restore_batch(&batch, &meta)?;
                }
                return Err(TaskError::ConsumerStalled(format!("changelog: {stall}")));
            }
        }
    }
    if !batch.is_empty() {
        store.restore_batch(&batch, &meta)?;
    }
    Ok(())
}

/// Shows the standby's lag and returns the changelog's end as the consumer may read it (its
/// last stable offset), or `None` when the broker did not answer.
fn report_lag(
    context: &WorkerContext,
    task: u32,
    consumer: &BaseConsumer,
    topic: &str,
    partition: i32,
    meta: &TaskMetadata,
) -> Option<i64> {
    let (_, stable_end) = consumer
        .fetch_watermarks(topic, partition, Duration::from_secs(1))
        .ok()?;
    // The end counts transaction markers, which are never applied, so a caught-up standby reads
    // a lag of a few records; the rule's acceptable lag allows for it.
    let lag = (stable_end - meta.next_changelog_offset).max(0);
    context
        .metrics
        .standby_lag_records
        .get_or_create(&TaskLabel { task })
        .set(lag);
    context.board.update(task, |report| {
        report.changelog_lag = Some(lag);
        report.next_changelog_offset = Some(meta.next_changelog_offset);
    });
    Some(stable_end)
}
