//! The checkpoint service of a worker: decides when each task takes a checkpoint (every
//! `checkpoint.interval`, on request, after backoff when the last attempt failed) and runs the
//! uploads on the async runtime, beside the task threads. A task's processing loop only pays
//! for the local RocksDB checkpoint (hard links); hashing, uploading, the manifest and the
//! retention run here, one checkpoint per task at a time.

use super::error::CheckpointError;
use super::s3::S3Storage;
use super::upload::{ManifestIdentity, Retention, Snapshot, TaskUploader, Uploaded, now_ms};
use crate::board::TaskBoard;
use crate::metrics::{TaskLabel, WorkerMetrics};
use crate::store::{RocksStore, StateStore};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use streamkeeper_contract::WorkerConfig;
use streamkeeper_contract::checkpoint_layout::{JobPrefix, TaskPrefix};
use streamkeeper_contract::task_report::CheckpointReport;
use tokio::runtime::Handle;
use tokio::sync::oneshot;

/// How long unreferenced objects survive (see [`super::gc`]). Tests shorten it through
/// `STREAMKEEPER_CHECKPOINT_GC_GRACE_SECONDS`.
const DEFAULT_GC_GRACE: Duration = Duration::from_secs(600);
const MAX_BACKOFF: Duration = Duration::from_secs(15);

type Waiter = oneshot::Sender<Result<CheckpointReport, String>>;

/// Every task's checkpoints. Shared by the task threads and the HTTP server.
#[derive(Debug)]
pub struct CheckpointService {
    runtime: Handle,
    storage: S3Storage,
    config: Arc<WorkerConfig>,
    metrics: WorkerMetrics,
    board: TaskBoard,
    retention: Retention,
    owner: String,
    tasks: Mutex<BTreeMap<u32, Arc<TaskSlot>>>,
}

#[derive(Debug)]
struct TaskSlot {
    task: u32,
    uploader: tokio::sync::Mutex<TaskUploader>,
    schedule: Mutex<Schedule>,
    /// Requests (`POST /v1/checkpoints`) not yet part of a snapshot.
    waiters: Mutex<Vec<Waiter>>,
    fenced: AtomicBool,
    snapshots: AtomicU64,
}

#[derive(Debug)]
struct Schedule {
    busy: bool,
    /// No attempt before this (backoff after a failure).
    not_before: Instant,
    /// The next periodic checkpoint.
    next_due: Instant,
    failures: u32,
    /// Offsets of the newest durable checkpoint: a periodic checkpoint of unchanged state is
    /// skipped.
    last_offsets: Option<(i64, i64)>,
    last_success_ms: Option<u64>,
    age_reported: Instant,
}

impl CheckpointService {
    /// The service, or `None` when the config has no S3 settings (checkpoints off).
    pub async fn connect(
        config: Arc<WorkerConfig>,
        metrics: WorkerMetrics,
        board: TaskBoard,
    ) -> Result<Option<Arc<Self>>, CheckpointError> {
        let Some(s3) = &config.checkpoint.s3 else {
            return Ok(None);
        };
        let storage = S3Storage::connect(s3).await?;
        let grace = std::env::var("STREAMKEEPER_CHECKPOINT_GC_GRACE_SECONDS")
            .ok()
            .and_then(|v| v.parse().ok())
            .map_or(DEFAULT_GC_GRACE, Duration::from_secs);
        tracing::info!(bucket = %s3.bucket, prefix = %s3.prefix, endpoint = s3.endpoint.as_deref().unwrap_or("aws"), interval_seconds = config.checkpoint.interval.as_secs_f64(), retain = config.checkpoint.retain, gc_grace_seconds = grace.as_secs(), "checkpoints to S3 enabled");
        Ok(Some(Arc::new(Self {
            runtime: Handle::current(),
            storage,
            retention: Retention {
                retain: usize::try_from(config.checkpoint.retain).unwrap_or(usize::MAX),
                grace,
            },
            owner: std::env::var("HOSTNAME").unwrap_or_else(|_| "standalone".into()),
            config,
            metrics,
            board,
            tasks: Mutex::new(BTreeMap::new()),
        })))
    }

    pub fn storage(&self) -> &S3Storage {
        &self.storage
    }

    pub fn runtime(&self) -> &Handle {
        &self.runtime
    }

    pub fn prefix(&self, task: u32) -> TaskPrefix {
        let s3_prefix = self
            .config
            .checkpoint
            .s3
            .as_ref()
            .map_or("", |s3| s3.prefix.as_str());
        JobPrefix::of(s3_prefix, &self.config.job).task(task)
    }

