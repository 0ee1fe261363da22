//! Restore of a task's state, in reported phases (Discovery → Download → Replay → Done):
//! valid local state replays only the delta after its stored changelog offset; else the
//! newest usable S3 checkpoint is downloaded (`restore_checkpoint`) and the changelog replayed
//! from its offset; else the state is wiped (if needed) and rebuilt from the whole changelog. Replay reads committed records only, in large batches, each written
//! with one unlogged WriteBatch; the state is marked valid only after a final flush.

use super::input_position::position_in_record;
use super::{TaskError, WorkerContext};
use crate::checkpoint::select::Choice;
use crate::failpoint;
use crate::metrics::TaskLabel;
use crate::status::DownloadProgress;
use crate::status::{RestorePhase, RestoreProgress, RestoreSource};
use crate::store::{ChangeSet, OpenOutcome, RocksStore, StateStore, TaskMetadata};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::{Message, Offset, TopicPartitionList};
use std::time::{Duration, Instant};

const BATCH_RECORDS: usize = 20_000;
const TIMEOUT: Duration = Duration::from_secs(30);

/// Where a restore starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RestorePlan {
    /// Valid local state, else the newest usable checkpoint, else the whole changelog.
    Usual,
    /// The given checkpoint whatever the local state holds (a restore request); a chosen
    /// sequence never falls back to another checkpoint.
    Checkpoint(Choice),
}

/// Brings `store` up to the end of the changelog. Returns the number of records replayed.
pub fn restore_from_changelog(
    context: &WorkerContext,
    task: u32,
    store: &mut RocksStore,
    outcome: OpenOutcome,
    consumer: &BaseConsumer,
    plan: RestorePlan,
) -> Result<u64, TaskError> {
    let topic = context.config.kafka.changelog_topic.as_str();
    let partition = partition_of(task)?;
    let mut progress = Progress::new(context, task);
    progress.report(RestorePhase::Discovery);
    let (low, high) = consumer
        .fetch_watermarks(topic, partition, TIMEOUT)
        .map_err(|e| TaskError::kafka("reading changelog watermarks", e))?;
    let (chosen, choice) = match plan {
        RestorePlan::Usual => (false, Choice::Newest),
        RestorePlan::Checkpoint(choice) => (true, choice),
    };
    if let OpenOutcome::Valid(meta) | OpenOutcome::Interrupted(meta) = &outcome
        && meta.next_changelog_offset > high
        && !chosen
    {
        return Err(TaskError::ChangelogLost(format!(
            "task {task}'s local state includes changelog offsets up to {}, but {topic} partition {partition} ends at {high}: the topic was deleted or recreated; restore with spec.restore.source: input",
            meta.next_changelog_offset
        )));
    }
    let mut retention = RetentionLookup::new(context, topic);
    let probe = ChangelogProbe::new(consumer, topic, partition, (low, high));
    let current = probe.incarnation()?;
    // Local state from another incarnation of the topic (kept on a volume across a rebuilt
    // changelog) describes another history, whatever its offsets say.
    let same_history = super::incarnation::of_state(store) == current;
    let local = match &outcome {
        // A restore request replaces local state whatever it holds.
        _ if chosen => None,
        OpenOutcome::Valid(meta) | OpenOutcome::Interrupted(meta)
            if same_history
                && meta.next_changelog_offset >= low
                && meta.next_changelog_offset <= high
                // Nothing after the local state but transaction markers (the usual restart,
                // however long the task was idle) needs no tombstone rule.
                && (probe.only_control_records_from(meta.next_changelog_offset)?
                    || delta_is_exact(
                        true,
                        meta.newest_changelog_timestamp_ms,
                        now_ms(),
                        retention.get()?,
                    )) =>
        {
            Some(meta.next_changelog_offset)
        }
        _ => None,
    };
    let (start, source) = match local {
        Some(offset) => (offset, RestoreSource::Local),
        None => {
            if !matches!(outcome, OpenOutcome::Empty) {
                tracing::warn!(task, outcome = ?outcome, low, high, chosen, "local state unusable for a delta replay");
            }
            let restored = super::restore_checkpoint::from_checkpoints(
                context,
                task,
                store,
                choice,
                &mut progress,
                &mut retention,
                &probe,
            )?;
            match restored {
                Some(meta) => (meta.next_changelog_offset, RestoreSource::Checkpoint),
                None => {
                    if !matches!(outcome, OpenOutcome::Empty) || store.metadata().is_some() {
                        tracing::warn!(task, low, high, "rebuilding from the whole changelog");
                        store.wipe()?;
                    }
                    (low, RestoreSource::Empty)
                }
            }
        }
    };
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
    let mut batch = ChangeSet::new();
    let mut bytes = 0u64;
    loop {
        let at_end = match consumer.poll(Duration::from_millis(200)) {
            None => false,
            Some(Err(KafkaError::PartitionEOF(_))) => true,
            Some(Err(error)) => return Err(TaskError::kafka("replaying the changelog", error)),
            Some(Ok(message)) => {
                let key = message.key().unwrap_or_default();
                bytes += (key.len() + message.payload().map_or(0, <[u8]>::len)) as u64;
                batch.set(key.to_vec(), message.payload().map(<[u8]>::to_vec));
                if let Some(position) = position_in_record(key, message.payload()) {
                    meta.next_input_offset = position;
                }
                meta.next_changelog_offset = message.offset() + 1;
                if let Some(ts) = message.timestamp().to_millis() {
                    meta.newest_changelog_timestamp_ms = Some(ts);
                }
                progress.records_done += 1;
                false
            }
        };
        if !batch.is_empty() && (at_end || batch.len() >= BATCH_RECORDS) {
            store.restore_batch(&batch, &meta)?;
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
            break;
        }
    }
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

pub(super) fn partition_of(task: u32) -> Result<i32, TaskError> {
    i32::try_from(task).map_err(|_| TaskError::Internal(format!("task {task} is not a partition")))
}

/// Restore figures, published to the task board, the metrics and the logs.
pub(super) struct Progress<'a> {
    context: &'a WorkerContext,
    task: u32,
    source: RestoreSource,
    reprocessed_input_records: Option<u64>,
    total: u64,
    records_done: u64,
    reported_records: u64,
    bytes_done: u64,
    reported_bytes: u64,
    started: Instant,
    last_log: Instant,
    download: Option<DownloadProgress>,
    download_started: Instant,
    reported_download_bytes: u64,
}

