//! Installing a checkpoint: download one with every checksum verified (the Download phase) and
//! move it into place as the task's state. A missing or corrupt object falls back to the next
//! candidate with a warning and `streamkeeper_checkpoint_fallbacks_total`; a checkpoint chosen
//! by sequence (a restore request) never falls back: the task fails with the reason.

use super::progress::Progress;
use crate::checkpoint::download::download;
use crate::checkpoint::{CheckpointError, CheckpointService};
use crate::metrics::TaskLabel;
use crate::store::{OpenOutcome, RocksStore, TaskMetadata};
use crate::task::{TaskError, WorkerContext, stop};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use streamkeeper_contract::CheckpointManifest;
use streamkeeper_contract::checkpoint_choice::Choice;

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
        let downloaded = download_reporting(context, service, &manifest, &download_dir, progress)?;
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

/// Downloads `manifest`'s files into `dir`, publishing the bytes received as they arrive. The
/// outer error is the download task's own failure or a stop (the partial directory is removed
/// by the next attempt, before anything is installed); the inner one what the download found.
fn download_reporting(
    context: &WorkerContext,
    service: &CheckpointService,
    manifest: &CheckpointManifest,
    dir: &Path,
    progress: &mut Progress<'_>,
) -> Result<Result<(), CheckpointError>, TaskError> {
    let bytes_done = Arc::new(AtomicU64::new(0));
    let job = {
        let storage = service.storage().clone();
        let manifest = manifest.clone();
        let dir = dir.to_path_buf();
        let bytes_done = Arc::clone(&bytes_done);
        async move { download(&storage, &manifest, &dir, bytes_done).await }
    };
    let during = format!("downloading checkpoint {}", manifest.sequence);
    let downloaded = stop::on_runtime(context, service.runtime(), &during, job, || {
        progress.download_progress(bytes_done.load(Ordering::Relaxed));
    })?;
    progress.download_progress(bytes_done.load(Ordering::Relaxed));
    Ok(downloaded)
}

/// Moves the verified download into place and checks it holds what the manifest says.
fn install(
    store: &mut RocksStore,
    dir: &Path,
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

fn remove_dir(dir: &Path) -> Result<(), CheckpointError> {
    match std::fs::remove_dir_all(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(CheckpointError::io("remove download directory", dir)(e)),
    }
}