    /// The handle task `task`'s loop uses; registers the task on first use.
    pub fn task(self: &Arc<Self>, task: u32) -> TaskCheckpoints {
        let mut registered = false;
        let slot = {
            let mut tasks = self.tasks.lock().unwrap_or_else(|p| p.into_inner());
            Arc::clone(tasks.entry(task).or_insert_with(|| {
                registered = true;
                // Leftovers of a previous process: nothing reads them any more.
                let staging = staging_root(&self.config.state.dir, task);
                if let Err(error) = std::fs::remove_dir_all(&staging)
                    && error.kind() != std::io::ErrorKind::NotFound
                {
                    tracing::warn!(task, %error, path = %staging.display(), "cannot clear old checkpoint staging");
                }
                let identity = ManifestIdentity {
                    owner: self.owner.clone(),
                    assignment_generation: 0,
                    processor_kind: self.config.processor.kind.name().to_string(),
                    state_format_version: u32::from(crate::processor::STATE_FORMAT_VERSION),
                };
                let now = Instant::now();
                Arc::new(TaskSlot {
                    task,
                    uploader: tokio::sync::Mutex::new(TaskUploader::new(
                        self.storage.clone(),
                        self.prefix(task),
                        task,
                        identity,
                    )),
                    schedule: Mutex::new(Schedule {
                        busy: false,
                        not_before: now,
                        next_due: now + self.config.checkpoint.interval,
                        failures: 0,
                        last_offsets: None,
                        last_success_ms: None,
                        age_reported: now,
                    }),
                    waiters: Mutex::new(Vec::new()),
                    fenced: AtomicBool::new(false),
                    snapshots: AtomicU64::new(0),
                })
            }))
        };
        if registered {
            self.seed_age(&slot);
        }
        TaskCheckpoints {
            service: Arc::clone(self),
            slot,
        }
    }

    /// The task left the active role on this worker: it takes no more checkpoints here, and a
    /// request for one no longer waits for it. A later active run registers afresh.
    pub fn release(&self, task: u32) {
        let mut tasks = self.tasks.lock().unwrap_or_else(|p| p.into_inner());
        tasks.remove(&task);
    }

    /// Reads what S3 already holds for a newly registered task, so the age of its newest
    /// durable checkpoint is known from the start rather than after the first new checkpoint
    /// (a restarted worker would otherwise report no age at all for an interval).
    fn seed_age(&self, slot: &Arc<TaskSlot>) {
        let slot = Arc::clone(slot);
        let metrics = self.metrics.clone();
        self.runtime.spawn(async move {
            let newest = match slot.uploader.lock().await.discover().await {
                Ok(newest) => newest,
                Err(error) => {
                    tracing::warn!(task = slot.task, %error, "cannot list existing checkpoints yet");
                    return;
                }
            };
            let Some(manifest) = newest else { return };
            let mut schedule = slot.schedule.lock().unwrap_or_else(|p| p.into_inner());
            if schedule.last_success_ms.is_none() {
                schedule.last_success_ms = Some(manifest.created_at_ms);
                let label = TaskLabel { task: slot.task };
                metrics
                    .checkpoint_last_success_seconds
                    .get_or_create(&label)
                    .set(manifest.created_at_ms as f64 / 1000.0);
                metrics
                    .checkpoint_age_seconds
                    .get_or_create(&label)
                    .set(now_ms().saturating_sub(manifest.created_at_ms) as f64 / 1000.0);
            }
        });
    }

    /// Asks every task for a checkpoint now; answers once each is durable (or `limit` passed).
    pub async fn request_all(
        &self,
        limit: Duration,
    ) -> Vec<(u32, Result<CheckpointReport, String>)> {
        let slots: Vec<Arc<TaskSlot>> = self
            .tasks
            .lock()
            .map(|tasks| tasks.values().cloned().collect())
            .unwrap_or_default();
        let mut pending = Vec::new();
        for slot in slots {
            let (sender, receiver) = oneshot::channel();
            if let Ok(mut waiters) = slot.waiters.lock() {
                waiters.push(sender);
            }
            pending.push((slot.task, receiver));
        }
        let mut answers = Vec::new();
        for (task, receiver) in pending {
            let answer = match tokio::time::timeout(limit, receiver).await {
                Ok(Ok(result)) => result,
                Ok(Err(_)) => Err("the task stopped before the checkpoint was durable".into()),
                Err(_) => Err(format!(
                    "no durable checkpoint within {}s (S3 unreachable, or the task is not running)",
                    limit.as_secs()
                )),
            };
            answers.push((task, answer));
        }
        answers
    }
}

fn staging_root(state_dir: &Path, task: u32) -> PathBuf {
    state_dir
        .join(format!("task-{task}"))
        .join("checkpoint-staging")
}

/// One task's side of the service, held by its processing loop.
#[derive(Debug, Clone)]
pub struct TaskCheckpoints {
    service: Arc<CheckpointService>,
    slot: Arc<TaskSlot>,
}