impl<'a> Progress<'a> {
    pub(super) fn new(context: &'a WorkerContext, task: u32) -> Self {
        Self {
            context,
            task,
            source: RestoreSource::Unknown,
            reprocessed_input_records: None,
            total: 0,
            records_done: 0,
            reported_records: 0,
            bytes_done: 0,
            reported_bytes: 0,
            started: Instant::now(),
            last_log: Instant::now(),
            download: None,
            download_started: Instant::now(),
            reported_download_bytes: 0,
        }
    }

    /// A checkpoint download starts (or restarts with an older checkpoint).
    pub(super) fn start_download(&mut self, sequence: u64, bytes_total: u64) {
        self.download = Some(DownloadProgress {
            checkpoint_sequence: sequence,
            bytes_done: 0,
            bytes_total,
            bytes_per_second: 0.0,
            eta_seconds: None,
        });
        self.download_started = Instant::now();
        self.reported_download_bytes = 0;
        self.context
            .metrics
            .restore_download_target_bytes
            .get_or_create(&TaskLabel { task: self.task })
            .set(i64::try_from(bytes_total).unwrap_or(i64::MAX));
    }

    /// Bytes of the running download received so far; publishes them as the Download phase.
    pub(super) fn download_progress(&mut self, bytes_done: u64) {
        let seconds = self.download_started.elapsed().as_secs_f64().max(1e-9);
        let label = TaskLabel { task: self.task };
        let metrics = &self.context.metrics;
        if let Some(download) = self.download.as_mut() {
            download.bytes_done = bytes_done;
            download.bytes_per_second = bytes_done as f64 / seconds;
            let left = download.bytes_total.saturating_sub(bytes_done) as f64;
            download.eta_seconds =
                (download.bytes_per_second > 0.0).then(|| left / download.bytes_per_second);
            metrics
                .restore_download_bytes
                .get_or_create(&label)
                .inc_by(bytes_done.saturating_sub(self.reported_download_bytes));
            self.reported_download_bytes = self.reported_download_bytes.max(bytes_done);
            metrics
                .restore_download_bytes_per_second
                .get_or_create(&label)
                .set(download.bytes_per_second);
            metrics
                .restore_eta_seconds
                .get_or_create(&label)
                .set(download.eta_seconds.unwrap_or(0.0));
            if self.last_log.elapsed() >= Duration::from_secs(5) {
                tracing::info!(
                    task = self.task,
                    phase = "Download",
                    checkpoint = download.checkpoint_sequence,
                    bytes_done,
                    bytes_total = download.bytes_total,
                    bytes_per_second = download.bytes_per_second,
                    eta_seconds = download.eta_seconds.unwrap_or(0.0),
                    "restore progress"
                );
                self.last_log = Instant::now();
            }
        }
        self.report(RestorePhase::Download);
    }

