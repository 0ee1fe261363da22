//! The checkpoint step of a restore: list the task's manifests, pick the usable ones best
//! first (`checkpoint::select`), download one with every checksum verified (the Download
//! phase), and install it as the local state. A missing or corrupt object falls back to the
//! previous checkpoint with a warning and `streamkeeper_checkpoint_fallbacks_total`; when no
//! checkpoint is usable the caller rebuilds from the whole changelog. A checkpoint chosen by
//! sequence (a restore request) never falls back: the task fails with the reason.
//!
//! The newest manifest written names a changelog offset past the changelog's end only when the
//! topic was deleted or recreated; the restore then stops instead of rebuilding from what is
//! left (see [`TaskError::ChangelogLost`]).

use super::restore::{ChangelogProbe, Progress, RetentionLookup, delta_is_exact, now_ms};
use super::{TaskError, WorkerContext};
use crate::checkpoint::CheckpointError;
use crate::checkpoint::download::{download, list_manifests};
use crate::checkpoint::select::{self, Choice};
use crate::metrics::TaskLabel;
use crate::store::{OpenOutcome, RocksStore, TaskMetadata};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use streamkeeper_contract::CheckpointManifest;

/// Installs the best usable checkpoint into `store`. `None`: no checkpoint could be used.
pub(super) fn from_checkpoints(
    context: &WorkerContext,
    task: u32,
    store: &mut RocksStore,
    choice: Choice,
    progress: &mut Progress<'_>,
    retention: &mut RetentionLookup<'_>,
    probe: &ChangelogProbe<'_>,
) -> Result<Option<TaskMetadata>, TaskError> {
    let (low, high) = (probe.low, probe.high);
    let Some(service) = context.checkpoints.as_ref() else {
        return Ok(None);
    };
    let runtime = service.runtime().clone();
    let prefix = service.prefix(task);
    let mut manifests = match runtime.block_on(list_manifests(service.storage(), &prefix)) {
        Ok(manifests) => manifests,
        // Without the changelog's head, or asked for one checkpoint, there is no other way.
        Err(error) if low > 0 || choice != Choice::Newest => return Err(error.into()),
        Err(error) => {
            tracing::warn!(task, %error, "cannot list checkpoints; rebuilding from the changelog instead");
            return Ok(None);
        }
    };
    // Checkpoints of another incarnation of the topic describe another history.
    let incarnation = probe.incarnation()?;
    let listed_all = manifests.len();
    manifests.retain(|m| m.changelog_incarnation == incarnation);
    if manifests.len() < listed_all {
        tracing::info!(
            task,
            ignored = listed_all - manifests.len(),
            ?incarnation,
            "restore: ignoring checkpoints of another changelog incarnation"
        );
    }
    if let Some(newest) = manifests.iter().max_by_key(|m| m.sequence)
        && newest.changelog_offset > high
    {
        return Err(TaskError::ChangelogLost(format!(
            "task {task}'s newest checkpoint {} includes changelog offsets up to {}, but the changelog ends at {high}: the topic was deleted or recreated; restore with spec.restore.source: input",
            newest.sequence, newest.changelog_offset
        )));
    }
    let listed = manifests.len();
    // Only transaction markers after the furthest checkpoint (an idle task's) need no
    // tombstone rule for it, however old it is: one read ahead tells.
    let furthest = manifests
        .iter()
        .filter(|m| m.task == task && m.changelog_offset >= low && m.changelog_offset < high)
        .map(|m| m.changelog_offset)
        .max();
    let quiet_from = match furthest {
        Some(offset) if probe.only_control_records_from(offset)? => offset,
        _ => high,
    };
    let needs_rule = manifests
        .iter()
        .any(|m| m.changelog_offset >= low && m.changelog_offset < quiet_from);
    let retention_ms = if needs_rule { retention.get()? } else { 0 };
    let now = now_ms();
    let candidates = select::candidates(manifests, task, low, high, choice, |m| {
        let newest = i64::try_from(m.newest_record_ms).ok().filter(|ms| *ms > 0);
        m.changelog_offset >= quiet_from || delta_is_exact(true, newest, now, retention_ms)
    });
    tracing::info!(
        task,
        listed,
        usable = candidates.len(),
        ?choice,
        low,
        high,
        "restore: checkpoints discovered"
    );
    if candidates.is_empty() {
        if let Choice::Sequence(sequence) = choice {
            return Err(TaskError::Checkpoint(CheckpointError::Internal(format!(
                "checkpoint {sequence} was asked for but is missing, or its changelog offset is outside the changelog [{low}, {high}], or tombstones after it may be compacted away"
            ))));
        }
        return Ok(None);
    }
    Ok(
        install_first_usable(context, task, store, candidates, choice, progress)?
            .map(|(meta, _)| meta),
    )
}