impl TaskCheckpoints {
    /// Takes a checkpoint now and waits on this thread until it is durable or `limit` passes.
    /// Used after a restore from the input: until then the newest checkpoint describes the
    /// changelog before the restore.
    pub fn checkpoint_and_wait(
        &self,
        store: &RocksStore,
        limit: Duration,
    ) -> Result<CheckpointReport, String> {
        let (sender, mut receiver) = oneshot::channel();
        if let Ok(mut waiters) = self.slot.waiters.lock() {
            waiters.push(sender);
        }
        let deadline = Instant::now() + limit;
        loop {
            self.maybe_checkpoint(store);
            match receiver.try_recv() {
                Ok(answer) => return answer,
                Err(oneshot::error::TryRecvError::Closed) => {
                    return Err("the checkpoint was dropped before it was durable".into());
                }
                Err(oneshot::error::TryRecvError::Empty) if Instant::now() >= deadline => {
                    return Err(format!("no durable checkpoint within {}s", limit.as_secs()));
                }
                Err(oneshot::error::TryRecvError::Empty) => {
                    std::thread::sleep(Duration::from_millis(50));
                }
            }
        }
    }

    /// Reports the checkpoint's age (at most once a second) and says whether a checkpoint is
    /// due now: one was requested, or the interval has passed and something was committed since
    /// the newest one. When one is, the task is busy until it finishes.
    fn due(&self, store: &RocksStore, now: Instant) -> bool {
        let label = TaskLabel {
            task: self.slot.task,
        };
        let metrics = &self.service.metrics;
        let mut schedule = self.slot.schedule.lock().unwrap_or_else(|p| p.into_inner());
        if now.duration_since(schedule.age_reported) >= Duration::from_secs(1) {
            schedule.age_reported = now;
            if let Some(ms) = schedule.last_success_ms {
                let age = now_ms().saturating_sub(ms) as f64 / 1000.0;
                metrics
                    .checkpoint_age_seconds
                    .get_or_create(&label)
                    .set(age);
            }
        }
        if schedule.busy || now < schedule.not_before {
            return false;
        }
        let requested = self.slot.waiters.lock().is_ok_and(|w| !w.is_empty());
        if !requested && now < schedule.next_due {
            return false;
        }
        let offsets = store
            .metadata()
            .map(|m| (m.next_input_offset, m.next_changelog_offset));
        // Nothing committed yet, or (periodically) nothing new since the newest checkpoint.
        if offsets.is_none() || (!requested && offsets == schedule.last_offsets) {
            schedule.next_due = now + self.service.config.checkpoint.interval;
            return false;
        }
        schedule.busy = true;
        true
    }

    /// Called by the processing loop between records: when a checkpoint is due, takes the
    /// local RocksDB checkpoint (the only part that runs on the loop's thread) and hands it to
    /// the uploader.
    pub fn maybe_checkpoint(&self, store: &RocksStore) {
        let now = Instant::now();
        let task = self.slot.task;
        let label = TaskLabel { task };
        let metrics = &self.service.metrics;
        if !self.due(store, now) {
            return;
        }
        let waiters: Vec<Waiter> = self
            .slot
            .waiters
            .lock()
            .map(|mut w| std::mem::take(&mut *w))
            .unwrap_or_default();
        let number = self.slot.snapshots.fetch_add(1, Ordering::Relaxed);
        let dir = staging_root(&self.service.config.state.dir, task).join(number.to_string());
        let taken = std::fs::create_dir_all(dir.parent().unwrap_or(&dir))
            .map_err(CheckpointError::io("create checkpoint staging", &dir))
            .and_then(|()| store.checkpoint(&dir).map_err(CheckpointError::from));
        let snapshot_seconds = now.elapsed().as_secs_f64();
        metrics
            .checkpoint_snapshot_seconds
            .get_or_create(&label)
            .set(snapshot_seconds);
        match taken {
            Ok(info) => {
                let Some(metadata) = info.metadata else {
                    self.finish(
                        now,
                        Err(CheckpointError::Internal("no metadata".into())),
                        waiters,
                    );
                    return;
                };
                tracing::debug!(
                    task,
                    snapshot_ms = snapshot_seconds * 1000.0,
                    "local checkpoint taken"
                );
                let snapshot = Snapshot {
                    dir,
                    metadata,
                    file_names: info.files.into_iter().map(|f| f.name).collect(),
                    changelog_incarnation: crate::store::incarnation::of_state(store),
                };
                let this = self.clone();
                self.service.runtime.spawn(async move {
                    let result = this.slot.uploader.lock().await.upload(&snapshot).await;
                    let dir = snapshot.dir.clone();
                    let _ = tokio::task::spawn_blocking(move || std::fs::remove_dir_all(dir)).await;
                    let succeeded = result.is_ok();
                    this.finish(now, result, waiters);
                    if succeeded && !this.slot.fenced.load(Ordering::SeqCst) {
                        this.collect_garbage().await;
                    }
                });
            }
            Err(error) => {
                let _ = std::fs::remove_dir_all(&dir);
                self.finish(now, Err(error), waiters);
            }
        }
    }