    /// Discovery is over: what the replay starts from and how many offsets it covers.
    pub(super) fn start_replay(&mut self, source: RestoreSource, total: u64) {
        self.source = source;
        self.total = total;
        self.started = Instant::now();
        self.context
            .metrics
            .restore_records_total
            .get_or_create(&TaskLabel { task: self.task })
            .set(i64::try_from(total).unwrap_or(i64::MAX));
    }

    /// A restore from the input: how many input records will be processed a second time.
    pub(super) fn set_reprocessed_input_records(&mut self, records: Option<u64>) {
        self.reprocessed_input_records = records;
    }

    /// Records and bytes written since the last report.
    pub(super) fn add_done(&mut self, records: u64, bytes: u64) {
        self.records_done += records;
        self.bytes_done += bytes;
    }

    pub(super) fn report(&mut self, phase: RestorePhase) {
        let seconds = self.started.elapsed().as_secs_f64().max(1e-9);
        let rate = self.records_done as f64 / seconds;
        // The total counts offsets, which include transaction markers and compacted gaps, so
        // it is an upper bound: the ETA errs long.
        let left = self.total.saturating_sub(self.records_done) as f64;
        let eta = (rate > 0.0 && phase != RestorePhase::Done).then(|| left / rate);
        let label = TaskLabel { task: self.task };
        let metrics = &self.context.metrics;
        metrics
            .restore_records
            .get_or_create(&label)
            .inc_by(self.records_done - self.reported_records);
        metrics
            .restore_bytes
            .get_or_create(&label)
            .inc_by(self.bytes_done - self.reported_bytes);
        self.reported_records = self.records_done;
        self.reported_bytes = self.bytes_done;
        metrics
            .restore_records_per_second
            .get_or_create(&label)
            .set(rate);
        metrics
            .restore_eta_seconds
            .get_or_create(&label)
            .set(eta.unwrap_or(0.0));
        let progress = RestoreProgress {
            phase,
            source: self.source,
            records_done: self.records_done,
            records_total: self.total,
            bytes_done: self.bytes_done,
            records_per_second: rate,
            eta_seconds: eta,
            download: self.download.clone(),
            reprocessed_input_records: self.reprocessed_input_records,
        };
        let log_due =
            self.last_log.elapsed() >= Duration::from_secs(5) && phase != RestorePhase::Download;
        if log_due || phase == RestorePhase::Done {
            tracing::info!(
                task = self.task,
                ?phase,
                records_done = self.records_done,
                records_total = self.total,
                bytes_done = self.bytes_done,
                records_per_second = rate,
                eta_seconds = eta.unwrap_or(0.0),
                "restore progress"
            );
            self.last_log = Instant::now();
        }
        self.context
            .board
            .update(self.task, |report| report.restore = Some(progress));
    }
}