/// Downloads and installs the first of `candidates` that verifies, falling back to the next
/// one on a bad object or manifest unless `choice` names one sequence. `None`: none was usable.
pub(super) fn install_first_usable(
    context: &WorkerContext,
    task: u32,
    store: &mut RocksStore,
    candidates: Vec<CheckpointManifest>,
    choice: Choice,
    progress: &mut Progress<'_>,
) -> Result<Option<(TaskMetadata, CheckpointManifest)>, TaskError> {
    let Some(service) = context.checkpoints.as_ref() else {
        return Ok(None);
    };
    let runtime = service.runtime().clone();
    let download_dir = context
        .config
        .state
        .dir
        .join(format!("task-{task}"))
        .join("checkpoint-download");
    for manifest in candidates {
        remove_dir(&download_dir)?;
        progress.start_download(manifest.sequence, manifest.total_bytes());
        tracing::info!(
            task,
            sequence = manifest.sequence,
            changelog_offset = manifest.changelog_offset,
            files = manifest.files.len(),
            bytes = manifest.total_bytes(),
            "restore: downloading checkpoint"
        );
        let bytes_done = Arc::new(AtomicU64::new(0));
        let job = {
            let storage = service.storage().clone();
            let manifest = manifest.clone();
            let dir = download_dir.clone();
            let bytes_done = Arc::clone(&bytes_done);
            runtime.spawn(async move { download(&storage, &manifest, &dir, bytes_done).await })
        };
        while !job.is_finished() {
            std::thread::sleep(Duration::from_millis(250));
            progress.download_progress(bytes_done.load(Ordering::Relaxed));
        }
        let downloaded = runtime
            .block_on(job)
            .map_err(|e| CheckpointError::Internal(format!("download task: {e}")))?;
        progress.download_progress(bytes_done.load(Ordering::Relaxed));
        let installed = downloaded.and_then(|()| install(store, &download_dir, &manifest));
        match installed {
            Ok(meta) => {
                tracing::info!(
                    task,
                    sequence = manifest.sequence,
                    changelog_offset = meta.next_changelog_offset,
                    bytes = manifest.total_bytes(),
                    "restore: checkpoint installed"
                );
                return Ok(Some((meta, manifest)));
            }
            Err(
                error @ (CheckpointError::BadObject { .. } | CheckpointError::BadManifest { .. }),
            ) if choice == Choice::Newest => {
                context
                    .metrics
                    .checkpoint_fallbacks
                    .get_or_create(&TaskLabel { task })
                    .inc();
                tracing::warn!(task, sequence = manifest.sequence, %error, "checkpoint unusable; falling back to the previous one");
            }
            Err(error) => {
                remove_dir(&download_dir)?;
                return Err(error.into());
            }
        }
    }
    remove_dir(&download_dir)?;
    tracing::warn!(task, "no usable checkpoint");
    Ok(None)
}

/// Moves the verified download into place and checks it holds what the manifest says.
fn install(
    store: &mut RocksStore,
    dir: &std::path::Path,
    manifest: &CheckpointManifest,
) -> Result<TaskMetadata, CheckpointError> {
    let bad = |reason: String| CheckpointError::BadManifest {
        key: format!("checkpoint {}", manifest.sequence),
        reason,
    };
    match store.install_checkpoint(dir)? {
        OpenOutcome::Valid(meta)
            if meta.task == manifest.task
                && meta.next_changelog_offset == manifest.changelog_offset =>
        {
            Ok(meta)
        }
        other => Err(bad(format!(
            "the installed state ({other:?}) does not match the manifest (changelog offset {})",
            manifest.changelog_offset
        ))),
    }
}

fn remove_dir(dir: &std::path::Path) -> Result<(), CheckpointError> {
    match std::fs::remove_dir_all(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(CheckpointError::io("remove download directory", dir)(e)),
    }
}