    /// A newer owner took the task: stop garbage-collecting (only the current owner does).
    pub fn set_fenced(&self) {
        self.slot.fenced.store(true, Ordering::SeqCst);
    }

    fn finish(
        &self,
        started: Instant,
        result: Result<Uploaded, CheckpointError>,
        waiters: Vec<Waiter>,
    ) {
        let task = self.slot.task;
        let label = TaskLabel { task };
        let metrics = &self.service.metrics;
        let mut schedule = self.slot.schedule.lock().unwrap_or_else(|p| p.into_inner());
        schedule.busy = false;
        match result {
            Ok(uploaded) => {
                let seconds = started.elapsed().as_secs_f64();
                let manifest = &uploaded.manifest;
                let report = CheckpointReport {
                    sequence: manifest.sequence,
                    created_at_ms: manifest.created_at_ms,
                    input_offset: manifest.input_offset,
                    changelog_offset: manifest.changelog_offset,
                    total_bytes: manifest.total_bytes(),
                    uploaded_bytes: uploaded.uploaded_bytes,
                    files: manifest.files.len(),
                    uploaded_files: uploaded.uploaded_files,
                    seconds,
                };
                tracing::info!(
                    task,
                    sequence = report.sequence,
                    changelog_offset = report.changelog_offset,
                    input_offset = report.input_offset,
                    total_bytes = report.total_bytes,
                    uploaded_bytes = report.uploaded_bytes,
                    uploaded_files = report.uploaded_files,
                    seconds,
                    "checkpoint durable"
                );
                metrics.checkpoints.get_or_create(&label).inc();
                metrics
                    .checkpoint_uploaded_bytes
                    .get_or_create(&label)
                    .inc_by(uploaded.uploaded_bytes);
                metrics
                    .checkpoint_duration_seconds
                    .get_or_create(&label)
                    .set(seconds);
                metrics
                    .checkpoint_last_success_seconds
                    .get_or_create(&label)
                    .set(manifest.created_at_ms as f64 / 1000.0);
                metrics
                    .checkpoint_age_seconds
                    .get_or_create(&label)
                    .set(0.0);
                schedule.failures = 0;
                schedule.not_before = Instant::now();
                schedule.next_due = started + self.service.config.checkpoint.interval;
                schedule.last_offsets = Some((manifest.input_offset, manifest.changelog_offset));
                schedule.last_success_ms = Some(manifest.created_at_ms);
                self.service
                    .board
                    .update(task, |r| r.last_checkpoint = Some(report.clone()));
                for waiter in waiters {
                    let _ = waiter.send(Ok(report.clone()));
                }
            }
            Err(error) => {
                schedule.failures += 1;
                let backoff = backoff(schedule.failures);
                schedule.not_before = Instant::now() + backoff;
                metrics.checkpoint_failures.get_or_create(&label).inc();
                tracing::warn!(task, %error, category = error.category(), failures = schedule.failures, retry_in_ms = backoff.as_millis() as u64, "checkpoint failed; processing goes on, retrying later");
                // Requests wait for the next attempt (or their own time limit).
                if let Ok(mut pending) = self.slot.waiters.lock() {
                    pending.extend(waiters);
                }
            }
        }
    }

    async fn collect_garbage(&self) {
        let retention = self.service.retention;
        let outcome = self
            .slot
            .uploader
            .lock()
            .await
            .collect_garbage(retention)
            .await;
        let label = TaskLabel {
            task: self.slot.task,
        };
        match outcome {
            Ok(done) => {
                self.service
                    .metrics
                    .checkpoint_gc_deleted_objects
                    .get_or_create(&label)
                    .inc_by((done.manifests + done.objects) as u64);
            }
            Err(error) => {
                tracing::warn!(task = self.slot.task, %error, "checkpoint garbage collection failed; retried after the next checkpoint");
            }
        }
    }
}

fn backoff(failures: u32) -> Duration {
    let exponent = failures.saturating_sub(1).min(8);
    (Duration::from_millis(500) * 2u32.pow(exponent)).min(MAX_BACKOFF)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_its_limit() {
        assert_eq!(backoff(1), Duration::from_millis(500));
        assert_eq!(backoff(2), Duration::from_secs(1));
        assert_eq!(backoff(3), Duration::from_secs(2));
        assert_eq!(backoff(20), MAX_BACKOFF);
    }
}