/// One changelog record: offset, key, value (`None`: a tombstone).
type ChangelogRecord = (i64, Vec<u8>, Option<Vec<u8>>);

/// Reads the changelog partition ahead of a replay: whether anything but control records
/// follows an offset, and which incarnation the topic is.
pub(super) struct ChangelogProbe<'a> {
    consumer: &'a BaseConsumer,
    topic: &'a str,
    partition: i32,
    /// The partition's offsets `[low, high)` at discovery.
    pub(super) low: i64,
    pub(super) high: i64,
    /// The topic's incarnation, read once: both the local-state and the checkpoint step ask.
    known_incarnation: std::cell::OnceCell<Option<String>>,
}

impl<'a> ChangelogProbe<'a> {
    /// A probe of changelog partition `partition`, which holds offsets `[low, high)`.
    pub(super) fn new(
        consumer: &'a BaseConsumer,
        topic: &'a str,
        partition: i32,
        (low, high): (i64, i64),
    ) -> Self {
        Self {
            consumer,
            topic,
            partition,
            low,
            high,
            known_incarnation: std::cell::OnceCell::new(),
        }
    }

    /// The incarnation the changelog's first record names (see `incarnation`).
    pub(super) fn incarnation(&self) -> Result<Option<String>, TaskError> {
        if let Some(known) = self.known_incarnation.get() {
            return Ok(known.clone());
        }
        let read = if self.low >= self.high {
            None
        } else {
            self.first_record_from(self.low)?
                .and_then(|(_, key, value)| {
                    super::incarnation::of_first_record(&key, value.as_deref())
                })
        };
        Ok(self.known_incarnation.get_or_init(|| read).clone())
    }

    /// True when only control records (transaction markers) and aborted records lie between
    /// `from` and the end: a committed read from there reaches the end without a record. The
    /// offset a state stores is the one after its last record, which is that transaction's
    /// commit marker, so after a clean stop the end is one past it, never equal.
    pub(super) fn only_control_records_from(&self, from: i64) -> Result<bool, TaskError> {
        if from >= self.high {
            return Ok(true);
        }
        Ok(self
            .first_record_from(from)?
            .is_none_or(|(offset, _, _)| offset >= self.high))
    }

    /// The first committed record at or after `from`: (offset, key, value); `None` at the end.
    fn first_record_from(&self, from: i64) -> Result<Option<ChangelogRecord>, TaskError> {
        let mut assignment = TopicPartitionList::new();
        assignment
            .add_partition_offset(self.topic, self.partition, Offset::Offset(from))
            .map_err(|e| TaskError::kafka("assigning the changelog partition", e))?;
        self.consumer
            .assign(&assignment)
            .map_err(|e| TaskError::kafka("assigning the changelog partition", e))?;
        let deadline = Instant::now() + TIMEOUT;
        loop {
            match self.consumer.poll(Duration::from_millis(200)) {
                Some(Err(KafkaError::PartitionEOF(_))) => return Ok(None),
                Some(Err(error)) => {
                    return Err(TaskError::kafka("reading ahead in the changelog", error));
                }
                Some(Ok(message)) => {
                    let key = message.key().unwrap_or_default().to_vec();
                    let value = message.payload().map(<[u8]>::to_vec);
                    return Ok(Some((message.offset(), key, value)));
                }
                None if Instant::now() >= deadline => {
                    return Err(TaskError::Changelog(format!(
                        "reading {} partition {} from offset {from} answered nothing within {TIMEOUT:?}",
                        self.topic, self.partition
                    )));
                }
                None => {}
            }
        }
    }
}

/// Whether replaying only the changelog records after the local state is exact. It is unless
/// tombstones written after it may already be compacted away: a tombstone is kept at least
/// `delete.retention.ms` after it is written, so state whose newest record is younger than
/// that sees every later tombstone. With nothing after the local state there is nothing to miss.
pub(super) fn delta_is_exact(
    records_after: bool,
    newest_record_ms: Option<i64>,
    now_ms: i64,
    delete_retention_ms: i64,
) -> bool {
    if !records_after {
        return true;
    }
    newest_record_ms.is_some_and(|newest| now_ms.saturating_sub(newest) < delete_retention_ms)
}

pub(super) fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// The changelog's `delete.retention.ms`, asked of the broker at most once per restore and
/// only when a delta replay needs the tombstone rule.
pub(super) struct RetentionLookup<'a> {
    context: &'a WorkerContext,
    topic: &'a str,
    value: Option<i64>,
}

impl<'a> RetentionLookup<'a> {
    fn new(context: &'a WorkerContext, topic: &'a str) -> Self {
        Self {
            context,
            topic,
            value: None,
        }
    }

    pub(super) fn get(&mut self) -> Result<i64, TaskError> {
        if let Some(value) = self.value {
            return Ok(value);
        }
        let value = changelog_delete_retention_ms(self.context, self.topic)?;
        self.value = Some(value);
        Ok(value)
    }
}

/// The changelog topic's `delete.retention.ms`, read from the broker.
fn changelog_delete_retention_ms(context: &WorkerContext, topic: &str) -> Result<i64, TaskError> {
    use rdkafka::admin::{AdminClient, AdminOptions, ResourceSpecifier};
    use rdkafka::client::DefaultClientContext;
    let admin: AdminClient<DefaultClientContext> =
        crate::kafka_client::base_config(&context.config.kafka)?
            .create()
            .map_err(|e| TaskError::kafka("creating an admin client", e))?;
    let options = AdminOptions::new().request_timeout(Some(TIMEOUT));
    // A broker whose metadata does not show the topic yet answers with an error for it, which
    // rust-rdkafka drops: the answer then lists no config at all. Ask again for a few seconds.
    for _ in 0..CONFIG_VISIBILITY_ATTEMPTS {
        let results = futures::executor::block_on(
            admin.describe_configs([&ResourceSpecifier::Topic(topic)], &options),
        )
        .map_err(|e| TaskError::kafka("describing the changelog topic", e))?;
        let config = results
            .into_iter()
            .next()
            .ok_or_else(|| TaskError::Changelog(format!("no configuration returned for {topic}")))?
            .map_err(|code| TaskError::Changelog(format!("describing {topic}: {code}")))?;
        if config.entries.is_empty() {
            std::thread::sleep(CONFIG_VISIBILITY_PAUSE);
            continue;
        }
        return config
            .get("delete.retention.ms")
            .and_then(|entry| entry.value.as_deref())
            .and_then(|value| value.parse().ok())
            .ok_or_else(|| {
                TaskError::Changelog(format!("{topic} has no readable delete.retention.ms"))
            });
    }
    Err(TaskError::Changelog(format!(
        "the broker lists no configs for {topic} yet (its metadata is catching up)"
    )))
}

const CONFIG_VISIBILITY_ATTEMPTS: u32 = 20;
const CONFIG_VISIBILITY_PAUSE: Duration = Duration::from_millis(250);

#[cfg(test)]
mod tests {
    use super::delta_is_exact;

    const DAY: i64 = 86_400_000;

    #[test]
    fn nothing_after_the_local_state_is_always_exact() {
        assert!(delta_is_exact(false, None, 10 * DAY, DAY));
        assert!(delta_is_exact(false, Some(0), 10 * DAY, DAY));
    }

    #[test]
    fn local_state_younger_than_tombstone_retention_is_exact() {
        assert!(delta_is_exact(true, Some(5 * DAY), 5 * DAY + DAY - 1, DAY));
    }

    #[test]
    fn local_state_as_old_as_tombstone_retention_needs_a_full_replay() {
        assert!(!delta_is_exact(true, Some(5 * DAY), 6 * DAY, DAY));
        assert!(!delta_is_exact(true, Some(0), 6 * DAY, DAY));
    }

    #[test]
    fn local_state_without_changelog_records_needs_a_full_replay_when_records_follow() {
        assert!(!delta_is_exact(true, None, DAY, DAY));
    }
}
